"""SG-MCMC transition kernels for `tfp.mcmc` with the Γ correction of Rensmeyer & Niggemann."""

from tfp_adaptive.mcmc.driver import check_regime
from tfp_adaptive.mcmc.driver import report_nonfinite
from tfp_adaptive.mcmc.driver import sample
from tfp_adaptive.mcmc.driver import stationary_histogram
from tfp_adaptive.mcmc.kernel import AdaptiveSGMCMC
from tfp_adaptive.mcmc.kernel import AdaptiveSGMCMCKernelResults
from tfp_adaptive.mcmc.run_check import RunChecks
from tfp_adaptive.mcmc.run_check import RunReport
from tfp_adaptive.mcmc.run_check import check_run
from tfp_adaptive.mcmc.run_check import trace_checks
from tfp_adaptive.mcmc.samplers import AdamSGLD
from tfp_adaptive.mcmc.samplers import MongeSGRLD
from tfp_adaptive.mcmc.samplers import PSGLD
from tfp_adaptive.mcmc.samplers import SGHMC
from tfp_adaptive.mcmc.samplers import SGLD
from tfp_adaptive.mcmc.samplers import SGNHT
from tfp_adaptive.mcmc.samplers import ShampooSGRLD
from tfp_adaptive.mcmc.samplers import WenzelSGLD
from tfp_adaptive.mcmc.temperature import check_temperature

__all__ = [
    'AdamSGLD', 'AdaptiveSGMCMC', 'AdaptiveSGMCMCKernelResults', 'MongeSGRLD',
    'PSGLD', 'RunChecks', 'RunReport', 'SGHMC', 'SGLD', 'SGNHT',
    'ShampooSGRLD', 'WenzelSGLD', 'check_regime', 'check_run',
    'check_temperature', 'report_nonfinite', 'sample',
    'stationary_histogram', 'trace_checks',
]
