"""Shared bits of the benchmark scripts: output folder, markdown tables, 1-D predictions."""

import argparse
import os

import numpy as np

from tfp_adaptive import diagnostics

__all__ = ['binned', 'load_dataset', 'markdown_table', 'mean_se', 'mlp',
           'out_dir', 'parser', 'write_table']

EDGES = np.arange(-4.5, 4.5001, 0.1)


DEVICES = ('auto', 'cpu', 'gpu')


class _Parser(argparse.ArgumentParser):
  """Parses, then places TensorFlow on `--device` and prints where it runs."""

  def parse_args(self, *args, **kwargs):  # pylint: disable=signature-differs
    parsed = super().parse_args(*args, **kwargs)
    parsed.device_name = select_device(parsed.device)
    return parsed


def parser(description):
  """The benchmarks' argument parser: ``--quick``, ``--out``, ``--device``."""
  p = _Parser(description=description)
  p.add_argument('--quick', action='store_true',
                 help='small sizes (CI): checks that it runs and writes outputs')
  p.add_argument('--out', default='benchmarks/out', help='output folder')
  p.add_argument('--device', choices=DEVICES, default='auto',
                 help='where TensorFlow runs: the first GPU if there is one '
                 '(auto), the CPU only, or a GPU (an error without one)')
  return p


def select_device(choice):
  """Makes `choice` the device TensorFlow uses; returns and prints its name.

  ``'cpu'`` hides the GPUs from TensorFlow (before any op runs);
  ``'gpu'`` fails without one; ``'auto'`` leaves TensorFlow's placement
  (the first GPU if any).
  """
  import platform  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  gpus = tf.config.list_physical_devices('GPU')
  if choice == 'cpu' and gpus:
    tf.config.set_visible_devices([], 'GPU')
    gpus = []
  if choice == 'gpu' and not gpus:
    raise SystemExit('--device gpu: TensorFlow sees no GPU on this machine.')
  name = ('GPU %s' % gpus[0].name if gpus else
          'CPU %s' % (platform.processor() or platform.machine()))
  print('Device: %s' % name, flush=True)
  return name


def out_dir(path):
  os.makedirs(path, exist_ok=True)
  return path


def binned(density, edges=EDGES):
  """Bin probabilities of an unnormalised 1-D density."""
  return diagnostics.bin_probabilities(density, edges)


def mean_se(values):
  """``(mean, standard error)`` of independent values (error 0 for one)."""
  values = np.asarray(values, np.float64)
  se = np.std(values, ddof=1) / np.sqrt(len(values)) if len(values) > 1 else 0.
  return float(np.mean(values)), float(se)


def markdown_table(header, rows):
  lines = ['| ' + ' | '.join(header) + ' |',
           '|' + '---|' * len(header)]
  lines += ['| ' + ' | '.join(str(c) for c in r) + ' |' for r in rows]
  return '\n'.join(lines)


def write_table(path, title, header, rows, note=''):
  text = '## %s\n\n%s\n\n%s\n' % (title, markdown_table(header, rows), note)
  with open(path, 'w') as f:
    f.write(text)
  print(text)


def load_dataset(name):
  """``(x, y, x_test, y_test)``: scikit-learn's 8×8 digits (offline) or MNIST, flat in [0, 1]."""
  import keras  # pylint: disable=g-import-not-at-top
  if name == 'mnist':
    (x, y), (xt, yt) = keras.datasets.mnist.load_data()
    return (x.reshape(len(x), -1) / 255., y, xt.reshape(len(xt), -1) / 255.,
            yt)
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  d = load_digits()
  x, y = d.data / 16., d.target
  perm = np.random.default_rng(0).permutation(len(x))
  x, y = x[perm], y[perm]
  return x[:1300], y[:1300], x[1300:], y[1300:]


#: The share of the training data the warm start holds out to stop on.
WARM_START_HELD_OUT = 0.2
#: The warm start's Adam learning rate (the README's quick start).
WARM_START_LEARNING_RATE = 3e-3


def rate_label(rate):
  """A learning rate as the tables print it: ``3e-3``."""
  return np.format_float_scientific(rate, trim='-', exp_digits=1)


def adam_to_a_mode(model, x, y, loss, epochs, batch_size=None):
  """The documented warm start: Adam (3e-3) until the validation loss stops improving, its best weights kept; its `History`.

  Early stopping (patience 5) on the last `WARM_START_HELD_OUT` of the
  data, at most `epochs` epochs on the rest.
  """
  import keras  # pylint: disable=g-import-not-at-top
  model.compile(keras.optimizers.Adam(WARM_START_LEARNING_RATE), loss=loss)
  return model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0,
                   validation_split=WARM_START_HELD_OUT,
                   callbacks=[keras.callbacks.EarlyStopping(
                       patience=5, restore_best_weights=True)])


def mlp(inputs, hidden, seed=0):
  """A ReLU MLP with two hidden layers and a softmax output over 10 classes."""
  import keras  # pylint: disable=g-import-not-at-top
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((inputs,)),
                           keras.layers.Dense(hidden, activation='relu'),
                           keras.layers.Dense(hidden, activation='relu'),
                           keras.layers.Dense(10, activation='softmax')])
