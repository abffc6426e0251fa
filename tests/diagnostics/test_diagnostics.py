"""ArviZ export of chains and ensembles, PSIS-LOO against held-out data, and the configurational temperature.

Acceptance points, each derived from Monte Carlo error:

- 4 corrected-PSGLD chains on a correlated 2-D Gaussian: ArviZ's R-hat
  < 1.05 and posterior means within 4 of ArviZ's Monte Carlo standard
  errors of the truth.
- A Bayesian logistic regression on digits: PSIS-LOO's elpd per point
  agrees with the held-out log predictive density within 3 combined
  standard errors (LOO's own, and the held-out mean's).
- SGLD on a Bayesian linear model at τ = 1 and 0.5: the epoch-averaged
  configurational temperature after burn-in reads τ within 25%; dropping Γ
  from pSGLD on a target where that is biased moves it, the corrected
  sampler does not.
"""

import warnings

import arviz as az
import numpy as np
import pytest
import tensorflow as tf
import keras
from sklearn import datasets

import tfp_adaptive as tfa
from tests.conftest import in_ci
from tests.conftest import repeated

COV = np.array([[1., 0.8], [0.8, 1.]], np.float32)
PREC = np.linalg.inv(COV)
MEAN = np.array([1., -2.], np.float32)


def _gaussian(x):
  d = x - MEAN
  return -0.5 * tf.reduce_sum(d * tf.linalg.matvec(PREC, d), -1)


@pytest.mark.statistical
def test_chains_to_arviz_rhat_and_means():
  kernel = tfa.mcmc.PSGLD(_gaussian, step_size=0.05, diagonal_bias=1.,
                          preconditioner_decay_rate=0.9, gamma='corrected')
  start = tf.constant(np.random.default_rng(0).normal(size=(4, 2)) * 3.,
                      tf.float32)
  samples, trace, _ = tfa.mcmc.sample(
      kernel, start, num_results=4000, num_burnin_steps=2000,
      num_steps_between_results=4, seed=(1, 2), progress=False,
      trace_fn=lambda _, r: r)
  idata = tfa.to_arviz(samples, trace)
  assert idata.posterior['x'].shape == (4, 4000, 2)
  stats = idata.sample_stats
  assert set(stats.data_vars) >= {'lp', 'num_nonfinite', 'num_unmoved',
                                  'step_size', 'gamma_norm'}
  np.testing.assert_allclose(stats['step_size'].values, 0.05)
  assert np.all(stats['gamma_norm'].values > 0)
  summary = az.summary(idata, var_names=['x'])
  assert np.all(summary['r_hat'] < 1.05), summary
  mcse = summary['mcse_mean'].to_numpy()
  assert np.all(np.abs(summary['mean'].to_numpy() - MEAN) < 4 * mcse + 0.02
                ), summary  # 0.02: the O(h) bias of the mean, bounded.


def test_structured_states_round_trip():
  draws = {'mu': np.zeros([10, 3]), 'theta': np.ones([10, 3, 8])}
  idata = tfa.to_arviz(draws)
  assert idata.posterior['theta'].shape == (3, 10, 8)
  named = tfa.to_arviz([np.zeros([10, 3]), np.ones([10, 3, 2])],
                       names=['a', 'b'])
  assert set(named.posterior.data_vars) == {'a', 'b'}
  single = tfa.to_arviz(np.arange(10.), chain_axis=None)
  np.testing.assert_array_equal(single.posterior['x'].values[0],
                                np.arange(10.))
  first = tfa.to_arviz(np.zeros([3, 10, 2]), chain_axis=0)
  assert first.posterior['x'].shape == (3, 10, 2)
  with pytest.raises(ValueError, match='names'):
    tfa.to_arviz([np.zeros([10, 3])] * 2, names=['a'])


@pytest.mark.statistical
def test_ensemble_loo_agrees_with_held_out_likelihood():
  d = datasets.load_digits()
  x = (d.data / 16.).astype('float32')
  y = d.target
  perm = np.random.default_rng(0).permutation(len(x))
  x, y = x[perm], y[perm]
  xtr, ytr, xte, yte = x[:900], y[:900], x[900:], y[900:]
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
  tfa.keras.priors.add_gaussian_prior(model, data_size=900, scale=1.)
  model.compile(tfa.keras.optimizers.SGLD(2e-4, data_size=900, seed=0),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=True)
  collector = tfa.keras.SampleCollector(burnin=600, thinning=15)
  data, steps = repeated(xtr, ytr, batch_size=90)
  model.fit(data, steps_per_epoch=steps, epochs=150, verbose=0,
            callbacks=[collector])
  ens = collector.ensemble
  loo = az.loo(ens.to_arviz(xtr, ytr, weights=False))
  n = len(ytr)
  held = ens.log_likelihood_points(xte, yte)
  se_held = held.std(ddof=1) / np.sqrt(len(held))
  diff = loo.elpd_loo / n - held.mean()
  assert abs(diff) < 3 * np.hypot(loo.se / n, se_held), (
      loo.elpd_loo / n, loo.se / n, held.mean(), se_held)


