"""Yu et al. (2023) Tables 1–2 protocol through Keras `fit`: every sampler × prior on an MLP.

784-N-N-10 ReLU MLP on MNIST (``--dataset mnist``, via `keras.datasets`) or,
offline by default, 64-N-N-10 on scikit-learn's digits; batch 100; Gaussian
prior (σ = 1/sqrt(fan_in)) or horseshoe prior (per-tensor scale sampled
jointly); samplers Identity (SGLD), Wenzel, RMSprop (PSGLD), Monge, Shampoo,
Adam-SGLD, and the corrected-Γ variants of the Riemannian ones. Burn-in and
thinning follow the paper (1000 and 100 steps in full mode). Reports test
log p(y|X), accuracy, ECE, the average curvature of the visited region
(Yu et al. §4.3: the normalised input curvature of Srinivas et al. 2022,
``‖∇²ₓ log p(y|x)‖₂ / ‖∇ₓ log p(y|x)‖``, spectral norm by power iteration on
Hessian-vector products, averaged over 200 test points and the members)
and seconds per epoch (pass over the training data), mean ± sd over seeds.
Full mode on digits runs 400 passes (5,200 steps, 42 samples per run; Keras
epochs of 10 passes); on MNIST 100 epochs.

Step sizes: Yu et al. tune ``ℓ = h·n`` per metric (their Table 4) for their
parameterisation; ours is TFP's (metric from the loss gradient), so the
learning rates are tuned here: ``--tune`` runs every configuration, the
Γ-free samplers and the corrected variants separately (``--tune corrected``
only the latter), over a log grid under each prior, on a split of the
training set (80% fit, 20% validation, 60 passes), and picks the rate with
the best validation log-likelihood. It writes the sweep table and
``yu_learning_rates.json`` (keys ``"Monge"`` and ``"Monge (corrected)"``;
a corrected variant without its own entry uses its sampler's rate), which a
later run reads with ``--learning-rates``; `LEARNING_RATES` holds the result
of that sweep.

    python -m benchmarks.yu_tables [--quick] [--dataset digits|mnist]
        [--seeds N] [--metrics Identity RMSprop ...] [--priors gaussian ...]
        [--tune [none] [corrected] | --learning-rates out/yu_learning_rates.json]
        [--shampoo-epsilon 1e-6] [--diagonal-bias 1e-8]

``--quick`` runs one short fit per configuration as a graph, without XLA: a
check that the path runs (XLA's compile would be most of its time).
"""

import json
import os
import sys
import time

import numpy as np
import keras
import tensorflow as tf

import tfp_adaptive as tfa
from benchmarks import common

opt = tfa.keras.optimizers

# `python -m benchmarks.yu_tables --tune` on digits (yu_lr_sweep.md).
LEARNING_RATES = {
    'gaussian': {'Identity': 1e-4, 'Wenzel': 3e-4, 'RMSprop': 3e-6,
                 'Monge': 1e-4, 'Shampoo': 3e-6, 'Adam-SGLD': 3e-5},
    'horseshoe': {'Identity': 3e-4, 'Wenzel': 1e-3, 'RMSprop': 1e-5,
                  'Monge': 1e-4, 'Shampoo': 1e-6, 'Adam-SGLD': 1e-6},
}
LR_GRID = (1e-7, 1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3)
SAMPLERS = ('Identity', 'Wenzel', 'RMSprop', 'Monge', 'Shampoo', 'Adam-SGLD')


SHAMPOO_EPSILON = 1e-6  # Yu et al.'s ridge; `--shampoo-epsilon` changes it.
# RMSprop's (and Wenzel's) ε, Yu et al.'s 1e-8; `--diagonal-bias` changes it.
DIAGONAL_BIAS = 1e-8


