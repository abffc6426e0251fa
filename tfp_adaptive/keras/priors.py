"""Priors for Keras models, entering the loss as ``-log p(θ) / N``.

With a loss that is the minibatch mean negative log-likelihood, adding
``-log p(θ)/N`` makes ``N × loss`` the negative log-posterior that the
SG-MCMC optimizers sample (TFP's pSGLD convention, ``data_size = N``).

* `GaussianPrior`: ``θ ~ N(0, σ²)`` per tensor, a `keras.regularizers.Regularizer`
  (``σ`` fixed, or ``scale='fan_in'`` for ``σ = gain/sqrt(fan_in)``).
* `default_prior`: the prior the samplers put on every weight that has no
  regularizer (``prior='default'`` of `tfp_adaptive.keras.optimizers`):
  `GaussianPrior` with ``scale='fan_in'`` and ``gain = DEFAULT_GAIN``.
* `HorseshoePrior` / `add_horseshoe_prior`: heavy-tailed shrinkage with one
  scale ``τ`` per weight tensor, ``w | τ ~ N(0, τ² I)``, the scale
  integrated out analytically (a marginalised scale, as Ghosh et al. 2019
  and Yu et al. 2023 use to avoid the funnel of a sampled scale).

Why the scale is integrated out, and why not under a half-Cauchy: with the
textbook half-Cauchy on ``τ`` sampled jointly with the ``D`` weights of a
tensor, the joint density has the factor ``τ^{-D}`` and its loss
``D·log τ / N`` falls without bound as ``τ → 0`` with the weights, a funnel
that a chain with a finite step falls into (on a convolutional network with
an 18k-weight kernel the loss ran to −60 and every member predicted a
constant). Integrating out ``τ`` removes the funnel. The half-Cauchy still
puts positive density at ``τ = 0``, so its marginal has a pole at ``w = 0``
(``‖w‖^{1-D}``); the hyperprior used here, ``τ² ~ InvGamma(1/2, s²/2)``
(``τ = s/|z|``, ``z`` standard normal), has the half-Cauchy's tail
``p(τ) ∝ τ^{-2}`` but vanishes at ``τ → 0`` faster than any power: the
scale's floor. The marginal is the multivariate Cauchy
``p(w) ∝ (s² + ‖w‖²)^{-(D+1)/2}``, whose negative log-density is smooth,
bounded below by its value at 0 and has a bounded gradient.
"""

import math

import numpy as np
import tensorflow as tf
import keras

from tfp_adaptive import validation
from tfp_adaptive.core import tensors

__all__ = ['DEFAULT_GAIN', 'GaussianPrior', 'RELU_GAIN', 'HorseshoePrior',
           'add_gaussian_prior', 'add_horseshoe_prior', 'default_prior']

#: The default prior's ``σ`` is ``DEFAULT_GAIN / sqrt(fan_in)``: a weight's
#: prior variance is ``100 / fan_in``, 50 times He's initialisation variance.
#: Fan-in priors as tight as He's make small-data ensembles under-confident
#: at temperature 1, and the ensemble of a chain that has reached its
#: stationary distribution grows better calibrated as the variance widens
#: from ``50/fan_in`` to ``100/fan_in``; wider priors take longer to settle
#: (guide "Keras training and the Bayesian ensemble", section "Priors").
DEFAULT_GAIN = 10.

#: ``gain`` of `add_gaussian_prior` for regression networks: ``N(0, 2/fan_in)``
#: keeps the scale of a ReLU layer's inputs (He's variance), so that with
#: standardised targets the prior predictive has the targets' scale. The
#: default prior, made for logits, draws functions far wider than that
#: (guide "Keras training and the Bayesian ensemble", "Regression that fits
#: its noise").
RELU_GAIN = math.sqrt(2.)

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
    scale: ``σ > 0``, or ``'fan_in'`` for ``σ = gain/sqrt(fan_in)`` of the
      tensor (the product of all but its last axis; a bias: its length).
    gain: ``> 0``, multiplies the ``'fan_in'`` scale.
  """

  def __init__(self, data_size, scale=1., gain=1.):
    validation.check_number('data_size', data_size, low=1.)
    if scale != 'fan_in':
      validation.check_number('scale', scale, low=0., low_open=True)
    validation.check_number('gain', gain, low=0., low_open=True)
    self.data_size = data_size
    self.scale = scale
    self.gain = gain

  def sigma(self, shape):
    """``σ`` of a tensor of `shape`."""
    if self.scale == 'fan_in':
      return self.gain / math.sqrt(_fan_in(shape))
    return self.scale

  def precision_over_n(self, shape):
    """``1/(σ² N)``: the loss's gradient is this times the tensor."""
    return 1. / (self.sigma(shape) ** 2 * self.data_size)

  def __call__(self, x):
    return gaussian_loss(x, self.precision_over_n(x.shape))

  def get_config(self):
    return {'data_size': self.data_size, 'scale': self.scale,
            'gain': self.gain}


