"""Keras optimizers: TFP equivalence, eager/graph/XLA, config and saving, errors."""

import os

import numpy as np
import pytest
import tensorflow as tf
import keras

from tests import tfp_reference
from tests.conftest import in_ci
import tfp_adaptive as tfa

opt_lib = tfa.keras.optimizers
ALL = [opt_lib.SGLD, opt_lib.PSGLD, opt_lib.WenzelSGLD, opt_lib.MongeSGRLD,
       opt_lib.ShampooSGRLD, opt_lib.AdamSGLD, opt_lib.SGHMC, opt_lib.SGNHT]


def _one_step(opt):
  v = keras.Variable(tfp_reference.TH0, dtype='float64')
  loss_fn = lambda: tfp_reference.loss(v.value)
  loss, grads, gamma = tfa.keras.gradients_and_gamma(opt, loss_fn, [v])
  if gamma is None:
    opt.apply(grads, [v])
  else:
    opt.apply(grads, [v], gamma=gamma)
  return v.numpy() - tfp_reference.TH0


def test_psgld_step_equals_tfp_optimizer_step():
  lr, decay, bias, n = 0.01, 0.9, 0.5, 3
  tfp_delta = tfp_reference.tfp_optimizer_delta(lr, decay, bias, data_size=n)
  ours = _one_step(opt_lib.PSGLD(lr, preconditioner_decay_rate=decay,
                                 diagonal_bias=bias, data_size=n, burnin=100,
                                 gamma='none', prior='flat'))
  np.testing.assert_allclose(ours, tfp_delta, rtol=1e-6)


def test_psgld_original_is_tfp_step_with_its_intended_gamma():
  """'original' = TFP's step plus (lr/2)·Γ from TFP's own `diag_jacobian`
  (which TFP's optimizer loses on resource variables, see test_gamma)."""
  lr, decay, bias = 0.01, 0.9, 0.5
  tfp_delta = tfp_reference.tfp_optimizer_delta(lr, decay, bias)
  gamma = tfp_reference.tfp_diag_jacobian_gamma(decay, bias)
  ours = _one_step(opt_lib.PSGLD(lr, preconditioner_decay_rate=decay,
                                 diagonal_bias=bias, burnin=100,
                                 gamma='original', gamma_estimator='exact',
                                 prior='flat'))
  np.testing.assert_allclose(ours, tfp_delta + 0.5 * lr * gamma, rtol=1e-6)
  assert np.max(np.abs(0.5 * lr * gamma)) > 1e-3 * np.max(np.abs(tfp_delta))


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 4)).astype('float32')
  return x, (x @ rng.normal(size=(4, 1))).astype('float32')


def _model(seed=0):
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((4,)),
                           keras.layers.Dense(6, activation='tanh'),
                           keras.layers.Dense(1)])


def _compiled(opt_cls, mode, **kwargs):
  model = _model()
  opt = opt_cls(1e-4, data_size=64, seed=3, **kwargs)
  model.compile(opt, 'mse', run_eagerly=mode == 'eager',
                jit_compile=mode == 'xla')
  tfa.keras.enable_gamma(model)
  return model, opt


def _fit(opt_cls, mode, epochs=2, **kwargs):
  x, y = _data()
  model, opt = _compiled(opt_cls, mode, **kwargs)
  model.fit(x, y, batch_size=16, epochs=epochs, shuffle=False, verbose=0)
  return model, opt


# Shampoo's ridge at the paper's 1e-6 makes the first steps huge on this toy
# problem (V starts at 0), amplifying float noise; a larger ridge keeps the
# determinism check meaningful.
# Shampoo's default warm-up (10 steps, `metric_warmup_steps`) is longer than
# these 8-step fits; 2 keeps the warm-up in the path and leaves 6 moves.
_EXTRA = {'ShampooSGRLD': dict(epsilon=1e-2, metric_warmup_steps=2)}


