"""``gamma='corrected'`` (the default) in Keras: the drift from one half of each minibatch, the metric and Γ from the other.

Two rows whose loss gradients differ a hundredfold: after one step without
noise, the metric's second moment holds one row's squared gradient and the
weight moved by the other row's gradient scaled by that metric. Whichever
half is which, the published form (the metric of the whole minibatch,
which holds the drift's own gradient) gives neither pair. In `fit` (a
model, and `Chains`), in a custom loop, and the refusals.
"""

import numpy as np
import pytest
import keras

import tfp_adaptive as tfa

H = 1e-3
C = np.array([1., 100.])  # The two rows' loss gradients (with a sign).


class _Scalar(keras.layers.Layer):
  """One weight ``w``, broadcast to one output per row."""

  def build(self, shape):
    self.w = self.add_weight(shape=(), initializer='zeros')

  def call(self, inputs):
    return inputs[:, :1] * 0. + self.w


def _linear_loss(y_true, y_pred):
  """``−c w`` per row: the gradient is ``−c``, the Hessian zero (Γ = 0)."""
  return -y_true[:, 0] * y_pred[:, 0]


def _optimizer(gamma='corrected', **kwargs):
  return tfa.keras.optimizers.PSGLD(
      H, data_size=1, preconditioner_decay_rate=0.5, gamma=gamma,
      prior='flat', seed=0, metric_warmup_steps=0, burnin=100, **kwargs)


def _pairs():
  """The ``(V, Δw)`` a step may give: metric from one row, drift from the other.

  RMSprop with ``V_0 = 1``, ``α = 0.5``: ``V = (1 + c_B²)/2`` and
  ``Δw = (h/2) c_A / sqrt(λ + V)`` (TFP's form of the metric).
  """
  out = []
  for a, b in ((0, 1), (1, 0)):
    v = 0.5 * (1. + C[b] ** 2)
    out.append((v, 0.5 * H * C[a] / np.sqrt(1e-3 + v)))
  return out


def _check(v, dw):
  v, dw = np.ravel(v), np.ravel(dw)
  for vk, dk in zip(v, dw):
    assert any(np.isclose(vk, pv, rtol=1e-5) and
               np.isclose(dk, pd, rtol=1e-4) for pv, pd in _pairs()), (
                   vk, dk, _pairs())


def _data():
  return np.zeros((2, 1), 'float32'), C[:, None].astype('float32')


@pytest.mark.parametrize('chains', [None, 2])
def test_fit_steps_with_one_half_and_builds_the_metric_from_the_other(
    chains):
  x, y = _data()
  model = keras.Sequential([keras.Input((1,)), _Scalar()])
  if chains:
    model = tfa.keras.Chains(model, chains=chains)
  opt = _optimizer()
  with pytest.warns(UserWarning, match='no regularizer'):  # prior='flat'
    model.compile(opt, _linear_loss)
    tfa.keras.enable_gamma(model)
    model.fit(x, y, batch_size=2, epochs=1, verbose=0)
  pstate, _ = opt.sampler_state()
  _check(pstate.second_moment[0].numpy(), model.get_weights()[0])
  # The published form, on the same step, is neither pair.
  whole = 0.5 * (1. + C.mean() ** 2)
  assert not any(np.isclose(whole, v) for v, _ in _pairs())


def test_a_custom_loop_passes_the_metric_state_to_apply():
  w = keras.Variable(0.)
  opt = _optimizer()
  out = tfa.keras.gradients_and_gamma(
      opt, lambda: -float(C[1]) * w, [w],
      metric_loss_fn=lambda: -float(C[0]) * w)
  assert len(out) == 4
  _, grads, gamma, metric_state = out
  with pytest.raises(ValueError, match='metric_state'):
    opt.apply(grads, [w], gamma=gamma)
  opt.apply(grads, [w], gamma=gamma, metric_state=metric_state)
  _check(opt.sampler_state()[0].second_moment[0].numpy(), w.numpy())
  assert np.isclose(w.numpy(), _pairs()[1][1], rtol=1e-4)


def test_missing_or_misplaced_metric_losses_and_single_rows_are_refused():
  w = keras.Variable(0.)
  loss = lambda: -w
  with pytest.raises(ValueError, match='metric_loss_fn'):
    tfa.keras.gradients_and_gamma(_optimizer(), loss, [w])
  with pytest.raises(ValueError, match="gamma='corrected'"):
    tfa.keras.gradients_and_gamma(_optimizer('corrected_published'), loss,
                                  [w], metric_loss_fn=loss)
  x, y = _data()
  model = keras.Sequential([keras.Input((1,)), _Scalar()])
  model.compile(_optimizer(), _linear_loss)
  tfa.keras.enable_gamma(model)
  with pytest.raises(ValueError, match='batch_size'):
    model.fit(x, y, batch_size=1, epochs=1, verbose=0)


def test_the_calibration_reads_the_noise_of_the_drifts_half():
  """`CurvatureCalibration` takes the minibatch noise at the rows the drift sees."""
  from tfp_adaptive.keras import gamma_train_step  # pylint: disable=g-import-not-at-top
  assert gamma_train_step.drift_rows(_optimizer(), 64) == 32
  assert gamma_train_step.drift_rows(_optimizer(), 7) == 4
  for gamma in ('corrected_published', 'corrected_lagged', 'none'):
    assert gamma_train_step.drift_rows(_optimizer(gamma), 64) == 64


def test_halves_split_every_tensor_alike():
  x = np.arange(10, dtype='float32')[:, None]
  (xa, ya), (xb, yb) = tfa.keras.halves((x, 2. * x), seed=[3, 4])
  assert xa.shape[0] == 5 and xb.shape[0] == 5
  np.testing.assert_array_equal(2. * xa.numpy(), ya.numpy())
  np.testing.assert_array_equal(2. * xb.numpy(), yb.numpy())
  both = np.sort(np.concatenate([xa.numpy(), xb.numpy()]).ravel())
  np.testing.assert_array_equal(both, x.ravel())
