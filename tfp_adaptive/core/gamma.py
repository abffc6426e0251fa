"""The second-order drift Γ_i = Σ_j ∂M_ij/∂θ_j by nested automatic differentiation.

Γ is the Jacobian-vector product of ``θ ↦ M_t(θ) z`` in the direction ``z``
(docs, "The mathematics"), where ``M_t(θ)`` is the metric whose statistics were
updated with the gradient at ``θ``. The metric sees θ only through the
gradient ``g(θ)``, so the product is ``J_{g↦M(g)z} (H z)``: the
Hessian-vector product ``H z`` by reverse-over-reverse ``tf.GradientTape``s,
then the forward-mode derivative (``tf.autodiff.ForwardAccumulator``) of the
metric along it.

* ``estimator='hutchinson'``: one Rademacher ``z``, ``E[Γ̂] = Γ``, exact in 1-D,
  one Hessian-vector product (about two gradients) on top of the
  gradient itself. Given the step's noise seed, ``z`` is the sign of the
  step's own standard normal ``ξ`` (`noise.normal_signs`), which is
  Rademacher and independent of ``|ξ|``; ``Γ̂`` is even in ``z``, so
  ``E[Γ̂ ξᵀ]`` has only odd moments of ``z`` and vanishes: the step's mean
  and covariance are those of an independent probe, and under XLA the probe
  costs no random numbers of its own (the noise's uniform draw is computed
  once and the probe is its sign).
* ``estimator='exact'``: sum over all basis vectors ``e_j``: D passes.

Modes (Rensmeyer & Niggemann 2025, Sec. 3 and Algorithm 1):
``'none'`` drops Γ; ``'original'`` keeps the Γ of the EMA metric (only
``1 - α`` of the true one, as TFP's pSGLD); ``'corrected_published'``
divides it by ``1 - α`` (Algorithm 1); ``'corrected'`` does the same with
the metric and Γ built from a minibatch apart from the drift's
(`vocabulary.independent_metric`, the `drift_fn` of `gradient_and_gamma`),
and ``'corrected_lagged'`` moves the chain with the metric from before the
current gradient (`lags_metric`): both remove the first-order bias
Algorithm 1 keeps with minibatch gradients (docs, "The mathematics",
"Minibatches").
"""

import tensorflow as tf

from tfp_adaptive import vocabulary
from tfp_adaptive.core import noise as noise_lib
from tfp_adaptive.core import tensors

# The modes' vocabulary, declared in `tfp_adaptive.vocabulary`.
GAMMA_MODES = vocabulary.GAMMA_MODES
CORRECTED_MODES = vocabulary.CORRECTED_MODES
is_corrected = vocabulary.is_corrected
lags_metric = vocabulary.lags_metric

__all__ = ['CORRECTED_MODES', 'GAMMA_ESTIMATORS', 'GAMMA_MODES', 'gamma_scale',
           'gradient_and_gamma', 'is_corrected', 'lags_metric',
           'value_and_gradient']

GAMMA_ESTIMATORS = ('hutchinson', 'exact')


def value_and_gradient(fn, parts):
  """``fn(parts)`` and its gradient, zeros for parts it does not use."""
  with tf.GradientTape() as tape:
    tape.watch(parts)
    value = fn(parts)
  grads = tape.gradient(value, parts,
                        unconnected_gradients=tf.UnconnectedGradients.ZERO)
  return value, grads


def gamma_scale(mode, decay):
  """The factor ``c`` multiplying the Γ of the EMA metric."""
  if mode == 'none':
    return 0.
  if mode == 'original':
    return 1.
  return 1. / (1. - decay)  # Both `CORRECTED_MODES`.


def _taped_gradient(fn, parts):
  """``fn(parts)``, its gradient and the tape that recorded the gradient.

  The tape's `gradient` with ``output_gradients=z`` is the Hessian-vector
  product ``H z`` (reverse over reverse; the Hessian is symmetric).
  """
  with tf.GradientTape() as outer:
    outer.watch(parts)
    value, grads = value_and_gradient(fn, parts)
  return value, grads, outer


