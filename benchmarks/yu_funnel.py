"""Yu et al. (2023) §4.2 / App. A.4: the 2-D funnel with noisy gradients, four metrics ± corrected Γ.

Target ``N(x | 0, sp(v)) N(v | 0, σ²)`` with ``sp(v) = log(1 + e^v)`` taken as
the variance of ``x`` and ``σ = 3`` (Neal's funnel scale; the paper does not
state σ). Every gradient is corrupted by N(0, 1) noise, as in the paper.
Hyperparameters are the paper's (App. A.4): identity h = 1e-3; RMSprop
h = 2.5e-3, λ = 0.995, ε = 0; Monge h = 3e-3, α² = 0.1, λ = 0.7, fallback to
the identity above a preconditioned-gradient norm of 1000; Shampoo h = 3e-3,
λ = 0.9995, ε = 1e-6, update interval 1. Each adaptive metric runs as in the
paper (Γ dropped) and corrected. 2e6 samples = 100 chains × 20,000 steps
(full); the table gives the Wasserstein-1 and Kolmogorov–Smirnov distances
of the v-marginal to N(0, σ²); the PNG is a scatter plot like their Fig. 2.

    python -m benchmarks.yu_funnel [--quick]
"""

import os

import numpy as np
import scipy.stats
import tensorflow as tf

import tfp_adaptive as tfa
from benchmarks import common

SIGMA = 3.


def funnel_log_prob(theta):
  x, v = theta[..., 0], theta[..., 1]
  var = tf.math.softplus(v)
  return (-0.5 * x ** 2 / var - 0.5 * tf.math.log(var)
          - 0.5 * (v / SIGMA) ** 2)


class NoisyGradientFunnel(object):
  """Funnel log-density whose gradient gets N(0, 1) noise from each step's seed."""

  needs_seed = True

  def __call__(self, theta, seed=None):
    lp = funnel_log_prob(theta)
    if seed is None:
      return lp
    xi = tf.random.stateless_normal(tf.shape(theta), seed, dtype=theta.dtype)
    return lp + tf.reduce_sum(xi * (theta - tf.stop_gradient(theta)), -1)


def samplers():
  f = NoisyGradientFunnel()
  out = [('Identity (SGLD)', tfa.mcmc.SGLD(f, 1e-3))]
  for mode in ('none', 'corrected'):
    out += [
        ('RMSprop, gamma=%s' % mode,
         tfa.mcmc.PSGLD(f, 2.5e-3, 0.995, 0., gamma=mode)),
        ('Monge, gamma=%s' % mode,
         tfa.mcmc.MongeSGRLD(f, 3e-3, 0.1, 0.7, 1000., gamma=mode)),
        ('Shampoo, gamma=%s' % mode,
         tfa.mcmc.ShampooSGRLD(f, 3e-3, 0.9995, 1e-6, 1, gamma=mode)),
    ]
  return out


def w1_to_normal(v):
  """Wasserstein-1 distance of the empirical law of `v` to N(0, σ²)."""
  v = np.sort(v)
  grid = np.linspace(-5 * SIGMA, 5 * SIGMA, 20001)
  emp = np.searchsorted(v, grid, side='right') / len(v)
  gap = np.abs(emp - scipy.stats.norm.cdf(grid, 0., SIGMA))
  return float(np.sum(0.5 * (gap[1:] + gap[:-1]) * np.diff(grid)))


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  chains, steps = (20, 500) if args.quick else (100, 20000)
  init = tf.zeros([chains, 2])
  rows, scatter = [], {}
  cases = samplers()
  for name, kernel in cases[:2] if args.quick else cases:  # quick: CI smoke.
    samples, _, results = tfa.mcmc.sample(
        kernel, init, steps, num_burnin_steps=steps // 10, seed=(4, 2),
        chunk_size=steps // 4, progress=True)
    s = samples.numpy().reshape(-1, 2)
    bad = int(np.sum(results.num_nonfinite))
    s = s[np.all(np.isfinite(s), axis=1)]
    v = s[:, 1]
    rows.append([name, len(s), '%.3f' % w1_to_normal(v),
                 '%.3f' % scipy.stats.kstest(v / SIGMA, 'norm').statistic,
                 '%.2f' % v.min(), bad])
    pick = np.random.default_rng(0).choice(len(s), 1000, replace=False)
    scatter[name] = s[pick]
  common.write_table(
      os.path.join(out, 'funnel.md'),
      'Funnel, v-marginal vs N(0, %g²), %d samples per sampler (%s)'
      % (SIGMA, chains * steps, 'quick' if args.quick else 'full'),
      ['sampler', 'samples', 'W1', 'KS', 'min v', 'non-finite steps'], rows,
      'Command: `python -m benchmarks.yu_funnel%s`. Exact draws would give '
      'W1 ≈ KS ≈ 0 up to Monte Carlo error of the correlated chains.'
      % (' --quick' if args.quick else ''))
  _plot(scatter, os.path.join(out, 'funnel.png'))


def _plot(scatter, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, len(scatter), figsize=(2.6 * len(scatter), 3),
                           sharey=True, squeeze=False)
  axes = axes[0]
  rng = np.random.default_rng(1)
  v = rng.normal(0., SIGMA, 1000)
  x = rng.normal(0., np.sqrt(np.log1p(np.exp(v))))
  for ax, (name, s) in zip(axes, scatter.items()):
    ax.scatter(x, v, s=2, c='lightgray', label='exact')
    ax.scatter(s[:, 0], s[:, 1], s=2, c='tab:orange', label='sampler')
    ax.set_title(name, fontsize=7)
    ax.set_xlim(-8, 8)
  axes[0].set_ylabel('v')
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


if __name__ == '__main__':
  main()
