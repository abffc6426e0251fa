"""Shampoo's inverse roots by the coupled Newton iteration (`roots='newton'`)."""

import numpy as np
import pytest
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive import core
from tfp_adaptive.core import roots


def _spd(rng, batch, n, kappa):
  q, _ = np.linalg.qr(rng.normal(size=(batch, n, n)))
  lam = np.exp(rng.uniform(0., np.log(kappa), size=(batch, n)))
  lam[:, 0], lam[:, 1] = 1., kappa  # The full condition number.
  return (np.einsum('bij,bj,bkj->bik', q, lam, q),
          lambda p: np.einsum('bij,bj,bkj->bik', q, lam ** (-1. / p), q))


@pytest.mark.parametrize('p', [2, 4, 8, 16])
@pytest.mark.parametrize('kappa', [1e2, 1e8])
def test_inverse_root_matches_the_eigendecomposition(p, kappa):
  a, want = _spd(np.random.default_rng(p), 3, 40, kappa)
  fn = tf.function(lambda a: roots.inverse_root(a, p), jit_compile=True,
                   autograph=False)
  got, residual = fn(tf.constant(a))
  # Float64 rounding, amplified at most by the condition number.
  bound = max(1e-12, 100. * kappa * np.finfo(np.float64).eps)
  err = np.max(np.abs(got.numpy() - want(p))) / np.max(np.abs(want(p)))
  assert err < bound, err
  assert residual.numpy() < 1e-10
  np.testing.assert_array_equal(got.numpy(), np.swapaxes(got.numpy(), 1, 2))


@pytest.mark.parametrize('block_size', [None, 4])
def test_newton_roots_give_the_eigh_metric(block_size):
  rng = np.random.RandomState(0)
  shape = [2, 6, 8]     # Two chains of a 6x8 matrix.
  grads_seq = [[tf.constant(rng.randn(*shape)), tf.constant(rng.randn(2, 5))]
               for _ in range(4)]
  vectors = [tf.constant(rng.randn(*shape)), tf.constant(rng.randn(2, 5))]
  out = {}
  for method in core.shampoo.ROOT_METHODS:
    pre = core.shampoo.Shampoo(0.7, 1e-4, 2, block_size=block_size,
                               roots=method)
    state = pre.init([tf.zeros(shape, tf.float64),
                      tf.zeros([2, 5], tf.float64)], 1)
    for t, grads in enumerate(grads_seq):
      state = pre.update(state, grads, tf.constant(t), 1)
    out[method] = [x.numpy() for x in pre.apply(state, vectors, 1) +
                   pre.apply_sqrt(state, vectors, 1)]
  for got, want in zip(out['newton'], out['eigh']):
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_newton_roots_refuse_gamma():
  for gamma in ('original', 'corrected'):
    with pytest.raises(ValueError, match='roots'):
      tfa.mcmc.ShampooSGRLD(lambda x: -x ** 2, 1e-3, 0.9995, roots='newton',
                            gamma=gamma)
    with pytest.raises(ValueError, match='roots'):
      tfa.keras.optimizers.ShampooSGRLD(1e-3, roots='newton', gamma=gamma)
  with pytest.raises(ValueError, match='roots'):
    tfa.keras.optimizers.ShampooSGRLD(1e-3, roots='qr')


@pytest.mark.slow
def test_keras_fit_with_newton_roots_under_xla():
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(10),
                            keras.layers.Dense(3, activation='softmax')])
  opt = tfa.keras.optimizers.ShampooSGRLD(
      1e-4, data_size=40, gamma='none', block_size=4, update_interval=3,
      roots='newton', seed=1)
  model.compile(opt, 'sparse_categorical_crossentropy', jit_compile=True)
  rng = np.random.RandomState(0)
  x, y = rng.randn(40, 12).astype('float32'), rng.randint(0, 3, 40)
  before = [w.numpy() for w in model.trainable_weights]
  model.fit(x, y, batch_size=20, epochs=3, verbose=0)
  after = [w.numpy() for w in model.trainable_weights]
  assert all(np.all(np.isfinite(a)) for a in after)
  assert not np.allclose(before[0], after[0])
  assert opt.get_config()['roots'] == 'newton'


@pytest.mark.slow
def test_keras_roots_change_on_refresh_steps_only_and_not_on_a_rejected_one():
  """In `fit`, the roots are written back only on the steps that refresh
  them; there they are the roots of the factors, and a rejected
  (non-finite) refresh step leaves the whole state as it was."""
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
  opt = tfa.keras.optimizers.ShampooSGRLD(
      1e-4, data_size=8, gamma='none', update_interval=2, seed=0)
  model.compile(opt, 'mse')
  rng = np.random.RandomState(0)
  x, y = rng.randn(8, 4).astype('float32'), rng.randn(8, 3).astype('float32')
  pre = opt.preconditioner

  def snapshot():
    return [[m._asdict() for m in modes] for modes in tf.nest.map_structure(
        lambda t: t.numpy(), opt.sampler_state()[0])]
  states = []
  for _ in range(4):
    model.train_on_batch(x, y)
    states.append(snapshot())
  for step in range(1, 4):
    for new, old in zip(states[step], states[step - 1]):
      for m_new, m_old in zip(new, old):
        assert not np.allclose(m_new['factor'], m_old['factor'])
        same = np.array_equal(m_new['root'], m_old['root'])
        assert same == (step % 2 == 1), step
  # At a refresh step the roots are those of the factors.
  parts = [tf.convert_to_tensor(v) for v in model.trainable_variables]
  factors = [[tf.constant(m['factor']) for m in modes] for modes in states[2]]
  for modes, fs, p in zip(states[2], factors, parts):
    for m, expected in zip(modes, pre._mode_states(fs, p, 0)):  # pylint: disable=protected-access
      np.testing.assert_allclose(m['root'], expected.root.numpy(), rtol=1e-5)
  before = snapshot()
  model.train_on_batch(x * np.nan, y)  # Step 4 refreshes, and is rejected.
  assert int(opt.num_nonfinite) == 1
  for modes, old in zip(snapshot(), before):
    for m, m_old in zip(modes, old):
      for key in m:
        np.testing.assert_array_equal(m[key], m_old[key])
