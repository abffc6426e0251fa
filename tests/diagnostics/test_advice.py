"""Advice as data: each warning's `changes` say what its text advises first, with the same numbers."""

import re
import warnings

import numpy as np
import pytest
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive.diagnostics import advice
from tfp_adaptive.diagnostics import mean_force
from tfp_adaptive.diagnostics import regime
from tfp_adaptive.diagnostics import temperature
from tfp_adaptive.diagnostics import temperature_advice
from tfp_adaptive.diagnostics.advice import Change

# Readings of 400 effective draws: settled and judged, hot and cold.
HOT = temperature.Reading(1.5, 0.02, 400., 1.5, 1.5, 0., 10)
COLD = temperature.Reading(0.6, 0.02, 400., 0.6, 0.6, 0., 10)
UNSETTLED = temperature.Reading(1.2, 0.02, 400., 1.5, 0.9, -20., 10)
SHORT = temperature.Reading(2., 0.2, 4., 2., 2., 0., 10)


def _factor(text, name):
  return float(re.search(r'Lower `%s` about ([0-9.e+]+)x' % name,
                         text).group(1))


@pytest.mark.parametrize('step_name, length, burnin', [
    ('step_size', 'num_results', 'num_burnin_steps'),
    ('learning_rate', 'epochs', 'burnin')])
def test_a_hot_reading_lowers_the_step_by_the_factor_it_prints(step_name,
                                                                length,
                                                                burnin):
  """The step lower by the printed factor; the run and its burn-in as many times longer (the slower chain travels as far, and arrives)."""
  said = temperature_advice.advice('the whole state', HOT, 1., step_name)
  factor = _factor(said, step_name)
  (step, run, burn), = [said.changes]
  assert step.parameter == step_name and step.value is None
  np.testing.assert_allclose(1. / step.factor, factor, rtol=0.01)
  assert run.parameter == length and burn.parameter == burnin
  np.testing.assert_allclose(run.factor, factor, rtol=0.01)
  np.testing.assert_allclose(burn.factor, factor, rtol=0.01)


def test_a_cold_minibatch_metric_is_frozen_not_stepped():
  said = temperature_advice.advice('the whole state', COLD, 1., 'step_size',
                                   adaptive=True, gamma='corrected_published',
                                   minibatch=True)
  assert 'no step removes' in said
  assert said.changes == (Change('num_adaptation_steps',
                                 value=advice.THE_BURNIN),)
  plain = temperature_advice.advice('the whole state', COLD, 1., 'step_size')
  assert plain.changes[0].parameter == 'step_size'


FROZEN = Change('num_adaptation_steps', value=advice.THE_BURNIN)


@pytest.mark.parametrize('gamma', ['none', 'corrected', 'corrected_lagged'])
def test_a_metric_that_adapts_throughout_is_frozen_first(gamma):
  """Cold: freezing alone (a fixed metric neither lags nor needs Γ); hot or a shifted mean: freezing with the smaller step."""
  cold = temperature_advice.advice('the whole state', COLD, 1., 'step_size',
                                   adaptive=True, gamma=gamma)
  assert cold.changes == (FROZEN,), cold.changes
  assert 'Freeze the metric' in cold
  hot = temperature_advice.advice('the whole state', HOT, 1., 'step_size',
                                  adaptive=True, gamma=gamma)
  assert hot.changes[0] == FROZEN, hot.changes
  assert [c.parameter for c in hot.changes[1:]] == [
      'step_size', 'num_results', 'num_burnin_steps']
  np.testing.assert_allclose(1. / hot.changes[1].factor,
                             _factor(hot, 'step_size'), rtol=0.01)
  # A metric frozen after burn-in, or none that adapts: the step alone.
  for cold_or_hot in (COLD, HOT):
    fixed = temperature_advice.advice('the whole state', cold_or_hot, 1.,
                                      'step_size', adaptive=False,
                                      gamma=gamma)
    assert fixed.changes[0].parameter == 'step_size', fixed.changes


