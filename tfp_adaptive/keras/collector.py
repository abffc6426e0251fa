"""`SampleCollector`: a Keras callback that snapshots posterior samples during `fit`.

``model.fit(x, y, callbacks=[SampleCollector(burnin=1000, thinning=100)])``
then ``collector.ensemble`` is a `BayesianEnsemble`. Steps are the
optimizer's iteration counter, so a resumed run continues the schedule.
With ``directory``, each sample is a separate atomic ``.npz`` file, RAM stays
bounded, and a checkpoint (model weights, optimizer state, collector state)
is written after every sample, so `restore` resumes a killed run without
losing or duplicating a sample.
"""

import os
import warnings

import numpy as np
import keras

from tfp_adaptive import validation
from tfp_adaptive.keras import ensemble as ensemble_lib
from tfp_adaptive.keras import sample_files

__all__ = ['SampleCollector']

WINDOWS = ('reservoir', 'last')
UNITS = ('step', 'epoch')
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
    task, from_logits, weighting, noise_variance: passed to the ensemble.
    nonfinite: a snapshot (or optimizer step) with NaN/Inf is ``'skip'``ped
      (counted in `num_skipped`, with a warning) or makes `fit` ``'raise'``
      `FloatingPointError`. No non-finite member ever enters the ensemble.
    validation_data: optional ``(x, y)``; for classification the running
      ensemble's ``val_ensemble_log_likelihood`` and ``val_ensemble_accuracy``
      are added to the epoch logs (and so to the Keras history) without
      keeping the samples for it.
    seed: seed of the reservoir's random choices.
  """

  def __init__(self, burnin=0, thinning=1, max_samples=None,
               window='reservoir', unit='step', directory=None,
               task='classification', from_logits=False, weighting='uniform',
               noise_variance=1., nonfinite='skip', validation_data=None,
               seed=0):
    super().__init__()
    self.burnin = validation.check_int('burnin', burnin, low=0)
    self.thinning = validation.check_int('thinning', thinning, low=1)
    if max_samples is not None:
      validation.check_int('max_samples', max_samples, low=1)
    self.max_samples = max_samples
    self.window = validation.check_choice('window', window, WINDOWS)
    self.unit = validation.check_choice('unit', unit, UNITS)
    self.directory = directory
    self.task = validation.check_choice('task', task, ensemble_lib.TASKS)
    self.from_logits = from_logits
    self.weighting = validation.check_choice('weighting', weighting,
                                             ensemble_lib.WEIGHTINGS)
    self.noise_variance = noise_variance
    self.nonfinite = validation.check_choice('nonfinite', nonfinite,
                                             ('skip', 'raise'))
    self.validation_data = validation_data
    self.members = []
    self.num_seen = 0
    self.num_skipped = 0
    self._rng = np.random.default_rng(seed)
    self._epoch = 0
    self._running = None
    self._optimizer_nonfinite = 0
    self._last_step = None

  # -- schedule -------------------------------------------------------------
  def _slot_index(self, count):
    """Number of schedule points ``burnin + k·thinning`` (k >= 1) <= count."""
    return max(count - self.burnin, 0) // self.thinning

  def _due(self, count, last):
    """A schedule point lies in (last, count] (robust to steps_per_execution)."""
    return self._slot_index(count) > self._slot_index(last)

  def on_epoch_begin(self, epoch, logs=None):
    self._epoch = epoch

  def on_train_batch_end(self, batch, logs=None):
    self._check_optimizer()
    if self.unit == 'step':
      step = int(self.model.optimizer.iterations.numpy())
      if self._last_step is None:
        self._last_step = step - 1
      if self._due(step, self._last_step):
        self.collect(step)
      self._last_step = step

  def on_epoch_end(self, epoch, logs=None):
    if self.unit == 'epoch' and self._due(epoch + 1, epoch):
      self.collect(int(self.model.optimizer.iterations.numpy()))
    if self._running is not None and logs is not None:
      total, weight = self._running
      metrics = ensemble_lib.classification_metrics(
          total / weight, self.validation_data[1])
      logs['val_ensemble_log_likelihood'] = metrics['log_likelihood']
      logs['val_ensemble_accuracy'] = metrics['accuracy']

  def _check_optimizer(self):
    count = getattr(self.model.optimizer, 'num_nonfinite', None)
    if count is None:
      return
    count = int(count.numpy())
    if count > self._optimizer_nonfinite:
      new = count - self._optimizer_nonfinite
      self._optimizer_nonfinite = count
      if self.nonfinite == 'raise':
        raise FloatingPointError(
            '%d optimizer step(s) had a non-finite gradient, Γ or weights and '
            'were skipped; lower the learning rate or check the model.' % new)

  # -- taking a sample ------------------------------------------------------
  def collect(self, step):
    """Snapshots the model's weights now, as the sample of `step`."""
    values = [v.numpy() for v in self.model.weights]
    if not all(np.all(np.isfinite(a)) for a in values
               if np.issubdtype(a.dtype, np.floating)):
      if self.nonfinite == 'raise':
        raise FloatingPointError('Non-finite weights at step %d: not '
                                 'collected.' % step)
      self.num_skipped += 1
      warnings.warn('SampleCollector: non-finite weights at step %d were not '
                    'collected (%d so far).' % (step, self.num_skipped))
      return
    self.num_seen += 1
    slot = self._slot()
    if slot is None:
      return
    names = [v.path for v in self.model.weights]
    lr = float(np.asarray(self.model.optimizer.learning_rate))
    if self.directory:
      sample_files.write_sample(self.directory, step, names, values,
                                {'learning_rate': lr})
      member = ensemble_lib.Member(step, lr, None,
                                   sample_files.sample_path(self.directory, step))
    else:
      member = ensemble_lib.Member(step, lr, dict(zip(names, values)), None)
    if slot < len(self.members):
      old = self.members[slot]
      if old.path and old.path != member.path and os.path.exists(old.path):
        os.remove(old.path)
      self.members[slot] = member
    else:
      self.members.append(member)
    self._update_running(lr)
    if self.directory:
      self.save_checkpoint()

  def _slot(self):
    """Index the new sample goes to, or `None` to drop it."""
    n = len(self.members)
    if self.max_samples is None or n < self.max_samples:
      return n
    if self.window == 'last':
      self.members.sort(key=lambda m: m.step)
      return 0  # Replace the oldest; re-sorted by `ensemble`.
    j = int(self._rng.integers(self.num_seen))
    return j if j < self.max_samples else None

  def _update_running(self, lr):
    if self.validation_data is None or self.task != 'classification':
      return
    probs = self.model.predict(self.validation_data[0], verbose=0)
    probs = np.asarray(probs, np.float64)
    if self.from_logits:
      probs = np.exp(probs - probs.max(-1, keepdims=True))
      probs /= probs.sum(-1, keepdims=True)
    w = lr if self.weighting == 'step_size' else 1.
    if self._running is None:
      self._running = (w * probs, w)
    else:
      self._running = (self._running[0] + w * probs, self._running[1] + w)

  @property
  def ensemble(self):
    """The collected samples as a `BayesianEnsemble` (ordered by step)."""
    members = sorted(self.members, key=lambda m: m.step)
    return ensemble_lib.BayesianEnsemble(
        self.model, members, task=self.task, from_logits=self.from_logits,
        weighting=self.weighting, noise_variance=self.noise_variance)

  # -- checkpoints ----------------------------------------------------------
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
        'num_seen': self.num_seen,
        'num_skipped': self.num_skipped,
        'members': [[m.step, m.learning_rate] for m in self.members],
        'rng': self._rng.bit_generator.state,
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
    for v, a in zip(model.weights, arrays[:k]):
      v.assign(a)
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
    self.members = [ensemble_lib.Member(s, lr, None,
                                        sample_files.sample_path(self.directory, s))
                    for s, lr in sorted(kept.items())]
    for m in self.members:
      sample_files.read_sample(m.path)  # A corrupted sample fails loudly here.
    self.num_seen = meta['num_seen']
    self.num_skipped = meta['num_skipped']
    self._rng.bit_generator.state = meta['rng']
    count = getattr(model.optimizer, 'num_nonfinite', None)
    self._optimizer_nonfinite = 0 if count is None else int(count.numpy())
    self.set_model(model)
    self._last_step = int(meta['step'])
    return int(meta['epoch'])
