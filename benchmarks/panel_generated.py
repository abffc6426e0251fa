"""The generated panel: targets and settings drawn at random, so that the checks are judged on runs nobody tuned them to.

`benchmarks.panel` holds fixed targets, the ones the checks were built
on. Here each run draws, from a seed drawn when the command starts and
printed:

* **a target** from one of five families with exact or NUTS answers,
  four sampled by the kernels and one by `model.fit`:
  a Gaussian (2 to 20 dimensions, standard deviations log-spaced over a
  condition number of the covariance up to 1e6, a random rotation and a
  random mean); Neal's funnel (``v ~ N(0, s²)`` with ``s`` from 0.3 to 2,
  and 1 to 9 coordinates ``x | v ~ N(0, e^v)``), judged on the marginals,
  on ``x e^{-v/2}`` and on the neck (``v`` more than one sd below its
  mean); a hierarchical normal model (4 to 16 groups, each with its
  measurement sd, a population scale and a spread of the group means
  drawn over two decades, non-centred: ``θ_j = μ + τ η_j``), its group
  means included, against NUTS; or a Bayesian logistic regression on a
  random subset of scikit-learn's breast cancer data (100 to 569 rows, 3
  to 10 of its 30 features, each standardised and then scaled by a random
  factor from 0.2 to 5, and an intercept; prior N(0, 1)), full-batch or in
  random minibatches, against NUTS on the full data; or, through
  `model.fit`, a Bayesian linear regression with random inputs, size and
  batch, its step by a documented rule (`one_fit_run`), against its exact
  posterior;
* **a sampler and its settings** around the documented ones: SGLD, PSGLD
  with Γ corrected or its lagged form, PSGLD adapted during the burn-in
  and then frozen, or Monge corrected; a moving-average decay among 0.9,
  0.95 (the default) and 0.99 and a `diagonal_bias` from 1e-3 to 1; the
  step set by TFP's `SimpleStepSizeAdaptation` (the documented rule) at a
  target acceptance drawn from 0.7 to 0.95 around the documented 0.75
  (drift ratios of about 0.025 to 0.004); a run of 2,000 to 64,000 steps
  (log-uniform: short runs that have not relaxed and long ones that
  have), a burn-in of a fifth to a half of it.

* **or, in a share `CONTROL` of the runs, a control run drawn to be
  accurate**: a Gaussian as above but of condition at most `CONTROL_CONDITION`,
  sampled by SGLD or by PSGLD frozen after its burn-in (exact up to the
  step) at a target acceptance from 0.7 to 0.85, for 64,000 to 128,000
  steps: hundreds of the slowest direction's relaxation times, so that
  its sds are known to within a few percent and most such runs are within
  5% of the truth. Their family is ``'control'``. A share
  `FIT_CONTROL` of them run through `model.fit` instead
  (`one_fit_control`, family ``'fit control'``): a linear regression of
  like condition, `FIT_CONTROL_CHAINS` chains of SGLD in one `fit` from
  the README's warm start, full batch, the step from
  `CurvatureCalibration` at a heat of 1% to 3%. Drawn targets are
  rarely known that precisely (a NUTS reference alone has an error of a
  few percent), so without them the runs within 5%, on which the
  false-alarm rate is read, are too few to bound it; they show whether the
  checks stay silent on runs that are right, not on hard ones.

Run ``i`` draws from its own generator, seeded by ``(seed, i)``, so that
one run is reproduced alone; whether it is a control run is drawn from
``(seed, i, 1)``, and whether a control runs in `fit` from ``(seed, i,
2)``, so that the other runs draw what they drew without controls. The runs go in batches (``--batch``, 10 by
default), each batch in a fresh process: every run compiles its own XLA
functions, which a process keeps until it exits. ``--jobs`` batches run at
once (default: one per CPU core); the rows come out in the runs' order
whatever the jobs, since each run draws from its own seed.

Each run goes through `tfa.mcmc.sample` as a user's would (64 chains);
its error is `benchmarks.panel_truth.run_error` against the truth (sds and
means of the coordinates and of: the whitened coordinates for the
Gaussians; ``x e^{-v/2}`` and the neck for the funnels; the group means
for the hierarchical models; the logits at 50 inputs for the
regressions), its warnings what the run said. About 2,000 draws a chain
are kept, evenly spaced.

Reported: the **miss rate**, among the runs off by more than 10% (beyond
two standard errors, or by more than 100% whatever the error), the share
that said nothing, and the **false-alarm rate**, among the runs within 5%
(by two standard errors), the share that warned of a bias. A run told
only that it could not be read (too short, a reading too imprecise to
rule out a spread 10% off, or a coordinate with too few effective draws
across the chains, with the length it needs) is not silent and claims no
bias; the shares of the runs within and off so told are reported too.
Each rate with its 95% Wilson interval (`scipy.stats.binomtest`), over
all runs, the kernels' runs, and per family. Writes
``panel_generated.md``.

With ``--advice``, each warned kernel run is run again with the changes
that follow all its warnings at once (`tfa.diagnostics.advice.merged` of
their ``changes``, `follow`), and ``panel_advice.md`` reports how often the
rerun is within 5% or at most half as far off.

    python -m benchmarks.panel --generated [--runs 200] [--seed S] [--quick]
                                           [--advice]
    python -m benchmarks.panel_generated [...]       # the same
"""

