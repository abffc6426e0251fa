"""`tfa.keras.check_loop`: a custom training loop, written as keras.io writes one, is read from its snapshots and warned on as `fit` is.

The target is the exact Bayesian linear regression of
`tests/diagnostics/test_ensemble_temperature.py`: SGLD with the whole
data as its batch has the stationary variance ``1/(λ(1 − hλ/4))`` per
eigendirection, so the Laplacian form of the temperature is known
exactly at every step size.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_adaptive as tfa
from tests.diagnostics.test_ensemble_temperature import N, D, _data, _predicted


def _loop(h, steps, stiff, every=10):
  """keras.io's loop from scratch: GradientTape, apply_gradients, a snapshot every few steps after burn-in."""
  x, y = _data(stiff)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((D,)),
                            keras.layers.Dense(1, use_bias=False)])
  optimizer = tfa.keras.optimizers.SGLD(h, data_size=N)
  loss_fn = keras.losses.MeanSquaredError()

  @tf.function
  def train_step(xb, yb):
    with tf.GradientTape() as tape:
      loss = loss_fn(yb, model(xb, training=True))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights))

  snapshots = []
  xt, yt = tf.constant(x), tf.constant(y)
  for step in range(steps):
    train_step(xt, yt)
    if step >= steps // 4 and step % every == 0:
      snapshots.append(model.get_weights())
  return model, snapshots, x, y, loss_fn, optimizer


@pytest.mark.slow
@pytest.mark.filterwarnings('ignore:.*default prior')
@pytest.mark.parametrize('hot', [True, False])
def test_a_custom_loop_is_read_from_its_snapshots(hot):
  """A step that doubles the stiff direction's variance is told, with the learning rate to lower; a short step is silent."""
  stiff = 10. if hot else 1.
  h = 2. / (2. * 100. * N + 0.1) if hot else 0.04 / (2. * N)
  model, snapshots, x, y, loss_fn, opt = _loop(h, 5000, stiff)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    ensemble = tfa.keras.check_loop(model, snapshots, x, y, loss=loss_fn,
                                    optimizer=opt, max_members=512)
  r = ensemble.readings['laplacian']
  assert abs(r.temperature - _predicted(h, stiff)[1]) < 3. * r.standard_error
  told = [str(w.message) for w in caught if 'temperature' in str(w.message)]
  if hot:
    assert len(told) == 1 and 'Lower `learning_rate`' in told[0], told
  else:
    assert not told, told
  assert len(ensemble) == len(snapshots)
  mean, sd = ensemble.predict(x[:5])  # Gaussian: mean and sd.
  assert np.shape(mean) == np.shape(sd) == (5, 1)


def test_bad_input_is_refused_naming_the_parameter():
  x, y = _data()
  model = keras.Sequential([keras.Input((D,)), keras.layers.Dense(1)])
  opt = tfa.keras.optimizers.SGLD(1e-5, data_size=N)
  snaps = [model.get_weights()] * 4
  with pytest.raises(ValueError, match='loss='):
    tfa.keras.check_loop(model, snaps, x, y, optimizer=opt)
  with pytest.raises(ValueError, match='at least 4'):
    tfa.keras.check_loop(model, snaps[:3], x, y, loss='mse', optimizer=opt)
  with pytest.raises(TypeError, match='optimizer'):
    tfa.keras.check_loop(model, snaps, x, y, loss='mse',
                         optimizer=keras.optimizers.Adam())
  with pytest.raises(ValueError, match='snapshot 0'):
    tfa.keras.check_loop(model, [snaps[0][:1]] * 4, x, y, loss='mse',
                         optimizer=opt)