def _gradient_and_update(fn, parts, preconditioner, state, step, batch_ndims,
                         taped=False):
  """``(value, grads, new_state, tape)``: the step's gradient and metric update.

  `tape` is the one of `_taped_gradient` if `taped`, else `None`.
  """
  if taped:
    value, grads, tape = _taped_gradient(fn, parts)
  else:
    (value, grads), tape = value_and_gradient(fn, parts), None
  new_state = preconditioner.update(state, grads, step, batch_ndims)
  return value, grads, new_state, tape


def _hessian_vector(tape, grads, parts, tangent):
  return tape.gradient(grads, parts, output_gradients=tangent,
                       unconnected_gradients=tf.UnconnectedGradients.ZERO)


def _metric_jvp(fn, parts, preconditioner, state, step, batch_ndims, tangent,
                gamma_fn=None, value_and_grads=None):
  """Value, gradient, updated metric state and ``J_{θ↦M_t(θ)z}(θ) z``.

  The metric depends on θ only through the gradient ``g(θ)``, so the JVP is
  the chain rule ``J_{g↦M(g)z} (H z)``: the Hessian-vector product ``H z``
  by reverse-over-reverse autodiff (the Hessian is symmetric), then the
  forward-mode derivative of the metric along it. Forward-over-reverse on
  the whole would also carry zero tangents through the model's inputs
  (e.g. ``ẋ W`` and ``ẋᵀ δ`` of a first dense layer), which XLA keeps.

  With `gamma_fn`, the metric's value comes from the gradient of `fn` and its
  derivative from the gradient of `gamma_fn` (the Hessian-vector product
  runs on `gamma_fn` only); `value_and_grads` reuses a computed ``(fn,
  ∇fn)``.
  """
  if gamma_fn is None:
    value, grads, tape = _taped_gradient(fn, parts)
    second = grads
  else:
    value, grads = value_and_grads or value_and_gradient(fn, parts)
    _, second, tape = _taped_gradient(gamma_fn, parts)
  hz = _hessian_vector(tape, second, parts, tangent)
  new_state, jvp = preconditioner.metric_derivative(
      state, grads, hz, tangent, step, batch_ndims)
  return value, grads, new_state, jvp


def _basis_vector(j, parts, batch_ndims):
  size = tensors.event_size(parts, batch_ndims)
  flat = tf.one_hot(j, size, dtype=parts[0].dtype)
  sizes = [tensors.event_size([p], batch_ndims) for p in parts]
  out = []
  for piece, p in zip(tf.split(flat, sizes), parts):
    piece = tf.reshape(piece, p.shape[batch_ndims:])
    out.append(tf.broadcast_to(piece, tf.shape(p)))
  return out


def _exact_gamma(fn, parts, preconditioner, state, step, batch_ndims,
                 gamma_fn=None, value_and_grads=None):
  size = tensors.event_size(parts, batch_ndims)

  def body(j, acc):
    e = _basis_vector(j, parts, batch_ndims)
    jvp = _metric_jvp(fn, parts, preconditioner, state, step, batch_ndims, e,
                      gamma_fn, value_and_grads)[-1]
    return j + 1, [a + g for a, g in zip(acc, jvp)]
  _, total = tf.while_loop(lambda j, _: j < size, body,
                           (tf.constant(0), [tf.zeros_like(p) for p in parts]))
  return total


