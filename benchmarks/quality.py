"""Ensemble quality: the documented recipes against a 5-member Adam deep ensemble, on six offline data sets.

The first recipe is the Keras guide's single chain: corrected `PSGLD`
from ``1e-4`` with ``data_size=N`` and momentum (``friction=0.1``; none
for regression, as the Keras guide's regression recipe),
`StepSizeCalibration` over the first 5 epochs (10 for regression, while
the noise scale settles), the default prior, and `SampleCollector`
keeping every epoch's weights after a burn-in of a third of the run.
Regression ends the model in `NoiseScale` (started at the targets'
spread), restores the targets' units with an inverted
`keras.layers.Normalization`, puts the ReLU prior ``N(0, 2/fan_in)`` on
the weights and compiles with `GaussianNLL`, as the Keras guide says;
the heteroscedastic case has a ``Dense(2)`` head of mean and log-scale.
The recipe also runs as 5 independent chains of a fifth of the epochs
each, from fresh weights, combined by `BayesianEnsemble.combine` (the
Keras guide). The third sampler row is the README's quick start (the
Keras guide's "A step for the stiff directions"), as 5 chains of a
fifth: each trains with Adam (3e-3) on 80% of the training data, for at
most four fifths of its epochs, early-stopped on the other 20%
(`keras.callbacks.EarlyStopping`, patience 5, best weights restored),
then samples on all of it with corrected `PSGLD` (no momentum) at the
step of `CurvatureCalibration` for the rest of its gradients (read after
the metric's burn-in and the first 2 epochs, which are the collector's
burn-in). The deep ensemble trains the same model with Adam, each of its
5 members for a fifth of the sampler's epochs, so every row sees the same
number of gradients; its members are combined by the same
`BayesianEnsemble` code (a mixture of the members' predictive
distributions). It runs at two learning rates, 1e-3 and the recipe's
3e-3: with a fixed number of epochs neither is the better one on every
data set (the faster one overfits the small sets and fits the larger ones
better), and the sampler rows are judged against the stronger of the two
on each set, as a user who tried both would compare.

Data sets (scikit-learn's, offline; a fixed 70/30 split, standardised
inputs): diabetes (regression in the targets' own units), breast cancer
(binary), wine (3 classes), digits with the README's MLP and with keras.io's
convnet, and a synthetic 1-D heteroscedastic regression whose predictive
band is drawn. Reported, as mean ± standard error over seeds: the test
log-likelihood, accuracy or RMSE, the expected calibration error or the
90% interval coverage, and the wall time.

Out-of-distribution inputs and shifted inputs are in
`benchmarks.quality_ood`; the UCI regression protocol, with its published
figures, in `benchmarks.quality_uci`.

    python -m benchmarks.quality [--quick] [--seeds 3]
"""

import os
import time
import warnings

import numpy as np
import keras

import tfp_adaptive as tfa
from benchmarks import calibration
from benchmarks import common
from tfp_adaptive.keras import ensemble as ensemble_lib
from tfp_adaptive.keras import members as members_lib


def _split(x, y, seed=0):
  from sklearn import preprocessing  # pylint: disable=g-import-not-at-top
  perm = np.random.default_rng(seed).permutation(len(x))
  x, y = x[perm], y[perm]
  cut = int(0.7 * len(x))
  scaler = preprocessing.StandardScaler().fit(x[:cut])
  x = scaler.transform(x).astype('float32')
  return x[:cut], y[:cut], x[cut:], y[cut:]


def _sklearn(name):
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  d = getattr(datasets, 'load_' + name)()
  return d.data, d.target


def _synthetic():
  rng = np.random.default_rng(0)
  x = rng.uniform(-3., 3., (600, 1))
  y = np.sin(2. * x) + (0.05 + 0.25 * np.abs(x)) * rng.normal(size=x.shape)
  return x, y.astype('float32')


def _dense(inputs, outputs, hidden=32, activation=None):
  return keras.Sequential([keras.Input((inputs,)),
                           keras.layers.Dense(hidden, activation='relu'),
                           keras.layers.Dense(outputs, activation=activation)])


