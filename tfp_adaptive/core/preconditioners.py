"""Diagonal, layer-wise and Monge preconditioners M = G^{-1} as pure (init, update, apply) objects.

Every preconditioner here is an immutable bag of hyperparameters with four
pure methods on lists of tensors (leading `batch_ndims` axes are independent
chains):

* ``init(params, batch_ndims) -> state``
* ``update(state, grads, step, batch_ndims) -> state``: folds the gradient
  statistic ``h(ĝ)`` into the exponential moving average
  ``V_t = α V_{t-1} + (1 - α) h(ĝ_t)`` (docs, "The mathematics").
* ``apply(state, vectors, batch_ndims, differentiable=False)``: ``M_t v``.
* ``apply_sqrt(state, vectors, batch_ndims, differentiable=False)``:
  ``M_t^{1/2} v``; ``apply_sqrt_to_noise(state, noise, batch_ndims)``:
  the same for the step's noise, equal in law.
* ``metric_derivative(state, grads, grad_tangents, vectors, step,
  batch_ndims)``: the updated state and ``d/dε M(ĝ + ε ġ) v`` at ε = 0, the
  derivative of the metric along a gradient tangent (Γ, `gamma.py`).
  ``sqrt_derivative`` is the same for ``M^{1/2}``, whose divergence is the
  Γ of preconditioned SGHMC (`SquareRoot`).
* ``apply_to_gradient(state, vectors, scale, batch_ndims)``: ``M_t v`` for
  ``v = scale · ĝ_t``, the drift's vector, where ``ĝ_t`` is the gradient of
  the last `update`; a metric may reuse what `update` computed from ``ĝ_t``
  (Monge's inner product ``ℓ_t·ĝ_t``).

``decay`` is the EMA rate α; the corrected Γ (Rensmeyer & Niggemann 2025,
Algorithm 1) divides the Γ of the EMA metric by ``1 - decay``. With
``differentiable=True`` `apply` keeps the metric differentiable with respect
to the statistics of the current step, even where a cached quantity is used
for its value (Wenzel's periodic scales); `gamma.py` relies on this.
"""

import collections
import copy

import tensorflow as tf

from tfp_adaptive.core import tensors

__all__ = [
    'Identity',
    'Monge',
    'MongeState',
    'Preconditioner',
    'RMSprop',
    'RMSpropState',
    'SquareRoot',
    'Wenzel',
    'WenzelState',
    'ema',
    'squares_finite',
]

RMSpropState = collections.namedtuple('RMSpropState', ['second_moment'])
WenzelState = collections.namedtuple('WenzelState', ['second_moment', 'scale'])
MongeState = collections.namedtuple(
    'MongeState', ['mean_grad', 'sq_norm', 'fallback', 'grad_dot'])


