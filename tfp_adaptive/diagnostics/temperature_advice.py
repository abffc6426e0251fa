"""What to do about a configurational temperature that is off: the warnings and the change each advises.

A `tfp_adaptive.diagnostics.temperature.Reading` judged by
`tfp_adaptive.diagnostics.temperature.verdict` is turned here into an
`tfp_adaptive.diagnostics.advice.Advice`: the message a front end warns
with and the `Change` it names. `advice` words one reading; `advice_per_part`
words a run read whole and per part (what is reported, and when);
`too_short`, `too_imprecise` and `unmixed` word a run that cannot be read
yet, with the length it needs.

The step's factor comes from the reading (the heat of a step and the lag of
a moving-average metric both grow about in proportion to the step). When
the metric adapts throughout the run, its moving average follows the chain
and biases it by an amount no length removes and a smaller step removes only
slowly: the advice then freezes the metric after burn-in, alone for a cold
reading, with a smaller step for a hot one, and with every "run longer"
(`frozen_too`).
"""

import numpy as np

from tfp_adaptive import vocabulary
from tfp_adaptive.diagnostics import advice as advice_lib
from tfp_adaptive.diagnostics import temperature as temperature_lib

__all__ = ['STEP_SHARE_FACTOR', 'advice', 'advice_per_part', 'frozen_too',
           'left_the_target', 'not_the_step', 'other_cause', 'settle_longer',
           'times_to_settle', 'too_imprecise', 'too_short', 'unmixed']

# The heat a step explains: on a Gaussian the virial reads ``1 + drift_ratio``
# (``ε/4`` of the exact-gradient step, plus the minibatch noise's share);
# a reading this many times further off is not the step's doing.
STEP_SHARE_FACTOR = 3.


