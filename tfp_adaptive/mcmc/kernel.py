"""The shared `tfp.mcmc.TransitionKernel` adapter around the core sampler math."""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_adaptive import minibatch
from tfp_adaptive import schedules
from tfp_adaptive import validation
from tfp_adaptive import vocabulary
from tfp_adaptive.core import algorithms
from tfp_adaptive.core import gamma as gamma_lib
from tfp_adaptive.core import tensors
from tfp_adaptive.diagnostics import regime as regime_lib

__all__ = ['AdaptiveSGMCMC', 'AdaptiveSGMCMCKernelResults', 'NONFINITE_POLICIES',
           'as_list', 'sampler_in']

# Every word of the one vocabulary (`tfp_adaptive.vocabulary`).
NONFINITE_POLICIES = vocabulary.NONFINITE_POLICIES


class AdaptiveSGMCMCKernelResults(
    collections.namedtuple('AdaptiveSGMCMCKernelResults', [
        'target_log_prob', 'preconditioner_state', 'momentum', 'step',
        'num_nonfinite', 'num_unmoved', 'last_good_state', 'step_size',
        'gamma_norm', 'step_norms', 'log_accept_ratio', 'seed'])):
  """State of a sampler between steps (nothing mutable lives on the kernel).

  Fields:

  - ``target_log_prob``: û at the state *before* the last step (batch
    shape).
  - ``preconditioner_state``: the metric statistics (EMAs, Shampoo roots).
  - ``momentum``: Adam-SGLD's first moment, SGHMC's velocity, SGNHT's
    ``(velocity, thermostat)``; ``()`` for the other samplers.
  - ``step``: int32 number of steps taken.
  - ``num_nonfinite``: int32 per chain, steps whose log-prob, gradient or
    proposal was NaN/Inf (and, unless ``nonfinite='ignore'``, were undone).
  - ``num_unmoved``: int32 per chain, consecutive rejected steps up to now
    (0 after a step that moved); `tfp_adaptive.mcmc.sample` warns when a
    chain has not moved for many steps.
  - ``last_good_state``: list of parts, per chain the last state from which
    a finite step was taken; a rejected chain returns there.
  - ``step_size``: the step size ``h`` of the last step (one for all
    chains), as TFP's HMC holds it; `bootstrap_results` sets the step
    the first step takes. A wrapper that sets it (TFP's
    `SimpleStepSizeAdaptation`, `DualAveragingStepSizeAdaptation`) sets
    the step the next step takes. With a schedule ``s(t)`` the next step
    is ``step_size · s(t)/s(t−1)``: the schedule's shape, scaled by what
    the wrapper set (without a wrapper, ``s(t)`` itself).
  - ``gamma_norm``: per chain, the Euclidean norm of the last step's
    ``c·Γ`` (0 when ``gamma='none'``); a Γ that dominates the drift is the
    sign of a metric close to singular.
  - ``step_norms``: per chain, the squared lengths of the last step's
    drift, Γ and noise pieces (`tfp_adaptive.core.algorithms.StepNorms`);
    their means over a run give the regime numbers that tell whether the
    step size is where the sampler's bias is small
    (`tfp_adaptive.mcmc.check_regime`).
  - ``log_accept_ratio``: per chain, a stand-in for the log acceptance
    probability that these kernels, having no Metropolis test, lack:
    ``log(0.75) · r / 0.02`` with ``r = ‖a‖²/‖n‖²`` the last step's drift
    against its noise (`step_norms`), whose run mean is the regime's
    `drift_ratio`. TFP's step-size adaptation wrappers, at their default
    target of 0.75, thus move the step towards ``r ≈ 0.02``, the
    tolerance of the guide "Step sizes and regimes"; a target ``p`` aims
    at ``r ≈ 0.02 · log(p) / log(0.75)``. 0 where the step had no noise.
  - ``seed``: the stateless seed the last step used.

  ``tfp.mcmc.MetropolisHastings`` cannot correct these steps (the metric
  depends on the chain's past, and ``target_log_prob`` is read before the
  step): reading ``log_acceptance_correction`` raises a `ValueError` that
  says so.
  """
  __slots__ = ()

  @property
  def log_acceptance_correction(self):
    raise ValueError(
        'tfp.mcmc.MetropolisHastings cannot wrap the tfp_adaptive kernels: '
        'their metric depends on the chain\'s past, so no proposal density '
        'exists to correct with, and their `target_log_prob` is read before '
        'the step. For an exact chain use tfp.mcmc.MetropolisAdjustedLangevin'
        'Algorithm or tfp.mcmc.NoUTurnSampler; to keep these kernels, choose '
        'the step with tfa.mcmc.check_regime or a step-size adaptation '
        'wrapper (guide "Kernels and TFP chains").')


