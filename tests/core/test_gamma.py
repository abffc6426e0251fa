"""Γ by autodiff: Hutchinson ≈ exact (MC error bound), finite differences, TFP's diag_jacobian."""

import numpy as np
import pytest
import tensorflow as tf

from tests import tfp_reference
from tests.conftest import in_ci
from tfp_adaptive import core

K = 4000  # Hutchinson probes, one per replicated chain.

X = np.random.RandomState(0).randn(9, 6)
Y = np.random.RandomState(1).randn(9, 7)


def log_prob(parts, row_weights=1.):
  """A small nonlinear model, D = 6*7 + 7 = 49, batched over leading axis.

  `row_weights` (broadcast against ``[..., 9]``) weight the 9 data rows.
  """
  w, b = parts
  x = tf.constant(X, w.dtype)
  hidden = tf.tanh(tf.einsum('nd,...dk->...nk', x, w) + b[..., tf.newaxis, :])
  resid = hidden - tf.constant(Y, w.dtype)
  rows = tf.reduce_sum(resid ** 2, axis=-1)
  return -0.5 * tf.reduce_sum(row_weights * rows, axis=-1) - 0.05 * (
      tf.reduce_sum(w ** 4, axis=[-2, -1]) + tf.reduce_sum(b ** 2, axis=-1))


def theta(batch, dtype=tf.float64):
  rng = np.random.RandomState(2)
  w, b = rng.randn(6, 7) * 0.7, rng.randn(7) * 0.5
  return [tf.constant(np.broadcast_to(w, batch + [6, 7]), dtype),
          tf.constant(np.broadcast_to(b, batch + [7]), dtype)]


PRECONDITIONERS = {
    'rmsprop': lambda: core.RMSprop(0.9, 0.1),
    'rmsprop_outside': lambda: core.RMSprop(0.9, 0.1, bias_outside_sqrt=True),
    'wenzel': lambda: core.Wenzel(0.9, 0.1, update_interval=1),
    'monge': lambda: core.Monge(0.9, 0.5),
    'shampoo': lambda: core.Shampoo(0.9, 0.1, update_interval=1),
    # w's 6-long axis in blocks of 3; the 7-long axes (prime) diagonal.
    'shampoo_blocks': lambda: core.Shampoo(0.9, 0.1, update_interval=1,
                                           block_size=4),
}


def _warm_state(pre, parts, batch_ndims):
  state = pre.init(parts, batch_ndims)
  # One warm-up update so the statistics are not all zero.
  _, g = core.gamma.value_and_gradient(log_prob, [0.9 * p for p in parts])
  return pre.update(state, g, tf.constant(0), batch_ndims)


def _gamma(pre, parts, estimator, mode='original', seed=(1, 2), gamma_fn=None,
           noise_seed=None):
  batch_ndims = len(parts[1].shape) - 1
  state = _warm_state(pre, parts, batch_ndims)
  if noise_seed is not None:
    noise_seed = tf.constant(noise_seed, tf.int32)
  return core.gradient_and_gamma(log_prob, parts, pre, state, tf.constant(1),
                                 batch_ndims, mode, estimator,
                                 tf.constant(seed, tf.int32), gamma_fn,
                                 noise_seed=noise_seed)[-1]


# CI: a diagonal metric and a blocked matrix one (the probe's path is the
# same for every metric; each metric's exact Γ has its own check against
# finite differences below); every metric at full size.
@pytest.mark.slow
@pytest.mark.parametrize('name', in_ci(sorted(PRECONDITIONERS),
                                       ['rmsprop', 'shampoo_blocks']))
def test_hutchinson_mean_equals_exact(name):
  pre = PRECONDITIONERS[name]()
  exact = _gamma(pre, theta([1]), 'exact')
  probes = tf.function(lambda p: _gamma(pre, p, 'hutchinson'))(theta([K]))
  for ex, hu in zip(exact, probes):
    hu = hu.numpy().reshape(K, -1)
    ex = ex.numpy().reshape(-1)
    se = hu.std(axis=0, ddof=1) / np.sqrt(K)
    # 4.5 standard errors per coordinate: ~1e-5 false alarms over 49 coords.
    np.testing.assert_array_less(np.abs(hu.mean(axis=0) - ex), 4.5 * se + 1e-10)
  assert max(float(tf.reduce_max(tf.abs(e))) for e in exact) > 1e-4