def gaussian_loss(x, precision_over_n):
  """``(c/2)·‖x‖²``: a zero-mean Gaussian prior's ``-log p(x)/N`` up to a constant, ``c = 1/(N σ²)``.

  `part_event_dot`: a matrix-vector product for large kernels (faster
  under XLA on CPU than its reduction; `tfp_adaptive.core.tensors`).
  """
  return tensors.part_event_dot(x, x, 0) * (0.5 * precision_over_n)


def default_prior(data_size):
  """The prior of weights without a regularizer: ``N(0, DEFAULT_GAIN²/fan_in)``.

  The samplers of `tfp_adaptive.keras.optimizers` put it on every variable
  that has no regularizer (``prior='default'``), in `fit` and in custom
  loops alike.
  """
  return GaussianPrior(data_size, 'fan_in', DEFAULT_GAIN)


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


def add_gaussian_prior(model, data_size, scale='fan_in', biases=True,
                       gain=1.):
  """Puts a `GaussianPrior(data_size, scale, gain)` on every trainable weight of a built model.

  Weights that already have a regularizer (e.g. a horseshoe prior) are left
  alone; ``biases=False`` also skips 1-D weights, which then keep the
  samplers' default prior (`default_prior`).
  """
  _check_model(model)
  validation.check_bool('biases', biases)
  prior = GaussianPrior(data_size, scale, gain)
  for v in model.trainable_weights:
    if v.regularizer is not None:
      continue
    if biases or len(v.shape) > 1:
      v.regularizer = prior
  return model


@_register
class HorseshoePrior(keras.regularizers.Regularizer):
  """``(D+1)/(2N) · log(1 + ‖w‖²/s²)``: a tensor's horseshoe-type prior with its scale integrated out.

  ``w | τ ~ N(0, τ² I_D)`` with ``τ² ~ InvGamma(1/2, s²/2)`` (half-Cauchy
  tail ``p(τ) ∝ τ^{-2}``, no mass near ``τ = 0``), marginally the
  multivariate Cauchy ``p(w) ∝ (s² + ‖w‖²)^{-(D+1)/2}`` (module docstring).
  Its gradient ``(D+1) w / (N (s² + ‖w‖²))`` is that of a Gaussian prior
  whose variance follows the tensor's own mean square, ``(s² + ‖w‖²)/(D+1)``:
  the tensor's scale is learnt, and can shrink to ``s/sqrt(D+1)`` but not
  to 0.

  Args:
    data_size: ``N`` (>= 1), the optimizer's `data_size`.
    scale: ``s > 0`` (the typical per-weight scale), or ``'fan_in'`` for
      ``s = global_scale/sqrt(fan_in)`` of the tensor.
    global_scale: multiplies the ``'fan_in'`` scale.
  """

  def __init__(self, data_size, scale='fan_in', global_scale=1.):
    validation.check_number('data_size', data_size, low=1.)
    if scale != 'fan_in':
      validation.check_number('scale', scale, low=0., low_open=True)
    validation.check_number('global_scale', global_scale, low=0.,
                            low_open=True)
    self.data_size = data_size
    self.scale = scale
    self.global_scale = global_scale

  def __call__(self, w):
    s = (self.global_scale / math.sqrt(_fan_in(w.shape))
         if self.scale == 'fan_in' else self.scale)
    d = float(np.prod(w.shape))
    r2 = tensors.part_event_dot(w, w, 0)
    return ((d + 1.) / (2. * self.data_size)) * tf.math.log1p(
        r2 / tf.cast(s * s, w.dtype))

  def get_config(self):
    return {'data_size': self.data_size, 'scale': self.scale,
            'global_scale': self.global_scale}


def add_horseshoe_prior(model, data_size, global_scale=1.):
  """Puts a `HorseshoePrior` (scale ``global_scale/sqrt(fan_in)``) on each kernel.

  Layers with a ``kernel`` (Dense, Conv, ...) get the prior on it; biases
  are left to `add_gaussian_prior`. No variable is added: the per-tensor
  scale is integrated out, so samples and checkpoints hold the weights only.
  Call on a built model, before `compile`/`fit`.
  """
  _check_model(model)
  prior = HorseshoePrior(data_size, 'fan_in', global_scale)
  for _, kernel in _kernels(model):
    kernel.regularizer = prior
  return model
