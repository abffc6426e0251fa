"""`BayesianEnsemble`: posterior samples of a Keras model's weights, used as one predictor.

The predictive is the weighted mean of the members' predictive
distributions (`tfp_adaptive.keras.predictive`), with uniform weights or,
for decreasing step sizes, weights proportional to the step size (Welling &
Teh 2011). What a member's output means (probabilities, logits, a Gaussian
mean) is the ensemble's `likelihood`, read from the model's compiled loss
when not stated (`tfp_adaptive.keras.likelihoods`).

A member's weights are a list in the order of ``model.weights``, which is
fixed by the model's structure; they are matched to the model by position
and shape, never by Keras' automatic variable names.
"""

import contextlib
import warnings

import numpy as np
import tensorflow as tf
import keras

from tfp_adaptive import validation
from tfp_adaptive.diagnostics import temperature as temperature_lib
from tfp_adaptive.keras import ensemble_arviz
from tfp_adaptive.keras import ensemble_files
from tfp_adaptive.keras import ensemble_temperature
from tfp_adaptive.keras import frozen_part
from tfp_adaptive.keras import health
from tfp_adaptive.keras import predictive
from tfp_adaptive.keras.data_arrays import as_arrays
from tfp_adaptive.keras.likelihoods import check_likelihood_args
from tfp_adaptive.keras.likelihoods import resolve_likelihood
from tfp_adaptive.keras.members import Member
from tfp_adaptive.keras.members import PREDICT_ROWS
from tfp_adaptive.keras.members import assign_weights
from tfp_adaptive.keras.members import check_structure
from tfp_adaptive.keras.members import member_values
from tfp_adaptive.keras.members import outputs

__all__ = ['BayesianEnsemble', 'Member', 'WEIGHTINGS']

WEIGHTINGS = ('uniform', 'step_size')
HEADS_AT_ONCE = 16  # Members whose heads run in one call on a frozen base.

