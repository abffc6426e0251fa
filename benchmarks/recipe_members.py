"""What the README recipe's members are: their temperature against the sampling phase's length and against the step.

The README's recipe trains with Adam to a mode (early stopping), then
samples with corrected `PSGLD` at the step `CurvatureCalibration` reads
from the stiffest directions. Its members are read on the training data
(`BayesianEnsemble.check_temperature`) in both forms of the
configurational temperature, 1 for draws from the posterior:

* the **virial** form averages every direction, the soft ones the data
  leave to the prior included;
* the **Laplacian** form weighs the stiff directions the data pin down,
  which set the predictions.

One chain per row, from the same warm start (seed 0), on two of the
quality benchmark's data sets: Boston housing (`benchmarks.quality_uci`:
its first split, one hidden layer of 50 units, `NoiseScale`, the ReLU
prior) and the README's digits MLP (`benchmarks.quality`). Rows:

* the calibrated step, sampled for 20 (the README's length), 80 and 320
  epochs;
* the calibrated step times 10, 100 and 1,000, set by hand, sampled for
  80 epochs.

Each row keeps at most 50 members, after a burn-in of a quarter of its
epochs. Reported: both temperatures (± standard error), the test
log-likelihood (Boston: in the targets' units), and the seconds. Writes
``recipe_members.md``.

    python -m benchmarks.recipe_members [--quick]
"""

import os
import time
import warnings

import numpy as np
import keras

import tfp_adaptive as tfa
from benchmarks import common
from benchmarks import quality
from benchmarks import quality_uci

LENGTHS = (20, 80, 320)
FACTORS = (10, 100, 1000)
MAX_MEMBERS = 50


def _boston():
  x, y = quality_uci.load('Boston housing')
  data, y_scale = quality_uci.split(x, y, seed=0)
  return (data, quality_uci.model_fn(x.shape[1], False),
          tfa.keras.GaussianNLL, np.log(y_scale))


def _digits():
  data, model_fn, loss_fn, _ = quality.datasets()['digits MLP']
  return data, model_fn, loss_fn, 0.


def run_one(data, model_fn, loss_fn, epochs, factor=None, step=None,
            adam_epochs=48):
  """One chain from the warm start: ``(metrics, calibrated step)``.

  ``factor``: the step is ``factor · step`` (no calibration); else
  `CurvatureCalibration` sets it over the first 2 epochs. ``adam_epochs``:
  at most that many epochs of Adam (the README's 48).
  """
  x, y, xt, yt = data
  keras.utils.set_random_seed(0)
  model = model_fn(len(x), y)
  common.adam_to_a_mode(model, x, y, loss_fn(), adam_epochs)
  t0 = time.time()
  lr = 1e-4 if factor is None else factor * step
  model.compile(tfa.keras.optimizers.PSGLD(lr, data_size=len(x)),
                loss=loss_fn())
  collector = tfa.keras.SampleCollector(burnin=max(epochs // 4, 2),
                                        unit='epoch', max_samples=MAX_MEMBERS)
  callbacks = [collector]
  if factor is None:
    callbacks.insert(0, tfa.keras.CurvatureCalibration((x, y), epochs=2))
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # Read below, in both forms.
    model.fit(x, y, epochs=epochs, verbose=0, callbacks=callbacks)
    try:
      readings = collector.ensemble.check_temperature(x, y, warn=False)
    except ValueError:  # Too few members to read (--quick).
      readings = {'overall': None, 'laplacian': None}
  metrics = collector.ensemble.evaluate(xt, yt)
  metrics['seconds'] = time.time() - t0
  metrics['virial'] = readings['overall']
  metrics['laplacian'] = readings['laplacian']
  return metrics, float(model.optimizer.learning_rate)


def _reading(r):
  return '—' if r is None else '%.3g ± %.2g' % (r.temperature,
                                                r.standard_error)


def main():
  p = common.parser(__doc__.splitlines()[0])
  args = p.parse_args()
  out = common.out_dir(args.out)
  sets = {'Boston housing': _boston, 'digits MLP': _digits}
  lengths, factors = ((8,), (10,)) if args.quick else (LENGTHS, FACTORS)
  adam = 6 if args.quick else 48  # --quick: that every piece runs.
  rows = []
  for name, load in sets.items():
    if args.quick and name != 'Boston housing':
      continue
    data, model_fn, loss_fn, units = load()
    runs, step = [], None
    for epochs in lengths:
      m, lr = run_one(data, model_fn, loss_fn, epochs, adam_epochs=adam)
      step = step or lr  # The README's length sets the step of the rest.
      runs.append(('calibrated (%.2g)' % lr, epochs, m))
    for factor in factors:
      epochs = lengths[min(1, len(lengths) - 1)]
      m, lr = run_one(data, model_fn, loss_fn, epochs, factor, step,
                      adam_epochs=adam)
      runs.append(('%d × calibrated (%.2g)' % (factor, lr), epochs, m))
    for label, epochs, m in runs:
      rows.append([name, label, epochs, _reading(m['virial']),
                   _reading(m['laplacian']),
                   '%.3f' % (m['log_likelihood'] - units),
                   '%.0f' % m['seconds']])
      print(rows[-1], flush=True)
  common.write_table(
      os.path.join(out, 'recipe_members.md'),
      "The README recipe's members: temperature against length and step "
      '(%s)' % ('quick' if args.quick else 'full'),
      ['data set', 'step', 'sampled epochs', 'T virial', 'T Laplacian',
       'test log-likelihood', 'seconds'], rows,
      'Command: `python -m benchmarks.recipe_members%s`. One chain per row '
      'from the same Adam warm start; members read on the training data '
      '(1 for posterior draws). "T virial" weighs every direction, "T '
      'Laplacian" the stiff ones. Boston\'s log-likelihood is in the '
      'targets\' units.' % (' --quick' if args.quick else ''))


if __name__ == '__main__':
  main()
