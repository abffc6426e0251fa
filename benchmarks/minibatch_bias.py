"""Error against the step size with minibatch gradients: the corrected samplers' two forms beside SGLD.

At a fixed batch size and decay, the published corrected sampler
(``gamma='corrected'``: the metric holds the current gradient) keeps an
error that a smaller step does not remove; ``gamma='corrected_lagged'``
(the metric from before the current gradient) does not (docs, "The mathematics",
"Minibatches"). Two targets, each over a decade of steps:

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

For each sampler the table gives the error at each step and the slope of
``log error`` against ``log h`` (least squares): about 1 for an error that
falls with the step, about 0 for a floor. Writes ``minibatch_bias.md`` and
``minibatch_bias.png``.

    python -m benchmarks.minibatch_bias [--quick]
"""

import os

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from benchmarks import common

GROUPS = 4  # Groups of chains: the error is read per group, its se across.


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


def samplers():
  """(label, kernel factory ``(target, h) -> kernel``, preconditioned?)."""
  def psgld(gamma):
    return lambda fn, h: tfa.mcmc.PSGLD(fn, h, preconditioner_decay_rate=0.95,
                                        diagonal_bias=1e-3, gamma=gamma)
  return [
      ('SGLD', lambda fn, h: tfa.mcmc.SGLD(fn, h), False),
      ("PSGLD, gamma='corrected'", psgld('corrected'), True),
      ("PSGLD, gamma='corrected_lagged'", psgld('corrected_lagged'), True),
  ]


def _chain(kernel, init, steps, seed):
  burn = steps // 4

  @tf.function(jit_compile=True, autograph=False)
  def run():
    return tfp.mcmc.sample_chain(steps - burn, init, kernel=kernel,
                                 num_burnin_steps=burn, trace_fn=None,
                                 seed=seed)
  return run().numpy()


def gaussian_error(factory, h, chains, horizon, seed):
  """``(error, se)``: ``|sd − 1|`` read on each group of chains, their mean and its standard error."""
  steps = int(horizon / h)
  x = _chain(factory(NoisyGaussian(), h), tf.zeros([chains], tf.float64),
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
  x = _chain(factory(mini, h), tf.zeros([chains, dim]), steps, seed)
  mean, sd = ref
  groups = x.reshape(len(x), GROUPS, -1, dim).mean(axis=(0, 2))
  z = (groups - mean) / sd
  return _over_groups(np.abs(z).max(axis=1))


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
  common.write_table(
      os.path.join(out, 'minibatch_bias.md'),
      'Error against the step size, minibatch gradients',
      ['target', 'sampler', 'error at each step h (± se)', 'slope'], rows,
      note=('Gaussian: mean over %d groups of chains of |sd − 1|. Logistic '
            'regression: mean over the groups of the largest |mean − '
            'mean_NUTS|/sd_NUTS over the 9 coefficients, NUTS on the full '
            'posterior. Slope: least squares of log error on log h (1: the '
            'error falls with h; 0: a floor). PSGLD: decay 0.95, '
            'diagonal_bias 1e-3.' % GROUPS))
  _plot(curves, os.path.join(out, 'minibatch_bias.png'))


def _row(target, label, steps, errs):
  cells = ', '.join('h=%g: %.4f ± %.4f' % (h, e, s)
                    for h, (e, s) in zip(steps, errs))
  return [target, label, cells, '%.2f' % slope(steps, [e for e, _ in errs])]


def _plot(curves, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, axes = plt.subplots(1, 2, figsize=(10, 4))
  for label, steps, errs in curves:
    ax = axes[0] if label.startswith('Gaussian') else axes[1]
    ax.errorbar(steps, [e for e, _ in errs], [s for _, s in errs],
                marker='o', capsize=3, label=label.split(': ', 1)[1])
  for ax, title in zip(axes, ['Gaussian, minibatch noise: |sd − 1|',
                              'Logistic regression: max |Δmean|/sd']):
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel('step size h')
    ax.set_title(title)
  axes[0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=80)


if __name__ == '__main__':
  main()
