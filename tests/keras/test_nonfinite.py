"""No silent freeze: hard walls in kernels, poisoned batches in Keras, 'raise' under XLA."""

import warnings

import numpy as np
import pytest
import tensorflow as tf
import keras

import tfp_adaptive as tfa
from tfp_adaptive.keras import fit_checks


def _half_normal(x):
  """N(0, 1) restricted to x > 0: log-prob -inf beyond a hard wall at 0."""
  return tf.where(x > 0., -0.5 * x ** 2, tf.fill(tf.shape(x), -np.inf))


@pytest.mark.slow
@pytest.mark.parametrize('policy', ['reject', 'reject_at_proposal'])
def test_hard_wall_does_not_freeze_chains(policy):
  kernel = tfa.mcmc.SGLD(_half_normal, step_size=0.05, nonfinite=policy)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    xs, _, results = tfa.mcmc.sample(kernel, tf.fill([500], 0.5), 1500,
                                     progress=False, seed=(1, 2))
  xs = xs.numpy()
  counts = results.num_nonfinite.numpy()
  assert int(np.sum(counts)) > 0                         # Counted,
  reports = [str(w.message) for w in caught if 'non-finite' in str(w.message)]
  assert len(reports) == 1, reports                      # and told once:
  assert ('%d step(s)' % np.sum(counts) in reports[0] and
          '%d of 500 chain(s)' % np.sum(counts > 0) in reports[0] and
          'at most %d step(s) in chain %d' % (counts.max(), counts.argmax())
          in reports[0]), reports
  # The same report, after `tfp.mcmc.sample_chain`, from the final results.
  with pytest.warns(UserWarning, match='%d step' % np.sum(counts)):
    again = tfa.mcmc.report_nonfinite(kernel, results)
  np.testing.assert_array_equal(again, counts)
  assert int(np.max(results.num_unmoved)) < 20           # Nobody stuck.
  # Chains keep moving: every chain visits a wide range late in the run.
  assert np.all(xs[-500:].max(0) - xs[-500:].min(0) > 0.5)
  if policy == 'reject_at_proposal':
    assert np.all(xs > 0)                                # Never in the wall.
  else:
    # A state in the wall is undone by the very next step.
    bad = xs <= 0
    assert not np.any(bad[:-1] & bad[1:])
  # Half-normal mean sqrt(2/pi) within 0.1 (the boundary's O(sqrt h) bias
  # is ~0.05 at this step; the Monte Carlo error of the mean is ~0.005).
  np.testing.assert_allclose(np.mean(xs[500:][xs[500:] > 0]),
                             np.sqrt(2 / np.pi), atol=0.1)


def test_a_chain_that_cannot_move_is_reported():
  kernel = tfa.mcmc.SGLD(_half_normal, step_size=0.05)
  with pytest.warns(UserWarning, match='have not moved'):
    _, _, results = tfa.mcmc.sample(kernel, tf.constant([-1., 0.5]), 200,
                                    progress=False, seed=(1, 2),
                                    stuck_steps=100)
  assert results.num_unmoved.numpy()[0] == 200
  assert results.num_unmoved.numpy()[1] < 100


@pytest.mark.slow
def test_raise_raises_under_xla():
  kernel = tfa.mcmc.SGLD(_half_normal, step_size=0.05, nonfinite='raise')
  with pytest.raises(FloatingPointError, match='non-finite'):
    tfa.mcmc.sample(kernel, tf.fill([10], 0.5), 300, progress=False,
                    seed=(1, 2), jit_compile=True)


def _poisoned(n=240, every=4):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(n, 4)).astype('float32')
  y = (x[:, 0] > 0).astype('int64')
  x[::20 * every] = np.nan  # One row in every `every`-th batch of 20.
  return x, y


def _model(**opt_kwargs):
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,)),
                            keras.layers.Dense(8, activation='tanh'),
                            keras.layers.Dense(2)])
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=240, seed=0,
                                           **opt_kwargs),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  return model


