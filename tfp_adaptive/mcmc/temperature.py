"""The configurational temperature of a kernel's chains, read from their samples (`check_temperature`).

The reading and its verdict are `tfp_adaptive.diagnostics.temperature`'s; this
module only evaluates ``∇û`` at the samples. It works after any run, of
`tfp_adaptive.mcmc.sample` or of `tfp.mcmc.sample_chain`, costs one gradient
per chain for each of at most `max_draws` draws (and, for the Laplacian
form, two more for a second difference), and reads in the space the kernel
samples in: through a `tfp.mcmc.TransformedTransitionKernel`, the
unconstrained one, where the virial identity holds for the transformed
density (its log-Jacobian included).
"""


import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_adaptive import _compat
from tfp_adaptive import minibatch
from tfp_adaptive import validation
from tfp_adaptive.diagnostics import advice as advice_lib
from tfp_adaptive.diagnostics import effective_size as ess_lib
from tfp_adaptive.diagnostics import mean_force
from tfp_adaptive.diagnostics import monge_advice
from tfp_adaptive.diagnostics import prediction_force
from tfp_adaptive.diagnostics import probes as probes_lib
from tfp_adaptive.diagnostics import run_advice
from tfp_adaptive.diagnostics import temperature as temperature_lib
from tfp_adaptive.mcmc import kernel as kernel_lib

__all__ = ['check_temperature']

MAX_DRAWS = 256  # `check_temperature`'s default; `sample` reads more on long runs.


