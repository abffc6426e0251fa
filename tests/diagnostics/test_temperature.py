"""The configurational temperature against the empirical one, in kernels and in `fit`.

- Kernels (`tfa.mcmc.check_temperature`): on a correlated Gaussian the
  reading equals ``tr(P Σ̂)/D`` of the same draws (``P`` the exact
  precision, ``Σ̂`` their covariance) within 3 combined standard errors,
  at a step where SGLD runs 4% hot and at one where it is exact. A run
  that includes its transient is reported as not settled, with no advice
  on the step.
- `fit` (`SamplerMonitor`): on the small model that broke the reading
  when its centre came from burn-in (Dense(1) on 3 inputs with a bias,
  N = 1000, Keras' reshuffled minibatches), the reading is within 10% of
  the empirical temperature of the collected weights, plus 3 combined
  standard errors (each from its own effective sample size).
- The Laplacian form ``⟨|∇U|²⟩/⟨ΔU⟩`` weighs directions by curvature:
  on a Gaussian with one stiff direction, SGLD's exact stationary
  variances (``1/(λ(1 − hλ/4))`` per direction) predict both readings,
  the virial's and the Laplacian's, and each is within 3 standard errors
  of its prediction; on exact draws from a target whose gradient carries
  large noise, the Laplacian form still reads 1 (the two-draw product).
- A `fit` that ends before its chain is stationary is told so at the end,
  even with too few effective draws to judge a bias: the README's digits
  MLP under its default prior, stopped while its weights still spread out
  towards the prior's scale.
"""

import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive.diagnostics import temperature as temperature_lib
from tfp_adaptive.diagnostics import temperature_advice

COV = np.array([[1., 0.8], [0.8, 1.]])
PREC = np.linalg.inv(COV)


def _gaussian(x):
  p = tf.constant(PREC, x.dtype)
  return -0.5 * tf.einsum('...i,ij,...j->...', x, p, x)


def _empirical(draws, precision):
  """``tr(P Σ̂)/D`` as a `Reading`: per draw ``(θ − θ̄)ᵀP(θ − θ̄)/D``."""
  d = draws - draws.reshape(-1, draws.shape[-1]).mean(0)
  q = np.einsum('...i,ij,...j->...', d, precision, d)
  return temperature_lib.read(q, draws.shape[-1])


@pytest.mark.slow
@pytest.mark.parametrize('h', [0.01, 0.05])
def test_kernel_reading_is_the_empirical_temperature(h):
  kernel = tfa.mcmc.SGLD(_gaussian, h)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    samples, _, _ = tfa.mcmc.sample(kernel, tf.zeros([64, 2]), 3000,
                                    num_burnin_steps=1000, seed=(1, 2),
                                    progress=False)
  assert not [w for w in caught if 'temperature' in str(w.message)]
  reading = tfa.mcmc.check_temperature(kernel, samples, warn=False)[0]
  thinned = samples.numpy()[np.linspace(0, 2999, 256).round().astype(int)]
  emp = _empirical(thinned, PREC)
  se = np.hypot(reading.standard_error, emp.standard_error)
  assert abs(reading.temperature - emp.temperature) < 3. * se, (reading, emp)
  assert reading.standard_error < 0.04, reading  # Power against 10%.


@pytest.mark.slow
def test_a_transient_is_reported_as_not_settled_without_advice_on_the_step():
  kernel = tfa.mcmc.SGLD(_gaussian, 0.01)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    tfa.mcmc.sample(kernel, tf.fill([64, 2], 30.), 1000, seed=(1, 2),
                    progress=False)
  messages = [str(w.message) for w in caught if 'temperature' in
              str(w.message)]
  assert len(messages) == 1 and 'has not settled' in messages[0], messages
  assert 'Lower `step_size`' not in messages[0]


@pytest.mark.parametrize('first,second,judged', [
    (0.98, 1.02, 'accurate'), (0.9, 1.1, 'unsettled')])
