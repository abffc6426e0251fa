"""The regime numbers of a Keras run: in-graph sums of the optimizer's step norms, read per epoch.

The optimizer holds one `RegimeState` once a callback asks for it
(`StepStatistics.track_regime`); every step then adds the squared lengths of its drift,
Γ and noise pieces (`tfp_adaptive.core.algorithms.StepNorms`, three sums
that XLA fuses into the step's own pass). Once per epoch the callbacks log
the epoch's ``drift_ratio``, ``gamma_ratio`` and ``lag``
(`tfp_adaptive.diagnostics.regime`) and, once per run, warn when a post-burn-in
epoch is outside the regime, naming the parameter to change.
`tfp_adaptive.keras.step_size_calibration` sets the learning rate from
them.
"""

import numpy as np
import tensorflow as tf

from tfp_adaptive.diagnostics import advice as advice_lib
from tfp_adaptive.diagnostics import regime as regime_lib
from tfp_adaptive.diagnostics import temperature as temperature_lib
from tfp_adaptive.keras import epoch_reads

__all__ = ['RegimeState', 'is_stochastic']


class RegimeState(object):
  """Sums of the step norms since the last epoch read (plain TF variables).

  Outside the optimizer's own variables, so checkpoints and saved
  optimizers do not depend on it.
  """

  def __init__(self):
    self.sums = tf.Variable(tf.zeros([4], tf.float64), trainable=False)
    self.count = tf.Variable(tf.constant(0., tf.float64), trainable=False)
    self._reader = epoch_reads.Reader([self.sums, self.count])
    self.warned = False
    # Whether the numbers were checked after burn-in, and whether a warning
    # that they are outside the regime was given (`FitVerdict`).
    self.checked = False
    self.outside = False
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
      sums, count = self._reader.take()
      count = float(count)
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
    self.checked = True
    regime = self._numbers(optimizer, self._checked[0], self._checked[1])
    # With a thermometer reading this fit (`SamplerMonitor`, or the
    # collector's own), the temperature judges the bias that the regime
    # numbers only predict. With reshuffled minibatches it subtracts the
    # step's own heating, and `drift_ratio` stays the judge of the step.
    owner = optimizer.statistics.reader
    # Keras' epochs deal their batches without replacement unless a
    # monitor was told otherwise (`batches='independent'`).
    shuffled = owner is None or not owner.sees_step_heating()
    args = (regime, optimizer.hyperparameter_names, 'learning_rate',
            optimizer.preconditioner, stochastic)
    options = dict(estimates=owner is None,
                   without_replacement=stochastic and shuffled,
                   gamma=optimizer.gamma)
    # `drift_ratio` bounds the heat (loosely, with reshuffled minibatches):
    # when the members are read with exact gradients at the end of `fit`,
    # its warning waits for their reading, which can rule the heat out.
    now = regime_lib.advice(
        *args, step_estimate=(shuffled and
                       optimizer.statistics.members_read_at is None),
        **options)
    every = regime_lib.advice(*args, step_estimate=shuffled, **options)
    named = lambda message: advice_lib.named('%s (epoch %d)' % (
        type(optimizer).__name__, epoch + 1), message)
    self.deferred.extend(named(m) for m in every if m not in now)
    for message in now:
      advice_lib.warn(named(message))
    self.outside = self.outside or bool(now)
    self.warned = bool(every)

  def settle_deferred(self, readings, temperature=None, tolerance=None):
    """Warns the held `drift_ratio` messages unless `readings` (the members' ``'overall'`` and ``'laplacian'``, or `None`) confirm `temperature` within ``1 ± tolerance``."""
    held, self.deferred = self.deferred, []
    if readings is not None and all(
        temperature_lib.confirms(readings[key], temperature, tolerance)
        for key in ('overall', 'laplacian')):
      return
    self.outside = self.outside or bool(held)
    for message in held:
      advice_lib.warn(advice_lib.Advice(message + (
          '' if readings is None else
          ' The members\' reading on `training_data` does not rule that '
          'heat out (%.3g ± %.2g, Laplacian form %.3g ± %.2g).' % (
              readings['overall'].temperature,
              readings['overall'].standard_error,
              readings['laplacian'].temperature,
              readings['laplacian'].standard_error)),
                                        advice_lib.changes_of(message)))


def is_stochastic(params):
  """Whether `fit` runs more than one batch per epoch (minibatch gradients)."""
  steps = (params or {}).get('steps')
  return steps is None or int(np.asarray(steps)) > 1