def advice(where, reading, temperature, step_name, adaptive=False,
           gamma='none', tolerance=temperature_lib.TOLERANCE, final=True,
           step_share=None, minibatch=False, draws=None, burnin_share=None):
  """The warning for a `reading` judged hot, cold or unsettled (else `None`).

  A reading from too few effective draws is not judged for bias. At the
  end of a run (`final`) it is still reported when its interval lies
  wholly outside the band: a chain that ends that far from ``τ`` has not
  reached its stationary distribution, and its samples are not yet draws
  from the target.

  The factor for the step comes from the reading: the heating and the lag
  of a moving-average metric both grow about in proportion to the step, so
  lowering it by ``|T/τ − 1| / tolerance`` brings the reading into the band
  (beyond twice ``τ``, the factor of ``T = 2τ``, as a first try:
  `tfp_adaptive.diagnostics.advice.step_factor`).

  Args:
    where: what was read, e.g. ``"state part 0"`` or ``"layer 'dense'"``.
    reading: a `Reading`.
    temperature: ``τ``.
    step_name: ``'step_size'`` (kernels) or ``'learning_rate'`` (Keras).
    adaptive: whether the sampler's metric adapts (a frozen metric and
      ``gamma='corrected'`` are then the other fixes).
    gamma: the sampler's Γ mode.
    tolerance: relative tolerance on ``τ``.
    final: whether the run has ended (a reading from too few draws is then
      reported when it is clearly off).
    step_share: optional ``drift_ratio`` of the run, for a virial reading of
      the whole state: the heat the step explains (`not_the_step`). A hot
      reading beyond it is said not to be the step's, and the message
      names what is (`other_cause`).
    minibatch: whether the gradients were minibatch estimates.
    draws: what the reading's draws are, in the plural (`advice_per_part`).
    burnin_share: optional length of the run's burn-in over the length of
      the part read. For a run that has not settled, the length it needs
      then counts the approach to ``τ`` that a burn-in as much longer
      discards (`times_to_settle`); unknown, none is counted.
  """
  judged = temperature_lib.final_verdict(reading, temperature, tolerance,
                                         final)
  if judged in ('accurate', 'too short'):
    return None
  if not np.isfinite(reading.temperature):
    return frozen_too(left_the_target(
        'the configurational temperature of %s' % where, step_name),
                      adaptive)
  said = ('the configurational temperature of %s reads %.3g ± %.2g (τ = %g, '
          'from %.0f effective draws)' % (where, reading.temperature,
                                          reading.standard_error, temperature,
                                          reading.effective_size))
  if temperature_lib.leaving(reading, temperature, tolerance):
    said += (', further out in the second half of the run (%.3g) than in the '
             'first (%.3g): the chain moves away from its target, which a '
             'longer run does not settle' % (reading.second_half,
                                              reading.first_half))
  if judged == 'unsettled':
    if reading.effective_size >= temperature_lib.MIN_EFFECTIVE_SIZE:
      longer, times = settle_longer(times_to_settle(
          reading.first_half - temperature, reading.second_half - temperature,
          tolerance * temperature, burnin_share))
    else:
      times = _times_too_short(reading)
      longer = 'run at least %d times as many %s, with a longer burn-in' % (
          times, draws or ('epochs' if step_name == 'learning_rate' else
                           'draws'))
    return frozen_too(advice_lib.Advice(
        '%s and has not settled: the first half of the run reads %.3g, '
        'the second %.3g (%.1f standard errors apart). The chain has not '
        'reached its stationary distribution, so its samples are not yet '
        'draws from the target: %s.'
        % (said, reading.first_half, reading.second_half, reading.drift_z,
           longer), advice_lib.longer_run(step_name, times)), adaptive)
  excess = reading.temperature / temperature - 1.
  factor = advice_lib.step_factor(excess, tolerance)
  beyond = advice_lib.BEYOND_FIRST_ORDER if abs(excess) > 1. else ''
  if judged == 'hot' and not_the_step(reading, temperature, step_share):
    cause = other_cause(adaptive, gamma, minibatch, step_name)
    return advice_lib.Advice(
        '%s: the chain is wider than its target, and its step explains '
        'about %.2g of that (drift_ratio), so a smaller `%s` will not '
        'remove it.%s' % (said, step_share, step_name, cause),
        advice_lib.changes_of(cause))
  changes = advice_lib.smaller_step(step_name, factor)
  if judged == 'hot':
    text = ('%s: the chain is wider than its target, as from a step too '
            'large for the curvature or the gradient noise. Lower `%s` '
            'about %.2gx%s (and run about as many times more steps, burn-in '
            'included, for the chain to arrive and travel as far), or use '
            'larger minibatches.'
            % (said, step_name, factor, beyond))
    if adaptive:
      text += (' Freeze the metric after burn-in (`num_adaptation_steps`) '
               'as well: a moving average that follows the chain heats it '
               'too, by an amount a smaller step removes only slowly.')
      changes = advice_lib.frozen_metric() + changes
  elif adaptive:
    text = ('%s: the chain is narrower than its target, as from a metric '
            'whose moving average lags the chain. Freeze the metric after '
            'burn-in (`num_adaptation_steps`): a fixed metric neither lags '
            'nor needs Γ. Lowering `%s` about %.2gx shrinks the lag too, '
            'more slowly.' % (said, step_name, factor))
    changes = advice_lib.frozen_metric()
  else:
    text = ('%s: the chain is narrower than its target. Lower `%s` about '
            '%.2gx.' % (said, step_name, factor))
  if judged == 'cold':
    text += (' A chain still spreading into directions that only the prior '
             'sets (weights whose norms keep growing) also reads cold: '
             'there, run longer instead.')
  if adaptive and not vocabulary.is_corrected(gamma):
    text += " With an adaptive metric, use gamma='corrected'."
  elif judged == 'cold' and _metric_holds_gradient(adaptive, gamma,
                                                   minibatch):
    text += ' ' + _MINIBATCH_METRIC
  return advice_lib.Advice(text, changes)


def left_the_target(what, step_name):
  """The warning of a reading that is not finite: the chains left the target (an `Advice` with a step `advice_lib.DIVERGED` times smaller).

  `what`: the reading, e.g. ``"the configurational temperature of the
  whole state"``.
  """
  return advice_lib.Advice(
      '%s cannot be read: it is not finite, so some chain left the target '
      '(its state or gradient overflowed), as from a step too large for the '
      "target's stiffest direction. No reading gives the factor. Lower `%s` "
      'about %gx (and run as many times more steps, burn-in included), '
      'then read the run again.' % (what, step_name, advice_lib.DIVERGED),
      advice_lib.smaller_step(step_name, advice_lib.DIVERGED))


def frozen_too(message, adaptive):
  """`message` (an `Advice` that lengthens the run), with the metric also frozen after burn-in when it adapts throughout (`adaptive`).

  A run too short, too imprecise or unsettled is rerun longer; under a
  metric that keeps adapting, that rerun also keeps the moving average's
  lag behind the chain, a bias that no length removes and that the
  longer run may then read. Frozen after burn-in, the metric is fixed and
  the sampler exact up to its step.
  """
  if not adaptive:
    return message
  return advice_lib.Advice(
      str(message) + ' Freeze the metric after burn-in as well '
      '(`num_adaptation_steps`): a moving average that keeps following the '
      'chain biases it by an amount no length removes.',
      advice_lib.changes_of(message) + advice_lib.frozen_metric())


