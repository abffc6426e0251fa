"""The configurational temperature: is a chain sampling its target? One reading, its error, and the verdict.

For a density ``π ∝ exp(−U/τ)`` on ``R^D`` that vanishes fast enough at
infinity, integration by parts gives, for every constant vector ``c``,

``E_π[(θ − c)·∇U(θ)] = τ · D``                                  (virial)

and the same holds for each block of coordinates (a state part, a layer)
with ``D`` its size. So ``T = ⟨(θ − c)·∇U⟩ / D`` read along a chain must be
the sampling temperature ``τ``. A chain that samples another density reads
something else: for a Gaussian target with curvature ``H`` sampled with
covariance ``Σ_s``, ``T = tr(H Σ_s)/D``, and sds that are all off by a
factor ``s`` read ``τ s²``. Too hot (``T > τ``): a step too large for the
curvature or the gradient noise. Too cold: a metric whose moving average
lags the chain, a Γ that is off.

Properties this module relies on (docs, guide "Diagnostics"):

- Minibatch gradients need no correction: ``∇Û`` is unbiased given ``θ``,
  so ``(θ − c)·∇Û`` is an unbiased term of the same mean (only noisier).
- The centre ``c`` changes the variance, not the mean. It should sit in
  the bulk of the chain without depending much on the states it centres:
  the mean of all draws of many independent chains (kernels), in Keras
  the mean of the epochs before each block of epochs, and on an
  ensemble's members the mean of the other half of the run's.
- It is one number per block: sds too wide in some directions and too
  narrow in others can cancel. It misses that; it catches every bias that
  moves the spread of a block as a whole.

`read` turns a series of per-draw virials into a `Reading`: the mean, a
standard error from the series' effective sample size (autocorrelation
counted, `effective_size`; chains pooled, or averaged first when their
gradients share a minibatch), and the stationarity test: the means of the
first and the second half of the series differ by at most
`STATIONARITY_Z` combined standard errors (a Geweke-type test), or by at
most the tolerance. `verdict` judges a reading only once it is
stationary, so no advice is given during a transient: a reading is
*biased* when its ``±INTERVAL_Z·se`` interval lies wholly outside
``τ(1 ± TOLERANCE)``.
`TOLERANCE` = 0.1 is the temperature error of sds 5% off.

The same integration by parts, once per coordinate, gives a second
identity, ``E_π[|∇U|²] = τ · E_π[ΔU]`` (the Laplacian form), read by
`read_ratio` as ``T_ΔU = ⟨|∇U|²⟩ / ⟨ΔU⟩`` with Hutchinson estimates of the
Laplacian. For the Gaussian target above, ``T_ΔU = tr(H² Σ_s)/tr(H)``: the
directions are weighted by their curvature, where the virial weighs them
equally. A network's posterior has a few stiff directions that the data
pin down (they set its predictions) among many the prior alone sets; a
step too long for the stiff ones heats them and leaves the rest at ``τ``,
which the virial averages away and the Laplacian form reads. Its numerator
needs the exact squared gradient: with a stochastic gradient, the product
of two independent draws ``∇Û₁·∇Û₂`` (unbiased), not ``|∇Û|²``.
"""

import collections

import numpy as np

from tfp_adaptive import vocabulary
from tfp_adaptive.diagnostics import advice as advice_lib
from tfp_adaptive.diagnostics import effective_size as ess_lib

__all__ = ['INTERVAL_Z', 'MIN_EFFECTIVE_SIZE', 'Reading', 'STATIONARITY_Z',
           'STEP_SHARE_FACTOR', 'TOLERANCE', 'advice', 'advice_per_part',
           'confirms', 'frozen_too', 'left_the_target', 'mixed_size',
           'not_the_step', 'other_cause', 'too_short', 'unmixed',
           'effective_size',
           'final_verdict', 'pooled_effective_size', 'read', 'read_ratio',
           'unless_refuted', 'verdict']

# The effective sizes, declared in `tfp_adaptive.diagnostics.effective_size`.
effective_size = ess_lib.effective_size
pooled_effective_size = ess_lib.pooled_effective_size

TOLERANCE = 0.1
INTERVAL_Z = 3.
STATIONARITY_Z = 3.
MIN_EFFECTIVE_SIZE = 10.
# The heat a step explains: on a Gaussian the virial reads ``1 + drift_ratio``
# (``ε/4`` of the exact-gradient step, plus the minibatch noise's share);
# a reading this many times further off is not the step's doing.
STEP_SHARE_FACTOR = 3.

Reading = collections.namedtuple('Reading', [
    'temperature', 'standard_error', 'effective_size', 'first_half',
    'second_half', 'drift_z', 'size'])
