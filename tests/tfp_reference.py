"""TFP's pSGLD optimizer and its intended Γ on a small nonlinear problem (graph mode)."""

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

A = np.random.RandomState(3).randn(7, 5)
B = np.random.RandomState(4).randn(7)
TH0 = np.random.RandomState(5).randn(5)


def loss(th):
  r = tf.linalg.matvec(tf.constant(A, th.dtype), th) - B
  return tf.reduce_sum(tf.math.log(tf.cosh(r))) + 0.1 * tf.reduce_sum(th ** 4)


def tfp_diag_jacobian_gamma(decay, bias):
  """Γ as TFP's `diag_jacobian` computes it when the path to θ exists."""
  with tf.Graph().as_default():
    th = tf.constant(TH0)
    grad = tf.gradients(loss(th), [th])[0]
    mom = decay * tf.ones_like(th) + (1. - decay) * tf.square(grad)
    precond = tf.math.rsqrt(mom + bias)
    _, jac = tfp.math.diag_jacobian(xs=th, ys=precond)
    with tf.compat.v1.Session() as sess:
      return sess.run(jac[0])


def tfp_optimizer_delta(lr, decay, bias, data_size=1, burnin=100):
  """θ_1 - θ_0 of one noise-free step of TFP's optimizer (a TF2 resource variable)."""
  with tf.Graph().as_default():
    v = tf.compat.v1.Variable(TH0, dtype=tf.float64)
    opt = tfp.optimizer.StochasticGradientLangevinDynamics(
        lr, preconditioner_decay_rate=decay, burnin=burnin,
        diagonal_bias=bias, data_size=data_size)
    grads = tf.compat.v1.gradients(loss(v), [v])
    op = opt.apply_gradients(list(zip(grads, [v])))
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      sess.run(op)
      return sess.run(v) - TH0
