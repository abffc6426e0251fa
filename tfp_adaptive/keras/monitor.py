"""`SamplerMonitor`: live health checks of an SG-MCMC run in `fit`, per epoch and per layer.

The check that matters is the **configurational temperature**
(`tfp_adaptive.core.temperature`): for any density ``π ∝ exp(−U/τ)`` that
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
(`tfp_adaptive.core.temperature.unless_refuted`). Per step it costs a
sum and two dot products over the weights, and on each epoch's first
step one more: no extra gradient, and the step's own drift (``M∇û``)
serves the reshuffling term.

The per-epoch readings after burn-in are judged as the kernels' are
(`tfp_adaptive.core.temperature.verdict`): a standard error from their
effective sample size, a stationarity test between the two halves, and a
warning only when the interval lies wholly outside ``τ(1 ± tolerance)``,
naming the layer and the factor to lower the learning rate by.

Also logged per epoch: the non-finite step count, the regime numbers
``drift_ratio``, ``gamma_ratio`` and ``lag`` (`tfp_adaptive.core.regime`;
docs, guide "Step sizes and regimes"), and for diagonal metrics (pSGLD,
Adam-SGLD) the metric's condition number ``max M / min M``.
"""

import collections
import warnings

import numpy as np
import tensorflow as tf
import keras

from tfp_adaptive import validation
from tfp_adaptive.core import preconditioners
from tfp_adaptive.core import temperature as temperature_lib
from tfp_adaptive.core import tensors
from tfp_adaptive.keras import ensemble as ensemble_lib
from tfp_adaptive.keras import optimizer_base
from tfp_adaptive.keras import predictive
from tfp_adaptive.keras import regime

__all__ = ['MonitorState', 'SamplerMonitor']


class _Virials(object):
  """One series of virials: ``Σ (θ_t − c)·∇U_t`` per variable over the steps it reads in an epoch, and the running mean of those states that gives ``c``."""

  def __init__(self, variables):
    self.center = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False)
                   for v in variables]
    self.theta_sum = [tf.Variable(tf.zeros(v.shape, v.dtype),
                                  trainable=False) for v in variables]
    self.dots = tf.Variable(tf.zeros([len(variables)], tf.float64),
                            trainable=False)
    self.count = tf.Variable(tf.constant(0., tf.float64), trainable=False)
    self.total = 0.  # Steps in `theta_sum` (host side).

  def add(self, parts, target_grads, ok, index):
    zero = tf.constant(0., tf.float64)
    dots = [zero] * len(self.center)
    for i in index:
      w = tf.cast(ok, parts[i].dtype)
      centred = parts[i] - tf.convert_to_tensor(self.center[i])
      dots[i] = -tf.cast(tensors.part_event_dot(centred, target_grads[i], 0)
                         * w, tf.float64)
      self.theta_sum[i].assign_add(w * parts[i])
    self.dots.assign_add(tf.stack(dots))
    self.count.assign_add(tf.cast(ok, tf.float64))

  def read_and_reset(self, move_center):
    """``(Σ dots per variable, steps)`` of the epoch; with `move_center`, the centre becomes the mean so far."""
    dots, count = self.dots.numpy(), float(self.count.numpy())
    self.total += count
    if move_center and self.total > 0:
      for c, s in zip(self.center, self.theta_sum):
        c.assign(s / self.total)
    self.dots.assign(tf.zeros_like(self.dots))
    self.count.assign(0.)
    return dots, count

  def restart_mean(self):
    for s in self.theta_sum:
      s.assign(tf.zeros_like(s))
    self.total = 0.