def not_the_step(reading, temperature, step_share):
  """Whether a hot virial `reading` is beyond what a run with this ``drift_ratio`` heats.

  A step heats the virial reading by about ``drift_ratio·τ`` (a Gaussian's
  directions each by ``ε/4``, minibatch noise by its share); beyond
  `STEP_SHARE_FACTOR` times that and `INTERVAL_Z` standard errors, lowering
  the step does not bring it back.
  """
  if step_share is None or not np.isfinite(reading.temperature):
    return False
  excess = reading.temperature / temperature - 1.
  return bool(excess > STEP_SHARE_FACTOR * float(step_share) +
              temperature_lib.INTERVAL_Z * reading.standard_error /
              temperature)


_MINIBATCH_METRIC = (
    "With minibatch gradients the metric's moving average holds the very "
    "gradient it preconditions, a bias that no step removes: a longer "
    "average (`preconditioner_decay_rate` 0.9 or more) shrinks it, "
    "gamma='corrected' (the metric from a minibatch of its own) removes "
    "its first-order part, and freezing the metric after burn-in "
    "(`num_adaptation_steps`) or larger minibatches remove it.")


def _metric_holds_gradient(adaptive, gamma, minibatch):
  return bool(minibatch and adaptive and vocabulary.is_corrected(gamma) and
              not vocabulary.lags_metric(gamma) and
              not vocabulary.independent_metric(gamma))


def other_cause(adaptive, gamma, minibatch, step_name='step_size'):
  """What to change instead of the step when the step does not explain a hot run (an `Advice` sentence, with a leading space)."""
  if _metric_holds_gradient(adaptive, gamma, minibatch):
    return advice_lib.Advice(' ' + _MINIBATCH_METRIC,
                             advice_lib.frozen_metric())
  if adaptive and not vocabulary.is_corrected(gamma):
    return advice_lib.Advice(
        " A metric that adapts without its Γ term biases the chain: freeze "
        "the metric after burn-in (`num_adaptation_steps`), which removes "
        "both Γ and the moving average's lag, or use gamma='corrected'.",
        advice_lib.frozen_metric())
  if adaptive:
    return advice_lib.Advice(
        " The metric's moving average lags the chain, or rises at a cusp "
        "where the gradient vanishes: freeze the metric after burn-in "
        "(`num_adaptation_steps`), shorten the average "
        "(`preconditioner_decay_rate`), or raise `diagonal_bias`.",
        advice_lib.frozen_metric())
  longer, times = settle_longer(None)  # A settled reading shows no time.
  return advice_lib.Advice(
      ' A chain that has not reached its target reads so too: %s.' % longer,
      advice_lib.longer_run(step_name, times))


