"""Child process of test_keras_resume: a `fit` that resumes from its directory.

Usage: python -m tests.keras_resume_run DIRECTORY EPOCHS SLEEP
Prints one JSON line: the final step and the collected member steps.
"""

import json
import sys
import time

import numpy as np
import keras

import tfp_adaptive as tfa


class _Slow(keras.callbacks.Callback):
  """Makes the run slow enough to be killed part-way."""

  def __init__(self, seconds):
    super().__init__()
    self.seconds = seconds

  def on_train_batch_end(self, batch, logs=None):
    time.sleep(self.seconds)


def main(directory, epochs, sleep):
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 4)).astype('float32')
  y = (x[:, :1] - x[:, 1:2]).astype('float32')
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((4,)),
                            keras.layers.Dense(8, activation='tanh'),
                            keras.layers.Dense(1)])
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=200, seed=1),
                'mse')
  tfa.keras.enable_gamma(model)
  collector = tfa.keras.SampleCollector(burnin=4, thinning=3, directory=directory)
  initial_epoch = collector.restore(model)
  model.fit(x, y, batch_size=20, epochs=epochs, initial_epoch=initial_epoch,
            verbose=0, callbacks=[collector, _Slow(sleep)])
  print(json.dumps({'step': int(model.optimizer.iterations.numpy()),
                    'members': [m.step for m in collector.members]}))


if __name__ == '__main__':
  main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
