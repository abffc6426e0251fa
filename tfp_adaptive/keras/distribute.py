"""One chain on several processes: `tf.distribute.MultiWorkerMirroredStrategy`.

Every worker runs the same script with its own ``TF_CONFIG``; the global
batch is split over the workers, the gradients are all-reduced, and the
sampler's metric and noise are computed identically on every worker (the
noise is a stateless function of the optimizer's ``seed`` and iteration),
so all workers hold the same chain. Only the chief writes the sample
directory (`SampleCollector`). See the guide "Several processes and
machines".
"""

import tensorflow as tf
import keras

from tfp_adaptive import _compat

__all__ = ['agree_on_seed', 'enable_multi_worker', 'is_chief', 'is_multi_worker']


def is_multi_worker(strategy=None):
  """True if `strategy` (default: the current one) spans several workers."""
  strategy = strategy or tf.distribute.get_strategy()
  return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


def is_chief(strategy=None):
  """True on the worker that writes files (always, outside multi-worker runs).

  The chief is the task of type ``'chief'``, or worker 0 when the cluster
  has none (TensorFlow's rule, read from ``strategy.extended``).
  """
  strategy = strategy or tf.distribute.get_strategy()
  return bool(strategy.extended.should_checkpoint)


def enable_multi_worker(model):
  """Lets `model.fit` run under `MultiWorkerMirroredStrategy` (in place).

  Keras 3's `fit` fails before its first step under that strategy: it
  averages one batch over the replicas to build the model, and the
  multi-worker reduce does not accept the ``(x, y)`` structure
  (keras-team/keras#20585). This builds the model from the local batch
  instead, for this model only. Call it after `model.compile`, inside or
  outside the strategy's scope; with any optimizer.

  Args:
    model: a `keras.Model` created in a `MultiWorkerMirroredStrategy` scope.

  Returns:
    `model`, for chaining.

  Raises:
    TypeError: `model` is not a Keras model.
    ValueError: `model` was not created under `MultiWorkerMirroredStrategy`.
  """
  if not isinstance(model, keras.Model):
    raise TypeError('`model` must be a keras.Model. Received: %r' % (model,))
  strategy = model.distribute_strategy
  if not is_multi_worker(strategy):
    raise ValueError(
        'enable_multi_worker: the model was created under %s, not '
        'tf.distribute.MultiWorkerMirroredStrategy; create (and compile) it '
        'inside `strategy.scope()`.' % type(strategy).__name__)
  _compat.build_from_local_batch(model, strategy)
  model._tfa_multi_worker = True  # pylint: disable=protected-access
  wrap_steps(model)
  return model


def wrap_steps(model):
  """Gives the scalar logs of `model`'s train and test steps a leading axis.

  Needed by `fit` and `evaluate` under `MultiWorkerMirroredStrategy`
  (`tfp_adaptive._compat.rank_one_logs`); a no-op for other models.
  `enable_gamma`, which replaces the train step, calls it again.
  """
  if not getattr(model, '_tfa_multi_worker', False):
    return
  for name in ('train_step', 'test_step'):
    step = getattr(model, name)
    if getattr(step, 'rank_one_logs', False):
      continue
    wrapped = (lambda step: lambda data: _compat.rank_one_logs(step(data)))(
        step)
    wrapped.rank_one_logs = True
    setattr(model, name, wrapped)
  model.train_function = model.test_function = None


def agree_on_seed(seed, seed_given, who):
  """The seed every worker of a `MultiWorkerMirroredStrategy` samples with: the chief's.

  The workers must draw the same noise to hold one chain. A seed drawn
  per process (`seed_given` false) is replaced by the chief's; explicit
  seeds that differ between workers are an error naming `who`. Outside
  such a strategy (or in a graph), `seed` as it is.
  """
  strategy = tf.distribute.get_strategy()
  if not is_multi_worker(strategy) or not tf.executing_eagerly():
    return seed
  mine = tf.constant(seed, tf.int64)
  chief = is_chief(strategy)
  total = lambda x: int(_sum_over_workers(strategy, x))
  chief_seed = total(mine if chief else tf.zeros_like(mine))
  differing = total(tf.cast(mine != chief_seed, tf.int64))
  if seed_given and differing:
    here = ('this worker passes seed=%d' % seed if seed != chief_seed else
            'this worker passes the chief\'s seed')
    raise ValueError(
        '%s: the chief passes seed=%d, %d worker(s) pass another seed '
        '(%s). Under MultiWorkerMirroredStrategy every worker must pass '
        'the same `seed` (or none, to take the chief\'s).'
        % (who, chief_seed, differing, here))
  return chief_seed


def _sum_over_workers(strategy, value):
  """The sum of a scalar over the workers of `strategy`, in one compiled call."""
  return tf.function(lambda: strategy.reduce(
      tf.distribute.ReduceOp.SUM, strategy.run(lambda: value), axis=None))()
