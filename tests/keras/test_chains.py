"""K chains of one Keras model in one `fit` (`tfp_adaptive.keras.chains.Chains`).

Each chain must be what a separate `fit` of its model gives: without noise
the same trajectory to float rounding (every sampler, the per-chain
reductions of the Monge metric and of Shampoo included); with noise,
each chain draws its own and the chains are equal in law to one-chain
runs, tested against the exact posterior of a Bayesian linear regression
with a Monte Carlo tolerance.
"""

import os

import numpy as np
import pytest
import tensorflow as tf
import keras

import tfp_adaptive as tfa
from tfp_adaptive.keras.chains import Chains
from tests.conftest import full_size_only
from tests.conftest import stat_scale

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _digits(n=256):
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  x, y = load_digits(return_X_y=True)
  return (x[:n] / 16.).astype('float32'), y[:n]


def _mlp(seed, hidden=8):
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((64,)),
                           keras.layers.Dense(hidden, activation='tanh'),
                           keras.layers.Dense(10)])


def _fit(model, optimizer, x, y, epochs=2, **kwargs):
  model.compile(optimizer, LOSS, **kwargs)
  model.fit(x, y, batch_size=64, epochs=epochs, verbose=0, shuffle=False,
            callbacks=[tfa.keras.SampleCollector(monitor=False)])
  return model


OPTIMIZERS = {
    'SGLD': lambda **kw: tfa.keras.optimizers.SGLD(1e-3, **kw),
    'PSGLD': lambda **kw: tfa.keras.optimizers.PSGLD(1e-3, **kw),
    'MongeSGRLD': lambda **kw: tfa.keras.optimizers.MongeSGRLD(1e-3, **kw),
    'ShampooSGRLD': lambda **kw: tfa.keras.optimizers.ShampooSGRLD(
        1e-6, update_interval=1, **kw),
    'SGHMC': lambda **kw: tfa.keras.optimizers.SGHMC(1e-3, **kw),
    'AdamSGLD': lambda **kw: tfa.keras.optimizers.AdamSGLD(1e-3, **kw),
    'WenzelSGLD': lambda **kw: tfa.keras.optimizers.WenzelSGLD(1e-3, **kw),
    'SGNHT': lambda **kw: tfa.keras.optimizers.SGNHT(1e-3, **kw),
}


# The quick tier keeps PSGLD's; CI adds a matrix metric and a velocity
# (Shampoo's, SGHMC's); the full-size run every sampler.
@pytest.mark.parametrize('name', [
    n if n == 'PSGLD' else pytest.param(n, marks=(
        (pytest.mark.slow,) if n in ('ShampooSGRLD', 'SGHMC')
        else (pytest.mark.slow, full_size_only())))
    for n in sorted(OPTIMIZERS)])
def test_each_chain_is_its_own_fit_without_noise(name):
  """No noise (``burnin`` beyond the run), Γ off: deterministic, so equal."""
  x, y = _digits()
  make = lambda: OPTIMIZERS[name](data_size=len(x), burnin=10**6,
                                   gamma='none', seed=3)
  chains = _fit(Chains([_mlp(k) for k in range(2)]), make(), x, y)
  for k in range(2):
    alone = _fit(_mlp(k), make(), x, y)
    for a, b in zip(chains.chain_weights(k), alone.get_weights()):
      np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


# CI runs the default, 'corrected' (halves of each minibatch); 'original'
# (the published Γ times 1 − α) and 'corrected_lagged' share its path per
# chain and run at full size.
@pytest.mark.slow
@pytest.mark.parametrize('gamma', [
    pytest.param('original', marks=full_size_only()), 'corrected',
    pytest.param('corrected_lagged', marks=full_size_only())])
