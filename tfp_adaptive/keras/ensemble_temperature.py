"""The configurational temperature of an ensemble's members, read on the training data.

The members a `SampleCollector` keeps are draws of the chain that `fit` ran,
so the identities of `tfp_adaptive.core.temperature` hold over them: the
virial ``⟨(θ − θ̄)·∇U⟩ = τD`` per layer and for the whole model, and the
Laplacian form ``⟨|∇U|²⟩ = τ⟨ΔU⟩``, which weighs each direction by its
curvature and so reads the stiff directions that set the predictions.
``U`` is the energy the optimizer sampled: ``data_size`` times the compiled
loss (its regularizers included) and the optimizer's default prior. The
gradient and one Hessian-vector product per member (a Rademacher probe)
are taken on all the data given, without minibatch noise.
"""

import warnings

import numpy as np
import tensorflow as tf

from tfp_adaptive import validation
from tfp_adaptive.core import temperature as temperature_lib
from tfp_adaptive.keras import optimizer_base

__all__ = ['read_members']

#: Rows per forward and backward pass.
ROWS = 1024


def read_members(ensemble, x, y, max_members=128, seed=0, warn=True,
                 tolerance=temperature_lib.TOLERANCE, batch_size=None,
                 who='BayesianEnsemble.check_temperature'):
  """``{'overall', layer name..., 'laplacian': Reading}`` of `ensemble`'s members on ``(x, y)``.

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
  # The virial's centre: the mean of all the draws read, every chain's.
  centre = None
  for model in ensemble.iterate_members(x, chosen):
    values = [np.asarray(v.numpy(), np.float64)
              for v in model.trainable_variables]
    centre = values if centre is None else [c + a for c, a in
                                            zip(centre, values)]
  centre = [c / len(chosen) for c in centre]
  variables = model.trainable_variables
  terms = _terms_function(model, opt, variables)
  n = len(tf.nest.flatten(x)[0])
  scale = float(opt.data_size) / n
  rng = np.random.default_rng(seed)
  shape = draws.shape
  virials = np.zeros(shape + (len(variables),))
  squared, laplacian = np.zeros(shape), np.zeros(shape)
  for index, model in zip(np.ndindex(*shape),
                          ensemble.iterate_members(x, chosen)):
    probes = [tf.constant(rng.choice([-1., 1.], size=v.shape), v.dtype)
              for v in variables]
    grads = [np.zeros(v.shape, np.float64) for v in variables]
    hz = [np.zeros(v.shape, np.float64) for v in variables]
    for i in range(0, n, rows):
      batch = tf.nest.map_structure(lambda a, i=i: a[i:i + rows], (x, y))
      g, h = terms(batch[0], batch[1], probes)
      for k in range(len(variables)):
        grads[k] += scale * np.asarray(g[k], np.float64)
        hz[k] += scale * np.asarray(h[k], np.float64)
    virials[index] = [np.sum((np.asarray(v.numpy(), np.float64) - c) * g)
                      for v, c, g in zip(variables, centre, grads)]
    squared[index] = sum(np.sum(g * g) for g in grads)
    laplacian[index] = sum(np.sum(h * np.asarray(z, np.float64))
                           for h, z in zip(hz, probes))
  layers = [v.path.rsplit('/', 1)[0] if '/' in v.path else v.path
            for v in variables]
  sizes = [int(np.prod(v.shape)) for v in variables]
  readings = {'overall': temperature_lib.read(virials.sum(-1),
                                              sum(sizes))}
  for name in dict.fromkeys(layers):
    cols = [k for k, layer in enumerate(layers) if layer == name]
    readings[name] = temperature_lib.read(
        virials[..., cols].sum(-1), sum(sizes[k] for k in cols))
  readings['laplacian'] = temperature_lib.read_ratio(squared, laplacian,
                                                     sum(sizes))
  if warn:
    where = {'overall': 'the whole model',
             'laplacian': 'the whole model in the Laplacian form (its stiff '
                          'directions weigh most)'}
    messages = temperature_lib.advice_per_part(
        readings, 'overall', lambda key: where.get(key, 'layer %r' % key),
        float(np.asarray(opt.temperature_variable)), 'learning_rate',
        adaptive=opt.algorithm.adapts_throughout, gamma=opt.gamma,
        tolerance=tolerance, extra_wholes=('laplacian',))
    for message in messages.values():
      warnings.warn('%s: %s' % (who, message))
  return readings


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


def _terms_function(model, opt, variables):
  """``(x, y, probes) -> (∇u, H·probes)`` of the batch energy ``u = n_b·(loss + prior/N)``."""
  parts = [optimizer_base.backing_variable(v) for v in variables]

  @tf.function(autograph=False, reduce_retracing=True)
  def terms(x, y, probes):
    n = tf.cast(tf.shape(tf.nest.flatten(x)[0])[0], tf.float32)
    with tf.GradientTape() as outer:
      with tf.GradientTape() as inner:
        y_pred = model(x, training=False)
        loss = tf.cast(model.compute_loss(x=x, y=y, y_pred=y_pred),
                       tf.float32)
        u = n * (loss + tf.cast(opt.prior_loss(parts), tf.float32))
      grads = inner.gradient(u, parts)
      grads = [tf.zeros_like(p) if g is None else g
               for g, p in zip(grads, parts)]
      g_dot_z = tf.add_n([tf.reduce_sum(g * tf.cast(z, g.dtype))
                          for g, z in zip(grads, probes)])
    hz = outer.gradient(g_dot_z, parts)
    hz = [tf.zeros_like(p) if h is None else h for h, p in zip(hz, parts)]
    return grads, hz
  return terms
