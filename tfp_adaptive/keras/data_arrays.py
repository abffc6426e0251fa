"""Data as the ensembles and callbacks read it: ``(x, y)`` arrays, or a `tf.data.Dataset` read once, in order."""

import numpy as np
import tensorflow as tf
import keras

__all__ = ['as_arrays', 'check_validation_data', 'first_batch_rows',
           'validation_arrays']


def check_validation_data(data, name='validation_data'):
  """Raises `TypeError` unless `data` is `None`, ``(x, y)`` or a `tf.data.Dataset` (`name`: the argument's)."""
  if data is not None and not (
      isinstance(data, tf.data.Dataset) or
      (isinstance(data, (tuple, list)) and len(data) == 2)):
    raise TypeError('`%s` must be (x, y) or a tf.data.Dataset of (x, y). '
                    'Received: %r' % (name, type(data)))
  if isinstance(data, tf.data.Dataset):
    _check_finite(data, name)
  return data


def _check_finite(dataset, name):
  """Raises `ValueError` for a dataset that repeats forever (it is read whole)."""
  if int(dataset.cardinality()) == int(tf.data.INFINITE_CARDINALITY):
    raise ValueError(
        '`%s` is a tf.data.Dataset that repeats forever (`.repeat()`), and '
        'it is read whole: pass the dataset before `.repeat()`, or (x, y) '
        'arrays.' % name)


def first_batch_rows(dataset):
  """The rows of `dataset`'s first element (its batch size, for a batched dataset)."""
  x, _, _ = keras.utils.unpack_x_y_sample_weight(next(iter(dataset)))
  return int(tf.nest.flatten(x)[0].shape[0])


def validation_arrays(data, name='validation_data'):
  """``(x, y)`` arrays of data checked by `check_validation_data`."""
  x, y = (data, None) if isinstance(data, tf.data.Dataset) else data
  x, y = as_arrays(x, y)
  if y is None:
    raise ValueError('`%s` must yield targets (x, y).' % name)
  return x, y


def as_arrays(x, y=None):
  """``(x, y)`` as NumPy structures; a `tf.data.Dataset` is read once, in order."""
  if not isinstance(x, tf.data.Dataset):
    return x, y
  if y is not None:
    raise ValueError('`y` must be None when `x` is a tf.data.Dataset (it '
                     'yields the targets).')
  _check_finite(x, 'x')
  xs, ys = [], []
  for element in x:
    bx, by, bw = keras.utils.unpack_x_y_sample_weight(element)
    if bw is not None:
      raise ValueError('The ensemble does not weight examples; the dataset '
                       'yields sample weights.')
    xs.append(bx)
    ys.append(by)
  if not xs:
    raise ValueError('The dataset is empty.')
  cat = lambda *b: np.concatenate([np.asarray(t) for t in b], 0)
  x = tf.nest.map_structure(cat, *xs)
  y = None if ys[0] is None else tf.nest.map_structure(cat, *ys)
  return x, y
