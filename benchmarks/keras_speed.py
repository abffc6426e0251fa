"""Keras step time of every sampler optimizer vs SGD and vs SGD + Gaussian noise (one run).

MLP 784-400-400-10, batch 100, `jit_compile=True`, random data; each
configuration's time per step is the best of several rounds, the rounds
interleaved so all ratios come from the same conditions. Goals: ≤ 1.05×
SGD-plus-noise for PSGLD without Γ (shown beside Keras' own RMSprop plus
the same noise, which pays the same moving average), corrected ≤ 1.5×
none, blocked Shampoo ≤ 1.25× its floor (PSGLD plus its products at the
dense matrix rate).
"SGD + noise + HVP" also takes the Hessian-vector product Γ needs, as the
samplers take it: the floor of any step with Γ, against which the corrected
rows are compared as the Γ-free rows are against SGD + noise.

    python -m benchmarks.keras_speed [--quick]

``--quick`` runs small sizes as graphs, without XLA: a check that every
piece runs (XLA's compile would be most of its time), not a timing.
"""

import os
import time
import types

import numpy as np
import tensorflow as tf
import keras

import tfp_adaptive as tfa
from benchmarks import common
from tfp_adaptive.core import gamma as gamma_lib

opt = tfa.keras.optimizers


class _NoiseInGradient(object):
  """Mixin: a Keras optimizer whose gradient gets one draw per parameter.

  The draw is the samplers' own (`draw`: normal, Threefry under XLA, or
  Rademacher), from the iteration's stateless seed, for a fair floor.
  """

  draw = staticmethod(tfa.core.noise.normal)

  def update_step(self, gradient, variable, learning_rate):
    seed = tf.stack([tf.cast(self.iterations, tf.int32), 0])
    noise = self.draw([variable], seed)[0]
    super().update_step(gradient + 1e-6 * noise, variable, learning_rate)


class NoisySGD(_NoiseInGradient, keras.optimizers.SGD):
  """SGD plus one standard normal number per parameter: the Langevin floor."""


class NoisyRMSprop(_NoiseInGradient, keras.optimizers.RMSprop):
  """Keras' RMSprop plus the samplers' normal draw: the floor of PSGLD without Γ.

  The same moving average of squared gradients, read and written every
  step, and the same noise; what PSGLD adds beyond it is its own
  bookkeeping (the non-finite check, the preconditioned noise).
  """


class RademacherSGD(_NoiseInGradient, keras.optimizers.SGD):
  """SGD plus one ±1 per parameter, drawn as the samplers draw it: the floor of ``noise='rademacher'``."""

  draw = staticmethod(tfa.core.noise.rademacher)


def _hvp_train_step(self, data):
  """Train step of "SGD + noise + HVP": also takes the Hessian-vector product Γ needs.

  The product ``H z`` is taken as the samplers take it (reverse over
  reverse, ``z`` the signs of the step's noise) and enters the SGD update
  scaled by 1e-9, so it is computed, not pruned: the floor of any step with Γ.
  """
  x, y, _ = keras.utils.unpack_x_y_sample_weight(data)
  variables = self.trainable_variables
  parts = [v.value for v in variables]
  seed = tf.stack([tf.cast(self.optimizer.iterations, tf.int32), 0])
  probe = [tfa.core.noise.normal_signs([p], seed)[0] for p in parts]
  captured = {}

  def loss_fn(unused_parts):  # Reads the variables, as `enable_gamma`'s step.
    captured['y_pred'] = self(x, training=True)
    return self.compute_loss(x=x, y=y, y_pred=captured['y_pred'],
                             training=True)

  # The samplers' own Hessian-vector product (`tfp_adaptive.core.gamma`).
  loss, grads, tape = gamma_lib._taped_gradient(loss_fn, parts)  # pylint: disable=protected-access
  hz = gamma_lib._hessian_vector(tape, grads, parts, probe)  # pylint: disable=protected-access
  self.optimizer.apply([g + 1e-9 * h for g, h in zip(grads, hz)], variables)
  self._loss_tracker.update_state(loss)
  return self.compute_metrics(x, y, captured['y_pred'])


# Longer than any timed run: the roots are computed at the first step only.
FIXED_ROOTS = 10**9
BATCH = 100
BLOCK_SIZE = 128  # Blocked Shampoo's rows and its floor.
BLOCKED = 'ShampooSGRLD (none, blocks of %d, roots fixed)' % BLOCK_SIZE
UNREFRESHED = ('ShampooSGRLD (none, blocks of %d, no refresh in the step: '
               'a bound)' % BLOCK_SIZE)


