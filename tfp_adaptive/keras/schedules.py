"""Step-size schedules (Keras `LearningRateSchedule` objects) and a temperature ramp.

* `PolynomialDecay`: ``a (b + t)^(-γ)`` (Welling & Teh 2011; Rensmeyer App. B).
* `Cyclical`: cSG-MCMC's cosine cycles (Zhang et al. 2020, eq. 1),
  ``h_t = h_0/2 (cos(π mod(t, K)/K) + 1)`` with ``K = cycle_length``, and
  an exploration stage without noise (`tfp_adaptive.schedules.Cyclical`).
* `TemperatureRamp`: a callback raising the optimizer's temperature linearly
  from ``start`` to ``end`` over the first ``steps`` steps (cold start).
"""

import tensorflow as tf
import keras

from tfp_adaptive import schedules as core_schedules
from tfp_adaptive import validation

__all__ = ['Cyclical', 'PolynomialDecay', 'TemperatureRamp']

_register = keras.saving.register_keras_serializable(package='tfp_adaptive')


@_register
class PolynomialDecay(core_schedules.PolynomialDecay,
                      keras.optimizers.schedules.LearningRateSchedule):
  """`tfp_adaptive.schedules.PolynomialDecay` as a Keras schedule (float32).

  ``h_t = scale (offset + t)^(-power)``; e.g. ``PolynomialDecay(0.1, 1, 0.55)``.
  """

  def __call__(self, step):
    return tf.cast(super().__call__(step), tf.float32)


@_register
class Cyclical(core_schedules.Cyclical,
               keras.optimizers.schedules.LearningRateSchedule):
  """`tfp_adaptive.schedules.Cyclical` as a Keras schedule (float32).

  The samplers of `tfp_adaptive.keras.optimizers` inject no noise in each
  cycle's first `exploration` share of steps, and `SampleCollector` keeps
  members from the sampling stages only, each tagged with its cycle
  (`Member.cycle`).

  Args:
    initial_learning_rate: the learning rate at the start of each cycle.
    cycle_length: steps per cycle.
    exploration: share in [0, 1) of each cycle without noise.
  """

  def __init__(self, initial_learning_rate, cycle_length, exploration=0.):
    validation.check_number('initial_learning_rate', initial_learning_rate,
                            low=0., low_open=True)
    super().__init__(initial_learning_rate, cycle_length, exploration)

  @property
  def initial_learning_rate(self):
    return self.initial_step_size

  def __call__(self, step):
    return tf.cast(super().__call__(step), tf.float32)

  def get_config(self):
    return {'initial_learning_rate': self.initial_step_size,
            'cycle_length': self.cycle_length,
            'exploration': self.exploration}


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
