"""`tfa.mcmc.check_run`: a chain run with `tfp.mcmc.sample_chain` is checked in one call, and warned on as `tfa.mcmc.sample` warns.

SGLD on a standard normal with exact gradients samples the variance
``1/(1 − h/4)``: at ``h = 1`` the configurational temperature reads
1.33, far outside the 10% tolerance; at ``h = 0.02`` it reads 1.005,
well inside it.
"""

import re
import warnings

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from tfp_adaptive.diagnostics import temperature as temperature_lib

D = 10


def _normal(x):
  return -0.5 * tf.reduce_sum(x ** 2, axis=-1)


def _run(kernel, steps=2000, trace_fn=tfa.mcmc.trace_checks):
  start = tf.random.stateless_normal([32, D], seed=(5, 6))
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # TFP's "not calibrated".
    return tf.function(lambda: tfp.mcmc.sample_chain(
        steps, start, kernel=kernel, trace_fn=trace_fn, seed=(1, 2)),
        jit_compile=True)()


@pytest.mark.slow
def test_a_hot_run_is_told_as_sample_tells_it():
  kernel = tfa.mcmc.SGLD(_normal, 1.)
  samples, trace = _run(kernel)
  with pytest.warns(UserWarning, match='wider than its target') as caught:
    report = tfa.mcmc.check_run(kernel, samples, trace, seed=(3, 4))
  assert report.temperature['overall'].temperature > 1.2
  assert report.warnings and all(
      str(w.message) in report.warnings for w in caught
      if 'SGLD' in str(w.message))
  with pytest.warns(UserWarning, match='wider than its target'):
    tfa.mcmc.sample(kernel, tf.random.stateless_normal([32, D], seed=(5, 6)),
                    2000, seed=(1, 2), progress=False)


@pytest.mark.slow
def test_an_accurate_run_is_silent_and_any_trace_nest_is_found():
  kernel = tfa.mcmc.SGLD(_normal, 0.02)
  # 6,000 steps: about 900 effective draws a coordinate across the 32
  # chains, enough to vouch for each spread within 10% (450).
  samples, trace = _run(kernel, steps=6000, trace_fn=lambda s, r: (
      {'lp': r.target_log_prob}, tfa.mcmc.trace_checks(s, r)))
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    report = tfa.mcmc.check_run(kernel, samples, trace, seed=(3, 4))
  assert report.warnings == []
  assert abs(report.temperature['overall'].temperature - 1.) < 0.1
  assert report.regime.drift_ratio == pytest.approx(0.02 / 4, rel=0.1)


@pytest.mark.slow
def test_whole_results_through_a_wrapper_are_read():
  kernel = tfp.mcmc.TransformedTransitionKernel(
      tfa.mcmc.SGLD(_normal, 0.02), tfp.bijectors.Identity())
  samples, trace = _run(kernel, steps=200, trace_fn=lambda _, r: r)
  report = tfa.mcmc.check_run(kernel, samples, trace, check_temperature=False)
  assert report.temperature is None
  assert report.num_nonfinite.shape == (32,)


@pytest.mark.slow
def test_non_finite_steps_are_counted_and_told():
  def wall(x):  # NaN beyond x_0 > 1.5: some steps land there.
    return tf.where(x[..., 0] > 1.5, np.nan, _normal(x))
  kernel = tfa.mcmc.SGLD(wall, 0.05)
  samples, trace = _run(kernel, steps=300)
  with pytest.warns(UserWarning, match='non-finite') as caught:
    report = tfa.mcmc.check_run(kernel, samples, trace,
                                check_temperature=False)
  assert report.num_nonfinite.sum() > 0
  told = [w.message for w in caught if 'non-finite' in str(w.message)]
  # No reading gives the factor: a decade, as data too.
  for message in told:
    assert message.changes == tfa.diagnostics.advice.smaller_step(
        'step_size', tfa.diagnostics.advice.DIVERGED), message.changes


@pytest.mark.slow
def test_a_trace_without_the_checks_is_refused_naming_trace_checks():
  kernel = tfa.mcmc.SGLD(_normal, 0.02)
  samples, trace = _run(kernel, steps=10,
                        trace_fn=lambda _, r: r.target_log_prob)
  with pytest.raises(ValueError, match='trace_checks'):
    tfa.mcmc.check_run(kernel, samples, trace)
  with pytest.raises(TypeError, match='tfp_adaptive'):
    tfa.mcmc.check_run(tfp.mcmc.RandomWalkMetropolis(_normal), samples, trace)


