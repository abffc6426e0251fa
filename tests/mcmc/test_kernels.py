"""Table-driven conformance of every kernel: TFP contract, shapes, dtypes, seeds, XLA, errors."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from tests.conftest import in_ci

tfb = tfp.bijectors


def _lp(x):
  return -0.5 * tf.reduce_sum(x ** 2, axis=-1)


def _lp_parts(w, b):
  return -0.5 * (tf.reduce_sum(w ** 2, axis=[-2, -1]) + tf.reduce_sum(b ** 2, -1))


KERNELS = {
    'sgld': lambda fn, **kw: tfa.mcmc.SGLD(fn, 0.01, **kw),
    'psgld': lambda fn, **kw: tfa.mcmc.PSGLD(fn, 0.01, 0.95, diagonal_bias=1., **kw),
    'wenzel': lambda fn, **kw: tfa.mcmc.WenzelSGLD(fn, 0.01, update_interval=3,
                                                   **kw),
    'monge': lambda fn, **kw: tfa.mcmc.MongeSGRLD(fn, 0.01, 1., 0.9, **kw),
    'shampoo': lambda fn, **kw: tfa.mcmc.ShampooSGRLD(
        fn, 0.01, 0.9, 0.1, update_interval=2, **kw),
    'adam': lambda fn, **kw: tfa.mcmc.AdamSGLD(fn, 0.01, **kw),
}
NAMES = sorted(KERNELS)


_CHAINS = {}  # One compiled chain per kernel, length and compiler.


def _run(kernel, state, n=20, seed=(1, 2), jit=False):
  """`n` steps of `sample_chain`; calls with the same kernel reuse its trace."""
  key = (id(kernel), n, jit)
  if key not in _CHAINS:
    @tf.function(jit_compile=jit, autograph=False)
    def go(state, seed):
      return tfp.mcmc.sample_chain(n, state, kernel=kernel, trace_fn=None,
                                   seed=seed)
    _CHAINS[key] = (kernel, go)  # The kernel stays alive with its id.
  return _CHAINS[key][1](state, tf.constant(seed, tf.int32))


@pytest.mark.parametrize('name', NAMES)
def test_batch_of_chains_shapes_and_float64(name):
  kernel = KERNELS[name](_lp)
  state = tf.random.stateless_normal([4, 3, 5], seed=(0, 1), dtype=tf.float64)
  out = _run(kernel, state)
  assert out.shape == (20, 4, 3, 5) and out.dtype == tf.float64
  assert np.all(np.isfinite(out.numpy()))
  assert not kernel.is_calibrated


@pytest.mark.slow
@pytest.mark.parametrize('name', NAMES)
def test_list_state_and_determinism(name):
  kernel = KERNELS[name](_lp_parts)
  state = [tf.ones([3, 4, 2]), tf.zeros([3, 2])]
  a = _run(kernel, state, seed=(5, 6))
  b = _run(kernel, state, seed=(5, 6))
  c = _run(kernel, state, seed=(5, 7))
  assert [x.shape for x in a] == [(20, 3, 4, 2), (20, 3, 2)]
  for x, y, z in zip(a, b, c):
    np.testing.assert_array_equal(x.numpy(), y.numpy())
    assert not np.allclose(x.numpy(), z.numpy())


# CI: a diagonal metric and one with a running norm; Shampoo's roots under
# XLA run in `test_refused_defaults.py` and the Keras Shampoo tests; every
# kernel at full size.
@pytest.mark.slow
@pytest.mark.parametrize('name', in_ci(NAMES, ['psgld', 'monge']))
def test_jit_compile_matches_graph(name):
  """XLA and graph agree on the drift (noise differs: TF's XLA normal kernel
  maps a seed to other numbers), and XLA is deterministic under a seed.

  The temperature is a `tf.Variable`, as a tempering schedule would pass
  it: the compiled chain reads it at run time, so the cold run (drift
  alone) and the hot one share one XLA compile.
  """
  temperature = tf.Variable(1e-30, dtype=tf.float64)
  kernel = KERNELS[name](_lp_parts, temperature=temperature)
  state = [tf.ones([3, 4, 2], tf.float64), tf.zeros([3, 2], tf.float64)]
  g = _run(kernel, state, jit=False)
  x = _run(kernel, state, jit=True)
  for a, b in zip(g, x):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-8)
  assert not np.allclose(g[0].numpy()[-1], g[0].numpy()[0])  # it moved
  temperature.assign(1.)
  hot = _run(kernel, state, jit=True)
  for a, b in zip(hot, _run(kernel, state, jit=True)):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert np.max(np.abs(hot[0].numpy() - x[0].numpy())) > 1e-3  # Read hot.


@pytest.mark.parametrize('name', NAMES)
def test_parameters_rebuild_and_copy(name):
  kernel = KERNELS[name](_lp)
  again = type(kernel)(**kernel.parameters)
  assert again.parameters == kernel.parameters
  hot = kernel.copy(temperature=2.)
  assert hot.parameters['temperature'] == 2.
  assert kernel.parameters['temperature'] == 1.


@pytest.mark.parametrize('name', NAMES)
def test_transformed_transition_kernel(name):
  # Positive scale through Exp: log-normal target on σ.
  dist = tfp.distributions.LogNormal(0., 0.5)
  kernel = tfp.mcmc.TransformedTransitionKernel(
      KERNELS[name](dist.log_prob), bijector=tfb.Exp())
  out = _run(kernel, tf.ones([6]))
  assert out.shape == (20, 6) and np.all(out.numpy() > 0.)


@pytest.mark.slow
def test_one_step_traces_once():
  kernel = tfa.mcmc.PSGLD(_lp, 0.01, 0.95)
  count = {'n': 0}

  @tf.function(jit_compile=True)
  def step(state, results, seed):
    count['n'] += 1
    return kernel.one_step(state, results, seed=seed)
  state = tf.zeros([8, 2])
  results = kernel.bootstrap_results(state)
  for i in range(4):
    state, results = step(state, results, tf.constant([i, 0], tf.int32))
  assert count['n'] == 1


def test_thinning_equivalence():
  """num_steps_between_results=k returns every (k+1)-th state of the chain."""
  kernel = tfa.mcmc.SGLD(_lp, 0.01)
  results = kernel.bootstrap_results(tf.zeros([3, 2]))
  seed = tf.constant([4, 2], tf.int32)
  s1, r1 = kernel.one_step(tf.zeros([3, 2]), results, seed=seed)
  s2, _ = kernel.one_step(s1, r1, seed=seed)
  s3, _ = kernel.one_step(s1, r1, seed=seed)
  np.testing.assert_array_equal(s2.numpy(), s3.numpy())


def test_temperature_scales_noise():
  """τ → 0 makes SGLD deterministic gradient ascent with step h/2."""
  kernel = tfa.mcmc.SGLD(_lp, 0.1, temperature=1e-12)
  state = tf.ones([2, 3], tf.float64)
  new, _ = kernel.one_step(state, kernel.bootstrap_results(state), seed=(1, 1))
  np.testing.assert_allclose(new.numpy(), 0.95 * np.ones([2, 3]), rtol=1e-5)


def test_schedule_callable_and_polynomial_decay():
  sched = tfa.schedules.PolynomialDecay(0.1, 1., 0.55)
  np.testing.assert_allclose(float(sched(tf.constant(9))), 0.1 / 10 ** 0.55)
  kernel = tfa.mcmc.PSGLD(_lp, sched, 0.95)
  out = _run(kernel, tf.zeros([2, 2]))
  assert np.all(np.isfinite(out.numpy()))


@pytest.mark.parametrize('make, message', [
    (lambda: tfa.mcmc.PSGLD(_lp, 0.1, gamma='fixed'), 'gamma'),
    (lambda: tfa.mcmc.PSGLD(_lp, 0.1, gamma_estimator='lanczos'),
     'gamma_estimator'),
    (lambda: tfa.mcmc.PSGLD(_lp, 0.1, preconditioner_decay_rate=1.),
     'preconditioner_decay_rate'),
    (lambda: tfa.mcmc.MongeSGRLD(_lp, 0.1, preconditioner_decay_rate=-0.1),
     'preconditioner_decay_rate'),
    (lambda: tfa.mcmc.AdamSGLD(_lp, 0.1, momentum_decay_rate=1.5),
     'momentum_decay_rate'),
    (lambda: tfa.mcmc.SGLD(_lp, -0.1), 'step_size'),
    (lambda: tfa.mcmc.SGLD(_lp, 0.1, temperature=-1.), 'temperature'),
    (lambda: tfa.mcmc.SGLD(_lp, 0.1, temperature=0.), 'temperature'),
    (lambda: tfa.mcmc.ShampooSGRLD(_lp, 0.1, update_interval=0),
     'update_interval'),
    (lambda: tfa.mcmc.WenzelSGLD(_lp, 0.1, update_interval=0),
     'update_interval'),
    (lambda: tfa.mcmc.ShampooSGRLD(_lp, 0.1, epsilon=0.), 'epsilon'),
    (lambda: tfa.mcmc.PSGLD(_lp, 0.1, diagonal_bias=-1.), 'diagonal_bias'),
    (lambda: tfa.mcmc.PSGLD(_lp, 0.1, nonfinite='skip'), 'nonfinite'),
    (lambda: tfa.mcmc.MongeSGRLD(_lp, 0.1, gamma_probability=1.5),
     'gamma_probability'),
])
def test_bad_arguments_name_the_argument(make, message):
  with pytest.raises((ValueError, TypeError), match=message):
    make()


def test_state_and_log_prob_shapes_must_agree():
  kernel = tfa.mcmc.SGLD(lambda a, b: -0.5 * tf.reduce_sum(a ** 2, -1), 0.1)
  with pytest.raises(ValueError, match='current_state'):
    kernel.bootstrap_results([tf.zeros([4, 3]), tf.zeros([5, 3])])


def _nan_target(x):
  # Fine for x < 2, NaN beyond: the chains must never carry NaN forward.
  return tf.where(x < 2., -0.5 * x ** 2, tf.math.log(-tf.ones_like(x)))


@pytest.mark.slow
def test_nonfinite_reject_keeps_last_finite_state_and_counts():
  kernel = tfa.mcmc.SGLD(_nan_target, 0.5)
  out, _, results = tfa.mcmc.sample(kernel, tf.fill([64], 1.5), 50, seed=(1, 2),
                                    progress=False, chunk_size=25)
  assert np.all(np.isfinite(out.numpy()))
  assert int(tf.reduce_sum(results.num_nonfinite)) > 0


@tf.custom_gradient
def _nan_gradient_norm(x):
  """-0.5‖x‖² with a finite value but a NaN gradient in chain 0's first entry."""
  bad = tf.one_hot(0, tf.size(x), on_value=np.nan, off_value=0.,
                   dtype=x.dtype)
  return -0.5 * tf.reduce_sum(x ** 2, -1), lambda dy: (
      -dy[..., None] * x + tf.reshape(bad, tf.shape(x)))


