"""What a sampler optimizer sums inside its own steps for the callbacks that read them: one slot, `StepStatistics`.

A `SamplerOptimizer` holds one `StepStatistics` (its ``statistics``) and
fills it in every step: the regime sums (`tfp_adaptive.keras.regime_sums`)
once a callback asks for them with `StepStatistics.track_regime`, and the
virials of the configurational temperature (`VirialSums`) once one monitor
asks with `StepStatistics.track_virials`. The callbacks only call these
methods and read what they return; nothing else is set on the optimizer.
The sums are plain TensorFlow variables outside the optimizer's own, so
checkpoints and saved optimizers do not depend on them.
"""

import numpy as np
import tensorflow as tf

from tfp_adaptive.core import tensors
from tfp_adaptive.keras import epoch_reads
from tfp_adaptive.keras import regime_sums

__all__ = ['StepStatistics', 'VirialSums']


class StepStatistics(object):
  """The optimizer's statistics slot: what its steps sum, and who reads it in the current `fit`.

  Attributes:
    regime: the `RegimeState` the steps add their step norms to, or `None`.
    virials: the `VirialSums` of the temperature's reading, or `None`.
    reader: the monitor that reads `virials` in the current `fit`, or
      `None`.
    members_read_at: the step at which a `fit` whose members are read on
      its training data began (`claim_members`), or `None`.
    nonfinite_after_batch: whether a callback checks the non-finite count
      after every batch (then ``nonfinite='raise'`` under XLA raises
      there).
  """

  def __init__(self):
    self.regime = None
    self.virials = None
    self.reader = None
    self._claimed_at = None
    self.members_read_at = None
    self.nonfinite_after_batch = False

  @property
  def wants_ratios(self):
    """Whether a step must compute its norms (for `regime` or `virials`)."""
    return self.regime is not None or self.virials is not None

  def accumulate(self, parts, target_grads, norms, drift, learning_rate, ok,
                 index):
    """Adds one step (in the step's graph); a skipped step (`ok` false) adds nothing."""
    if self.virials is not None:
      self.virials.accumulate(parts, target_grads, drift, learning_rate, ok,
                              index)
    if self.regime is not None:
      self.regime.accumulate(norms, ok)

  def track_regime(self, model):
    """The `RegimeState` the steps fill, created (and `fit`'s step retraced) if missing."""
    if self.regime is None:
      self.regime = regime_sums.RegimeState()
      model.make_train_function(force=True)
    return self.regime

  def claim_virials(self, reader, step, fix):
    """`reader` reads the temperature in the `fit` that starts at `step`: one reader per `fit`.

    A claim made at another step belongs to a `fit` that ended without
    `on_train_end` (an exception) and is dropped.

    Args:
      reader: the monitor.
      step: the optimizer's iteration count now.
      fix: what the error says to do when another monitor reads this fit.

    Raises:
      ValueError: another monitor reads this `fit`.
    """
    if (self.reader is not None and self.reader is not reader and
        self._claimed_at == step):
      raise ValueError(fix)
    self.reader, self._claimed_at = reader, step

  def track_virials(self, model, variables):
    """The `VirialSums` the steps fill, created (and `fit`'s step retraced) if missing.

    Args:
      model: the model.
      variables: the optimizer's variables, in its order.
    """
    if self.virials is None:
      self.virials = VirialSums(variables)
      model.make_train_function(force=True)
    return self.virials

  def release(self, reader):
    """At the end of `reader`'s `fit`."""
    if self.reader is reader:
      self.reader = None

  def claim_members(self, reads, step):
    """At a `fit`'s start, whether its members are read on the training data.

    Called by `SampleCollector` (`reads`: it has `training_data`) and by a
    standalone `SamplerMonitor` (`reads=None`: it keeps a claim made at
    this step by the collector of the same `fit`). A claim made at another
    step belongs to a `fit` that ended without `on_train_end` (an
    exception): it is dropped, and the `drift_ratio` warnings that fit
    held for its members are given.
    """
    if reads is None and self.members_read_at == step:
      return
    self.members_read_at = step if reads else None
    if self.regime is not None:
      self.regime.settle_deferred(None)

  def members_read(self):
    """At the end of the `fit` whose members were read."""
    self.members_read_at = None

  def check_nonfinite_after_batch(self):
    """A callback checks the non-finite count after every batch (`SampleCollector`)."""
    self.nonfinite_after_batch = True


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

  def end_epoch(self, count, move_center):
    """Counts the epoch's `count` steps (as `VirialSums` read them) into the mean; with `move_center`, the centre becomes the mean so far. The count, as a float."""
    count = float(count)
    self.total += count
    if move_center and self.total > 0:
      for c, s in zip(self.center, self.theta_sum):
        c.assign(s / self.total)
    return count

  def restart_mean(self):
    for s in self.theta_sum:
      s.assign(tf.zeros_like(s))
    self.total = 0.


class VirialSums(object):
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
    self._reader = epoch_reads.Reader([
        self.every.dots, self.every.count, self.reshuffle, self.first.dots,
        self.first.count])

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
    dots, count, reshuffle, first_dots, first = self._reader.take()
    count = self.every.end_epoch(count, move_center)
    first = self.first.end_epoch(first, move_center)
    return (dots, reshuffle, count), (first_dots, first)

  def restart_mean(self):
    """Starts the running means afresh (each epoch of the first half of burn-in)."""
    self.every.restart_mean()
    self.first.restart_mean()
