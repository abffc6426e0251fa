"""Regression that fits its noise: a Gaussian negative log-likelihood and a noise-scale layer.

The loss ``'mse'`` is the Gaussian likelihood with a noise variance fixed at
``K/2`` per output, whatever the scale of the targets: in the targets' own
units the posterior is then far too narrow (or too wide), and so are the
ensemble's intervals. Here the noise scale is part of the model:

* `GaussianNLL`: the loss ``−log N(y; μ, σ²)`` per example, for a model
  whose last axis holds ``K`` means followed by ``K`` log-scales
  ``ρ = log σ``. The samplers then sample the noise with the weights.
* `NoiseScale`: a layer that appends one learnt ``ρ`` per output to a
  model's means (homoscedastic noise), with the prior
  ``ρ ~ N(0, prior_scale²)`` (median ``σ`` of 1; with the default 3, 95%
  of its mass for ``σ`` between ``e⁻⁶`` and ``e⁶``).
* A heteroscedastic head is any layer that outputs the ``K`` log-scales
  itself, e.g. ``Dense(2 * K)``.

`SampleCollector` and `BayesianEnsemble` read the likelihood from the loss
(`tfp_adaptive.keras.likelihoods.GaussianScale`): the predictive
distribution is the mixture of the members' Gaussians.

Example:
  >>> inputs = keras.Input((d,))
  >>> h = keras.layers.Dense(64, activation='relu')(inputs)
  >>> mean = keras.layers.Dense(1)(h)
  >>> model = keras.Model(inputs, tfa.keras.NoiseScale(data_size=n)(mean))
  >>> model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=n),
  ...               loss=tfa.keras.GaussianNLL())
"""

import math

import tensorflow as tf
import keras

from tfp_adaptive import validation
from tfp_adaptive.keras import priors

__all__ = ['GaussianNLL', 'NoiseScale']

_register = keras.saving.register_keras_serializable(package='tfp_adaptive')


@_register
class GaussianNLL(keras.losses.Loss):
  """``−log N(y; μ, σ²)`` summed over the ``K`` outputs of an example.

  ``y_pred[..., :K]`` are the means ``μ`` and ``y_pred[..., K:]`` the
  log-scales ``ρ = log σ`` (``K`` = half the last axis); ``y_true`` holds
  ``K`` targets per example. With the minibatch mean (Keras' default
  reduction) ``N × loss`` is the negative log-likelihood the samplers need.
  """

  likelihood_name = 'gaussian_nll'  # How `likelihoods.from_loss` knows it.

  def __init__(self, name='gaussian_nll', **kwargs):
    super().__init__(name=name, **kwargs)

  def call(self, y_true, y_pred):
    k = y_pred.shape[-1]
    if k is None or k % 2:
      raise ValueError('GaussianNLL needs a last axis of K means and K '
                       'log-scales (an even length); the model outputs shape '
                       '%s. Add a NoiseScale layer, or a Dense(2 * K) head.'
                       % (y_pred.shape,))
    mean, log_scale = y_pred[..., :k // 2], y_pred[..., k // 2:]
    y_true = tf.reshape(tf.cast(y_true, mean.dtype), tf.shape(mean))
    z = (y_true - mean) * tf.exp(-log_scale)
    per_output = log_scale + 0.5 * z * z + 0.5 * math.log(2. * math.pi)
    return tf.reduce_sum(per_output, -1)


@_register
class NoiseScale(keras.layers.Layer):
  """Appends a learnt log noise scale ``ρ = log σ`` (one per output) to the means.

  Input ``[..., K]`` means; output ``[..., 2K]``: the means, then ``ρ``
  broadcast over the batch, as `GaussianNLL` reads them. ``ρ`` is a weight
  like the others, so the samplers sample it, with the prior
  ``ρ ~ N(0, prior_scale²)``.

  Args:
    data_size: ``N`` (>= 1), the optimizer's `data_size` (the prior enters
      the loss as ``−log p(ρ)/N``).
    prior_scale: ``> 0``, the prior's standard deviation of ``log σ``.
    initial_scale: ``σ > 0`` at the start.
  """

  def __init__(self, data_size, prior_scale=3., initial_scale=1., **kwargs):
    super().__init__(**kwargs)
    validation.check_number('data_size', data_size, low=1.)
    self.data_size = data_size
    self.prior_scale = validation.check_number('prior_scale', prior_scale,
                                               low=0., low_open=True)
    self.initial_scale = validation.check_number(
        'initial_scale', initial_scale, low=0., low_open=True)

  def build(self, input_shape):
    self.log_scale = self.add_weight(
        name='log_scale', shape=(input_shape[-1],),
        initializer=keras.initializers.Constant(math.log(self.initial_scale)),
        regularizer=priors.GaussianPrior(self.data_size, self.prior_scale))

  def call(self, mean):
    log_scale = tf.cast(self.log_scale, mean.dtype) + tf.zeros_like(mean)
    return tf.concat([mean, log_scale], -1)

  def compute_output_shape(self, input_shape):
    last = input_shape[-1]
    return tuple(input_shape[:-1]) + (None if last is None else 2 * last,)

  def get_config(self):
    config = super().get_config()
    config.update(data_size=self.data_size, prior_scale=self.prior_scale,
                  initial_scale=self.initial_scale)
    return config