def _linear_problem(n=1000, dim=50, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, dim)).astype('float32')
  w = rng.normal(size=(dim, 1)).astype('float32')
  y = x @ w + rng.normal(size=(n, 1)).astype('float32') * np.sqrt(0.5)
  return x, y


def _temperatures(optimizer, epochs=150, batch_size=250, burnin=75,
                  min_steps=500, full_batch_steps=None):
  """Per-key means of the monitor's readings after burn-in.

  With `full_batch_steps`, every step sees all the data and an epoch is
  that many steps in one compiled call (the monitor sums over an epoch's
  steps, so this reads the same chain as one step per epoch, with less
  Keras overhead per step).
  """
  x, y = _linear_problem()
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((50,)), keras.layers.Dense(1)])
  tfa.keras.priors.add_gaussian_prior(model, data_size=len(x), scale=1.)
  model.compile(optimizer, 'mse', jit_compile=True,
                steps_per_execution=full_batch_steps or 1)
  monitor = tfa.keras.SamplerMonitor(
      burnin_epochs=burnin, min_steps=min_steps,
      batches='independent' if full_batch_steps else None)
  callbacks = [tfa.keras.SampleCollector(monitor=monitor)]
  if full_batch_steps:
    data = tf.data.Dataset.from_tensors((x, y)).repeat()
    history = model.fit(data, steps_per_epoch=full_batch_steps,
                        epochs=epochs, verbose=0, callbacks=callbacks)
  else:
    data, steps = repeated(x, y, batch_size)
    history = model.fit(data, steps_per_epoch=steps, epochs=epochs,
                        verbose=0, callbacks=callbacks)
  assert monitor.temperatures['temperature'] == history.history[
      'temperature']  # Logged to Keras' history as well.
  return {k: np.mean(v[burnin:]) for k, v in monitor.temperatures.items()}


# CI: τ = 0.5, that the reading follows τ (every other temperature test
# reads τ = 1); τ = 1 here at full size.
@pytest.mark.statistical
@pytest.mark.parametrize('tau', in_ci([1., 0.5], (0.5,)))
def test_temperature_reads_tau_for_sgld(tau):
  """SGLD at a step where the minibatch noise heats it by a few percent only.

  The per-epoch estimate has a relative sd of about sqrt(2/D)/2 (D = 51,
  four correlated steps per epoch); 75 epochs after burn-in give about
  0.02, so the 25% bound is far from the noise. (At 4x this step the
  minibatch noise heats SGLD by about 15%, which the estimate shows.)
  """
  temps = _temperatures(tfa.keras.optimizers.SGLD(
      2e-5, data_size=1000, temperature=tau, seed=0))
  assert abs(temps['temperature'] - tau) < 0.25 * tau, temps
  layer, = [k for k in temps if k.startswith('temperature/')]
  assert abs(temps[layer] - tau) < 0.25 * tau, temps


@pytest.mark.statistical
def test_temperature_detects_the_bias_of_dropping_gamma():
  """Full-batch pSGLD (decay 0.9): without Γ the chain samples p·M⁻¹, hotter than p.

  300 steps after burn-in (10 steps an epoch): the noise of the average
  is about 0.03; without Γ it reads about 1.3, with the corrected Γ within
  the O(h) bias of 1.
  """
  def run(gamma):
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      temps = _temperatures(tfa.keras.optimizers.PSGLD(
          2e-5, data_size=1000, seed=0, gamma=gamma,
          preconditioner_decay_rate=0.9, diagonal_bias=1e-3, burnin=0),
                            epochs=60, burnin=30, min_steps=200,
                            full_batch_steps=10)
    drift = [w for w in caught if 'configurational temperature' in
             str(w.message)]
    return temps['temperature'], drift
  hot, warned = run('none')
  assert hot > 1.2 and warned, hot
  exact, warned = run('corrected')
  assert abs(exact - 1.) < 0.1 and not warned, exact
