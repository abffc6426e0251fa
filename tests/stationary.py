"""Helpers for the statistical tests: predicted 1-D densities, binning, MC-error bounds."""

import numpy as np
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive import diagnostics

EDGES = np.arange(-4.5, 4.5001, 0.1)


def binned(density):
  """Bin probabilities of an unnormalised density on `EDGES`."""
  return diagnostics.bin_probabilities(density, EDGES)


def draw(density, n, seed=0, dtype=tf.float32):
  """`n` exact draws from `density` by inverse CDF (chains start stationary)."""
  cdf = diagnostics.density_cdf(density)
  u = np.random.RandomState(seed).uniform(size=n)
  return tf.constant(np.interp(u, cdf, diagnostics.GRID), dtype)


def group_histograms(kernel, init, num_steps, groups, seed):
  """Visit frequencies of `groups` independent chain groups, shape [G, bins].

  One batched, compiled run; the spread across groups is the MC error.
  """
  counts, outside, _, results = tfa.mcmc.stationary_histogram(
      kernel, init, num_steps, EDGES, seed=seed, chunk_steps=num_steps,
      num_groups=groups, progress=False)
  assert int(tf.reduce_sum(results.num_nonfinite)) == 0
  return counts / (counts.sum(axis=1) + outside)[:, None]


def tv_with_noise(freqs, probs):
  """(TV distance of the pooled histogram to `probs`, expected TV from MC noise)."""
  pooled = freqs.mean(axis=0)
  se = freqs.std(axis=0, ddof=1) / np.sqrt(freqs.shape[0])
  return 0.5 * np.abs(pooled - probs).sum(), 0.5 * np.sqrt(2. / np.pi) * se.sum()
