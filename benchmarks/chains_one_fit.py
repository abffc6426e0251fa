"""K chains in one `fit` (`tfa.keras.Chains`) against K separate fits and K processes.

The README's digits MLP (64-100-10, logits), corrected `PSGLD` at
``1e-4`` with ``data_size`` the 1,300 training digits, batches of 32,
``jit_compile=True``, 20 epochs, and a `SampleCollector` (a member per
epoch after 2 epochs of burn-in, streamed to a directory per run). Chain
``k`` starts from the model built under seed ``k``. Three ways to run K
chains, each in fresh processes so that start-up and compilation count as
a user sees them:

- **one fit**: one process, ``Chains`` of the K models, one `fit`;
- **separate fits**: one process, K `fit` calls one after the other;
- **K processes**: K processes at once, one chain each, each with
  ``max(1, cores // K)`` threads.

Reported: wall time from launch to the last exit and chains per hour,
for K = 1, 2, 4, 8, 16; and, for the largest K, the test accuracy and
log-likelihood of the one-fit ensemble against the separate fits' (errors
from the spread of the chains' own ensembles, ``z`` the difference over
the combined error): the two must agree in law.

    python -m benchmarks.chains_one_fit [--quick]
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import common

EPOCHS, BURNIN, BATCH, LEARNING_RATE = 20, 2, 32, 1e-4
MODES = ('one fit', 'separate fits', 'processes')


def _model(seed):
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((64,)),
                           keras.layers.Dense(100, activation='relu'),
                           keras.layers.Dense(10)])


def _compile(model, n, seed):
  import keras  # pylint: disable=g-import-not-at-top
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  model.compile(tfa.keras.optimizers.PSGLD(LEARNING_RATE, data_size=n,
                                           seed=seed),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=True)


def worker(mode, chains, first, directory, epochs, threads):
  """Runs `chains` chains (from seed `first`) in this process; prints JSON with the fit time."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  x, y, _, _ = common.load_dataset('digits')
  x = x.astype('float32')
  seeds = list(range(first, first + chains))
  runs = ([(tfa.keras.Chains([_model(s) for s in seeds]), 0, directory)]
          if mode == 'one fit' else
          [(_model(s), s, os.path.join(directory, 'chain_%02d' % s))
           for s in seeds])
  start = time.perf_counter()
  for model, seed, path in runs:
    _compile(model, len(x), seed)
    collector = tfa.keras.SampleCollector(burnin=BURNIN, unit='epoch',
                                          directory=path, monitor=False)
    model.fit(x, y, batch_size=BATCH, epochs=epochs, verbose=0,
              callbacks=[collector])
  print(json.dumps({'fit_seconds': time.perf_counter() - start}))


