"""Regression that fits its noise: `NoiseScale` + `GaussianNLL`, mixtures of member Gaussians, intervals.

In the style of keras.io's regression examples (a functional MLP on 1-D
data), with targets in their own units. The ensemble's central 90%
intervals must cover 85–95% of held-out targets (1000 of them: the
binomial standard error of a coverage is under 0.01). With the loss
``'mse'`` the same targets give intervals that cover almost nothing, and
the collector says so. Members with a heteroscedastic head combine as the
mixture of their Gaussians, checked against SciPy.
"""

import warnings

import numpy as np
import pytest
import keras

import tfp_adaptive as tfa

N, N_TEST = 500, 1000


def _data(seed, heteroscedastic):
  rng = np.random.default_rng(seed)
  x = rng.uniform(-3., 3., size=(N + N_TEST, 1)).astype('float32')
  sd = 5. + 10. * np.abs(x) if heteroscedastic else 20. * np.ones_like(x)
  y = (50. * np.sin(x) + sd * rng.normal(size=x.shape)).astype('float32')
  return x[:N], y[:N], x[N:], y[N:]


def _fit(head, loss, x, y, epochs=60):
  keras.utils.set_random_seed(0)
  inputs = keras.Input((1,))
  hidden = keras.layers.Dense(32, activation='tanh')(inputs)
  hidden = keras.layers.Dense(32, activation='tanh')(hidden)
  model = keras.Model(inputs, head(hidden))
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=N), loss=loss)
  collector = tfa.keras.SampleCollector(burnin=30, unit='epoch')
  model.fit(x, y, batch_size=50, epochs=epochs, verbose=0,
            callbacks=[collector])
  return collector


def _noise_scale(hidden):
  return tfa.keras.NoiseScale(data_size=N)(keras.layers.Dense(1)(hidden))


@pytest.mark.statistical
def test_noise_scale_gives_calibrated_intervals_in_the_targets_units():
  x, y, xt, yt = _data(0, heteroscedastic=False)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    collector = _fit(_noise_scale, tfa.keras.GaussianNLL(), x, y)
  assert not [w for w in caught if 'noise variance' in str(w.message)]
  ensemble = collector.ensemble
  assert ensemble.likelihood.name == 'gaussian_scale'
  result = ensemble.evaluate(xt, yt)
  assert 0.85 <= result['coverage_90'] <= 0.95, result
  assert 0.40 <= result['coverage_50'] <= 0.60, result
  # The sampled noise scale is the data's (20), within 20%.
  sigma = np.exp([m.weights[-1] for m in ensemble.members]).mean()
  assert 16. < sigma < 24., sigma
  lower, upper = ensemble.predict_interval(xt, 0.9)
  inside = np.mean((yt >= lower) & (yt <= upper))
  assert abs(inside - result['coverage_90']) < 0.01  # Two routes, one answer.
  # The fixed-variance MSE on the same data: intervals of the wrong scale,
  # and a warning that names what to use instead.
  with pytest.warns(UserWarning, match='NoiseScale'):
    mse = _fit(lambda h: keras.layers.Dense(1)(h), 'mse', x, y, epochs=45)
  assert mse.ensemble.evaluate(xt, yt)['coverage_90'] < 0.3


