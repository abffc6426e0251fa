"""Signs after burn-in that a run's posterior has gone bad: a rising or spiking loss, weights without bound, members off the targets' scale.

A chain that samples its posterior is stationary after burn-in: its
training loss and its weight norms wander about fixed levels. Three things
say it is not, and `SampleCollector` turns each into one warning that
names the likely cause:

- **Weights without bound.** A layer whose squared weight norm keeps
  rising (Kendall's τ of the epochs after burn-in against time at least
  `TREND_TAU`, and the last third's mean at least `NORM_RISE` times the
  first third's). With no prior on the layer (``prior='flat'`` and no
  regularizer) the posterior is likely improper: **the prior**. With the
  default Gaussian prior ``N(0, σ²)`` the stationary squared norm is at
  most about the prior's ``Σσ²`` unless the data ask for more; rising past
  `PRIOR_EXCESS` times that, the chain is unstable: **the step**. Growth
  towards the prior's scale (a network's weights filling the directions
  the data leave free) is no warning.
- **A loss that rises or spikes.** For likelihoods whose loss is at least
  0: the training loss keeps rising (τ ≥ `TREND_TAU` and the last third at
  least `LOSS_RISE` times the first), or one epoch's loss is more than
  `LOSS_SPIKE` times the median of the epochs before it; either by at least
  `LOSS_MIN_RISE` (1 nat per example: an epoch whose every prediction is
  on average e times less likely; below that a loss near 0, as on
  separable data, would make ratios of noise). Either means the chain
  runs hot or makes excursions: **the step** (lower the learning rate),
  or a burn-in too short for a chain that started at an optimum.
- **Members off the targets' scale** (regression, where targets are
  known: the collector's ``validation_data`` and `BayesianEnsemble.evaluate`):
  a member whose predictive mean leaves the targets' range, widened by its
  width on each side, for more than `OFF_RANGE_SHARE` of the points: **the
  step** or **the noise model**.

A rule "keeps rising" also needs the last third's smallest value above
the first third's largest. The judged window is the last two thirds of the
epochs after burn-in (with the default ``burnin=0`` the first third still
holds the fall from the initial weights), and a verdict needs
`MIN_EPOCHS` epochs in it. The collector judges when the window first
holds 9 epochs, at 18, 36, ..., and at the end of `fit`: a handful of
looks, each with a false-alarm rate of a few per cent on slowly mixing
stationary losses (`tests/keras/test_health.py` measures it).
"""

import numpy as np
import scipy.stats

__all__ = ['MIN_EPOCHS', 'RunHealth', 'message', 'off_range', 'rising']

MIN_EPOCHS = 9
TREND_TAU = 0.5
NORM_RISE = 1.5
PRIOR_EXCESS = 4.
LOSS_RISE = 2.
LOSS_SPIKE = 10.
LOSS_MIN_RISE = 1.
OFF_RANGE_SHARE = 0.01


def rising(values, ratio):
  """True when `values` (one per epoch) keep rising.

  Kendall's τ of the values against their index is at least `TREND_TAU`,
  the mean of the last third is at least `ratio` times the mean of the
  first third (values > 0), and the last third's smallest value exceeds
  the first third's largest. Needs `MIN_EPOCHS` finite values.
  """
  values = np.asarray(values, np.float64)
  if len(values) < MIN_EPOCHS or not np.all(np.isfinite(values)):
    return False
  third = len(values) // 3
  first, last = np.mean(values[:third]), np.mean(values[-third:])
  if first <= 0.:
    return False
  if last < ratio * first or np.min(values[-third:]) <= np.max(values[:third]):
    return False
  tau = scipy.stats.kendalltau(np.arange(len(values)), values).statistic
  return bool(tau >= TREND_TAU)


def off_range(means, targets):
  """Share of points at which the predictive mean leaves the widened range of `targets`.

  The range ``[min, max]`` of the targets is widened by its width on each
  side; a mean outside it is far off the targets' scale.
  """
  targets = np.asarray(targets, np.float64)
  means = np.asarray(means, np.float64).reshape(targets.shape)
  lo, hi = float(np.min(targets)), float(np.max(targets))
  width = max(hi - lo, 1e-12)
  outside = (means < lo - width) | (means > hi + width)
  return float(np.mean(outside))


