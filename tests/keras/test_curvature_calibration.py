"""`CurvatureCalibration` and `tfp_adaptive.diagnostics.curvature`: the step from the largest eigenvalue of curvature plus minibatch noise.

On a linear regression with the loss ``'mse'`` both are known in closed
form: the energy ``U = N·mean((y − Xw − b)²)`` has Hessian ``2 X₁ᵀX₁``
(``X₁`` the inputs with a column of ones) and the per-example gradients
``g_i = 2N r_i x₁ᵢ``, whose minibatch mean of size ``B`` drawn without
replacement has covariance ``(N − B)/(B(N − 1))`` times theirs. Full
batch, the callback must read the Hessian's top eigenvalue to the power
iteration's precision; with minibatches, the top eigenvalue of Hessian plus
noise within the sampling error of its noise covariance (``batches`` draws:
a relative sd of about ``sqrt(2/(batches − 1))``).
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf
import keras

import tfp_adaptive as tfa
from tfp_adaptive.diagnostics import curvature

N = 200


def _data(seed=0):
  rng = np.random.default_rng(seed)
  x = (rng.normal(size=(N, 3)) * [3., 1., 0.3]).astype('float32')
  y = (x @ [1., -2., 0.5] + 0.5 + rng.normal(size=N)).astype('float32')
  return x, y[:, None]


def _linear(x, y, batch_size, batches=16, epochs=1):
  keras.utils.set_random_seed(1)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  model.compile(tfa.keras.optimizers.SGLD(1e-6, data_size=N, prior='flat'),
                loss='mse')
  cal = tfa.keras.CurvatureCalibration((x, y), epochs=1, batches=batches,
                                       iterations=60)
  model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0,
            shuffle=False, callbacks=[cal])
  return model, cal


def test_top_eigenvalue_of_a_known_operator():
  scales = [tf.constant([1., 2., 5.]), tf.constant([[10., 3.], [0.5, 4.]])]
  start = [tf.ones_like(s) for s in scales]
  value, vector = curvature.top_eigenvalue(
      lambda v: [s * a for s, a in zip(scales, v)], start, iterations=60)
  assert abs(float(value) - 10.) < 1e-4
  assert abs(abs(float(vector[1][0, 0])) - 1.) < 1e-3


def test_noise_covariance_product_matches_numpy():
  rng = np.random.default_rng(0)
  draws = rng.normal(size=(9, 5))
  dev = draws - draws.mean(0)
  parts = [[tf.constant(d[:2]), tf.constant(d[2:])] for d in dev]
  v = rng.normal(size=5)
  out = curvature.noise_covariance_product(parts)([tf.constant(v[:2]),
                                                   tf.constant(v[2:])])
  np.testing.assert_allclose(np.concatenate([o.numpy() for o in out]),
                             np.cov(draws.T) @ v, rtol=1e-10)
  with pytest.raises(ValueError, match='at least 2'):
    curvature.noise_covariance_product(parts[:1])


def test_full_batch_reads_the_hessian_top_eigenvalue():
  x, y = _data()
  _, cal = _linear(x, y, batch_size=N)
  x1 = np.hstack([x, np.ones((N, 1))]).astype('float64')
  top = np.linalg.eigvalsh(2. * x1.T @ x1)[-1]
  for lr, value in cal.history:  # Full batch: no noise, every reading.
    assert abs(value / top - 1.) < 1e-3
    assert abs(lr * top / 0.4 - 1.) < 1e-3


def test_a_repeated_pipeline_reads_the_batch_size_of_its_dataset_or_the_one_given():
  """keras.io's `tf.data` pattern, ``.repeat()`` with `steps_per_epoch`, where an epoch is not one pass: full batch, the rule reads the Hessian's top eigenvalue as it does with arrays when it is given the batch size, or the dataset (before its ``.repeat()``) that holds it. From the steps it would take 10 steps of the full batch for batches of 20, and read far more noise. The repeated dataset itself is refused (it is read whole)."""
  x, y = _data()
  x1 = np.hstack([x, np.ones((N, 1))]).astype('float64')
  top = np.linalg.eigvalsh(2. * x1.T @ x1)[-1]
  batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(N)
  for training_data, batch_size, exact in (((x, y), N, True),
                                           (batches, None, True),
                                           ((x, y), None, False)):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(tfa.keras.optimizers.SGLD(1e-6, data_size=N, prior='flat'),
                  loss='mse')
    cal = tfa.keras.CurvatureCalibration(training_data, epochs=0,
                                         iterations=60, batch_size=batch_size)
    model.fit(batches.repeat(), steps_per_epoch=10, epochs=1, verbose=0,
              callbacks=[cal])
    value = cal.history[0][1]
    assert (abs(value / top - 1.) < 1e-3) == exact, (batch_size, value, top)
  with pytest.raises(ValueError, match='batch_size'):
    tfa.keras.CurvatureCalibration((x, y), batch_size=0)
  with pytest.raises(ValueError, match='training_data.*repeats forever'):
    tfa.keras.CurvatureCalibration(batches.repeat())
  with pytest.raises(ValueError, match='training_data.*repeats forever'):
    tfa.keras.SampleCollector(training_data=batches.repeat())


@pytest.mark.slow
def test_minibatch_noise_enters_the_eigenvalue():
  x, y = _data()
  batch, batches = 10, 400
  model, cal = _linear(x, y, batch_size=batch, batches=batches)
  w, b = [v.numpy().astype('float64') for v in model.weights]
  x1 = np.hstack([x, np.ones((N, 1))]).astype('float64')
  residual = (x @ w + b - y).astype('float64')
  grads = 2. * N * residual * x1  # Per example, of U = N·mean(r²).
  noise = (N - batch) / (batch * (N - 1.)) * np.cov(grads.T, bias=True)
  hessian = 2. * x1.T @ x1
  exact = np.linalg.eigvalsh(hessian + noise)[-1]
  assert exact > 3. * np.linalg.eigvalsh(hessian)[-1]  # Noise dominates.
  value = cal.history[-1][1]  # Read at the end of the epoch: these weights.
  se = np.sqrt(2. / (batches - 1))
  assert abs(value / exact - 1.) < 4. * se, (value, exact)


@pytest.mark.slow
def test_the_recipe_from_a_warm_start_in_the_style_of_keras_io():
  """A functional classifier with logits and a `tf.data` pipeline: Adam to a mode, then sampling at the calibrated step."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(600, 4)).astype('float32')
  y = (x[:, 0] + 0.5 * x[:, 1] ** 2 + 0.3 * rng.normal(size=600) > 0.5
       ).astype('int32')
  data = tf.data.Dataset.from_tensor_slices((x[:400], y[:400])).batch(40)
  keras.utils.set_random_seed(0)
  inputs = keras.Input((4,))
  logits = keras.layers.Dense(2)(keras.layers.Dense(16, 'relu')(inputs))
  model = keras.Model(inputs, logits)
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  model.compile(keras.optimizers.Adam(1e-2), loss=loss)
  model.fit(data, epochs=10, verbose=0)
  adam = model.evaluate(x[400:], y[400:], verbose=0)
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=400), loss=loss)
  cal = tfa.keras.CurvatureCalibration(data, epochs=1)
  collector = tfa.keras.SampleCollector(burnin=1, unit='epoch')
  model.fit(data, epochs=8, verbose=0, callbacks=[cal, collector])
  assert len(cal.history) == 2
  assert all(np.isfinite(lr) and lr > 0 for lr, _ in cal.history)
  assert float(model.optimizer.learning_rate) == pytest.approx(
      cal.history[-1][0])
  metrics = collector.ensemble.evaluate(x[400:], y[400:])
  # The ensemble keeps the mode's fit: no worse than Adam's one model by
  # more than the held-out noise of 200 points' mean log-likelihood.
  assert metrics['log_likelihood'] > -adam - 0.05, (metrics, adam)


