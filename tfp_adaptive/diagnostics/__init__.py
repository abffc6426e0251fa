"""Diagnostics: is a chain sampling its target? One home for every reading and verdict.

- `effective_size`: effective sample sizes and the error of a mean.
- `advice`: the change a warning advises, as data (`SamplerWarning`'s
  ``changes``).
- `temperature`: the configurational temperature (virial and Laplacian
  forms) and its verdict.
- `temperature_advice`: the warning and the change a temperature reading
  that is off advises.
- `mean_force` and `prediction_force`: the force per coordinate and along
  a model's predictions, which vanish at the target.
- `monge_advice`: chains that crawl in the Monge metric (pulled one way
  all run), and the ``alpha2`` that frees them.
- `run_advice`: every message a run's readings call for (temperature,
  mean force, prediction force), for kernels and Keras alike.
- `probes`: the per-draw Hutchinson and second-difference terms, from any
  gradient function (kernels and Keras alike).
- `regime`: the regime numbers of an adaptive metric and their advice.
- `curvature`: step-size rules from the curvature and the gradient noise.
- `stationary`: the 1-D stationary densities of each Γ mode, and histogram
  comparisons.

The readings are NumPy statistics over draws (and a few TF helpers that
take functions); the front ends (`tfp_adaptive.mcmc.check_temperature`,
`tfp_adaptive.keras.SamplerMonitor`, `BayesianEnsemble.check_temperature`)
only evaluate gradients at their draws. Nothing here imports the sampler
maths (`tfp_adaptive.core`) or a front end.
"""

from tfp_adaptive.diagnostics import advice
from tfp_adaptive.diagnostics import curvature
from tfp_adaptive.diagnostics import effective_size
from tfp_adaptive.diagnostics import mean_force
from tfp_adaptive.diagnostics import monge_advice
from tfp_adaptive.diagnostics import prediction_force
from tfp_adaptive.diagnostics import probes
from tfp_adaptive.diagnostics import regime
from tfp_adaptive.diagnostics import run_advice
from tfp_adaptive.diagnostics import stationary
from tfp_adaptive.diagnostics import temperature
from tfp_adaptive.diagnostics import temperature_advice
from tfp_adaptive.diagnostics.advice import Change
from tfp_adaptive.diagnostics.advice import SamplerWarning
from tfp_adaptive.diagnostics.stationary import GRID
from tfp_adaptive.diagnostics.stationary import adam_sgld_density
from tfp_adaptive.diagnostics.stationary import bin_probabilities
from tfp_adaptive.diagnostics.stationary import density_cdf
from tfp_adaptive.diagnostics.stationary import monge_metric
from tfp_adaptive.diagnostics.stationary import predicted_density
from tfp_adaptive.diagnostics.stationary import rmsprop_metric
from tfp_adaptive.diagnostics.stationary import standard_normal
from tfp_adaptive.diagnostics.stationary import total_variation

__all__ = ['Change', 'GRID', 'SamplerWarning', 'adam_sgld_density', 'advice',
           'bin_probabilities', 'curvature', 'density_cdf', 'effective_size',
           'mean_force', 'monge_advice', 'monge_metric', 'predicted_density',
           'prediction_force', 'probes', 'regime', 'rmsprop_metric',
           'standard_normal', 'stationary', 'temperature', 'temperature_advice',
           'total_variation']