class BayesianEnsemble(object):
  """A Keras model together with posterior samples of its weights.

  Args:
    model: the `keras.Model` whose architecture the samples belong to. Its
      own weights are restored after every prediction. An unbuilt model is
      built on the first batch it predicts.
    members: list of `Member`s (normally built by `SampleCollector`).
    likelihood: `None` (read from ``model.loss``; the model must be
      compiled), ``'categorical'``, ``'bernoulli'``, ``'gaussian'`` or a
      `tfp_adaptive.keras.likelihoods.Likelihood`.
    from_logits: `None` (from the loss) or Python bool.
    noise_variance: Gaussian only: `None` (implied by the MSE, ``K/2`` per
      output) or ``σ² > 0``.
    weighting: ``'uniform'`` or ``'step_size'``.

  Example:
    >>> ens = collector.ensemble
    >>> probs = ens.predict(x_test)          # mean of member probabilities
    >>> ens.evaluate(x_test, y_test)         # log_likelihood, accuracy, ece, brier
  """

  def __init__(self, model, members, likelihood=None, from_logits=None,
               noise_variance=None, weighting='uniform'):
    if not isinstance(model, keras.Model):
      raise TypeError('`model` must be a keras.Model. Received: %r' % (model,))
    self.model = model
    self.members = list(members)
    check_likelihood_args(None, from_logits, noise_variance)
    self.likelihood = resolve_likelihood(model, likelihood, from_logits,
                                         noise_variance)
    self.weighting = validation.check_choice('weighting', weighting,
                                             WEIGHTINGS)
    self._split = None  # `(frozen_part.split_model(...),)` once computed.

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

  def iterate_members(self, x=None, members=None):
    """Yields ``self.model`` with each member's weights loaded in turn.

    The model's own weights are restored afterwards (also on early exit).
    An unbuilt model is first built by calling it on `x` (a batch of
    inputs); without `x` it raises. `members`: the members to load (a list
    of `Member`), in that order (default: all).
    """
    self._build(x)
    yield from self._loaded(member_values(m) for m in (
        self.members if members is None else members))

  def _loaded(self, values):
    """Yields ``self.model`` with each of `values` loaded, its own weights restored after."""
    with self._weights_restored():
      for v in values:
        assign_weights(self.model, v)
        yield self.model

  @contextlib.contextmanager
  def _weights_restored(self):
    original = [v.numpy() for v in self.model.weights]
    try:
      yield
    finally:
      for v, value in zip(self.model.weights, original):
        v.assign(value)

  def _outputs(self, x, batch_size):
    """Yields ``(w_s, raw output of member s on x)``.

    Members that share a frozen first part (`frozen_part.split_model`)
    have it computed once on `x`; their heads run on its output,
    `HEADS_AT_ONCE` members in one compiled call.
    """
    self._build(x)
    cut = self._cut(x)
    if cut is None:
      for w, model in zip(self.member_weights(), self.iterate_members(x)):
        yield w, outputs(model, x, batch_size)
      return
    rows = (PREDICT_ROWS if batch_size is None else
            validation.check_int('batch_size', batch_size))
    weights, features = self.member_weights(), {}
    for start in range(0, len(self.members), HEADS_AT_ONCE):
      block = self.members[start:start + HEADS_AT_ONCE]
      values = [member_values(m) for m in block]
      out = {}
      whole = [k for k, m in enumerate(block) if m.frozen is None]
      for k, model in zip(whole, self._loaded(values[k] for k in whole)):
        out[k] = outputs(model, x, batch_size)  # All its weights its own.
      for k, member in enumerate(block):
        if member.frozen is not None and member.frozen not in features:
          features[member.frozen] = cut.features(values[k], x, rows)
      for digest in {m.frozen for m in block} - {None}:
        same = [k for k, m in enumerate(block) if m.frozen == digest]
        out.update(zip(same, cut.heads_outputs([values[k] for k in same],
                                               features[digest])))
      for k in range(len(block)):
        yield weights[start + k], out[k]

  def _cut(self, x):
    """The model cut after its frozen first part, when members store one (else `None`)."""
    if not any(m.frozen for m in self.members):
      return None
    if self._split is None:
      self._split = (frozen_part.split_model(self.model, x),)
    return self._split[0]

  def _predictive(self, x, y, batch_size):
    acc = predictive.Predictive(self.likelihood, y)
    for w, out in self._outputs(x, batch_size):
      acc.add(w, out)
    return acc

  def predict_members(self, x, batch_size=None):
    """Array ``[S, n, ...]`` of every member's probabilities (or means)."""
    x, _ = as_arrays(x)
    lik = self.likelihood
    outs = [lik.member_output(out) for _, out in self._outputs(x, batch_size)]
    if not lik.is_classification:  # The means (without a head's scales).
      outs = [lik.mean_and_variance(out)[0] for out in outs]
    return np.stack(outs)

  def predict(self, x, batch_size=None):
    """Posterior predictive: probabilities, or ``(mean, variance)`` (Gaussian).

    Args:
      x: inputs (arrays) or a `tf.data.Dataset` of inputs or ``(x, y)``
        pairs (read once, so every member sees the same examples in the same
        order, even from a shuffled dataset).
      batch_size: rows per compiled forward pass (default 1024).

    Returns:
      Categorical: ``[n, K]`` probabilities, the weighted mean of the
      members'. Bernoulli: ``P(y = 1)`` shaped like the model's output.
      Gaussian: ``(mean, variance)``, the variance being the members'
      spread plus the noise variance.
    """
    x, _ = as_arrays(x)
    return self._predictive(x, None, batch_size).prediction()

  def predict_quantiles(self, x, quantiles, batch_size=None):
    """Quantiles of the posterior predictive of a regression (the mixture of the members' Gaussians).

    Args:
      x: as `predict`.
      quantiles: sequence of probabilities in (0, 1).
      batch_size: as `predict`.

    Returns:
      list of arrays shaped like `predict`'s mean, one per quantile.
    """
    if self.likelihood.is_classification:
      raise ValueError('Quantiles are for regression; this ensemble has a '
                       '%r likelihood.' % self.likelihood.name)
    quantiles = [validation.check_number('quantiles', q, low=0., high=1.,
                                         low_open=True, high_open=True)
                 for q in np.atleast_1d(quantiles).tolist()]
    x, _ = as_arrays(x)
    weights, means, variances = [], [], []
    for w, out in self._outputs(x, batch_size):
      mean, var = self.likelihood.mean_and_variance(
          self.likelihood.member_output(out))
      weights.append(w)
      means.append(mean)
      variances.append(var)
    return predictive.mixture_quantiles(weights, np.stack(means),
                                        np.stack(variances), quantiles)

  def predict_interval(self, x, level=0.9, batch_size=None):
    """``(lower, upper)``: the central `level` interval of the posterior predictive (regression)."""
    level = validation.check_number('level', level, low=0., high=1.,
                                    low_open=True, high_open=True)
    return tuple(self.predict_quantiles(x, [(1. - level) / 2.,
                                            (1. + level) / 2.], batch_size))

  def log_likelihood_points(self, x, y=None, batch_size=None):
    """``log p̄(y_i | x_i)`` for every example (as `predict`'s arguments)."""
    x, y = as_arrays(x, y)
    return self._predictive(x, y, batch_size).log_likelihood_points()

  def evaluate(self, x, y=None, batch_size=None, num_bins=15):
    """Scores of the posterior predictive on ``(x, y)`` or a `tf.data.Dataset`.

    Returns:
      dict. Classification: ``log_likelihood`` (mean log p̄(y|x)),
      ``accuracy``, ``ece`` (`tfp.stats.expected_calibration_error`,
      `num_bins` bins), ``brier``. Regression: ``log_likelihood`` (of the
      mixture of the members' Gaussians; its negative is the NLL), ``rmse``
      of the predictive mean, and ``coverage_50``, ``coverage_90``: the
      share of targets inside the predictive's central 50% and 90%
      intervals (`predict_interval`).
    """
    x, y = as_arrays(x, y)
    if y is None:
      raise ValueError('`evaluate` needs targets: pass `y`, or a dataset of '
                       '(x, y) pairs.')
    acc = self._predictive(x, y, batch_size)
    off = [s for s in acc.off_range if s > health.OFF_RANGE_SHARE]
    if off:
      warnings.warn(health.message('BayesianEnsemble.evaluate', [(
          'noise', '%d of %d members predict outside the targets\' range '
          '(widened by its width) at up to %.0f%% of the points'
          % (len(off), len(acc.off_range), 100 * max(off)))],
                                   lead='the posterior looks bad'))
    return acc.metrics(num_bins)

  def check_temperature(self, x, y=None,
                        max_members=ensemble_temperature.MAX_MEMBERS, seed=0,
                        warn=True, tolerance=temperature_lib.TOLERANCE,
                        batch_size=None, prediction_inputs=None):
    """The configurational temperature of the members, read on the training data.

    The members are draws of the chain that ran, so the identities of the
    configurational temperature (docs, guide "Diagnostics") hold over them:
    the virial ``⟨(θ − c)·∇U⟩ / D`` per layer and for the whole model (the
    members of each half of the run centred on the other half's mean, so
    that a short run is not read cold by about ``1/ESS``), and
    the Laplacian form ``⟨|∇U|²⟩ / ⟨ΔU⟩`` (a second difference of the
    gradient along a random ±1 probe, per member), which weighs each direction by its
    curvature: the stiff directions that a learning rate too large heats
    first, and that set the predictions, count most there. Each must read
    the optimizer's ``temperature``. ``U`` is the energy the optimizer
    sampled, ``data_size`` times the compiled loss (its regularizers
    included) plus the default prior, on all of ``(x, y)`` (no minibatch
    noise), with the model in inference mode. Each chain's last members
    are read, as many per chain; the standard errors count their
    autocorrelation. Unlike `SamplerMonitor`'s reading during `fit`, it
    costs three passes over the data per member read.

    The same gradients give each layer's mean force,
    ``sd(θ_i)·⟨∂U/∂θ_i⟩`` at its coordinate furthest from 0, which must
    vanish at the target whatever ``τ`` (`tfp_adaptive.diagnostics.mean_force`):
    it reads where the members sit, which the temperature does not, and
    is warned on beyond 0.05 sds once the whole model has settled. The
    force along the model's outputs, ``sd(f)·⟨∇f·∇U − τΔf⟩/⟨|∇f|²⟩`` per
    output ``f`` at `prediction_inputs` (forward-mode derivatives, a
    Hutchinson ``Δf``; `tfp_adaptive.diagnostics.prediction_force`), reads the
    same in what the model predicts, where single weights (which hidden
    units can swap) have no meaningful marginals; it is warned on alike.

    Args:
      x, y: the training data (arrays, or a `tf.data.Dataset` of
        ``(x, y)``).
      max_members: int >= 4; at most this many members are read, evenly
        spaced within each chain.
      seed: int, seed of the Hutchinson probes.
      warn: one `UserWarning` per reading that is hot, cold, off balance
        or has not settled, naming the layer and the factor for
        ``learning_rate``; and, as after a kernel run, one for a whole
        model read within the band but too imprecisely to rule out a
        spread 10% off (its ±3 standard errors wider than ``0.2·τ``),
        with how many times as many members would rule it out.
      tolerance: relative tolerance on the temperature (0.1: sds 5% off).
      batch_size: rows per pass (default 1024).
      prediction_inputs: inputs whose outputs are read, as `x` takes them
        (default: 64 rows of `x`, evenly spaced); every output of every row
        is a prediction.

    Returns:
      dict: ``'overall'``, each layer's name and ``'laplacian'`` to
      `tfp_adaptive.diagnostics.temperature.Reading`, ``'mean_force'`` to a
      dict of each layer's name to its
      `tfp_adaptive.diagnostics.mean_force.Shift`, and ``'predictions'`` to the
      outputs' `Shift` (its ``coordinate`` the flat index of the output:
      row-major over rows and outputs), and ``'pull'`` to the members'
      `tfp_adaptive.diagnostics.monge_advice.Pull` (how hard their gradient
      pulls them one way; a `MongeSGRLD` run whose chains crawl is told to
      lower ``alpha2``).

    Raises:
      TypeError: the model is not compiled with a sampler of
        `tfp_adaptive.keras.optimizers`.
      ValueError: fewer than 4 members in a chain.
    """
    x, y = as_arrays(x, y)
    if y is None:
      raise ValueError('`check_temperature` needs targets: pass `y`, or a '
                       'dataset of (x, y) pairs.')
    if prediction_inputs is not None:  # Inputs alone, or (x, y) pairs.
      prediction_inputs = as_arrays(prediction_inputs)[0]
    return ensemble_temperature.read_members(
        self, x, y, max_members, seed, warn, tolerance, batch_size,
        who='BayesianEnsemble.check_temperature',
        prediction_inputs=prediction_inputs)

  def to_arviz(self, x, y=None, batch_size=None, weights=True, seed=0):
    """The ensemble as `arviz.InferenceData`, for ``az.loo``, ``az.waic`` and R-hat.

    Groups: ``posterior`` (each member's weights, named by variable path,
    if `weights`; else the members' steps), ``log_likelihood`` (``y``:
    ``log p(y_i | θ_s)`` per member and example), ``posterior_predictive``
    (``y``: one draw per member and example from its predictive) and
    ``observed_data``. Chains are the sample directories the members came
    from (`Member.chain`); chains with more members than the shortest are
    cut to its length, with a warning. Needs uniform member weights (PSIS
    weighs draws equally).

    Args:
      x, y: as `evaluate` (arrays, or a `tf.data.Dataset` of pairs).
      batch_size: rows per compiled forward pass (default 1024).
      weights: include the weights in ``posterior`` (memory: members ×
        parameters).
      seed: seed of the posterior-predictive draws.

    Example:
      >>> import arviz as az
      >>> az.loo(ensemble.to_arviz(x_train, y_train))
    """
    return ensemble_arviz.to_inference_data(self, x, y, batch_size, weights,
                                            seed)

  def _build(self, x):
    if self.model.weights:
      return
    if x is None:
      raise ValueError(
          'The model is not built, so the members\' weights cannot be loaded '
          'into it. Call it once on a batch of inputs, or pass inputs to '
          '`predict`/`evaluate`, which build it first.')
    self.model(tf.nest.map_structure(lambda a: a[:1], x))

  @classmethod
  def combine(cls, ensembles):
    """One ensemble of the members of several, each chain kept apart.

    For independent chains run in one process, one `fit` each from fresh
    weights (as a deep ensemble is trained): a chain explores the mode it
    falls into, and chains started apart add the modes to each other, at
    no extra cost per gradient. The members of ``ensembles[k]`` keep their
    order; their `Member.chain` indices follow those of the ensembles
    before it. The result predicts with the first ensemble's model.

    Args:
      ensembles: a non-empty list of `BayesianEnsemble` objects of one
        architecture, likelihood and weighting.

    Raises:
      TypeError: an item is not a `BayesianEnsemble`.
      ValueError: the list is empty, or the ensembles differ in their
        model's variables (the first that differs is named), likelihood or
        weighting.
    """
    ensembles = list(ensembles)
    if not ensembles:
      raise ValueError('`ensembles` must hold at least one BayesianEnsemble. '
                       'Received an empty list.')
    for k, e in enumerate(ensembles):
      if not isinstance(e, cls):
        raise TypeError('`ensembles[%d]` must be a BayesianEnsemble. '
                        'Received: %r' % (k, e))
    first, members, offset = ensembles[0], [], 0
    for k, e in enumerate(ensembles):
      if e.model.weights and first.model.weights:
        check_structure(first.model, [np.empty(v.shape, np.bool_)
                                      for v in e.model.weights],
                        'the model of `ensembles[%d]`' % k)
      for name in ('likelihood', 'weighting'):
        if getattr(e, name) != getattr(first, name):
          raise ValueError('`ensembles[%d]` has the %s %r, `ensembles[0]` %r: '
                           'only ensembles of one %s combine.'
                           % (k, name, getattr(e, name),
                              getattr(first, name), name))
      members += [m._replace(chain=offset + m.chain) for m in e.members]
      offset += max(m.chain for m in e.members) + 1 if e.members else 0
    return cls(first.model, members, likelihood=first.likelihood,
               weighting=first.weighting)

  @property
  def chains(self):
    """Sorted chain indices of the members (one per sample directory loaded)."""
    return sorted({m.chain for m in self.members})

  def save(self, directory):
    """Writes the members, ``model.json`` and a verified manifest to `directory`.

    The directory must be new or empty of samples; `load` reads it back.
    An ensemble of several chains (`combine`, or `load` of several sample
    directories) writes one subdirectory per chain, ``chain_0``,
    ``chain_1``, … (zero-padded to sort in order), as `load` reads them
    (`tfp_adaptive.keras.ensemble_files`).
    """
    ensemble_files.save(self, directory)

  @classmethod
  def load(cls, directory, model=None, repair=False):
    """Reads an ensemble saved by `save` or streamed by `SampleCollector(directory=...)`.

    `directory` is one sample directory, or a directory whose
    subdirectories (e.g. ``chain_0``, ``chain_1``, one run each) are sample
    directories: their members are loaded together, each with its chain
    index (`Member.chain`, in sorted subdirectory order). Every member
    file is checked against the manifest's size and SHA-256 and against
    the model's variables (number and shapes); a directory that a run is
    writing is read at one committed manifest
    (`tfp_adaptive.keras.ensemble_files`).

    Args:
      directory: as above.
      model: optional model to load into (e.g. a subclassed model, built or
        not); by default it is rebuilt from ``model.json`` in Keras' safe
        mode.
      repair: keep the intact members and warn about the damaged ones,
        instead of raising; and take in the sample files of our naming
        pattern that the manifest does not list as members (another run's,
        copied in, or dropped from an edited manifest) when they read
        whole and fit the model. Without it such files are left out, with
        a warning naming each.

    Raises:
      tfp_adaptive.keras.SampleFileError: a manifest is damaged, or a
        member file is missing, truncated or altered (unless `repair`).
      ValueError: a member does not fit the model (the first variable
        whose shape differs is named).
    """
    return ensemble_files.load(cls, directory, model, repair)

