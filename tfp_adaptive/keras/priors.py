"""Priors for Keras models, entering the loss as ``-log p(θ) / N``.

With a loss that is the minibatch mean negative log-likelihood, adding
``-log p(θ)/N`` makes ``N × loss`` the negative log-posterior that the
SG-MCMC optimizers sample (TFP's pSGLD convention, ``data_size = N``).

* `GaussianPrior`: ``θ ~ N(0, σ²)`` per tensor, a `keras.regularizers.Regularizer`
  (``σ`` fixed, or ``scale='fan_in'`` for ``σ = 1/sqrt(fan_in)``).
* `add_horseshoe_prior`: ``w ~ N(0, τ²)``, ``τ ~ HalfCauchy(0, b)`` with one
  scale ``τ`` per weight tensor, sampled jointly with the weights through
  ``ρ = log τ`` (Jacobian included), as in Yu et al. (2023)'s MNIST runs.
"""

import math

import numpy as np
import tensorflow as tf
import keras

from tfp_adaptive import validation
from tfp_adaptive.core import tensors

__all__ = ['GaussianPrior', 'HorseshoePrior', 'add_gaussian_prior',
           'add_horseshoe_prior']

_SCALE_NAME = 'horseshoe_log_scale'
_register = keras.saving.register_keras_serializable(package='tfp_adaptive')


def _fan_in(shape):
  if len(shape) <= 1:
    return max(int(np.prod(shape)), 1)
  return int(np.prod(shape[:-1]))


@_register
class GaussianPrior(keras.regularizers.Regularizer):
  """``-log N(θ; 0, σ²)/N`` summed over a tensor (constants dropped).

  Args:
    data_size: ``N`` (>= 1), the optimizer's `data_size`.
    scale: ``σ > 0``, or ``'fan_in'`` for ``σ = 1/sqrt(fan_in)`` of the
      tensor (biases: their length).
  """

  def __init__(self, data_size, scale=1.):
    validation.check_number('data_size', data_size, low=1.)
    if scale != 'fan_in':
      validation.check_number('scale', scale, low=0., low_open=True)
    self.data_size = data_size
    self.scale = scale

  def __call__(self, x):
    sigma = (1. / math.sqrt(_fan_in(x.shape)) if self.scale == 'fan_in'
             else self.scale)
    # `part_event_dot`: a matrix-vector product for large kernels (faster
    # under XLA on CPU than its reduction; `tfp_adaptive.core.tensors`).
    return tensors.part_event_dot(x, x, 0) / (2. * sigma ** 2 * self.data_size)

  def get_config(self):
    return {'data_size': self.data_size, 'scale': self.scale}


def _check_model(model):
  if not isinstance(model, keras.Model):
    raise TypeError('`model` must be a keras.Model. Received: %r' % (model,))
  if not model.built:
    raise ValueError('`model` must be built (call it on a batch, or give '
                     'it an Input) before a prior is added.')


def _kernels(model):
  for layer in model.layers:
    if hasattr(layer, 'layers'):
      yield from _kernels(layer)
    kernel = getattr(layer, 'kernel', None)
    if kernel is not None:
      yield layer, kernel


def add_gaussian_prior(model, data_size, scale='fan_in', biases=True):
  """Puts a `GaussianPrior` on every trainable weight of a built model.

  Weights that already have a regularizer (e.g. a horseshoe prior) and the
  horseshoe scales are left alone; ``biases=False`` also skips 1-D weights.
  """
  _check_model(model)
  validation.check_bool('biases', biases)
  prior = GaussianPrior(data_size, scale)
  for v in model.trainable_weights:
    if v.regularizer is not None or v.name == _SCALE_NAME:
      continue
    if biases or len(v.shape) > 1:
      v.regularizer = prior
  return model


class HorseshoePrior(keras.regularizers.Regularizer):
  """``-log p(w | τ) - log p(ρ)`` over ``N`` for one weight tensor, ``τ = e^ρ``.

  ``p(w|τ) = N(0, τ²)``, ``τ ~ HalfCauchy(0, global_scale)``, and the
  density of ``ρ = log τ`` carries the Jacobian ``τ``.
  """

  def __init__(self, log_scale, data_size, global_scale):
    self.log_scale = log_scale
    self.data_size = data_size
    self.global_scale = global_scale

  def __call__(self, w):
    rho = tf.cast(tf.convert_to_tensor(self.log_scale), w.dtype)
    n = tf.cast(tf.size(w), w.dtype)
    b = tf.cast(self.global_scale, w.dtype)
    nll_w = n * rho + tensors.part_event_dot(w, w, 0) * tf.exp(-2. * rho) / 2.
    # -log HalfCauchy(e^ρ; b) - ρ, constants dropped; log(1 + e^{2ρ}/b²) as
    # a softplus, which neither overflows (e^{2ρ} is inf past ρ ≈ 44 in
    # float32) nor loses its gradient far out in ρ.
    nll_rho = tf.nn.softplus(2. * (rho - tf.math.log(b))) - rho
    return (nll_w + nll_rho) / tf.cast(self.data_size, w.dtype)


def add_horseshoe_prior(model, data_size, global_scale=1., init_scale=None):
  """Adds a horseshoe prior with a sampled per-tensor scale to each kernel.

  Each layer with a ``kernel`` gets a trainable scalar ``horseshoe_log_scale``
  (``ρ = log τ``, initialised at ``log(1/sqrt(fan_in))`` unless
  `init_scale`); the kernel's regularizer becomes the negative log joint
  density of ``(w, ρ)`` over ``N``, so an SG-MCMC optimizer samples ``w`` and
  ``τ`` jointly. Biases are left to `add_gaussian_prior`.

  Call on a built model, before `compile`/`fit`. A model rebuilt from its
  config does not have the scale variables (samples hold them; a
  `BayesianEnsemble` only sets the variables its model has).
  """
  _check_model(model)
  validation.check_number('data_size', data_size, low=1.)
  validation.check_number('global_scale', global_scale, low=0., low_open=True)
  if init_scale is not None:
    validation.check_number('init_scale', init_scale, low=0., low_open=True)
  for layer, kernel in _kernels(model):
    scale = init_scale or 1. / math.sqrt(_fan_in(kernel.shape))
    # Keras locks a built layer's state; it unlocks it the same way to add
    # quantization variables to a built layer.
    layer._tracker.unlock()  # pylint: disable=protected-access
    try:
      rho = layer.add_weight(
          shape=(), name=_SCALE_NAME, dtype=kernel.dtype,
          initializer=keras.initializers.Constant(math.log(scale)))
    finally:
      layer._tracker.lock()  # pylint: disable=protected-access
    kernel.regularizer = HorseshoePrior(rho, data_size, global_scale)
  return model
