"""`check_loop`: a custom training loop's samples checked as `SampleCollector` checks a `fit`."""

import keras
import numpy as np

from tfp_adaptive.keras import ensemble as ensemble_lib
from tfp_adaptive.keras import fit_checks
from tfp_adaptive.keras import members as members_lib
from tfp_adaptive.keras import optimizer_base

__all__ = ['check_loop']

_WHO = 'tfa.keras.check_loop'


def check_loop(model, snapshots, x, y, loss=None, optimizer=None,
               likelihood=None, from_logits=None, **kwargs):
  """Reads a custom loop's samples as the collector reads a `fit`'s, and warns the same way.

  A custom `tf.GradientTape` loop with one of our optimizers has no
  callback to watch it. Keep snapshots of the weights as the loop goes
  (``model.get_weights()`` every few steps after burn-in), then call this
  once: it warns about steps the optimizer skipped as non-finite
  (`num_nonfinite`) and reads the configurational temperature, the mean
  force and the force along the predictions of the snapshots on the
  training data (`BayesianEnsemble.check_temperature`), warning when the
  run is hot, cold, off balance or has not settled, with the factor for
  the learning rate.

  Args:
    model: the `keras.Model` the loop trained. If it is not compiled, it is
      compiled with `optimizer` and `loss` (nothing else of it changes).
    snapshots: at least 4 snapshots of the weights, each a list in
      ``model.weights`` order (``model.get_weights()``), oldest first; or
      `tfp_adaptive.keras.members.Member` tuples.
    x, y: the training data (arrays, or a `tf.data.Dataset` of pairs).
    loss: the loop's loss (a Keras loss or its name); needed when `model`
      is not compiled.
    optimizer: the loop's sampler (default: ``model.optimizer``).
    likelihood, from_logits: as in `BayesianEnsemble` (default: from the
      loss).
    **kwargs: passed to `BayesianEnsemble.check_temperature` (e.g.
      ``max_members``, ``seed``, ``prediction_inputs``).

  Returns:
    `BayesianEnsemble` of the snapshots (``.predict``, ``.evaluate``,
    ``.save``), with the readings of ``check_temperature`` as its
    ``readings`` attribute.

  Example:
    >>> snapshots = []
    >>> for step, (xb, yb) in enumerate(dataset):
    ...   train_step(xb, yb)                    # opt.apply(grads, vars)
    ...   if step >= burnin and step % 50 == 0:
    ...     snapshots.append(model.get_weights())
    >>> tfa.keras.check_loop(model, snapshots, x, y, loss=loss_fn,
    ...                      optimizer=opt)
  """
  if not isinstance(model, keras.Model):
    raise TypeError('`model` must be a keras.Model. Received: %r' % (model,))
  if optimizer is not None and not isinstance(
      optimizer, optimizer_base.SamplerOptimizer):
    raise TypeError('`optimizer` must be a sampler of '
                    'tfp_adaptive.keras.optimizers. Received: %r'
                    % (optimizer,))
  compiled = getattr(model, 'compiled', False)
  if loss is None and not compiled:
    raise ValueError(
        '`check_loop` reads the energy the loop sampled, which needs its '
        'loss: pass `loss=` (the loop\'s loss function), or compile the '
        'model with it.')
  if not compiled or loss is not None or optimizer is not None:
    model.compile(
        optimizer=optimizer if optimizer is not None else model.optimizer,
        loss=loss if loss is not None else model.loss)
  opt = optimizer_base.sampler_of(model, _WHO)
  members = _members(model, snapshots, opt)
  fit_checks.report_skipped(_WHO, fit_checks.optimizer_count(opt), opt)
  ensemble = ensemble_lib.BayesianEnsemble(
      model, members, likelihood=likelihood, from_logits=from_logits)
  ensemble.readings = ensemble.check_temperature(x, y, **kwargs)
  return ensemble


def _members(model, snapshots, opt):
  """`Member`s of chain 0 from weight lists (or `Member`s passed through)."""
  if isinstance(snapshots, (str, bytes)) or not hasattr(snapshots,
                                                         '__len__'):
    raise TypeError('`snapshots` must be a list of weight lists '
                    '(model.get_weights()) or of Members. Received: %r'
                    % (type(snapshots).__name__,))
  if len(snapshots) < 4:
    raise ValueError('`snapshots` must hold at least 4 snapshots of the '
                     'weights to read a run from. Received: %d.'
                     % len(snapshots))
  rate = float(np.asarray(opt.learning_rate))
  out = []
  for i, snap in enumerate(snapshots):
    if isinstance(snap, members_lib.Member):
      out.append(snap)
      continue
    values = [np.asarray(v) for v in snap]
    members_lib.check_structure(model, values, 'snapshot %d' % i)
    out.append(members_lib.Member(step=i, learning_rate=rate,
                                  weights=values, path=None))
  return out
