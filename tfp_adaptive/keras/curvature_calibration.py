"""`CurvatureCalibration`: the learning rate that heats the stiffest direction by `heat`, from the curvature and the minibatch noise."""

import logging

import numpy as np
import tensorflow as tf
import keras

from tfp_adaptive import validation
from tfp_adaptive.diagnostics import curvature as curvature_lib
from tfp_adaptive.keras import data_arrays
from tfp_adaptive.keras import ensemble_temperature
from tfp_adaptive.keras import gamma_train_step
from tfp_adaptive.keras import optimizer_base

__all__ = ['CurvatureCalibration']

_LOG = logging.getLogger('tfp_adaptive')


class CurvatureCalibration(keras.callbacks.Callback):
  """Sets the learning rate to ``4·heat/λ`` from the model's curvature and its minibatch noise.

  ``λ`` is the largest eigenvalue of ``A + S/τ``: ``A = M^{1/2} H M^{1/2}``
  the Hessian of the sampled energy ``U`` (``data_size`` times the loss,
  its regularizers and the optimizer's default prior) in the optimizer's
  metric ``M``, and ``S`` the covariance of the whitened minibatch gradient
  of ``U`` at the drift's batch size. A Langevin step ``h`` samples the
  direction of curvature ``a`` and gradient variance ``s`` at ``τ(1 +
  h(a + s/τ)/4)`` (`tfp_adaptive.diagnostics.curvature`, eq. 1), so this learning
  rate heats no direction by more than about `heat`. The drift-based
  `StepSizeCalibration` weighs all directions alike and, at a mode where the
  gradient is small, raises the step until the few stiff directions that
  set the predictions run hot; this rule reads those directions.

  It is read where the chain is: when `fit` begins (for an adaptive metric
  such as PSGLD's, once the metric has seen the gradients: at the end of
  the optimizer's noise-free `burnin`, or of the first step) and at the end
  of each of the first `epochs` epochs that end after that, after which
  the learning rate stays fixed. Until the first reading the learning rate
  is 0: those steps only fill the metric, and at the rate given to
  `compile` (a placeholder) they would move the weights away from the mode
  the rule is read at (a `fit` that ends before it gets that rate back).
  A reading never raises the rate that an earlier one set: the chain
  visits the places read, and the stiffest of them bounds the step. Start
  it at a mode, for instance after training the same model briefly with
  Adam (the Keras guide's recipe): far from one, the curvature changes as
  the chain moves. Keep the calibration epochs inside the collector's
  burn-in.

  A reading that finds the rate already run beyond the stability limit of
  the place the chain has reached (``h·λ ≥ 4``, a heat of 1: a Gaussian
  direction of that curvature diverges) sets the weights back to where
  the first reading of this `fit` was taken before the chain goes on at
  the new rate (one log line says so; `rewinds` counts them). This
  happens at a mode the network fits exactly (training loss near 0): its
  softmax or sigmoid is saturated, the likelihood has almost no curvature
  there, and the first reading sets a step hundreds of times too large
  for the curvature a small move away, which kicks the chain out of the
  mode within an epoch. An Adam warm start stopped early on held-out data
  usually stops before its outputs saturate.

  Each reading takes ``batches`` gradients of size ``B`` (`batch_size`;
  half of it with ``gamma='corrected'``, whose drift sees half of each
  minibatch) and ``2·iterations`` passes over at most
  `rows` examples (the Hessian-vector products of the power iteration).

  Args:
    training_data: ``(x, y)`` or a `tf.data.Dataset` of ``(x, y)``, the
      data `fit` trains on (a callback sees no data).
    heat: in (0, 1), the largest excess temperature allowed, relative to
      ``τ``. Default 0.1, the tolerance of the temperature readings.
    epochs: int >= 0, epochs after which the rate is read again.
    batches: int >= 2, minibatch gradients for the noise covariance.
    iterations: int >= 1, power iterations.
    rows: int >= 1, examples of the Hessian-vector products (a random
      subset when there are more).
    seed: int, the seed of the subsets, batches and starting vector.
    batch_size: int >= 1, the minibatch size `fit` trains with, or `None`
      (default): the batch size of `training_data` when it is a batched
      `tf.data.Dataset` (the pipeline `fit` runs), else the rows of
      `training_data` over `fit`'s steps per epoch, which is right when
      an epoch is one pass over the data. Pass it when it is not (arrays,
      with `fit` on a repeated pipeline and `steps_per_epoch`): a size
      read too small reads too much gradient noise and sets too small a
      step.

  Attributes:
    history: one ``(learning_rate, eigenvalue)`` per reading (the rate
      set, the eigenvalue read).
    rewinds: the number of times the weights were set back to where the
      calibration began (the readings that found the earlier rate
      unstable).

  Raises:
    TypeError: at `fit`, for an optimizer that is not one of
      `tfp_adaptive.keras.optimizers`, or a learning-rate schedule.
    ValueError: at `fit`, for a sampler with momentum (SGHMC, SGNHT,
      Adam-SGLD, a friction): the rule is derived for Langevin steps.

  Example:
    >>> model.compile(keras.optimizers.Adam(1e-3), loss=loss)
    >>> model.fit(x, y, epochs=20)                     # reach a mode
    >>> model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x)),
    ...               loss=loss)
    >>> collector = tfa.keras.SampleCollector(burnin=3, unit='epoch')
    >>> model.fit(x, y, epochs=40, callbacks=[
    ...     tfa.keras.CurvatureCalibration((x, y), epochs=2), collector])
  """

  def __init__(self, training_data, heat=0.1, epochs=2, batches=16,
               iterations=20, rows=2048, seed=0, batch_size=None):
    super().__init__()
    if training_data is None:
      raise TypeError('`training_data` must be (x, y) or a tf.data.Dataset '
                      'of (x, y). Received: None')
    self.training_data = data_arrays.check_validation_data(training_data,
                                                            'training_data')
    self.heat = validation.check_number('heat', heat, low=0., high=1.,
                                        low_open=True, high_open=True)
    self.epochs = validation.check_int('epochs', epochs, low=0)
    self.batches = validation.check_int('batches', batches, low=2)
    self.iterations = validation.check_int('iterations', iterations, low=1)
    self.rows = validation.check_int('rows', rows, low=1)
    self.seed = validation.check_seed('seed', seed)
    self.batch_size = (None if batch_size is None else
                       validation.check_int('batch_size', batch_size, low=1))
    self.history = []
    self.rewinds = 0
    self._arrays = None
    self._anchor = None

  def on_train_begin(self, logs=None):
    opt = optimizer_base.constant_rate_sampler_of(self.model,
                                                  'CurvatureCalibration')
    if opt.algorithm.has_momentum:
      raise ValueError(
          'CurvatureCalibration sets the step of Langevin samplers; %s has '
          'momentum (its heat per step differs). Use a sampler without '
          'momentum (friction=None), or StepSizeCalibration.'
          % type(opt).__name__)
    if self._arrays is None:
      self._arrays = data_arrays.validation_arrays(self.training_data,
                                                    'training_data')
      if (self.batch_size is None and
          isinstance(self.training_data, tf.data.Dataset)):
        self.batch_size = data_arrays.first_batch_rows(self.training_data)
    opt.build(self.model.trainable_variables)
    # Traced once a `fit`: the minibatch gradient and ``v -> H v`` of U.
    self._gradient = _energy_gradient(self.model, opt)
    self._hessian = _hessian_product(self.model, opt)
    # An adaptive metric is read once it has seen the gradients: after the
    # optimizer's noise-free burn-in (or its first step).
    self._pending_after, self._epoch_reads = None, 0
    self._held_rate = None
    self._anchor = None  # The weights at this fit's first reading.
    if opt.algorithm.preconditioner.is_adaptive:
      self._pending_after = max(opt.burnin, int(opt.iterations) + 1)
      # Until then the steps only fill the metric: at the rate `compile`
      # gave, which is a placeholder, they would move the weights away from
      # the mode where the rule is read (and a warm start's fit with them).
      self._held_rate = float(opt.learning_rate)
      opt.learning_rate = 0.
    else:
      self._read(opt, len(self.history))

  def on_train_batch_end(self, batch, logs=None):
    if (self._pending_after is not None and
        int(self.model.optimizer.iterations) >= self._pending_after):
      self._pending_after, self._held_rate = None, None
      self._read(self.model.optimizer, len(self.history))

  def on_train_end(self, logs=None):
    if self._held_rate is not None:  # `fit` ended before the first reading.
      self.model.optimizer.learning_rate = self._held_rate
      self._held_rate = None

  def on_epoch_end(self, epoch, logs=None):
    if self._pending_after is None and self._epoch_reads < self.epochs:
      self._epoch_reads += 1
      self._read(self.model.optimizer, len(self.history))
    if logs is not None and self.history:
      logs['learning_rate'] = self.history[-1][0]

  def _read(self, opt, salt):
    x, y = self._arrays
    n = len(tf.nest.flatten(x)[0])
    steps = (self.params or {}).get('steps')
    if self.batch_size is not None:
      batch = min(self.batch_size, n)
    else:
      batch = 32 if not steps else int(np.ceil(n / int(np.asarray(steps))))
    # The drift's share of it (`fit` splits each minibatch for the default
    # Γ mode).
    batch = gamma_train_step.drift_rows(opt, batch)
    rng = np.random.default_rng([self.seed, salt])
    pstate, _ = opt.sampler_state()
    chains = opt.chain_ndims  # Each chain read on its own (`Chains`).
    whiten = lambda vs: opt.algorithm.preconditioner.apply_sqrt(pstate, vs,
                                                                chains)

    def take(count):
      rows = np.sort(rng.choice(n, min(count, n), replace=False))
      return (tf.nest.map_structure(lambda a: tf.constant(a[rows]), x),
              tf.constant(y[rows]))
    draws = [whiten(self._gradient(*take(batch)))
             for _ in range(self.batches)]
    mean = [tf.add_n(list(d)) / len(draws) for d in zip(*draws)]
    noise = curvature_lib.noise_covariance_product(
        [[a - m for a, m in zip(d, mean)] for d in draws], chains)
    tau = opt.temperature
    xs, ys = take(self.rows)

    def operator(vector):
      curv = whiten(self._hessian(xs, ys, whiten(vector)))
      return [c + s / tau for c, s in zip(curv, noise(vector))]
    start = [tf.constant(rng.normal(size=v.shape), v.dtype)
             for v in mean]
    value, _ = curvature_lib.top_eigenvalue(operator, start, self.iterations,
                                            chains)
    # One step for all chains: the stiffest chain's.
    value = float(np.max(np.asarray(value)))
    if not np.isfinite(value) or value <= 0.:
      raise ValueError(
          'CurvatureCalibration read a largest curvature of %r: the energy '
          'is not convex near the weights (start at a mode, e.g. after a '
          'few epochs of Adam) or not finite.' % value)
    lr = float(curvature_lib.step_for_heat(value, self.heat))
    parts = _parts(self.model)
    if self._anchor is None:
      self._anchor = [np.array(p.numpy()) for p in parts]
    elif self.history[-1][0] >= curvature_lib.step_for_heat(value, 1.):
      self._rewind(parts, value, lr)
    if self.history:  # The stiffest place read so far bounds the step.
      lr = min(lr, self.history[-1][0])
    opt.learning_rate = lr
    self.history.append((lr, value))

  def _rewind(self, parts, value, lr):
    """Sets the weights back to this fit's first reading: the rate run since was unstable where the chain went."""
    before_rate, before = self.history[-1]
    for p, a in zip(parts, self._anchor):
      p.assign(a)
    self.rewinds += 1
    _LOG.warning(
        'CurvatureCalibration: the largest curvature read now (%.3g) is '
        '%.3g times the one read before (%.3g); the learning rate run since '
        '(%.3g) is beyond its stability limit, so the weights are set back '
        'to where calibration began and the chain goes on at %.3g. A mode '
        'the network fits exactly (training loss near 0) has almost no '
        'curvature until the chain leaves it: a warm start stopped early '
        'on held-out data avoids this.', value, value / before, before,
        before_rate, min(lr, before_rate))


