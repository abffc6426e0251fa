"""Sample directories against the adversary: two writers, reused directories, strangers' files, tampering, other models."""

import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest
import keras

import tfp_adaptive as tfa
from tfp_adaptive.keras import sample_store
from tests.conftest import no_warning
from tests.conftest import ROOT

Error = tfa.keras.SampleFileError


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(60, 3)).astype('float32')
  return x, (x[:, :1] > 0).astype('int64')[:, 0]


def _model(hidden=6, seed=0):
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((3,)),
                            keras.layers.Dense(hidden, activation='tanh'),
                            keras.layers.Dense(2)])
  model.compile(tfa.keras.optimizers.SGLD(1e-4, data_size=60, seed=0),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def _fit(directory, model=None, epochs=2, **kwargs):
  model = model or _model()
  collector = tfa.keras.SampleCollector(thinning=2, directory=directory,
                                        **kwargs)
  epoch = collector.restore(model) if kwargs.get('resume') else 0
  x, y = _data()
  model.fit(x, y, batch_size=10, epochs=epochs, initial_epoch=epoch,
            verbose=0, callbacks=[collector])
  return collector


def test_manifest_lists_every_member_with_its_checksum(tmp_path):
  d = str(tmp_path)
  collector = _fit(d)
  manifest = sample_store.SampleStore(d).read_manifest()
  assert [e['step'] for e in manifest['samples']] == list(range(2, 13, 2))
  ens = tfa.keras.BayesianEnsemble.load(d)
  assert [m.step for m in ens.members] == [m.step for m in collector.members]
  x, y = _data()
  assert ens.evaluate(x, y) == collector.ensemble.evaluate(x, y)


@pytest.mark.slow
def test_a_second_writer_is_refused_naming_the_owner(tmp_path):
  d = str(tmp_path)
  _fit(d)
  holder = subprocess.Popen(
      [sys.executable, '-c', 'import sys, time\n'
       'from tfp_adaptive.keras import sample_store\n'
       's = sample_store.SampleStore(sys.argv[1]); s.acquire(); s.claim()\n'
       'print("held", flush=True); time.sleep(60)', d],
      cwd=ROOT, stdout=subprocess.PIPE, text=True)
  try:
    assert holder.stdout.readline().strip() == 'held'
    with pytest.raises(Error, match='in use by another run.*pid %d'
                       % holder.pid):
      _fit(d, resume=True)
  finally:
    holder.kill()
    holder.wait()
  _fit(d, resume=True, epochs=3)  # The OS released the dead owner's lock.


@pytest.mark.slow
def test_a_fresh_run_over_a_used_directory_refuses(tmp_path):
  d = str(tmp_path)
  _fit(d)
  before = sorted(os.listdir(d))
  with pytest.raises(ValueError, match='resume=True.*overwrite=True'):
    _fit(d)
  assert sorted(os.listdir(d)) == before
  with pytest.raises(ValueError, match='restore'):
    _fit_without_restore = tfa.keras.SampleCollector(directory=d, resume=True)
    x, y = _data()
    _model().fit(x, y, verbose=0, callbacks=[_fit_without_restore])
  collector = _fit(d, overwrite=True, epochs=1)
  assert [m.step for m in collector.members] == [2, 4, 6]


def test_resuming_with_another_model_or_optimizer_is_refused(tmp_path):
  d = str(tmp_path)
  _fit(d)
  with pytest.raises(ValueError, match='another model.*variable 0'):
    _fit(d, model=_model(hidden=7), resume=True)
  other = _model()
  other.compile(tfa.keras.optimizers.SGLD(1e-4, data_size=60, seed=5),
                other.loss)
  with pytest.raises(ValueError, match='seed: 0 there, 5 here'):
    _fit(d, model=other, resume=True)


def test_files_we_did_not_write_stay_and_are_reported(tmp_path):
  d = str(tmp_path)
  os.makedirs(d, exist_ok=True)
  with open(os.path.join(d, 'notes.txt'), 'w') as f:
    f.write('mine')
  with pytest.warns(UserWarning, match='did not write.*notes.txt'):
    _fit(d)
  assert open(os.path.join(d, 'notes.txt')).read() == 'mine'


def _tamper_manifest(d, edit):
  path = os.path.join(d, sample_store.MANIFEST)
  manifest = json.load(open(path))
  edit(manifest)
  with open(path, 'w') as f:
    json.dump(manifest, f)


def test_tampered_manifest_and_files_are_named(tmp_path):
  d = str(tmp_path)
  _fit(d)
  # A member file altered in place: named, or dropped with repair=True.
  victim = os.path.join(d, 'sample_0000000004.npz')
  original = open(victim, 'rb').read()
  data = bytearray(original)
  data[-100] ^= 1
  open(victim, 'wb').write(bytes(data))
  with pytest.raises(Error, match='sample_0000000004.*SHA-256'):
    tfa.keras.BayesianEnsemble.load(d)
  with pytest.warns(UserWarning, match='dropped 1 damaged'):
    ens = tfa.keras.BayesianEnsemble.load(d, repair=True)
  assert [m.step for m in ens.members] == [2, 6, 8, 10, 12]
  open(victim, 'wb').write(original)
  # A truncated file.
  with open(os.path.join(d, 'sample_0000000006.npz'), 'r+b') as f:
    f.truncate(100)
  with pytest.raises(Error, match='sample_0000000006.*bytes'):
    tfa.keras.BayesianEnsemble.load(d)
  os.remove(os.path.join(d, 'sample_0000000006.npz'))
  with pytest.raises(Error, match='sample_0000000006.*missing'):
    tfa.keras.BayesianEnsemble.load(d)
  # A member listed twice, a member without an entry, a missing file.
  _tamper_manifest(d, lambda m: m['members'].append(m['members'][0]))
  with pytest.raises(Error, match='twice'):
    tfa.keras.BayesianEnsemble.load(d)
  _tamper_manifest(d, lambda m: m.update(members=m['members'][:-1],
                                         samples=m['samples'][1:]))
  with pytest.raises(Error, match='no sample entry'):
    tfa.keras.BayesianEnsemble.load(d)
  with open(os.path.join(d, sample_store.MANIFEST), 'w') as f:
    f.write('{"format": "tfp_adaptive.sam')
  with pytest.raises(Error, match='damaged'):
    tfa.keras.BayesianEnsemble.load(d)


def test_an_edited_manifest_that_lists_nothing_deletes_nothing_of_others(
    tmp_path):
  d = str(tmp_path)
  _fit(d)
  with open(os.path.join(d, 'results.csv'), 'w') as f:
    f.write('x')
  _tamper_manifest(d, lambda m: m.update(members=[], samples=[]))
  with pytest.raises(Error, match='does not list sample_'):
    _fit(d, resume=True, epochs=3)
  assert os.path.exists(os.path.join(d, 'results.csv'))
  assert len([n for n in os.listdir(d) if n.startswith('sample_')]) == 6


def test_tampered_checkpoint_is_named(tmp_path):
  d = str(tmp_path)
  _fit(d)
  manifest = sample_store.SampleStore(d).read_manifest()
  path = os.path.join(d, manifest['checkpoint']['file'])
  data = bytearray(open(path, 'rb').read())
  data[len(data) // 2] ^= 0xff
  open(path, 'wb').write(bytes(data))
  with pytest.raises(Error, match='checkpoint_.*SHA-256'):
    _fit(d, resume=True, epochs=3)


def test_names_drift_but_structure_matches(tmp_path):
  d = str(tmp_path)
  _fit(d)
  for _ in range(3):
    _model()  # Keras numbers the next model's layers dense_7, ...
  x, y = _data()
  drifted = _model()
  assert drifted.weights[0].path != 'sequential/dense/kernel'
  a = tfa.keras.BayesianEnsemble.load(d, model=drifted).evaluate(x, y)
  assert a == tfa.keras.BayesianEnsemble.load(d).evaluate(x, y)
  with pytest.raises(ValueError, match=r'\(3, 7\).*\(3, 6\)'):
    tfa.keras.BayesianEnsemble.load(d, model=_model(hidden=7))


@pytest.mark.slow
def test_chains_side_by_side(tmp_path):
  from tests import forked_runs  # pylint: disable=g-import-not-at-top
  children = [forked_runs.Run(str(tmp_path / ('chain_%d' % k)), 4)
              for k in range(2)]
  for child in children:
    forked_runs.finish(child)
  ens = tfa.keras.BayesianEnsemble.load(str(tmp_path))
  assert ens.chains == [0, 1]
  assert len(ens) == 8
  assert [m.chain for m in ens.members] == [0] * 4 + [1] * 4
  import arviz as az  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.normal(size=(30, 4)).astype('float32')
  idata = ens.to_arviz(x, x[:, :1] - x[:, 1:2], weights=False)
  assert idata.log_likelihood['y'].shape == (2, 4, 30)
  rhat = az.rhat(idata.log_likelihood)['y'].values  # Do the chains agree?
  assert rhat.shape == (30,) and np.all(np.isfinite(rhat))


@pytest.mark.slow
def test_a_second_fit_with_the_same_collector_continues(tmp_path):
  d = str(tmp_path)
  model = _model()
  collector = tfa.keras.SampleCollector(thinning=2, directory=d)
  x, y = _data()
  model.fit(x, y, batch_size=10, epochs=1, verbose=0, callbacks=[collector])
  model.fit(x, y, batch_size=10, epochs=1, verbose=0, callbacks=[collector])
  assert [m.step for m in collector.members] == list(range(2, 13, 2))
  ens = tfa.keras.BayesianEnsemble.load(d)
  assert [m.step for m in ens.members] == list(range(2, 13, 2))


def _sibling_sample(tmp_path, step):
  """A whole sample file of the same model, written by another run (another seed)."""
  other = str(tmp_path / 'sibling')
  _fit(other, model=_model(seed=3))
  name = sample_store.sample_name(step)
  return os.path.join(other, name), name


@pytest.mark.slow
def test_restore_keeps_a_sample_another_run_wrote(tmp_path):
  d = str(tmp_path / 'run')
  _fit(d, max_samples=2, window='last')  # Keeps steps 10 and 12.
  source, name = _sibling_sample(tmp_path, 6)
  copied = open(source, 'rb').read()
  open(os.path.join(d, name), 'wb').write(copied)
  with pytest.warns(UserWarning, match='our naming pattern that this run '
                    'did not write.*left alone: %s' % name):
    _fit(d, resume=True, epochs=3, max_samples=2, window='last')
  assert open(os.path.join(d, name), 'rb').read() == copied
  with pytest.warns(UserWarning, match='not members: %s' % name):
    assert len(tfa.keras.BayesianEnsemble.load(d)) == 2


@pytest.mark.slow
def test_our_own_leftover_is_still_deleted(tmp_path):
  d = str(tmp_path)
  _fit(d)
  store = sample_store.SampleStore(d)
  # What a kill between a file and its manifest leaves: a file of this run
  # that no manifest lists.
  store.write_arrays(sample_store.sample_name(99), [np.zeros(1)],
                     {'names': ['x'], 'step': 99})
  with no_warning('sample_0000000099'):
    _fit(d, resume=True, epochs=3)
  assert not os.path.exists(os.path.join(d, sample_store.sample_name(99)))


@pytest.mark.slow
@pytest.mark.parametrize('lists', ['both', 'members'])
def test_a_sample_the_manifest_stops_listing_is_named_and_repair_takes_it_in(
    tmp_path, lists):
  d = str(tmp_path)
  collector = _fit(d, max_samples=4, window='last')
  last = sorted(m.step for m in collector.members)[-1]
  name = sample_store.sample_name(last)

  def drop(m):
    m['members'] = [f for f in m['members'] if f != name]
    m['pinned'] = [f for f in m['pinned'] if f != name]
    if lists == 'both':
      m['samples'] = [e for e in m['samples'] if e['file'] != name]
  _tamper_manifest(d, drop)
  with pytest.warns(UserWarning, match='not members: %s' % name):
    ens = tfa.keras.BayesianEnsemble.load(d)
  assert len(ens) == 3
  with pytest.warns(UserWarning, match='took in 1 sample.*%s' % name):
    ens = tfa.keras.BayesianEnsemble.load(d, repair=True)
  assert sorted(m.step for m in ens.members)[-1] == last and len(ens) == 4


@pytest.mark.slow
def test_a_refused_writer_changes_nothing(tmp_path):
  d = str(tmp_path)
  _fit(d)
  before = {n: open(os.path.join(d, n), 'rb').read() for n in os.listdir(d)}
  with pytest.raises(ValueError, match='resume=True'):
    _fit(d)
  with pytest.raises(ValueError, match='another model'):
    _fit(d, model=_model(hidden=7), resume=True)
  after = {n: open(os.path.join(d, n), 'rb').read() for n in os.listdir(d)}
  assert after == before


def test_a_checkpoint_that_lists_no_samples_deletes_none(tmp_path):
  d = str(tmp_path)
  _fit(d)
  store = sample_store.SampleStore(d)
  manifest = store.read_manifest()
  path = store.path(manifest['checkpoint']['file'])
  from tfp_adaptive.keras import sample_files  # pylint: disable=g-import-not-at-top
  arrays, meta = sample_files.read_arrays(path)
  meta['members'] = []
  sample_files.write_arrays(path, arrays, meta)
  _tamper_manifest(d, lambda m: m['checkpoint'].update(
      sample_store.entry_for(path, step=m['checkpoint']['step'],
                             epoch=m['checkpoint']['epoch'])))
  samples = sorted(n for n in os.listdir(d) if n.startswith('sample_'))
  with pytest.raises(Error, match='disagree.*Nothing was deleted'):
    _fit(d, resume=True, epochs=3)
  assert sorted(n for n in os.listdir(d) if n.startswith('sample_')) == samples
  for e in manifest['samples']:
    store.verify(e)


def _poisoned_problem():
  """16 rows in batches of 4: 4 steps an epoch, the last batch holds an inf."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(16, 3)).astype('float32')
  x[12:] = np.inf
  return x, (rng.normal(size=16) > 0).astype('int64')


def _run_epochs(d, epochs, start=0, **kwargs):
  """`fit` into `d` up to `epochs`, resuming from the directory's checkpoint."""
  x, y = _poisoned_problem()
  model = _model()
  collector = tfa.keras.SampleCollector(thinning=4, directory=d, resume=True,
                                        **kwargs)
  epoch = collector.restore(model)
  assert epoch == start
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # The skipped steps, said once each run.
    history = model.fit(x, y, batch_size=4, epochs=epochs,
                        initial_epoch=epoch, shuffle=False, verbose=0,
                        callbacks=[collector])
  return collector, history.history


@pytest.mark.slow
def test_a_sample_due_at_a_skipped_step_survives_a_resume(tmp_path):
  whole, _ = _run_epochs(str(tmp_path / 'whole'), 3)
  _run_epochs(str(tmp_path / 'resumed'), 1)
  resumed, _ = _run_epochs(str(tmp_path / 'resumed'), 3, start=1)
  assert sorted(m.step for m in whole.members) == [5, 9]
  assert sorted(m.step for m in resumed.members) == [5, 9]


@pytest.mark.slow
def test_the_running_validation_ensemble_continues_across_a_resume(tmp_path):
  x, y = _data()
  val = dict(validation_data=(x[:20], y[:20]))
  clean = lambda h: {k: v for k, v in h.items() if k.startswith('val_ens')}
  _, whole = _run_epochs(str(tmp_path / 'whole'), 4, **val)
  _run_epochs(str(tmp_path / 'resumed'), 2, **val)
  _, after = _run_epochs(str(tmp_path / 'resumed'), 4, start=2, **val)
  whole, after = clean(whole), clean(after)
  assert whole and after
  for key in whole:
    np.testing.assert_allclose(after[key], whole[key][-2:], rtol=1e-12)


@pytest.mark.slow
def test_resume_without_a_seed_takes_the_recorded_one(tmp_path):
  d = str(tmp_path)

  def model(seed=None):
    m = _model()
    np.random.seed()  # Another process: another default seed.
    m.compile(tfa.keras.optimizers.SGLD(1e-4, data_size=60, seed=seed),
              m.loss)
    return m
  first = model()
  _fit(d, model=first)
  resumed = model()
  assert resumed.optimizer.seed != first.optimizer.seed
  _fit(d, model=resumed, resume=True, epochs=3)
  assert resumed.optimizer.seed == first.optimizer.seed
  with pytest.raises(ValueError, match='Pass seed=%d' % first.optimizer.seed):
    _fit(d, model=model(seed=first.optimizer.seed + 1), resume=True,
         epochs=4)


def test_a_reader_of_a_live_directory_sees_one_committed_manifest(tmp_path):
  """A run evicting at every sample, and loads between its steps."""
  d = str(tmp_path)
  x, y = _data()
  loads = []

  class _Load(keras.callbacks.Callback):

    def on_train_batch_end(self, batch, logs=None):
      store = sample_store.SampleStore(d)
      manifest = store.read_manifest()
      if manifest is None:
        return
      ensemble = tfa.keras.BayesianEnsemble.load(d)
      loads.append(len(ensemble))
      # Members in memory: the run may delete their files at any time.
      assert all(m.weights is not None for m in ensemble.members)
  collector = tfa.keras.SampleCollector(directory=d, max_samples=2,
                                        window='last')
  _model().fit(x, y, batch_size=10, epochs=2, verbose=0,
               callbacks=[collector, _Load()])
  assert loads and set(loads) <= {1, 2}