@pytest.mark.parametrize('name', NAMES)
def test_nan_gradient_with_finite_log_prob_is_rejected(name):
  """Only θ' is checked: a NaN gradient must reach it through every metric."""
  kernel = KERNELS[name](_nan_gradient_norm)
  if 'metric_warmup_steps' in kernel.parameters:  # A first step that moves.
    kernel = kernel.copy(metric_warmup_steps=0)
  state = tf.fill([3, 4], 0.5)
  new, results = kernel.one_step(state, kernel.bootstrap_results(state),
                                 seed=(1, 2))
  np.testing.assert_array_equal(new.numpy()[0], state.numpy()[0])
  assert np.all(np.isfinite(new.numpy()))
  assert not np.allclose(new.numpy()[1:], 0.5)  # The other chains moved.
  np.testing.assert_array_equal(results.num_nonfinite.numpy(), [1, 0, 0])


def test_finite_chains_flags_every_kind_of_nonfinite_entry():
  """Per chain: NaN, +Inf, -Inf, and +Inf/-Inf in different parts all count."""
  a = np.zeros([5, 3], np.float32)
  b = np.ones([5, 2, 2], np.float32)
  a[1, 0] = np.nan
  b[2, 1, 1] = np.inf
  a[3, 2] = -np.inf
  a[4, 1], b[4, 0, 0] = np.inf, -np.inf  # Would cancel to NaN in a sum too.
  ok = tfa.core.tensors.finite_chains([tf.constant(a), tf.constant(b)], 1)
  np.testing.assert_array_equal(ok.numpy(), [True, False, False, False, False])
  single = tfa.core.tensors.finite_chains([tf.constant(a[0])], 0)
  assert bool(single.numpy())
  # A part summed as a matrix-vector product, eagerly and under XLA.
  big = np.ones([4, 64, 80], np.float32)
  big[1, 10, 20] = np.nan
  big[2, 63, 79] = np.inf
  big[3, 0, 0], big[3, 5, 0] = np.inf, -np.inf
  flat = np.ones([4, 6000], np.float32)
  flat[2, 5999] = np.nan
  for fn in (lambda f: f(), tf.function(lambda f: f(), jit_compile=True)):
    ok = fn(lambda: tfa.core.tensors.finite_chains([tf.constant(big)], 1))
    np.testing.assert_array_equal(ok.numpy(), [True, False, False, False])
    ok = fn(lambda: tfa.core.tensors.finite_chains([tf.constant(flat)], 1))
    np.testing.assert_array_equal(ok.numpy(), [True, True, False, True])


