"""A posterior sample of a Keras model's weights (`Member`), and loading it into the model.

A member's weights are a list in the order of ``model.weights``, which is
fixed by the model's structure; they are matched to the model by position
and shape, never by Keras' automatic variable names.
"""

import collections
import hashlib

import numpy as np
import tensorflow as tf

from tfp_adaptive import validation
from tfp_adaptive.keras import sample_files

__all__ = ['Member', 'PREDICT_ROWS', 'assign_weights', 'check_structure',
           'fingerprint', 'member_values', 'outputs']

# One posterior sample: the step it was taken at, the learning rate then,
# either its weights (a list in `model.weights` order) or the file holding
# them, the index of the chain (sample directory) it came from, the cycle
# of a cyclical schedule it was taken in (`None` without one), and the
# digest of its frozen part (`tfp_adaptive.keras.frozen_part`: the frozen
# layers' variables, stored once and shared by the members with the same
# digest; `None` when nothing is stored apart).
Member = collections.namedtuple('Member', ['step', 'learning_rate', 'weights',
                                           'path', 'chain', 'cycle', 'frozen'],
                                defaults=[0, None, None])


PREDICT_ROWS = 1024  # Rows per compiled call when `batch_size` is not given.


def outputs(model, x, batch_size=None):
  """The raw outputs of `model` on the arrays `x`, in compiled calls of `batch_size` rows.

  `keras.Model.predict` sets up a data pipeline and its callbacks on every
  call, which costs far more than the forward pass of a small model, and an
  ensemble calls it once per member. Here each call is one compiled
  forward pass (`keras.Model.predict_on_batch`) on `batch_size` rows
  (default `PREDICT_ROWS`), in inference mode as `predict` runs it.
  """
  rows = (PREDICT_ROWS if batch_size is None else
          validation.check_int('batch_size', batch_size))
  n = len(tf.nest.flatten(x)[0])
  parts = [model.predict_on_batch(
      tf.nest.map_structure(lambda a, i=i: a[i:i + rows], x))
           for i in range(0, n, rows)]
  return tf.nest.map_structure(lambda *a: np.concatenate(a, 0), *parts)


def member_values(member):
  """The member's weights as a list in ``model.weights`` order."""
  if member.weights is not None:
    return member.weights
  return sample_files.read_sample(member.path)[0]


def check_structure(model, values, where='a member'):
  """Raises `ValueError` unless `values` fit ``model.weights`` (count, shapes)."""
  variables = model.weights
  if len(values) != len(variables):
    raise ValueError(
        '%s holds %d arrays but the model has %d variables: it was collected '
        'from a different architecture.' % (where, len(values),
                                            len(variables)))
  for v, a in zip(variables, values):
    if tuple(v.shape) != tuple(np.shape(a)):
      raise ValueError(
          '%s does not fit the model: variable %r has shape %s, the sample '
          '%s. It was collected from a different architecture.'
          % (where, v.path, tuple(v.shape), tuple(np.shape(a))))


def assign_weights(model, values):
  """Assigns `values` (``model.weights`` order) after checking the structure."""
  check_structure(model, values)
  for v, a in zip(model.weights, values):
    v.assign(a)


def fingerprint(values):
  """SHA-256 (hex) of the arrays' dtypes, shapes and bytes: two samples with the same weights have the same.

  The frozen part's file name holds its first 16 digits
  (`frozen_part.digest`).
  """
  digest = hashlib.sha256()
  for a in values:
    a = np.ascontiguousarray(a)
    digest.update(('%s%s' % (a.dtype.str, a.shape)).encode())
    digest.update(a.data)
  return digest.hexdigest()
