"""Time to a held-out log-likelihood: BlackJAX's sgld, sghmc and sgnht against our SGLD, SGHMC, SGNHT and corrected PSGLD.

The posterior of an MLP 64-100-100-10 (softmax likelihood, ``N(0, 1)``
prior) on scikit-learn's digits (1,300 training images, 497 held out),
minibatches of 100 drawn with replacement at every step, every chain
started from the same weights:

- BlackJAX ``sgld`` (``θ + ε ∇û + sqrt(2ε) ξ``, with ``ε = h/2``, the same
  chain law as our SGLD at ``h``), in `jax.lax.scan`;
- BlackJAX ``sghmc`` (its default 10 integration steps a call, the
  momentum drawn afresh at each call, one minibatch a call) and ``sgnht``
  at ``step_size = ε = sqrt(h_m/2)`` and ``alpha = 0.01/ε`` (the same
  diffusion, docs "The mathematics"), beside our `SGHMC` (friction 0.01,
  the velocity kept throughout) and `SGNHT` (``diffusion=0.01``) at
  ``h_m``; a velocity carries the chain about
  ``1/friction`` steps' worth of SGLD moves, so ``h_m = 0.01 h`` moves it
  as far per gradient as SGLD at ``h`` (at ``h`` itself every momentum
  chain runs away); a chunk of 100 steps is 100 gradients on every side;
- our `SGLD` kernel at the same ``h``, and our corrected `PSGLD` at
  ``h_psgld`` with ``diagonal_bias=1`` (the kernels' gradient is the
  whole-data ``∇û``, whose squares dwarf 1 in every direction that moves,
  so the bias only caps the metric at SGLD's 1 where gradients vanish),
  each in an XLA-compiled
  `tf.while_loop` with the minibatch drawn inside
  (`tfp_adaptive.minibatch.MinibatchLogProb`).

Each runs in compiled chunks of 100 steps. After each chunk the current
weights' held-out probabilities join a running average (from the
``--burnin`` chunk on) whose log-likelihood is recorded against the time
spent in the compiled chunks (evaluation not counted). Reported: the time
and the steps until the running ensemble's held-out log-likelihood first
reaches ``--target`` (median over 3 chains), and its final value. Same
threads on both sides.

    python -m benchmarks.peers_loglik [--quick]
"""

import os
import time

import numpy as np

from benchmarks import common
from benchmarks import peers

SIZES, BATCH, CHUNK = (64, 100, 100, 10), 100, 100
FRICTION = 0.01  # Per step; the thermostat's start and injected noise too.


def _test_probs(params, xt):
  h = xt
  for k in range(0, len(params) - 2, 2):
    h = np.maximum(h @ params[k] + params[k + 1], 0.)
  logits = h @ params[-2] + params[-1]
  logits = logits - logits.max(-1, keepdims=True)
  p = np.exp(logits)
  return p / p.sum(-1, keepdims=True)


