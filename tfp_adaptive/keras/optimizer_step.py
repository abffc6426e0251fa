"""One replica's step of a `SamplerOptimizer`: the update, the non-finite check and the commit of weights and metric state.

`SamplerOptimizer._backend_update_step` gathers the step's inputs (the
all-reduced gradients, Γ, the metric state a Γ train step already
updated) and runs `local_step` on each local replica's copies of the
variables (`_distributed_step`). The sampler's maths is
`tfp_adaptive.core.algorithms.Algorithm.update`; this module only adapts it
to Keras' variables: the default prior's gradient, TFP's burn-in without
noise, the loss-gradient scale ``−N``, and a step that is committed or
skipped whole, per chain.
"""

import warnings

import tensorflow as tf

from tfp_adaptive import _compat
from tfp_adaptive import schedules
from tfp_adaptive.core import tensors

__all__ = ['local_step']


def local_step(opt, variables, grads, gamma, metric_state, metric_grads,
               index, learning_rate, step, state_variables, num_nonfinite):
  """One step of `opt` on one replica's `variables` (assigned in place).

  Args:
    opt: the `SamplerOptimizer`.
    variables: this replica's copies of all of `opt`'s variables.
    grads, gamma: the loss gradients and ``c·Γ`` of the variables at
      `index` (`gamma` `None` without Γ).
    metric_state: the metric state already updated with these gradients,
      or `None` (updated here).
    metric_grads: gradients like `grads` that update the metric instead
      of them (the metric's own minibatch), or `None`.
    index: positions of the stepped variables among `variables`.
    learning_rate, step: this replica's ``h`` and iteration counter.
    state_variables: this replica's copies of the sampler state's
      variables.
    num_nonfinite: this replica's copy of the skipped-step counter.
  """
  parts = [tf.convert_to_tensor(v) for v in variables]

  def full(values):
    """`values` of the variables at `index`, zeros for the others."""
    out = [tf.zeros_like(p) for p in parts]
    for k, i in enumerate(index):
      out[i] = tf.cast(values[k], parts[i].dtype)
    return out
  full_gamma = None if gamma is None else full(gamma)
  # The default prior enters before the metric, as a regularizer's does.
  prior = opt.prior_gradients(parts)
  with_prior = lambda gs: [g if p is None else g + p
                           for g, p in zip(gs, prior)]
  full_grads = with_prior(full(grads))
  pstate, momentum = opt.sampler_state(state_variables)
  step32 = tf.cast(step, tf.int32)
  chains = opt.chain_ndims
  new_pstate = metric_state
  if new_pstate is None:
    metric_from = (full_grads if metric_grads is None else
                   with_prior(full(metric_grads)))
    new_pstate = opt.algorithm.update_metric(pstate, metric_from, step32,
                                             chains)
  n = opt.data_size
  target_grads = [-tf.cast(n, g.dtype) * g for g in full_grads]
  # No noise during TFP's `burnin`, nor in a cyclical schedule's
  # exploration stages (`tfp_adaptive.schedules.Cyclical`).
  noise_scale = schedules.noise_scale(opt.learning_rate_schedule, step)
  if opt.burnin > 0:
    after = tf.cast(step > opt.burnin, tf.float32)
    noise_scale = after if noise_scale is None else noise_scale * after
  _, noise_seed = opt.step_seeds(step)
  temperature = tf.convert_to_tensor(opt.temperature_variable)
  out = opt.algorithm.update(
      parts, target_grads,
      opt.algorithm.step_state(pstate, new_pstate, step32), momentum,
      full_gamma, learning_rate,
      temperature, noise_seed, chains, noise_scale, gradient_scale=-n,
      step=step32,
      ratios=opt.statistics.wants_ratios)
  new_parts, new_momentum = out[:2]
  # A NaN/Inf in the gradient or Γ reaches the new weights; overflowing
  # statistics do not (`Algorithm.state_is_finite`), so the new metric
  # state is checked too. The step is committed or skipped as a whole
  # (per chain, with a chain axis).
  ok = (tensors.finite_chains(new_parts, chains) &
        opt.algorithm.state_is_finite(new_pstate, new_momentum,
                                        full_grads, chains))
  new_state = tf.nest.flatten((new_pstate, new_momentum))
  if opt.nonfinite == 'raise':
    if (_compat.in_xla_context() and
        not opt.statistics.nonfinite_after_batch):
      warnings.warn(
          '%s(nonfinite=\'raise\') under jit_compile=True: XLA drops the '
          'in-graph check, so a non-finite step is skipped and counted in '
          '`num_nonfinite` but raises only where a SampleCollector checks '
          'the count after each batch.' % type(opt).__name__)
    with tf.control_dependencies([tf.debugging.Assert(tf.reduce_all(ok), [
        'Non-finite gradient, Γ or weights in %s at iteration' % opt.name,
        step, '; lower the learning rate or check the model.'])]):
      ok = tf.identity(ok)
  if opt.statistics.wants_ratios:
    # Pooled over chains: each norm is the chains' mean, and a step
    # counts when every chain took it.
    norms = out[2] if not chains else type(out[2])(
        *[tf.reduce_mean(n) for n in out[2]])
    opt.statistics.accumulate(parts, target_grads, norms, out[3],
                               learning_rate, tf.reduce_all(ok), index)

  # Commit or keep everything: a select fuses into the update's own pass
  # under XLA, where a `tf.cond` around the assignments copied the weights.
  def select(new, old):
    if not chains:
      return tf.where(ok, new, old)
    if new.shape.rank < chains:  # A statistic shared by the chains.
      return tf.where(tf.reduce_all(ok), new, old)
    return tensors.where_chains(ok, new, old, chains)
  for i in index:
    variables[i].assign(select(new_parts[i], parts[i]))
  old_state = tf.nest.flatten((pstate, momentum))
  cached = tf.nest.flatten((
      opt.preconditioner.cached_leaves(new_pstate),
      tf.nest.map_structure(lambda _: False, new_momentum)))
  # Leaves the metric recomputes only at refresh steps (Shampoo's roots)
  # are written back unselected: between refreshes they are the
  # variables' own values, which XLA then updates in place (a select, or
  # a `tf.cond` around the write, would copy them every step, a sizeable
  # share of a blocked Shampoo step). A refresh from factors that are not
  # finite keeps the roots (`Preconditioner.cached_leaves`), so a step
  # rejected for a non-finite gradient leaves them as they were; one
  # rejected for non-finite weights alone keeps roots refreshed from its
  # factors.
  for v, leaf, old, is_bool, c in zip(state_variables, new_state, old_state,
                                      opt.state_is_bool, cached):
    if not c:
      leaf = select(leaf, old)
    v.assign(tf.cast(leaf, tf.int32) if is_bool else leaf)
  # A step counts as skipped when any chain's was rejected.
  skipped = tf.cast(tf.logical_not(tf.reduce_all(ok)), tf.int64)
  num_nonfinite.assign_add(skipped)