# TFP's step-size adaptation wrappers aim at this acceptance by default; the
# pseudo-acceptance puts it at the regime's drift-ratio tolerance.
DEFAULT_TARGET_ACCEPT_PROB = 0.75


def pseudo_log_accept_ratio(norms):
  """``log(0.75) · (‖a‖²/‖n‖²) / tolerance``, per chain: the results' `log_accept_ratio`."""
  ratio = tf.math.divide_no_nan(norms.drift_sq_norm, norms.noise_sq_norm)
  scale = (np.log(DEFAULT_TARGET_ACCEPT_PROB)
           / regime_lib.TOLERANCES['drift_ratio'])
  return tf.cast(scale, ratio.dtype) * ratio


def _one_step_size(step_size):
  """The results' `step_size` as the one scalar step the update takes."""
  if step_size.shape.rank != 0:
    raise ValueError(
        'These kernels take one `step_size` for all chains; a wrapper set '
        'the kernel results\' `step_size` to shape %s. With TFP\'s step-size '
        'adaptation wrappers, keep their default `step_size_getter_fn` and '
        '`step_size_setter_fn`, which adapt the one scalar step.'
        % (step_size.shape,))
  return step_size


def sampler_in(kernel):
  """Our kernel inside `kernel` (itself, or wrapped e.g. by a `TransformedTransitionKernel`), or `None`."""
  while kernel is not None and not isinstance(kernel, AdaptiveSGMCMC):
    kernel = getattr(kernel, 'inner_kernel', None)
  return kernel


def as_list(state):
  """The parts of a state, flat: a tensor, or any nest TFP's kernels take (list, tuple, namedtuple, `StructTuple`, dict)."""
  return tf.nest.flatten(state)


def call_target(fn, parts, structure, **kwargs):
  """``fn`` at the state whose flat parts are `parts`, called as TFP's kernels call a target.

  The state is rebuilt in the nest of `structure`; a list or tuple
  (namedtuples and `StructTuple` included) is passed as ``fn(*state)``,
  anything else (a tensor, a dict) as ``fn(state)``.
  """
  state = tf.nest.pack_sequence_as(structure, list(parts))
  if isinstance(state, (list, tuple)):
    return fn(*state, **kwargs)
  return fn(state, **kwargs)


def _norm(vectors, like, batch_ndims):
  """Per-chain Euclidean norm of a list of parts (zeros for `None`)."""
  if vectors is None:
    return tf.zeros(tf.shape(like), like.dtype)
  squares = [tf.cast(tensors.part_event_dot(v, v, batch_ndims), like.dtype)
             for v in vectors]
  return tf.sqrt(tf.add_n(squares))


def _like(parts, state):
  """`parts` in the nest of `state` (its namedtuple or dict type kept)."""
  return tf.nest.pack_sequence_as(state, list(parts))


