"""`BayesianEnsemble.check_temperature`: the configurational temperature of the members `fit` collected.

A Bayesian linear regression written as a Keras model (keras.io style:
`Sequential`, `Dense`, `model.fit` on arrays), sampled by SGLD with the
whole data as its batch, so the posterior is Gaussian with Hessian
``H = 2XᵀX + prior precision`` (the loss is the MSE: ``U = N·MSE``) and
SGLD's stationary variance per eigendirection is exactly
``1/(λ(1 − hλ/4))`` for its ``(h/2)∇ + sqrt(h)ξ`` step. One direction is
100 times stiffer than the others, and the step heats it to twice its
variance: the virial, the plain mean of the directions' temperatures,
reads about 1.10, the Laplacian form, their curvature-weighted mean,
about 1.9.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive.diagnostics import temperature as temperature_lib

N, D = 100, 10


def _data(stiff=10.):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(N, D))
  x -= x.mean(0)
  x = x @ np.linalg.inv(np.linalg.cholesky(x.T @ x / N)).T  # XᵀX = N·I.
  x[:, 0] *= stiff  # One direction stiff² times stiffer.
  y = x @ rng.normal(size=D) * 0.1 + rng.normal(size=N)
  return x.astype('float32'), y[:, None].astype('float32')


def _fit(h, steps, stiff=10., seed=0, training_data=False):
  x, y = _data(stiff)
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((D,)),
                            keras.layers.Dense(1, use_bias=False)])
  model.compile(tfa.keras.optimizers.SGLD(h, data_size=N), loss='mse',
                steps_per_execution=10)
  collector = tfa.keras.SampleCollector(
      burnin=steps // 4, monitor=False,
      training_data=(x, y) if training_data else None)
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(N).repeat()
  model.fit(dataset, epochs=steps // 500, steps_per_epoch=500, verbose=0,
            callbacks=[collector])
  if training_data:
    return collector
  return collector.ensemble, x, y


def _predicted(h, stiff=10.):
  x, _ = _data(stiff)
  prior_precision = 1. / 10.  # The default prior: N(0, 100/fan_in).
  lam = np.linalg.eigvalsh(2. * x.T.astype(np.float64) @ x
                           + prior_precision * np.eye(D))
  heat = 1. / (1. - h * lam / 4.)
  return heat.mean(), np.sum(lam * heat) / lam.sum()


@pytest.mark.slow
@pytest.mark.filterwarnings('ignore:.*default prior')
def test_members_read_the_directions_temperatures_and_warn_on_the_stiff_one():
  h = 2. / (2. * 100. * N + 0.1)  # The stiff direction at twice its variance.
  virial, laplacian = _predicted(h)  # 1.10 and 1.91.
  ensemble, x, y = _fit(h, 6000)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    readings = ensemble.check_temperature(x, y, max_members=512)
  for key, value in (('overall', virial), ('laplacian', laplacian)):
    r = readings[key]
    assert abs(r.temperature - value) < 3. * r.standard_error, (key, r, value)
  assert readings['laplacian'].standard_error < 0.2, readings['laplacian']
  messages = [str(w.message) for w in caught if 'temperature' in
              str(w.message)]
  assert len(messages) == 1 and 'Laplacian form' in messages[0], messages
  assert 'Lower `learning_rate`' in messages[0], messages


@pytest.mark.slow
@pytest.mark.filterwarnings('ignore:.*default prior')
def test_members_of_a_short_step_read_one_and_are_silent():
  h = 0.04 / (2. * N)  # No stiff direction: every one heated by 1%.
  ensemble, x, y = _fit(h, 6000, stiff=1.)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    readings = ensemble.check_temperature(x, y, max_members=512)
  r = readings['laplacian']
  assert abs(r.temperature - _predicted(h, 1.)[1]) < 3. * r.standard_error, r
  assert not [w for w in caught if 'temperature' in str(w.message)]


def test_needs_the_sampler_and_enough_members():
  x, y = _data()
  model = keras.Sequential([keras.Input((D,)), keras.layers.Dense(1)])
  model.compile('adam', loss='mse')
  members = [tfa.keras.ensemble.Member(k, 1e-3, [v.numpy() for v in
                                                 model.weights], None)
             for k in range(8)]
  with pytest.raises(TypeError, match='check_temperature'):
    tfa.keras.BayesianEnsemble(model, members).check_temperature(x, y)
  model.compile(tfa.keras.optimizers.SGLD(1e-5, data_size=N), loss='mse')
  with pytest.raises(ValueError, match='at least 4 members'):
    tfa.keras.BayesianEnsemble(model, members[:3]).check_temperature(x, y)
  with pytest.raises(ValueError, match='max_members'):
    tfa.keras.BayesianEnsemble(model, members).check_temperature(
        x, y, max_members=2)


@pytest.mark.slow
@pytest.mark.filterwarnings('ignore:.*default prior')
def test_the_collector_reads_its_members_on_the_training_data_at_the_end():
  """`SampleCollector(training_data=...)`: the same reading at the end of `fit`, said once, as the collector."""
  h = 2. / (2. * 100. * N + 0.1)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    collector = _fit(h, 6000, training_data=True)
  messages = [str(w.message) for w in caught if 'temperature' in
              str(w.message)]
  assert len(messages) == 1, messages
  assert messages[0].startswith(
      'SampleCollector (its members on `training_data`):'), messages
  assert 'Laplacian form' in messages[0], messages
  r = collector.member_readings['laplacian']
  assert abs(r.temperature - _predicted(h)[1]) < 3. * r.standard_error, r


@pytest.mark.statistical
def test_members_read_the_heat_of_reshuffled_minibatches():
  """Minibatches dealt without replacement, reshuffled every epoch, heat
  SGLD at lr 1e-4 and batches of 50 to about 2.4 times the posterior's
  variance (``tr(P Σ̂)/D`` of the members against the exact precision
  ``P``). The members' reading on the training data reads the empirical
  temperature within 10% (plus three standard errors) and warns that the
  run is hot. So does the live reading in `fit`: its every-step reading,
  less the estimated reshuffling term, reads about 1 here, and each
  epoch's first step, a fresh batch, refutes it (the diagnostics guide).
  The run is one of the
  panel's in `fit` (`benchmarks.panel_fit`: Dense(1) on 3 inputs with a
  bias, a `tf.data` pipeline reshuffled every epoch)."""
  from benchmarks import panel_fit  # pylint: disable=g-import-not-at-top
  _, _, precision, _ = panel_fit.regression()
  w, said, readings, _ = panel_fit.run_one(
      tfa.keras.optimizers.SGLD(1e-4, data_size=panel_fit.N, seed=0), 50,
      epochs=panel_fit.EPOCHS // 2)
  d = w - w.mean(0)
  emp = temperature_lib.read(np.einsum('ni,ij,nj->n', d, precision, d),
                             w.shape[1])  # Its error from its own ESS.
  r = readings['overall']
  assert emp.temperature > 1.5, emp  # The heat is there to be read.
  assert abs(r.temperature - emp.temperature) < 0.1 * emp.temperature + 3. * (
      np.hypot(r.standard_error, emp.standard_error)), (r, emp)
  hot = [m for m in said['members'] if 'configurational temperature' in m
         and 'Lower `learning_rate`' in m]
  assert hot, said
  live = readings['live']  # `SampleCollector.live_readings`.
  assert abs(live.temperature - emp.temperature) < (
      0.1 * emp.temperature + 3. * np.hypot(live.standard_error,
                                            emp.standard_error)), (live, emp)
  assert live.temperature - 3. * live.standard_error > 1.1, live
  assert [m for m in said['live'] if 'configurational temperature' in m
          and 'Lower `learning_rate`' in m], said


class Classifier(keras.Model):
  """A subclassed model with logits, as keras.io writes them."""

  def __init__(self):
    super().__init__()
    self.hidden = keras.layers.Dense(8, activation='tanh')
    self.logits = keras.layers.Dense(2)

  def call(self, inputs):
    return self.logits(self.hidden(inputs))


@pytest.mark.slow
@pytest.mark.filterwarnings('ignore:.*default prior')
def test_subclassed_model_and_datasets_read_per_layer():
  """`training_data` and `check_temperature` take a `tf.data.Dataset`; a subclassed model is read per layer; the end-of-fit reading is the one `check_temperature` gives with the same seed."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 5)).astype('float32')
  y = (x[:, 0] > 0).astype('int32')
  data = tf.data.Dataset.from_tensor_slices((x, y)).batch(20)
  keras.utils.set_random_seed(0)
  model = Classifier()
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=200),
                loss=keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True))
  collector = tfa.keras.SampleCollector(burnin=10, unit='epoch',
                                        monitor=False,
                                        training_data=data)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # A 40-epoch run: told it has not settled.
    model.fit(data, epochs=40, verbose=0, callbacks=[collector])
  again = collector.ensemble.check_temperature(data, warn=False)
  assert set(again) == set(collector.member_readings)
  layers = {v.path.rsplit('/', 1)[0] for v in model.trainable_variables}
  assert len(layers) == 2 and set(again) == layers | {
      'overall', 'laplacian', 'mean_force', 'predictions', 'pull'}
  assert set(again['mean_force']) == layers
  # 64 rows of the data, two logits each.
  assert again['predictions'].size == 128, again['predictions']
  # Or the inputs of a dataset: two batches of 20 rows.
  inputs = data.map(lambda a, b: a).take(2)
  assert collector.ensemble.check_temperature(
      data, warn=False, prediction_inputs=inputs)['predictions'].size == 80
  for key, r in again.items():
    if key == 'mean_force':
      for layer, shift in r.items():
        assert shift == collector.member_readings[key][layer], layer
    elif key in ('predictions', 'pull'):
      assert r == collector.member_readings[key]
    else:
      assert r.temperature == collector.member_readings[key].temperature, key


