"""TFP's wrappers around the kernels, as the TFP tutorials put them around HMC: honoured or refused.

The step-size adaptation wrappers set the kernel results' ``step_size``,
and the kernels take it; their acceptance is the results'
``log_accept_ratio``, ``log(0.75)·r/0.02`` with ``r`` the step's drift
against its noise, so the wrappers' default target of 0.75 aims at the
regime's tolerance ``r ≈ 0.02``. ``MetropolisHastings`` cannot correct
these steps and refuses.

On a standard normal in ``D`` dimensions with exact gradients, an SGLD
step has ``r = (h/4)·‖θ‖²/‖ξ‖²``, about ``h/4`` for large ``D``: the
adapted step is ``h* ≈ 4·0.02·log(p)/log(0.75)`` for a target ``p``.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa

D = 50


def _normal(x):
  return -0.5 * tf.reduce_sum(x ** 2, axis=-1)


def _adapt(kernel, steps, target=0.75, seed=(1, 2)):
  """`SimpleStepSizeAdaptation` over `steps`: the wrapper's steps and the ones the kernel took."""
  wrapped = tfp.mcmc.SimpleStepSizeAdaptation(
      kernel, num_adaptation_steps=steps, target_accept_prob=target)
  start = tf.random.stateless_normal([64, D], seed=(5, 6))
  return tf.function(lambda: tfp.mcmc.sample_chain(
      steps, start, kernel=wrapped, seed=seed,
      trace_fn=lambda _, r: (r.new_step_size, r.inner_results.step_size)))()


@pytest.mark.parametrize('initial', [1e-4, 1.])
def test_simple_adaptation_sets_the_step_the_kernel_takes(initial):
  """From a step 800× too small or 12× too large, the adapted step lands at ``h* = 0.08`` (within 15%), and each step takes the step the wrapper set.

  At ``h*`` the stationary ``‖θ‖²`` is ``D/(1 − h/4)``, 2% above ``D``,
  and the spread of ``‖θ‖²/‖ξ‖²`` over 64 chains with ``D = 50`` moves the
  set point by a few percent more; the wrapper's own steps are ±1%: 15%
  holds all three with room, and a kernel that ignores the wrapper stays
  at its initial step, 12× or more away.
  """
  _, (new, taken) = _adapt(tfa.mcmc.SGLD(_normal, initial), 1200)
  new, taken = new.numpy(), taken.numpy()
  np.testing.assert_allclose(taken[1:], new[:-1], rtol=1e-6)
  assert taken[0] == pytest.approx(initial, rel=1e-6)
  final = np.exp(np.mean(np.log(new[-200:])))
  assert final == pytest.approx(0.08, rel=0.15)


def test_a_higher_target_acceptance_aims_at_a_smaller_drift_ratio():
  """Target 0.9: ``h* = 0.08·log(0.9)/log(0.75) ≈ 0.029`` (within 15%, as above)."""
  _, (new, _) = _adapt(tfa.mcmc.SGLD(_normal, 1e-2), 800, target=0.9)
  final = np.exp(np.mean(np.log(new.numpy()[-200:])))
  assert final == pytest.approx(0.08 * np.log(0.9) / np.log(0.75), rel=0.15)


@pytest.mark.slow
def test_dual_averaging_adapts_psgld_and_the_run_reads_its_regime():
  """`DualAveragingStepSizeAdaptation` around the corrected PSGLD, through `tfa.mcmc.sample`: the kernel takes the averaged step after adaptation, and the run's `drift_ratio` is near 0.02.

  Dual averaging sets the mean pseudo-acceptance, not the ratio of mean
  norms that `drift_ratio` is; with the RMSprop metric the per-chain
  ratios spread more than SGLD's, so the check is a factor 2.5 either side
  of the tolerance. A kernel that kept its initial step of 1e-4 reads
  about 25 times below it.
  """
  kernel = tfp.mcmc.DualAveragingStepSizeAdaptation(
      tfa.mcmc.PSGLD(_normal, 1e-4, preconditioner_decay_rate=0.5,
                     diagonal_bias=1.), num_adaptation_steps=800)
  start = tf.random.stateless_normal([64, D], seed=(7, 8))
  _, (step, norms), _ = tfa.mcmc.sample(
      kernel, start, 400, num_burnin_steps=1000, seed=(3, 4),
      progress=False, check_temperature=False,
      trace_fn=lambda _, r: (r.inner_results.step_size,
                             r.inner_results.step_norms))
  step = step.numpy()
  assert np.ptp(step) == 0. and step[0] > 1e-3
  ratio = (np.mean(norms.drift_sq_norm.numpy()) /
           np.mean(norms.noise_sq_norm.numpy()))
  assert 0.02 / 2.5 < ratio < 0.02 * 2.5


