"""Rensmeyer & Niggemann (2025) Figures 1–3 and a mixture target: stationary densities.

Every step of every chain is binned (width 0.1) in a streaming histogram inside
an XLA-compiled loop (`tfp_adaptive.mcmc.stationary_histogram`); chains start
from draws of the target. Each figure writes ``<fig>_stationary.png`` and
``<fig>_table.md``: the total-variation distance of each histogram to its
predicted π (docs, "The mathematics") and to the target, with the Monte Carlo error from 10
chain groups. α = 0.9 and stability λ = 0.1 throughout, as in the paper.

* ``fig1``: the paper's Fig. 1 samplers at h = 1e-4, 10^8 steps each (100
  chains × 10^6, each chain covering diffusion time h·n/2 = 50; 10× the
  paper's 10^7 so that the Monte Carlo noise, TV ≈ 0.01, is below the
  effects), plus the corrected pSGLD, Monge and Shampoo.
* ``fig2``: corrected pSGLD (Alg. 1) at h = 2.5e-6, 8·10^8 steps
  (100 chains × 8·10^6, time 10 each).
* ``fig3``: App. B, schedule ``h_n = 0.1/n^0.55``, original vs corrected
  pSGLD, 4·10^8 steps (100 chains × 4·10^6; the paper ran one chain, so its
  last steps were smaller: ours end at h ≈ 2.3e-5).
* ``mixture``: beyond the paper, every sampler × Γ mode on the two-component
  mixture ``0.35 N(-1.5, 0.6²) + 0.65 N(1.2, 0.9²)`` at h = 2.5e-4 (200
  chains × 8·10^5 steps, time 100 each), each against its predicted density (Adam-SGLD: eq. 35 by quadrature). Wenzel's layer-wise
  metric is the identity in 1-D and is left out.

--quick runs every figure at a tiny size with a few of its samplers (CI).

    python -m benchmarks.rensmeyer_figures [--quick] [--figures fig1 fig2 ...]
"""

import os
import time

import numpy as np
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive import diagnostics
from benchmarks import common

LAM, ALPHA = 0.1, 0.9
FIGURES = ('fig1', 'fig2', 'fig3', 'mixture')
_p = diagnostics.standard_normal


def _normal_lp(x):
  return -0.5 * x ** 2