def test_heteroscedastic_members_combine_as_a_mixture():
  """Members that each output a mean and a log-scale per point (a
  heteroscedastic head) make the mixture of their Gaussians: its mean,
  variance, quantiles, log-density and interval coverage, against SciPy."""
  from scipy import optimize, stats  # pylint: disable=g-import-not-at-top
  from tfp_adaptive.keras import predictive  # pylint: disable=g-import-not-at-top
  lik = tfa.keras.likelihoods.get('gaussian_scale')
  rng = np.random.default_rng(0)
  members = [np.concatenate([rng.normal(size=(50, 1)),
                             rng.normal(-0.5, 0.5, size=(50, 1))], -1)
             for _ in range(4)]
  weights = np.array([1., 2., 1., 0.5])
  y = rng.normal(size=(50, 1)) * 1.5
  acc = predictive.Predictive(lik, y)
  for w, out in zip(weights, members):
    acc.add(w, out)
  mu = np.stack([m[:, :1] for m in members])
  sd = np.exp(np.stack([m[:, 1:] for m in members]))
  p = (weights / weights.sum())[:, None, None]
  mean, variance = acc.prediction()
  np.testing.assert_allclose(mean, np.sum(p * mu, 0), rtol=1e-12)
  np.testing.assert_allclose(variance, np.sum(p * (mu ** 2 + sd ** 2), 0)
                             - mean ** 2, rtol=1e-10)
  density = np.sum(p * stats.norm.pdf(y, mu, sd), 0)
  np.testing.assert_allclose(acc.log_likelihood_points(),
                             np.log(density).ravel(), rtol=1e-10)
  lower, upper = predictive.mixture_quantiles(weights, mu, sd ** 2,
                                              [0.05, 0.95])
  cdf = lambda q, i: np.sum(p[:, 0, 0] * stats.norm.cdf(q, mu[:, i, 0],
                                                        sd[:, i, 0])) 
  for i in range(0, 50, 7):
    exact = optimize.brentq(lambda q: cdf(q, i) - 0.05, -50., 50.)
    np.testing.assert_allclose(lower[i, 0], exact, atol=1e-8)
  inside = np.mean((y >= lower) & (y <= upper))
  assert acc.coverage(0.9) == inside


def test_gaussian_nll_and_noise_scale_arguments():
  with pytest.raises(ValueError, match='even length'):
    tfa.keras.GaussianNLL()(np.zeros((4, 1)), np.zeros((4, 3), 'float32'))
  for name, bad in [('data_size', 0), ('prior_scale', 0.), ('initial_scale',
                                                            -1.)]:
    kwargs = dict(data_size=10)
    kwargs[name] = bad
    with pytest.raises(ValueError, match=name):
      tfa.keras.NoiseScale(**kwargs)
  layer = tfa.keras.NoiseScale(data_size=10, prior_scale=2.)
  again = tfa.keras.NoiseScale.from_config(layer.get_config())
  assert again.prior_scale == 2. and again.data_size == 10


@pytest.mark.statistical
def test_diabetes_in_its_own_units_with_the_guides_recipe():
  """scikit-learn's diabetes, standardised inputs, targets in their own
  units (sd about 77), keras.io's regression MLP (Dense 64 ReLU ×2), with
  the Keras guide's recipe: an inverted `Normalization` adapted to the
  targets, `NoiseScale` started at their spread, the ReLU prior and
  `StepSizeCalibration` over 10 epochs. Its 90% intervals cover 90% of the
  133 test targets within 3 binomial standard errors (0.026), its RMSE is
  below 85% of the test targets' sd (predicting their mean gives 100%,
  a linear fit about 75%), and no warning says the posterior went bad."""
  from sklearn import datasets, preprocessing  # pylint: disable=g-import-not-at-top
  x, y = datasets.load_diabetes(return_X_y=True)
  perm = np.random.default_rng(0).permutation(len(x))
  x, y = x[perm].astype('float32'), y[perm, None].astype('float32')
  x = preprocessing.StandardScaler().fit(x[:309]).transform(x)
  x, y, xt, yt = x[:309], y[:309], x[309:], y[309:]

  def fit():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((10,))
    h = keras.layers.Dense(64, activation='relu')(inputs)
    h = keras.layers.Dense(64, activation='relu')(h)
    units = keras.layers.Normalization(invert=True)
    units.adapt(y)
    mean = units(keras.layers.Dense(1)(h))
    model = keras.Model(inputs, tfa.keras.NoiseScale(
        data_size=len(x), initial_scale=float(np.std(y)))(mean))
    tfa.keras.priors.add_gaussian_prior(model, len(x),
                                        gain=tfa.keras.priors.RELU_GAIN)
    model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x)),
                  loss=tfa.keras.GaussianNLL())
    collector = tfa.keras.SampleCollector(burnin=40, unit='epoch')
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      model.fit(x, y, epochs=120, verbose=0, callbacks=[
          tfa.keras.StepSizeCalibration(epochs=10), collector])
      result = collector.ensemble.evaluate(xt, yt)
    return result, [str(w.message) for w in caught
                    if 'posterior looks bad' in str(w.message)]

  result, bad = fit()
  assert not bad, bad
  assert abs(result['coverage_90'] - 0.9) < 3 * np.sqrt(0.09 / len(yt)), result
  assert result['rmse'] < 0.85 * np.std(yt), (result, np.std(yt))
