"""Side by side with the original code: TFP's pSGLD optimizer vs ours on N(0, 1).

The same 1-D problem (loss ``θ²/2``, data_size 1, learning rate h = 1e-3,
``preconditioner_decay_rate`` α = 0.5, ``diagonal_bias`` 0.01, no burn-in) is
run by

* TFP's ``tfp.optimizer.StochasticGradientLangevinDynamics`` in graph mode
  (``tf.compat.v1`` session, one ``session.run`` per step, as the paper's
  authors ran it), on a variable of 100 coordinates = 100 independent chains;
* our Keras optimizer ``tfp_adaptive.keras.optimizers.PSGLD`` (XLA step,
  ``gamma='original'`` and ``'none'``), same 100 chains;
* our kernel ``tfp_adaptive.mcmc.PSGLD`` (``'original'`` and ``'none'``) with
  1000 chains in one compiled loop.

Each histogram is compared with the two small-step predictions (docs, "The mathematics"):
``p·M^-α`` (Γ kept, 'original') and ``p·M⁻¹`` (Γ dropped). On TF 2 resource
variables TFP's ``diag_jacobian`` sees no path from the variable to the
preconditioner and its Γ is 0 (see tests/core/test_gamma.py), so TFP's histogram
is expected at ``p·M⁻¹``, next to ours with ``gamma='none'``; ours with
``'original'`` is what TFP's optimizer was written to compute. α = 0.5
rather than the paper's 0.9 so that the two predictions differ clearly (TV
0.135 instead of 0.025). Speeds are
steps (× chains) per second in the same run.

    python -m benchmarks.tfp_side_by_side [--quick]
"""

import os
import time

import keras
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from tfp_adaptive import diagnostics
from benchmarks import common

H, DECAY, BIAS = 1e-3, 0.5, 1e-2


def _count(samples):
  inside, _ = np.histogram(samples, common.EDGES)
  return inside / np.size(samples)


def tfp_histogram(chains, steps, burn):
  """TFP's optimizer, one session.run per step; returns (freqs, steps/s)."""
  freqs = np.zeros(len(common.EDGES) - 1)
  with tf.Graph().as_default():
    v = tf.compat.v1.Variable(np.random.RandomState(0).randn(chains),
                              dtype=tf.float32)
    opt = tfp.optimizer.StochasticGradientLangevinDynamics(
        H, preconditioner_decay_rate=DECAY, data_size=1, burnin=0,
        diagonal_bias=BIAS)
    grads = tf.compat.v1.gradients(0.5 * tf.reduce_sum(v ** 2), [v])
    op = opt.apply_gradients(list(zip(grads, [v])))
    with tf.control_dependencies([op]):
      read = tf.identity(v.read_value())
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(burn):
        sess.run(op)
      t0 = time.time()
      bar = tfa.mcmc.driver._Progress(steps, 'TFP optimizer', True)  # pylint: disable=protected-access
      for i in range(steps):
        freqs += _count(sess.run(read))
        if i % 1000 == 999:
          bar.update(1000)
      bar.close()
      return freqs / steps, steps / (time.time() - t0)


def keras_histogram(chains, steps, burn, gamma):
  """Our Keras optimizer, one XLA step per call; returns (freqs, steps/s)."""
  var = keras.Variable(np.random.RandomState(0).randn(chains).astype(
      np.float32))
  opt = tfa.keras.optimizers.PSGLD(
      learning_rate=H, preconditioner_decay_rate=DECAY, data_size=1,
      burnin=0, diagonal_bias=BIAS, gamma=gamma, seed=3)
  loss_fn = lambda: 0.5 * tf.reduce_sum(var ** 2)

  @tf.function(jit_compile=True)
  def step():
    _, grads, gam = tfa.keras.gradients_and_gamma(opt, loss_fn, [var])
    if gam is None:
      opt.apply(grads, [var])
    else:
      opt.apply(grads, [var], gamma=gam)
    return tf.convert_to_tensor(var)

  opt.build([var])
  for _ in range(burn):
    step()
  freqs = np.zeros(len(common.EDGES) - 1)
  t0 = time.time()
  for _ in range(steps):
    freqs += _count(step().numpy())
  return freqs / steps, steps / (time.time() - t0)


def kernel_histogram(chains, steps, gamma):
  kernel = tfa.mcmc.PSGLD(lambda x: -0.5 * x ** 2, H, DECAY, BIAS,
                          gamma=gamma)
  x0 = tf.constant(np.random.RandomState(0).randn(chains), tf.float32)
  t0 = time.time()
  counts, outside, _, _ = tfa.mcmc.stationary_histogram(
      kernel, x0, steps, common.EDGES, seed=(4, 5), chunk_steps=steps // 4,
      progress=True)
  secs = time.time() - t0
  return counts / (counts.sum() + outside), chains * steps / secs


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  steps, burn = (300, 100) if args.quick else (20000, 2000)
  metric = diagnostics.rmsprop_metric(BIAS)
  preds = {m: common.binned(diagnostics.predicted_density(m, metric, DECAY))
           for m in ('original', 'none')}
  target = common.binned(diagnostics.standard_normal)
  runs = [('TFP StochasticGradientLangevinDynamics (graph, 100 chains)',
           'steps/s') + tfp_histogram(100, steps, burn)]
  for gamma in ('original', 'none'):
    runs.append(('ours, Keras PSGLD gamma=%s (XLA step, 100 chains)' % gamma,
                 'steps/s') + keras_histogram(100, steps, burn, gamma))
  for gamma in ('original', 'none'):
    runs.append(('ours, kernel PSGLD gamma=%s (1000 chains, XLA loop)' % gamma,
                 'chain-steps/s') + kernel_histogram(1000, steps, gamma))
  rows = []
  for name, unit, freqs, rate in runs:
    rows.append([name] + ['%.4f' % diagnostics.total_variation(freqs, q)
                          for q in (preds['original'], preds['none'], target)]
                + ['%.3g %s' % (rate, unit)])
  common.write_table(
      os.path.join(out, 'tfp_side_by_side.md'),
      'TFP\'s pSGLD optimizer vs ours, N(0,1), h = %g, α = %g, '
      'diagonal_bias = %g, %d steps' % (H, DECAY, BIAS, steps),
      ['run', 'TV to p·M^-α (Γ kept)', 'TV to p·M⁻¹ (Γ dropped)',
       'TV to N(0,1)', 'speed'], rows,
      'TV distances between the two predictions: %.4f. Command: `python -m '
      'benchmarks.tfp_side_by_side%s`' % (
          diagnostics.total_variation(preds['original'], preds['none']),
          ' --quick' if args.quick else ''))
  _plot(runs, preds, target, os.path.join(out, 'tfp_side_by_side.png'))


def _plot(runs, preds, target, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  mids = 0.5 * (common.EDGES[1:] + common.EDGES[:-1])
  w = np.diff(common.EDGES)
  fig, ax = plt.subplots(figsize=(8, 5))
  for name, _, freqs, _ in runs:
    ax.step(mids, freqs / w, where='mid', label=name, lw=1)
  ax.plot(mids, preds['original'] / w, 'k-', lw=2, alpha=0.5,
          label='predicted p·M^-α (Γ kept)')
  ax.plot(mids, preds['none'] / w, 'k:', lw=2, label='predicted p·M⁻¹ (Γ dropped)')
  ax.plot(mids, target / w, 'k--', lw=1, label='N(0,1)')
  ax.legend(fontsize=7)
  ax.set_xlim(-4, 4)
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  plt.close(fig)
  print('wrote', path)


if __name__ == '__main__':
  main()