def gradient_and_gamma(fn, parts, preconditioner, state, step, batch_ndims,
                       mode='none', estimator='hutchinson', seed=None,
                       gamma_fn=None, probability=1., noise_seed=None,
                       noise='gaussian', adapting=None, drift_fn=None):
  """One step's log-prob, gradient, updated metric state and scaled Γ.

  Args:
    fn: callable mapping the list of state parts to the log-target ``û(θ)``
      (leading `batch_ndims` axes are chains).
    parts: list of `Tensor`s, the current state ``θ_t``.
    preconditioner: a `Preconditioner` (see `preconditioners.py`).
    state: its state before this step's update.
    step: int32 scalar, the step counter.
    batch_ndims: number of leading chain axes.
    mode: one of `GAMMA_MODES` (the corrected ones share their Γ).
    estimator: ``'hutchinson' | 'exact'``.
    seed: stateless seed of the Hutchinson probe when no `noise_seed` is
      given, and of the `probability` coin.
    gamma_fn: optional callable like `fn` whose gradient's derivative
      (Hessian-vector product) stands in for that of `fn` in Γ, e.g. the
      log-target on a random part of the minibatch. Γ is linear in that
      derivative, so an unbiased `gamma_fn` (``E[∇gamma_fn] = ∇fn``) keeps Γ
      unbiased while the second-order pass runs on less data; the metric
      itself is always built from ``∇fn``. `None`: `fn`.
    probability: ``p`` in (0, 1], float or scalar `Tensor`: the step
      computes Γ with probability ``p`` (one coin for all chains, drawn from
      `seed`) and then returns ``c·Γ/p``, otherwise zeros. With ``B`` the
      coin, ``E[B Γ/p] = Γ``: the drift stays unbiased while the
      second-order pass runs on a fraction ``p`` of the steps; the coin adds
      ``(h/2)²(1-p)/p Γ²`` of variance per step, O(h²) against the O(h)
      injected noise (the small-step argument of Hutchinson's probe and of
      minibatch gradients).
    noise_seed: optional stateless seed of the step's injected noise (the
      one given to `Algorithm.update`): the Hutchinson probe is then the sign
      of that noise, ``noise.normal_signs(parts, noise_seed)``, rather
      than a Rademacher draw of its own from `seed` (see the module
      docstring). Same distribution of the step; under XLA one draw fewer.
    noise: the law of the step's noise (`noise.NOISE_KINDS`); with
      ``'rademacher'`` the probe is the noise itself, still even in ``Γ̂``.
    adapting: optional bool scalar `Tensor` (`Algorithm.adapting`): where
      false, the metric is frozen: `state` is returned as it is, and Γ
      (zero for a constant metric) is zeros, not computed; only the
      gradient is taken.
    drift_fn: optional callable like `fn` whose value and gradient are
      returned, for a drift independent of the metric
      (``gamma='corrected'``, `vocabulary.independent_metric`):
      the metric's statistics and Γ then come from `fn` (a second
      minibatch), the returned ``(value, grads)`` from `drift_fn`. A frozen
      or non-adaptive metric takes `drift_fn`'s gradient only.

  Returns:
    ``(value, grads, new_state, gamma)`` where ``gamma`` is ``c·Γ`` (``c`` from
    `gamma_scale`; ``c·Γ/p`` or zeros with `probability`) or `None` when
    ``mode == 'none'``.
  """
  if drift_fn is not None and not preconditioner.is_adaptive:
    fn, drift_fn = drift_fn, None  # No statistics: only the drift's gradient.
  with_gamma = mode != 'none' and preconditioner.is_adaptive
  if adapting is not None and preconditioner.is_adaptive:
    def adapt():
      out = gradient_and_gamma(fn, parts, preconditioner, state, step,
                               batch_ndims, mode, estimator, seed, gamma_fn,
                               probability, noise_seed, noise,
                               drift_fn=drift_fn)
      return out if with_gamma else out[:3]

    def frozen():
      value, grads = value_and_gradient(drift_fn or fn, parts)
      zeros = [tf.zeros_like(p) for p in parts]
      return (value, grads, state) + ((zeros,) if with_gamma else ())
    out = tuple(tf.cond(adapting, adapt, frozen))
    return out if with_gamma else out + (None,)
  if drift_fn is not None:
    out = gradient_and_gamma(fn, parts, preconditioner, state, step,
                             batch_ndims, mode, estimator, seed, gamma_fn,
                             probability, noise_seed, noise)
    return value_and_gradient(drift_fn, parts) + tuple(out[2:])
  if not with_gamma:
    return _gradient_and_update(fn, parts, preconditioner, state, step,
                                batch_ndims)[:3] + (None,)
  c = gamma_scale(mode, preconditioner.decay)
  probe = None
  if estimator == 'hutchinson':
    # Drawn outside the `tf.cond` of `probability` (inside it measured the
    # same: XLA shares the noise's random bits either way).
    probe = _probe(parts, batch_ndims, seed, noise_seed, noise)
  if isinstance(probability, (int, float)) and probability >= 1.:
    return _scaled_gamma(fn, parts, preconditioner, state, step, batch_ndims,
                         estimator, probe, gamma_fn, c)
  if seed is None:
    raise ValueError('`probability` < 1 needs a `seed` for its coin.')
  coin = tf.random.stateless_uniform(
      [], tf.random.experimental.stateless_fold_in(seed, 2))
  return _gamma_on_coin(fn, parts, preconditioner, state, step, batch_ndims,
                        estimator, probe, gamma_fn, c / probability,
                        coin < probability)