@pytest.mark.slow
@pytest.mark.parametrize('name', ['rmsprop', 'monge'])
def test_probe_from_the_step_noise_is_unbiased_and_uncorrelated_with_it(name):
  """Probe z = sign(ξ), ξ the step's noise: E[Γ̂] = Γ and E[Γ̂ ξᵀ] = 0.

  The second identity is why the coupling leaves the step's mean and
  covariance unchanged (Γ̂ is even in z); it is measured here on every
  (Γ̂_i, ξ_j) pair of the first part, 42 x 42, at 4.5 standard errors.
  """
  pre = PRECONDITIONERS[name]()
  exact = _gamma(pre, theta([1]), 'exact')
  parts = theta([K])
  probes = tf.function(lambda p: _gamma(pre, p, 'hutchinson',
                                        noise_seed=(7, 8)))(parts)
  xi = core.noise.normal(parts, tf.constant((7, 8), tf.int32))
  for ex, hu in zip(exact, probes):
    hu = hu.numpy().reshape(K, -1)
    se = hu.std(axis=0, ddof=1) / np.sqrt(K)
    np.testing.assert_array_less(np.abs(hu.mean(axis=0) - ex.numpy().ravel()),
                                 4.5 * se + 1e-10)
  g, x = probes[0].numpy().reshape(K, -1), xi[0].numpy().reshape(K, -1)
  cross = g[:, :, None] * x[:, None, :]
  se = cross.std(axis=0, ddof=1) / np.sqrt(K)
  assert np.all(se > 1e-8)
  # 1764 pairs: 4.5 SE keeps false alarms near 1%; the bound is not tuned.
  np.testing.assert_array_less(np.abs(cross.mean(axis=0)), 4.5 * se)


def test_probe_is_the_sign_of_the_noise_the_update_draws():
  pre = PRECONDITIONERS['rmsprop']()
  parts = theta([3])
  seed = tf.constant((4, 5), tf.int32)
  state = _warm_state(pre, parts, 1)
  z = core.noise.signs(core.noise.normal(parts, seed))
  assert {float(v) for p in z for v in np.unique(p.numpy())} == {-1., 1.}
  want = core.gamma._metric_jvp(log_prob, parts, pre, state, tf.constant(1), 1,
                                z)[-1]
  got = _gamma(pre, parts, 'hutchinson', seed=(9, 9), noise_seed=(4, 5))
  other = _gamma(pre, parts, 'hutchinson', seed=(9, 9), noise_seed=(4, 6))
  for w, g, o in zip(want, got, other):
    np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12, atol=1e-14)
    assert not np.allclose(o.numpy(), w.numpy())


@pytest.mark.slow
@pytest.mark.parametrize('name', in_ci(['rmsprop', 'shampoo'], ['rmsprop']))
def test_gamma_fn_equal_to_fn_gives_the_same_gamma(name):
  pre = PRECONDITIONERS[name]()
  plain = _gamma(pre, theta([1]), 'exact')
  same = _gamma(pre, theta([1]), 'exact', gamma_fn=log_prob)
  for a, b in zip(plain, same):
    np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['rmsprop', 'monge'])
def test_subsampled_gamma_is_unbiased(name):
  """Γ's second-order pass on a random half of the rows (weight 2): mean = Γ."""
  pre = PRECONDITIONERS[name]()
  exact = _gamma(pre, theta([1]), 'exact')
  mask = np.random.RandomState(3).rand(K, 9) < 0.5
  half = lambda p: log_prob(p, tf.constant(2. * mask, tf.float64))
  probes = tf.function(lambda p: _gamma(pre, p, 'hutchinson',
                                        gamma_fn=half))(theta([K]))
  for ex, hu in zip(exact, probes):
    hu = hu.numpy().reshape(K, -1)
    ex = ex.numpy().reshape(-1)
    se = hu.std(axis=0, ddof=1) / np.sqrt(K)
    np.testing.assert_array_less(np.abs(hu.mean(axis=0) - ex), 4.5 * se + 1e-10)
  # The subsample adds variance: a test that could not tell would be void.
  full = tf.function(lambda p: _gamma(pre, p, 'hutchinson'))(theta([K]))
  assert probes[0].numpy().std(0).mean() > full[0].numpy().std(0).mean()