# The momentum samplers share SGLD's identity metric and its update path;
# their own state (velocity, thermostat) is covered by the config, saving
# and posterior tests.
# CI: every sampler in a graph, two of them eagerly and one under XLA
# (Shampoo's `fit` under XLA has tests of its own, in
# `tests/core/test_shampoo_blocks.py` and `test_shampoo_roots.py`); the
# full-size run: every pair.
@pytest.mark.slow
@pytest.mark.parametrize('opt_cls,mode', in_ci(
    [(c, m) for c in ALL[:-2] for m in ('eager', 'graph', 'xla')],
    [(c, 'graph') for c in ALL[:-2]] + [
        (opt_lib.SGLD, 'eager'), (opt_lib.MongeSGRLD, 'eager'),
        (opt_lib.PSGLD, 'xla')]),
                         ids=lambda c: getattr(c, '__name__', c))
def test_runs_and_is_deterministic(opt_cls, mode):
  """Two fits from the same weights and optimizer state give the same chain.

  The second fit reuses the model's compiled train function (the state is
  reset by assignment), so the test pays for one compilation, not two.
  """
  x, y = _data()
  model, opt = _compiled(opt_cls, mode, **_EXTRA.get(opt_cls.__name__, {}))
  opt.build(model.trainable_variables)
  w0 = model.get_weights()
  s0 = [v.numpy() for v in opt.variables]
  runs = []
  for _ in range(2):
    model.set_weights(w0)
    for v, value in zip(opt.variables, s0):
      v.assign(value)
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
    assert int(opt.iterations.numpy()) == 8
    assert int(opt.num_nonfinite.numpy()) == 0
    runs.append(model.get_weights())
  for a, b in zip(*runs):
    assert np.all(np.isfinite(a))
    # Same seed, same noise; non-XLA CPU kernels may reorder float sums.
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert any(not np.allclose(a, b) for a, b in zip(runs[0], w0))


@pytest.mark.slow
def test_graph_and_eager_agree():
  """Same seed, same data: eager and tf.function give the same chain."""
  w_eager = _fit(opt_lib.PSGLD, 'eager')[0].get_weights()
  w_graph = _fit(opt_lib.PSGLD, 'graph')[0].get_weights()
  for a, b in zip(w_eager, w_graph):
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_gamma_without_enable_gamma_names_the_fix():
  x, y = _data()
  model = _model()
  model.compile(opt_lib.PSGLD(1e-4, gamma='corrected'), 'mse')
  with pytest.raises(ValueError, match='enable_gamma'):
    model.fit(x, y, epochs=1, verbose=0)


@pytest.mark.slow
def test_gamma_none_needs_no_wrapper():
  x, y = _data()
  model = _model()
  model.compile(opt_lib.PSGLD(1e-4, data_size=64, gamma='none'), 'mse',
                jit_compile=True)
  model.fit(x, y, epochs=1, verbose=0)
  assert int(model.optimizer.iterations.numpy()) == 2


def test_learning_rate_schedule_is_used():
  sched = tfa.keras.schedules.PolynomialDecay(1e-3, 1., 0.55)
  opt = opt_lib.SGLD(sched, data_size=10, seed=0)
  v = keras.Variable(np.zeros(3, np.float32))
  opt.build([v])
  for _ in range(3):
    opt.apply([tf.zeros(3)], [v])
  np.testing.assert_allclose(float(opt.learning_rate), 1e-3 * 4. ** -0.55,
                             rtol=1e-6)


def test_noise_variance_and_burnin():
  """Zero gradient: no move during TFP's burn-in, then variance lr·τ·M."""
  opt = opt_lib.PSGLD(0.04, burnin=2, temperature=0.5, seed=1,
                      gamma='none')
  v = keras.Variable(np.zeros(20000, np.float32))
  opt.build([v])
  for _ in range(3):
    opt.apply([tf.zeros(20000)], [v])
    if int(opt.iterations.numpy()) <= 3:
      assert np.all(v.numpy() == 0.)
  opt.apply([tf.zeros(20000)], [v])
  # V = 1·α^4 (ones decayed), M = (1e-8 + V)^-1/2.
  m = (1e-8 + 0.95 ** 4) ** -0.5
  var = v.numpy().var()
  se = 0.04 * 0.5 * m * np.sqrt(2. / 20000)
  assert abs(var - 0.04 * 0.5 * m) < 4 * se


