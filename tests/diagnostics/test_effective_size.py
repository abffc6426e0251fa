"""The multi-chain effective sample size against TFP's, and on chains that have not mixed."""

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_adaptive.diagnostics import effective_size


def _ar1(n=2000, chains=4, size=3, phi=0.9, seed=0):
  rng = np.random.default_rng(seed)
  x = np.zeros((n, chains, size))
  for t in range(1, n):
    x[t] = phi * x[t - 1] + rng.normal(size=(chains, size))
  return x


def test_mixed_chains_read_the_ar1_value():
  """AR(1) chains of φ = 0.9 have ``n·m·(1 − φ)/(1 + φ)`` effective draws.

  Over 20 independent sets of chains the mean estimate is within 10% of
  it (the estimator's spread is about 10% a set here, so the mean's is
  about 2%, and Geyer's truncation biases it low by a few per cent).
  TFP's estimator, which truncates at the first negative
  autocorrelation, reads the same within its larger spread.
  """
  exact = 2000 * 4 * 0.1 / 1.9
  ours = np.array([effective_size.cross_chain_effective_size(_ar1(seed=s))
                   for s in range(20)])
  assert abs(ours.mean() / exact - 1.) < 0.1, ours.mean() / exact
  theirs = np.asarray(tfp.mcmc.effective_sample_size(
      tf.constant(_ar1(seed=0)), cross_chain_dims=1))
  np.testing.assert_allclose(ours[0], theirs, rtol=0.4)


def test_chains_that_have_not_mixed_count_as_few_draws():
  """Each chain alone looks well sampled; apart from each other they are a handful of draws."""
  x = _ar1() + 10. * np.arange(4)[None, :, None]
  ours = effective_size.cross_chain_effective_size(x)
  alone = effective_size.effective_size(x[:, :, 0]).sum()
  assert np.all(ours < 10.) and alone > 300.