def test_a_run_told_to_run_longer_under_an_adapting_metric_freezes_it_too():
  """Unsettled, too short, unmixed or too imprecise: the longer rerun also freezes a metric that adapts throughout, and only such a metric."""
  accurate = temperature.Reading(1., 0.02, 4000., 1., 1., 0., 10)
  wide = temperature.Reading(1., 0.1, 400., 1., 1., 0., 10)
  cases = [(dict(readings={0: UNSETTLED}), 'num_results'),
           (dict(readings={0: SHORT}), 'num_results'),
           (dict(readings={0: accurate}, fewest=(40., 'coordinate 3')),
            'num_results'),
           (dict(readings={0: wide}), 'num_results')]
  for kwargs, length in cases:
    for adaptive in (False, True):
      said, = temperature_advice.advice_per_part(
          whole=0, where=str, temperature=1., step_name='step_size',
          adaptive=adaptive, gamma='corrected', precise=True,
          **kwargs).values()
      assert said.changes[0].parameter == length, said.changes
      assert (FROZEN in said.changes) == adaptive, (kwargs, said.changes)
  shift = mean_force.Shift(0.3, 0.01, 400., 0.6, 0., -20., 10, 2, 3.)
  for adaptive in (False, True):
    said = mean_force.advice('state part 0', shift, 'step_size', adaptive,
                             'corrected')
    assert 'not settled' in said
    assert (FROZEN in said.changes) == adaptive, said.changes


def test_heat_the_step_does_not_explain_names_the_other_cause():
  cases = [(dict(adaptive=False), 'num_results', advice.LONGER),
           (dict(adaptive=True, gamma='none'), 'num_adaptation_steps', None),
           (dict(adaptive=True, gamma='corrected'), 'num_adaptation_steps',
            None)]
  for kwargs, parameter, factor in cases:
    said = temperature_advice.advice('the whole state', HOT, 1., 'step_size',
                                     step_share=0.01, **kwargs)
    assert 'will not remove it' in said, said
    assert said.changes[0].parameter == parameter, (kwargs, said.changes)
    assert said.changes[0].factor == factor


def test_an_unsettled_or_short_run_is_lengthened_by_the_factor_it_prints():
  said = temperature_advice.advice('the whole state', UNSETTLED, 1.,
                                   'step_size')
  assert 'about %gx' % advice.LONGER in said
  assert said.changes == (Change('num_results', factor=advice.LONGER),
                          Change('num_burnin_steps', factor=advice.LONGER))
  said = temperature_advice.advice('the whole model', SHORT, 1.,
                                   'learning_rate')
  times = int(re.search(r'at least (\d+) times', said).group(1))
  assert said.changes == (Change('epochs', factor=times),
                          Change('burnin', factor=times))


def test_a_mean_force_off_under_an_adapting_metric_freezes_it_first():
  shift = mean_force.Shift(0.3, 0.01, 400., 0.3, 0.3, 0., 10, 2, 3.)
  said = mean_force.advice('state part 0', shift, 'step_size')
  np.testing.assert_allclose(1. / said.changes[0].factor,
                             _factor(said, 'step_size'), rtol=0.01)
  said = mean_force.advice('state part 0', shift, 'step_size', adaptive=True,
                           gamma='none')
  assert said.changes == (FROZEN,)
  said = mean_force.advice('state part 0', shift, 'step_size', adaptive=True,
                           gamma='corrected')
  assert said.changes[0] == FROZEN
  np.testing.assert_allclose(1. / said.changes[1].factor,
                             _factor(said, 'step_size'), rtol=0.01)


def test_the_regime_numbers_name_their_changes():
  numbers = regime.Regime(drift_ratio=0.1, gamma_ratio=0., lag=0.,
                          peak_factor=1.)
  pre = type('Pre', (), {'decay': 0.5, 'min_decay_stochastic': 0.9})()
  said = regime.advice(numbers, ('step_size', 'preconditioner_decay_rate'),
                       'step_size', pre, stochastic=True)
  assert len(said) == 2, said
  np.testing.assert_allclose(1. / said[0].changes[0].factor,
                             _factor(said[0], 'step_size'), rtol=0.01)
  assert said[1].changes == (Change('preconditioner_decay_rate',
                                    value=0.9),)
  assert 'very gradient it preconditions' in said[1]
  # A metric that does not hold the drift's gradient keeps only the
  # fluctuation's second-order term: the same change, its own reason.
  for gamma in ('corrected', 'corrected_lagged'):
    said = regime.advice(numbers, ('step_size', 'preconditioner_decay_rate'),
                         'step_size', pre, stochastic=True, gamma=gamma)
    assert said[1].changes == (Change('preconditioner_decay_rate',
                                      value=0.9),)
    assert 'very gradient' not in said[1] and 'fluctuation' in said[1]


