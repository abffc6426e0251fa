"""Demo: adaptive SG-MCMC samples the wrong N(0, 1) unless Γ is corrected.

10,000 chains of each sampler run as one XLA-compiled batch (h = 1e-3,
α = 0.9, stability 1.0 so that the small-step theory applies). Prints the
sample standard deviation (target 1) and the TV distance of the histogram to
N(0, 1) and to the density predicted for each Γ mode.

    python examples/stationary_demo.py
"""

import numpy as np
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive import diagnostics

EDGES = np.arange(-4.5, 4.5001, 0.1)
BIAS, ALPHA, H = 1.0, 0.9, 1e-3
MODES = ('none', 'original', 'corrected')


def binned(density):
  return diagnostics.bin_probabilities(density, EDGES)


def main():
  target = lambda x: -0.5 * x ** 2
  p = diagnostics.standard_normal
  rms = {m: diagnostics.predicted_density(
      m, diagnostics.rmsprop_metric(BIAS), ALPHA) for m in MODES}
  monge = {m: diagnostics.predicted_density(
      m, diagnostics.monge_metric(1.), ALPHA) for m in MODES}
  rows = []
  for label, make, preds in [
      ('PSGLD', lambda g: tfa.mcmc.PSGLD(target, H, ALPHA, BIAS, gamma=g), rms),
      ('MongeSGRLD', lambda g: tfa.mcmc.MongeSGRLD(target, H, 1., ALPHA,
                                                   gamma=g), monge),
      ('ShampooSGRLD', lambda g: tfa.mcmc.ShampooSGRLD(target, H, ALPHA, BIAS,
                                                       gamma=g), rms)]:
    for mode in MODES:
      x0 = tf.random.stateless_normal([10000], seed=(0, 1))
      counts, outside, state, _ = tfa.mcmc.stationary_histogram(
          make(mode), x0, 10000, EDGES, seed=(1, 2), chunk_steps=5000,
          progress=True)
      freq = counts / (counts.sum() + outside)
      rows.append((label, mode, float(tf.math.reduce_std(state)),
                   diagnostics.total_variation(freq, binned(p)),
                   diagnostics.total_variation(freq, binned(preds[mode]))))
  print('\n%-13s %-10s %8s %12s %15s' % ('sampler', 'gamma', 'std', 'TV to N(0,1)',
                                          'TV to predicted'))
  for r in rows:
    print('%-13s %-10s %8.3f %12.4f %15.4f' % r)


if __name__ == '__main__':
  main()
