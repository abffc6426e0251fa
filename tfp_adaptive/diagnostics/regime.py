"""Is a run in the regime where its sampler's bias is small? The numbers, their tolerances, the advice.

Every step reports the squared lengths of its drift, Γ and noise pieces and
of its gradient (`tfp_adaptive.core.algorithms.StepNorms`). From their run
means come the regime numbers (docs, guide "Step sizes and regimes"):

- ``drift_ratio = mean ‖(h/2)M∇û‖² / mean ‖sqrt(hτ)M^{1/2}ξ‖²``. For a
  Gaussian target of curvature ``κ`` and exact gradients it is ``ε/4τ``
  with ``ε = h M κ`` the effective step, which sets the Euler–Maruyama
  bias; a minibatch gradient of variance ``s²`` adds ``h M s²/4τ``, the
  heating by gradient noise. Both biases grow in proportion to it.
- ``peak_factor``: how far the metric can rise above its typical value,
  ``max M / M(E ĝ²)`` (`Preconditioner.peak_factor`). For RMSprop it is
  ``sqrt((diagonal_bias + E ĝ²)/diagonal_bias)``: with exact gradients,
  ``ĝ → 0`` at a mode and ``M`` jumps there to ``diagonal_bias^{-1/2}``, a
  cusp of that height. 1 for metrics bounded by their typical scale.
- ``lag = 4 drift_ratio · peak_factor / (1 − α)``: the effective step at
  the metric's peak, over the ``1/(1−α)`` steps its moving average
  remembers. The corrected Γ assumes the average follows the chain; a
  lagging one, and above all one that lags out of a cusp, makes it wrong.
  Checked when Γ is computed from exact (full-batch) gradients. With
  minibatch gradients the metric is dominated by the gradient noise, which
  varies slowly with ``θ`` and keeps ``V`` away from 0 (no cusp), and
  ``drift_ratio`` counts that noise: the lag then overstates the error (the
  benchmark's noisy runs stay within tolerance up to ``lag`` 60) and is
  only logged.
- ``gamma_ratio = mean ‖(h/2)τcΓ‖² / mean ‖noise‖²``, logged: the share of
  the step that Γ takes.

With minibatch gradients, one more rule: an EMA rate ``α`` below the
metric's ``min_decay_stochastic`` (0.9 for RMSprop, 0.99 for Monge) makes
the metric lean on the very gradient it preconditions (weight ``1 − α``),
which biases the drift whatever the step size (+11% to +16% on the sd in
the benchmark).

A ``peak_factor`` above 100 with exact gradients and Γ is reported as well:
on the regression, runs at ``lag`` 0.06 and 0.09 with a cusp of height
~10³ were off by 30% and 100%.

`TOLERANCES` are read off the figure of ``python -m benchmarks regimes``
(1-D Gaussians with exact and noisy gradients, a full-batch Bayesian
linear regression, eight schools): below them, every configuration there
samples its standard deviations within `SD_ERROR` of the exact ones.
"""

import collections

import numpy as np

from tfp_adaptive import vocabulary
from tfp_adaptive.diagnostics import advice as advice_lib

__all__ = ['Regime', 'SD_ERROR', 'TOLERANCES', 'advice', 'numbers']

TOLERANCES = {'drift_ratio': 0.02, 'lag': 0.1, 'peak_factor': 100.}
SD_ERROR = 0.05

Regime = collections.namedtuple('Regime', ['drift_ratio', 'gamma_ratio',
                                           'lag', 'peak_factor'])


def numbers(means, preconditioner, gradient_scale=1., with_gamma=False):
  """The `Regime` from the run means of a `StepNorms` (floats or arrays per chain).

  Args:
    means: `StepNorms` (or a sequence of its four fields) of run means.
    preconditioner: the sampler's `Preconditioner`.
    gradient_scale: ``s`` with ``∇û = s ĝ``, ``ĝ`` the gradient the metric
      is built from (1 in the kernels, ``-N`` in Keras).
    with_gamma: whether the run computes Γ.

  Returns:
    `Regime` of NumPy float64 values; ratios are 0 where the noise was off.
  """
  drift_sq, gamma_sq, noise_sq, grad_ms = [np.asarray(x, np.float64)
                                           for x in means]
  on = noise_sq > 0
  safe = np.where(on, noise_sq, 1.)
  drift = np.where(on, drift_sq / safe, 0.)
  gamma = np.where(on, gamma_sq / safe, 0.)
  metric_units = grad_ms / float(gradient_scale) ** 2
  peak = np.vectorize(preconditioner.peak_factor, otypes=[np.float64])(
      metric_units)
  decay = float(preconditioner.decay)
  if with_gamma and decay > 0:
    with np.errstate(invalid='ignore'):
      lag = np.where(drift > 0, 4. * drift * peak / (1. - decay), 0.)
  else:
    lag = 0. * drift
  return Regime(drift, gamma, lag, peak)