def advice_per_part(readings, whole, where, temperature, step_name,
                    adaptive=False, gamma='none',
                    tolerance=temperature_lib.TOLERANCE,
                    final=True, extra_wholes=(), step_share=None,
                    minibatch=False, draws=None, precise=False,
                    fewest=None, burnin_share=None):
  """`advice` for a run read whole and per part: ``{key: message}`` of the parts to report.

  The whole run is reported on first. While it has not settled (or, before
  the end of the run, has too few effective draws to say), its parts are
  not reported besides: a part can look settled or off within a run whose
  slower parts are still moving, and its advice would be about the
  transient. A reading that has not settled is reported only at the end.
  With a single part, the whole is that part, and only it is reported.

  Args:
    readings: ``{key: Reading}``, the whole run's under `whole`.
    whole: the key of the whole run's reading.
    where: ``key -> str`` naming what was read, for the messages.
    temperature, step_name, adaptive, gamma, tolerance, final, minibatch:
      as `advice`.
    step_share: as `advice`, for the whole run's virial reading only (a
      part, or the Laplacian form, can read a stiff direction's heat, which
      the run's mean ``drift_ratio`` understates).
    draws: what the readings' draws are, in the plural, for a run too
      short to read (default: epochs with ``'learning_rate'``, else a
      kernel's draws).
    burnin_share: as `advice`.
    extra_wholes: keys of other readings of the whole run (the Laplacian
      form), reported like `whole` once it has settled and when they say
      something else (a run that both read hot is reported once), and not
      counted as parts.
    precise: at the end of the run (`final`), report a whole run judged
      accurate whose interval is too wide to rule out a bias twice the
      tolerance (`tfp_adaptive.diagnostics.temperature.imprecise`) as
      such, with the length it needs (`too_imprecise`), instead of its
      parts: silence then rules out draws that far off.
    fewest: optional ``(effective_size, name)`` of the coordinate (or
      prediction) with the fewest effective draws across the chains; with
      `precise`, a whole run judged accurate whose fewest are under
      `tfp_adaptive.diagnostics.temperature.mixed_size` is reported as not
      mixed (`unmixed`) instead of its parts.
  """
  whole_said = temperature_lib.final_verdict(readings[whole], temperature,
                                             tolerance, final)
  in_transit = whole_said == 'unsettled' or (not final and
                                             whole_said == 'too short')
  parts = [k for k in readings if k != whole and k not in extra_wholes]
  keys = [whole] if len(parts) <= 1 or in_transit else [whole] + parts
  if not in_transit:
    keys += [k for k in extra_wholes
             if k in readings and temperature_lib.final_verdict(
                 readings[k], temperature, tolerance, final) != whole_said]
  out = {}
  if final and whole_said == 'too short':
    return {whole: frozen_too(too_short(where(whole), readings[whole],
                                        draws or _draws(step_name),
                                        step_name), adaptive)}
  if (final and precise and fewest is not None and
      whole_said == 'accurate' and
      fewest[0] < temperature_lib.mixed_size(tolerance)):
    return {whole: frozen_too(unmixed(fewest[1], fewest[0], tolerance,
                                      draws or _draws(step_name), step_name),
                              adaptive)}
  if final and precise and temperature_lib.imprecise(readings[whole],
                                                     temperature, tolerance):
    return {whole: frozen_too(too_imprecise(where(whole), readings[whole],
                                            temperature, tolerance, draws,
                                            step_name), adaptive)}
  for key in keys:
    if not final and temperature_lib.final_verdict(
        readings[key], temperature, tolerance, final) == 'unsettled':
      continue
    message = advice(where(key), readings[key], temperature, step_name,
                     adaptive, gamma, tolerance, final,
                     step_share if key == whole else None, minibatch, draws,
                     burnin_share)
    if message:
      out[key] = message
  return out


def too_short(where, reading, draws=None, step_name='step_size'):
  """The warning of a run whose reading has too few effective draws to be judged, with the length it needs (an `Advice`).

  `draws`: what a draw of the reading is, in the plural (default: a
  kernel's draws).
  """
  times = _times_too_short(reading)
  more = draws or _draws(step_name)
  return advice_lib.Advice(
      'the configurational temperature of %s reads %.3g ± %.2g from %.1f '
      'effective draws, fewer than the %d it takes to judge it: the run is '
      'too short to tell whether its draws are from the target. Run at '
      'least %d times as many %s (an estimate from so short a run: it may '
      'take more).'
      % (where, reading.temperature, reading.standard_error,
         reading.effective_size, temperature_lib.MIN_EFFECTIVE_SIZE, times,
         more),
      (advice_lib.Change(advice_lib.LENGTH[step_name], factor=times),))


def too_imprecise(where, reading, temperature=1.,
                  tolerance=temperature_lib.TOLERANCE, draws=None,
                  step_name='step_size'):
  """The warning of a run whose reading is too wide to rule out a bias (`tfp_adaptive.diagnostics.temperature.imprecise`), with the length it needs (an `Advice`).

  Its standard error shrinks as one over the root of the draws: the run
  needs about ``(INTERVAL_Z·se / (2·tolerance·τ))²`` times as many (an
  estimate from this run).
  """
  need = (temperature_lib.INTERVAL_Z * reading.standard_error /
          (2. * tolerance * temperature)) ** 2
  times = int(np.ceil(need - 1e-9))  # 9.000000000000002 is 9.
  more = draws or _draws(step_name)
  return advice_lib.Advice(
      'the configurational temperature of %s reads %.3g ± %.2g (τ = %g, '
      'from %.0f effective draws): too imprecise to rule out draws whose '
      'spread is %d%% off the target\'s, so the run cannot be vouched '
      'for. A reading this wide comes from draws that are few against the '
      'spread of the virial, as in a funnel\'s neck, a hierarchical '
      'model\'s scale or a heavy tail. Run at least %d times as many %s.'
      % (where, reading.temperature, reading.standard_error, temperature,
         reading.effective_size, round(100 * tolerance), times, more),
      (advice_lib.Change(advice_lib.LENGTH[step_name], factor=times),))


