"""Sampling the head of a frozen base: bytes per member and prediction time.

A base of two dense layers of 1,024 units on 784 inputs (1.85M weights)
is frozen (``trainable = False``) under a sampled dense head of 10
outputs; a `SampleCollector(directory=...)` streams K members of a short
SGLD run on random data. Reported, for K members:

- the bytes of each member's file against the head's own bytes (the base
  is stored once, in one shared file), beside what a member of the whole
  model takes;
- the time of `BayesianEnsemble.predict` on 2,000 inputs against one
  forward pass of the whole model plus K passes of the head alone (the
  floor of computing the base once), and against K passes of the whole
  model (the member-by-member prediction, which a model without a
  frozen first part gets). Both the whole pass and the head's are timed
  as the ensemble's member-by-member passes run (`predict_on_batch` on
  1,024 rows at a time).
  Times are the best of several interleaved rounds in one run.

    python -m benchmarks.frozen_base [--quick]
"""

import os
import tempfile
import time

import numpy as np

from benchmarks import common

WIDTH, INPUTS, OUTPUTS, ROWS = 1024, 784, 10, 2000


def _model(seed=0):
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(seed)
  base = keras.Sequential([keras.Input((INPUTS,)),
                           keras.layers.Dense(WIDTH, activation='relu'),
                           keras.layers.Dense(WIDTH, activation='relu')],
                          name='base')
  base.trainable = False
  inputs = keras.Input((INPUTS,))
  return keras.Model(inputs, keras.layers.Dense(OUTPUTS)(
      base(inputs, training=False)))


def _collect(directory, members):
  import keras  # pylint: disable=g-import-not-at-top
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  x = rng.random((members * 10, INPUTS), np.float32)
  y = rng.integers(0, OUTPUTS, len(x))
  model = _model()
  model.compile(tfa.keras.optimizers.SGLD(1e-6, data_size=len(x), seed=0),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  collector = tfa.keras.SampleCollector(directory=directory, monitor=False)
  model.fit(x, y, batch_size=10, epochs=1, verbose=0, callbacks=[collector])
  return model, collector.ensemble


def _best(fn, rounds):
  fn()  # Traced and warm.
  times = []
  for _ in range(rounds):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return min(times)


def measure(members, rounds):
  from tfp_adaptive.keras import members as members_lib  # pylint: disable=g-import-not-at-top
  x = np.random.default_rng(1).random((ROWS, INPUTS), np.float32)
  with tempfile.TemporaryDirectory() as directory:
    model, ensemble = _collect(directory, members)
    assert len(ensemble) == members, len(ensemble)
    names = os.listdir(directory)
    sample_bytes = [os.path.getsize(os.path.join(directory, n))
                    for n in names if n.startswith('sample_')]
    frozen_bytes = sum(os.path.getsize(os.path.join(directory, n))
                       for n in names if n.startswith('frozen_'))
    head_bytes = sum(v.numpy().nbytes for v in model.trainable_weights)
    whole_bytes = sum(v.numpy().nbytes for v in model.weights)
    cut = ensemble._cut(x)  # pylint: disable=protected-access
    features = members_lib.outputs(cut.base, x)
    timings = {}
    uncut = type(ensemble)(model, ensemble.members)
    uncut._split = (None,)  # pylint: disable=protected-access
    fns = {'ensemble': lambda: ensemble.predict(x),
           'forward': lambda: members_lib.outputs(model, x),
           'head': lambda: members_lib.outputs(cut.head, features),
           'uncut': lambda: uncut.predict(x)}
    for _ in range(rounds):  # Interleaved: each keeps its best.
      for name, fn in fns.items():
        timings[name] = min(timings.get(name, np.inf), _best(fn, 1))
    np.testing.assert_allclose(ensemble.predict(x), uncut.predict(x),
                               rtol=1e-4, atol=1e-6)
  floor = timings['forward'] + members * timings['head']
  return dict(members=members, head_bytes=head_bytes,
              whole_bytes=whole_bytes, sample_bytes=max(sample_bytes),
              frozen_bytes=frozen_bytes, base_weights=int(sum(
                  np.prod(v.shape) for v in cut.base.weights)),
              predict=timings['ensemble'], floor=floor,
              forward=timings['forward'], head=timings['head'],
              uncut=timings['uncut'])


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  sizes, rounds = ((2,), 2) if args.quick else ((1, 4, 16, 64), 5)
  rows = []
  for k in sizes:
    r = measure(k, rounds)
    rows.append([
        k, '%.2fM' % (r['base_weights'] / 1e6),
        '%.1f kB' % (r['head_bytes'] / 1e3),
        '%.1f kB (%.2f×)' % (r['sample_bytes'] / 1e3,
                            r['sample_bytes'] / r['head_bytes']),
        '%.1f MB' % (r['whole_bytes'] / 1e6),
        '%.1f MB, once' % (r['frozen_bytes'] / 1e6),
        '%.1f ms' % (1e3 * r['predict']),
        '%.1f ms + %d × %.2f ms = %.1f ms' % (
            1e3 * r['forward'], k, 1e3 * r['head'], 1e3 * r['floor']),
        '**%.2f×**' % (r['predict'] / r['floor']),
        '%.1f ms (%.1f×)' % (1e3 * r['uncut'], r['uncut'] / r['predict'])])
  common.write_table(
      os.path.join(out, 'frozen_base.md'),
      'Sampling part of a model: a frozen base of %d weights' % int(
          r['base_weights']),
      ['K members', 'frozen base', 'head', 'bytes per member file (÷ head)',
       'a member of the whole model', 'the base',
       'predict %d inputs' % ROWS,
       'floor: one whole pass + K heads', 'predict ÷ floor',
       'member by member (× predict)'], rows,
      note='Best of %d interleaved rounds in one run. A member file holds '
      'the head and the file\'s metadata; the base is one shared file per '
      'directory.' % rounds)


if __name__ == '__main__':
  main()
