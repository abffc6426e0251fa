"""Cyclical step sizes against a constant step, at the same number of gradients, on two multimodal targets.

1. **A mixture of 25 well-separated Gaussians** in 2-D (means on the grid
   ``{−4, −2, 0, 2, 4}²``, sd 0.25, equal weights; Zhang et al. 2020,
   Sec. 5.1, in spirit). Each seed is one chain, run as a batch of
   independent chains. Reported per sampler and schedule: the number of
   the 25 modes whose centre a kept sample came within 3 sds of, and the
   total variation between the kept samples' share per mode and the true
   1/25, and the root mean square distance of the draws to their mode over
   its exact value (1 when each mode is sampled right, above 1 when hot),
   as mean ± standard error over the chains. The constant step is the
   cyclical schedule's mean step ``h0/2``, or half of it; the cycles
   explore (no noise) for none or a quarter of each cycle. ``h0 = 0.2``
   is near the largest step at which SGLD is stable at a mode.
2. **The digits MLP** in `fit` (scikit-learn's digits, 64-100-10, the
   default prior): an ensemble of the weights kept after a third of the
   epochs (constant step) or in the sampling stages (cycles), its test
   log-likelihood and accuracy, mean ± standard error over seeds.

Samplers: SGLD and SGHMC (friction 0.1), each with a constant step and
with `Cyclical` (cosine cycles; on the MLP no noise in the first half of
each).

    python -m benchmarks.cyclical [--quick] [--seeds 3]
"""

import math
import os
import time
import warnings

import numpy as np
import tensorflow as tf
import keras

import tfp_adaptive as tfa
from benchmarks import common

CENTRES = np.array([(a, b) for a in (-4., -2., 0., 2., 4.)
                    for b in (-4., -2., 0., 2., 4.)], np.float32)
SD = 0.25


def mixture_log_prob(x):
  """log of the equal-weight mixture of N(c, SD² I), up to a constant; x: [..., 2]."""
  d = x[..., tf.newaxis, :] - tf.constant(CENTRES, x.dtype)
  return tf.reduce_logsumexp(-0.5 * tf.reduce_sum(d * d, -1) / SD**2, -1)


def _kernel(sampler, schedule):
  if sampler == 'SGLD':
    return tfa.mcmc.SGLD(mixture_log_prob, schedule)
  return tfa.mcmc.SGHMC(mixture_log_prob, schedule, friction=0.1)


def mode_counts(samples):
  """Per chain: modes visited, TV of the modes' shares to uniform, sd around the modes / SD.

  `samples`: [draws, chains, 2]. A draw counts for its nearest mode; the
  sd ratio is the root mean square distance of the draws to their nearest
  centre over its exact value ``sqrt(2)·SD`` (1 for a chain that samples
  each mode right, above 1 for a hot one).
  """
  d = np.linalg.norm(samples[..., None, :] - CENTRES, axis=-1)
  nearest = d.argmin(-1)
  near = d.min(-1) < 3. * SD
  visited, tv, spread = [], [], []
  for c in range(samples.shape[1]):
    kept = nearest[:, c][near[:, c]]
    share = np.bincount(kept, minlength=len(CENTRES)) / max(len(kept), 1)
    visited.append(int((share > 0).sum()))
    tv.append(0.5 * np.abs(share - 1. / len(CENTRES)).sum())
    spread.append(np.sqrt(np.mean(d[:, c].min(-1) ** 2) / 2.) / SD)
  return np.array(visited), np.array(tv), np.array(spread)


def mixture(chains, steps, cycles, h0, seed=0, quick=False):
  """Rows per (sampler, schedule) on the mixture; `steps` gradients per chain.

  `quick`: SGLD, one cyclical and one constant schedule (that they run).
  """
  cycle_length = steps // cycles
  shares = (0.25,) if quick else (0., 0.25)
  schedules = {
      'cyclical, %d cycles, exploring %g' % (cycles, share):
          tfa.schedules.Cyclical(h0, cycle_length, exploration=share)
      for share in shares}
  schedules['constant h0/2'] = h0 / 2.
  if not quick:
    schedules['constant h0/4'] = h0 / 4.
  init = tf.constant(np.random.default_rng(seed).uniform(
      -5., 5., (chains, 2)), tf.float32)
  rows = []
  for sampler in ('SGLD',) if quick else ('SGLD', 'SGHMC'):
    for name, schedule in schedules.items():
      t0 = time.time()
      thin = 10
      with warnings.catch_warnings():
        warnings.simplefilter('ignore')  # A mixture has no single temperature.
        samples, steps_done, _ = tfa.mcmc.sample(
            _kernel(sampler, schedule), init, steps // thin,
            num_steps_between_results=thin - 1,
            trace_fn=lambda _, r: r.step, seed=(seed, 7),
            chunk_size=steps // thin, progress=False,
            check_temperature=False)
      samples = samples.numpy()
      step = steps_done.numpy() - 1  # The step that produced each draw.
      if isinstance(schedule, tfa.schedules.Cyclical):
        keep = schedule.sampling(step).numpy()
      else:
        keep = step >= steps // 3
      visited, tv, spread = mode_counts(samples[keep])
      rows.append(dict(sampler=sampler, schedule=name, modes=visited, tv=tv,
                       spread=spread, seconds=time.time() - t0))
      print('mixture', sampler, name, visited.mean(), tv.mean(),
            spread.mean(), flush=True)
  return rows


