"""Every kernel at its default hyperparameters, its step chosen by the documented rule, on three targets with exact or NUTS answers.

The documented rule (guide "Kernels and TFP chains"): TFP's
`SimpleStepSizeAdaptation` at its default target, which moves the step
until its drift over its noise, ``r``, is about 0.02 (the regime's
tolerance). The adaptation runs during the burn-in; the step is then
fixed. Targets, full-batch gradients:

* **standard normal**, 3-D;
* **ill-conditioned Gaussian**, 100-D, standard deviations log-spaced
  from 1 to 1e-2 (condition number 1e4 of the covariance), in a random
  rotation drawn from the seed printed with the table;
* **Bayesian logistic regression** on scikit-learn's breast cancer data
  (8 features and an intercept, prior N(0, 1)), against NUTS.

Beside the defaults, two settings of the guides for full-batch gradients:
the short average (``preconditioner_decay_rate=0.5``) and adapt-then-freeze
(the metric adapts during the burn-in and is then fixed, without Γ), for
PSGLD and Shampoo. The burn-in and the samples are one chain: the
sampling continues from the burn-in's state, metric and step.

Error: the largest ``|sd/sd_true − 1|`` over the coordinates (the
eigen-directions for the rotated Gaussian), with the Monte Carlo floor of
that maximum for an exact sampler with the same number of effective draws
beside it. A run is *accurate* within 5%; the last column says whether
`tfa.mcmc.check_run` warned. Where the constructor refuses a kernel's
defaults on these targets (no minibatch noise), the row says so. Writes
``defaults.md``.

    python -m benchmarks.defaults [--quick]
"""

import os
import time
import warnings

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from benchmarks import common
from benchmarks import minibatch_bias

KERNELS = ['SGLD', 'PSGLD', 'WenzelSGLD', 'MongeSGRLD', 'ShampooSGRLD',
           'AdamSGLD']
# Beside the defaults: the short average the guide "Step sizes and regimes"
# recommends for full-batch gradients, and adapt-then-freeze (the metric
# adapts during the burn-in, then is fixed, and Γ is zero). A value `None`
# stands for the burn-in's length.
VARIANTS = ([(name, {'preconditioner_decay_rate': 0.5})
             for name in ('PSGLD', 'ShampooSGRLD')] +
            [(name, {'num_adaptation_steps': None, 'gamma': 'none'})
             for name in ('PSGLD', 'ShampooSGRLD')])


def kernels():
  """``[(label, kernel name, keyword arguments)]``: the defaults, then the variants."""
  out = [(name, name, {}) for name in KERNELS]
  for name, kw in VARIANTS:
    said = ', '.join('%s=%s' % (k, 'burn-in' if v is None else repr(v))
                     for k, v in kw.items())
    out.append(('%s, %s' % (name, said), name, kw))
  return out


def gaussian(sds, rotation):
  """``(log-target, covariance)`` of a zero-mean Gaussian with these sds in `rotation`'s columns."""
  cov = (rotation * sds ** 2) @ rotation.T
  prec = tf.constant(np.linalg.inv(cov), tf.float32)
  return (lambda x: -0.5 * tf.einsum('...i,ij,...j->...', x, prec, x)), cov


def rotation(dim, seed):
  q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, dim)))
  return q * np.sign(np.diag(r))


def targets(quick, seed):
  """``[(name, log-target, start sampler, directions, true sds)]``."""
  out = []
  fn, _ = gaussian(np.ones(3), np.eye(3))
  out.append(('standard normal, 3-D', fn, np.eye(3), np.ones(3)))
  dim = 20 if quick else 100
  sds = np.logspace(0., -2., dim)
  rot = rotation(dim, seed)
  fn, _ = gaussian(sds, rot)
  out.append(('Gaussian, %d-D, condition 1e4' % dim, fn, rot, sds))
  _, full, d = minibatch_bias.logistic_target(32)
  draws = minibatch_bias.nuts_draws(full, d, 16 if quick else 32,
                                    400 if quick else 2000)
  centre = draws.mean(0)
  out.append(('logistic regression (NUTS)',
              lambda w: full(w + centre), np.eye(d), draws.std(0)))
  return out