class Preconditioner(object):
  """Base class: the identity metric of SGLD (Welling & Teh 2011), M = I."""

  decay = 0.
  is_adaptive = False
  # Least EMA rate with minibatch gradients (`tfp_adaptive.core.regime`).
  min_decay_stochastic = 0.9
  # Steps 0 … k−1 average the statistics with equal weights (`decay_at`).
  warmup_steps = 0
  # Whether the first metric is built from the first gradient alone (or
  # from a vanishing initial state): a metric with a cusp then starts at it
  # wherever that gradient is near zero (`Algorithm.moves`).
  starts_from_first_gradient = False

  def with_warmup(self, steps):
    """This metric with its statistics averaged with equal weights over the first `steps` steps."""
    if steps == self.warmup_steps:
      return self
    out = copy.copy(self)
    out.warmup_steps = steps
    return out

  def decay_at(self, step, dtype):
    """The moving average's rate at `step`: ``t/(t + 1)`` while warming up, then `decay`.

    During the first `warmup_steps` steps the statistics are the plain mean
    of the ones seen so far (the first step replaces the initial state),
    so that the metric a chain starts moving with is built from several
    gradients, not from the first alone (`Algorithm.moves`).
    """
    decay = tf.cast(self.decay, dtype)
    if not self.warmup_steps:
      return decay
    t = tf.cast(step, dtype)
    return tf.where(step < self.warmup_steps, t / (t + 1.), decay)

  def check_gamma(self, gamma):
    """Raises `ValueError` if this metric cannot give Γ for mode `gamma`."""
    del gamma

  def for_gamma(self, gamma):
    """This metric for Γ mode `gamma`: validated by `check_gamma`.

    Metrics that keep state only Γ reads (Shampoo's eigenbasis) return a
    copy without it when ``gamma == 'none'``.
    """
    self.check_gamma(gamma)
    return self

  def init(self, params, batch_ndims):
    del params, batch_ndims
    return ()

  def update(self, state, grads, step, batch_ndims):
    del grads, step, batch_ndims
    return state

  # Steps between refreshes of what a metric recomputes only now and then
  # (Wenzel's scales, Shampoo's roots); 1 for metrics without such state.
  update_interval = 1

  def refreshes(self, step):
    """Whether `update` at `step` refreshes: every `update_interval` steps.

    `True` (a Python bool) when ``update_interval == 1``. The leaves
    `cached_leaves` marks change only at these steps.
    """
    if self.update_interval == 1:
      return True
    refresh = tf.equal(step % self.update_interval, 0)
    if self.warmup_steps:  # The chain's first move uses the warmed metric.
      refresh |= tf.equal(step, self.warmup_steps - 1)
    return refresh

  def cached_leaves(self, state):
    """`state`'s structure, True at leaves that change only when `refreshes`.

    Such leaves are functions of the others, recomputed at refresh steps
    and carried unchanged in between (Shampoo's roots); a chain whose new
    statistics are not finite keeps them at a refresh step too. A caller
    that keeps the state in variables may write them back without the
    select that rejects a non-finite step: between refreshes the write is
    of the variables' own values, which XLA does in place.
    """
    return tf.nest.map_structure(lambda _: False, state)

  def state_is_finite(self, state, grads, batch_ndims):
    """Per chain: is `state`, updated with `grads`, finite (batch-shaped bool)?

    The check of every step's new metric state: every floating leaf
    (`tensors.finite_state`). A metric whose state is much larger than the
    parameters may instead bound it by `grads`, given the state it was
    updated from was finite (the caller commits only finite states).
    """
    del grads
    return tensors.finite_state(state, batch_ndims)

  def apply(self, state, vectors, batch_ndims, differentiable=False):
    del state, batch_ndims, differentiable
    return list(vectors)

  def lagged_state(self, old_state, new_state):
    """The state a lagged step moves with (`Algorithm.step_state`): `old_state`.

    ``old_state`` holds the statistics before the current gradient,
    ``new_state`` after it. A metric unbounded in its statistics may let
    the current gradient raise them where it alone would exceed them
    (`RMSprop.lagged_state`).
    """
    del new_state
    return old_state

  def apply_sqrt(self, state, vectors, batch_ndims, differentiable=False):
    del state, batch_ndims, differentiable
    return list(vectors)

  def apply_sqrt_to_noise(self, state, noise, batch_ndims):
    """``M_t^{1/2} ξ`` for noise ξ of i.i.d. entries, equal in law to `apply_sqrt`.

    A metric may use that any fixed permutation of ξ's entries has the
    same law, to skip moving them (Shampoo's blocks).
    """
    return self.apply_sqrt(state, noise, batch_ndims)

  def metric_derivative(self, state, grads, grad_tangents, vectors, step,
                        batch_ndims):
    """``(update(state, grads), d/dε [M_t(ĝ + ε ġ) v]_{ε=0})``.

    The metric of this step as a function of its gradient ``ĝ`` (`grads`),
    differentiated along ``ġ`` (`grad_tangents`) and applied to `vectors`:
    with ``ġ = H z`` and ``v = z`` this is the Hutchinson sample of Γ
    (Rensmeyer & Niggemann 2025, eq. 9; `gamma.py`). Forward-mode autodiff
    through `update` and ``apply(..., differentiable=True)``; metrics may
    override it with a closed form that needs fewer passes over the
    parameters (Monge).
    """
    return self._derivative(self.apply, state, grads, grad_tangents, vectors,
                            step, batch_ndims)

  def sqrt_derivative(self, state, grads, grad_tangents, vectors, step,
                      batch_ndims):
    """`metric_derivative` of ``M^{1/2}``: ``d/dε [M_t^{1/2}(ĝ + ε ġ) v]``.

    Forward-mode autodiff through `update` and ``apply_sqrt(...,
    differentiable=True)``.
    """
    return self._derivative(self.apply_sqrt, state, grads, grad_tangents,
                            vectors, step, batch_ndims)

  def _derivative(self, apply, state, grads, grad_tangents, vectors, step,
                  batch_ndims):
    with tf.autodiff.ForwardAccumulator(grads, grad_tangents) as acc:
      new_state = self.update(state, grads, step, batch_ndims)
      mv = apply(new_state, vectors, batch_ndims, differentiable=True)
    return new_state, acc.jvp(
        mv, unconnected_gradients=tf.UnconnectedGradients.ZERO)

  def peak_factor(self, mean_square_gradient):
    """``max M / typical M``: how far the metric can rise above its typical value.

    `mean_square_gradient` is the run mean of ``ĝ²`` per coordinate in the
    metric's own units (`tfp_adaptive.core.regime`). 1 for metrics bounded
    by their typical scale.
    """
    del mean_square_gradient
    return 1.

  def apply_to_gradient(self, state, vectors, scale, batch_ndims):
    """``M_t v`` where ``v = scale · ĝ_t`` (``ĝ_t``: the last `update`'s gradient).

    Equal to ``apply(state, vectors, batch_ndims)``; metrics override it to
    reuse statistics of ``ĝ_t`` that `update` already computed. `scale` is a
    Python or scalar number, e.g. ``-N`` when ``ĝ`` is a loss gradient and
    ``v = ∇û``.
    """
    del scale
    return self.apply(state, vectors, batch_ndims)


