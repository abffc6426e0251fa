"""Rensmeyer & Niggemann (2025) Figures 1–2: stationary densities on N(0, 1), α = 0.9, λ = 0.1.

Every step of every chain is binned (width 0.1) in a streaming histogram inside
an XLA-compiled loop (`tfp_adaptive.mcmc.stationary_histogram`). Writes
`fig1_stationary.png` and `fig1_table.md` (TV distance of each histogram to its
predicted π and to the target, with the Monte Carlo error from 10 chain
groups).

Paper: 10^7 steps at h = 1e-4 per sampler (Fig. 1), corrected pSGLD 8·10^8
steps at h = 2.5e-6 (Fig. 2). Full mode runs them as many parallel chains
(chains × steps = the paper's count); --quick runs 1/100 of that.

    python -m benchmarks.rensmeyer_figures [--quick]
"""

import os
import time

import numpy as np
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive import diagnostics
from benchmarks import common

LAM = 0.1


_p = diagnostics.standard_normal


def cases():
  lp = lambda x: -0.5 * x ** 2
  a = 0.9
  return [
      # name, kernel(h), predicted density, paper's curve / comment
      ('pSGLD original, λ outside sqrt (paper curve, eq. 36)',
       lambda h: tfa.mcmc.PSGLD(lp, h, a, LAM, bias_outside_sqrt=True,
                                gamma='original'),
       diagnostics.predicted_density(
           'original', diagnostics.rmsprop_metric(LAM, True), a)),
      ('pSGLD original, TFP form diagonal_bias=1e-8 (authors\' notebook)',
       lambda h: tfa.mcmc.PSGLD(lp, h, a, 1e-8, gamma='original'),
       diagnostics.predicted_density(
           'original', diagnostics.rmsprop_metric(1e-8), a)),
      ('Monge α²=1, Γ dropped (eq. 38)',
       lambda h: tfa.mcmc.MongeSGRLD(lp, h, 1., a, gamma='none'),
       diagnostics.predicted_density('none', diagnostics.monge_metric(1.),
                                     a)),
      ('Shampoo, Γ dropped, ε=1e-8 (eq. 37)',
       lambda h: tfa.mcmc.ShampooSGRLD(lp, h, a, 1e-8, gamma='none'),
       diagnostics.predicted_density('none', diagnostics.rmsprop_metric(1e-8),
                                     a)),
      ('Adam-SGLD a=1, β=0.5 (eq. 39)',
       lambda h: tfa.mcmc.AdamSGLD(lp, h, a, 0.5, 1., LAM),
       lambda t: _p(t) * np.exp(-np.abs(t)) * (np.abs(t) + LAM) ** 0.1),
      ('pSGLD corrected (Alg. 1, λ²=0.01 inside)',
       lambda h: tfa.mcmc.PSGLD(lp, h, a, LAM ** 2, gamma='corrected'),
       _p),
      ('Monge corrected', lambda h: tfa.mcmc.MongeSGRLD(lp, h, 1., a), _p),
      ('Shampoo corrected, ε=0.01',
       lambda h: tfa.mcmc.ShampooSGRLD(lp, h, a, LAM ** 2), _p),
  ]


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  # Full: 100 chains x 1e5 steps = the paper's 1e7 steps per sampler, each
  # chain covering time 10 (h = 1e-4). Quick: 100 x 2000 steps at h = 1e-3.
  chains, groups = 100, 10
  steps, h = (2000, 1e-3) if args.quick else (100000, 1e-4)
  target = common.binned(_p)
  rows, hists = [], []
  for name, make, pred in cases():
    kernel = make(h)
    t0 = time.time()
    x0 = tf.random.stateless_normal([chains], seed=(0, 1))
    counts, outside, _, _ = tfa.mcmc.stationary_histogram(
        kernel, x0, steps, common.EDGES, seed=(2, 3),
        chunk_steps=max(steps // 10, 1), num_groups=groups, progress=True)
    secs = time.time() - t0
    freqs = counts / (counts.sum(1) + outside)[:, None]
    pooled = freqs.mean(0)
    se = freqs.std(0, ddof=1) / np.sqrt(groups)
    noise = 0.5 * np.sqrt(2 / np.pi) * se.sum()
    q = common.binned(pred)
    tv_pred = 0.5 * np.abs(pooled - q).sum()
    tv_target = 0.5 * np.abs(pooled - target).sum()
    rows.append([name, '%.4f' % tv_pred, '%.4f' % tv_target, '%.4f' % noise,
                 '%.2g' % (chains * steps / secs)])
    hists.append((name, pooled, q))
  common.write_table(
      os.path.join(out, 'fig1_table.md'),
      'Rensmeyer Fig. 1–2: stationary densities (h = %g, %d chains × %d '
      'steps)' % (h, chains, steps),
      ['sampler', 'TV to predicted π', 'TV to N(0,1)', 'MC noise (TV)',
       'chain-steps/s (incl. compile)'], rows,
      'Command: `python -m benchmarks.rensmeyer_figures%s`' %
      (' --quick' if args.quick else ''))
  _plot(hists, os.path.join(out, 'fig1_stationary.png'))


def _plot(hists, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  mids = 0.5 * (common.EDGES[1:] + common.EDGES[:-1])
  w = np.diff(common.EDGES)
  n = len(hists)
  fig, axes = plt.subplots(2, (n + 1) // 2, figsize=(4 * ((n + 1) // 2), 7),
                           sharey=True)
  target = common.binned(_p) / w
  for ax, (name, pooled, q) in zip(axes.ravel(), hists):
    ax.bar(mids, pooled / w, width=w, alpha=0.4, label='histogram π̂')
    ax.plot(mids, q / w, 'r-', label='predicted π')
    ax.plot(mids, target, 'k--', label='target N(0,1)')
    ax.set_title(name, fontsize=7)
  axes.ravel()[0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  print('wrote', path)


if __name__ == '__main__':
  main()