@pytest.mark.slow
@pytest.mark.parametrize('moved', [0., 0.3])
def test_members_aside_from_the_posterior_are_told_by_their_mean_force(moved):
  """Members drawn from the exact posterior read a balanced mean force, in
  the weights and along the outputs, and are silent; the same draws moved
  by 0.3 posterior sds along one weight read about 0.3 there (within three
  standard errors) while their temperature reads 1, the outputs read what
  the identity gives for a linear model (``sd(f)·xᵀHδ/|x|²``, within three
  standard errors), and both warn, naming the layer, the coordinate or
  output and the side."""
  x, y = _data(stiff=1.)
  model = keras.Sequential([keras.Input((D,)),
                            keras.layers.Dense(1, use_bias=False)])
  model.compile(tfa.keras.optimizers.SGLD(1e-5, data_size=N), loss='mse')
  model.optimizer.build(model.trainable_variables)  # As `fit` builds it.
  # U = N·MSE + the default prior N(0, 100/fan_in): H = 2XᵀX + 0.1 I.
  precision = 2. * x.T.astype(np.float64) @ x + 0.1 * np.eye(D)
  cov = np.linalg.inv(precision)
  mean = cov @ (2. * x.T.astype(np.float64) @ y[:, 0])
  draws = np.random.default_rng(1).multivariate_normal(mean, cov, 1024)
  draws[:, 3] += moved * np.sqrt(cov[3, 3])
  members = [tfa.keras.ensemble.Member(i, 1e-5, [w[:, None].astype('float32')],
                                       None, chain=i % 8)
             for i, w in enumerate(draws)]
  inputs = x[::4]
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    readings = tfa.keras.BayesianEnsemble(model, members).check_temperature(
        x, y, max_members=1024, prediction_inputs=inputs)
  said = [str(w.message) for w in caught
          if issubclass(w.category, UserWarning)]
  (layer, shift), = readings['mean_force'].items()
  outputs = readings['predictions']
  assert outputs.size == len(inputs), outputs
  assert temperature_lib.verdict(readings['overall']) == 'accurate'
  if not moved:
    assert abs(outputs.shift) < outputs.interval_z * outputs.standard_error
    assert not said, said
    return
  assert shift.coordinate == 3, shift
  assert abs(shift.shift - moved) < 3. * shift.standard_error, shift
  row = inputs[outputs.coordinate].astype(np.float64)
  exact = (np.sqrt(row @ cov @ row) * (row @ precision[:, 3])
           * moved * np.sqrt(cov[3, 3]) / (row @ row))
  assert abs(outputs.shift - exact) < 3. * outputs.standard_error, (
      outputs, exact)
  assert len(said) == 2, said
  assert 'layer %r' % layer in said[0] and 'coordinate 3' in said[0], said
  assert ("the model's outputs" in said[1]
          and 'prediction %d ' % outputs.coordinate in said[1]), said
  for message, reading in zip(said, (shift, outputs)):
    assert ('above' if reading.shift > 0 else 'below') in message, said


