"""The momentum samplers against known answers.

SGHMC: its friction-1 limit is SGLD, and its stationary law is the exact
one of the discrete chain. On a Gaussian target of variance ``s²`` the step
(`tfp_adaptive.core.diffusion.hamiltonian_step`) is a linear recursion of
``(θ, v)``, so its stationary covariance solves a discrete Lyapunov
equation: an exact answer at every finite step, which tends to
``(τ s², τ h/2)`` as ``h → 0``.

SGNHT: its thermostat absorbs gradient noise of unknown size, where SGHMC
(told nothing of the noise) runs hot.
"""

import numpy as np
import pytest
import scipy.linalg
import tensorflow as tf
import keras

import tfp_adaptive as tfa
from tests.conftest import stat_scale


def _stationary_covariance(h, friction, s2, tau=1.):
  """Σ = A Σ Aᵀ + b bᵀ of ``v' = −kθ + (1−α)v + σξ``, ``θ' = θ + v'``."""
  k = h / (2. * s2)
  a = np.array([[1. - k, 1. - friction], [-k, 1. - friction]])
  return scipy.linalg.solve_discrete_lyapunov(
      a, friction * h * tau * np.ones((2, 2)))


@pytest.mark.slow
def test_friction_one_is_sgld():
  target = lambda x: -0.5 * x**2
  run = lambda k: tfa.mcmc.sample(k, tf.ones([5]), num_results=20,
                                  seed=(3, 4), progress=False,
                                  check_temperature=False)[0]
  hmc = run(tfa.mcmc.SGHMC(target, step_size=0.3, friction=1.))
  sgld = run(tfa.mcmc.SGLD(target, step_size=0.3))
  np.testing.assert_allclose(hmc, sgld, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_friction_one_is_sgld_in_keras():
  x = np.random.default_rng(0).normal(size=(8, 3)).astype('float32')
  y = x.sum(1, keepdims=True)
  weights = []
  for opt in (tfa.keras.optimizers.SGHMC(1e-3, data_size=8, friction=1.,
                                         seed=2),
              tfa.keras.optimizers.SGLD(1e-3, data_size=8, seed=2)):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(opt, 'mse')
    model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    weights.append(model.get_weights())
  for a, b in zip(*weights):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


METRICS = {
    'PSGLD': dict(preconditioner_decay_rate=0.9, diagonal_bias=0.1),
    'WenzelSGLD': dict(update_interval=2),
    'MongeSGRLD': dict(alpha2=0.5, preconditioner_decay_rate=0.9),
    'ShampooSGRLD': dict(epsilon=0.1, preconditioner_decay_rate=0.9995),
}


@pytest.mark.parametrize('name', sorted(METRICS))
@pytest.mark.slow
def test_friction_one_without_gamma_is_the_langevin_sampler(name):
  """``v' = (h/2) S ∇û + sqrt(h τ) ξ``, ``θ' = θ + S v'``: the Langevin step, for every metric."""
  target = lambda x, y: -0.5 * tf.reduce_sum(x**2, -1) - 0.3 * y**2
  cls = getattr(tfa.mcmc, name)
  run = lambda k: tfa.mcmc.sample(k, [tf.ones([4, 3]), tf.ones([4])],
                                  num_results=15, seed=(3, 4), progress=False,
                                  check_temperature=False,
                                  jit_compile=False)[0]
  out = [run(cls(target, 0.2, gamma='none', friction=f, **METRICS[name]))
         for f in (1., None)]
  for a, b in zip(*out):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize('name', sorted(METRICS))
@pytest.mark.slow
def test_friction_one_without_gamma_is_the_langevin_optimizer(name):
  x = np.random.default_rng(0).normal(size=(8, 3)).astype('float32')
  y = x.sum(1, keepdims=True)
  cls = getattr(tfa.keras.optimizers, name)
  weights = []
  for friction in (1., None):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
                              keras.layers.Dense(1)])
    model.compile(cls(1e-3, data_size=8, seed=2, gamma='none',
                      friction=friction, **METRICS[name]), 'mse',
                  run_eagerly=True)
    model.fit(x, y, batch_size=4, epochs=3, shuffle=False, verbose=0)
    weights.append(model.get_weights())
  for a, b in zip(*weights):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.statistical
@pytest.mark.parametrize('h, friction, tau', [
    (1.2, 0.5, 1.), (0.8, 0.5, 0.5), (0.02, 0.1, 1.)])
