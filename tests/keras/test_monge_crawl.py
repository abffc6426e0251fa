"""`fit` with `MongeSGRLD`: members that crawl towards their target are told to lower `alpha2`, as the kernels are.

A Bayesian linear regression as keras.io writes one (`Sequential`,
`Dense`, ``loss='mse'``, `tf.data`), its weights 4 (tens of posterior sds)
from the zeros they start at. The Keras metric averages the gradient of
the mean loss, ``‖∇MSE‖ ≈ 8·√D`` on the way; at ``α² = 1`` it divides a
step along it by ``1 + α²‖∇MSE‖²`` (about 300), so in the run's 2,000
steps the weights cover a fraction of the way and the members are drawn
on the slope. Lowered as told, the metric is close to ``I`` and the same
run arrives.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive.diagnostics import advice as advice_lib

N, D, WEIGHT, STEPS = 100, 5, 4., 2000


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(N, D)).astype('float32')
  y = (x @ np.full(D, WEIGHT) + rng.normal(size=N)).astype('float32')
  return x, y[:, None]


def _fit(alpha2):
  x, y = _data()
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((D,)),
                            keras.layers.Dense(1, use_bias=False)])
  model.compile(tfa.keras.optimizers.MongeSGRLD(
      1e-4, alpha2=alpha2, data_size=N, num_adaptation_steps=STEPS // 4),
      loss='mse')
  collector = tfa.keras.SampleCollector(burnin=STEPS // 4, monitor=False)
  dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(N).repeat()
  model.fit(dataset, epochs=STEPS // 250, steps_per_epoch=250, verbose=0,
            callbacks=[collector])
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    collector.ensemble.check_temperature(x, y)
  said = [w.message for w in caught if issubclass(w.category, UserWarning)]
  return model.get_weights()[0], said


def _crawl(said):
  return [m for m in said if 'pulled the same way' in str(m)]


@pytest.mark.slow
@pytest.mark.filterwarnings('ignore:.*default prior')
def test_members_that_crawl_are_told_alpha2_and_the_rerun_arrives():
  weights, said = _fit(1.)
  assert np.all(weights < WEIGHT / 2.)  # Not half way after 2,000 steps.
  assert _crawl(said), said
  (change,) = [c for c in advice_lib.merged(said) if c.parameter == 'alpha2']
  assert change.factor < 0.1
  weights, said = _fit(change.factor)
  assert not _crawl(said), said
  # The posterior sd of a weight is about 1/sqrt(2N) = 0.07.
  assert np.all(np.abs(weights - WEIGHT) < 0.5), weights