@pytest.mark.slow
def test_poisoned_batches_are_counted_logged_and_never_sampled():
  x, y = _poisoned()
  model = _model()
  collector = tfa.keras.SampleCollector(thinning=1)
  with pytest.warns(UserWarning, match='skipped'):
    history = model.fit(x, y, batch_size=20, epochs=3, shuffle=False,
                        verbose=0, callbacks=[collector])
  skipped = int(model.optimizer.num_nonfinite.numpy())
  assert skipped == 9                               # 3 per epoch.
  assert collector.num_nonfinite == skipped
  assert history.history['num_nonfinite'] == [3, 6, 9]
  steps = [m.step for m in collector.members]
  assert len(steps) == 36 - skipped                  # One per good step.
  assert len(set(steps)) == len(steps)
  weights = [np.concatenate([w.ravel() for w in m.weights])
             for m in collector.members]
  assert all(np.all(np.isfinite(w)) for w in weights)
  assert all(not np.array_equal(a, b) for a, b in zip(weights, weights[1:]))
  clean = x[np.all(np.isfinite(x), -1)]
  assert np.all(np.isfinite(collector.ensemble.predict(clean)))
  with pytest.raises(FloatingPointError, match='NaN/Inf in those inputs'):
    collector.ensemble.predict(x)
  # The end of `fit` gives the run's total (here a second `fit` of one epoch).
  with pytest.warns(UserWarning, match='ended with 3 optimizer step'):
    model.fit(x, y, batch_size=20, epochs=1, shuffle=False, verbose=0,
              callbacks=[tfa.keras.SampleCollector()])


@pytest.mark.slow
def test_an_epoch_collector_counts_per_epoch_and_does_nothing_per_batch(
    monkeypatch):
  """With unit='epoch' the collector reads the optimizer's counters once
  per epoch, not after every batch; the skipped steps are still counted,
  logged and warned about."""
  counts = []
  count = fit_checks.NonfiniteCount
  original = count.check
  monkeypatch.setattr(count, 'check',
                      lambda self, opt, steps, policy: counts.append(steps) or
                      original(self, opt, steps, policy))
  x, y = _poisoned()
  model = _model()
  collector = tfa.keras.SampleCollector(
      unit='epoch', burnin=0, monitor=tfa.keras.SamplerMonitor())
  with pytest.warns(UserWarning, match='skipped'):
    history = model.fit(x, y, batch_size=20, epochs=3, shuffle=False,
                        verbose=0, callbacks=[collector])
  assert counts == [12, 12, 12]  # Once per epoch of 12 steps.
  assert history.history['num_nonfinite'] == [3, 6, 9]
  assert collector.num_nonfinite == 9
  assert [m.step for m in collector.members] == [12, 24, 36]
  assert all(np.all(np.isfinite(w)) for m in collector.members
             for w in m.weights)


@pytest.mark.slow
def test_all_batches_poisoned_is_reported_as_a_stuck_chain():
  x, y = _poisoned(every=1)
  x[:] = np.nan
  model = _model()
  for unit in ('step', 'epoch'):
    collector = tfa.keras.SampleCollector(stuck_steps=10, unit=unit)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      model.fit(x, y, batch_size=20, epochs=1, verbose=0,
                callbacks=[collector])
    assert any('not moving' in str(w.message) for w in caught), unit
    if unit == 'step':  # No sample is due at a skipped step.
      assert collector.members == []


@pytest.mark.slow
@pytest.mark.parametrize('jit', [False, True])
def test_optimizer_raise_policy_raises_in_fit(jit):
  x, y = _poisoned()
  model = _model(nonfinite='raise')
  model.compile(model.optimizer, model.loss, jit_compile=jit)
  with pytest.raises((FloatingPointError, tf.errors.InvalidArgumentError)):
    model.fit(x, y, batch_size=20, epochs=1, shuffle=False, verbose=0,
              callbacks=[tfa.keras.SampleCollector()])
  if jit:  # XLA drops the in-graph check; an epoch collector raises after
    # the batch too, not at the epoch end (the first batch is poisoned).
    with pytest.raises(FloatingPointError, match='up to iteration 2 '):
      model.fit(x, y, batch_size=20, epochs=1, shuffle=False, verbose=0,
                callbacks=[tfa.keras.SampleCollector(unit='epoch')])


