"""Error against the step size with minibatch gradients: the corrected samplers' three forms beside SGLD and a frozen metric.

At a fixed batch size and decay, the published corrected sampler
(``gamma='corrected_published'``: the metric holds the current gradient)
keeps an error that a smaller step does not remove;
``gamma='corrected'`` (the default: the metric from a second minibatch)
and ``gamma='corrected_lagged'`` (the metric from before the current
gradient) do not (docs, "The mathematics", "Minibatches"). Three targets, each over a
decade of steps:

* **A Gaussian with minibatch noise of known law**: ``u(θ) = −θ²/2`` per
  coordinate, each step sees ``ĝ = −aθ + c`` with ``a ~ N(1, 1)`` and
  ``c ~ N(0, 5²)`` drawn afresh (noise that grows with ``|θ|``, as a
  minibatch gradient's does). Error: the largest ``|sd − 1|`` over four
  groups of chains, with its standard error from the spread of the chains.
* **Bayesian logistic regression on scikit-learn's breast cancer data**
  (569 rows, 8 standardised features and an intercept, prior N(0, 1),
  minibatches of 32 drawn inside the compiled chain), against NUTS on the
  full posterior. Error: the largest ``|mean − mean_NUTS|/sd_NUTS`` over
  the coefficients.
* **A Bayesian MLP classifier** (`benchmarks.bayesian_mlp`: two moons,
  500 examples, 2-20-20-1 tanh, 501 weights, prior N(0, 1), minibatches of
  50), against NUTS on the full posterior. Its weights have no marginals
  worth comparing (hidden units can be swapped and sign-flipped), so it is
  judged where users look: the test predictive ``p(y = 1 | x)`` at 200
  held-out inputs. Error: the total variation ``mean_x |p − p_NUTS|``
  between a group of the sampler's chains and a group of NUTS's, over all
  pairs of groups, in units of NUTS's own floor (the same distance between
  two groups of NUTS's chains): 1 is as close as NUTS gets to itself.

For each sampler the table gives the error at each step and the slope of
``log error`` against ``log h`` (least squares): about 1 for an error that
falls with the step, about 0 for a floor. Writes ``minibatch_bias.md`` and
``minibatch_bias.png``.

    python -m benchmarks.minibatch_bias [--quick]
"""

import os
import time

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from benchmarks import common

GROUPS = 4  # Groups of chains: the error is read per group, its se across.
# NUTS on the MLP: (chains, draws, burn-in), by `--quick`.
MLP_NUTS = {False: (16, 1000, 1000), True: (8, 100, 200)}


class NoisyGaussian(object):
  """``û(θ) = −aθ²/2 + cθ`` per coordinate, ``a ~ N(1, 1)``, ``c ~ N(0, 5²)`` per step."""

  needs_seed = True

  def __call__(self, theta, seed=None):
    s1, s2 = tfp.random.split_seed(seed)
    a = tf.stop_gradient(1. + tf.random.stateless_normal(
        tf.shape(theta), s1, dtype=theta.dtype))
    c = tf.stop_gradient(5. * tf.random.stateless_normal(
        tf.shape(theta), s2, dtype=theta.dtype))
    return -0.5 * a * theta ** 2 + c * theta


def psgld(gamma, frozen=False):
  """A kernel factory ``(target, h, burn) -> kernel``: PSGLD at decay 0.95 and ``diagonal_bias=1e-3`` with `gamma`; `frozen`: its metric adapts over the burn-in (`burn` steps), then is fixed."""
  return lambda fn, h, burn: tfa.mcmc.PSGLD(
      fn, h, preconditioner_decay_rate=0.95, diagonal_bias=1e-3,
      gamma=gamma, num_adaptation_steps=burn if frozen else None)


def samplers():
  """(label, kernel factory ``(target, h, burn) -> kernel``, preconditioned?).

  The adapted-then-frozen metric adapts over the burn-in (`burn` steps).
  """
  return [
      ('SGLD', lambda fn, h, burn: tfa.mcmc.SGLD(fn, h), False),
      ("PSGLD, gamma='corrected'", psgld('corrected'), True),
      ("PSGLD, gamma='corrected_published'", psgld('corrected_published'),
       True),
      ("PSGLD, gamma='corrected_lagged'", psgld('corrected_lagged'), True),
      ('PSGLD, adapted then frozen', psgld('none', frozen=True), True),
  ]