def _digits():
  x, y, xt, yt = common.load_dataset('digits')
  return x.astype('float32'), y, xt.astype('float32'), yt


def digits(epochs, cycles, lr0, seeds, batch_size=32, quick=False):
  """Rows per (sampler, schedule) on the digits MLP, one fit per seed (`quick`: SGHMC only)."""
  x, y, xt, yt = _digits()
  per_epoch = math.ceil(len(x) / batch_size)
  rows = []
  for sampler in ('SGHMC',) if quick else ('SGLD', 'SGHMC'):
    for name in ('cyclical, %d cycles, exploring 0.5' % cycles,
                 'constant lr0/2'):
      runs = []
      for seed in range(seeds):
        t0 = time.time()
        keras.utils.set_random_seed(seed)
        model = keras.Sequential([keras.Input((64,)),
                                  keras.layers.Dense(100, activation='relu'),
                                  keras.layers.Dense(10)])
        if name.startswith('cyclical'):
          lr = tfa.keras.schedules.Cyclical(
              lr0, cycle_length=epochs // cycles * per_epoch, exploration=0.5)
          collector = tfa.keras.SampleCollector(thinning=per_epoch // 2)
        else:
          lr = lr0 / 2.
          collector = tfa.keras.SampleCollector(
              burnin=epochs // 3, thinning=1, unit='epoch')
        kwargs = dict(friction=0.1) if sampler == 'SGHMC' else {}
        opt = getattr(tfa.keras.optimizers, sampler)(
            lr, data_size=len(x), seed=seed, **kwargs)
        model.compile(opt, keras.losses.SparseCategoricalCrossentropy(
            from_logits=True))
        with warnings.catch_warnings():
          warnings.simplefilter('ignore')
          model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0,
                    callbacks=[collector])
        metrics = collector.ensemble.evaluate(xt, yt)
        metrics['members'] = len(collector.members)
        metrics['seconds'] = time.time() - t0
        runs.append(metrics)
        print('digits', sampler, name, seed, metrics, flush=True)
      rows.append(dict(sampler=sampler, schedule=name, runs=runs))
  return rows


def _cell(values):
  return '%.3g ± %.2g' % common.mean_se(values)


def main():
  p = common.parser(__doc__.splitlines()[0])
  p.add_argument('--seeds', type=int, default=3)
  args = p.parse_args()
  out = common.out_dir(args.out)
  if args.quick:
    chains, steps, cycles, epochs, seeds = 8, 2000, 4, 4, 1
  else:
    chains, steps, cycles, epochs, seeds = 32, 50000, 25, 60, args.seeds
  h0, lr0 = 0.2, 2e-4
  mix = mixture(chains, steps, cycles, h0, quick=args.quick)
  dig = digits(epochs, min(cycles, 6) if not args.quick else 2, lr0, seeds,
               quick=args.quick)
  rows = [['mixture of 25', r['sampler'], r['schedule'],
           _cell(r['modes']), _cell(r['tv']), _cell(r['spread']),
           '', '', '', '%.0f' % r['seconds']] for r in mix]
  for r in dig:
    runs = r['runs']
    rows.append(['digits MLP', r['sampler'], r['schedule'], '', '', '',
                 _cell([m['log_likelihood'] for m in runs]),
                 _cell([m['accuracy'] for m in runs]),
                 '%.0f' % np.mean([m['members'] for m in runs]),
                 '%.0f' % np.mean([m['seconds'] for m in runs])])
  note = (
      'Command: `python -m benchmarks.cyclical%s`. Mixture: %d chains (one '
      'per seed) of %d gradients each from uniform starts on [−5, 5]², '
      '`h0 = %g`; a draw counts for the mode nearest to it when within 3 '
      'sds of its centre; kept draws: the sampling stages (cycles) or the '
      'last two thirds (constant). Digits MLP: %d epochs of batches of 32, '
      '`lr0 = %g`, %d seed(s); members every half epoch in the sampling '
      'stages (cycles) or every epoch after a third of the run (constant). '
      'SGHMC: friction 0.1. Mean ± standard error over chains or seeds.'
      % (' --quick' if args.quick else '', chains, steps, h0, epochs, lr0,
         seeds))
  common.write_table(
      os.path.join(out, 'cyclical.md'),
      'Cyclical step sizes against a constant step',
      ['target', 'sampler', 'schedule', 'modes found (of 25)',
       'TV of mode shares', 'spread / exact', 'test log-likelihood', 'accuracy', 'members',
       'seconds'], rows, note)


if __name__ == '__main__':
  main()
