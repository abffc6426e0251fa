"""SampleCollector schedules and windows, BayesianEnsemble metrics, safe files, priors."""

import os

import numpy as np
import pytest
import keras
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive.keras import sample_files
from tfp_adaptive.keras import ensemble
from tfp_adaptive.keras import predictive
from tests.conftest import no_warning


def _problem(n=120, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 5)).astype('float32')
  y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype('int64') + (x[:, 2] > 1.)
  return x, y


def _model():
  keras.utils.set_random_seed(1)
  return keras.Sequential([keras.Input((5,)),
                           keras.layers.Dense(8, activation='tanh'),
                           keras.layers.Dense(3, activation='softmax')])


def _fit(collector, epochs=3, lr=1e-4, **fit_kwargs):
  x, y = _problem()
  model = _model()
  model.compile(tfa.keras.optimizers.PSGLD(lr, data_size=len(x), seed=0),
                'sparse_categorical_crossentropy')
  tfa.keras.enable_gamma(model)
  model.fit(x, y, batch_size=20, epochs=epochs, verbose=0,
            callbacks=[collector], **fit_kwargs)
  return model


@pytest.mark.slow
def test_step_schedule():
  x, y = _problem(seed=3)
  col = tfa.keras.SampleCollector(burnin=5, thinning=3,
                                  validation_data=(x, y))
  _fit(col)  # 18 steps: samples at 8, 11, 14, 17.
  history = col.model.history.history
  # Epoch 1 ends at step 6, before the first sample: logged for epochs 2, 3.
  assert len(history['val_ensemble_log_likelihood']) == 2
  assert 0. <= history['val_ensemble_accuracy'][-1] <= 1.
  assert [m.step for m in col.ensemble.members] == [8, 11, 14, 17]
  w = col.ensemble.members[0].weights
  assert all(np.all(np.isfinite(a)) for a in w)


@pytest.mark.parametrize('burnin, unit, warns', [
    (17, 'step', False), (18, 'step', True),   # 3 epochs of 6 steps.
    (2, 'epoch', False), (3, 'epoch', True)])
@pytest.mark.slow
def test_a_burnin_longer_than_the_run_is_told_before_training(burnin, unit,
                                                               warns):
  col = tfa.keras.SampleCollector(burnin=burnin, unit=unit)
  with (pytest.warns(UserWarning, match='keep no members') if warns else
        no_warning('no members')):
    _fit(col)
  assert bool(col.members) != warns


def test_schedule_with_steps_per_execution():
  col = tfa.keras.SampleCollector(burnin=5, thinning=3)
  x, y = _problem()
  model = _model()
  model.compile(tfa.keras.optimizers.SGLD(1e-4, data_size=120, seed=0),
                'sparse_categorical_crossentropy', steps_per_execution=2)
  model.fit(x, y, batch_size=20, epochs=3, verbose=0, callbacks=[col])
  assert [m.step for m in col.members] == [8, 12, 14, 18]


@pytest.mark.slow
def test_epoch_schedule():
  col = tfa.keras.SampleCollector(burnin=1, thinning=1, unit='epoch')
  _fit(col)
  assert [m.step for m in col.members] == [12, 18]


@pytest.mark.slow
def test_last_window_keeps_most_recent():
  col = tfa.keras.SampleCollector(thinning=2, max_samples=3, window='last')
  _fit(col)
  assert [m.step for m in col.ensemble.members] == [14, 16, 18]


def test_reservoir_is_uniform_over_seen_samples():
  """Each of 9 samples is kept with probability 3/9 (binomial bound)."""
  counts = np.zeros(10)
  trials = 300
  for seed in range(trials):
    col = tfa.keras.SampleCollector(max_samples=3, seed=seed)
    for step in range(1, 10):
      slot = col.window.slot(col.members)
      member = ensemble.Member(step, 1., [], None)
      if slot is not None:
        if slot < len(col.members):
          col.members[slot] = member
        else:
          col.members.append(member)
    for m in col.members:
      counts[m.step] += 1
  p = 3. / 9.
  se = np.sqrt(trials * p * (1 - p))
  assert np.all(np.abs(counts[1:] - trials * p) < 4 * se), counts