def _steep_wall(x):
  """N(0, 1) with a finite but steep wall beyond 2: gradient -1e20 there.

  The gradient is finite, its square is not (float32), so an RMSprop
  metric's statistic overflows and the metric becomes 0: without a check
  of the metric state the chain would stop moving with no NaN anywhere.
  """
  return tf.where(x > 2., -2. - 1e20 * (x - 2.), -0.5 * x ** 2)


@pytest.mark.slow
@pytest.mark.parametrize('gamma', ['none', 'corrected'])
def test_an_overflowing_metric_statistic_is_rejected_not_frozen_in(gamma):
  kernel = tfa.mcmc.PSGLD(_steep_wall, 0.05, 0.95, gamma=gamma)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    xs, _, results = tfa.mcmc.sample(kernel, tf.fill([200], 0.5), 2000,
                                     progress=False, seed=(3, 4))
  xs, counts = xs.numpy(), results.num_nonfinite.numpy()
  assert int(np.sum(counts)) > 0                       # The wall is counted,
  assert any('non-finite' in str(w.message) for w in caught)  # and told.
  assert np.all(np.isfinite(xs))
  # No chain is frozen at the wall: every one keeps moving to the end.
  late = xs[-500:]
  assert np.all(late.max(0) - late.min(0) > 0.3), np.sort(
      late.max(0) - late.min(0))[:5]


def test_one_overflowing_gradient_does_not_freeze_a_custom_loop():
  """A custom loop (keras.io style): one batch's gradient squares to Inf."""
  opt = tfa.keras.optimizers.PSGLD(1e-3, data_size=100, gamma='none',
                                   burnin=0, seed=0)
  w = keras.Variable(np.zeros(4, np.float32))
  opt.build([w])

  @tf.function(jit_compile=True)
  def step(grad):
    opt.apply([grad], [w])

  step(tf.fill([4], 1e20))                  # Finite; its square is not.
  assert int(opt.num_nonfinite.numpy()) == 1
  np.testing.assert_array_equal(w.numpy(), np.zeros(4))
  before = w.numpy().copy()
  for _ in range(20):
    step(tf.constant(np.float32([0.1, -0.1, 0.2, 0.])))
  assert int(opt.num_nonfinite.numpy()) == 1
  assert np.all(np.abs(w.numpy() - before) > 0)       # Still moving.


@pytest.mark.slow
@pytest.mark.parametrize('update_interval', [1, 3])
def test_shampoo_rejects_a_gradient_whose_factors_would_overflow(
    update_interval):
  """Shampoo's factors are checked through ``Σ g²``, its roots at refreshes.

  A finite gradient whose square overflows would put an Inf in the
  Kronecker factors: the step is rejected as a whole (weights, factors and
  roots as they were) and counted, and the chain moves on afterwards.
  """
  opt = tfa.keras.optimizers.ShampooSGRLD(
      1e-4, data_size=100, gamma='none', burnin=0, seed=0, block_size=4,
      update_interval=update_interval)
  w = keras.Variable(np.zeros((8, 6), np.float32))
  opt.build([w])

  @tf.function(jit_compile=True)
  def step(grad):
    opt.apply([grad], [w])

  rng = np.random.default_rng(0)
  for _ in range(4):
    step(tf.constant(rng.normal(size=(8, 6)).astype(np.float32)))
  weights = w.numpy().copy()
  state = [v.numpy().copy() for v in opt.variables]
  assert int(opt.num_nonfinite.numpy()) == 0
  big = np.zeros((8, 6), np.float32)
  big[5, 1] = 1e20                          # Finite; its square is not.
  step(tf.constant(big))
  assert int(opt.num_nonfinite.numpy()) == 1
  np.testing.assert_array_equal(w.numpy(), weights)
  for v, before in zip(opt.variables, state):
    if v.dtype != 'int64':                  # All but the step counters.
      np.testing.assert_array_equal(v.numpy(), before, err_msg=v.path)
  for _ in range(2 * update_interval):
    step(tf.constant(rng.normal(size=(8, 6)).astype(np.float32)))
  assert int(opt.num_nonfinite.numpy()) == 1
  assert np.all(np.isfinite(w.numpy()))
  assert np.all(np.abs(w.numpy() - weights) > 0)
