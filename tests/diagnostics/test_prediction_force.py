"""The force along predictions (`tfp_adaptive.diagnostics.prediction_force`), in kernels.

A Gaussian vector and a log-normal scale, the scale sampled through
`tfp.bijectors.Exp` as a TFP user would, and curved predictions
``f_j = tanh(w_j·θ/4 + c_j·log σ)``, read on exact draws: balanced and
silent; on draws moved by 0.3 sds along one coordinate: warned on, with
the side of the moved means. The Hutchinson ``Δf`` averages to the
analytic one, ``(|w|²/16 + c²)·tanh''``, in the sampled (log) space; without
it the exact draws would read off. A linear prediction along an
eigendirection reads the shift of its mean exactly.
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from tfp_adaptive.diagnostics import mean_force
from tfp_adaptive.diagnostics import prediction_force
from tfp_adaptive.mcmc import temperature as temperature_mcmc

tfd = tfp.distributions
D, K, DRAWS, CHAINS = 12, 8, 128, 64
SDS = np.linspace(0.5, 2., D)
MEANS = np.linspace(-1., 1., D)
LOG_SCALE_MEAN, LOG_SCALE_SD = 0.3, 0.5
W = np.random.default_rng(0).normal(size=(D, K)).astype(np.float32)
C = np.linspace(-1., 1., K).astype(np.float32)


def _log_prob(theta, scale):
  return (tf.reduce_sum(tfd.Normal(MEANS.astype(np.float32),
                                   SDS.astype(np.float32)).log_prob(theta), -1)
          + tfd.LogNormal(LOG_SCALE_MEAN, LOG_SCALE_SD).log_prob(scale))


def _predictions(theta, scale):
  return tf.tanh(theta @ W / 4. + tf.math.log(scale)[..., None] * C)


def _kernel():
  return tfp.mcmc.TransformedTransitionKernel(
      tfa.mcmc.SGLD(_log_prob, 1e-3),
      [tfp.bijectors.Identity(), tfp.bijectors.Exp()])


def _draws(moved=0., seed=1):
  rng = np.random.default_rng(seed)
  theta = MEANS + SDS * rng.normal(size=(DRAWS, CHAINS, D))
  theta[..., 0] += moved * SDS[0]
  scale = np.exp(LOG_SCALE_MEAN + LOG_SCALE_SD * rng.normal(
      size=(DRAWS, CHAINS)))
  return [tf.constant(theta, tf.float32), tf.constant(scale, tf.float32)]


def _read(draws, predictions=_predictions):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    readings = tfa.mcmc.check_temperature(
        _kernel(), draws, predictions=predictions, seed=(2, 3))
  return readings, [str(w.message) for w in caught
                    if issubclass(w.category, UserWarning)]


@pytest.mark.slow
def test_exact_draws_balance_and_are_silent():
  """Predictions in float64 of a float32 state (the other tests' are float32)."""
  readings, said = _read(_draws(), lambda *parts: tf.cast(
      _predictions(*parts), tf.float64))
  force = readings['predictions']
  assert force.size == K and force.interval_z == mean_force.interval_z(
      K, force.effective_size - 1.)
  assert abs(force.shift) < force.interval_z * force.standard_error, force
  assert mean_force.verdict(force) == 'accurate', force
  assert not said, said


@pytest.mark.slow
def test_draws_moved_along_a_coordinate_are_told_with_their_side():
  draws = _draws(0.3)
  readings, said = _read(draws)
  force = readings['predictions']
  assert mean_force.verdict(force) == 'off', force
  # The side of the moved means of that prediction, from the same draws.
  moved = _predictions(*draws)[..., force.coordinate]
  unmoved = _predictions(*_draws())[..., force.coordinate]
  side = np.sign(float(tf.reduce_mean(moved - unmoved)))
  assert np.sign(force.shift) == side, force
  told = [m for m in said if 'the predictions' in m]
  assert len(told) == 1, said
  assert 'prediction %d ' % force.coordinate in told[0], told
  assert ('above' if side > 0 else 'below') in told[0], told
  assert '`step_size`' in told[0], told


@pytest.mark.slow
def test_the_laplacian_is_the_analytic_one_and_is_needed():
  """The terms in the sampled space: the Hutchinson ``Δf`` averages to
  ``(|w|²/16 + c²)·tanh''(u)`` over the draws (within four standard errors),
  and without it the exact draws read far off."""
  kernel = _kernel()
  draws = _draws()
  inner, parts, to_outer = temperature_mcmc._sampled_space(kernel, draws)  # pylint: disable=protected-access
  grads = [tf.convert_to_tensor(g) for g in temperature_mcmc._virials(  # pylint: disable=protected-access
      (inner.target_log_prob_fn, draws), parts, (2, 3))[2]]
  f, force, laplacian, squared = temperature_mcmc._prediction_terms(  # pylint: disable=protected-access
      _predictions, to_outer, parts, grads, (4, 5), 1,
      temperature_mcmc._spread_scales(parts, 1))  # pylint: disable=protected-access
  tanh = f  # The predictions are the tanh themselves.
  analytic = ((np.sum(W.astype(np.float64) ** 2, 0) / 16. + C ** 2)
              * (-2. * tanh * (1. - tanh ** 2)))
  error = laplacian - analytic
  se = error.reshape(-1, K).std(0) / np.sqrt(DRAWS * CHAINS)
  assert np.all(np.abs(error.mean((0, 1))) < 4. * se), (
      error.mean((0, 1)), se)
  without = prediction_force.read(f, force, np.zeros_like(laplacian),
                                  squared)
  assert mean_force.verdict(without) == 'off', without


def test_a_linear_prediction_along_an_eigendirection_reads_its_shift():
  """Exact terms of a correlated Gaussian: ``f = vᵀθ`` with ``v`` an
  eigenvector of the curvature reads the shift of ``f``'s mean in its sds
  (within three standard errors; the draws' own mean error included)."""
  rng = np.random.default_rng(3)
  a = rng.normal(size=(6, 6))
  precision = a @ a.T + 6. * np.eye(6)
  cov = np.linalg.inv(precision)
  _, vectors = np.linalg.eigh(precision)
  shift = 0.2
  v = vectors[:, :3].T  # Three predictions.
  sd = np.sqrt(np.einsum('kd,de,ke->k', v, cov, v))
  theta = rng.multivariate_normal(np.zeros(6), cov, size=(512, 16))
  theta += shift * sd[0] * v[0]
  f = theta @ v.T
  force = (theta @ precision) @ v.T  # ∇f·∇U, U = θᵀPθ/2.
  reading = prediction_force.read(f, force, np.zeros_like(f),
                                  np.ones_like(f))  # |v| = 1, Δf = 0.
  assert reading.coordinate == 0, reading
  assert abs(reading.shift - shift) < 3. * reading.standard_error, reading


def test_predictions_must_be_callable():
  with pytest.raises(TypeError, match='`predictions`'):
    tfa.mcmc.check_temperature(_kernel(), _draws(), predictions='logits')
  with pytest.raises(TypeError, match='`predictions`'):
    tfa.mcmc.sample(tfa.mcmc.SGLD(lambda x: -x ** 2, 0.1), tf.zeros([2]),
                    10, predictions=[1.])


@pytest.mark.parametrize('kernel, check', [
    (tfa.mcmc.SGLD(lambda x: -x ** 2, 0.1), False),
    (tfp.mcmc.RandomWalkMetropolis(lambda x: -x ** 2), True)])
def test_predictions_that_would_not_be_read_are_refused(kernel, check):
  """`sample` reads predictions with its temperature check, which runs for
  our kernels: given predictions it would not read, it says so."""
  with pytest.raises(ValueError, match='`predictions`.*check_temperature'):
    tfa.mcmc.sample(kernel, tf.zeros([2]), 10, check_temperature=check,
                    predictions=tf.tanh, progress=False)


@pytest.mark.slow
def test_sample_reads_the_predictions_it_is_given():
  """`tfa.mcmc.sample(..., predictions=f)` reads them at the end: a step too
  long for a stiff coordinate moves nothing here (a Gaussian's SGLD mean is
  exact), so the run is silent, and `f` was evaluated."""
  calls = []

  def predictions(x):
    calls.append(1)
    return tf.tanh(x)

  target = tfd.Normal(0., [1., 2.]).log_prob
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    tfa.mcmc.sample(tfa.mcmc.SGLD(lambda x: tf.reduce_sum(target(x), -1),
                                  0.05),
                    tf.zeros([16, 2]), 500, num_burnin_steps=200,
                    seed=(1, 2), progress=False, predictions=predictions)
  assert calls
  assert not [w for w in caught if 'predictions' in str(w.message)]