def test_stationary_covariance_is_the_discrete_chains(h, friction, tau):
  """Variances of ``θ`` and ``v`` over independent chains, within 4.5 standard errors.

  At ``h = 1.2`` and ``0.8`` the chain's variances of ``θ`` are 25% and
  15% above ``τ s²`` and those of ``v`` 67% and 54% above ``τ h/2``, more
  than the tolerance of 10%: the test tells the discrete chain's law from
  the continuous one. At ``h = 0.02`` they are within 1% and 6%.
  """
  s2 = 1.
  chains = int(4000 * stat_scale())
  kernel = tfa.mcmc.SGHMC(lambda x: -0.5 * x**2 / s2, step_size=h,
                          friction=friction, temperature=tau)
  samples, velocity = _sample_with_velocity(kernel, chains)
  exact = _stationary_covariance(h, friction, s2, tau)
  for got, want in ((np.var(samples), exact[0, 0]),
                    (np.var(velocity), exact[1, 1])):
    se = want * np.sqrt(2. / chains)
    assert abs(got - want) < 4.5 * se, (got, want, se)
  if h < 0.1:
    assert abs(exact[0, 0] / (tau * s2) - 1.) < 0.01


def _sample_with_velocity(kernel, chains):
  """The state and velocity of `chains` independent chains after 1000 steps.

  The slowest relaxation here takes about ``2/friction = 20`` steps.
  """
  state = tf.zeros([chains])
  results = kernel.bootstrap_results(state)

  @tf.function(jit_compile=True)
  def run(state, results):
    def body(i, s, r):
      s, r = kernel.one_step(s, r, seed=tf.stack([7, i]))
      return i + 1, s, r
    _, state, results = tf.while_loop(lambda i, *_: i < 1000, body,
                                      (0, state, results))
    return state, results
  state, results = run(state, results)
  return state.numpy(), results.momentum[0].numpy()


def test_bad_friction_and_gradient_noise_are_named():
  with pytest.raises(ValueError, match='friction'):
    tfa.mcmc.SGHMC(lambda x: -x**2, step_size=0.1, friction=0.)
  with pytest.raises(ValueError, match='friction'):
    tfa.keras.optimizers.SGHMC(1e-3, friction=1.5)
  with pytest.raises(ValueError, match='friction'):
    tfa.mcmc.PSGLD(lambda x: -x**2, step_size=0.1, friction=2.)
  with pytest.raises(ValueError, match='friction'):
    tfa.keras.optimizers.ShampooSGRLD(1e-3, friction=-0.1)
  with pytest.raises(ValueError, match='gradient_noise.*below `friction`'):
    tfa.mcmc.SGHMC(lambda x: -x**2, step_size=0.1, friction=0.1,
                   gradient_noise=0.1)


def _mean_square_per_chain(kernel, chains, dims, steps=3000):
  """Each chain's ``mean(θ²)`` over its second half of `steps` steps."""
  state = tf.zeros([chains, dims])
  results = kernel.bootstrap_results(state)

  @tf.function(jit_compile=True)
  def run(state, results):
    def body(i, s, r, total):
      s, r = kernel.one_step(s, r, seed=tf.stack([11, i]))
      later = tf.cast(i >= steps // 2, s.dtype)
      return i + 1, s, r, total + later * tf.reduce_mean(s**2, -1)
    out = tf.while_loop(lambda i, *_: i < steps, body,
                        (0, state, results, tf.zeros([chains])))
    return out[-1] / (steps - steps // 2)
  return run(state, results).numpy()


def _noisy_target(sd):
  """log N(x; 0, I) whose gradient carries N(0, sd²) noise per coordinate."""
  def log_prob(x):
    noise = tf.stop_gradient(sd * tf.random.normal(tf.shape(x)))
    return tf.reduce_sum(-0.5 * x**2 + noise * x, -1)
  return log_prob


@pytest.mark.statistical
def test_sgnht_samples_the_target_through_gradient_noise(gradient_sd=3.):
  """100 independent N(0, 1) coordinates per chain, ``h = 0.02``, gradient noise N(0, 3²).

  The tolerance is 4.5 standard errors of the mean over chains (each chain's
  time average is one independent value) plus 1% for the step (SGHMC's
  exact discrete variance here is 0.07% above 1). With gradient noise of
  sd 3, SGHMC's variance is about 1.45: the thermostat is what keeps
  SGNHT at 1, so the test can fail.
  """
  chains = int(60 * stat_scale())
  target = _noisy_target(gradient_sd)
  got = _mean_square_per_chain(
      tfa.mcmc.SGNHT(target, step_size=0.02, diffusion=0.1), chains, 100)
  se = got.std(ddof=1) / np.sqrt(chains)
  assert abs(got.mean() - 1.) < 4.5 * se + 0.01, (got.mean(), se)
  hot = _mean_square_per_chain(
      tfa.mcmc.SGHMC(target, step_size=0.02, friction=0.1), chains, 100)
  assert hot.mean() > 1.2, hot.mean()
