"""Γ inside `model.fit`: a train step that differentiates the metric through the loss.

A Keras optimizer only sees gradients, but Γ (Rensmeyer & Niggemann 2025,
eq. 9) is the divergence of the metric, which depends on the weights through
the loss gradient. `enable_gamma(model)` replaces the model's train step by
one that runs second-order autodiff
(`tfp_adaptive.core.gamma.gradient_and_gamma`: a Hessian-vector product,
then the metric's forward-mode derivative) on the loss and hands the
gradient and Γ to the optimizer. It works for Sequential, Functional and
subclassed models, in `tf.function` and with ``jit_compile=True``.
"""

import types

import tensorflow as tf
import keras

from tfp_adaptive import _compat
from tfp_adaptive import vocabulary
from tfp_adaptive.core import gamma as gamma_lib
from tfp_adaptive.keras import distribute
from tfp_adaptive.keras import optimizer_base

__all__ = ['enable_gamma', 'gamma_enabled', 'gradients_and_gamma', 'halves']


def gradients_and_gamma(optimizer, loss_fn, variables, gamma_loss_fn=None,
                        metric_loss_fn=None):
  """The loss, its gradient and ``c·Γ`` for the next step of `optimizer`.

  For custom training loops. With ``gamma='corrected'`` (the default) the
  metric and Γ come from a minibatch of their own (docs, "The
  mathematics", "A metric from its own minibatch"): split the batch in two
  (`halves`), pass the second half's loss as `metric_loss_fn`, and hand the
  fourth item returned, the metric state, to `apply`::

      (xa, ya), (xb, yb) = halves((x, y), seed)
      loss, grads, gamma, state = gradients_and_gamma(
          opt, lambda: loss_of(model(xa), ya), model.trainable_variables,
          metric_loss_fn=lambda: loss_of(model(xb), yb))
      opt.apply(grads, model.trainable_variables, gamma=gamma,
                metric_state=state)

  With the other modes: ``loss, grads, gamma = gradients_and_gamma(opt,
  loss_fn, variables)`` then ``opt.apply(grads, variables, gamma=gamma)``.

  Args:
    optimizer: a built `tfp_adaptive.keras.optimizers.SamplerOptimizer`.
    loss_fn: callable with no arguments returning the scalar loss (it reads
      the variables).
    variables: the variables being sampled (`keras.Variable` or
      `tf.Variable`).
    gamma_loss_fn: optional callable like `loss_fn` on a random part of the
      minibatch, whose Hessian-vector product Γ uses instead of `loss_fn`'s
      (see the optimizer's ``gamma_subsample``).
    metric_loss_fn: callable like `loss_fn` on a minibatch drawn apart from
      `loss_fn`'s; required by ``gamma='corrected'`` and refused by the
      other modes.

  Returns:
    ``(loss, grads, gamma)``; ``gamma`` is `None` if the optimizer's
    ``gamma == 'none'``. With `metric_loss_fn`, ``(loss, grads, gamma,
    metric_state)``.

  Raises:
    ValueError: `metric_loss_fn` is missing for ``'corrected'`` or given
      for another mode.
  """
  independent = (optimizer.needs_gamma and
                 vocabulary.independent_metric(optimizer.gamma))
  if independent and metric_loss_fn is None:
    raise ValueError(
        "gamma='corrected' builds the metric from a minibatch of its own: "
        'pass `metric_loss_fn`, the loss on a second minibatch (split the '
        'batch with `tfp_adaptive.keras.halves`), and `metric_state` (the '
        'fourth item returned) to `apply`; or construct the optimizer with '
        "gamma='corrected_published', which builds it from `loss_fn`.")
  if metric_loss_fn is not None and not independent:
    raise ValueError(
        "`metric_loss_fn` is for gamma='corrected'; the optimizer has "
        'gamma=%r.' % (optimizer.gamma,))
  out = _gradients_gamma_and_state(optimizer, loss_fn, variables,
                                   gamma_loss_fn, metric_loss_fn)
  return out if independent else out[:3]