def unrefreshed_shampoo(**kw):
  """Blocked Shampoo whose step holds no refresh at all: a lower bound, not a sampler.

  Its roots keep their initial value and the refresh's conditional is
  folded away: the statistics, the moving averages, the products and the
  moves into and out of blocks, with nothing waiting on a refresh.
  """
  optimizer = opt.ShampooSGRLD(1e-6, gamma='none', epsilon=1e-2,
                               update_interval=FIXED_ROOTS,
                               block_size=BLOCK_SIZE, **kw)
  optimizer.preconditioner.refreshes = lambda step: tf.constant(False)
  return optimizer


def multiply_adds(block_size, max_dim, hidden=400):
  """``(Shampoo's per-step multiply-adds, the gradient's)`` on the MLP's kernels.

  Per weight, a statistic and two products (the drift's ``M g`` and the
  noise's ``M^{1/2} ξ``) per mode of full factor width ``b``: ``3 Σ b``
  multiply-adds; the gradient's forward and backward passes take about
  ``3 × batch``.
  """
  pre = tfa.core.shampoo.Shampoo(0.9, 1e-2, 1, max_dim, block_size)
  shampoo = gradient = 0
  for n, m in ((784, hidden), (hidden, hidden), (hidden, 10)):
    shampoo += 3 * sum(pre.factor_sizes([n, m])) * n * m
    gradient += 3 * BATCH * n * m
  return shampoo, gradient


DENSE_PRODUCT = 'dense (784, h) @ (h, h) product'


def dense_product(hidden, steps=50):
  """``(multiply-adds, run)``: a dense ``(784, h) @ (h, h)`` product in an XLA loop.

  ``run()`` times one call of `steps` products and returns the seconds per
  product; `time_steps` times it in the same interleaved rounds as the
  models, so the floor's rate is measured under the same conditions as the
  steps it is compared with.
  """
  rng = np.random.default_rng(0)
  a = tf.constant(rng.normal(size=(784, hidden)), tf.float32)
  b = tf.constant(rng.normal(size=(hidden, hidden)) / hidden, tf.float32)

  @tf.function(jit_compile=True)
  def loop(a):
    return tf.while_loop(lambda i, _: i < steps,
                         lambda i, a: (i + 1, a + 1e-6 * tf.matmul(a, b)),
                         (tf.constant(0), a))[1]
  loop(a).numpy()

  def run():
    start = time.perf_counter()
    loop(a).numpy()
    return (time.perf_counter() - start) / steps
  return 784 * hidden * hidden, run


def shampoo_floor(best, hidden, rate):
  """Seconds per step of blocked Shampoo at its floor: PSGLD (none) plus its products at `rate`."""
  extra, _ = multiply_adds(BLOCK_SIZE, 1024, hidden)
  return best['PSGLD (none)'] + extra / rate


def configurations(data_size):
  kw = dict(data_size=data_size, seed=0)
  return {
      'SGD': lambda: keras.optimizers.SGD(1e-3),
      'SGD + noise': lambda: NoisySGD(1e-3),
      'SGD + Rademacher noise': lambda: RademacherSGD(1e-3),
      'RMSprop + noise': lambda: NoisyRMSprop(1e-3),
      'SGD + noise + HVP': lambda: NoisySGD(1e-3),
      'SGLD': lambda: opt.SGLD(1e-6, **kw),
      'SGLD (rademacher noise)': lambda: opt.SGLD(1e-6, noise='rademacher',
                                                  **kw),
      'PSGLD (none)': lambda: opt.PSGLD(1e-6, gamma='none', **kw),
      'PSGLD (none, rademacher noise)': lambda: opt.PSGLD(
          1e-6, gamma='none', noise='rademacher', **kw),
      'PSGLD (corrected)': lambda: opt.PSGLD(1e-6, gamma='corrected', **kw),
      'PSGLD (corrected, Γ on 1/4 batch)': lambda: opt.PSGLD(
          1e-6, gamma='corrected', gamma_subsample=0.25, **kw),
      'PSGLD (corrected, Γ on 1/4 of steps)': lambda: opt.PSGLD(
          1e-6, gamma='corrected', gamma_probability=0.25, **kw),
      'WenzelSGLD (none)': lambda: opt.WenzelSGLD(1e-6, gamma='none', **kw),
      'MongeSGRLD (none)': lambda: opt.MongeSGRLD(1e-6, gamma='none', **kw),
      'MongeSGRLD (corrected)': lambda: opt.MongeSGRLD(1e-6, gamma='corrected',
                                                        **kw),
      'MongeSGRLD (corrected, Γ on 1/4 batch)': lambda: opt.MongeSGRLD(
          1e-6, gamma='corrected', gamma_subsample=0.25, **kw),
      'MongeSGRLD (corrected, Γ on 1/4 of steps)': lambda: opt.MongeSGRLD(
          1e-6, gamma='corrected', gamma_probability=0.25, **kw),
      'ShampooSGRLD (none)': lambda: opt.ShampooSGRLD(
          1e-6, gamma='none', epsilon=1e-2, update_interval=10, max_dim=128,
          **kw),
      'ShampooSGRLD (none, all modes full, roots fixed)': lambda: (
          opt.ShampooSGRLD(1e-6, gamma='none', epsilon=1e-2,
                           update_interval=FIXED_ROOTS, max_dim=1024, **kw)),
      BLOCKED: lambda: opt.ShampooSGRLD(
          1e-6, gamma='none', epsilon=1e-2, update_interval=FIXED_ROOTS,
          block_size=BLOCK_SIZE, **kw),
      UNREFRESHED: lambda: unrefreshed_shampoo(**kw),
      'ShampooSGRLD (none, blocks of %d, newton roots every 100 steps)'
      % BLOCK_SIZE: lambda: opt.ShampooSGRLD(
          1e-6, gamma='none', epsilon=1e-2, update_interval=100,
          block_size=BLOCK_SIZE, roots='newton', **kw),
      'AdamSGLD': lambda: opt.AdamSGLD(1e-6, **kw),
  }