def test_a_drift_within_the_tolerance_is_judged_one_beyond_it_is_not(
    first, second, judged):
  """Halves 14 and 70 standard errors apart: a drift of 0.04 (within the
  0.1 tolerance) moves no verdict and is judged; one of 0.2 is not."""
  rng = np.random.default_rng(0)
  draws = np.concatenate([first + 0.5 * rng.standard_normal((1000, 64)),
                          second + 0.5 * rng.standard_normal((1000, 64))])
  reading = temperature_lib.read(draws, 1)
  assert abs(reading.drift_z) > 10 * temperature_lib.STATIONARITY_Z / 3.
  assert temperature_lib.verdict(reading) == judged


STIFF = np.array([100.] + [1.] * 9)


def _stiff(x):
  return -0.5 * tf.reduce_sum(tf.constant(STIFF, x.dtype) * x ** 2, -1)


@pytest.mark.slow
def test_laplacian_form_weighs_directions_by_their_curvature_and_warns():
  h = 0.02  # SGLD: the stiff direction samples at twice its variance.
  heat = 1. / (1. - h * STIFF / 4.)  # Exact for SGLD's (h/2)∇ + sqrt(h)ξ.
  predicted = {'overall': heat.mean(),
               'laplacian': np.sum(STIFF * heat) / STIFF.sum()}
  kernel = tfa.mcmc.SGLD(_stiff, h)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    samples, _, _ = tfa.mcmc.sample(kernel, tf.zeros([64, 10]), 4000,
                                    num_burnin_steps=1000, seed=(1, 2),
                                    progress=False)
  readings = tfa.mcmc.check_temperature(kernel, samples, warn=False)
  for key, value in predicted.items():  # 1.10 and 1.93: far apart.
    r = readings[key]
    assert abs(r.temperature - value) < 3. * r.standard_error, (key, r, value)
    assert r.standard_error < 0.05, (key, r)
  # The virial's interval holds 1.10, the Laplacian form's is far above it:
  # one warning, from the Laplacian form, with its factor (1.93 − 1)/0.1.
  messages = [str(w.message) for w in caught if 'temperature' in
              str(w.message)]
  assert len(messages) == 1, messages
  assert 'Laplacian form' in messages[0], messages
  assert 'wider than its target' in messages[0], messages
  factor = float(re.search(r'Lower `step_size` about ([0-9.]+)x',
                           messages[0]).group(1))
  assert abs(factor - 9.3) < 1.5, messages  # 3 s.e. of the reading: 0.05.


def test_laplacian_form_of_a_noisy_gradient_reads_one_on_exact_draws():
  sd = 10.  # |∇Û|² would read about ten times hot.

  def noisy(x, seed):
    noise = tf.random.stateless_normal(tf.shape(x), seed, dtype=x.dtype)
    return _stiff(x) + tf.reduce_sum(x * tf.stop_gradient(sd * noise), -1)
  noisy.needs_seed = True
  draws = (np.random.default_rng(0).normal(size=(256, 64, 10))
           / np.sqrt(STIFF)).astype(np.float32)
  r = tfa.mcmc.check_temperature(tfa.mcmc.SGLD(noisy, 0.01), draws,
                                 warn=False, seed=(3, 4))['laplacian']
  assert abs(r.temperature - 1.) < 3. * r.standard_error, r
  assert r.standard_error < 0.1, r


def test_too_few_draws_far_off_are_reported_at_the_end_only():
  far = temperature_lib.Reading(0.26, 0.05, 3., 0.19, 0.33, 2., 10)
  near = temperature_lib.Reading(0.95, 0.05, 3., 0.9, 1., 1., 10)
  assert temperature_lib.verdict(far) == 'too short'
  assert temperature_advice.advice('it', far, 1., 'step_size',
                                  final=False) is None
  assert temperature_advice.advice('it', near, 1., 'step_size') is None
  message = temperature_advice.advice('it', far, 1., 'step_size')
  assert 'has not settled' in message and 'Lower' not in message, message


@pytest.mark.slow
def test_a_fit_that_ends_in_its_transient_is_told():
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  x, y = (digits.data / 16.).astype('float32'), digits.target
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((64,)),
                            keras.layers.Dense(100, activation='relu'),
                            keras.layers.Dense(10)])
  model.compile(optimizer=tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x)),
                loss=keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model.fit(x, y, epochs=16, verbose=0, callbacks=[
        tfa.keras.StepSizeCalibration(epochs=3),
        tfa.keras.SampleCollector(burnin=5, unit='epoch')])
  messages = [str(w.message) for w in caught if 'temperature' in
              str(w.message)]
  assert len(messages) == 1 and 'has not settled' in messages[0], messages
  assert 'the whole model' in messages[0], messages


