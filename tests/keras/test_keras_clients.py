"""Client code as keras.io and the TF guides write it, with our optimizer and `SampleCollector()` as the only changes.

Each test is a published example's shape at small size on scikit-learn's
8×8 digits (offline): the simple convnet, a functional model with
BatchNormalization and Dropout, one-hot labels, regression with ``'mse'``,
a subclassed model, `tf.data` input, class and sample weights, other
callbacks, saving, mixed precision, and a custom training loop.
"""


import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
import keras
from sklearn import datasets

import tfp_adaptive as tfa

OPT = tfa.keras.optimizers


@pytest.fixture(scope='module')
def digits():
  d = datasets.load_digits()
  x = (d.images / 16.).astype('float32')[..., None]
  y = d.target.astype('int64')
  return (x[:1400], y[:1400]), (x[1400:], y[1400:])


def _psgld(n, lr=1e-4, **kwargs):
  kwargs.setdefault('diagonal_bias', 1e-3)
  return OPT.PSGLD(lr, data_size=n, burnin=0, seed=3, **kwargs)


def _check_probabilities(probs, n, k=10):
  assert probs.shape == (n, k)
  np.testing.assert_allclose(probs.sum(-1), 1., atol=1e-6)
  assert np.all(probs >= 0)


@pytest.mark.slow
def test_keras_io_simple_convnet(digits):
  """keras.io/examples/vision/mnist_convnet: one-hot labels, softmax, categorical CE."""
  (x, y), (xt, yt) = digits
  y, yt = keras.utils.to_categorical(y, 10), keras.utils.to_categorical(yt, 10)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([
      keras.Input(shape=(8, 8, 1)),
      keras.layers.Conv2D(8, kernel_size=(3, 3), activation='relu'),
      keras.layers.MaxPooling2D(pool_size=(2, 2)),
      keras.layers.Flatten(),
      keras.layers.Dropout(0.5),
      keras.layers.Dense(10, activation='softmax'),
  ])
  model.compile(loss='categorical_crossentropy', optimizer=_psgld(len(x)),
                metrics=['accuracy'])
  collector = tfa.keras.SampleCollector(burnin=100, thinning=20)
  # 10 epochs: the default Γ mode steps with half of each minibatch, which
  # from fresh weights trains as half the batch size does (Keras guide,
  # "Γ"); measured over seeds 0-2: accuracy 0.84-0.87 (0.67-0.78 in 6).
  model.fit(x, y, batch_size=64, epochs=10, validation_split=0.1, verbose=0,
            callbacks=[collector])
  ens = collector.ensemble
  assert ens.likelihood == tfa.keras.likelihoods.Categorical(from_logits=False)
  _check_probabilities(ens.predict(xt), len(xt))
  out = ens.evaluate(xt, yt)  # One-hot labels, as keras.io writes them.
  assert out['accuracy'] > 0.8, out
  assert out['log_likelihood'] > np.log(0.5), out


def _functional(seed=0, bn=True):
  keras.utils.set_random_seed(seed)
  inputs = keras.Input(shape=(8, 8, 1))
  h = keras.layers.Flatten()(inputs)
  h = keras.layers.Dense(32)(h)
  if bn:
    h = keras.layers.BatchNormalization()(h)
  h = keras.layers.Activation('relu')(h)
  h = keras.layers.Dropout(0.2)(h)
  outputs = keras.layers.Dense(10)(h)  # Logits: no softmax (keras.io default).
  return keras.Model(inputs, outputs)


