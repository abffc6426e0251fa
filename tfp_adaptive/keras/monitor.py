"""`SamplerMonitor`: live health checks of an SG-MCMC run in `fit`, per epoch and per layer.

The check that matters is the **configurational temperature**. For any
density ``π ∝ exp(−U/τ)`` that vanishes fast enough at infinity,
integration by parts gives, for every constant vector ``c``,

``E_π[(θ − c)·∇U(θ)] = τ · D``,

so ``T = ⟨(θ − c)·∇U⟩ / D`` estimated along the chain must read the
sampling temperature ``τ``, per layer as well as overall. A sampler that
samples another density (Γ dropped, a step too large, a metric lagging its
moving average) moves it. The estimate uses the minibatch gradient the
optimizer already has (``∇U = N·g``, unbiased), averages it over the
epoch's steps, and centres it on ``c``, the mean of ``θ`` over the second
half of burn-in (frozen afterwards, so that it does not depend on the
states it is compared with). That leaves the expectation unchanged and
removes most of the variance that ``θ·∇U`` has far from the origin.
Minibatch gradient noise heats SGLD beyond ``τ`` at large steps; the
temperature shows that too. It costs two passes over the weights per
step (a sum and a dot product), no extra gradient.

Also logged per epoch: the non-finite step count, the regime numbers
``drift_ratio``, ``gamma_ratio`` and ``lag`` (`tfp_adaptive.core.regime`;
docs, guide "Step sizes and regimes"), warned about once when a
post-burn-in epoch is outside their tolerances, and for diagonal metrics
(pSGLD, Adam-SGLD) the metric's condition number ``max M / min M``.
"""

import collections
import warnings

import numpy as np
import tensorflow as tf
import keras

from tfp_adaptive import validation
from tfp_adaptive.core import preconditioners
from tfp_adaptive.core import tensors
from tfp_adaptive.keras import ensemble as ensemble_lib
from tfp_adaptive.keras import optimizer_base
from tfp_adaptive.keras import predictive
from tfp_adaptive.keras import regime

__all__ = ['MonitorState', 'SamplerMonitor']


class MonitorState(object):
  """In-graph sums: ``Σ_t (θ_t − c)·∇U_t`` per variable over an epoch, ``Σ_t θ_t`` over the run.

  Plain TensorFlow variables, outside the optimizer's own variables (so
  checkpoints and saved optimizers do not depend on the monitor).
  """

  def __init__(self, variables):
    self.sizes = np.array([int(np.prod(v.shape)) for v in variables])
    self.center = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False)
                   for v in variables]
    self.theta_sum = [tf.Variable(tf.zeros(v.shape, v.dtype),
                                  trainable=False) for v in variables]
    self.dots = tf.Variable(tf.zeros([len(variables)], tf.float64),
                            trainable=False)
    self.count = tf.Variable(tf.constant(0., tf.float64), trainable=False)
    self.total = 0.  # Steps in `theta_sum` (host side).

  def accumulate(self, parts, target_grads, ok, index):
    """Adds one step (``∇U = −∇û``); a skipped step (`ok` false) adds nothing."""
    dots = [tf.constant(0., tf.float64)] * len(self.center)
    for i in index:
      w = tf.cast(ok, parts[i].dtype)
      centred = parts[i] - tf.convert_to_tensor(self.center[i])
      dots[i] = -tf.cast(tensors.part_event_dot(centred, target_grads[i], 0)
                         * w, tf.float64)
      self.theta_sum[i].assign_add(w * parts[i])
    self.dots.assign_add(tf.stack(dots))
    self.count.assign_add(tf.cast(ok, tf.float64))

  def read_and_reset(self, move_center=True):
    """``(Σ dots per variable, steps)`` of the epoch; the centre becomes the mean so far.

    With ``move_center=False`` the centre stays where it is.
    """
    dots, count = self.dots.numpy(), float(self.count.numpy())
    self.total += count
    if move_center and self.total > 0:
      for c, s in zip(self.center, self.theta_sum):
        c.assign(s / self.total)
    self.dots.assign(tf.zeros_like(self.dots))
    self.count.assign(0.)
    return dots, count

  def restart_mean(self):
    """Starts the running mean afresh (at the end of burn-in)."""
    for s in self.theta_sum:
      s.assign(tf.zeros_like(s))
    self.total = 0.


