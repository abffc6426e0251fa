"""The panel: does every run that is off its target warn, and no run that is on it?

Each target has a reference for its posterior sds: exact (a correlated
Gaussian, a Bayesian linear regression with full-batch and with minibatch
gradients, Neal's funnel's marginals) or a NUTS run of TFP's in the same
process (eight schools, a Bayesian logistic regression on scikit-learn's
breast cancer data, and a small Bayesian MLP, `benchmarks.bayesian_mlp`).
Each sampler runs with `tfa.mcmc.sample` at the documented settings and at
some off them, with Γ dropped, corrected, or with the metric frozen after
burn-in. Reported per run: the largest relative error of the sds (with its
Monte Carlo standard error) over the quantities a user reads, the
configurational temperature (`tfa.mcmc.check_temperature`) in its virial
and its Laplacian form, every warning the run gave, and the time. A
Bayesian linear regression also runs through `model.fit` with the Keras
optimizers (`benchmarks.panel_fit`), where the live reading and the members' reading
on the training data are told apart.

The quantities compared: the coordinates (unconstrained for eight
schools); where the posterior's scale is known, the whitened coordinates
(``(θ − μ)ᵀL`` with ``LLᵀ = Σ⁻¹`` for the Gaussians, ``x`` over its
conditional sd for the funnels), each of sd 1, and for the funnels that
whitened ``x`` in the neck (`_funnel_quantities`); where there is a model, its
predictions (the logits at 50 inputs, for the logistic regression and the
MLP, whose weights have no meaningful marginal sds), which those runs also
pass to `tfa.mcmc.sample` to be read (`predictions`).

The means are compared too, each shift in the reference's sds. A run is
*biased* when an sd's relative error or a mean's shift exceeds the
documented 5% by more than two standard errors, *accurate* when every one
is within 5% by as much, and *unclear* in between (the run is too short
to tell). The confusion matrix counts them against warned/silent.

    python -m benchmarks.panel [--quick]
    python -m benchmarks.panel --generated [--runs 200] [--seed S] [--quick]

``--generated`` draws the targets and the settings at random
(`benchmarks.panel_generated`).
"""

import collections
import os
import time
import warnings

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from benchmarks import common
from benchmarks import panel_fit
from benchmarks import regimes
from tfp_adaptive.diagnostics import mean_force
from tfp_adaptive.diagnostics import temperature as temperature_lib
from tfp_adaptive.mcmc import kernel as kernel_lib

TOLERANCE = 0.05
CHAINS = 64


def _exact(sds, means):
  """The reference of exact sds and `means`: ``(sds, their errors, means, their errors)``."""
  sds = np.asarray(sds, np.float64)
  return (sds, np.zeros(len(sds)), np.broadcast_to(
      np.asarray(means, np.float64), sds.shape), np.zeros(len(sds)))


def _coordinates_and(derived):
  """A projection: the coordinates and, after them, the quantities `derived` from them."""
  def project(samples):
    x = _flat(samples).astype(np.float64)
    return np.concatenate([x, np.asarray(derived(x))], -1)
  return project


def _gaussian(cov, mean):
  """``(sds, project, empirical)`` of a Gaussian: its coordinates and its whitened ones, ``(θ − μ)ᵀL`` for ``LLᵀ = Σ⁻¹``, and `empirical_temperature`."""
  chol = np.linalg.cholesky(np.linalg.inv(cov))
  return (_exact(np.concatenate([np.sqrt(np.diag(cov)), np.ones(len(cov))]),
                 np.concatenate([mean, np.zeros(len(cov))])),
          _coordinates_and(lambda x: (x - mean) @ chol),
          lambda samples: empirical_temperature(samples, chol, mean))