def test_each_chain_has_its_own_gamma(gamma):
  """Γ of every mode, computed exactly (no probe) and without noise: each chain as its own fit."""
  x, y = _digits(128)
  make = lambda: tfa.keras.optimizers.MongeSGRLD(
      1e-3, data_size=len(x), burnin=10**6, gamma=gamma,
      gamma_estimator='exact', seed=3)
  chains = _fit(Chains([_mlp(k, hidden=3) for k in range(2)]), make(), x, y)
  for k in range(2):
    alone = _fit(_mlp(k, hidden=3), make(), x, y)
    for a, b in zip(chains.chain_weights(k), alone.get_weights()):
      np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


@pytest.mark.slow
def test_chains_from_one_start_draw_their_own_noise():
  """Two chains from equal weights part under the noise and Γ's probe (under XLA, where the chains' calls are unrolled); without noise they stay equal."""
  x, y = _digits()
  twins = lambda: Chains([_mlp(0), _mlp(0)])
  noisy = _fit(twins(), tfa.keras.optimizers.MongeSGRLD(
      1e-3, data_size=len(x), gamma='corrected', seed=11), x, y,
               jit_compile=True)
  a, b = noisy.chain_weights(0)[0], noisy.chain_weights(1)[0]
  assert np.abs(a - b).max() > 1e-3
  quiet = _fit(twins(), tfa.keras.optimizers.MongeSGRLD(
      1e-3, data_size=len(x), gamma='none', burnin=10**6, seed=11), x, y)
  np.testing.assert_allclose(quiet.chain_weights(0)[0],
                             quiet.chain_weights(1)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_prior_and_regularizers_apply_per_chain():
  """A fan-in prior (its scale from one chain's shape) gives each chain the one-chain gradient."""
  x, y = _digits()
  models = [_mlp(k) for k in range(2)]
  for m in models:
    tfa.keras.priors.add_gaussian_prior(m, data_size=len(x))
  make = lambda: tfa.keras.optimizers.SGLD(1e-3, data_size=len(x),
                                           burnin=10**6, seed=0)
  chains = _fit(Chains(models), make(), x, y, epochs=3)
  alone = _mlp(1)
  tfa.keras.priors.add_gaussian_prior(alone, data_size=len(x))
  _fit(alone, make(), x, y, epochs=3)
  for a, b in zip(chains.chain_weights(1), alone.get_weights()):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)
  # The default prior on bare weights: its scale is one chain's fan-in.
  bare = _fit(Chains([_mlp(k) for k in range(2)]), make(), x, y, epochs=3)
  single = _fit(_mlp(1), make(), x, y, epochs=3)
  for a, b in zip(bare.chain_weights(1), single.get_weights()):
    np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