def _parts(model):
  return [optimizer_base.backing_variable(v)
          for v in model.trainable_variables]


def _energy(model, opt, parts, x, y):
  """``U`` estimated from the batch: ``data_size·(loss + prior/N)``."""
  return ensemble_temperature.batch_energy(model, opt, parts, x, y,
                                           float(opt.data_size))


def _energy_gradient(model, opt):
  parts = _parts(model)

  @tf.function(autograph=False, reduce_retracing=True)
  def gradient(x, y):
    with tf.GradientTape() as tape:
      u = _energy(model, opt, parts, x, y)
    return [tf.zeros_like(p) if g is None else g
            for g, p in zip(tape.gradient(u, parts), parts)]
  return gradient


def _hessian_product(model, opt):
  """``(x, y, v) -> H v``, the Hessian of ``U`` on the batch ``(x, y)`` at the weights."""
  parts = _parts(model)

  @tf.function(autograph=False, reduce_retracing=True)
  def product(x, y, vector):
    with tf.GradientTape() as outer:
      with tf.GradientTape() as inner:
        u = _energy(model, opt, parts, x, y)
      grads = inner.gradient(u, parts)
      grads = [tf.zeros_like(p) if g is None else g
               for g, p in zip(grads, parts)]
      along = tf.add_n([tf.reduce_sum(g * v) for g, v in zip(grads, vector)])
    out = outer.gradient(along, parts)
    return [tf.zeros_like(p) if h is None else h for h, p in zip(out, parts)]
  return product