Reading.__doc__ = """A configurational temperature read from a chain.

Fields: ``temperature`` (``⟨(θ − c)·∇U⟩/D``), ``standard_error`` (from the
effective sample size), ``effective_size`` (summed over chains),
``first_half`` and ``second_half`` (the readings of each half of the
series), ``drift_z`` (their difference in combined standard errors; the
stationarity test) and ``size`` (``D``).
"""


def read(virials, size, shared_noise=False):
  """The `Reading` of a series of virials ``(θ_t − c)·∇U_t`` of one block.

  Args:
    virials: array ``[draws]`` or ``[draws, chains]``: per draw (a step, or
      an epoch's mean over its steps), the virial summed over the block.
    size: ``D``, the number of coordinates of the block.
    shared_noise: whether the chains' gradients at a draw share their
      noise (one minibatch for all chains).

  Returns:
    `Reading`.
  """
  v = np.asarray(virials, np.float64) / float(size)
  if v.ndim == 1:
    v = v[:, None]
  v = v.reshape(v.shape[0], -1)
  return _with_halves(lambda x: ess_lib.mean_and_error(x, shared_noise),
                      [v], size)


def unless_refuted(precise, unbiased, z=INTERVAL_Z):
  """`precise`, unless `unbiased` reads it too cold; then `unbiased`.

  `precise` is a reading with small errors less an estimated bias (the
  virial of every step of reshuffled minibatches, less its reshuffling
  term), an estimate that errs by taking out too much on a hot run (it
  takes the heat out with the bias). `unbiased` reads the same
  temperature without that bias, from fewer draws (each epoch's first
  step, a fresh batch). When it reads higher by more than `z` combined
  standard errors, the estimate was wrong, and the reading to stand
  behind is the unbiased one, with its wider errors. A lower `unbiased`
  reading replaces nothing: a first batch that is not a fresh draw (the
  same permutation every epoch) reads cold.
  """
  gap = unbiased.temperature - precise.temperature
  if np.isfinite(unbiased.standard_error) and gap > z * np.hypot(
      precise.standard_error, unbiased.standard_error):
    return unbiased
  return precise


def _with_halves(estimate, series, size):
  """The `Reading` of ``estimate(*series) -> (mean, se, ess)`` on ``[draws, chains]`` series and on each half of them."""
  mean, se, ess = estimate(*series)
  half = series[0].shape[0] // 2
  (m1, s1, _), (m2, s2, _) = (estimate(*[x[:half] for x in series]),
                              estimate(*[x[half:] for x in series]))
  spread = np.hypot(s1, s2)
  if not np.isfinite(spread) or m2 == m1:
    z = 0.
  elif spread == 0.:  # Halves without noise that differ: a drift.
    z = np.copysign(np.inf, m2 - m1)
  else:
    z = (m2 - m1) / spread
  return Reading(mean, se, ess, m1, m2, float(z), int(size))


def _interval(reading):
  """The reading's ``±INTERVAL_Z·se`` interval, ``(low, high)``."""
  margin = INTERVAL_Z * reading.standard_error
  return reading.temperature - margin, reading.temperature + margin


def _outside(reading, temperature, tolerance):
  """Whether the ``±INTERVAL_Z·se`` interval lies wholly outside ``τ(1 ± tolerance)``."""
  low, high = _interval(reading)
  return (low > temperature * (1. + tolerance) or
          high < temperature * (1. - tolerance))


def confirms(reading, temperature=1., tolerance=TOLERANCE):
  """Whether `reading` settles that the chain is within ``τ(1 ± tolerance)``: judged `'accurate'`, its ``±INTERVAL_Z·se`` interval wholly inside the band."""
  low, high = _interval(reading)
  return bool(verdict(reading, temperature, tolerance) == 'accurate' and
              high <= temperature * (1. + tolerance) and
              low >= temperature * (1. - tolerance))


def verdict(reading, temperature=1., tolerance=TOLERANCE):
  """``'accurate'``, ``'hot'``, ``'cold'``, ``'unsettled'`` or ``'too short'``.

  ``'too short'``: fewer than `MIN_EFFECTIVE_SIZE` effective draws.
  ``'unsettled'``: the two halves differ by more than `STATIONARITY_Z`
  combined standard errors and by more than the tolerance (no advice on a
  chain that is still moving; a drift within the tolerance moves no
  verdict, and a long run's many draws make even a slight one
  significant).
  ``'hot'``/``'cold'``: the ``±INTERVAL_Z·se`` interval lies wholly above
  or below ``τ(1 ± tolerance)``.
  """
  if not np.isfinite(reading.temperature):
    return 'hot'
  if reading.effective_size < MIN_EFFECTIVE_SIZE:
    return 'too short'
  if (abs(reading.drift_z) > STATIONARITY_Z and
      abs(reading.second_half - reading.first_half) > tolerance * temperature):
    return 'unsettled'
  if not _outside(reading, temperature, tolerance):
    return 'accurate'
  return 'hot' if reading.temperature > temperature else 'cold'


