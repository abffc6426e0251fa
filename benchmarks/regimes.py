"""Where the samplers are biased: error of the sampled covariance against the regime numbers.

Every kernel step reports two dimensionless numbers (`StepRatios`):
``drift_ratio = ‖(h/2)M∇û‖²/‖noise‖²`` and ``gamma_ratio =
‖(h/2)τcΓ‖²/‖noise‖²``. This benchmark sweeps the step size ``h``, the
EMA rate ``α`` and ``diagonal_bias`` on targets with known posteriors and
plots the relative error of the sampled standard deviations against the
run's mean of each number:

1. a 1-D standard Gaussian, exact gradients (so the RMSprop metric has a
   cusp at the mode when ``diagonal_bias`` is small);
2. the same with minibatch-like gradient noise (``s² = 4``);
3. a 2-parameter Bayesian linear regression, ``N = 200``, full-batch
   gradients (exact posterior sd ≈ 0.035), the case where corrected pSGLD
   with a small ``diagonal_bias`` is far off at step sizes where SGLD is
   exact.

The tolerances of `tfp_adaptive.mcmc.REGIME_TOLERANCES` are read off this
figure: below them every configuration is within the documented error.

    python -m benchmarks.regimes [--quick]
"""

import os

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from tfp_adaptive.diagnostics import regime
from tfp_adaptive.mcmc import driver
from benchmarks import common

GROUPS = 10


def run_moments(kernel, state, steps, burn, seed):
  """Per-group mean of the state, its second moments, and the mean ratios.

  `state` is ``[chains, dim]``; returns ``(mean [G, dim], second [G, dim,
  dim], drift_ratio, gamma_ratio)``.
  """
  @tf.function(jit_compile=True, autograph=False)
  def run(state, seed):
    results = kernel.bootstrap_results(state)

    def body(i, s, r, sx, sxx, norms, seed):
      seed, step_seed = tfp.random.split_seed(seed)
      s, r = kernel.one_step(s, r, seed=step_seed)
      keep = tf.cast(i >= burn, s.dtype)
      step = driver.find_field(r, 'step_norms')
      norms = [a + keep * b for a, b in zip(norms, step)]
      return (i + 1, s, r, sx + keep * s,
              sxx + keep * s[:, :, None] * s[:, None, :], norms, seed)
    zeros = tf.zeros_like(state)
    chains = tf.shape(state)[0]
    init = (tf.constant(0), state, results, zeros,
            zeros[:, :, None] * zeros[:, None, :],
            [tf.zeros([chains], state.dtype)] * 4, seed)
    out = tf.while_loop(lambda i, *_: i < burn + steps, body, init)
    return out[3], out[4], tf.reduce_mean(tf.stack(out[5]), 1)  # Pooled.
  sx, sxx, norms = [x.numpy() / steps for x in run(state, seed)]
  numbers = driver.regime_of(kernel, norms, warn=False)[0]
  chains, dim = sx.shape
  sx = sx.reshape(GROUPS, -1, dim).mean(1)
  sxx = sxx.reshape(GROUPS, -1, dim, dim).mean(1)
  return sx, sxx, regime.Regime(*[float(np.max(v)) for v in numbers])


def sd_error(mean, second, exact_cov):
  """Largest relative error of the sd over the coordinates, and its MC s.e."""
  cov = second - mean[:, :, None] * mean[:, None, :]
  sds = np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
  exact = np.sqrt(np.diag(exact_cov))
  rel = sds.mean(0) / exact - 1.
  se = sds.std(0, ddof=1) / np.sqrt(len(sds)) / exact
  k = int(np.argmax(np.abs(rel)))
  return float(rel[k]), float(se[k])


def _gaussian_1d(noise_sd):
  def log_prob(x, seed=None):
    lp = -0.5 * tf.reduce_sum(x * x, -1)
    if noise_sd and seed is not None:
      zeta = tf.random.stateless_normal(tf.shape(x), seed, dtype=x.dtype)
      lp += noise_sd * tf.reduce_sum(zeta * x, -1)
    return lp
  log_prob.needs_seed = bool(noise_sd)
  return log_prob, np.eye(1)


SIGMA2, PRIOR_VAR = 0.25, 100.


def regression_data():
  """``(x, y)`` of the Bayesian linear regression: 200 points, an intercept and one slope."""
  rng = np.random.default_rng(0)
  n = 200
  x = np.stack([np.ones(n), rng.normal(size=n)], 1)
  y = x @ np.array([0.5, -1.]) + rng.normal(size=n) * np.sqrt(SIGMA2)
  return x, y


