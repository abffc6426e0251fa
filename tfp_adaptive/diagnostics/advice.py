"""Advice as data: the change a warning names, beside its text.

Every check that warns (the configurational temperature, the mean force,
the regime numbers) ends its message with what to change. The message is
an `Advice`: a `str` that also holds that change as `Change` tuples, so
that a program can follow it without reading the text. The front ends
warn with a `SamplerWarning`, a `UserWarning` that carries the same
``changes``::

    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      samples, _, _ = tfa.mcmc.sample(kernel, state, 1000)
    for w in caught:
      for change in getattr(w.message, 'changes', ()):
        print(change.parameter, change.factor, change.value)

``changes`` is what to do, together, to follow the message's first
suggestion (a smaller step *and* as many times more steps, burn-in
included); the text may name other fixes after it. A message whose fix has no number (raise
``diagonal_bias`` towards the mean squared gradient) has no changes.

A run can warn more than once (its regime numbers, then its temperature,
its mean force): `merged` gives the one set of changes that follows them
all, as a user reading every warning would::

    changes = tfa.diagnostics.advice.merged(w.message for w in caught)
"""

import collections
import math
import warnings

#: The run's length, as a `Change` names it: in draws for kernels
#: (`tfp_adaptive.mcmc.sample`'s ``num_results``), in epochs for Keras.
LENGTH = {'step_size': 'num_results', 'learning_rate': 'epochs'}
#: The burn-in's length, alike.
BURNIN = {'step_size': 'num_burnin_steps', 'learning_rate': 'burnin'}
#: A `Change.value` meaning "as long as the run's burn-in" (for
#: ``num_adaptation_steps``: freeze the metric when the burn-in ends).
THE_BURNIN = 'the burn-in'
#: How much longer "run longer" means, when the reading gives no number.
LONGER = 4.
#: How much smaller "a smaller step" means for chains that left the target
#: (a reading that is not finite gives no factor): a decade.
DIVERGED = 10.


class Change(collections.namedtuple('Change', ['parameter', 'factor',
                                               'value'])):
  """One change a warning advises.

  Attributes:
    parameter: the name of what to change: a sampler's hyperparameter
      (``'step_size'``, ``'learning_rate'``, ``'preconditioner_decay_rate'``,
      ``'gamma'``, ``'num_adaptation_steps'``, ``'alpha2'``) or the run's length
      (``'num_results'`` and ``'num_burnin_steps'`` for kernels,
      ``'epochs'`` and ``'burnin'`` in Keras).
    factor: multiply the parameter's value by this, or `None`.
    value: set the parameter to this, or `None` (`THE_BURNIN`: the
      run's burn-in length).
  """

  __slots__ = ()

  def __new__(cls, parameter, factor=None, value=None):
    if (factor is None) == (value is None):
      raise ValueError('A Change has a `factor` or a `value`, not both or '
                       'neither. Received: %r, %r' % (factor, value))
    if factor is not None and not (math.isfinite(factor) and factor > 0.):
      raise ValueError('A Change\'s `factor` (for %r) is a finite number '
                       'above 0. Received: %r' % (parameter, factor))
    return super().__new__(cls, parameter, factor, value)


class Advice(str):
  """A warning's text, with `changes`: the `Change` tuples that follow its first suggestion."""

  def __new__(cls, text, changes=()):
    advice = super().__new__(cls, text)
    advice.changes = tuple(changes)
    return advice


class SamplerWarning(UserWarning):
  """A `UserWarning` about a run, with the `changes` its advice names (possibly none).

  ``str(warning)`` is the message; ``warning.changes`` the `Change` tuples.
  """

  def __init__(self, message, changes=()):
    super().__init__(message)
    self.changes = tuple(changes)


def changes_of(message):
  """The `Change` tuples of `message` (an `Advice`, a `SamplerWarning` or a plain `str`: none)."""
  return tuple(getattr(message, 'changes', ()))


#: Changes `merged` takes the smallest factor of (the most cautious step,
#: the Monge metric's smallest ``alpha2``); any other factor is a length,
#: whose largest is taken.
STEPS = frozenset(LENGTH) | {'alpha2'}
#: Changes by value `merged` takes the largest of (a longer moving
#: average); any other value is the first one named.
LARGEST_VALUE = frozenset(['preconditioner_decay_rate'])


