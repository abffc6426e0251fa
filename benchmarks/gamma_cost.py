"""Cost of the corrected Γ against the number of parameters D (one run, side by side).

For MLPs 784-h-h-10 (batch 100) of growing width, the time of one
XLA-compiled kernel step with ``gamma='corrected'`` (Hutchinson, one
forward-over-reverse pass) over the same step with ``gamma='none'``, for the
diagonal (PSGLD), layer-wise (Wenzel) and rank-one (Monge) metrics. Writes
``gamma_cost.md`` and ``gamma_cost.png``.

Then the original code against ours: seconds per pSGLD step carrying Γ
('original') on MLPs 4-h-1 (batch 100, D = 6h + 1 from 13 up), for TFP's
``tfp.math.diag_jacobian`` (graph mode, the Γ of TFP's pSGLD optimizer with
the gradient taken inside: one backward pass per coordinate) against our
exact (D forward-over-reverse passes in one XLA loop) and Hutchinson (one
pass) estimators. Each method stops once a step takes more than 3 s. Writes
``gamma_cost_tfp.md`` and ``gamma_cost_tfp.png`` (log-log).

    python -m benchmarks.gamma_cost [--quick]

``--quick`` runs small sizes as graphs, without XLA: a check that every
piece runs (XLA's compile would be most of its time), not a timing.
"""

import os
import time

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from benchmarks import common
from benchmarks import speed

SAMPLERS = {
    'PSGLD': lambda lp, mode: tfa.mcmc.PSGLD(lp, 1e-6, 0.99, 1e-8, gamma=mode),
    'WenzelSGLD': lambda lp, mode: tfa.mcmc.WenzelSGLD(lp, 1e-6, 0.99,
                                                       gamma=mode),
    'MongeSGRLD': lambda lp, mode: tfa.mcmc.MongeSGRLD(lp, 1e-6, 1e-3, 0.99,
                                                       gamma=mode),
}


def num_params(hidden):
  return 784 * hidden + hidden + hidden * hidden + hidden + hidden * 10 + 10


DECAY, BIAS, BUDGET = 0.99, 1e-8, 3.


def _small_mlp(hidden, seed=0):
  """Flat-parameter log posterior of an MLP 4-hidden-1 on 100 random points."""
  rng = np.random.RandomState(seed)
  x, y = rng.randn(100, 4), rng.randn(100)
  shapes = [(4, hidden), (hidden,), (hidden, 1), (1,)]
  sizes = [int(np.prod(sh)) for sh in shapes]

  def log_prob(theta):
    ps = [tf.reshape(p, sh) for p, sh in
          zip(tf.split(theta, sizes, axis=-1), shapes)]
    h = tf.tanh(tf.matmul(tf.constant(x, theta.dtype), ps[0]) + ps[1])
    f = tf.matmul(h, ps[2])[:, 0] + ps[3]
    return (-0.5 * tf.reduce_sum((tf.constant(y, theta.dtype) - f) ** 2)
            - 0.5 * tf.reduce_sum(theta ** 2))
  return log_prob, rng.randn(sum(sizes)) * 0.3


def _time(fn, budget):
  fn()
  n, t0 = 0, time.time()
  while n < 2 or (time.time() - t0 < budget and n < 50):
    fn()
    n += 1
  return (time.time() - t0) / n


def tfp_step_seconds(log_prob, theta0, budget):
  """Gradient, RMSprop preconditioner and TFP's diag_jacobian Γ (graph)."""
  with tf.Graph().as_default():
    th = tf.constant(theta0, tf.float32)
    grad = tf.gradients(-log_prob(th), [th])[0]
    mom = DECAY * tf.ones_like(th) + (1. - DECAY) * tf.square(grad)
    precond = tf.math.rsqrt(mom + BIAS)
    _, jac = tfp.math.diag_jacobian(xs=th, ys=precond)
    with tf.compat.v1.Session() as sess:
      return _time(lambda: sess.run([grad, jac[0]]), budget)