class Identity(Preconditioner):
  """M = I: plain SGLD (Welling & Teh 2011)."""


class SquareRoot(Preconditioner):
  """The square root ``S = M^{1/2}`` of a metric, for the Γ of preconditioned SGHMC.

  Preconditioned SGHMC moves the position by ``S v`` and drives the
  velocity by ``S ∇û``; its second-order term is the divergence of ``S``,
  ``Γ_i = Σ_j ∂S_ij/∂θ_j`` (docs, "The mathematics"). This view has the
  metric's statistics, decay and update, and ``S`` in place of ``M``, so
  that `gamma.gradient_and_gamma` computes that divergence unchanged.
  """

  def __init__(self, metric):
    self.metric = metric
    self.decay = metric.decay
    self.is_adaptive = metric.is_adaptive

  def check_gamma(self, gamma):
    self.metric.check_gamma(gamma)

  def init(self, params, batch_ndims):
    return self.metric.init(params, batch_ndims)

  def update(self, state, grads, step, batch_ndims):
    return self.metric.update(state, grads, step, batch_ndims)

  def apply(self, state, vectors, batch_ndims, differentiable=False):
    return self.metric.apply_sqrt(state, vectors, batch_ndims, differentiable)

  def metric_derivative(self, state, grads, grad_tangents, vectors, step,
                        batch_ndims):
    return self.metric.sqrt_derivative(state, grads, grad_tangents, vectors,
                                       step, batch_ndims)


def ema(decay, old, new):
  """``decay·old + (1 − decay)·new`` per part: every metric's moving average."""
  return [decay * o + (1. - decay) * n for o, n in zip(old, new)]


