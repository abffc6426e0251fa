"""Sample directories under SIGKILL: every restore succeeds, nothing is lost, doubled or changed.

The kill harness runs `tests.keras_resume_run` in a child process and kills it
with SIGKILL at random moments (every third kill the instant a new sample
or checkpoint file appears, i.e. between the file and its manifest, or
during eviction), then resumes. After each kill the committed manifest and
every file it lists must verify. The interrupted run must end with exactly
the members, and bitwise the same member weights and final weights, as an
uninterrupted run (CPU, ``shuffle=False``), with the seeds fixed and with
no seed at all (the resumed runs take the one the run recorded). A second
soak has a reader loading the directory throughout: every load returns
the members of one committed manifest. `TFPA_KILLS` sets the number of
kills (default 4, a third of them and at least 4 for the second soak:
8 kills in CI; the slow runs use hundreds).
"""

import os
import random
import threading
import time
import warnings

import numpy as np
import pytest

import tfp_adaptive as tfa
from tfp_adaptive.keras import sample_files
from tfp_adaptive.keras import sample_store
from tests import forked_runs
from tests import keras_resume_run
from tests.forked_runs import finish as _finish
from tests.keras_resume_run import FIXED



KILLS = int(os.environ.get('TFPA_KILLS', '4'))


def _epochs(kills):
  """A run long enough to outlast `kills` kills.

  A killed run lives at most 0.4 s after its first step at 0.01 s a batch
  (8 epochs of 5 batches), or until its next file (a checkpoint every
  epoch); 10 epochs a kill leave room for the replayed epochs.
  """
  return 10 * kills + 20


def _committed(directory):
  """The manifest, after verifying every file it lists."""
  store = sample_store.SampleStore(directory)
  manifest = store.read_manifest()
  if manifest is not None:
    for entry in (manifest['samples'] + manifest.get('frozen', []) +
                  [manifest['checkpoint']] if manifest.get('checkpoint')
                  else []):
      store.verify(entry)
  return manifest


def _views(directory, chains):
  """Each chain's directory (`tfp_adaptive.keras.chain_views`): its committed manifest, every file it lists verified."""
  if not chains:
    return []
  return [_committed(os.path.join(directory, 'chain_%d' % k))
          if os.path.isdir(os.path.join(directory, 'chain_%d' % k)) else None
          for k in range(chains)]


def _samples(directory):
  return sorted(n for n in os.listdir(directory) if n.startswith('sample_'))


def _data_files(directory):
  """Sample and checkpoint files: one of them appears at least every epoch."""
  return {n for n in os.listdir(directory)
          if n.startswith(('sample_', 'checkpoint_'))}


def _kill_once(directory, rng, at_new_file, seed, epochs, chains=None):
  child = _run(directory, epochs, sleep=0.01, seed=seed, chains=chains)
  assert child.readline() == 'ready'
  if at_new_file:
    before = _data_files(directory)
    deadline = time.time() + 120
    while _data_files(directory) <= before and child.poll() is None:
      assert time.time() < deadline, 'no new file for 120 s'
  else:
    time.sleep(rng.uniform(0., 0.4))
  if child.poll() is not None:  # It finished first.
    return _finish(child)
  child.kill()
  return None


class _Reader(threading.Thread):
  """Loads the directory over and over while runs write it and are killed."""

  def __init__(self, directory, seed, chains=None):
    super().__init__(daemon=True)
    self.directory = directory
    self.chains = chains
    self.model = tfa.keras.chains.member_model(
        keras_resume_run.build(seed, chains)[2])
    self.loads, self.failures, self.stop = 0, [], threading.Event()

  def run(self):
    # With chains, the run's directory and each chain's in turn.
    places = [self.directory] + [os.path.join(self.directory, 'chain_%d' % k)
                                 for k in range(self.chains or 0)]
    turn = 0
    while not self.stop.is_set():
      turn += 1
      try:
        with warnings.catch_warnings():
          warnings.simplefilter('ignore')  # Leftovers of a killed run.
          ensemble = tfa.keras.BayesianEnsemble.load(
              places[turn % len(places)], model=self.model)
        assert 1 <= len(ensemble) <= 4, len(ensemble)
        self.loads += 1
      except sample_files.SampleFileError as e:
        if not any(early in str(e) for early in (
            'holds no manifest', 'no intact', 'not a directory')):
          self.failures.append(repr(e))
      except Exception as e:  # pylint: disable=broad-except
        self.failures.append(repr(e))
      time.sleep(0.005)


def _run(directory, epochs, sleep=0., seed=FIXED, chains=None):
  return forked_runs.Run(directory, epochs, sleep, seed, chains)


