"""The regime numbers of a Keras run (in-graph sums of the optimizer's step norms, read per epoch) and the learning rate set from them.

`SampleCollector` and `SamplerMonitor` attach one `RegimeState` to the
optimizer (`attach`); every step then adds the squared lengths of its drift,
Γ and noise pieces (`tfp_adaptive.core.algorithms.StepNorms`, three sums
that XLA fuses into the step's own pass). Once per epoch the callbacks log
the epoch's ``drift_ratio``, ``gamma_ratio`` and ``lag``
(`tfp_adaptive.core.regime`) and, once per run, warn when a post-burn-in
epoch is outside the regime, naming the parameter to change.
"""

import warnings

import numpy as np
import tensorflow as tf
import keras

from tfp_adaptive import validation
from tfp_adaptive.core import regime as regime_lib
from tfp_adaptive.core import temperature as temperature_lib
from tfp_adaptive.keras import optimizer_base

__all__ = ['RegimeState', 'StepSizeCalibration', 'attach', 'is_stochastic']


class RegimeState(object):
  """Sums of the step norms since the last epoch read (plain TF variables).

  Outside the optimizer's own variables, so checkpoints and saved
  optimizers do not depend on it.
  """

  def __init__(self):
    self.sums = tf.Variable(tf.zeros([4], tf.float64), trainable=False)
    self.count = tf.Variable(tf.constant(0., tf.float64), trainable=False)
    self.warned = False
    # `drift_ratio`'s warnings held for the members' reading at the end of
    # `fit` (`SampleCollector(training_data=...)`, `settle_deferred`).
    self.deferred = []
    self._epoch, self._regime, self._sums = None, None, None
    self._checked = None  # Sums and count of the epochs checked so far.

  def accumulate(self, norms, ok):
    """Adds one step's `StepNorms`; a skipped step (`ok` false) adds nothing."""
    w = tf.cast(ok, tf.float64)
    self.sums.assign_add(w * tf.cast(tf.stack(list(norms)), tf.float64))
    self.count.assign_add(w)

  def epoch_regime(self, optimizer, epoch):
    """The `Regime` of epoch `epoch` (read once, then cached), or `None`."""
    if self._epoch != epoch:
      sums, count = self.sums.numpy(), float(self.count.numpy())
      self.sums.assign(tf.zeros_like(self.sums))
      self.count.assign(0.)
      self._epoch, self._sums = epoch, (sums, count)
      self._regime = None if count == 0 else self._numbers(optimizer, sums,
                                                           count)
    return self._regime

  @staticmethod
  def _numbers(optimizer, sums, count):
    return regime_lib.numbers(sums / count, optimizer.preconditioner,
                              gradient_scale=optimizer.data_size,
                              with_gamma=optimizer.algorithm.tracks_metric_with_gamma(
                                  optimizer.gamma))

  def report(self, optimizer, epoch, logs, check, stochastic):
    """Logs the epoch's numbers; if `check`, warns once per run when outside.

    The check uses the means over all checked epochs so far (an epoch's
    own numbers are noisy), from the second checked epoch on.

    Args:
      optimizer: the `SamplerOptimizer`.
      epoch: the epoch just finished.
      logs: the epoch's logs dict (or `None`).
      check: whether this epoch counts (after burn-in).
      stochastic: whether the gradients are minibatch estimates.
    """
    regime = self.epoch_regime(optimizer, epoch)
    if regime is None:
      return
    if logs is not None:
      for key, value in regime._asdict().items():
        logs[key] = float(value)
    if not check or self.warned:
      return
    sums, count = self._sums
    if self._checked is None:
      self._checked = [np.zeros_like(sums), 0., set()]
    if epoch not in self._checked[2]:  # Collector and monitor both report.
      self._checked[0] = self._checked[0] + sums
      self._checked[1] += count
      self._checked[2].add(epoch)
    if len(self._checked[2]) < 2:
      return
    regime = self._numbers(optimizer, self._checked[0], self._checked[1])
    # With a thermometer reading this fit (`SamplerMonitor`, or the
    # collector's own), the temperature judges the bias that the regime
    # numbers only predict. With reshuffled minibatches it subtracts the
    # step's own heating, and `drift_ratio` stays the judge of the step.
    owner = optimizer.monitor_owner
    # Keras' epochs deal their batches without replacement unless a
    # monitor was told otherwise (`batches='independent'`).
    shuffled = owner is None or not owner.sees_step_heating()
    args = (regime, optimizer.hyperparameter_names, 'learning_rate',
            optimizer.preconditioner, stochastic)
    options = dict(estimates=owner is None,
                   without_replacement=stochastic and shuffled)
    # `drift_ratio` bounds the heat (loosely, with reshuffled minibatches):
    # when the members are read with exact gradients at the end of `fit`,
    # its warning waits for their reading, which can rule the heat out.
    now = regime_lib.advice(
        *args, step_estimate=shuffled and optimizer.members_read_at is None,
        **options)
    every = regime_lib.advice(*args, step_estimate=shuffled, **options)
    named = lambda message: '%s (epoch %d): %s' % (
        type(optimizer).__name__, epoch + 1, message)
    self.deferred.extend(named(m) for m in every if m not in now)
    for message in now:
      warnings.warn(named(message))
    self.warned = bool(every)

  def settle_deferred(self, readings, temperature=None, tolerance=None):
    """Warns the held `drift_ratio` messages unless `readings` (the members' ``'overall'`` and ``'laplacian'``, or `None`) confirm `temperature` within ``1 ± tolerance``."""
    held, self.deferred = self.deferred, []
    if readings is not None and all(
        temperature_lib.confirms(readings[key], temperature, tolerance)
        for key in ('overall', 'laplacian')):
      return
    for message in held:
      warnings.warn(message + (
          '' if readings is None else
          ' The members\' reading on `training_data` does not rule that '
          'heat out (%.3g ± %.2g, Laplacian form %.3g ± %.2g).' % (
              readings['overall'].temperature,
              readings['overall'].standard_error,
              readings['laplacian'].temperature,
              readings['laplacian'].standard_error)))