def merged(messages):
  """The changes that follow every one of `messages` at once: a tuple of `Change`, one per parameter, in the order first named.

  Each message's changes follow its own first suggestion; a run that warns
  several times (a moving average too short for minibatch gradients, and a
  temperature that has not settled) needs them all. Where two messages
  name the same parameter, the one that asks more is kept: the smallest
  step factor (and ``alpha2``), the longest run and burn-in, the longest moving average
  (``preconditioner_decay_rate``); any other value (``gamma``,
  ``num_adaptation_steps``) as first named. A step lowered by one message
  keeps the run as much longer as that message asks, through its own
  length changes (`smaller_step`).

  Args:
    messages: iterable of `Advice`, `SamplerWarning` or `str` (a plain
      string names no change).

  Returns:
    tuple of `Change`; empty when no message names one.
  """
  kept = {}
  for message in messages:
    for change in changes_of(message):
      old = kept.get(change.parameter)
      if old is None or (old.factor is None) != (change.factor is None):
        kept.setdefault(change.parameter, change)
      elif change.factor is not None:
        pick = min if change.parameter in STEPS else max
        kept[change.parameter] = old._replace(
            factor=pick(old.factor, change.factor))
      elif change.parameter in LARGEST_VALUE:
        kept[change.parameter] = old._replace(
            value=max(old.value, change.value))
  return tuple(kept.values())


def named(who, message):
  """``"<who>: <message>"``, an `Advice` with `message`'s changes."""
  return Advice('%s: %s' % (who, message), changes_of(message))


def warn(message, who=None, stacklevel=2):
  """Warns `message` (``"<who>: <message>"`` given `who`) as a `SamplerWarning` that keeps its changes."""
  if who is not None:
    message = named(who, message)
  warnings.warn(SamplerWarning(str(message), changes_of(message)),
                stacklevel=stacklevel + 1)


def smaller_step(step_name, factor):
  """Lower the step `factor` times, and run as many times more steps and as many more of burn-in.

  A step `factor` times smaller moves the chain `factor` times more slowly:
  it travels as far in as many times more draws, and it takes as many
  times more burn-in steps to come from its start to the target. With the
  burn-in kept as it was, the rerun starts its draws before it has arrived
  (a chain started from zeros, at a tenth of the step, is still on its
  way when its draws begin).
  """
  return (Change(step_name, factor=1. / factor),
          Change(LENGTH[step_name], factor=factor),
          Change(BURNIN[step_name], factor=factor))


def step_factor(bias, tolerance):
  """How many times smaller a step brings a bias of `bias` within `tolerance`: a first try beyond a bias of 1.

  A discretisation's bias (a mean's shift in sds, a temperature's relative
  excess ``T/τ − 1``) grows about in proportion to the step while it is
  small, so lowering the step by ``|bias| / tolerance`` brings it into the
  band. Beyond 1 (a mean a whole sd off, a chain twice as hot as its
  target) it no longer does: a step near where the chain diverges heats it
  far more than in proportion, and a chain that has not arrived reads far
  off at any step. Extrapolated, such a reading asks for a step thousands
  of times smaller, which no run can afford and which does not help a
  chain that has not arrived. The factor is then that of a bias of 1 (at
  most ``1 / tolerance``): a first try, after which the run is read again
  (`BEYOND_FIRST_ORDER` says so in the message).
  """
  return min(abs(float(bias)), 1.) / tolerance


#: What a message adds when `step_factor` holds the factor at that of a
#: bias of 1.
BEYOND_FIRST_ORDER = (' (the factor of a bias of 1: this far off, the bias '
                      'no longer scales with the step, and a chain that has '
                      'not arrived reads far off at any step; read the rerun '
                      'again)')


def longer_run(step_name, factor=LONGER):
  """Run `factor` times longer, with a burn-in `factor` times longer."""
  return (Change(LENGTH[step_name], factor=factor),
          Change(BURNIN[step_name], factor=factor))


def frozen_metric():
  """Freeze the metric when the burn-in ends."""
  return (Change('num_adaptation_steps', value=THE_BURNIN),)