def make_optimizer(name, gamma, n, seed, lr):
  kw = dict(data_size=n, seed=seed)
  if name == 'Identity':
    return opt.SGLD(lr, **kw)
  if name == 'Wenzel':
    return opt.WenzelSGLD(lr, gamma=gamma, update_interval=n // 100,
                          diagonal_bias=DIAGONAL_BIAS, **kw)
  if name == 'RMSprop':
    return opt.PSGLD(lr, gamma=gamma, burnin=0, diagonal_bias=DIAGONAL_BIAS,
                     **kw)
  if name == 'Monge':
    return opt.MongeSGRLD(lr, alpha2=1., gamma=gamma, **kw)
  if name == 'Shampoo':
    return opt.ShampooSGRLD(lr, gamma=gamma, epsilon=SHAMPOO_EPSILON,
                            update_interval=10, max_dim=128, **kw)
  return opt.AdamSGLD(lr, **kw)


def rate_key(name, gamma):
  """The key of a configuration's learning rate in `LEARNING_RATES`/JSON."""
  return name if gamma == 'none' else '%s (%s)' % (name, gamma)


def learning_rate(rates, name, gamma):
  """A configuration's rate; a Γ variant without its own falls back."""
  return rates.get(rate_key(name, gamma), rates[name])


def configurations(quick=False):
  if quick:
    return [('Identity', 'none'), ('RMSprop', 'corrected')]
  out = [('Identity', 'none'), ('Adam-SGLD', 'none')]
  for name in ('Wenzel', 'RMSprop', 'Monge', 'Shampoo'):
    out += [(name, 'none'), (name, 'corrected')]
  return out


def normalized_curvature_fn(model, iterations=10):
  """``(x, y, seed) ->`` mean of ``‖∇²ₓ ℓ‖₂ / (‖∇ₓ ℓ‖ + 1e-6)``, ``ℓ = log p(y|x)``.

  Srinivas et al. (2022)'s normalised curvature, used by Yu et al. (2023,
  §4.3) as "average curvature"; the Hessian's spectral norm comes from
  `iterations` power-iteration steps with forward-over-reverse
  Hessian-vector products (rows are independent, so one batched pass). The
  function is traced once and reads the model's current weights, so it can
  be called for every member of `BayesianEnsemble.iterate_members()`.
  """
  def grad(x, y):
    with tf.GradientTape() as tape:  # ∇ₓ log p(y|x), one row per point.
      tape.watch(x)
      p = model(x, training=False)
      ll = tf.reduce_sum(tf.math.log(tf.gather(p, y, batch_dims=1) + 1e-12))
    return tape.gradient(ll, x)

  @tf.function(autograph=False)
  def run(x, y, seed):
    v = tf.random.stateless_normal(tf.shape(x), seed)
    v = v / tf.norm(v, axis=1, keepdims=True)
    for _ in range(iterations):
      with tf.autodiff.ForwardAccumulator(x, v) as acc:
        g = grad(x, y)
      hv = acc.jvp(g)
      norm = tf.norm(hv, axis=1, keepdims=True)
      v = hv / (norm + 1e-30)
    return tf.reduce_mean(norm[:, 0] / (tf.norm(grad(x, y), axis=1) + 1e-6))
  return lambda x, y, seed=(0, 0): float(run(
      tf.constant(x, tf.float32), tf.constant(y, tf.int32), tf.constant(seed)))


