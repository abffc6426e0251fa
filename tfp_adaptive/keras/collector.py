"""`SampleCollector`: a Keras callback that snapshots posterior samples during `fit`.

``model.fit(x, y, callbacks=[SampleCollector()])`` and then
``collector.ensemble`` is a `BayesianEnsemble`. With a corrected or original
sampler the collector also switches on Γ (`enable_gamma`), so that one line
is all `fit` needs. Steps are the optimizer's iteration counter, so a resumed
run continues the schedule.
"""

import hashlib
import os
import warnings

import numpy as np
import tensorflow as tf
import keras

from tfp_adaptive import validation
from tfp_adaptive.keras import ensemble as ensemble_lib
from tfp_adaptive.keras import optimizer_base
from tfp_adaptive.keras import predictive
from tfp_adaptive.keras import sample_files
from tfp_adaptive.keras import selection
from tfp_adaptive.keras import training

__all__ = ['SampleCollector']

UNITS = ('step', 'epoch')
NONFINITE_POLICIES = ('skip', 'raise')
_CHECKPOINT = 'checkpoint.npz'


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
      and checkpoints to.
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
      ``nonfinite='raise'`` raises here too, also under XLA.
    validation_data: optional ``(x, y)`` or a `tf.data.Dataset` of
      ``(x, y)``: the running ensemble of every sample taken is scored at
      each epoch end (``val_ensemble_log_likelihood``, and
      ``val_ensemble_accuracy`` or ``val_ensemble_rmse``) without keeping the
      samples for it.
    stuck_steps: warn when this many consecutive optimizer steps were all
      skipped (a chain that no longer moves).
    seed: seed of the reservoir's random choices.

  Attributes:
    members: the `Member`s kept.
    num_nonfinite: optimizer steps skipped as non-finite during `fit`.
    num_skipped: due samples not taken (non-finite or repeated weights).
  """

  def __init__(self, burnin=0, thinning=1, max_samples=None,
               window='reservoir', unit='step', directory=None,
               likelihood=None, from_logits=None, noise_variance=None,
               weighting='uniform', nonfinite='skip', validation_data=None,
               stuck_steps=100, seed=0):
    super().__init__()
    self.schedule = selection.Schedule(burnin, thinning)
    self.window = selection.Window(max_samples, window, seed)
    self.unit = validation.check_choice('unit', unit, UNITS)
    if directory is not None and not isinstance(directory, (str, os.PathLike)):
      raise TypeError('`directory` must be a path or None. Received: '
                      'directory=%r' % (directory,))
    self.directory = None if directory is None else os.fspath(directory)
    self._likelihood_args = (likelihood, from_logits, noise_variance)
    if likelihood is not None:  # Checked now; `None` is read at `fit`.
      ensemble_lib.resolve_likelihood(None, *self._likelihood_args)
    self.weighting = validation.check_choice(
        'weighting', weighting, ensemble_lib.WEIGHTINGS)
    self.nonfinite = validation.check_choice('nonfinite', nonfinite,
                                             NONFINITE_POLICIES)
    if validation_data is not None and not (
        isinstance(validation_data, tf.data.Dataset) or
        (isinstance(validation_data, (tuple, list)) and
         len(validation_data) == 2)):
      raise TypeError('`validation_data` must be (x, y) or a tf.data.Dataset '
                      'of (x, y). Received: %r' % (type(validation_data),))
    self.validation_data = validation_data
    self.stuck_steps = validation.check_int('stuck_steps', stuck_steps, low=1)
    self.members = []
    self.num_skipped = 0
    self.num_nonfinite = 0
    self.likelihood = None
    self._epoch = 0
    self._val = None
    self._running = None
    self._optimizer_nonfinite = None
    self._last_step = None
    self._pending = False
    self._unmoved = 0
    self._fingerprint = None

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
    if self.validation_data is not None and self._val is None:
      x, y = self.validation_data if not isinstance(
          self.validation_data, tf.data.Dataset) else (self.validation_data,
                                                       None)
      self._val = ensemble_lib.as_arrays(x, y)
      if self._val[1] is None:
        raise ValueError('`validation_data` must yield targets (x, y).')
    if self._optimizer_nonfinite is None:
      self._optimizer_nonfinite = _nonfinite_count(opt)

  def on_epoch_begin(self, epoch, logs=None):
    self._epoch = epoch

  def on_train_batch_end(self, batch, logs=None):
    step = int(self.model.optimizer.iterations.numpy())
    last = step - 1 if self._last_step is None else self._last_step
    skipped = self._check_nonfinite(step - last)
    if logs is not None:
      logs['num_nonfinite'] = self.num_nonfinite
    if self.unit == 'step':
      if self.schedule.due(step, last) or self._pending:
        self._pending = skipped > 0
        if not self._pending:
          self.collect(step)
    self._last_step = step

  def on_epoch_end(self, epoch, logs=None):
    if self.unit == 'epoch' and self.schedule.due(epoch + 1, epoch):
      self.collect(int(self.model.optimizer.iterations.numpy()))
    if logs is None:
      return
    logs['num_nonfinite'] = self.num_nonfinite
    if self._running is not None:
      metrics = self._running.metrics()
      logs['val_ensemble_log_likelihood'] = metrics['log_likelihood']
      key = 'accuracy' if self.likelihood.is_classification else 'rmse'
      logs['val_ensemble_' + key] = metrics[key]

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
    """Snapshots the model's weights now, as the sample of `step`."""
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
    if slot is not None:
      self._store(slot, step, lr, values)
    self._update_running(lr)
    if self.directory:
      self.save_checkpoint()

  def _skip(self, step, why):
    if self.nonfinite == 'raise':
      raise FloatingPointError('Sample of step %d not taken: %s.' % (step, why))
    self.num_skipped += 1
    warnings.warn('SampleCollector: the sample of step %d was not taken: %s '
                  '(%d so far).' % (step, why, self.num_skipped))

  def _store(self, slot, step, lr, values):
    if self.directory:
      names = [v.path for v in self.model.weights]
      sample_files.write_sample(self.directory, step, names, values,
                                {'learning_rate': lr})
      member = ensemble_lib.Member(
          step, lr, None, sample_files.sample_path(self.directory, step))
    else:
      member = ensemble_lib.Member(step, lr, values, None)
    if slot < len(self.members):
      old = self.members[slot]
      if old.path and old.path != member.path and os.path.exists(old.path):
        os.remove(old.path)
      self.members[slot] = member
    else:
      self.members.append(member)

  def _update_running(self, lr):
    if self._val is None:
      return
    if self._running is None:
      self._running = predictive.Predictive(self.likelihood, self._val[1])
    w = lr if self.weighting == 'step_size' else 1.
    self._running.add(w, self.model.predict(self._val[0], verbose=0))

  @property
  def ensemble(self):
    """The collected samples as a `BayesianEnsemble` (ordered by step)."""
    if self.model is None:
      raise ValueError('The collector has not been used in `fit` yet.')
    members = sorted(self.members, key=lambda m: m.step)
    likelihood = self.likelihood or ensemble_lib.resolve_likelihood(
        self.model, *self._likelihood_args)
    return ensemble_lib.BayesianEnsemble(self.model, members,
                                         likelihood=likelihood,
                                         weighting=self.weighting)

  # -- checkpoints ------------------------------------------------------------
  def save_checkpoint(self):
    """Atomically writes model weights, optimizer state and collector state."""
    opt = self.model.optimizer
    model_values = [v.numpy() for v in self.model.weights]
    opt_values = [v.numpy() for v in opt.variables]
    meta = {
        'names': [None] * (len(model_values) + len(opt_values)),
        'num_model': len(model_values),
        'epoch': self._epoch,
        'step': int(opt.iterations.numpy()),
        'num_skipped': self.num_skipped,
        'num_nonfinite': self.num_nonfinite,
        'members': [[m.step, m.learning_rate] for m in self.members],
        'window': self.window.get_state(),
    }
    sample_files.write_arrays(os.path.join(self.directory, _CHECKPOINT),
                              model_values + opt_values, meta)

  def restore(self, model):
    """Restores `model`, its optimizer and this collector from `directory`.

    Call after `model.compile`; then ``model.fit(..., initial_epoch=...)``
    with the returned epoch. Samples written after the checkpoint (a crash
    between the two writes) are removed: their steps are collected again.

    Returns:
      The epoch to resume from (0 if there is no checkpoint).
    """
    if not self.directory:
      raise ValueError('`restore` needs a `directory`.')
    sample_files.remove_partial_writes(self.directory)
    path = os.path.join(self.directory, _CHECKPOINT)
    if not os.path.exists(path):
      return 0
    arrays, meta = sample_files.read_arrays(path)
    k = meta['num_model']
    ensemble_lib.assign_weights(model, arrays[:k])
    model.optimizer.build(model.trainable_variables)
    opt_vars = model.optimizer.variables
    if len(opt_vars) != len(arrays) - k:
      raise sample_files.SampleFileError(
          'Checkpoint %s holds %d optimizer variables, the optimizer has %d.'
          % (path, len(arrays) - k, len(opt_vars)))
    for v, a in zip(opt_vars, arrays[k:]):
      v.assign(a)
    kept = {int(s): lr for s, lr in meta['members']}
    for step, file in sample_files.list_samples(self.directory):
      if step not in kept:
        os.remove(file)
    self.members = [ensemble_lib.Member(
        s, lr, None, sample_files.sample_path(self.directory, s))
                    for s, lr in sorted(kept.items())]
    for m in self.members:
      sample_files.read_sample(m.path)  # A corrupted sample fails loudly here.
    self.num_skipped = meta['num_skipped']
    self.num_nonfinite = meta.get('num_nonfinite', 0)
    self.window.set_state(meta['window'])
    self._optimizer_nonfinite = _nonfinite_count(model.optimizer)
    self.set_model(model)
    self._last_step = int(meta['step'])
    return int(meta['epoch'])


def _nonfinite_count(optimizer):
  count = getattr(optimizer, 'num_nonfinite', None)
  return 0 if count is None else int(np.asarray(count))


def _fingerprint(values):
  digest = hashlib.sha1()
  for a in values:
    digest.update(np.ascontiguousarray(a).data)
  return digest.hexdigest()