def final_verdict(reading, temperature=1., tolerance=TOLERANCE, final=True):
  """`verdict`, with a reading from too few draws that is clearly off ``τ`` at the end of a run (`final`) counted as ``'unsettled'``."""
  judged = verdict(reading, temperature, tolerance)
  if judged == 'too short' and final and _outside(reading, temperature,
                                                  tolerance):
    return 'unsettled'
  return judged


def advice(where, reading, temperature, step_name, adaptive=False,
           gamma='none', tolerance=TOLERANCE, final=True, step_share=None,
           minibatch=False, draws=None):
  """The warning for a `reading` judged hot, cold or unsettled (else `None`).

  A reading from too few effective draws is not judged for bias. At the
  end of a run (`final`) it is still reported when its interval lies
  wholly outside the band: a chain that ends that far from ``τ`` has not
  reached its stationary distribution, and its samples are not yet draws
  from the target.

  The factor for the step comes from the reading: the heating and the lag
  of a moving-average metric both grow about in proportion to the step, so
  lowering it by ``|T/τ − 1| / tolerance`` brings the reading into the band.

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
  """
  judged = final_verdict(reading, temperature, tolerance, final)
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
  if judged == 'unsettled':
    if reading.effective_size >= MIN_EFFECTIVE_SIZE:
      times = advice_lib.LONGER
      longer = ('run longer (about %gx), with a burn-in as much longer'
                % times)
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
  factor = abs(reading.temperature / temperature - 1.) / tolerance
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
            'about %.2gx (and run about as many times more steps, for the '
            'chain to travel as far), or use larger minibatches.'
            % (said, step_name, factor))
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
      'about %gx (and run as many times more steps), then read the run '
      'again.' % (what, step_name, advice_lib.DIVERGED),
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
              INTERVAL_Z * reading.standard_error / temperature)


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
  return advice_lib.Advice(
      ' A chain that has not reached its target reads so too: run longer '
      '(about %gx), with a burn-in as much longer.' % advice_lib.LONGER,
      advice_lib.longer_run(step_name))


