"""tf.distribute.MirroredStrategy on 2 logical CPUs: replicas never diverge, and
a Γ-free run equals the single-device run with the same seed and data."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_mirrored_strategy_matches_single_device():
  proc = subprocess.run(
      [sys.executable, '-m', 'tests.keras_distribute_run'], cwd=ROOT,
      capture_output=True, text=True, timeout=600,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  for name, r in result.items():
    assert r['replicas'] == 2
    assert r['replica_gap'] == 0., name       # Identical noise everywhere.
    assert r['other_seed_gap'] > 1e-2, name   # The noise does matter.
  for name in ('PSGLD', 'MongeSGRLD'):        # Γ-free: same chain.
    assert result[name]['vs_single'] < 1e-5, name
  # With Γ, each replica's metric sees its half batch: close, not equal.
  assert result['PSGLD-corrected']['vs_single'] < 1e-2
