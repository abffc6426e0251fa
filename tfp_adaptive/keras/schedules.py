"""Step-size schedules as `keras.optimizers.schedules.LearningRateSchedule`s, and a temperature ramp.

* `PolynomialDecay`: ``a (b + t)^(-γ)`` (Welling & Teh 2011; Rensmeyer App. B).
* `Cyclical`: cSG-MCMC's cosine cycles (Zhang et al. 2020, eq. 1),
  ``h_t = h_0/2 (cos(π mod(t, K)/K) + 1)`` with ``K = cycle_length``.
* `TemperatureRamp`: a callback raising the optimizer's temperature linearly
  from ``start`` to ``end`` over the first ``steps`` steps (cold start).
"""

import math

import tensorflow as tf
import keras

from tfp_adaptive import validation

__all__ = ['Cyclical', 'PolynomialDecay', 'TemperatureRamp']

_register = keras.saving.register_keras_serializable(package='tfp_adaptive')


@_register
class PolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
  """``h_t = scale (offset + t)^(-power)``; e.g. ``PolynomialDecay(0.1, 1, 0.55)``."""

  def __init__(self, scale, offset=1., power=0.55):
    self.scale = validation.check_number('scale', scale, low=0., low_open=True)
    self.offset = validation.check_number('offset', offset, low=0.)
    self.power = validation.check_number('power', power, low=0., high=1.)

  def __call__(self, step):
    t = tf.cast(step, tf.float32)
    return self.scale * (self.offset + t) ** (-self.power)

  def get_config(self):
    return {'scale': self.scale, 'offset': self.offset, 'power': self.power}


@_register
class Cyclical(keras.optimizers.schedules.LearningRateSchedule):
  """Cyclical cosine step size of cSG-MCMC (Zhang et al. 2020, eq. 1)."""

  def __init__(self, initial_learning_rate, cycle_length):
    self.initial_learning_rate = validation.check_number(
        'initial_learning_rate', initial_learning_rate, low=0., low_open=True)
    self.cycle_length = validation.check_int('cycle_length', cycle_length)

  def __call__(self, step):
    k = float(self.cycle_length)
    r = tf.math.floormod(tf.cast(step, tf.float32), k) / k
    return 0.5 * self.initial_learning_rate * (tf.cos(math.pi * r) + 1.)

  def get_config(self):
    return {'initial_learning_rate': self.initial_learning_rate,
            'cycle_length': self.cycle_length}


class TemperatureRamp(keras.callbacks.Callback):
  """Ramps ``τ`` linearly from `start` to `end` over the first `steps` steps.

  Assigns the optimizer's `temperature_variable` before every batch (no
  retracing).
  """

  def __init__(self, start, end=1., steps=1000):
    super().__init__()
    self.start = validation.check_number('start', start, low=0., low_open=True)
    self.end = validation.check_number('end', end, low=0., low_open=True)
    self.steps = validation.check_int('steps', steps)

  def on_train_batch_begin(self, batch, logs=None):
    opt = self.model.optimizer
    if not opt.built:
      opt.build(self.model.trainable_variables)
    t = min(float(opt.iterations.numpy()) / self.steps, 1.)
    opt.temperature_variable.assign(self.start + t * (self.end - self.start))
