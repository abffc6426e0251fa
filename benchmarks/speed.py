"""Speed summary, measured side by side in one run (ratios are the headline).

1. 1-D pSGLD ('original' Γ): TFP's `StochasticGradientLangevinDynamics` in
   graph mode, one `session.run` per step (as the paper's authors ran it),
   against our kernel with many chains in one XLA-compiled loop.
2. Γ overhead on an MLP 784-400-400-10 (batch 100, random data): PSGLD
   kernel steps with gamma='corrected' (Hutchinson) over gamma='none', 20
   steps per XLA-compiled `tf.while_loop` as in `sample_chain`, and the
   share of the injected noise (the noise draw alone, same loop).
3. Keras: every sampler optimizer's `fit` step over Keras SGD (and over SGD
   plus one Gaussian draw per parameter) on the same MLP, and the Γ overhead
   in `fit` (`benchmarks.keras_speed`).

Writes one table, ``speed.md``, with the machine's core count, and a bar
chart of the Keras step ratios, ``speed.png``.

    python -m benchmarks.speed [--quick]

``--quick`` runs small sizes, the MLP steps as graphs without XLA: a check
that every piece runs (XLA's compile would be most of its time), not a
timing.
"""

import os
import time

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from benchmarks import common
from benchmarks import keras_speed


def tfp_steps_per_second(num_steps):
  graph = tf.Graph()
  with graph.as_default():
    v = tf.compat.v1.Variable(0.5, dtype=tf.float32)
    opt = tfp.optimizer.StochasticGradientLangevinDynamics(
        1e-4, preconditioner_decay_rate=0.9, burnin=0, diagonal_bias=1e-2)
    loss = 0.5 * v ** 2
    grads = tf.compat.v1.gradients(loss, [v])
    op = opt.apply_gradients(list(zip(grads, [v])))
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(20):
        sess.run(op)
      t0 = time.time()
      for _ in range(num_steps):
        sess.run(op)
      return num_steps / (time.time() - t0)


def ours_chain_steps_per_second(chains, steps):
  kernel = tfa.mcmc.PSGLD(lambda x: -0.5 * x ** 2, 1e-4, 0.9, 1e-2,
                          gamma='original')
  x0 = tf.zeros([chains])
  edges = np.linspace(-5, 5, 101)
  tfa.mcmc.stationary_histogram(kernel, x0, steps, edges, seed=(1, 1),
                                chunk_steps=steps, progress=False)  # compile
  t0 = time.time()
  tfa.mcmc.stationary_histogram(kernel, x0, steps, edges, seed=(1, 2),
                                chunk_steps=steps, progress=False)
  return chains * steps / (time.time() - t0)


def _psgld(log_prob, mode):
  return tfa.mcmc.PSGLD(log_prob, 1e-6, 0.99, 1e-8, gamma=mode)


def mlp_step_times(inner, hidden=400, batch=100, make_kernel=_psgld,
                   jit_compile=True):
  """Seconds per kernel step on an MLP 784-h-h-10 (Γ none/corrected).

  `inner` steps run in one XLA-compiled `tf.while_loop`, as in
  `sample_chain`; the best of 5 such calls is kept. ``jit_compile=False``
  (``--quick``) runs the same loop as a graph, which checks the code
  without paying XLA's compile.
  """
  rng = np.random.RandomState(0)
  x = tf.constant(rng.randn(batch, 784), tf.float32)
  y = tf.constant(rng.randint(0, 10, batch))
  sizes = [784, hidden, hidden, 10]
  params = []
  for a, b in zip(sizes[:-1], sizes[1:]):
    params += [tf.constant(rng.randn(a, b) / np.sqrt(a), tf.float32),
               tf.zeros([b])]

  def log_prob(*ps):
    h = x
    for i in range(0, len(ps), 2):
      h = tf.matmul(h, ps[i]) + ps[i + 1]
      if i < len(ps) - 2:
        h = tf.nn.relu(h)
    ll = -tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(y, h))
    return 600. * ll - 0.5 * tf.add_n([tf.reduce_sum(p ** 2) for p in ps])

  out = {}
  for mode in ('none', 'corrected'):
    kernel = make_kernel(log_prob, mode)
    results = kernel.bootstrap_results(params)

    @tf.function(jit_compile=jit_compile)
    def steps(state, results, seed, kernel=kernel):
      def body(i, state, results):  # `inner` steps in one compiled loop.
        state, results = kernel.one_step(state, results,
                                         seed=tf.stack([seed, i]))
        return i + 1, state, results
      return tf.while_loop(lambda i, *_: i < inner, body,
                           (0, state, results))[1:]
    out[mode] = _seconds_per_call(steps, params, results) / inner

  @tf.function(jit_compile=jit_compile)
  def noise_only(state, unused_results, seed):
    def body(i, acc):
      z = tfa.core.noise.normal(params, tf.stack([seed, i]))
      return i + 1, [a + b for a, b in zip(acc, z)]
    return tf.while_loop(lambda i, _: i < inner, body, (0, state))[1], ()
  out['noise'] = _seconds_per_call(noise_only, params, ()) / inner
  return out