@pytest.mark.slow
@pytest.mark.filterwarnings('ignore:.*default prior')
def test_outputs_of_a_model_with_batch_norm_and_dropout_are_read_in_inference():
  """keras.io's layers with state or randomness: the outputs are read at the
  members' weights in inference mode (the moving statistics as the member
  holds them, no dropout), so their reading is finite and repeatable."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 5)).astype('float32')
  y = (x[:, 0] > 0).astype('int32')
  keras.utils.set_random_seed(0)
  model = keras.Sequential([
      keras.Input((5,)), keras.layers.Dense(8, activation='relu'),
      keras.layers.BatchNormalization(), keras.layers.Dropout(0.3),
      keras.layers.Dense(2)])
  model.compile(tfa.keras.optimizers.SGLD(1e-4, data_size=200),
                loss=keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True))
  collector = tfa.keras.SampleCollector(burnin=5, unit='epoch',
                                        monitor=False)
  model.fit(x, y, batch_size=50, epochs=9, verbose=0, callbacks=[collector])
  readings = [collector.ensemble.check_temperature(
      x, y, warn=False, prediction_inputs=x[:16])['predictions']
              for _ in range(2)]
  assert readings[0].size == 32 and np.isfinite(readings[0].shift)
  # The same up to the order of float32 sums across threads (a few ulps of
  # the terms summed: relative 1e-6 was exceeded on a field of 188), on
  # fields of order 1 and on a shift near 0 alike (dropout or an update of
  # the moving statistics would move them by tenths).
  np.testing.assert_allclose(readings[1], readings[0], rtol=1e-5, atol=1e-6)


@pytest.mark.filterwarnings('ignore:.*default prior')
@pytest.mark.slow
def test_few_effective_members_of_a_large_model_are_not_read_cold():
  """64 members of one chain, exact posterior draws of a 400-weight linear
  regression but autocorrelated (AR(1), ρ = 0.8: about 7 effective
  members). A centre taken from the members themselves would read about
  ``1 − 1/ESS ≈ 0.86``; each half centred on the other half's mean reads
  1 within three standard errors."""
  n, d, rho = 800, 400, 0.8
  rng = np.random.default_rng(2)
  x = rng.normal(size=(n, d)).astype('float32')
  y = (x @ rng.normal(size=(d, 1)) * 0.05 + rng.normal(size=(n, 1))).astype(
      'float32')
  model = keras.Sequential([keras.Input((d,)),
                            keras.layers.Dense(1, use_bias=False)])
  model.compile(tfa.keras.optimizers.SGLD(1e-5, data_size=n), loss='mse')
  model.optimizer.build(model.trainable_variables)
  precision = 2. * x.T.astype(np.float64) @ x + (d / 100.) * np.eye(d)
  mean = np.linalg.solve(precision, 2. * x.T.astype(np.float64) @ y[:, 0])
  root = np.linalg.inv(np.linalg.cholesky(precision)).T  # root·rootᵀ = Σ.
  z = rng.normal(size=d)
  members = []
  for i in range(64):
    z = rho * z + np.sqrt(1. - rho ** 2) * rng.normal(size=d)
    w = mean + root @ z
    members.append(tfa.keras.ensemble.Member(
        i, 1e-5, [w[:, None].astype('float32')], None, chain=0))
  with warnings.catch_warnings(record=True):
    warnings.simplefilter('always')
    reading = tfa.keras.BayesianEnsemble(model, members).check_temperature(
        x, y, prediction_inputs=x[:4])['overall']
  assert abs(reading.temperature - 1.) < 3. * reading.standard_error, reading
  assert reading.standard_error < 0.04, reading


@pytest.mark.statistical
def test_the_live_reading_of_a_wider_model_reads_its_heat():
  """A Dense regression of 2,010 weights (200 inputs to 10 outputs,
  `benchmarks.thermometer.wide_regression` at a fifth of its size), SGLD
  on reshuffled batches of 50 at a step that heats it to about twice the
  posterior's spread: the live reading in `fit` reads the members'
  empirical temperature against the exact posterior within 10% (plus three
  combined standard errors) and warns. The every-step reading, less its
  reshuffling term, reads this run at 1.00 ± 0.003; each epoch's first
  step replaces it."""
  from benchmarks import panel  # pylint: disable=g-import-not-at-top
  from benchmarks import panel_fit  # pylint: disable=g-import-not-at-top
  from benchmarks import thermometer  # pylint: disable=g-import-not-at-top
  x, y, precision, mean = thermometer.wide_regression(4000, 200, 10)
  w, said, readings, _ = panel_fit.run_one(
      tfa.keras.optimizers.SGLD(3e-4, data_size=len(x), seed=0), 50,
      epochs=30, data=(x, y), steps=80)
  emp = thermometer.empirical(w, precision, mean)[0]
  live = readings['live']
  assert emp.temperature > 1.3, emp  # The heat is there to be read.
  assert panel.within_ten_percent(live, emp), (live, emp)
  assert [m for m in said['live'] if 'configurational temperature' in m
          and 'Lower `learning_rate`' in m], said


def test_the_members_steps_give_the_burnin_share():
  """The members' reading counts the burn-in before its first member (for the length a run that has not settled needs): the first member's step over the steps the members span; `None` where they do not say."""
  from tfp_adaptive.keras import ensemble_temperature  # pylint: disable=g-import-not-at-top
  from tfp_adaptive.keras.members import Member  # pylint: disable=g-import-not-at-top
  members = [Member(s, 1e-3, None, None) for s in range(100, 501, 25)]
  assert ensemble_temperature._burnin_share(members) == 0.25  # pylint: disable=protected-access
  for steps in ([100], [100, 100], [None, 200]):
    assert ensemble_temperature._burnin_share(  # pylint: disable=protected-access
        [Member(s, 1e-3, None, None) for s in steps]) is None