def test_no_layer_is_advised_on_while_the_whole_model_is_in_transit():
  """The convnet's case: the whole model still rising (too few effective
  draws), one layer flat at 0.8 with 20 epochs' worth of draws. Mid-run the
  layer's "cold" advice would be about the transient, so nothing is said;
  at the end the whole model is reported once, as not settled."""
  import types  # pylint: disable=g-import-not-at-top
  from tfp_adaptive.keras import monitor as monitor_lib  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  epochs = 20
  monitor = monitor_lib.SamplerMonitor(burnin_epochs=1, window=2, min_steps=1)
  monitor._steps = [100] * epochs  # pylint: disable=protected-access
  rising = np.linspace(0.1, 0.5, epochs)
  monitor.temperatures.update({
      'temperature': list(rising + 0.01 * rng.normal(size=epochs)),
      'temperature/a': list(rising + 0.01 * rng.normal(size=epochs)),
      'temperature/b': list(0.8 + 0.02 * rng.normal(size=epochs))})
  opt = types.SimpleNamespace(
      temperature=1., gamma='corrected',
      algorithm=types.SimpleNamespace(adapts_throughout=True))
  layer_b = temperature_lib.read(monitor.temperatures['temperature/b'], 1)
  assert temperature_lib.verdict(layer_b) == 'cold'  # What it would say.
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    monitor._judge(opt, final=False)  # pylint: disable=protected-access
    assert not caught, [str(w.message) for w in caught]
    monitor._judge(opt, final=True)  # pylint: disable=protected-access
  messages = [str(w.message) for w in caught]
  assert len(messages) == 1 and 'the whole model' in messages[0], messages
  assert 'has not settled' in messages[0], messages


def test_check_temperature_names_bad_arguments():
  kernel = tfa.mcmc.SGLD(_gaussian, 0.01)
  with pytest.raises(ValueError, match='max_draws'):
    tfa.mcmc.check_temperature(kernel, tf.zeros([10, 4, 2]), max_draws=2)
  with pytest.raises(TypeError, match='target_log_prob_fn'):
    tfa.mcmc.check_temperature(object(), tf.zeros([10, 4, 2]))
  with pytest.raises(ValueError, match='batches'):
    tfa.keras.SamplerMonitor(batches='sometimes')


@pytest.mark.statistical
def test_the_monitor_reads_a_small_model_within_ten_percent():
  """Dense(1) on 3 inputs with a bias, `fit` on arrays (the panel's
  regression in `fit`, whose posterior precision is known)."""
  from benchmarks import panel_fit  # pylint: disable=g-import-not-at-top
  x, y, precision, _ = panel_fit.regression()
  n = len(x)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  tfa.keras.priors.add_gaussian_prior(model, data_size=n, scale=1.)
  model.compile(tfa.keras.optimizers.SGLD(1e-4, data_size=n, seed=0), 'mse',
                steps_per_execution=20)
  monitor = tfa.keras.SamplerMonitor(burnin_epochs=75)
  collector = tfa.keras.SampleCollector(burnin=75, unit='epoch',
                                        monitor=monitor)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model.fit(x, y, batch_size=50, epochs=300, verbose=0,
              callbacks=[collector])
  w = np.stack([np.concatenate([m.weights[0].ravel(), m.weights[1].ravel()])
                for m in collector.members])
  emp = _empirical(w, precision)
  reading = monitor.readings['temperature']
  se = np.hypot(reading.standard_error, emp.standard_error)
  assert se < 0.1, (reading, emp)
  assert abs(reading.temperature - emp.temperature) < (
      0.1 * emp.temperature + 3. * se), (reading, emp)
  assert not [w for w in caught if 'temperature' in str(w.message)]


