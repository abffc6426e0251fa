"""1-D stationary densities of adaptive SG-MCMC (docs, "The mathematics") and histogram comparisons.

In the small-step limit with an EMA metric ``M(θ)`` (Rensmeyer & Niggemann
2025, Sec. 3–4), a 1-D sampler with target ``p`` is stationary at

* ``p · M⁻¹``  when Γ is dropped (``gamma='none'``),
* ``p · M^-α`` when Γ of the EMA metric is kept (``gamma='original'``),
* ``p``        with the corrected Γ (``gamma='corrected'``).

With a velocity (preconditioned SGHMC, a sampler given a ``friction``), Γ
is the divergence of ``M^{1/2}`` and the exponents halve: ``p · M^{-1/2}``,
``p · M^{-α/2}`` and ``p``.

These functions give those densities and their bin probabilities, so tests,
benchmarks and examples compare histograms against one implementation.
"""

import numpy as np

from tfp_adaptive import validation
from tfp_adaptive import vocabulary

__all__ = ['GRID', 'adam_sgld_density', 'bin_probabilities', 'density_cdf',
           'monge_metric', 'predicted_density', 'rmsprop_metric',
           'standard_normal', 'total_variation']

#: The grid on which predicted densities are evaluated and normalised.
GRID = np.linspace(-7., 7., 140001)


def standard_normal(t):
  """Unnormalised N(0, 1) density."""
  return np.exp(-0.5 * np.square(t))


def rmsprop_metric(diagonal_bias, bias_outside_sqrt=False,
                   grad=lambda t: -t):
  """``M(θ)`` of RMSprop with ``V = ĝ(θ)²`` (default target N(0,1): ĝ = -θ)."""
  def metric(t):
    g2 = np.square(grad(t))
    if bias_outside_sqrt:
      return 1. / (diagonal_bias + np.sqrt(g2))
    return 1. / np.sqrt(diagonal_bias + g2)
  return metric


def monge_metric(alpha2=1., grad=lambda t: -t):
  """1-D Monge metric ``1/(1 + α² ĝ²)`` (Yu et al. 2023)."""
  return lambda t: 1. / (1. + alpha2 * np.square(grad(t)))


def predicted_density(mode, metric, decay, target=standard_normal,
                      velocity=False):
  """Unnormalised stationary density of a 1-D sampler for a Γ `mode`.

  With `velocity` (preconditioned SGHMC), the exponent of the metric is
  half that of the Langevin sampler (docs, "The mathematics").
  """
  validation.check_choice('mode', mode, vocabulary.GAMMA_MODES)
  if vocabulary.is_corrected(mode):
    return target
  power = 1. if mode == 'none' else decay
  if validation.check_bool('velocity', velocity):
    power *= 0.5
  return lambda t: target(t) * metric(t) ** (-power)


def adam_sgld_density(drift_scale, metric, grad, target=standard_normal,
                      grid=GRID):
  """Stationary density of 1-D Adam-SGLD, Rensmeyer & Niggemann eq. (35).

  ``π(θ) ∝ p(θ) exp(∫^θ a G(x) (log p)'(x) dx)`` with ``G`` the RMSprop
  `metric` and ``a`` the `drift_scale`; the integral is a trapezoid rule on
  `grid`, so any 1-D target works (``grad`` is ``(log p)'``).
  """
  f = drift_scale * metric(grid) * grad(grid)
  log_w = np.concatenate([[0.], np.cumsum(0.5 * (f[1:] + f[:-1]) *
                                          np.diff(grid))])
  log_w -= log_w.max()
  return lambda t: target(t) * np.exp(np.interp(t, grid, log_w))


def density_cdf(density, grid=GRID):
  """Normalised CDF of an unnormalised density on `grid` (trapezoid rule)."""
  y = density(grid)
  cdf = np.concatenate([[0.], np.cumsum(0.5 * (y[1:] + y[:-1]) * np.diff(grid))])
  return cdf / cdf[-1]


def bin_probabilities(density, edges, grid=GRID):
  """Probability of each bin ``[edges[i], edges[i+1])`` under `density`."""
  return np.diff(np.interp(edges, grid, density_cdf(density, grid)))


def total_variation(p, q):
  """``½ Σ |p - q|`` of two histograms (probabilities per bin)."""
  return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())
