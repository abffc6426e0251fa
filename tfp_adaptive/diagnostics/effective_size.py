"""Effective sample sizes of chains, and the standard error of a mean over them.

Geyer's initial monotone sequence estimator, as Stan, TFP and ArviZ compute
it: the autocorrelations (by FFT) summed in pairs up to the first pair that
is not positive, the pair sums made non-increasing. Every reading of
`tfp_adaptive.diagnostics` (temperature, mean force, prediction force)
takes its error from here.
"""

import numpy as np

__all__ = ['cross_chain_effective_size', 'effective_size', 'mean_and_error',
           'pooled_effective_size']


def mean_and_error(values, shared_noise=False):
  """Mean, its standard error and effective size of ``[draws, chains]`` values.

  The chains' errors are pooled, each from its own effective size. With
  `shared_noise` (a minibatch gradient drawn once for all chains at a
  draw), the chains' values at a draw are not independent, and the error
  is that of the series of their average.
  """
  n, chains = values.shape
  average = values.mean(1)
  if n < 4:
    return float(average.mean()), np.inf, float(n * chains)
  ess = np.clip(effective_size(values), 1., float(n))
  se = np.sqrt(np.sum(values.var(0, ddof=1) / ess)) / chains
  if shared_noise:
    ess_average = np.clip(effective_size(average[:, None])[0], 1., float(n))
    se = max(se, np.sqrt(average.var(ddof=1) / ess_average))
  return float(average.mean()), float(se), float(ess.sum())


def effective_size(values):
  """Per chain, the effective sample size of ``[draws, chains]`` values.

  Geyer's initial monotone sequence estimator: autocorrelations from the
  FFT, summed in pairs up to the first pair that is not positive, the pair
  sums made non-increasing (as Stan and TFP compute it).
  """
  return _geyer(_autocovariance(values), values.shape[0])


def pooled_effective_size(values, scale=None, budget=1 << 22):
  """Per chain, one effective sample size for all the coordinates of ``[draws, chains, D]`` values.

  `effective_size` of their autocovariances summed over the coordinates
  (each weighted by its variance). On a short chain a single coordinate's
  autocorrelations are too noisy to follow far, and the block's coordinate
  that looks furthest off tends to be one whose effective size came out
  too large; the block's pooled autocorrelation is smooth enough to follow
  its slow parts. `scale`: ``[D]`` factors applied to the coordinates
  first. The coordinates' power spectra are summed (FFT, chunks of about
  `budget` complex numbers), so the cost is ``O(D·draws·log draws)``.
  """
  n, chains, size = values.shape
  width = max(1, budget // ((n + 1) * chains))
  power = np.zeros((n + 1, chains))
  for i in range(0, size, width):
    chunk = np.asarray(values[..., i:i + width], np.float64)
    if scale is not None:
      chunk = chunk * scale[i:i + width]
    f = np.fft.rfft(chunk - chunk.mean(0), 2 * n, axis=0)
    power += (f.real ** 2 + f.imag ** 2).sum(-1)
  return _geyer(np.fft.irfft(power, 2 * n, axis=0)[:n] / n, n)


def cross_chain_effective_size(values):
  """Per coordinate, the effective sample size of ``[draws, chains, D]`` values, chains counted together.

  The multi-chain estimate (Gelman et al.'s *Bayesian Data Analysis*,
  3rd ed., §11.5; as Stan and TFP's ``cross_chain_dims`` compute it): the
  autocorrelations are taken against the variance between and within the
  chains, so chains that have not mixed with each other count as few
  draws, however smooth each looks alone. Geyer's initial monotone
  sequence sums them, as in `effective_size`. Needs two chains or more.
  """
  n, chains = values.shape[:2]
  values = np.asarray(values, np.float64)
  acov = _autocovariance(values)                       # [lags, chains, D]
  within = acov[0].mean(0) * n / max(n - 1, 1)
  between = values.mean(0).var(0, ddof=1)              # B / n
  total = (n - 1.) / n * within + between
  with np.errstate(invalid='ignore', divide='ignore'):
    rho = 1. - (within - acov.mean(1)) / total
  rho = np.where(total > 0, rho, 0.)
  rho[0] = np.where(total > 0, 1., 0.)
  return chains * _geyer(rho, n)


def _autocovariance(values):
  """Autocovariances along the first axis, by FFT."""
  n = values.shape[0]
  x = values - values.mean(0)
  f = np.fft.rfft(x, 2 * n, axis=0)
  return np.fft.irfft(f * np.conj(f), axis=0)[:n] / n


def _geyer(acov, n):
  """The effective sizes from autocovariances ``[lags, ...]`` (`effective_size`)."""
  with np.errstate(invalid='ignore', divide='ignore'):
    rho = acov / acov[:1]
  pairs = rho[:n - n % 2:2] + rho[1:n:2]
  positive = np.cumprod(pairs > 0, axis=0).astype(bool)
  pairs = np.minimum.accumulate(np.where(positive, pairs, 0.), axis=0)
  tau = np.maximum(-1. + 2. * pairs.sum(0), 1. / n)
  return np.where(acov[0] > 0, n / tau, float(n))
