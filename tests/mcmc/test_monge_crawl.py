"""A Monge-metric chain that crawls towards its target is told to lower `alpha2`, and following that brings it in.

The target is the posterior a few hundred data points give: a Gaussian of
precision ``P = 400`` per coordinate, its mean 4 (80 sds) from the chains'
start at 0. At ``α² = 1`` the Monge metric divides a step along the
gradient (``‖g‖ ≈ 400·√D`` on the way) by ``1 + α²‖g‖²``, about 10⁶: in
2,000 steps of ``h = 10⁻³`` the chains move about ``2000·h/(2α) = 1``
at most, a quarter of the way, and they read "not settled" whatever the
length. The advice names ``alpha2`` about ``1/(α²‖ḡ‖²)`` times smaller;
rerun so, the metric is close to ``I`` near the target and the chains
arrive within the burn-in (SGLD at ``h·P = 0.4`` relaxes in about 5
steps).
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive.diagnostics import advice as advice_lib
from tfp_adaptive.diagnostics import monge_advice

D, PRECISION, MEAN, CHAINS = 5, 400., 4., 16


def _target(x):
  return -0.5 * PRECISION * tf.reduce_sum((x - MEAN) ** 2, axis=-1)


def _run(alpha2, start):
  kernel = tfa.mcmc.MongeSGRLD(_target, 1e-3, alpha2,
                               preconditioner_decay_rate=0.99,
                               gamma='corrected')
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    samples, _, _ = tfa.mcmc.sample(
        kernel, tf.fill([CHAINS, D], start), 1500, num_burnin_steps=500,
        seed=(1, 2), progress=False)
  return samples, [w.message for w in caught
                   if issubclass(w.category, UserWarning)]


def _crawl(messages):
  return [m for m in messages if 'pulled the same way' in str(m)]


def test_read_separates_a_pull_from_a_shake():
  rng = np.random.default_rng(0)
  shaken = rng.normal(size=[200, 8, 3])  # Mean 0: ‖ḡ‖² about 3/200.
  pulled = shaken + 10.  # The same shake about a mean of 10 a coordinate.
  read = monge_advice.read([shaken], 1)
  assert read.pull < 0.1 * read.shake
  read = monge_advice.read([pulled[:, :, :1], pulled[:, :, 1:]], 1)
  np.testing.assert_allclose(read.pull, 300., rtol=0.02)
  np.testing.assert_allclose(read.shake, 3., rtol=0.1)


def test_advice_only_for_a_pull_that_the_metric_slows():
  pulled = monge_advice.Pull(pull=1e4, shake=10.)
  crawl = monge_advice.advice(pulled, 1.)
  (change,) = advice_lib.changes_of(crawl)
  assert change.parameter == 'alpha2'
  np.testing.assert_allclose(change.factor, 1e-4)
  # The Keras metric averages the mean loss's gradient, N times smaller.
  assert monge_advice.advice(pulled, 1., gradient_scale=1e-2) is None
  assert monge_advice.advice(pulled, 1e-4) is None  # α²‖ḡ‖² = 1: no crawl.
  # Shaken more than pulled: the chains move about their target.
  assert monge_advice.advice(monge_advice.Pull(1e4, 2e4), 1.) is None


def test_merged_keeps_the_smaller_alpha2():
  changes = advice_lib.merged([
      advice_lib.Advice('a', [advice_lib.Change('alpha2', factor=1e-2)]),
      advice_lib.Advice('b', [advice_lib.Change('alpha2', factor=1e-3)])])
  assert changes == (advice_lib.Change('alpha2', factor=1e-3),)


@pytest.mark.slow
def test_a_crawling_chain_is_told_alpha2_and_the_rerun_arrives():
  samples, said = _run(1., 0.)
  # Without the advice: still more than 10 sds short of the target.
  assert np.mean(samples) < MEAN - 10. / np.sqrt(PRECISION)
  (crawl,) = _crawl(said)
  (change,) = [c for c in advice_lib.merged(said) if c.parameter == 'alpha2']
  assert change.factor < 1e-3
  samples, said = _run(change.factor, 0.)
  assert not _crawl(said)
  # Every chain's mean within 5 standard errors of the target's (each
  # draw's se 1/√P, 1,500 draws a chain, autocorrelated over a few steps:
  # 10 draws a chain is the fewest effective size the bound allows).
  means = np.mean(samples.numpy(), axis=0)
  assert np.all(np.abs(means - MEAN) < 5. / np.sqrt(PRECISION * 10.))


@pytest.mark.slow
def test_chains_that_start_at_their_target_are_not_told_to_lower_alpha2():
  _, said = _run(1., MEAN)
  assert not _crawl(said)
