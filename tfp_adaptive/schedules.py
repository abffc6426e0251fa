"""Step-size schedules h(t) for the kernels: constant, polynomial decay, any callable."""

import tensorflow as tf

from tfp_adaptive import validation

__all__ = ['PolynomialDecay', 'as_schedule', 'evaluate']


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


def as_schedule(step_size, name='step_size'):
  """Validates a constant step size (> 0: a zero step freezes the chain) or passes a callable through."""
  if callable(step_size):
    return step_size
  validation.check_number(name, step_size, low=0., low_open=True)
  return step_size


def evaluate(step_size, step):
  """The step size at `step` (a constant, or a callable of the step)."""
  return step_size(step) if callable(step_size) else step_size
