"""GPU readiness, checked without a GPU: the compiled steps use only ops that XLA compiles.

With soft device placement off, TensorFlow fails instead of moving an op
to another device, and `jit_compile=True` fails on ops XLA cannot compile
(host callbacks such as `tf.py_function`, CPU-only kernels). The kernel
step of every sampler (with the corrected Γ where it has one) and a Keras
`fit` step with the collector are built and run that way, and their
graphs hold no Python callbacks.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_adaptive as tfa
from tfp_adaptive.core import specs

HOST_OPS = {'PyFunc', 'PyFuncStateless', 'EagerPyFunc'}


@pytest.fixture
def strict_placement():
  before = tf.config.get_soft_device_placement()
  tf.config.set_soft_device_placement(False)
  yield
  tf.config.set_soft_device_placement(before)


def _op_types(concrete):
  types = set()
  for graph in [concrete.graph] + [f.graph for f in getattr(
      concrete.graph, '_functions', {}).values() if hasattr(f, 'graph')]:
    types |= {op.type for op in graph.get_operations()}
  return types


def _target(x, y):
  return -0.5 * (tf.reduce_sum(x ** 2, -1) + tf.reduce_sum(y ** 2, [-2, -1]))


@pytest.mark.slow
@pytest.mark.parametrize('name', [s.kernel_name for s in specs.SPECS])
def test_kernel_step_compiles_with_strict_placement(strict_placement, name):
  cls = getattr(tfa.mcmc, name)
  spec = specs.SPECS[[s.kernel_name for s in specs.SPECS].index(name)]
  # The defaults, given: a kernel refuses some of them on a target without
  # minibatch noise.
  kwargs = {h.name: h.default for h in spec.hyperparameters}
  if spec.supports_gamma:
    kwargs['gamma'] = 'corrected'
  kernel = cls(_target, 1e-3, **kwargs)
  state = [tf.zeros([4, 3]), tf.zeros([4, 2, 2])]

  @tf.function(jit_compile=True, autograph=False)
  def step(state, seed):
    results = kernel.bootstrap_results(state)
    return kernel.one_step(state, results, seed=seed)
  new_state, results = step(state, tf.constant([1, 2]))
  assert all(np.all(np.isfinite(s.numpy())) for s in new_state)
  assert not _op_types(step.get_concrete_function(
      state, tf.constant([1, 2]))) & HOST_OPS


@pytest.mark.slow
def test_keras_fit_step_compiles_with_strict_placement(strict_placement):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 8)).astype('float32')
  y = rng.integers(0, 3, size=64)
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((8,)),
                            keras.layers.Dense(16, activation='relu'),
                            keras.layers.Dense(3)])
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=64, seed=0),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=True)
  collector = tfa.keras.SampleCollector()
  model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[collector])
  # XLA refuses host callbacks: had the compiled step one, `fit` failed.
  assert int(model.optimizer.iterations.numpy()) == 8
  assert len(collector.ensemble) > 0