def empirical_temperature(samples, chol, mean):
  """The temperatures the samples have against the exact Gaussian ``N(μ, Σ)``, ``P = Σ⁻¹ = LLᵀ``: two `Reading`s.

  ``⟨(θ − μ)ᵀP(θ − μ)⟩/D``, what the virial estimates, and
  ``⟨|P(θ − μ)|²⟩/tr P``, what the Laplacian form estimates (the
  directions weighted by their curvature), both read here from the exact
  posterior rather than from gradients along the chain. For samples of
  ``N(μ, τΣ)`` both read ``τ``; sds all off by a factor ``s`` read
  ``s²``. Their errors come from the series' effective size, as the
  readings' do.
  """
  d = _flat(samples).astype(np.float64) - mean
  z = d @ chol
  pd = z @ chol.T
  trace = np.sum(chol ** 2)
  return (temperature_lib.read(np.sum(z ** 2, -1), z.shape[-1]),
          temperature_lib.read_ratio(np.sum(pd ** 2, -1),
                                     np.full(pd.shape[:-1], trace),
                                     z.shape[-1]))


def _gaussian_2d():
  cov = np.array([[1., 0.8], [0.8, 1.]])
  prec = tf.constant(np.linalg.inv(cov), tf.float32)

  def log_prob(x):
    return -0.5 * tf.einsum('...i,ij,...j->...', x, prec, x)
  reference, project, empirical = _gaussian(cov, np.zeros(2))
  return (log_prob, reference, np.zeros([CHAINS, 2], np.float32), None,
          project, empirical)


def _regression(batch_size=None):
  fn, cov, mean = regimes._linear_regression()  # pylint: disable=protected-access
  if batch_size is not None:  # The same data and prior, in minibatches.
    data = tuple(tf.constant(a, tf.float32) for a in regimes.regression_data())
    fn = tfa.minibatch_log_prob(
        lambda parts, batch: -0.5 * (batch[1] - tf.einsum(
            'nd,...d->...n', batch[0], parts[0])) ** 2 / regimes.SIGMA2,
        data, batch_size,
        log_prior_fn=lambda parts: -0.5 * tf.reduce_sum(
            parts[0] ** 2, -1) / regimes.PRIOR_VAR)
  init = np.tile(mean, (CHAINS, 1)).astype(np.float32)
  reference, project, empirical = _gaussian(cov, mean)
  return fn, reference, init, None, project, empirical


NECK_MASS = 0.15865525393145707  # Φ(−1): the mass below one sd.


def _funnel_quantities(v_sd, whiten, v_index):
  """The coordinates, ``x`` whitened by `whiten`, and that whitened ``x`` in the neck.

  The neck: ``v`` more than one sd below its mean, where a step too long
  for the narrow conditional fails first. The whitened ``x`` there, set to
  0 elsewhere, has the exact sd ``sqrt(Φ(−1))``: its error counts both the
  neck's mass and its spread.
  """
  def derived(x):
    w = whiten(x)
    neck = x[..., v_index:v_index + 1] < -v_sd
    return np.concatenate([w, np.where(neck, w, 0.)], -1)
  return _coordinates_and(derived)


def _funnel():
  """Neal's funnel, ``v ~ N(0, 1.5²)``, ``x | v ~ N(0, e^v)``: exact marginal sds, ``x e^{−v/2}``'s (1) and the neck's."""
  sv = 1.5

  def log_prob(z):
    v, x = z[..., 0], z[..., 1]
    return -0.5 * v ** 2 / sv ** 2 - 0.5 * v - 0.5 * x ** 2 * tf.exp(-v)
  sds = np.array([sv, np.sqrt(np.exp(sv ** 2 / 2.)), 1., np.sqrt(NECK_MASS)])
  return (log_prob, _exact(sds, 0.), np.zeros([CHAINS, 2], np.float32), None,
          _funnel_quantities(sv, lambda x: x[..., 1:] * np.exp(
              -x[..., :1] / 2.), 0))


def _yu_funnel():
  """Yu et al.'s funnel with N(0, 1) gradient noise (`benchmarks.yu_funnel`): exact marginal sds, ``x / sqrt(softplus(v))``'s (1) and the neck's."""
  from benchmarks import yu_funnel  # pylint: disable=g-import-not-at-top
  v = np.linspace(-40., 40., 200001)
  pv = np.exp(-0.5 * (v / yu_funnel.SIGMA) ** 2)
  pv /= pv.sum()
  sds = np.array([np.sqrt(np.sum(pv * np.log1p(np.exp(v)))), yu_funnel.SIGMA,
                  1., np.sqrt(NECK_MASS)])
  return (yu_funnel.NoisyGradientFunnel(), _exact(sds, 0.),
          np.zeros([CHAINS, 2], np.float32), None,
          _funnel_quantities(yu_funnel.SIGMA, lambda x: x[..., :1] / np.sqrt(
              np.logaddexp(0., x[..., 1:])), 1))


