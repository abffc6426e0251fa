"""The samplers' random numbers: algorithm choice, the XLA normal, the probes."""

import numpy as np
import pytest
import scipy.special
import scipy.stats
import tensorflow as tf

from tfp_adaptive import core

noise = core.noise


def test_noise_algorithm_follows_xla_compilation():
  """Threefry inside XLA-compiled graphs (faster there), Philox elsewhere."""
  is_threefry = lambda: tf.constant(noise.algorithm() == 'threefry')
  assert not bool(is_threefry())
  assert not bool(tf.function(is_threefry)())
  assert bool(tf.function(is_threefry, jit_compile=True)())


@pytest.mark.parametrize('graph', [False, True])
@pytest.mark.parametrize('seed_dtype', [tf.int32, tf.int64])
def test_philox_draws_are_tfs_own(graph, seed_dtype):
  """The one-op Philox key gives TF's `alg='philox'` draws, bit for bit."""
  def both(seed):
    return [(noise.philox_normal([3, 5], seed, dtype),
             tf.random.stateless_normal([3, 5], seed, dtype=dtype,
                                        alg='philox'))
            for dtype in (tf.float16, tf.float32, tf.float64)] + [
                (noise.philox_uniform_int([9], seed, None, None),
                 tf.random.stateless_uniform([9], seed, minval=None,
                                             maxval=None, dtype=tf.int32,
                                             alg='philox')),
                (noise.philox_uniform_int([9], seed, 0, 100),
                 tf.random.stateless_uniform([9], seed, minval=0, maxval=100,
                                             dtype=tf.int32, alg='philox'))]
  fn = tf.function(both) if graph else both
  for seed in [(0, 1), (123, -5), (2**30, 7)]:
    for ours, tfs in fn(tf.constant(seed, seed_dtype)):
      np.testing.assert_array_equal(ours.numpy(), tfs.numpy())


@pytest.mark.parametrize('jit', [False, True])
def test_erfinv_float32_matches_scipy(jit):
  # Giles' single-precision bound is a few float32 ulps; both branches, the
  # seam at w = 5 and the extreme uniforms the normal draw can produce
  # (1 - 2^-24 and the draw's lowest value, just above -1) are covered.
  seam = np.sqrt(-np.expm1(-5.))
  lowest = np.nextafter(np.float32(-1.), np.float32(0.))
  x = np.concatenate([np.linspace(-1, 1, 200001)[1:-1],
                      1. - np.logspace(-7, -2, 50),
                      seam + np.linspace(-1e-5, 1e-5, 101),
                      [1. - 2.**-24, lowest]]).astype(np.float32)
  fn = tf.function(noise.erfinv_float32, jit_compile=jit)
  got = fn(tf.constant(x)).numpy()
  want = scipy.special.erfinv(x.astype(np.float64))
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_log_float32_matches_numpy_on_the_unit_interval():
  """The draw's logarithm: every binade the uniforms reach, and 1 itself."""
  rng = np.random.default_rng(0)
  y = np.concatenate([rng.random(10**6) * 2.**-k for k in range(0, 25, 3)]
                     + [[1., 2.**-23, np.float32(1.) - 2.**-24]])
  y = y[y >= 2.**-24].astype(np.float32)
  got = noise.log_float32(tf.constant(y)).numpy()
  # Within two float32 ulps of the result (and 1e-7 where it is near 0).
  np.testing.assert_allclose(got, np.log(y.astype(np.float64)), rtol=2.4e-7,
                             atol=1e-7)


@pytest.mark.slow
def test_xla_normal_is_standard_normal():
  n = 10**6
  draw = tf.function(lambda s: noise.normal([tf.zeros([n]), tf.zeros([n])], s),
                     jit_compile=True)
  a, b = [z.numpy() for z in draw(tf.constant([11, 3]))]
  for z in (a, b):
    assert np.all(np.isfinite(z))
    # Moments within 5 MC standard errors; KS against N(0, 1).
    assert abs(z.mean()) < 5 / np.sqrt(n)
    assert abs(z.var() - 1.) < 5 * np.sqrt(2. / n)
    assert abs(scipy.stats.skew(z)) < 5 * np.sqrt(6. / n)
    assert abs(scipy.stats.kurtosis(z)) < 5 * np.sqrt(24. / n)
    assert scipy.stats.kstest(z, 'norm').pvalue > 1e-3
  # The two parts get independent streams.
  assert abs(np.corrcoef(a, b)[0, 1]) < 5 / np.sqrt(n)


@pytest.mark.parametrize('jit', [False, True])
def test_rademacher_probes_are_fair_signs(jit):
  n = 10**6
  draw = tf.function(lambda s: noise.rademacher([tf.zeros([n]), tf.zeros([])],
                                                s), jit_compile=jit)
  z, scalar = [x.numpy() for x in draw(tf.constant([5, 9]))]
  assert set(np.unique(z)) == {-1., 1.} and scalar in (-1., 1.)
  assert abs(z.mean()) < 5 / np.sqrt(n)
  # Neighbours within a random word (lags 1-3), across words (4) and further.
  for lag in (1, 2, 3, 4, 32):
    assert abs(np.mean(z[lag:] * z[:-lag])) < 5 / np.sqrt(n), lag


@pytest.mark.parametrize('jit', [False, True])
@pytest.mark.parametrize('dtype', [tf.float32, tf.float64])
def test_normal_signs_are_the_signs_of_the_same_normal_draw(jit, dtype):
  """`normal_signs` skips the normals under XLA but must equal their signs."""
  parts = [tf.zeros([300, 7], dtype), tf.zeros([5], dtype), tf.zeros([], dtype)]
  both = tf.function(lambda s: (noise.normal(parts, s),
                                noise.normal_signs(parts, s)),
                     jit_compile=jit)
  xi, z = both(tf.constant([8, 1]))
  for x, sign in zip(xi, z):
    np.testing.assert_array_equal(sign.numpy(), np.where(x.numpy() < 0, -1, 1))
    assert sign.dtype == dtype


def test_signs_of_normal_noise_are_fair_and_independent_of_its_size():
  """The Hutchinson probe drawn from the noise: z = sign(ξ) ⟂ |ξ|."""
  n = 10**6
  draw = tf.function(lambda s: noise.normal([tf.zeros([n])], s),
                     jit_compile=True)
  xi = draw(tf.constant([3, 4]))
  z = noise.signs(xi)[0].numpy()
  xi = xi[0].numpy()
  assert set(np.unique(z)) == {-1., 1.}
  np.testing.assert_array_equal(z * xi, np.abs(xi))
  assert abs(z.mean()) < 5 / np.sqrt(n)
  assert abs(np.corrcoef(z, np.abs(xi))[0, 1]) < 5 / np.sqrt(n)
  assert abs(np.mean(z[1:] * z[:-1])) < 5 / np.sqrt(n)
