"""`SamplerMonitor`: live health checks of an SG-MCMC run in `fit`, per epoch and per layer.

The check that matters is the **configurational temperature**
(`tfp_adaptive.diagnostics.temperature`): for any density ``π ∝ exp(−U/τ)`` that
vanishes fast enough at infinity and every constant vector ``c``,
``E_π[(θ − c)·∇U(θ)] = τ · D``, per layer as well as overall, so
``T = ⟨(θ − c)·∇U⟩ / D`` read along the chain must be ``τ``. The estimate
uses the minibatch gradient the optimizer already has (``∇U = N·g``,
unbiased given ``θ``, so no correction for the gradient noise is needed)
and averages it over each epoch's steps. The centre ``c`` is the mean of
``θ`` over the epochs from the second half of burn-in on, moved during
burn-in and then only after ``window``, ``2·window``, ``4·window``, …
epochs: each block of epochs is centred on the epochs before it. That
keeps ``c`` in the bulk of the chain, so the variance of ``(θ − c)·∇U``
stays small even for a posterior far narrower than its distance from the
origin, while ``c`` hardly depends on the states it centres. With Keras'
reshuffled minibatches the raw average is biased upwards, and the monitor
subtracts an estimate (`SamplerMonitor`'s ``batches``). That estimate
holds while the step is small against the posterior's scales; on a hot
run it takes the heat out with the bias. So each epoch's first step,
whose batch is a fresh draw independent of the weights, is also read on
its own, against the mean of those states: unbiased, with wider errors.
When it reads higher than the every-step reading by more than three
combined standard errors, it is the reading judged
(`tfp_adaptive.diagnostics.temperature.unless_refuted`). Per step it costs a
sum and two dot products over the weights, and on each epoch's first
step one more: no extra gradient, and the step's own drift (``M∇û``)
serves the reshuffling term.

The per-epoch readings after burn-in are judged as the kernels' are
(`tfp_adaptive.diagnostics.temperature.verdict`): a standard error from their
effective sample size, a stationarity test between the two halves, and a
warning only when the interval lies wholly outside ``τ(1 ± tolerance)``,
naming the layer and the factor to lower the learning rate by.

Also logged per epoch: the non-finite step count, the regime numbers
``drift_ratio``, ``gamma_ratio`` and ``lag`` (`tfp_adaptive.diagnostics.regime`;
docs, guide "Step sizes and regimes"), and for diagonal metrics (pSGLD,
Adam-SGLD) the metric's condition number ``max M / min M``.
"""

import collections

import numpy as np
import keras

from tfp_adaptive import validation
from tfp_adaptive.core import preconditioners
from tfp_adaptive.diagnostics import advice as advice_lib
from tfp_adaptive.diagnostics import temperature as temperature_lib
from tfp_adaptive.diagnostics import temperature_advice
from tfp_adaptive.keras import data_arrays
from tfp_adaptive.keras import likelihoods
from tfp_adaptive.keras import optimizer_base
from tfp_adaptive.keras import regime_sums as regime
from tfp_adaptive.keras import running_ensemble
from tfp_adaptive.keras import step_statistics

__all__ = ['CollectorThermometer', 'MonitorState', 'SamplerMonitor']

# The in-graph sums, under their older name.
MonitorState = step_statistics.VirialSums