@pytest.mark.parametrize('opt_cls', ALL, ids=lambda c: c.__name__)
def test_config_round_trip(opt_cls):
  opt = opt_cls(1e-3, data_size=5, seed=4, temperature=0.7)
  clone = opt_cls.from_config(opt.get_config())
  assert clone.get_config() == opt.get_config()


@pytest.mark.slow
@pytest.mark.parametrize('opt_cls', [opt_lib.ShampooSGRLD, opt_lib.SGNHT],
                         ids=lambda c: c.__name__)
def test_model_save_and_load_keep_sampler_state(tmp_path, opt_cls):
  """Kronecker factors; velocity and thermostat."""
  model, opt = _fit(opt_cls, 'graph', **_EXTRA.get(opt_cls.__name__, {}))
  path = os.path.join(tmp_path, 'm.keras')
  model.save(path)
  loaded = keras.models.load_model(path)
  assert type(loaded.optimizer) is opt_cls
  assert len(opt.variables) > 3
  assert loaded.optimizer.get_config() == opt.get_config()
  for a, b in zip(opt.variables, loaded.optimizer.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.slow
@pytest.mark.parametrize('opt_cls,mode', [
    (opt_lib.PSGLD, 'xla'), (opt_lib.MongeSGRLD, 'eager'),
    (opt_lib.ShampooSGRLD, 'graph'), (opt_lib.WenzelSGLD, 'graph')],
                         ids=lambda c: getattr(c, '__name__', c))
def test_preconditioned_sghmc_fits_with_gamma_and_saves_its_velocity(
    tmp_path, opt_cls, mode):
  """A metric with a friction: the corrected Γ of ``M^{1/2}`` in `fit`, the velocity a saved slot."""
  extra = dict(_EXTRA.get(opt_cls.__name__, {}), friction=0.1)
  model, opt = _fit(opt_cls, mode, **extra)
  assert opt.gamma == 'corrected' and opt.needs_gamma
  assert int(opt.num_nonfinite.numpy()) == 0
  assert all(np.all(np.isfinite(w)) for w in model.get_weights())
  _, velocity = opt.sampler_state()
  assert any(float(np.abs(v).max()) > 0. for v in velocity)
  path = os.path.join(tmp_path, 'm.keras')
  model.save(path)
  loaded = keras.models.load_model(path)
  assert loaded.optimizer.get_config() == opt.get_config()
  assert loaded.optimizer.get_config()['friction'] == 0.1
  for a, b in zip(opt.variables, loaded.optimizer.variables):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize('kwargs,name', [
    (dict(learning_rate=-1.), 'learning_rate'),
    (dict(preconditioner_decay_rate=1.), 'preconditioner_decay_rate'),
    (dict(data_size=0), 'data_size'),
    (dict(burnin=-1), 'burnin'),
    (dict(temperature=0.), 'temperature'),
    (dict(gamma='fixed'), 'gamma'),
    (dict(diagonal_bias=-1.), 'diagonal_bias'),
    (dict(nonfinite='nan'), 'nonfinite'),
    (dict(gamma_subsample=0.), 'gamma_subsample'),
    (dict(gamma_subsample=1.5), 'gamma_subsample'),
    (dict(gamma_probability=0.), 'gamma_probability'),
])
def test_bad_arguments_are_named(kwargs, name):
  kwargs = dict(dict(learning_rate=1e-3), **kwargs)
  with pytest.raises((ValueError, TypeError), match=name):
    opt_lib.PSGLD(**kwargs)


def test_nonfinite_step_is_skipped_and_counted():
  opt = opt_lib.PSGLD(1e-3, seed=0, gamma='none')
  v = keras.Variable(np.ones(3, np.float32))
  opt.build([v])
  opt.apply([tf.constant([1., np.nan, 1.])], [v])
  np.testing.assert_array_equal(v.numpy(), np.ones(3))
  assert int(opt.num_nonfinite.numpy()) == 1
  opt.apply([tf.constant([1., 1., 1.])], [v])
  assert np.all(np.isfinite(v.numpy())) and not np.allclose(v.numpy(), 1.)


class SubclassedNet(keras.Model):

  def __init__(self):
    super().__init__()
    self.hidden = keras.layers.Dense(6, activation='tanh')
    self.out = keras.layers.Dense(1)

  def call(self, x):
    return self.out(self.hidden(x))


def _functional():
  inputs = keras.Input((4,))
  h = keras.layers.Dense(6, activation='tanh')(inputs)
  return keras.Model(inputs, keras.layers.Dense(1)(h))


@pytest.mark.slow
@pytest.mark.parametrize('make', [_functional, SubclassedNet],
                         ids=['functional', 'subclassed'])
def test_gamma_in_fit_for_functional_and_subclassed_models(make):
  x, y = _data()
  keras.utils.set_random_seed(0)
  model = make()
  model.compile(opt_lib.MongeSGRLD(1e-4, data_size=64, seed=0), 'mse',
                jit_compile=True)
  tfa.keras.enable_gamma(model)
  model.fit(x, y, batch_size=16, epochs=1, verbose=0)
  assert int(model.optimizer.iterations.numpy()) == 4
  assert all(np.all(np.isfinite(w)) for w in model.get_weights())


def _noiseless_steps(fraction, draws, probability=1.,
                     gamma='corrected_published'):
  """Δθ of one noise-free PSGLD step (exact Γ, `gamma` mode) per draw.

  The published form: its drift and Γ see the whole minibatch, so that
  only `fraction` and `probability` draw.

  Each draw is a new step number, hence a new row subset (`fraction`) and
  a new coin (`probability`).
  """
  x, y = [a.astype('float64') for a in _data()]
  keras.utils.set_random_seed(0)  # float64, so Δθ is not lost to rounding.
  model = keras.Sequential([keras.Input((4,), dtype='float64'),
                            keras.layers.Dense(6, 'tanh', dtype='float64'),
                            keras.layers.Dense(1, dtype='float64')])
  opt = opt_lib.PSGLD(3e-4, data_size=64, burnin=10**6, seed=0,
                      gamma=gamma, gamma_estimator='exact',
                      gamma_subsample=fraction, gamma_probability=probability)
  model.compile(opt, 'mse', jit_compile=True)
  tfa.keras.enable_gamma(model)
  opt.build(model.trainable_variables)
  w0, s0 = model.get_weights(), [v.numpy() for v in opt.variables]
  out = []
  for k in range(draws):
    model.set_weights(w0)
    for v, value in zip(opt.variables, s0):
      v.assign(value)
    opt.iterations.assign(k)  # The row subset is drawn from the step's seed.
    model.train_on_batch(x[:16], y[:16])
    out.append(np.concatenate([(a - b).ravel()
                               for a, b in zip(model.get_weights(), w0)]))
  return np.array(out)


@pytest.mark.statistical
def test_gamma_subsample_in_fit_is_unbiased():
  """Γ from a random half of each minibatch: the mean step is the full one."""
  full = _noiseless_steps(1., 2)
  np.testing.assert_allclose(full[0], full[1], rtol=1e-9, atol=1e-15)
  half = _noiseless_steps(0.5, 300)
  se = half.std(0, ddof=1) / np.sqrt(len(half))
  assert np.all(se > 0)  # The subsample changes Γ, so the test can fail.
  np.testing.assert_array_less(np.abs(half.mean(0) - full[0]),
                               4.5 * se + 1e-15)
  # The half-batch Γ is a different, noisier estimate, not a copy.
  assert np.max(np.abs(half[0] - full[0])) > 10 * np.max(se)


@pytest.mark.slow
def test_gamma_probability_adds_gamma_over_p_on_a_random_share_of_steps():
  """Each step is either the Γ-free one or adds Γ/p; unbiased on average."""
  full = _noiseless_steps(1., 1)[0]
  none = _noiseless_steps(1., 1, gamma='none')[0]
  with_gamma = none + (full - none) / 0.25
  steps = _noiseless_steps(1., 100, probability=0.25)
  hit = np.array([np.allclose(s, with_gamma, rtol=1e-9, atol=1e-15)
                  for s in steps])
  miss = np.array([np.allclose(s, none, rtol=1e-9, atol=1e-15) for s in steps])
  assert np.all(hit ^ miss)
  # Binomial(100, 0.25): mean 25, sd 4.33.
  assert abs(hit.sum() - 25) < 4 * 4.33, hit.sum()
  assert np.max(np.abs(full - none)) > 0  # Γ matters, so the test can fail.


def test_schedules_and_temperature_ramp():
  cyc = tfa.keras.schedules.Cyclical(0.1, cycle_length=4)
  np.testing.assert_allclose([float(cyc(t)) for t in range(5)],
                             [0.1, 0.05 * (np.cos(np.pi / 4) + 1), 0.05,
                              0.05 * (np.cos(3 * np.pi / 4) + 1), 0.1],
                             rtol=1e-6)
  x, y = _data()
  model = _model()
  model.compile(opt_lib.SGLD(1e-5, data_size=64, seed=0), 'mse')
  ramp = tfa.keras.schedules.TemperatureRamp(0.1, 1., steps=8)
  model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[ramp])
  np.testing.assert_allclose(
      float(model.optimizer.temperature_variable.numpy()), 0.1 + 0.9 * 3 / 8,
      rtol=1e-6)


