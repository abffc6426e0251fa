"""`BayesianEnsemble`: posterior samples of a Keras model's weights, used as one predictor.

Classification predicts the posterior predictive ``p(y|x) ≈ Σ_s w_s
p(y|x, θ_s)`` (Rensmeyer & Niggemann 2025, eq. 4), with uniform weights or,
for decreasing step sizes, weights proportional to the step size (Welling &
Teh 2011; lecture eq. 3.8). Regression returns the predictive mean and the
variance of the member means (plus a known observation-noise variance).
"""

import collections
import json
import os

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
import keras

from tfp_adaptive import validation
from tfp_adaptive.keras import sample_files

__all__ = ['BayesianEnsemble', 'Member']

TASKS = ('classification', 'regression')
WEIGHTINGS = ('uniform', 'step_size')

# One posterior sample: the step it was taken at, the learning rate then, and
# either its weights ({variable path: array}) or the file holding them.
Member = collections.namedtuple('Member', ['step', 'learning_rate', 'weights',
                                           'path'])


def _member_weights(member):
  if member.weights is not None:
    return member.weights
  return sample_files.read_sample(member.path)[0]


class BayesianEnsemble(object):
  """A Keras model together with posterior samples of its weights.

  Args:
    model: the `keras.Model` whose architecture the samples belong to. Its
      own weights are restored after every prediction.
    members: list of `Member`s (normally built by `SampleCollector`).
    task: ``'classification'`` (the model outputs class probabilities, or
      logits with ``from_logits=True``) or ``'regression'``.
    from_logits: Python bool.
    weighting: ``'uniform'`` or ``'step_size'``.
    noise_variance: regression only; observation-noise variance added to the
      predictive variance and used by the log-likelihood (default 1).
  """

  def __init__(self, model, members, task='classification', from_logits=False,
               weighting='uniform', noise_variance=1.):
    self.model = model
    self.members = list(members)
    self.task = validation.check_choice('task', task, TASKS)
    self.from_logits = bool(from_logits)
    self.weighting = validation.check_choice('weighting', weighting,
                                             WEIGHTINGS)
    self.noise_variance = validation.check_number(
        'noise_variance', noise_variance, low=0., low_open=True)

  def __len__(self):
    return len(self.members)

  def member_weights(self):
    """Normalised weights ``w_s`` of the members."""
    if not self.members:
      raise ValueError('The ensemble has no members: collect samples first '
                       '(check `burnin` and `thinning` against the steps run).')
    if self.weighting == 'uniform':
      w = np.ones(len(self.members))
    else:
      w = np.array([m.learning_rate for m in self.members], np.float64)
    return w / w.sum()

  def _set(self, weights):
    for v in self.model.weights:
      v.assign(weights[_match(v.path, weights)])

  def iterate_members(self):
    """Yields ``self.model`` with each member's weights loaded in turn.

    The model's own weights are restored afterwards (also on early exit), so
    any per-member computation (e.g. a curvature diagnostic) can use the
    model directly: ``for model in ensemble.iterate_members(): ...``.
    """
    original = [v.numpy() for v in self.model.weights]
    try:
      for member in self.members:
        self._set(_member_weights(member))
        yield self.model
    finally:
      for v, value in zip(self.model.weights, original):
        v.assign(value)

  def _member_outputs(self, x, batch_size):
    """Yields each member's output on `x` (probabilities or mean), as NumPy."""
    for model in self.iterate_members():
      out = np.asarray(model.predict(x, batch_size=batch_size, verbose=0),
                       np.float64)
      if self.task == 'classification' and self.from_logits:
        out = tf.nn.softmax(out, axis=-1).numpy()
      yield out

  def predict_members(self, x, batch_size=None):
    """Array ``[S, n, ...]`` of every member's probabilities (or means)."""
    return np.stack(list(self._member_outputs(x, batch_size)))

  def predict(self, x, batch_size=None):
    """Posterior predictive: probabilities, or ``(mean, variance)`` for regression.

    Streams over the members (one member's weights in memory at a time).
    """
    w = self.member_weights()
    first = second = None
    for ws, out in zip(w, self._member_outputs(x, batch_size)):
      first = ws * out if first is None else first + ws * out
      if self.task == 'regression':
        sq = ws * out ** 2
        second = sq if second is None else second + sq
    if self.task == 'classification':
      return first
    return first, np.maximum(second - first ** 2, 0.) + self.noise_variance

  def evaluate(self, x, y, batch_size=None, num_bins=15):
    """Log predictive likelihood, accuracy, ECE and Brier score (or RMSE).

    Returns:
      dict. Classification: ``log_likelihood`` (mean log p̄(y|x)),
      ``accuracy``, ``ece`` (`tfp.stats.expected_calibration_error`,
      `num_bins` bins), ``brier``. Regression: ``log_likelihood`` (Gaussian
      with the predictive variance), ``rmse``.
    """
    y = np.asarray(y)
    if self.task == 'regression':
      mean, var = self.predict(x, batch_size)
      y = y.reshape(mean.shape)
      ll = -0.5 * (np.log(2 * np.pi * var) + (y - mean) ** 2 / var)
      return {'log_likelihood': float(ll.mean()),
              'rmse': float(np.sqrt(((y - mean) ** 2).mean()))}
    probs = self.predict(x, batch_size)
    return classification_metrics(probs, y, num_bins)

  # -- files ---------------------------------------------------------------
  def save(self, directory):
    """Writes ``ensemble.json``, ``model.json`` and one ``.npz`` per member."""
    os.makedirs(directory, exist_ok=True)
    config = keras.saving.serialize_keras_object(self.model)
    _write_json(os.path.join(directory, 'model.json'), config)
    names = [v.path for v in self.model.weights]
    for m in self.members:
      w = _member_weights(m)
      sample_files.write_sample(directory, m.step, names,
                                [w[n] for n in names],
                                {'learning_rate': m.learning_rate})
    _write_json(os.path.join(directory, 'ensemble.json'), {
        'task': self.task, 'from_logits': self.from_logits,
        'weighting': self.weighting, 'noise_variance': self.noise_variance,
        'steps': [int(m.step) for m in self.members]})

  @classmethod
  def load(cls, directory, model=None):
    """Reads a saved ensemble; the model is rebuilt with Keras' safe mode.

    Raises:
      tfp_adaptive.keras.SampleFileError: a member file is missing,
        truncated or corrupted (no partial ensemble is returned).
    """
    meta = _read_json(os.path.join(directory, 'ensemble.json'))
    if model is None:
      config = _read_json(os.path.join(directory, 'model.json'))
      model = keras.saving.deserialize_keras_object(config, safe_mode=True)
    members = []
    for step in meta['steps']:
      path = sample_files.sample_path(directory, step)
      _, info = sample_files.read_sample(path)  # Validates every file now.
      members.append(Member(step, info.get('learning_rate', 1.), None, path))
    return cls(model, members, task=meta['task'],
               from_logits=meta['from_logits'], weighting=meta['weighting'],
               noise_variance=meta['noise_variance'])