@pytest.mark.parametrize('estimator,subsample', [
    ('hutchinson', False), ('hutchinson', True), ('exact', False)])
@pytest.mark.slow
def test_coin_adds_gamma_over_p_or_nothing_to_the_same_step(estimator,
                                                            subsample):
  """``probability=p``: value, gradient and metric as without the coin; Γ is
  the p = 1 Γ divided by p (same probe) or zeros, in graph mode, where only
  Γ's second-order pass sits in the `tf.cond`."""
  pre = PRECONDITIONERS['monge']()
  parts = theta([2])
  state = _warm_state(pre, parts, 1)
  mask = np.random.RandomState(3).rand(2, 9) < 0.5
  gamma_fn = None
  if subsample:
    gamma_fn = lambda p: log_prob(p, tf.constant(2. * mask, tf.float64))

  @tf.function
  def run(seed, probability):
    return core.gradient_and_gamma(
        log_prob, parts, pre, state, tf.constant(1), 1, 'corrected',
        estimator, seed, gamma_fn, probability,
        noise_seed=tf.constant((7, 8), tf.int32))

  full = run(tf.constant((0, 0), tf.int32), 1.)
  assert max(float(tf.reduce_max(tf.abs(g))) for g in full[-1]) > 1e-3
  flat = lambda xs: np.concatenate([np.ravel(x) for x in tf.nest.flatten(xs)])
  outcomes = set()
  for k in range(16):
    out = run(tf.constant((k, 1), tf.int32), 0.5)
    for got, want in zip(out[:3], full[:3]):
      np.testing.assert_allclose(flat(got), flat(want), rtol=1e-12, atol=1e-14)
    gamma = flat(out[-1])
    if np.all(gamma == 0.):
      outcomes.add('none')
    else:
      np.testing.assert_allclose(gamma, flat(full[-1]) / 0.5, rtol=1e-10,
                                 atol=1e-14)
      outcomes.add('gamma')
  # Both sides of a fair coin in 16 throws (fails with probability 2^-15).
  assert outcomes == {'none', 'gamma'}


def _metric_matrix_fd(pre, parts, eps=1e-6):
  """Γ_i = Σ_j ∂M_ij/∂θ_j by central differences of the *recomputed* metric."""
  batch_ndims = 1
  state0 = pre.init(parts, batch_ndims)
  _, g = core.gamma.value_and_gradient(log_prob, [0.9 * p for p in parts])
  state0 = pre.update(state0, g, tf.constant(0), batch_ndims)
  flat = np.concatenate([p.numpy().reshape(-1) for p in parts])
  sizes = [int(np.prod(p.shape[1:])) for p in parts]

  def unflat(v):
    out, i = [], 0
    for p, n in zip(parts, sizes):
      out.append(tf.constant(v[i:i + n].reshape(p.shape), tf.float64))
      i += n
    return out

  def m_col(v, j):
    _, g = core.gamma.value_and_gradient(log_prob, unflat(v))
    st = pre.update(state0, g, tf.constant(1), batch_ndims)
    e = np.zeros_like(flat)
    e[j] = 1.
    return np.concatenate([x.numpy().reshape(-1)
                           for x in pre.apply(st, unflat(e), batch_ndims)])
  total = np.zeros_like(flat)
  for j in range(flat.size):
    d = np.zeros_like(flat)
    d[j] = eps
    total += (m_col(flat + d, j) - m_col(flat - d, j)) / (2 * eps)
  return total


@pytest.mark.slow
@pytest.mark.parametrize('name', ['shampoo', 'shampoo_blocks', 'monge',
                                  'wenzel'])