def blackjax_chunk(x, y, h, algorithm='sgld'):
  """``run(params, key) -> params`` of `CHUNK` gradients of BlackJAX's `algorithm` (compiled).

  `algorithm`: ``'sgld'``, ``'sghmc'`` (`CHUNK / 10` calls of 10
  integration steps) or ``'sgnht'``.
  """
  import blackjax  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  n = len(x)
  xj, yj = jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.int32)
  grad = blackjax.sgmcmc.gradients.grad_estimator(*peers.jax_log_densities(),
                                                  n)
  per_call = 10 if algorithm == 'sghmc' else 1
  # BlackJAX's step size: ε = h/2 for sgld; ε = sqrt(h/2) and a friction
  # rate 0.01/ε for the momentum samplers (our friction 0.01 per step).
  eps = h / 2. if algorithm == 'sgld' else (h / 2.) ** 0.5
  sampler = {
      'sgld': lambda: blackjax.sgld(grad),
      'sghmc': lambda: blackjax.sghmc(grad, num_integration_steps=10,
                                      alpha=FRICTION / eps),
      'sgnht': lambda: blackjax.sgnht(grad, alpha=FRICTION / eps)}[algorithm]()

  @jax.jit
  def run(carry, key):
    def body(c, k):
      k_batch, k_step = jax.random.split(k)
      rows = jax.random.randint(k_batch, (BATCH,), 0, n)
      return sampler.step(k_step, c, (xj[rows], yj[rows]), eps), None
    return jax.lax.scan(body, carry,
                        jax.random.split(key, CHUNK // per_call))[0]

  def chunk(carry, i):
    out = run(carry, jax.random.fold_in(jax.random.PRNGKey(0), i))
    return jax.block_until_ready(out)

  def start(weights):
    params = [jnp.asarray(a) for a in weights]
    if algorithm == 'sgnht':
      return sampler.init(params, jax.random.PRNGKey(0))
    return params

  def to_numpy(carry):
    params = carry.position if algorithm == 'sgnht' else carry
    return [np.asarray(a) for a in params]
  return chunk, start, to_numpy


def ours_chunk(x, y, kernel_name, h):
  """Like `blackjax_chunk`, for our kernel `kernel_name`."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top

  def loglik(parts, batch):
    xb, yb = batch
    h_ = xb
    for k in range(0, len(parts) - 2, 2):
      h_ = tf.nn.relu(tf.matmul(h_, parts[k]) + parts[k + 1])
    logits = tf.matmul(h_, parts[-2]) + parts[-1]
    return -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=yb,
                                                           logits=logits)

  def logprior(parts):
    return -0.5 * tf.add_n([tf.reduce_sum(w * w) for w in parts])

  target = tfa.minibatch.MinibatchLogProb(
      loglik, (tf.constant(x, tf.float32), tf.constant(y, tf.int32)), BATCH,
      log_prior_fn=logprior)
  kernel = {
      'SGLD': lambda: tfa.mcmc.SGLD(target, h),
      'SGHMC': lambda: tfa.mcmc.SGHMC(target, h, friction=FRICTION),
      'SGNHT': lambda: tfa.mcmc.SGNHT(target, h, diffusion=FRICTION),
      'PSGLD': lambda: tfa.mcmc.PSGLD(target, h, gamma='corrected',
                                      diagonal_bias=1.),
  }[kernel_name]()

  @tf.function(jit_compile=True, autograph=False)
  def run(state, results, i):
    def body(j, s, r):
      s, r = kernel.one_step(s, r, seed=tf.stack([i, j]))
      return j + 1, s, r
    _, s, r = tf.while_loop(lambda j, *_: j < CHUNK, body,
                            (tf.constant(0), state, results))
    return s, r

  holder = {}

  def start(weights):
    state = [tf.constant(w) for w in weights]
    holder['results'] = kernel.bootstrap_results(state)
    return state

  def chunk(state, i):
    state, holder['results'] = run(state, holder['results'], tf.constant(i))
    state[0].numpy()  # Waits for the chunk, as block_until_ready.
    return state
  return chunk, start, lambda s: [t.numpy() for t in s]


def trajectory(chunk, start, to_numpy, xt, yt, chunks, burnin, seed=0):
  """``[(seconds, steps, held-out LL of the running ensemble)]``, one per chunk after burn-in.

  `seed` selects the chain's random stream (chunk indices ``seed·10⁵ + i``).
  """
  state = start(peers.init_weights(SIZES))
  state = chunk(state, 10**6)  # Compile and warm up (not timed, not sampled).
  state = start(peers.init_weights(SIZES))
  total, seconds, out = None, 0., []
  for i in range(chunks):
    t0 = time.perf_counter()
    state = chunk(state, seed * 100000 + i)
    seconds += time.perf_counter() - t0
    if i < burnin:
      continue
    probs = _test_probs(to_numpy(state), xt)
    total = probs if total is None else total + probs
    mean = total / (i - burnin + 1)
    ll = float(np.mean(np.log(np.maximum(mean[np.arange(len(yt)), yt],
                                         1e-300))))
    out.append((seconds, (i + 1) * CHUNK, ll))
  return out


def main():
  p = common.parser(__doc__.splitlines()[0])
  p.add_argument('--h', type=float, default=1e-4, help='SGLD step h')
  p.add_argument('--h-momentum', type=float, default=1e-6,
                 help='SGHMC and SGNHT step h (friction 0.01)')
  p.add_argument('--h-psgld', type=float, default=1e-3,
                 help='corrected PSGLD step h')
  p.add_argument('--target', type=float, default=-0.08,
                 help='held-out log-likelihood to reach')
  p.add_argument('--burnin', type=int, default=2, help='chunks of burn-in')
  args = p.parse_args()
  out = common.out_dir(args.out)
  try:
    import blackjax  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError:
    common.write_table(os.path.join(out, 'peers_loglik.md'),
                       'Time to a held-out log-likelihood (not run)',
                       ['sampler'], [], 'BlackJAX is not installed: pip '
                       'install -e \'.[peers]\'.')
    return
  x, y, xt, yt = common.load_dataset('digits')
  x, xt = x.astype(np.float32), xt.astype(np.float32)
  chunks = 12 if args.quick else 200
  runs = {}
  for peer, ours in (('sgld', 'SGLD'), ('sghmc', 'SGHMC'), ('sgnht', 'SGNHT')):
    if args.quick and peer != 'sgld':
      continue  # CI: that both sides run.
    h = args.h if peer == 'sgld' else args.h_momentum
    runs['BlackJAX %s (h = %g)' % (peer, h)] = blackjax_chunk(x, y, h, peer)
    runs['ours %s (h = %g)' % (ours, h)] = ours_chunk(x, y, ours, h)
  runs['ours PSGLD corrected (h = %g)' % args.h_psgld] = ours_chunk(
      x, y, 'PSGLD', args.h_psgld)
  rows, curves, times = [], {}, []
  seeds = 1 if args.quick else 3
  for name, (chunk, start, to_numpy) in runs.items():
    hits, finals, per_step = [], [], []
    for seed in range(seeds):
      curve = trajectory(chunk, start, to_numpy, xt, yt, chunks, args.burnin,
                         seed)
      curves.setdefault(name, curve)
      hits.append(next((c for c in curve if c[2] >= args.target), None))
      finals.append(curve[-1][2])
      per_step.append(curve[-1][0] / (chunks * CHUNK))
    reached = [h for h in hits if h is not None]
    median = (lambda k: float(np.median([h[k] for h in reached]))
              if len(reached) == seeds else None)
    times.append(median(0))
    rows.append([name, '%.2f s' % median(0) if median(0) else
                 '%d of %d reached' % (len(reached), seeds),
                 '%.0f' % median(1) if median(1) else '',
                 '%.4f' % np.mean(finals), '%.3f ms' % (1e3 * np.min(per_step))])
    print(rows[-1], flush=True)
  twin = None  # Each of ours against the BlackJAX row just before it.
  for name, r, t in zip(runs, rows, times):
    if name.startswith('BlackJAX'):
      twin = t
    if name.startswith('ours PSGLD'):
      twin = times[0]  # BlackJAX's sgld.
    r.append('%.2f' % (t / twin) if t and twin else '')
  plot(curves, args.target, os.path.join(out, 'peers_loglik.png'))
  common.write_table(
      os.path.join(out, 'peers_loglik.md'),
      'Time to a held-out log-likelihood of %g (%s)'
      % (args.target, 'quick' if args.quick else 'full'),
      ['sampler', 'time to target (median)', 'steps to target (median)',
       'final held-out LL (mean)', 'time / step',
       'time × its BlackJAX twin'],
      rows,
      'MLP 64-100-100-10 on digits, minibatch 100, %d chunks of %d steps, '
      'the running ensemble from chunk %d; %d chains (seeds) per sampler, '
      'medians over them; times: compiled chunks only. SGHMC and SGNHT: '
      'friction and thermostat 0.01 a step (BlackJAX: `alpha = 0.01/ε` at '
      '`step_size = ε = sqrt(h/2)`); BlackJAX\'s sghmc draws a fresh '
      'momentum every 10 gradients. The last column: each of ours against '
      'the BlackJAX row above it (corrected PSGLD against sgld\'s). The '
      'figure shows the first chain of each.'
      % (chunks, CHUNK, args.burnin, seeds))


def plot(curves, target, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(6, 3.5))
  for name, curve in curves.items():
    ax.plot([c[0] for c in curve], [c[2] for c in curve], label=name)
  ax.axhline(target, color='gray', ls=':', label='target')
  ax.set_xlabel('sampling time (s)')
  ax.set_ylabel('held-out log-likelihood')
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)


if __name__ == '__main__':
  main()