def build(make_opt, hidden, steps, hvp=False, jit_compile=True):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((784,)),
                            keras.layers.Dense(hidden, activation='relu'),
                            keras.layers.Dense(hidden, activation='relu'),
                            keras.layers.Dense(10, activation='softmax')])
  optimizer = make_opt()
  model.compile(optimizer, 'sparse_categorical_crossentropy',
                jit_compile=jit_compile,
                steps_per_execution=steps)
  if isinstance(optimizer, opt.SamplerOptimizer):
    tfa.keras.enable_gamma(model)
  if hvp:
    model.train_step = types.MethodType(_hvp_train_step, model)
  return model


def measure(quick):
  """Best time per step of every configuration: ``(best, hidden, floor, rate)``.

  ``floor``: seconds per step of blocked Shampoo at its floor
  (`shampoo_floor`) at ``rate``, the dense product's multiply-adds per
  second, timed in the same rounds (`dense_product`).
  """
  hidden, steps, rounds = (50, 10, 1) if quick else (400, 50, 5)
  configs = configurations(60000)
  if quick:  # CI: checks that it runs; the full run measures everything.
    configs = {k: configs[k] for k in ('SGD', 'SGD + noise', 'RMSprop + noise',
                                       'PSGLD (none)',
                                       'PSGLD (corrected, Γ on 1/4 batch)')}
  multiply_adds_per_product, product = dense_product(hidden)
  best = time_steps(configs, hidden, steps, rounds,
                    instances=1 if quick else 3, jit_compile=not quick,
                    probes={DENSE_PRODUCT: product})
  rate = multiply_adds_per_product / best.pop(DENSE_PRODUCT)
  return best, hidden, shampoo_floor(best, hidden, rate), rate


def time_steps(configs, hidden, steps, rounds, instances, jit_compile=True,
               probes=None):
  """``{name: best seconds per step}`` of `fit` on the MLP, rounds interleaved.

  Each configuration is built `instances` times and the best kept: a
  compiled model instance can stay slower in every round for reasons of
  its own (memory layout), which would otherwise set a ratio. Random data,
  batch 100; `steps` steps per compiled call (``steps_per_execution``).
  `probes`: ``{name: run}``, other timings taken after each model's, in
  the same rounds (``run()`` returns seconds); their best is returned too.
  """
  rng = np.random.default_rng(0)
  x = rng.random((100, 784), np.float32)
  y = rng.integers(0, 10, 100)
  data = tf.data.Dataset.from_tensors((x, y)).repeat()
  models = [(name, build(make, hidden, steps, hvp=name.endswith('HVP'),
                        jit_compile=jit_compile))
            for _ in range(instances) for name, make in configs.items()]
  for _, model in models:  # Compile and warm up.
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
  probes = probes or {}
  best = {name: np.inf for name in list(configs) + list(probes)}
  for _ in range(rounds):
    for name, model in models:
      start = time.perf_counter()
      model.fit(data, steps_per_epoch=4 * steps, epochs=1, verbose=0)
      best[name] = min(best[name], (time.perf_counter() - start) / (4 * steps))
      for probe, run in probes.items():  # Between the models' timings.
        best[probe] = min(best[probe], run())
  return best