def _regression(inputs, n, y, heteroscedastic=False):
  """The Keras guide's regression recipe: targets' units restored by an inverted `Normalization`, a ReLU prior."""
  x_in = keras.Input((inputs,))
  h = keras.layers.Dense(64, activation='relu')(x_in)
  h = keras.layers.Dense(64, activation='relu')(h)
  if heteroscedastic:  # Mean and log-scale per example.
    model = keras.Model(x_in, keras.layers.Dense(2)(h))
  else:
    units = keras.layers.Normalization(invert=True)
    units.adapt(y)
    mean = units(keras.layers.Dense(1)(h))
    model = keras.Model(x_in, tfa.keras.NoiseScale(
        data_size=n, initial_scale=float(np.std(y)))(mean))
  tfa.keras.priors.add_gaussian_prior(model, n, gain=tfa.keras.priors.RELU_GAIN)
  return model


def datasets():
  """``{name: (data, model_fn(n, y), loss, epochs)}``; ``model_fn`` builds a fresh model."""
  def flat_digits():
    x, y, xt, yt = common.load_dataset('digits')
    return (x.astype('float32'), y, xt.astype('float32'), yt)
  diabetes = _split(*_sklearn('diabetes'))
  diabetes = diabetes[:1] + (diabetes[1].reshape(-1, 1).astype('float32'),
                             diabetes[2],
                             diabetes[3].reshape(-1, 1).astype('float32'))
  sine = _split(*_synthetic())
  xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  return {
      'diabetes': (diabetes, lambda n, y: _regression(10, n, y),
                   lambda: tfa.keras.GaussianNLL(), 300),
      'breast cancer': (_split(*_sklearn('breast_cancer')),
                        lambda n, y: _dense(30, 1, activation='sigmoid'),
                        lambda: 'binary_crossentropy', 300),
      'wine': (_split(*_sklearn('wine')), lambda n, y: _dense(13, 3),
               lambda: xent, 300),
      'digits MLP': (flat_digits(), lambda n, y: keras.Sequential([
          keras.Input((64,)), keras.layers.Dense(100, activation='relu'),
          keras.layers.Dense(10)]), lambda: xent, 300),
      'digits convnet': (calibration.data(),
                         lambda n, y: calibration.convnet(),
                         lambda: 'sparse_categorical_crossentropy', 100),
      'synthetic 1-D': (sine, lambda n, y: _regression(1, n, y, True),
                        lambda: tfa.keras.GaussianNLL(), 300),
  }


def _fit_recipe(data, model_fn, loss_fn, epochs, seed, size=None):
  """The single-chain recipe (`size`, the other rows' chains, unused)."""
  del size
  x, y, _, _ = data
  regression = isinstance(loss_fn(), tfa.keras.GaussianNLL)
  keras.utils.set_random_seed(seed)
  model = model_fn(len(x), y)
  # The single-chain classification recipe adds momentum, which lets the
  # weights the data leave free reach the prior's spread within the burn-in;
  # the guide's regression recipe is plain pSGLD.
  momentum = {} if regression else {'friction': 0.1}
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x),
                                           **momentum),
                loss=loss_fn())
  collector = tfa.keras.SampleCollector(burnin=epochs // 3, unit='epoch')
  # The guide's regression recipe calibrates while the noise settles.
  calibration = tfa.keras.StepSizeCalibration(epochs=10 if regression else 5)
  return _sample(model, x, y, epochs, [calibration, collector])


def _fit_warm(data, model_fn, loss_fn, epochs, seed):
  """The Keras guide's "A step for the stiff directions": Adam with early stopping, then PSGLD at `CurvatureCalibration`'s step.

  Adam (3e-3) trains on 80% of the training data for at most four fifths
  of the epochs, stopped by `keras.callbacks.EarlyStopping` on the other
  20% (patience 5, best weights restored); the sampler then runs on all
  of it for the rest of the gradients (an Adam epoch on 80% counts 0.8).
  """
  x, y, _, _ = data
  keras.utils.set_random_seed(seed)
  model = model_fn(len(x), y)
  warm = common.adam_to_a_mode(model, x, y, loss_fn(),
                               max(4 * epochs // 5, 1))
  trained = int((1. - common.WARM_START_HELD_OUT) * len(warm.history['loss']))
  sampled = max(epochs - trained, 4)
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x)),
                loss=loss_fn())
  return _sample(model, x, y, sampled, [
      tfa.keras.CurvatureCalibration((x, y), epochs=2),
      tfa.keras.SampleCollector(burnin=2, unit='epoch')])


