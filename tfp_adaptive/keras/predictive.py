"""The posterior predictive, accumulated one member at a time, and its scores.

`Predictive` streams over members (one member's output in memory at a
time): ``p̄(y|x) = Σ_s w_s p(y|x, θ_s) / Σ_s w_s`` (Rensmeyer & Niggemann
2025, eq. 4). Both `BayesianEnsemble` and `SampleCollector`'s running
validation metric use it, so the two always agree.
"""

import numpy as np
import scipy.special
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_adaptive.keras import health
from tfp_adaptive.keras import likelihoods

__all__ = ['Predictive', 'classification_metrics', 'mixture_quantiles']


class Predictive(object):
  """Running weighted sums of member outputs (and of their log-likelihoods).

  Args:
    likelihood: a `tfp_adaptive.keras.likelihoods.Likelihood`.
    y: optional targets; with them, each member's log-likelihood of `y` is
      accumulated as a log-sum-exp (the exact log predictive density of the
      mixture, also for regression).
  """

  def __init__(self, likelihood, y=None):
    self.likelihood = likelihood
    self.y = y
    self.total_weight = 0.
    self._first = None
    self._second = None
    self._log_terms = None  # log Σ_s w_s p(y_i | θ_s), per point.
    self._cdf = None  # Σ_s w_s P(Y ≤ y_i | θ_s), per output (regression).
    self._labels = None
    #: Per member added with targets (regression): the share of points at
    #: which its mean is far off the targets' range (`health.off_range`).
    self.off_range = []

  def add(self, weight, raw_output):
    """Adds one member's raw model output with (unnormalised) `weight` > 0."""
    out = self.likelihood.member_output(raw_output)
    if not np.all(np.isfinite(out)):
      raise FloatingPointError(
          'A member predicts non-finite values for %d of %d inputs: NaN/Inf '
          'in those inputs, or weights that overflow on them (a diverged '
          'chain; lower the learning rate).' % (np.sum(~np.all(np.isfinite(out.reshape(len(out), -1)),
                                     -1)), len(out)))
    self.total_weight += weight
    lik = self.likelihood
    if lik.is_classification:
      self._first = _acc(self._first, weight * out)
      log_lik = None if self.y is None else self._member_log_likelihood(out)
    else:  # The mixture's first two moments, and its CDF at the targets.
      mean, var = lik.mean_and_variance(out)
      self._first = _acc(self._first, weight * mean)
      self._second = _acc(self._second, weight * (mean ** 2 + var))
      if self.y is not None:
        y = lik.targets(self.y, mean)
        self._cdf = _acc(self._cdf, weight * scipy.special.ndtr(
            (y - mean) / np.sqrt(var)))
        log_lik = likelihoods.gaussian_log_density(y, mean, var)
        self.off_range.append(health.off_range(mean, y))
    if self.y is not None:
      term = np.log(weight) + log_lik
      self._log_terms = (term if self._log_terms is None
                         else np.logaddexp(self._log_terms, term))

  _STATE = ('_first', '_second', '_log_terms', '_cdf')

  def get_state(self):
    """``(total_weight, {name: array})``: what `set_state` needs to continue the sums."""
    return self.total_weight, {k: getattr(self, k) for k in self._STATE
                               if getattr(self, k) is not None}

  def set_state(self, total_weight, arrays):
    """Continues from a `get_state` of a `Predictive` of the same likelihood and targets."""
    self.total_weight = float(total_weight)
    for k in self._STATE:
      setattr(self, k, arrays.get(k))

  def _member_log_likelihood(self, out):
    """``log p(y_i | θ)`` of a classification member (labels read once)."""
    lik = self.likelihood
    if self._labels is None:
      self._labels = lik.labels(self.y, lik.probabilities(out).shape[-1])
      if len(self._labels) != len(out):
        raise ValueError('%d labels for %d predictions.'
                         % (len(self._labels), len(out)))
    return lik.log_likelihood(out, self._labels)

  def _check(self):
    if self._first is None:
      raise ValueError('No member has been added yet.')

  def prediction(self):
    """Mean probabilities, or ``(mean, variance)`` for a Gaussian likelihood."""
    self._check()
    mean = self._first / self.total_weight
    if self.likelihood.is_classification:
      return mean
    return mean, np.maximum(self._second / self.total_weight - mean ** 2, 0.)

  def log_likelihood_points(self):
    """``log p̄(y_i | x_i)`` per point (needs `y`)."""
    self._check()
    if self.y is None:
      raise ValueError('`Predictive` was built without targets `y`.')
    return self._log_terms - np.log(self.total_weight)

  def coverage(self, level):
    """Share of targets inside the predictive's central `level` interval (regression).

    Exact for the mixture of the members' Gaussians: a target is inside
    when the mixture's CDF at it is within ``(1 ± level)/2``.
    """
    self._check()
    u = self._cdf / self.total_weight
    half = level / 2.
    return float(np.mean((u >= 0.5 - half) & (u <= 0.5 + half)))

  def metrics(self, num_bins=15):
    """Classification: log_likelihood, accuracy, ece, brier; regression: log_likelihood, rmse, coverage_50, coverage_90."""
    lik = self.likelihood
    ll = float(np.mean(self.log_likelihood_points()))
    if not lik.is_classification:
      mean, _ = self.prediction()
      y = lik.targets(self.y, mean)
      return {'log_likelihood': ll,
              'rmse': float(np.sqrt(np.mean((y - mean) ** 2))),
              'coverage_50': self.coverage(0.5),
              'coverage_90': self.coverage(0.9)}
    out = classification_metrics(lik.probabilities(self.prediction()),
                                 self._labels, num_bins)
    out['log_likelihood'] = ll
    return out


