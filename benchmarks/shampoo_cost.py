"""Cost of the Shampoo metric on the MLP: blocked and full factors, eigh and Newton roots.

Keras `fit` on the MLP 784-400-400-10 (batch 100, XLA, random data), every
configuration's best time per step from interleaved rounds in one run, as
`benchmarks.keras_speed` times them, against PSGLD (Γ-free throughout):

- blocks of 128 (``block_size=128``: the 784×400 kernel in 112×100 blocks,
  400×400 in 100×100) and full factors (``max_dim=1024``: 784×784 and
  400×400 factors), roots refreshed every 100 steps by ``roots='eigh'``
  or ``roots='newton'`` (`tfp_adaptive.core.roots`);
- the same with the roots never refreshed while timed: the per-step work
  alone (factor statistics and two Kronecker products, for the drift and
  the noise);
- the time of one refresh of every factor (compiled), eigh against Newton.

The floor: per step Shampoo adds ``3 Σ_i b_i`` multiply-adds per weight
(a statistic and two products per mode of block width ``b_i``), against the
gradient's ``≈ 3 × batch`` (forward and backward passes). The table gives
that count over the gradient's; at equal arithmetic rate, a Shampoo step
costs at least ``1 +`` that ratio in units of the gradient.

    python -m benchmarks.shampoo_cost [--quick]
"""

import os
import time

import numpy as np
import tensorflow as tf
import keras

import tfp_adaptive as tfa
from benchmarks import common
from benchmarks import keras_speed

LAYERS = ((784, 400), (400, 400), (400, 10))
BATCH = keras_speed.BATCH


def configurations(fixed):
  kw = dict(data_size=60000, seed=0, gamma='none', epsilon=1e-2)
  opt = tfa.keras.optimizers
  shampoo = lambda **a: (lambda: opt.ShampooSGRLD(1e-6, **dict(kw, **a)))
  configs = {
      'SGD': lambda: keras.optimizers.SGD(1e-3),
      'PSGLD (none)': lambda: opt.PSGLD(1e-6, gamma='none', data_size=60000,
                                        seed=0),
  }
  for layout, args in (('blocks of 128', dict(block_size=128)),
                       ('full factors', dict(max_dim=1024))):
    for roots in ('eigh', 'newton'):
      configs['Shampoo, %s, %s roots every 100 steps' % (layout, roots)] = (
          shampoo(update_interval=100, roots=roots, **args))
    configs['Shampoo, %s, roots not refreshed' % layout] = shampoo(
        update_interval=fixed, **args)
  return configs


def refresh_seconds(block_size, max_dim, roots, hidden, repeats, xla=True):
  """Best time of one refresh of all the MLP's factors (with XLA or without)."""
  pre = tfa.core.shampoo.Shampoo(0.9, 1e-2, 1, max_dim, block_size, roots)
  rng = np.random.default_rng(0)
  parts = [tf.constant(rng.normal(size=s), tf.float32) for s in
           ((784, hidden), (hidden,), (hidden, hidden), (hidden,),
            (hidden, 10), (10,))]
  state = pre.init([tf.zeros_like(p) for p in parts], 0)
  state = pre.update(state, parts, tf.constant(1), 0)
  fn = tf.function(lambda s, g: pre.update(s, g, tf.constant(0), 0),
                   jit_compile=xla, autograph=False)
  tf.nest.map_structure(lambda t: t.numpy(), fn(state, parts))
  best = np.inf
  for _ in range(repeats):
    start = time.perf_counter()
    tf.nest.map_structure(lambda t: t.numpy(), fn(state, parts))
    best = min(best, time.perf_counter() - start)
  return best


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  hidden, steps, rounds, instances = ((50, 10, 1, 1) if args.quick else
                                      (400, 50, 5, 2))
  configs = configurations(keras_speed.FIXED_ROOTS)
  best = keras_speed.time_steps(configs, hidden, steps, rounds, instances)
  psgld = best['PSGLD (none)']
  floors = {'blocks of 128': keras_speed.multiply_adds(128, 1024, hidden),
            'full factors': keras_speed.multiply_adds(None, 1024, hidden)}
  rows = []
  for name, t in best.items():
    floor = ''
    for layout, (extra, grad) in floors.items():
      if layout in name:
        floor = '%.2f' % (extra / grad)
    rows.append([name, '%.3f ms' % (1e3 * t), '%.2f' % (t / best['SGD']),
                 '%.2f' % (t / psgld), floor])
  refresh = []
  for layout, (block, max_dim) in (('blocks of 128', (128, 1024)),
                                   ('full factors', (None, 1024))):
    repeats = 2 if args.quick else 5
    times = {(r, xla): refresh_seconds(block, max_dim, r, hidden, repeats,
                                       xla)
             for r in tfa.core.shampoo.ROOT_METHODS for xla in (True, False)}
    refresh.append([layout] + ['%.1f ms' % (1e3 * times[k]) for k in (
        ('eigh', True), ('newton', True), ('eigh', False), ('newton', False))]
                   + ['%.2f' % (times['newton', True] / times['eigh', True])])
  text = ('## Shampoo cost, MLP 784-%d-%d-10, batch %d, XLA (%s)\n\n%s\n\n'
          'Γ-free throughout. "Multiply-adds over the gradient\'s": Shampoo\'s '
          'per-step statistics and products counted against the gradient\'s '
          'forward and backward passes (the floor above; not measured).\n\n'
          '### One refresh of every factor\n\n%s\n\nThe eigendecompositions '
          'are float64, XLA\'s own or (without XLA) TensorFlow\'s CPU '
          'kernel (Eigen); the Newton iteration runs to a residual of '
          '1e-10 in float64. With Γ, the roots must come from the '
          'eigendecomposition (Γ differentiates them at their eigenbasis), '
          'so a corrected Shampoo run pays the eigh refresh.\n' % (
              hidden, hidden, BATCH, 'quick' if args.quick else 'full',
              common.markdown_table(
                  ['configuration', 'time/step', '× SGD', '× PSGLD (none)',
                   'multiply-adds over the gradient\'s'], rows),
              common.markdown_table(['factors', 'eigh (XLA)', 'newton (XLA)',
                                     'eigh (no XLA)',
                                     'newton (no XLA)',
                                     'newton / eigh under XLA'], refresh)))
  with open(os.path.join(out, 'shampoo_cost.md'), 'w') as f:
    f.write(text)
  print(text)


if __name__ == '__main__':
  main()