@pytest.mark.slow
def test_directory_samples_and_ensemble_files(tmp_path):
  d = str(tmp_path / 'run')
  col = tfa.keras.SampleCollector(burnin=5, thinning=3, max_samples=2,
                                  window='last', directory=d)
  _fit(col)
  files = sorted(n for n in os.listdir(d) if n.startswith('sample_'))
  assert files == ['sample_0000000014.npz',
                   'sample_0000000017.npz']  # Evicted files are deleted.
  assert all(m.weights is None for m in col.members)  # Nothing in RAM.
  x, y = _problem(seed=5)
  ens = col.ensemble
  out = ens.evaluate(x, y)
  saved = str(tmp_path / 'ens')
  ens.save(saved)
  loaded = tfa.keras.BayesianEnsemble.load(saved)
  assert loaded.evaluate(x, y) == out


@pytest.mark.slow
def test_ensemble_metrics_match_a_direct_computation():
  col = tfa.keras.SampleCollector(burnin=10, thinning=2)
  model = _fit(col)
  x, y = _problem(seed=7)
  ens = col.ensemble
  members = ens.predict_members(x)
  assert members.shape == (len(ens), len(x), 3)
  probs = members.mean(0)
  np.testing.assert_allclose(ens.predict(x), probs, rtol=1e-6)
  out = ens.evaluate(x, y)
  np.testing.assert_allclose(
      out['log_likelihood'], np.mean(np.log(probs[np.arange(len(y)), y])),
      rtol=1e-6)
  np.testing.assert_allclose(out['accuracy'], np.mean(probs.argmax(1) == y))
  conf, correct = probs.max(1), probs.argmax(1) == y
  bins = np.minimum((conf * 15).astype(int), 14)
  ece = sum(abs(correct[bins == b].mean() - conf[bins == b].mean()) *
            np.mean(bins == b) for b in range(15) if np.any(bins == b))
  np.testing.assert_allclose(out['ece'], ece, rtol=1e-4, atol=1e-6)
  # The training model's own weights are untouched by predictions.
  before = [w.copy() for w in model.get_weights()]
  ens.predict(x)
  for member, ref in zip(ens.iterate_members(), members):
    np.testing.assert_allclose(member.predict(x, verbose=0), ref, rtol=1e-6)
  for a, b in zip(before, model.get_weights()):
    np.testing.assert_array_equal(a, b)


def test_step_size_weighting():
  sched = keras.optimizers.schedules.ExponentialDecay(1e-4, 1, 0.9)
  x, y = _problem()
  model = _model()
  model.compile(tfa.keras.optimizers.SGLD(sched, data_size=120, seed=0),
                'sparse_categorical_crossentropy')
  col = tfa.keras.SampleCollector(thinning=6, weighting='step_size')
  model.fit(x, y, batch_size=20, epochs=3, verbose=0, callbacks=[col])
  ens = col.ensemble
  lrs = np.array([m.learning_rate for m in ens.members])
  np.testing.assert_allclose(lrs, 1e-4 * 0.9 ** np.array([6, 12, 18]),
                             rtol=1e-5)
  np.testing.assert_allclose(ens.member_weights(), lrs / lrs.sum())


@pytest.mark.slow
def test_nonfinite_weights_never_enter_the_ensemble():
  col = tfa.keras.SampleCollector()
  model = _fit(tfa.keras.SampleCollector(), epochs=1)
  col.set_model(model)
  w = model.get_weights()
  w[0][0, 0] = np.nan
  model.set_weights(w)
  with pytest.warns(UserWarning, match='non-finite'):
    col.collect(99)
  assert len(col.members) == 0 and col.num_skipped == 1
  strict = tfa.keras.SampleCollector(nonfinite='raise')
  strict.set_model(model)
  with pytest.raises(FloatingPointError):
    strict.collect(99)


def test_nonfinite_predictions_raise_instead_of_garbage_metrics():
  probs = np.full((4, 3), 1. / 3.)
  probs[2] = np.nan
  with pytest.raises(FloatingPointError, match='1 of 4 inputs'):
    predictive.classification_metrics(probs, [0, 1, 2, 0])


