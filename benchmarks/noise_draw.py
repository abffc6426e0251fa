"""The cost of the injected noise: candidate Gaussian draws, timed side by side and tested.

Each candidate draws the ``D`` float32 standard normals of the MLP
784-400-400-10 (one draw per weight tensor, as the samplers draw) from a
stateless seed inside one XLA-compiled loop (the draw's result is consumed,
so it is not pruned); the times are the best of several interleaved
rounds, in one run. One more row draws the same ``D`` numbers as a single
1-D tensor: XLA's CPU backend runs that layout several times slower.
Each candidate's law is then tested on ``10⁷`` draws: mean, variance and
kurtosis against their standard errors, the two-sided tail mass beyond 4
and 5 standard deviations against its Poisson error, and the
Kolmogorov–Smirnov distance against its 0.1% critical value. A candidate
that fails any test cannot be the samplers' noise.

Candidates:

- ``tf.random.stateless_normal`` (Threefry), TensorFlow's own;
- the project's ``sqrt(2) erfinv(u)`` (`tfp_adaptive.core.noise.normal`);
- Box–Muller on pairs of counter-based uniforms (one log, one square root
  and one sine/cosine pair for two normals);
- the erfinv draw from 16-bit uniforms (half the random bits), whose
  largest value is about 4.2 standard deviations;
- SGLD's update with the draw fused in (``θ + a g + b ξ`` in one compiled
  step) against the update alone and the draw alone.

    python -m benchmarks.noise_draw [--quick]
"""

import math
import os
import time

import numpy as np
import scipy.stats
import tensorflow as tf

from benchmarks import common
from tfp_adaptive.core import noise

SHAPES = [[784, 400], [400], [400, 400], [400], [400, 10], [10]]  # The MLP.
D = sum(int(np.prod(s)) for s in SHAPES)


def box_muller(shape, seed):
  """Standard normals from Threefry uniforms, two per pair."""
  n = int(np.prod(shape))
  half = (n + 1) // 2
  u = tf.random.stateless_uniform([2, half], seed, dtype=tf.float32,
                                  alg='threefry')
  u1 = 1. - u[0]  # (0, 1]: log(u1) is finite.
  r = tf.sqrt(-2. * tf.math.log(u1))
  angle = (2. * math.pi) * u[1]
  z = tf.concat([r * tf.cos(angle), r * tf.sin(angle)], 0)[:n]
  return tf.reshape(z, shape)


def erfinv_16bit(shape, seed):
  """``sqrt(2) erfinv(u)`` with ``u`` on a grid of 2¹⁶ points in (-1, 1)."""
  n = int(np.prod(shape))
  words = tf.random.stateless_uniform([(n + 1) // 2], seed, minval=None,
                                      maxval=None, dtype=tf.int32,
                                      alg='threefry')
  halves = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:n]
  u = (tf.cast(halves, tf.float32) + 0.5) * (2. / 65536.) - 1.
  return tf.reshape(math.sqrt(2.) * noise.erfinv_float32(u), shape)


CANDIDATES = {
    'tf.random.stateless_normal (Threefry)': lambda shape, seed:
        tf.random.stateless_normal(shape, seed, alg='threefry'),
    'erfinv of 32-bit uniforms (shipped)': lambda shape, seed:
        noise.normal([tf.zeros(shape)], seed)[0],
    'Box–Muller': box_muller,
    'erfinv of 16-bit uniforms': erfinv_16bit,
}


def _loop(draw, steps, shapes=SHAPES):
  """A compiled loop of `steps` draws whose sums are kept (nothing is pruned)."""
  @tf.function(jit_compile=True)
  def run(seed):
    def body(i, acc):
      seeds = tf.random.experimental.stateless_split(tf.stack([seed, i]),
                                                     len(shapes))
      return i + 1, [a + draw(s, seeds[k])
                     for k, (a, s) in enumerate(zip(acc, shapes))]
    return tf.while_loop(lambda i, _: i < steps, body,
                         (tf.constant(0), [tf.zeros(s) for s in shapes]))[1]
  return run


def _sgld_loop(steps, with_noise):
  """SGLD's elementwise update of the MLP's tensors, with or without its draw."""
  @tf.function(jit_compile=True)
  def run(seed):
    def body(i, theta):
      step = [t - 1e-4 * t * t for t in theta]  # A gradient-like term.
      if with_noise:
        z = noise.normal(theta, tf.stack([seed, i]))
        step = [s + 1e-2 * x for s, x in zip(step, z)]
      return i + 1, step
    return tf.while_loop(lambda i, _: i < steps, body,
                         (tf.constant(0), [tf.ones(s) for s in SHAPES]))[1]
  return run


