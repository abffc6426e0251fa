"""Bayesian MLP by `model.fit`: the Keras guide's single-chain recipe on a deeper MLP, against Adam.

Offline by default (scikit-learn's 8×8 digits); ``--dataset mnist`` loads
MNIST through `keras.datasets` (needs the internet once). The MLP has two
hidden layers; the sampler is corrected pSGLD with momentum
(``friction=0.1``) under the default prior, its learning rate set by
`StepSizeCalibration` in the first epochs, and `SampleCollector` keeps one
member an epoch after a burn-in of 60 epochs. Prints the test
log-likelihood, accuracy, ECE and Brier score of the posterior ensemble and
of the same MLP trained by Adam for as many epochs.

  python examples/keras_digits.py [--dataset digits|mnist] [--epochs 150]

The sampler's ``diagonal_bias`` is 1e-3 (the default), not TFP's 1e-8: it
caps the metric at ``M ≤ diagonal_bias^{-1/2}``. With 1e-8 the metric is
unbounded where the gradient vanishes, and the corrected Γ, the metric's
divergence, grows like ``V^{-3/2}`` there; a chain can then run away along
flat directions such as the ReLU layers' scale symmetry. The script prints
the largest weight in the ensemble, which shows a run-away. Shorter runs
than the default end before the chain settles, and the collector says so.
"""

import argparse

import numpy as np
import keras

import tfp_adaptive as tfa
from tfp_adaptive.keras.predictive import classification_metrics


def load(name):
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


def mlp(inputs, hidden):
  keras.utils.set_random_seed(0)
  return keras.Sequential([keras.Input((inputs,)),
                           keras.layers.Dense(hidden, activation='relu'),
                           keras.layers.Dense(hidden, activation='relu'),
                           keras.layers.Dense(10, activation='softmax')])


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--dataset', choices=['digits', 'mnist'],
                      default='digits')
  parser.add_argument('--epochs', type=int, default=150)
  parser.add_argument('--burnin', type=int, default=60,
                      help='epochs before the first member')
  parser.add_argument('--hidden', type=int, default=100)
  parser.add_argument('--batch-size', type=int, default=32)
  parser.add_argument('--friction', type=float, default=0.1)
  parser.add_argument('--learning-rate', type=float, default=1e-4)
  parser.add_argument('--diagonal-bias', type=float, default=1e-3)
  parser.add_argument('--jit-compile', action='store_true',
                      help='compile the step with XLA')
  parser.add_argument('--verbose', type=int, default=1)
  args = parser.parse_args()
  x, y, xt, yt = (a.astype('float32') if a.dtype.kind == 'f' else a
                  for a in load(args.dataset))
  n = len(x)
  # One compiled call per epoch: Keras' per-step overhead, paid per epoch.
  per_epoch = -(-n // args.batch_size)

  # Bayesian MLP: the default prior (N(0, 100/fan_in) per weight tensor).
  model = mlp(x.shape[1], args.hidden)
  model.compile(
      optimizer=tfa.keras.optimizers.PSGLD(
          args.learning_rate, data_size=n, friction=args.friction,
          diagonal_bias=args.diagonal_bias, seed=0),
      loss='sparse_categorical_crossentropy', metrics=['accuracy'],
      jit_compile=args.jit_compile, steps_per_execution=per_epoch)
  collector = tfa.keras.SampleCollector(burnin=args.burnin, unit='epoch',
                                        max_samples=100)
  print('Corrected pSGLD with momentum (%d epochs, N=%d):' % (args.epochs,
                                                               n))
  # The learning rate is set from the run during the first 5 epochs (inside
  # the burn-in): --learning-rate is only where it starts.
  model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs,
            callbacks=[tfa.keras.StepSizeCalibration(epochs=5), collector],
            verbose=args.verbose)
  bayes = collector.ensemble.evaluate(xt, yt)
  # A chain that ran away shows weights of 1e3 and more.
  largest = max(float(np.max(np.abs(v.numpy())))
                for member in collector.ensemble.iterate_members()
                for v in member.trainable_weights)
  print('Largest |weight| in the ensemble: %.3g' % largest)

  adam = mlp(x.shape[1], args.hidden)
  adam.compile(keras.optimizers.Adam(1e-3), 'sparse_categorical_crossentropy',
               metrics=['accuracy'], steps_per_execution=per_epoch)
  print('Adam:')
  adam.fit(x, y, batch_size=args.batch_size, epochs=args.epochs,
           verbose=args.verbose)
  point = classification_metrics(adam.predict(xt, verbose=0), yt)

  print('\n| %s test set (%d) | log-lik | accuracy | ECE | Brier |'
        % (args.dataset, len(xt)))
  print('|---|---|---|---|---|')
  for name, r in [('pSGLD-corrected ensemble (%d samples)'
                   % len(collector.ensemble), bayes), ('Adam', point)]:
    print('| %s | %.4f | %.4f | %.4f | %.4f |' % (
        name, r['log_likelihood'], r['accuracy'], r['ece'], r['brier']))


if __name__ == '__main__':
  main()
