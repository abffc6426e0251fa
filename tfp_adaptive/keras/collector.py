"""`SampleCollector`: a Keras callback that snapshots posterior samples during `fit`.

``model.fit(x, y, callbacks=[SampleCollector()])`` and then
``collector.ensemble`` is a `BayesianEnsemble`. With a corrected or original
sampler the collector also switches on Γ (`enable_gamma`), so that one line
is all `fit` needs. Steps are the optimizer's iteration counter, so a resumed
run continues the schedule.
"""

import hashlib
import json
import os
import warnings

import numpy as np
import keras

from tfp_adaptive import validation
from tfp_adaptive.core import temperature as temperature_lib
from tfp_adaptive.keras import distribute
from tfp_adaptive.keras import health
from tfp_adaptive.keras import monitor as monitor_lib
from tfp_adaptive.keras import ensemble as ensemble_lib
from tfp_adaptive.keras import ensemble_temperature
from tfp_adaptive.keras import optimizer_base
from tfp_adaptive.keras import predictive
from tfp_adaptive.keras import regime
from tfp_adaptive.keras import sample_files
from tfp_adaptive.keras import sample_store
from tfp_adaptive.keras import selection
from tfp_adaptive.keras import training

__all__ = ['SampleCollector']

UNITS = ('step', 'epoch')
NONFINITE_POLICIES = ('skip', 'raise')


