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
its output, the heads of several members in one compiled call (the
head's stateless call vectorised over their stacked variables). The cut
is checked on the inputs against the whole model before it is used; a
model that cannot be cut is predicted whole, member by member.
"""

import collections
import warnings

import numpy as np
import tensorflow as tf
import keras

from tfp_adaptive.keras import members

__all__ = ['Cut', 'FrozenPart', 'digest', 'digest_of', 'frozen_indices',
           'snapshot', 'split_model', 'take', 'with_part']

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
  """The first 16 hex digits of the arrays' `members.fingerprint`."""
  return members.fingerprint(arrays)[:16]


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


class Cut(collections.namedtuple('Cut', ['base', 'head', 'base_positions',
                                         'positions'])):
  """A model cut after its frozen first part (`split_model`).

  `base` maps the model's inputs to the output of its last leading frozen
  layer, `head` maps that output to the model's outputs;
  `base_positions` and `positions` are the positions in ``model.weights``
  of their variables. Both run as stateless calls on a member's values:
  the model's own variables are neither read nor written.
  """
  __slots__ = ()

  def features(self, values, x, rows):
    """The base's output on `x` with a member's `values`: tensors of `rows` rows each."""
    call = _compiled(self.base, stacked=False)
    weights = [tf.convert_to_tensor(values[p]) for p in self.base_positions]
    n = len(tf.nest.flatten(x)[0])
    return [call(weights, tf.nest.map_structure(
        lambda a, i=i: tf.convert_to_tensor(a[i:i + rows]), x))
            for i in range(0, n, rows)]

  def heads_outputs(self, values, features):
    """Each member's head outputs (NumPy) on `features`, all members in one compiled call.

    `values`: the members' values (``model.weights`` order). The heads'
    variables are stacked on a leading member axis and the head's
    stateless call is vectorised over it (`tf.vectorized_map`), so that no
    member's weights are assigned to the model.
    """
    call = _compiled(self.head, stacked=True)
    stacked = [tf.convert_to_tensor(np.stack([v[p] for v in values]))
               for p in self.positions]
    parts = [call(stacked, chunk) for chunk in features]
    out = tf.nest.map_structure(
        lambda *a: np.concatenate([t.numpy() for t in a], 1), *parts)
    return [tf.nest.map_structure(lambda a, k=k: a[k], out)
            for k in range(len(values))]


def split_model(model, x, rtol=1e-5):
  """The `Cut` of `model` after its frozen first part, or `None`.

  `None` when the model has no frozen first part with weights, when it
  cannot be cut there (a subclassed model, branches that skip the cut, a
  layer called twice), or when ``head(base(x))`` differs from ``model(x)``
  on the first rows of `x` by more than `rtol`.
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
  base_positions = [position.get(id(v)) for v in base.weights]
  head_positions = [position.get(id(v)) for v in head.weights]
  if None in base_positions + head_positions:
    return None
  return Cut(base, head, base_positions, head_positions)


_CALLS = {}  # (id(model), stacked) -> (model, its compiled stateless call).


def _compiled(model, stacked):
  """``(variables, inputs) -> outputs``, compiled; with `stacked`, vectorised over a leading member axis of the variables."""
  key = (id(model), stacked)
  if key in _CALLS and _CALLS[key][0] is model:
    return _CALLS[key][1]
  where = {id(v): i for i, v in enumerate(model.weights)}
  trainable = [where[id(v)] for v in model.trainable_variables]
  # Variables that are not weights (a dropout layer's seed state) keep
  # their own value.
  fixed = [(where.get(id(v)), v) for v in model.non_trainable_variables]

  def one(values, inputs):
    out, _ = model.stateless_call(
        [values[i] for i in trainable],
        [v.value if i is None else values[i] for i, v in fixed], inputs,
        training=False)
    return out

  if stacked:
    call = tf.function(lambda values, inputs: tf.vectorized_map(
        lambda v: one(v, inputs), values), reduce_retracing=True)
  else:
    call = tf.function(one, reduce_retracing=True)
  if len(_CALLS) >= 16:
    _CALLS.pop(next(iter(_CALLS)))
  _CALLS[key] = (model, call)
  return call


def _single(tensors):
  return tensors[0] if isinstance(tensors, (list, tuple)) and len(
      tensors) == 1 else tensors


def _layers(model):
  """Every layer inside `model`, nested ones included."""
  return list(model._flatten_layers(include_self=False, recursive=True))  # pylint: disable=protected-access
