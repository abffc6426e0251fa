"""The observation model of an ensemble: read from the compiled Keras loss, or stated.

A Keras loss is a negative log-likelihood, so the loss a model was trained
with says how its outputs turn into a predictive distribution:

============================================  =================  =====================
compiled loss                                 likelihood         member output means
============================================  =================  =====================
``sparse_categorical_crossentropy``           `Categorical`      class probabilities
``categorical_crossentropy`` (one-hot y)      `Categorical`      class probabilities
``binary_crossentropy``                       `Bernoulli`        P(y = 1)
``mse`` / ``mean_squared_error``              `Gaussian`         the mean
`tfp_adaptive.keras.GaussianNLL`              `GaussianScale`    the mean and log σ
============================================  =================  =====================

``from_logits=True`` applies the softmax (sigmoid) to each member before
averaging: the posterior predictive is the mean of the members'
*probabilities*, ``p(y|x) ≈ Σ_s w_s p(y|x, θ_s)`` (Rensmeyer & Niggemann
2025, eq. 4), never the probabilities of averaged logits.

The mean squared error per example is ``(1/K) Σ_k (y_k − f_k)²`` over ``K``
outputs, and the samplers target ``exp(−N · loss)``, so ``'mse'`` *is* a
Gaussian likelihood of variance ``σ² = K/2`` per output; that is the
`Gaussian` read from the loss (``noise_variance_source='implied by the
loss'``). A stated ``noise_variance`` overrides it (``'stated'``).
"""

import numpy as np
import keras

from tfp_adaptive import validation

__all__ = ['Bernoulli', 'Categorical', 'Gaussian', 'GaussianScale',
           'LIKELIHOODS', 'Likelihood', 'from_loss', 'get']

#: Names accepted by `get` and ``SampleCollector(likelihood=...)``.
LIKELIHOODS = ('categorical', 'bernoulli', 'gaussian', 'gaussian_scale')
_PROB_TOL = 1e-3  # float32 softmax rows sum to 1 within ~1e-6.

_NAMES = {
    'sparse_categorical_crossentropy': 'categorical',
    'categorical_crossentropy': 'categorical',
    'binary_crossentropy': 'bernoulli',
    'mse': 'gaussian',
    'mean_squared_error': 'gaussian',
    'gaussian_nll': 'gaussian_scale',
}


class Likelihood(object):
  """How member outputs become a posterior predictive, and how it is scored.

  Subclasses: `Categorical`, `Bernoulli` (classification) and `Gaussian`
  (regression).
  """

  name = None
  is_classification = True
  # The loss is a negative log-probability mass or a fixed-variance squared
  # error, never below 0 (`SampleCollector`'s collapse check relies on it).
  loss_is_nonnegative = True

  def member_output(self, raw):
    """One member's raw model output → probabilities (or mean), validated."""
    raise NotImplementedError

  def log_likelihood(self, output, y):
    """``log p(y_i | θ)`` per example from one member's `member_output`."""
    if self.is_classification:
      probs = self.probabilities(output)
      labels = self.labels(y, probs.shape[-1])
      return np.log(np.maximum(probs[np.arange(len(probs)), labels], 1e-300))
    mean, var = self.mean_and_variance(output)
    return gaussian_log_density(self.targets(y, mean), mean, var)

  def sample(self, output, rng):
    """One draw of ``y`` per example from one member's predictive."""
    if self.is_classification:
      probs = self.probabilities(output)
      u = rng.random((len(probs), 1))
      return np.minimum((np.cumsum(probs, -1) < u).sum(-1), probs.shape[-1] - 1)
    mean, var = self.mean_and_variance(output)
    return mean + np.sqrt(var) * rng.standard_normal(mean.shape)

  def get_config(self):
    return {'name': self.name}

  def __eq__(self, other):
    return type(self) is type(other) and self.get_config() == other.get_config()

  def __repr__(self):
    args = ', '.join('%s=%r' % kv for kv in self.get_config().items()
                     if kv[0] != 'name')
    return '%s(%s)' % (type(self).__name__, args)


