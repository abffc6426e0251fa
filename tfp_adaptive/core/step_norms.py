"""The squared lengths of a step's pieces (`StepNorms`), from which the regime numbers are read."""

import collections

import tensorflow as tf

from tfp_adaptive.core import tensors

__all__ = ['StepNorms', 'norm_pairs', 'norms_from_sums', 'step_norms']


class StepNorms(collections.namedtuple(
    'StepNorms', ['drift_sq_norm', 'gamma_sq_norm', 'noise_sq_norm',
                  'grad_mean_square'])):
  """Squared lengths of a step's pieces and of its gradient, per chain.

  With ``a = (h/2) M ∇û`` (the drift), ``b = (h/2) τ c Γ`` and
  ``n = sqrt(h τ) M^{1/2} ξ`` (the noise): ``‖a‖²``, ``‖b‖²`` (0 when Γ is
  not computed), ``‖n‖²`` (0 while the noise is off) and ``‖∇û‖²/D``, the
  gradient's mean square per parameter. Their run means give the regime
  numbers (`tfp_adaptive.diagnostics.regime`).
  """
  __slots__ = ()


def step_norms(drift, noise, gamma, grads, step_size, temperature,
               batch_ndims):
  """`StepNorms` of a step from its drift ``M∇û``, noise ``M^{1/2}ξ``, ``cΓ`` and ``∇û``.

  The sums of squares share one pass (`tensors.event_dots`).
  """
  sums = tensors.event_dots(norm_pairs(drift, noise, gamma, grads),
                            batch_ndims)
  return norms_from_sums(sums, gamma, grads, step_size, temperature,
                          batch_ndims)


def norm_pairs(drift, noise, gamma, grads):
  """The ``(a, b)`` pairs whose dot products `norms_from_sums` takes, in its order."""
  pairs = [(drift, drift), (noise, noise), (grads, grads)]
  if gamma is not None:
    pairs.append((gamma, gamma))
  return pairs


def norms_from_sums(sums, gamma, grads, step_size, temperature, batch_ndims):
  """`StepNorms` from the dot products of `norm_pairs`."""
  dtype = sums[0].dtype
  h = tf.cast(step_size, dtype)
  tau = tf.cast(temperature, dtype)
  quarter_h2 = 0.25 * h * h
  gamma_sq = (quarter_h2 * tau * tau * sums[3] if gamma is not None
              else tf.zeros_like(sums[0]))
  size = tensors.event_size(grads, batch_ndims)
  return StepNorms(quarter_h2 * sums[0], gamma_sq, h * tau * sums[1],
                   sums[2] / size)
