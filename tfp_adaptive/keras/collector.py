"""`SampleCollector`: a Keras callback that snapshots posterior samples during `fit`.

``model.fit(x, y, callbacks=[SampleCollector()])`` and then
``collector.ensemble`` is a `BayesianEnsemble`. With a corrected or original
sampler the collector also switches on Γ (`enable_gamma`), so that one line
is all `fit` needs. Steps are the optimizer's iteration counter, so a resumed
run continues the schedule.
"""

import warnings

import numpy as np
import keras

from tfp_adaptive import validation
from tfp_adaptive import vocabulary
from tfp_adaptive.keras import chains as chains_lib
from tfp_adaptive.keras import collector_readings
from tfp_adaptive.keras import data_arrays
from tfp_adaptive.keras import distribute
from tfp_adaptive.keras import ensemble as ensemble_lib
from tfp_adaptive.keras import fit_checks
from tfp_adaptive.keras import gamma_train_step
from tfp_adaptive.keras import health
from tfp_adaptive.keras import likelihoods
from tfp_adaptive.keras import members as members_lib
from tfp_adaptive.keras import optimizer_base
from tfp_adaptive.keras import run_directory
from tfp_adaptive.keras import running_ensemble
from tfp_adaptive.keras import selection

__all__ = ['SampleCollector']