@pytest.mark.slow
def test_a_schedule_keeps_its_shape_under_a_wrapper():
  """Alone, the kernel takes ``s(t)``; under a wrapper that set the first step to ``c·s(0)``, it takes ``c·s(t)``."""
  schedule = lambda t: 0.05 / (1. + tf.cast(t, tf.float32) / 10.)
  kernel = tfa.mcmc.SGLD(_normal, schedule)
  start = tf.zeros([4, D])
  taken = tfp.mcmc.sample_chain(
      30, start, kernel=kernel, seed=(1, 2),
      trace_fn=lambda _, r: r.step_size).trace.numpy()
  expected = 0.05 / (1. + np.arange(30) / 10.)
  np.testing.assert_allclose(taken, expected, rtol=1e-6)
  wrapped = tfp.mcmc.SimpleStepSizeAdaptation(
      kernel, num_adaptation_steps=0)
  results = wrapped.bootstrap_results(start)
  results = results._replace(new_step_size=0.5 * results.new_step_size)
  taken = tfp.mcmc.sample_chain(
      30, start, kernel=wrapped, previous_kernel_results=results,
      seed=(1, 2), trace_fn=lambda _, r: r.inner_results.step_size)
  np.testing.assert_allclose(taken.trace.numpy(), 0.5 * expected, rtol=1e-5)


def test_metropolis_hastings_is_refused_naming_the_alternatives():
  kernel = tfp.mcmc.MetropolisHastings(tfa.mcmc.PSGLD(_normal, 1e-2, 0.95))
  with pytest.raises(ValueError, match='MetropolisAdjustedLangevinAlgorithm'):
    tfp.mcmc.sample_chain(3, tf.zeros([4, D]), kernel=kernel, trace_fn=None,
                          seed=(1, 2))


def test_a_step_per_chain_is_refused_naming_the_parameter():
  kernel = tfa.mcmc.SGLD(_normal, 1e-2)
  results = kernel.bootstrap_results(tf.zeros([4, D]))
  results = results._replace(step_size=tf.fill([4], 1e-2))
  with pytest.raises(ValueError, match='step_size'):
    kernel.one_step(tf.zeros([4, D]), results, seed=(1, 2))


def test_the_step_is_a_sample_statistic_of_every_chain():
  """`to_arviz` repeats the one step of each draw for every chain."""
  pytest.importorskip('arviz')
  kernel = tfa.mcmc.SGLD(_normal, 0.05)
  samples, trace = tfp.mcmc.sample_chain(
      10, tf.zeros([3, 2]), kernel=kernel, seed=(1, 2),
      trace_fn=lambda _, r: r)
  data = tfa.to_arviz(samples, trace)
  assert data.sample_stats['step_size'].shape == (3, 10)
  np.testing.assert_allclose(data.sample_stats['step_size'].values, 0.05)


@pytest.mark.slow
def test_a_reducer_reads_the_chain_as_it_runs():
  """`tfp.experimental.mcmc.sample_fold` with a `CovarianceReducer`: each chain's covariance, without a trace.

  SGLD at ``h = 0.02`` on a standard normal samples the variance
  ``1/(1 − h/4) = 1.005``. Over 4000 steps ``x²`` has an integrated
  autocorrelation time of about ``2/h = 100`` steps, so the 64 chains × 3
  coordinates give about 7700 effective draws and the mean of the
  variances a standard error of ``sqrt(2/7700) ≈ 0.016``: 4 of them.
  """
  kernel = tfa.mcmc.SGLD(lambda x: -0.5 * tf.reduce_sum(x ** 2, -1), 0.02)
  cov, _, results = tf.function(
      lambda: tfp.experimental.mcmc.sample_fold(
          4000, tf.random.stateless_normal([64, 3], seed=(5, 6)),
          kernel=kernel,
          reducer=tfp.experimental.mcmc.CovarianceReducer(event_ndims=1),
          seed=(1, 2)), jit_compile=True, autograph=False)()
  assert cov.shape == (64, 3, 3)
  assert isinstance(results, tfa.mcmc.AdaptiveSGMCMCKernelResults)
  variance = np.diagonal(cov.numpy(), axis1=-2, axis2=-1).mean()
  assert abs(variance - 1. / (1. - 0.02 / 4.)) < 4. * 0.016
