"""The six samplers as (preconditioner, drift rule) pairs, and their one update.

Both adapters, the TFP kernels (`tfp_adaptive.mcmc`) and the Keras optimizers
(`tfp_adaptive.keras.optimizers`), build their sampler with the functions of
this module (which also validate the hyperparameters, naming them) and move
the state with `Algorithm.update`, the Euler–Maruyama step:

``θ' = θ + (h/2)(M ∇û + τ c Γ) + sqrt(h τ) M^{1/2} ξ``

(Adam-SGLD replaces ``M ∇û`` by Kim et al.'s drift and uses ``ξ`` unscaled;
SGHMC, and every metric given a ``friction``, moves ``θ`` by ``M^{1/2}`` times
a velocity that ``M^{1/2} ∇û`` and the noise drive,
`diffusion.hamiltonian_step`.)
"""

import tensorflow as tf

from tfp_adaptive import validation
from tfp_adaptive import vocabulary
from tfp_adaptive.core import diffusion
from tfp_adaptive.core import gamma as gamma_lib
from tfp_adaptive.core import noise as noise_lib
from tfp_adaptive.core import preconditioner_base
from tfp_adaptive.core import preconditioners
from tfp_adaptive.core import shampoo as shampoo_lib
from tfp_adaptive.core import step_norms as norms_lib
from tfp_adaptive.core import tensors

__all__ = ['Algorithm', 'DEFAULT_METRIC_WARMUP', 'StepNorms', 'adam_sgld',
           'monge', 'psgld', 'sgld', 'sghmc', 'sgnht', 'shampoo', 'wenzel']


# Steps of metric-only warm-up with a corrected Γ by default, where the
# metric would start from the first gradient alone: the chain's first metric
# is the mean of this many minibatch statistics at the initial state.
DEFAULT_METRIC_WARMUP = 10

# The step's norms, declared in `tfp_adaptive.core.step_norms`.
StepNorms = norms_lib.StepNorms


