"""The collector's one verdict at the end of `fit`, and the arguments that changed their names."""

import types
import warnings

import numpy as np
import pytest

import tfp_adaptive as tfa
from tfp_adaptive.diagnostics import temperature as temperature_lib
from tfp_adaptive.keras import fit_verdict


def _reading(value, se=0.01, n=4000):
  """A settled `Reading` of `value` from ``n`` draws of about `se` error."""
  rng = np.random.default_rng(0)
  draws = value + se * np.sqrt(n) * rng.standard_normal(n)
  draws += value - draws.mean()
  return temperature_lib.read(draws, 1)


def _regime(checked=True, outside=False):
  return types.SimpleNamespace(checked=checked, outside=outside)


def test_the_members_reading_decides_over_the_regime_numbers():
  good, hot = _reading(1.), _reading(1.5)
  members_good = {'overall': good, 'laplacian': good}
  members_hot = {'overall': good, 'laplacian': hot}
  assert fit_verdict.combine(_regime(outside=True), None, members_good,
                             1.).verdict == 'accurate'
  verdict = fit_verdict.combine(_regime(), good, members_hot, 1.)
  assert verdict == ('hot', 'inside', 'accurate', 'hot'), verdict


def test_a_reading_too_wide_to_vouch_confirms_nothing():
  """Within the band, but ±3 se wider than 0.2·τ: a spread 10% off is not ruled out, so neither reading makes the run accurate."""
  wide, good = _reading(1., se=0.1), _reading(1.)
  verdict = fit_verdict.combine(_regime(), wide, {'overall': wide}, 1.)
  assert verdict == ('unread', 'inside', 'too imprecise', 'too imprecise')
  verdict = fit_verdict.combine(_regime(), good, {'overall': wide}, 1.)
  assert verdict == ('accurate', 'inside', 'accurate', 'too imprecise')


def test_the_live_reading_and_the_regime_without_members():
  good, cold = _reading(1.), _reading(0.6)
  assert fit_verdict.combine(_regime(), cold, None, 1.).verdict == 'cold'
  assert fit_verdict.combine(_regime(outside=True), good, None,
                             1.).verdict == 'outside the regime'
  assert fit_verdict.combine(_regime(), good, None, 1.).verdict == 'accurate'
  assert fit_verdict.combine(_regime(checked=False), None, None,
                             1.) == ('unread', None, None, None)
  for word in fit_verdict.VERDICTS:
    assert isinstance(word, str)


def test_the_old_words_of_the_collector_still_work_with_a_deprecation():
  with pytest.warns(DeprecationWarning, match='monitor=False'):
    collector = tfa.keras.SampleCollector(check_temperature=False)
  assert collector.monitor is False
  with pytest.warns(DeprecationWarning, match="'reject'"):
    collector = tfa.keras.SampleCollector(nonfinite='skip')
  assert collector.nonfinite == 'reject'
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    tfa.keras.SampleCollector(monitor=tfa.keras.SamplerMonitor())


@pytest.mark.parametrize('bad', ['yes', 1, None])
def test_monitor_must_be_a_bool_or_a_monitor(bad):
  with pytest.raises(TypeError, match='monitor'):
    tfa.keras.SampleCollector(monitor=bad)


@pytest.mark.slow
def test_a_run_too_short_to_read_says_so_with_the_length_it_needs():
  """A 128-step `fit` with two members is returned with a warning naming the length it needs.

  Nothing can read such a run: the live reading needs more steps and
  epochs after burn-in, and there are too few members to read them. It
  must not come back without a word, whatever its step. The epochs
  needed are exact: one to centre the reading, the monitor's burn-in,
  then ``max(2·window, ⌈min_steps / steps per epoch⌉)`` epochs.
  """
  import keras  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.normal(size=(256, 5)).astype('float32')
  y = (x @ np.ones(5) + 0.1 * rng.normal(size=256)).astype('float32')
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(1)])
  model.compile(tfa.keras.optimizers.SGLD(1e-8, data_size=256, seed=0),
                'mse')
  collector = tfa.keras.SampleCollector(burnin=2, unit='epoch')
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model.fit(x, y, batch_size=16, epochs=8, verbose=0,
              callbacks=[collector])
  assert int(model.optimizer.iterations) == 128
  assert collector.verdict.verdict == 'unread'
  said = [str(w.message) for w in caught if 'too short' in str(w.message)]
  assert len(said) == 1, [str(w.message) for w in caught]
  thermometer = collector._readings.thermometer  # pylint: disable=protected-access
  first = max(thermometer.burnin_epochs - 1, 0)
  needed = 1 + first + max(2 * thermometer.window, -(-500 // 16))
  assert 'at least %d epochs in all' % needed in said[0]
  assert 'training_data' in said[0]
  # Run that long, it is read (and so not called too short).
  collector = tfa.keras.SampleCollector(burnin=2, unit='epoch')
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model.fit(x, y, batch_size=16, epochs=needed, verbose=0,
              callbacks=[collector])
  assert collector.verdict.verdict != 'unread'
  assert not [w for w in caught if 'too short' in str(w.message)]