def _chain(factory, fn, h, init, steps, seed):
  burn = steps // 4
  kernel = factory(fn, h, burn)

  @tf.function(jit_compile=True, autograph=False)
  def run():
    return tfp.mcmc.sample_chain(steps - burn, init, kernel=kernel,
                                 num_burnin_steps=burn, trace_fn=None,
                                 seed=seed)
  return run().numpy()


def gaussian_error(factory, h, chains, horizon, seed):
  """``(error, se)``: ``|sd − 1|`` read on each group of chains, their mean and its standard error."""
  steps = int(horizon / h)
  x = _chain(factory, NoisyGaussian(), h, tf.zeros([chains], tf.float64),
             steps, seed)
  sds = np.sqrt((x.reshape(len(x), GROUPS, -1) ** 2).mean(axis=(0, 2)))
  return _over_groups(np.abs(sds - 1.))


def _over_groups(errors):
  """``(mean, se)`` of one error read on each group of chains."""
  return float(errors.mean()), float(errors.std(ddof=1) / np.sqrt(GROUPS))


# Breast cancer's texture, smoothness, symmetry and fractal dimension (means
# and standard errors): eight features that are not near-copies of each
# other, so that NUTS and the chains mix in minutes.
FEATURES = (1, 4, 8, 9, 11, 14, 18, 19)


def logistic_target(batch_size, features=FEATURES):
  """``(minibatch log-target, full log-target, dim)``: breast cancer, prior N(0, 1).

  `features`: the columns used (`None`: all 30), and an intercept.
  """
  from sklearn import datasets, preprocessing  # pylint: disable=g-import-not-at-top
  d = datasets.load_breast_cancer()
  data = d.data if features is None else d.data[:, features]
  x = preprocessing.StandardScaler().fit_transform(data)
  x = np.concatenate([x, np.ones((len(x), 1))], 1).astype(np.float32)
  y = d.target.astype(np.float32)

  def log_lik(parts, batch):
    xb, yb = batch
    logits = tf.einsum('nd,...d->...n', xb, parts[0])
    return -tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.broadcast_to(yb, tf.shape(logits)), logits=logits)

  def log_prior(parts):
    return -0.5 * tf.reduce_sum(parts[0] ** 2, -1)
  mini = tfa.minibatch_log_prob(log_lik, (x, y), batch_size, log_prior)
  full = lambda w: tf.reduce_sum(log_lik([w], (x, y)), -1) + log_prior([w])
  return mini, full, x.shape[1]