def run_one(data, name, gamma, prior, lr, hidden, epochs, passes, burnin,
            thinning, seed, curvature=True, jit_compile=True):
  x, y, xt, yt = data
  n = len(x)
  keras.backend.clear_session()  # Frees the previous runs' compiled steps.
  model = common.mlp(x.shape[1], hidden)
  keras.utils.set_random_seed(seed)
  if prior == 'horseshoe':
    tfa.keras.priors.add_horseshoe_prior(model, data_size=n)
  tfa.keras.priors.add_gaussian_prior(model, data_size=n)
  model.compile(make_optimizer(name, gamma, n, seed, lr),
                'sparse_categorical_crossentropy', jit_compile=jit_compile,
                steps_per_execution=10)  # Burn-in and thinning are x10.
  tfa.keras.enable_gamma(model)
  collector = tfa.keras.SampleCollector(burnin=burnin, thinning=thinning)
  # One Keras epoch = `passes` shuffled passes over the data: on the small
  # digits set Keras' per-epoch overhead would otherwise dominate.
  steps = -(-n // 100)
  data = tf.data.Dataset.from_tensor_slices((x, y)).repeat(passes).shuffle(
      passes * n, seed=seed).batch(100).repeat()
  start = time.perf_counter()
  model.fit(data, steps_per_epoch=passes * steps, epochs=epochs, verbose=0,
            callbacks=[collector])
  seconds = (time.perf_counter() - start) / (epochs * passes)
  if not len(collector.members):
    return None
  ensemble = collector.ensemble
  try:
    r = ensemble.evaluate(xt, yt)
  except FloatingPointError as e:  # Diverged: reported as n/a, -inf in tuning.
    print('  %s' % e, flush=True)
    return None
  r['seconds_per_epoch'] = seconds
  if curvature:
    fn = normalized_curvature_fn(ensemble.model)
    r['curvature'] = np.mean([fn(xt[:200], yt[:200])
                              for _ in ensemble.iterate_members()])
  return r


def tune(data, configs, priors, hidden, quick, out):
  """Validation log-likelihood over `LR_GRID` for each (sampler, gamma).

  Returns ``{prior: {rate_key: lr}}``.
  """
  x, y = data[0], data[1]
  cut = int(0.8 * len(x))
  split = (x[:cut], y[:cut], x[cut:], y[cut:])
  grid = LR_GRID[4:5] if quick else LR_GRID  # Quick: that the path runs.
  epochs, passes, burnin, thinning = (1, 2, 10, 10) if quick else (6, 10, 300, 40)
  best, rows = {}, []
  for prior in priors:
    best[prior] = {}
    for name, gamma in configs:
      scores = []
      for lr in grid:
        r = run_one(split, name, gamma, prior, lr, hidden, epochs, passes,
                    burnin, thinning, 0, curvature=False,
                    jit_compile=not quick)
        ll = r['log_likelihood'] if r else -np.inf
        scores.append(ll if np.isfinite(ll) else -np.inf)
        print('  tune %s %s gamma=%s lr=%g: validation log-lik %.3f'
              % (prior, name, gamma, lr, scores[-1]), flush=True)
      i = int(np.argmax(scores))
      if np.isfinite(scores[i]):
        best[prior][rate_key(name, gamma)] = grid[i]
      else:  # All diverged: keep the default rate, mark no winner.
        i = -1
      rows.append([prior, name, gamma] + ['**%.3f**' % v if j == i else
                                          '%.3f' % v
                                          for j, v in enumerate(scores)])
  common.write_table(
      os.path.join(out, 'yu_lr_sweep.md'),
      'Learning-rate sweep, validation log p(y|X) (%s)'
      % ('quick' if quick else 'full'),
      ['prior', 'metric', 'gamma'] + ['%g' % lr for lr in grid], rows,
      'Command: `python -m benchmarks.yu_tables %s`; %d%% of the training set '
      'fits, the rest validates; %d passes, burn-in %d, thinning %d steps, '
      'seed 0. Best per row in bold; -inf: diverged.' % (
          ' '.join(sys.argv[1:]), 80, epochs * passes, burnin, thinning))
  with open(os.path.join(out, 'yu_learning_rates.json'), 'w') as f:
    json.dump(best, f, indent=1)
  return best


def main():
  global SHAMPOO_EPSILON, DIAGONAL_BIAS  # pylint: disable=global-statement
  p = common.parser(__doc__.splitlines()[0])
  p.add_argument('--dataset', choices=['digits', 'mnist'], default='digits')
  p.add_argument('--seeds', type=int, default=3, help='seeds per cell (full)')
  p.add_argument('--metrics', nargs='+', choices=SAMPLERS,
                 help='only these samplers (default: all)')
  p.add_argument('--priors', nargs='+', choices=['gaussian', 'horseshoe'],
                 help='only these priors (default: both; quick: gaussian)')
  p.add_argument('--tune', nargs='*', choices=['none', 'corrected'],
                 help='sweep the learning rates first (validation split) of '
                 'these Γ modes (no value: both)')
  p.add_argument('--learning-rates', help='JSON written by a --tune run')
  p.add_argument('--shampoo-epsilon', type=float, default=SHAMPOO_EPSILON,
                 help="Shampoo's ridge ε (default: Yu et al.'s)")
  p.add_argument('--diagonal-bias', type=float, default=DIAGONAL_BIAS,
                 help="RMSprop's and Wenzel's ε (default: Yu et al.'s; it "
                 'bounds the metric by ε^-1/2)')
  args = p.parse_args()
  SHAMPOO_EPSILON = args.shampoo_epsilon
  DIAGONAL_BIAS = args.diagonal_bias
  out = common.out_dir(args.out)
  data = tuple(a.astype('float32') if a.dtype.kind == 'f' else a
               for a in common.load_dataset(args.dataset))
  hidden = 400 if args.dataset == 'mnist' else 100
  if args.quick:
    epochs, passes, burnin, thinning, seeds = 2, 1, 10, 10, [0]
  else:
    epochs, passes = (100, 1) if args.dataset == 'mnist' else (40, 10)
    burnin, thinning, seeds = 1000, 100, list(range(args.seeds))
  rows, results = [], {}
  priors = args.priors or (('gaussian',) if args.quick else
                           ('gaussian', 'horseshoe'))
  rates = {k: dict(v) for k, v in LEARNING_RATES.items()}
  if args.learning_rates:
    with open(args.learning_rates) as f:
      for prior, table in json.load(f).items():
        rates[prior].update(table)
  if args.tune is not None:
    modes = args.tune or ['none', 'corrected']
    tuned = tune(data, [c for c in configurations()
                        if c[1] in modes and c[0] in (args.metrics or SAMPLERS)],
                 priors, hidden, args.quick, out)
    for prior, table in tuned.items():
      rates[prior].update(table)
  configs = [(c, prior) for prior in priors
             for c in configurations(args.quick)
             if not args.metrics or c[0] in args.metrics]
  for i, ((name, gamma), prior) in enumerate(configs):
    print('[%d/%d] %s gamma=%s prior=%s' % (i + 1, len(configs), name, gamma,
                                            prior), flush=True)
    lr = learning_rate(rates[prior], name, gamma)
    runs = [run_one(data, name, gamma, prior, lr, hidden, epochs, passes,
                    burnin, thinning, s, jit_compile=not args.quick)
            for s in seeds]
    runs = [r for r in runs if r is not None]
    fmt = lambda k: ('%.3f ± %.3f' % (np.mean([r[k] for r in runs]),
                                      np.std([r[k] for r in runs]))
                     if runs else 'n/a')
    rows.append([prior, name, gamma, '%g' % lr, fmt('log_likelihood'), fmt('accuracy'),
                 fmt('ece'), fmt('curvature'), fmt('seconds_per_epoch')])
    results[(prior, name, gamma)] = runs
  common.write_table(
      os.path.join(out, 'yu_tables.md'),
      'Yu et al. Tables 1–2 protocol, %s, MLP %d-%d-%d-10 (%s)'
      % (args.dataset, data[0].shape[1], hidden, hidden,
         'quick' if args.quick else 'full'),
      ['prior', 'metric', 'gamma', 'lr', 'test log p(y|X)', 'accuracy', 'ECE',
       'avg. curvature', 's/epoch'], rows,
      'Command: `python -m benchmarks.yu_tables%s`; %d passes over the data, '
      'burn-in %d, thinning %d steps, seeds %s.' % (
          ' '.join([''] + sys.argv[1:]), epochs * passes, burnin, thinning,
          seeds))
  _plot(rows, os.path.join(out, 'yu_tables.png'))


def _plot(rows, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(7, 3.5))
  labels, values = [], []
  for prior, name, gamma, _, ll, *_ in rows:
    if ll == 'n/a':
      continue
    labels.append('%s %s%s' % (prior[0].upper(), name,
                               '+Γ' if gamma == 'corrected' else ''))
    values.append(float(ll.split(' ')[0]))
  ax.barh(labels, values)
  ax.set_xlabel('test log p(y|X) per example')
  ax.tick_params(axis='y', labelsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


if __name__ == '__main__':
  main()