def test_the_metric_fills_at_the_mode_before_the_first_reading():
  """PSGLD's noise-free burn-in only fills the metric: the weights stay where `fit` began until the rule is read, and a `fit` that ends first gets its rate back."""
  x, y = _data()
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  model.compile(tfa.keras.optimizers.PSGLD(1e-2, data_size=N, burnin=10,
                                           gamma='none'),
                loss='mse')
  start = [np.array(w) for w in model.get_weights()]
  seen = []

  class Watch(keras.callbacks.Callback):

    def on_train_batch_end(self, batch, logs=None):
      seen.append((int(self.model.optimizer.iterations),
                   [np.array(w) for w in self.model.get_weights()]))
  cal = tfa.keras.CurvatureCalibration((x, y), epochs=0)
  # 20 batches of 10: the first reading after step 10.
  model.fit(x, y, batch_size=10, epochs=1, verbose=0, shuffle=False,
            callbacks=[Watch(), cal])
  for step, weights in seen:
    held = all(np.array_equal(a, b) for a, b in zip(weights, start))
    assert held == (step <= 10), step
  assert len(cal.history) == 1
  assert float(model.optimizer.learning_rate) == pytest.approx(
      cal.history[0][0])
  # A `fit` of 5 steps ends before its reading: the compiled rate again.
  model.compile(tfa.keras.optimizers.PSGLD(1e-2, data_size=N, burnin=10,
                                           gamma='none'),
                loss='mse')
  cal = tfa.keras.CurvatureCalibration((x, y), epochs=0)
  model.fit(x[:50], y[:50], batch_size=10, epochs=1, verbose=0,
            callbacks=[cal])
  assert not cal.history
  assert float(model.optimizer.learning_rate) == pytest.approx(1e-2)


