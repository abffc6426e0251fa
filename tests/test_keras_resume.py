"""Sample directories under SIGKILL: every restore succeeds, nothing is lost, doubled or changed.

The kill harness runs `tests.keras_resume_run` in a child process and kills it
with SIGKILL at random moments (every third kill the instant a new sample
or checkpoint file appears, i.e. between the file and its manifest, or
during eviction), then resumes. After each kill the committed manifest and every file it
lists must verify. The interrupted run must end with exactly the members,
and bitwise the same member weights and final weights, as an uninterrupted
run (CPU, same seeds, ``shuffle=False``). `TFPA_KILLS` sets the number of
kills (default 30; the slow runs use hundreds).
"""

import json
import multiprocessing
import os
import random
import signal
import time

import numpy as np
import pytest

from tfp_adaptive.keras import sample_files
from tfp_adaptive.keras import sample_store

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


KILLS = int(os.environ.get('TFPA_KILLS', '30'))
EPOCHS = max(300, 10 * KILLS)  # Long enough to outlast the kills.


# Each run is a process forked from a server that has imported TensorFlow
# and the run's module once (no TensorFlow ops run there before the fork),
# so a kill costs the run's own start-up, not a TensorFlow import.
_PROCESSES = multiprocessing.get_context('forkserver')
_PROCESSES.set_forkserver_preload(['tests.keras_resume_run'])


def _child(directory, epochs, sleep, conn):
  from tests import keras_resume_run  # pylint: disable=g-import-not-at-top
  keras_resume_run.main(directory, epochs, sleep, say=conn.send)


class _Run(object):
  """A training process and the pipe it reports on."""

  def __init__(self, directory, epochs, sleep):
    self.conn, theirs = _PROCESSES.Pipe(duplex=False)
    self.process = _PROCESSES.Process(
        target=_child, args=(directory, epochs, sleep, theirs))
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


def _run(directory, epochs=EPOCHS, sleep=0.):
  return _Run(directory, epochs, sleep)


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


def _kill_once(directory, rng, at_new_file):
  child = _run(directory, sleep=0.01)
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


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume(tmp_path):
  reference = _finish(_run(str(tmp_path / 'uninterrupted')))
  d = str(tmp_path / 'killed')
  rng = random.Random(0)
  kills = KILLS
  done = None
  for i in range(kills):
    done = _kill_once(d, rng, at_new_file=(i % 3 == 2))
    _committed(d)  # Every restore point is whole.
    if done:
      break
  assert done is None, 'the run finished after %d kills; lengthen it' % i
  result = _finish(_run(d))
  assert result == reference  # Same final step, same members.
  a, b = _committed(str(tmp_path / 'uninterrupted')), _committed(d)
  assert a['members'] == b['members']
  for name in a['members']:
    x, _ = sample_files.read_arrays(os.path.join(tmp_path, 'uninterrupted',
                                                 name))
    y, _ = sample_files.read_arrays(os.path.join(d, name))
    for u, v in zip(x, y):
      np.testing.assert_array_equal(u, v)
  x, _ = sample_files.read_arrays(
      os.path.join(tmp_path, 'uninterrupted', a['checkpoint']['file']))
  y, _ = sample_files.read_arrays(os.path.join(d, b['checkpoint']['file']))
  for u, v in zip(x, y):
    np.testing.assert_array_equal(u, v)
  assert _samples(d) == sorted(b['members'])  # Nothing left over.
