"""Private TensorFlow internals used by tfp_adaptive, in one place, each with its reason.

Each helper names the public API that would replace it; when TensorFlow or
Keras offers one, only this file changes.
"""

import tensorflow as tf
from tensorflow.python.framework import ops  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.ops import control_flow_util  # pylint: disable=g-direct-tensorflow-import

__all__ = ['in_xla_context', 'maybe_merge_call']


def in_xla_context():
  """True while tracing a function compiled with XLA (``jit_compile=True``).

  `tf.debugging.Assert` is dropped under XLA, so a ``nonfinite='raise'``
  policy must then be enforced on the host. No public API tells whether the
  current trace is an XLA cluster.
  """
  return control_flow_util.GraphOrParentsInXlaContext(ops.get_default_graph())


def maybe_merge_call(fn, strategy, *args):
  """Runs `fn` in cross-replica context under a `tf.distribute` strategy.

  Keras' own optimizers update the mirrored copies of each variable this
  way; there is no public equivalent of this entry point.
  """
  return tf.__internal__.distribute.interim.maybe_merge_call(fn, strategy,
                                                             *args)
