"""One call that checks a chain run with `tfp.mcmc.sample_chain` (or any loop) as `tfa.mcmc.sample` checks its own."""

import collections
import warnings

import numpy as np
import tensorflow as tf

from tfp_adaptive import validation
from tfp_adaptive.mcmc import driver
from tfp_adaptive.mcmc import kernel as kernel_lib
from tfp_adaptive.mcmc import temperature as temperature_lib

__all__ = ['RunChecks', 'RunReport', 'check_run', 'trace_checks']


class RunChecks(collections.namedtuple(
    'RunChecks', ['step_norms', 'num_nonfinite', 'num_unmoved'])):
  """What `check_run` reads of each traced step (`trace_checks` traces it).

  - ``step_norms``: the step's `StepNorms` (the regime numbers' sums).
  - ``num_nonfinite``: per chain, the steps rejected as non-finite so far.
  - ``num_unmoved``: per chain, the consecutive rejected steps up to now.
  """
  __slots__ = ()


class RunReport(collections.namedtuple(
    'RunReport', ['regime', 'temperature', 'num_nonfinite', 'warnings'])):
  """What `check_run` read: the regime numbers, the temperature readings (`check_temperature`'s dict, or `None`), the per-chain non-finite counts, and the warnings' texts."""
  __slots__ = ()


def trace_checks(state, kernel_results):
  """A `trace_fn` for `tfp.mcmc.sample_chain` that keeps what `check_run` reads.

  Finds our kernel's results inside any wrapper's
  (`TransformedTransitionKernel`, the step-size adaptation wrappers).
  Beside a trace of your own: ``trace_fn=lambda s, r: (mine(s, r),
  tfa.mcmc.trace_checks(s, r))``, and pass the whole trace to
  `check_run`, which finds its `RunChecks` in it.
  """
  del state
  checks = _checks_in(kernel_results)
  if checks is None:
    raise TypeError(
        '`trace_checks` reads the results of a tfp_adaptive kernel (or of a '
        'wrapper around one). Received results of type %s.'
        % (type(kernel_results).__name__,))
  return checks


def _checks_in(results):
  """`RunChecks` of our kernel's results in `results` (through wrappers), or `None`."""
  fields = [driver.find_field(results, name) for name in RunChecks._fields]
  return None if any(f is None for f in fields) else RunChecks(*fields)


def _find_checks(trace):
  """The `RunChecks` (or our kernel results) somewhere in `trace`, or `None`."""
  if isinstance(trace, RunChecks):
    return trace
  found = _checks_in(trace)
  if found is not None:
    return found
  if isinstance(trace, dict):
    items = list(trace.values())
  elif isinstance(trace, (list, tuple)):
    items = list(trace)
  else:
    return None
  for item in items:
    found = _find_checks(item)
    if found is not None:
      return found
  return None


def check_run(kernel, samples, trace, check_temperature=True, seed=None,
              stuck_steps=100, predictions=None, num_burnin_steps=None,
              num_steps_between_results=0):
  """Checks a finished run as `tfa.mcmc.sample` does, and warns the same way.

  For a chain run by `tfp.mcmc.sample_chain` (or any loop of
  ``kernel.one_step``): the non-finite steps and the chains stuck at a
  wall, the regime numbers (`check_regime`) and, at the end, the
  configurational temperature of the samples with the mean force and,
  given `predictions`, the force along them (`check_temperature`). As in
  `tfa.mcmc.sample`, with the temperature read the regime numbers that
  only predict a bias are not warned about, and a moving average too
  short for minibatch gradients still is.

  Args:
    kernel: the kernel that ran: ours, or a TFP wrapper around ours.
    samples: the states `sample_chain` returned (``[draws, chains, ...]``
      per part, in any nest).
    trace: the trace of ``trace_fn=tfa.mcmc.trace_checks``, of
      ``trace_fn=lambda _, r: r`` (the whole results), or any nest that
      holds one of them.
    check_temperature: read the samples' temperature (three or four
      gradients per draw read, up to `check_temperature`'s default number
      of draws).
    seed: stateless seed of the reading's probes.
    stuck_steps: int >= 1; warn about chains whose last this many steps
      were all rejected.
    predictions: optional callable of the state returning smooth
      predictions, as in `tfa.mcmc.sample`.
    num_burnin_steps, num_steps_between_results: ints >= 0, what
      `sample_chain` was given. A run that has not settled is told a
      length with a burn-in as much longer, and the burn-in it had
      counts in that length; unknown (`None`, the default), none is
      counted and the length told is the larger one.

  Returns:
    `RunReport`.

  Example:
    >>> samples, trace = tfp.mcmc.sample_chain(
    ...     1000, state, kernel=kernel, trace_fn=tfa.mcmc.trace_checks,
    ...     seed=(0, 1))
    >>> tfa.mcmc.check_run(kernel, samples, trace)
  """
  if kernel_lib.sampler_in(kernel) is None:
    raise TypeError('`kernel` must be (or wrap) a tfp_adaptive.mcmc kernel. '
                    'Received: %r' % (kernel,))
  validation.check_bool('check_temperature', check_temperature)
  validation.check_int('stuck_steps', stuck_steps)
  if num_burnin_steps is not None:
    validation.check_int('num_burnin_steps', num_burnin_steps, low=0)
  validation.check_int('num_steps_between_results',
                       num_steps_between_results, low=0)
  checks = _find_checks(trace)
  if checks is None:
    raise ValueError(
        '`trace` holds no step norms and non-finite counts to check. Run '
        'sample_chain with trace_fn=tfa.mcmc.trace_checks (or keep it '
        'beside your own: trace_fn=lambda s, r: (mine(s, r), '
        'tfa.mcmc.trace_checks(s, r))). Received a trace of type %s.'
        % (type(trace).__name__,))
  last = lambda x: np.asarray(x)[-1]
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    final = RunChecks(None, last(checks.num_nonfinite),
                      last(checks.num_unmoved))
    driver.check_finite(kernel, final, stuck_steps)
    counts = driver.report_nonfinite(kernel, final)
    regime = driver.regime_of(kernel, driver.run_means(checks.step_norms),
                              warn=True, estimates=not check_temperature)[0]
    readings = None
    if check_temperature:
      draws = int(np.shape(tf.nest.flatten(samples)[0])[0])
      burnin_share = (None if num_burnin_steps is None else
                      num_burnin_steps /
                      max(draws * (1 + num_steps_between_results), 1))
      readings = temperature_lib.check_temperature(
          kernel, samples, seed=seed, predictions=predictions, regime=regime,
          burnin_share=burnin_share)
  for w in caught:
    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
  return RunReport(regime, readings, counts,
                   [str(w.message) for w in caught])
