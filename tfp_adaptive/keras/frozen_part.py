"""The frozen part of a Keras model: stored once for all members, computed once per prediction.

In transfer learning a pretrained base is frozen (``base.trainable =
False``) and only a new head is trained, here sampled. The base's
variables are the same in every posterior sample, so a member need not
store them: a `FrozenPart` holds them once, and each member's file holds
only the variables that vary (the trainable ones, and the non-trainable
state of layers that train, such as batch-normalisation statistics).

When the frozen layers form the first part of the model (a `Sequential`
model, or a functional one whose layers up to some frozen layer depend
on nothing after it), `split_model` cuts the model there: the ensemble
computes the base once per input batch and applies each member's head to
its output. The cut is checked on the inputs against the whole model
before it is used; a model that cannot be cut is predicted whole, member
by member.
"""

import collections
import hashlib
import warnings

import numpy as np
import keras

__all__ = ['FrozenPart', 'digest', 'digest_of', 'frozen_indices', 'snapshot',
           'split_model', 'take', 'with_part']

# The frozen variables of a model: their positions in ``model.weights``
# (sorted), their values (one array each, shared by every member that
# holds this part) and a digest of those values, which names the part's
# file and tells two parts apart.
FrozenPart = collections.namedtuple('FrozenPart',
                                    ['digest', 'indices', 'arrays'])


def frozen_indices(model):
  """Positions in ``model.weights`` of the variables of frozen layers.

  A layer is frozen when its `trainable` attribute is False (setting it on
  a model or a layer freezes every layer inside). Non-trainable variables
  of layers that train (batch normalisation's moving statistics) are not
  frozen: they change during `fit`.
  """
  frozen = set()
  for layer in _layers(model):
    if not layer.trainable:
      frozen.update(id(v) for v in layer.weights)
  return tuple(i for i, v in enumerate(model.weights) if id(v) in frozen)


def digest(arrays):
  """SHA-256 (16 hex digits) of the arrays' shapes, dtypes and bytes."""
  h = hashlib.sha256()
  for a in arrays:
    a = np.ascontiguousarray(a)
    h.update(('%s%s' % (a.dtype.str, a.shape)).encode())
    h.update(a.data)
  return h.hexdigest()[:16]


def digest_of(entry):
  """The digest of the frozen part a sample's manifest entry or metadata names (`None`: none)."""
  name = entry.get('frozen')
  return name[len('frozen_'):-len('.npz')] if name else None


def snapshot(model, values, previous=None):
  """The `FrozenPart` of `values` (``model.weights`` order), or `None` if nothing is frozen.

  `previous` is returned as it is when its values are unchanged, so that
  members taken one after another share one copy of the frozen arrays.
  """
  indices = frozen_indices(model)
  if not indices:
    return None
  arrays = [values[i] for i in indices]
  if (previous is not None and previous.indices == indices and
      all(a.shape == b.shape and np.array_equal(a, b)
          for a, b in zip(arrays, previous.arrays))):
    return previous
  return FrozenPart(digest(arrays), indices, [np.array(a) for a in arrays])


def take(model, previous=None):
  """``(values, part)``: a copy of ``model.weights``, its frozen positions shared with `part`.

  `part` is `snapshot`'s (`previous` when the frozen values are unchanged).
  """
  values = [np.array(v.numpy()) for v in model.weights]
  part = snapshot(model, values, previous)
  return with_part(values, part), part


def with_part(values, part):
  """`values` with the frozen positions pointing at `part`'s shared arrays."""
  if part is None:
    return values
  values = list(values)
  for i, a in zip(part.indices, part.arrays):
    values[i] = a
  return values


def split_model(model, x, rtol=1e-5):
  """``(base, head, head_positions)`` cutting `model` after its frozen first part, or `None`.

  `base` maps the model's inputs to the output of its last leading frozen
  layer, `head` maps that output to the model's outputs, and
  `head_positions` are the positions in ``model.weights`` of the head's
  variables. `None` when the model has no frozen first part with weights,
  when it cannot be cut there (a subclassed model, branches that skip the
  cut, a layer called twice), or when ``head(base(x))`` differs from
  ``model(x)`` on the first rows of `x` by more than `rtol`.
  """
  layers = list(getattr(model, 'layers', []))
  if not hasattr(model, 'inputs') or not layers:
    return None
  cut, frozen_weights = None, False
  for k, layer in enumerate(layers):
    if isinstance(layer, keras.layers.InputLayer):
      continue
    if layer.weights and layer.trainable:
      break
    frozen_weights = frozen_weights or bool(layer.weights)
    cut = k
  if cut is None or not frozen_weights or cut == len(layers) - 1:
    return None
  try:
    with warnings.catch_warnings():
      warnings.simplefilter('ignore')  # Keras' notes on input structure.
      inputs = _single(model.inputs)
      middle = layers[cut].output
      base = keras.Model(inputs, middle)
      head = keras.Model(middle, _single(model.outputs))
      rows = keras.tree.map_structure(lambda a: np.asarray(a)[:8], x)
      whole = np.asarray(model(rows, training=False))
      parts = np.asarray(head(base(rows, training=False), training=False))
  except (ValueError, TypeError, AttributeError, KeyError, IndexError):
    return None
  if whole.shape != parts.shape or not np.allclose(
      parts, whole, rtol=rtol, atol=rtol * (1. + np.abs(whole).max())):
    return None
  position = {id(v): i for i, v in enumerate(model.weights)}
  head_positions = [position.get(id(v)) for v in head.weights]
  if None in head_positions:
    return None
  return base, head, head_positions


def _single(tensors):
  return tensors[0] if isinstance(tensors, (list, tuple)) and len(
      tensors) == 1 else tensors


def _layers(model):
  """Every layer inside `model`, nested ones included."""
  flatten = getattr(model, '_flatten_layers', None)
  if flatten is not None:
    return list(flatten(include_self=False, recursive=True))
  found, stack = [], list(getattr(model, 'layers', []))
  while stack:
    layer = stack.pop()
    found.append(layer)
    stack.extend(getattr(layer, 'layers', []))
  return found