def squares_finite(grads, batch_ndims):
  """Per chain: is ``Σ ĝ²`` finite? The check of a moving average of ``ĝ²``.

  Every entry of a moving average of squares or outer products of the
  gradient (RMSprop's ``V``, Shampoo's Kronecker factors) is bounded by the
  old entry and ``Σ ĝ²`` (Cauchy–Schwarz): from a finite state, the new one
  is finite when ``Σ ĝ²`` is (a sum that overflows from finite squares
  rejects a step a little early). Reading the gradient instead of the new
  state lets XLA fuse the moving average into the step's update and its
  select of the new state, instead of writing it out for the check.
  """
  return tensors.finite_chains([tf.square(g) for g in grads], batch_ndims)


class RMSprop(Preconditioner):
  """RMSprop metric of pSGLD (Li et al. 2016; Rensmeyer & Niggemann 2025, Alg. 1).

  ``V_t = α V_{t-1} + (1 - α) ĝ_t²`` and, by default (TFP and Rensmeyer's
  Algorithm 1), ``M = diag(1 / sqrt(diagonal_bias + V))``; with
  ``bias_outside_sqrt=True`` it is Li et al.'s ``M = diag(1/(diagonal_bias +
  sqrt(V)))`` (also Adam's convention).

  Args:
    decay: α, the EMA rate, in [0, 1).
    diagonal_bias: the stability constant (λ² inside, λ outside the sqrt).
    bias_outside_sqrt: Python bool choosing Li et al.'s form.
    initial_value: value of ``V_0`` (0 as in Algorithm 1; TFP uses 1), or
      `None` for a warm start: the first update sets ``V`` to the first
      ``ĝ²`` (the moving average of a constant sequence) instead of
      ``(1 − α) ĝ²``. From ``V_0 = 0`` a small ``diagonal_bias`` gives the
      first steps ``M ≈ diagonal_bias^{-1/2}`` and, with the corrected Γ,
      ``c·∂M/∂V ∝ diagonal_bias^{-3/2}/(1 − α)``: kicks that can throw the
      chains far out, from where they return slowly. The derivative of the
      warm start with respect to ``ĝ`` is that of an ordinary step, so Γ's
      scale ``1/(1 − α)`` holds from the first step.
  """

  is_adaptive = True

  def __init__(self, decay, diagonal_bias, bias_outside_sqrt=False,
               initial_value=0.):
    self.decay = decay
    self.diagonal_bias = diagonal_bias
    self.bias_outside_sqrt = bias_outside_sqrt
    self.initial_value = initial_value
    # A fixed ``V_0`` (TFP's 1) starts the metric away from its cusp.
    self.starts_from_first_gradient = initial_value is None

  def init(self, params, batch_ndims):
    value = 0. if self.initial_value is None else self.initial_value
    return RMSpropState([tf.fill(tf.shape(p), tf.cast(value, p.dtype))
                         for p in params])

  def update(self, state, grads, step, batch_ndims):
    decay = self.decay_at(step, grads[0].dtype)
    squares = [tf.square(g) for g in grads]
    old = state.second_moment
    if self.initial_value is None:  # Warm start: V ← ĝ² at the first step.
      first = tf.equal(step, 0)
      old = [tf.where(first, tf.stop_gradient(q), v)
             for q, v in zip(squares, old)]
    return RMSpropState(ema(decay, old, squares))

  def state_is_finite(self, state, grads, batch_ndims):
    """``V_t`` is finite when ``ĝ_t²`` is (`squares_finite`), ``V_{t-1}`` being so."""
    del state
    return squares_finite(grads, batch_ndims)

  def lagged_state(self, old_state, new_state):
    """``max(V_{t−1}, (1 − α) ĝ_t²)``: the lagged statistics, floored at the current gradient's share.

    The step then never moves a coordinate further than the metric with
    the current gradient would (``|M ĝ| <= (1 − α)^{-1/2}``, RMSprop's own
    bound), so a gradient far above the statistics seen so far (a
    transient, a heavy tail) is not multiplied by a metric that has not
    seen it. The floor acts only where ``|ĝ_t| > sqrt(V_{t−1}/(1 − α))``,
    4.5 times the gradient's root mean square at ``α = 0.95``; its bias
    is that of those rare events (docs, "The mathematics",
    "Minibatches"). ``(1 − α) ĝ_t² = V_t − α V_{t−1}`` after the warm-up.
    """
    decay = self.decay
    return RMSpropState([
        tf.maximum(o, n - tf.cast(decay, o.dtype) * o)
        for o, n in zip(old_state.second_moment, new_state.second_moment)])

  def diagonal(self, state, power=1.):
    """``diag(M)**power`` for each part (power 1 or 1/2 avoid `pow`)."""
    out = []
    for v in state.second_moment:
      bias = tf.cast(self.diagonal_bias, v.dtype)
      if self.bias_outside_sqrt:
        d = tf.math.reciprocal(bias + tf.sqrt(v))
      else:
        d = tf.math.rsqrt(bias + v)
      if power == 0.5:
        d = tf.sqrt(d)
      elif power != 1.:
        d = d ** power
      out.append(d)
    return out

  def apply(self, state, vectors, batch_ndims, differentiable=False):
    return [d * x for d, x in zip(self.diagonal(state), vectors)]

  def peak_factor(self, mean_square_gradient):
    """``M`` where ``V = 0`` over ``M`` where ``V = E ĝ²``: the cusp's height.

    Infinite for ``diagonal_bias = 0`` (an unbounded metric).
    """
    v, b = float(mean_square_gradient), float(self.diagonal_bias)
    if b <= 0:
      return float('inf')
    if self.bias_outside_sqrt:
      return (b + v ** 0.5) / b
    return ((b + v) / b) ** 0.5

  def apply_sqrt(self, state, vectors, batch_ndims, differentiable=False):
    return [d * x for d, x in zip(self.diagonal(state, 0.5), vectors)]


