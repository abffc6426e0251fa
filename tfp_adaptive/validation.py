"""Early, named checks of hyperparameters (errors say the argument and its range)."""

import numbers

import numpy as np
import tensorflow as tf

__all__ = ['check_choice', 'check_int', 'check_number', 'static_value']


def static_value(x):
  """A Python/NumPy value of `x` if it is known without running a graph."""
  if callable(x):
    return None
  if isinstance(x, (numbers.Number, np.ndarray, np.generic)):
    return np.asarray(x)
  if tf.is_tensor(x):
    v = tf.get_static_value(x)
    return None if v is None else np.asarray(v)
  return None


def check_number(name, value, low=None, high=None, low_open=False,
                 high_open=False):
  """Raises `ValueError` unless `value` (if static) lies in the given range."""
  if value is None:
    raise TypeError('`%s` must be a number. Received: None' % name)
  v = static_value(value)
  if v is None:
    return value
  if not np.issubdtype(v.dtype, np.number):
    raise TypeError('`%s` must be a number. Received: %r' % (name, value))
  bad = ~np.isfinite(v)
  if low is not None:
    bad |= (v <= low) if low_open else (v < low)
  if high is not None:
    bad |= (v >= high) if high_open else (v > high)
  if np.any(bad):
    lo = '(' if low_open else '['
    hi = ')' if high_open else ']'
    rng = '%s%s, %s%s' % (lo, '-inf' if low is None else low,
                          'inf' if high is None else high, hi)
    raise ValueError('`%s` must lie in %s. Received: %s=%r'
                     % (name, rng, name, value))
  return value


def check_int(name, value, low=1):
  """Raises unless `value` is a Python int >= `low`."""
  if isinstance(value, bool) or not isinstance(value, (numbers.Integral,)):
    raise TypeError('`%s` must be an integer >= %d. Received: %s=%r'
                    % (name, low, name, value))
  if value < low:
    raise ValueError('`%s` must be an integer >= %d. Received: %s=%r'
                     % (name, low, name, value))
  return int(value)


def check_choice(name, value, choices):
  """Raises `ValueError` unless `value` is one of `choices`."""
  if value not in choices:
    raise ValueError('`%s` must be one of %s. Received: %s=%r'
                     % (name, ', '.join(repr(c) for c in choices), name, value))
  return value