FLAT = 'erfinv of 32-bit uniforms, one 1-D tensor of D'


def time_all(steps, rounds):
  """``{name: best seconds per draw}``, rounds interleaved."""
  fns = {name: _loop(draw, steps) for name, draw in CANDIDATES.items()}
  fns[FLAT] = _loop(CANDIDATES['erfinv of 32-bit uniforms (shipped)'], steps,
                    [[D]])
  fns['SGLD update, no draw'] = _sgld_loop(steps, False)
  fns['SGLD update with the draw fused'] = _sgld_loop(steps, True)
  for fn in fns.values():  # Compile.
    fn(tf.constant(0))[0].numpy()
  best = {name: np.inf for name in fns}
  for r in range(rounds):
    for name, fn in fns.items():
      start = time.perf_counter()
      fn(tf.constant(r + 1))[0].numpy()
      best[name] = min(best[name], (time.perf_counter() - start) / steps)
  return best


def law_tests(draw, n):
  """``(passed, details)``: moments, tails and KS distance of `n` draws."""
  @tf.function(jit_compile=True)
  def sample(seed):
    return draw([n], seed)
  z = sample(tf.constant([3, 7])).numpy().astype(np.float64)
  failures = []
  mean, var = z.mean(), z.var()
  kurt = np.mean(z ** 4) / var ** 2
  checks = [('mean', mean, 0., 1. / math.sqrt(n)),
            ('variance', var, 1., math.sqrt(2. / n)),
            ('kurtosis', kurt, 3., math.sqrt(96. / n))]
  for k in (4., 5.):
    expected = 2. * scipy.stats.norm.sf(k) * n
    checks.append(('count |z| > %g' % k, float(np.sum(np.abs(z) > k)),
                   expected, max(math.sqrt(expected), 1.)))
  details = []
  for name, value, expected, se in checks:
    z_score = (value - expected) / se
    details.append('%s %.4g (%+.1f se)' % (name, value, z_score))
    if abs(z_score) > 5.:
      failures.append(name)
  ks = scipy.stats.kstest(z[:min(n, 2000000)], 'norm').statistic
  critical = 1.95 / math.sqrt(min(n, 2000000))  # 0.1% level.
  details.append('KS %.2g (critical %.2g)' % (ks, critical))
  if ks > critical:
    failures.append('KS')
  return not failures, '; '.join(details)


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  steps, rounds, n = (20, 2, 200000) if args.quick else (200, 5, 10000000)
  best = time_all(steps, rounds)
  base = best['tf.random.stateless_normal (Threefry)']
  rows = []
  for name, draw in CANDIDATES.items():
    passed, details = law_tests(draw, n)
    rows.append([name, '%.3f ms' % (1e3 * best[name]),
                 '%.2f' % (best[name] / base), 'yes' if passed else
                 '**no**', details])
  rows.append([FLAT, '%.3f ms' % (1e3 * best[FLAT]),
               '%.2f' % (best[FLAT] / base), '', ''])
  update, fused = (best['SGLD update, no draw'],
                   best['SGLD update with the draw fused'])
  shipped = best['erfinv of 32-bit uniforms (shipped)']
  rows.append(['SGLD update, no draw', '%.3f ms' % (1e3 * update), '', '',
               ''])
  rows.append(['SGLD update with the draw fused',
               '%.3f ms' % (1e3 * fused), '',
               '', 'fused − update = %.3f ms, the draw alone %.3f ms'
               % (1e3 * (fused - update), 1e3 * shipped)])
  common.write_table(
      os.path.join(out, 'noise_draw.md'),
      'Gaussian noise draws, D = %d float32, XLA on CPU (%s)'
      % (D, 'quick' if args.quick else 'full'),
      ['draw', 'time per draw', '× TF\'s', 'law tests pass', 'tests (%d '
       'draws)' % n], rows,
      'Command: `python -m benchmarks.noise_draw%s`. Best of %d interleaved '
      'rounds of %d draws each; tests fail beyond 5 standard errors or the '
      'KS 0.1%% critical value.' % (' --quick' if args.quick else '', rounds,
                                    steps))


if __name__ == '__main__':
  main()