def _gradients_gamma_and_state(optimizer, loss_fn, variables,
                               gamma_loss_fn=None, metric_loss_fn=None):
  """`gradients_and_gamma` and the metric state updated with the gradient.

  With `metric_loss_fn`, the metric state and Γ are those of its gradient,
  and the loss and gradient those of `loss_fn`.
  """
  optimizer.build(variables)
  parts = [optimizer_base.backing_variable(v) for v in variables]
  step = tf.cast(tf.convert_to_tensor(optimizer.iterations), tf.int32)
  pstate, _ = optimizer.sampler_state()
  gamma_seed, noise_seed = optimizer.step_seeds(step)
  mode = optimizer.gamma if optimizer.needs_gamma else 'none'
  # The metric and Γ see the default prior's term as `apply` adds it; the
  # loss and gradient handed back are the loss's own, as without Γ.
  def with_prior(fn):
    if fn is None:
      return None
    def posterior(xs):
      loss = fn()
      return loss + tf.cast(optimizer.prior_loss(xs), loss.dtype)
    return posterior
  metric_fn, drift_fn = with_prior(loss_fn), None
  if metric_loss_fn is not None:
    metric_fn, drift_fn = with_prior(metric_loss_fn), metric_fn
  loss, grads, pstate, gamma = gamma_lib.gradient_and_gamma(
      metric_fn, parts, optimizer.algorithm.gamma_metric, pstate,
      step, optimizer.chain_ndims,
      mode, optimizer.gamma_estimator, gamma_seed, with_prior(gamma_loss_fn),
      optimizer.gamma_probability, noise_seed=noise_seed,
      noise=optimizer.algorithm.noise,
      adapting=optimizer.algorithm.adapting(step), drift_fn=drift_fn)
  grads = [g if p is None else g - p
           for g, p in zip(grads, optimizer.prior_gradients(parts))]
  loss -= tf.cast(optimizer.prior_loss(parts), loss.dtype)
  return loss, grads, gamma, pstate


def _shuffled(structures, seed):
  """``(batch, order, take)``: the rows' count, a random order of them, and ``take(rows)``, those rows of every tensor given."""
  first = tf.nest.flatten(structures[0])[0]
  batch = first.shape[0]
  if batch is None:
    batch = tf.shape(first)[0]
  order = tf.argsort(tf.random.stateless_uniform([batch], seed))
  take = lambda rows: [tf.nest.map_structure(lambda t: tf.gather(t, rows), s)
                       if s is not None else None for s in structures]
  return batch, order, take


def halves(batch, seed):
  """Two disjoint random halves of a minibatch: the drift's and the metric's.

  For ``gamma='corrected'`` (Rensmeyer & Niggemann 2025, Algorithm 1 with
  the metric built apart from the drift; docs, "The mathematics", "A metric
  from its own minibatch"), in `fit` and in custom loops
  (`gradients_and_gamma`).

  Args:
    batch: a tuple of (nested) tensors with the same leading row axis, such
      as ``(x, y)`` or ``(x, y, sample_weight)``; `None` entries are kept.
    seed: a stateless seed (shape ``[2]`` int32).

  Returns:
    Two tuples like `batch`, the first with ``ceil(rows / 2)`` random rows
    and the second with the rest.

  Raises:
    ValueError: a batch of fewer than 2 rows.
  """
  batch = tuple(batch)
  rows = tf.nest.flatten(batch[0])[0].shape[0]
  if rows is not None and rows < 2:
    raise ValueError(
        "gamma='corrected' splits each minibatch in two (the drift's half "
        "and the metric's); a minibatch of %d row cannot be split. Use a "
        "`batch_size` of at least 2, or gamma='corrected_published'."
        % rows)
  rows, order, take = _shuffled(batch, seed)
  k = (rows + 1) // 2
  return tuple(take(order[:k])), tuple(take(order[k:]))


def drift_rows(optimizer, batch):
  """The rows of a `fit` minibatch of `batch` rows that the drift's gradient sees.

  ``ceil(batch / 2)`` where the train step splits the minibatch (`halves`,
  ``gamma='corrected'``), else `batch`: what a calibration of the step
  against the minibatch noise must take.
  """
  if optimizer.needs_gamma and vocabulary.independent_metric(optimizer.gamma):
    return (batch + 1) // 2
  return batch


def _random_rows(structures, fraction, seed):
  """The same random ``ceil(fraction * batch)`` rows of every tensor given."""
  batch, order, take = _shuffled(structures, seed)
  k = tf.cast(tf.math.ceil(fraction * tf.cast(batch, tf.float32)), tf.int32)
  return take(order[:tf.maximum(k, 1)])