def test_exact_gamma_matches_finite_differences(name):
  pre = PRECONDITIONERS[name]()
  parts = theta([1])
  exact = np.concatenate([g.numpy().reshape(-1)
                          for g in _gamma(pre, parts, 'exact')])
  fd = _metric_matrix_fd(pre, parts)
  np.testing.assert_allclose(exact, fd, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_corrected_is_original_over_one_minus_decay():
  pre = PRECONDITIONERS['rmsprop']()
  orig = _gamma(pre, theta([1]), 'exact', 'original')
  corr = _gamma(pre, theta([1]), 'exact', 'corrected')
  for o, c in zip(orig, corr):
    np.testing.assert_allclose(c.numpy(), o.numpy() / 0.1, rtol=1e-12)


_loss = tfp_reference.loss
TH0 = tfp_reference.TH0


def _ours_original(lr, decay, bias):
  pre = core.RMSprop(decay, bias, initial_value=1.)  # TFP starts V at ones.
  parts = [tf.constant(TH0)]
  state = pre.init(parts, 0)
  _, g, st, gam = core.gradient_and_gamma(lambda p: -_loss(p[0]), parts, pre,
                                          state, tf.constant(0), 0,
                                          'original', 'exact')
  return pre.apply(st, g, 0)[0].numpy(), gam[0].numpy()


def test_original_equals_tfp_diag_jacobian():
  """'original' Γ = TFP pSGLD's `diag_jacobian` of its preconditioner (graph)."""
  decay, bias = 0.9, 0.5
  tfp_gamma = tfp_reference.tfp_diag_jacobian_gamma(decay, bias)
  _, ours = _ours_original(0.01, decay, bias)
  np.testing.assert_allclose(ours, tfp_gamma, rtol=1e-6)
  assert np.max(np.abs(ours)) > 1e-2  # Γ is far from zero: the test can fail.


def test_tfp_optimizer_drops_gamma_with_resource_variables():
  """A finding: TFP's pSGLD optimizer, in graph mode on TF 2 resource variables,
  gets Γ = 0 from `diag_jacobian` (no path from the variable to the
  preconditioner), so its noise-free step equals our drift without Γ."""
  lr, decay, bias = 0.01, 0.9, 0.5
  tfp_delta = tfp_reference.tfp_optimizer_delta(lr, decay, bias)
  drift, gam = _ours_original(lr, decay, bias)
  np.testing.assert_allclose(tfp_delta, 0.5 * lr * drift, rtol=1e-6)
  assert not np.allclose(tfp_delta, 0.5 * lr * (drift + gam), rtol=1e-3)


def test_monge_fallback_uses_the_norm_of_the_preconditioned_gradient():
  """``‖M ĝ‖`` from inner products equals the materialised norm; chains above
  the threshold fall back to M = I (Yu et al. 2023, App. A.4)."""
  rng = np.random.RandomState(0)
  ell0 = rng.randn(4, 3, 2)
  grads = rng.randn(4, 3, 2) * np.array([1., 5., 20., 80.])[:, None, None]
  decay, alpha2 = 0.5, 0.3
  ell = decay * ell0 + (1. - decay) * grads
  flat_l, flat_g = ell.reshape(4, -1), grads.reshape(4, -1)
  sq = (flat_l ** 2).sum(1)
  coef = alpha2 / (1. + alpha2 * sq) * (flat_l * flat_g).sum(1)
  mg = flat_g - coef[:, None] * flat_l
  norms = np.linalg.norm(mg, axis=1)
  threshold = float(np.median(norms))
  monge = core.preconditioners.Monge(decay, alpha2, threshold)
  state = core.preconditioners.MongeState(
      [tf.constant(ell0)], tf.constant((ell0 ** 2).sum(axis=(1, 2))),
      tf.zeros([4], tf.bool), tf.zeros([4], tf.float64))
  new = monge.update(state, [tf.constant(grads)], tf.constant(1), 1)
  np.testing.assert_allclose(new.mean_grad[0].numpy(), ell)
  np.testing.assert_allclose(new.sq_norm.numpy(), (ell ** 2).sum(axis=(1, 2)))
  np.testing.assert_array_equal(new.fallback.numpy(), norms > threshold)
  assert 0 < new.fallback.numpy().sum() < 4
  v = [tf.constant(rng.randn(4, 3, 2))]
  out = monge.apply(new, v, 1)[0].numpy()
  fell = norms > threshold
  np.testing.assert_allclose(out[fell], v[0].numpy()[fell])


def test_monge_running_norm_tracks_the_mean_gradient():
  """‖ℓ‖² by recursion equals the direct norm after many float32 updates."""
  monge = core.preconditioners.Monge(0.95, 1.)
  rng = np.random.RandomState(4)
  parts = [tf.zeros([3, 50, 20]), tf.zeros([3, 20])]
  state = monge.init(parts, 1)
  step = tf.function(lambda st, g: monge.update(st, g, tf.constant(0), 1))
  for t in range(300):
    scale = 10. ** rng.uniform(-3, 1)  # Gradients over four decades.
    grads = [tf.constant(scale * rng.randn(*p.shape), tf.float32)
             for p in parts]
    state = step(state, grads)
  direct = core.tensors.event_dot(state.mean_grad, state.mean_grad, 1)
  np.testing.assert_allclose(state.sq_norm.numpy(), direct.numpy(), rtol=1e-4)



@pytest.mark.parametrize('name', ['monge', 'psgld', 'shampoo'])
def test_drift_from_cached_statistics_equals_the_plain_metric_product(name):
  """`apply_to_gradient(s·ĝ)` (Monge: ℓ·ĝ from `update`) equals `apply(s·ĝ)`."""
  pre = {'monge': core.preconditioners.Monge(0.9, 2., fallback_threshold=30.),
         'psgld': core.preconditioners.RMSprop(0.9, 1e-5),
         'shampoo': core.shampoo.Shampoo(0.9, 1e-3, 1, 100)}[name]
  rng = np.random.RandomState(7)
  parts = [tf.zeros([3, 6, 4], tf.float64), tf.zeros([3, 4], tf.float64)]
  state = pre.init(parts, 1)
  fell = []
  for t in range(4):  # Gradients of growing size: some chains fall back.
    grads = [tf.constant(3. ** t * rng.randn(*p.shape)) for p in parts]
    state = pre.update(state, grads, tf.constant(t), 1)
    scaled = [-250. * g for g in grads]
    cached = pre.apply_to_gradient(state, scaled, -250., 1)
    plain = pre.apply(state, scaled, 1)
    for a, b in zip(cached, plain):
      np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-9)
    if name == 'monge':
      fell.append(state.fallback.numpy())
  if name == 'monge':  # Both branches of the fallback were exercised.
    assert np.any(fell) and not np.all(fell)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['rmsprop', 'shampoo'])
