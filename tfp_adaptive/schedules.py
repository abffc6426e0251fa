"""Step-size schedules h(t) for the kernels: constant, polynomial decay, cyclical, any callable."""

import math

import tensorflow as tf

from tfp_adaptive import validation

__all__ = ['Cyclical', 'PolynomialDecay', 'as_schedule', 'evaluate',
           'noise_scale']


class PolynomialDecay(object):
  """``h_t = a (b + t)^(-γ)`` (Welling & Teh 2011; Rensmeyer App. B: 0.1/n^0.55).

  Args:
    scale: ``a > 0``.
    offset: ``b >= 0``; with ``offset=1`` the first step (t = 0) is ``a``.
    power: ``γ`` in [0, 1]; Robbins–Monro conditions need ``γ ∈ (0.5, 1]``.

  Example:
    >>> schedule = PolynomialDecay(0.1, 1., 0.55)   # 0.1 / n^0.55, n = t + 1
  """

  def __init__(self, scale, offset=1., power=0.55):
    self.scale = validation.check_number('scale', scale, low=0., low_open=True)
    self.offset = validation.check_number('offset', offset, low=0.)
    self.power = validation.check_number('power', power, low=0., high=1.)

  def __call__(self, step):
    t = tf.cast(step, tf.float64)
    return self.scale * (self.offset + t) ** (-self.power)

  def get_config(self):
    return {'scale': self.scale, 'offset': self.offset, 'power': self.power}


class Cyclical(object):
  """Cosine cycles with an exploration stage, as cyclical SG-MCMC (Zhang et al. 2020, eq. 1 and Sec. 3).

  ``h_t = h_0/2 (cos(π r_t) + 1)``, ``r_t = mod(t, K)/K``, ``K = cycle_length``.
  Steps with ``r_t < exploration`` explore: the samplers inject no noise
  there (an optimizer's descent into a mode, at the cycle's large steps);
  the rest of the cycle samples at the shrinking steps. Samples should be
  kept from the sampling stages only (`SampleCollector` does so); each
  cycle restarts from where the last one ended, with a large step that can
  leave its mode, so the cycles visit several modes.

  Args:
    initial_step_size: ``h_0 > 0``, the step at the start of each cycle.
    cycle_length: ``K``, steps per cycle (int >= 1).
    exploration: share in [0, 1) of each cycle without noise (0: every
      step samples). Zhang et al. use 0.8 to 0.94 on networks.
  """

  def __init__(self, initial_step_size, cycle_length, exploration=0.):
    self.initial_step_size = validation.check_number(
        'initial_step_size', initial_step_size, low=0., low_open=True)
    self.cycle_length = validation.check_int('cycle_length', cycle_length)
    self.exploration = validation.check_number(
        'exploration', exploration, low=0., high=1., high_open=True)

  def _position(self, step):
    k = float(self.cycle_length)
    return tf.math.floormod(tf.cast(step, tf.float64), k) / k

  def __call__(self, step):
    r = self._position(step)
    return 0.5 * self.initial_step_size * (tf.cos(math.pi * r) + 1.)

  def sampling(self, step):
    """Whether the step numbered `step` (0 first) injects noise (bool `Tensor`)."""
    return self._position(step) >= self.exploration

  def cycle(self, step):
    """The cycle (0 first) of the step numbered `step` (int `Tensor`)."""
    return tf.math.floordiv(tf.cast(step, tf.int64), self.cycle_length)

  def get_config(self):
    return {'initial_step_size': self.initial_step_size,
            'cycle_length': self.cycle_length,
            'exploration': self.exploration}


def as_schedule(step_size, name='step_size'):
  """Validates a constant step size (> 0: a zero step freezes the chain) or passes a callable through."""
  if callable(step_size):
    return step_size
  validation.check_number(name, step_size, low=0., low_open=True)
  return step_size


def evaluate(step_size, step):
  """The step size at `step` (a constant, or a callable of the step)."""
  return step_size(step) if callable(step_size) else step_size


def noise_scale(step_size, step):
  """1 or 0 for a schedule with an exploration stage (`Cyclical.sampling`) at `step`, else `None`."""
  sampling = getattr(step_size, 'sampling', None)
  return None if sampling is None else tf.cast(sampling(step), tf.float32)
