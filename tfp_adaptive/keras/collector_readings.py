"""What a `SampleCollector` reads of its run besides its samples: its monitor, the regime numbers, the members' reading, one verdict.

The collector decides when to sample; a `CollectorReadings` runs the
collector's monitor (``monitor=``: its own quiet `CollectorThermometer`,
the user's `SamplerMonitor`, or none), reports the regime numbers each
epoch, reads the members on ``training_data`` at the end of `fit`, and
combines the three into the run's `tfp_adaptive.keras.fit_verdict.FitVerdict`.
Everything it asks of the optimizer goes through the optimizer's
statistics slot (`tfp_adaptive.keras.step_statistics`).

- **The monitor.** The collector's own logs the whole model's reading per
  epoch (``temperature_reading``) and judges it after burn-in, at
  ``2·window``, ``4·window``, … epochs and at the end of `fit`, with one
  warning per layer whose reading is off ``τ`` by more than the
  tolerance, naming the factor to change the learning rate by. A run too
  short to read (fewer than 500 steps or 10 epochs after burn-in) is not
  judged; per step it costs two inner products over the weights. A
  user's `SamplerMonitor` given as ``monitor=`` logs per layer as well.
- **The regime numbers** (`tfp_adaptive.diagnostics.regime`) are logged
  every epoch. The temperature judges the bias they predict; without a
  monitor the collector warns once when an epoch after burn-in (and
  after the first) is where they say the sampler is biased, naming the
  parameter to change. A moving average too short for minibatch
  gradients is warned about either way.
- **The members' reading** on ``training_data``: both forms of the
  temperature with exact gradients. The Laplacian form sees the heat of
  the stiff directions that set the predictions, which the per-epoch
  reading averages away; the mean force of each layer and the force along
  the model's outputs at 64 of the rows read whether the members sit
  where the posterior does. A ``drift_ratio`` warning waits for it, since
  it sees the heat that ``drift_ratio`` only bounds (loosely, with
  reshuffled minibatches): the warning is given at the end of `fit`
  unless both forms lie wholly inside the band. A reading too wide to
  vouch for the run, or (with a warning waiting) inside the band but too
  wide to say so, is read again from as many more of the members as it
  needs (up to `SETTLING_MEMBERS`) before anything is said.
"""

import warnings

import numpy as np

from tfp_adaptive import validation
from tfp_adaptive.diagnostics import temperature as temperature_lib
from tfp_adaptive.keras import data_arrays
from tfp_adaptive.keras import ensemble_temperature
from tfp_adaptive.keras import fit_verdict
from tfp_adaptive.keras import monitor as monitor_lib
from tfp_adaptive.keras import optimizer_base
from tfp_adaptive.keras import regime_sums

__all__ = ['CollectorReadings', 'SETTLING_MEMBERS', 'check_monitor']

#: At most this many members are read again when a held ``drift_ratio``
#: warning waits on a reading too imprecise to settle it.
SETTLING_MEMBERS = 4096

_WHO = 'SampleCollector (its members on `training_data`)'

# At most this many readings again.
_READS = 3

# The reading again from this many times the draws its precision asks
# for: the second reading's value differs from the first's.
_MARGIN = 1.5


def check_monitor(monitor, check_temperature=None):
  """The collector's ``monitor=`` checked (``check_temperature=``, its deprecated form, taken with a warning).

  Raises:
    TypeError: `monitor` is not True, False or a `SamplerMonitor`.
  """
  if check_temperature is not None:
    warnings.warn('SampleCollector(check_temperature=...) is deprecated; '
                  'pass monitor=%r.' % bool(check_temperature),
                  DeprecationWarning, stacklevel=3)
    monitor = validation.check_bool('check_temperature', check_temperature)
  if not (isinstance(monitor, bool) or
          isinstance(monitor, monitor_lib.SamplerMonitor)):
    raise TypeError('`monitor` must be True, False or a SamplerMonitor. '
                    'Received: monitor=%r' % (monitor,))
  return monitor