@pytest.mark.slow
def test_a_run_heated_by_its_minibatch_noise_is_told():
  """SGLD at h = 1e-4 on a regression with minibatches of 20 of 200: sds
  about 11% wide (the panel), read on all the data (no minibatch noise in
  the reading). At h = 1e-5 it is within the tolerance, and silent."""
  from benchmarks import panel  # pylint: disable=g-import-not-at-top
  fn, _, init = panel._regression(20)[:3]  # pylint: disable=protected-access
  said = {}
  for h in (1e-4, 1e-5):
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      tfa.mcmc.sample(tfa.mcmc.SGLD(fn, h), init, 1000,
                      num_burnin_steps=5000, num_steps_between_results=19,
                      seed=(3, 4), chunk_size=1000, progress=False)
    said[h] = [str(w.message) for w in caught if 'temperature' in
               str(w.message)]
  assert len(said[1e-4]) == 1 and 'wider than its target' in said[1e-4][0]
  assert not said[1e-5], said[1e-5]


@pytest.mark.slow
def test_laplacian_form_counts_the_kink_of_a_laplace_prior():
  """A Gaussian likelihood times a Laplace prior, ``U = x²/2 + |x|`` per coordinate, sampled accurately.

  ``U`` has a kink at 0, whose curvature ``2δ(x)`` a Hessian-vector
  product misses: the Laplacian it sees, 1 a coordinate, is short of the
  ``1 + 2π(0)`` the identity needs (``π(0) ≈ 0.52`` here), and would read
  about 2. The reading takes second differences of the gradient, which
  count the kink, and reads 1, silently.
  """
  def log_prob(x):
    return -tf.reduce_sum(0.5 * x ** 2 + tf.abs(x), -1)
  kernel = tfa.mcmc.SGLD(log_prob, 0.01)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    tfa.mcmc.sample(kernel, tf.zeros([64, 5]), 2000, num_burnin_steps=500,
                    num_steps_between_results=4, seed=(1, 2), progress=False)
  assert not [w for w in caught if 'temperature' in str(w.message)], [
      str(w.message) for w in caught]


@pytest.mark.slow
def test_sample_reads_more_draws_as_the_run_allows(monkeypatch):
  """`tfa.mcmc.sample` reads 256 draws, or on a long run as many as keep
  the reading within a tenth of the run's gradients (four a draw; a pass
  over the data each for a minibatch target, which is read exact)."""
  from benchmarks import panel  # pylint: disable=g-import-not-at-top
  from tfp_adaptive.mcmc import temperature as mcmc_temperature  # pylint: disable=g-import-not-at-top
  asked = []

  def spy(kernel, samples, **kwargs):
    del kernel, samples
    asked.append(kwargs['max_draws'])
    return {}
  monkeypatch.setattr(mcmc_temperature, 'check_temperature', spy)
  init = tf.zeros([8, 2])
  minibatch_fn, _, minibatch_init = panel._regression(20)[:3]  # pylint: disable=protected-access
  for fn, start, thin in ((_gaussian, init, 0), (_gaussian, init, 19),
                          (minibatch_fn, minibatch_init, 19)):
    tfa.mcmc.sample(tfa.mcmc.SGLD(fn, 0.01 if fn is _gaussian else 1e-5),
                    start, 1000, num_steps_between_results=thin,
                    seed=(1, 2), progress=False)
  # 1000 steps: 256. 20000: 500. 20000 with 10 batches a pass: 256.
  assert asked == [256, 500, 256]


def test_a_precise_reading_stands_unless_the_unbiased_one_refutes_it():
  """`unless_refuted`: within 3 combined standard errors the precise
  reading stands (its errors are the smaller); the unbiased one reading
  higher beyond that replaces it, wide errors and all; one reading lower,
  or with no error (too few draws), replaces nothing."""
  precise = temperature_lib.Reading(1.0, 0.02, 500., 1.0, 1.0, 0., 4)
  near = temperature_lib.Reading(1.5, 0.2, 40., 1.5, 1.5, 0., 4)
  far = temperature_lib.Reading(2.5, 0.3, 40., 2.5, 2.5, 0., 4)
  unknown = temperature_lib.Reading(9., np.inf, 2., 9., 9., 0., 4)
  cold = temperature_lib.Reading(0.2, 0.1, 40., 0.2, 0.2, 0., 4)
  assert temperature_lib.unless_refuted(precise, near) is precise
  assert temperature_lib.unless_refuted(precise, far) is far
  assert temperature_lib.unless_refuted(precise, cold) is precise
  assert temperature_lib.unless_refuted(precise, unknown) is precise


