"""The running ensemble of a `fit`, scored on validation data: every state offered joins its predictive, none is kept."""

from tfp_adaptive.keras import chains as chains_lib
from tfp_adaptive.keras import data_arrays
from tfp_adaptive.keras import members as members_lib
from tfp_adaptive.keras import predictive

__all__ = ['RunningEnsemble']


class RunningEnsemble(object):
  """The weighted mean predictive of the model states offered, on ``(x, y)`` validation data.

  `SampleCollector` offers every sample it takes (its
  ``val_ensemble_*`` logs), `SamplerMonitor` the model at every epoch end
  (``val_monitor_log_likelihood``). Only the predictive's running sums are
  held, not the states.

  Args:
    validation_data: ``(x, y)`` or a `tf.data.Dataset` of pairs.
    likelihood: the `tfp_adaptive.keras.likelihoods.Likelihood` of the
      model's outputs.
  """

  def __init__(self, validation_data, likelihood):
    self.x, self.y = data_arrays.validation_arrays(validation_data)
    self.likelihood = likelihood
    self._predictive = None

  def add(self, model, weight=1.):
    """Adds `model` as it is now; returns the share of points whose predictive mean is off the targets' range (regression)."""
    if self._predictive is None:
      self._predictive = predictive.Predictive(self.likelihood, self.y)
    outputs = members_lib.outputs(model, self.x)
    off = 0.
    for out in chains_lib.per_chain(model, outputs):
      self._predictive.add(weight, out)
      if self._predictive.off_range:
        off = max(off, self._predictive.off_range[-1])
    return off

  def metrics(self):
    """The ensemble's metrics so far (`Predictive.metrics`), or `None` before the first state."""
    return None if self._predictive is None else self._predictive.metrics()

  def get_state(self):
    """``(total weight, {field: array})``, for a checkpoint."""
    if self._predictive is None:
      return 0., {}
    return self._predictive.get_state()

  def set_state(self, weight, arrays):
    self._predictive = predictive.Predictive(self.likelihood, self.y)
    self._predictive.set_state(weight, arrays)
