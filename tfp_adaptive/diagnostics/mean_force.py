"""The mean force: is a chain centred where its target is? One reading per block, its error, and the verdict.

For a density ``π ∝ exp(−U/τ)`` that vanishes fast enough at infinity,
integrating ``∂π/∂θ_i`` over ``R^D`` gives, for every coordinate,

``E_π[∂U/∂θ_i] = 0``                                       (force balance)

whatever ``τ``: the case ``B = e_i`` of the identity ``τ = ⟨∇U·B⟩/⟨∇·B⟩``
whose case ``B = θ − c`` is the virial (`tfp_adaptive.diagnostics.temperature`).
The virial reads the spread of a chain and is blind to where it sits: a
chain that spends too long in one region of its target (the narrow neck
of a funnel, one side of a skewed marginal) can read ``τ`` and still have
its mean, and the mass of that region, off. Its mean force does not
vanish: for a Gaussian target with curvature ``H`` and a chain whose mean
is off by ``δ``, ``⟨∇U⟩ = Hδ``.

Read in units of each coordinate's spread over the draws,
``s_i = sd(θ_i) · ⟨∂U/∂θ_i⟩``, it is the shift of the mean in sds
(``δ_i / sd_i``) where the curvature is diagonal; along a correlated
direction it is the shift in units between the marginal and the
conditional sd. It needs only the gradients the temperature's reading
already takes: a minibatch gradient is unbiased given ``θ``, so it adds
noise and no bias.

A block (a state part, a layer) is read at its coordinate whose interval
lies furthest from 0. The interval of each of its ``D`` coordinates is
widened to ``±z_D·se`` (`interval_z`), so that a block of any size is
called off by chance no more often than one coordinate within
``±INTERVAL_Z·se``. The verdict (`verdict`) is the temperature's: judged
once the two halves of the series agree, *off* when the interval lies
wholly outside ``±TOLERANCE``.
"""

import collections

import numpy as np
import scipy.special

from tfp_adaptive import vocabulary
from tfp_adaptive.diagnostics import advice as advice_lib
from tfp_adaptive.diagnostics import effective_size as ess_lib
from tfp_adaptive.diagnostics import temperature
from tfp_adaptive.diagnostics import temperature_advice

__all__ = ['Shift', 'TOLERANCE', 'advice', 'advice_per_part', 'interval_z',
           'read', 'verdict']

TOLERANCE = 0.05  # A mean within a twentieth of an sd, as the sds within 5%.

Shift = collections.namedtuple('Shift', [
    'shift', 'standard_error', 'effective_size', 'first_half',
    'second_half', 'drift_z', 'size', 'coordinate', 'interval_z'])
Shift.__doc__ = """The mean force of a block, read at its coordinate furthest from balance.

Fields: ``shift`` (``sd(θ_i)·⟨∂U/∂θ_i⟩`` of that coordinate, about the
shift of the chains' mean in its sds), ``standard_error``,
``effective_size`` (summed over chains), ``first_half`` and
``second_half`` (the readings of each half of the series), ``drift_z``
(their difference in combined standard errors), ``size`` (the block's
``D``), ``coordinate`` (the flat index of that coordinate in the block)
and ``interval_z`` (`interval_z` of ``D``).
"""


def interval_z(size, dof=None):
  """The half-width, in standard errors, of each of `size` coordinates' intervals.

  The Šidák width: `size` independent coordinates within ``±z`` by chance
  as often as one within ``±INTERVAL_Z`` (the temperature's). It is
  ``INTERVAL_Z`` for one coordinate and grows slowly (about 4.2 for 100,
  5.6 for 10⁵). With `dof`, Student's t quantile of that many degrees of
  freedom instead of the normal one: a mean over few effective draws
  divided by their own sd has t's tails, which a block of many
  coordinates reaches.
  """
  inside = scipy.special.ndtr(temperature.INTERVAL_Z) * 2. - 1.
  tail = -np.expm1(np.log(inside) / float(size))  # 1 − inside^(1/size)
  if dof is None or not np.isfinite(dof):
    return float(-scipy.special.ndtri(tail / 2.))
  return float(-scipy.special.stdtrit(max(float(dof), 1.), tail / 2.))


