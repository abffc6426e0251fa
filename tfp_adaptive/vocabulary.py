"""The words every front end shares: the Γ modes and the non-finite policies.

Declared once here, below the sampler maths (`tfp_adaptive.core`) and the
diagnostics (`tfp_adaptive.diagnostics`), so that both read the same
vocabulary without importing each other.
"""

import warnings

from tfp_adaptive import validation

__all__ = ['CORRECTED_MODES', 'GAMMA_MODES',
           'NONFINITE_POLICIES', 'independent_metric', 'is_corrected',
           'lags_metric', 'nonfinite_policy']

#: Γ modes: ``'none'`` drops Γ; ``'original'`` keeps the Γ of the EMA
#: metric; ``'corrected'`` divides it by ``1 − α`` and builds the metric
#: and Γ from a second minibatch, independent of the drift's (the Keras
#: optimizers split each minibatch in two; docs, "The mathematics",
#: "Minibatches"); ``'corrected_published'`` is the correction as
#: published, with the metric updated by the drift's own gradient (kept
#: for reproductions: with minibatches it keeps a bias that no step
#: removes); ``'corrected_lagged'`` steps with the metric from before the
#: current gradient. With exact gradients the three corrected modes are
#: one sampler.
GAMMA_MODES = ('none', 'original', 'corrected', 'corrected_published',
               'corrected_lagged')


#: The modes whose Γ is the full divergence of the metric (scaled by
#: ``1/(1 − α)``). ``'corrected'`` builds the metric from a minibatch of
#: its own (`independent_metric`); ``'corrected_published'`` from the
#: drift's, so that it already holds the current gradient;
#: ``'corrected_lagged'`` steps with the metric from before it
#: (`lags_metric`).
CORRECTED_MODES = ('corrected', 'corrected_published', 'corrected_lagged')

#: What to do with a step whose gradient, Γ or new state is not finite.
#: ``'reject'``: keep the previous state (counted and reported);
#: ``'reject_at_proposal'``: the same, tested on the proposal only (kernels);
#: ``'raise'``: stop with an error; ``'ignore'``: take the step as it is
#: (kernels). Each front end accepts the words that mean something there
#: (`nonfinite_policy`).
NONFINITE_POLICIES = ('reject', 'reject_at_proposal', 'raise', 'ignore')


def is_corrected(mode):
  """Whether Γ mode `mode` targets the posterior (its Γ is the full divergence)."""
  return mode in CORRECTED_MODES


def lags_metric(mode):
  """Whether Γ mode `mode` steps with the metric from before the current gradient.

  Only ``'corrected_lagged'``: its drift ``M_{t−1} ∇û_t`` and noise
  ``M_{t−1}^{1/2} ξ`` use a metric independent of the current minibatch, so
  that ``E[M_{t−1} ∇û_t] = M_{t−1} ∇u``; Γ still differentiates the
  metric updated with the current gradient. The other modes keep the
  published timing.
  """
  return mode == 'corrected_lagged'


def independent_metric(mode):
  """Whether Γ mode `mode` builds the metric and Γ from a minibatch of their own.

  Only ``'corrected'`` (the default): the step draws a second minibatch
  for the metric's statistics and Γ, so the drift's minibatch gradient is
  independent of the metric it is scaled by (``E[M_t ∇û_t] = E[M_t] ∇u``),
  and the metric holds the chain's current position. With exact gradients
  it is ``'corrected_published'``. The kernels draw the second minibatch
  from the step's seed (one evaluation when the target is exact); `fit`
  splits each minibatch into two random halves.
  """
  return mode == 'corrected'


def nonfinite_policy(value, allowed=NONFINITE_POLICIES, aliases=None):
  """`value` checked against `allowed` (a subset of `NONFINITE_POLICIES`), old words mapped by `aliases`.

  Raises:
    ValueError: naming ``nonfinite`` and the allowed words.
  """
  aliases = aliases or {}
  if isinstance(value, str) and value in aliases:
    warnings.warn('nonfinite=%r is deprecated; it is now spelled %r.'
                  % (value, aliases[value]), DeprecationWarning, stacklevel=3)
    value = aliases[value]
  return validation.check_choice('nonfinite', value, allowed)