@pytest.mark.parametrize('batch', [[], [3], [2, 2]])
def test_stacked_inner_products_equal_separate_ones(batch):
  """`event_dots` and the part sums against NumPy, any chain shape.

  The parts of 4096 entries or more are summed as matrix-vector products
  (by their last axis, or a flat or narrow part by a divisor of its size),
  the others by XLA's reduction.
  """
  rng = np.random.RandomState(4)
  shapes = [[4, 5], [], [6], [64, 80], [2, 50, 48], [6000], [100, 50]]
  xs = [np.asarray(rng.randn(*(batch + s))) for s in shapes]
  ys = [np.asarray(rng.randn(*(batch + s))) for s in shapes]
  axes = lambda a: tuple(range(len(batch), a.ndim))
  want_xy = sum(np.sum(x * y, axis=axes(x)) for x, y in zip(xs, ys))
  want_yy = sum(np.sum(y * y, axis=axes(y)) for y in ys)
  tensors = tfa.core.tensors
  for fn in (lambda f: f(), tf.function(lambda f: f(), jit_compile=True)):
    xy, yy = fn(lambda: tensors.event_dots(
        [([tf.constant(x) for x in xs], [tf.constant(y) for y in ys]),
         ([tf.constant(y) for y in ys], [tf.constant(y) for y in ys])],
        len(batch)))
    np.testing.assert_allclose(xy.numpy(), want_xy, rtol=1e-12)
    np.testing.assert_allclose(yy.numpy(), want_yy, rtol=1e-12)
    assert xy.shape == batch
    for x in (xs[0], xs[3], xs[4], xs[5], xs[6]):
      mean = tensors.part_event_mean(tf.constant(x), len(batch))
      np.testing.assert_allclose(mean.numpy(), x.mean(axis=axes(x)),
                                 rtol=1e-12)