def run(name, fn, directions, true_sds, chains, steps, seed, **kwargs):
  """``(error, floor, step, warned, non-finite)`` of one kernel at its defaults (but `kwargs`); `None` where the constructor refuses them."""
  dim = len(true_sds)
  kwargs = {k: steps // 2 if v is None else v for k, v in kwargs.items()}
  start = tf.constant(
      np.random.default_rng(seed).normal(size=(chains, dim)) * true_sds
      @ directions.T, tf.float32)
  try:
    kernel = getattr(tfa.mcmc, name)(fn, 1e-4, **kwargs)
  except ValueError:  # Defaults it cannot stand behind, refused.
    return None
  adapted = tfp.mcmc.SimpleStepSizeAdaptation(kernel, steps // 2)

  @tf.function(jit_compile=True, autograph=False)
  def burn():
    return tfp.mcmc.sample_chain(
        1, start, kernel=adapted, num_burnin_steps=steps // 2,
        trace_fn=lambda _, r: r.new_step_size, seed=(seed, 1),
        return_final_kernel_results=True)
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')
    out = burn()
  step = float(out.trace[-1])

  # The same chain goes on, its metric as the burn-in left it and its step
  # fixed (the wrapper adapts during the burn-in only).
  @tf.function(jit_compile=True, autograph=False)
  def sample():
    return tfp.mcmc.sample_chain(
        steps // 4, out.all_states[-1], kernel=adapted,
        previous_kernel_results=out.final_kernel_results,
        num_steps_between_results=3, trace_fn=tfa.mcmc.trace_checks,
        seed=(seed, 2))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    samples, trace = sample()
    report = tfa.mcmc.check_run(adapted, samples, trace, seed=(seed, 3))
  x = samples.numpy().reshape(-1, dim) @ directions
  ratio = x.std(0) / true_sds
  told = [str(w.message) for w in caught
          if name in str(w.message) and 'not calibrated' not in
          str(w.message)]
  per_chain = samples.numpy() @ directions
  ess = _effective_draws(per_chain)
  # An exact sampler's sd from `ess` draws is off by about 1/sqrt(2·ess).
  floor = float(np.sqrt(2. * np.log(2. * dim) / (2. * ess)))
  error = float(np.max(np.abs(ratio - 1.))) if np.all(
      np.isfinite(ratio)) else float('inf')
  return error, floor, step, bool(told), int(np.sum(report.num_nonfinite))


def _effective_draws(x, batches=8):
  """The smallest over coordinates of the effective number of draws of ``x²``, chains pooled, from batch means."""
  n, chains, dim = x.shape
  per = n // batches
  sq = (x - x.mean((0, 1))) ** 2
  means = sq[:batches * per].reshape(batches, per, chains, dim).mean(1)
  var_means = means.reshape(-1, dim).var(0, ddof=1)
  var = sq.reshape(-1, dim).var(0, ddof=1)
  ess = chains * batches * var / np.maximum(var_means, 1e-300)
  return float(np.min(np.minimum(ess, n * chains)))


def main():
  parser = common.parser(__doc__.splitlines()[0])
  parser.add_argument('--seed', type=int, default=None,
                      help='seed of the random rotation (default: drawn)')
  args = parser.parse_args()
  common.select_device(args.device)
  out = common.out_dir(args.out)
  seed = (args.seed if args.seed is not None else
          int(time.time() * 1e3) % 100000)
  print('seed', seed, flush=True)
  chains, steps = (64, 4000) if args.quick else (256, 20000)
  rows = []
  for target, fn, directions, sds in targets(args.quick, seed):
    for label, name, kwargs in kernels():
      got = run(name, fn, directions, sds, chains, steps, seed, **kwargs)
      if got is None:
        rows.append([target, label, '', '', '', 'refused', '', ''])
      else:
        error, floor, step, told, bad = got
        rows.append([target, label, '%.3g' % step, '%.3f' % error,
                     '%.3f' % floor, 'yes' if error <= 0.05 else 'no',
                     'yes' if told else 'no', str(bad)])
      print(rows[-1], flush=True)
  common.write_table(
      os.path.join(out, 'defaults.md'),
      'Every kernel at its defaults, step by the documented rule',
      ['target', 'kernel', 'adapted step', 'max |sd/sd_true − 1|',
       'Monte Carlo floor', 'within 5%', 'warned', 'non-finite steps'],
      rows,
      note=('Step: `SimpleStepSizeAdaptation` at its default target over '
            'the first half of %d steps; then %d steps at that step, '
            '%d chains. Floor: the largest error an exact sampler would '
            'show over the coordinates with the run\'s effective draws. '
            'Rotation seed %d. "refused": the constructor raises a '
            '`ValueError` at these defaults, naming the parameters to '
            'choose.' % (steps, steps, chains, seed)))


if __name__ == '__main__':
  main()
