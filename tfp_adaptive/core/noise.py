"""Random numbers for the samplers: stateless; Threefry under XLA, else Philox."""

import tensorflow as tf
import tensorflow_probability as tfp

try:  # Private, but the only way to ask whether we are being XLA-compiled.
  from tensorflow.python.ops import control_flow_util  # pylint: disable=g-direct-tensorflow-import
except ImportError:  # pragma: no cover
  control_flow_util = None

__all__ = ['algorithm', 'normal', 'rademacher']


def algorithm():
  """The stateless RNG algorithm for the graph being built.

  Under XLA, Threefry draws normals ~2.3x faster than Philox on CPU
  (`benchmarks/speed.py`: the injected noise is most of a 1-D step), and the
  TF default measured ~20x slower (STYLE.md). TF's non-XLA CPU kernels only
  implement Philox, so eager and plain `tf.function` code uses Philox. A
  seeded chain is therefore reproducible within one mode (compiled or not),
  not across them — as with TF's own XLA and non-XLA kernels.
  """
  if control_flow_util is not None:
    try:
      if control_flow_util.GraphOrParentsInXlaContext(
          tf.compat.v1.get_default_graph()):
        return 'threefry'
    except AttributeError:  # pragma: no cover
      pass
  return 'philox'


def normal(parts, seed):
  """Standard normal noise shaped like each part, one split seed per part."""
  seeds = tfp.random.split_seed(seed, n=len(parts))
  alg = algorithm()
  return [tf.random.stateless_normal(tf.shape(p), seed=s, dtype=p.dtype, alg=alg)
          for p, s in zip(parts, seeds)]


def rademacher(parts, seed):
  """±1 probes shaped like each part (Hutchinson estimator)."""
  seeds = tfp.random.split_seed(seed, n=len(parts))
  out, alg = [], algorithm()
  for p, s in zip(parts, seeds):
    bits = tf.random.stateless_uniform(tf.shape(p), seed=s, minval=0, maxval=2,
                                       dtype=tf.int32, alg=alg)
    out.append(tf.cast(2 * bits - 1, p.dtype))
  return out