def test_halves_without_noise_read_without_a_division_warning():
  """A series constant within each half has no spread: its halves' drift
  reads 0 when they agree and an infinite z when they differ (a drift no
  noise explains), without NumPy's division warning."""
  with warnings.catch_warnings():
    warnings.simplefilter('error')
    flat = temperature_lib.read(np.ones([100, 4]), 1)
    step = temperature_lib.read(np.r_[np.ones([50, 4]), 2. * np.ones([50, 4])],
                                1)
  assert flat.drift_z == 0. and flat.temperature == 1.
  assert step.drift_z == np.inf and (step.first_half, step.second_half) == (
      1., 2.)


@pytest.mark.parametrize('first,second,judged', [
    (1.5, 2.5, 'hot'), (0.7, 0.4, 'cold'),  # Moving out: judged.
    (2.5, 1.5, 'unsettled'), (0.4, 0.7, 'unsettled'),  # Relaxing in.
    (0.7, 1.5, 'unsettled'),  # Crossing the band.
    (1.05, 1.5, 'unsettled')])  # From inside the band: a transient.
def test_a_reading_that_moves_away_from_its_target_is_judged_not_unsettled(
    first, second, judged):
  """Halves many standard errors apart: a reading further out in its second half than in its first, both on one side outside the band, is leaving the target, and judged hot or cold with its advice on the step; one that relaxes towards ``τ``, crosses it or starts inside the band is a transient."""
  rng = np.random.default_rng()
  draws = np.concatenate([first + 0.5 * rng.standard_normal((1000, 64)),
                          second + 0.5 * rng.standard_normal((1000, 64))])
  reading = temperature_lib.read(draws, 1)
  assert abs(reading.drift_z) > 10 * temperature_lib.STATIONARITY_Z
  assert temperature_lib.verdict(reading) == judged
  said = temperature_advice.advice('it', reading, 1., 'step_size')
  assert ('moves away from its target' in said) == (judged != 'unsettled')
  assert ('has not settled' in said) == (judged == 'unsettled')


@pytest.mark.parametrize('value, se, factor', [
    (1.0, 0.01, 1.), (1.02, 0.05, (3 * 0.05 / 0.08) ** 2),
    (0.95, 0.04, (3 * 0.04 / 0.05) ** 2), (1.12, 0.01, np.inf),
    (1.1, 0.001, np.inf)])
def test_draws_to_confirm_is_the_factor_that_brings_the_interval_inside(
    value, se, factor):
  """``T ± se`` inside ``τ(1 ± 0.1)`` confirms it with ``(3·se/room)²`` times its draws: at that many (and a little more) it does, at a little fewer it does not; a reading on or outside the edge, never."""
  reading = lambda s: temperature_lib.Reading(value, s, 400., value, value,
                                              0., 10)
  got = temperature_lib.draws_to_confirm(reading(se), 1., 0.1)
  assert got == pytest.approx(factor)
  if np.isfinite(factor) and factor > 1.:
    assert temperature_lib.confirms(reading(se / np.sqrt(factor * 1.001)),
                                    1., 0.1)
    assert not temperature_lib.confirms(
        reading(se / np.sqrt(factor * 0.999)), 1., 0.1)


def test_draws_to_resolve_brings_the_half_width_to_twice_the_tolerance():
  """A reading at τ too wide to vouch for (``3·se > 2·tol·τ``) stops being `imprecise` with ``(3·se / (2·tol·τ))²`` times its draws; a precise one needs 1."""
  reading = lambda s: temperature_lib.Reading(1.01, s, 400., 1.01, 1.01, 0.,
                                              2)
  assert temperature_lib.draws_to_resolve(reading(0.05), 1., 0.1) == 1.
  factor = temperature_lib.draws_to_resolve(reading(0.1), 1., 0.1)
  assert factor == pytest.approx((3 * 0.1 / 0.2) ** 2)
  assert temperature_lib.imprecise(reading(0.1 / np.sqrt(factor * 0.999)),
                                   1., 0.1)
  assert not temperature_lib.imprecise(
      reading(0.1 / np.sqrt(factor * 1.001)), 1., 0.1)
