"""Random numbers for the samplers: stateless, Philox-based (fast under XLA on CPU)."""

import tensorflow as tf
import tensorflow_probability as tfp

__all__ = ['normal', 'rademacher']

# Under XLA on CPU the default stateless algorithm measured ~20x slower than
# Philox here (STYLE.md); Philox is also the algorithm of `tf.random.Generator`.
# Note: TF's XLA and non-XLA kernels turn the same Philox seed into different
# numbers, so a seeded chain is reproducible within one mode (compiled or
# not), not across them.
_ALG = 'philox'


def normal(parts, seed):
  """Standard normal noise shaped like each part, one split seed per part."""
  seeds = tfp.random.split_seed(seed, n=len(parts))
  return [tf.random.stateless_normal(tf.shape(p), seed=s, dtype=p.dtype, alg=_ALG)
          for p, s in zip(parts, seeds)]


def rademacher(parts, seed):
  """±1 probes shaped like each part (Hutchinson estimator)."""
  seeds = tfp.random.split_seed(seed, n=len(parts))
  out = []
  for p, s in zip(parts, seeds):
    bits = tf.random.stateless_uniform(tf.shape(p), seed=s, minval=0, maxval=2,
                                       dtype=tf.int32, alg=_ALG)
    out.append(tf.cast(2 * bits - 1, p.dtype))
  return out