def test_a_change_has_a_factor_or_a_value():
  for bad in (dict(), dict(factor=2., value=1.), dict(factor=float('nan')),
              dict(factor=0.), dict(factor=float('inf')), dict(factor=-2.)):
    with pytest.raises(ValueError, match='factor'):
      Change('step_size', **bad)


@pytest.mark.parametrize('value', [float('nan'), float('inf')])
def test_chains_that_left_the_target_are_told_a_decade_smaller_step(value):
  """A reading that is not finite gives no factor: a decade, named in the text and the changes alike, never NaN or a zero step."""
  reading = temperature.Reading(value, value, 0., value, value, 0., 10)
  shift = mean_force.Shift(value, value, 0., value, value, 0., 10, 0, 3.)
  numbers = regime.Regime(drift_ratio=float('inf'), gamma_ratio=0., lag=0.,
                          peak_factor=1.)
  said = [temperature_advice.advice('the whole state', reading, 1.,
                                    'step_size'),
          mean_force.advice('state part 0', shift, 'step_size'),
          regime.advice(numbers, ('step_size',), 'step_size', None)[0]]
  for text in said:
    assert _factor(text, 'step_size') == advice.DIVERGED, text
    assert text.changes[:3] == advice.smaller_step('step_size',
                                                   advice.DIVERGED)
  frozen = temperature_advice.advice('the whole state', reading, 1.,
                                     'step_size', adaptive=True,
                                     gamma='corrected')
  assert FROZEN in frozen.changes


@pytest.mark.slow
def test_the_warning_of_a_run_carries_its_changes_and_following_them_helps():
  """SGLD at a step too large for N(0, 1) reads hot; its warning's changes, followed, bring the chain within 5%."""
  target = lambda x: -0.5 * x ** 2
  start = np.zeros([256], np.float32)

  def run(step, num_results, num_burnin_steps):
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      samples, _, _ = tfa.mcmc.sample(
          tfa.mcmc.SGLD(target, step), start, num_results,
          num_burnin_steps=num_burnin_steps, seed=(3, 4), progress=False)
    return samples.numpy().std(), [w.message for w in caught]
  sd, said = run(1., 1000, 1000)
  assert sd > 1.1, sd
  told = [w for w in said if isinstance(w, tfa.diagnostics.SamplerWarning)
          and w.changes]
  assert told, [str(w) for w in said]
  changes = {c.parameter: c.factor for c in told[0].changes}
  assert set(changes) == {'step_size', 'num_results', 'num_burnin_steps'}, (
      changes)
  sd, said = run(changes['step_size'], int(1000 * changes['num_results']),
                 int(1000 * changes['num_burnin_steps']))
  assert abs(sd - 1.) < 0.05, sd
  assert not [w for w in said if isinstance(w, tfa.diagnostics.SamplerWarning)
              and 'configurational temperature' in str(w)], [
                  str(w) for w in said]


def test_a_reading_too_wide_to_rule_out_a_bias_is_told_with_the_length_it_needs():
  """Judged accurate, but its ``±3·se`` half-width beyond twice the band's (a 20% error in τ, 10% in sd, not ruled out): told at the end, with ``(3·se / 0.2)²`` times as many draws."""
  wide = temperature.Reading(1.0, 0.1, 400., 1., 1., 0., 10)  # 1 ± 0.3.
  said = temperature_advice.advice_per_part({'overall': wide}, 'overall',
                                            lambda _: 'the whole state', 1.,
                                            'step_size', precise=True)
  said = said['overall']
  assert 'too imprecise to rule out' in said and 'at least 3 times' in said
  assert said.changes == (Change('num_results', factor=3),)
  for quiet in (dict(precise=False), dict(precise=True, final=False)):
    assert not temperature_advice.advice_per_part(
        {'overall': wide}, 'overall', lambda _: 'it', 1., 'step_size',
        **quiet)
  # 1 ± 0.15 rules a 20% error out (if not a 10% one): silent.
  narrow = wide._replace(standard_error=0.05)
  assert not temperature_advice.advice_per_part(
      {'overall': narrow}, 'overall', lambda _: 'it', 1., 'step_size',
      precise=True)


