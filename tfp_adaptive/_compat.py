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

__all__ = ['build_from_local_batch', 'in_xla_context', 'maybe_merge_call',
           'quiet_function', 'rank_one_logs', 'update_loss_tracker']


def quiet_function(fn, jit_compile):
  """`tf.function` of `fn`, without TensorFlow's retracing warning.

  The runners of `tfp_adaptive.mcmc` are built per kernel and traced once
  per shape. TensorFlow counts traces by the Python code they come from,
  so a few kernels run one after another look to it like one function
  retraced in a loop, and it warns about a cost the user did not cause.
  Public replacement: none (``reduce_retracing`` changes the tracing, not
  the warning).
  """
  run = tf.function(fn, jit_compile=jit_compile, autograph=False)
  run._omit_frequent_tracing_warning = True  # pylint: disable=protected-access
  return run


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


def build_from_local_batch(model, strategy):
  """Makes `model.fit` build the model from the local replica's first batch.

  Before its first step, Keras 3's `fit` (TensorFlow backend) reads one
  batch to build the model and averages it over the replicas with
  ``strategy.reduce``. Under `MultiWorkerMirroredStrategy` that reduce
  is handed the whole ``(x, y)`` structure and fails ("Attempt to convert a
  value (PerReplica ...)", keras-team/keras#20585), so `fit` never starts.
  The batch only gives the shapes, so this model's build reads the local
  replica's batch instead. Replaced on the instance only; a Keras without
  the private ``_maybe_symbolic_build`` is left alone. A public fix in
  Keras makes this helper unnecessary.
  """
  original = getattr(model, '_maybe_symbolic_build', None)
  if original is None or getattr(original, 'from_local_batch', False):
    return
  def local(x):
    if isinstance(x, tf.distribute.DistributedValues):
      return strategy.experimental_local_results(x)[0]
    return x

  def build(iterator=None, data_batch=None):
    if iterator is not None and data_batch is None:
      for _, _, it in iterator:
        data_batch = tf.nest.map_structure(local, next(it))
        break
    return original(data_batch=data_batch)
  build.from_local_batch = True
  model._maybe_symbolic_build = build  # pylint: disable=protected-access


def rank_one_logs(logs):
  """`logs` with every scalar given a leading axis of length 1.

  Under `MultiWorkerMirroredStrategy`, Keras 3's `fit` averages the train
  step's logs over the replicas with ``strategy.reduce("MEAN", v, axis=0)``,
  which fails on the scalars every train step returns ("Invalid reduction
  dimension 0 for input with 0 dimensions"). With a leading axis the same
  reduce gives back the scalar, averaged over the replicas.
  """
  return tf.nest.map_structure(
      lambda t: t[tf.newaxis] if getattr(t, 'shape', None) is not None and
      t.shape.rank == 0 else t, logs)
