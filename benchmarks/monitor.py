"""SamplerMonitor: what the configurational temperature shows, and what it costs.

1. Temperature. A Bayesian linear model (D = 51, N = 1000, Gaussian prior)
   sampled by SGLD (minibatches), and by full-batch pSGLD without Γ and with
   the corrected Γ: the temperature after burn-in against τ = 1.
2. Overhead. The MLP 784-400-400-10 of `benchmarks.keras_speed` (batch 100,
   `jit_compile=True`, random data) trained by Γ-free PSGLD, with and
   without the monitor, rounds interleaved; the ratio of the best epoch
   times. Goal: at most 1.05.

    python -m benchmarks.monitor [--quick]

``--quick`` runs small sizes as graphs, without XLA: a check that every
piece runs (XLA's compile would be most of its time), not a timing.
"""

import os
import time
import warnings

import numpy as np
import keras

import tfp_adaptive as tfa
from benchmarks import common


def _linear(optimizer, batch_size, epochs, burnin, jit_compile=True):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(1000, 50)).astype('float32')
  w = rng.normal(size=(50, 1)).astype('float32')
  y = x @ w + rng.normal(size=(1000, 1)).astype('float32') * np.sqrt(0.5)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((50,)), keras.layers.Dense(1)])
  tfa.keras.priors.add_gaussian_prior(model, data_size=1000, scale=1.)
  model.compile(optimizer, 'mse', jit_compile=jit_compile)
  monitor = tfa.keras.SamplerMonitor(burnin_epochs=burnin, min_steps=200)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0,
              shuffle=batch_size < 1000,
              callbacks=[tfa.keras.SampleCollector(monitor=monitor)])
  warned = any('configurational temperature' in str(w.message)
               for w in caught)
  return monitor.temperatures['temperature'], warned


def temperatures(quick):
  scale = 0.05 if quick else 1.
  psgld = lambda gamma: tfa.keras.optimizers.PSGLD(
      2e-5, data_size=1000, seed=0, gamma=gamma, burnin=0,
      preconditioner_decay_rate=0.9, diagonal_bias=1e-3)
  runs = [
      ('SGLD, batch 250', tfa.keras.optimizers.SGLD(2e-5, data_size=1000,
                                                    seed=0), 250, 150),
      ('pSGLD gamma=none, full batch', psgld('none'), 1000, 600),
      ('pSGLD gamma=corrected, full batch', psgld('corrected'), 1000, 600),
  ]
  if quick:  # CI: that both kinds of run work (minibatch, full batch with Γ).
    runs = [runs[0], runs[2]]
  out = []
  for name, optimizer, batch, epochs in runs:
    epochs = max(int(epochs * scale), 20)
    values, warned = _linear(optimizer, batch, epochs, epochs // 2,
                             jit_compile=not quick)
    out.append((name, values, epochs // 2, warned))
  return out


def overhead(quick):
  hidden, steps, rounds = (50, 20, 2) if quick else (400, 100, 5)
  rng = np.random.default_rng(0)
  x = rng.random((100 * steps, 784)).astype('float32')
  y = rng.integers(0, 10, 100 * steps)
  # Each configuration's callbacks, built afresh for every epoch timed.
  configs = {
      'without': lambda: [],
      'with': lambda: [tfa.keras.SamplerMonitor()],
      'collector': lambda: [tfa.keras.SampleCollector(monitor=False)],
      'collector + temperature': lambda: [tfa.keras.SampleCollector()],
  }
  models = {}
  for name, callbacks in configs.items():
    keras.utils.set_random_seed(0)
    model = common.mlp(784, hidden)
    model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x),
                                             gamma='none', seed=0),
                  'sparse_categorical_crossentropy', jit_compile=not quick)
    models[name] = (model, callbacks)
  best = {name: np.inf for name in models}
  for _ in range(rounds + 1):  # The first round compiles.
    for name, (model, callbacks) in models.items():
      start = time.perf_counter()
      model.fit(x, y, batch_size=100, epochs=1, verbose=0,
                callbacks=callbacks())
      best[name] = min(best[name], time.perf_counter() - start)
  return best, hidden, steps


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  runs = temperatures(args.quick)
  rows = [[name, '%.3f' % np.mean(values[burnin - 1:]),
           '%.3f' % (np.std(values[burnin - 1:]) /
                     np.sqrt(len(values[burnin - 1:]))),
           'yes' if warned else 'no']
          for name, values, burnin, warned in runs]
  best, hidden, steps = overhead(args.quick)
  ratio = best['with'] / best['without']
  rows.append(['Overhead: PSGLD epoch with / without the monitor (MLP '
               '784-%d-%d-10, %d steps)' % (hidden, hidden, steps),
               '%.3f' % ratio, '', ''])
  rows.append(['Overhead: SampleCollector with / without its temperature '
               '(check_temperature, same epoch)',
               '%.3f' % (best['collector + temperature'] /
                         best['collector']), '', ''])
  common.write_table(
      os.path.join(out, 'monitor.md'),
      'SamplerMonitor (%s)' % ('quick' if args.quick else 'full'),
      ['run', 'temperature after burn-in (τ = 1)', 'naive s.e.',
       'monitor warned'], rows,
      'The naive standard error ignores the correlation between epochs. '
      'Without Γ full-batch pSGLD samples p·M⁻¹, which is hotter than p.')
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 3.5))
  for name, values, _, _ in runs:
    ax.plot(np.arange(len(values)) + 2, values, lw=1, label=name)
  ax.axhline(1., color='k', ls='--', lw=1, label='τ')
  ax.set_ylim(0, 2.5)
  ax.set_xlabel('epoch')
  ax.set_ylabel('configurational temperature')
  ax.legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(os.path.join(out, 'monitor.png'), dpi=90)


if __name__ == '__main__':
  main()
