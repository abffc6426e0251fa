"""Random numbers for the samplers: stateless; Threefry under XLA, else Philox.

Under XLA, float32 normals are built here rather than taken from TF:
``sqrt(2) erfinv(u)``, ``u ~ U(-1, 1)``, with ``w = -log((1-u)(1+u))``,
Giles' (2011) single-precision polynomial in ``w`` for ``w < 5`` (99.7% of
the draws) and, for the tails, a polynomial in ``w`` fitted here, which
needs no square root. The logarithm is taken from the float's exponent and
a polynomial in its mantissa (`log_float32`): its argument is a normal
float in (0, 1], so none of a general ``log``'s special cases arise. XLA's
own normal is the same construction through ``log1p``, which its CPU
backend does not vectorise: ours draws float32 normals several times faster
there (`benchmarks/noise_draw.py` measures both and tests their law), and
the injected noise is the largest part of a Langevin step. Other dtypes use
TF's normal.
"""

import math

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_adaptive import _compat

__all__ = ['NOISE_KINDS', 'algorithm', 'draw', 'draw_signs', 'erfinv_float32',
           'log_float32', 'normal', 'normal_signs', 'rademacher', 'signs']

NOISE_KINDS = ('gaussian', 'rademacher')

# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011),
# single precision, central branch (w < 5) in w - 2.5; coefficients from the
# highest degree down.
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06,
                   -4.39150654e-06, 0.00021858087, -0.00125372503,
                   -0.00417768164, 0.246640727, 1.50140941)
# Tail branch (5 <= w <= 16.7; float32 uniforms reach w = 16.6):
# erfinv(x)/x as a polynomial in t = (w - 10.85)/5.85, a weighted
# least-squares fit in float64 on 6000 Chebyshev nodes (largest relative
# error 6e-8), highest degree first.
_ERFINV_TAIL_CENTRE, _ERFINV_TAIL_HALF_WIDTH = 10.85, 5.85
_ERFINV_TAIL = (-2.773507951e-04, 5.517147502e-04, -2.289232149e-04,
                -3.668327194e-04, 2.044638645e-03, -8.229658497e-03,
                2.907835124e-02, -1.165208213e-01, 8.930657625e-01,
                3.128060712e+00)
# log(1 + f) = f P(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1]: least squares
# in float64 on 4000 Chebyshev nodes (largest error 4e-8), highest first.
_LOG1P_OVER_F = (-9.913793231e-02, 1.633875725e-01, -1.736319189e-01,
                 1.988533717e-01, -2.495777519e-01, 3.333568890e-01,
                 -5.000069704e-01, 9.999998474e-01)
_SQRT_HALF_BITS = 0x3f3504f3  # float32 sqrt(1/2).


def algorithm():
  """The stateless RNG algorithm for the graph being built.

  Under XLA on CPU, Threefry draws faster than Philox, and TF's default
  algorithm is much slower than both (`benchmarks/speed.py` measures the
  draw). TF's non-XLA CPU kernels only implement Philox, so eager and
  plain `tf.function` code uses Philox. A seeded chain is therefore
  reproducible within one mode (compiled or not), not across them, as with
  TF's own XLA and non-XLA kernels.
  """
  return 'threefry' if _compat.in_xla_context() else 'philox'


_PHILOX = 1  # `tf.random.Algorithm.PHILOX`, as the raw ops take it.


def _philox_key_counter(seed):
  """Philox's key and counter for a ``[2]`` seed, as TF's stateless ops make them.

  TF's Python wrappers build the seed's scrambling out of about fifty graph
  ops per draw; the `StatelessRandomGetKeyCounter` op does the same
  scrambling in one on CPU and GPU (whose default algorithm is Philox), so
  the draws are the same and a step's graph is smaller and faster to trace.
  """
  return tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)


def _shape(p):
  return p.shape if p.shape.is_fully_defined() else tf.shape(p)


def philox_normal(shape, seed, dtype):
  """``tf.random.stateless_normal(shape, seed, dtype=dtype, alg='philox')``, same draws."""
  key, counter = _philox_key_counter(seed)
  return tf.raw_ops.StatelessRandomNormalV2(shape=shape, key=key,
                                            counter=counter, alg=_PHILOX,
                                            dtype=dtype)


def philox_uniform_int(shape, seed, minval, maxval, dtype=tf.int32):
  """``tf.random.stateless_uniform(shape, seed, minval, maxval, dtype, alg='philox')``
  for integer `dtype`, same draws; ``minval = maxval = None``: all of `dtype`'s values."""
  key, counter = _philox_key_counter(seed)
  if minval is None:
    return tf.raw_ops.StatelessRandomUniformFullIntV2(
        shape=shape, key=key, counter=counter, alg=_PHILOX, dtype=dtype)
  return tf.raw_ops.StatelessRandomUniformIntV2(
      shape=shape, key=key, counter=counter, alg=_PHILOX,
      minval=tf.constant(minval, dtype), maxval=tf.constant(maxval, dtype))


def _horner(coefficients, x):
  out = coefficients[0]
  for c in coefficients[1:]:
    out = c + out * x
  return out