@pytest.mark.slow
def test_members_per_chain_on_disk(tmp_path):
  """The collector keeps one member per chain and sample, tagged with its chain; load, save and `to_arviz` see the chains."""
  x, y = _digits()
  chains = Chains(_mlp(0), chains=3)
  chains.compile(tfa.keras.optimizers.PSGLD(1e-3, data_size=len(x), seed=1),
                 LOSS, metrics=['accuracy'])
  directory = str(tmp_path / 'run')
  collector = tfa.keras.SampleCollector(burnin=4, thinning=4,
                                        directory=directory,
                                        validation_data=(x, y),
                                        training_data=(x, y))
  history = chains.fit(x, y, batch_size=64, epochs=6, verbose=0,
                       callbacks=[collector])
  assert 'val_ensemble_log_likelihood' in history.history
  ensemble = collector.ensemble
  assert ensemble.model is chains.template
  # The members were read as one-chain samples of the same target.
  assert collector.member_readings is not None
  assert ensemble.chains == [0, 1, 2]
  steps = sorted({m.step for m in ensemble.members})
  assert len(ensemble.members) == 3 * len(steps)
  names = sorted(n for n in os.listdir(directory) if n.startswith('sample_'))
  assert names[0] == 'sample_%010d_chain000.npz' % steps[0]
  loaded = tfa.keras.BayesianEnsemble.load(directory)
  assert loaded.chains == [0, 1, 2]
  assert isinstance(loaded.model, keras.Sequential)
  np.testing.assert_allclose(loaded.predict(x), ensemble.predict(x),
                             rtol=1e-5, atol=1e-6)
  # A member of chain k holds chain k's weights at its step.
  last = [m for m in ensemble.members if m.step == steps[-1]]
  for m in last:
    np.testing.assert_array_equal(
        tfa.keras.members.member_values(m)[0],
        chains.chain_weights(m.chain)[0])
  idata = loaded.to_arviz(x[:8], y[:8])
  assert idata.posterior.sizes['chain'] == 3
  # The run's directory holds one directory per chain: hard links to that
  # chain's members, and a manifest of its own.
  for k in range(3):
    view = os.path.join(directory, 'chain_%d' % k)
    alone = tfa.keras.BayesianEnsemble.load(view)
    assert sorted(m.step for m in alone.members) == steps
    assert alone.chains == [k]
    mine = [m.chain == k for m in loaded.members]
    np.testing.assert_allclose(alone.predict(x),
                               loaded.predict_members(x)[mine].mean(0),
                               rtol=1e-5, atol=1e-6)
    for name in os.listdir(view):
      if name.startswith('sample_'):
        assert name.endswith('_chain%03d.npz' % k)
        assert os.path.samefile(os.path.join(view, name),
                                os.path.join(directory, name))
  # Saved: one directory per chain, which `load` reads back.
  saved = str(tmp_path / 'saved')
  loaded.save(saved)
  assert sorted(os.listdir(saved)) == ['chain_0', 'chain_1', 'chain_2']
  again = tfa.keras.BayesianEnsemble.load(saved)
  assert again.chains == [0, 1, 2]
  np.testing.assert_allclose(again.predict(x), ensemble.predict(x),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_keras_save_and_load_model(tmp_path):
  """`chains.save` and `keras.models.load_model` give the same chains, compiled with a chain-axis sampler."""
  x, y = _digits()
  chains = _fit(Chains(_mlp(0), chains=2),
                tfa.keras.optimizers.PSGLD(1e-3, data_size=len(x), seed=1),
                x, y, epochs=1)
  path = str(tmp_path / 'chains.keras')
  chains.save(path)
  again = keras.models.load_model(path)
  assert isinstance(again, Chains) and again.num_chains == 2
  np.testing.assert_allclose(again.predict(x[:16], verbose=0),
                             chains.predict(x[:16], verbose=0), rtol=1e-6)
  assert again.optimizer.chain_ndims == 1
  again.fit(x, y, epochs=1, verbose=0,  # It trains on.
            callbacks=[tfa.keras.SampleCollector(monitor=False)])


@pytest.mark.slow
def test_resume_continues_every_chain(tmp_path):
  """A run stopped after 2 of 4 epochs and resumed ends with the uninterrupted run's members, bitwise on CPU."""
  x, y = _digits()

  def run(directory, epochs, resume=False):
    chains = Chains([_mlp(k) for k in range(2)])
    chains.compile(tfa.keras.optimizers.PSGLD(1e-3, data_size=len(x),
                                              seed=4), LOSS)
    collector = tfa.keras.SampleCollector(burnin=2, thinning=3,
                                          directory=directory, resume=resume)
    start = collector.restore(chains) if resume else 0
    chains.fit(x, y, batch_size=64, epochs=epochs, initial_epoch=start,
               verbose=0, callbacks=[collector])
    return collector.ensemble

  whole = run(str(tmp_path / 'whole'), 4)
  run(str(tmp_path / 'part'), 2)
  resumed = run(str(tmp_path / 'part'), 4, resume=True)
  key = lambda m: (m.step, m.chain)
  assert sorted(map(key, resumed.members)) == sorted(map(key, whole.members))
  for a, b in zip(sorted(resumed.members, key=key),
                  sorted(whole.members, key=key)):
    for u, v in zip(tfa.keras.members.member_values(a),
                    tfa.keras.members.member_values(b)):
      np.testing.assert_array_equal(u, v)


@pytest.mark.slow
def test_batch_norm_and_dropout_vary_per_chain():
  """Per-chain state: batch-norm statistics and dropout masks are each chain's own."""
  keras.utils.set_random_seed(0)
  inputs = keras.Input((64,))
  h = keras.layers.Dense(16)(inputs)
  h = keras.layers.BatchNormalization()(h)
  h = keras.layers.Dropout(0.3)(keras.layers.Activation('relu')(h))
  model = keras.Model(inputs, keras.layers.Dense(10)(h))
  x, y = _digits()
  chains = Chains(model, chains=2)
  chains.compile(tfa.keras.optimizers.SGLD(1e-3, data_size=len(x), seed=2),
                 LOSS)
  chains.fit(x, y, batch_size=64, epochs=2, verbose=0)
  means = [w for w in chains.weights if 'moving_mean' in w.path]
  assert len(means) == 1 and means[0].shape[0] == 2
  assert not np.allclose(np.asarray(means[0])[0], np.asarray(means[0])[1])
  # In training mode, two chains with equal weights still drop differently.
  twin = Chains([model, keras.models.clone_model(model)])
  for s in twin.weights:
    if s.trainable:
      s.assign(tf.repeat(s[:1], 2, axis=0))
  out = np.asarray(twin(x[:32], training=True))
  assert not np.allclose(out[:, 0], out[:, 1])
  inference = np.asarray(twin(x[:32], training=False))
  np.testing.assert_allclose(inference[:, 0], inference[:, 1], atol=1e-5)


@pytest.mark.slow
def test_curvature_calibration_takes_the_stiffest_chain():
  """The calibrated step of K chains is the smallest of their one-chain steps: each chain's curvature and gradient noise read on its own."""
  x, y = _digits(512)

  def calibrated(model):
    model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x), seed=0),
                  LOSS)
    model.fit(x, y, epochs=1, verbose=0, callbacks=[
        tfa.keras.CurvatureCalibration((x, y), epochs=1),
        tfa.keras.SampleCollector(monitor=False)])
    return float(model.optimizer.learning_rate.numpy())
  alone = [calibrated(_mlp(k, hidden=16)) for k in range(2)]
  together = calibrated(Chains([_mlp(k, hidden=16) for k in range(2)]))
  # Summed over chains, the noise would read about twice as large.
  assert abs(together / min(alone) - 1.) < 0.1, (together, alone)


