"""Early, named checks of hyperparameters (errors say the argument and its range)."""

import numbers

import numpy as np
import tensorflow as tf

__all__ = ['check_bool', 'check_choice', 'check_int', 'check_number',
           'check_seed', 'static_value']


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
  if value is None or isinstance(value, (str, bytes, bool, np.bool_)) or not (
      isinstance(value, (numbers.Number, np.ndarray, np.generic)) or
      tf.is_tensor(value) or hasattr(value, 'dtype')):
    raise TypeError('`%s` must be a number. Received: %s=%r'
                    % (name, name, value))
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


def check_int(name, value, low=1, high=None):
  """Raises unless `value` is a Python int in ``[low, high]``."""
  allowed = ('an integer >= %d' % low if high is None else
             'an integer in [%d, %d]' % (low, high))
  if isinstance(value, (bool, np.bool_)) or not isinstance(
      value, numbers.Integral):
    raise TypeError('`%s` must be %s. Received: %s=%r'
                    % (name, allowed, name, value))
  if value < low or (high is not None and value > high):
    raise ValueError('`%s` must be %s. Received: %s=%r'
                     % (name, allowed, name, value))
  return int(value)


def check_bool(name, value):
  """Raises `TypeError` unless `value` is a Python (or NumPy) bool."""
  if not isinstance(value, (bool, np.bool_)):
    raise TypeError('`%s` must be True or False. Received: %s=%r'
                    % (name, name, value))
  return bool(value)


def check_seed(name, value):
  """An int seed in ``[0, 2**31 - 1]`` (larger ones would wrap silently)."""
  return check_int(name, value, low=0, high=2**31 - 1)


def check_choice(name, value, choices):
  """Raises `ValueError` unless `value` is one of `choices`."""
  try:
    known = value in choices
  except TypeError:  # Unhashable or incomparable.
    known = False
  if not known:
    raise ValueError('`%s` must be one of %s. Received: %s=%r'
                     % (name, ', '.join(repr(c) for c in choices), name, value))
  return value


def check_optional_callable(name, value, what):
  """Raises `TypeError` unless `value` is `None` or callable; `what` says what it must be."""
  if value is not None and not callable(value):
    raise TypeError('`%s` must be %s, or None. Received: %s=%r'
                    % (name, what, name, value))
  return value
