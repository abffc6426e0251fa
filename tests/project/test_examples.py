"""The Keras example runs end to end (offline digits, tiny size)."""

import os
import runpy
import sys
import warnings

import numpy as np
import pytest

from tests.conftest import full_size_only
from tests.conftest import no_warning
from tests.conftest import only_unsettled
from tests.conftest import ROOT



# Full size only: the README's quick start, which this example runs with a
# table beside it, runs in CI with its answers checked (below).
@pytest.mark.slow
@full_size_only()
def test_keras_digits_example_runs_and_its_ensemble_is_sound(capsys,
                                                              monkeypatch):
  """The example as a user runs it (seeded), with 1 chain instead of 5: the
  pooled ensemble's weights stay below 100 in magnitude, its test
  log-likelihood > -0.5 and accuracy > 0.9, and the only warnings are the
  collector's thermometer saying that the weights the data leave to the
  prior have not spread yet, as the docstring says. It runs as ``python
  examples/keras_digits.py --chains 1`` would, inside the test process (one
  TensorFlow import fewer)."""
  monkeypatch.syspath_prepend(ROOT)
  monkeypatch.chdir(ROOT)
  monkeypatch.setattr(sys, 'argv', ['examples/keras_digits.py', '--chains',
                                    '1'])
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    runpy.run_path(os.path.join(ROOT, 'examples', 'keras_digits.py'),
                   run_name='__main__')
  only_unsettled(caught)
  stdout = capsys.readouterr().out
  rows = [l for l in stdout.splitlines() if l.startswith('| ')]
  assert len(rows) == 3 and 'pSGLD ensemble' in rows[1], rows
  assert 'Adam deep ensemble (1)' in rows[2], rows
  log_lik, accuracy = [float(c) for c in rows[1].split('|')[2:4]]
  largest = float(stdout.split('Largest |weight| in the ensemble:')[1]
                  .split()[0])
  assert largest < 100 and log_lik > -0.5 and accuracy > 0.9, (largest,
                                                                rows[1])


@pytest.mark.parametrize('flag', ['--chains', '--warm-epochs', '--epochs',
                                  '--hidden', '--batch-size'])
def test_keras_digits_example_refuses_counts_below_one(flag, capsys,
                                                       monkeypatch):
  """A count of 0 stops the example at its command line, naming the flag."""
  monkeypatch.syspath_prepend(ROOT)
  monkeypatch.setattr(sys, 'argv', ['examples/keras_digits.py', flag, '0'])
  with pytest.raises(SystemExit):
    runpy.run_path(os.path.join(ROOT, 'examples', 'keras_digits.py'),
                   run_name='__main__')
  assert 'argument %s: must be at least 1' % flag in capsys.readouterr().err


@pytest.mark.slow
def test_mnist_path_offline_with_a_stand_in_for_keras_datasets(monkeypatch):
  """`--dataset mnist` without the network: keras.datasets is replaced by
  MNIST-shaped random images, and one Yu-protocol run goes end to end on the
  784-400-400-10 MLP (the loader's flattening and scaling, the wide model,
  the collector and the evaluation)."""
  import keras  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  monkeypatch.syspath_prepend(ROOT)
  from benchmarks import yu_tables  # pylint: disable=g-import-not-at-top
  from examples import keras_digits  # pylint: disable=g-import-not-at-top

  rng = np.random.default_rng(0)
  fake = lambda n: (rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
                    rng.integers(0, 10, n).astype(np.uint8))
  monkeypatch.setattr(keras.datasets.mnist, 'load_data',
                      lambda: (fake(300), fake(100)))
  x, y, xt, yt = keras_digits.load('mnist')
  assert x.shape == (300, 784) and xt.shape == (100, 784)
  assert 0. <= x.min() and x.max() <= 1. and x.max() > 0.5
  data = tuple(a.astype('float32') if a.dtype.kind == 'f' else a
               for a in (x, y, xt, yt))
  r = yu_tables.run_one(data, 'RMSprop', 'corrected', 'gaussian', 1e-5, 400,
                        epochs=1, passes=4, burnin=2, thinning=2, seed=0,
                        curvature=False)
  assert r is not None and np.isfinite(r['log_likelihood'])
  assert 0. <= r['accuracy'] <= 1.


