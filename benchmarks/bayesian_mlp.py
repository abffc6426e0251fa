"""A small Bayesian MLP with a NUTS reference: two moons, 2-H-H-1 tanh, N(0, 1) priors.

The panel's network target (`benchmarks.panel`). Its weights have no
meaningful marginal sds (the posterior is symmetric under swapping and
sign-flipping hidden units, and chains settle in different copies), so it
is judged in function space: the posterior sds of the logits at test
inputs, which every copy shares. The reference is TFP's NUTS on the full
data; the samplers get minibatches of 10 of the 100 examples (``H = 8``,
105 weights). `benchmarks.minibatch_bias` uses a wider one, ``H = 20``
(501 weights), on 500 examples in minibatches of 50.
"""

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa

HIDDEN = 8


def shapes(hidden=HIDDEN):
  """The weights' shapes of a 2-`hidden`-`hidden`-1 network."""
  return [(2, hidden), (hidden,), (hidden, hidden), (hidden,), (hidden, 1),
          (1,)]


def size(hidden=HIDDEN):
  """The number of weights of a 2-`hidden`-`hidden`-1 network."""
  return sum(int(np.prod(s)) for s in shapes(hidden))


SIZE = size()


def moons(n, seed):
  """``n`` points of two interleaved, noisy half circles and their 0/1 labels."""
  rng = np.random.default_rng(seed)
  t = rng.uniform(0., np.pi, n)
  label = rng.integers(0, 2, n)
  x = np.where(label[:, None] == 0,
               np.stack([np.cos(t), np.sin(t)], 1),
               np.stack([1. - np.cos(t), 0.5 - np.sin(t)], 1))
  x = x + 0.25 * rng.normal(size=x.shape) - [0.5, 0.25]
  return x.astype(np.float32), label.astype(np.float32)


def logits(w, x, hidden=HIDDEN):
  """``[chains..., n]`` logits of flat weights ``w`` (``[chains..., size(hidden)]``) at inputs ``x``."""
  batch = tf.shape(w)[:-1]
  parts = shapes(hidden)
  p = [tf.reshape(part, tf.concat([batch, s], 0)) for part, s in zip(
      tf.split(w, [int(np.prod(s)) for s in parts], axis=-1), parts)]
  h = tf.tanh(tf.einsum('nd,...dh->...nh', x, p[0]) + p[1][..., None, :])
  h = tf.tanh(tf.einsum('...nd,...dh->...nh', h, p[2]) + p[3][..., None, :])
  return tf.einsum('...nd,...dh->...nh', h, p[4])[..., 0] + p[5]


def _log_likelihood(parts, batch, hidden=HIDDEN):
  f = logits(parts[0], batch[0], hidden)
  return -tf.nn.sigmoid_cross_entropy_with_logits(
      labels=tf.broadcast_to(batch[1], tf.shape(f)), logits=f)


def _log_prior(parts):
  return -0.5 * tf.reduce_sum(parts[0] ** 2, -1)


class Target(object):
  """The data, the samplers' minibatch target, NUTS's full one, and the function-space projection."""

  def __init__(self, n=100, test=50, batch_size=10, hidden=HIDDEN,
               input_scales=(1., 1.)):
    x, y = moons(n, 0)
    x = x * np.asarray(input_scales, np.float32)  # Badly scaled: (30, 1/30).
    self.hidden = hidden
    self.batch_size = batch_size
    self.size = size(hidden)
    self.data = (tf.constant(x), tf.constant(y))
    self.test_inputs = tf.constant(
        moons(test, 1)[0] * np.asarray(input_scales, np.float32))
    self._log_likelihood = (
        lambda parts, batch: _log_likelihood(parts, batch, hidden))
    self.minibatch = tfa.minibatch_log_prob(self._log_likelihood, self.data,
                                            batch_size,
                                            log_prior_fn=_log_prior)

  def log_prob(self, w):
    return (tf.reduce_sum(self._log_likelihood([w], self.data), -1)
            + _log_prior([w]))

  def init(self, chains, seed):
    return tf.random.stateless_normal([chains, self.size],
                                      seed=(seed, 7)) * 0.5

  def logits(self, w):
    """``[chains..., test]`` logits of weights ``w`` at the test inputs, as a `Tensor`."""
    return logits(w, self.test_inputs, self.hidden)

  def project(self, samples):
    """``[draws, chains, test]`` logits at the test inputs."""
    return self.logits(tf.convert_to_tensor(samples)).numpy()

  def nuts(self, chains, draws, seed=1, burnin=1000):
    """NUTS draws ``[draws, chains, size]`` on all the data (step adapted over 80% of `burnin`)."""
    kernel = tfp.mcmc.DualAveragingStepSizeAdaptation(
        tfp.mcmc.NoUTurnSampler(self.log_prob, 0.05, max_tree_depth=8),
        int(0.8 * burnin))
    init = self.init(chains, seed)

    @tf.function(jit_compile=True, autograph=False)
    def run():
      return tfp.mcmc.sample_chain(draws, init, kernel=kernel,
                                   num_burnin_steps=burnin, trace_fn=None,
                                   seed=(seed, 9))
    return run()