def _linear_regression():
  x, y = regression_data()
  sigma2, prior_var = SIGMA2, PRIOR_VAR
  prec = x.T @ x / sigma2 + np.eye(2) / prior_var
  cov = np.linalg.inv(prec)
  mean = cov @ (x.T @ y / sigma2)
  xt = tf.constant(x, tf.float32)
  yt = tf.constant(y, tf.float32)

  def log_prob(beta):
    resid = yt[None, :] - tf.einsum('nd,cd->cn', xt, beta)
    return (-0.5 * tf.reduce_sum(resid ** 2, -1) / sigma2
            - 0.5 * tf.reduce_sum(beta ** 2, -1) / prior_var)
  return log_prob, cov, mean


def configurations(quick):
  """(target, sampler label, kernel factory(h), step sizes)."""
  hs_1d = [0.3] if quick else [0.003, 0.01, 0.03, 0.1, 0.3]
  hs_lr = [4e-6] if quick else [3e-7, 1e-6, 3e-6, 1e-5, 3e-5]
  out = []
  for noise_sd, target in ((0., 'gaussian'), (2., 'gaussian, noisy ĝ')):
    fn, _ = _gaussian_1d(noise_sd)
    out.append((target, 'SGLD', lambda h, fn=fn: tfa.mcmc.SGLD(fn, h), hs_1d))
    for alpha in (0.5, 0.9, 0.99):
      for bias in (1e-3, 1.):
        label = 'PSGLD α=%g bias=%g' % (alpha, bias)
        out.append((target, label, lambda h, fn=fn, a=alpha, b=bias:
                    tfa.mcmc.PSGLD(fn, h, a, b, gamma='corrected'), hs_1d))
    for alpha in (0.9, 0.99):
      out.append((target, 'Monge α=%g' % alpha, lambda h, fn=fn, a=alpha:
                  tfa.mcmc.MongeSGRLD(fn, h, 1., a, gamma='corrected'),
                  hs_1d))
  fn, _, _ = _linear_regression()
  out.append(('regression', 'SGLD', lambda h: tfa.mcmc.SGLD(fn, h),
              [h * 10 for h in hs_lr]))
  for alpha in (0.5, 0.9):
    for bias in (1e-3, 1e3):
      label = 'PSGLD α=%g bias=%g' % (alpha, bias)
      out.append(('regression', label, lambda h, a=alpha, b=bias:
                  tfa.mcmc.PSGLD(fn, h, a, b, gamma='corrected'),
                  hs_lr if bias < 1 else [h * 30 for h in hs_lr]))
  if quick:  # CI: that each kind of run works, at a few configurations.
    keep = ('SGLD', 'PSGLD α=0.9 bias=0.001', 'PSGLD α=0.5 bias=1000')
    out = [c for c in out if c[1] in keep and c[0] != 'gaussian, noisy ĝ']
  return out


def _flagged(kernel, numbers):
  """Whether the library warns for a run with these numbers."""
  return bool(driver._advice(kernel, numbers))  # pylint: disable=protected-access


