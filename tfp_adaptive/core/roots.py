"""Inverse p-th roots of symmetric positive definite matrices by matrix products only.

The coupled Newton iteration (Guo & Higham 2006, "A Schur–Newton method
for the matrix p-th root and its inverse", eq. 3.2; the form distributed
Shampoo uses, Anil et al. 2020, Sec. 3.1): with ``z = (1 + p)/(2‖A‖_F)``,

``X_0 = z^{1/p} I``, ``M_0 = z A``,
``T_k = ((p + 1) I − M_k)/p``, ``X_{k+1} = X_k T_k``, ``M_{k+1} = T_k^p M_k``,

keeps ``M_k = X_k^p A`` and drives it to ``I``, so ``X_k → A^{-1/p}``. The
scaling puts every eigenvalue of ``M_0`` in ``(0, (p + 1)/2]``, where the
scalar map ``m ↦ m ((p + 1 − m)/p)^p`` rises monotonically to 1: small
eigenvalues grow by about ``(1 + 1/p)^p`` per step, then the convergence
is quadratic. A condition number κ thus takes about ``log κ / log 2``
steps plus a few. Every step is ``O(log p)`` matrix products, which XLA
compiles for any device; there is no eigendecomposition.
"""

import tensorflow as tf

__all__ = ['inverse_root']


def _power(m, p):
  """``m^p`` for an int ``p >= 1`` by repeated squaring."""
  result, base = None, m
  while p:
    if p & 1:
      result = base if result is None else tf.matmul(result, base)
    p >>= 1
    if p:
      base = tf.matmul(base, base)
  return result


def inverse_root(a, p, tolerance=1e-10, max_iterations=100):
  """``a^{-1/p}`` for symmetric positive definite ``a`` (batched ``[..., n, n]``).

  Args:
    a: float tensor ``[..., n, n]``, symmetric positive definite (e.g. a
      Kronecker factor plus its ridge). Computed in its own dtype (float64
      recommended for condition numbers beyond about 1e6).
    p: Python int >= 1.
    tolerance: stop when every entry of ``M_k − I`` (all matrices of the
      batch) is below this in absolute value.
    max_iterations: at most this many steps.

  Returns:
    ``(root, residual)``: the root, and the largest ``|M_k − I|`` entry
    reached (above `tolerance` only if `max_iterations` ran out).
  """
  n = int(a.shape[-1])
  eye = tf.eye(n, dtype=a.dtype)
  pf = tf.cast(p, a.dtype)
  norm = tf.norm(a, ord='fro', axis=[-2, -1])[..., tf.newaxis, tf.newaxis]
  z = (1. + pf) / (2. * norm)
  x0 = tf.pow(z, 1. / pf) * eye
  m0 = z * a

  def residual(m):
    return tf.reduce_max(tf.abs(m - eye))

  def cond(i, x, m, r):
    return tf.logical_and(i < max_iterations, r > tolerance)

  def body(i, x, m, r):
    t = ((pf + 1.) * eye - m) / pf
    m = tf.matmul(_power(t, p), m)
    return i + 1, tf.matmul(x, t), m, residual(m)

  _, x, _, r = tf.while_loop(cond, body, (0, x0, m0, residual(m0)))
  return 0.5 * (x + tf.linalg.matrix_transpose(x)), r
