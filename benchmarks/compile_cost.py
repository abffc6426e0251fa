"""What XLA costs and saves a Keras `fit` with Γ: the first epoch against the steps after it, with and without `jit_compile`, side by side.

Each row compiles a fresh model with a sampler (with Γ where it has one,
switched on as `SampleCollector` does) and ``jit_compile`` off or on,
then fits it on random data. The first `fit`, of one epoch, includes
tracing the step (and, with XLA, compiling it); after it, a `fit` of
three epochs less one of one epoch gives two epochs' steps without the
call's own overhead (the best of three such pairs). The columns:

- **first epoch**: the first `fit`'s seconds, tracing and compiling
  included;
- **a step after**: milliseconds a step once compiled;
- **XLA's start-up over graph mode**: the first epoch with XLA less the
  first epoch without, in seconds;
- **steps to pay it back**: that start-up divided by what XLA saves a
  step (``never`` when the step is not faster with XLA).

Models: the digits MLP 64-100-10 (batch 32) and the MLP 784-400-400-10
(batch 100). Samplers: SGLD (no Γ), corrected PSGLD, MongeSGRLD and
ShampooSGRLD (roots by eigendecomposition, as Γ needs), each at its
defaults; Shampoo on the small MLP only.

    python -m benchmarks.compile_cost [--quick]
"""

import os
import time

import numpy as np
import keras

import tfp_adaptive as tfa
from benchmarks import common

#: ``{model name: (layer widths, batch size)}``.
MODELS = {'MLP 64-100-10': ([64, 100, 10], 32),
          'MLP 784-400-400-10': ([784, 400, 400, 10], 100)}
SAMPLERS = {'SGLD': tfa.keras.optimizers.SGLD,
            'PSGLD': tfa.keras.optimizers.PSGLD,
            'MongeSGRLD': tfa.keras.optimizers.MongeSGRLD,
            'ShampooSGRLD': tfa.keras.optimizers.ShampooSGRLD}
STEPS = 20


def _model(widths, seed=0):
  keras.utils.set_random_seed(seed)
  return keras.Sequential(
      [keras.Input((widths[0],))] +
      [keras.layers.Dense(w, activation='relu') for w in widths[1:-1]] +
      [keras.layers.Dense(widths[-1])])


def time_fit(widths, batch, sampler, jit_compile, steps, rounds=3):
  """``(first epoch seconds, seconds a step after)`` of one fresh model."""
  rng = np.random.default_rng(0)
  n = batch * steps
  x = rng.normal(size=(n, widths[0])).astype('float32')
  y = rng.integers(0, widths[-1], n)
  model = _model(widths)
  model.compile(SAMPLERS[sampler](1e-6, data_size=n),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=jit_compile)
  if sampler != 'SGLD':
    tfa.keras.enable_gamma(model)
  def fit(epochs):
    t0 = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False,
              verbose=0)
    return time.perf_counter() - t0
  first = fit(1)
  # A `fit` call's own overhead cancels in the difference.
  after = [(fit(3) - fit(1)) / (2 * steps) for _ in range(rounds)]
  return first, min(after)


def table_rows(times):
  """Rows of the table from ``{(model, sampler, jit): (first, step)}``."""
  rows = []
  for (model, sampler, jit), (first, step) in times.items():
    if jit:
      g_first, g_step = times[(model, sampler, False)]
      start_up = first - g_first
      saved = g_step - step
      back = ('%.0f' % (start_up / saved) if saved > 0 and start_up > 0 else
              'at once' if start_up <= 0 else 'never')
      extra = ['%.1f' % start_up, back]
    else:
      extra = ['', '']
    rows.append([model, sampler, 'XLA' if jit else 'graph', '%.1f' % first,
                 '%.2f' % (1e3 * step)] + extra)
  return rows


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  if args.quick:
    cases, steps, rounds = [('MLP 64-100-10', 'PSGLD')], 2, 1
  else:
    cases = [(m, s) for m in MODELS for s in SAMPLERS
             if not (s == 'ShampooSGRLD' and m != 'MLP 64-100-10')]
    steps, rounds = STEPS, 3
  times = {}
  for model, sampler in cases:
    for jit in (False, True):
      widths, batch = MODELS[model]
      times[(model, sampler, jit)] = time_fit(widths, batch, sampler, jit,
                                              steps, rounds)
      print(model, sampler, jit, times[(model, sampler, jit)], flush=True)
  common.write_table(
      os.path.join(out, 'compile_cost.md'),
      'What XLA costs a Keras fit with Γ (%s)' % ('quick' if args.quick
                                                  else 'full'),
      ['model', 'sampler', 'step', 'first epoch (s)', 'a step after (ms)',
       'XLA\'s start-up over graph mode (s)', 'steps to pay it back'],
      table_rows(times),
      'Command: `python -m benchmarks.compile_cost%s`. One epoch of %d steps '
      'a `fit`; "first epoch": the first `fit` of a fresh model, tracing '
      'and compiling included; "a step after": a `fit` of 3 epochs less '
      'one of 1, per step, the best of %d such pairs. Γ switched on for '
      'every sampler but SGLD, as `SampleCollector` does. "steps to pay '
      'it back": XLA\'s extra start-up over what it saves a step.'
      % (' --quick' if args.quick else '', steps, rounds))


if __name__ == '__main__':
  main()