def _match(path, weights):
  """The member key of the model variable `path`.

  Exact path, else the unique key equal to it up to leading scopes (a model
  rebuilt from its config may drop the outer model's name from the paths).
  """
  if path in weights:
    return path
  found = [k for k in weights
           if k.endswith('/' + path) or path.endswith('/' + k)]
  if len(found) != 1:
    raise ValueError('A member has %s value for the model variable %r; was it '
                     'collected from a different model?'
                     % ('no' if not found else 'more than one', path))
  return found[0]


def classification_metrics(probs, labels, num_bins=15):
  """Log-likelihood, accuracy, ECE and Brier of predictive probabilities.

  Raises:
    FloatingPointError: some probabilities are NaN/Inf (finite weights can
      still overflow, e.g. after a diverged chain); the metrics would be
      meaningless.
  """
  probs = np.asarray(probs, np.float64)
  bad = ~np.all(np.isfinite(probs), axis=-1)
  if bad.any():
    raise FloatingPointError(
        'The ensemble predicts non-finite probabilities for %d of %d inputs '
        '(a member overflowed: the chain diverged; lower the learning rate).'
        % (bad.sum(), len(bad)))
  labels = np.asarray(labels).reshape(-1).astype(np.int64)
  p_true = probs[np.arange(len(labels)), labels]
  onehot = np.eye(probs.shape[-1])[labels]
  ece = tfp.stats.expected_calibration_error(
      num_bins, logits=tf.math.log(np.maximum(probs, 1e-30).astype(np.float32)),
      labels_true=labels)
  return {
      'log_likelihood': float(np.mean(np.log(np.maximum(p_true, 1e-300)))),
      'accuracy': float(np.mean(np.argmax(probs, -1) == labels)),
      'ece': float(ece),
      'brier': float(np.mean(np.sum((probs - onehot) ** 2, -1))),
  }


def _write_json(path, obj):
  sample_files.atomic_write(path, lambda f: json.dump(obj, f), binary=False)


def _read_json(path):
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise sample_files.SampleFileError('Cannot read %s (%s).' % (path, e)) from None