def _readme_block(heading):
  """The first ```python block after `heading` in README.md."""
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  start = text.index('```python\n', text.index(heading)) + len('```python\n')
  return text[start:text.index('```', start)]


def _run_one_chain(code, data):
  """Runs README `code` with its 5 chains cut to 1 on ``(x, y, x_test, y_test)``; its namespace and the warnings it gave."""
  assert 'for s in range(5)' in code
  code = code.replace('for s in range(5)', 'for s in range(1)')
  namespace = dict(zip(('x', 'y', 'x_test', 'y_test'), data))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    exec(compile(code, 'README.md', 'exec'), namespace)  # pylint: disable=exec-used
  return namespace, caught


@pytest.mark.slow
def test_readme_kernel_quick_start_prints_the_right_answer(capsys):
  """The README's kernel snippet, run as printed: corrected pSGLD's sample
  standard deviation of N(0, 1) is within 0.04 of 1 (its Monte Carlo error
  over 1000 chains of 2000 draws is below 0.01; the O(h) bias at h = 0.01
  about 0.01). Without Γ the spread is far larger, so a snippet that
  drifted from the right answer fails here."""
  namespace = {}
  with no_warning():
    exec(compile(_readme_block('## Quick start: a kernel in a TFP chain'),  # pylint: disable=exec-used
                 'README.md', 'exec'), namespace)
  import numpy as np  # pylint: disable=g-import-not-at-top
  std = float(np.std(namespace['samples']))
  assert abs(std - 1.) < 0.04, std
  assert 'tf.Tensor' in capsys.readouterr().out


def _adam_member(x, y, seed, epochs=60):
  """One member of an Adam deep ensemble: 60 epochs of batches of 32, reshuffled.

  A keras.io custom training loop, compiled whole (one graph for every
  epoch): the steps of ``fit``'s default without its per-step overhead.
  """
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(seed)
  model = keras.Sequential([keras.Input((64,)),
                            keras.layers.Dense(100, activation='relu'),
                            keras.layers.Dense(10, activation='softmax')])
  optimizer = keras.optimizers.Adam(1e-3)
  loss_fn = keras.losses.SparseCategoricalCrossentropy()
  data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
      len(x), seed=seed).batch(32).repeat(epochs)

  @tf.function
  def train():
    for xb, yb in data:
      with tf.GradientTape() as tape:
        loss = loss_fn(yb, model(xb, training=True))
      optimizer.apply(tape.gradient(loss, model.trainable_variables),
                      model.trainable_variables)
  train()
  return model


@pytest.mark.slow
def test_readme_keras_quick_start_runs_on_digits(monkeypatch):
  """The README's Keras snippet, run as printed on the example's digits split
  (its ``x, y, x_test, y_test``) but with 1 chain instead of 5: the pooled
  ensemble reaches accuracy > 0.9 and log-likelihood > -0.5, and its
  expected calibration error is within 0.02 of a 2-member Adam deep
  ensemble's (plus 3 bootstrap standard errors over the test points of the
  difference). The only warnings are the collector's thermometer saying
  the weights the data leave to the prior have not spread yet, as the
  README says."""
  import keras  # pylint: disable=g-import-not-at-top
  monkeypatch.syspath_prepend(ROOT)
  from examples import keras_digits  # pylint: disable=g-import-not-at-top
  x, y, x_test, y_test = keras_digits.load('digits')
  namespace, caught = _run_one_chain(
      _readme_block('## Quick start: a Bayesian neural network'),
      (x, y, x_test, y_test))
  only_unsettled(caught)
  ensemble = namespace['ensemble']
  result = ensemble.evaluate(x_test, y_test)
  assert result['accuracy'] > 0.9 and result['log_likelihood'] > -0.5, result
  from tfp_adaptive.keras import predictive  # pylint: disable=g-import-not-at-top
  probs = ensemble.predict(x_test)
  adam = [_adam_member(x, y, seed).predict(x_test, verbose=0)
          for seed in range(2)]
  adam = np.mean(adam, 0)
  ece = lambda p, i: predictive.classification_metrics(p[i], y_test[i])['ece']
  every = np.arange(len(y_test))
  gap = ece(probs, every) - ece(adam, every)
  rng = np.random.default_rng(0)
  boots = [ece(probs, i) - ece(adam, i) for i in
           (rng.integers(0, len(y_test), len(y_test)) for _ in range(200))]
  assert gap < 0.02 + 3 * np.std(boots), (gap, np.std(boots), result)