class Algorithm(object):
  """A sampler: its metric, its drift rule and how its noise is scaled.

  Args:
    preconditioner: a `tfp_adaptive.core.preconditioner_base.Preconditioner`.
    noise_preconditioned: Python bool, noise ``M^{1/2} ξ`` (Riemannian
      samplers) or ``ξ`` (Adam-SGLD).
    momentum_decay_rate: Adam-SGLD's β, or `None` for no momentum.
    drift_scale: Adam-SGLD's ``a``.
    noise: ``'gaussian'`` or ``'rademacher'`` (`noise.NOISE_KINDS`): the law
      of ``ξ`` (`noise.draw`).
    num_adaptation_steps: `None` (the metric adapts at every step) or an int
      ``n >= 1``: steps ``0 … n−1`` update the metric, and from step ``n``
      on it is frozen (see `adapting`).
    friction: `None` (Langevin dynamics) or SGHMC's ``α`` in (0, 1]: the
      state then carries a velocity (`diffusion.hamiltonian_step`), which
      the metric's square root ``S = M^{1/2}`` couples to the position, and
      Γ is the divergence of ``S`` (`gamma_metric`).
    gradient_noise: SGHMC's ``β̂`` in [0, ``friction``).
    diffusion: `None`, or SGNHT's ``A > 0``: the state then carries a
      velocity and a thermostat per chain (`diffusion.thermostat_step`).
    lag_metric: the step moves with the metric from before its gradient
      (``gamma='corrected_lagged'``, `step_state`).
    metric_warmup_steps: steps over which the metric's statistics gather
      before the chain moves (`moves`); `None`: the preconditioner's default.
    independent_metric: the drift's gradient comes from a minibatch of its
      own, so the metric holds none of its statistics
      (``gamma='corrected'`` with minibatches, `update`).
  """

  def __init__(self, preconditioner, noise_preconditioned=True,
               momentum_decay_rate=None, drift_scale=1., noise='gaussian',
               num_adaptation_steps=None, friction=None, gradient_noise=0.,
               diffusion=None, lag_metric=False, metric_warmup_steps=None,
               independent_metric=False):
    self.preconditioner = preconditioner
    self.lag_metric = bool(lag_metric) and preconditioner.is_adaptive
    self.independent_metric = (bool(independent_metric) and
                               preconditioner.is_adaptive)
    if metric_warmup_steps is not None:
      metric_warmup_steps = validation.check_int('metric_warmup_steps',
                                                 metric_warmup_steps, low=0)
    self.metric_warmup_steps = metric_warmup_steps
    self.friction = friction
    self.gradient_noise = gradient_noise
    self.diffusion = diffusion
    self.noise_preconditioned = noise_preconditioned
    self.momentum_decay_rate = momentum_decay_rate
    self.drift_scale = drift_scale
    self.noise = validation.check_choice('noise', noise, noise_lib.NOISE_KINDS)
    if num_adaptation_steps is not None:
      num_adaptation_steps = validation.check_int('num_adaptation_steps',
                                                  num_adaptation_steps)
    self.num_adaptation_steps = num_adaptation_steps

  def _replace(self, **changes):
    args = dict(preconditioner=self.preconditioner,
                noise_preconditioned=self.noise_preconditioned,
                momentum_decay_rate=self.momentum_decay_rate,
                drift_scale=self.drift_scale, noise=self.noise,
                num_adaptation_steps=self.num_adaptation_steps,
                friction=self.friction, gradient_noise=self.gradient_noise,
                diffusion=self.diffusion, lag_metric=self.lag_metric,
                metric_warmup_steps=self.metric_warmup_steps,
                independent_metric=self.independent_metric)
    args.update(changes)
    return Algorithm(**args)

  def with_noise(self, noise):
    """This algorithm with the law of ``ξ`` set to `noise` (validated)."""
    return self._replace(noise=noise)

  def for_gamma(self, gamma):
    """This algorithm for Γ mode `gamma` (`Preconditioner.for_gamma`: validated, and no state kept for a Γ that is not computed).

    With ``gamma='corrected_lagged'`` the step moves with the lagged metric
    (`step_state`, `gamma.lags_metric`); with ``'corrected'``
    its drift's gradient is not one the metric holds
    (`vocabulary.independent_metric`).
    """
    corrected = gamma_lib.is_corrected(gamma)
    pre = self.preconditioner.for_gamma('corrected' if corrected else gamma)
    return self._replace(preconditioner=pre.with_warmup(
        self._warmup_for(pre, corrected)),
                         lag_metric=gamma_lib.lags_metric(gamma),
                         independent_metric=vocabulary.independent_metric(
                             gamma))

  def _warmup_for(self, preconditioner, corrected):
    """`metric_warmup_steps` resolved.

    `None`: `DEFAULT_METRIC_WARMUP` for a corrected Γ of a metric that would
    start from the first gradient alone (RMSprop's warm start, Shampoo's
    zero factors), else 0 (a fixed start such as TFP's ``V_0 = 1``, Monge's
    ``ℓ_0 = 0`` and Wenzel's equal scales is away from any cusp, and
    ``'none'`` and ``'original'`` keep the published start).
    """
    if not preconditioner.is_adaptive:
      return 0
    if self.metric_warmup_steps is None:
      return (DEFAULT_METRIC_WARMUP if
              corrected and preconditioner.starts_from_first_gradient else 0)
    return self.metric_warmup_steps

  @property
  def warmup_steps(self):
    """Steps at the start that only gather the metric's statistics (`moves`)."""
    return self.preconditioner.warmup_steps

  def moves(self, step):
    """Whether the step numbered `step` moves the chain; `None` when every step does.

    The first `warmup_steps` steps take the gradient at the initial state
    and fold its statistics into the metric's plain mean
    (`Preconditioner.decay_at`), and leave the state, the velocity and the
    momentum as they are. The chain then starts from a metric built from
    that many minibatch gradients, not from the first alone: a coordinate
    whose first gradient is near zero would otherwise start at the
    metric's cusp, where Γ is largest and throws the chain far out (docs,
    "The mathematics", "Minibatches").
    """
    if not self.warmup_steps:
      return None
    return tf.greater_equal(step, self.warmup_steps)

  def step_state(self, old_state, new_state, step):
    """The metric state the step at `step` moves with: its drift, noise and velocity.

    `new_state` (updated with this step's gradient ``ĝ_t``) unless the
    metric lags (``gamma='corrected_lagged'``); then `old_state`, the metric of
    ``ĝ_0 … ĝ_{t−1}``, which the current minibatch does not enter
    (`Preconditioner.lagged_state`; RMSprop floors it at the current
    gradient's share so that no step is longer than without the lag): the
    drift's mean is ``M_{t−1} ∇u(θ_t)``, where ``M_t ∇û_t`` has a bias
    ``(1 − α)·∂M/∂V·Cov(ĝ², ĝ)`` that no step size removes (docs, "The
    mathematics", "Minibatches"). The first step (0) has no earlier
    statistics and moves with `new_state`.
    """
    if not self.lag_metric:
      return new_state
    lagged = self.preconditioner.lagged_state(old_state, new_state)
    first = tf.equal(step, 0)
    return tf.nest.map_structure(lambda o, n: tf.where(first, n, o),
                                 lagged, new_state)

  def adapting(self, step):
    """Whether the step numbered `step` (0 first) updates the metric.

    A bool `Tensor`, or `None` when every step does (no
    `num_adaptation_steps`, or a metric that does not adapt). After the
    adaptation the metric is a constant ``M``: no statistics are updated,
    Γ (the divergence of a constant metric) is exactly zero and is not
    computed, and the step is SGLD preconditioned by the fixed ``M``, whose
    stationary density is the target up to the step's O(h) discretisation
    bias, with neither the O(h) drift of a lagging moving average nor the
    Γ that corrects it.
    """
    if self.num_adaptation_steps is None or not self.preconditioner.is_adaptive:
      return None
    return tf.less(step, self.num_adaptation_steps)

  @property
  def adapts_throughout(self):
    """Whether the metric is a moving average that adapts at every step (never frozen)."""
    return (self.preconditioner.is_adaptive and
            self.num_adaptation_steps is None)

  def tracks_metric_with_gamma(self, gamma):
    """Whether a run in Γ mode `gamma` corrects a moving-average metric that follows the chain.

    True for an adaptive metric with ``gamma != 'none'`` that is never
    frozen: then the lag of the moving average behind the chain biases
    the corrected Γ (`tfp_adaptive.diagnostics.regime`).
    """
    return gamma != 'none' and self.adapts_throughout

  def update_metric(self, state, grads, step, batch_ndims):
    """The metric state after this step's gradient (unchanged once frozen)."""
    adapting = self.adapting(step)
    update = lambda: self.preconditioner.update(state, grads, step, batch_ndims)
    if adapting is None:
      return update()
    return tf.cond(adapting, update, lambda: state)

  def state_is_finite(self, state, momentum, grads, batch_ndims):
    """Per chain: are the new metric `state` (updated with `grads`) and `momentum` finite?

    The metric's own check (`Preconditioner.state_is_finite`) and every
    floating leaf of the momentum: with the new parts' check, what makes a
    step whole or nothing (kernels and optimizers alike).
    """
    return (self.preconditioner.state_is_finite(state, grads, batch_ndims) &
            tensors.finite_state(momentum, batch_ndims))

  @property
  def gamma_metric(self):
    """The matrix whose divergence Γ is: ``M``, or ``S = M^{1/2}`` with a velocity.

    Hand it to `gamma.gradient_and_gamma` as its preconditioner.
    """
    if self.is_hamiltonian:
      return preconditioner_base.SquareRoot(self.preconditioner)
    return self.preconditioner

  @property
  def is_hamiltonian(self):
    """True for SGHMC and SGNHT: the state carries a velocity."""
    return self.friction is not None or self.diffusion is not None

  @property
  def has_momentum(self):
    return self.momentum_decay_rate is not None or self.is_hamiltonian

  def init_momentum(self, parts, batch_ndims=0):
    """Adam-SGLD's first moment or SGHMC's velocity, ``0``; ``()`` for the other samplers.

    SGNHT: ``(velocity, thermostat)``, the thermostat starting at ``A``
    (one per chain).
    """
    if not self.has_momentum:
      return ()
    zeros = [tf.zeros_like(p) for p in parts]
    if self.diffusion is None:
      return zeros
    batch_shape = parts[0].shape[:batch_ndims]
    if not batch_shape.is_fully_defined():
      batch_shape = tf.shape(parts[0])[:batch_ndims]
    return zeros, tf.fill(batch_shape, tf.cast(self.diffusion, parts[0].dtype))

  def drift(self, grads, pstate, momentum, batch_ndims, gradient_scale=None):
    """``M ∇û`` (Adam-SGLD's ``∇û + a M m``; ``M^{1/2} ∇û`` with a velocity) and the new momentum.

    With `gradient_scale` ``s``, ``∇û = s ĝ`` for the gradient ``ĝ`` the
    metric was just updated with, and the metric may reuse its statistics
    (`Preconditioner.apply_to_gradient`).
    """
    pre = self.preconditioner
    if self.is_hamiltonian:  # The velocity is not a drift; ``S ∇û`` drives it.
      return pre.apply_sqrt(pstate, grads, batch_ndims), momentum
    if self.momentum_decay_rate is None:
      if gradient_scale is None:
        return pre.apply(pstate, grads, batch_ndims), momentum
      return (pre.apply_to_gradient(pstate, grads, gradient_scale, batch_ndims),
              momentum)
    return diffusion.adam_sgld_drift(
        grads, momentum, lambda m: pre.apply(pstate, m, batch_ndims),
        self.momentum_decay_rate, self.drift_scale)

  def update(self, parts, grads, pstate, momentum, gamma, step_size,
             temperature, noise_seed, batch_ndims, noise_scale=None,
             gradient_scale=None, ratios=False, step=None):
    """One Euler–Maruyama step from the gradient ``∇û`` and the new metric.

    Args:
      parts: list of `Tensor`s ``θ_t``.
      grads: list, ``∇û(θ_t)`` (gradient of the log-target, not of a loss).
      pstate: the metric state the step moves with (`step_state`): updated
        with this step's statistics, or the one before them when the
        metric lags.
      momentum: Adam-SGLD's ``m_{t-1}`` or ``()``.
      gamma: ``c Γ`` (scaled for its mode; of `gamma_metric`) or `None`.
      step_size: ``h``.
      temperature: ``τ``.
      noise_seed: stateless seed of ``ξ``.
      batch_ndims: number of leading chain axes.
      noise_scale: optional scalar multiplying the noise (TFP's optimizer
        switches the noise off during its `burnin`).
      gradient_scale: optional ``s`` with ``grads = s ĝ``, ``ĝ`` the gradient
        `pstate` was updated with (1 in the kernels, ``-N`` in Keras, whose
        metric is built from the loss gradient); lets the metric reuse its
        statistics of ``ĝ`` in the drift.
      step: the step counter (0 first), for `moves`; `None` moves always.

    Returns:
      ``(θ_{t+1}, m_t)`` (SGHMC: ``m_t`` is the velocity ``v_{t+1}``); with
      `ratios`, ``(θ_{t+1}, m_t, StepNorms, drift)``, the drift being the
      step's ``M ∇û`` (`drift`), for callers that need it again.
    """
    if (self.num_adaptation_steps is not None or self.lag_metric or
        self.independent_metric):
      # A frozen, lagged or independent metric holds no statistics of this
      # step's ``ĝ``.
      gradient_scale = None
    moves = None if step is None else self.moves(step)
    if moves is not None and gamma is not None:  # Not applied: not counted.
      gamma = [tf.where(moves, g, tf.zeros_like(g)) for g in gamma]
    out = self._update(parts, grads, pstate, momentum, gamma, step_size,
                       temperature, noise_seed, batch_ndims, noise_scale,
                       gradient_scale, ratios)
    if moves is None:
      return out
    keep = lambda new, old: tf.where(moves, new, old)
    new_parts = [keep(n, o) for n, o in zip(out[0], parts)]
    new_momentum = tf.nest.map_structure(keep, out[1], momentum)
    return (new_parts, new_momentum) + tuple(out[2:])

  def _update(self, parts, grads, pstate, momentum, gamma, step_size,
              temperature, noise_seed, batch_ndims, noise_scale,
              gradient_scale, ratios):
    """`update` for a step that moves."""
    drift, momentum = self.drift(grads, pstate, momentum, batch_ndims,
                                 gradient_scale)
    xi = noise_lib.draw(parts, noise_seed, self.noise)
    if self.noise_preconditioned and not self.is_hamiltonian:
      xi = self.preconditioner.apply_sqrt_to_noise(pstate, xi, batch_ndims)
    if noise_scale is not None:
      xi = [tf.cast(noise_scale, x.dtype) * x for x in xi]
    sums = []  # SGNHT: ``‖v'‖²`` and the step's norms, in one pass.
    if self.diffusion is not None:
      velocity, thermostat = momentum
      extra = norms_lib.norm_pairs(drift, xi, gamma, grads) if ratios else []

      def mean_square(v):
        sums.extend(tensors.event_dots([(v, v)] + extra, batch_ndims))
        return sums[0] / tensors.event_size(parts, batch_ndims)
      new_parts, velocity, thermostat = diffusion.thermostat_step(
          parts, velocity, thermostat, drift, xi, step_size, self.diffusion,
          temperature, batch_ndims, mean_square)
      momentum = (velocity, thermostat)
    elif self.is_hamiltonian:
      new_parts, momentum = diffusion.hamiltonian_step(
          parts, momentum, drift, xi, step_size, self.friction,
          self.gradient_noise, temperature, gamma,
          lambda v: self.preconditioner.apply_sqrt(pstate, v, batch_ndims))
    else:
      new_parts = diffusion.langevin_step(parts, drift, xi, step_size,
                                          temperature, gamma)
    if not ratios:
      return new_parts, momentum
    if sums:
      norms = norms_lib.norms_from_sums(sums[1:], gamma, grads, step_size,
                                        temperature, batch_ndims)
    else:
      norms = norms_lib.step_norms(drift, xi, gamma, grads, step_size,
                                   temperature, batch_ndims)
    return new_parts, momentum, norms, drift