@pytest.mark.slow
@pytest.mark.parametrize('one_hot', [False, True])
def test_functional_from_logits(digits, one_hot):
  """Logits are turned into probabilities per member, then averaged."""
  (x, y), (xt, yt) = digits
  if one_hot:
    y, yt = keras.utils.to_categorical(y, 10), keras.utils.to_categorical(yt, 10)
    loss = keras.losses.CategoricalCrossentropy(from_logits=True)
  else:
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  model = _functional()
  model.compile(optimizer=_psgld(len(x)), loss=loss, metrics=['accuracy'])
  collector = tfa.keras.SampleCollector(burnin=100, thinning=20)
  model.fit(x, y, batch_size=64, epochs=10, verbose=0, callbacks=[collector])
  ens = collector.ensemble
  assert ens.likelihood.from_logits
  probs = ens.predict(xt)
  _check_probabilities(probs, len(xt))
  by_hand = np.mean([tf.nn.softmax(m.predict(xt, verbose=0)).numpy()
                     for m in ens.iterate_members()], 0)
  np.testing.assert_allclose(probs, by_hand, rtol=1e-5, atol=1e-7)
  out = ens.evaluate(xt, yt)
  labels = np.argmax(yt, -1) if one_hot else yt
  np.testing.assert_allclose(
      out['log_likelihood'],
      np.mean(np.log(by_hand[np.arange(len(labels)), labels])), rtol=1e-5)
  assert out['accuracy'] > 0.8 and out['brier'] < 0.4, out


@pytest.mark.slow
def test_regression_mse_without_arguments():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(400, 3)).astype('float32')
  y = (x @ np.array([1., -2., 0.5]) + 0.3 * rng.normal(size=400)).astype(
      'float32')
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(16, 'tanh'),
                            keras.layers.Dense(1)])
  model.compile(optimizer=OPT.SGLD(1e-4, data_size=400, seed=0), loss='mse')
  collector = tfa.keras.SampleCollector(burnin=200, thinning=10)
  model.fit(x, y, batch_size=40, epochs=40, verbose=0, callbacks=[collector])
  ens = collector.ensemble
  lik = ens.likelihood
  assert isinstance(lik, tfa.keras.likelihoods.Gaussian)
  assert lik.noise_variance_source == 'implied by the loss'
  mean, var = ens.predict(x)
  members = ens.predict_members(x)
  np.testing.assert_allclose(mean, members.mean(0), rtol=1e-6)
  np.testing.assert_allclose(var, members.var(0) + 0.5, rtol=1e-6)
  out = ens.evaluate(x, y)
  assert set(out) == {'log_likelihood', 'rmse', 'coverage_50', 'coverage_90'}
  assert out['rmse'] < 0.6, out
  stated = tfa.keras.BayesianEnsemble(model, ens.members, noise_variance=0.09)
  assert stated.likelihood.noise_variance_source == 'stated'
  # Float targets are never cast to class labels.
  wrong = tfa.keras.BayesianEnsemble(model, ens.members,
                                     likelihood='categorical')
  with pytest.raises(ValueError, match='probabilities'):
    wrong.evaluate(x, y)


class Net(keras.Model):
  """A subclassed model, as in the Keras guide 'Making new layers and models'."""

  def __init__(self):
    super().__init__()
    self.flatten = keras.layers.Flatten()
    self.hidden = keras.layers.Dense(32, activation='relu')
    self.out = keras.layers.Dense(10)

  def call(self, x, training=False):
    return self.out(self.hidden(self.flatten(x)))


@pytest.mark.slow
def test_subclassed_model_saved_and_loaded_into_an_unbuilt_model(
    digits, tmp_path):
  (x, y), (xt, yt) = digits
  keras.utils.set_random_seed(0)
  model = Net()
  model.compile(optimizer=_psgld(len(x)), loss=keras.losses.SparseCategoricalCrossentropy(
      from_logits=True))
  collector = tfa.keras.SampleCollector(burnin=40, thinning=20)
  history = model.fit(x, y, batch_size=64, epochs=3, verbose=0,
                      callbacks=[collector])
  # The collector's thermometer starts after the step that built the model.
  assert len(history.history['temperature']) == 2, history.history
  ens = collector.ensemble
  expected = ens.evaluate(xt, yt)
  ens.save(str(tmp_path / 'ens'))
  _functional(seed=5)  # Another model first: Keras' automatic names drift.
  fresh = Net()
  assert not fresh.weights
  loaded = tfa.keras.BayesianEnsemble.load(str(tmp_path / 'ens'), model=fresh)
  assert loaded.evaluate(xt, yt) == expected
  other = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),
                            keras.layers.Dense(16), keras.layers.Dense(10)])
  with pytest.raises(ValueError, match=r'\(64, 16\).*\(64, 32\)'):
    tfa.keras.BayesianEnsemble.load(str(tmp_path / 'ens'), model=other)


