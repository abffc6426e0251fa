"""The samplers' default prior: which weights it covers, what it says, and that it is the posterior's prior in `fit`, in custom loops and in Γ."""

import logging
import warnings

import numpy as np
import pytest
import tensorflow as tf
import keras

import tfp_adaptive as tfa
from tfp_adaptive.keras import priors
from tests.conftest import no_warning


def _zero_loss(y_true, y_pred):
  """A likelihood that does not depend on the weights: the posterior is the prior."""
  del y_true
  return 0. * keras.ops.mean(y_pred)


def test_it_covers_the_weights_without_a_regularizer_and_says_so_once(caplog):
  model = keras.Sequential([
      keras.Input((3,)),
      keras.layers.Dense(4, kernel_regularizer=priors.GaussianPrior(10, 1.),
                         name='first'),
      keras.layers.Dense(2, name='second')])
  opt = tfa.keras.optimizers.SGLD(1e-3, data_size=10)
  with caplog.at_level(logging.INFO, logger='tfp_adaptive'):
    opt.build(model.trainable_variables)
  lines = [r.getMessage() for r in caplog.records if r.name == 'tfp_adaptive']
  assert len(lines) == 1, lines
  assert '3 of 4 variables' in lines[0] and 'second/kernel' in lines[0]
  assert 'first/kernel' not in lines[0]
  # Variance 100/fan_in: fan_in 4 for the (4,) bias and the (4, 2) kernel,
  # 2 for the (2,) bias; the regularized kernel has none from the optimizer.
  expected = [None, 1. / (100. / 4 * 10), 1. / (100. / 4 * 10),
              1. / (100. / 2 * 10)]
  got = opt._prior_precisions  # pylint: disable=protected-access
  assert got[0] is None
  np.testing.assert_allclose(got[1:], expected[1:], rtol=1e-12)


def test_flat_warns_on_keras_variables_without_a_prior_and_only_then():
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  with pytest.warns(UserWarning, match="prior='flat'.*may be improper"):
    tfa.keras.optimizers.SGLD(1e-3, data_size=10, prior='flat').build(
        model.trainable_variables)
  priors.add_gaussian_prior(model, 10)
  with no_warning('improper'):
    tfa.keras.optimizers.SGLD(1e-3, data_size=10, prior='flat').build(
        model.trainable_variables)
    # A hand-written log-density over tf.Variables may hold its prior.
    tfa.keras.optimizers.SGLD(1e-3, data_size=10, prior='flat').build(
        [tf.Variable(tf.zeros([3]))])




@pytest.mark.statistical
def test_a_likelihood_that_ignores_the_weights_samples_the_default_prior():
  """1000 weights of fan-in 2: each N(0, 50) under the prior, i.i.d.

  SGLD with ``h = 1`` on a Gaussian of precision ``λ = 1/50`` has the
  stationary variance ``1/(λ(1 - hλ/4))`` (0.5% above 50) and forgets its
  start in ``1/(hλ) = 50`` steps; 600 steps leave none of it. The
  variance over the 1000 coordinates has a relative standard error of
  ``sqrt(2/1000)``. Without the prior the weights random-walk to a
  variance of about 600.
  """
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((2,)),
                            keras.layers.Dense(1000, use_bias=False)])
  model.compile(tfa.keras.optimizers.SGLD(1., data_size=10, seed=3),
                _zero_loss, steps_per_execution=100, jit_compile=True)
  x = np.zeros((6000, 2), 'float32')  # 600 steps in one epoch.
  model.fit(x, np.zeros((6000, 1), 'float32'), batch_size=10, epochs=1,
            verbose=0)
  w = model.weights[0].numpy().ravel()
  lam, h = 1. / 50., 1.
  expected = 1. / (lam * (1. - h * lam / 4.))
  assert abs(np.var(w) / expected - 1.) < 4. * np.sqrt(2. / w.size), (
      np.var(w), expected)


def _compiled(optimizer_fn, explicit, seed=0):
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((3,)),
                            keras.layers.Dense(5, activation='tanh'),
                            keras.layers.Dense(1)])
  if explicit:  # The same prior as a regularizer, and none from the optimizer.
    priors.add_gaussian_prior(model, 20, 'fan_in', gain=priors.DEFAULT_GAIN)
  model.compile(optimizer_fn('flat' if explicit else 'default'), 'mse')
  return model


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(20, 3)).astype('float32')
  return x, np.sin(x.sum(1, keepdims=True)).astype('float32')


@pytest.mark.slow
@pytest.mark.parametrize('gamma', ['none', 'corrected'])
def test_the_default_prior_is_its_regularizer_in_fit_with_and_without_gamma(
    gamma):
  """The same steps as `GaussianPrior(N, 'fan_in', DEFAULT_GAIN)` on every weight.

  With Γ the metric's derivative must see the prior's curvature too: a
  default prior added to the drift only would differ here.
  """
  x, y = _data()
  make = lambda prior: tfa.keras.optimizers.PSGLD(
      1e-2, data_size=20, preconditioner_decay_rate=0.9, diagonal_bias=1e-2,
      gamma=gamma, prior=prior, seed=7)
  weights = []
  for explicit in (False, True):
    model = _compiled(make, explicit)
    if gamma != 'none':
      tfa.keras.enable_gamma(model)
    model.fit(x, y, batch_size=5, epochs=3, shuffle=False, verbose=0)
    weights.append([w.numpy() for w in model.weights])
  flat = _compiled(lambda _: make('flat'), False)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # prior='flat' on bare weights.
    if gamma != 'none':
      tfa.keras.enable_gamma(flat)
    flat.fit(x, y, batch_size=5, epochs=3, shuffle=False, verbose=0)
  for a, b in zip(*weights):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-6)
  assert not all(np.allclose(a, w.numpy(), atol=1e-4)
                 for a, w in zip(weights[0], flat.weights))


@pytest.mark.slow
def test_a_custom_loop_takes_the_steps_of_fit():
  """keras.io's custom loop (GradientTape, apply_gradients) gets the default prior too."""
  x, y = _data()
  make = lambda prior: tfa.keras.optimizers.SGLD(1e-2, data_size=20,
                                                 prior=prior, seed=7)
  fitted = _compiled(make, False)
  fitted.fit(x, y, batch_size=5, epochs=2, shuffle=False, verbose=0)
  model = _compiled(make, False)
  loss_fn = keras.losses.MeanSquaredError()

  @tf.function
  def step(xb, yb):
    with tf.GradientTape() as tape:
      loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    model.optimizer.apply_gradients(zip(grads, model.trainable_weights))
  for _ in range(2):
    for xb, yb in tf.data.Dataset.from_tensor_slices((x, y)).batch(5):
      step(xb, yb)
  for a, b in zip(fitted.weights, model.weights):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=2e-5, atol=1e-6)