import collections
import multiprocessing
import os
import time

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from benchmarks import common
from benchmarks import panel_truth as truth

STEPS = (2000, 64000)  # The run length's range, drawn log-uniformly.
BURNIN = (0.2, 0.5)   # The burn-in's share of the run.
FAMILIES = ('gaussian', 'funnel', 'hierarchical', 'logistic', 'fit')
FIT_STEPS = (2000, 32000)  # A `fit` run's length in steps, log-uniform.
DECAYS = (0.9, 0.95, 0.99)  # Around PSGLD's default, 0.95.
ACCEPT = (0.7, 0.95)  # The wrapper's target acceptance (documented: 0.75).
SAMPLERS = ('SGLD', 'PSGLD corrected', 'PSGLD corrected_lagged',
            'PSGLD frozen', 'Monge corrected')
MONGE_ALPHA2 = 1.  # The Monge metric's α², its default.
OFF, WITHIN = 0.10, truth.TOLERANCE
CONTROL = 0.3  # The share of control runs, drawn to be accurate.
CONTROL_CONDITION = 4.  # Their Gaussians' largest condition number.
CONTROL_STEPS = (64000, 128000)  # Their length, log-uniform.
CONTROL_ACCEPT = (0.7, 0.85)  # Their wrapper's target acceptance.
FIT_CONTROL = 1. / 3.  # The share of the controls run through `fit`.
FIT_CONTROL_CHAINS = 64  # Their chains (`tfa.keras.Chains`), in one `fit`.
FIT_CONTROL_STEPS = (24000, 48000)  # Their length, log-uniform.
FIT_CONTROL_HEAT = (0.01, 0.03)  # Their `CurvatureCalibration` heat.


def _log_uniform(rng, low, high):
  return float(np.exp(rng.uniform(np.log(low), np.log(high))))


def _rotation(rng, dim):
  q, r = np.linalg.qr(rng.normal(size=(dim, dim)))
  return q * np.sign(np.diag(r))


def draw_gaussian(rng, largest_condition=1e6):
  """``(description, log_prob, reference, init, project, predictions)`` of a random Gaussian (its covariance's condition number log-uniform up to `largest_condition`)."""
  dim = int(rng.integers(2, 21))
  condition = _log_uniform(rng, 1., largest_condition)
  sds = np.sqrt(condition) ** -np.linspace(0., 1., dim)
  rng.shuffle(sds)
  rotation = _rotation(rng, dim)
  cov = (rotation * sds ** 2) @ rotation.T
  mean = rng.normal(size=dim)
  prec = tf.constant(np.linalg.inv(cov), tf.float32)
  mean_t = tf.constant(mean, tf.float32)

  def log_prob(x):
    d = x - mean_t
    return -0.5 * tf.einsum('...i,ij,...j->...', d, prec, d)
  reference, project, _ = truth.gaussian(cov, mean)
  # Chains start within a few sds of the mean, as after a rough fit.
  init = (mean + 2. * (rng.normal(size=(truth.CHAINS, dim)) * sds) @
          rotation.T).astype(np.float32)
  return ('Gaussian, D=%d, condition %.2g' % (dim, condition), log_prob,
          reference, init, project, None)


def draw_funnel(rng):
  """The same for a random Neal's funnel: exact marginals, ``x e^{-v/2}``'s and the neck's."""
  k = int(rng.integers(1, 10))
  sv = _log_uniform(rng, 0.3, 2.)

  def log_prob(z):
    v, x = z[..., 0], z[..., 1:]
    return (-0.5 * v ** 2 / sv ** 2 - 0.5 * k * v -
            0.5 * tf.reduce_sum(x ** 2, -1) * tf.exp(-v))
  sds = np.concatenate([[sv], np.full(k, np.sqrt(np.exp(sv ** 2 / 2.))),
                        np.ones(k), np.full(k, np.sqrt(truth.NECK_MASS))])
  # Chains start at half-width draws of the funnel, as after a rough fit.
  v = 0.5 * sv * rng.normal(size=(truth.CHAINS, 1))
  x = 0.5 * np.exp(v / 2.) * rng.normal(size=(truth.CHAINS, k))
  return ('funnel, %d x, sd of v %.2g' % (k, sv), log_prob,
          truth.exact(sds, 0.),
          np.concatenate([v, x], 1).astype(np.float32),
          truth.funnel_quantities(sv, lambda z: z[..., 1:] * np.exp(
              -z[..., :1] / 2.), 0), None)