class Categorical(Likelihood):
  """One of ``K`` classes; the model outputs ``K`` probabilities or logits.

  Args:
    from_logits: Python bool, the model outputs logits (no softmax layer).
  """

  name = 'categorical'

  def __init__(self, from_logits=False):
    self.from_logits = validation.check_bool('from_logits', from_logits)

  def member_output(self, raw):
    raw = np.asarray(raw, np.float64)
    if self.from_logits:
      z = np.exp(raw - raw.max(-1, keepdims=True))
      return z / z.sum(-1, keepdims=True)
    _check_probabilities(raw, 'Categorical', rows_sum_to_one=True)
    return raw

  def probabilities(self, prediction):
    return prediction

  def labels(self, y, num_classes):
    """Integer labels from sparse (``[n]``, ``[n, 1]``) or one-hot (``[n, K]``) `y`."""
    y = np.asarray(y)
    if y.ndim >= 2 and y.shape[-1] == num_classes and num_classes > 1:
      if not np.allclose(y.sum(-1), 1., atol=_PROB_TOL) or np.any(y < 0):
        raise ValueError('One-hot labels must be non-negative rows summing to '
                         '1. Received rows summing to %s.'
                         % np.unique(np.round(y.sum(-1), 3))[:5])
      return np.argmax(y, -1).reshape(-1)
    return _integer_labels(y, num_classes)

  def get_config(self):
    return {'name': self.name, 'from_logits': self.from_logits}


class Bernoulli(Likelihood):
  """Binary labels; the model outputs ``P(y = 1)`` (or its logit), shape ``[n]`` or ``[n, 1]``.

  Args:
    from_logits: Python bool, the model outputs logits (no sigmoid).
  """

  name = 'bernoulli'

  def __init__(self, from_logits=False):
    self.from_logits = validation.check_bool('from_logits', from_logits)

  def member_output(self, raw):
    raw = np.asarray(raw, np.float64)
    if self.from_logits:
      return 1. / (1. + np.exp(-raw))
    _check_probabilities(raw, 'Bernoulli', rows_sum_to_one=False)
    return raw

  def probabilities(self, prediction):
    p = np.asarray(prediction).reshape(len(prediction), -1)
    if p.shape[1] != 1:
      raise ValueError('A Bernoulli model must output one probability per '
                       'example (shape [n] or [n, 1]). Received shape %s; for '
                       'several classes compile with a categorical '
                       'cross-entropy.' % (np.shape(prediction),))
    return np.concatenate([1. - p, p], -1)

  def labels(self, y, num_classes):
    return _integer_labels(y, 2)

  def get_config(self):
    return {'name': self.name, 'from_logits': self.from_logits}


class Gaussian(Likelihood):
  """Real targets, ``y ~ N(f(x), σ²)`` per output; the model outputs the mean.

  Args:
    noise_variance: ``σ² > 0``, or `None` for the variance implied by the
      mean squared error (``K/2`` for ``K`` outputs; see the module
      docstring).
  """

  name = 'gaussian'
  is_classification = False

  def __init__(self, noise_variance=None):
    if noise_variance is not None:
      validation.check_number('noise_variance', noise_variance, low=0.,
                              low_open=True)
      noise_variance = float(noise_variance)
    self.noise_variance = noise_variance

  @property
  def noise_variance_source(self):
    """``'stated'`` or ``'implied by the loss'`` (``σ² = K/2`` of the MSE)."""
    return 'implied by the loss' if self.noise_variance is None else 'stated'

  def variance(self, num_outputs):
    """``σ²`` per output for a model with `num_outputs` outputs."""
    if self.noise_variance is not None:
      return self.noise_variance
    return num_outputs / 2.

  def output_variance(self, output):
    """``σ²`` for a model output array ``[n, ...]`` (its ``K`` = outputs per example)."""
    return self.variance(int(np.prod(output.shape[1:])) if output.ndim > 1
                         else 1)

  def member_output(self, raw):
    return np.asarray(raw, np.float64)

  def mean_and_variance(self, output):
    """``(μ, σ²)`` of one member's predictive for each output."""
    return output, np.broadcast_to(self.output_variance(output), output.shape)

  def targets(self, y, mean):
    y = np.asarray(y)
    if not np.issubdtype(y.dtype, np.number) or y.size != mean.size:
      raise ValueError('Regression targets must be numbers, one per model '
                       'output: expected %d values (predictions of shape %s). '
                       'Received %s of shape %s.'
                       % (mean.size, mean.shape, y.dtype, y.shape))
    return y.astype(np.float64).reshape(mean.shape)

  def get_config(self):
    return {'name': self.name, 'noise_variance': self.noise_variance}


