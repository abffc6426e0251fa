"""Adapt, then freeze (`num_adaptation_steps`): the metric adapts, then stays constant and Γ is zero.

The statistical checks of the frozen samplers are in `test_posteriors.py`
(the exact linear-regression posterior and a correlated Gaussian, where the
same samplers adapting throughout without Γ fail).
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf
import keras

import tfp_adaptive as tfa
from tests.conftest import in_ci

FREEZE = 50


@pytest.mark.parametrize('make', [
    lambda f: tfa.mcmc.PSGLD(f, 0.01, 0.5, 0.1, num_adaptation_steps=FREEZE),
    lambda f: tfa.mcmc.MongeSGRLD(f, 0.01, num_adaptation_steps=FREEZE),
    lambda f: tfa.mcmc.ShampooSGRLD(f, 0.01, 0.9, num_adaptation_steps=FREEZE),
    lambda f: tfa.mcmc.AdamSGLD(f, 0.01, num_adaptation_steps=FREEZE),
], ids=['psgld', 'monge', 'shampoo', 'adam'])
@pytest.mark.slow
def test_kernel_metric_adapts_then_is_constant_and_gamma_is_zero(make):
  kernel = make(lambda x: -0.5 * tf.reduce_sum(x ** 2, -1))
  with warnings.catch_warnings():
    warnings.simplefilter('ignore')  # Regime advice on this short run.
    _, (metric, gamma_norm), _ = tfa.mcmc.sample(
        kernel, tf.ones([8, 3]), 2 * FREEZE, progress=False, seed=(1, 2),
        trace_fn=lambda _, r: (r.preconditioner_state, r.gamma_norm))
  # Result i holds the state after step i + 1 (steps 0 ... FREEZE-1 adapt).
  for leaf in tf.nest.flatten(metric):
    leaf = leaf.numpy()
    if leaf.dtype.kind != 'f':
      continue
    assert not np.array_equal(leaf[0], leaf[FREEZE - 1])      # Adapting,
    np.testing.assert_array_equal(leaf[FREEZE - 1:], np.broadcast_to(
        leaf[FREEZE - 1], leaf[FREEZE - 1:].shape))           # then frozen.
  if kernel.parameters.get('gamma', 'none') != 'none':
    assert np.all(gamma_norm.numpy()[:FREEZE] > 0)
  assert np.all(gamma_norm.numpy()[FREEZE:] == 0)


# CI: Γ's train step in a graph, the Γ-free one under XLA (Γ's train step
# under XLA: `test_keras_optimizers.py`); the full-size run: all four.
@pytest.mark.slow
@pytest.mark.parametrize('gamma,jit', in_ci(
    [(g, j) for g in ('corrected', 'none') for j in (False, True)],
    [('corrected', False), ('none', True)]),
                         ids=lambda v: {False: 'graph', True: 'xla'}.get(v, v))
def test_keras_metric_adapts_then_is_constant(gamma, jit):
  """In `fit` (Γ from the collector's train step, or the Γ-free update) and
  after a save: the optimizer's metric state changes for
  `num_adaptation_steps` steps, then not at all."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 3)).astype('float32')
  y = x @ np.ones((3, 1), 'float32')
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
  opt = tfa.keras.optimizers.PSGLD(1e-3, data_size=200, gamma=gamma,
                                   num_adaptation_steps=10, seed=0)
  model.compile(opt, 'mse', jit_compile=jit)
  callbacks = [tfa.keras.SampleCollector()] if gamma != 'none' else []
  fit = lambda epochs: model.fit(x, y, batch_size=40, epochs=epochs,
                                 verbose=0, callbacks=callbacks)
  fit(1)  # 5 steps: adapting.
  state = lambda: [v.numpy().copy() for v in opt._state_variables]  # pylint: disable=protected-access
  early = state()
  fit(1)  # Steps 5 ... 9: still adapting.
  frozen = state()
  assert any(not np.array_equal(a, b) for a, b in zip(early, frozen))
  weights = model.get_weights()
  fit(3)
  assert all(np.array_equal(a, b) for a, b in zip(frozen, state()))
  assert any(not np.array_equal(a, b)
             for a, b in zip(weights, model.get_weights()))  # Still sampling.
  again = tfa.keras.optimizers.PSGLD.from_config(opt.get_config())
  assert again.num_adaptation_steps == 10
