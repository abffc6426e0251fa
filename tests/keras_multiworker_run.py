"""One process of test_keras_distribute's multi-worker run, or its single-process reference.

    python -m tests.keras_multiworker_run OUT   # TF_CONFIG set: one worker

The test runs the reference in its own process (`main(out)` without
TF_CONFIG), which spares a third TensorFlow start.

Trains a small MLP on synthetic data from a `tf.data` pipeline (global
batch 16), with `SampleCollector` writing to ``OUT/samples``: Γ-free PSGLD
with its seed left to the library (NumPy is seeded per task, so the
workers draw different seeds unless they agree on the chief's), then
corrected PSGLD (as published) in memory. Writes ``OUT/<task>.npz`` (final weights of both
runs) and ``OUT/<task>.json`` (chief or not, members kept, seed used).
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf
import keras

import tfp_adaptive as tfa
from tfp_adaptive.keras import distribute

GLOBAL_BATCH = 16


def data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 4)).astype('float32')
  y = (x[:, :1] * x[:, 1:2]).astype('float32')
  return tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)


def train(strategy, task, gamma, directory=None):
  with strategy.scope():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)),
                              keras.layers.Dense(8, activation='tanh'),
                              keras.layers.Dense(1)])
    np.random.seed(task)  # The optimizer's default seed differs per task.
    model.compile(tfa.keras.optimizers.PSGLD(
        1e-3, data_size=64, gamma=gamma, burnin=0), 'mse')
  if distribute.is_multi_worker(strategy):
    distribute.enable_multi_worker(model)
  collector = tfa.keras.SampleCollector(burnin=4, directory=directory)
  model.fit(data(), epochs=3, verbose=0, callbacks=[collector])
  return model, collector


def main(out=None):
  out = sys.argv[1] if out is None else out
  if 'TF_CONFIG' in os.environ:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ['TF_CONFIG'])['task']['index']
    name = 'worker%d' % task
  else:
    strategy, task, name = tf.distribute.get_strategy(), 0, 'single'
  samples = os.path.join(out, 'single_samples' if name == 'single' else
                         'samples')
  free, collector = train(strategy, task, 'none', samples)
  # The published form: its drift and Γ see each worker's rows as one
  # process's do (the default splits each worker's rows into halves of its
  # own: another chain; `keras_distribute_run` checks its replicas agree).
  corrected, memory = train(strategy, task, 'corrected_published')
  np.savez(os.path.join(out, name + '.npz'),
           *(free.get_weights() + corrected.get_weights()))
  info = {'chief': distribute.is_chief(strategy),
          'replicas': strategy.num_replicas_in_sync,
          'seed': int(free.optimizer.seed),
          'members_in_memory': len(memory.members),
          'members_on_disk': (len(collector.members)
                              if distribute.is_chief(strategy) else None)}
  with open(os.path.join(out, name + '.json'), 'w') as f:
    json.dump(info, f)


if __name__ == '__main__':
  main()
