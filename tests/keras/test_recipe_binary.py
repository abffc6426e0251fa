"""The README's recipe on a binary classifier, against Adam: scikit-learn's breast cancer, keras.io style."""

import warnings

import keras
import numpy as np
import pytest

import tfp_adaptive as tfa
from tests.conftest import only_unsettled


def _data():
  from sklearn import datasets, preprocessing  # pylint: disable=g-import-not-at-top
  x, y = datasets.load_breast_cancer(return_X_y=True)
  perm = np.random.default_rng(0).permutation(len(x))
  x, y = x[perm].astype('float32'), y[perm].astype('float32')
  cut = 400
  x = preprocessing.StandardScaler().fit(x[:cut]).transform(x).astype(
      'float32')
  return x[:cut], y[:cut], x[cut:], y[cut:]


def _model(seed):
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((30,)),
                           keras.layers.Dense(32, activation='relu'),
                           keras.layers.Dense(1, activation='sigmoid')])


def _points(p, y):
  """Per test point, the log-likelihood of the label."""
  p = np.clip(np.asarray(p, np.float64).reshape(-1), 1e-12, 1. - 1e-12)
  return np.where(y > 0.5, np.log(p), np.log1p(-p))


@pytest.mark.statistical
def test_breast_cancer_with_the_readme_recipe_matches_adam():
  """One chain of the README's recipe (Adam 3e-3 stopped early on a 20%
  validation split, then corrected `PSGLD` at `CurvatureCalibration`'s
  step for 20 epochs) on a Dense(32) + sigmoid classifier with
  ``binary_crossentropy``, against the same network trained by Adam for
  as many epochs as the chain's warm start and sampling together. The
  ensemble's mean test log-likelihood is at least Adam's less two
  standard errors of their pointwise difference (the quality benchmark's
  "matches"), its accuracy above 0.9, and the only warnings the
  collector's thermometer saying the chain has not settled and the run
  too short to read."""
  x, y, xt, yt = _data()
  model = _model(0)
  model.compile(keras.optimizers.Adam(3e-3), 'binary_crossentropy')
  model.fit(x, y, epochs=48, verbose=0, validation_split=0.2, callbacks=[
      keras.callbacks.EarlyStopping(patience=5, restore_best_weights=True)])
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x)),
                'binary_crossentropy')
  collector = tfa.keras.SampleCollector(burnin=2, unit='epoch')
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model.fit(x, y, epochs=20, verbose=0, callbacks=[
        tfa.keras.CurvatureCalibration((x, y), epochs=2), collector])
  # 400 rows in batches of 32 are 13 steps an epoch: 18 epochs after
  # burn-in are too few steps for the live reading, and the run says so.
  short = [w for w in caught if 'too short to tell' in str(w.message)]
  assert len(short) == 1
  only_unsettled([w for w in caught if w not in short])
  ours = collector.ensemble.predict(xt)
  adam = _model(1)
  adam.compile(keras.optimizers.Adam(1e-3), 'binary_crossentropy')
  adam.fit(x, y, epochs=int(0.8 * 48) + 20, verbose=0)
  theirs = adam.predict(xt, verbose=0)
  diff = _points(ours, yt) - _points(theirs, yt)
  se = diff.std(ddof=1) / np.sqrt(len(diff))
  accuracy = np.mean((np.reshape(ours, -1) > 0.5) == (yt > 0.5))
  assert diff.mean() > -2. * se, (diff.mean(), se, _points(theirs, yt).mean())
  assert accuracy > 0.9, accuracy
