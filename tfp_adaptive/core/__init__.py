"""The shared sampler math, in TensorFlow: samplers, preconditioners, Γ, noise and the Euler–Maruyama step (the statistics over draws are in `tfp_adaptive.diagnostics`)."""

from tfp_adaptive.core import algorithms
from tfp_adaptive.core import diffusion
from tfp_adaptive.core import gamma
from tfp_adaptive.core import noise
from tfp_adaptive.core import preconditioners
from tfp_adaptive.core import roots
from tfp_adaptive.core import shampoo
from tfp_adaptive.core import tensors
from tfp_adaptive.core.diffusion import adam_sgld_drift
from tfp_adaptive.core.diffusion import langevin_step
from tfp_adaptive.core.gamma import gradient_and_gamma
from tfp_adaptive.core.preconditioners import Identity
from tfp_adaptive.core.preconditioners import Monge
from tfp_adaptive.core.preconditioners import RMSprop
from tfp_adaptive.core.preconditioners import Wenzel
from tfp_adaptive.core.shampoo import Shampoo

__all__ = [
    'Identity', 'Monge', 'RMSprop', 'Shampoo', 'Wenzel', 'adam_sgld_drift',
    'algorithms',
    'diffusion', 'gamma', 'gradient_and_gamma', 'langevin_step', 'noise',
    'preconditioners', 'roots', 'shampoo', 'tensors',
]


def __getattr__(name):
  """``tfp_adaptive.core.regime``, moved to `tfp_adaptive.diagnostics.regime`, with a `DeprecationWarning`."""
  if name == 'regime':
    import warnings  # pylint: disable=g-import-not-at-top
    from tfp_adaptive.diagnostics import regime  # pylint: disable=g-import-not-at-top
    warnings.warn('`tfp_adaptive.core.regime` moved to '
                  '`tfp_adaptive.diagnostics.regime`; the old name goes in '
                  'the next release.', DeprecationWarning, stacklevel=2)
    return regime
  raise AttributeError('module %r has no attribute %r' % (__name__, name))