def table_rows(best, floor_of_blocks=None):
  """``[name, time/step, × SGD, × SGD+noise, other ratio]`` per configuration.

  `floor_of_blocks`: seconds per step of blocked Shampoo at its floor
  (`shampoo_floor`), beside which its rows are given.
  """
  sgd, noisy = best['SGD'], best['SGD + noise']
  floor = best.get('SGD + noise + HVP')
  rows = []
  for name, t in best.items():
    extra = ''
    if name.startswith('PSGLD (corrected') and 'PSGLD (none)' in best:
      extra = 'Γ: %.2f× PSGLD (none)' % (t / best['PSGLD (none)'])
    elif (name.startswith('MongeSGRLD (corrected')
          and 'MongeSGRLD (none)' in best):
      extra = 'Γ: %.2f× Monge (none)' % (t / best['MongeSGRLD (none)'])
    elif name == 'PSGLD (none)' and 'RMSprop + noise' in best:
      extra = '%.2f× RMSprop + noise' % (t / best['RMSprop + noise'])
    elif name.startswith('SGLD (rademacher') and 'SGD + Rademacher noise' in best:
      extra = '%.2f× SGD + Rademacher noise' % (
          t / best['SGD + Rademacher noise'])
    elif name == 'SGD + noise + HVP':
      extra = 'HVP alone: +%.3f ms' % (1e3 * (t - noisy))
    if extra.startswith('Γ') and floor and 'corrected)' in name:
      extra += '; %.2f× SGD+noise+HVP' % (t / floor)
    if name.startswith('Shampoo'):
      extra = '%.2f× PSGLD (none)' % (t / best['PSGLD (none)'])
      if floor_of_blocks and 'blocks of %d' % BLOCK_SIZE in name:
        extra += '; %.2f× its floor' % (t / floor_of_blocks)
    rows.append([name, '%.3f ms' % (1e3 * t), '%.2f' % (t / sgd),
                 '%.2f' % (t / noisy), extra])
  return rows


def plot(best, path):
  """Bar chart of each optimizer's step time over SGD + noise (PNG)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  names = list(best)
  ratios = [best[n] / best['SGD + noise'] for n in names]
  fig, ax = plt.subplots(figsize=(7, 0.35 * len(names) + 1.2))
  ax.barh(range(len(names)), ratios, color='tab:blue')
  ax.set_yticks(range(len(names)))
  ax.set_yticklabels(names, fontsize=8)
  ax.invert_yaxis()
  ax.axvline(1.2, color='gray', ls=':', label='1.2× target (Γ-free)')
  ax.set_xlabel('Keras step time / (SGD + noise) step time')
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


NOTE = ('"RMSprop + noise": Keras\' own RMSprop with the samplers\' normal '
        'draw added to its gradient, which reads and writes the same moving '
        'average each step as PSGLD: the floor of PSGLD without Γ. '
        'Shampoo refreshes its roots every 10 steps with max_dim=128: the '
        '784- and 400-wide modes keep a diagonal factor, so only the 10-wide '
        'output modes have full Kronecker factors. "All modes full, roots '
        'fixed": max_dim=1024, full factors for every mode (784×784, '
        '400×400, ...), roots computed at the first step and not refreshed '
        'while timed: the per-step statistics and Kronecker products alone, '
        'a lower bound for full-factor Shampoo. "Γ on 1/4 batch": '
        '`gamma_subsample=0.25`, the Hessian-vector product of Γ on a random '
        'quarter of each minibatch (unbiased; the metric uses all of it). "Γ on '
        '1/4 of steps": `gamma_probability=0.25`, Γ/p on a random quarter of '
        'the steps and none on the others (unbiased). "SGD + noise + HVP": '
        'SGD + noise whose train step also takes the Hessian-vector product '
        'H z (reverse over reverse, z the signs of the noise) and adds 1e-9 '
        'H z to the gradient, so it is not pruned: the floor of a step with '
        'Γ. "Blocks of 128": `block_size=128`, the 784×400 kernel in '
        '112×100 blocks and 400×400 in 100×100, each block with its own '
        'Kronecker factors; "its floor": PSGLD (none) plus Shampoo\'s '
        'per-step multiply-adds (a statistic and two products per mode) at '
        'the best rate of a dense XLA matrix product (784, h) @ (h, h), '
        'timed after each model in the same rounds. '
        '"No refresh in the step: a bound": blocked Shampoo with its '
        'refresh\'s conditional removed and its roots left at their first '
        'value (not a sampler): what the statistics, moving averages, '
        'products and moves into and out of blocks cost with nothing waiting '
        'on a refresh.')


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  best, hidden, floor, _ = measure(args.quick)
  common.write_table(
      os.path.join(out, 'keras_speed.md'),
      'Keras step time, MLP 784-%d-%d-10, batch 100, XLA (%s)'
      % (hidden, hidden, 'quick' if args.quick else 'full'),
      ['optimizer', 'time/step', '× SGD', '× SGD+noise', 'other ratio'],
      table_rows(best, floor), 'Command: `python -m benchmarks.keras_speed%s`. %s'
      % (' --quick' if args.quick else '', NOTE))
  plot(best, os.path.join(out, 'keras_speed.png'))


if __name__ == '__main__':
  main()
