"""The shared sampler math: samplers, preconditioners, Γ, noise and the Euler–Maruyama step."""

from tfp_adaptive.core import algorithms
from tfp_adaptive.core import diffusion
from tfp_adaptive.core import gamma
from tfp_adaptive.core import noise
from tfp_adaptive.core import preconditioners
from tfp_adaptive.core import regime
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
    'preconditioners', 'regime', 'roots', 'shampoo', 'tensors',
]