@pytest.mark.slow
def test_a_run_too_short_to_read_says_so_with_the_length_it_needs():
  """A run too short to read is told, with how many times longer to run; following that, it gets read.

  Two chains of 30 draws at a small step (an autocorrelation time of
  about ``4/h = 800`` steps) move too little to read: their states have
  fewer effective draws than a reading needs, whatever the virials' own.
  The warning says so (too short, or not settled when the reading is
  clearly off) and names a factor, a lower bound from so short a run.
  Running that many times longer, again as told, the run is read within a
  few rounds, and then reads the temperature of SGLD at this step
  (``1/(1 − h/4)``) as accurate.
  """
  kernel = tfa.mcmc.SGLD(_normal, 0.005)

  def run(steps):
    start = tf.random.stateless_normal([2, D], seed=(5, 6))
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')  # TFP's "not calibrated".
      return tf.function(lambda: tfp.mcmc.sample_chain(
          steps, start, kernel=kernel, trace_fn=tfa.mcmc.trace_checks,
          seed=(1, 2)), jit_compile=True)()
  longer = re.compile(r'[Rr]un at least (\d+) times as many draws')
  steps, told = 30, []
  for _ in range(6):
    samples, trace = run(steps)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      report = tfa.mcmc.check_run(kernel, samples, trace, seed=(3, 4))
    said = [longer.search(str(w.message)) for w in caught]
    said = [m for m in said if m]
    if not said:
      break
    assert len(said) == 1
    told.append(int(said[0].group(1)))
    assert told[-1] > 1
    steps *= told[-1]
  assert told and not said, (told, steps)
  assert temperature_lib.final_verdict(report.temperature['overall'],
                                       1.) == 'accurate'


@pytest.mark.slow
def test_the_burnin_given_counts_in_the_length_an_unsettled_run_is_told():
  """`sample_chain`'s `num_burnin_steps`, passed on, counts in the length a run that has not settled is told (a burn-in as much longer is part of it): a smaller factor than without it, the one `tfa.mcmc.sample` would tell (its share of the steps after it)."""
  kernel = tfa.mcmc.SGLD(_normal, 0.01)
  start = 2. + tf.random.stateless_normal([32, D], seed=(5, 6))
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # TFP's "not calibrated".
    samples, trace = tf.function(lambda: tfp.mcmc.sample_chain(
        300, start, kernel=kernel, num_burnin_steps=100,
        num_steps_between_results=1, trace_fn=tfa.mcmc.trace_checks,
        seed=(1, 2)), jit_compile=True)()

  def factors(**burnin):
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      tfa.mcmc.check_run(kernel, samples, trace, seed=(3, 4), **burnin)
    return {c.parameter: c.factor for w in caught
            for c in tfa.diagnostics.advice.changes_of(w.message)}
  alone = factors()
  counted = factors(num_burnin_steps=100, num_steps_between_results=1)
  assert set(alone) == set(counted) == {'num_results', 'num_burnin_steps'}
  assert counted['num_results'] < alone['num_results'], (counted, alone)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    tfa.mcmc.check_temperature(kernel, samples, seed=(3, 4),
                               burnin_share=100 / 600)
  assert counted == {c.parameter: c.factor for w in caught
                     for c in tfa.diagnostics.advice.changes_of(w.message)}
  for name, value in (('num_burnin_steps', -1),
                      ('num_steps_between_results', -1)):
    with pytest.raises(ValueError, match=name):
      tfa.mcmc.check_run(kernel, samples, trace, **{name: value})


def test_the_fewest_effective_draws_are_counted_where_the_run_is_compared():
  """Without predictions, among the state's coordinates over every draw; with them, among the predictions, whose chains here disagree in one of three (each sits at its own offset) while the state mixes; with too few read predictions to show 450 draws, not at all."""
  from tfp_adaptive.mcmc import temperature as mcmc_temperature  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  state = [tf.constant(rng.normal(size=[2000, 8, 3]), tf.float32),
           tf.constant(rng.normal(size=[2000, 8]), tf.float32)]
  size, name = mcmc_temperature._fewest_draws(state, 1, None, 0.1)  # pylint: disable=protected-access
  assert size > 4 * temperature_lib.mixed_size(), size
  assert name.startswith('coordinate ') and 'of state part ' in name, name
  predictions = rng.normal(size=[300, 8, 3])
  predictions[..., 2] += 3. * rng.normal(size=8)  # Each chain its own.
  size, name = mcmc_temperature._fewest_draws(state, 1, predictions, 0.1)  # pylint: disable=protected-access
  assert name == 'prediction 2' and size < 50, (size, name)
  assert mcmc_temperature._fewest_draws(  # pylint: disable=protected-access
      state, 1, predictions[:50], 0.1) is None  # 400 < 900 read.