@pytest.mark.slow
def test_nonfinite_raise_is_reported():
  kernel = tfa.mcmc.SGLD(_nan_target, 0.5, nonfinite='raise')
  with pytest.raises((FloatingPointError, tf.errors.InvalidArgumentError),
                     match='[Nn]on-finite'):
    tfa.mcmc.sample(kernel, tf.fill([64], 1.5), 50, seed=(1, 2),
                    progress=False)


@pytest.mark.slow
def test_sample_driver_chunks_equal_one_chain_length():
  kernel = tfa.mcmc.PSGLD(_lp, 0.01, 0.95)
  out, trace, _ = tfa.mcmc.sample(
      kernel, tf.zeros([3, 2]), 30, num_burnin_steps=5,
      num_steps_between_results=1, chunk_size=7, seed=(3, 3), progress=False,
      trace_fn=lambda s, r: r.target_log_prob)
  assert out.shape == (30, 3, 2) and trace.shape == (30, 3)


@pytest.mark.slow
def test_sample_reuses_its_compiled_chunks_across_calls():
  from tfp_adaptive.mcmc import driver  # pylint: disable=g-import-not-at-top
  kernel = tfa.mcmc.SGLD(_lp, 0.01)
  first, _, _ = tfa.mcmc.sample(kernel, tf.zeros([4]), 10, seed=(1, 1),
                                progress=False)
  (run,) = driver._RUNNERS[kernel].values()  # pylint: disable=protected-access
  traces = run.experimental_get_tracing_count()
  again, _, _ = tfa.mcmc.sample(kernel, tf.zeros([4]), 10, seed=(1, 1),
                                progress=False)
  assert run.experimental_get_tracing_count() == traces
  np.testing.assert_array_equal(first.numpy(), again.numpy())


@pytest.mark.slow
def test_sample_burn_in_and_later_chunks_share_one_trace():
  """The burn-in count is a loop count: chunks of one length trace once."""
  from tfp_adaptive.mcmc import driver  # pylint: disable=g-import-not-at-top
  kernel = tfa.mcmc.SGLD(_lp, 0.01)
  chunked, _, _ = tfa.mcmc.sample(kernel, tf.zeros([4]), 30,
                                  num_burnin_steps=7, chunk_size=10,
                                  seed=(2, 5), progress=False)
  (run,) = driver._RUNNERS[kernel].values()  # pylint: disable=protected-access
  assert run.experimental_get_tracing_count() == 1
  whole, _, _ = tfa.mcmc.sample(kernel, tf.zeros([4]), 30,
                                num_burnin_steps=7, chunk_size=30,
                                seed=(2, 5), progress=False)
  assert run.experimental_get_tracing_count() == 2  # A new length.
  assert chunked.shape == whole.shape == (30, 4)


