"""Side by side with BlackJAX: time per SG-MCMC step on the same MLP, in one run.

BlackJAX (JAX) is the SG-MCMC library users pick outside TensorFlow. Both
sides sample the posterior of the MLP 784-400-400-10 (softmax likelihood,
``N(0, 1)`` prior, ``N = 60000``) from the same fixed minibatch of 100
random images, each in one compiled loop of steps (`jax.lax.scan`; our
kernels in an XLA-compiled `tf.while_loop`), on the same CPU cores:

- BlackJAX ``sgld``, ``sghmc`` (10 leapfrog steps per call; reported per
  gradient evaluation) and ``sgnht``;
- our `SGLD`, `SGHMC`, `SGNHT`, Γ-free `PSGLD`, and corrected `PSGLD`
  (which no peer has);
- our Keras `SGLD` optimizer in `model.fit` (`jit_compile=True`, all the
  steps in one call with ``steps_per_execution``, as a scan), with
  Gaussian and with Rademacher noise, beside Keras' plain `SGD` (no noise)
  on the same model: the floor of a Keras step.

Each configuration is built (and compiled) three times, on both sides, and
its time per step is the best over the copies and several rounds, the
rounds interleaved: a compiled copy can stay slower in every round for
reasons of its own (memory layout), which would otherwise set a ratio. Goals: our SGLD ≤ 1.0× BlackJAX's, our SGHMC and SGNHT
per gradient ≤ 1.0× BlackJAX's sghmc and sgnht, corrected PSGLD ≤ 2×
BlackJAX SGLD.

Needs ``pip install -e '.[peers]'`` (jax, blackjax).

    python -m benchmarks.peers [--quick]
"""

import os
import time

import numpy as np

from benchmarks import common

N, BATCH, SIZES = 60000, 100, (784, 400, 400, 10)


def _data():
  rng = np.random.default_rng(0)
  return (rng.random((BATCH, SIZES[0]), np.float32),
          rng.integers(0, SIZES[-1], BATCH).astype(np.int32))


def init_weights(sizes=SIZES):
  """The MLP's starting weights (scaled normal kernels, zero biases), both sides."""
  rng = np.random.default_rng(1)
  out = []
  for a, b in zip(sizes[:-1], sizes[1:]):
    out += [(rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32),
            np.zeros(b, np.float32)]
  return out