class CollectorReadings(object):
  """A collector's monitor, regime report, members' reading and verdict, over the `fit`s it runs in.

  Args:
    monitor: ``True``, ``False`` or a `SamplerMonitor` (`SampleCollector`'s
      ``monitor``).
    training_data: the data the members are read on at the end of `fit`,
      or `None`.
  """

  def __init__(self, monitor, training_data):
    self.monitor = monitor
    self.training_data = training_data
    self.thermometer = None  # The monitor run in `fit`.
    self.member_readings = None
    self.verdict = None

  @property
  def live(self):
    """The monitor's readings at the end of `fit` (empty without one)."""
    return {} if self.thermometer is None else dict(self.thermometer.readings)

  def begin(self, model, params, burnin_epochs, logs):
    """At the start of `fit`, with a sampler optimizer."""
    opt = model.optimizer
    opt.statistics.track_regime(model)
    opt.statistics.claim_members(self.training_data is not None,
                                 int(np.asarray(opt.iterations)))
    if self.monitor is False:
      return
    self.thermometer = (
        self.monitor if self.monitor is not True else
        monitor_lib.CollectorThermometer(burnin_epochs=burnin_epochs))
    self.thermometer.drive_from_collector()
    self.thermometer.set_model(model)
    self.thermometer.set_params(params)
    self.thermometer.on_train_begin(logs)

  def epoch_begin(self, epoch, logs):
    if self.thermometer is not None:
      self.thermometer.on_epoch_begin(epoch, logs)

  def batch_end(self, batch, logs):
    if self.thermometer is not None:
      self.thermometer.on_train_batch_end(batch, logs)

  def epoch_end(self, model, params, epoch, logs, check):
    """The monitor's epoch, then the regime numbers (judged when `check`)."""
    if self.thermometer is not None:
      self.thermometer.on_epoch_end(epoch, logs)
    opt = model.optimizer
    if isinstance(opt, optimizer_base.SamplerOptimizer) and (
        opt.statistics.regime is not None):
      opt.statistics.regime.report(
          opt, epoch, logs, check=check,
          stochastic=regime_sums.is_stochastic(params))

  def end(self, model, ensemble, logs):
    """At the end of `fit`: the monitor's last judgement, the members' reading (`ensemble`: a callable), the verdict."""
    opt = model.optimizer
    sampler = isinstance(opt, optimizer_base.SamplerOptimizer)
    if sampler:
      opt.statistics.members_read()
    if self.thermometer is not None:
      self.thermometer.on_train_end(logs)
    if self.training_data is not None:
      members = ensemble()
      self._read_members(members, ensemble_temperature.MAX_MEMBERS)
      held = sampler and opt.statistics.regime is not None
      if sampler:
        self._read_more(members, opt.temperature,
                        held and bool(opt.statistics.regime.deferred))
      if self.member_readings is not None:
        ensemble_temperature.warn_members(members, self.member_readings,
                                          who=_WHO)
      if held:
        opt.statistics.regime.settle_deferred(
            self.member_readings, opt.temperature, temperature_lib.TOLERANCE)
    if sampler:
      self.verdict = fit_verdict.combine(
          opt.statistics.regime, self.live.get('temperature'),
          self.member_readings, opt.temperature)
      if (self.verdict.verdict == 'unread' and self.thermometer is not None
          and self.thermometer.shortfall() is not None):
        # (A run read from too few effective draws is told by its monitor.)
        warnings.warn(_unread(self.thermometer, self.training_data))

  def _read_more(self, ensemble, temperature, confirm):
    """Reads the members again from more of them when the reading is too wide to vouch for the run, or (`confirm`: a warning waits on it) lies inside the band but too wide to confirm it."""
    read = ensemble_temperature.MAX_MEMBERS
    tolerance = temperature_lib.TOLERANCE
    # Members closer together than the chain's correlation time add less
    # than their number: read again until the reading suffices or the
    # members run out.
    for _ in range(_READS):
      if self.member_readings is None:
        return
      readings = [self.member_readings[key]
                  for key in ('overall', 'laplacian')]
      needs = [temperature_lib.draws_to_resolve(r, temperature, tolerance)
               for r in readings]
      if confirm:
        confirming = [temperature_lib.draws_to_confirm(r, temperature,
                                                       tolerance)
                      for r in readings]
        if all(np.isfinite(confirming)):
          needs += confirming
      factor = max(needs)
      if not 1. < factor < np.inf:
        return
      done = ensemble_temperature.members_read(ensemble.members, read)
      read = min(int(np.ceil(done * factor * _MARGIN)), SETTLING_MEMBERS,
                 len(ensemble.members))
      if ensemble_temperature.members_read(ensemble.members, read) <= done:
        return
      self._read_members(ensemble, read)

  def _read_members(self, ensemble, max_members):
    """The members' temperatures in both forms on `training_data`, warned on by the kernels' rule."""
    x, y = data_arrays.validation_arrays(self.training_data, 'training_data')
    self.member_readings = None
    try:
      self.member_readings = ensemble_temperature.read_members(
          ensemble, x, y, max_members=max_members, warn=False, who=_WHO)
    except ValueError as e:  # Too few members a chain.
      warnings.warn('SampleCollector: the members\' temperature was not '
                    'read on `training_data`: %s' % e)


def _unread(thermometer, training_data):
  """The warning of a `fit` too short to be read, with the length it needs."""
  steps, epochs, needed = thermometer.shortfall()
  members = ('' if training_data is not None else
             ', or pass `training_data=(x, y)` to have the members read')
  return ('SampleCollector: this run was too short to tell whether its '
          'members are samples of the posterior; they are returned '
          'unchecked: the temperature is read over at least %d steps and %d '
          'epochs after burn-in, and it ran %d steps in %d epochs after '
          'burn-in: run `fit` for at least %d epochs in all%s.'
          % (thermometer.min_steps, 2 * thermometer.window, steps, epochs,
             needed, members))
