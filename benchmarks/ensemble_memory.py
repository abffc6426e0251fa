"""Peak memory of `BayesianEnsemble.predict` over M members on disk: it streams them.

A `SampleCollector(directory=...)` writes M members of the MLP
784-400-400-10 (2.4 MB each); a fresh process then loads the directory
(`BayesianEnsemble.load`, which verifies every file) and predicts 1,000
inputs. Reported: the largest resident memory (``VmRSS``, sampled every
5 ms by a thread) during load and predict, above its level just before,
when TensorFlow, the model and the inputs are loaded and one prediction
has run, for M = 10, 100 and 1000. Streaming means it stays near one member plus the
outputs, whatever M.

    python -m benchmarks.ensemble_memory [--quick]
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

from benchmarks import common

SIZES = (784, 400, 400, 10)


def _model():
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  return keras.Sequential([keras.Input((SIZES[0],))] + [
      keras.layers.Dense(n, activation='relu') for n in SIZES[1:-1]] + [
          keras.layers.Dense(SIZES[-1])])


def write_members(directory, count):
  """Runs `count` SGLD steps on random data, one member streamed per step."""
  import keras  # pylint: disable=g-import-not-at-top
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.random((count * 10, SIZES[0]), np.float32)
  y = rng.integers(0, SIZES[-1], count * 10)
  model = _model()
  model.compile(tfa.keras.optimizers.SGLD(1e-7, data_size=len(x), seed=0),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=True)
  collector = tfa.keras.SampleCollector(directory=directory)
  model.fit(x, y, batch_size=10, epochs=1, verbose=0, callbacks=[collector])


def _rss_mb():
  with open('/proc/self/status') as f:
    for line in f:
      if line.startswith('VmRSS:'):
        return int(line.split()[1]) / 1024.
  return float('nan')


def child(directory):
  """Loads and predicts in this process; prints JSON of the memory figures."""
  import threading  # pylint: disable=g-import-not-at-top
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  x = np.random.default_rng(1).random((1000, SIZES[0]), np.float32)
  model = _model()
  model.predict(x, batch_size=500, verbose=0)  # Traced once, as predict will.
  before = _rss_mb()
  peak, done = [before], threading.Event()

  def sample():
    while not done.is_set():
      peak[0] = max(peak[0], _rss_mb())
      done.wait(0.005)
  thread = threading.Thread(target=sample)
  thread.start()
  try:
    ensemble = tfa.keras.BayesianEnsemble.load(directory, model)
    probs = ensemble.predict(x, batch_size=500)
  finally:
    done.set()
    thread.join()
  print(json.dumps({'members': len(ensemble), 'baseline_mb': before,
                    'extra_mb': peak[0] - before,
                    'finite': bool(np.all(np.isfinite(probs)))}))


def main():
  p = common.parser(__doc__.splitlines()[0])
  p.add_argument('--child', default=None, help=argparse_hidden())
  args = p.parse_args()
  if args.child:
    child(args.child)
    return
  out = common.out_dir(args.out)
  counts = (3, 6) if args.quick else (10, 100, 1000)
  rows = []
  for count in counts:
    directory = tempfile.mkdtemp(prefix='tfpa_members_')
    try:
      write_members(directory, count)
      proc = subprocess.run(
          [sys.executable, '-m', 'benchmarks.ensemble_memory', '--child',
           directory, '--device', args.device], capture_output=True,
          text=True, check=True,
          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
      result = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
      shutil.rmtree(directory, ignore_errors=True)
    rows.append([str(result['members']), '%.0f MB' % (
        result['members'] * 2.4), '%.0f MB' % result['baseline_mb'],
                 '%.0f MB' % result['extra_mb']])
    print(rows[-1], flush=True)
  common.write_table(
      os.path.join(out, 'ensemble_memory.md'),
      'Peak memory of BayesianEnsemble.predict over members on disk (%s)'
      % ('quick' if args.quick else 'full'),
      ['members', 'on disk (approx.)', 'process before load',
       'peak above that (load + predict 1,000 inputs)'], rows,
      'MLP 784-400-400-10; a fresh process per row; VmRSS sampled every '
      '5 ms.')


def argparse_hidden():
  import argparse  # pylint: disable=g-import-not-at-top
  return argparse.SUPPRESS


if __name__ == '__main__':
  main()
