"""Which steps become ensemble members: the burn-in/thinning schedule and the kept window."""

import warnings

import numpy as np

from tfp_adaptive import validation

__all__ = ['SamplePoints', 'WINDOWS', 'Window']

WINDOWS = ('reservoir', 'last')


class SamplePoints(object):
  """Sample points ``burnin + k·thinning`` (k >= 1) of a counter (steps or epochs).

  (Not a step-size schedule: those are `tfp_adaptive.schedules`.)
  """

  def __init__(self, burnin, thinning):
    self.burnin = validation.check_int('burnin', burnin, low=0)
    self.thinning = validation.check_int('thinning', thinning, low=1)

  def _index(self, count):
    """Number of sample points <= `count`."""
    return max(count - self.burnin, 0) // self.thinning

  def due(self, count, last):
    """True if a sample point lies in ``(last, count]`` (robust to several steps per batch)."""
    return self._index(count) > self._index(last)

  def burnin_epochs(self, unit, params):
    """The burn-in in epochs (at least 1) of a `fit` with Keras' `params`."""
    steps = (params or {}).get('steps')
    if unit == 'epoch':
      return max(self.burnin, 1)
    if not steps:
      return 2
    return max(int(np.ceil(self.burnin / float(steps))), 1)

  def check_reachable(self, unit, params, step, epoch):
    """Warns before training when a `fit` (Keras' `params`, now at `step` and `epoch`) ends before the first sample point."""
    epochs, steps = params.get('epochs'), params.get('steps')
    if epochs is None:
      return
    if unit == 'epoch':
      end = epochs
    elif steps is None:  # A dataset of unknown length: the end is unknown.
      return
    else:
      end = step + (epochs - epoch) * steps
    first = self.burnin + self.thinning
    if first > end:
      warnings.warn(
          'SampleCollector: this fit ends at %s %d, before the first sample '
          'at %s %d (burnin=%d, thinning=%d), so it will keep no members. '
          'Lower `burnin` (with unit=%r) or train for longer.'
          % (unit, end, unit, first, self.burnin, self.thinning, unit))


class Window(object):
  """Keeps at most `max_samples` of the samples offered, by `window` rule.

  ``'reservoir'`` keeps a uniform random subset of all samples offered
  (Vitter's algorithm R, `seed` drives it); ``'last'`` the most recent.
  """

  def __init__(self, max_samples=None, window='reservoir', seed=0):
    if max_samples is not None:
      validation.check_int('max_samples', max_samples, low=1)
    self.max_samples = max_samples
    self.window = validation.check_choice('window', window, WINDOWS)
    self.num_seen = 0
    self.rng = np.random.default_rng(validation.check_seed('seed', seed))

  def slot(self, members):
    """Counts one more sample seen; index it goes to in `members`, or `None` to drop it.

    With ``window='last'`` the members are kept sorted by step, so slot 0
    is the oldest.
    """
    self.num_seen += 1
    n = len(members)
    if self.max_samples is None or n < self.max_samples:
      return n
    if self.window == 'last':
      members.sort(key=lambda m: m.step)
      return 0
    j = int(self.rng.integers(self.num_seen))
    return j if j < self.max_samples else None

  def get_state(self):
    return {'num_seen': self.num_seen, 'rng': self.rng.bit_generator.state}

  def set_state(self, state):
    self.num_seen = int(state['num_seen'])
    self.rng.bit_generator.state = state['rng']