def test_truncated_sample_file_names_itself(tmp_path):
  d = str(tmp_path)
  path = os.path.join(d, 'sample_0000000003.npz')
  sample_files.write_arrays(path, [np.ones(1000)], {'names': ['a']})
  with open(path, 'r+b') as f:
    f.truncate(os.path.getsize(path) // 2)
  with pytest.raises(tfa.keras.SampleFileError, match='sample_0000000003'):
    sample_files.read_arrays(path)


@pytest.mark.slow
def test_regression_ensemble():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(100, 2)).astype('float32')
  y = x @ np.array([[1.], [-1.]], np.float32)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
  model.compile(tfa.keras.optimizers.SGLD(1e-3, data_size=100, seed=0), 'mse')
  col = tfa.keras.SampleCollector(burnin=10, thinning=5, noise_variance=0.5)
  model.fit(x, y, batch_size=100, epochs=40, verbose=0, callbacks=[col])
  mean, var = col.ensemble.predict(x)
  members = col.ensemble.predict_members(x)
  np.testing.assert_allclose(mean, members.mean(0), rtol=1e-6)
  np.testing.assert_allclose(var, members.var(0) + 0.5, rtol=1e-6)
  assert set(col.ensemble.evaluate(x, y)) == {'log_likelihood', 'rmse', 'coverage_50',
                                                'coverage_90'}


def test_priors_enter_the_loss_over_n():
  model = _model()
  tfa.keras.priors.add_horseshoe_prior(model, data_size=10, global_scale=0.5)
  tfa.keras.priors.add_gaussian_prior(model, data_size=10, scale=2.)
  assert len(model.trainable_weights) == 4  # No scale variables.
  total = float(sum(model.losses))
  expect = 0.
  for layer in model.layers:
    w, b = layer.kernel.numpy(), layer.bias.numpy()
    s2 = 0.25 / w.shape[0]
    expect += (w.size + 1) / 2 * np.log1p((w ** 2).sum() / s2) / 10
    expect += (b ** 2).sum() / (2 * 4. * 10)
  np.testing.assert_allclose(total, expect, rtol=1e-5)


def test_horseshoe_prior_is_the_scale_mixture_it_claims():
  """``-log p(w)`` differences equal those of ``∫ N(w; 0, τ²I) p(τ) dτ``
  with ``τ² ~ InvGamma(1/2, s²/2)``, by quadrature (normalisers cancel)."""
  import scipy.integrate  # pylint: disable=g-import-not-at-top
  import scipy.stats  # pylint: disable=g-import-not-at-top
  s = 0.3
  prior = tfa.keras.priors.HorseshoePrior(data_size=1, scale=s)

  def log_marginal(w):
    r2, d = float((w ** 2).sum()), w.size
    def integrand(log_tau):
      tau = np.exp(log_tau)
      return np.exp(scipy.stats.norm.logpdf(w, scale=tau).sum() +
                    scipy.stats.invgamma.logpdf(tau ** 2, 0.5, scale=s * s / 2)
                    + np.log(2 * tau * tau))  # d(τ²)/d(log τ)
    return np.log(scipy.integrate.quad(integrand, -12, 8, limit=200)[0])
  rng = np.random.default_rng(0)
  for shape in [(3,), (2, 2)]:
    ws = [rng.normal(size=shape) * k for k in (0.05, 0.5, 3.)]
    got = [float(prior(tf.constant(w, tf.float64))) for w in ws]
    want = [-log_marginal(w) for w in ws]
    np.testing.assert_allclose(np.diff(got), np.diff(want), rtol=1e-4,
                               atol=1e-6)


def test_horseshoe_prior_is_bounded_with_a_bounded_gradient():
  """No pole and no runaway: the loss is >= 0 (0 at w = 0) and the gradient
  is at most (D+1)/(2Ns) at any w, even at w = 0 and far out."""
  prior = tfa.keras.priors.HorseshoePrior(data_size=4, scale=0.5)
  for k in (0., 1e-20, 1e-3, 1., 1e15):
    w = tf.Variable(tf.fill([30, 20], k))
    with tf.GradientTape() as tape:
      value = prior(w)
    grad = tape.gradient(value, w)
    assert np.isfinite(float(value)) and float(value) >= 0.
    assert float(tf.norm(grad)) <= 601 / (2 * 4 * 0.5) * (1 + 1e-5)


def test_bad_collector_arguments_are_named():
  with pytest.raises(ValueError, match='thinning'):
    tfa.keras.SampleCollector(thinning=0)
  with pytest.raises(ValueError, match='window'):
    tfa.keras.SampleCollector(window='first')