class GaussianScale(Gaussian):
  """Real targets, ``y ~ N(μ(x), σ(x)²)``, with the noise scale an output of the model.

  The model's last axis holds ``K`` means and then ``K`` log-scales
  ``ρ = log σ`` (`tfp_adaptive.keras.GaussianNLL`, `NoiseScale` or a
  heteroscedastic head); each member's predictive is its own Gaussian, and
  the ensemble's is their mixture.
  """

  name = 'gaussian_scale'
  loss_is_nonnegative = False  # −log density with a learnt σ can be < 0.

  def __init__(self):
    super().__init__(None)

  @property
  def noise_variance_source(self):
    return 'sampled with the model'

  def mean_and_variance(self, output):
    k = output.shape[-1]
    if k % 2:
      raise ValueError('A GaussianScale likelihood needs K means and K '
                       'log-scales on the last axis; the model outputs %d '
                       'values.' % k)
    return output[..., :k // 2], np.exp(2. * output[..., k // 2:])

  def get_config(self):
    return {'name': self.name}


def gaussian_log_density(y, mean, var):
  """``log N(y; μ, σ²)`` per example, summed over its outputs."""
  terms = np.log(2 * np.pi * var) + (y - mean) ** 2 / var
  return -0.5 * np.sum(terms.reshape(len(mean), -1), -1)


def get(identifier, from_logits=None, noise_variance=None):
  """A `Likelihood` from a name in `LIKELIHOODS`, a config dict or an instance."""
  if isinstance(identifier, Likelihood):
    return identifier
  if isinstance(identifier, dict):
    config = dict(identifier)
    return get(config.pop('name'), **config)
  validation.check_choice('likelihood', identifier, LIKELIHOODS)
  if identifier == 'gaussian_scale':
    if from_logits or noise_variance is not None:
      raise ValueError('likelihood=\'gaussian_scale\' reads the noise from '
                       'the model; it takes neither `from_logits` nor '
                       '`noise_variance`.')
    return GaussianScale()
  if identifier == 'gaussian':
    if from_logits:
      raise ValueError('`from_logits` applies to classification likelihoods, '
                       'not likelihood=\'gaussian\'.')
    return Gaussian(noise_variance)
  if noise_variance is not None:
    raise ValueError('`noise_variance` applies to likelihood=\'gaussian\' '
                     'only. Received likelihood=%r.' % (identifier,))
  cls = Categorical if identifier == 'categorical' else Bernoulli
  return cls(False if from_logits is None else from_logits)


def from_loss(loss, from_logits=None, noise_variance=None):
  """The `Likelihood` a compiled Keras loss is the negative log of.

  Args:
    loss: ``model.loss``: a name, a `keras.losses.Loss` or a Keras loss
      function.
    from_logits: `None` (read from the loss) or a Python bool that must
      agree with it.
    noise_variance: `None` or ``σ² > 0`` for a Gaussian.

  Raises:
    ValueError: the loss is not one of the module docstring's table (a
      custom function, several outputs, label smoothing); the message says
      to pass ``likelihood=`` explicitly.
  """
  if from_logits is not None:
    validation.check_bool('from_logits', from_logits)
  name, logits, smoothing = _describe(loss)
  kind = _NAMES.get(name)
  if kind is None or smoothing:
    why = ('label smoothing %g is not a likelihood' % smoothing if smoothing
           else 'cannot read a likelihood from the loss %r' % (loss,))
    raise ValueError(
        '%s. Pass it explicitly, e.g. SampleCollector(likelihood=\'categorical\''
        ', from_logits=True), one of %s.' % (why[0].upper() + why[1:],
                                            ', '.join(map(repr, LIKELIHOODS))))
  regression = kind.startswith('gaussian')
  if from_logits is not None and not regression and bool(from_logits) != logits:
    raise ValueError('`from_logits=%r` contradicts the compiled loss %r '
                     '(from_logits=%r).' % (from_logits, loss, logits))
  return get(kind, from_logits=None if regression else logits,
             noise_variance=noise_variance)


def _describe(loss):
  """``(snake_case name, from_logits, label_smoothing)`` of a Keras loss."""
  if isinstance(loss, str):
    return loss.lower(), False, 0.
  if isinstance(loss, keras.losses.Loss):
    config = loss.get_config()
    fn = getattr(loss, 'fn', None)
    name = (getattr(fn, '__name__', None) or
            getattr(loss, 'likelihood_name', None) or
            _snake(type(loss).__name__))
    return (name, bool(config.get('from_logits', False)),
            float(config.get('label_smoothing', 0.) or 0.))
  if callable(loss):
    return getattr(loss, '__name__', repr(loss)), False, 0.
  return repr(loss), False, 0.


def _snake(name):
  out = ''.join('_' + c.lower() if c.isupper() else c for c in name)
  return out.lstrip('_')


def _check_probabilities(p, what, rows_sum_to_one):
  bad = ~np.isfinite(p) | (p < -_PROB_TOL) | (p > 1. + _PROB_TOL)
  if rows_sum_to_one and p.ndim >= 1:
    bad |= ~np.isclose(p.sum(-1, keepdims=True), 1., atol=_PROB_TOL)
  if np.any(bad):
    raise ValueError(
        'A %s likelihood needs probabilities, but the model outputs values in '
        '[%.3g, %.3g]%s. If the last layer has no softmax/sigmoid, the outputs '
        'are logits: compile the loss with from_logits=True, or pass '
        'from_logits=True.' % (what, np.nanmin(p), np.nanmax(p),
                               ', rows not summing to 1' if rows_sum_to_one
                               else ''))


def _integer_labels(y, num_classes):
  y = np.asarray(y).reshape(-1)
  if not np.issubdtype(y.dtype, np.number):
    raise ValueError('Class labels must be integers. Received dtype %s.'
                     % y.dtype)
  if np.any(y != np.round(y)) or np.any(y < 0) or np.any(y >= num_classes):
    raise ValueError(
        'Class labels must be integers in [0, %d); received values in '
        '[%g, %g]%s. For real-valued targets use a Gaussian likelihood '
        '(compile with loss=\'mse\').'
        % (num_classes, y.min(), y.max(),
           '' if np.all(y == np.round(y)) else ' that are not integers'))
  return y.astype(np.int64)


def check_likelihood_args(likelihood, from_logits, noise_variance):
  """Checks the arguments now, also those that are read with the loss only at `fit`."""
  if from_logits is not None:
    validation.check_bool('from_logits', from_logits)
  if noise_variance is not None:
    validation.check_number('noise_variance', noise_variance, low=0.,
                            low_open=True)
  if likelihood is not None:
    resolve_likelihood(None, likelihood, from_logits, noise_variance)


def resolve_likelihood(model, likelihood, from_logits, noise_variance):
  """The `Likelihood` stated, or read from ``model.loss`` when `likelihood` is `None`."""
  if likelihood is not None:
    lik = get(likelihood, from_logits=from_logits,
                          noise_variance=noise_variance)
    if isinstance(likelihood, Likelihood) and (
        from_logits is not None or noise_variance is not None):
      raise ValueError('Pass `from_logits`/`noise_variance` to the '
                       'Likelihood, not beside it.')
    return lik
  loss = getattr(model, 'loss', None)
  if loss is None:
    raise ValueError(
        'The model is not compiled, so the likelihood cannot be read from its '
        'loss: compile it, or pass likelihood= one of %s.'
        % ', '.join(map(repr, LIKELIHOODS)))
  return from_loss(loss, from_logits, noise_variance)