def read(gradients, states=None, shared_noise=False, spreads=None):
  """The `Shift` of one block from its gradients and states along a chain.

  Args:
    gradients: array ``[draws, chains, D]`` of ``∂U/∂θ`` (``U = −log π``;
      a minibatch estimate will do) at the draws.
    states: array ``[draws, chains, D]`` of the draws, or `None` with
      `spreads`.
    shared_noise: whether the chains' gradients at a draw share their
      noise (one minibatch for all chains).
    spreads: instead of `states`, each coordinate's sd over all the draws
      (``[D]``), for callers that accumulate it as they go and need not
      keep the draws.

  Returns:
    `Shift`; with non-finite gradients, states or spreads, an infinite
    shift (judged off).
  """
  if (states is None) == (spreads is None):
    raise ValueError('mean_force.read: pass one of `states` and `spreads`.')
  g = np.asarray(gradients)
  size = g.shape[-1]
  g = g.reshape(g.shape[0], -1, size)
  z = interval_z(size)
  if spreads is None:
    x = np.asarray(states).reshape(-1, size)
    spreads = np.concatenate([x[:, c].astype(np.float64).std(0)
                              for c in _chunks(size)])
  spreads = np.asarray(spreads, np.float64).reshape(size)
  if not (np.all(np.isfinite(g)) and np.all(np.isfinite(spreads))):
    return Shift(np.inf, np.inf, 0., np.inf, np.inf, 0., size, 0, z)
  # One effective size for the block's coordinates (their pooled
  # autocovariance), which bounds each coordinate's own from above: on a
  # short chain the coordinate that looks furthest off is often one whose
  # own effective size came out too large. Its intervals take t's
  # quantile for as many effective draws.
  pooled = (ess_lib.pooled_effective_size(g, scale=spreads)
            if g.shape[0] >= 4 else np.ones(g.shape[1]))
  pooled = np.where(np.isfinite(pooled), pooled, 1.)  # Overflowing draws.
  z = interval_z(size, float(np.sum(pooled)) - 1.)
  # In chunks of columns: no float64 copy of the whole block.
  means, se = [], []
  for c in _chunks(size):
    scaled = g[..., c] * spreads[c]
    means.append(scaled.mean((0, 1)))
    se.append(np.maximum(_batch_means_se(scaled, shared_noise),
                         _pooled_se(scaled, pooled)))
  k = int(np.argmax(np.abs(np.concatenate(means)) - z * np.concatenate(se)))
  scaled = np.asarray(g[..., k], np.float64) * spreads[k]
  r = temperature.read(scaled, 1, shared_noise)
  ess = min(r.effective_size, float(np.sum(pooled)))
  return Shift(r.temperature,
               max(r.standard_error, float(_pooled_se(scaled[..., None],
                                                      pooled)[0])),
               ess, r.first_half, r.second_half, r.drift_z, size, k,
               interval_z(size, ess - 1.))


def _pooled_se(values, pooled):
  """``[D]`` standard errors of the means of ``[draws, chains, D]`` values, each chain's from the block's pooled effective size."""
  chains = values.shape[1]
  var = values.var(0, ddof=1) if values.shape[0] > 1 else np.full(
      values.shape[1:], np.inf)
  ess = np.clip(np.asarray(pooled, np.float64), 1.,
                float(values.shape[0]))[:, None]
  return np.sqrt(np.sum(var / ess, 0)) / chains


def _chunks(size, width=4096):
  """Slices of at most `width` columns covering ``range(size)``."""
  return [slice(i, min(i + width, size)) for i in range(0, size, width)]


def _batch_means_se(values, shared_noise, batches=20):
  """``[D]`` standard errors of the means of ``[draws, chains, D]`` values from batch means: one pass over them.

  They only choose the coordinate to read (`read` then takes its error from
  the effective size, as the temperature does); an FFT per coordinate would
  cost far more on a large block.
  """
  n, chains, size = values.shape
  b = min(batches, n)
  if b < 4:
    return np.zeros(size)
  means = values[:n - n % b].reshape(b, -1, chains, size).mean(1)
  se = np.sqrt(np.sum(means.var(0, ddof=1), 0) / b) / chains
  if shared_noise:  # The chains' average: its own batch means.
    se = np.maximum(se, np.sqrt(means.mean(1).var(0, ddof=1) / b))
  return se


def verdict(shift, tolerance=TOLERANCE):
  """``'accurate'``, ``'off'``, ``'unsettled'`` or ``'too short'``, as `tfp_adaptive.diagnostics.temperature.verdict` with ``τ = 0``.

  ``'too short'``: fewer than ``MIN_EFFECTIVE_SIZE`` effective draws.
  ``'unsettled'``: the two halves differ by more than ``STATIONARITY_Z``
  (or the block's `interval_z`, if wider) combined standard errors and by
  more than the tolerance.
  ``'off'``: the ``±interval_z·se`` interval lies wholly outside
  ``±tolerance``, or the shift is more than one sd, whatever its error
  (gradients so wild that their mean has no error to speak of are no
  target's).
  """
  if not np.isfinite(shift.shift):
    return 'off'
  if shift.effective_size < temperature.MIN_EFFECTIVE_SIZE:
    return 'too short'
  # The coordinate was chosen among the block's: its drift is judged at
  # the block's width too, as its interval is.
  if (abs(shift.drift_z) > max(temperature.STATIONARITY_Z, shift.interval_z)
      and abs(shift.second_half - shift.first_half) > tolerance):
    return 'unsettled'
  if (abs(shift.shift) - shift.interval_z * shift.standard_error > tolerance
      or abs(shift.shift) > 1.):  # A whole sd off, whatever its error.
    return 'off'
  return 'accurate'


