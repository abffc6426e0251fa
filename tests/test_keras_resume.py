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
kills (default 30, a third of them for the second soak; the slow runs use
hundreds).
"""

import json
import multiprocessing
import os
import random
import signal
import threading
import time
import warnings

import numpy as np
import pytest

import tfp_adaptive as tfa
from tfp_adaptive.keras import sample_files
from tfp_adaptive.keras import sample_store
from tests import keras_resume_run
from tests.keras_resume_run import FIXED

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


KILLS = int(os.environ.get('TFPA_KILLS', '30'))
EPOCHS = max(300, 10 * KILLS)  # Long enough to outlast the kills.


# Each run is a process forked from a server that has imported TensorFlow
# and the run's module once (no TensorFlow ops run there before the fork),
# so a kill costs the run's own start-up, not a TensorFlow import.
_PROCESSES = multiprocessing.get_context('forkserver')
_PROCESSES.set_forkserver_preload(['tests.keras_resume_run'])


def _child(directory, epochs, sleep, seed, conn):
  np.random.seed()  # As a new process: its own draws of NumPy's global RNG.
  from tests import keras_resume_run  # pylint: disable=g-import-not-at-top
  keras_resume_run.main(directory, epochs, sleep, say=conn.send, seed=seed)


class _Run(object):
  """A training process and the pipe it reports on."""

  def __init__(self, directory, epochs, sleep, seed):
    self.conn, theirs = _PROCESSES.Pipe(duplex=False)
    self.process = _PROCESSES.Process(
        target=_child, args=(directory, epochs, sleep, seed, theirs))
    self.process.start()
    theirs.close()

  def readline(self, timeout=300):
    assert self.conn.poll(timeout), 'the run said nothing for %d s' % timeout
    return self.conn.recv()

  def poll(self):
    return self.process.exitcode

  def kill(self):
    os.kill(self.process.pid, signal.SIGKILL)
    self.process.join()


def _run(directory, epochs=EPOCHS, sleep=0., seed=FIXED):
  return _Run(directory, epochs, sleep, seed)


def _finish(child):
  lines = []
  while True:
    try:
      lines.append(child.readline(timeout=600))
    except EOFError:  # The process ended and closed its end.
      break
  child.process.join(60)
  assert child.process.exitcode == 0, (child.process.exitcode, lines)
  return json.loads(lines[-1])


def _committed(directory):
  """The manifest, after verifying every file it lists."""
  store = sample_store.SampleStore(directory)
  manifest = store.read_manifest()
  if manifest is not None:
    for entry in manifest['samples'] + [manifest['checkpoint']]:
      store.verify(entry)
  return manifest


def _samples(directory):
  return sorted(n for n in os.listdir(directory) if n.startswith('sample_'))


def _data_files(directory):
  """Sample and checkpoint files: one of them appears at least every epoch."""
  return {n for n in os.listdir(directory)
          if n.startswith(('sample_', 'checkpoint_'))}


def _kill_once(directory, rng, at_new_file, seed):
  child = _run(directory, sleep=0.01, seed=seed)
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

  def __init__(self, directory, seed):
    super().__init__(daemon=True)
    self.directory, self.model = directory, keras_resume_run.build(seed)[2]
    self.loads, self.failures, self.stop = 0, [], threading.Event()

  def run(self):
    while not self.stop.is_set():
      try:
        with warnings.catch_warnings():
          warnings.simplefilter('ignore')  # Leftovers of a killed run.
          ensemble = tfa.keras.BayesianEnsemble.load(self.directory,
                                                     model=self.model)
        assert 1 <= len(ensemble) <= 4, len(ensemble)
        self.loads += 1
      except sample_files.SampleFileError as e:
        if not any(early in str(e) for early in (
            'holds no manifest', 'no intact', 'not a directory')):
          self.failures.append(repr(e))
      except Exception as e:  # pylint: disable=broad-except
        self.failures.append(repr(e))
      time.sleep(0.005)


def _same_files(a, b, names):
  for name in names:
    x, _ = sample_files.read_arrays(os.path.join(a, name))
    y, _ = sample_files.read_arrays(os.path.join(b, name))
    for u, v in zip(x, y):
      np.testing.assert_array_equal(u, v)


def _soak(tmp_path, kills, seed=FIXED, reader=False):
  """Kills a run `kills` times, resumes it by the guide's recipe, compares it with one uninterrupted run."""
  d = str(tmp_path / 'killed')
  rng = random.Random(0)
  watcher = _Reader(d, seed) if reader else None
  if watcher:
    watcher.start()
  done, i = None, 0
  try:
    for i in range(kills):
      done = _kill_once(d, rng, at_new_file=(i % 3 == 2), seed=seed)
      _committed(d)  # Every restore point is whole.
      if done:
        break
  finally:
    if watcher:
      watcher.stop.set()
      watcher.join(60)
  assert done is None, 'the run finished after %d kills; lengthen it' % i
  result = _finish(_run(d, seed=seed))
  # Without a seed every process draws its own; the resumed ones took the
  # recorded one, which an uninterrupted run gets here explicitly.
  ref_dir = str(tmp_path / 'uninterrupted')
  reference = _finish(_run(ref_dir, seed=seed if seed == FIXED
                           else result['seed']))
  assert result == reference  # Same final step, members and seed.
  a, b = _committed(ref_dir), _committed(d)
  assert a['members'] == b['members']
  _same_files(ref_dir, d, a['members'])
  _same_files(ref_dir, d, [a['checkpoint']['file']])
  assert _samples(d) == sorted(b['members'])  # Nothing left over.
  assert not [n for n in os.listdir(d) if n.startswith('.tmp-')]
  if watcher:
    assert watcher.loads > 0 and not watcher.failures, (watcher.loads,
                                                        watcher.failures)


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume(tmp_path):
  _soak(tmp_path, KILLS)


@pytest.mark.slow
def test_sigkill_without_seeds_with_a_reader_loading_throughout(tmp_path):
  """The guide's recipe with no seed anywhere: each resume takes the recorded seed."""
  _soak(tmp_path, max(KILLS // 3, 5), seed=None, reader=True)
