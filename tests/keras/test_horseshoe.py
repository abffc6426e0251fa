"""The horseshoe prior on keras.io's convnet: no collapse, and a collapsing prior is named.

The textbook horseshoe with its per-tensor scale sampled jointly with an
18k-weight kernel collapses (the loss runs below 0 and every member
predicts a constant). `add_horseshoe_prior` integrates the scale out
(`tfp_adaptive.keras.priors`); here the convnet with it reaches the
accuracy of the same run with the Gaussian prior, within 2 points plus 3
standard errors of the difference of two accuracies on the test set.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_adaptive as tfa
from benchmarks import calibration


def _accuracy(prior, epochs):
  metrics, lr, _, _ = calibration.psgld('convnet', prior, epochs,
                                        calibration_epochs=3,
                                        jit_compile=False)
  assert lr > 0
  return metrics['accuracy']


@pytest.mark.statistical
def test_convnet_with_the_horseshoe_prior_does_not_collapse():
  epochs = 8
  _, _, _, yt = calibration.data()
  hs, gauss = _accuracy('horseshoe', epochs), _accuracy('gaussian', epochs)
  se = np.sqrt((hs * (1 - hs) + gauss * (1 - gauss)) / len(yt))
  assert hs > 0.5, hs  # A collapsed ensemble is at chance (0.1).
  assert hs > gauss - 0.02 - 3 * se, (hs, gauss, se)


class _PoleAtZero(keras.regularizers.Regularizer):
  """``2D·log‖w‖/N``: a density ``‖w‖^{-2D}``, as of a scale collapsing with its weights."""

  def __call__(self, w):
    size = float(np.prod(w.shape))
    return size * tf.math.log(tf.reduce_sum(w * w) + 1e-30) / 100.


@pytest.mark.slow
def test_a_prior_with_a_pole_is_named_when_the_loss_falls_without_bound():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(100, 20)).astype('float32')
  y = rng.integers(0, 10, size=100)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(
      10, kernel_regularizer=_PoleAtZero())])
  model.compile(tfa.keras.optimizers.SGLD(1e-3, data_size=100, seed=0),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model.fit(x, y, batch_size=10, epochs=30, verbose=0,
              callbacks=[tfa.keras.SampleCollector()])
  messages = [str(w.message) for w in caught if 'no upper bound' in
              str(w.message)]
  assert len(messages) == 1 and '_PoleAtZero' in messages[0], messages
