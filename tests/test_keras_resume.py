"""A `fit` killed with SIGKILL resumes from its checkpoint: no sample lost or duplicated."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tfp_adaptive.keras import sample_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(directory, epochs, sleep, **kwargs):
  return subprocess.Popen(
      [sys.executable, '-m', 'tests.keras_resume_run', directory, str(epochs),
       str(sleep)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'), **kwargs)


@pytest.mark.slow
def test_sigkill_then_resume(tmp_path):
  d = str(tmp_path / 'run')
  child = _run(d, epochs=6, sleep=0.05)
  deadline = time.time() + 300
  while len(sample_files.list_samples(d)) < 5:
    assert child.poll() is None, child.communicate()
    assert time.time() < deadline, 'child too slow'
    time.sleep(0.02)
  child.send_signal(signal.SIGKILL)
  child.wait()
  killed_at = [s for s, _ in sample_files.list_samples(d)]
  assert 5 <= len(killed_at) and max(killed_at) < 60  # Killed part-way.

  out, err = _run(d, epochs=6, sleep=0.).communicate(timeout=600)
  assert out.strip(), err
  result = json.loads(out.strip().splitlines()[-1])
  steps = [s for s, _ in sample_files.list_samples(d)]
  expected = list(range(7, result['step'] + 1, 3))
  assert steps == expected == result['members']  # None lost, none twice.
  assert result['step'] >= 60                      # Sampling went on.
  for _, path in sample_files.list_samples(d):
    sample_files.read_sample(path)                 # Every file is whole.
  assert not [f for f in os.listdir(d) if f.startswith('.tmp-')]