class SampleCollector(keras.callbacks.Callback):
  """Collects weight samples on a burn-in/thinning schedule.

  Args:
    burnin: samples are taken only after this many steps (or epochs).
    thinning: one sample every `thinning` steps (or epochs) after burn-in.
    max_samples: keep at most this many (`None`: all).
    window: when `max_samples` is reached, ``'reservoir'`` keeps a uniform
      random subset of all samples seen (Vitter's algorithm R) and ``'last'``
      keeps the most recent ones.
    unit: ``'step'`` (optimizer iterations) or ``'epoch'``.
    directory: `None` (samples in memory) or a directory to stream samples
      and checkpoints to (`tfp_adaptive.keras.sample_store`: one run owns
      it, files are verified by checksum, a kill at any moment loses
      nothing committed). Under `MultiWorkerMirroredStrategy` only the
      chief writes it (`tfp_adaptive.keras.distribute`).
    resume: continue the run in `directory` (call `restore` before `fit`).
    overwrite: delete the samples of a run in `directory` and start again.
    likelihood, from_logits, noise_variance: what the model's outputs mean;
      by default read from the compiled loss (see
      `tfp_adaptive.keras.likelihoods`). A loss that cannot be read (a
      custom function) makes `fit` fail at its start, asking for
      ``likelihood=``.
    weighting: ``'uniform'`` or ``'step_size'`` member weights.
    nonfinite: what to do when the optimizer skipped a step (NaN/Inf
      gradient, Γ or weights; see the optimizers' ``nonfinite``) or the
      weights are non-finite: ``'skip'`` (default; counted in
      `num_nonfinite`, logged as ``num_nonfinite``, warned once, and a sample
      due at a skipped step is taken at the next good step) or ``'raise'``
      (`FloatingPointError` after the batch). An optimizer constructed with
      ``nonfinite='raise'`` raises here too, also under XLA. (With
      ``unit='epoch'`` and neither policy ``'raise'``, the collector does no
      work between batches: it counts the skipped steps at each epoch end.)
    validation_data: optional ``(x, y)`` or a `tf.data.Dataset` of
      ``(x, y)``: the running ensemble of every sample taken is scored at
      each epoch end (``val_ensemble_log_likelihood``, and
      ``val_ensemble_accuracy`` or ``val_ensemble_rmse``) without keeping the
      samples for it.
    stuck_steps: warn when this many consecutive optimizer steps were all
      skipped (a chain that no longer moves).
    seed: seed of the reservoir's random choices.
    check_temperature: read the run's configurational temperature, as a
      `SamplerMonitor` does (a `SamplerMonitor` in the same `fit` takes
      over): logged per epoch as ``temperature``, and judged after
      burn-in, at ``2·window``, ``4·window``, … epochs and at the end of
      `fit`, with one warning per layer whose reading is off ``τ`` by
      more than the tolerance, naming the factor to change the learning
      rate by. A run too short to read (fewer than 500 steps or 10 epochs
      after burn-in) is not judged. Per step it costs two inner products
      over the weights.
    training_data: optional ``(x, y)`` or a `tf.data.Dataset` of ``(x,
      y)``, the data `fit` trains on: at the end of `fit` the members are
      read on it in both forms of the configurational temperature
      (`BayesianEnsemble.check_temperature`, kept in `member_readings`),
      with a warning when a reading is off. The Laplacian form sees the
      heat of the stiff directions that set the predictions, which the
      per-epoch reading averages away; the mean force of each layer and
      the force along the model's outputs at 64 of the rows read whether
      the members sit where the posterior does. It costs three passes over
      the data for each of at most 128 members. With it, a ``drift_ratio``
      warning waits for the members' reading, which sees the heat that
      ``drift_ratio`` only bounds (loosely, with reshuffled minibatches):
      it is given at the end of `fit` unless both forms of the reading lie
      wholly inside the band.

  With a sampler of `tfp_adaptive.keras.optimizers`, each epoch also logs
  the run's regime numbers ``drift_ratio``, ``gamma_ratio`` and ``lag``
  (`tfp_adaptive.core.regime`). The temperature judges the bias that they
  predict; with ``check_temperature=False`` and no `SamplerMonitor`, the
  collector warns once when an epoch after burn-in (and after the first)
  is where they say the sampler is biased, naming the parameter to
  change. A moving average too short for minibatch gradients is warned
  about either way. It also warns once when the training loss
  is negative and keeps falling (a log-posterior without an upper bound,
  e.g. a prior with a pole). After burn-in it warns once when the
  posterior goes bad, naming the likely cause: weight norms without bound,
  a loss that rises or spikes, members off the validation targets' range
  (`tfp_adaptive.keras.health`).

  Attributes:
    members: the kept samples, a list of `Member`.
    member_readings: with `training_data`, the members' readings at the
      end of `fit` (`BayesianEnsemble.check_temperature`), else `None`.
    num_nonfinite: optimizer steps skipped as non-finite during `fit`.
    num_skipped: due samples not taken (non-finite or repeated weights).
  """

  def __init__(self, burnin=0, thinning=1, max_samples=None,
               window='reservoir', unit='step', directory=None,
               likelihood=None, from_logits=None, noise_variance=None,
               weighting='uniform', nonfinite='skip', validation_data=None,
               stuck_steps=100, resume=False, overwrite=False, seed=0,
               check_temperature=True, training_data=None):
    super().__init__()
    self.schedule = selection.Schedule(burnin, thinning)
    self.window = selection.Window(max_samples, window, seed)
    self.unit = validation.check_choice('unit', unit, UNITS)
    if directory is not None and not isinstance(directory, (str, os.PathLike)):
      raise TypeError('`directory` must be a path or None. Received: '
                      'directory=%r' % (directory,))
    self.directory = None if directory is None else os.fspath(directory)
    self.resume = validation.check_bool('resume', resume)
    self.overwrite = validation.check_bool('overwrite', overwrite)
    if resume and overwrite:
      raise ValueError('Pass resume=True or overwrite=True, not both.')
    if (resume or overwrite) and directory is None:
      raise ValueError('`resume` and `overwrite` need a `directory`.')
    self._store = None if directory is None else sample_store.SampleStore(
        self.directory)
    self._restored = False
    self._opened = False
    self._manifest = {}
    self._entries = {}   # Manifest entry per member path.
    self._pinned = {}    # Entries of the members at the last checkpoint.
    self._likelihood_args = (likelihood, from_logits, noise_variance)
    ensemble_lib.check_likelihood_args(*self._likelihood_args)
    self.weighting = validation.check_choice(
        'weighting', weighting, ensemble_lib.WEIGHTINGS)
    self.nonfinite = validation.check_choice('nonfinite', nonfinite,
                                             NONFINITE_POLICIES)
    self.validation_data = ensemble_lib.check_validation_data(validation_data)
    self.training_data = ensemble_lib.check_validation_data(training_data,
                                                            'training_data')
    self.member_readings = None
    self.stuck_steps = validation.check_int('stuck_steps', stuck_steps, low=1)
    self._counts_per_batch = True  # Set at the start of `fit`.
    self.check_temperature = validation.check_bool('check_temperature',
                                                   check_temperature)
    self._thermometer = None
    self.members = []
    self.num_skipped = 0
    self.num_nonfinite = 0
    self.likelihood = None
    self._epoch = 0
    self._epochs_done = 0
    self._val = None
    self._running = None
    self._optimizer_nonfinite = None
    self._last_step = None
    self._pending = False
    self._unmoved = 0
    self._losses, self._collapse_warned = [], False
    # `health.RunHealth` of this fit, from its first epoch after burn-in; its
    # `losses` are the training losses of those epochs.
    self._health = None
    self._posterior_warned = False  # One warning that the posterior went bad.
    self._fingerprint = None
    self._writes = True
    self._burnin_checked = True

  @property
  def burnin(self):
    return self.schedule.burnin

  @property
  def thinning(self):
    return self.schedule.thinning

  @property
  def max_samples(self):
    return self.window.max_samples

  @property
  def num_seen(self):
    return self.window.num_seen

  # -- fit hooks --------------------------------------------------------------
  def on_train_begin(self, logs=None):
    model = self.model
    self._health = None
    self.likelihood = ensemble_lib.resolve_likelihood(model,
                                                      *self._likelihood_args)
    opt = model.optimizer
    if isinstance(opt, keras.optimizers.LossScaleOptimizer) and isinstance(
        opt.inner_optimizer, optimizer_base.SamplerOptimizer):
      opt.inner_optimizer.check_dtype_policy()
    if isinstance(opt, optimizer_base.SamplerOptimizer):
      opt.nonfinite_checked_after_batch = True
      if opt.needs_gamma and not training.gamma_enabled(model):
        training.enable_gamma(model)
        model.make_train_function(force=True)
      regime.attach(opt, model)
      regime.claim_members(opt, self.training_data is not None)
      if self.check_temperature:
        self._thermometer = monitor_lib.collector_thermometer(
            self._burnin_epochs())
        self._thermometer.set_model(model)
        self._thermometer.set_params(self.params)
        self._thermometer.on_train_begin(logs)
    if self.validation_data is not None and self._val is None:
      self._val = ensemble_lib.validation_arrays(self.validation_data)
    if self._optimizer_nonfinite is None:
      self._optimizer_nonfinite = _nonfinite_count(opt)
    # With nothing to do after each batch, the steps are counted at the
    # epoch end: reading the optimizer's counters after every batch costs a
    # small model's `fit` a noticeable share of its step.
    self._counts_per_batch = self.unit == 'step' or 'raise' in (
        self.nonfinite, getattr(opt, 'nonfinite', 'skip'))
    self._writes = distribute.is_chief(model.distribute_strategy)
    if self._store is not None and self._writes:
      self._open_directory()
    self._burnin_checked = False

  def _burnin_epochs(self):
    """The burn-in in epochs (at least 1), for the thermometer."""
    steps = (self.params or {}).get('steps')
    if self.unit == 'epoch':
      return max(self.burnin, 1)
    if not steps:
      return 2
    return max(int(np.ceil(self.burnin / float(steps))), 1)

  def _check_burnin(self, epoch):
    """Warns before training when this `fit` ends before the first sample point."""
    epochs, steps = self.params.get('epochs'), self.params.get('steps')
    if self.members or epochs is None:
      return
    if self.unit == 'epoch':
      end = epochs
    elif steps is None:  # A dataset of unknown length: the end is unknown.
      return
    else:
      end = (int(np.asarray(self.model.optimizer.iterations)) +
             (epochs - epoch) * steps)
    first = self.burnin + self.thinning
    if first > end:
      warnings.warn(
          'SampleCollector: this fit ends at %s %d, before the first sample '
          'at %s %d (burnin=%d, thinning=%d), so it will keep no members. '
          'Lower `burnin` (with unit=%r) or train for longer.'
          % (self.unit, end, self.unit, first, self.burnin, self.thinning,
             self.unit))

  @property
  def live_readings(self):
    """The reading in `fit` at its end (with `check_temperature`).

    ``{'temperature': Reading}`` for the whole model, empty when the run
    was too short to read or a `SamplerMonitor` in the same `fit` read it
    (its ``readings``).
    """
    if self._thermometer is None:
      return {}
    return dict(self._thermometer.readings)

  @property
  def _writing(self):
    """True if this process streams to `directory` (the chief, in multi-worker runs)."""
    return self._store is not None and self._writes

  def on_train_end(self, logs=None):
    if isinstance(self.model.optimizer, optimizer_base.SamplerOptimizer):
      self.model.optimizer.members_read_at = None
    if self._thermometer is not None:
      self._thermometer.on_train_end(logs)
    self._read_members()
    self._check_noise()
    self._judge_health(final=True)
    if self.num_nonfinite:
      warnings.warn(
          'SampleCollector: the run ended with %d optimizer step(s) skipped '
          'as non-finite, out of %d (the weights stayed at their last finite '
          'values for those steps; `num_nonfinite`). Lower the learning rate, '
          'or check the data and the model for NaN/Inf.'
          % (self.num_nonfinite, int(np.asarray(self.model.optimizer.iterations))))
    if self._writing:
      self._epoch = self._epochs_done
      self.save_checkpoint()
      self._store.release()

  def _read_members(self):
    """With `training_data`, the members' temperatures in both forms, warned on by the kernels' rule."""
    if self.training_data is None:
      return
    x, y = ensemble_lib.validation_arrays(self.training_data, 'training_data')
    self.member_readings = None
    try:
      self.member_readings = ensemble_temperature.read_members(
          self.ensemble, x, y,
          who='SampleCollector (its members on `training_data`)')
    except ValueError as e:  # Too few members a chain.
      warnings.warn('SampleCollector: the members\' temperature was not '
                    'read on `training_data`: %s' % e)
    opt = self.model.optimizer
    if getattr(opt, 'regime_state', None) is not None:
      opt.regime_state.settle_deferred(
          self.member_readings, float(np.asarray(opt.temperature_variable)),
          temperature_lib.TOLERANCE)

  def on_epoch_begin(self, epoch, logs=None):
    if not self._burnin_checked:
      self._burnin_checked = True
      self._check_burnin(epoch)
    self._epoch = epoch
    self._epoch_start = int(np.asarray(self.model.optimizer.iterations))
    if self._thermometer is not None:
      self._thermometer.on_epoch_begin(epoch, logs)
    if self._writing:
      self.save_checkpoint()

  def on_train_batch_end(self, batch, logs=None):
    if self._thermometer is not None:
      self._thermometer.on_train_batch_end(batch, logs)
    if not self._counts_per_batch:
      return
    step, last, skipped = self._count_steps(logs)
    if self.unit == 'step':
      if self.schedule.due(step, last) or self._pending:
        self._pending = skipped > 0
        if not self._pending:
          self.collect(step)

  def _count_steps(self, logs):
    """``(step, last step counted, skipped since)``: the optimizer's skipped steps counted (`_check_nonfinite`) and logged."""
    step = int(self.model.optimizer.iterations.numpy())
    last = step - 1 if self._last_step is None else self._last_step
    skipped = self._check_nonfinite(step - last)
    if logs is not None:
      logs['num_nonfinite'] = self.num_nonfinite
    self._last_step = step
    return step, last, skipped

  def on_epoch_end(self, epoch, logs=None):
    if not self._counts_per_batch:
      if self._last_step is None:
        self._last_step = getattr(self, '_epoch_start', None)
      self._count_steps(logs)
    self._epochs_done = epoch + 1
    if self.unit == 'epoch' and self.schedule.due(epoch + 1, epoch):
      self.collect(int(self.model.optimizer.iterations.numpy()))
    self._check_collapse(logs)
    opt = self.model.optimizer
    start = epoch if self.unit == 'epoch' else getattr(self, '_epoch_start', 0)
    if start >= self.burnin:
      self._check_health((logs or {}).get('loss'))
    if self._thermometer is not None:
      self._thermometer.on_epoch_end(epoch, logs)
    if getattr(opt, 'regime_state', None) is not None:
      opt.regime_state.report(
          opt, epoch, logs, check=epoch >= 1 and start >= self.burnin,
          stochastic=regime.is_stochastic(self.params))
    if logs is None:
      return
    logs['num_nonfinite'] = self.num_nonfinite
    if self._running is not None:
      metrics = self._running.metrics()
      logs['val_ensemble_log_likelihood'] = metrics['log_likelihood']
      key = 'accuracy' if self.likelihood.is_classification else 'rmse'
      logs['val_ensemble_' + key] = metrics[key]

  def _check_collapse(self, logs):
    """Warns once when the training loss is negative and has fallen for 5 epochs.

    The losses of the likelihoods here are >= 0, and so are the priors of
    `tfp_adaptive.keras.priors`; a loss below 0 that keeps falling means a
    log-density without an upper bound, usually a prior with a pole (a
    scale sampled with its weights collapsing to 0): the chain is falling
    into it, not sampling.
    """
    loss = (logs or {}).get('loss')
    if (loss is None or self._collapse_warned or
        not getattr(self.likelihood, 'loss_is_nonnegative', True)):
      return  # E.g. a learnt noise scale: a negative loss is legitimate.
    self._losses = (self._losses + [float(loss)])[-5:]
    falling = all(b < a for a, b in zip(self._losses, self._losses[1:]))
    if len(self._losses) == 5 and falling and self._losses[-1] < 0:
      self._collapse_warned = True
      priors = sorted({type(v.regularizer).__name__
                       for v in self.model.trainable_weights
                       if getattr(v, 'regularizer', None) is not None} |
                      {type(l.kernel_regularizer).__name__
                       for l in self.model.layers
                       if getattr(l, 'kernel_regularizer', None) is not None})
      warnings.warn(
          'SampleCollector: the training loss is negative (%.3g) and has '
          'fallen for 5 epochs: the log-posterior has no upper bound and the '
          'chain is collapsing into it rather than sampling. Check the '
          'priors (regularizers on this model: %s): a scale sampled jointly '
          'with its weights has a pole at 0; tfp_adaptive.keras.priors.'
          'add_horseshoe_prior integrates it out.'
          % (self._losses[-1], ', '.join(priors) or 'none'))

  def _check_health(self, loss):
    """Records an epoch after burn-in and warns once when the posterior has gone bad (`health`)."""
    if self._health is None:
      self._health = health.RunHealth(
          _layers(self.model),
          getattr(self.likelihood, 'loss_is_nonnegative', True))
    self._health.record(loss)
    self._judge_health(final=False)

  def _judge_health(self, final):
    """Warns once if `health` finds the posterior bad: at 9, 18, 36, ... epochs after burn-in, and at the end of `fit`."""
    run = self._health
    if run is None or self._posterior_warned or not (final or run.due()):
      return
    findings = run.findings()
    if findings:
      self._posterior_warned = True
      warnings.warn(health.message('SampleCollector', findings))

  NOISE_FACTOR = 10.  # Residuals this far from the noise variance: a warning.

  def _check_noise(self):
    """Warns when ``'mse'``'s implied noise variance is far from the residuals'.

    The loss ``'mse'`` is a Gaussian likelihood of variance ``K/2`` per
    output (`likelihoods.Gaussian`), so under the model the loss averages
    ``K/2``. At the end of `fit`, the mean loss over the last third of the
    epochs after burn-in (at least 3, and only if it has stopped moving:
    its two halves within 20% of each other, so that a transient is not
    judged) more than `NOISE_FACTOR` times away says the posterior is far
    too narrow (or too wide) for the targets' scale.
    """
    lik = self.likelihood
    steady = [] if self._health is None else self._health.losses
    window = steady[-(len(steady) // 3):]
    if (len(steady) < 9 or lik is None or
        lik.name != 'gaussian' or lik.noise_variance is not None):
      return
    half = len(window) // 2
    loss = float(np.mean(window))
    if abs(np.mean(window[half:]) - np.mean(window[:half])) > 0.2 * abs(loss):
      return  # Still moving: no verdict.
    try:
      outputs = int(np.prod(self.model.output_shape[1:]))
    except (AttributeError, TypeError, ValueError):
      return  # A subclassed model without a known output shape.
    implied = lik.variance(outputs)
    ratio = loss / implied
    if 1. / self.NOISE_FACTOR <= ratio <= self.NOISE_FACTOR:
      return
    warnings.warn(
        'SampleCollector: the loss \'mse\' is a Gaussian likelihood whose '
        'noise variance is fixed at K/2 = %g per output, but at the end of '
        'the run the training loss is %.3g, %.3g times what that noise '
        'gives: the posterior and the ensemble\'s intervals are far too %s '
        'for these targets. Let the model learn its noise (end it with '
        'tfa.keras.NoiseScale(data_size=N) and compile with '
        'loss=tfa.keras.GaussianNLL()), or standardise the targets.'
        % (implied, loss, ratio, 'narrow' if ratio > 1 else 'wide'))

  def _check_nonfinite(self, steps):
    """Counts the optimizer's skipped steps since the last batch; returns their number."""
    opt = self.model.optimizer
    count = _nonfinite_count(opt)
    new = count - (self._optimizer_nonfinite or 0)
    self._optimizer_nonfinite = count
    if new <= 0:
      self._unmoved = 0
      return 0
    self.num_nonfinite += new
    self._unmoved = self._unmoved + new if new >= steps else new
    policy = getattr(opt, 'nonfinite', 'skip')
    if 'raise' in (self.nonfinite, policy):
      raise FloatingPointError(
          '%d optimizer step(s) up to iteration %d had a non-finite gradient, '
          'Γ or weights (nonfinite=\'raise\'); lower the learning rate or '
          'check the model and data.' % (new, int(np.asarray(opt.iterations))))
    if self.num_nonfinite == new:
      warnings.warn('SampleCollector: %d optimizer step(s) had a non-finite '
                    'gradient, Γ or weights and were skipped (counted in '
                    '`num_nonfinite`).' % new)
    if self._unmoved >= self.stuck_steps and self._unmoved - new < self.stuck_steps:
      warnings.warn(
          'SampleCollector: the last %d optimizer steps were all skipped as '
          'non-finite; the chain is not moving. Lower the learning rate, or '
          'check the data and the model for NaN/Inf.' % self._unmoved)
    return new

  # -- taking a sample --------------------------------------------------------
  def collect(self, step):
    """Snapshots the model's weights now, as the sample of `step`.

    With a cyclical schedule (`tfp_adaptive.keras.schedules.Cyclical`), a
    sample whose last step explored (no noise) is not taken, and the others
    are tagged with their cycle.
    """
    stages = getattr(self.model.optimizer, 'learning_rate_schedule', None)
    cycle = None
    if callable(getattr(stages, 'sampling', None)):
      if not bool(stages.sampling(step - 1)):
        return
      cycle = int(stages.cycle(step - 1))
    values = [np.array(v.numpy()) for v in self.model.weights]
    if not all(np.all(np.isfinite(a)) for a in values
               if np.issubdtype(a.dtype, np.floating)):
      self._skip(step, 'non-finite weights')
      return
    fingerprint = _fingerprint(values)
    if fingerprint == self._fingerprint:
      self._skip(step, 'the same weights as the previous sample (the '
                 'optimizer did not move)')
      return
    self._fingerprint = fingerprint
    slot = self.window.slot(self.members)
    lr = float(np.asarray(self.model.optimizer.learning_rate))
    if slot is not None and self._writes:
      self._keep(slot, step, lr, values, cycle)
    self._update_running(lr)

  def _skip(self, step, why):
    if self.nonfinite == 'raise':
      raise FloatingPointError('Sample of step %d not taken: %s.' % (step, why))
    self.num_skipped += 1
    warnings.warn('SampleCollector: the sample of step %d was not taken: %s '
                  '(%d so far).' % (step, why, self.num_skipped))

  def _keep(self, slot, step, lr, values, cycle=None):
    """Puts the sample in `slot`; with a directory, file first, then the manifest."""
    if self._store is not None:
      names = [v.path for v in self.model.weights]
      tags = {} if cycle is None else {'cycle': cycle}
      entry = self._store.write_arrays(
          sample_store.sample_name(step), values,
          dict({'names': names, 'step': step, 'learning_rate': lr}, **tags),
          step=step, learning_rate=lr, **tags)
      member = ensemble_lib.Member(step, lr, None,
                                   self._store.path(entry['file']),
                                   cycle=cycle)
      self._entries[member.path] = entry
    else:
      member = ensemble_lib.Member(step, lr, values, None, cycle=cycle)
    if slot < len(self.members):
      self.members[slot] = member
    else:
      self.members.append(member)
    if self._store is not None:
      self._commit()  # Then deletes an evicted file no manifest lists.

  def _update_running(self, lr):
    if self._val is None:
      return
    if self._running is None:
      self._running = predictive.Predictive(self.likelihood, self._val[1])
    w = lr if self.weighting == 'step_size' else 1.
    self._running.add(w, ensemble_lib.outputs(self.model, self._val[0]))
    share = self._running.off_range[-1] if self._running.off_range else 0.
    if share > health.OFF_RANGE_SHARE and not self._posterior_warned:
      self._posterior_warned = True
      warnings.warn(health.message('SampleCollector', [(
          'noise', 'the sample of step %d predicts outside the validation '
          'targets\' range (widened by its width) at %.0f%% of the points'
          % (int(np.asarray(self.model.optimizer.iterations)), 100 * share))]))

  @property
  def ensemble(self):
    """The collected samples as a `BayesianEnsemble` (ordered by step)."""
    if self.model is None:
      raise ValueError('The collector has not been used in `fit` yet.')
    if self._store is not None and not self._writing:
      raise ValueError(
          'This worker is not the chief of the MultiWorkerMirroredStrategy '
          'run: only the chief writes the samples to %s. Load them there, '
          'with BayesianEnsemble.load.' % self.directory)
    members = sorted(self.members, key=lambda m: m.step)
    likelihood = self.likelihood or ensemble_lib.resolve_likelihood(
        self.model, *self._likelihood_args)
    return ensemble_lib.BayesianEnsemble(self.model, members,
                                         likelihood=likelihood,
                                         weighting=self.weighting)

  # -- the sample directory ---------------------------------------------------
  def _open_directory(self):
    """At the start of `fit`: own the directory, refuse another run's samples."""
    store = self._store
    store.acquire()
    try:
      if not (self._restored or self._opened):
        self._check_unused(store)
    except ValueError:
      store.release()
      raise
    if not self._opened:
      store.claim()  # Only now: a refused run changes nothing.
    self._opened = True  # A second `fit` with this collector continues.
    config = keras.saving.serialize_keras_object(self.model)
    sample_files.atomic_write(store.path('model.json'),
                              lambda f: json.dump(config, f), binary=False)

  def _check_unused(self, store):
    used = store.read_manifest() is not None or any(
        sample_store.is_deletable(n) for n in os.listdir(store.directory))
    if used and self.overwrite:
      store.wipe()
    elif used and self.resume:
      raise ValueError(
          'SampleCollector(resume=True): call `initial_epoch = '
          'collector.restore(model)` before `model.fit(..., '
          'initial_epoch=initial_epoch)`, so that the run continues from the '
          'checkpoint in %s.' % store.directory)
    elif used:
      raise ValueError(
          'Sample directory %s already holds samples of a run. Pass '
          'resume=True (then `collector.restore(model)` before `fit`) to '
          'continue it, or overwrite=True to delete them and start again.'
          % store.directory)

  def _commit(self, checkpoint=None):
    """Writes the manifest listing the members, the pinned ones and `checkpoint`."""
    manifest = self._manifest
    if checkpoint is not None:
      manifest['checkpoint'] = checkpoint
      self._pinned = {m.path: self._entries[m.path] for m in self.members}
    listed = dict(self._pinned)
    listed.update({m.path: self._entries[m.path] for m in self.members})
    self._entries = listed
    manifest.update(
        samples=sorted(listed.values(), key=lambda e: e['step']),
        members=[self._entries[m.path]['file'] for m in
                 sorted(self.members, key=lambda m: m.step)],
        pinned=sorted(e['file'] for e in self._pinned.values()),
        likelihood=self.likelihood.get_config(), weighting=self.weighting,
        identity=sample_store.run_identity(self.model))
    self._store.commit(manifest)

  def save_checkpoint(self):
    """Writes the model, optimizer and collector state, then commits the manifest.

    Called at the start of every epoch: a resumed run replays the epoch
    from there, so it ends at the same step as an uninterrupted one.
    """
    model, opt = self.model, self.model.optimizer
    if not opt.built:
      opt.build(model.trainable_variables)
    step = int(np.asarray(opt.iterations))
    arrays = [np.asarray(v) for v in model.variables + opt.variables]
    running_weight, running = (self._running.get_state()
                               if self._running is not None else (0., {}))
    arrays += list(running.values())
    meta = {
        'names': [None] * len(arrays),
        'num_model': len(model.variables),
        'epoch': self._epoch,
        'step': step,
        'num_skipped': self.num_skipped,
        'num_nonfinite': self.num_nonfinite,
        'fingerprint': self._fingerprint,
        'members': [os.path.basename(m.path) for m in self.members],
        'window': self.window.get_state(),
        'pending': self._pending,
        'running': {'weight': running_weight, 'fields': list(running)},
    }
    name = sample_store.checkpoint_name(step, self._epoch)
    last = self._manifest.get('checkpoint')
    if last and last['file'] == name:  # Nothing moved since: never rewrite
      self._commit(checkpoint=last)    # a file the manifest lists.
      return
    entry = self._store.write_arrays(name, arrays, meta, step=step,
                                     epoch=self._epoch)
    self._commit(checkpoint=entry)

  def restore(self, model):
    """Continues a run from its sample directory (``resume=True``).

    Call after `model.compile`, then ``model.fit(..., initial_epoch=...)``
    with the returned epoch. The model, its optimizer and this collector
    get the state of the start of the epoch that was running; the samples
    that epoch had taken are dropped and taken again as it is replayed.

    Returns:
      The epoch to resume from (0 if the directory holds no run).

    Raises:
      ValueError: no `directory`, ``resume=False``, or the directory holds
        a run of another model or optimizer (the difference is named).
      SampleFileError: the manifest or a file it lists is damaged.
    """
    if not self.directory:
      raise ValueError('`restore` needs a `directory`.')
    if not self.resume:
      raise ValueError('`restore` continues a run: construct the collector '
                       'with resume=True.')
    if distribute.is_multi_worker(model.distribute_strategy):
      raise ValueError(
          '`restore` under MultiWorkerMirroredStrategy is not supported: the '
          'workers would have to read the chief\'s checkpoint in step. '
          'Resume with one process, or start the run again.')
    self._store.acquire()
    try:
      epoch = self._restore(model)
    except BaseException:
      self._store.release()
      raise
    self._store.claim()
    self._opened = True
    return epoch

  def _restore(self, model):
    store = self._store
    manifest = store.read_manifest()
    self._restored = True
    self.set_model(model)
    if manifest is None or not manifest.get('checkpoint'):
      store.cleanup(manifest)
      return 0
    opt = model.optimizer
    if not opt.built:
      opt.build(model.trainable_variables)
    _adopt_seed(opt, manifest['identity'])
    sample_store.check_identity(manifest['identity'],
                                sample_store.run_identity(model),
                                store.directory)
    arrays, meta = sample_files.read_arrays(
        store.verify(manifest['checkpoint']))
    variables = model.variables + opt.variables
    running = meta.get('running', {'weight': 0., 'fields': []})
    arrays, running_arrays = (arrays[:len(arrays) - len(running['fields'])],
                              arrays[len(arrays) - len(running['fields']):])
    if len(arrays) != len(variables):
      raise sample_files.SampleFileError(
          'Checkpoint %s holds %d arrays, the model and optimizer have %d '
          'variables.' % (manifest['checkpoint']['file'], len(arrays),
                          len(variables)))
    for v, a in zip(variables, arrays):
      if tuple(v.shape) != a.shape:
        raise sample_files.SampleFileError(
            'Checkpoint %s does not fit variable %r (shape %s, saved %s).'
            % (manifest['checkpoint']['file'], v.path, tuple(v.shape),
               a.shape))
      v.assign(a)
    entries = {e['file']: e for e in manifest['samples']}
    _check_replay(store, manifest, meta)
    self.members = []
    self._entries = {}
    for name in meta['members']:
      if name not in entries:
        raise sample_files.SampleFileError(
            'Manifest %s does not list %s, a member of its checkpoint %s.'
            % (store.path(sample_store.MANIFEST), name,
               manifest['checkpoint']['file']))
      path = store.verify(entries[name])
      self.members.append(ensemble_lib.Member(
          entries[name]['step'], entries[name]['learning_rate'], None, path,
          cycle=entries[name].get('cycle')))
      self._entries[path] = entries[name]
    self._pinned = dict(self._entries)
    self._manifest = dict(manifest)
    self.num_skipped = meta['num_skipped']
    self.num_nonfinite = meta['num_nonfinite']
    self._fingerprint = meta['fingerprint']
    self.window.set_state(meta['window'])
    self._optimizer_nonfinite = _nonfinite_count(opt)
    self._last_step = int(meta['step'])
    self._pending = bool(meta.get('pending', False))
    self._epoch = self._epochs_done = int(meta['epoch'])
    self.likelihood = ensemble_lib.resolve_likelihood(
        model, *self._likelihood_args)
    if running['fields'] and self.validation_data is not None:
      self._val = ensemble_lib.validation_arrays(self.validation_data)
      self._running = predictive.Predictive(self.likelihood, self._val[1])
      self._running.set_state(running['weight'], dict(
          zip(running['fields'], running_arrays)))
    self._commit()  # Drops the samples taken after the checkpoint.
    return self._epoch


def _adopt_seed(optimizer, identity):
  """A sampler built without `seed` continues the recorded run's random stream.

  Each process draws its own default seed; the run recorded the one it
  drew (in the manifest's identity), and the resumed run takes it. An
  explicit seed that differs is left to `check_identity`, which refuses.
  """
  inner = getattr(optimizer, 'inner_optimizer', optimizer)
  if not isinstance(inner, optimizer_base.SamplerOptimizer) or (
      inner.seed_given):
    return
  (_, config), = identity['optimizer'].items()
  if isinstance(config.get('seed'), int):
    inner.seed = config['seed']


def _check_replay(store, manifest, meta):
  """What `restore` drops: only the samples taken after the checkpoint, and it says so.

  A sample the manifest lists from before the checkpoint that the
  checkpoint does not hold as a member means that the two disagree (an
  edited file): `SampleFileError`, and nothing is deleted.
  """
  step, members = int(meta['step']), set(meta['members'])
  early = [e['file'] for e in manifest['samples']
           if e['file'] not in members and e['step'] <= step]
  if early:
    raise sample_files.SampleFileError(
        'Checkpoint %s of %s does not hold %s as member(s), though the '
        'manifest lists them from before its step %d: the checkpoint and the '
        'manifest disagree. Nothing was deleted. Restore the files as they '
        'were, or move these samples out of the directory to drop them.'
        % (manifest['checkpoint']['file'], store.directory,
           ', '.join(early), step))
  late = [e['file'] for e in manifest['samples']
          if e['file'] not in members]
  if late:
    warnings.warn(
        'SampleCollector.restore: %d sample(s) taken after the checkpoint '
        '(step %d) are dropped and will be taken again as epoch %d is '
        'replayed: %s.' % (len(late), step, int(meta['epoch']),
                           ', '.join(late)))


def _layers(model):
  """``{layer path: [(variable, default prior σ² or None, has a regularizer)]}`` of the trainable weights."""
  opt = model.optimizer
  if isinstance(opt, keras.optimizers.LossScaleOptimizer):
    opt = opt.inner_optimizer
  variance = getattr(opt, 'prior_variance', lambda v: None)
  layers = {}
  for v in model.trainable_weights:
    path = getattr(v, 'path', None) or v.name
    layers.setdefault(path.rsplit('/', 1)[0], []).append(
        (v, variance(v), getattr(v, 'regularizer', None) is not None))
  return layers


def _nonfinite_count(optimizer):
  count = getattr(optimizer, 'num_nonfinite', None)
  return 0 if count is None else int(np.asarray(count))


def _fingerprint(values):
  digest = hashlib.sha1()
  for a in values:
    digest.update(np.ascontiguousarray(a).data)
  return digest.hexdigest()