def _seconds_per_call(fn, state, results, repeats=5):
  """Best of `repeats` timed calls of ``fn(state, results, seed)``."""
  state, results = fn(state, results, tf.constant(0))  # Compiles.
  best = float('inf')
  for i in range(repeats):
    t0 = time.time()
    state, results = fn(state, results, tf.constant(i + 1))
    float(tf.nest.flatten(state)[0][0, 0])
    best = min(best, time.time() - t0)
  return best


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  tfp_rate = tfp_steps_per_second(200 if args.quick else 3000)
  chains, steps = (1000, 200) if args.quick else (100000, 2000)
  ours_rate = ours_chain_steps_per_second(chains, steps)
  hid = 50 if args.quick else 400
  mlp = mlp_step_times(5 if args.quick else 20, hidden=hid,
                       jit_compile=not args.quick)
  rows = [
      ['1-D pSGLD, TFP optimizer (graph, 1 session.run/step)',
       '%.3g steps/s' % tfp_rate, '1'],
      ['1-D pSGLD, ours (%d chains, XLA loop)' % chains,
       '%.3g chain-steps/s' % ours_rate, '%.0f' % (ours_rate / tfp_rate)],
      ['Kernel step, MLP 784-%d-%d-10, gamma=none' % (hid, hid),
       '%.2f ms' % (1e3 * mlp['none']), '1'],
      ['Kernel step, gamma=corrected (Hutchinson)',
       '%.2f ms' % (1e3 * mlp['corrected']),
       '%.2f' % (mlp['corrected'] / mlp['none'])],
      ['Kernel step, noise draw alone', '%.2f ms' % (1e3 * mlp['noise']),
       '%.2f' % (mlp['noise'] / mlp['none'])],
  ]
  best, hidden, floor, rate = keras_speed.measure(args.quick)
  rows.append(['Blocked Shampoo\'s floor: PSGLD (none) + its products at the '
               'dense product rate, %.0f GFMA/s (MLP 784-%d-%d-10)'
               % (rate / 1e9, hidden, hidden),
               '%.3f ms' % (1e3 * floor), ''])
  for name, t, x_sgd, x_noisy, extra in keras_speed.table_rows(best, floor):
    rows.append(['Keras fit step, %s (MLP 784-%d-%d-10)' % (name, hidden,
                                                           hidden),
                 t, '%s× SGD, %s× SGD+noise%s' % (
                     x_sgd, x_noisy, '; ' + extra if extra else '')])
  common.write_table(os.path.join(out, 'speed.md'),
                     'Speed summary (%s)' % ('quick' if args.quick else 'full'),
                     ['what', 'measured', 'ratio'], rows,
                     'Command: `python -m benchmarks.speed%s`. %s' %
                     (' --quick' if args.quick else '', keras_speed.NOTE))
  keras_speed.plot(best, os.path.join(out, 'speed.png'))


if __name__ == '__main__':
  main()
