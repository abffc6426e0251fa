"""The checks a `SampleCollector` makes of one run from its losses and weights, each warned on once.

The rules are `tfp_adaptive.keras.health`'s; this module keeps a run's
record of them: a training loss that falls below 0 and keeps falling (a
log-posterior without an upper bound), a posterior gone bad after
burn-in, and ``'mse'``'s implied noise far from the residuals'.

`NonfiniteCount` counts the optimizer's skipped (non-finite) steps as a
collector sees them, and raises or warns by the non-finite policy.
"""

import warnings

import numpy as np
import keras

from tfp_adaptive.keras import health

__all__ = ['FitChecks', 'NonfiniteCount']


class FitChecks(object):
  """One run's health record and its warnings (at most one of each kind).

  Args:
    who: what starts the warnings.
  """

  NOISE_FACTOR = 10.  # Residuals this far from the noise variance: a warning.

  def __init__(self, who):
    self.who = who
    self.losses_seen = []  # The last 5 epochs' training losses.
    self._collapse_warned = False
    # `health.RunHealth` of this fit, from its first epoch after burn-in;
    # its `losses` are the training losses of those epochs.
    self.run = None
    self.posterior_warned = False  # One warning that the posterior went bad.

  def new_fit(self):
    """At the start of each `fit`: the burn-in record starts again."""
    self.run = None

  def warn_posterior(self, findings):
    """Warns, once a run, that the posterior looks bad (`health.message`)."""
    if not self.posterior_warned:
      self.posterior_warned = True
      warnings.warn(health.message(self.who, findings))

  def check_collapse(self, model, likelihood, logs):
    """Warns once when the training loss is negative and has fallen for 5 epochs.

    The losses of the likelihoods here are >= 0, and so are the priors of
    `tfp_adaptive.keras.priors`; a loss below 0 that keeps falling means a
    log-density without an upper bound, usually a prior with a pole (a
    scale sampled with its weights collapsing to 0): the chain is falling
    into it, not sampling.
    """
    loss = (logs or {}).get('loss')
    if (loss is None or self._collapse_warned or
        not getattr(likelihood, 'loss_is_nonnegative', True)):
      return  # E.g. a learnt noise scale: a negative loss is legitimate.
    self.losses_seen = (self.losses_seen + [float(loss)])[-5:]
    seen = self.losses_seen
    falling = all(b < a for a, b in zip(seen, seen[1:]))
    if len(seen) == 5 and falling and seen[-1] < 0:
      self._collapse_warned = True
      priors = sorted({type(v.regularizer).__name__
                       for v in model.trainable_weights
                       if getattr(v, 'regularizer', None) is not None} |
                      {type(l.kernel_regularizer).__name__
                       for l in model.layers
                       if getattr(l, 'kernel_regularizer', None) is not None})
      warnings.warn(
          '%s: the training loss is negative (%.3g) and has fallen for 5 '
          'epochs: the log-posterior has no upper bound and the '
          'chain is collapsing into it rather than sampling. Check the '
          'priors (regularizers on this model: %s): a scale sampled jointly '
          'with its weights has a pole at 0; tfp_adaptive.keras.priors.'
          'add_horseshoe_prior integrates it out.'
          % (self.who, self.losses_seen[-1], ', '.join(priors) or 'none'))

  def record(self, model, likelihood, loss):
    """Records an epoch after burn-in and warns once when the posterior has gone bad (`health`)."""
    if self.run is None:
      self.run = health.RunHealth(
          _layers(model), getattr(likelihood, 'loss_is_nonnegative', True))
    self.run.record(loss)
    self.judge(final=False)

  def judge(self, final):
    """Warns once if `health` finds the posterior bad: at 9, 18, 36, ... epochs after burn-in, and at the end of `fit`."""
    run = self.run
    if run is None or self.posterior_warned or not (final or run.due()):
      return
    findings = run.findings()
    if findings:
      self.warn_posterior(findings)

  def check_noise(self, model, likelihood):
    """Warns when ``'mse'``'s implied noise variance is far from the residuals'.

    The loss ``'mse'`` is a Gaussian likelihood of variance ``K/2`` per
    output (`likelihoods.Gaussian`), so under the model the loss averages
    ``K/2``. At the end of `fit`, the mean loss over the last third of the
    epochs after burn-in (at least 3, and only if it has stopped moving:
    its two halves within 20% of each other, so that a transient is not
    judged) more than `NOISE_FACTOR` times away says the posterior is far
    too narrow (or too wide) for the targets' scale.
    """
    lik = likelihood
    steady = [] if self.run is None else self.run.losses
    window = steady[-(len(steady) // 3):]
    if (len(steady) < 9 or lik is None or
        lik.name != 'gaussian' or lik.noise_variance is not None):
      return
    half = len(window) // 2
    loss = float(np.mean(window))
    if abs(np.mean(window[half:]) - np.mean(window[:half])) > 0.2 * abs(loss):
      return  # Still moving: no verdict.
    try:
      outputs = int(np.prod(model.output_shape[1:]))
    except (AttributeError, TypeError, ValueError):
      return  # A subclassed model without a known output shape.
    implied = lik.variance(outputs)
    ratio = loss / implied
    if 1. / self.NOISE_FACTOR <= ratio <= self.NOISE_FACTOR:
      return
    warnings.warn(
        '%s: the loss \'mse\' is a Gaussian likelihood whose noise '
        'variance is fixed at K/2 = %g per output, but at the end of '
        'the run the training loss is %.3g, %.3g times what that noise '
        'gives: the posterior and the ensemble\'s intervals are far too %s '
        'for these targets. Let the model learn its noise (end it with '
        'tfa.keras.NoiseScale(data_size=N) and compile with '
        'loss=tfa.keras.GaussianNLL()), or standardise the targets.'
        % (self.who, implied, loss, ratio, 'narrow' if ratio > 1 else 'wide'))


class NonfiniteCount(object):
  """The optimizer's steps skipped as non-finite, counted after its batches.

  Args:
    who: what starts the warnings.
    stuck_steps: this many skipped steps in a row: a warning that the chain
      is not moving.
  """

  def __init__(self, who, stuck_steps):
    self.who = who
    self.stuck_steps = stuck_steps
    self.total = 0
    self._seen = None  # The optimizer's own count when last read.
    self._unmoved = 0

  def start(self, optimizer, restart=False):
    """Reads the optimizer's count: at the first `fit` (or, with `restart`, after a restore)."""
    if self._seen is None or restart:
      self._seen = optimizer_count(optimizer)

  def check(self, optimizer, steps, policy):
    """The steps skipped since the last read (of `steps` run); raises under ``'raise'``."""
    count = optimizer_count(optimizer)
    new = count - (self._seen or 0)
    self._seen = count
    if new <= 0:
      self._unmoved = 0
      return 0
    self.total += new
    self._unmoved = self._unmoved + new if new >= steps else new
    if raises(optimizer, policy):
      raise FloatingPointError(
          '%d optimizer step(s) up to iteration %d had a non-finite gradient, '
          'Γ or weights (nonfinite=\'raise\'); lower the learning rate or '
          'check the model and data.'
          % (new, int(np.asarray(optimizer.iterations))))
    if self.total == new:
      warnings.warn('%s: %d optimizer step(s) had a non-finite gradient, Γ '
                    'or weights and were skipped (counted in '
                    '`num_nonfinite`).' % (self.who, new))
    if self._unmoved >= self.stuck_steps > self._unmoved - new:
      warnings.warn(
          '%s: the last %d optimizer steps were all skipped as non-finite; '
          'the chain is not moving. Lower the learning rate, or check the '
          'data and the model for NaN/Inf.' % (self.who, self._unmoved))
    return new

  def report(self, optimizer):
    """At the end of `fit`: how many steps were skipped, if any."""
    report_skipped(self.who, self.total, optimizer)


def report_skipped(who, total, optimizer):
  """Warns, if `total` > 0, that a run ended with `total` of its steps skipped as non-finite."""
  if total:
    warnings.warn(
        '%s: the run ended with %d optimizer step(s) skipped as '
        'non-finite, out of %d (the weights stayed at their last finite '
        'values for those steps; `num_nonfinite`). Lower the learning '
        'rate, or check the data and the model for NaN/Inf.'
        % (who, total, int(np.asarray(optimizer.iterations))))


def raises(optimizer, policy):
  """Whether a skipped step raises: the collector's `policy` or the optimizer's own is ``'raise'``."""
  return 'raise' in (policy, getattr(optimizer, 'nonfinite', 'reject'))


def optimizer_count(optimizer):
  """The optimizer's own count of skipped steps (0 for one that keeps none)."""
  count = getattr(optimizer, 'num_nonfinite', None)
  return 0 if count is None else int(np.asarray(count))


def _layers(model):
  """``{layer path: [(variable, default prior σ² or None, has a regularizer)]}`` of the trainable weights."""
  opt = model.optimizer
  if isinstance(opt, keras.optimizers.LossScaleOptimizer):
    opt = opt.inner_optimizer
  variance = getattr(opt, 'prior_variance', lambda v: None)
  layers = {}
  for v in model.trainable_weights:
    path = getattr(v, 'path', None) or v.name
    layers.setdefault(path.rsplit('/', 1)[0], []).append(
        (v, variance(v), getattr(v, 'regularizer', None) is not None))
  return layers