@pytest.mark.slow
def test_a_hierarchical_run_off_with_a_wide_reading_is_not_silent():
  """A drawn hierarchical model (11 groups) under corrected PSGLD, its group means' sds up to 45% off; the virial reads 1.8 ± 0.4, which no band judges: `tfa.mcmc.sample` says it cannot confirm the run."""
  from benchmarks import panel_truth as truth  # pylint: disable=g-import-not-at-top
  from benchmarks import panel_generated as generated  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng([680754, 15])
  assert generated.FAMILIES[int(rng.integers(len(generated.FAMILIES)))] == (
      'hierarchical')
  target, fn, _, init, _, _ = generated.draw_hierarchical(rng, 100)
  settings = generated.draw_settings(rng, False)
  assert target.startswith('hierarchical, 11 groups'), target
  run = truth.run_one(fn, init, None, generated.factory(settings), 1e-4,
                      settings.steps, max(4, settings.steps // 2000), False,
                      burnin=settings.burn)
  assert run.said == [truth.UNREAD], run.said
  assert run.changes and run.changes[0].parameter == 'num_results'


def test_a_coordinate_with_too_few_effective_draws_is_told_with_the_length_it_needs():
  """A whole state judged accurate whose fewest effective draws in one coordinate (450 at the defaults: a variance within 20% at 3 se) are short: told at the end that the chains have not mixed there, with ``450 / size`` times the draws."""
  assert temperature.mixed_size() == pytest.approx(450.)
  fine = temperature.Reading(1.0, 0.01, 4000., 1., 1., 0., 10)
  said = temperature_advice.advice_per_part(
      {'overall': fine}, 'overall', lambda _: 'the whole state', 1.,
      'step_size', precise=True, fewest=(100., 'coordinate 3 of the state'))
  said = said['overall']
  assert said.startswith('coordinate 3 of the state has 100 effective')
  assert 'too short to tell' in said and 'at least 5 times' in said
  assert said.changes == (Change('num_results', factor=5),)
  for quiet in (dict(precise=False, fewest=(100., 'c')),
                dict(precise=True, final=False, fewest=(100., 'c')),
                dict(precise=True, fewest=(450., 'c'))):
    assert not temperature_advice.advice_per_part(
        {'overall': fine}, 'overall', lambda _: 'it', 1., 'step_size',
        **quiet), quiet
  # A reading that finds a bias keeps its own advice.
  hot = fine._replace(temperature=1.5, first_half=1.5, second_half=1.5)
  said = temperature_advice.advice_per_part(
      {'overall': hot}, 'overall', lambda _: 'it', 1., 'step_size',
      precise=True, fewest=(100., 'c'))['overall']
  assert 'too short' not in said and 'configurational temperature' in said


@pytest.mark.slow
def test_a_short_funnel_run_whose_neck_has_not_mixed_is_not_silent():
  """A drawn funnel (one x, v of sd 1.4) under SGLD for 2,222 steps: its sds 40% low against the exact funnel, the temperature within its band; the neck's few effective draws across the 64 chains are told, with the length it needs."""
  from benchmarks import panel_truth as truth  # pylint: disable=g-import-not-at-top
  from benchmarks import panel_generated as generated  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng([680754, 168])
  assert generated.FAMILIES[int(rng.integers(len(generated.FAMILIES)))] == (
      'funnel')
  target, fn, reference, init, project, _ = generated.draw_funnel(rng)
  settings = generated.draw_settings(rng, False)
  assert target.startswith('funnel, 1 x'), target
  run = truth.run_one(fn, init, None, generated.factory(settings), 1e-4,
                      settings.steps, max(4, settings.steps // 2000), False,
                      burnin=settings.burn)
  err, se, _ = truth.run_error(run.samples, reference, project=project)
  assert abs(err) - 2. * se > 0.1, (err, se)  # Off: the truth.
  assert run.said == [truth.UNREAD], run.said
  assert run.changes and run.changes[0].parameter == 'num_results'


def _halves(start, relaxation):
  """The halves' mean distances from τ of a distance ``start·exp(−t/relaxation)`` over ``t`` in [0, 1]."""
  whole = relaxation * -np.expm1(-0.5 / relaxation)
  return start * whole, start * np.exp(-0.5 / relaxation) * whole


def test_times_to_settle_reads_the_relaxation_time_of_halves_that_approach_tau():
  """Halves of an exponential approach give back its time, and the smallest length whose burn-in leaves less than half the tolerance; halves on both sides of the target's value, or a second half no nearer, give none."""
  rng = np.random.default_rng()  # Drawn afresh in every run.
  seed = rng.integers(2 ** 31)
  for relaxation, start, share in zip(np.exp(rng.uniform(-2., 2., 20)),
                                      rng.choice([-1., 1.], 20) *
                                      rng.uniform(0.2, 5., 20),
                                      rng.uniform(0., 1., 20)):
    m1, m2 = _halves(start, relaxation)
    times, read = temperature_advice.times_to_settle(m1, m2, 0.1, share)
    np.testing.assert_allclose(read, relaxation, rtol=1e-6,
                               err_msg='seed %d' % seed)
    left = lambda k: abs(start * np.exp(-(k - 1.) * share / relaxation) *
                         relaxation / k * -np.expm1(-k / relaxation))
    if times < 1000:
      assert left(times) <= 0.05, (seed, times, left(times))
    if times > 2:
      assert left(times - 1) > 0.05, (seed, times, left(times - 1))
  # The mean force's halves, read the same way (distances from 0, in sds).
  shift = mean_force.Shift(0.45, 0.01, 400., 0.6, 0.3, -20., 10, 2, 3.)
  said = mean_force.advice('state part 0', shift, 'step_size')
  times, _ = temperature_advice.times_to_settle(0.6, 0.3,
                                                mean_force.TOLERANCE)
  assert said.changes == advice.longer_run('step_size', times), said.changes
  assert 'run about %dx longer' % times in said, said
  for first, second in ((0.5, -0.1), (0.2, 0.3), (-0.2, -0.2), (0., 0.1)):
    assert temperature_advice.times_to_settle(first, second, 0.1) is None


@pytest.mark.slow
def test_an_unsettled_run_is_told_the_length_that_settles_it():
  """SGLD started five sds out on a Gaussian whose curvatures span a factor 100: a short run has not settled and is told how much longer to run from the approach its halves show; the run that long, burn-in as much longer, samples the target's variances within 10% on average (and less than half as far off as the short run), and reads neither hot nor cold."""
  curvatures = np.logspace(0., 2., 20).astype(np.float32)
  target = lambda x: -0.5 * tf.reduce_sum(curvatures * x ** 2, -1)
  start = (5. / np.sqrt(curvatures) * np.random.default_rng(0).normal(
      size=(16, 20))).astype(np.float32)

  def run(num_results):
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      samples, _, _ = tfa.mcmc.sample(
          tfa.mcmc.SGLD(target, 2e-3), start, num_results,
          num_burnin_steps=num_results // 4, seed=(1, 2), progress=False)
    told = [w.message for w in caught
            if isinstance(w.message, tfa.diagnostics.SamplerWarning) and
            'configurational temperature' in str(w.message)]
    variances = samples.numpy().reshape(-1, 20).var(0) * curvatures
    return told, variances

  told, variances = run(400)
  assert np.mean(variances) > 1.5, variances
  said, = told
  assert 'has not settled' in str(said) and 'decays with a time' in str(
      said), str(said)
  changes = {c.parameter: c.factor for c in said.changes}
  times = changes['num_results']
  assert changes == {'num_results': times, 'num_burnin_steps': times}
  assert 'run about %dx longer' % times in str(said), str(said)
  short_error = abs(np.mean(variances) - 1.)
  told, variances = run(400 * int(times))
  # Not hot or cold; the halves may still differ at the edge of the
  # stationarity test (this seed's do, by 3.2 standard errors).
  assert not [w for w in told if 'has not settled' not in str(w)], [
      str(w) for w in told]
  # The scaled variances' mean: SGLD's step adds about h·mean(curvature)/2
  # = 0.03; its Monte Carlo error is under 0.02 (the slowest direction's
  # 16 chains hold about 100 effective draws, the others many more).
  assert abs(np.mean(variances) - 1.) < min(0.1, short_error / 2), variances


def test_merged_follows_every_warning_of_a_run_at_once():
  """A decay too short for minibatches and an unsettled, hot reading under an adaptive metric: one change per parameter, the one asking more (the longest run, the smallest step, the longest average), each message's other changes kept, in the order first named."""
  decay = advice.Advice('decay', (Change('preconditioner_decay_rate',
                                         value=0.99),))
  unsettled = temperature_advice.advice('the whole state', UNSETTLED, 1.,
                                        'step_size', adaptive=True)
  hot = temperature_advice.advice('the whole state', HOT, 1., 'step_size',
                                  adaptive=True)
  shorter = advice.Advice('d', (Change('preconditioner_decay_rate',
                                       value=0.95),))
  merged = advice.merged([decay, 'no change named', unsettled, hot, shorter])
  by_name = {c.parameter: c for c in merged}
  assert len(by_name) == len(merged)
  assert [c.parameter for c in merged][:2] == ['preconditioner_decay_rate',
                                               'num_results']
  assert by_name['preconditioner_decay_rate'].value == 0.99
  assert by_name['num_adaptation_steps'].value == advice.THE_BURNIN
  lengths = [c.factor for m in (unsettled, hot) for c in m.changes
             if c.parameter == 'num_results']
  assert by_name['num_results'].factor == max(lengths) > min(lengths)
  assert by_name['num_burnin_steps'].factor == max(lengths)
  steps = [c.factor for c in hot.changes if c.parameter == 'step_size']
  assert by_name['step_size'].factor == min(steps) < 1.
  assert advice.merged([hot]) == hot.changes
  assert advice.merged(['plain', warnings.WarningMessage(
      'x', UserWarning, 'f', 1).message]) == ()


def test_a_reading_far_off_asks_a_first_try_not_an_extrapolated_step():
  """A bias grows with the step in proportion only while it is small: within a whole sd (or twice τ) the factor is the reading's over the tolerance; beyond, that of a bias of 1, said to be a first try, never the thousands-fold step a diverging or unarrived chain would extrapolate to."""
  near = mean_force.Shift(0.5, 0.01, 400., 0.5, 0.5, 0., 10, 2, 3.)
  said = mean_force.advice('state part 0', near, 'step_size')
  np.testing.assert_allclose(_factor(said, 'step_size'),
                             0.5 / mean_force.TOLERANCE, rtol=0.01)
  assert 'first' not in said and 'read the rerun' not in said
  for far in (30., -3e9):
    shift = mean_force.Shift(far, 0.1, 400., far, far, 0., 10, 2, 3.)
    said = mean_force.advice('state part 0', shift, 'step_size')
    np.testing.assert_allclose(_factor(said, 'step_size'),
                               1. / mean_force.TOLERANCE, rtol=0.01)
    assert 'no longer scales with the step' in said, said
    assert said.changes == advice.smaller_step(
        'step_size', 1. / mean_force.TOLERANCE)
  scorching = temperature.Reading(50., 0.5, 400., 50., 50., 0., 10)
  said = temperature_advice.advice('the whole state', scorching, 1.,
                                   'step_size')
  np.testing.assert_allclose(_factor(said, 'step_size'),
                             1. / temperature.TOLERANCE, rtol=0.01)
  assert 'no longer scales with the step' in said, said
  assert said.changes == advice.smaller_step('step_size',
                                             1. / temperature.TOLERANCE)
  assert 'no longer scales' not in temperature_advice.advice(
      'the whole state', HOT, 1., 'step_size')