class SamplerMonitor(keras.callbacks.Callback):
  """Logs the configurational temperature per layer, and warns when a run is off its target.

  Args:
    burnin_epochs: epochs before the temperature is judged against ``τ``
      (it is logged from the second epoch on, the first epoch providing
      the centre).
    window: the first judgement waits for ``2·window`` epochs after
      burn-in; later ones come at ``4·window``, ``8·window``, … epochs and
      at the end of `fit`, each over all epochs since burn-in.
    tolerance: relative deviation from ``τ`` that is always tolerated,
      default 0.1 (the temperature of sds 5% off).
    min_steps: optimizer steps after burn-in before the temperature is
      judged.
    validation_data: optional ``(x, y)`` or a `tf.data.Dataset` of pairs;
      the model at each epoch end joins a running ensemble scored as
      ``val_monitor_log_likelihood``.
    batches: how each step's batch is drawn. ``'shuffled'`` (the default
      when an epoch has more than one step: Keras' epochs, each a
      reshuffled pass without replacement) or ``'independent'`` (full
      batches, or draws with replacement). Within a pass, a step's batch
      is anti-correlated with the batches that moved the weights before
      it, which raises ``⟨(θ − c)·∇Û⟩`` by about ``(h/4)·E[e·M e]/D`` for
      minibatch noise ``e``; with ``'shuffled'`` that is subtracted,
      estimated by ``(h/4)·E[∇Û·M∇Û]/D``. The estimate also removes the
      step's own Euler heating, ``(h/4)·τ·tr(M∇²U)/D``, so with
      ``'shuffled'`` the reading omits that part, which `drift_ratio`
      bounds. With ``'shuffled'`` each epoch's first step is also read
      alone, a fresh batch whatever the step (assuming each epoch starts
      a pass, as Keras' epochs over arrays, or over a dataset reshuffled
      each iteration, do), and replaces the every-step reading where it
      reads it too cold (a hot run: the estimate took its heat out).

  Logged (progress bar and history): the reading as
  ``temperature_reading`` and ``temperature_reading/<layer>`` (and, for one
  more release, under the deprecated ``temperature`` and
  ``temperature/<layer>``: ``temperature`` is ``τ``), ``num_nonfinite``,
  ``drift_ratio``, ``gamma_ratio``, ``lag``, and for diagonal metrics
  ``metric_condition``. `readings` holds the last judgement's
  `tfp_adaptive.diagnostics.temperature.Reading` per key (``'temperature'``
  for the whole model, ``'temperature/<layer>'`` per layer).

  One monitor reads a `fit`: with a `SampleCollector`, give it to the
  collector (which runs it and reports the regime numbers); a second
  monitor in the same `fit` is a `ValueError` that says so.

  Example:
    >>> collector = tfa.keras.SampleCollector(
    ...     monitor=tfa.keras.SamplerMonitor())
    >>> model.fit(x, y, callbacks=[collector])
    >>> model.fit(x, y, callbacks=[tfa.keras.SamplerMonitor()])  # Alone.
  """

  def __init__(self, burnin_epochs=2, window=5, tolerance=0.1,
               min_steps=500, validation_data=None, batches=None):
    super().__init__()
    self.burnin_epochs = validation.check_int('burnin_epochs', burnin_epochs,
                                              low=0)
    self.window = validation.check_int('window', window, low=2)
    self.tolerance = validation.check_number('tolerance', tolerance, low=0.,
                                             low_open=True)
    self.min_steps = validation.check_int('min_steps', min_steps, low=1)
    self.validation_data = data_arrays.check_validation_data(validation_data)
    if batches is not None:
      validation.check_choice('batches', batches, ('shuffled', 'independent'))
    self.batches = batches
    self.temperatures = collections.defaultdict(list)
    # Each epoch's first step alone (`None` where not read).
    self.first_temperatures = collections.defaultdict(list)
    self.readings = {}
    self._warned = set()
    self._state = None
    self._epochs = 0
    self._steps = []
    self._scores = None  # The `RunningEnsemble` of `validation_data`.

  # A `CollectorThermometer` logs the overall reading only and warns in
  # the collector's name.
  _quiet = False
  _name = 'SamplerMonitor'
  # Whether a `SampleCollector` drives this monitor (`monitor=`): then the
  # collector reports the regime numbers and the members' claim.
  _driven = False

  def drive_from_collector(self):
    """Called by the `SampleCollector` given this monitor: it runs the monitor's hooks and reports the regime numbers itself."""
    self._driven = True

  def _owns(self, opt):
    return opt.statistics.reader is self

  def on_train_begin(self, logs=None):
    opt = optimizer_base.sampler_of(self.model, self._name)
    now = int(np.asarray(opt.iterations))
    if not self._driven:
      opt.statistics.claim_members(None, now)
    opt.statistics.claim_virials(self, now, _SECOND_MONITOR % self._name)
    self._state = None
    if self.validation_data is not None and self._scores is None:
      self._scores = running_ensemble.RunningEnsemble(
          self.validation_data,
          likelihoods.resolve_likelihood(self.model, None, None, None))
    if not self.model.trainable_variables:
      return  # A subclassed model builds in its first step: start after it.
    self._start(opt)

  def on_train_batch_end(self, batch, logs=None):
    opt = self.model.optimizer
    if self._state is None and self._owns(opt):
      self._start(opt)

  def _start(self, opt):
    """The in-graph sums and the layers, once the model has its variables."""
    if not opt.built:
      opt.build(self.model.trainable_variables)
    self._variables = list(opt._trainable_variables)  # pylint: disable=protected-access  # The optimizer's order.
    self._state = opt.statistics.track_virials(self.model, self._variables)
    opt.statistics.track_regime(self.model)
    self._layers = collections.OrderedDict()
    for k, v in enumerate(self._variables):
      parts = v.path.split('/')
      self._layers.setdefault(parts[-2] if len(parts) > 1 else parts[0],
                              []).append(k)

  def on_epoch_end(self, epoch, logs=None):
    logs = logs if logs is not None else {}
    opt = self.model.optimizer
    if not self._owns(opt) or self._state is None:
      return
    # The centre: the mean of the epochs from the second half of burn-in
    # on, moved during burn-in and then only after `window`, 2·window,
    # 4·window, … epochs since. Each block of epochs is thus centred on the
    # mean of the epochs before it, at least as many as its own: close to
    # the chain's mean, and hardly correlated with the states it centres (a
    # centre taken from those same states would bias the reading by about
    # 1/ESS).
    self._epochs += 1
    since = self._epochs - self.burnin_epochs
    (dots, reshuffle, count), (first_dots, first) = (
        self._state.read_and_reset(
            move_center=since <= 0 or self._epochs == 1 or
            _block_end(since, self.window)))
    if not self.sees_step_heating():
      dots = dots - reshuffle
    if 2 * self._epochs < self.burnin_epochs:
      self._state.restart_mean()
    logs['num_nonfinite'] = int(opt.num_nonfinite.numpy())
    if self._epochs > 1 and count > 0:
      self._steps.append(count)
      temps = self._per_layer(dots, count)
      for key, value in temps.items():
        if key == 'temperature' or not self._quiet:
          logs[key.replace('temperature', READING, 1)] = float(value)
          logs[key] = float(value)  # The deprecated name (`READING`).
        self.temperatures[key].append(float(value))
      firsts = self._per_layer(first_dots, first) if first else {}
      for key in temps:
        self.first_temperatures[key].append(firsts.get(key))
      if _due(self._epochs - self.burnin_epochs - 1, self.window):
        self._judge(opt, final=False)
    if not self._quiet:  # The collector logs these itself.
      self._metric_logs(opt, logs)
    if not self._driven:  # The collector reports these itself.
      opt.statistics.regime.report(
          opt, epoch, logs, check=self._epochs > max(self.burnin_epochs, 1),
          stochastic=regime.is_stochastic(self.params))
    if self.validation_data is not None:
      self._scores.add(self.model)
      logs['val_monitor_log_likelihood'] = self._scores.metrics()[
          'log_likelihood']

  def _per_layer(self, dots, count):
    """``{key: temperature}`` of an epoch's summed dots over `count` steps, overall and per layer."""
    sizes = self._state.sizes
    temps = {'temperature': dots.sum() / (count * sizes.sum())}
    for layer, ks in self._layers.items():
      temps['temperature/' + layer] = dots[ks].sum() / (count * sizes[ks].sum())
    return temps

  def on_epoch_begin(self, epoch, logs=None):
    opt = self.model.optimizer
    if self._owns(opt) and self._state is not None:
      # Reshuffled epochs: the epoch's first step, a fresh batch, is read
      # besides (`_judge`).
      self._state.fresh.assign(not self.sees_step_heating())

  def sees_step_heating(self):
    """Whether the reading includes the step's own heating (``batches='independent'``).

    With ``'shuffled'`` the reshuffling term subtracts it, and a step too
    large for its target is judged by ``drift_ratio`` instead.
    """
    batches = self.batches or ('shuffled' if regime.is_stochastic(self.params)
                               else 'independent')
    return batches == 'independent'

  def on_train_end(self, logs=None):
    if self.model is None:
      return
    opt = self.model.optimizer
    if self._state is not None and self._owns(opt):
      self._judge(opt, final=True)
    opt.statistics.release(self)
    self._driven = False  # A collector drives it again at its next `fit`.

  def shortfall(self):
    """`None` when `fit` ran long enough to be judged, else ``(steps, epochs, epochs_needed)``.

    ``steps`` and ``epochs``: what the run read after burn-in;
    ``epochs_needed``: the epochs of a `fit` (burn-in included) that
    reach `min_steps` steps and ``2·window`` epochs after it at this
    run's steps per epoch.
    """
    first = max(self.burnin_epochs - 1, 0)
    steps, epochs = sum(self._steps[first:]), max(len(self._steps) - first, 0)
    if steps >= self.min_steps and epochs >= 2 * self.window:
      return None
    per_epoch = max(self._steps or [(self.params or {}).get('steps') or 1])
    after = max(2 * self.window, -(-self.min_steps // per_epoch))
    return steps, epochs, 1 + first + after

  def _judge(self, opt, final):
    """Reads every key over the epochs since burn-in; warns once per key that is off.

    A reading that has not settled is only reported at the end of `fit`
    (before that, the chain may still be on its way), and once: when the
    whole model has not settled, its layers are not reported besides.
    Before the end, layers are judged only once the whole model's reading
    has enough effective draws and has settled: a layer can look settled
    within a run whose slower layers are still moving, and its advice
    would then be about the transient.
    """
    first = max(self.burnin_epochs - 1, 0)
    if (sum(self._steps[first:]) < self.min_steps or
        len(self._steps) - first < 2 * self.window):
      return
    tau = opt.temperature
    for key, values in self.temperatures.items():
      self.readings[key] = temperature_lib.read(values[first:], 1)
      fresh = [v for v in self.first_temperatures[key][first:]
               if v is not None]
      if len(fresh) >= 2 * self.window:
        self.readings[key] = temperature_lib.unless_refuted(
            self.readings[key], temperature_lib.read(fresh, 1))
    where = lambda key: ('the whole model' if key == 'temperature' else
                         'layer %r' % key.split('/', 1)[1])
    messages = temperature_advice.advice_per_part(
        self.readings, 'temperature', where, tau, 'learning_rate',
        opt.algorithm.adapts_throughout, opt.gamma, self.tolerance, final,
        burnin_share=sum(self._steps[:first]) / max(sum(self._steps[first:]),
                                                    1))
    for key, message in messages.items():
      if key not in self._warned:
        self._warned.add(key)
        advice_lib.warn(message, self._name)

  def _metric_logs(self, opt, logs):
    pre = opt.preconditioner
    if not isinstance(pre, preconditioners.RMSprop):
      return
    pstate, _ = opt.sampler_state()
    diag = [np.asarray(d) for d in pre.diagonal(pstate)]
    largest = max(float(d.max()) for d in diag)
    smallest = min(float(d.min()) for d in diag)
    logs['metric_condition'] = largest / smallest


def _block_end(since, window):
  """Whether `since` epochs after burn-in is ``window``, ``2·window``, ``4·window``, …"""
  blocks, rest = divmod(since, window)
  return since > 0 and rest == 0 and blocks & (blocks - 1) == 0


def _due(since, window):
  """Whether `since` epochs after burn-in is ``2·window``, ``4·window``, ``8·window``, …"""
  return since >= 2 * window and _block_end(since, window)


class CollectorThermometer(SamplerMonitor):
  """`SampleCollector`'s own monitor (``monitor=True``): judged as a `SamplerMonitor`, quieter.

  It logs the overall reading only (no layers, no metric condition) and
  warns as ``SampleCollector``.
  """

  _quiet = True
  _name = 'SampleCollector'


#: The history key of the configurational temperature's reading (and
#: ``READING + '/<layer>'`` per layer). The key ``'temperature'`` (and
#: ``'temperature/<layer>'``) is logged besides for one release: it is
#: deprecated, as ``temperature`` names ``τ``.
READING = 'temperature_reading'

_SECOND_MONITOR = (
    '%s: another monitor already reads the temperature of this fit (a '
    'SampleCollector reads it by default). Pass your monitor to the '
    'collector, SampleCollector(monitor=SamplerMonitor(...)), and not to '
    '`callbacks` besides; or construct the collector with monitor=False.')