def test_no_sample_is_taken_while_the_rate_is_held_on_a_small_data_set():
  """200 rows in batches of 32: PSGLD's 25 noise-free steps hold the rate at 0 for four epochs, past the collector's burn-in; those epochs give no member and no warning that the weights did not move."""
  x, y = _data()
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  model.compile(keras.optimizers.Adam(1e-1), loss='mse')
  model.fit(x, y, epochs=30, verbose=0)
  start = [np.array(w) for w in model.get_weights()]
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=N), loss='mse')
  cal = tfa.keras.CurvatureCalibration((x, y), epochs=1)
  collector = tfa.keras.SampleCollector(burnin=1, unit='epoch')
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model.fit(x, y, epochs=7, verbose=0, callbacks=[cal, collector])
  said = [str(w.message) for w in caught]
  assert not [s for s in said if 'not taken' in s], said
  assert collector.num_skipped == 0
  # The first reading ends step 25: epochs 2-3 are held, epoch 4 moves
  # in its last three steps, and every epoch after it.
  assert [m.step for m in collector.members] == [28, 35, 42, 49]
  for member in collector.members:
    assert not all(np.array_equal(a, b)
                   for a, b in zip(member.weights, start))


@pytest.mark.slow
@pytest.mark.parametrize('seed', [1, 2])
def test_a_mode_that_fits_exactly_is_not_left_at_its_first_readings_step(
    seed, caplog):
  """Digits 0-4 fitted exactly by Adam: the first reading, at a saturated softmax, sets a step the chain cannot keep once it moves; the next reading rewinds it.

  Without the rewind the chain is kicked out of the mode within an epoch
  (training loss from 0.001 to 0.1-2 on both seeds). With
  it, every epoch after the rewind keeps the mode's fit: the members
  classify the training digits as the mode does.
  """
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  digits = load_digits()
  keep = digits.target < 5
  x = (digits.data[keep] / 16.).astype('float32')[:650]
  y = digits.target[keep][:650]
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((64,)),
                            keras.layers.Dense(100, activation='relu'),
                            keras.layers.Dense(5)])
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  model.compile(keras.optimizers.Adam(3e-3), loss=loss)
  model.fit(x, y, epochs=40, verbose=0)
  mode_loss = model.evaluate(x, y, verbose=0)
  assert mode_loss < 0.01  # Saturated: the case this test is about.
  mode_correct = np.mean(np.argmax(model.predict(x, verbose=0), -1) == y)
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x)),
                loss=loss)
  cal = tfa.keras.CurvatureCalibration((x, y), epochs=2)
  collector = tfa.keras.SampleCollector(burnin=2, unit='epoch')
  with caplog.at_level('WARNING', logger='tfp_adaptive'):
    history = model.fit(x, y, epochs=6, verbose=0,
                        callbacks=[cal, collector])
  assert cal.rewinds >= 1
  assert any('set back' in r.getMessage() for r in caplog.records)
  # The rates: each reading after the first at most the one before.
  rates = [lr for lr, _ in cal.history]
  assert all(b <= a for a, b in zip(rates, rates[1:]))
  # After the rewind (at the end of epoch 1 or 2) the loss stays near the
  # mode's, far below the 0.1-2 of a chain kicked out of it.
  assert max(history.history['loss'][2:]) < 0.05, history.history['loss']
  probs = collector.ensemble.predict(x)
  assert np.mean(np.argmax(probs, -1) == y) >= mode_correct - 0.005


@pytest.mark.parametrize('make, error, text', [
    (lambda: tfa.keras.optimizers.SGHMC(1e-4, data_size=10), ValueError,
     'momentum'),
    (lambda: tfa.keras.optimizers.PSGLD(1e-4, data_size=10, friction=0.1),
     ValueError, 'momentum'),
    (lambda: tfa.keras.optimizers.SGLD(
        tfa.keras.schedules.PolynomialDecay(1e-4, 1., 0.55), data_size=10),
     TypeError, 'schedule'),
    (lambda: keras.optimizers.Adam(), TypeError, 'Adam')])
def test_refuses_what_the_rule_does_not_cover(make, error, text):
  x, y = _data()
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  model.compile(make(), loss='mse')
  with pytest.raises(error, match=text):
    model.fit(x[:10], y[:10], epochs=1, verbose=0,
              callbacks=[tfa.keras.CurvatureCalibration((x[:10], y[:10]))])