class AdaptiveSGMCMC(tfp.mcmc.TransitionKernel):
  """Base kernel: one Euler–Maruyama step of preconditioned SG-MCMC.

  ``θ' = θ + (h/2)(M ∇û + τ c Γ) + sqrt(h τ) M^{1/2} ξ`` where ``M`` is built by
  ``self.preconditioner`` from ∇ of ``target_log_prob_fn`` (i.e. ∇û, the
  stochastic log-posterior, not the Keras loss). Subclasses only pick the
  preconditioner and store their arguments in ``self._parameters``.
  """

  def __init__(self, target_log_prob_fn, step_size, algorithm,
               temperature, gamma, gamma_estimator, nonfinite, parameters):
    if not callable(target_log_prob_fn):
      raise TypeError('`target_log_prob_fn` must be callable. Received: %r'
                      % (target_log_prob_fn,))
    schedules.as_schedule(step_size)
    validation.check_number('temperature', temperature, low=0., low_open=True)
    validation.check_choice('gamma', gamma, gamma_lib.GAMMA_MODES)
    algorithm = algorithm.for_gamma(gamma)
    validation.check_choice('gamma_estimator', gamma_estimator,
                            gamma_lib.GAMMA_ESTIMATORS)
    validation.check_number('gamma_probability',
                            parameters.get('gamma_probability', 1.), low=0.,
                            high=1., low_open=True)
    vocabulary.nonfinite_policy(nonfinite, NONFINITE_POLICIES)
    self._algorithm = algorithm
    self._parameters = parameters

  # -- TransitionKernel contract ------------------------------------------
  @property
  def parameters(self):
    return self._parameters

  @property
  def target_log_prob_fn(self):
    return self._parameters['target_log_prob_fn']

  @property
  def step_size(self):
    return self._parameters['step_size']

  @property
  def algorithm(self):
    """The `tfp_adaptive.core.algorithms.Algorithm` this kernel adapts."""
    return self._algorithm

  @property
  def preconditioner(self):
    return self._algorithm.preconditioner

  @property
  def is_calibrated(self):
    return False

  @property
  def name(self):
    return self._parameters.get('name') or type(self).__name__

  def copy(self, **override_parameter_kwargs):
    params = dict(self.parameters, **override_parameter_kwargs)
    return type(self)(**params)

  # -- helpers --------------------------------------------------------------
  def _log_prob(self, parts, seed, structure):
    """The target at the flat `parts` of a state shaped as `structure`."""
    fn = self.target_log_prob_fn
    if getattr(fn, 'needs_seed', False):
      return call_target(fn, parts, structure, seed=seed)
    return call_target(fn, parts, structure)

  def _target_is_minibatched(self, parts, structure):
    """Whether the target draws a minibatch from the step's seed.

    A `MinibatchLogProb` given as the target says so (``needs_seed``); one
    behind a wrapper's target (`minibatch.step_seed`) is found by tracing
    the target once, inside a `step_seed` context that records the draw
    (in a graph the unused evaluation is pruned). The answer is kept.
    """
    known = getattr(self, '_minibatched', None)
    if known is None:
      known = getattr(self.target_log_prob_fn, 'needs_seed', False)
      if not known:
        seed = tf.constant([0, 0], tf.int32)
        with minibatch.step_seed(seed) as context:
          self._log_prob(parts, seed, structure)
        known = context.drawn
      self._minibatched = bool(known)
    return known

  def _gamma_log_prob(self, seed, structure):
    """Γ's log-target: a `MinibatchLogProb`'s `gamma_batch_size` rows, if set."""
    fn = self.target_log_prob_fn
    rows = getattr(fn, 'gamma_batch_size', None)
    if rows is None or not getattr(fn, 'needs_seed', False):
      return None
    return lambda xs: call_target(fn, xs, structure, seed=seed, rows=rows)

  def _next_step_size(self, last, step, dtype):
    """The step ``h`` of step `step` from the results' `step_size` (the last step's, or a wrapper's)."""
    last = _one_step_size(last)
    if not callable(self.step_size):
      return last
    here = tf.cast(schedules.evaluate(self.step_size, step), dtype)
    before = tf.cast(schedules.evaluate(self.step_size,
                                        tf.maximum(step - 1, 0)), dtype)
    # Without a wrapper ``last`` is ``s(t−1)`` and the factor exactly 1.
    factor = tf.where(before > 0, last / tf.where(before > 0, before, 1.), 1.)
    return factor * here

  def _batch_ndims(self, parts, log_prob):
    if log_prob.shape.rank is None:
      raise ValueError('`target_log_prob_fn` must return a tensor of known rank.')
    batch_ndims = log_prob.shape.rank
    for i, p in enumerate(parts):
      lead = p.shape[:batch_ndims]
      if p.shape.rank < batch_ndims or not lead.is_compatible_with(log_prob.shape):
        raise ValueError(
            'Shape mismatch: the leading dimensions of `current_state` part %d '
            '(shape %s) must equal the shape %s of `target_log_prob_fn`\'s '
            'output (one log-prob per chain).' % (i, p.shape, log_prob.shape))
    return batch_ndims

  def bootstrap_results(self, init_state):
    with tf.name_scope(self.name + '.bootstrap_results'):
      parts = [tf.convert_to_tensor(p) for p in as_list(init_state)]
      for i, p in enumerate(parts):
        if not p.dtype.is_floating:
          raise TypeError('`current_state` part %d must be floating point. '
                          'Received dtype %s.' % (i, p.dtype.name))
      dtypes = sorted({p.dtype.name for p in parts})
      if len(dtypes) > 1:
        raise TypeError('All parts of `current_state` must have one dtype '
                        '(the noise and the metric are computed in it). '
                        'Received dtypes %s; cast them, e.g. to %s.'
                        % (dtypes, dtypes[-1]))
      lp = self._log_prob(parts, None, init_state)
      if not tf.is_tensor(lp) or not lp.dtype.is_floating:
        raise TypeError(
            '`target_log_prob_fn` must return a floating-point Tensor (one '
            'log-prob per chain) built from the state with TensorFlow ops, so '
            'that it can be differentiated. Received: %r' % (lp,))
      batch_ndims = self._batch_ndims(parts, lp)
      return AdaptiveSGMCMCKernelResults(
          target_log_prob=lp,
          preconditioner_state=self.preconditioner.init(parts, batch_ndims),
          momentum=self.algorithm.init_momentum(parts, batch_ndims),
          step=tf.constant(0, tf.int32),
          num_nonfinite=tf.zeros(tf.shape(lp), tf.int32),
          num_unmoved=tf.zeros(tf.shape(lp), tf.int32),
          last_good_state=parts,
          step_size=tf.cast(schedules.evaluate(
              self.step_size, tf.constant(0, tf.int32)), lp.dtype),
          gamma_norm=tf.zeros(tf.shape(lp), lp.dtype),
          step_norms=algorithms.StepNorms(
              *[tf.zeros(tf.shape(lp), lp.dtype)] * 4),
          log_accept_ratio=tf.zeros(tf.shape(lp), lp.dtype),
          seed=tfp.random.sanitize_seed(0))

  def one_step(self, current_state, previous_kernel_results, seed=None):
    with tf.name_scope(self.name + '.one_step'):
      prev = previous_kernel_results
      seed = tfp.random.sanitize_seed(seed, salt='AdaptiveSGMCMC')
      batch_seed, gamma_seed, noise_seed = tfp.random.split_seed(seed, n=3)
      with minibatch.step_seed(batch_seed):
        return self._one_step(current_state, prev, seed, batch_seed,
                              gamma_seed, noise_seed)

  def _one_step(self, current_state, prev, seed, batch_seed, gamma_seed,
                noise_seed):
    """`one_step` with the seeds split (a `MinibatchLogProb` behind a wrapper's target takes `batch_seed`, `minibatch.step_seed`)."""
    p = self.parameters
    parts = [tf.convert_to_tensor(x) for x in as_list(current_state)]
    batch_ndims = prev.target_log_prob.shape.rank
    # The metric's minibatch: the drift's, or one of its own
    # (``gamma='corrected'``, `vocabulary.independent_metric`); with an
    # exact target the two are one evaluation.
    independent = (vocabulary.independent_metric(p.get('gamma', 'none')) and
                   self._target_is_minibatched(parts, current_state))
    metric_seed = (tfp.random.split_seed(batch_seed, salt='metric')[0]
                   if independent else batch_seed)
    fn = lambda xs: self._log_prob(xs, metric_seed, current_state)
    drift_fn = None
    if independent:
      def drift_fn(xs):  # The drift's own minibatch, behind a wrapper too.
        with minibatch.step_seed(batch_seed):
          return self._log_prob(xs, batch_seed, current_state)
    with minibatch.step_seed(metric_seed):
      lp, grads, pstate, gamma = gamma_lib.gradient_and_gamma(
          fn, parts, self.algorithm.gamma_metric, prev.preconditioner_state,
          prev.step,
          batch_ndims, p.get('gamma', 'none'),
          p.get('gamma_estimator', 'hutchinson'), gamma_seed,
          self._gamma_log_prob(metric_seed, current_state),
          p.get('gamma_probability', 1.),
          noise_seed=noise_seed, noise=self.algorithm.noise,
          adapting=self.algorithm.adapting(prev.step), drift_fn=drift_fn)
    h = self._next_step_size(prev.step_size, prev.step, lp.dtype)
    step_pstate = self.algorithm.step_state(prev.preconditioner_state,
                                            pstate, prev.step)
    new_parts, momentum, norms, _ = self.algorithm.update(
        parts, grads, step_pstate, prev.momentum, gamma, h, p['temperature'],
        noise_seed, batch_ndims,
        noise_scale=schedules.noise_scale(self.step_size, prev.step),
        gradient_scale=1., ratios=True, step=prev.step)
    # The new metric state and momentum too: overflowing statistics
    # freeze a chain without a NaN in the proposal
    # (`Algorithm.state_is_finite`).
    here = tf.math.is_finite(lp) & self.algorithm.state_is_finite(
        pstate, momentum, grads, batch_ndims)
    ok = here & tensors.finite_chains(new_parts, batch_ndims)
    metric_ok = ok
    if p['nonfinite'] == 'reject_at_proposal':
      ok &= tf.math.is_finite(self._log_prob(new_parts, batch_seed,
                                             current_state))
      metric_ok = here
    new_parts, pstate, momentum, good, ok = self._handle_nonfinite(
        ok, metric_ok, parts, new_parts, prev, pstate, momentum,
        batch_ndims)
    bad = tf.cast(~ok, tf.int32)
    norms = algorithms.StepNorms(*[tf.cast(x, lp.dtype) for x in norms])
    results = AdaptiveSGMCMCKernelResults(
        target_log_prob=lp, preconditioner_state=pstate, momentum=momentum,
        step=prev.step + 1,
        num_nonfinite=prev.num_nonfinite + bad,
        num_unmoved=(prev.num_unmoved + 1) * bad,
        last_good_state=good,
        step_size=h,
        gamma_norm=_norm(gamma, lp, batch_ndims),
        step_norms=norms, log_accept_ratio=pseudo_log_accept_ratio(norms),
        seed=seed)
    return _like(new_parts, current_state), results

  def _handle_nonfinite(self, ok, metric_ok, parts, new_parts, prev, pstate,
                        momentum, batch_ndims):
    """Applies the ``nonfinite`` policy per chain.

    A step is good (`ok`) when the log-prob at the current state, the
    proposal, and the new metric state and momentum are finite (a NaN/Inf
    in ∇û or Γ reaches the proposal; an Inf in the metric's statistics,
    from a gradient whose square overflows, gives a zero metric instead,
    which would freeze the chain without a NaN in the proposal), and with
    ``'reject_at_proposal'`` also the log-prob at the proposal. A chain whose
    step is not good returns to its last good state (the last state from
    which a good step was taken) and draws fresh noise next step, so it
    does not freeze at a wall. The metric statistics of the step are kept
    where `metric_ok` (they came from a finite gradient), else those of the
    step before. With ``'reject'`` a proposal that lands where the log-prob is
    -inf is undone one step later (its log-prob is first evaluated by the
    next step), so such a state can appear once in the trace;
    ``'reject_at_proposal'`` evaluates the log-prob at the proposal (one
    more forward pass a step) and never lets it in.

    Returns:
      ``(new_parts, pstate, momentum, last_good_state, ok)``.
    """
    policy = self.parameters['nonfinite']
    if policy == 'ignore':
      return new_parts, pstate, momentum, parts, ok
    if policy == 'raise':  # A no-op under XLA: `sample` re-checks the count.
      with tf.control_dependencies([tf.debugging.Assert(
          tf.reduce_all(ok),
          ['Non-finite log-prob, gradient or state in %s at step' % self.name,
           prev.step, '. Lower the step size or check the model.'])]):
        ok = tf.identity(ok)
    where = lambda a, b, m=ok: tensors.where_chains(m, a, b, batch_ndims)
    good = where(parts, prev.last_good_state)
    return (where(new_parts, good),
            where(pstate, prev.preconditioner_state, metric_ok),
            where(momentum, prev.momentum, metric_ok), good, ok)