def sweep(quick):
  """Rows ``(target, sampler, h, Regime, flagged, sd error, se)``."""
  rows = []
  for target, label, factory, hs in configurations(quick):
    chains = 200 if quick else (200 if target == 'regression' else 500)
    if target == 'regression':
      _, cov, mean = _linear_regression()
      init = np.tile(mean, (chains, 1)).astype(np.float32)
    else:
      cov = np.eye(1)
      init = np.zeros((chains, 1), np.float32)
    for h in hs:
      # Long enough for the slowest chain's relaxation at this step.
      rate = h if target != 'regression' else h * 800. * (
          0.03 if 'bias=0.001' in label or label == 'SGLD' else 0.015)
      steps = int(min(100000, max(20000, 40. / rate)))
      if quick:  # That it runs; the sd errors need the full length.
        steps //= 20
      kernel = factory(h)
      m, s, numbers = run_moments(kernel, tf.constant(init), steps,
                                  steps // 5, tf.constant([1, 2]))
      err, se = sd_error(m, s, cov)
      rows.append((target, label, h, numbers, _flagged(kernel, numbers),
                   err, se))
      _print(rows[-1])
  rows += eight_schools(quick)
  return rows


def _print(row):
  target, label, h, n, flagged, err, se = row
  print('%-18s %-24s h=%-8g drift=%.3g lag=%.3g gamma=%.3g peak=%.3g %s '
        'sd err=%+.3f ± %.3f' % (target, label, h, n.drift_ratio, n.lag,
                                 n.gamma_ratio, n.peak_factor,
                                 'WARN' if flagged else 'ok  ', err, se),
        flush=True)


def eight_schools(quick):
  """Eight schools against NUTS: rows as `sweep`'s, the error over 10 sds.

  Not in the quick run (CI checks that the sweep runs; the NUTS reference
  is most of this part's cost).
  """
  if quick:
    return []
  from tests.mcmc import test_eight_schools as es  # pylint: disable=g-import-not-at-top
  from tests.mcmc.against_nuts import jackknife  # pylint: disable=g-import-not-at-top
  chains, draws = 64, 2000
  nuts = es._quantities(es._nuts(32, 1000))  # pylint: disable=protected-access
  (ref, ref_se) = jackknife(nuts, 16)
  configs = [
      ('PSGLD α=0.5 bias=0.001', [1e-3, 5e-3], lambda h: tfa.mcmc.PSGLD(
          es._log_prob, h, 0.5, 1e-3, gamma='corrected')),  # pylint: disable=protected-access
      ('Monge α=0.9', [2e-3, 0.05], lambda h: tfa.mcmc.MongeSGRLD(
          es._log_prob, h, 1., 0.9, gamma='corrected')),  # pylint: disable=protected-access
      ('Monge α=0.5', [0.05], lambda h: tfa.mcmc.MongeSGRLD(
          es._log_prob, h, 1., 0.5, gamma='corrected')),  # pylint: disable=protected-access
      ('SGLD', [0.01, 0.05], lambda h: tfa.mcmc.SGLD(es._log_prob, h)),  # pylint: disable=protected-access
  ]
  rows = []
  for label, hs, factory in configs:
    for h in hs:
      kernel = tfp.mcmc.TransformedTransitionKernel(factory(h), es.BIJECTORS)
      thin = max(int(0.02 / h), 1)
      samples, norms, _ = tfa.mcmc.sample(
          kernel, es._start(chains), num_results=draws,  # pylint: disable=protected-access
          num_burnin_steps=20 * thin * 100, num_steps_between_results=thin - 1,
          seed=(3, 4), chunk_size=draws, progress=False,
          trace_fn=lambda _, r: r.inner_results.step_norms)
      numbers = tfa.mcmc.check_regime(kernel, norms, warn=False)
      numbers = regime.Regime(*[float(np.max(v)) for v in numbers])
      est, se = jackknife(es._quantities(samples), 16)  # pylint: disable=protected-access
      rel = est[1] / ref[1] - 1.
      rel_se = np.sqrt(se[1] ** 2 + ref_se[1] ** 2) / ref[1]
      k = int(np.argmax(np.abs(rel)))
      rows.append(('eight schools', label, h, numbers,
                   _flagged(kernel, numbers), float(rel[k]),
                   float(rel_se[k])))
      _print(rows[-1])
  return rows


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  rows = sweep(args.quick)
  inside = [r for r in rows if not r[4]]
  worst = max(inside, key=lambda r: abs(r[5]) - 2 * r[6])
  note = ('%d of %d runs are inside the regime (no warning); the largest '
          'error among them, less two standard errors, is that of %+.3f ± '
          '%.3f (%s, %s, h = %g), against the documented %g. %d runs warn; the largest error of a run that '
          'warns is %+.3f.' % (
              len(inside), len(rows), worst[5], worst[6], worst[0], worst[1],
              worst[2], regime.SD_ERROR, len(rows) - len(inside),
              max((r[5] for r in rows if r[4]), key=abs)))
  common.write_table(
      os.path.join(out, 'regimes.md'),
      'Regime numbers against the error of the sampled sd (%s)'
      % ('quick' if args.quick else 'full'),
      ['target', 'sampler', 'h', 'drift_ratio', 'lag', 'peak_factor',
       'gamma_ratio', 'warns', 'sd error', 's.e.'],
      [[t, l, '%g' % h, '%.3g' % n.drift_ratio, '%.3g' % n.lag,
        '%.3g' % n.peak_factor, '%.3g' % n.gamma_ratio,
        'yes' if f else 'no', '%+.3f' % e, '%.3f' % s]
       for t, l, h, n, f, e, s in rows], note)
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
  markers = {'gaussian': 'o', 'gaussian, noisy ĝ': 's', 'regression': '^',
             'eight schools': 'D'}
  for ax, name in ((axes[0], 'drift_ratio'), (axes[1], 'lag')):
    for target, marker in markers.items():
      for flagged, face in ((False, None), (True, 'none')):
        sel = [r for r in rows if r[0] == target and r[4] == flagged and
               getattr(r[3], name) > 0]
        if not sel:
          continue
        ax.errorbar([getattr(r[3], name) for r in sel],
                    [max(abs(r[5]), 1e-3) for r in sel],
                    yerr=[2 * r[6] for r in sel], fmt=marker, ms=5, lw=0.6,
                    mfc=face, color='C%d' % list(markers).index(target),
                    label=target + (' (warns)' if flagged else ''),
                    alpha=0.8)
    ax.axvline(regime.TOLERANCES[name], color='k', ls='--', lw=1)
    ax.axhline(regime.SD_ERROR, color='grey', ls=':', lw=1)
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel('run mean of %s' % name)
  axes[0].set_ylabel('|relative error of the sampled sd|')
  axes[1].legend(fontsize=6, loc='upper left')
  fig.tight_layout()
  fig.savefig(os.path.join(out, 'regimes.png'), dpi=90)


if __name__ == '__main__':
  main()