def classification_metrics(probs, labels, num_bins=15):
  """Log-likelihood, accuracy, ECE, Brier and confidence of predictive probabilities.

  ``confidence`` is the mean of the largest probability; ``confidence −
  accuracy`` says the direction that ECE does not (negative:
  under-confident).

  Args:
    probs: ``[n, K]`` probabilities.
    labels: ``[n]`` integer labels.
    num_bins: bins of `tfp.stats.expected_calibration_error`.

  Raises:
    FloatingPointError: some probabilities are NaN/Inf.
  """
  probs = np.asarray(probs, np.float64)
  bad = ~np.all(np.isfinite(probs), axis=-1)
  if bad.any():
    raise FloatingPointError(
        'The ensemble predicts non-finite probabilities for %d of %d inputs '
        '(a member overflowed: the chain diverged; lower the learning rate).'
        % (bad.sum(), len(bad)))
  labels = np.asarray(labels).reshape(-1).astype(np.int64)
  p_true = probs[np.arange(len(labels)), labels]
  onehot = np.eye(probs.shape[-1])[labels]
  ece = tfp.stats.expected_calibration_error(
      num_bins, logits=tf.math.log(np.maximum(probs, 1e-30).astype(np.float32)),
      labels_true=labels)
  return {
      'log_likelihood': float(np.mean(np.log(np.maximum(p_true, 1e-300)))),
      'accuracy': float(np.mean(np.argmax(probs, -1) == labels)),
      'ece': float(ece),
      'brier': float(np.mean(np.sum((probs - onehot) ** 2, -1))),
      'confidence': float(np.mean(np.max(probs, -1))),
  }


def mixture_quantiles(weights, means, variances, probs, iterations=60):
  """Quantiles of a mixture of Gaussians, per point, by bisection on its CDF.

  Args:
    weights: ``[S]`` member weights (normalised here).
    means, variances: ``[S, ...]`` each member's ``μ`` and ``σ²``.
    probs: sequence of probabilities in (0, 1).
    iterations: bisection steps (each halves the bracket of
      ``[min μ − 10 σ, max μ + 10 σ]``; 60 reach float64 resolution).

  Returns:
    list of arrays shaped like ``means[0]``, one per probability.
  """
  w = np.asarray(weights, np.float64)
  w = (w / w.sum()).reshape((-1,) + (1,) * (np.ndim(means) - 1))
  sd = np.sqrt(variances)
  out = []
  for p in probs:
    lo = np.min(means - 10. * sd, 0)
    hi = np.max(means + 10. * sd, 0)
    for _ in range(iterations):
      mid = 0.5 * (lo + hi)
      below = np.sum(w * scipy.special.ndtr((mid - means) / sd), 0) < p
      lo, hi = np.where(below, mid, lo), np.where(below, hi, mid)
    out.append(0.5 * (lo + hi))
  return out


def _acc(total, value):
  return value if total is None else total + value

