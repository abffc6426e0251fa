"""Peak memory of `BayesianEnsemble.predict` over M members on disk: it streams them.

A `SampleCollector(directory=...)` writes M members of the MLP
784-400-400-10 (2.4 MB each); a fresh process then loads the directory
(`BayesianEnsemble.load`, which verifies every file) and predicts 1,000
inputs. Reported: the largest resident memory (``VmRSS``, sampled every
5 ms by a thread) during load and predict, above its level just before,
when TensorFlow, the model and the inputs are loaded and one prediction
has run, for M = 10, 100 and 1000. Streaming means it stays near one member plus the
outputs, whatever M.

At scale, the same measure (load, predict and evaluate 1,000 inputs, with
its time) for 10,000 members of a small MLP 64-32-10, and for 1,000
members of a model whose frozen base has 11.4 million weights (784-3000-
3000, ``trainable=False``) under a sampled Dense(10) head, stored once
beside the heads (`tfp_adaptive.keras.frozen_part`). Their members are
written by `BayesianEnsemble.save` from members in memory.

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
# (inputs, hidden widths, frozen base) of the models at scale.
KINDS = {'mlp': (784, (400, 400), False), 'small': (64, (32,), False),
         'frozen': (784, (3000, 3000), True)}


def _model(kind='mlp'):
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(0)
  inputs, hidden, frozen = KINDS[kind]
  body = [keras.layers.Dense(n, activation='relu') for n in hidden]
  if not frozen:
    return keras.Sequential([keras.Input((inputs,))] + body + [
        keras.layers.Dense(SIZES[-1])])
  base = keras.Sequential([keras.Input((inputs,))] + body, name='base')
  base.trainable = False
  return keras.Sequential([keras.Input((inputs,)), base,
                           keras.layers.Dense(SIZES[-1])])


def save_members(directory, kind, count):
  """Saves `count` members of `kind` (the sampled weights perturbed per member) with `BayesianEnsemble.save`."""
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  model = _model(kind)
  frozen = set(tfa.keras.frozen_part.frozen_indices(model))
  base = [np.asarray(v) for v in model.weights]
  rng = np.random.default_rng(0)
  members = []
  for k in range(count):
    values = [a if i in frozen else
              a + 0.01 * rng.standard_normal(a.shape).astype(a.dtype)
              for i, a in enumerate(base)]
    members.append(tfa.keras.members.Member(k + 1, 1., values, None))
  tfa.keras.BayesianEnsemble(model, members,
                             likelihood='categorical',
                             from_logits=True).save(directory)


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


def child(directory, kind='mlp'):
  """Loads and predicts in this process; prints JSON of the memory figures."""
  import threading  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  x = np.random.default_rng(1).random((1000, KINDS[kind][0]), np.float32)
  y = np.random.default_rng(2).integers(0, SIZES[-1], len(x))
  model = _model(kind)
  model.predict(x, batch_size=500, verbose=0)  # Traced once, as predict will.
  before = _rss_mb()
  peak, done = [before], threading.Event()

  def sample():
    while not done.is_set():
      peak[0] = max(peak[0], _rss_mb())
      done.wait(0.005)
  thread = threading.Thread(target=sample)
  thread.start()
  start = time.perf_counter()
  try:
    ensemble = tfa.keras.BayesianEnsemble.load(directory, model)
    probs = ensemble.predict(x, batch_size=500)
    if kind != 'mlp':
      ensemble.evaluate(x, y, batch_size=500)
  finally:
    done.set()
    thread.join()
  print(json.dumps({'members': len(ensemble), 'baseline_mb': before,
                    'extra_mb': peak[0] - before,
                    'seconds': time.perf_counter() - start,
                    'finite': bool(np.all(np.isfinite(probs)))}))


def _measure(directory, kind, device):
  proc = subprocess.run(
      [sys.executable, '-m', 'benchmarks.ensemble_memory', '--child',
       directory, '--kind', kind, '--device', device], capture_output=True,
      text=True, check=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'))
  return json.loads(proc.stdout.strip().splitlines()[-1])


def _disk_mb(directory):
  return sum(os.path.getsize(os.path.join(root, f))
             for root, _, files in os.walk(directory) for f in files) / 2**20


def main():
  p = common.parser(__doc__.splitlines()[0])
  p.add_argument('--child', default=None, help=argparse_hidden())
  p.add_argument('--kind', default='mlp', help=argparse_hidden())
  args = p.parse_args()
  if args.child:
    child(args.child, args.kind)
    return
  out = common.out_dir(args.out)
  counts = (3, 6) if args.quick else (10, 100, 1000)
  rows = []
  for count in counts:
    directory = tempfile.mkdtemp(prefix='tfpa_members_')
    try:
      write_members(directory, count)
      result = _measure(directory, 'mlp', args.device)
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
  scale = ((('small', 40), ('frozen', 8)) if args.quick else
           (('small', 10000), ('frozen', 1000)))
  rows = []
  for kind, count in scale:
    directory = tempfile.mkdtemp(prefix='tfpa_members_')
    try:
      save_members(directory, kind, count)
      disk = _disk_mb(directory)
      result = _measure(directory, kind, args.device)
    finally:
      shutil.rmtree(directory, ignore_errors=True)
    rows.append([{'small': 'MLP 64-32-10', 'frozen': 'frozen base of 11.4M '
                  'weights, Dense(10) head'}[kind], str(result['members']),
                 '%.1f MB' % disk, '%.0f MB' % result['baseline_mb'],
                 '%.0f MB' % result['extra_mb'], '%.1f' % result['seconds']])
    print(rows[-1], flush=True)
  common.write_table(
      os.path.join(out, 'ensemble_memory_scale.md'),
      'Ensembles at scale: load, predict and evaluate (%s)'
      % ('quick' if args.quick else 'full'),
      ['model', 'members', 'on disk', 'process before load',
       'peak above that', 'seconds'], rows,
      'Load (every file verified), predict and evaluate 1,000 inputs in a '
      'fresh process; the frozen base is one file of 45 MB on disk, read '
      'once, and computed once per batch of inputs.')


def argparse_hidden():
  import argparse  # pylint: disable=g-import-not-at-top
  return argparse.SUPPRESS


if __name__ == '__main__':
  main()