def _regression_target(gamma_batch_size=None):
  rng = np.random.RandomState(5)
  x = tf.constant(rng.randn(200, 3), tf.float64)
  y = tf.constant(np.tanh(rng.randn(200)), tf.float64)

  def ll(parts, batch):
    bx, by = batch
    pred = tf.einsum('nd,...d->...n', bx, parts[0])
    return -0.5 * (by - pred) ** 2 - 0.1 * pred ** 4
  return tfa.minibatch_log_prob(ll, (x, y), 20,
                                gamma_batch_size=gamma_batch_size)


@pytest.mark.statistical
def test_gamma_on_part_of_the_minibatch_is_unbiased():
  """Exact Γ on the first 5 of 20 examples vs on all 20, same minibatches.

  θ is far from the mode, so the gradient and Γ keep their signs across
  minibatches and a wrongly scaled subset would show.
  """
  fn = _regression_target(gamma_batch_size=5)
  pre = tfa.core.RMSprop(0.9, 0.1)
  theta = [tf.constant([[1.5, -1., 2.]], tf.float64)]
  state = pre.init(theta, 1)

  @tf.function
  def difference(seed):
    def gamma(gamma_fn):
      return tfa.core.gradient_and_gamma(
          lambda xs: fn(*xs, seed=seed), theta, pre, state, tf.constant(0), 1,
          'corrected', 'exact', gamma_fn=gamma_fn)[-1][0]
    return gamma(lambda xs: fn(*xs, seed=seed, rows=5)) - gamma(None)
  d = np.array([difference(tf.constant([i, 1])).numpy()[0]
                for i in range(400)])
  se = d.std(0, ddof=1) / np.sqrt(len(d))
  assert np.all(se > 1e-6)  # The subset changes Γ: the test can fail.
  np.testing.assert_array_less(np.abs(d.mean(0)), 4.5 * se)


@pytest.mark.slow
def test_gamma_batch_size_in_a_kernel():
  full, same = _regression_target(), _regression_target(gamma_batch_size=20)
  run = lambda fn: _run(tfa.mcmc.PSGLD(fn, 1e-3, 0.95, gamma='corrected'),
                        tf.zeros([2, 3], tf.float64), jit=True)
  np.testing.assert_allclose(run(same).numpy(), run(full).numpy(), rtol=1e-9)
  part = run(_regression_target(gamma_batch_size=5)).numpy()
  assert np.all(np.isfinite(part))
  with pytest.raises(ValueError, match='gamma_batch_size'):
    _regression_target(gamma_batch_size=21)


@pytest.mark.slow
def test_minibatch_log_prob_scales_and_uses_seed():
  x = tf.constant(np.linspace(-1, 1, 50), tf.float32)
  ll = lambda parts, batch: -0.5 * (batch[None, :] - parts[0][:, None]) ** 2
  fn = tfa.minibatch_log_prob(ll, x, 10)
  theta = tf.constant([0.3])
  full = float(fn(theta)[0])
  draws = [float(fn(theta, seed=tf.constant([i, 0]))[0]) for i in range(400)]
  assert abs(np.mean(draws) - full) < 4 * np.std(draws) / np.sqrt(400)
  assert float(fn(theta, seed=(1, 2))[0]) == float(fn(theta, seed=(1, 2))[0])
  with pytest.raises(ValueError, match='batch_size'):
    tfa.minibatch_log_prob(ll, x, 51)
  kernel = tfa.mcmc.PSGLD(fn, 1e-3, 0.95)
  out = _run(kernel, tf.zeros([1]), jit=True)
  assert np.all(np.isfinite(out.numpy()))


@pytest.mark.parametrize('probability', [1., 0.5])
def test_hutchinson_probe_is_the_sign_of_the_step_noise(noise_draw_seeds,
                                                        probability):
  """Γ's probe and the injected noise come from one draw (one seed)."""
  seeds = noise_draw_seeds
  kernel = tfa.mcmc.PSGLD(_lp_parts, 0.01, 0.95,
                          gamma_probability=probability)
  state = [tf.ones([2, 3, 4]), tf.ones([2, 4])]
  results = kernel.bootstrap_results(state)
  for i in range(3):
    state, results = kernel.one_step(state, results, seed=(i, 7))
  assert seeds['normal_signs'] == seeds['normal']
  assert len(set(seeds['normal'])) == 3
