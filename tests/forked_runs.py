"""Training runs of `tests.keras_resume_run` in processes forked from a server that imported TensorFlow once.

The server imports TensorFlow and the run's module (no TensorFlow ops run
there before the fork), so a run costs its own start-up, not a
TensorFlow import: the kill soak can afford tens of kills in CI.
"""

import json
import multiprocessing
import os
import signal

import numpy as np

from tests import keras_resume_run

_PROCESSES = multiprocessing.get_context('forkserver')
_PROCESSES.set_forkserver_preload(['tests.keras_resume_run'])


def _child(directory, epochs, sleep, seed, chains, conn):
  np.random.seed()  # As a new process: its own draws of NumPy's global RNG.
  keras_resume_run.main(directory, epochs, sleep, say=conn.send, seed=seed,
                        chains=chains)


class Run(object):
  """A training process and the pipe it reports on."""

  def __init__(self, directory, epochs, sleep=0., seed=keras_resume_run.FIXED,
               chains=None):
    self.conn, theirs = _PROCESSES.Pipe(duplex=False)
    self.process = _PROCESSES.Process(
        target=_child, args=(directory, epochs, sleep, seed, chains, theirs))
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


def finish(run, timeout=600):
  """The run's JSON result, once it has ended (it must end cleanly).

  `timeout`: seconds the run may go without a line (an uninterrupted run
  reports only when it ends, so its whole length).
  """
  lines = []
  while True:
    try:
      lines.append(run.readline(timeout=timeout))
    except EOFError:  # The process ended and closed its end.
      break
  run.process.join(60)
  assert run.process.exitcode == 0, (run.process.exitcode, lines)
  return json.loads(lines[-1])