def _sample(model, x, y, epochs, callbacks):
  """`fit` with `callbacks` (the collector last): its ensemble and the names of what warned."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model.fit(x, y, epochs=epochs, verbose=0, callbacks=callbacks)
  said = [str(w.message).split(':')[0] for w in caught
          if issubclass(w.category, UserWarning)]
  return callbacks[-1].ensemble, said


def _chains(fit):
  """`fit` as `size` independent chains of ``epochs / size`` epochs each (the Keras guide's `BayesianEnsemble.combine`)."""
  def fit_chains(data, model_fn, loss_fn, epochs, seed, size):
    ensembles, said = [], []
    for chain in range(size):
      ens, told = fit(data, model_fn, loss_fn, max(epochs // size, 1),
                      1000 * seed + chain)
      ensembles.append(ens)
      said += told
    return tfa.keras.BayesianEnsemble.combine(ensembles), said
  return fit_chains


def _fit_adam(data, model_fn, loss_fn, epochs, seed, size,
              learning_rate=1e-3):
  x, y, _, _ = data
  kept, model = [], None
  for m in range(size):
    keras.utils.set_random_seed(1000 * seed + m)
    model = model_fn(len(x), y)
    model.compile(keras.optimizers.Adam(learning_rate), loss=loss_fn())
    model.fit(x, y, epochs=max(epochs // size, 1), verbose=0)
    kept.append(members_lib.Member(m, learning_rate,
                                   [np.array(v.numpy()) for v in model.weights],
                                   None))
  return ensemble_lib.BayesianEnsemble(model, kept), []


def _fit_adam_fast(data, model_fn, loss_fn, epochs, seed, size):
  """The deep ensemble at the learning rate of the recipe's Adam stage."""
  return _fit_adam(data, model_fn, loss_fn, epochs, seed, size,
                   learning_rate=common.WARM_START_LEARNING_RATE)


ADAM = 'Adam deep ensemble (5)'
ADAM_FAST = 'Adam deep ensemble (5), ' + common.rate_label(
    common.WARM_START_LEARNING_RATE)
FIVE = 'recipe, 5 chains of a fifth'
# {row name: (its name in the verdicts, fit)}; the deep ensembles last.
METHODS = {'recipe (corrected PSGLD)': ('recipe', _fit_recipe),
           FIVE: ('5 chains', _chains(_fit_recipe)),
           'Adam, early-stopped, + CurvatureCalibration, 5 chains': (
               'warm start', _chains(_fit_warm)),
           ADAM: ('Adam', _fit_adam),
           ADAM_FAST: ('Adam ' + common.rate_label(
               common.WARM_START_LEARNING_RATE), _fit_adam_fast)}
DEEP_ENSEMBLES = (ADAM, ADAM_FAST)


def run(sets, quick, seeds):
  """``{dataset: {method: [metrics per seed]}}`` and the ensembles of seed 0, for `datasets()`.

  ``quick``: the synthetic set only, 6 epochs, 2 chains or members
  instead of 5, and not the recipe's 5-chain row, which runs the same
  code as the others (a check that every fit runs and is written).
  """
  results, first = {}, {}
  size = 2 if quick else 5
  for name, (data, model_fn, loss_fn, epochs) in sets.items():
    if quick:
      if name != 'synthetic 1-D':  # A regression head and the band figure.
        continue
      epochs = 6
    for method, (_, fit) in METHODS.items():
      if quick and method == FIVE:
        continue
      for seed in range(seeds):
        t0 = time.time()
        ens, said = fit(data, model_fn, loss_fn, epochs, seed, size)
        metrics = ens.evaluate(data[2], data[3])
        metrics['seconds'] = time.time() - t0
        if method not in DEEP_ENSEMBLES:  # The members' temperatures.
          try:
            readings = ens.check_temperature(data[0], data[1], warn=False)
          except ValueError:  # Too few members a chain (--quick).
            readings = {}
          for key, form in (('virial', 'overall'), ('laplacian', 'laplacian')):
            metrics[key] = (readings[form].temperature if readings
                            else float('nan'))
        metrics['warnings'] = said
        results.setdefault(name, {}).setdefault(method, []).append(metrics)
        if seed == 0:
          first[(name, method)] = ens
        print(name, method, seed, {k: v for k, v in metrics.items()
                                   if k != 'warnings'}, flush=True)
  return results, first


def _cell(runs, key, digits=3):
  if key not in runs[0]:
    return ''
  mean, se = common.mean_se([r[key] for r in runs])
  return '%.*f ± %.*f' % (digits, mean, digits, se)


def table_rows(results):
  rows = []
  for name, methods in results.items():
    lls = {}
    for method, runs in methods.items():
      regression = 'rmse' in runs[0]
      lls[method] = common.mean_se([r['log_likelihood'] for r in runs])
      rows.append([name, method, _cell(runs, 'log_likelihood'),
                   _cell(runs, 'rmse' if regression else 'accuracy'),
                   _cell(runs, 'coverage_90' if regression else 'ece'),
                   _cell(runs, 'virial', 2), _cell(runs, 'laplacian', 2),
                   '%.0f' % np.mean([r['seconds'] for r in runs]),
                   ', '.join(sorted({w for r in runs for w in r['warnings']}))
                   or '—'])
    # Each sampler row against the stronger of the two deep ensembles.
    best = max(DEEP_ENSEMBLES, key=lambda m: lls[m][0])
    adam, a_se = lls[best]
    verdicts = []
    for method, (ll, se) in lls.items():
      if method in DEEP_ENSEMBLES:
        continue
      gap, gap_se = ll - adam, np.hypot(se, a_se)
      verdicts.append('%s %+.3f ± %.3f (%s)' % (
          METHODS[method][0], gap, gap_se,
          'matches or beats' if gap >= -2. * gap_se else 'worse'))
    rows[-1][-1] += '; against %s: %s' % (METHODS[best][0],
                                          '; '.join(verdicts))
  return rows


def plot_band(ens, data, path):
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  x, y, xt, yt = data
  grid = np.linspace(x.min(), x.max(), 200, dtype='float32')[:, None]
  fig, axes = plt.subplots(1, len(ens), figsize=(5 * len(ens), 3.5),
                           squeeze=False)
  for ax, (method, e) in zip(axes[0], ens.items()):
    lower, upper = e.predict_interval(grid, level=0.9)
    mean, _ = e.predict(grid)
    ax.scatter(xt[:, 0], yt[:, 0], s=4, c='k', alpha=0.4, label='test data')
    ax.fill_between(grid[:, 0], lower[:, 0], upper[:, 0], alpha=0.3,
                    label='90% predictive interval')
    ax.plot(grid[:, 0], mean[:, 0], label='predictive mean')
    ax.set_title(method)
    ax.set_xlabel('x (standardised)')
  axes[0][0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(path, dpi=90)
  plt.close(fig)


def main():
  p = common.parser(__doc__.splitlines()[0])
  p.add_argument('--seeds', type=int, default=3)
  args = p.parse_args()
  out = common.out_dir(args.out)
  seeds = 1 if args.quick else args.seeds
  sets = datasets()
  results, first = run(sets, args.quick, seeds)
  common.write_table(
      os.path.join(out, 'quality.md'),
      'Ensemble quality against an Adam deep ensemble (%s, %d seed%s)'
      % ('quick, 2 chains or members' if args.quick else 'full', seeds,
         's' if seeds > 1 else ''),
      ['data set', 'method', 'test log-likelihood', 'accuracy / RMSE',
       'ECE / 90% coverage', 'T virial', 'T Laplacian', 'seconds',
       'warnings; verdict'],
      table_rows(results),
      'Command: `python -m benchmarks.quality%s`. Mean ± standard error over '
      'seeds. "matches or beats": the row\'s test log-likelihood is at '
      'least that of the stronger deep ensemble (named) minus two standard '
      'errors of the difference. Same number of gradients for every method. "T '
      'virial", "T Laplacian": the configurational temperature of the '
      'members in its two forms (`BayesianEnsemble.check_temperature` on the '
      'training data), 1 for draws from the posterior; the Laplacian form '
      'weighs the stiff directions that set the predictions most.'
      % (' --quick' if args.quick else ''))
  sine = sets['synthetic 1-D'][0]
  plot_band({m: first[('synthetic 1-D', m)] for m in METHODS
             if ('synthetic 1-D', m) in first}, sine,
            os.path.join(out, 'quality_band.png'))


if __name__ == '__main__':
  main()
