"""The preconditioner contract, M = G^{-1} as a pure (init, update, apply) object, and its shared pieces.

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

import copy

import tensorflow as tf

from tfp_adaptive.core import tensors

__all__ = ['Identity', 'Preconditioner', 'SquareRoot', 'ema', 'squares_finite']


class Preconditioner(object):
  """Base class: the identity metric of SGLD (Welling & Teh 2011), M = I."""

  decay = 0.
  is_adaptive = False
  # Least EMA rate with minibatch gradients (`tfp_adaptive.diagnostics.regime`).
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
    metric's own units (`tfp_adaptive.diagnostics.regime`). 1 for metrics bounded
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
