"""Karagiannis, Lecture 7 §4: SGLD on Bayesian linear regression vs the exact posterior.

Data: n = 10^4 draws of a bivariate normal (unit variances, ρ = 0.9); the
model regresses the second coordinate on the first with an intercept,
``y | β, σ² ~ N(x'β, σ²)``, ``β | σ² ~ N(0, σ² V)``, ``σ² ~ IG(φ, ψ)``, and is
sampled in the lecture's coordinates ``w = (β0, β1, γ = log σ²)`` (the prior
of γ includes the Jacobian ``e^γ``). The notes leave ``V, φ, ψ`` open; we use
``V = 100 I`` (the lab's prior scale) and ``φ = ψ = 1``. The exact posterior
is normal-inverse-gamma: β is Student-t, γ is a log-inverse-gamma.

Two studies, as the notes' Figures 4.2–4.3: batch size m ∈ {10, 100, 1000}
at τ = 1, and temperature τ ∈ {0.01, 0.1, 1, 2, 10} at m = 100. SGLD
(`tfp_adaptive.mcmc.SGLD`, ``h = 2η``) draws its minibatch inside the compiled
chain (`tfp_adaptive.minibatch_log_prob`). Besides the exact posterior, the
table gives the small-step *prediction* of SGLD's stationary sd including the
minibatch-gradient noise: the Lyapunov equation ``H C + C H = 2τ I + (h/2) Σ_g``
with H the posterior precision and ``Σ_g = (n²/m) Cov_i ∇ log f(z_i | w)`` at
the posterior mode. It explains why small batches inflate the spread.

Writes ``lecture_regression.md``, ``lecture_batch.png``, ``lecture_tau.png``.

    python -m benchmarks.lecture_regression [--quick]
"""

import os

import numpy as np
import scipy.linalg
import scipy.special
import scipy.stats
import tensorflow as tf

import tfp_adaptive as tfa
from benchmarks import common

RHO, V_SCALE, PHI, PSI = 0.9, 100., 1., 1.
NAMES = ('β0', 'β1', 'log σ²')


def make_data(n, seed=0):
  xy = np.random.RandomState(seed).multivariate_normal(
      [0., 0.], [[1., RHO], [RHO, 1.]], n)
  return np.stack([np.ones(n), xy[:, 0]], 1), xy[:, 1]


def _nig(x, y):
  """Normal-inverse-gamma posterior parameters ``(V_n, m_n, a_n, b_n)``."""
  vn = np.linalg.inv(np.eye(2) / V_SCALE + x.T @ x)
  mn = vn @ x.T @ y
  return vn, mn, PHI + len(y) / 2., PSI + 0.5 * (
      y @ y - mn @ np.linalg.solve(vn, mn))


def exact_posterior(x, y):
  """Normal-inverse-gamma posterior: marginal means, sds and pdfs."""
  vn, mn, a, b = _nig(x, y)
  beta_sd = np.sqrt(b / (a - 1.) * np.diag(vn))
  t_scale = np.sqrt(b / a * np.diag(vn))
  pdfs = [lambda t, j=j: scipy.stats.t.pdf(t, 2 * a, mn[j], t_scale[j])
          for j in range(2)]
  pdfs.append(lambda g: scipy.stats.invgamma.pdf(np.exp(g), a, scale=b)
              * np.exp(g))
  mean = np.array([mn[0], mn[1], np.log(b) - scipy.special.digamma(a)])
  sd = np.array([beta_sd[0], beta_sd[1],
                 np.sqrt(scipy.special.polygamma(1, a))])
  return mean, sd, pdfs


def _grad_per_example(w, x, y):
  """Per-example ∇_w log f(z_i | w) of eq. (4.1), shape [n, 3]."""
  r = y - x @ w[:2]
  s = np.exp(-w[2])
  return np.concatenate([r[:, None] * x * s, (-0.5 + 0.5 * r ** 2 * s)[:, None]],
                        1)


def predicted_sd(x, y, mode, h, m, tau):
  """Stationary sd of SGLD from the small-step Lyapunov equation (see module doc)."""
  n = len(y)
  s = np.exp(-mode[2])
  r = y - x @ mode[:2]
  prec = np.zeros((3, 3))
  prec[:2, :2] = s * (x.T @ x + np.eye(2) / V_SCALE)
  prec[2, 2] = 0.5 * s * (r @ r + mode[:2] @ mode[:2] / V_SCALE) + PSI * s
  prec[:2, 2] = prec[2, :2] = s * (x.T @ r - mode[:2] / V_SCALE)
  sigma_g = n ** 2 / m * np.cov(_grad_per_example(mode, x, y).T)
  cov = scipy.linalg.solve_continuous_lyapunov(
      prec, 2 * tau * np.eye(3) + 0.5 * h * sigma_g)
  return np.sqrt(np.diag(cov))