def _gamma_train_step(self, data):
  """`keras.Model.train_step` with Γ (Keras 3, TensorFlow backend)."""
  x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
  replicas = tf.distribute.get_strategy().num_replicas_in_sync
  captured = {}

  def loss_on(xb, yb, wb):
    y_pred = self(xb, training=True)
    loss = self.compute_loss(x=xb, y=yb, y_pred=y_pred, sample_weight=wb,
                             training=True)
    # Keras divides the per-replica loss by the number of replicas; the
    # metric must see the local minibatch's own gradient.
    return loss * replicas, y_pred

  if not self.trainable_variables:  # A subclassed model's first call builds it.
    self(x, training=True)
  variables = self.trainable_variables
  optimizer = self.optimizer
  _check_optimizer(optimizer)
  step = tf.cast(tf.convert_to_tensor(optimizer.iterations), tf.int32)
  gamma_seed = optimizer.step_seeds(step)[0]
  metric_loss_fn = None
  gamma_rows = (x, y, sample_weight)
  if optimizer.needs_gamma and vocabulary.independent_metric(optimizer.gamma):
    # The drift's half of the minibatch, and the metric's (docs, "The
    # mathematics", "A metric from its own minibatch").
    (x, y, sample_weight), gamma_rows = halves(
        (x, y, sample_weight),
        tf.random.experimental.stateless_fold_in(gamma_seed, 2))
    metric_loss_fn = lambda: loss_on(*gamma_rows)[0]

  def loss_fn():  # The drift's rows: the minibatch, or its half.
    loss, captured['y_pred'] = loss_on(x, y, sample_weight)
    return loss
  gamma_loss_fn = None
  if optimizer.needs_gamma and optimizer.gamma_subsample < 1:
    rows = _random_rows(gamma_rows, optimizer.gamma_subsample,
                        tf.random.experimental.stateless_fold_in(gamma_seed, 1))
    gamma_loss_fn = lambda: loss_on(*rows)[0]
  loss, grads, gamma, pstate = _gradients_gamma_and_state(
      optimizer, loss_fn, variables, gamma_loss_fn, metric_loss_fn)
  batch = tf.shape(tf.nest.flatten(x)[0])[0]
  _compat.update_loss_tracker(self, loss, batch)
  grads = [g / replicas for g in grads]
  metric_grads = None
  if metric_loss_fn is not None and replicas > 1:
    # Each replica's `pstate` holds its own half only; the metric is
    # updated from the metric halves' gradient summed over the replicas,
    # as the drift's is.
    with tf.GradientTape() as tape:
      metric_loss = metric_loss_fn()
    metric_grads = [g / replicas
                    for g in tape.gradient(metric_loss, variables)]
  optimizer.apply(grads, variables, gamma=gamma, metric_state=pstate,
                  metric_gradients=metric_grads)
  return self.compute_metrics(x, y, captured['y_pred'],
                              sample_weight=sample_weight)


def enable_gamma(model):
  """Makes `model.fit` compute Γ for a `SamplerOptimizer` (one line, in place).

  `SampleCollector` calls it at the start of `fit` when the optimizer needs
  Γ; this is the explicit form (e.g. for `fit` without a collector). Call it
  before or after `model.compile`; the train step is only replaced. Models
  restored with `keras.models.load_model` need the call again.

  Args:
    model: a `keras.Model` (Sequential, Functional or subclassed).

  Returns:
    `model`, for chaining.

  Raises:
    TypeError: `model` is not a Keras model, or it is compiled with an
      optimizer that is not a `tfp_adaptive.keras.optimizers` sampler.
  """
  if not isinstance(model, keras.Model):
    raise TypeError('`model` must be a keras.Model. Received: %r' % (model,))
  optimizer = getattr(model, 'optimizer', None)
  if optimizer is not None:
    _check_optimizer(optimizer)
  model.train_step = types.MethodType(_gamma_train_step, model)
  model._tfa_gamma = True  # pylint: disable=protected-access
  model.train_function = None
  distribute.wrap_steps(model)
  return model


def gamma_enabled(model):
  """True if `enable_gamma` has replaced the model's train step."""
  return getattr(model, '_tfa_gamma', False)


def _check_optimizer(optimizer):
  inner = getattr(optimizer, 'inner_optimizer', None)
  if isinstance(inner, optimizer_base.SamplerOptimizer):
    inner.check_dtype_policy()
  if not isinstance(optimizer, optimizer_base.SamplerOptimizer):
    raise TypeError(
        'Γ is computed for the samplers of tfp_adaptive.keras.optimizers '
        '(SGLD, PSGLD, MongeSGRLD, ...); the model is compiled with %s. '
        'Compile with one of them, or do not call enable_gamma.'
        % type(optimizer).__name__)