def _decay(name, value):
  return validation.check_number(name, value, low=0., high=1., high_open=True)


def _nonnegative(name, value):
  return validation.check_number(name, value, low=0.)


def sgld():
  """SGLD (Welling & Teh 2011): M = I."""
  return Algorithm(preconditioner_base.Identity())


def _friction(friction):
  """Validates a friction ``α`` in (0, 1], or `None` (no velocity)."""
  if friction is None:
    return None
  return validation.check_number('friction', friction, low=0., high=1.,
                                 low_open=True)


def sghmc(friction, gradient_noise):
  """SGHMC (Chen, Fox & Guestrin 2014), ``M = I``: `diffusion.hamiltonian_step`."""
  if friction is None:
    raise TypeError('SGHMC needs a `friction` in (0, 1]. Received: None.')
  _friction(friction)
  validation.check_number('gradient_noise', gradient_noise, low=0.)
  if gradient_noise >= friction:
    raise ValueError('`gradient_noise` must be below `friction` (the '
                     'injected noise has variance (friction - '
                     'gradient_noise)·h). Received: gradient_noise=%r, '
                     'friction=%r.' % (gradient_noise, friction))
  return Algorithm(preconditioner_base.Identity(), friction=friction,
                   gradient_noise=gradient_noise)


def sgnht(diffusion):
  """SGNHT (Ding et al. 2014), ``M = I``: `diffusion.thermostat_step`."""
  validation.check_number('diffusion', diffusion, low=0., low_open=True)
  return Algorithm(preconditioner_base.Identity(), diffusion=diffusion)