class RunHealth(object):
  """Epoch records after burn-in, and the verdict on them.

  Args:
    layers: ``{layer name: [(variable, prior variance σ² per weight, or
      None for no default prior, and whether it has a regularizer)]}``.
    loss_is_nonnegative: whether the loss's level can be judged by ratios.
  """

  def __init__(self, layers, loss_is_nonnegative=True):
    self.layers = layers
    self.loss_is_nonnegative = loss_is_nonnegative
    self.losses = []
    self.norms = {name: [] for name in layers}
    self.epochs = 0

  def due(self):
    """True when the judged window first holds `MIN_EPOCHS` epochs, and at each doubling: a few looks, not one an epoch."""
    n = self.epochs
    w, before = _window(n), _window(n - 1)
    k, r = divmod(w, MIN_EPOCHS)
    return w > before and k >= 1 and r == 0 and k & (k - 1) == 0

  def record(self, loss):
    """Records one epoch after burn-in: its mean training loss and the layers' squared norms now."""
    self.epochs += 1
    if loss is not None:
      self.losses.append(float(loss))
    for name, variables in self.layers.items():
      with np.errstate(over='ignore', invalid='ignore'):
        self.norms[name].append(sum(
            float(np.sum(np.square(np.asarray(v.numpy(), np.float64))))
            for v, _, _ in variables))

  def findings(self):
    """``[(cause, sentence)]``: what has gone bad, with its likely cause ('prior' or 'step')."""
    found = []
    for name, norms in self.norms.items():
      norms = norms[self.epochs - _window(self.epochs):]
      if not rising(norms, NORM_RISE):
        continue
      variables = self.layers[name]
      bare = [v for v, var, reg in variables if var is None and not reg]
      third = max(len(norms) // 3, 1)
      now = np.mean(norms[-third:])
      if bare:
        found.append(('prior', 'the squared weight norm of layer %s rose '
                      'from %.3g to %.3g and keeps rising, with no prior on '
                      '%d of its variables' % (name, np.mean(norms[:third]),
                                               now, len(bare))))
        continue
      expected = sum(var * np.size(v) for v, var, _ in variables
                     if var is not None)
      if expected > 0 and now > PRIOR_EXCESS * expected:
        found.append(('step', 'the squared weight norm of layer %s keeps '
                      'rising and is %.3g, %.3g times what its prior gives '
                      '(%.3g)' % (name, now, now / expected, expected)))
    losses = self.losses[len(self.losses) - _window(len(self.losses)):]
    if self.loss_is_nonnegative and len(losses) >= MIN_EPOCHS:
      third = len(losses) // 3
      rise = np.mean(losses[-third:]) - np.mean(losses[:third])
      if rising(losses, LOSS_RISE) and rise >= LOSS_MIN_RISE:
        found.append(('step', 'the training loss kept rising after burn-in, '
                      'from %.3g to %.3g' % (np.mean(losses[:third]),
                                             np.mean(losses[-third:]))))
      else:
        spike = _spike(losses)
        if spike:
          found.append(('step', 'the training loss jumped to %.3g in an epoch '
                        'after burn-in, %.0f times the median %.3g of the '
                        'epochs before it' % spike))
    return found


def _window(n):
  """The judged epochs: the last two thirds of the `n` after burn-in (the first third may still hold the chain's transient)."""
  return n - n // 3


def _spike(losses):
  """``(loss, ratio, median)`` of the first epoch whose loss exceeds `LOSS_SPIKE` times the median of the epochs before it, or `None`."""
  for i in range(3, len(losses)):
    median = float(np.median(losses[:i]))
    if (median > 0 and losses[i] > LOSS_SPIKE * median and
        losses[i] - median >= LOSS_MIN_RISE):
      return losses[i], losses[i] / median, median
  return None


ADVICE = {
    'prior': ('the prior: put a proper prior on those weights (the '
              'optimizer\'s prior=\'default\', or tfp_adaptive.keras.priors)'),
    'step': ('the step: lower the learning rate (or the target of '
             'tfa.keras.StepSizeCalibration), or lengthen the burn-in if the '
             'chain started at an optimum'),
    'noise': ('the noise model or the step: let the model learn its noise '
              '(tfa.keras.NoiseScale with tfa.keras.GaussianNLL), or lower '
              'the learning rate'),
}


def message(where, findings, lead='the posterior looks bad after burn-in'):
  """One warning's text for `findings` (see `RunHealth.findings`)."""
  causes = []
  for cause, _ in findings:
    if cause not in causes:
      causes.append(cause)
  return ('%s: %s: %s. Those members are not posterior samples. Likely '
          'cause: %s.' % (where, lead, '; '.join(s for _, s in findings),
                          '; or '.join(ADVICE[c] for c in causes)))