UNITS = ('step', 'epoch')
# The words of `tfp_adaptive.vocabulary` that a collector can follow
# (``'skip'``, its old word for ``'reject'``, is deprecated).
NONFINITE_POLICIES = ('reject', 'raise')


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
      weights are non-finite: ``'reject'`` (default; counted in
      `num_nonfinite`, logged as ``num_nonfinite``, warned once, and a sample
      due at a skipped step is taken at the next good step) or ``'raise'``
      (`FloatingPointError` after the batch); the words of
      `tfp_adaptive.vocabulary.NONFINITE_POLICIES` (``'skip'``, the old
      word for ``'reject'``, is deprecated). An optimizer constructed with
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
    monitor: the monitor of the run's configurational temperature
      (`tfp_adaptive.keras.collector_readings`). ``True`` (default): the
      collector's own quiet one, which logs the whole model's reading as
      ``temperature_reading`` and warns once per layer whose reading is
      off ``τ``. A `SamplerMonitor`: that one, run by the collector (do
      not pass it to `callbacks` besides). ``False``: none. A second
      monitor in the same `fit` is a `ValueError` naming this argument.
    check_temperature: deprecated; ``check_temperature=False`` is
      ``monitor=False``.
    training_data: optional ``(x, y)`` or a `tf.data.Dataset` of ``(x,
      y)``, the data `fit` trains on: at the end of `fit` the members are
      read on it with exact gradients, in both forms of the temperature
      and by their mean forces (`BayesianEnsemble.check_temperature`;
      `member_readings`), three passes over the data for each of at most
      128 members; a ``drift_ratio`` warning then waits for that reading,
      which can rule the heat out. A reading too wide to vouch for the run
      or to settle that warning is read again from up to
      `collector_readings.SETTLING_MEMBERS` members.

  With a sampler of `tfp_adaptive.keras.optimizers`, each epoch also logs
  the run's regime numbers ``drift_ratio``, ``gamma_ratio`` and ``lag``
  (`tfp_adaptive.diagnostics.regime`), warned on once when outside the
  regime where the monitor cannot judge the bias they predict; `verdict`
  combines them with the readings at the end of `fit`. The collector also
  warns once on a training loss that is negative and keeps falling, and
  after burn-in on a posterior gone bad, naming the likely cause
  (`tfp_adaptive.keras.fit_checks`).

  With a `tfp_adaptive.keras.Chains` model (K chains in one `fit`), each
  sample is K members of the original model, one per chain
  (`Member.chain`); in a directory they are written side by side under one
  manifest and checkpoint, and `max_samples` counts them all.

  Attributes:
    members: the kept samples, a list of `Member`.
    num_skipped: due samples not taken (non-finite or repeated weights).
  """

  def __init__(self, burnin=0, thinning=1, max_samples=None,
               window='reservoir', unit='step', directory=None,
               likelihood=None, from_logits=None, noise_variance=None,
               weighting='uniform', nonfinite='reject', validation_data=None,
               stuck_steps=100, resume=False, overwrite=False, seed=0,
               check_temperature=None, training_data=None, monitor=True):
    super().__init__()
    self.sample_points = selection.SamplePoints(burnin, thinning)
    self.window = selection.Window(max_samples, window, seed)
    self.unit = validation.check_choice('unit', unit, UNITS)
    self._run = run_directory.from_arguments(directory, resume, overwrite)
    self.directory = self._run and self._run.directory
    self.resume, self.overwrite = bool(resume), bool(overwrite)
    self._likelihood_args = (likelihood, from_logits, noise_variance)
    likelihoods.check_likelihood_args(*self._likelihood_args)
    self.weighting = validation.check_choice(
        'weighting', weighting, ensemble_lib.WEIGHTINGS)
    self.nonfinite = vocabulary.nonfinite_policy(
        nonfinite, NONFINITE_POLICIES, aliases={'skip': 'reject'})
    self.validation_data = data_arrays.check_validation_data(validation_data)
    self.training_data = data_arrays.check_validation_data(training_data,
                                                            'training_data')
    self._counts_per_batch = True  # Set at the start of `fit`.
    self.monitor = collector_readings.check_monitor(monitor,
                                                   check_temperature)
    self._readings = collector_readings.CollectorReadings(monitor,
                                                          self.training_data)
    self.members = []
    self.num_skipped = 0
    self._nonfinite = fit_checks.NonfiniteCount(
        'SampleCollector',
        validation.check_int('stuck_steps', stuck_steps, low=1))
    self.likelihood = None
    self._epoch = 0
    self._epochs_done = 0
    self._scores = None  # The `RunningEnsemble` of `validation_data`.
    self._last_step = None
    self._pending = False
    self._checks = fit_checks.FitChecks('SampleCollector')
    self._fingerprint = None
    self._frozen = None  # The frozen part of the last sample, shared.
    self._writes = True
    self._burnin_checked = True

  @property
  def num_nonfinite(self):
    """Optimizer steps skipped as non-finite during `fit`."""
    return self._nonfinite.total

  @num_nonfinite.setter
  def num_nonfinite(self, value):
    self._nonfinite.total = int(value)

  @property
  def stuck_steps(self):
    return self._nonfinite.stuck_steps

  @property
  def burnin(self):
    return self.sample_points.burnin

  @property
  def thinning(self):
    return self.sample_points.thinning

  @property
  def max_samples(self):
    return self.window.max_samples

  @property
  def num_seen(self):
    return self.window.num_seen

  # -- fit hooks --------------------------------------------------------------
  def on_train_begin(self, logs=None):
    model = self.model
    self._checks.new_fit()
    self.likelihood = likelihoods.resolve_likelihood(model,
                                                      *self._likelihood_args)
    opt = model.optimizer
    if isinstance(opt, keras.optimizers.LossScaleOptimizer) and isinstance(
        opt.inner_optimizer, optimizer_base.SamplerOptimizer):
      opt.inner_optimizer.check_dtype_policy()
    if isinstance(opt, optimizer_base.SamplerOptimizer):
      opt.statistics.check_nonfinite_after_batch()
      if opt.needs_gamma and not gamma_train_step.gamma_enabled(model):
        gamma_train_step.enable_gamma(model)
        model.make_train_function(force=True)
      self._readings.begin(model, self.params, self.sample_points.burnin_epochs(
          self.unit, self.params), logs)
    if self.validation_data is not None and self._scores is None:
      self._scores = running_ensemble.RunningEnsemble(self.validation_data,
                                                      self.likelihood)
    self._nonfinite.start(opt)
    # With nothing to do after each batch, the steps are counted at the
    # epoch end: reading the optimizer's counters after every batch costs a
    # small model's `fit` a noticeable share of its step.
    self._counts_per_batch = self.unit == 'step' or fit_checks.raises(
        opt, self.nonfinite)
    self._writes = distribute.is_chief(model.distribute_strategy)
    if self._writing:
      self._run.open(model)
    self._burnin_checked = False

  @property
  def live_readings(self):
    """The monitor's readings at the end of `fit` (its ``readings``).

    ``{'temperature': Reading, 'temperature/<layer>': Reading, ...}``,
    empty when the run was too short to read or with ``monitor=False``.
    """
    return self._readings.live

  @property
  def member_readings(self):
    """With `training_data`, the members' readings at the end of `fit` (`BayesianEnsemble.check_temperature`), else `None`."""
    return self._readings.member_readings

  @property
  def verdict(self):
    """After `fit`, its `tfp_adaptive.keras.fit_verdict.FitVerdict` (`None` before).

    The regime numbers, the monitor's reading and the members' reading
    combined into one word (``'accurate'``, ``'hot'``, ...).
    """
    return self._readings.verdict

  @property
  def _writing(self):
    """True if this process streams to `directory` (the chief, in multi-worker runs)."""
    return self._run is not None and self._writes

  def on_train_end(self, logs=None):
    self._readings.end(self.model, lambda: self.ensemble, logs)
    self._checks.check_noise(self.model, self.likelihood)
    self._checks.judge(final=True)
    self._nonfinite.report(self.model.optimizer)
    if self._writing:
      self._epoch = self._epochs_done
      self.save_checkpoint()
      self._run.release()

  def on_epoch_begin(self, epoch, logs=None):
    if not self._burnin_checked:
      self._burnin_checked = True
      if not self.members:
        self.sample_points.check_reachable(
            self.unit, self.params, int(np.asarray(
                self.model.optimizer.iterations)), epoch)
    self._epoch = epoch
    self._epoch_start = int(np.asarray(self.model.optimizer.iterations))
    self._readings.epoch_begin(epoch, logs)
    if self._writing:
      self.save_checkpoint()

  def on_train_batch_end(self, batch, logs=None):
    self._readings.batch_end(batch, logs)
    if not self._counts_per_batch:
      return
    step, last, skipped = self._count_steps(logs)
    if self.unit == 'step':
      if self.sample_points.due(step, last) or self._pending:
        self._pending = skipped > 0
        if not self._pending:
          self.collect(step)

  def _count_steps(self, logs):
    """``(step, last step counted, skipped since)``: the optimizer's skipped steps counted (`fit_checks.NonfiniteCount`) and logged."""
    step = int(self.model.optimizer.iterations.numpy())
    last = step - 1 if self._last_step is None else self._last_step
    skipped = self._nonfinite.check(self.model.optimizer, step - last,
                                    self.nonfinite)
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
    if self.unit == 'epoch' and self.sample_points.due(epoch + 1, epoch):
      self.collect(int(self.model.optimizer.iterations.numpy()))
    self._checks.check_collapse(self.model, self.likelihood, logs)
    start = epoch if self.unit == 'epoch' else getattr(self, '_epoch_start', 0)
    if start >= self.burnin:
      self._checks.record(self.model, self.likelihood,
                          (logs or {}).get('loss'))
    self._readings.epoch_end(self.model, self.params, epoch, logs,
                             check=epoch >= 1 and start >= self.burnin)
    if logs is None:
      return
    logs['num_nonfinite'] = self.num_nonfinite
    metrics = None if self._scores is None else self._scores.metrics()
    if metrics is not None:
      logs['val_ensemble_log_likelihood'] = metrics['log_likelihood']
      key = 'accuracy' if self.likelihood.is_classification else 'rmse'
      logs['val_ensemble_' + key] = metrics[key]

  # -- taking a sample --------------------------------------------------------
  def collect(self, step):
    """Snapshots the model's weights now, as the sample of `step`.

    With a cyclical schedule (`tfp_adaptive.keras.schedules.Cyclical`), a
    sample whose last step explored (no noise) is not taken, and the others
    are tagged with their cycle. None is taken while the learning rate is
    0 (`CurvatureCalibration` holds it there until its first reading).
    """
    stages = getattr(self.model.optimizer, 'learning_rate_schedule', None)
    cycle = None
    if callable(getattr(stages, 'sampling', None)):
      if not bool(stages.sampling(step - 1)):
        return
      cycle = int(stages.cycle(step - 1))
    lr = float(np.asarray(self.model.optimizer.learning_rate))
    if lr == 0.:
      # A chain held at rate 0 (`CurvatureCalibration` filling the metric
      # before its first reading) has not moved: no sample to take.
      return
    rows = self._take()
    if not all(np.all(np.isfinite(a)) for values in rows for a in values
               if np.issubdtype(a.dtype, np.floating)):
      self._skip(step, 'non-finite weights')
      return
    fingerprint = members_lib.fingerprint([a for row in rows for a in row])
    if fingerprint == self._fingerprint:
      self._skip(step, 'the same weights as the previous sample (the '
                 'optimizer did not move)')
      return
    self._fingerprint = fingerprint
    several = len(rows) > 1
    for chain, values in enumerate(rows):
      slot = self.window.slot(self.members)
      if slot is not None and self._writes:
        self._keep(slot, step, lr, values, cycle,
                   chain if several else None)
    self._score(lr)

  def _take(self):
    """The weights of each chain now (one list of arrays per chain), frozen part shared."""
    rows, self._frozen = chains_lib.take(self.model, self._frozen)
    return rows

  def _skip(self, step, why):
    if self.nonfinite == 'raise':
      raise FloatingPointError('Sample of step %d not taken: %s.' % (step, why))
    self.num_skipped += 1
    warnings.warn('SampleCollector: the sample of step %d was not taken: %s '
                  '(%d so far).' % (step, why, self.num_skipped))

  def _keep(self, slot, step, lr, values, cycle=None, chain=None):
    """Puts the sample in `slot`; with a directory, file first, then the manifest."""
    if self._run is not None:
      member = self._run.write_member(
          step, lr, [v.path for v in self._member_model.weights], values,
          cycle, self._frozen, chain)
    else:
      member = members_lib.Member(
          step, lr, values, None, chain=chain or 0, cycle=cycle,
          frozen=None if self._frozen is None else self._frozen.digest)
    if slot < len(self.members):
      self.members[slot] = member
    else:
      self.members.append(member)
    if self._run is not None:
      self._commit()  # Then deletes an evicted file no manifest lists.

  def _score(self, lr):
    """The sample joins the running ensemble of `validation_data`."""
    if self._scores is None:
      return
    share = self._scores.add(
        self.model, lr if self.weighting == 'step_size' else 1.)
    if share > health.OFF_RANGE_SHARE:
      self._checks.warn_posterior([(
          'noise', 'the sample of step %d predicts outside the validation '
          'targets\' range (widened by its width) at %.0f%% of the points'
          % (int(np.asarray(self.model.optimizer.iterations)), 100 * share))])

  @property
  def ensemble(self):
    """The collected samples as a `BayesianEnsemble` (ordered by step)."""
    if self.model is None:
      raise ValueError('The collector has not been used in `fit` yet.')
    if self._run is not None and not self._writing:
      raise ValueError(
          'This worker is not the chief of the MultiWorkerMirroredStrategy '
          'run: only the chief writes the samples to %s. Load them there, '
          'with BayesianEnsemble.load.' % self.directory)
    members = sorted(self.members, key=lambda m: m.step)
    likelihood = self.likelihood or likelihoods.resolve_likelihood(
        self.model, *self._likelihood_args)
    return ensemble_lib.BayesianEnsemble(self._member_model, members,
                                         likelihood=likelihood,
                                         weighting=self.weighting)

  @property
  def _member_model(self):
    """The model the members are samples of (`chains.member_model`)."""
    return chains_lib.member_model(self.model)

  # -- the sample directory ---------------------------------------------------
  def _commit(self, checkpoint=None):
    """Writes the manifest listing the members (`RunDirectory.commit`)."""
    self._run.commit(self.members, self.model, self.likelihood, self.weighting,
                     checkpoint)

  def save_checkpoint(self):
    """Writes the model, optimizer and collector state, then commits the manifest.

    Called at the start of every epoch: a resumed run replays the epoch
    from there, so it ends at the same step as an uninterrupted one.
    """
    model, opt = self.model, self.model.optimizer
    if not opt.built:
      opt.build(model.trainable_variables)
    running_weight, running = (self._scores.get_state()
                               if self._scores is not None else (0., {}))
    state = {
        'num_skipped': self.num_skipped,
        'num_nonfinite': self.num_nonfinite,
        'fingerprint': self._fingerprint,
        'window': self.window.get_state(),
        'pending': self._pending,
        'running': {'weight': running_weight, 'fields': list(running)},
    }
    self._run.save_checkpoint(model, self._epoch, state, running.values(),
                              self.members, self.likelihood, self.weighting)

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
    self.set_model(model)
    return self._run.restore(
        model, lambda meta: len(meta.get('running', {'fields': []})['fields']),
        lambda *saved: self._set_state(model, *saved))

  def _set_state(self, model, meta, running_arrays, members):
    """The collector's state from a checkpoint (`restore`)."""
    self.members = members
    self.num_skipped = meta['num_skipped']
    self.num_nonfinite = meta['num_nonfinite']
    self._fingerprint = meta['fingerprint']
    self.window.set_state(meta['window'])
    self._nonfinite.start(model.optimizer, restart=True)
    self._last_step = int(meta['step'])
    self._pending = bool(meta.get('pending', False))
    self._epoch = self._epochs_done = int(meta['epoch'])
    self.likelihood = likelihoods.resolve_likelihood(
        model, *self._likelihood_args)
    running = meta.get('running', {'weight': 0., 'fields': []})
    if running['fields'] and self.validation_data is not None:
      self._scores = running_ensemble.RunningEnsemble(self.validation_data,
                                                      self.likelihood)
      self._scores.set_state(running['weight'], dict(
          zip(running['fields'], running_arrays)))
    self._commit()  # Drops the samples taken after the checkpoint.
    return self._epoch