def psgld(preconditioner_decay_rate, diagonal_bias, bias_outside_sqrt=False,
          num_adaptation_steps=None, friction=None, metric_warmup_steps=None,
          initial_value=None):
  """pSGLD (Li et al. 2016; Rensmeyer & Niggemann 2025, Algorithm 1).

  `initial_value`: ``V_0``, or `None` (the kernels' default) for the warm
  start ``V ← ĝ_0²`` of `preconditioners.RMSprop`.
  """
  _decay('preconditioner_decay_rate', preconditioner_decay_rate)
  _nonnegative('diagonal_bias', diagonal_bias)
  return Algorithm(preconditioners.RMSprop(
      preconditioner_decay_rate, diagonal_bias,
      validation.check_bool('bias_outside_sqrt', bias_outside_sqrt),
      initial_value), num_adaptation_steps=num_adaptation_steps,
                   friction=_friction(friction),
                   metric_warmup_steps=metric_warmup_steps)


def wenzel(preconditioner_decay_rate, update_interval, diagonal_bias,
           num_adaptation_steps=None, friction=None, metric_warmup_steps=None):
  """Layer-wise preconditioned SGLD (Wenzel et al. 2020)."""
  _decay('preconditioner_decay_rate', preconditioner_decay_rate)
  validation.check_int('update_interval', update_interval)
  _nonnegative('diagonal_bias', diagonal_bias)
  return Algorithm(preconditioners.Wenzel(
      preconditioner_decay_rate, diagonal_bias, update_interval),
                   num_adaptation_steps=num_adaptation_steps,
                   friction=_friction(friction),
                   metric_warmup_steps=metric_warmup_steps)


