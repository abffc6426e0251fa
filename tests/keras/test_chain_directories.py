"""The per-chain directories of a run of several chains (`tfp_adaptive.keras.chain_views`) against a second writer, damage and ``overwrite``.

The SIGKILL soak with chains (`test_keras_resume.py`) kills such a run at
random moments; here: a second run that tries to write a chain's
directory while the run holds it, a chain manifest damaged on disk, and a
fresh run over an old one.
"""

import json
import os

import numpy as np
import pytest
import keras

import tfp_adaptive as tfa
from tfp_adaptive.keras import chain_views
from tfp_adaptive.keras import sample_files
from tfp_adaptive.keras import sample_store


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 4)).astype('float32')
  return x, (x[:, 0] > 0).astype('int32')


def _chains(k=2):
  keras.utils.set_random_seed(0)
  model = tfa.keras.Chains(keras.Sequential([
      keras.Input((4,)), keras.layers.Dense(2)]), chains=k)
  model.compile(tfa.keras.optimizers.SGLD(1e-3, data_size=64, seed=1),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


def _run(d, epochs=4, k=2, callbacks=(), **kwargs):
  x, y = _data()
  collector = tfa.keras.SampleCollector(burnin=1, unit='epoch', directory=d,
                                        monitor=False, **kwargs)
  model = _chains(k)
  if kwargs.get('resume'):
    initial = collector.restore(model)
  else:
    initial = 0
  model.fit(x, y, batch_size=16, epochs=epochs, verbose=0,
            initial_epoch=initial, callbacks=[collector] + list(callbacks))
  return collector


class _TryTheChainDirectory(keras.callbacks.Callback):
  """During the run, a second writer tries to take chain 0's directory."""

  def __init__(self, d):
    super().__init__()
    self.d, self.refusal = d, None

  def on_epoch_end(self, epoch, logs=None):
    if epoch != 2:
      return
    store = sample_store.SampleStore(os.path.join(self.d, 'chain_0'))
    try:
      store.acquire()
    except sample_files.SampleFileError as e:
      self.refusal = str(e)
    else:
      store.release()


@pytest.mark.slow
def test_a_second_writer_of_a_chain_directory_is_refused_while_the_run_writes(
    tmp_path):
  d = str(tmp_path / 'run')
  probe = _TryTheChainDirectory(d)
  _run(d, callbacks=[probe])
  assert probe.refusal and 'in use by another run' in probe.refusal
  # Once the run has ended, the chain's directory is free and whole.
  alone = tfa.keras.BayesianEnsemble.load(os.path.join(d, 'chain_0'))
  assert alone.chains == [0] and len(alone) == 3


@pytest.mark.slow
def test_a_damaged_chain_manifest_is_named_and_the_resumed_run_rewrites_it(
    tmp_path):
  d = str(tmp_path / 'run')
  _run(d)
  view = os.path.join(d, 'chain_1')
  with open(os.path.join(view, sample_store.MANIFEST), 'w') as f:
    f.write('{"format": "tfp_adaptive.samples/1", "samp')  # Cut short.
  with pytest.raises(sample_files.SampleFileError, match='chain_1.*damaged'):
    tfa.keras.BayesianEnsemble.load(view)
  assert tfa.keras.BayesianEnsemble.load(d).chains == [0, 1]  # The truth.
  _run(d, epochs=6, resume=True)
  alone = tfa.keras.BayesianEnsemble.load(view)
  with open(os.path.join(d, sample_store.MANIFEST)) as f:
    members = json.load(f)['members']
  assert sorted(os.path.basename(m.path) for m in alone.members) == sorted(
      n for n in members if n.endswith('_chain001.npz'))


@pytest.mark.slow
def test_overwrite_empties_the_chain_directories_of_the_old_run(tmp_path):
  d = str(tmp_path / 'run')
  _run(d, k=3)
  old = set(os.listdir(chain_views.view_directory(d, 2, 3)))
  assert any(n.startswith('sample_') for n in old)
  _run(d, epochs=2, k=2, overwrite=True)
  # The old run's third chain is gone; the user's own file would stay.
  assert not [n for n in os.listdir(os.path.join(d, 'chain_2'))
              if not n.startswith('.')]
  assert tfa.keras.BayesianEnsemble.load(d).chains == [0, 1]
  assert len(tfa.keras.BayesianEnsemble.load(os.path.join(d, 'chain_1'))) == 1


@pytest.mark.slow
def test_without_hard_links_a_chain_directory_holds_whole_copies(
    tmp_path, monkeypatch):
  def no_links(source, target):
    raise OSError('hard links not supported here')
  monkeypatch.setattr(os, 'link', no_links)
  d = str(tmp_path / 'run')
  _run(d)
  top = tfa.keras.BayesianEnsemble.load(d)
  for k in range(2):
    view = os.path.join(d, 'chain_%d' % k)
    names = [n for n in os.listdir(view) if n.startswith('sample_')]
    assert names and not any(
        os.path.samefile(os.path.join(view, n), os.path.join(d, n))
        for n in names)
    alone = tfa.keras.BayesianEnsemble.load(view)
    mine = [m.chain == k for m in top.members]
    x, _ = _data()
    np.testing.assert_allclose(alone.predict(x),
                               top.predict_members(x)[mine].mean(0),
                               rtol=1e-6, atol=1e-7)