def test_hutchinson_probe_is_the_sign_of_the_step_noise(noise_draw_seeds):
  """In `fit`, Γ's probe and the optimizer's noise come from one seed."""
  seeds = noise_draw_seeds
  model, _ = _compiled(tfa.keras.optimizers.MongeSGRLD, 'eager')
  x, y = _data()
  model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
  assert seeds['normal_signs'] == seeds['normal']
  assert len(set(seeds['normal'])) == 4


def test_default_seed_follows_keras_set_random_seed():
  """Without `seed`, `keras.utils.set_random_seed` fixes the sampler's stream
  (as it fixes Keras' own random ops); two optimizers still differ."""
  keras.utils.set_random_seed(3)
  first = [tfa.keras.optimizers.PSGLD(1e-3).seed,
           tfa.keras.optimizers.SGLD(1e-3).seed]
  keras.utils.set_random_seed(3)
  again = [tfa.keras.optimizers.PSGLD(1e-3).seed,
           tfa.keras.optimizers.SGLD(1e-3).seed]
  assert first == again and first[0] != first[1]


@pytest.mark.slow
@pytest.mark.parametrize('name', ['PSGLD', 'ShampooSGRLD'])
def test_the_metric_is_updated_once_per_step_with_gamma(name, monkeypatch):
  """Γ's pass updates the metric; the optimizer reuses it (one eigendecomposition for Shampoo)."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(40, 3)).astype('float32')
  y = x[:, :1]
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  opt = getattr(tfa.keras.optimizers, name)(1e-4, data_size=40, seed=0)
  model.compile(opt, 'mse', run_eagerly=True)
  calls = []
  update = opt.preconditioner.update
  monkeypatch.setattr(opt.preconditioner, 'update',
                      lambda *a, **k: calls.append(1) or update(*a, **k))
  model.fit(x, y, batch_size=10, epochs=1, verbose=0,
            callbacks=[tfa.keras.SampleCollector()])
  assert int(opt.iterations) == 4
  assert len(calls) == 4