def unmixed(where, size, tolerance=temperature_lib.TOLERANCE, draws=None,
            step_name='step_size'):
  """The warning of a run one of whose coordinates has too few effective draws to know its spread (`tfp_adaptive.diagnostics.temperature.mixed_size`), with the length it needs (an `Advice`).

  `size`: the coordinate's effective draws across the chains, counted as
  `tfp_adaptive.diagnostics.effective_size.cross_chain_effective_size`
  counts them (chains that disagree count as few draws), and `where`
  names it. Whatever the temperature reads, such a coordinate's spread
  cannot be vouched for: a chain that has not yet crossed a funnel's neck
  or a hierarchical scale's range reads the temperature of where it has
  been. The run needs about ``mixed_size / size`` times the draws (an
  estimate from so short a run: it may take more).
  """
  need = temperature_lib.mixed_size(tolerance)
  times = int(np.ceil(need / max(size, 1e-3) - 1e-9))
  more = draws or _draws(step_name)
  return advice_lib.Advice(
      '%s has %.0f effective draws across the chains, fewer than the %.0f '
      'it takes to know its spread within %d%%: the chains have not mixed '
      'there, and the run is too short to tell whether its draws are from '
      'the target. Run at least %d times as many %s.'
      % (where, size, need, round(100 * tolerance), times, more),
      (advice_lib.Change(advice_lib.LENGTH[step_name], factor=times),))


def _draws(step_name):
  """What a reading's draws are: a `fit`'s epochs, or a kernel's draws."""
  return ('epochs after burn-in' if step_name == 'learning_rate' else
          'draws after burn-in (or as many more chains)')


#: The most times longer `times_to_settle` advises ("at least" this many).
_MOST_TIMES = 1000


def times_to_settle(first, second, tolerance, burnin_share=None):
  """How many times longer a run that has not settled must be, burn-in as much longer, for its reading to settle within the tolerance.

  `first` and `second`, the halves' distances from the value the reading
  has at the target (``τ`` for a temperature, 0 for a mean force), are
  read as the averages over each half of a distance that decays as
  ``A·exp(−t/λ)`` (``t`` in units of the part of the run read): their
  ratio is then ``exp(−1/(2λ))``, which gives ``λ``, and `first` gives
  ``A``. A run ``K`` times as long, whose burn-in (`burnin_share` times the
  part read, 0 when unknown) is ``K`` times as long too, reads an average
  distance of ``A·exp(−(K − 1)·burnin_share/λ)·(λ/K)·(1 − exp(−K/λ))``;
  the smallest whole ``K`` of at least 2 that brings it under half the
  tolerance is returned, at most `_MOST_TIMES`. One relaxation time
  stands for all: a target whose directions relax at different rates
  shows the average, and its slowest directions may need more.

  Args:
    first: the first half's distance from the target's value.
    second: the second half's.
    tolerance: the distance tolerated, in the reading's units
      (``tolerance·τ`` for a temperature).
    burnin_share: optional burn-in length over the length of the part read.

  Returns:
    ``(K, λ)``, or `None` when the halves show no decay towards the
    target's value (on opposite sides of it, or the second no nearer).
  """
  m1, m2 = float(first), float(second)
  if not (np.isfinite(m1) and np.isfinite(m2)) or m1 == 0.:
    return None
  ratio = m2 / m1
  if not 0. < ratio < 1.:
    return None
  relaxation = 0.5 / np.log(1. / ratio)
  start = m1 / (relaxation * -np.expm1(-0.5 / relaxation))
  share = max(float(burnin_share or 0.), 0.)
  times = np.arange(2, _MOST_TIMES + 1, dtype=np.float64)  # Longer.
  left = np.abs(start * np.exp(-(times - 1.) * share / relaxation) *
                relaxation / times * -np.expm1(-times / relaxation))
  within = np.flatnonzero(left <= 0.5 * tolerance)
  return (int(times[within[0]]) if within.size else _MOST_TIMES,
          float(relaxation))


def settle_longer(settle):
  """The clause that tells a run that has not settled how much longer to run: from `times_to_settle`'s ``(K, λ)``, or `advice_lib.LONGER` when it is `None`; with the factor."""
  if settle is None:
    return ('run longer (about %gx), with a burn-in as much longer'
            % advice_lib.LONGER, advice_lib.LONGER)
  times, relaxation = settle
  return ('its halves approach the target as a distance that decays with a '
          'time of about %.2g times the part of the run read: run %s%dx '
          'longer, with a burn-in as much longer (an estimate that assumes '
          'one such time: directions slower than the average may need more)'
          % (relaxation, 'at least ' if times >= _MOST_TIMES else 'about ',
             times), times)


def _times_too_short(reading):
  """How many times longer a run must be for `reading` to have the effective draws it takes."""
  return int(np.ceil(temperature_lib.MIN_EFFECTIVE_SIZE /
                     max(reading.effective_size, 1e-3)))