def test_a_drift_of_its_own_leaves_the_metric_and_gamma_to_the_other_minibatch(
    name):
  """``drift_fn`` (``gamma='corrected'``): its value and gradient are returned, the metric state and Γ are `fn`'s; a frozen metric evaluates `drift_fn` only."""
  pre = PRECONDITIONERS[name]()
  parts = theta([2])
  state = pre.init(parts, 1)
  other = lambda p: log_prob(p, tf.constant(np.arange(9.) / 4, tf.float64))
  calls = []

  def counted(fn, label):
    def wrapped(p):
      calls.append(label)
      return fn(p)
    return wrapped
  run = lambda adapting: core.gamma.gradient_and_gamma(
      counted(log_prob, 'metric'), parts, pre, state, 0, 1, 'corrected',
      'exact', adapting=adapting, drift_fn=counted(other, 'drift'))
  value, grads, new_state, gamma = run(tf.constant(True))
  want = core.gamma.gradient_and_gamma(log_prob, parts, pre, state, 0, 1,
                                       'corrected', 'exact')
  drift_value, drift_grads = core.gamma.value_and_gradient(other, parts)
  np.testing.assert_allclose(value.numpy(), drift_value.numpy())
  for got, ref in zip(grads + gamma + tf.nest.flatten(new_state),
                      drift_grads + want[3] + tf.nest.flatten(want[2])):
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-12)
  # Eager `tf.cond` runs one branch: frozen, only the drift is evaluated.
  del calls[:]
  value, grads, kept, gamma = run(tf.constant(False))
  assert calls == ['drift'], calls
  np.testing.assert_allclose(value.numpy(), drift_value.numpy())
  for a, b in zip(tf.nest.flatten(kept), tf.nest.flatten(state)):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert all(not np.any(g.numpy()) for g in gamma)