def nuts_draws(full, dim, chains, draws):
  """NUTS on the full posterior from zeros: ``[chains · draws, dim]``."""
  kernel = tfp.mcmc.DualAveragingStepSizeAdaptation(
      tfp.mcmc.NoUTurnSampler(full, step_size=0.1), draws // 2)

  @tf.function(jit_compile=True, autograph=False)
  def run():
    return tfp.mcmc.sample_chain(draws, tf.zeros([chains, dim]),
                                 kernel=kernel, num_burnin_steps=draws // 2,
                                 trace_fn=None, seed=(1, 2))
  return run().numpy().reshape(-1, dim)


def logistic_error(factory, mini, ref, dim, h, chains, horizon, seed):
  """``(error, se)``: the mean over groups of the largest ``|mean − mean_NUTS|/sd``."""
  steps = int(horizon / h)
  x = _chain(factory, mini, h, tf.zeros([chains, dim]), steps, seed)
  mean, sd = ref
  groups = x.reshape(len(x), GROUPS, -1, dim).mean(axis=(0, 2))
  z = (groups - mean) / sd
  return _over_groups(np.abs(z).max(axis=1))


def predictive_groups(probs, groups=GROUPS):
  """``[groups, test]``: the predictive of each group of chains, from ``[draws, chains, test]`` probabilities."""
  return np.stack([probs[:, g].mean((0, 1)) for g in
                   np.array_split(np.arange(probs.shape[1]), groups)])


def predictive_floor(reference):
  """NUTS's floor: the mean total variation between two of its groups of chains (`predictive_groups`)."""
  tv = [np.abs(reference[i] - reference[j]).mean()
        for i in range(len(reference)) for j in range(i)]
  return float(np.mean(tv))


def mlp_target(quick):
  """``(target, reference)``: the MLP (`benchmarks.bayesian_mlp`) and NUTS's test predictive in groups (`predictive_groups`).

  501 weights on 500 examples in minibatches of 50 against 16 NUTS chains
  of 1,000 draws; with `quick`, 105 weights on 100 examples in
  minibatches of 10 against 8 chains of 100.
  """
  from benchmarks import bayesian_mlp  # pylint: disable=g-import-not-at-top
  if quick:
    target = bayesian_mlp.Target(n=100, test=50, batch_size=10, hidden=8)
  else:
    target = bayesian_mlp.Target(n=500, test=200, batch_size=50, hidden=20)
  chains, draws, burnin = MLP_NUTS[quick]
  draws = target.nuts(chains, draws, burnin=burnin)
  return target, predictive_groups(tf.sigmoid(target.logits(draws)).numpy())


def monte_carlo_alone(own):
  """The distance to NUTS (in its floors) of an exact sampler whose own floor is `own`: ``sqrt((1 + own²)/2)``.

  Total variations of independent errors add about in quadrature (for
  NUTS against itself this is 1).
  """
  return float(np.sqrt((1. + own ** 2) / 2.))


def mlp_error(factory, target, reference, floor, h, chains, horizon, seed,
              draws=1000):
  """``(error, se, own)`` in units of NUTS's floor: each group's mean total variation against NUTS's groups.

  ``own`` is the chains' own floor, the same distance between two of their
  groups: an error close to it is mostly the chains' Monte Carlo error.
  The chain keeps `draws` predictives, evenly spaced after its burn-in, and
  no weights.
  """
  steps = int(horizon / h)
  burn = steps // 4
  thin = max(1, (steps - burn) // draws)
  init = target.init(chains, seed[0])
  kernel = factory(target.minibatch, h, burn)

  @tf.function(jit_compile=True, autograph=False)
  def run():
    return tfp.mcmc.sample_chain(
        draws, init, kernel=kernel, num_burnin_steps=burn,
        num_steps_between_results=thin - 1,
        trace_fn=lambda w, _: tf.sigmoid(target.logits(w)), seed=seed)[1]
  probs = run().numpy()
  ours = predictive_groups(probs)
  tv = np.array([[np.abs(a - b).mean() for b in reference] for a in ours])
  return _over_groups(tv.mean(1) / floor) + (predictive_floor(ours) / floor,)


def step_cost(factory, target, chains, h, steps=200, repeats=5):
  """Milliseconds per step of `chains` chains on the MLP, compiled, after a warm-up call."""
  kernel = factory(target.minibatch, h, 10)
  init = target.init(chains, 0)

  @tf.function(jit_compile=True, autograph=False)
  def advance(state, seed):
    return tfp.mcmc.sample_chain(1, state, kernel=kernel,
                                 num_burnin_steps=steps - 1, trace_fn=None,
                                 seed=seed)[0]
  advance(init, tf.constant([0, 1])).numpy()  # Compiles.
  start = time.perf_counter()
  for k in range(repeats):
    advance(init, tf.constant([0, k])).numpy()
  return 1e3 * (time.perf_counter() - start) / (steps * repeats)


def slope(steps, errors):
  """Least-squares slope of ``log error`` on ``log h``."""
  return float(np.polyfit(np.log(steps), np.log(errors), 1)[0])


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  common.select_device(args.device)
  out = common.out_dir(args.out)
  quick = args.quick
  rows, curves = [], []
  gauss_steps = [0.03, 0.01, 0.003] if not quick else [0.03, 0.01]
  chains = 256 if quick else 4000
  horizon = 40. if quick else 200.
  for label, factory, _ in samplers():
    errs = [gaussian_error(factory, h, chains, horizon, (3, k))
            for k, h in enumerate(gauss_steps)]
    curves.append(('Gaussian: ' + label, gauss_steps, errs))
    rows.append(_row('Gaussian with minibatch noise', label, gauss_steps,
                     errs))
    print(rows[-1], flush=True)
  mini, full, dim = logistic_target(32)
  draws = nuts_draws(full, dim, 32, 400 if quick else 2000)
  ref = draws.mean(0), draws.std(0)
  for label, factory, preconditioned in samplers():
    # The preconditioned step is about h/sqrt(E ĝ²) ≈ h/30 here.
    scale = 30. if preconditioned else 1.
    lr_steps = [scale * h for h in ([1e-3, 3e-4, 1e-4] if not quick
                                    else [1e-3, 3e-4])]
    horizon_lr = scale * (1. if quick else 5.)
    errs = [logistic_error(factory, mini, ref, dim, h, 64 if quick else 256,
                           horizon_lr, (5, k))
            for k, h in enumerate(lr_steps)]
    curves.append(('Logistic: ' + label, lr_steps, errs))
    rows.append(_row('Logistic regression, batch 32', label, lr_steps, errs))
    print(rows[-1], flush=True)
  target, reference = mlp_target(quick)
  floor = predictive_floor(reference)
  chains_mlp = 16 if not quick else 8
  for label, factory, preconditioned in samplers():
    # SGLD's h = 3e-4 is about the preconditioned samplers' 3e-3 here.
    scale = 10. if preconditioned else 1.
    mlp_steps = [scale * h for h in ([1e-3, 3e-4, 1e-4] if not quick
                                     else [1e-3, 3e-4])]
    horizon_mlp = scale * (30. if not quick else 1.)
    errs = [mlp_error(factory, target, reference, floor, h, chains_mlp,
                      horizon_mlp, (9, k))
            for k, h in enumerate(mlp_steps)]
    curves.append(('MLP: ' + label, mlp_steps, errs))
    rows.append(_row('Bayesian MLP (%d weights), batch %d' % (
        target.size, target.batch_size), label,
                     mlp_steps, errs, step_cost(factory, target, chains_mlp,
                                                mlp_steps[0])))
    print(rows[-1], flush=True)
  common.write_table(
      os.path.join(out, 'minibatch_bias.md'),
      'Error against the step size, minibatch gradients',
      ['target', 'sampler', 'error at each step h (± se)', 'slope',
       'ms per step (MLP, all chains)'], rows,
      note=('Gaussian: mean over %d groups of chains of |sd − 1|. Logistic '
            'regression: mean over the groups of the largest |mean − '
            'mean_NUTS|/sd_NUTS over the 9 coefficients, NUTS on the full '
            'posterior. MLP: mean total variation of the test predictive '
            'between groups of chains and groups of NUTS\'s, over NUTS\'s own '
            '(between its groups; 1 is NUTS\'s Monte Carlo floor); own: the '
            'same distance between two of the chains\' own groups, their '
            'Monte Carlo floor. Slope: '
            'least squares of log error on log h (1: the error falls with h; '
            '0: a floor, which can be the Monte Carlo error). PSGLD: decay '
            '0.95, diagonal_bias 1e-3; adapted then frozen: its metric adapts '
            'over the burn-in (a quarter of the run), without Γ; '
            'corrected: the metric and Γ from a second minibatch (two '
            'gradients a step). Cost: one '
            'step of all the chains, compiled.' % GROUPS))
  _plot(curves, os.path.join(out, 'minibatch_bias.png'))


def _row(target, label, steps, errs, cost=None):
  cells = ', '.join('h=%g: %.4f ± %.4f%s' % (
      h, e[0], e[1], ' (own %.2f)' % e[2] if len(e) > 2 else '')
                    for h, e in zip(steps, errs))
  return [target, label, cells, '%.2f' % slope(steps, [e[0] for e in errs]),
          '—' if cost is None else '%.2f' % cost]


def _plot(curves, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 3, figsize=(15, 4))
  panels = ('Gaussian', 'Logistic', 'MLP')
  for label, steps, errs in curves:
    ax = axes[panels.index(label.split(':')[0])]
    ax.errorbar(steps, [e[0] for e in errs], [e[1] for e in errs],
                marker='o', capsize=3, label=label.split(': ', 1)[1])
  for ax, title in zip(axes, ['Gaussian, minibatch noise: |sd − 1|',
                              'Logistic regression: max |Δmean|/sd',
                              'MLP: predictive TV / NUTS floor']):
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel('step size h')
    ax.set_title(title)
  axes[0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=80)


if __name__ == '__main__':
  main()
