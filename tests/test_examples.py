"""The Keras example runs end to end (offline digits, tiny size)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_keras_digits_example_runs():
  proc = subprocess.run(
      [sys.executable, 'examples/keras_digits.py', '--epochs', '3',
       '--hidden', '16', '--verbose', '0'], cwd=ROOT, capture_output=True,
      text=True, timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  assert proc.returncode == 0, proc.stderr[-3000:]
  rows = [l for l in proc.stdout.splitlines() if l.startswith('| ')]
  assert len(rows) == 3 and 'pSGLD-corrected ensemble' in rows[1]