def check_temperature(kernel, samples, warn=True, max_draws=MAX_DRAWS,
                      seed=None, tolerance=temperature_lib.TOLERANCE,
                      predictions=None, regime=None, burnin_share=None):
  """The configurational temperature of each state part, with a warning when it is off.

  ``T = ⟨(θ − θ̄)·∇U(θ)⟩ / D`` over the draws, centred on the mean of all
  draws and chains, must read the kernel's ``temperature`` for any smooth
  target (docs, guide "Diagnostics"). Its standard error counts the
  autocorrelation of the draws; the reading is judged only when its two
  halves agree (`tfp_adaptive.diagnostics.temperature.verdict`).

  The whole state is also read in the Laplacian form,
  ``T_ΔU = ⟨|∇U|²⟩ / ⟨ΔU⟩`` (Hutchinson traces of the Hessian, from second
  differences of the gradient, so that kinks count), which
  weighs each direction by its curvature: the stiff directions that a
  step too long heats first, and that set the predictions of a network or
  a regression, count most there, where the virial averages them with
  every direction the prior alone sets. It is judged by the same rule and
  warned on besides the virial, once the whole state has settled. A
  target without second derivatives, or whose mean Laplacian over the
  draws is not positive, has no Laplacian reading.

  The same gradients give each state part's mean force,
  ``sd(θ_i)·⟨∂U/∂θ_i⟩`` (`tfp_adaptive.diagnostics.mean_force`), and, given
  `predictions` (a model's outputs at some inputs), the force along
  them, ``sd(f)·⟨∇f·∇U − τΔf⟩/⟨|∇f|²⟩`` per prediction
  (`tfp_adaptive.diagnostics.prediction_force`): both vanish at the target and
  read where the chains sit, which the temperature does not; the second
  reads it in what a network predicts, where its weights have no
  meaningful marginals. Each is warned on beyond 0.05 sds.

  Args:
    kernel: the kernel that ran: ours, TFP's (`tfp.mcmc.NoUTurnSampler`,
      `tfp.mcmc.HamiltonianMonteCarlo`, … at ``τ = 1``), or one wrapping
      them (such as `tfp.mcmc.TransformedTransitionKernel`).
    samples: the draws, a `Tensor` or a list of parts shaped
      ``[draws, chains..., event...]``, as `tfp.mcmc.sample_chain` returns
      them (after burn-in).
    warn: issue one `UserWarning` per state part (and overall, and for the
      Laplacian form) that reads hot, cold or unsettled, naming the
      parameter to change and by how much; while the whole state has not
      settled, only that is said
      (`tfp_adaptive.diagnostics.temperature_advice.advice_per_part`).
    max_draws: int >= 4; at most this many draws, evenly spaced, are read.
    seed: stateless seed of the minibatches of a stochastic target other
      than a `tfp_adaptive.minibatch.MinibatchLogProb`, which is read on
      all its data (the exact gradient: no minibatch noise in the reading,
      at the cost of a pass over the data per draw).
    tolerance: relative tolerance on the temperature, default 0.1 (sds 5%
      off).
    predictions: optional callable taking the state parts as `samples`
      holds them (one draw: ``[chains..., event...]`` each) and returning
      a `Tensor` ``[chains..., K...]`` of smooth predictions (a network's
      logits at some inputs), read by forward-mode derivatives: per draw,
      ``1 + 3·PROBES`` of its evaluations
      (`tfp_adaptive.diagnostics.prediction_force.PROBES`).
    regime: optional `tfp_adaptive.diagnostics.regime.Regime` of the run
      (`check_regime`): a whole state reading hotter than its
      ``drift_ratio`` explains is then said not to be the step's, and the
      message names the parameter that removes it
      (`tfp_adaptive.diagnostics.temperature_advice.not_the_step`).
      `tfa.mcmc.sample` and `tfa.mcmc.check_run` pass it.
    burnin_share: optional float >= 0, the burn-in's steps over the steps
      of the run that drew `samples`. A run that has not settled is then
      told the length it needs counting the approach to ``τ`` that a
      burn-in as much longer discards
      (`tfp_adaptive.diagnostics.temperature_advice.times_to_settle`).
      `tfa.mcmc.sample` passes it.

  Returns:
    dict: ``'overall'`` and each state part's index to its
    `tfp_adaptive.diagnostics.temperature.Reading`, ``'laplacian'`` to the
    whole state's reading in the Laplacian form (when there is one),
    ``'mean_force'`` to a dict of each state part's index to its
    `tfp_adaptive.diagnostics.mean_force.Shift`, ``'pull'`` to the chains'
    `tfp_adaptive.diagnostics.monge_advice.Pull` (how hard their gradient
    pulls them one way: a `MongeSGRLD` run whose chains crawl along it is
    told to lower ``alpha2``), and with `predictions`, ``'predictions'`` to
    theirs (its ``coordinate`` the prediction's flat index).

  Raises:
    TypeError: `predictions` is not callable.

  Example:
    >>> samples = tfp.mcmc.sample_chain(2000, state, kernel=kernel,
    ...                                 num_burnin_steps=500, trace_fn=None,
    ...                                 seed=(0, 1))
    >>> tfa.mcmc.check_temperature(kernel, samples)['overall'].temperature
  """
  validation.check_bool('warn', warn)
  validation.check_int('max_draws', max_draws, low=4)
  validation.check_number('tolerance', tolerance, low=0., low_open=True)
  if burnin_share is not None:
    validation.check_number('burnin_share', burnin_share, low=0.)
  validation.check_optional_callable(
      'predictions', predictions,
      'a callable taking the state parts and returning a Tensor')
  parts = [tf.convert_to_tensor(p) for p in kernel_lib.as_list(samples)]
  n = int(parts[0].shape[0])
  drawn = parts  # Every draw, for the coordinates' effective sizes.
  keep = np.unique(np.linspace(0, n - 1, min(n, max_draws)).round().astype(int))
  inner, parts, to_outer = _sampled_space(kernel, [tf.gather(p, keep)
                                                   for p in parts])
  # The target is called at each draw as the kernels call it, in the nest
  # of the samples (`kernel.call_target`).
  target = (inner.target_log_prob_fn, samples)
  virials, shared, grads = _virials(target, parts, seed)
  sizes = [_event_size(p, v) for p, v in zip(parts, virials)]
  readings = {'overall': temperature_lib.read(np.sum(virials, 0), sum(sizes),
                                              shared)}
  for k, (v, size) in enumerate(zip(virials, sizes)):
    readings[k] = temperature_lib.read(v, size, shared)
  blocks = [_blocks(p, v.ndim) for p, v in zip(parts, virials)]
  shifts = {k: mean_force.read(-_blocks(g, v.ndim), b, shared)
            for k, (b, g, v) in enumerate(zip(blocks, grads, virials))}
  _too_short_if_the_state_is(readings, blocks)
  chain_ndims = virials[0].ndim - 1
  # The second differences' steps, for the Laplacian and the predictions.
  scales = _spread_scales(parts, chain_ndims)
  curvature = _laplacian_terms(target, parts, grads, seed,
                               scales, chain_ndims)
  if curvature is not None:
    readings['laplacian'] = temperature_lib.read_ratio(
        curvature[0], curvature[1], sum(sizes), shared)
  tau = float(inner.parameters.get('temperature', 1.))
  predicted = values = None
  if predictions is not None:
    terms = _prediction_terms(predictions, to_outer, parts, grads, seed,
                              chain_ndims, scales)
    predicted = prediction_force.read(*terms, temperature=tau,
                                      shared_noise=shared)
    values = terms[0]
  pull = monge_advice.read(grads, chain_ndims)
  if warn:
    ours = isinstance(inner, kernel_lib.AdaptiveSGMCMC)
    params = inner.parameters
    adaptive = ours and inner.algorithm.adapts_throughout
    gamma = params.get('gamma', 'none')
    where = lambda key: _WHERE.get(key, 'state part %s' % key)
    messages = run_advice.messages(
        readings, shifts, predicted, where, 'the predictions', tau,
        'step_size', adaptive, gamma, burnin_share, tolerance=tolerance,
        step_share=_step_share(regime),
        minibatch=bool(getattr(params.get('target_log_prob_fn'),
                               'needs_seed', False)),
        fewest=_fewest_draws(drawn, chain_ndims, values, tolerance),
        pull=pull, alpha2=params.get('alpha2') if ours else None)
    for message in messages:
      advice_lib.warn(message, type(inner).__name__)
  readings['mean_force'] = shifts
  readings['pull'] = pull
  if predicted is not None:
    readings['predictions'] = predicted
  return readings