def log_float32(y):
  """``log(y)`` for positive normal float32 `y`, within two float32 ulps.

  ``y = 2^e m`` with ``m`` in [sqrt(1/2), sqrt(2)) read from the float's
  bits, then ``log(y) = e log 2 + log(m)`` with ``log(m)`` a polynomial in
  ``m - 1``. No branch for zero, negatives, infinities or subnormals (their
  results are meaningless): the noise draw's arguments are never those.
  """
  bits = tf.bitcast(y, tf.int32) - _SQRT_HALF_BITS
  exponent = tf.bitwise.right_shift(bits, 23)  # Arithmetic: floor(bits / 2^23).
  mantissa = tf.bitcast(tf.bitwise.bitwise_and(bits, 0x7fffff) +
                        _SQRT_HALF_BITS, tf.float32)
  f = mantissa - 1.
  return tf.cast(exponent, tf.float32) * math.log(2.) + f * _horner(
      _LOG1P_OVER_F, f)


def erfinv_float32(x):
  """``erfinv(x)`` for float32 ``x`` in (-1, 1), relative error ~3e-7.

  `x` must keep ``(1-x)(1+x)`` a normal float (``|x| <= 1 - 2^-24``, as
  every float32 uniform draw does).
  """
  w = -log_float32((1. - x) * (1. + x))
  central = _horner(_ERFINV_CENTRAL, w - 2.5)
  tail = _horner(_ERFINV_TAIL, (w - _ERFINV_TAIL_CENTRE) *
                 (1. / _ERFINV_TAIL_HALF_WIDTH))
  return tf.where(w < 5., central, tail) * x


def _symmetric_uniform(shape, seed):
  """``U(-1, 1)`` without -1 (``erfinv(-1) = -inf``), Threefry, float32."""
  low = np.nextafter(np.float32(-1.), np.float32(0.))
  return tf.random.stateless_uniform(shape, seed, minval=low, maxval=1.,
                                     dtype=tf.float32, alg='threefry')


def _sources(parts, seed):
  """The random draw behind `normal`, per part, one split seed per part.

  ``(u, True)``: the uniform of the erfinv path (float32 under XLA);
  ``(ξ, False)``: TF's own normal (other dtypes, or not compiled).
  """
  seeds = tfp.random.split_seed(seed, n=len(parts))
  alg = algorithm()
  out = []
  for p, s in zip(parts, seeds):
    if alg == 'threefry' and p.dtype == tf.float32:
      out.append((_symmetric_uniform(tf.shape(p), s), True))
    else:
      out.append((philox_normal(_shape(p), s, p.dtype) if alg == 'philox'
                  else tf.random.stateless_normal(tf.shape(p), seed=s,
                                                  dtype=p.dtype, alg=alg),
                  False))
  return out


def normal(parts, seed):
  """Standard normal noise shaped like each part, one split seed per part."""
  return [math.sqrt(2.) * erfinv_float32(x) if uniform else x
          for x, uniform in _sources(parts, seed)]


def normal_signs(parts, seed):
  """``signs(normal(parts, seed))``, without the normals where it can.

  Under XLA (float32) the sign of ``sqrt(2) erfinv(u)`` is that of ``u``, so
  only the uniform draw is shared with `normal`: XLA computes it once and
  keeps the ``erfinv`` fused into the noise's own consumer.
  """
  return signs([x for x, _ in _sources(parts, seed)])


def rademacher(parts, seed):
  """±1 shaped like each part: the sign bit of one random byte each (one split seed per part).

  Each part draws ``ceil(n/4)`` random 32-bit words, read as ``n`` bytes;
  a byte's sign gives the entry's sign. That is a quarter of the random
  words of a normal draw, and unlike unpacking all 32 bits of a word
  (shifts and masks per entry, which XLA's CPU backend does not vectorise
  and which cost as much as the normal draw), the reading is a
  reinterpretation and one comparison per entry. Used for the Hutchinson
  probe and the two-point noise of ``noise='rademacher'``.
  """
  seeds = tfp.random.split_seed(seed, n=len(parts))
  out, alg = [], algorithm()
  for p, s in zip(parts, seeds):
    n = tf.size(p)
    count = [(n + 3) // 4]
    words = (philox_uniform_int(count, s, None, None) if alg == 'philox'
             else tf.random.stateless_uniform(count, seed=s, minval=None,
                                              maxval=None, dtype=tf.int32,
                                              alg=alg))
    signed_bytes = tf.reshape(tf.bitcast(words, tf.int8), [-1])[:n]
    ones = tf.ones([], p.dtype)
    out.append(tf.reshape(tf.where(signed_bytes < 0, -ones, ones),
                          tf.shape(p)))
  return out


def draw(parts, seed, kind='gaussian'):
  """The injected noise ``ξ`` of a step: standard normal, or ±1 (`NOISE_KINDS`).

  Both have mean 0 and covariance ``I``; the two-point law matches the
  normal's moments up to the third, which is what a weak order-1 scheme
  needs (Kloeden & Platen 1992, Sec. 14.1).
  """
  return rademacher(parts, seed) if kind == 'rademacher' else normal(parts,
                                                                       seed)


def draw_signs(parts, seed, kind='gaussian'):
  """``signs(draw(parts, seed, kind))``: the Hutchinson probe of a step."""
  return rademacher(parts, seed) if kind == 'rademacher' else normal_signs(
      parts, seed)


def signs(noise):
  """``±1`` with the signs of each part of `noise` (``+1`` at exact zeros).

  For standard normal `noise` these are Rademacher probes independent of
  ``|noise|``: `tfp_adaptive.core.gamma` uses the signs of a step's own noise
  as its Hutchinson probe.
  """
  return [tf.where(x < 0, -tf.ones_like(x), tf.ones_like(x)) for x in noise]
