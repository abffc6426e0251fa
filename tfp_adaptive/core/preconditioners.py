"""The diagonal, rescaled and Monge preconditioners: RMSprop, Wenzel's and Monge's metrics.

Each implements the contract of
`tfp_adaptive.core.preconditioner_base.Preconditioner` (``init``,
``update``, ``apply``, ``apply_sqrt``, ``metric_derivative``, …; docs,
"The mathematics"); Shampoo's layer-wise metric is in
`tfp_adaptive.core.shampoo`. The contract's classes are importable from
here too.
"""
import collections


import tensorflow as tf

from tfp_adaptive.core import tensors
from tfp_adaptive.core.preconditioner_base import Identity
from tfp_adaptive.core.preconditioner_base import Preconditioner
from tfp_adaptive.core.preconditioner_base import SquareRoot
from tfp_adaptive.core.preconditioner_base import ema
from tfp_adaptive.core.preconditioner_base import squares_finite

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