@pytest.mark.slow
def test_frozen_base_is_shared(tmp_path):
  """Frozen layers are one copy for all chains; members share one frozen part."""
  keras.utils.set_random_seed(0)
  base = keras.Sequential([keras.Input((64,)), keras.layers.Dense(32)])
  base.trainable = False
  model = keras.Sequential([base, keras.layers.Dense(10)])
  x, y = _digits()
  chains = Chains(model, chains=3)
  assert [tuple(w.shape) for w in chains.trainable_weights] == [(3, 32, 10),
                                                                (3, 10)]
  # The base: one copy, not trained, saved with the chains.
  assert [tuple(w.shape) for w in chains.non_trainable_weights] == [
      (64, 32), (32,)]
  chains.compile(tfa.keras.optimizers.PSGLD(1e-3, data_size=len(x)), LOSS)
  collector = tfa.keras.SampleCollector(burnin=2, thinning=2, monitor=False)
  chains.fit(x, y, batch_size=64, epochs=2, verbose=0, callbacks=[collector])
  frozen = {m.frozen for m in collector.members}
  assert len(frozen) == 1 and None not in frozen
  np.testing.assert_array_equal(
      tfa.keras.members.member_values(collector.members[-1])[0],
      np.asarray(base.weights[0]))
  np.testing.assert_array_equal(np.asarray(base.weights[0]),
                                np.asarray(chains.non_trainable_weights[0]))
  path = str(tmp_path / 'frozen.keras')
  chains.save(path)
  again = keras.models.load_model(path)
  np.testing.assert_allclose(again.predict(x[:8], verbose=0),
                             chains.predict(x[:8], verbose=0), rtol=1e-6)