def _too_short_if_the_state_is(readings, blocks):
  """Caps the whole state's effective draws at the states' own, when those are fewer than a reading needs.

  The virials are centred on the mean of the draws: from chains that have
  hardly moved, that centre is the states' own and the reading is biased
  low (by about one over the states' effective size), however many
  effective draws the virial series itself has. The states' effective
  size is the median over coordinates of `_sizes`, the multi-chain
  estimate, which counts chains that have not mixed with each other as
  few draws. Such a run is too short to read
  (`tfp_adaptive.diagnostics.temperature_advice.too_short`); from so short a
  run, the estimate is an upper bound. `blocks`: each state part as
  ``[draws, chains, D]``.
  """
  size = float(np.median(_sizes(np.concatenate(blocks, -1))))
  if size < temperature_lib.MIN_EFFECTIVE_SIZE:
    for key in ('overall', 'laplacian'):
      if key in readings:
        readings[key] = readings[key]._replace(effective_size=min(
            readings[key].effective_size, size))


_SIZE_DRAWS = 4096  # Draws a chain counted for the coordinates' sizes.
_SIZE_VALUES = 1 << 21  # Values transformed at once.


def _sizes(values):
  """Each coordinate's effective size in ``[draws, chains, D]`` `values`: across the chains (`tfp_adaptive.diagnostics.effective_size.cross_chain_effective_size`) from two of them, else the one chain's; 0 where undefined.

  A few coordinates at a time, to bound the transforms' memory.
  """
  chains = values.shape[1]
  width = max(1, _SIZE_VALUES // (values.shape[0] * chains))
  out = []
  for i in range(0, values.shape[-1], width):
    chunk = values[..., i:i + width]
    out.append(ess_lib.cross_chain_effective_size(chunk) if chains >= 2 else
               ess_lib.effective_size(chunk[:, 0]))
  return np.nan_to_num(np.concatenate(
      [np.reshape(np.asarray(x, np.float64), [-1]) for x in out]), nan=0.)


def _fewest_draws(parts, chain_ndims, predictions, tolerance):
  """``(size, name)`` of the coordinate with the fewest effective draws across the chains, or `None` when they cannot be counted.

  Mixing is judged where the run is compared: given the values of its
  `predictions` (``[draws, chains, K]`` at the read draws), among them (a
  network's weights need not mix for its outputs to), when the read draws
  are at least twice the `mixed_size` (fewer cannot show it); otherwise
  among the state's coordinates, over every draw.
  """
  if predictions is None:
    return _fewest(_state_sizes(parts, chain_ndims),
                   _coordinate_names(parts, chain_ndims))
  if (predictions.shape[0] * predictions.shape[1] <
      2. * temperature_lib.mixed_size(tolerance)):
    return None
  return _fewest(_sizes(predictions), lambda i: 'prediction %d' % i)


def _state_sizes(parts, chain_ndims):
  """Each coordinate's effective size (`_sizes`) in the state `parts` (``[draws, chains..., event...]``), from at most `_SIZE_DRAWS` draws a chain, evenly spaced (draws that far apart add little)."""
  n = int(parts[0].shape[0])
  keep = np.unique(np.linspace(0, n - 1, min(n, _SIZE_DRAWS)).round()
                   .astype(int))
  return _sizes(np.concatenate(
      [_blocks(tf.gather(p, keep), 1 + chain_ndims) for p in parts], -1))


def _fewest(sizes, name):
  """``(size, name(i))`` of the coordinate ``i`` with the fewest effective draws."""
  i = int(np.argmin(sizes))
  return float(sizes[i]), name(i)


def _coordinate_names(parts, chain_ndims):
  """``i -> str``: the name of the ``i``-th coordinate of the concatenated state parts."""
  sizes = [int(np.prod(p.shape[1 + chain_ndims:])) for p in parts]
  starts = np.cumsum([0] + sizes)

  def name(i):
    k = int(np.searchsorted(starts, i, side='right')) - 1
    if len(parts) == 1:
      return 'coordinate %d of the state' % i
    return 'coordinate %d of state part %d' % (i - starts[k], k)
  return name


def _step_share(regime):
  """The run's pooled ``drift_ratio`` (its largest over chains), or `None`."""
  if regime is None:
    return None
  return float(np.max(np.asarray(regime.drift_ratio, np.float64)))


def _blocks(part, leading):
  """``[draws, chains, D]``: `part` (``[draws, chains..., event...]``, its first `leading` axes the draws' and chains') with its chain and event axes each flattened."""
  x = np.asarray(part, np.float64)
  return x.reshape(x.shape[0], int(np.prod(x.shape[1:leading])), -1)


_WHERE = {'overall': 'the whole state',
          'laplacian': 'the whole state in the Laplacian form (its stiff '
                       'directions weigh most)'}


def _sampled_space(kernel, parts):
  """The kernel that holds the sampled target, `parts` mapped into its space, and the map back.

  Walks wrappers down to the first kernel with a ``target_log_prob_fn``,
  through each `tfp.mcmc.TransformedTransitionKernel`'s inverse. Such a
  kernel runs a copy of its inner kernel whose target is the transformed
  density; that copy (TFP's ``_inner_kernel``, not the ``inner_kernel`` it
  was given) holds the target the chain samples. The map back takes parts
  of that space to the space of the given `parts` (the bijectors'
  forwards, innermost first).
  """
  given, bijectors_seen = kernel, []
  while kernel is not None and not hasattr(kernel, 'target_log_prob_fn'):
    if isinstance(kernel, tfp.mcmc.TransformedTransitionKernel):
      bijectors_seen.append(kernel.bijector)
      parts = _through(kernel.bijector, parts, 'inverse')
      kernel = kernel._inner_kernel  # pylint: disable=protected-access
    else:
      kernel = getattr(kernel, 'inner_kernel', None)
  if kernel is None:
    raise TypeError('`kernel` must have, or wrap a kernel that has, a '
                    '`target_log_prob_fn`. Received: %r' % (given,))

  def to_outer(inner_parts):
    for bijectors in reversed(bijectors_seen):
      inner_parts = _through(bijectors, inner_parts, 'forward')
    return inner_parts
  return kernel, parts, to_outer


def _through(bijectors, parts, direction):
  """`parts` through a `TransformedTransitionKernel`'s bijector(s), ``'forward'`` or ``'inverse'``."""
  if isinstance(bijectors, (list, tuple)):
    return [getattr(b, direction)(p) for b, p in zip(bijectors, parts)]
  if len(parts) == 1:
    return [getattr(bijectors, direction)(parts[0])]
  return kernel_lib.as_list(getattr(bijectors, direction)(parts))


def _draw_seeds(target, parts, seed):
  """Whether the target is read with a seed, and one stateless seed per draw of `parts`.

  `target`: ``(target_log_prob_fn, a state in its nest)``. A
  `MinibatchLogProb` is read without one: on all its data, the exact
  gradient, free of minibatch noise.
  """
  fn = target[0]
  needs_seed = (getattr(fn, 'needs_seed', False) and
                not isinstance(fn, minibatch.MinibatchLogProb))
  return needs_seed, tf.random.experimental.stateless_split(
      tfp.random.sanitize_seed(seed), int(parts[0].shape[0]))


def _gradient(target, state, seed, needs_seed):
  """``∇ log p`` of the parts of `state` and ``log p``, with `seed` for a stochastic target.

  `target`: ``(target_log_prob_fn, a state in its nest)``; `state`: the
  flat parts.
  """
  fn, structure = target
  kwargs = {'seed': seed} if needs_seed else {}
  with tf.GradientTape() as tape:
    tape.watch(state)
    lp = kernel_lib.call_target(fn, state, structure, **kwargs)
  return tape.gradient(lp, state), lp


def _virials(target, parts, seed):
  """Per part, ``[draws, chains...]`` arrays of ``(θ − θ̄)·(−∇û)``; whether their chains share a minibatch; the gradients ``∇log p̂``.

  ``θ̄`` is the mean over all draws and chains: the chains are independent,
  so the bias that a centre taken from the same draws brings, about
  ``τD/ESS``, is that of the pooled effective size (a chain's own mean
  would bring its own, far larger one).
  """
  needs_seed, seeds = _draw_seeds(target, parts, seed)

  def grads_of(draws, seeds):
    def one(args):
      state, s = args
      return _gradient(target, state, s, needs_seed)
    return tf.map_fn(one, (draws, seeds),
                     fn_output_signature=([tf.TensorSpec(None, p.dtype)
                                           for p in draws], draws[0].dtype))
  grads, lp = _compat.quiet_function(grads_of, False)(parts, seeds)
  batch_ndims = len(lp.shape) - 1
  out = []
  for p, g in zip(parts, grads):
    p, g = np.asarray(p, np.float64), np.asarray(g, np.float64)
    axes = tuple(range(1 + batch_ndims, p.ndim))
    centred = p - p.mean(tuple(range(1 + batch_ndims)), keepdims=True)
    out.append(-np.sum(centred * g, axis=axes))
  return out, needs_seed, grads


def _laplacian_terms(target, parts, grads, seed, scales, chain_ndims):
  """``[draws, chains...]`` arrays of ``|∇U|²`` and of a Hutchinson ``ΔU`` over the whole state, or `None`.

  A stochastic target (one that takes a seed) gives ``∇Û₁·∇Û₂`` from two
  independent draws of its noise, unbiased for ``|∇U|²``. The Laplacian is
  `tfp_adaptive.diagnostics.probes.laplacian` along one Rademacher probe
  (one noise draw for both of its points). `grads`: the virial pass's
  gradients at `parts` (``∇Û₁``, reused); `scales`: each part's step
  ``ε`` (`_spread_scales`); `chain_ndims`: the chain axes after the
  draws'. `None` when the target has no gradient there.
  """
  needs_seed, seeds = _draw_seeds(target, parts, seed)
  # Sums over a part's event axes, the chains' axes kept.
  total = lambda x: tf.reduce_sum(x, axis=tf.range(chain_ndims, tf.rank(x)))

  def terms_of(draws, grads, seeds):
    def one(args):
      state, g, s = args
      s_probe, s_one, s_two = tf.unstack(
          tf.random.experimental.stateless_split(s, 3))
      # U = −log p: ∇U = −∇log p, |∇U|² = ∇log p·∇log p.
      energy_gradient = lambda at: [-x for x in _gradient(
          target, at, s_one, needs_seed)[0]]
      laplacian = probes_lib.laplacian(
          energy_gradient, state, _rademacher(state, s_probe),
          [tf.cast(e, p.dtype) for p, e in zip(state, scales)], total)
      g2 = (_gradient(target, state, s_two, needs_seed)[0]
            if needs_seed else g)
      squared = tf.add_n([total(a * b) for a, b in zip(g, g2)])
      return squared, laplacian
    return tf.map_fn(one, (draws, grads, seeds), fn_output_signature=(
        draws[0].dtype, draws[0].dtype))
  try:
    squared, laplacian = _compat.quiet_function(terms_of, False)(
        parts, list(grads), seeds)
  except (LookupError, TypeError, ValueError, NotImplementedError,
          tf.errors.InvalidArgumentError):  # No gradient there.
    return None
  return np.asarray(squared, np.float64), np.asarray(laplacian, np.float64)


def _rademacher(parts, seed):
  """One ±1 probe per part of `parts`, from a stateless `seed`."""
  seeds = tfp.random.split_seed(seed, len(parts))
  return [tf.cast(2 * tf.random.stateless_uniform(
      tf.shape(p), seed=s, minval=0, maxval=2, dtype=tf.int32) - 1, p.dtype)
          for p, s in zip(parts, seeds)]


def _spread_scales(parts, chain_ndims):
  """Per part, a hundredth of its rms spread over the draws and chains: the second differences' step."""
  scales = []
  for p in parts:
    x = np.asarray(p, np.float64)
    rows = int(np.prod(x.shape[:1 + chain_ndims]))
    spread = float(np.sqrt(np.mean(np.var(x.reshape(rows, -1), 0))))
    scales.append(probes_lib.difference_step(spread))
  return scales


def _prediction_terms(predictions, to_outer, parts, grads, seed, chain_ndims,
                      scales):
  """``[draws, chains, K]`` arrays of the predictions, ``∇f·∇U``, a Hutchinson ``Δf`` and an estimate of ``|∇f|²``.

  Forward mode, one evaluation of `predictions` each: ``∇f·∇U`` along
  ``−grads`` (the virial pass's ``∇log p``), and the probes' terms of
  `tfp_adaptive.diagnostics.probes.probe_terms` (steps: a hundredth of
  each part's spread, `_spread_scales`). `parts` and `grads` are in the
  sampled space; `to_outer` maps them to the space `predictions` takes;
  `chain_ndims`: the number of chain axes after the draws'.
  """
  seeds = tf.random.experimental.stateless_split(
      tfp.random.sanitize_seed(seed), int(parts[0].shape[0]))

  def along(state, tangents):
    with tf.autodiff.ForwardAccumulator(state, tangents) as acc:
      f = tf.convert_to_tensor(predictions(*to_outer(list(state))))
    jvp = acc.jvp(f, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    # [chains..., K], in the state's dtype (`map_fn`'s signature).
    flat = lambda x: tf.cast(tf.reshape(x, tf.concat(
        [tf.shape(f)[:chain_ndims], [-1]], 0)), state[0].dtype)
    return flat(f), flat(jvp)

  def terms_of(draws, grads, seeds):
    def one(args):
      state, g, s = args
      f, force = along(state, [-x for x in g])

      def derivative(offsets, tangents):
        at = state if offsets is None else [
            p + tf.cast(d, p.dtype) for p, d in zip(state, offsets)]
        return along(at, tangents)[1]
      probes = [_rademacher(state, probe_seed) for probe_seed in tf.unstack(
          tf.random.experimental.stateless_split(s, prediction_force.PROBES))]
      steps = [tf.cast(e, p.dtype) for p, e in zip(state, scales)]
      return (f, force) + probes_lib.probe_terms(derivative, probes, steps)
    return tf.map_fn(one, (draws, grads, seeds),
                     fn_output_signature=(draws[0].dtype,) * 4)
  out = _compat.quiet_function(terms_of, False)(parts, list(grads), seeds)
  rows = lambda x: np.asarray(x, np.float64).reshape(
      x.shape[0], -1, x.shape[-1])
  return [rows(x) for x in out]


def _event_size(part, virial):
  return int(np.prod(part.shape[virial.ndim:]))
