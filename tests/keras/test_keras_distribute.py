"""tf.distribute.MirroredStrategy on 2 logical CPUs: replicas agree, and a
Γ-free run equals the single-device run with the same seed and data.

The replicas draw identical noise and apply identical updates; their
weights agree to float rounding, not bitwise (after 12 steps the copies
differ by up to ~3e-8 for SGLD and for PSGLD with ``diagonal_bias=1e-3``,
by 0 with 1e-8), so the bound is 1e-6, far below the 1e-2 by which a
different seed moves them."""

import json
import socket
import os
import subprocess
import sys

import numpy as np
import pytest

import tfp_adaptive as tfa
from tests import keras_multiworker_run
from tests.conftest import ROOT



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
  # The noise does matter: another seed gives another chain.
  assert result['PSGLD-corrected']['other_seed_gap'] > 1e-2
  for name in ('PSGLD', 'MongeSGRLD'):        # Γ-free: same chain.
    assert result[name]['vs_single'] < 1e-5, name
  # With Γ as published, each replica's Γ sees its half batch: close, not
  # equal. The default splits each replica's rows into the drift's and the
  # metric's halves, other rows than one device's halves: a chain of its
  # own, whose replicas agree (the metric from the halves' gradients summed
  # over replicas).
  assert result['PSGLD-published']['vs_single'] < 1e-2


def _free_port():
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def _launch(out, tf_config=None):
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  env.pop('TF_CONFIG', None)
  if tf_config is not None:
    env['TF_CONFIG'] = json.dumps(tf_config)
  return subprocess.Popen(
      [sys.executable, '-m', 'tests.keras_multiworker_run', str(out)],
      cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
      text=True)


@pytest.mark.slow
def test_multi_worker_strategy_matches_single_process(tmp_path, monkeypatch):
  """Two worker processes (TF_CONFIG on localhost) hold one chain, equal to one process's.

  Both workers get the same sample directory; only the chief writes it.
  """
  cluster = {'worker': ['localhost:%d' % _free_port() for _ in range(2)]}
  procs = [_launch(tmp_path, {'cluster': cluster,
                              'task': {'type': 'worker', 'index': i}})
           for i in range(2)]
  monkeypatch.delenv('TF_CONFIG', raising=False)
  try:
    keras_multiworker_run.main(str(tmp_path))  # The reference, meanwhile.
  except BaseException:
    for p in procs:
      p.kill()
    raise
  for p in procs:
    try:
      _, err = p.communicate(timeout=600)
    finally:
      p.kill()
    assert p.returncode == 0, err[-3000:]
  info = {n: json.loads((tmp_path / (n + '.json')).read_text())
          for n in ('worker0', 'worker1', 'single')}
  weights = {n: np.load(tmp_path / (n + '.npz')) for n in info}
  assert info['worker0']['chief'] and not info['worker1']['chief']
  assert info['worker0']['replicas'] == 2
  # NumPy was seeded per task; the workers took the chief's seed.
  assert info['worker1']['seed'] == info['worker0']['seed'] == info[
      'single']['seed']
  w0, w1, single = (weights[n] for n in ('worker0', 'worker1', 'single'))
  half = len(w0.files) // 2
  for k, name in enumerate(w0.files):
    # One chain: the workers agree to float rounding (the MirroredStrategy
    # bound above).
    assert np.max(np.abs(w0[name] - w1[name])) < 1e-6, name
    gap = np.max(np.abs(w0[name] - single[name]))
    assert gap < (1e-5 if k < half else 1e-2), name  # Γ: half batches.
  # Only the chief wrote, and it kept what the single process kept.
  assert info['worker0']['members_on_disk'] == info['single'][
      'members_on_disk'] > 0
  assert info['worker1']['members_on_disk'] is None
  ours = tfa.keras.BayesianEnsemble.load(tmp_path / 'samples')
  ref = tfa.keras.BayesianEnsemble.load(tmp_path / 'single_samples')
  assert len(ours.members) == len(ref.members)
  for a, b in zip(ours.members, ref.members):
    assert a.step == b.step
  x = np.random.default_rng(1).normal(size=(8, 4)).astype('float32')
  np.testing.assert_allclose(ours.predict(x)[0], ref.predict(x)[0],
                             atol=1e-5)


def test_enable_multi_worker_refuses_what_it_cannot_fix():
  import keras  # pylint: disable=g-import-not-at-top
  with pytest.raises(TypeError, match='model'):
    tfa.keras.distribute.enable_multi_worker('model')
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
  with pytest.raises(ValueError, match='MultiWorkerMirroredStrategy'):
    tfa.keras.distribute.enable_multi_worker(model)
  assert tfa.keras.distribute.is_chief()
  assert not tfa.keras.distribute.is_multi_worker()