def _posterior_mode(x, y):
  n = len(y)
  _, mn, _, b = _nig(x, y)
  # In w-space (Jacobian included), at β = m_n the log posterior of γ is
  # -(φ + n/2 + d/2)γ - b e^{-γ} (d = 2): its maximum is below.
  return np.array([mn[0], mn[1], np.log(b / (PHI + n / 2. + 1.))])


def log_likelihood(parts, batch):
  beta, gamma = parts
  xb, yb = batch
  mean = tf.einsum('...d,md->...m', beta, xb)
  return (-0.5 * np.log(2 * np.pi) - 0.5 * gamma[..., None]
          - 0.5 * tf.square(yb - mean) * tf.exp(-gamma)[..., None])


def log_prior(parts):
  beta, gamma = parts
  quad = tf.reduce_sum(tf.square(beta), -1) / V_SCALE
  return -gamma - 0.5 * tf.exp(-gamma) * quad - PHI * gamma - PSI * tf.exp(
      -gamma)


def run(x, y, m, tau, h, chains, results, thin, seed):
  """SGLD chains from exact posterior draws; returns samples [results·chains, 3]."""
  target = tfa.minibatch_log_prob(log_likelihood, (x, y), m, log_prior)
  kernel = tfa.mcmc.SGLD(target, h, temperature=tau)
  mean, sd, _ = exact_posterior(x, y)
  rng = np.random.RandomState(seed)
  init = mean + sd * rng.randn(chains, 3)
  out, _, _ = tfa.mcmc.sample(
      kernel, [tf.constant(init[:, :2]), tf.constant(init[:, 2])], results,
      num_burnin_steps=20 * thin, num_steps_between_results=thin - 1,
      seed=(seed, 7), chunk_size=results, progress=True)
  return np.concatenate([out[0].numpy(), out[1].numpy()[..., None]],
                        -1).reshape(-1, 3)


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  n, chains, results, thin = ((1000, 20, 100, 10) if args.quick
                              else (10000, 100, 1000, 20))
  x, y = make_data(n)
  mean, sd, pdfs = exact_posterior(x, y)
  mode = _posterior_mode(x, y)
  # h·λ_max(H) ≈ 0.1: the Euler–Maruyama bias stays ≈ 2.5% of a variance.
  h = 2e-6 * 1e4 / n
  batches, temps = ((10, 100), (1., 10.)) if args.quick else (
      (10, 100, 1000), (0.01, 0.1, 1., 2., 10.))
  studies = [('batch', [(m, 1.) for m in batches]),
             ('tau', [(100, t) for t in temps])]
  rows, draws = [], {}
  for study, configs in studies:
    for m, tau in configs:
      if (m, tau) not in draws:
        print('SGLD m=%d τ=%g' % (m, tau))
        draws[m, tau] = run(x, y, m, tau, h, chains, results, thin, seed=1)
      w = draws[m, tau]
      pred = predicted_sd(x, y, mode, h, m, tau)
      err = (w.mean(0) - mean) / sd
      ratio = w.std(0) / sd
      rows.append(['%s' % study, m, tau] +
                  ['%+.2f' % e for e in err] +
                  ['%.2f (%.2f)' % (r, p / s)
                   for r, p, s in zip(ratio, pred, sd)])
    _plot(study, configs, draws, pdfs, mean, sd,
          os.path.join(out, 'lecture_%s.png' % study))
  common.write_table(
      os.path.join(out, 'lecture_regression.md'),
      'Lecture 7 §4: SGLD vs exact posterior (n = %d, h = %g, %d chains × %d '
      'draws, thinning %d)' % (n, h, chains, results, thin),
      ['study', 'm', 'τ'] + ['mean err/sd %s' % k for k in NAMES] +
      ['sd ratio %s (predicted)' % k for k in NAMES], rows,
      'Exact posterior sd: %s. "mean err/sd": (SGLD mean − exact mean) / '
      'exact sd. "sd ratio": SGLD sd / exact sd; in brackets the small-step '
      'prediction with minibatch noise (Lyapunov equation, module doc).\n\n'
      'Command: `python -m benchmarks.lecture_regression%s`'
      % (', '.join('%s %.3g' % (k, s) for k, s in zip(NAMES, sd)),
         ' --quick' if args.quick else ''))


def _plot(study, configs, draws, pdfs, mean, sd, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(3, len(configs), figsize=(3.2 * len(configs), 7),
                           squeeze=False)
  for col, (m, tau) in enumerate(configs):
    w = draws[m, tau]
    for row in range(3):
      ax = axes[row, col]
      lo = mean[row] - 6 * sd[row] * max(1., w[:, row].std() / sd[row])
      hi = 2 * mean[row] - lo
      grid = np.linspace(lo, hi, 300)
      ax.hist(w[:, row], bins=60, range=(lo, hi), density=True, alpha=0.5)
      ax.plot(grid, pdfs[row](grid), 'r-')
      ax.set_title('%s, m=%d, τ=%g' % (NAMES[row], m, tau), fontsize=8)
  fig.suptitle('SGLD (histogram) vs exact posterior (red)')
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  print('wrote', path)


if __name__ == '__main__':
  main()