def advice(regime, hyperparameters, step_name, preconditioner=None,
           stochastic=False, estimates=True, step_estimate=None,
           without_replacement=False, gamma=None):
  """Messages for each number of `regime` outside its tolerance (worst chain).

  Args:
    regime: a `Regime` (arrays over chains are reduced by their maximum).
    hyperparameters: the sampler's hyperparameter names (the parameters a
      message may name).
    step_name: the name of the step size, ``'step_size'`` (kernels) or
      ``'learning_rate'`` (Keras).
    preconditioner: the sampler's `Preconditioner` (its ``decay`` and
      ``min_decay_stochastic``), or `None`.
    stochastic: whether the gradients are minibatch estimates.
    estimates: whether to advise from the numbers that predict a bias
      (``drift_ratio``, ``lag``, ``peak_factor``). Callers that read the
      configurational temperature (`tfp_adaptive.diagnostics.temperature`), which
      measures the bias itself, pass `False`; the rule on a moving average
      too short for minibatch gradients stays.
    step_estimate: whether to advise from ``drift_ratio``; `None` follows
      `estimates`. `fit`'s thermometer subtracts the step's own heating
      with the reshuffling term, so it cannot see a step that is too
      large, and `fit` keeps this rule.
    without_replacement: whether the minibatches are dealt without
      replacement (Keras' reshuffled epochs). Their errors over an epoch
      sum to zero, so they heat the chain less than the independent
      minibatches ``drift_ratio`` is derived for, the less the more slowly
      the chain relaxes over an epoch, and the message says how to read
      the heat itself.
    gamma: the sampler's Γ mode, or `None`. With minibatch gradients and a
      decay below ``min_decay_stochastic``, the message names the bias the
      mode keeps: the metric holding the drift's own gradient (the
      published timing), or only the metric's fluctuation, of second order
      (``'corrected_lagged'``, and ``'corrected'``'s metric from a
      minibatch of its own).

  Returns:
    List of strings, empty when the run is in the regime.
  """
  worst = {k: float(np.max(v)) for k, v in regime._asdict().items()}
  out = []
  if step_estimate is None:
    step_estimate = estimates
  if step_estimate and worst['drift_ratio'] > TOLERANCES['drift_ratio']:
    factor = worst['drift_ratio'] / TOLERANCES['drift_ratio']
    why = '(both biases shrink in proportion)'
    if not np.isfinite(factor):  # A step overflowed: no factor to give.
      factor, why = advice_lib.DIVERGED, '(a step overflowed: a first try)'
    text = (
        'drift_ratio = %.3g > %g: the step is large against the target\'s '
        'curvature or the gradient noise, where the sampled spread can be '
        'off by more than %d%%. Lower `%s` about %.2gx %s, or use larger '
        'minibatches.'
        % (worst['drift_ratio'], TOLERANCES['drift_ratio'], SD_ERROR * 100,
           step_name, factor, why))
    if without_replacement:
      text += (
          ' With minibatches dealt without replacement (reshuffled epochs), '
          'the minibatch part of drift_ratio is that of independent '
          'minibatches, which heat the chain more, and the factor can be '
          'far too large: have the members read on the '
          'training data with exact gradients '
          '(`SampleCollector(training_data=(x, y))`), whose warning gives '
          'the factor from the heat itself.')
    out.append(advice_lib.Advice(
        text, advice_lib.smaller_step(step_name, factor)))
  decay = getattr(preconditioner, 'decay', 0.)
  least = getattr(preconditioner, 'min_decay_stochastic', 0.)
  if (stochastic and 0 < decay < least and
      'preconditioner_decay_rate' in hyperparameters):
    if gamma is not None and (vocabulary.lags_metric(gamma) or
                              vocabulary.independent_metric(gamma)):
      why = ('the metric averages about %d noisy squared gradients, and its '
             'fluctuation biases Γ by a term of order %g'
             % (round(1. / (1. - decay)), 1. - decay))
    else:
      why = ('the metric is built with weight %g from the very gradient it '
             'preconditions, which biases the drift' % (1. - decay))
    out.append(advice_lib.Advice(
        'preconditioner_decay_rate = %g < %g with minibatch gradients: %s '
        'whatever the step size. Raise `preconditioner_decay_rate` to at '
        'least %g.' % (decay, least, why, least),
        (advice_lib.Change('preconditioner_decay_rate', value=least),)))
  if not estimates:
    return out
  cusp = (worst['peak_factor'] > TOLERANCES['peak_factor'] and worst['lag'] > 0
            and not stochastic and 'diagonal_bias' in hyperparameters)
  if cusp:
    out.append(
        'peak_factor = %.3g > %g: with exact gradients the metric jumps to '
        '%.3gx its typical value where the gradient vanishes, a cusp that no '
        'practical step resolves (the corrected Γ is off there). Raise '
        '`diagonal_bias` towards the mean squared gradient.'
        % (worst['peak_factor'], TOLERANCES['peak_factor'],
           worst['peak_factor']))
  elif (worst['lag'] > TOLERANCES['lag'] and not stochastic and
        'preconditioner_decay_rate' in hyperparameters):
    if worst['peak_factor'] > 10. and 'diagonal_bias' in hyperparameters:
      fix = ('The metric has a cusp %.3gx its typical value where the '
             'gradient vanishes: raise `diagonal_bias` towards the mean '
             'squared gradient, or lower `%s`.'
             % (worst['peak_factor'], step_name))
    else:
      fix = 'Lower `preconditioner_decay_rate` or `%s`.' % step_name
    out.append(
        'lag = %.3g > %g: the metric\'s moving average lags the chain, and '
        'the corrected Γ, which assumes it follows, is off. %s'
        % (worst['lag'], TOLERANCES['lag'], fix))
  return out
