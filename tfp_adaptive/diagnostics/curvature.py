"""The step size that heats the stiffest direction by a chosen amount: curvature and gradient noise, read by power iteration.

A Langevin step with metric ``M`` (Rensmeyer & Niggemann 2025, eq. 5, Γ
aside), ``θ' = θ − (h/2) M ∇Û + sqrt(h τ M) ξ``, seen in whitened
coordinates ``φ = M^{-1/2} θ`` near a mode, moves each eigendirection of
``A = M^{1/2} H M^{1/2}`` (``H`` the Hessian of the energy ``U``) as

``φ' = (1 − h a/2) φ − (h/2) n + sqrt(h τ) ξ``,

where ``a`` is the direction's curvature and ``n`` the minibatch gradient's
error along it, of variance ``s``. Its stationary variance is
``τ (1 + h s/(4τ)) / (a (1 − h a/4))``, so the direction samples at the
temperature ``τ (1 + h (a + s/τ)/4)`` to first order in ``h``, not at
``τ``. The heat ``h (a + s/τ)/4`` is largest in the direction where
``a + s/τ`` is, which is the largest eigenvalue ``λ`` of ``A + S/τ`` (``S``
the covariance of the whitened minibatch gradient) when one direction
dominates both. Hence

``h = 4 · heat / λ``                                            (1)

heats no direction by more than ``heat`` (to first order), and the
stiffest by about that much. This is the stiff directions' side of the
Laplacian form of the configurational temperature
(`tfp_adaptive.diagnostics.temperature`), which reads ``1 + h Σ a²/(4 Σ a)`` on
a Gaussian: it predicts the reading instead of waiting for it. The minibatch
term matters: with ``S ≈ (N/B) A`` (the per-example gradients' covariance
is the Fisher information, close to the Hessian near a mode) it is ``N/B``
times the curvature's, so a step set from the curvature alone is that many
times too hot.

`top_eigenvalue` runs the power iteration over lists of tensors; the
callers supply ``A·v`` (a Hessian-vector product between two applications of
``M^{1/2}``) and the whitened gradient deviations for ``S·v``.
"""

import tensorflow as tf


__all__ = ['noise_covariance_product', 'step_for_heat', 'top_eigenvalue']


def _dot(a, b, batch_ndims=0):
  """Per chain (the leading `batch_ndims` axes): the inner product over all parts."""
  return tf.add_n([tf.reduce_sum(x * y, axis=list(range(batch_ndims,
                                                      len(x.shape))))
                   for x, y in zip(a, b)])


def _per_chain(value, part, batch_ndims):
  """`value` (batch-shaped) shaped to broadcast against `part`."""
  if not batch_ndims:
    return value
  return tf.reshape(value, tf.concat(
      [tf.shape(value), [1] * (len(part.shape) - batch_ndims)], 0))


def top_eigenvalue(matvec, start, iterations=20, batch_ndims=0):
  """The largest eigenvalue of a symmetric positive semi-definite operator, by power iteration.

  Args:
    matvec: callable ``list of tensors -> list of tensors`` (same shapes),
      the operator's product.
    start: list of tensors, the starting vector (not all zero).
    iterations: int >= 1, products to take.
    batch_ndims: leading axes of independent chains: the operator acts on
      each chain's slice alone (block-diagonal), and each chain's largest
      eigenvalue is read.

  Returns:
    ``(eigenvalue, vector)``: the Rayleigh quotient of the last iterate
    (a float tensor, one per chain; a lower bound of the largest
    eigenvalue that converges to it) and the unit vector it was read at.
  """
  vector = start
  value = tf.constant(0., start[0].dtype)
  for _ in range(iterations):
    norm = tf.sqrt(_dot(vector, vector, batch_ndims))
    vector = [v / _per_chain(norm, v, batch_ndims) for v in vector]
    product = matvec(vector)
    value = _dot(vector, product, batch_ndims)
    vector, last = product, vector
  return value, last


def noise_covariance_product(deviations, batch_ndims=0):
  """``v -> S v`` for the sample covariance ``S`` of whitened gradient deviations.

  Args:
    deviations: list over draws (at least 2) of lists of tensors: each
      minibatch gradient of the energy, whitened (``M^{1/2} ∇Û``), less the
      draws' mean.
    batch_ndims: leading axes of independent chains: each chain's
      covariance, the block of ``S`` that acts on its own slice.

  Returns:
    The product function, ``S v = Σ_k d_k (d_k · v) / (K − 1)``.
  """
  if len(deviations) < 2:
    raise ValueError('the noise covariance needs at least 2 gradient draws. '
                     'Received: %d' % len(deviations))
  stacked = [tf.stack(part) for part in zip(*deviations)]  # [K, ...] each.
  scale = 1. / (len(deviations) - 1)

  def product(vector):
    if not batch_ndims:
      weights = tf.add_n([tf.tensordot(d, v, axes=len(v.shape))
                          for d, v in zip(stacked, vector)])
      return [scale * tf.tensordot(weights, d, axes=1) for d in stacked]
    # Per draw and chain: ``d_k · v`` over the chain's own slice.
    weights = _dot(stacked, [v[None] for v in vector], 1 + batch_ndims)
    return [scale * tf.reduce_sum(_per_chain(weights, d, 1 + batch_ndims) *
                                  d, axis=0) for d in stacked]
  return product


def step_for_heat(eigenvalue, heat):
  """Eq. (1): ``h = 4·heat/λ`` (``λ`` of ``A + S/τ``, in the energy's units)."""
  return 4. * heat / eigenvalue
