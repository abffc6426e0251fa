"""tfp_adaptive: adaptive SG-MCMC for TensorFlow Probability, with the Γ correction."""

import importlib

from tfp_adaptive import core
from tfp_adaptive import diagnostics
from tfp_adaptive import inference_data
from tfp_adaptive import mcmc
from tfp_adaptive import minibatch
from tfp_adaptive import schedules
from tfp_adaptive.inference_data import to_arviz
from tfp_adaptive.minibatch import minibatch_log_prob

__all__ = ['core', 'diagnostics', 'inference_data', 'keras', 'mcmc',
           'minibatch', 'minibatch_log_prob', 'plot', 'schedules', 'to_arviz']
__version__ = '0.3.0'


def __getattr__(name):
  """Imports `tfp_adaptive.keras` and `.plot` on first use: kernel users do not load them."""
  if name in ('keras', 'plot'):
    module = importlib.import_module('tfp_adaptive.' + name)
    globals()[name] = module
    return module
  raise AttributeError('module %r has no attribute %r' % (__name__, name))