class Wenzel(Preconditioner):
  """Layer-wise preconditioner of Wenzel et al. (2020), one scalar per part.

  ``V`` is RMSprop's EMA of ``ĝ²``; every ``update_interval`` steps the scales
  are refreshed: ``σ_l = sqrt(ε + mean(V_l))``, ``σ̃_l = σ_l / min_l σ_l``,
  ``M = diag(1/σ̃_l)``. Between refreshes the metric is constant, so Γ uses
  the derivative of the freshly computed scales at the current statistics
  (exact when ``update_interval == 1``; the same small-step limit otherwise).
  """

  is_adaptive = True

  def __init__(self, decay, diagonal_bias, update_interval):
    self.decay = decay
    self.diagonal_bias = diagonal_bias
    self.update_interval = update_interval

  def init(self, params, batch_ndims):
    moments = [tf.zeros_like(p) for p in params]
    batch = tf.shape(params[0])[:batch_ndims]
    return WenzelState(moments, [tf.ones(batch, p.dtype) for p in params])

  def _fresh_scales(self, second_moment, batch_ndims):
    sig = [tf.sqrt(tf.cast(self.diagonal_bias, v.dtype) +
                   tensors.part_event_mean(v, batch_ndims))
           for v in second_moment]
    smallest = tf.reduce_min(tf.stack(sig, axis=0), axis=0)
    return [smallest / s for s in sig]

  def update(self, state, grads, step, batch_ndims):
    decay = self.decay_at(step, grads[0].dtype)
    moments = ema(decay, state.second_moment, [tf.square(g) for g in grads])
    refresh = self.refreshes(step)
    fresh = self._fresh_scales(tf.nest.map_structure(tf.stop_gradient, moments),
                               batch_ndims)
    return WenzelState(moments, [tf.where(refresh, f, s)
                                 for f, s in zip(fresh, state.scale)])

  def _scales(self, state, batch_ndims, differentiable):
    if not differentiable:
      return state.scale
    fresh = self._fresh_scales(state.second_moment, batch_ndims)
    return [s + (f - tf.stop_gradient(f)) for s, f in zip(state.scale, fresh)]

  def apply(self, state, vectors, batch_ndims, differentiable=False):
    scales = self._scales(state, batch_ndims, differentiable)
    return [tensors.broadcast_to_part(s, x, batch_ndims) * x
            for s, x in zip(scales, vectors)]

  def apply_sqrt(self, state, vectors, batch_ndims, differentiable=False):
    scales = self._scales(state, batch_ndims, differentiable)
    return [tensors.broadcast_to_part(tf.sqrt(s), x, batch_ndims) * x
            for s, x in zip(scales, vectors)]