def _diabetes():
  """scikit-learn's diabetes data, a 75/25 split (seeded), inputs and targets standardised on the training part."""
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  x, y = datasets.load_diabetes(return_X_y=True)
  y = y[:, None]
  perm = np.random.default_rng(0).permutation(len(x))
  train, test = perm[:len(x) * 3 // 4], perm[len(x) * 3 // 4:]
  x = (x - x[train].mean(0)) / x[train].std(0)
  y = (y - y[train].mean()) / y[train].std()
  f32 = lambda a: a.astype('float32')
  return f32(x[train]), f32(y[train]), f32(x[test]), f32(y[test])


@pytest.mark.slow
def test_readme_regression_recipe_matches_a_deep_ensemble(monkeypatch):
  """The README's regression snippet, run as printed after its Keras quick
  start (which defines ``chain``) on scikit-learn's diabetes data with 1
  chain instead of 5. Its 90% intervals cover the test targets at a rate
  within three binomial standard errors of 0.9, and its test
  log-likelihood is no worse than a 2-member heteroscedastic Adam deep
  ensemble's on the same network by more than three bootstrap standard
  errors of the paired difference over the test points. The only warnings
  are the collector's thermometer saying that the chain has not settled
  or that 330 examples in batches of 32 make too few steps to read it, as
  the README says."""
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  monkeypatch.syspath_prepend(ROOT)
  from benchmarks import quality  # pylint: disable=g-import-not-at-top
  x, y, x_test, y_test = _diabetes()
  quick_start = _readme_block('## Quick start: a Bayesian neural network')
  definition = quick_start[:quick_start.index('network = lambda')]
  namespace, caught = _run_one_chain(
      definition + _readme_block('For regression, standardise the targets'),
      (x, y, x_test, y_test))
  only_unsettled(caught, too_short=True)
  ensemble = namespace['ensemble']
  result = ensemble.evaluate(x_test, y_test)
  n = len(y_test)
  assert abs(result['coverage_90'] - 0.9) < 3 * np.sqrt(0.09 / n), result
  lower, upper = namespace['lower'], namespace['upper']
  assert np.all(lower < upper) and lower.shape == y_test.shape
  # The quality benchmark's deep ensemble: Adam (1e-3) on the Gaussian
  # NLL, 40 epochs of batches of 32 a member, seeds 0 and 1.
  reference, _ = quality._fit_adam(  # pylint: disable=protected-access
      (x, y, x_test, y_test), lambda n, y: namespace['network'](),
      tfa.keras.GaussianNLL, epochs=80, seed=0, size=2)
  diff = (np.ravel(ensemble.log_likelihood_points(x_test, y_test)) -
          np.ravel(reference.log_likelihood_points(x_test, y_test)))
  rng = np.random.default_rng(0)
  boots = [diff[rng.integers(0, n, n)].mean() for _ in range(1000)]
  assert diff.mean() > -3 * np.std(boots), (diff.mean(), np.std(boots),
                                            result)
