"""The configurational temperature of an ensemble's members, read on the training data.

The members a `SampleCollector` keeps are draws of the chain that `fit` ran,
so the identities of `tfp_adaptive.diagnostics.temperature` hold over them: the
virial ``⟨(θ − c)·∇U⟩ = τD`` per layer and for the whole model (each half
of the run centred on the other half's mean), and the
Laplacian form ``⟨|∇U|²⟩ = τ⟨ΔU⟩``, which weighs each direction by its
curvature and so reads the stiff directions that set the predictions.
``U`` is the energy the optimizer sampled: ``data_size`` times the compiled
loss (its regularizers included) and the optimizer's default prior. Its
gradient, and a second difference of it along a Rademacher probe for the
Laplacian (a hundredth of each variable's spread over the members each
way, so that kinks count), are taken on all the data given, without
minibatch noise. The same gradients give each layer's mean force
(`tfp_adaptive.diagnostics.mean_force`), which must balance at the target and
reads where the members sit rather than how far they spread, and the
force along the model's outputs at some of the inputs
(`tfp_adaptive.diagnostics.prediction_force`), which reads it in what the model
predicts.
"""

import inspect

import numpy as np
import tensorflow as tf

from tfp_adaptive import validation
from tfp_adaptive.diagnostics import advice as advice_lib
from tfp_adaptive.diagnostics import mean_force
from tfp_adaptive.diagnostics import monge_advice
from tfp_adaptive.diagnostics import prediction_force
from tfp_adaptive.diagnostics import run_advice
from tfp_adaptive.diagnostics import probes as probes_lib
from tfp_adaptive.diagnostics import temperature as temperature_lib
from tfp_adaptive.keras import optimizer_base

__all__ = ['MAX_MEMBERS', 'batch_energy', 'members_read', 'read_members',
           'warn_members']

#: At most this many members are read by default, evenly spaced per chain.
MAX_MEMBERS = 128

#: Rows per forward and backward pass.
ROWS = 1024

#: Inputs whose outputs the force along predictions reads by default.
PREDICTION_ROWS = 64


def _burnin_share(members):
  """The steps before the first member over the steps the members span (the burn-in's share, for the length a run that has not settled needs), or `None` where the members' steps do not say."""
  steps = [m.step for m in members]
  if not steps or any(s is None for s in steps):
    return None
  first, last = min(steps), max(steps)
  return first / (last - first) if last > first else None