def jax_log_densities():
  """``(log prior, log-likelihood of one example)`` of the MLP, in JAX, for BlackJAX."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top

  def logprior(p):
    return -0.5 * sum(jnp.sum(w * w) for w in p)

  def loglik(p, example):
    xi, yi = example
    h = xi
    for k in range(0, len(p) - 2, 2):
      h = jax.nn.relu(h @ p[k] + p[k + 1])
    return jax.nn.log_softmax(h @ p[-2] + p[-1])[yi]
  return logprior, loglik


def blackjax_steps(steps):
  """``{name: seconds per gradient step}`` of BlackJAX's SG-MCMC kernels."""
  import blackjax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  x, y = _data()
  params = [jnp.asarray(w) for w in init_weights()]
  grad = blackjax.sgmcmc.gradients.grad_estimator(*jax_log_densities(), N)
  batch = (jnp.asarray(x), jnp.asarray(y))
  sgld = blackjax.sgld(grad)
  sghmc = blackjax.sghmc(grad, num_integration_steps=10)
  sgnht = blackjax.sgnht(grad)
  key = jax.random.PRNGKey(0)

  def runner(step, per_call):
    @jax.jit
    def run(carry, key):
      def body(c, k):
        return step(k, c, batch, 1e-6), None
      keys = jax.random.split(key, steps // per_call)
      return jax.lax.scan(body, carry, keys)[0]
    return run

  # (runner, its starting carry): a position, or SGNHT's state.
  runs = {'BlackJAX sgld': (runner(sgld.step, 1), params),
          'BlackJAX sghmc (per gradient)': (runner(sghmc.step, 10), params),
          'BlackJAX sgnht': (runner(sgnht.step, 1), sgnht.init(params, key))}
  for run, carry in runs.values():  # Compile and warm up.
    jax.block_until_ready(run(carry, key))
  return {name: (lambda run=run, carry=carry: jax.block_until_ready(
      run(carry, key))) for name, (run, carry) in runs.items()}


def ours_steps(steps):
  """``{name: callable running `steps` steps}`` of our kernels and Keras SGLD."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  x, y = _data()
  xt, yt = tf.constant(x), tf.constant(y)

  def log_prob(*p):
    h = xt
    for k in range(0, len(p) - 2, 2):
      h = tf.nn.relu(tf.matmul(h, p[k]) + p[k + 1])
    logits = tf.matmul(h, p[-2]) + p[-1]
    nll = tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=yt, logits=logits))
    prior = 0.5 * tf.add_n([tf.reduce_sum(w * w) for w in p])
    return -(N / BATCH) * nll - prior

  kernels = {
      'ours SGLD (kernel)': tfa.mcmc.SGLD(log_prob, 1e-6),
      'ours SGHMC (kernel)': tfa.mcmc.SGHMC(log_prob, 1e-6, friction=0.01),
      'ours SGNHT (kernel)': tfa.mcmc.SGNHT(log_prob, 1e-6, diffusion=0.01),
      'ours PSGLD none (kernel)': tfa.mcmc.PSGLD(log_prob, 1e-6, 0.95,
                                                gamma='none'),
      'ours PSGLD corrected (kernel)': tfa.mcmc.PSGLD(log_prob, 1e-6, 0.95),
  }
  state = [tf.constant(w) for w in init_weights()]
  out = {}
  for name, kernel in kernels.items():
    @tf.function(jit_compile=True, autograph=False)
    def run(state, kernel=kernel):
      results = kernel.bootstrap_results(state)
      def body(i, s, r):
        s, r = kernel.one_step(s, r, seed=tf.stack([i, 7]))
        return i + 1, s, r
      return tf.while_loop(lambda i, *_: i < steps, body,
                           (tf.constant(0), state, results))[1]
    run(state)  # Compile and warm up.
    out[name] = (lambda run=run: [t.numpy() for t in run(state)][0])

  data = tf.data.Dataset.from_tensors((x, y)).repeat()
  optimizers = {
      'Keras SGD (fit), no noise': lambda: keras.optimizers.SGD(1e-6),
      'ours SGLD (Keras fit)': lambda: tfa.keras.optimizers.SGLD(
          1e-6, data_size=N, seed=0),
      'ours SGLD (Keras fit, rademacher noise)': lambda: (
          tfa.keras.optimizers.SGLD(1e-6, data_size=N, seed=0,
                                    noise='rademacher')),
  }
  for name, make in optimizers.items():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((SIZES[0],))] + [
        keras.layers.Dense(n, activation='relu') for n in SIZES[1:-1]] + [
            keras.layers.Dense(SIZES[-1])])
    tfa.keras.priors.add_gaussian_prior(model, N, scale=1.)
    # All the steps in one compiled call, as the other side's loop.
    model.compile(make(),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True, steps_per_execution=steps)
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
    out[name] = lambda model=model: model.fit(
        data, steps_per_epoch=steps, epochs=1, verbose=0)
  return out


def measure(quick):
  steps, rounds, copies = (20, 1, 1) if quick else (200, 5, 3)
  runs = []
  for _ in range(copies):
    runs += list(blackjax_steps(steps).items())
    runs += list(ours_steps(steps).items())
  best = {name: np.inf for name, _ in runs}
  for _ in range(rounds):
    for name, run in runs:
      start = time.perf_counter()
      run()
      best[name] = min(best[name], (time.perf_counter() - start) / steps)
  return best


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  try:
    import blackjax  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    common.write_table(os.path.join(out, 'peers.md'),
                       'Time per SG-MCMC step against BlackJAX (not run)',
                       ['configuration'], [],
                       'BlackJAX is not installed: pip install -e '
                       '\'.[peers]\'.')
    return
  best = measure(args.quick)
  ref = best['BlackJAX sgld']
  sgd = best['Keras SGD (fit), no noise']
  twins = {'ours SGHMC (kernel)': 'BlackJAX sghmc (per gradient)',
           'ours SGNHT (kernel)': 'BlackJAX sgnht'}
  rows = [[name, '%.3f ms' % (1e3 * t), '%.2f' % (t / ref),
           '%.2f' % (t / best[twins[name]]) if name in twins else '',
           '%.2f' % (t / sgd) if 'fit' in name else '']
          for name, t in best.items()]
  import jax  # pylint: disable=g-import-not-at-top
  import blackjax  # pylint: disable=g-import-not-at-top
  common.write_table(
      os.path.join(out, 'peers.md'),
      'Time per SG-MCMC step against BlackJAX (%s)'
      % ('quick' if args.quick else 'full'),
      ['configuration', 'time / step', '× BlackJAX sgld',
       '× its BlackJAX twin', '× Keras SGD (fit)'], rows,
      'MLP 784-400-400-10, fixed minibatch of 100, N = 60000; JAX %s, '
      'BlackJAX %s; best over three compiled copies of each and interleaved rounds. Goals: our SGLD ≤ 1.0× '
      'BlackJAX sgld, our SGHMC and SGNHT ≤ 1.0× their BlackJAX twins (per '
      'gradient; ours at friction and thermostat 0.01, BlackJAX at its '
      'default alpha 0.01: the same work per gradient), corrected '
      'PSGLD ≤ 2×; Rademacher SGLD ≤ 1.1× Keras SGD.'
      % (jax.__version__, blackjax.__version__))


if __name__ == '__main__':
  main()