def draw_hierarchical(rng, nuts_draws):
  """The same for a random hierarchical normal model, non-centred, against NUTS.

  ``y_j ~ N(θ_j, σ_j²)``, ``θ_j = μ + τ η_j``, ``η_j ~ N(0, 1)``,
  ``μ ~ N(0, (5c)²)``, ``τ ~ HalfNormal(5c)`` sampled as ``log τ`` (with
  its Jacobian), at a scale ``c`` of the data; the state is
  ``[μ, log τ, η_1, ..., η_J]`` and the group means ``θ_j`` are judged too.
  """
  groups = int(rng.integers(4, 17))
  c = _log_uniform(rng, 0.1, 10.)
  sigma = c * np.exp(rng.uniform(np.log(0.5), np.log(2.), groups))
  tau_true = c * _log_uniform(rng, 0.1, 10.)
  y = rng.normal() * c + tau_true * rng.normal(size=groups) + (
      sigma * rng.normal(size=groups))
  yt, st = tf.constant(y, tf.float32), tf.constant(sigma, tf.float32)

  def log_prob(z):
    mu, log_tau, eta = z[..., :1], z[..., 1:2], z[..., 2:]
    theta = mu + tf.exp(log_tau) * eta
    return (-0.5 * tf.reduce_sum(((yt - theta) / st) ** 2, -1)
            - 0.5 * tf.reduce_sum(eta ** 2, -1)
            - 0.5 * (mu[..., 0] / (5. * c)) ** 2
            - 0.5 * (tf.exp(log_tau[..., 0]) / (5. * c)) ** 2 + log_tau[..., 0])
  project = truth.coordinates_and(
      lambda z: z[..., :1] + np.exp(z[..., 1:2]) * z[..., 2:])
  init = np.concatenate([np.full((truth.CHAINS, 1), y.mean()),
                         np.full((truth.CHAINS, 1), np.log(y.std() + c)),
                         0.5 * rng.normal(size=(truth.CHAINS, groups))], 1)
  ref = project(truth.nuts_sds(log_prob, tf.constant(init, tf.float32),
                                draws=nuts_draws).numpy())
  return ('hierarchical, %d groups, scale %.2g, spread/scale %.2g' % (
      groups, c, tau_true / c), log_prob,
          truth.group_moments(ref),
          init.astype(np.float32), project, None)


def draw_logistic(rng, nuts_draws):
  """The same for a random logistic regression, its reference from NUTS."""
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  d = datasets.load_breast_cancer()
  n = int(rng.integers(100, len(d.target) + 1))
  k = int(rng.integers(3, 11))
  rows = rng.choice(len(d.target), n, replace=False)
  cols = rng.choice(d.data.shape[1], k, replace=False)
  x = d.data[rows][:, cols]
  scales = np.exp(rng.uniform(np.log(0.2), np.log(5.), k))
  x = (x - x.mean(0)) / x.std(0) * scales
  x = np.concatenate([x, np.ones((n, 1))], 1).astype(np.float32)
  y = d.target[rows].astype(np.float32)
  batches = [None] + [b for b in (32, 64, 128) if b < n]
  batch = batches[int(rng.integers(len(batches)))]
  xt, yt = tf.constant(x), tf.constant(y)

  def log_lik(parts, data):
    logits = tf.einsum('nd,...d->...n', data[0], parts[0])
    return -tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.broadcast_to(data[1], tf.shape(logits)), logits=logits)

  def log_prior(parts):
    return -0.5 * tf.reduce_sum(parts[0] ** 2, -1)

  def full(w):
    return tf.reduce_sum(log_lik([w], (xt, yt)), -1) + log_prior([w])
  inputs = x[rng.choice(n, 50, replace=False)].astype(np.float64)
  project = truth.coordinates_and(lambda w: w @ inputs.T)
  ref = project(truth.nuts_sds(full, tf.zeros([64, x.shape[1]]),
                                draws=nuts_draws).numpy())
  test_inputs = tf.constant(inputs, tf.float32)
  fn = full if batch is None else tfa.minibatch_log_prob(
      log_lik, (x, y), batch, log_prior)
  return ('logistic, n=%d, %d features, batch %s' % (n, k, batch or 'full'),
          fn, truth.group_moments(ref),
          np.zeros([truth.CHAINS, x.shape[1]], np.float32), project,
          lambda w: tf.einsum('nd,...d->...n', test_inputs, w))


def draw_settings(rng, quick):
  """A sampler around the documented settings, its step by the wrapper: a `Settings`."""
  name = SAMPLERS[int(rng.integers(len(SAMPLERS)))]
  total = int(_log_uniform(rng, *STEPS)) // (4 if quick else 1)
  burn = int(rng.uniform(*BURNIN) * total)
  return _metric_and_step(rng, name, total, burn, ACCEPT)


