"""Blocked Shampoo (`block_size`) is unblocked Shampoo on every block as its own tensor."""

import numpy as np
import pytest
import tensorflow as tf

from tfp_adaptive import core


def _run(pre, parts, grads_seq, vectors, batch_ndims):
  state = pre.init(parts, batch_ndims)
  for t, grads in enumerate(grads_seq):
    state = pre.update(state, grads, tf.constant(t), batch_ndims)
  return (pre.apply(state, vectors, batch_ndims),
          pre.apply_sqrt(state, vectors, batch_ndims))


def _blocks(x, rows, cols):
  """Blocks of the last two axes, row-major: ``[x[..., i, j]]``."""
  n, m = x.shape[-2], x.shape[-1]
  return [x[..., i:i + rows, j:j + cols]
          for i in range(0, n, rows) for j in range(0, m, cols)]


@pytest.mark.parametrize('batch', [[], [3]])
def test_blocked_metric_equals_shampoo_on_each_block(batch):
  rng = np.random.RandomState(0)
  shape = batch + [6, 8]
  batch_ndims = len(batch)
  grads_seq = [[tf.constant(rng.randn(*shape))] for _ in range(4)]
  vectors = [tf.constant(rng.randn(*shape))]
  parts = [tf.zeros(shape, tf.float64)]
  # block_size=4: the 6-long axis splits into blocks of 3, the 8-long into 4.
  blocked = core.shampoo.Shampoo(0.7, 1e-2, 1, block_size=4)
  assert blocked.block_layout([6, 8]) == [(2, 3), (2, 4)]
  got_m, got_s = _run(blocked, parts, grads_seq, vectors, batch_ndims)

  plain = core.shampoo.Shampoo(0.7, 1e-2, 1)
  want_m, want_s = _run(plain, _blocks(parts[0], 3, 4),
                        [_blocks(g[0], 3, 4) for g in grads_seq],
                        _blocks(vectors[0], 3, 4), batch_ndims)
  for got, want in ((got_m[0], want_m), (got_s[0], want_s)):
    np.testing.assert_allclose(
        np.concatenate([b.numpy() for b in _blocks(got, 3, 4)]),
        np.concatenate([w.numpy() for w in want]), rtol=1e-10, atol=1e-12)
  # The blocks are not the whole: unblocked Shampoo gives another metric.
  whole_m, _ = _run(plain, parts, grads_seq, vectors, batch_ndims)
  assert not np.allclose(whole_m[0].numpy(), got_m[0].numpy())


@pytest.mark.parametrize('batch', [[], [2]])
def test_blocked_noise_has_the_law_of_the_square_root(batch):
  """``apply_sqrt_to_noise`` takes ξ's entries into blocks in memory order
  (no transpose): its output must still be ``N(0, M)``, with ``M`` the
  blocked metric (`apply` on the unit vectors).

  20000 draws; every covariance entry within 5 of its standard errors,
  ``sqrt((M_ii M_jj + M_ij²)/n)``. Putting the blocks of the output back
  without the inverse transpose fails it (by about 50 standard errors).
  """
  rng = np.random.RandomState(1)
  shape, n = batch + [6, 8], 20000
  batch_ndims = len(batch)
  pre = core.shampoo.Shampoo(0.7, 1e-2, 1, block_size=4)
  parts = [tf.zeros(shape, tf.float64)]
  state = pre.init(parts, batch_ndims)
  for t in range(4):
    state = pre.update(state, [tf.constant(rng.randn(*shape))],
                       tf.constant(t), batch_ndims)
  d = 48
  chains = int(np.prod(batch))
  eye = np.eye(d).reshape([d] + [1] * batch_ndims + [6, 8])
  metric = np.stack([pre.apply(state, [tf.constant(np.broadcast_to(
      e, shape))], batch_ndims)[0].numpy().reshape(chains, d) for e in eye],
                    -1)  # [chains, d, d]
  xi = tf.constant(rng.randn(n, *shape))
  out = pre.apply_sqrt_to_noise(state, [xi], batch_ndims + 1)[0].numpy()
  out = out.reshape(n, chains, d)
  for c in range(chains):
    cov = out[:, c].T @ out[:, c] / n
    m = metric[c]
    se = np.sqrt((np.outer(np.diag(m), np.diag(m)) + m ** 2) / n)
    assert np.all(np.abs(cov - m) < 5 * se), np.max(np.abs(cov - m) / se)
    assert np.max(np.abs(m - np.diag(np.diag(m)))) > 10 * np.max(se)


def test_layout_and_factor_sizes():
  pre = core.shampoo.Shampoo(0.9, 1e-6, 10, max_dim=128, block_size=50)
  assert pre.block_layout([784, 400, 10]) == [(16, 49), (8, 50), (1, 10)]
  assert pre.factor_sizes([784, 400]) == [49, 50]
  assert pre.block_layout([101]) == [(101, 1)]  # A prime: diagonal.
  assert pre.factor_sizes([101]) == []
  unblocked = core.shampoo.Shampoo(0.9, 1e-6, 10, max_dim=128)
  assert unblocked.factor_sizes([784, 400, 10]) == [10]