class MonitorState(object):
  """In-graph sums per variable over an epoch: the virials of every step (`every`) and of the epoch's first step (`first`), and ``Σ_t (h/4)∇Û_t·M∇Û_t``.

  With reshuffled epochs a step's batch is dealt from what the earlier
  batches of its pass left, which correlates it with the weights those
  batches moved; the epoch's first batch is a fresh draw. `fresh` is set
  at each epoch's start when that series is read.

  Plain TensorFlow variables, outside the optimizer's own variables (so
  checkpoints and saved optimizers do not depend on the monitor).
  """

  def __init__(self, variables):
    self.sizes = np.array([int(np.prod(v.shape)) for v in variables])
    self.every = _Virials(variables)
    self.first = _Virials(variables)
    self.fresh = tf.Variable(False, trainable=False)
    self.reshuffle = tf.Variable(tf.zeros([len(variables)], tf.float64),
                                 trainable=False)

  def accumulate(self, parts, target_grads, drift, learning_rate, ok, index):
    """Adds one step; a skipped step (`ok` false) adds nothing.

    Args:
      parts: the weights ``θ_t`` before the step.
      target_grads: ``∇û = −∇U`` at ``θ_t`` (this step's minibatch).
      drift: the step's drift (`Algorithm.update`'s): ``M ∇û`` for the
        Langevin samplers, whose reshuffling bias the correction is
        derived for.
      learning_rate: ``h``.
      ok: whether the step was taken.
      index: the variables this step updates.
    """
    self.every.add(parts, target_grads, ok, index)
    zero = tf.constant(0., tf.float64)
    reshuffle = [zero] * len(parts)
    for i in index:
      w = tf.cast(ok, parts[i].dtype)
      reshuffle[i] = tf.cast(0.25 * tf.cast(learning_rate, w.dtype) * w *
                             tensors.part_event_dot(drift[i], target_grads[i],
                                                    0), tf.float64)
    self.reshuffle.assign_add(tf.stack(reshuffle))
    fresh = tf.convert_to_tensor(self.fresh)

    def read_first():
      self.first.add(parts, target_grads, ok, index)
      self.fresh.assign(False)
      return tf.constant(True)
    tf.cond(fresh, read_first, lambda: tf.constant(False))

  def read_and_reset(self, move_center):
    """``((Σ dots, Σ reshuffling terms per variable, steps), (Σ first-step dots, first steps))`` of the epoch.

    With `move_center`, each series' centre becomes the mean of its states
    so far.
    """
    dots, count = self.every.read_and_reset(move_center)
    reshuffle = self.reshuffle.numpy()
    self.reshuffle.assign(tf.zeros_like(self.reshuffle))
    return (dots, reshuffle, count), self.first.read_and_reset(move_center)

  def restart_mean(self):
    """Starts the running means afresh (each epoch of the first half of burn-in)."""
    self.every.restart_mean()
    self.first.restart_mean()


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

  Logged (progress bar and history): ``temperature`` and
  ``temperature/<layer>``, ``num_nonfinite``, ``drift_ratio``,
  ``gamma_ratio``, ``lag``, and for diagonal metrics ``metric_condition``.
  `readings` holds the last judgement's
  `tfp_adaptive.core.temperature.Reading` per key.

  Example:
    >>> model.fit(x, y, callbacks=[tfa.keras.SampleCollector(),
    ...                            tfa.keras.SamplerMonitor()])
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
    self.validation_data = ensemble_lib.check_validation_data(validation_data)
    if batches is not None:
      validation.check_choice('batches', batches, ('shuffled', 'independent'))
    self.batches = batches
    self._val = None
    self.temperatures = collections.defaultdict(list)
    # Each epoch's first step alone (`None` where not read).
    self.first_temperatures = collections.defaultdict(list)
    self.readings = {}
    self._warned = set()
    self._state = None
    self._epochs = 0
    self._steps = []
    self._running = None

  # `SampleCollector`'s own thermometer: yields to a `SamplerMonitor` in
  # the same `fit`, logs the overall temperature only, and warns in the
  # collector's name.
  _internal = False
  _name = 'SamplerMonitor'
  _claimed_at = None

  def _owns(self, opt):
    return getattr(opt, 'monitor_owner', None) is self

  def on_train_begin(self, logs=None):
    opt = optimizer_base.sampler_of(self.model, self._name)
    regime.claim_members(opt, None)
    owner = getattr(opt, 'monitor_owner', None)
    now = int(np.asarray(opt.iterations))
    # An owner that claimed the optimizer at another step belongs to a fit
    # that ended without `on_train_end` (an exception): stale.
    current = owner is not None and owner._claimed_at == now  # pylint: disable=protected-access
    if current and owner is not self and (
        self._internal or not owner._internal):  # pylint: disable=protected-access
      return  # Another thermometer reads this run (one per optimizer).
    opt.monitor_owner = self
    self._claimed_at = now
    self._state = None
    if self.validation_data is not None and self._running is None:
      self._val = ensemble_lib.validation_arrays(self.validation_data)
      self._likelihood = ensemble_lib.resolve_likelihood(self.model, None,
                                                         None, None)
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
    if opt.monitor_state is None:
      opt.monitor_state = MonitorState(self._variables)
      self.model.make_train_function(force=True)
    self._state = opt.monitor_state
    regime.attach(opt, self.model)
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
        if key == 'temperature' or not self._internal:
          logs[key] = float(value)
        self.temperatures[key].append(float(value))
      firsts = self._per_layer(first_dots, first) if first else {}
      for key in temps:
        self.first_temperatures[key].append(firsts.get(key))
      if _due(self._epochs - self.burnin_epochs - 1, self.window):
        self._judge(opt, final=False)
    if not self._internal:  # The collector logs and reports these itself.
      self._metric_logs(opt, logs)
      opt.regime_state.report(opt, epoch, logs,
                              check=self._epochs > max(self.burnin_epochs, 1),
                              stochastic=regime.is_stochastic(self.params))
    if self.validation_data is not None:
      if self._running is None:
        self._running = predictive.Predictive(self._likelihood, self._val[1])
      self._running.add(1., self.model.predict(self._val[0], verbose=0))
      logs['val_monitor_log_likelihood'] = self._running.metrics()[
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
    if self._owns(opt):
      opt.monitor_owner = None

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
    tau = float(np.asarray(opt.temperature_variable))
    for key, values in self.temperatures.items():
      self.readings[key] = temperature_lib.read(values[first:], 1)
      fresh = [v for v in self.first_temperatures[key][first:]
               if v is not None]
      if len(fresh) >= 2 * self.window:
        self.readings[key] = temperature_lib.unless_refuted(
            self.readings[key], temperature_lib.read(fresh, 1))
    where = lambda key: ('the whole model' if key == 'temperature' else
                         'layer %r' % key.split('/', 1)[1])
    messages = temperature_lib.advice_per_part(
        self.readings, 'temperature', where, tau, 'learning_rate',
        opt.algorithm.adapts_throughout, opt.gamma, self.tolerance, final)
    for key, message in messages.items():
      if key not in self._warned:
        self._warned.add(key)
        warnings.warn('%s: %s' % (self._name, message))

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


def collector_thermometer(burnin_epochs):
  """`SampleCollector`'s own `SamplerMonitor`: judged as a monitor's, quieter.

  It yields to a `SamplerMonitor` in the same `fit` (one thermometer per
  optimizer), logs the overall ``temperature`` only, and warns as
  ``SampleCollector``.
  """
  monitor = SamplerMonitor(burnin_epochs=burnin_epochs)
  monitor._internal = True  # pylint: disable=protected-access
  monitor._name = 'SampleCollector'  # pylint: disable=protected-access
  return monitor