def test_bad_arguments_are_refused_at_construction():
  model = _mlp(0)
  with pytest.raises(ValueError, match='chains'):
    Chains(model, chains=0)
  with pytest.raises(ValueError, match='chains'):
    Chains(model)
  with pytest.raises(ValueError, match='chains'):
    Chains([model, _mlp(1)], chains=2)
  with pytest.raises(ValueError, match='one architecture'):
    Chains([model, _mlp(1, hidden=9)])
  with pytest.raises(TypeError, match='keras.Model'):
    Chains(['not a model'])
  with pytest.raises(ValueError, match='built'):
    Chains(keras.Sequential([keras.layers.Dense(3)]), chains=2)
  built = tfa.keras.optimizers.SGLD(1e-3)
  _fit(_mlp(0), built, *_digits(), epochs=1)
  with pytest.raises(ValueError, match='new optimizer'):
    Chains(model, chains=2).compile(built, LOSS)


N, D = 40, 2


# CI: PSGLD's; MongeSGRLD's (its own Γ, tested per chain above) at full size.
@pytest.mark.statistical
@pytest.mark.parametrize('name', ['PSGLD', pytest.param(
    'MongeSGRLD', marks=full_size_only())])
def test_chains_sample_the_exact_posterior(name):
  """Eight chains of a Bayesian linear regression, pooled, against the exact Gaussian posterior.

  As `test_keras_posterior`: likelihood N(y; xᵀw, 1/2) ('mse'), prior
  N(0, 1), full batch. A metric reduced over all chains at once (the
  Monge metric's gradient norm) would give each chain another law. The
  tolerance is 4.5 standard errors from the spread of the chains' own
  means and variances, plus the stated Euler–Maruyama allowance.
  """
  rng = np.random.default_rng(11)
  x = rng.normal(size=(N, D)).astype('float32')
  y = (x @ np.array([[0.7], [-0.4]]) +
       rng.normal(scale=np.sqrt(0.5), size=(N, 1))).astype('float32')
  cov = np.linalg.inv(2. * x.T.astype(np.float64) @ x + np.eye(D))
  mean = cov @ (2. * x.T @ y).ravel()
  k = 8
  models = []
  for seed in range(k):
    keras.utils.set_random_seed(seed)
    m = keras.Sequential([keras.Input((D,)),
                          keras.layers.Dense(1, use_bias=False)])
    tfa.keras.priors.add_gaussian_prior(m, data_size=N, scale=1.)
    models.append(m)
  chains = Chains(models)
  opt = (tfa.keras.optimizers.PSGLD(1e-3, data_size=N,
                                    preconditioner_decay_rate=0.5,
                                    diagonal_bias=1e-2, seed=5)
         if name == 'PSGLD' else tfa.keras.optimizers.MongeSGRLD(
             2e-3, data_size=N, preconditioner_decay_rate=0.5, alpha2=1.,
             seed=5))
  chains.compile(opt, 'mse', jit_compile=True, steps_per_execution=50)
  collector = tfa.keras.SampleCollector(burnin=1000, thinning=50,
                                        monitor=False)
  steps = int(8000 * stat_scale())
  data = tf.data.Dataset.from_tensors((x, y)).repeat()
  chains.fit(data, steps_per_epoch=steps // 10, epochs=10, verbose=0,
             callbacks=[collector])
  w = np.stack([np.stack([tfa.keras.members.member_values(m)[0].ravel()
                          for m in collector.members if m.chain == c])
                for c in range(k)])  # (chain, draw, D)
  means = w.mean(1)
  second = ((w - means[:, None]) ** 2).mean(1)
  se_mean = means.std(0, ddof=1) / np.sqrt(k)
  se_var = second.std(0, ddof=1) / np.sqrt(k)
  assert np.all(np.abs(means.mean(0) - mean) < 4.5 * se_mean), (
      means.mean(0), mean, se_mean)
  tol = 4.5 * se_var + 0.03 * np.diag(cov)
  assert np.all(np.abs(second.mean(0) - np.diag(cov)) < tol), (
      second.mean(0), np.diag(cov), tol)
