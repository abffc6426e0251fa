"""Private TensorFlow and Keras internals used by tfp_adaptive, in one place, each with its reason.

Each helper names the public API that would replace it; when TensorFlow or
Keras offers one, only this file changes. (Subclasses of
`keras.optimizers.Optimizer` also use the base class's protected members
``_var_key``, ``_get_variable_index``, ``_trainable_variables``,
``_all_reduce_sum_gradients`` and ``_distribution_strategy``, as Keras' own
optimizers do: that is the subclassing interface, not an internal.)
"""

import tensorflow as tf
from tensorflow.python.framework import ops  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import control_flow_util  # pylint: disable=g-direct-tensorflow-import

__all__ = ['in_xla_context', 'maybe_merge_call', 'update_loss_tracker']


def in_xla_context():
  """True while tracing a function compiled with XLA (``jit_compile=True``).

  `tf.debugging.Assert` is dropped under XLA, so a ``nonfinite='raise'``
  policy must then be enforced on the host. No public API tells whether the
  current trace is an XLA cluster.
  """
  try:
    return control_flow_util.GraphOrParentsInXlaContext(
        ops.get_default_graph())
  except AttributeError:  # pragma: no cover
    return False


def update_loss_tracker(model, loss, batch_size):
  """Adds a train step's loss to the ``loss`` that `fit` logs.

  A custom ``train_step`` that does not call Keras' own must feed the
  model's loss tracker itself; Keras has no public accessor for it.
  """
  model._loss_tracker.update_state(loss, sample_weight=batch_size)  # pylint: disable=protected-access


def maybe_merge_call(fn, strategy, *args):
  """Runs `fn` in cross-replica context under a `tf.distribute` strategy.

  Keras' own optimizers update the mirrored copies of each variable this
  way; there is no public equivalent of this entry point.
  """
  return tf.__internal__.distribute.interim.maybe_merge_call(fn, strategy,
                                                             *args)