def _check_settled(manifest, settled):
  """A sample committed before its run's checkpoint is never rewritten.

  (Samples after the checkpoint are dropped and taken again on resume;
  those before it stay until evicted, and a new sample is due for each
  eviction.) `settled` maps the names seen so far to their SHA-256.
  """
  if manifest is None or not manifest.get('checkpoint'):
    return
  step = manifest['checkpoint']['step']
  latest = max([e['step'] for e in manifest['samples']] + [0])
  listed = {e['file']: e for e in manifest['samples']}
  for name, (sha, at) in list(settled.items()):
    if name in listed:
      assert listed[name]['sha256'] == sha, 'committed sample %s changed' % name
    else:
      assert latest > at, 'sample %s removed with no newer sample' % name
      del settled[name]
  settled.update({n: (e['sha256'], e['step']) for n, e in listed.items()
                  if e['step'] <= step})


def _same_files(a, b, names):
  for name in names:
    x, _ = sample_files.read_arrays(os.path.join(a, name))
    y, _ = sample_files.read_arrays(os.path.join(b, name))
    for u, v in zip(x, y):
      np.testing.assert_array_equal(u, v)


def _soak(tmp_path, kills, seed=FIXED, reader=False, chains=None):
  """Kills a run `kills` times, resumes it by the guide's recipe, compares it with one uninterrupted run."""
  d = str(tmp_path / 'killed')
  rng = random.Random(0)
  watcher = _Reader(d, seed, chains) if reader else None
  if watcher:
    watcher.start()
  done, i, settled, epochs = None, 0, {}, _epochs(kills)
  try:
    for i in range(kills):
      done = _kill_once(d, rng, at_new_file=(i % 3 == 2), seed=seed,
                        epochs=epochs, chains=chains)
      _check_settled(_committed(d), settled)  # Every restore point is whole.
      _views(d, chains)  # Each chain's directory is whole too.
      if done:
        break
  finally:
    if watcher:
      watcher.stop.set()
      watcher.join(60)
  assert done is None, 'the run finished after %d kills; lengthen it' % i
  result = _finish(_run(d, epochs, seed=seed, chains=chains))
  # Without a seed every process draws its own; the resumed ones took the
  # recorded one, which an uninterrupted run gets here explicitly.
  ref_dir = str(tmp_path / 'uninterrupted')
  # Uninterrupted, it reports only at its end: allow 0.5 s an epoch, slack
  # for a loaded machine (about 0.05 s an epoch on a quiet one).
  reference = _finish(_run(ref_dir, epochs, seed=seed if seed == FIXED
                           else result['seed'], chains=chains),
                      timeout=max(600, epochs / 2))
  assert result == reference  # Same final step, members and seed.
  a, b = _committed(ref_dir), _committed(d)
  assert a['members'] == b['members']
  _same_files(ref_dir, d, a['members'])
  _same_files(ref_dir, d, [a['checkpoint']['file']])
  assert _samples(d) == sorted(b['members'])  # Nothing left over.
  # A frozen first layer is stored once, the same in both runs.
  frozen = sorted(n for n in os.listdir(d) if n.startswith('frozen_'))
  assert frozen == [e['file'] for e in b.get('frozen', [])]
  assert len(frozen) == (0 if seed == FIXED else 1)
  _same_files(ref_dir, d, frozen)
  assert not [n for n in os.listdir(d) if n.startswith('.tmp-')]
  for k, view in enumerate(_views(d, chains)):  # Up to date, nothing left.
    assert view['members'] == [n for n in b['members']
                               if n.endswith('_chain%03d.npz' % k)]
    here = os.path.join(d, 'chain_%d' % k)
    assert _samples(here) == sorted(view['members'])
    assert not [n for n in os.listdir(here) if n.startswith('.tmp-')]
  if watcher:
    assert watcher.loads > 0 and not watcher.failures, (watcher.loads,
                                                        watcher.failures)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume(tmp_path):
  _soak(tmp_path, KILLS)


@pytest.mark.slow
def test_sigkill_without_seeds_with_a_reader_loading_throughout(tmp_path):
  """The guide's recipe with no seed anywhere: each resume takes the recorded seed.

  Its model has a frozen first layer, stored once in the directory.
  """
  _soak(tmp_path, max(KILLS // 2, 2), seed=None, reader=True)


@pytest.mark.slow
def test_sigkill_with_chains_in_one_fit(tmp_path):
  """Two chains in one `fit` (`tfa.keras.Chains`), a reader loading throughout: both chains' files under one manifest survive every kill, as run uninterrupted."""
  _soak(tmp_path, max(KILLS // 2, 2), reader=True, chains=2)