def fig1_cases():
  lp, a = _normal_lp, ALPHA
  return [
      # name, kernel(h), predicted density
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


def _psgld_paper(mode):
  """pSGLD as in the paper's figures: λ = 0.1 outside the sqrt."""
  return lambda h: tfa.mcmc.PSGLD(_normal_lp, h, ALPHA, LAM,
                                  bias_outside_sqrt=True, gamma=mode)


def fig2_cases():
  return [('pSGLD corrected (Alg. 1), λ=0.1', _psgld_paper('corrected'), _p)]


def fig3_cases():
  pred = diagnostics.predicted_density(
      'original', diagnostics.rmsprop_metric(LAM, True), ALPHA)
  return [('pSGLD original, h_n = 0.1/n^0.55', _psgld_paper('original'), pred),
          ('pSGLD corrected, h_n = 0.1/n^0.55', _psgld_paper('corrected'), _p)]


# -- Two-component mixture --------------------------------------------------
MIX_W = np.array([0.35, 0.65])
MIX_MU = np.array([-1.5, 1.2])
MIX_SD = np.array([0.6, 0.9])


def mixture_density(t):
  t = np.asarray(t)[..., None]
  return (MIX_W / MIX_SD * np.exp(-0.5 * ((t - MIX_MU) / MIX_SD) ** 2)).sum(-1)


def mixture_grad(t):
  t = np.asarray(t)[..., None]
  comp = MIX_W / MIX_SD * np.exp(-0.5 * ((t - MIX_MU) / MIX_SD) ** 2)
  return (comp * -(t - MIX_MU) / MIX_SD ** 2).sum(-1) / comp.sum(-1)


def mixture_log_prob(x):
  d = x.dtype
  z = (x[..., None] - tf.constant(MIX_MU, d)) / tf.constant(MIX_SD, d)
  return tf.reduce_logsumexp(
      tf.constant(np.log(MIX_W / MIX_SD), d) - 0.5 * z ** 2, axis=-1)


def mixture_draws(n, seed):
  rng = np.random.RandomState(seed)
  k = rng.rand(n) < MIX_W[0]
  return np.where(k, MIX_MU[0] + MIX_SD[0] * rng.randn(n),
                  MIX_MU[1] + MIX_SD[1] * rng.randn(n))


def mixture_cases():
  lp, p, g, a = mixture_log_prob, mixture_density, mixture_grad, ALPHA
  pred = lambda mode, metric: diagnostics.predicted_density(mode, metric, a, p)
  rms = diagnostics.rmsprop_metric(LAM, True, g)
  rms_in = diagnostics.rmsprop_metric(LAM ** 2, False, g)
  monge = diagnostics.monge_metric(1., g)
  out = [('SGLD', lambda h: tfa.mcmc.SGLD(lp, h), p)]
  for mode in ('none', 'original', 'corrected'):
    out += [
        ('pSGLD λ=0.1 outside sqrt, gamma=%s' % mode,
         lambda h, m=mode: tfa.mcmc.PSGLD(lp, h, a, LAM,
                                          bias_outside_sqrt=True, gamma=m),
         pred(mode, rms)),
        ('Monge α²=1, gamma=%s' % mode,
         lambda h, m=mode: tfa.mcmc.MongeSGRLD(lp, h, 1., a, gamma=m),
         pred(mode, monge)),
        ('Shampoo ε=0.01, gamma=%s' % mode,
         lambda h, m=mode: tfa.mcmc.ShampooSGRLD(lp, h, a, LAM ** 2, gamma=m),
         pred(mode, rms_in)),
    ]
  out.append(('Adam-SGLD a=1, β=0.5',
              lambda h: tfa.mcmc.AdamSGLD(lp, h, a, 0.5, 1., LAM),
              diagnostics.adam_sgld_density(1., rms, g, p)))
  return out


def settings(figure, quick):
  """(cases, target density, initial draws(n), chains, steps, step size)."""
  normal = lambda n: np.random.RandomState(0).randn(n)
  schedule = tfa.schedules.PolynomialDecay(0.1, 1., 0.55)
  if figure == 'fig1':
    chains, steps, h = (100, 1000, 1e-3) if quick else (100, 1000000, 1e-4)
    cases = fig1_cases()
    return cases[:2] if quick else cases, _p, normal, chains, steps, h
  if figure == 'fig2':
    chains, steps, h = (100, 1000, 1e-3) if quick else (100, 8000000, 2.5e-6)
    return fig2_cases(), _p, normal, chains, steps, h
  if figure == 'fig3':
    chains, steps = (20, 1000) if quick else (100, 4000000)
    return fig3_cases(), _p, normal, chains, steps, schedule
  chains, steps, h = (20, 1000, 1e-3) if quick else (200, 800000, 2.5e-4)
  cases = mixture_cases()
  return (cases[:1] if quick else cases, mixture_density,
          lambda n: mixture_draws(n, 0), chains, steps, h)


def run_figure(figure, quick, out, groups=10):
  cases, target_density, draws, chains, steps, h = settings(figure, quick)
  target = common.binned(target_density)
  x0 = tf.constant(draws(chains), tf.float32)
  rows, hists = [], []
  for name, make, pred in cases:
    print('%s: %s' % (figure, name))
    t0 = time.time()
    counts, outside, _, _ = tfa.mcmc.stationary_histogram(
        make(h), x0, steps, common.EDGES, seed=(2, 3),
        chunk_steps=max(steps // 20, 1), num_groups=groups, progress=True)
    secs = time.time() - t0
    freqs = counts / (counts.sum(1) + outside)[:, None]
    pooled = freqs.mean(0)
    se = freqs.std(0, ddof=1) / np.sqrt(groups)
    noise = 0.5 * np.sqrt(2 / np.pi) * se.sum()
    q = common.binned(pred)
    rows.append([name, '%.4f' % diagnostics.total_variation(pooled, q),
                 '%.4f' % diagnostics.total_variation(pooled, target),
                 '%.4f' % noise, '%.2g' % (chains * steps / secs)])
    hists.append((name, pooled, q))
  step = h if not callable(h) else '0.1/n^0.55'
  common.write_table(
      os.path.join(out, '%s_table.md' % figure),
      'Rensmeyer %s: stationary densities (h = %s, %d chains × %d steps)'
      % (figure, step, chains, steps),
      ['sampler', 'TV to predicted π', 'TV to target', 'MC noise (TV)',
       'chain-steps/s (incl. compile)'], rows,
      'MC noise: expected TV of the histogram to its own limit, from the '
      'spread of %d chain groups.\n\nCommand: `python -m '
      'benchmarks.rensmeyer_figures --figures %s%s`'
      % (groups, figure, ' --quick' if quick else ''))
  _plot(hists, target, os.path.join(out, '%s_stationary.png' % figure))


def _plot(hists, target, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  mids = 0.5 * (common.EDGES[1:] + common.EDGES[:-1])
  w = np.diff(common.EDGES)
  cols = min(len(hists), 4)
  rows = (len(hists) + cols - 1) // cols
  fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.3 * rows),
                           sharey=True, squeeze=False)
  for ax in axes.ravel()[len(hists):]:
    ax.axis('off')
  for ax, (name, pooled, q) in zip(axes.ravel(), hists):
    ax.bar(mids, pooled / w, width=w, alpha=0.4, label='histogram π̂')
    ax.plot(mids, q / w, 'r-', label='predicted π')
    ax.plot(mids, target / w, 'k--', label='target p')
    ax.set_title(name, fontsize=7)
  axes[0, 0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  plt.close(fig)
  print('wrote', path)


def main():
  p = common.parser(__doc__.splitlines()[0])
  p.add_argument('--figures', nargs='+', choices=FIGURES, default=FIGURES)
  args = p.parse_args()
  out = common.out_dir(args.out)
  for figure in args.figures:
    run_figure(figure, args.quick, out)


if __name__ == '__main__':
  main()