def attach(optimizer, model):
  """The optimizer's `RegimeState`, created (and `fit`'s step retraced) if missing."""
  if optimizer.regime_state is None:
    optimizer.regime_state = RegimeState()
    model.make_train_function(force=True)
  return optimizer.regime_state


def claim_members(optimizer, reads):
  """At a `fit`'s start, whether its members are read on the training data.

  Called by `SampleCollector` (`reads`: it has `training_data`) and by
  `SamplerMonitor` (`reads=None`: it keeps a claim made at this step by the
  collector of the same `fit`). A claim made at another step belongs to a
  `fit` that ended without `on_train_end` (an exception): it is dropped,
  and the `drift_ratio` warnings that fit held for its members are given.
  """
  now = int(np.asarray(optimizer.iterations))
  if reads is None and optimizer.members_read_at == now:
    return
  optimizer.members_read_at = now if reads else None
  if optimizer.regime_state is not None:
    optimizer.regime_state.settle_deferred(None)


def is_stochastic(params):
  """Whether `fit` runs more than one batch per epoch (minibatch gradients)."""
  steps = (params or {}).get('steps')
  return steps is None or int(np.asarray(steps)) > 1


class StepSizeCalibration(keras.callbacks.Callback):
  """Sets the learning rate from the run: ``drift_ratio`` brought to `target` during the first `epochs`.

  ``drift_ratio`` (`tfp_adaptive.core.regime`) is proportional to the
  learning rate: the step's drift over its noise, ``h·M·(κ + s²)/4τ`` for
  curvature ``κ`` and minibatch gradient variance ``s²``. At the end of
  each of its first `epochs` epochs with noise (an optimizer's noise-free
  `burnin` does not count) this callback multiplies the learning rate by
  ``f = target / drift_ratio`` of that epoch (at most by `max_factor`
  either way; by ``sqrt(f)`` when ``f`` is within a factor 2 of 1, which
  damps the epoch-to-epoch noise of the ratio), then leaves it fixed. Learning rates thus transfer between
  models: the step that matters is ``lr·M``, and ``M`` depends on the
  model. Keep the calibration epochs inside the collector's burn-in (the
  samples come from one step size).

  Args:
    epochs: int >= 1, epochs during which the learning rate is adjusted.
    target: the ``drift_ratio`` aimed at, in (0, 0.02]; default half the
      tolerance, 0.01.
    max_factor: > 1, the largest change per epoch.

  Example:
    >>> model.fit(x, y, epochs=60, callbacks=[
    ...     tfa.keras.StepSizeCalibration(epochs=5),
    ...     tfa.keras.SampleCollector(burnin=10, unit='epoch')])
  """

  def __init__(self, epochs=5, target=None, max_factor=10.):
    super().__init__()
    self.epochs = validation.check_int('epochs', epochs)
    limit = regime_lib.TOLERANCES['drift_ratio']
    self.target = (limit / 2. if target is None else validation.check_number(
        'target', target, low=0., high=limit, low_open=True))
    self.max_factor = validation.check_number('max_factor', max_factor,
                                              low=1., low_open=True)
    self.history = []
    self._seen = 0

  def on_train_begin(self, logs=None):
    opt = optimizer_base.constant_rate_sampler_of(self.model,
                                                  'StepSizeCalibration')
    attach(opt, self.model)

  def on_epoch_end(self, epoch, logs=None):
    opt = self.model.optimizer
    if self._seen >= self.epochs:
      return
    regime = opt.regime_state.epoch_regime(opt, epoch)
    lr = float(np.asarray(opt.learning_rate))
    if regime is not None and float(regime.drift_ratio) > 0:
      self._seen += 1
      factor = self.target / float(regime.drift_ratio)
      if 0.5 < factor < 2.:
        factor = factor ** 0.5
      lr *= float(np.clip(factor, 1. / self.max_factor, self.max_factor))
      opt.learning_rate = lr
    self.history.append(lr)
    if logs is not None:
      logs['learning_rate'] = lr
