"""tfp_adaptive: adaptive SG-MCMC for TensorFlow Probability, with the Γ correction."""

from tfp_adaptive import core
from tfp_adaptive import diagnostics
from tfp_adaptive import keras
from tfp_adaptive import mcmc
from tfp_adaptive import minibatch
from tfp_adaptive import schedules
from tfp_adaptive.minibatch import minibatch_log_prob

__all__ = ['core', 'diagnostics', 'keras', 'mcmc', 'minibatch',
           'minibatch_log_prob', 'schedules']
__version__ = '0.2.0'