def _probe(parts, batch_ndims, seed, noise_seed, noise='gaussian'):
  """Hutchinson's ``z``: ±1, the signs of the step's noise given its seed.

  Without `noise_seed`, an independent Rademacher draw from `seed`.
  """
  if tensors.event_size(parts, batch_ndims) == 1:
    return [tf.ones_like(p) for p in parts]  # 1-D: the probe's sign cancels.
  if noise_seed is not None:
    return noise_lib.draw_signs(parts, noise_seed, noise)
  if seed is None:
    raise ValueError('The Hutchinson estimator needs a `seed` or `noise_seed`.')
  return noise_lib.rademacher(parts, seed)


def _gamma_on_coin(fn, parts, preconditioner, state, step, batch_ndims,
                   estimator, probe, gamma_fn, scale, heads):
  """`gradient_and_gamma`'s result with ``scale·Γ`` if `heads`, else zeros.

  The gradient and the metric update run on every step; only Γ's
  second-order pass sits in the `tf.cond` (a `cond` around the whole step
  is slower: XLA then cannot fuse the update into the gradient's pass).
  Without `gamma_fn`, the Hessian-vector product differentiates the
  gradient recorded outside the `cond`.
  """
  taped = estimator == 'hutchinson' and gamma_fn is None
  value, grads, new_state, tape = _gradient_and_update(
      fn, parts, preconditioner, state, step, batch_ndims, taped)

  def with_gamma():
    if estimator == 'exact':
      gamma = _exact_gamma(fn, parts, preconditioner, state, step,
                           batch_ndims, gamma_fn, (value, grads))
    elif taped:
      hz = _hessian_vector(tape, grads, parts, probe)
      _, gamma = preconditioner.metric_derivative(state, grads, hz, probe,
                                                  step, batch_ndims)
    else:  # The subsample's own tape, built inside the branch.
      gamma = _metric_jvp(fn, parts, preconditioner, state, step, batch_ndims,
                          probe, gamma_fn, (value, grads))[-1]
    return [tf.cast(scale, g.dtype) * g for g in gamma]

  gamma = tf.cond(heads, with_gamma, lambda: [tf.zeros_like(p) for p in parts])
  return value, grads, new_state, gamma


def _scaled_gamma(fn, parts, preconditioner, state, step, batch_ndims,
                  estimator, probe, gamma_fn, scale):
  """`gradient_and_gamma`'s result with Γ computed and multiplied by `scale`."""
  if estimator == 'hutchinson':
    value, grads, new_state, gamma = _metric_jvp(
        fn, parts, preconditioner, state, step, batch_ndims, probe, gamma_fn)
  else:
    value, grads, new_state, _ = _gradient_and_update(
        fn, parts, preconditioner, state, step, batch_ndims)
    gamma = _exact_gamma(fn, parts, preconditioner, state, step, batch_ndims,
                         gamma_fn, None if gamma_fn is None else (value, grads))
  return value, grads, new_state, [tf.cast(scale, g.dtype) * g for g in gamma]
