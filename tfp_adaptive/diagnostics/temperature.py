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

from tfp_adaptive.diagnostics import effective_size as ess_lib

__all__ = ['INTERVAL_Z', 'MIN_EFFECTIVE_SIZE', 'Reading', 'STATIONARITY_Z',
           'TOLERANCE', 'confirms', 'draws_to_confirm', 'draws_to_resolve',
           'effective_size', 'final_verdict',
           'imprecise', 'leaving', 'mixed_size', 'pooled_effective_size',
           'read', 'read_ratio', 'unless_refuted', 'verdict']

# The effective sizes, declared in `tfp_adaptive.diagnostics.effective_size`.
effective_size = ess_lib.effective_size
pooled_effective_size = ess_lib.pooled_effective_size

TOLERANCE = 0.1
INTERVAL_Z = 3.
STATIONARITY_Z = 3.
MIN_EFFECTIVE_SIZE = 10.

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


def draws_to_confirm(reading, temperature=1., tolerance=TOLERANCE):
  """How many times the effective draws of `reading` would let it `confirms` the band, if its value held: 1 if it confirms now, ``inf`` if no number would.

  The standard error falls as one over the root of the effective draws,
  so a reading ``T ± se`` inside ``τ(1 ± tolerance)`` confirms it with
  ``(INTERVAL_Z·se / (τ·tolerance − |T − τ|))²`` times its draws. A
  reading whose verdict is not ``'accurate'``, or whose value lies on or
  outside the band's edge, gets ``inf``: more draws would not settle it.
  """
  if confirms(reading, temperature, tolerance):
    return 1.
  room = temperature * tolerance - abs(reading.temperature - temperature)
  if (verdict(reading, temperature, tolerance) != 'accurate' or room <= 0.
      or not np.isfinite(reading.standard_error)):
    return float('inf')
  return max(1., float((INTERVAL_Z * reading.standard_error / room) ** 2))


def verdict(reading, temperature=1., tolerance=TOLERANCE):
  """``'accurate'``, ``'hot'``, ``'cold'``, ``'unsettled'`` or ``'too short'``.

  ``'too short'``: fewer than `MIN_EFFECTIVE_SIZE` effective draws.
  ``'unsettled'``: the two halves differ by more than `STATIONARITY_Z`
  combined standard errors and by more than the tolerance (no advice on a
  chain that is still moving; a drift within the tolerance moves no
  verdict, and a long run's many draws make even a slight one
  significant), unless the run is leaving its target (`leaving`).
  ``'hot'``/``'cold'``: the ``±INTERVAL_Z·se`` interval lies wholly above
  or below ``τ(1 ± tolerance)``.
  """
  if not np.isfinite(reading.temperature):
    return 'hot'
  if reading.effective_size < MIN_EFFECTIVE_SIZE:
    return 'too short'
  if (abs(reading.drift_z) > STATIONARITY_Z and
      abs(reading.second_half - reading.first_half) > tolerance * temperature
      and not leaving(reading, temperature, tolerance)):
    return 'unsettled'
  if not _outside(reading, temperature, tolerance):
    return 'accurate'
  return 'hot' if reading.temperature > temperature else 'cold'


def leaving(reading, temperature=1., tolerance=TOLERANCE):
  """Whether a drifting `reading` moves away from ``τ``: both halves outside the band on one side, the second further out, and the whole interval outside it.

  A chain that relaxes towards its target reads closer to ``τ`` in the
  second half of the run than in the first, and running longer settles it.
  One whose reading moves further out while it is already out (a step
  that heats it more and more, a metric whose moving average drifts, a
  chain that leaves its mode) does not settle by running longer: its
  reading is judged hot or cold as it stands, and the advice is the
  step's or the metric's.
  """
  first = reading.first_half / temperature - 1.
  second = reading.second_half / temperature - 1.
  return bool(first * second > 0. and abs(first) > tolerance and
              abs(second) > abs(first) and
              _outside(reading, temperature, tolerance))


def final_verdict(reading, temperature=1., tolerance=TOLERANCE, final=True):
  """`verdict`, with a reading from too few draws that is clearly off ``τ`` at the end of a run (`final`) counted as ``'unsettled'``."""
  judged = verdict(reading, temperature, tolerance)
  if judged == 'too short' and final and _outside(reading, temperature,
                                                  tolerance):
    return 'unsettled'
  return judged


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


def draws_to_resolve(reading, temperature=1., tolerance=TOLERANCE):
  """How many times the effective draws of `reading` would make it no longer `imprecise`: ``(INTERVAL_Z·se / (2·tolerance·τ))²``, or 1 where it is not."""
  if not imprecise(reading, temperature, tolerance):
    return 1.
  return float((INTERVAL_Z * reading.standard_error /
                (2. * tolerance * temperature)) ** 2)


def mixed_size(tolerance=TOLERANCE):
  """The effective draws a coordinate needs for its spread to be known within twice `tolerance` in variance (10% in sd at the default).

  A variance read from ``N`` effective Gaussian draws has a relative
  standard error of ``sqrt(2/N)``; ``INTERVAL_Z`` of them within
  ``2·tolerance`` takes ``N ≥ 2·(INTERVAL_Z / (2·tolerance))²``: 450 at
  the defaults, the precision `imprecise` asks of the temperature.
  """
  return 2. * (INTERVAL_Z / (2. * tolerance)) ** 2


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

