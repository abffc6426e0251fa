"""The panel's truth and its verdicts: references, the quantities compared, one run, and whether it is off.

A reference holds a target's posterior sds and means with their errors:
exact (`exact`, `gaussian`) or from NUTS chains of TFP's (`nuts_sds`,
read in groups of chains by `group_moments`). The quantities compared are
a run's coordinates (`flat`) and what a projection derives from them
(`coordinates_and`: whitened coordinates, a funnel's neck, a model's
logits). `run_one` runs a kernel through `tfa.mcmc.sample` as a user
would and records what it said (`kind`); `run_error` gives the error that
decides the run (`deciding`) and `classify` calls it biased (beyond 5% by
two standard errors), accurate (within 5% by as much) or unclear.

Used by the fixed panel (`benchmarks.panel`), the generated one
(`benchmarks.panel_generated`) and the thermometer's benchmark.
"""

import collections
import time
import warnings

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from tfp_adaptive.diagnostics import temperature as temperature_lib
from tfp_adaptive.mcmc import kernel as kernel_lib


TOLERANCE = 0.05
CHAINS = 64


def exact(sds, means):
  """The reference of exact sds and `means`: ``(sds, their errors, means, their errors)``."""
  sds = np.asarray(sds, np.float64)
  return (sds, np.zeros(len(sds)), np.broadcast_to(
      np.asarray(means, np.float64), sds.shape), np.zeros(len(sds)))


def coordinates_and(derived):
  """A projection: the coordinates and, after them, the quantities `derived` from them."""
  def project(samples):
    x = flat(samples).astype(np.float64)
    return np.concatenate([x, np.asarray(derived(x))], -1)
  return project


def gaussian(cov, mean):
  """``(sds, project, empirical)`` of a Gaussian: its coordinates and its whitened ones, ``(θ − μ)ᵀL`` for ``LLᵀ = Σ⁻¹``, and `empirical_temperature`."""
  chol = np.linalg.cholesky(np.linalg.inv(cov))
  return (exact(np.concatenate([np.sqrt(np.diag(cov)), np.ones(len(cov))]),
                 np.concatenate([mean, np.zeros(len(cov))])),
          coordinates_and(lambda x: (x - mean) @ chol),
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
  d = flat(samples).astype(np.float64) - mean
  z = d @ chol
  pd = z @ chol.T
  trace = np.sum(chol ** 2)
  return (temperature_lib.read(np.sum(z ** 2, -1), z.shape[-1]),
          temperature_lib.read_ratio(np.sum(pd ** 2, -1),
                                     np.full(pd.shape[:-1], trace),
                                     z.shape[-1]))


NECK_MASS = 0.15865525393145707  # Φ(−1): the mass below one sd.


def funnel_quantities(v_sd, whiten, v_index):
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
  return coordinates_and(derived)


def nuts_sds(log_prob, init, bijector=None, draws=1000):
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


def flat(samples, bijectors=None):
  """``[draws, chains, coordinates]``, unconstrained through `bijectors`."""
  if bijectors is not None:
    parts = [b.inverse(s).numpy() for b, s in zip(bijectors, samples)]
  else:
    parts = [np.asarray(s) for s in kernel_lib.as_list(samples)]
  return np.concatenate([p.reshape(p.shape[0], p.shape[1], -1)
                         for p in parts], -1)


def group_moments(x, groups=8):
  """The sds of ``[draws, chains, coordinates]`` draws, their standard errors over groups of chains, the means and theirs."""
  groups = min(groups, x.shape[1])  # The quick mode's 2 chains in `fit`.
  split = np.array_split(np.arange(x.shape[1]), groups)
  flat = [x[:, g].reshape(-1, x.shape[-1]) for g in split]
  out = []
  for moment in (np.stack([f.std(0) for f in flat]),
                 np.stack([f.mean(0) for f in flat])):
    out += [moment.mean(0), moment.std(0, ddof=1) / np.sqrt(groups)]
  return tuple(out)


Run = collections.namedtuple('Run', ['samples', 'readings', 'said',
                                     'seconds', 'changes', 'step'])
Run.__doc__ = """A panel run: its samples, `tfa.mcmc.check_temperature`'s readings, the kinds of warning it said (`kind`), its wall time, the `changes` that follow all its warnings at once (`tfa.diagnostics.advice.merged`: `tfa.diagnostics.Change` tuples, else empty) and its final step size (after a step-size adaptation; `None` if there is none)."""


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
  changes = tfa.diagnostics.advice.merged(
      w.message for w in caught if issubclass(w.category, UserWarning))
  step = tfa.mcmc.driver.find_field(results, 'new_step_size')
  return Run(samples, readings, said, seconds, changes,
             None if step is None else float(np.asarray(step)))


KINDS = ('too short to tell', 'too imprecise to rule out',
         'configurational temperature', 'mean force of the predictions',
         'mean force', 'non-finite',
         'drift_ratio', 'lag', 'peak_factor', 'preconditioner_decay_rate',
         'not moved', 'pulled the same way')


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
              'too imprecise to rule out': UNREAD,
              'pulled the same way': 'crawl'}.get(name, name)
  return message[:40]


def run_error(samples, reference, bijectors=None, project=None):
  """The error that decides the run (`deciding`), its standard error (groups of chains, the reference's included) and ``'sd'`` or ``'mean'``.

  The quantities' errors: each sd's relative error and each mean's shift
  in the reference's sds, judged alike (a mean within 5% of an sd).
  `project` maps the samples to the ``[draws, chains, coordinates]`` that
  are compared (the network's logits at test inputs), else `flat`.
  """
  sds, se, means, mean_se = group_moments(
      project(samples) if project else flat(samples, bijectors))
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


def beyond(err, se, tolerance=TOLERANCE):
  """Whether an error is off by more than `tolerance` by two standard errors, or by more than 100% whatever its error (a chain that blew up has a huge one)."""
  return bool(abs(err) - 2. * se > tolerance or abs(err) > 1.)


def within(err, se, tolerance=TOLERANCE):
  """Whether an error is within `tolerance` by two standard errors."""
  return bool(abs(err) + 2. * se <= tolerance)


def classify(err, se):
  """``'biased'`` beyond 5% by two standard errors (`beyond`), ``'accurate'`` within 5% by as much (`within`), else ``'unclear'``."""
  if beyond(err, se):
    return 'biased'
  if within(err, se):
    return 'accurate'
  return 'unclear'
