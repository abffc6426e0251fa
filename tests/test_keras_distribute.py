"""tf.distribute.MirroredStrategy on 2 logical CPUs: replicas agree, and a
Γ-free run equals the single-device run with the same seed and data.

The replicas draw identical noise and apply identical updates; their
weights agree to float rounding, not bitwise (after 12 steps the copies
differ by up to ~3e-8 for SGLD and for PSGLD with ``diagonal_bias=1e-3``,
by 0 with 1e-8), so the bound is 1e-6, far below the 1e-2 by which a
different seed moves them."""

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
    assert r['replica_gap'] < 1e-6, name      # Identical noise everywhere.
    assert r['other_seed_gap'] > 1e-2, name   # The noise does matter.
  for name in ('PSGLD', 'MongeSGRLD'):        # Γ-free: same chain.
    assert result[name]['vs_single'] < 1e-5, name
  # With Γ, each replica's metric sees its half batch: close, not equal.
  assert result['PSGLD-corrected']['vs_single'] < 1e-2
