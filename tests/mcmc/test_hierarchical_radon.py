"""A radon-like hierarchical model with half-normal scales, written as TFP's multilevel tutorials write it, against NUTS.

Houses in counties: ``log_radon ~ Normal(a[county] + b·floor, sigma_y)``,
county intercepts ``a = mu_a + sigma_a·z`` (non-centred) and half-normal
priors on both scales. The model is a pinned
`JointDistributionCoroutineAutoBatched`; both samplers run in its default
event space through `TransformedTransitionKernel`, with TFP's step-size
wrappers: dual averaging around NUTS, `SimpleStepSizeAdaptation` around a
PSGLD whose metric adapts during the burn-in and is then frozen (the
guide "Choosing a sampler", "Adapt, then freeze"). The state is the
model's `StructTuple`; `tfa.mcmc.check_run` reads the run from its
`trace_fn` and must not warn. The run is long enough for silence: every
coordinate has the 450 effective draws across the chains that vouching
for its spread within 10% takes.

Tolerance. Each chain's averages of a quantity and its square are one
draw of a statistic; the posterior means and sds are smooth functions of
their across-chain means, with jackknife standard errors over groups of
chains (no autocorrelation model needed). Two allowances add up: the
Monte Carlo error, 4.5 combined standard errors (for about 30 roughly
normal comparisons the chance that any exceeds it is about 2e-4), and the
accuracy the regime's tolerance stands for, 5% of the posterior sd (guide
"Step sizes and regimes"), which the step's own O(h) bias must stay
within: the wrapper sets the step, not the test.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from tests.conftest import full_size_only, stat_scale
from tests.mcmc.against_nuts import assert_run_is_silent
from tests.mcmc.against_nuts import jackknife

tfd = tfp.distributions

COUNTIES = 12
_RNG = np.random.default_rng(0)
COUNTY = np.repeat(np.arange(COUNTIES),
                   _RNG.integers(4, 30, COUNTIES)).astype(np.int32)
FLOOR = _RNG.integers(0, 2, len(COUNTY)).astype(np.float32)
LOG_RADON = (1.3 + 0.4 * _RNG.normal(size=COUNTIES)[COUNTY] - 0.6 * FLOOR +
             0.7 * _RNG.normal(size=len(COUNTY))).astype(np.float32)


@tfd.JointDistributionCoroutineAutoBatched
def radon_model():
  mu_a = yield tfd.Normal(0., 2., name='mu_a')
  sigma_a = yield tfd.HalfNormal(1., name='sigma_a')
  z = yield tfd.Sample(tfd.Normal(0., 1.), COUNTIES, name='z')
  floor_effect = yield tfd.Normal(0., 1., name='floor_effect')
  sigma_y = yield tfd.HalfNormal(1., name='sigma_y')
  a = mu_a[..., None] + sigma_a[..., None] * z
  yield tfd.Normal(tf.gather(a, COUNTY, axis=-1) +
                   floor_effect[..., None] * FLOOR,
                   sigma_y[..., None], name='log_radon')


PINNED = radon_model.experimental_pin(log_radon=LOG_RADON)
BIJECTOR = PINNED.experimental_default_event_space_bijector()


def _init(chains):
  """Every chain at the unconstrained origin (both scales at 1)."""
  like = BIJECTOR.inverse(PINNED.sample_unpinned(seed=(0, 1)))
  return BIJECTOR.forward(tf.nest.map_structure(
      lambda x: tf.zeros([chains] + x.shape.as_list()), like))


def _quantities(draws):
  """``[draws, chains, 16]``: mu_a, sigma_a, floor_effect, sigma_y and the county intercepts."""
  part = lambda name: np.asarray(getattr(draws, name), np.float64)
  a = part('mu_a')[..., None] + part('sigma_a')[..., None] * part('z')
  return np.concatenate(
      [part(n)[..., None] for n in ('mu_a', 'sigma_a', 'floor_effect',
                                    'sigma_y')] + [a], -1)


def _nuts(chains, draws):
  kernel = tfp.mcmc.DualAveragingStepSizeAdaptation(
      tfp.mcmc.TransformedTransitionKernel(
          tfp.mcmc.NoUTurnSampler(PINNED.unnormalized_log_prob, 0.1),
          BIJECTOR),
      num_adaptation_steps=int(0.8 * draws))
  run = tf.function(lambda: tfp.mcmc.sample_chain(
      draws, _init(chains), kernel=kernel, num_burnin_steps=draws,
      trace_fn=None, seed=(3, 4)), jit_compile=True, autograph=False)
  return run()


# Full size only: adapt-then-freeze against NUTS runs in CI on the minibatch
# logistic regression (tests/mcmc/test_logistic_minibatch.py), and a
# hierarchical model against NUTS in tests/mcmc/test_eight_schools.py.
@pytest.mark.statistical
@full_size_only()
def test_adapt_then_freeze_psgld_matches_nuts():
  scale = stat_scale()
  nuts = _quantities(_nuts(16, int(400 * scale)))
  burnin, steps = 2000, int(6000 * scale)
  kernel = tfp.mcmc.SimpleStepSizeAdaptation(
      tfp.mcmc.TransformedTransitionKernel(
          tfa.mcmc.PSGLD(PINNED.unnormalized_log_prob, step_size=1e-3,
                         num_adaptation_steps=burnin, gamma='none'),
          BIJECTOR),
      num_adaptation_steps=int(0.8 * burnin), target_accept_prob=0.9)

  @tf.function(jit_compile=True, autograph=False)
  def run():
    return tfp.mcmc.sample_chain(
        steps, _init(128), kernel=kernel, num_burnin_steps=burnin,
        trace_fn=tfa.mcmc.trace_checks, seed=(5, 6))
  draws, trace = run()
  assert type(draws) is type(_init(1))  # pylint: disable=unidiomatic-typecheck
  assert draws.z.shape == [steps, 128, COUNTIES]
  assert_run_is_silent(kernel, draws, trace)
  (ours, se_o), (ref, se_n) = (jackknife(_quantities(draws), 16),
                               jackknife(nuts, 16))
  allowed = 4.5 * np.sqrt(se_o ** 2 + se_n ** 2) + 0.05 * ref[1]
  names = ['mu_a', 'sigma_a', 'floor_effect', 'sigma_y'] + [
      'a_%d' % j for j in range(COUNTIES)]
  report = {'%s %s' % (k, n): (round(float(ours[i, j]), 3),
                               round(float(ref[i, j]), 3),
                               round(float(allowed[i, j]), 3))
            for i, k in enumerate(['mean', 'sd']) for j, n in enumerate(names)}
  assert np.all(np.abs(ours - ref) < allowed), report