def _nuts_sds(log_prob, init, bijector=None, draws=1000):
  kernel = tfp.mcmc.NoUTurnSampler(log_prob, step_size=0.1)
  if bijector is not None:
    kernel = tfp.mcmc.TransformedTransitionKernel(kernel, bijector)
  kernel = tfp.mcmc.DualAveragingStepSizeAdaptation(kernel, 400)

  @tf.function(jit_compile=True, autograph=False)
  def run():
    return tfp.mcmc.sample_chain(draws, init, kernel=kernel,
                                 num_burnin_steps=500, trace_fn=None,
                                 seed=(1, 2))
  return run()


def _logistic():
  """Breast cancer's logistic regression: its coefficients and its logits at 50 of its inputs, against NUTS."""
  from sklearn import datasets, preprocessing  # pylint: disable=g-import-not-at-top
  d = datasets.load_breast_cancer()
  x = preprocessing.StandardScaler().fit_transform(d.data)
  x = np.concatenate([x, np.ones((len(x), 1))], 1).astype(np.float32)
  xt, yt = tf.constant(x), tf.constant(d.target.astype(np.float32))

  def log_prob(w):
    logits = tf.einsum('nd,...d->...n', xt, w)
    lik = -tf.reduce_sum(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.broadcast_to(yt, tf.shape(logits)), logits=logits), -1)
    return lik - 0.5 * tf.reduce_sum(w ** 2, -1)
  inputs = x[::len(x) // 50][:50].astype(np.float64)
  project = _coordinates_and(lambda w: w @ inputs.T)
  ref = project(_nuts_sds(log_prob, tf.zeros([64, x.shape[1]])).numpy())
  test_inputs = tf.constant(inputs, tf.float32)
  return (log_prob, _group_moments(ref), np.zeros([CHAINS, x.shape[1]],
                                              np.float32), None, project,
          None, lambda w: tf.einsum('nd,...d->...n', test_inputs, w))


def _mlp():
  from benchmarks import bayesian_mlp  # pylint: disable=g-import-not-at-top
  target = bayesian_mlp.Target()
  ref = target.project(target.nuts(32, 1000))
  return (target.minibatch, _group_moments(ref), target.init(CHAINS, 5), None,
          target.project, None, target.logits)


def _eight_schools():
  from tests.mcmc import test_eight_schools as es  # pylint: disable=g-import-not-at-top
  ref = es._nuts(64, 2000)  # pylint: disable=protected-access
  return (es._log_prob, _group_moments(_flat(ref, es.BIJECTORS)),  # pylint: disable=protected-access
          es._start(CHAINS), es.BIJECTORS)  # pylint: disable=protected-access


def _flat(samples, bijectors=None):
  """``[draws, chains, coordinates]``, unconstrained through `bijectors`."""
  if bijectors is not None:
    parts = [b.inverse(s).numpy() for b, s in zip(bijectors, samples)]
  else:
    parts = [np.asarray(s) for s in kernel_lib.as_list(samples)]
  return np.concatenate([p.reshape(p.shape[0], p.shape[1], -1)
                         for p in parts], -1)


def _group_moments(x, groups=8):
  """The sds of ``[draws, chains, coordinates]`` draws, their standard errors over groups of chains, the means and theirs."""
  groups = min(groups, x.shape[1])  # The quick mode's 2 chains in `fit`.
  split = np.array_split(np.arange(x.shape[1]), groups)
  flat = [x[:, g].reshape(-1, x.shape[-1]) for g in split]
  out = []
  for moment in (np.stack([f.std(0) for f in flat]),
                 np.stack([f.mean(0) for f in flat])):
    out += [moment.mean(0), moment.std(0, ddof=1) / np.sqrt(groups)]
  return tuple(out)


def _psgld(alpha, bias, gamma, frozen=False):
  return lambda fn, h: tfa.mcmc.PSGLD(
      fn, h, alpha, bias, gamma=gamma,
      num_adaptation_steps=2000 if frozen else None)


def _monge(alpha, gamma):
  return lambda fn, h: tfa.mcmc.MongeSGRLD(fn, h, 1., alpha, gamma=gamma)


SGLD = lambda fn, h: tfa.mcmc.SGLD(fn, h)


def runs(quick):
  """``(target, build(), [(label, factory, h, steps, thin), ...])`` rows."""
  def pre(a, b):
    return [('PSGLD α=%g bias=%g %s' % (a, b, g), _psgld(a, b, g, f), f)
            for g, f in (('none', False), ('corrected', False),
                         ('none', True))]
  table = [
      ('gaussian 2-D', _gaussian_2d, [
          ('SGLD', SGLD, 0.05, 20000, 10), ('SGLD', SGLD, 0.5, 20000, 10)] + [
              (label.replace(' none', ' frozen') if f else label, k, h,
               20000, 10)
              for label, k, f in pre(0.5, 0.1) for h in (0.02, 0.2)]),
      ('regression', _regression, [
          ('SGLD', SGLD, 4e-5, 40000, 20)] + [
              (label.replace(' none', ' frozen') if f else label, k, h,
               40000, 20)
              for label, k, f in pre(0.5, 1e3) for h in (4.8e-4,)] + [
                  ('PSGLD α=0.9 bias=0.001 corrected',
                   _psgld(0.9, 1e-3, 'corrected'), 1.6e-5, 40000, 20)]),
      ('regression, minibatch 20', lambda: _regression(20), [
          ('SGLD', SGLD, 1e-5, 40000, 20), ('SGLD', SGLD, 1e-4, 40000, 20),
          ('PSGLD α=0.99 bias=1 corrected', _psgld(0.99, 1., 'corrected'),
           1e-4, 120000, 60)]),
      ('funnel', _funnel, [
          ('SGLD', SGLD, 0.05, 40000, 20),
          ('PSGLD α=0.5 bias=0.1 corrected', _psgld(0.5, 0.1, 'corrected'),
           0.05, 40000, 20),
          ('Monge α=0.9 corrected', _monge(0.9, 'corrected'), 0.05, 40000,
           20),
          ('PSGLD α=0.5 bias=0.1 frozen', _psgld(0.5, 0.1, 'none', True),
           0.02, 100000, 50)]),
      ('funnel, noisy ĝ (Yu et al.)', _yu_funnel, [
          ('SGLD', SGLD, 1e-3, 160000, 80)] + [
              ('RMSprop α=0.995 bias=0 %s' % g, _psgld(0.995, 0., g), 2.5e-3,
               160000, 80) for g in ('none', 'corrected')] + [
                   ('RMSprop α=0.9 bias=0 corrected',
                    _psgld(0.9, 0., 'corrected'), 2.5e-3, 160000, 80),
                   ('RMSprop α=0.995 bias=0 frozen',
                    _psgld(0.995, 0., 'none', True), 2.5e-3, 160000, 80)] + [
                   ('Shampoo α=0.9995 ε=1e-6 %s' % g,
                    lambda fn, h, g=g: tfa.mcmc.ShampooSGRLD(
                        fn, h, 0.9995, 1e-6, 1, gamma=g), 3e-3, 160000, 80)
                   for g in ('none', 'corrected')]),
      ('logistic, breast cancer', _logistic, [
          ('SGLD', SGLD, 2e-3, 60000, 30), ('SGLD', SGLD, 2e-2, 60000, 30),
          ('PSGLD α=0.5 bias=1 corrected', _psgld(0.5, 1., 'corrected'),
           2e-3, 60000, 30),
          ('PSGLD α=0.5 bias=1 frozen', _psgld(0.5, 1., 'none', True), 2e-3,
           60000, 30)]),
      ('eight schools', _eight_schools, [
          ('PSGLD α=0.5 bias=0.001 corrected',
           _psgld(0.5, 1e-3, 'corrected'), 1e-3, 240000, 120),
          ('PSGLD α=0.5 bias=0.001 frozen',
           _psgld(0.5, 1e-3, 'none', True), 1e-3, 240000, 120),
          ('PSGLD α=0.99 bias=0.001 frozen',
           _psgld(0.99, 1e-3, 'none', True), 1e-3, 240000, 120),
          ('Monge α=0.9 corrected', _monge(0.9, 'corrected'), 0.05, 20000,
           10),
          ('SGLD', SGLD, 0.05, 20000, 10)]),
      ('Bayesian MLP, minibatch 10', _mlp, [
          ('SGLD', SGLD, 3e-4, 40000, 40), ('SGLD', SGLD, 3e-3, 40000, 40)] + [
              (label.replace(' none', ' frozen') if f else label, k, h,
               40000, 40)
              for label, k, f in pre(0.95, 1e-3) for h in (3e-3,)] + [
                  ('PSGLD α=0.95 bias=0.001 corrected',
                   _psgld(0.95, 1e-3, 'corrected'), 3e-2, 40000, 40),
                  ('PSGLD α=0.95 bias=0.001 frozen',
                   _psgld(0.95, 1e-3, 'none', True), 1e-3, 120000, 120)]),
  ]
  if quick:  # That every piece runs, at one target: an accurate run, a biased one.
    first = table[0]
    return [(first[0], first[1], first[2][:2])]
  return table


Run = collections.namedtuple('Run', ['samples', 'readings', 'said',
                                     'seconds', 'changes', 'step'])
Run.__doc__ = """A panel run: its samples, `tfa.mcmc.check_temperature`'s readings, the kinds of warning it said (`kind`), its wall time, the `changes` its first warning that names some advises (`tfa.diagnostics.Change` tuples, else empty) and its final step size (after a step-size adaptation; `None` if there is none)."""


def run_one(fn, init, bijectors, factory, h, steps, thin, quick,
            predictions=None, burnin=None):
  """Runs `factory`'s kernel through `tfa.mcmc.sample`: a `Run`.

  `steps` steps are kept (every `thin`-th) after a burn-in of `burnin`
  steps, ``steps // 2`` by default.
  """
  kernel = factory(fn, h)
  if bijectors is not None:
    kernel = tfp.mcmc.TransformedTransitionKernel(kernel, bijectors)
  if quick:
    steps //= 10
    burnin = None if burnin is None else burnin // 10
  burnin = steps // 2 if burnin is None else burnin
  t0 = time.time()
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    samples, _, results = tfa.mcmc.sample(
        kernel, init, num_results=steps // thin, num_burnin_steps=burnin,
        num_steps_between_results=thin - 1, seed=(3, 4),
        chunk_size=steps // thin, progress=False, predictions=predictions)
  seconds = time.time() - t0
  readings = tfa.mcmc.check_temperature(kernel, samples, warn=False,
                                        predictions=predictions)
  said = sorted({kind(str(w.message)) for w in caught
                 if issubclass(w.category, UserWarning)})
  changes = next((c for c in (tfa.diagnostics.advice.changes_of(w.message)
                               for w in caught) if c), ())
  step = tfa.mcmc.driver.find_field(results, 'new_step_size')
  return Run(samples, readings, said, seconds, changes,
             None if step is None else float(np.asarray(step)))


KINDS = ('too short to tell', 'too imprecise to rule out',
         'configurational temperature', 'mean force of the predictions',
         'mean force', 'non-finite',
         'drift_ratio', 'lag', 'peak_factor', 'preconditioner_decay_rate',
         'not moved')


#: The kind of a notice that the run could not be read (too short, or
#: too imprecise to rule out a bias): it tells the user, and claims no bias.
UNREAD = 'unread'


def kind(message):
  """A short name for a warning: what it is about."""
  for name in KINDS:
    if name in message:
      return {'configurational temperature': 'temperature',
              'mean force of the predictions': 'prediction force',
              'too short to tell': UNREAD,
              'too imprecise to rule out': UNREAD}.get(name, name)
  return message[:40]


def run_error(samples, reference, bijectors=None, project=None):
  """The error that decides the run (`deciding`), its standard error (groups of chains, the reference's included) and ``'sd'`` or ``'mean'``.

  The quantities' errors: each sd's relative error and each mean's shift
  in the reference's sds, judged alike (a mean within 5% of an sd).
  `project` maps the samples to the ``[draws, chains, coordinates]`` that
  are compared (the network's logits at test inputs), else `_flat`.
  """
  sds, se, means, mean_se = _group_moments(
      project(samples) if project else _flat(samples, bijectors))
  ref, ref_se, ref_mean, ref_mean_se = reference
  rel = sds / ref - 1.
  shift = (means - ref_mean) / ref
  errors = np.concatenate([rel, shift])
  if not np.all(np.isfinite(errors)):  # A chain that left the target.
    return np.inf, 0., 'sd'
  se = np.concatenate([np.hypot(se / ref, (1. + rel) * ref_se / ref),
                       np.hypot(mean_se, ref_mean_se) / ref])
  k = deciding(errors, se)
  return float(errors[k]), float(se[k]), 'sd' if k < len(rel) else 'mean'


def deciding(rel, se):
  """The index of the quantity whose `classify` is the run's, from its errors `rel` (sds' relative errors, means' shifts in sds) and their standard errors `se`.

  The one furthest off when some are off by more than 100%, whatever their
  errors (a chain that blew up gives a huge one); else the one furthest
  outside the tolerance when some are clearly outside it; else the one
  least clearly inside it: a run is accurate only when every quantity is.
  """
  rel, se = np.abs(np.asarray(rel)), np.asarray(se)
  off = rel > 1.
  if off.any():
    return int(np.argmax(np.where(off, rel, -np.inf)))
  if np.max(rel - 2. * se) > TOLERANCE:
    return int(np.argmax(rel - 2. * se))
  return int(np.argmax(rel + 2. * se))


def classify(err, se):
  """``'biased'`` beyond 5% by two standard errors, ``'accurate'`` within 5% by as much, else ``'unclear'``."""
  if abs(err) - 2. * se > TOLERANCE or abs(err) > 1.:  # Or sds twice off.
    return 'biased'
  if abs(err) + 2. * se <= TOLERANCE:
    return 'accurate'
  return 'unclear'


def sweep(quick):
  rows = []
  for target, build, configs in runs(quick):
    built = build()
    fn, reference, init = built[:3]
    bijectors = built[3] if len(built) > 3 else None
    project = built[4] if len(built) > 4 else None
    empirical = built[5] if len(built) > 5 else None
    predictions = built[6] if len(built) > 6 else None
    for label, factory, h, steps, thin in configs:
      samples, readings, said, seconds = run_one(
          fn, init, bijectors, factory, h, steps, thin, quick,
          predictions)[:4]
      err, se, what = run_error(samples, reference, bijectors, project)
      reading, laplacian = readings['overall'], readings.get('laplacian')
      laplacian_says = (None if laplacian is None else
                        temperature_lib.final_verdict(laplacian))
      shift = _largest_shift(readings['mean_force'])
      rows.append(dict(target=target, sampler=label, h=h, err=err, se=se,
                       what=what, shift=shift,
                       predicted=readings.get('predictions'),
                       truth=classify(err, se), reading=reading,
                       laplacian=laplacian, warned=bool(said), said=said,
                       seconds=seconds,
                       empirical=None if empirical is None else empirical(
                           samples)))
      rows[-1]['virial_warns'] = temperature_lib.final_verdict(
          reading) not in ('accurate', 'too short')
      print('%-24s %-34s h=%-8g %s err %+.3f ± %.3f  T = %.3f ± %.3f  '
            'T_L = %s (%s)  F = %s  F_f = %s  %s'
            % (target, label, h, what, err, se, reading.temperature,
               reading.standard_error, format_reading(laplacian), laplacian_says,
               _shift(shift), _shift(rows[-1]['predicted']),
               ', '.join(said) or 'silent'), flush=True)
  return rows


def fit_sweep(quick):
  """`sweep`'s rows for the runs in `fit` (`benchmarks.panel_fit`).

  Each configuration runs as 8 chains (seeds; 2 in `quick`); the error
  is over all of them. Chain 0 is the user's run: its warnings, its
  members' reading. ``warned``: what a run with
  ``SampleCollector(training_data=(x, y))`` says (the live reading's
  warnings and the members').
  """
  _, _, precision, mean = panel_fit.regression()
  reference, project, empirical = _gaussian(np.linalg.inv(precision), mean)
  rows = []
  for label, optimizer, batch_size, h in panel_fit.configurations(quick):
    runs = [panel_fit.run_one(optimizer(seed), batch_size, seed,
                              panel_fit.EPOCHS // (10 if quick else 1))
            for seed in range(2 if quick else 8)]
    _, said, readings, seconds = runs[0]
    n = min(len(r[0]) for r in runs)
    err, se, what = run_error(np.stack([r[0][-n:] for r in runs], 1),
                              reference, project=project)
    reading, laplacian = readings['overall'], readings['laplacian']
    rows.append(dict(
        target='regression in fit', sampler=label, h=h, err=err, se=se,
        what=what, shift=_largest_shift(readings['mean_force']),
        predicted=readings['predictions'], truth=classify(err, se),
        reading=reading, laplacian=laplacian, live=readings['live'],
        empirical=empirical(runs[0][0][:, None]),
        warned=bool(said['live'] or said['members']),
        said=['%s: %s' % (who, k) for who in ('live', 'members')
              for k in sorted({kind(m) for m in said[who]})],
        seconds=seconds,
        virial_warns=temperature_lib.final_verdict(reading) not in (
            'accurate', 'too short')))
    print('%-24s %-50s h=%-8g %s err %+.3f ± %.3f  T = %.3f  T_L = %.3f  '
          'T_live = %s  F = %s  F_f = %s  %s' % (
              'regression in fit', label, h, what, err, se,
              reading.temperature, laplacian.temperature,
              format_reading(rows[-1]['live']), _shift(rows[-1]['shift']),
              _shift(rows[-1]['predicted']),
              ', '.join(rows[-1]['said']) or 'silent'), flush=True)
  return rows


def _largest_shift(shifts):
  """The `tfp_adaptive.diagnostics.mean_force.Shift` of the part furthest outside its band."""
  return max(shifts.values(),
             key=lambda f: abs(f.shift) - f.interval_z * f.standard_error)


def _shift(f):
  if f is None:
    return '—'
  return '%+.2g ± %.2g (%s)' % (f.shift, f.standard_error,
                                mean_force.verdict(f))


def format_reading(r):
  """A `Reading` as ``T ± se`` (``—`` for `None`)."""
  return '—' if r is None else '%.3g ± %.2g' % (r.temperature,
                                               r.standard_error)


def within_ten_percent(reading, empirical):
  """Whether `reading` is within 10% of `empirical`, plus three combined standard errors."""
  return bool(abs(reading.temperature - empirical.temperature) <=
              0.1 * empirical.temperature + 3. * np.hypot(
                  reading.standard_error, empirical.standard_error))


def confusion(rows, key='warned'):
  truths = ('accurate', 'biased', 'unclear')
  counts = {(t, w): 0 for t in truths for w in (True, False)}
  for r in rows:
    counts[(r['truth'], r[key])] += 1
  return [[truth, str(counts[(truth, True)]), str(counts[(truth, False)])]
          for truth in truths]


def main():
  from benchmarks import panel_generated  # pylint: disable=g-import-not-at-top
  parser = common.parser(__doc__.splitlines()[0])
  parser.add_argument('--generated', action='store_true',
                      help='targets and settings drawn at random '
                      '(benchmarks.panel_generated)')
  panel_generated.add_arguments(parser)
  args = parser.parse_args()
  if args.generated:
    return panel_generated.main(args)
  out = common.out_dir(args.out)
  kernel_rows = sweep(args.quick)
  fit_rows = fit_sweep(args.quick)
  rows = kernel_rows + fit_rows
  table = [[r['target'], r['sampler'], '%g' % r['h'],
            '%+.3g ± %.2g (%s)' % (r['err'], r['se'], r['what']), r['truth'],
            format_reading(r['reading']), format_reading(r['laplacian']),
            _shift(r['shift']), _shift(r['predicted']),
            '—' if r['empirical'] is None else ' / '.join(
                format_reading(e) for e in r['empirical']),
            format_reading(r.get('live')),
            ', '.join(r['said']) or '—', '%.1f' % r['seconds']] for r in rows]
  exact = [r for r in rows if r['empirical'] is not None]
  within = [sum(r[key] is not None and within_ten_percent(r[key], r['empirical'][i])
                for r in exact) for i, key in enumerate(('reading',
                                                         'laplacian'))]
  live_within = sum(r['live'] is not None and within_ten_percent(r['live'],
                                                      r['empirical'][0])
                    for r in fit_rows)
  note = ('Command: `python -m benchmarks.panel%s`. %d chains per run, half '
          'the steps burn-in. "error": the error that decides the run (the '
          'one most clearly beyond 5%%, else the one least clearly within '
          'it), of a posterior sd (relative) or of a mean (in the '
          'reference\'s sds), over the coordinates (unconstrained for eight '
          'schools), the whitened coordinates where the scale is known (the '
          'Gaussians, the funnels; for the funnels also the whitened x in the '
          'neck, v below minus one sd, 0 elsewhere, of sd sqrt(Φ(−1))) and '
          'the logits at 50 inputs where there '
          'is a model (the logistic regression, the MLP), ± its standard '
          'error over 8 groups of chains (and of the NUTS reference\'s, where '
          'there is one); biased when beyond 5%% by two standard errors or '
          'off by more than 100%%, accurate when within 5%% by as much, '
          'unclear between. Temperatures: the virial and the Laplacian form '
          '(`tfa.mcmc.check_temperature`), both warned on. Mean force: '
          'sd(θ)·⟨∂U/∂θ⟩ of the coordinate furthest from balance, 0 at the '
          'target, warned on beyond 0.05 (`tfa.mcmc.check_temperature`, '
          '`tfp_adaptive.diagnostics.mean_force`), with its verdict. Prediction '
          'force: sd(f)·⟨∇f·∇U − τΔf⟩/⟨|∇f|²⟩ of the prediction furthest from '
          'balance, where the run reads predictions (the logits at the 50 '
          'inputs for the logistic regression and the MLP, passed to '
          '`tfa.mcmc.sample` as `predictions`; the model\'s outputs at 64 '
          'training inputs in `fit`), 0 at the target, warned on alike '
          '(`tfp_adaptive.diagnostics.prediction_force`). Empirical '
          'temperatures: where the posterior is an exact Gaussian N(μ, Σ), '
          'the samples\' ⟨(θ − μ)ᵀΣ⁻¹(θ − μ)⟩/D and ⟨|Σ⁻¹(θ − μ)|²⟩/tr Σ⁻¹, '
          'what the virial and the Laplacian form estimate '
          '(`benchmarks.panel.empirical_temperature`); the virial reads its '
          'own within 10%% (plus three combined standard errors) in %d of '
          'these %d runs, the Laplacian form in %d. Warnings: the '
          'names of what `tfa.mcmc.sample` warned about.\n\n"regression in '
          'fit": `model.fit` runs of the Keras optimizers on a Bayesian linear '
          'regression (`benchmarks.panel_fit`): the error over 8 chains '
          '(seeds), ± its error over them; the first chain\'s warnings, '
          '"live" what the reading in `fit` said, "members" what its '
          'members\' reading on the training data said '
          '(`SampleCollector(training_data=(x, y))`), and the temperatures '
          'are its members\' (the empirical one, of the first chain\'s '
          'members). "live": the reading in `fit` of the first chain '
          '(`SampleCollector.live_readings`), which reads its '
          'empirical temperature within 10%% (as above) in %d of these %d '
          'runs; its every-step reading takes the step\'s own heating '
          'out, and each epoch\'s first step, a fresh batch, replaces it '
          'when it reads it too cold (guide "Reading the diagnostics"). '
          'The members\' reading on the training data is the precise one '
          '(with it, a `drift_ratio` warning waits for that reading and is '
          'dropped when it confirms the temperature).\n\nConfusion matrix '
          '(runs):\n\n%s\n\nHad the virial alone been warned on (its '
          'reading\'s verdict):\n\n%s'
          % (' --quick' if args.quick else '', CHAINS, within[0], len(exact),
             within[1], live_within, len(fit_rows),
             common.markdown_table(['', 'warned', 'silent'], confusion(rows)),
             common.markdown_table(['', 'warned', 'silent'],
                                   confusion(rows, 'virial_warns'))))
  common.write_table(
      os.path.join(out, 'panel.md'),
      'The panel: runs off their target against the warnings',
      ['target', 'sampler', 'h', 'error', 'truth',
       'configurational temperature', 'Laplacian form', 'mean force',
       'prediction force', 'empirical temperatures', 'live reading',
       'warnings',
       'seconds'], table, note)


if __name__ == '__main__':
  main()
