"""The default prior of a sampler optimizer: which weights it covers, and its loss and gradient.

A weight without a regularizer of its own gets the default prior
``N(0, gain²/fan_in)`` (`tfp_adaptive.keras.priors.default_prior`) unless
the optimizer was built with ``prior='flat'``. `DefaultPrior` is the part
of `tfp_adaptive.keras.optimizer_base.SamplerOptimizer` that holds it; its
precisions per variable are resolved once, at `build`.
"""

import logging
import warnings

import tensorflow as tf
import keras

from tfp_adaptive.keras import priors

__all__ = ['DefaultPrior']

_LOG = logging.getLogger('tfp_adaptive')


class DefaultPrior(object):
  """The default prior's precisions (``_prior_precisions``), loss and gradients; mixed into `SamplerOptimizer`."""

  def _resolve_prior(self, var_list):
    """``1/(σ²N)`` of the default prior per variable (`None`: no default prior)."""
    bare = [v for v in var_list if getattr(v, 'regularizer', None) is None]
    if self.prior == 'flat':
      keras_bare = [v for v in bare if isinstance(v, keras.Variable)]
      if keras_bare:
        warnings.warn(
            '%s(prior=\'flat\'): %d of %d variables have no regularizer (%s), '
            'so the posterior has no prior on them and may be improper: a '
            'network\'s weights can then drift without bound (e.g. along the '
            'scale symmetry of ReLU layers, or for inputs the data never '
            'excite). Use prior=\'default\', or put priors on them with '
            'tfp_adaptive.keras.priors.' % (
                type(self).__name__, len(keras_bare), len(var_list),
                _names(keras_bare)))
      return [None] * len(var_list)
    prior = priors.default_prior(self.data_size)
    if bare:
      _LOG.warning(
          '%s: %d of %d variables have no prior of their own (%s); they get '
          'the default prior N(0, %g/fan_in) (tfp_adaptive.keras.priors.'
          'default_prior). Pass prior=\'flat\' if the loss already holds '
          'their prior.', type(self).__name__, len(bare), len(var_list),
          _names(bare), priors.DEFAULT_GAIN ** 2)
    chains = getattr(self, 'chain_ndims', 0)
    return [prior.precision_over_n(tuple(v.shape)[chains:])
            if getattr(v, 'regularizer', None) is None else None
            for v in var_list]

  def prior_variance(self, variable):
    """``σ²`` per weight of the default prior on `variable`; `None` if it has none (or before `build`)."""
    if self._prior_precisions is None:
      return None
    try:
      c = self._prior_precisions[self._get_variable_index(variable)]
    except KeyError:
      return None
    return None if c is None else 1. / (float(c) * self.data_size)

  def prior_loss(self, variables):
    """The default prior's ``-log p(θ)/N`` over `variables` (the optimizer's order)."""
    total = 0.
    for v, c in zip(variables, self._prior_precisions):
      if c is not None:
        total += priors.gaussian_loss(tf.convert_to_tensor(v), c)
    return total

  def prior_gradients(self, parts):
    """The gradient of `prior_loss` at `parts` (`None` where no default prior)."""
    return [None if c is None else tf.cast(c, p.dtype) * p
            for p, c in zip(parts, self._prior_precisions)]


def _names(variables, most=4):
  names = [getattr(v, 'path', None) or v.name for v in variables]
  return ', '.join(names[:most]) + (', ...' if len(names) > most else '')