def launch(mode, k, directory, epochs, cores, device):
  """Runs K chains the `mode` way in fresh processes; wall seconds from launch to the last exit."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  if mode == 'processes':
    jobs = [(1, s, directory, max(1, cores // k)) for s in range(k)]
  else:
    jobs = [(k, 0, directory, cores)]
  start = time.perf_counter()
  procs = [subprocess.Popen(
      [sys.executable, '-m', 'benchmarks.chains_one_fit', '--worker',
       'one fit' if mode == 'one fit' else 'separate fits', '--chains',
       str(n), '--first', str(s), '--directory', path, '--epochs',
       str(epochs), '--threads', str(t), '--device', device],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
           for n, s, path, t in jobs]
  for p in procs:
    _, err = p.communicate()
    if p.returncode:
      raise RuntimeError(err[-3000:])
  return time.perf_counter() - start


def compare(one_fit, separate, k):
  """``(metrics, errors, z)`` of the one-fit and separate-fits ensembles on the test digits."""
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  _, _, xt, yt = common.load_dataset('digits')
  xt = xt.astype('float32')
  model = _model(0)
  metrics, errors = [], []
  for directory in (one_fit, separate):
    ensemble = tfa.keras.BayesianEnsemble.load(directory, model)
    per_chain = []
    for c in range(k):
      part = tfa.keras.BayesianEnsemble(
          model, [m for m in ensemble.members if m.chain == c],
          likelihood=ensemble.likelihood)
      m = part.evaluate(xt, yt)
      per_chain.append([m['accuracy'], m['log_likelihood']])
    whole = ensemble.evaluate(xt, yt)
    metrics.append(np.array([whole['accuracy'], whole['log_likelihood']]))
    errors.append(np.std(per_chain, axis=0, ddof=1) / np.sqrt(k))
  z = (metrics[0] - metrics[1]) / np.sqrt(errors[0] ** 2 + errors[1] ** 2)
  return metrics, errors, z


def main():
  p = common.parser(__doc__.splitlines()[0])
  hidden = __import__('argparse').SUPPRESS
  p.add_argument('--worker', default=None, help=hidden)
  p.add_argument('--chains', type=int, default=1, help=hidden)
  p.add_argument('--first', type=int, default=0, help=hidden)
  p.add_argument('--directory', default=None, help=hidden)
  p.add_argument('--epochs', type=int, default=EPOCHS, help=hidden)
  p.add_argument('--threads', type=int, default=1, help=hidden)
  args = p.parse_args()
  if args.worker is not None:
    worker(args.worker, args.chains, args.first, args.directory, args.epochs,
           args.threads)
    return
  out = common.out_dir(args.out)
  cores = os.cpu_count() or 1
  epochs = 4 if args.quick else EPOCHS
  counts = (1, 2, 4) if args.quick else (1, 2, 4, 8, 16)
  tmp = tempfile.mkdtemp(prefix='tfpa_chains_one_fit_')
  walls = {}
  try:
    for k in counts:
      for mode in MODES:
        if mode == 'processes' and k == 1:
          walls[mode, k] = walls['separate fits', k]  # The same run.
          continue
        walls[mode, k] = launch(mode, k, os.path.join(
            tmp, '%s_%d' % (mode.replace(' ', '_'), k)), epochs, cores,
                                args.device)
        print(mode, k, '%.1f s' % walls[mode, k], flush=True)
    k = counts[-1]
    metrics, errors, z = compare(os.path.join(tmp, 'one_fit_%d' % k),
                                 os.path.join(tmp, 'separate_fits_%d' % k), k)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  rows = []
  for k in counts:
    row = [str(k)]
    for mode in MODES:
      row += ['%.1f' % walls[mode, k], '%.0f' % (k * 3600. / walls[mode, k])]
    row.append('%.2f' % (walls['one fit', k] / walls['one fit', 1]))
    rows.append(row)
  header = ['K chains']
  for mode in MODES:
    header += ['%s: wall (s)' % mode, 'chains / hour']
  header.append('one fit: wall / one chain\'s')
  note = ('%d epochs of %d steps per chain, %d cores; wall time from launch '
          'to the last exit, Python start-up and XLA compilation included. '
          'K = 1: one chain in one process (the same run in the last two '
          'columns).' % (epochs, -(-1300 // BATCH), cores))
  text = ('## K chains in one fit (%s)\n\n%s\n\n%s\n'
          % ('quick' if args.quick else 'full',
             common.markdown_table(header, rows), note))
  cmp_rows = [['%d chains, %s' % (counts[-1], name),
               '%.4f ± %.4f' % (metrics[i][0], errors[i][0]),
               '%.4f ± %.4f' % (metrics[i][1], errors[i][1])]
              for i, name in enumerate(('one fit', 'separate fits'))]
  cmp_rows.append(['z (difference / error)', '%.2f' % z[0], '%.2f' % z[1]])
  text += '\n%s\n\n%s\n' % (
      common.markdown_table(['ensemble', 'test accuracy',
                             'test log-likelihood'], cmp_rows),
      'Members: one per chain and epoch after burn-in. Errors: the standard '
      'deviation of the chains\' own ensembles\' metrics over sqrt(%d).'
      % counts[-1])
  with open(os.path.join(out, 'chains_one_fit.md'), 'w') as f:
    f.write(text)
  print(text)


if __name__ == '__main__':
  main()