def monge(alpha2, preconditioner_decay_rate, fallback_threshold,
          num_adaptation_steps=None, friction=None, metric_warmup_steps=None):
  """SGRLD in the Monge metric (Yu et al. 2023, Sec. 3.1)."""
  _nonnegative('alpha2', alpha2)
  _decay('preconditioner_decay_rate', preconditioner_decay_rate)
  validation.check_number('fallback_threshold', fallback_threshold, low=0.,
                          low_open=True)
  return Algorithm(preconditioners.Monge(
      preconditioner_decay_rate, alpha2, fallback_threshold),
                   num_adaptation_steps=num_adaptation_steps,
                   friction=_friction(friction),
                   metric_warmup_steps=metric_warmup_steps)


def shampoo(preconditioner_decay_rate, epsilon, update_interval, max_dim,
            block_size=None, roots='eigh', num_adaptation_steps=None,
            friction=None, metric_warmup_steps=None):
  """SGRLD in the Shampoo metric (Yu et al. 2023, Sec. 3.2)."""
  _decay('preconditioner_decay_rate', preconditioner_decay_rate)
  validation.check_number('epsilon', epsilon, low=0., low_open=True)
  validation.check_int('update_interval', update_interval)
  validation.check_int('max_dim', max_dim)
  if block_size is not None:
    block_size = validation.check_int('block_size', block_size, low=2)
  return Algorithm(shampoo_lib.Shampoo(
      preconditioner_decay_rate, epsilon, update_interval, max_dim,
      block_size, roots), num_adaptation_steps=num_adaptation_steps,
                   friction=_friction(friction),
                   metric_warmup_steps=metric_warmup_steps)


def adam_sgld(preconditioner_decay_rate, momentum_decay_rate, drift_scale,
              diagonal_bias, bias_outside_sqrt=True, num_adaptation_steps=None):
  """Adam-SGLD (Kim, Song & Liang 2022; Rensmeyer & Niggemann 2025, eq. 28–31)."""
  _decay('preconditioner_decay_rate', preconditioner_decay_rate)
  _decay('momentum_decay_rate', momentum_decay_rate)
  _nonnegative('drift_scale', drift_scale)
  _nonnegative('diagonal_bias', diagonal_bias)
  pre = preconditioners.RMSprop(
      preconditioner_decay_rate, diagonal_bias,
      validation.check_bool('bias_outside_sqrt', bias_outside_sqrt))
  return Algorithm(pre, noise_preconditioned=False,
                   momentum_decay_rate=momentum_decay_rate,
                   drift_scale=drift_scale,
                   num_adaptation_steps=num_adaptation_steps)