def read_members(ensemble, x, y, max_members=MAX_MEMBERS, seed=0, warn=True,
                 tolerance=temperature_lib.TOLERANCE, batch_size=None,
                 who='BayesianEnsemble.check_temperature',
                 prediction_inputs=None):
  """``{'overall', layer name..., 'laplacian': Reading, 'mean_force': {layer name: Shift}, 'predictions': Shift, 'pull': Pull}`` of `ensemble`'s members on ``(x, y)``.

  See `BayesianEnsemble.check_temperature`; `who` starts the warnings.
  """
  validation.check_int('max_members', max_members, low=4)
  validation.check_bool('warn', warn)
  validation.check_number('tolerance', tolerance, low=0., low_open=True)
  rows = (ROWS if batch_size is None else
          validation.check_int('batch_size', batch_size, low=1))
  opt = optimizer_base.sampler_of(
      ensemble.model, '%s (the optimizer\'s loss scale, prior and temperature '
      'define the target)' % who)
  draws = _draws_by_chain(ensemble.members, max_members)
  chosen = [ensemble.members[i] for i in draws.reshape(-1)]
  # The virial's centres: for the draws of each half of the run, the mean
  # of the other half's (every chain's). A centre taken from the draws it
  # centres lowers the reading by about 1/ESS, which a short run on a
  # large model feels; the other half's mean hardly depends on them. Also
  # each coordinate's spread over all the draws, and each variable's,
  # whose hundredth is the second difference's.
  later = np.arange(draws.shape[0]) >= draws.shape[0] // 2
  halves = np.repeat(later, draws.shape[1]).astype(int)
  total, count = [None, None], [0, 0]
  squares = None
  for model, half in zip(ensemble.iterate_members(x, chosen), halves):
    values = [np.asarray(v.numpy(), np.float64)
              for v in model.trainable_variables]
    total[half] = values if total[half] is None else [
        t + a for t, a in zip(total[half], values)]
    count[half] += 1
    squares = ([a * a for a in values] if squares is None else
               [q + a * a for q, a in zip(squares, values)])
  mean = [(a + b) / len(chosen) for a, b in zip(*total)]
  centres = [[t / count[1 - h] for t in total[1 - h]] for h in (0, 1)]
  spreads = [np.sqrt(np.maximum(q / len(chosen) - c * c, 0.)).reshape(-1)
             for c, q in zip(mean, squares)]
  steps = [probes_lib.difference_step(float(np.sqrt(np.mean(s * s))))
           for s in spreads]
  variables = model.trainable_variables
  gradient = _gradient_function(model, opt, variables)
  n = len(tf.nest.flatten(x)[0])
  if prediction_inputs is None:
    every = np.unique(np.linspace(0, n - 1, min(n, PREDICTION_ROWS)).round()
                      .astype(int))
    prediction_inputs = tf.nest.map_structure(lambda a: np.asarray(a)[every],
                                              x)
  along = _forward_function(model, prediction_inputs)
  scale = float(opt.data_size) / n

  def full_gradient():
    out = [np.zeros(v.shape, np.float64) for v in variables]
    for i in range(0, n, rows):
      batch = tf.nest.map_structure(lambda a, i=i: a[i:i + rows], (x, y))
      for k, g in enumerate(gradient(batch[0], batch[1])):
        out[k] += scale * np.asarray(g, np.float64)
    return out

  def gradient_at(point):
    for v, a in zip(variables, point):
      v.assign(a)
    return full_gradient()

  rng = np.random.default_rng(seed)
  prediction_rng = np.random.default_rng([seed, 1])
  shape = draws.shape
  virials = np.zeros(shape + (len(variables),))
  squared, laplacian = np.zeros(shape), np.zeros(shape)
  predicted = None  # [4, draws, chains, K]: f, ∇f·∇U, Δf and |∇f|².
  # Per variable, the members' gradients, for the mean force (float32:
  # one copy of the read members' weights).
  series = [np.zeros(shape + (v.shape.num_elements(),), np.float32)
            for v in variables]
  for index, model in zip(np.ndindex(*shape),
                          ensemble.iterate_members(x, chosen)):
    values = [np.asarray(v.numpy(), np.float64) for v in variables]
    probes = [rng.choice([-1., 1.], size=v.shape) for v in variables]
    grads = full_gradient()
    terms = _prediction_terms(along, variables, values, grads, steps,
                              prediction_rng)
    if predicted is None:
      predicted = np.zeros((4,) + shape + terms[0].shape)
    predicted[(slice(None),) + index] = terms
    # ΔU along the probe: a second difference of the gradient, which also
    # counts the curvature of kinks (ReLUs, an L1 regularizer).
    laplacian[index] = probes_lib.laplacian(gradient_at, values, probes,
                                            steps, np.sum)
    virials[index] = [np.sum((a - c) * g) for a, c, g in
                      zip(values, centres[int(later[index[0]])], grads)]
    for gs, g in zip(series, grads):
      gs[index] = g.reshape(-1)
    squared[index] = sum(np.sum(g * g) for g in grads)
  layers = [v.path.rsplit('/', 1)[0] if '/' in v.path else v.path
            for v in variables]
  sizes = [int(np.prod(v.shape)) for v in variables]
  readings = {'overall': temperature_lib.read(virials.sum(-1),
                                              sum(sizes))}
  shifts = {}
  for name in dict.fromkeys(layers):
    cols = [k for k, layer in enumerate(layers) if layer == name]
    readings[name] = temperature_lib.read(
        virials[..., cols].sum(-1), sum(sizes[k] for k in cols))
    shifts[name] = mean_force.read(
        series[cols[0]] if len(cols) == 1 else
        np.concatenate([series[k] for k in cols], -1),
        spreads=np.concatenate([spreads[k] for k in cols]))
  readings['laplacian'] = temperature_lib.read_ratio(squared, laplacian,
                                                     sum(sizes))
  readings['mean_force'] = shifts
  readings['predictions'] = prediction_force.read(
      *predicted, temperature=opt.temperature)
  readings['pull'] = monge_advice.read(series, chain_ndims=1)
  if warn:
    warn_members(ensemble, readings, tolerance, who)
  return readings


def warn_members(ensemble, readings, tolerance=temperature_lib.TOLERANCE,
                 who='BayesianEnsemble.check_temperature'):
  """Warns as `read_members` does on `readings`, its result for `ensemble`: one `UserWarning` per reading off the target, naming the change."""
  opt = optimizer_base.sampler_of(ensemble.model, who)
  where = {'overall': 'the whole model',
           'laplacian': 'the whole model in the Laplacian form (its stiff '
                        'directions weigh most)'}
  temperatures = {k: v for k, v in readings.items()
                  if k not in ('mean_force', 'predictions', 'pull')}
  messages = run_advice.messages(
      temperatures, readings['mean_force'], readings['predictions'],
      lambda key: where.get(key, 'layer %r' % key), "the model's outputs",
      opt.temperature, 'learning_rate', opt.algorithm.adapts_throughout,
      opt.gamma, _burnin_share(ensemble.members), tolerance=tolerance,
      draws='members (samples after burn-in)', pull=readings.get('pull'),
      alpha2=getattr(opt, 'alpha2', None),
      gradient_scale=1. / float(opt.data_size))
  for message in messages:
    advice_lib.warn(message, who)