class Monge(Preconditioner):
  """Monge metric (Hartmann et al. 2022; Yu et al. 2023, Sec. 3.1).

  ``ℓ_t = λ ℓ_{t-1} + (1 - λ) ĝ_t`` and
  ``M = I - α²/(1 + α²‖ℓ‖²) ℓℓᵀ``,
  ``M^{1/2} = I + (1/‖ℓ‖²)(1/sqrt(1 + α²‖ℓ‖²) - 1) ℓℓᵀ``, applied in O(D)
  with the inner products over all parameters of a chain.

  Fallback (Yu et al. 2023, App. A.4): a chain whose preconditioned gradient
  norm ``‖M ĝ‖`` exceeds ``fallback_threshold`` uses ``M = I`` for that step.

  The state carries ``‖ℓ‖²`` (`sq_norm`) and ``ℓ_t·ĝ_t`` (`grad_dot`),
  both from the two inner products the fallback needs anyway,
  ``‖ℓ_t‖² = λ²‖ℓ_{t-1}‖² + 2λ(1-λ) ℓ_{t-1}·ĝ + (1-λ)²‖ĝ‖²`` and
  ``ℓ_t·ĝ = λ ℓ_{t-1}·ĝ + (1-λ)‖ĝ‖²``, so the drift ``M ĝ``
  (`apply_to_gradient`) needs no inner product of its own: a step takes
  three inner products, not six (each a pass over all parameters), and the
  two of `update` share one pass (`tensors.event_dots`). The noise's
  ``ℓ_t·ξ`` stays a pass of its own: stacking it with those two (through
  ``ℓ_t·ξ = λ ℓ_{t-1}·ξ + (1-λ) ĝ·ξ``) made the Keras step slower, as ξ
  must then be drawn before the update and kept. The norm's
  recursion is contractive (factor λ²): rounding does not accumulate.
  """

  is_adaptive = True
  min_decay_stochastic = 0.99

  def __init__(self, decay, alpha2, fallback_threshold=1000.):
    self.decay = decay
    self.alpha2 = alpha2
    self.fallback_threshold = fallback_threshold

  def init(self, params, batch_ndims):
    batch = tf.shape(params[0])[:batch_ndims]
    zero = tf.zeros(batch, params[0].dtype)
    return MongeState([tf.zeros_like(p) for p in params], zero,
                      tf.zeros(batch, tf.bool), zero)

  def update(self, state, grads, step, batch_ndims):
    lam = self.decay_at(step, grads[0].dtype)
    mean_grad = ema(lam, state.mean_grad, grads)
    old_g, gg = tensors.event_dots(
        [(state.mean_grad, grads), (grads, grads)], batch_ndims)
    sq = tf.maximum(lam * lam * state.sq_norm + 2. * lam * (1. - lam) * old_g
                    + (1. - lam) ** 2 * gg, 0.)
    grad_dot = lam * old_g + (1. - lam) * gg
    # Fallback test: ‖M ĝ‖² = ‖ĝ‖² + (2c + c²‖ℓ‖²)(ℓ·ĝ)², c = -α²/(1 + α²‖ℓ‖²).
    sq_, gg_, lg_ = [tf.stop_gradient(x) for x in (sq, gg, grad_dot)]
    a2 = tf.cast(self.alpha2, sq.dtype)
    c = -a2 / (1. + a2 * sq_)
    norm2 = gg_ + (2. * c + c * c * sq_) * lg_ * lg_
    threshold = tf.cast(self.fallback_threshold, norm2.dtype)
    fallback = ~(norm2 <= threshold * threshold)
    return MongeState(mean_grad, sq, fallback, grad_dot)

  def _rank_one(self, state, vectors, batch_ndims, coef_fn, dot=None):
    ell = state.mean_grad
    a2 = tf.cast(self.alpha2, ell[0].dtype)
    if dot is None:
      dot = tensors.event_dot(ell, vectors, batch_ndims)
    coef = coef_fn(a2, state.sq_norm) * dot
    coef = tf.where(state.fallback, tf.zeros_like(coef), coef)
    return [x + tensors.broadcast_to_part(coef, l, batch_ndims) * l
            for x, l in zip(vectors, ell)]

  @staticmethod
  def _metric_coef(a2, sq):  # M = I + coef ℓℓᵀ.
    return -a2 / (1. + a2 * sq)

  def metric_derivative(self, state, grads, grad_tangents, vectors, step,
                        batch_ndims):
    """Closed form of the derivative of ``M v = v + c(s) ℓ (ℓ·v)``.

    With ``s = ‖ℓ_t‖²``, ``c(s) = -α²/(1 + α²s)`` and ``ℓ̇ = (1-λ) ġ``:
    ``ṡ = 2 ℓ_t·ℓ̇`` and the derivative is
    ``c'(s) ṡ (ℓ·v) ℓ + c (ℓ·v) ℓ̇ + c (ℓ̇·v) ℓ`` with ``c'(s) = c(s)²``.
    Its three inner products ``ℓ·v``, ``ℓ·ġ``, ``ġ·v`` share
    one pass (`tensors.event_dots`), where forward-mode autodiff takes four.
    A chain on the fallback (M = I) gets 0, as in `apply`.
    """
    new_state = self.update(state, grads, step, batch_ndims)
    ell = new_state.mean_grad
    lv, lg, gv = tensors.event_dots(
        [(ell, vectors), (ell, grad_tangents), (grad_tangents, vectors)],
        batch_ndims)
    lam = self.decay_at(step, lv.dtype)
    a2 = tf.cast(self.alpha2, lv.dtype)
    c = self._metric_coef(a2, new_state.sq_norm)
    s_dot = 2. * (1. - lam) * lg
    # `update` clips ‖ℓ‖² at 0 against rounding; the derivative ignores it.
    coef_ell = c * c * s_dot * lv
    coef_tan = c * (1. - lam) * lv
    coef_ell = coef_ell + c * (1. - lam) * gv
    zero = tf.zeros_like(c)
    coef_ell = tf.where(new_state.fallback, zero, coef_ell)
    coef_tan = tf.where(new_state.fallback, zero, coef_tan)
    out = []
    for l, g in zip(ell, grad_tangents):
      out.append(tensors.broadcast_to_part(coef_ell, l, batch_ndims) * l +
                 tensors.broadcast_to_part(coef_tan, g, batch_ndims) * g)
    return new_state, out

  def apply(self, state, vectors, batch_ndims, differentiable=False):
    return self._rank_one(state, vectors, batch_ndims, self._metric_coef)

  def apply_to_gradient(self, state, vectors, scale, batch_ndims):
    dot = tf.cast(scale, state.grad_dot.dtype) * state.grad_dot
    return self._rank_one(state, vectors, batch_ndims, self._metric_coef, dot)

  def apply_sqrt(self, state, vectors, batch_ndims, differentiable=False):
    def coef(a2, sq):  # (1/sqrt(1+a s) - 1)/s without cancellation at s = 0.
      r = tf.sqrt(1. + a2 * sq)
      return -a2 / (r * (1. + r))
    return self._rank_one(state, vectors, batch_ndims, coef)
