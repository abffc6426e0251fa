"""Loud when the posterior goes bad: weights without bound, a loss that rises or spikes, members off the targets' scale.

The trend rule is checked on sequences with a known answer (stationary
AR(1) epoch losses against the same with a ramp); the collector's warning
on small keras.io-style regressions, one with a posterior that a flat prior
leaves improper, one whose step is beyond the stable step, and the same
models run well, which must stay silent.
"""

import warnings

import keras
import numpy as np
import pytest

import tfp_adaptive as tfa
from tfp_adaptive.keras import health
from tests.conftest import no_warning

BAD = 'the posterior looks bad'


def _series(rng, n, rho, log_sd, ramp=0.):
  """Lognormal AR(1) epoch losses (stationary), times ``1 + ramp·t/n``."""
  x = np.zeros(n)
  for i, e in enumerate(rng.normal(size=n)):
    x[i] = (rho * x[i - 1] if i else 0.) + np.sqrt(1. - rho ** 2) * e
  return np.exp(log_sd * x) * (1. + ramp * np.arange(n) / n)


def _judged(values):
  """As the collector judges: windows of 9, 18, 36 and 72 epochs."""
  return any(health.rising(values[:n], health.LOSS_RISE)
             for n in (9, 18, 36, 72))


def test_the_trend_rule_separates_a_ramp_from_a_stationary_wander():
  """Stationary losses with a 30% log-sd and lag-1 correlation 0.8 (slow
  mixing): warned in at most 3% of 1000 runs (1.9% here, 2.6 standard
  errors below the bound). The same losses growing fivefold over the run:
  warned in at least 70% of 300 (77% here, 3 standard errors above it)."""
  rng = np.random.default_rng(0)
  false = np.mean([_judged(_series(rng, 72, 0.8, 0.3)) for _ in range(1000)])
  found = np.mean([_judged(_series(rng, 72, 0.8, 0.3, ramp=4.))
                   for _ in range(300)])
  assert false <= 0.03, false
  assert found >= 0.7, found
  assert not health.rising(np.linspace(1., 10., 8), 2.)  # Too few epochs.


def _loss_findings(losses):
  run = health.RunHealth({})
  for loss in losses:
    run.record(loss)
  return run.findings()


def test_a_jump_is_a_spike_only_when_it_is_large_in_nats():
  """Wine's separable data: a chain's epoch losses near 0.001 with one at
  0.047 (35 times the median, measured on the quality benchmark) are a
  posterior's noise, not an excursion; a jump from 1 to 20 nats is one."""
  assert not _loss_findings([0.001] * 12 + [0.047] + [0.001] * 6)
  found = _loss_findings([1.] * 12 + [20.] + [1.] * 6)
  assert len(found) == 1 and found[0][0] == 'step', found
  assert 'jumped to 20' in found[0][1], found


def test_off_range_counts_means_outside_the_widened_target_range():
  y = np.array([0., 1., 2., 3., 4.])  # Range 4: [-4, 8] is in.
  assert health.off_range([0., 7.9, -3.9, 2., 2.], y) == 0.
  assert health.off_range([0., 8.1, -4.1, 2., 2.], y) == 0.4


def _data(n=200):
  """keras.io-style regression with 10 inputs that the data never excite."""
  rng = np.random.default_rng(0)
  x = np.zeros((n, 12), 'float32')
  x[:, :2] = rng.normal(size=(n, 2))
  y = x[:, :1] - 0.5 * x[:, 1:2] + 0.3 * rng.normal(size=(n, 1))
  return x, y.astype('float32')


def _fit(prior, learning_rate, epochs=40, **collector_args):
  x, y = _data()
  keras.utils.set_random_seed(0)
  inputs = keras.Input((12,))
  model = keras.Model(inputs, keras.layers.Dense(1, name='linear')(inputs))
  model.compile(tfa.keras.optimizers.SGLD(learning_rate, data_size=len(x),
                                          prior=prior), loss='mse')
  collector = tfa.keras.SampleCollector(**collector_args)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model.fit(x, y, batch_size=20, epochs=epochs, verbose=0,
              callbacks=[collector])
  return [str(w.message) for w in caught if BAD in str(w.message)], collector


@pytest.mark.slow
def test_weights_the_data_never_excite_drift_without_a_prior_and_are_named():
  """Under a flat prior the ten unexcited weights random-walk: one warning,
  naming the layer and the prior. Under the default prior they stay in the
  prior's scale: no warning."""
  messages, _ = _fit('flat', 1e-3)
  assert len(messages) == 1, messages
  assert 'layer linear' in messages[0] and 'the prior' in messages[0], messages
  messages, _ = _fit('default', 1e-3)
  assert not messages, messages


@pytest.mark.slow
def test_a_step_beyond_the_stable_step_is_named():
  """lr 1e-2 is five times the step at which SGLD on this loss is stable:
  the chain diverges geometrically, the loss and the weight norm grow,
  and one warning names the step."""
  messages, _ = _fit('default', 1e-2)
  assert len(messages) == 1, messages
  assert 'the step' in messages[0] and 'learning rate' in messages[0], messages


@pytest.mark.slow
def test_members_far_off_the_targets_are_named_once():
  """With validation data, the collector warns once when a member leaves
  the targets' range; `evaluate` counts such members."""
  x, y = _data()
  messages, collector = _fit('default', 1e-2, validation_data=(x, y))
  assert len(messages) == 1, messages
  assert 'validation targets' in messages[0], messages
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    collector.ensemble.evaluate(x, y)
  said = [str(w.message) for w in caught if BAD in str(w.message)]
  assert len(said) == 1 and 'members predict outside' in said[0], said


@pytest.mark.slow
def test_a_run_that_samples_well_is_silent():
  messages, collector = _fit('default', 1e-4, burnin=100)
  assert not messages, messages
  x, y = _data()
  with no_warning(BAD):
    collector.ensemble.evaluate(x, y)