def ours_step_seconds(log_prob, theta0, estimator, budget, jit_compile=True):
  kernel = tfa.mcmc.PSGLD(log_prob, 1e-6, DECAY, BIAS, gamma='original',
                          gamma_estimator=estimator)
  state = tf.constant(theta0, tf.float32)
  results = kernel.bootstrap_results(state)
  step = tf.function(lambda s, r: kernel.one_step(s, r, seed=(1, 2)),
                     jit_compile=jit_compile)
  return _time(lambda: float(step(state, results)[0][0]), budget)


def tfp_versus_ours(quick, out):
  widths = [2] if quick else [2, 8, 32, 128, 512, 2048, 8192]
  methods = {'TFP diag_jacobian': tfp_step_seconds,
             'ours exact': lambda *a: ours_step_seconds(
                 *a[:2], 'exact', a[2], jit_compile=not quick),
             'ours Hutchinson': lambda *a: ours_step_seconds(
                 *a[:2], 'hutchinson', a[2], jit_compile=not quick)}
  budget = 0.1 if quick else 1.
  times = {m: [] for m in methods}
  rows = []
  for h in widths:
    log_prob, theta0 = _small_mlp(h)
    row = [6 * h + 1]
    for name, fn in methods.items():
      done = times[name]
      if done and done[-1][1] > BUDGET:
        row.append('skipped')
        continue
      secs = fn(log_prob, theta0, budget)
      done.append((6 * h + 1, secs))
      row.append('%.3g s' % secs)
      print('D=%d %s: %.3g s/step' % (6 * h + 1, name, secs))
    rows.append(row)
  common.write_table(
      os.path.join(out, 'gamma_cost_tfp.md'),
      'Seconds per pSGLD step with Γ: TFP diag_jacobian vs ours (%s)'
      % ('quick' if quick else 'full'),
      ['D'] + list(methods), rows,
      'MLP 4-h-1, batch 100, float32; a method is skipped once a step takes '
      'over %g s. Command: `python -m benchmarks.gamma_cost%s`.'
      % (BUDGET, ' --quick' if quick else ''))
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for name, pts in times.items():
    ax.loglog(*zip(*pts), 'o-', label=name)
  ax.set_xlabel('number of parameters D')
  ax.set_ylabel('seconds per step with Γ')
  ax.legend()
  fig.tight_layout()
  fig.savefig(os.path.join(out, 'gamma_cost_tfp.png'), dpi=120)
  plt.close(fig)


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  tfp_versus_ours(args.quick, out)
  widths = [4] if args.quick else [4, 16, 64, 256, 1024]
  repeats = 3 if args.quick else 10  # Steps per compiled loop.
  rows = []
  samplers = dict(list(SAMPLERS.items())[:1]) if args.quick else SAMPLERS
  ratios = {name: [] for name in samplers}
  for h in widths:
    for name, make in samplers.items():
      t = speed.mlp_step_times(repeats, hidden=h, make_kernel=make,
                               jit_compile=not args.quick)
      ratios[name].append(t['corrected'] / t['none'])
      rows.append([name, h, num_params(h), '%.2f ms' % (1e3 * t['none']),
                   '%.2f ms' % (1e3 * t['corrected']),
                   '%.2f' % ratios[name][-1]])
  common.write_table(
      os.path.join(out, 'gamma_cost.md'),
      'Γ cost vs D (%s)' % ('quick' if args.quick else 'full'),
      ['sampler', 'width', 'D', 'none', 'corrected', 'ratio'], rows,
      'Command: `python -m benchmarks.gamma_cost%s`.' %
      (' --quick' if args.quick else ''))
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for name, r in ratios.items():
    ax.plot([num_params(h) for h in widths], r, 'o-', label=name)
  ax.set_xscale('log')
  ax.set_xlabel('number of parameters D')
  ax.set_ylabel('step time, corrected / none')
  ax.axhline(1.5, color='gray', ls=':', label='1.5× target')
  ax.legend()
  fig.tight_layout()
  fig.savefig(os.path.join(out, 'gamma_cost.png'), dpi=120)


if __name__ == '__main__':
  main()
