"""Chain parallelism: K independent processes, one chain each, into sibling directories.

Each chain is its own process (``python -m benchmarks.chains --chain k``):
the MLP 64-100-100-10 on digits, corrected `PSGLD` with
`StepSizeCalibration` (the Keras guide's single-chain settings), seed
``k``, and a `SampleCollector` writing ``ROOT/chain_k`` (a member every 5
epochs after a 50-epoch burn-in). The chains share nothing.

Reported:

- **Throughput**: K chains started together, for K = 1, 2, 4 on this
  machine, each process with ``max(1, cores // K)`` threads. Chains per
  hour = K / (wall time from launch to the last exit), process start-up
  included, as a user would see it.
- **Equivalence**: the ensemble of the K = 4 chains (``BayesianEnsemble.load
  (ROOT)``, all chains) against one long chain with the same burn-in and
  4× the post-burn-in epochs, on the 497 test images: accuracy and
  log-likelihood. The Monte Carlo error of each ensemble is estimated from
  its four parts (the four chains; the long chain's four consecutive
  quarters) as the standard deviation of the parts' metrics over
  sqrt(4); ``z`` is the difference over the two errors combined.

    python -m benchmarks.chains [--quick]
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

BURNIN, THINNING = 50, 5


def chain(k, directory, epochs, burnin, threads):
  """One chain in this process; prints JSON with its fit time."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  import keras  # pylint: disable=g-import-not-at-top
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  x, y, _, _ = common.load_dataset('digits')
  model = common.mlp(64, 100, seed=k)
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x), seed=k),
                'sparse_categorical_crossentropy', jit_compile=True)
  callbacks = [tfa.keras.StepSizeCalibration(epochs=5),
               tfa.keras.SampleCollector(
                   burnin=burnin, thinning=THINNING,
                   unit='epoch', directory=directory)]
  start = time.perf_counter()
  model.fit(x, y, batch_size=64, epochs=epochs, verbose=0,
            callbacks=callbacks)
  print(json.dumps({'fit_seconds': time.perf_counter() - start,
                    'members': len(callbacks[1].members)}))
  del keras


def launch(root, ks, epochs, burnin, threads, device):
  """Starts one process per chain in `ks` at once; ``(wall seconds, outputs)``."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3')
  start = time.perf_counter()
  procs = [subprocess.Popen(
      [sys.executable, '-m', 'benchmarks.chains', '--chain', str(k),
       '--directory', os.path.join(root, 'chain_%d' % k), '--epochs',
       str(epochs), '--burnin', str(burnin), '--threads', str(threads),
       '--device', device],
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
           for k in ks]
  outs = []
  for p in procs:
    out, err = p.communicate()
    if p.returncode:
      raise RuntimeError(err[-3000:])
    outs.append(json.loads(out.strip().splitlines()[-1]))
  return time.perf_counter() - start, outs


def _metrics(members, model, likelihood, xt, yt):
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  ensemble = tfa.keras.BayesianEnsemble(model, members, likelihood=likelihood)
  m = ensemble.evaluate(xt, yt)
  return np.array([m['accuracy'], m['log_likelihood']])


def compare(parallel_root, long_root, parts):
  """Metrics of both ensembles, their MC errors from `parts` parts each, and z."""
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  _, _, xt, yt = common.load_dataset('digits')
  model = common.mlp(64, 100)
  par = tfa.keras.BayesianEnsemble.load(parallel_root, model)
  lng = tfa.keras.BayesianEnsemble.load(long_root, model)
  lik = par.likelihood
  by_chain = [[m for m in par.members if m.chain == k] for k in range(parts)]
  long_members = sorted(lng.members, key=lambda m: m.step)
  quarters = np.array_split(np.arange(len(long_members)), parts)
  metric = lambda ms: _metrics(ms, model, lik, xt, yt)
  full = [metric(par.members), metric(long_members)]
  part_metrics = [np.array([metric(ms) for ms in by_chain]),
                  np.array([metric([long_members[i] for i in q])
                            for q in quarters])]
  errors = [np.std(p, axis=0, ddof=1) / np.sqrt(parts) for p in part_metrics]
  z = (full[0] - full[1]) / np.sqrt(errors[0] ** 2 + errors[1] ** 2)
  return full, errors, z, (len(par.members), len(long_members))


def main():
  p = common.parser(__doc__.splitlines()[0])
  hidden = __import__('argparse').SUPPRESS
  p.add_argument('--chain', type=int, default=None, help=hidden)
  p.add_argument('--directory', default=None, help=hidden)
  p.add_argument('--epochs', type=int, default=None, help=hidden)
  p.add_argument('--burnin', type=int, default=None, help=hidden)
  p.add_argument('--threads', type=int, default=None, help=hidden)
  args = p.parse_args()
  if args.chain is not None:
    chain(args.chain, args.directory, args.epochs, args.burnin, args.threads)
    return
  out = common.out_dir(args.out)
  cores = os.cpu_count() or 1
  epochs = 40 if args.quick else 300
  burnin = 10 if args.quick else BURNIN
  counts = (1, 2) if args.quick else (1, 2, 4)
  tmp = tempfile.mkdtemp(prefix='tfpa_chains_')
  try:
    rows, walls = [], []
    for k in counts:
      root = os.path.join(tmp, 'k%d' % k)
      wall, outs = launch(root, range(k), epochs, burnin,
                          max(1, cores // k), args.device)
      walls.append(wall)
      fit = np.mean([o['fit_seconds'] for o in outs])
      rows.append([str(k), str(max(1, cores // k)), '%.1f' % wall,
                   '%.1f' % fit, '%.0f' % (k * 3600. / wall),
                   '%.2f' % (k * walls[0] / wall)])
      print(rows[-1], flush=True)
    parts = counts[-1]
    long_epochs = burnin + parts * (epochs - burnin)
    long_root = os.path.join(tmp, 'long')
    long_wall, _ = launch(long_root, [0], long_epochs, burnin, cores,
                          args.device)
    full, errors, z, sizes = compare(os.path.join(tmp, 'k%d' % parts),
                                     long_root, parts)
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  note = ('%d epochs per chain (burn-in %d, a member every %d epochs), '
          '%d cores; wall time from launch to the last exit, start-up '
          'included. Speed-up: chains per hour over K = 1\'s.'
          % (epochs, burnin, THINNING, cores))
  text = '## Chain parallelism: K processes on this machine (%s)\n\n%s\n\n%s\n' % (
      'quick' if args.quick else 'full', common.markdown_table(
          ['K chains', 'threads each', 'wall (s)', 'fit per chain (s)',
           'chains / hour', 'speed-up'], rows), note)
  names = ('%d chains × %d epochs' % (parts, epochs),
           '1 chain × %d epochs' % long_epochs)
  cmp_rows = [[names[i], str(sizes[i]),
               '%.4f ± %.4f' % (full[i][0], errors[i][0]),
               '%.4f ± %.4f' % (full[i][1], errors[i][1])]
              for i in range(2)]
  cmp_rows.append(['z (difference / error)', '', '%.2f' % z[0],
                   '%.2f' % z[1]])
  text += '\n%s\n\n%s\n' % (common.markdown_table(
      ['ensemble', 'members', 'test accuracy', 'test log-likelihood'],
      cmp_rows),
      'Errors: the standard deviation of the %d parts\' metrics (the '
      'chains; the long chain\'s consecutive parts) over sqrt(%d). The '
      'long chain took %.0f s.' % (parts, parts, long_wall))
  with open(os.path.join(out, 'chains.md'), 'w') as f:
    f.write(text)
  print(text)


if __name__ == '__main__':
  main()
