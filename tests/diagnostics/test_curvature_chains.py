"""The power iteration and the noise covariance of `diagnostics.curvature`, per chain."""

import numpy as np
import tensorflow as tf

from tfp_adaptive.diagnostics import curvature


def test_top_eigenvalue_reads_each_chain():
  rng = np.random.default_rng(0)
  blocks = []
  for scale in (1., 5.):
    q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    blocks.append(q @ np.diag(scale * np.linspace(0.1, 1., 6)) @ q.T)
  a = tf.constant(np.stack(blocks))
  matvec = lambda v: [tf.einsum('kij,kj->ki', a, v[0])]
  start = [tf.constant(rng.normal(size=(2, 6)))]
  value, _ = curvature.top_eigenvalue(matvec, start, 300, batch_ndims=1)
  np.testing.assert_allclose(value.numpy(), [1., 5.], rtol=1e-6)


def test_noise_covariance_product_is_each_chains_own():
  rng = np.random.default_rng(1)
  draws = rng.normal(size=(5, 2, 3, 4))  # draws, chains, a 3x4 part.
  deviations = [[tf.constant(d - draws.mean(0))] for d in draws]
  vector = rng.normal(size=(2, 3, 4))
  got = curvature.noise_covariance_product(deviations, 1)(
      [tf.constant(vector)])[0].numpy()
  for k in range(2):
    flat = (draws[:, k] - draws[:, k].mean(0)).reshape(5, -1)
    expected = (np.cov(flat.T) @ vector[k].ravel()).reshape(3, 4)
    np.testing.assert_allclose(got[k], expected, rtol=1e-10)
  one = curvature.noise_covariance_product(
      [[tf.constant(d[0] - draws[:, 0].mean(0))] for d in draws])(
          [tf.constant(vector[0])])[0].numpy()
  np.testing.assert_allclose(one, got[0], rtol=1e-10)