def advice_per_part(readings, whole, where, temperature, step_name,
                    adaptive=False, gamma='none', tolerance=TOLERANCE,
                    final=True, extra_wholes=(), step_share=None,
                    minibatch=False, draws=None, precise=False,
                    fewest=None):
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
    extra_wholes: keys of other readings of the whole run (the Laplacian
      form), reported like `whole` once it has settled and when they say
      something else (a run that both read hot is reported once), and not
      counted as parts.
    precise: at the end of the run (`final`), report a whole run judged
      accurate whose interval is too wide to rule out a bias twice the
      tolerance (`imprecise`) as such, with the length it needs
      (`too_imprecise`), instead of its parts: silence then rules out
      draws that far off.
    fewest: optional ``(effective_size, name)`` of the coordinate (or
      prediction) with the fewest effective draws across the chains; with
      `precise`, a whole run judged accurate whose fewest are under
      `mixed_size` is reported as not mixed (`unmixed`) instead of its
      parts.
  """
  whole_said = final_verdict(readings[whole], temperature, tolerance, final)
  in_transit = whole_said == 'unsettled' or (not final and
                                             whole_said == 'too short')
  parts = [k for k in readings if k != whole and k not in extra_wholes]
  keys = [whole] if len(parts) <= 1 or in_transit else [whole] + parts
  if not in_transit:
    keys += [k for k in extra_wholes if k in readings and final_verdict(
        readings[k], temperature, tolerance, final) != whole_said]
  out = {}
  if final and whole_said == 'too short':
    return {whole: frozen_too(too_short(where(whole), readings[whole],
                                        draws or _draws(step_name),
                                        step_name), adaptive)}
  if (final and precise and fewest is not None and
      whole_said == 'accurate' and fewest[0] < mixed_size(tolerance)):
    return {whole: frozen_too(unmixed(fewest[1], fewest[0], tolerance,
                                      draws or _draws(step_name), step_name),
                              adaptive)}
  if final and precise and imprecise(readings[whole], temperature,
                                     tolerance):
    return {whole: frozen_too(too_imprecise(where(whole), readings[whole],
                                            temperature, tolerance, draws,
                                            step_name), adaptive)}
  for key in keys:
    if not final and final_verdict(readings[key], temperature, tolerance,
                                   final) == 'unsettled':
      continue
    message = advice(where(key), readings[key], temperature, step_name,
                     adaptive, gamma, tolerance, final,
                     step_share if key == whole else None, minibatch, draws)
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
         reading.effective_size, MIN_EFFECTIVE_SIZE, times, more),
      (advice_lib.Change(advice_lib.LENGTH[step_name], factor=times),))


def imprecise(reading, temperature=1., tolerance=TOLERANCE):
  """Whether `reading`, judged accurate, is too wide to rule out a bias twice the tolerance.

  Its ``±INTERVAL_Z·se`` half-width exceeds ``2·tolerance·τ``: a reading
  at ``τ`` could then come from draws whose spread is off by about twice
  what the tolerance allows (10% in sd at the default), so its silence
  would vouch for nothing.
  """
  return bool(verdict(reading, temperature, tolerance) == 'accurate' and
              INTERVAL_Z * reading.standard_error >
              2. * tolerance * temperature)


def too_imprecise(where, reading, temperature=1., tolerance=TOLERANCE,
                  draws=None, step_name='step_size'):
  """The warning of a run whose reading is too wide to rule out a bias (`imprecise`), with the length it needs (an `Advice`).

  Its standard error shrinks as one over the root of the draws: the run
  needs about ``(INTERVAL_Z·se / (2·tolerance·τ))²`` times as many (an
  estimate from this run).
  """
  need = (INTERVAL_Z * reading.standard_error /
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


def mixed_size(tolerance=TOLERANCE):
  """The effective draws a coordinate needs for its spread to be known within twice `tolerance` in variance (10% in sd at the default).

  A variance read from ``N`` effective Gaussian draws has a relative
  standard error of ``sqrt(2/N)``; ``INTERVAL_Z`` of them within
  ``2·tolerance`` takes ``N ≥ 2·(INTERVAL_Z / (2·tolerance))²``: 450 at
  the defaults, the precision `imprecise` asks of the temperature.
  """
  return 2. * (INTERVAL_Z / (2. * tolerance)) ** 2


def unmixed(where, size, tolerance=TOLERANCE, draws=None,
            step_name='step_size'):
  """The warning of a run one of whose coordinates has too few effective draws to know its spread (`mixed_size`), with the length it needs (an `Advice`).

  `size`: the coordinate's effective draws across the chains, counted as
  `tfp_adaptive.diagnostics.effective_size.cross_chain_effective_size`
  counts them (chains that disagree count as few draws), and `where`
  names it. Whatever the temperature reads, such a coordinate's spread
  cannot be vouched for: a chain that has not yet crossed a funnel's neck
  or a hierarchical scale's range reads the temperature of where it has
  been. The run needs about ``mixed_size / size`` times the draws (an
  estimate from so short a run: it may take more).
  """
  need = mixed_size(tolerance)
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


def _times_too_short(reading):
  """How many times longer a run must be for `reading` to have the effective draws it takes."""
  return int(np.ceil(MIN_EFFECTIVE_SIZE / max(reading.effective_size, 1e-3)))


def _ratio(numerators, denominators, shared_noise):
  """``ā / b̄`` of ``[draws, chains]`` arrays, its standard error (delta method) and effective size."""
  if not (np.all(np.isfinite(numerators)) and
          np.all(np.isfinite(denominators))):  # A chain that left the target.
    return np.inf, np.inf, 0.
  b = float(denominators.mean())
  if not b > 0.:  # Not a Laplacian to read against: no reading.
    return 0., np.inf, 0.
  ratio = float(numerators.mean()) / b
  _, se, ess = ess_lib.mean_and_error(
      (numerators - ratio * denominators) / b, shared_noise)
  return ratio, se, ess


def read_ratio(squared_gradients, laplacians, size, shared_noise=False):
  """The `Reading` of the Laplacian form ``T = ⟨|∇U|²⟩ / ⟨ΔU⟩`` of one block.

  Both readings are cases of ``τ = ⟨∇U·B⟩ / ⟨∇·B⟩`` for a vector field
  ``B`` (Jepps, Ayton & Evans 2000, Phys. Rev. E 62, 4757): ``B = θ − c``
  gives the virial of `read`, ``B = ∇U`` this form.

  Args:
    squared_gradients: array ``[draws]`` or ``[draws, chains]``: per draw,
      ``|∇U|²`` over the block (or an unbiased estimate of it).
    laplacians: array of the same shape: per draw, an unbiased estimate of
      the block's ``ΔU`` (the trace of its block of the Hessian of ``U``).
    size: ``D``, the number of coordinates of the block (reported only).
    shared_noise: as `read`.

  Returns:
    `Reading`; with a mean Laplacian that is not positive (a target that is
    not log-concave on average where the chain went), a reading of no
    effective draws, which is never judged; with non-finite terms, an
    infinite reading (judged hot).
  """
  a = np.asarray(squared_gradients, np.float64)
  b = np.asarray(laplacians, np.float64)
  if a.ndim == 1:
    a, b = a[:, None], b[:, None]
  a, b = a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)
  return _with_halves(lambda x, y: _ratio(x, y, shared_noise), [a, b], size)