def draw_control_settings(rng, quick):
  """The `Settings` of a control run: SGLD or PSGLD frozen after its burn-in, a step around the documented one (`CONTROL_ACCEPT`) and a long run (`CONTROL_STEPS`)."""
  name = ('SGLD', 'PSGLD frozen')[int(rng.integers(2))]
  total = int(_log_uniform(rng, *CONTROL_STEPS)) // (4 if quick else 1)
  return _metric_and_step(rng, name, total, total // 4, CONTROL_ACCEPT)


def _metric_and_step(rng, name, total, burn, accept):
  """The `Settings` of `name` run `total` steps with `burn` of burn-in: its decay, `diagonal_bias` and the wrapper's target acceptance drawn (from `accept`), the metric frozen after the burn-in for ``'PSGLD frozen'``."""
  decay = DECAYS[int(rng.integers(len(DECAYS)))]
  bias = _log_uniform(rng, 1e-3, 1.)
  return Settings(name, _drawn_gamma(name), decay, bias,
                  float(rng.uniform(*accept)), total - burn, burn,
                  burn if name.endswith('frozen') else None, None)


def _drawn_gamma(name):
  """The Γ mode a sampler of `SAMPLERS` is drawn with."""
  if name in ('SGLD', 'PSGLD frozen'):
    return 'none'
  return 'corrected' if name.startswith('Monge') else name.split()[1]


Settings = collections.namedtuple('Settings', [
    'name', 'gamma', 'decay', 'bias', 'accept', 'steps', 'burn', 'frozen',
    'step', 'alpha2'], defaults=(MONGE_ALPHA2,))
Settings.__doc__ = """A drawn sampler: `name` (one of `SAMPLERS`), its Γ mode, moving-average decay and `diagonal_bias`, the wrapper's target acceptance, `steps` kept after `burn` steps of burn-in, `frozen` (`num_adaptation_steps`, or `None`), `step` (a fixed step size without the wrapper, or `None`: `tfp.mcmc.SimpleStepSizeAdaptation` sets it over the first 80% of the burn-in) and the Monge metric's `alpha2`."""


def factory(settings):
  """``factory(fn, h)`` of the kernel `settings` describe (`benchmarks.panel_truth.run_one`'s)."""
  st = settings

  def build(fn, h):
    h = h if st.step is None else st.step
    if st.name == 'SGLD':
      return tfa.mcmc.SGLD(fn, h)
    if st.name.startswith('Monge'):
      return tfa.mcmc.MongeSGRLD(fn, h, st.alpha2, st.decay, gamma=st.gamma,
                                 num_adaptation_steps=st.frozen)
    return tfa.mcmc.PSGLD(fn, h, st.decay, st.bias, gamma=st.gamma,
                          num_adaptation_steps=st.frozen)
  if st.step is not None:
    return build
  return lambda fn, h: tfp.mcmc.SimpleStepSizeAdaptation(
      build(fn, h), int(0.8 * st.burn), target_accept_prob=st.accept)


def label(settings):
  """The row's name for a sampler and its settings."""
  st = settings
  said = ('' if st.name == 'SGLD' else 'decay %g, ' % st.decay if
          st.name.startswith('Monge') else 'decay %g, bias %.2g, ' % (
              st.decay, st.bias))
  if st.gamma != _drawn_gamma(st.name):  # Changed by advice.
    said += 'gamma %s, ' % st.gamma
  if st.frozen is not None and st.name != 'PSGLD frozen':
    said += 'frozen, '
  if st.alpha2 != MONGE_ALPHA2:  # Changed by advice.
    said += 'alpha2 %.2g, ' % st.alpha2
  step = ('accept %.2f' % st.accept if st.step is None else
          'step %.3g' % st.step)
  return '%s (%s%s, %d steps, burn-in %d)' % (st.name, said, step,
                                              st.steps + st.burn, st.burn)


#: A rerun that follows advice runs at most this many times as many steps.
LONGEST = 8.


def follow(settings, changes, step):
  """The `Settings` of a rerun that follows `changes` (`tfa.diagnostics.Change`), or `None` where one cannot be followed here.

  `step` is the first run's final step size (the wrapper's). A smaller
  step fixes it at that step times the factor, without the wrapper;
  lengths grow by their factor, at most `LONGEST`; the metric frozen
  "after the burn-in" is frozen at the rerun's burn-in.
  """
  st = settings
  if not changes:
    return None
  for c in changes:
    grow = None if c.factor is None else min(c.factor, LONGEST)
    if c.parameter == 'step_size' and c.factor is not None:
      st = st._replace(step=(st.step or step) * c.factor)
    elif c.parameter == 'num_results' and grow:
      st = st._replace(steps=int(st.steps * grow))
    elif c.parameter == 'num_burnin_steps' and grow:
      st = st._replace(burn=int(st.burn * grow))
    elif c.parameter == 'gamma' and st.name != 'SGLD':
      st = st._replace(gamma=c.value)
    elif c.parameter == 'preconditioner_decay_rate' and c.value is not None:
      st = st._replace(decay=float(c.value))
    elif c.parameter == 'num_adaptation_steps' and st.name != 'SGLD':
      st = st._replace(frozen=c.value)
    elif c.parameter == 'alpha2' and st.name.startswith('Monge'):
      st = st._replace(alpha2=st.alpha2 * c.factor)
    else:
      return None
  if st.frozen is not None:  # Frozen when the (rerun's) burn-in ends.
    st = st._replace(frozen=st.burn)
  return st


def judged(family, target, label, err, se, what, said, seconds):
  """A run's row: its error against the truth, what it said, and whether it is off (`benchmarks.panel_truth.beyond` 10%) or within (5%)."""
  return dict(family=family, target=target, sampler=label, err=err, se=se,
              what=what, said=said, seconds=seconds,
              off=truth.beyond(err, se, OFF),
              within=truth.within(err, se, WITHIN))


def raised(family, target, label, error):
  """The row of a run that raised: loud, not silent, and with no error to judge, counted in neither rate."""
  return dict(family=family, target=target, sampler=label, err=np.nan,
              se=np.nan, what='raised',
              said=['raised %s' % type(error).__name__], seconds=0.,
              off=False, within=False)


def one_run(rng, quick, advice=False, control=False):
  """One drawn target and sampler, run and judged: a row (dict).

  With `advice`, a warned kernel run is run again following its advice
  (`follow`): the row's ``'rerun'`` (`None` where the advice names no
  change that can be followed). `control` (`is_control`'s): ``'kernel'``
  draws a well-conditioned Gaussian and a sampler exact up to its step
  (`draw_control_settings`), family ``'control'``; ``'fit'`` runs
  `one_fit_control`.
  """
  if control == 'fit':
    return one_fit_control(rng, quick)
  if control:
    family = 'control'
    target, fn, reference, init, project, predictions = draw_gaussian(
        rng, CONTROL_CONDITION)
    settings = draw_control_settings(rng, quick)
  else:
    family = FAMILIES[int(rng.integers(len(FAMILIES)))]
    if family == 'fit':
      return one_fit_run(rng, quick)
    nuts_draws = 300 if quick else 1000
    target, fn, reference, init, project, predictions = {
        'gaussian': draw_gaussian,
        'funnel': draw_funnel,
        'hierarchical': lambda r: draw_hierarchical(r, nuts_draws),
        'logistic': lambda r: draw_logistic(r, nuts_draws)}[family](rng)
    settings = draw_settings(rng, quick)
  row = _kernel_run(family, target, fn, reference, init, project,
                    predictions, settings)
  changes, step = row.pop('changes'), row.pop('step')
  if advice and row['said'] and row['what'] != 'raised':
    rerun = follow(settings, changes, step)
    row['rerun'] = None if rerun is None else _kernel_run(
        family, target, fn, reference, init, project, predictions, rerun)
  return row


def _kernel_run(family, target, fn, reference, init, project, predictions,
                settings):
  """Runs `settings` through `tfa.mcmc.sample` as a user would: its row, with the advice's ``changes`` and the final ``step``."""
  try:
    # About 2,000 draws a chain kept, whatever the run's length.
    run = truth.run_one(
        fn, init, None, factory(settings), 1e-4, settings.steps,
        max(4, settings.steps // 2000), False, predictions,
        burnin=settings.burn)
  except Exception as e:  # pylint: disable=broad-except
    return raised(family, target, label(settings), e)
  row = judged(family, target, label(settings),
               *truth.run_error(run.samples, reference, project=project),
               run.said, run.seconds)
  return dict(row, changes=run.changes, step=run.step)


def _targets(rng, x):
  """A `fit` regression's targets: random weights and intercept, noise of variance 1/2 (the likelihood of ``'mse'``)."""
  n, d = x.shape
  return (x @ rng.normal(size=(d, 1)) + rng.normal() + rng.normal(
      scale=np.sqrt(0.5), size=(n, 1))).astype(np.float32)


def _precision(x):
  """The posterior precision of the weights and bias: ``2XᵀX + I`` ('mse': N(y; ŷ, 1/2), prior N(0, 1))."""
  xa = np.concatenate([x, np.ones((len(x), 1))], 1).astype(np.float64)
  return 2. * xa.T @ xa + np.eye(xa.shape[1])


def _posterior(x, y, precision):
  """``(reference, project)`` of `benchmarks.panel_truth.run_error` for the exact posterior of a `fit` regression."""
  xa = np.concatenate([x, np.ones((len(x), 1))], 1).astype(np.float64)
  mean = np.linalg.solve(precision, 2. * xa.T @ y.astype(np.float64))[:, 0]
  reference, project, _ = truth.gaussian(np.linalg.inv(precision), mean)
  return reference, project


def one_fit_run(rng, quick):
  """One `model.fit` run on a random Bayesian linear regression, judged against its exact posterior: a row (dict).

  The model and the collector are `benchmarks.panel_fit`'s (one `Dense`,
  loss ``'mse'``, a N(0, 1) prior; members every 25 steps after a quarter
  of the run, read on the training data at the end). Drawn: 1 to 10
  inputs with scales from 0.2 to 5 and random offsets, 200 to 2,000 rows,
  the full batch or reshuffled minibatches of 32, 64 or 128; the
  optimizer as in `draw_settings` (SGLD, PSGLD corrected or lagged, Monge
  corrected); the step by one of the documented recipes: the README's
  (Adam to a mode with early stopping, then `CurvatureCalibration` over 2
  epochs) or the guide's from fresh weights (`StepSizeCalibration` over
  5), from a first learning rate drawn from 1e-6 to 1e-3; and the run's
  length.
  The members are cut into 8 consecutive blocks for the standard errors.
  """
  from benchmarks import panel_fit  # pylint: disable=g-import-not-at-top
  d = int(rng.integers(1, 11))
  n = int(rng.integers(200, 2001))
  scales = np.exp(rng.uniform(np.log(0.2), np.log(5.), d))
  x = (rng.normal(size=(n, d)) * scales + rng.normal(size=d)).astype(
      np.float32)
  y = _targets(rng, x)
  reference, project = _posterior(x, y, _precision(x))
  batches = [n] + [b for b in (32, 64, 128) if b < n]
  batch = batches[int(rng.integers(len(batches)))]
  name = SAMPLERS[int(rng.integers(len(SAMPLERS)))]
  if name == 'PSGLD frozen':  # No frozen metric in `fit`'s optimizers here.
    name = 'PSGLD corrected'
  decay = DECAYS[int(rng.integers(len(DECAYS)))]
  bias = _log_uniform(rng, 1e-3, 1.)
  lr = _log_uniform(rng, 1e-6, 1e-3)
  steps = int(_log_uniform(rng, *FIT_STEPS)) // (8 if quick else 1)
  epochs = max(12, steps // panel_fit.STEPS_PER_EPOCH)
  curvature = bool(rng.integers(2))
  seed = int(rng.integers(1 << 30))
  opts = tfa.keras.optimizers
  if name == 'SGLD':
    optimizer, said = opts.SGLD(lr, data_size=n, seed=seed), ''
  elif name.startswith('Monge'):
    optimizer = opts.MongeSGRLD(lr, data_size=n, seed=seed,
                                preconditioner_decay_rate=decay)
    said = 'decay %g, ' % decay
  else:
    optimizer = opts.PSGLD(lr, data_size=n, seed=seed,
                           preconditioner_decay_rate=decay,
                           diagonal_bias=bias, gamma=name.split()[1])
    said = 'decay %g, bias %.2g, ' % (decay, bias)
  # `panel_fit.run_one`'s epochs are 100 steps, not one pass: the rule
  # is told the batch size.
  rule = (tfa.keras.CurvatureCalibration((x, y), epochs=2, batch_size=batch)
          if curvature
          else tfa.keras.StepSizeCalibration(epochs=5))
  target = 'fit: regression, D=%d, n=%d, batch %s' % (
      d, n, 'full' if batch == n else batch)
  label = '%s (%s%s, %d steps)' % (
      name, said, 'Adam, then CurvatureCalibration' if curvature else
      'StepSizeCalibration', epochs * panel_fit.STEPS_PER_EPOCH)
  try:
    members, said_by, _, seconds = panel_fit.run_one(
        optimizer, batch, seed=seed, epochs=epochs, data=(x, y),
        callbacks=[rule], warm_start=curvature)
  except Exception as e:  # pylint: disable=broad-except
    return raised('fit', target, label, e)
  said = sorted({truth.kind(m) for m in said_by['live'] + said_by['members']})
  blocks = len(members) // 8
  if not blocks:  # No samples to judge (every step non-finite): off.
    return judged('fit', target, label, np.inf, 0., 'sd', said, seconds)
  samples = members[:8 * blocks].reshape(8, blocks, -1).transpose(1, 0, 2)
  return judged('fit', target, label,
                *truth.run_error(samples, reference, project=project), said,
                seconds)


def one_fit_control(rng, quick):
  """A control run through `model.fit`, drawn to be accurate: a row (dict) of family ``'fit control'``.

  A Bayesian linear regression like `one_fit_run`'s (1 to 10 inputs, 200
  to 2,000 rows), its inputs' scales from 0.7 to 1.4 and offsets of sd 0.3, drawn
  again until the posterior's condition number is at most
  `CONTROL_CONDITION`; `FIT_CONTROL_CHAINS` chains of SGLD in one `fit`
  (`tfa.keras.Chains`), all from the README's warm start (Adam to a mode),
  the step set there by `tfa.keras.CurvatureCalibration` over 2 epochs with a heat drawn from
  `FIT_CONTROL_HEAT` (the stiffest direction's variance at most that
  much too large, minibatch noise included), for `FIT_CONTROL_STEPS`
  steps (a quarter burn-in): a few hundred of the slowest direction's
  relaxation times per chain. The members are read as a user's would
  be, on the training data at the end of `fit`.
  """
  from benchmarks import panel_fit  # pylint: disable=g-import-not-at-top
  d = int(rng.integers(1, 11))
  n = int(rng.integers(200, 2001))
  while True:
    scales = np.exp(rng.uniform(np.log(0.7), np.log(1.4), d))
    x = (rng.normal(size=(n, d)) * scales +
         rng.normal(scale=0.3, size=d)).astype(np.float32)
    precision = _precision(x)
    if np.linalg.cond(precision) <= CONTROL_CONDITION:
      break
  y = _targets(rng, x)
  reference, project = _posterior(x, y, precision)
  batch = n
  heat = _log_uniform(rng, *FIT_CONTROL_HEAT)
  steps = int(_log_uniform(rng, *FIT_CONTROL_STEPS)) // (8 if quick else 1)
  epochs = max(12, steps // panel_fit.STEPS_PER_EPOCH)
  seed = int(rng.integers(1 << 30))
  chains = 2 if quick else FIT_CONTROL_CHAINS
  target = 'fit: regression, D=%d, n=%d, batch full' % (d, n)
  label = 'SGLD (%d chains, CurvatureCalibration heat %.3f, %d steps)' % (
      chains, heat, epochs * panel_fit.STEPS_PER_EPOCH)
  try:
    members, said_by, _, seconds = panel_fit.run_one(
        tfa.keras.optimizers.SGLD(1e-4, data_size=n, seed=seed), batch,
        seed=seed, epochs=epochs, data=(x, y), chains=chains, warm_start=True,
        callbacks=[tfa.keras.CurvatureCalibration(
            (x, y), heat=heat, epochs=2, batch_size=batch)])
  except Exception as e:  # pylint: disable=broad-except
    return raised('fit control', target, label, e)
  said = sorted({truth.kind(m) for m in said_by['live'] + said_by['members']})
  if not members.size:  # No samples to judge (every step non-finite): off.
    return judged('fit control', target, label, np.inf, 0., 'sd', said,
                  seconds)
  return judged('fit control', target, label,
                *truth.run_error(members, reference, project=project), said,
                seconds)


def rate(rows, among, counted):
  """``(k, n, low, high)``: the share of `among` rows that are `counted`, its 95% Wilson interval."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  pool = [r for r in rows if among(r)]
  k = sum(bool(counted(r)) for r in pool)
  if not pool:
    return 0, 0, float('nan'), float('nan')
  ci = stats.binomtest(k, len(pool)).proportion_ci(method='wilson')
  return k, len(pool), float(ci.low), float(ci.high)


def _rate_cell(k, n, low, high):
  return '—' if n == 0 else '%d/%d = %.2f [%.2f, %.2f]' % (k, n, k / n, low,
                                                          high)


def warned(row):
  """Whether a run said it is biased (a notice that it could not be read, `benchmarks.panel_truth.UNREAD`, claims no bias)."""
  return any(k != truth.UNREAD for k in row['said'])


def summary(rows):
  """The miss and false-alarm rates, over all runs and per family.

  A miss: a run off that said nothing. A false alarm: a run within that
  said it is biased. Besides, the share of the runs within that were told
  they could not be read (too short, too imprecise or not mixed), what
  the checks cost an accurate run, and of the runs off told only that.
  """
  out = []
  in_fit = ('fit', 'fit control')
  picks = [('all', lambda r: True),
           ('kernels', lambda r: r['family'] not in in_fit),
           ('`fit`', lambda r: r['family'] in in_fit),
           ('all but the controls',
            lambda r: r['family'] not in ('control', 'fit control'))] + [
               (f, lambda r, f=f: r['family'] == f)
               for f in FAMILIES + ('control', 'fit control')]
  unread = lambda r: r['said'] and not warned(r)
  for name, pick in picks:
    miss = rate(rows, lambda r, p=pick: p(r) and r['off'],
                lambda r: not r['said'])
    alarm = rate(rows, lambda r, p=pick: p(r) and r['within'], warned)
    within_unread = rate(rows, lambda r, p=pick: p(r) and r['within'],
                         unread)
    off_unread = rate(rows, lambda r, p=pick: p(r) and r['off'], unread)
    unclear = sum(1 for r in rows if pick(r) and not (r['off'] or
                                                      r['within']))
    out.append([name, _rate_cell(*miss), _rate_cell(*alarm),
                _rate_cell(*within_unread), _rate_cell(*off_unread),
                str(unclear)])
  return out


def add_arguments(parser):
  """The generated panel's options, on `parser`."""
  parser.add_argument('--runs', type=int, default=None,
                      help='the number of generated runs (default 200, 8 '
                      'with --quick)')
  parser.add_argument('--seed', type=int, default=None,
                      help='the seed of the generated runs (default: drawn '
                      'and printed)')
  parser.add_argument('--batch', type=int, default=10,
                      help='runs per child process (default 10)')
  parser.add_argument('--jobs', type=int, default=None,
                      help='batches run at once, each in its own process '
                      '(default: the CPU cores)')
  parser.add_argument('--control', type=float, default=CONTROL,
                      help='the share of control runs, drawn to be accurate '
                      '(default %g)' % CONTROL)
  parser.add_argument('--advice', action='store_true',
                      help='rerun each warned kernel run following its '
                      'advice, and report how often that fixed it')


def run_batch(seed, indices, quick, device, advice=False, share=CONTROL):
  """Runs ``indices`` of the panel drawn from `seed` (in a child process): their rows."""
  common.select_device(device)
  return [one_run(np.random.default_rng([seed, i]), quick, advice,
                  control=is_control(seed, i, share))
          for i in indices]


def is_control(seed, i, share=CONTROL):
  """Whether run `i` of the panel drawn from `seed` is a control run, and where: ``False``, ``'kernel'`` or ``'fit'``.

  Drawn from ``(seed, i, 1)`` and ``(seed, i, 2)`` (the share
  `FIT_CONTROL` in `fit`), apart from the run's own draws.
  """
  if not np.random.default_rng([seed, i, 1]).uniform() < share:
    return False
  fit = np.random.default_rng([seed, i, 2]).uniform() < FIT_CONTROL
  return 'fit' if fit else 'kernel'


def fixed(row):
  """Whether a warned run's rerun, following its advice, is within 5% or at most half as far off."""
  rerun = row.get('rerun')
  if rerun is None or rerun['what'] == 'raised':
    return False
  return bool(rerun['within'] or abs(rerun['err']) <= abs(row['err']) / 2.)


def unread_only(row):
  """Whether a run was told only that it could not be read (no claim of a bias)."""
  return bool(row['said']) and set(row['said']) <= {truth.UNREAD}


def advice_summary(rows):
  """The advice's table: a row per warned kernel run, with its rerun and whether that fixed it."""
  told = [r for r in rows if 'rerun' in r]
  return [[r['target'], r['sampler'], '%+.3g ± %.2g' % (r['err'], r['se']),
           ', '.join(r['said']),
           '—' if r['rerun'] is None else r['rerun']['sampler'],
           '—' if r['rerun'] is None else '%+.3g ± %.2g' % (
               r['rerun']['err'], r['rerun']['se']),
           'yes' if fixed(r) else 'no'] for r in told]


def advice_rates(rows):
  """Markdown rows of the advice's rate: all warned kernel runs, those off by more than 10%, those warned of a bias, those told only unread.

  A warned run that was not off (its error unclear) is fixed only when its
  rerun is within 5% by two standard errors, which a NUTS reference's own
  error mostly rules out: the runs that were off are reported apart.
  """
  told = [r for r in rows if 'rerun' in r]
  return [[name, _rate_cell(*rate(told, among, fixed))] for name, among in (
      ('every warned run', lambda r: True),
      ('warned and off by more than 10%', lambda r: r['off']),
      ('warned of a bias', lambda r: not unread_only(r)),
      ('told only that it could not be read', unread_only))]


def _run_batch(job):
  return run_batch(*job)


def main(args=None):
  """Runs the generated panel; `args` as `benchmarks.panel --generated` parses them, else the command line's."""
  if args is None:
    parser = common.parser(__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args()
  out = common.out_dir(args.out)
  seed = (args.seed if args.seed is not None else
          int(time.time() * 1e3) % 1000000)
  print('seed', seed, flush=True)
  runs = args.runs or (8 if args.quick else 200)
  batch = max(1, getattr(args, 'batch', 10) or 10)
  advice = bool(getattr(args, 'advice', False))
  share = getattr(args, 'control', CONTROL)
  if not 0. <= share <= 1.:
    raise ValueError('--control must be a share from 0 to 1. Received: %r'
                     % share)
  jobs = [(seed, list(range(k, min(k + batch, runs))), args.quick,
           args.device, advice, share) for k in range(0, runs, batch)]
  rows = []
  # One fresh process per batch (spawned: no TensorFlow state inherited).
  jobs_at_once = max(1, min(len(jobs), getattr(args, 'jobs', None) or
                            os.cpu_count() or 1))
  with multiprocessing.get_context('spawn').Pool(
      jobs_at_once, maxtasksperchild=1) as pool:
    for done in pool.imap(_run_batch, jobs):
      for r in done:
        print('%3d %-44s %-62s %s %+.3f ± %.3f  %s' % (
            len(rows), r['target'], r['sampler'], r['what'], r['err'],
            r['se'], ', '.join(r['said']) or 'silent'), flush=True)
        rows.append(r)
  table = [[r['target'], r['sampler'],
            '%+.3g ± %.2g (%s)' % (r['err'], r['se'], r['what']),
            'raised' if r['what'] == 'raised' else 'off' if r['off'] else
            'within' if r['within'] else 'unclear',
            ', '.join(r['said']) or '—', '%.1f' % r['seconds']]
           for r in rows]
  text = common.markdown_table(
      ['runs', 'misses (off > 10%, silent)',
       'false alarms (within 5%, warned biased)',
       'within 5%, told unread', 'off > 10%, told only unread',
       'neither (unclear or raised)'],
      summary(rows))
  common.write_table(
      os.path.join(out, 'panel_generated.md'),
      'The generated panel: misses and false alarms on drawn targets',
      ['target', 'sampler', 'error', 'truth', 'said', 'seconds'], table,
      note=('Command: `python -m benchmarks.panel --generated%s --runs %d '
            '--seed %d --control %g`. %d chains a run; the "control" runs '
            'are drawn to be accurate (well-conditioned Gaussians, SGLD or '
            'a frozen metric, long runs), for the false-alarm rate. "off": '
            'the deciding error beyond 10%% by two standard errors, or '
            'beyond 100%%; "within": within 5%% by as much. "told unread": '
            'the run said only that it could '
            'not be read (too short, its reading too imprecise to rule out '
            'a spread 10%% off, or a coordinate with too few effective draws '
            'across the chains), with the length it needs: not silent, '
            'and no claim of a bias. '
            'Rates with 95%% Wilson intervals:\n\n%s'
            % (' --quick' if args.quick else '', runs, seed, share,
               truth.CHAINS, text)))
  print(text)
  if advice:
    table, rates = advice_summary(rows), advice_rates(rows)
    common.write_table(
        os.path.join(out, 'panel_advice.md'),
        'The generated panel: warned runs rerun as their advice says',
        ['target', 'sampler', 'error', 'said', 'rerun', 'its error',
         'fixed'],
        table, note=(
            'Command: `python -m benchmarks.panel --generated --advice%s '
            '--runs %d --seed %d --control %g`. Each warned kernel run is '
            'run again with the `changes` of all its warnings at once '
            '(`tfa.diagnostics.advice.merged` of its '
            '`tfa.diagnostics.SamplerWarning`s): a smaller step fixed at '
            'the first run\'s adapted step times the factor (no wrapper), '
            'lengths times their factor (at most %gx), a metric frozen when '
            'the rerun\'s burn-in ends, Γ, the decay or the Monge metric\'s '
            '`alpha2` as named. "fixed": '
            'the rerun within 5%% (by two standard errors) or at most half '
            'as far off; a run whose advice names no change counts as not '
            'fixed. Fixed, with 95%% Wilson intervals:\n\n%s'
            % (' --quick' if args.quick else '', runs, seed, share, LONGEST,
               common.markdown_table(['warned kernel runs', 'fixed'],
                                     rates))))
    print('advice fixed', rates[0][1])


if __name__ == '__main__':
  main()