@pytest.mark.slow
def test_tf_data_input_and_validation(digits):
  (x, y), (xt, yt) = digits
  train = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
      1000, seed=1).batch(64)
  val = tf.data.Dataset.from_tensor_slices((xt, yt)).shuffle(500, seed=2).batch(
      100)
  model = _functional(bn=False)
  model.compile(optimizer=_psgld(len(x)),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  collector = tfa.keras.SampleCollector(burnin=20, thinning=20,
                                        validation_data=val)
  history = model.fit(train, epochs=4, validation_data=val, verbose=0,
                      callbacks=[collector])
  assert len(history.history['val_ensemble_log_likelihood']) >= 2
  ens = collector.ensemble
  from_dataset = ens.evaluate(val)  # Shuffled: read once, in one order.
  from_arrays = ens.evaluate(xt, yt)
  for k in from_arrays:
    np.testing.assert_allclose(from_dataset[k], from_arrays[k], rtol=1e-6)
  np.testing.assert_allclose(
      history.history['val_ensemble_log_likelihood'][-1],
      from_arrays['log_likelihood'], rtol=1e-5)
  _check_probabilities(ens.predict(val), len(xt))


def _weighted_fit(x, y, gamma='corrected', **fit_kwargs):
  model = _functional(bn=False)
  model.compile(optimizer=_psgld(len(x), gamma=gamma),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  model.fit(x, y, batch_size=50, epochs=1, shuffle=False, verbose=0,
            callbacks=[tfa.keras.SampleCollector()], **fit_kwargs)
  return model.get_weights()


@pytest.mark.slow
def test_class_weight_and_sample_weight_reach_gamma(digits):
  (x, y), _ = digits
  x, y = x[:200], y[:200]
  class_weight = {k: 1. + k for k in range(10)}
  a = _weighted_fit(x, y, class_weight=class_weight)
  b = _weighted_fit(x, y, sample_weight=1. + y.astype('float32'))
  c = _weighted_fit(x, y)
  for u, v in zip(a, b):
    np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-6)
  assert not all(np.allclose(u, v) for u, v in zip(a, c))
  # Γ itself sees the weights: a custom loop with the weighted loss takes
  # the weighted fit's steps (the published form, whose Γ and drift share
  # the minibatch, so that the loop's rows are fit's).
  b = _weighted_fit(x, y, gamma='corrected_published',
                    sample_weight=1. + y.astype('float32'))
  model = _functional(bn=False)
  model.compile(optimizer=_psgld(len(x), gamma='corrected_published'),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  opt = model.optimizer
  for i in range(4):
    xb, yb = x[50 * i:50 * (i + 1)], y[50 * i:50 * (i + 1)]
    wb = 1. + yb.astype('float32')
    _, grads, gamma = tfa.keras.gradients_and_gamma(
        opt, lambda: loss(yb, model(xb, training=True), sample_weight=wb),
        model.trainable_variables)
    opt.apply(grads, model.trainable_variables, gamma=gamma)
  for u, v in zip(model.get_weights(), b):
    np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_other_callbacks_and_saving(digits, tmp_path):
  (x, y), (xt, yt) = digits
  model = _functional(bn=False)
  model.compile(optimizer=_psgld(len(x)),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  path = str(tmp_path / 'model.keras')
  collector = tfa.keras.SampleCollector(burnin=20, thinning=10)
  model.fit(x, y, batch_size=64, epochs=4, validation_data=(xt, yt), verbose=0,
            callbacks=[keras.callbacks.EarlyStopping(patience=1),
                       keras.callbacks.ModelCheckpoint(path),
                       collector])
  assert len(collector.members) >= 3
  assert collector.ensemble.evaluate(xt, yt)['accuracy'] > 0.7
  model.save(path)
  loaded = keras.models.load_model(path)
  assert isinstance(loaded.optimizer, OPT.PSGLD)
  assert loaded.optimizer.gamma == 'corrected'
  for u, v in zip(loaded.optimizer.variables, model.optimizer.variables):
    np.testing.assert_array_equal(np.asarray(u), np.asarray(v))
  again = tfa.keras.SampleCollector()
  loaded.fit(x, y, batch_size=64, epochs=1, verbose=0, callbacks=[again])
  assert tfa.keras.gamma_train_step.gamma_enabled(loaded)
  assert len(again.members) == 22


def test_mixed_precision_is_refused_naming_the_policy(digits):
  (x, y), _ = digits
  keras.config.set_dtype_policy('mixed_float16')
  try:
    model = _functional(bn=False)
    model.compile(optimizer=_psgld(len(x)),
                  loss=keras.losses.SparseCategoricalCrossentropy(
                      from_logits=True))
    with pytest.raises(ValueError, match='mixed_float16'):
      model.fit(x[:100], y[:100], epochs=1, verbose=0,
                callbacks=[tfa.keras.SampleCollector()])
  finally:
    keras.config.set_dtype_policy('float32')


def test_gamma_with_a_foreign_optimizer_is_a_clear_error(digits):
  model = _functional(bn=False)
  model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')
  with pytest.raises(TypeError, match='Adam'):
    tfa.keras.enable_gamma(model)


def test_unreadable_loss_asks_for_the_likelihood(digits):
  (x, y), _ = digits
  model = _functional(bn=False)
  model.compile(optimizer=_psgld(len(x)),
                loss=lambda yt, yp: tf.reduce_mean(yp ** 2))
  with pytest.raises(ValueError, match='likelihood='):
    model.fit(x[:64], y[:64], verbose=0,
              callbacks=[tfa.keras.SampleCollector()])


@pytest.mark.slow
def test_logits_claimed_as_probabilities_raise(digits):
  (x, y), (xt, yt) = digits
  model = _functional(bn=False)
  model.compile(optimizer=_psgld(len(x)),
                loss='sparse_categorical_crossentropy')  # Forgot from_logits.
  collector = tfa.keras.SampleCollector(thinning=5)
  model.fit(x[:320], y[:320], batch_size=64, verbose=0, callbacks=[collector])
  with pytest.raises(ValueError, match='from_logits=True'):
    collector.ensemble.predict(xt)


@pytest.mark.slow
@pytest.mark.parametrize('mode', ['eager', 'function', 'xla'])
def test_custom_loop_over_tf_and_tfp_variables(mode):
  """The TF guide's custom loop: plain `tf.Variable`s and a `TransformedVariable`."""
  loc = tf.Variable(tf.zeros([2]))
  scale = tfp.util.TransformedVariable(1., tfp.bijectors.Softplus())
  variables = [loc] + list(scale.trainable_variables)
  rng = np.random.default_rng(0)
  data = (rng.normal(size=(500, 2)) * 2. + 1.).astype('float32')
  sgld = OPT.SGLD(2e-4, data_size=500, seed=0)
  psgld = OPT.PSGLD(2e-4, data_size=500, seed=0, gamma='none')

  def loss():
    return -tf.reduce_mean(tfp.distributions.Normal(loc, scale).log_prob(data))

  def step():
    with tf.GradientTape() as tape:
      value = loss()
    grads = tape.gradient(value, variables)
    sgld.apply_gradients(zip(grads, variables))
    with tf.GradientTape() as tape:
      value = loss()
    psgld.apply(tape.gradient(value, variables), variables)

  if mode != 'eager':
    step = tf.function(step, jit_compile=mode == 'xla')
  for _ in range(300):
    step()
  np.testing.assert_allclose(loc.numpy(), [1., 1.], atol=0.5)
  np.testing.assert_allclose(scale.numpy(), 2., atol=0.5)
  assert int(sgld.iterations) == int(psgld.iterations) == 300
