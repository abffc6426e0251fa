"""Cyclical schedules: cosine steps, no noise while exploring, members from the sampling stages tagged by cycle."""

import warnings

import numpy as np
import pytest
import tensorflow as tf
import keras

import tfp_adaptive as tfa


def test_the_schedule_its_stages_and_cycles():
  s = tfa.schedules.Cyclical(0.2, cycle_length=4, exploration=0.5)
  np.testing.assert_allclose([float(s(t)) for t in range(5)],
                             [0.2, 0.1 * (np.cos(np.pi / 4) + 1.), 0.1,
                              0.1 * (np.cos(3 * np.pi / 4) + 1.), 0.2])
  assert [bool(s.sampling(t)) for t in range(8)] == [False, False, True,
                                                      True] * 2
  assert [int(s.cycle(t)) for t in range(9)] == [0] * 4 + [1] * 4 + [2]
  k = tfa.keras.schedules.Cyclical(0.2, 4, exploration=0.5)
  clone = tfa.keras.schedules.Cyclical.from_config(k.get_config())
  assert clone.get_config() == k.get_config() and clone.exploration == 0.5
  assert float(k(2)) == pytest.approx(0.1)


def test_a_kernel_injects_no_noise_while_exploring():
  """A flat target: only the noise moves the chain, and only while sampling."""
  schedule = tfa.schedules.Cyclical(0.1, cycle_length=4, exploration=0.5)
  kernel = tfa.mcmc.SGLD(lambda x: 0. * tf.reduce_sum(x, -1), schedule)
  states = tfp_sample(kernel)
  moved = np.any(np.diff(np.concatenate([np.zeros([1, 3, 2]), states]), axis=0)
                 != 0., axis=(1, 2))
  assert list(moved) == [False, False, True, True] * 3


def tfp_sample(kernel):
  import tensorflow_probability as tfp  # pylint: disable=g-import-not-at-top
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # TFP: the kernel is not calibrated.
    return tfp.mcmc.sample_chain(12, tf.zeros([3, 2]), kernel=kernel,
                                 trace_fn=None, seed=(1, 2)).numpy()


def _zero_loss(y_true, y_pred):
  del y_true
  return 0. * keras.ops.mean(y_pred)


@pytest.mark.parametrize('directory', [False, True])
def test_fit_keeps_sampling_stage_members_tagged_by_cycle(tmp_path,
                                                          directory):
  x = np.zeros((8, 3), 'float32')
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
  schedule = tfa.keras.schedules.Cyclical(1e-2, cycle_length=4,
                                          exploration=0.5)
  model.compile(tfa.keras.optimizers.SGLD(schedule, data_size=8, seed=1,
                                          prior='flat'), _zero_loss)
  d = str(tmp_path / 'samples') if directory else None
  collector = tfa.keras.SampleCollector(likelihood='gaussian', directory=d)
  weights = []
  record = keras.callbacks.LambdaCallback(
      on_train_batch_end=lambda batch, logs: weights.append(
          model.get_weights()[0]))
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # prior='flat' on a bare model.
    model.fit(x, np.zeros((8, 2), 'float32'), batch_size=2, epochs=3,
              shuffle=False, verbose=0, callbacks=[collector, record])
  # Step t (0 first) explores when t mod 4 < 2: the weights do not move.
  moved = [not np.array_equal(a, b) for a, b in
           zip([weights[0]] + weights, weights)]
  assert moved[1:] == [t % 4 >= 2 for t in range(1, 12)]
  steps = [m.step for m in collector.members]
  assert steps == [3, 4, 7, 8, 11, 12]  # After steps 2, 3, 6, 7, 10, 11.
  assert [m.cycle for m in collector.members] == [0, 0, 1, 1, 2, 2]
  if directory:
    loaded = tfa.keras.BayesianEnsemble.load(d, model=model)
    assert [m.cycle for m in loaded.members] == [0, 0, 1, 1, 2, 2]
