"""Child process of test_keras_resume: a `fit` into a sample directory, resumed if it holds a run.

Usage: python -m tests.keras_resume_run DIRECTORY EPOCHS SLEEP
Prints ``ready`` after the first step, then one JSON line at the end: the
final step and the member steps. The kill test forks it from a process
that has imported TensorFlow already (`main` with a pipe as `say`).
"""

import json
import sys
import time

import numpy as np
import keras

import tfp_adaptive as tfa


def _print(line):
  print(line, flush=True)


class _Slow(keras.callbacks.Callback):
  """Makes the run slow enough to be killed part-way; says when it starts."""

  def __init__(self, seconds, say):
    super().__init__()
    self.seconds = seconds
    self.say = say

  def on_train_batch_end(self, batch, logs=None):
    if not hasattr(self, 'started'):
      self.started = True
      self.say('ready')  # The train step is compiled and running.
    time.sleep(self.seconds)


FIXED = 'fixed'  # The seeds of the default run.


def build(seed=FIXED, chains=None):
  """The run: data, model and optimizer, the same in every process.

  With `chains`, that many chains of the model in one `fit`
  (`tfa.keras.Chains`), the others starting from clones of it.

  ``seed=FIXED`` seeds Keras globally and the optimizer with 1. ``None``:
  no seed anywhere but the layers' own initializers (so the weights start
  the same in every process), the optimizer draws its seed as a user's
  would; an int is that optimizer seed. These two also put a frozen
  layer first, whose weights the directory stores once.
  """
  rng = np.random.default_rng(0)
  x = rng.normal(size=(100, 4)).astype('float32')
  y = (x[:, :1] - x[:, 1:2]).astype('float32')
  if seed == FIXED:
    keras.utils.set_random_seed(0)
    init = lambda k: 'glorot_uniform'
  else:
    init = lambda k: keras.initializers.GlorotUniform(seed=k)
  # The runs without fixed seeds sample the head of a frozen first layer
  # (stored once per directory: `tfp_adaptive.keras.frozen_part`).
  base = [] if seed == FIXED else [
      keras.layers.Dense(6, kernel_initializer=init(4), trainable=False)]
  model = keras.Sequential([keras.Input((4,))] + base + [
      keras.layers.Dense(8, activation='tanh', kernel_initializer=init(1)),
      keras.layers.Dropout(0.2, seed=None if seed == FIXED else 2),
      keras.layers.Dense(1, kernel_initializer=init(3))])
  if chains:
    model = tfa.keras.Chains(model, chains=chains)
  model.compile(tfa.keras.optimizers.PSGLD(
      1e-4, data_size=100, seed=1 if seed == FIXED else seed,
      diagonal_bias=1e-3), 'mse')
  return x, y, model


def main(directory, epochs, sleep, say=_print, seed=FIXED, chains=None):
  """The run; `say` gets ``'ready'`` after the first step, then the JSON result."""
  x, y, model = build(seed, chains)
  collector = tfa.keras.SampleCollector(burnin=3, thinning=2, max_samples=4,
                                        directory=directory, resume=True)
  initial_epoch = collector.restore(model)
  model.fit(x, y, batch_size=20, epochs=epochs, initial_epoch=initial_epoch,
            shuffle=False, verbose=0,
            callbacks=[collector, _Slow(sleep, say)])
  say(json.dumps({'step': int(model.optimizer.iterations.numpy()),
                  'members': sorted((m.step, m.chain)
                                    for m in collector.members),
                  'seed': int(model.optimizer.seed)}))


if __name__ == '__main__':
  main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))