def test_block_size_is_checked():
  with pytest.raises(ValueError, match='block_size'):
    core.algorithms.shampoo(0.9, 1e-6, 1, 1024, block_size=1)
  with pytest.raises(TypeError, match='block_size'):
    core.algorithms.shampoo(0.9, 1e-6, 1, 1024, block_size=2.5)


@pytest.mark.slow
def test_keras_fit_with_blocks_under_xla_and_config_round_trip():
  import keras  # pylint: disable=g-import-not-at-top
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(10),
                            keras.layers.Dense(3, activation='softmax')])
  opt = tfa.keras.optimizers.ShampooSGRLD(1e-4, data_size=40, gamma='none',
                                          block_size=4, seed=1)
  model.compile(opt, 'sparse_categorical_crossentropy', jit_compile=True)
  rng = np.random.RandomState(0)
  x, y = rng.randn(40, 12).astype('float32'), rng.randint(0, 3, 40)
  before = [w.numpy() for w in model.trainable_weights]
  model.fit(x, y, batch_size=20, epochs=2, verbose=0)
  after = [w.numpy() for w in model.trainable_weights]
  assert all(np.all(np.isfinite(a)) for a in after)
  assert not np.allclose(before[0], after[0])
  # The 12x10 kernel: blocks of 4 (12 = 3·4) by 2 (10 = 5·2, 5 > 4).
  assert sorted(opt.algorithm.preconditioner.factor_sizes([12, 10])) == [2, 4]
  config = opt.get_config()
  assert config['block_size'] == 4
  clone = tfa.keras.optimizers.ShampooSGRLD.from_config(config)
  assert clone.get_config() == config


def _roots_and_factors(opt):
  pstate, _ = opt.sampler_state()
  leaves = lambda field: [getattr(m, field).numpy() for modes in pstate
                          for m in modes]
  return leaves('root'), leaves('factor')


@pytest.mark.slow
@pytest.mark.parametrize('jit', [False, True])
def test_fit_writes_the_cached_roots_at_refresh_steps_only(jit):
  """Roots change every `update_interval` steps, and a rejected refresh keeps them.

  `fit` writes the roots back only at refresh steps. The step that would
  refresh them a second time has a NaN target: it is skipped
  (`num_nonfinite`), and factors and roots stay those of the step before.
  """
  import keras  # pylint: disable=g-import-not-at-top
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4),
                            keras.layers.Dense(1)])
  opt = tfa.keras.optimizers.ShampooSGRLD(
      1e-3, data_size=16, gamma='none', epsilon=1e-2, update_interval=3,
      block_size=2, seed=1)
  model.compile(opt, 'mse', jit_compile=jit)
  rng = np.random.RandomState(0)
  x, y = rng.randn(16, 6).astype('float32'), rng.randn(16, 1).astype('float32')
  bad = np.full_like(y, np.nan)
  seen = []
  for step in range(7):  # Refreshes at steps 0, 3 and 6; step 6 is rejected.
    model.train_on_batch(x, bad if step == 6 else y)
    seen.append(_roots_and_factors(opt))
  assert int(opt.num_nonfinite.numpy()) == 1
  changed = lambda a, b: any(not np.array_equal(u, v) for u, v in zip(a, b))
  roots_changed = [changed(seen[k][0], seen[k - 1][0]) for k in range(1, 7)]
  assert roots_changed == [False, False, True, False, False, False]
  assert not changed(seen[6][1], seen[5][1])  # The rejected step's factors.


def test_a_chain_with_non_finite_statistics_keeps_its_roots_at_a_refresh():
  """At a refresh step, each chain's roots are those of its new factors,
  except for a chain whose factors are not finite (its step is rejected):
  it keeps its roots, so a caller may write the roots back whatever the
  step's fate (as `fit` does)."""
  from tfp_adaptive.core import shampoo  # pylint: disable=g-import-not-at-top
  pre = shampoo.Shampoo(0.9, 1e-3, update_interval=2, block_size=2)
  rng = np.random.default_rng(0)
  params = [tf.constant(rng.normal(size=(2, 4, 3)), tf.float32)]
  state = pre.init(params, 1)
  state = pre.update(state, [params[0] * 0.5], tf.constant(0), 1)
  grads = rng.normal(size=(2, 4, 3))
  grads[1, 0, 0] = np.nan
  new = pre.update(state, [tf.constant(grads, tf.float32)], tf.constant(2), 1)
  blocked, nb = pre._to_blocks(params[0], 1)  # pylint: disable=protected-access
  expected = pre._mode_states([m.factor for m in new[0]], blocked, nb)  # pylint: disable=protected-access
  for m_new, m_old, m_exp in zip(new[0], state[0], expected):
    np.testing.assert_allclose(m_new.root[0], m_exp.root[0], rtol=1e-6)
    np.testing.assert_array_equal(m_new.root[1], m_old.root[1])
    assert not np.allclose(m_new.root[0], m_old.root[0])