class SamplerMonitor(keras.callbacks.Callback):
  """Logs the configurational temperature per layer, and warns when a run drifts.

  Args:
    burnin_epochs: epochs before the temperature is checked against ``τ``
      (it is logged from the second epoch on, the first epoch providing
      the centre).
    window: the check waits for ``2·window`` epochs after burn-in, whose
      temperatures it averages (their batch means give its noise).
    tolerance: relative deviation from ``τ`` that is always tolerated (the
      small-step bias of an exact sampler), default 0.1.
    min_steps: optimizer steps after burn-in before the temperature is
      checked.
    validation_data: optional ``(x, y)`` or a `tf.data.Dataset` of pairs;
      the model at each epoch end joins a running ensemble scored as
      ``val_monitor_log_likelihood``.

  Logged (progress bar and history): ``temperature`` and
  ``temperature/<layer>``, ``num_nonfinite``, ``drift_ratio``,
  ``gamma_ratio``, ``lag``, and for diagonal metrics ``metric_condition``.

  Example:
    >>> model.fit(x, y, callbacks=[tfa.keras.SampleCollector(),
    ...                            tfa.keras.SamplerMonitor()])
  """

  def __init__(self, burnin_epochs=2, window=5, tolerance=0.1,
               min_steps=500, validation_data=None):
    super().__init__()
    self.burnin_epochs = validation.check_int('burnin_epochs', burnin_epochs,
                                              low=0)
    self.window = validation.check_int('window', window, low=2)
    self.tolerance = validation.check_number('tolerance', tolerance, low=0.)
    self.min_steps = validation.check_int('min_steps', min_steps, low=1)
    self.validation_data = ensemble_lib.check_validation_data(validation_data)
    self._val = None
    self.temperatures = collections.defaultdict(list)
    self._warned = set()
    self._state = None
    self._epochs = 0
    self._steps = []
    self._running = None

  def on_train_begin(self, logs=None):
    opt = optimizer_base.sampler_of(self.model, 'SamplerMonitor')
    if opt.monitor_state is None:
      if not opt.built:
        opt.build(self.model.trainable_variables)
      self._variables = list(opt._trainable_variables)  # pylint: disable=protected-access  # The optimizer's order.
      opt.monitor_state = MonitorState(self._variables)
      self.model.make_train_function(force=True)
    self._state = opt.monitor_state
    regime.attach(opt, self.model)
    self._layers = collections.OrderedDict()
    for k, v in enumerate(self._variables):
      parts = v.path.split('/')
      self._layers.setdefault(parts[-2] if len(parts) > 1 else parts[0],
                              []).append(k)
    if self.validation_data is not None and self._running is None:
      self._val = ensemble_lib.validation_arrays(self.validation_data)
      self._likelihood = ensemble_lib.resolve_likelihood(self.model, None,
                                                         None, None)

  def on_epoch_end(self, epoch, logs=None):
    logs = logs if logs is not None else {}
    opt = self.model.optimizer
    # The centre: during the first half of burn-in the last epoch's mean,
    # then the mean over the second half, frozen after burn-in so that it
    # does not depend on the states it is compared with.
    self._epochs += 1
    dots, count = self._state.read_and_reset(
        move_center=self._epochs <= self.burnin_epochs)
    if 2 * self._epochs < self.burnin_epochs:
      self._state.restart_mean()
    logs['num_nonfinite'] = int(opt.num_nonfinite.numpy())
    if self._epochs > 1 and count > 0:
      sizes = self._state.sizes
      self._steps.append(count)
      temps = {'temperature': dots.sum() / (count * sizes.sum())}
      for layer, ks in self._layers.items():
        temps['temperature/' + layer] = dots[ks].sum() / (count * sizes[ks].sum())
      for key, value in temps.items():
        logs[key] = float(value)
        self.temperatures[key].append(float(value))
      if self._epochs > self.burnin_epochs + 1:
        self._check_temperatures(float(np.asarray(opt.temperature_variable)))
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

  def _check_temperatures(self, tau):
    """Warns once per layer when the post-burn-in mean is off ``τ`` beyond its noise.

    The noise is the standard error of the mean from five batch means of
    the epochs since burn-in (the epochs are correlated); the warning needs
    ``|mean − τ| > max(4·se, tolerance·τ)`` over at least ``2·window``
    epochs and `min_steps` optimizer steps (so that each batch mean spans
    many steps, longer than the chain's correlation).
    """
    first = max(self.burnin_epochs - 1, 0)
    if (sum(self._steps[first:]) < self.min_steps or
        len(self._steps) - first < 2 * self.window):
      return
    for key, values in self.temperatures.items():
      since = np.array(values[first:])
      if key in self._warned:
        continue
      batches = np.array([b.mean() for b in np.array_split(since, 5)])
      mean, se = since.mean(), batches.std(ddof=1) / np.sqrt(5)
      if abs(mean - tau) > max(4. * se, self.tolerance * tau):
        self._warned.add(key)
        where = ('overall' if key == 'temperature' else
                 'in layer %r' % key.split('/', 1)[1])
        warnings.warn(
            'SamplerMonitor: the configurational temperature %s reads %.3g '
            '(± %.2g over %d epochs), not the sampling temperature %.3g: the '
            'chain is not sampling its target there. Lower the learning '
            'rate, use gamma=\'corrected\', or shorten the metric\'s moving '
            'average (preconditioner_decay_rate).'
            % (where, mean, se, len(since), tau))

  def _metric_logs(self, opt, logs):
    pre = opt.preconditioner
    if not isinstance(pre, preconditioners.RMSprop):
      return
    pstate, _ = opt.sampler_state()
    diag = [np.asarray(d) for d in pre.diagonal(pstate)]
    largest = max(float(d.max()) for d in diag)
    smallest = min(float(d.min()) for d in diag)
    logs['metric_condition'] = largest / smallest
