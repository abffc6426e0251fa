"""The thermometer in `fit` against the empirical temperature, on a small and a large model.

Two Bayesian linear regressions with exact posteriors, written as keras.io
writes a regression (`Sequential`, one `Dense`, loss ``'mse'``, a
``N(0, 1)`` prior from `tfa.keras.priors.add_gaussian_prior`), sampled in
`model.fit` by SGLD on a `tf.data` pipeline reshuffled every pass
(`benchmarks.panel_fit.run_one`):

- small: `benchmarks.panel_fit.regression`, 3 inputs and a bias
  (D = 4, N = 1000);
- large: 1000 inputs to 10 outputs and their biases (D = 10,010,
  N = 20,000), whose posterior is Gaussian with the same precision
  ``P₁ = (2/10)·XᵀX + I`` for each output's column of weights.

Per run: the empirical temperature of the members against the exact
posterior, ``⟨(θ − μ)ᵀP(θ − μ)⟩/D`` (what the virial estimates) and
``⟨|P(θ − μ)|²⟩/tr P`` (what the Laplacian form estimates); the members'
readings on the training data with exact gradients
(`BayesianEnsemble.check_temperature`, as
``SampleCollector(training_data=(x, y))`` reads them at the end of `fit`);
and the live reading in `fit` (`SampleCollector.live_readings`). A
reading is *within 10%* when it is within 10% of the empirical
temperature plus three combined standard errors.

    python -m benchmarks.thermometer [--quick]
"""

import os
import time

import numpy as np

import tfp_adaptive as tfa
from benchmarks import common
from benchmarks import panel
from benchmarks import panel_fit
from benchmarks import panel_truth as truth

WIDE_N, WIDE_INPUTS, WIDE_OUTPUTS = 20000, 1000, 10


def wide_regression(n=WIDE_N, inputs=WIDE_INPUTS, outputs=WIDE_OUTPUTS):
  """``(x, y, P₁, mean [inputs + 1, outputs])`` of the large model (or of one of another size)."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(n, inputs)).astype('float32')
  w = rng.normal(size=(inputs, outputs)) / np.sqrt(inputs)
  y = (x @ w + 0.5 + rng.normal(scale=np.sqrt(0.5),
                                size=(n, outputs))).astype('float32')
  xa = np.concatenate([x, np.ones((n, 1))], 1).astype(np.float64)
  # 'mse' averages over the outputs: U = Σ_rows Σ_k (y − ŷ)²/K + prior.
  precision = 2. / outputs * xa.T @ xa + np.eye(inputs + 1)
  mean = np.linalg.solve(precision, 2. / outputs * xa.T @ y.astype(np.float64))
  return x, y, precision, mean


def small_regression():
  """`panel_fit.regression` in `wide_regression`'s form."""
  x, y, precision, mean = panel_fit.regression()
  return x, y, precision, mean[:, None]


def empirical(members, precision, mean):
  """Both empirical temperatures of members ``[n, D]`` (kernel row-major, then bias) against columns ``N(mean_k, P₁⁻¹)``.

  The outputs' columns are read as
  `benchmarks.panel_truth.empirical_temperature`'s chains.
  """
  inputs, outputs = mean.shape
  kernel = members[:, :(inputs - 1) * outputs].reshape(-1, inputs - 1,
                                                       outputs)
  theta = np.concatenate([kernel, members[:, None, (inputs - 1) * outputs:]],
                         1)
  columns = np.transpose(theta - mean, (0, 2, 1))  # [n, outputs, inputs].
  return truth.empirical_temperature(
      columns, np.linalg.cholesky(precision), np.zeros(inputs))


def configurations(quick):
  """``[(model, data, run label, optimizer, batch size, h, steps per epoch, epochs)]``."""
  sgld = lambda h, n: tfa.keras.optimizers.SGLD(h, data_size=n, seed=0)
  small = ('small (D = 4)', small_regression)
  large = ('large (D = 10,010)', wide_regression)
  table = [small + ('SGLD, reshuffled batches of 50', lambda: sgld(1e-5, 1000),
                    50, 1e-5, 100, panel_fit.EPOCHS),
           small + ('SGLD, reshuffled batches of 50', lambda: sgld(1e-4, 1000),
                    50, 1e-4, 100, panel_fit.EPOCHS),
           large + ('SGLD, reshuffled batches of 50',
                    lambda: sgld(1e-6, WIDE_N), 50, 1e-6, 400, 120),
           large + ('SGLD, reshuffled batches of 50',
                    lambda: sgld(1e-5, WIDE_N), 50, 1e-5, 400, 40)]
  if quick:
    return [c[:6] + (c[6], max(c[7] // 10, 8)) for c in table[::2]]
  return table


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  rows, within = [], {'members': 0, 'live': 0}
  cache = {}
  for model, build, label, optimizer, batch, h, steps, epochs in (
      configurations(args.quick)):
    if build not in cache:
      cache[build] = build()
    x, y, precision, mean = cache[build]
    t0 = time.time()
    members, said, readings, _ = panel_fit.run_one(
        optimizer(), batch, 0, epochs, data=(x, y), steps=steps)
    seconds = time.time() - t0
    emp = empirical(members, precision, mean)
    live = readings['live']
    hits = {'members': panel.within_ten_percent(readings['overall'], emp[0]),
            'live': live is not None and panel.within_ten_percent(live, emp[0])}
    for key, hit in hits.items():
      within[key] += hit
    rows.append([model, label, '%g' % h, '%d' % len(members),
                 ' / '.join(panel.format_reading(e) for e in emp),
                 panel.format_reading(readings['overall']),
                 panel.format_reading(readings['laplacian']),
                 panel.format_reading(live),
                 ', '.join(k for k, hit in hits.items() if hit) or '—',
                 '; '.join(sorted({truth.kind(m) for m in
                                   said['live'] + said['members']})) or '—',
                 '%.0f' % seconds])
    print(' | '.join(rows[-1]), flush=True)
  common.write_table(
      os.path.join(out, 'thermometer.md'),
      'The thermometer against the empirical temperature (%s)'
      % ('quick' if args.quick else 'full'),
      ['model', 'run', 'h', 'members', 'empirical temperatures',
       'members\' virial', 'members\' Laplacian form', 'live reading',
       'within 10%', 'warnings', 'seconds'], rows,
      'Command: `python -m benchmarks.thermometer%s`. One chain per run '
      '(`benchmarks.panel_fit.run_one`: members every 25 steps after a '
      'quarter of the run). "empirical temperatures": the members\' '
      'against the exact posterior, in the virial\'s and the Laplacian '
      'form\'s weighting. "members\'": read on the training data with exact '
      'gradients (`SampleCollector(training_data=(x, y))`); "live": the '
      'reading in `fit` from the optimizer\'s own minibatch gradients: every '
      'step, less the estimated reshuffling term, unless each epoch\'s '
      'first step alone reads it too cold (guide "Reading the '
      'diagnostics"). Within 10%% of the empirical temperature (plus three '
      'combined standard errors): the members\' virial in %d of %d runs, '
      'the live reading in %d of %d.'
      % (' --quick' if args.quick else '', within['members'], len(rows),
         within['live'], len(rows)))


if __name__ == '__main__':
  main()