def _prediction_terms(along, variables, values, grads, steps, rng):
  """``[4, K]``: the outputs ``f``, ``∇f·∇U``, a Hutchinson ``Δf`` and an estimate of ``|∇f|²`` at one member.

  As the kernels' (`tfp_adaptive.mcmc.check_temperature`): forward mode
  along ``∇U`` (`grads`), and the probes' terms of
  `tfp_adaptive.diagnostics.probes.probe_terms`, with each variable's
  `steps`: one compiled call (`_forward_function`).
  """
  as_tensors = lambda arrays: [tf.constant(a, v.dtype)
                               for a, v in zip(arrays, variables)]
  probes = [as_tensors([rng.choice([-1., 1.], size=v.shape)
                        for v in variables])
            for _ in range(prediction_force.PROBES)]
  return tuple(t.numpy() for t in along(
      as_tensors(values), as_tensors(grads), probes,
      [tf.constant(e, v.dtype) for e, v in zip(steps, variables)]))


def _forward_function(model, inputs):
  """``(values, grads, probes, steps) -> (f, ∇f·∇U, Δf, |∇f|²)`` of the model's outputs at `inputs` (flat, float64), by forward mode.

  The model is evaluated at the given weights (`stateless_call`), so the
  probes' shifted weights need no assignment, and its non-trainable
  weights are read when called.
  """
  inputs = tf.nest.map_structure(tf.convert_to_tensor, inputs)
  # `stateless_call` calls `call` itself, as written: `training` only if
  # it takes it (layers within default to inference).
  mode = ({'training': False}
          if 'training' in inspect.signature(model.call).parameters else {})
  flat = lambda xs: tf.concat([tf.reshape(tf.cast(a, tf.float64), [-1])
                               for a in tf.nest.flatten(xs)], 0)

  @tf.function(autograph=False, reduce_retracing=True)
  def terms(values, grads, probes, steps, fixed):
    # The thirteen forward passes (along ∇U, then the probes' points) as
    # one traced pass mapped over them, stacked: a model traced once.
    points = [(None, grads)] + probes_lib.probe_points(probes, steps)
    stack = lambda rows: [tf.stack(list(r)) for r in zip(*rows)]
    at = stack([values if offsets is None else
                [a + d for a, d in zip(values, offsets)]
                for offsets, _ in points])
    tangents = stack([t for _, t in points])

    def along(point):
      at, tangents = point
      with tf.autodiff.ForwardAccumulator(at, tangents) as acc:
        outputs, _ = model.stateless_call(at, fixed, inputs, **mode)
      jvps = [acc.jvp(o, unconnected_gradients=tf.UnconnectedGradients.ZERO)
              for o in tf.nest.flatten(outputs)]
      return flat(outputs), flat(jvps)

    # One pass at a time: passes run side by side share the thread pool
    # and sum in a varying order, and the reading must repeat exactly.
    f, derivatives = tf.map_fn(along, (at, tangents), parallel_iterations=1,
                               fn_output_signature=(tf.float64, tf.float64))
    return (f[0], derivatives[0]) + probes_lib.combine_probes(
        tf.unstack(derivatives[1:]))
  return lambda *args: terms(*args, [v.value for v in
                                     model.non_trainable_variables])


def members_read(members, max_members):
  """How many of `members` `read_members` reads with `max_members`."""
  return int(_draws_by_chain(members, max_members).size)


def _draws_by_chain(members, max_members):
  """``[draws, chains]`` member indices: each chain's last members, as many per chain, evenly thinned."""
  by_chain = {}
  for i, m in enumerate(members):
    by_chain.setdefault(m.chain, []).append(i)
  per_chain = min(len(v) for v in by_chain.values()) if by_chain else 0
  if per_chain < 4:
    raise ValueError('Reading the temperature needs at least 4 members per '
                     'chain; the ensemble has %d in its shortest chain. '
                     'Collect longer (check `burnin` and `thinning`).'
                     % per_chain)
  keep = max(min(per_chain, max_members // len(by_chain)), 4)
  pick = np.unique(np.linspace(0, per_chain - 1, keep).round().astype(int))
  return np.stack([np.asarray(v[-per_chain:])[pick]
                   for v in by_chain.values()], 1)


def batch_energy(model, opt, parts, x, y, scale):
  """``scale·(loss + prior/N)`` on the batch ``(x, y)``: the energy the optimizer samples, in inference mode.

  ``scale = data_size`` gives ``U`` estimated from the batch; the batch's
  rows give its share of ``U``'s sum over the data. `parts`: the model's
  trainable variables as `optimizer_base.backing_variable` gives them.
  """
  y_pred = model(x, training=False)
  loss = tf.cast(model.compute_loss(x=x, y=y, y_pred=y_pred), tf.float32)
  return scale * (loss + tf.cast(opt.prior_loss(parts), tf.float32))


def _gradient_function(model, opt, variables):
  """``(x, y) -> ∇u`` of the batch energy ``u = n_b·(loss + prior/N)``."""
  parts = [optimizer_base.backing_variable(v) for v in variables]

  @tf.function(autograph=False, reduce_retracing=True)
  def gradient(x, y):
    n = tf.cast(tf.shape(tf.nest.flatten(x)[0])[0], tf.float32)
    with tf.GradientTape() as tape:
      u = batch_energy(model, opt, parts, x, y, n)
    grads = tape.gradient(u, parts)
    return [tf.zeros_like(p) if g is None else g
            for g, p in zip(grads, parts)]
  return gradient
