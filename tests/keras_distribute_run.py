"""Child process of test_keras_distribute: MirroredStrategy on 2 logical CPUs vs one device.

Prints one JSON line with the largest weight differences.
"""

import json

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices('CPU')[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # pylint: disable=g-import-not-at-top

import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top


def run(strategy, opt_cls, **kwargs):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(64, 4)).astype('float32')
  y = (x[:, :1] * x[:, 1:2]).astype('float32')
  with strategy.scope():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)),
                              keras.layers.Dense(8, activation='tanh'),
                              keras.layers.Dense(1)])
    kwargs.setdefault('seed', 7)
    model.compile(opt_cls(1e-3, data_size=64, **kwargs), 'mse')
    tfa.keras.enable_gamma(model)
  model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0)
  replica_gap = 0.
  for v in model.weights:
    copies = strategy.experimental_local_results(v.value)
    for c in copies[1:]:
      replica_gap = max(replica_gap, float(np.max(np.abs(
          c.numpy() - copies[0].numpy()))))
  return [w.copy() for w in model.get_weights()], replica_gap


def main():
  out = {}
  mirrored = tf.distribute.MirroredStrategy(['/cpu:0', '/cpu:1'])
  for name, cls, kw in [('PSGLD', tfa.keras.optimizers.PSGLD, dict(gamma='none', burnin=0)),
                        ('MongeSGRLD', tfa.keras.optimizers.MongeSGRLD,
                         dict(gamma='none')),
                        ('PSGLD-published', tfa.keras.optimizers.PSGLD,
                         dict(gamma='corrected_published', burnin=0)),
                        ('PSGLD-corrected', tfa.keras.optimizers.PSGLD,
                         dict(gamma='corrected', burnin=0))]:
    single, _ = run(tf.distribute.get_strategy(), cls, **kw)
    multi, gap = run(mirrored, cls, **kw)
    out[name] = {
        'replicas': mirrored.num_replicas_in_sync,
        'replica_gap': gap,
        'vs_single': max(float(np.max(np.abs(a - b)))
                         for a, b in zip(single, multi)),
    }
    if name == 'PSGLD-corrected':  # The noise matters (one sampler is enough).
      out[name]['other_seed_gap'] = max(
          float(np.max(np.abs(a - b))) for a, b in zip(single, run(
              tf.distribute.get_strategy(), cls, **dict(kw, seed=8))[0]))
  print(json.dumps(out))


if __name__ == '__main__':
  main()
