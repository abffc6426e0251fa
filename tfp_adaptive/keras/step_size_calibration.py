"""`StepSizeCalibration`: the learning rate set from the regime numbers of the first epochs."""

import numpy as np
import keras

from tfp_adaptive import validation
from tfp_adaptive.diagnostics import regime as regime_lib
from tfp_adaptive.keras import optimizer_base

__all__ = ['StepSizeCalibration']


class StepSizeCalibration(keras.callbacks.Callback):
  """Sets the learning rate from the run: ``drift_ratio`` brought to `target` during the first `epochs`.

  ``drift_ratio`` (`tfp_adaptive.diagnostics.regime`) is proportional to the
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
    opt.statistics.track_regime(self.model)

  def on_epoch_end(self, epoch, logs=None):
    opt = self.model.optimizer
    if self._seen >= self.epochs:
      return
    regime = opt.statistics.regime.epoch_regime(opt, epoch)
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