def advice(where, shift, step_name, adaptive=False, gamma='none',
           tolerance=TOLERANCE, formula='sd(θ)·⟨∂U/∂θ⟩', item='coordinate',
           burnin_share=None):
  """The warning for a `shift` judged off or unsettled (else `None`).

  The factor for the step: a discretisation's shift of the mean grows
  about in proportion to the step, so lowering it by
  ``|shift| / tolerance`` brings the reading into the band; beyond a whole
  sd, that of a shift of one sd, as a first try
  (`tfp_adaptive.diagnostics.advice.step_factor`). A metric that
  adapts without its Γ term shifts the mean by an amount that a smaller
  step does not remove; then a metric frozen after burn-in (or
  ``gamma='corrected'``) is the fix. A corrected metric that adapts
  throughout still shifts it by its moving average's lag: the advice then
  freezes the metric as well as lowering the step.

  Args:
    where: what was read, e.g. ``"state part 0"``.
    shift: a `Shift`.
    step_name: ``'step_size'`` (kernels) or ``'learning_rate'`` (Keras).
    adaptive: whether the sampler's metric adapts throughout the run.
    gamma: the sampler's Γ mode.
    tolerance: the tolerance on the shift, in sds.
    formula, item: how the reading and what it was read at are named
      (``tfp_adaptive.diagnostics.prediction_force.FORMULA`` and
      ``'prediction'`` for predictions).
    burnin_share: optional burn-in length over the length of the part
      read: a shift that has not settled is told the length it needs
      counting a burn-in as much longer
      (`tfp_adaptive.diagnostics.temperature_advice.times_to_settle`).
  """
  judged = verdict(shift, tolerance)
  if judged in ('accurate', 'too short'):
    return None
  if not np.isfinite(shift.shift):
    return temperature_advice.frozen_too(temperature_advice.left_the_target(
        'the mean force of %s' % where, step_name), adaptive)
  said = ('the mean force of %s does not balance: %s of its %s %d reads '
          '%.2g ± %.2g (0 at the target, from %.0f effective draws)'
          % (where, formula, item, shift.coordinate, shift.shift,
             shift.standard_error, shift.effective_size))
  if judged == 'unsettled':
    longer, times = temperature_advice.settle_longer(
        temperature_advice.times_to_settle(shift.first_half,
                                           shift.second_half, tolerance,
                                           burnin_share))
    return temperature_advice.frozen_too(advice_lib.Advice(
        '%s and has not settled: the first half of the run reads %.2g, the '
        'second %.2g (%.1f standard errors apart). The chains are still '
        'moving: %s.'
        % (said, shift.first_half, shift.second_half, shift.drift_z, longer),
        advice_lib.longer_run(step_name, times)), adaptive)
  if item == 'coordinate':
    exact_where, besides = 'the curvature is diagonal', ''
  else:  # A curved prediction also reads a spread that is off.
    exact_where = ('it is linear in the state and its gradient lies along a '
                   'direction of the curvature')
    besides = ', or spread too wide or too narrow where it curves'
  factor = advice_lib.step_factor(shift.shift, tolerance)
  text = ('%s: the chains sit about %.2g sds %s their target\'s mean along '
          'it (where %s), or spend too long in a region on that side%s. '
          'Lower `%s` about %.2gx%s (and run about as many times more steps, '
          'burn-in included).'
          % (said, abs(shift.shift), 'above' if shift.shift > 0 else 'below',
             exact_where, besides, step_name, factor,
             advice_lib.BEYOND_FIRST_ORDER if abs(shift.shift) > 1. else ''))
  changes = advice_lib.smaller_step(step_name, factor)
  if adaptive and not vocabulary.is_corrected(gamma):
    text += (" A metric that adapts without its Γ term shifts the mean by "
             "an amount that a smaller step does not remove: freeze the "
             "metric after burn-in (`num_adaptation_steps`), or use "
             "gamma='corrected'.")
    changes = advice_lib.frozen_metric()
  elif adaptive:
    text += (" Freeze the metric after burn-in (`num_adaptation_steps`) as "
             "well: a moving average that follows the chain shifts it too, "
             "by an amount a smaller step removes only slowly.")
    changes = advice_lib.frozen_metric() + changes
  return advice_lib.Advice(text, changes)


def advice_per_part(shifts, whole, where, step_name, adaptive=False,
                    gamma='none', burnin_share=None, **naming):
  """`advice` for each part's `Shift`, once the whole state has settled: a list of messages.

  Args:
    shifts: ``{key: Shift}``, per state part or layer.
    whole: the whole state's temperature `Reading`; while it has not
      settled (``final_verdict`` ``'unsettled'``), nothing is said here
      (the temperature's warning says it).
    where: ``key -> str`` naming what was read.
    step_name, adaptive, gamma, burnin_share: as `advice`.
    **naming: `advice`'s ``formula`` and ``item``.
  """
  if temperature.final_verdict(whole) == 'unsettled':
    return []
  return [m for m in (advice(where(k), shift, step_name, adaptive, gamma,
                             burnin_share=burnin_share, **naming)
                      for k, shift in shifts.items()) if m]
