"""Bayesian MLP by `model.fit`: the README's recipe on a deeper MLP, against an Adam deep ensemble.

Offline by default (scikit-learn's 8×8 digits); ``--dataset mnist`` loads
MNIST through `keras.datasets` (needs the internet once). The MLP has two
hidden layers and the default prior. Each chain starts from fresh weights,
trains with Adam until the validation loss stops improving
(`keras.callbacks.EarlyStopping`), then samples with corrected pSGLD at the
step `CurvatureCalibration` reads from the posterior's stiffest
directions; `SampleCollector` keeps one member an epoch after the two
calibration epochs, and `BayesianEnsemble.combine` pools the chains. The
Adam deep ensemble has as many members, each trained for as many epochs
as a chain's warm start and sampling together. Prints the test
log-likelihood, accuracy, ECE and Brier score of both.

  python examples/keras_digits.py [--dataset digits|mnist] [--chains 5]

The collector's thermometer may report a chain as not settled: the
weights the data leave to the prior are still at Adam's scale when the
sampling starts (Keras guide, "A step for the stiff directions"). The
script prints the largest weight in the ensemble, which shows a chain that
ran away.
"""

import argparse

import numpy as np
import keras

import tfp_adaptive as tfa
from tfp_adaptive.keras.predictive import classification_metrics

HELD_OUT = 0.2  # The warm start's validation share.


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


def mlp(inputs, hidden, seed=0):
  keras.utils.set_random_seed(seed)
  return keras.Sequential([keras.Input((inputs,)),
                           keras.layers.Dense(hidden, activation='relu'),
                           keras.layers.Dense(hidden, activation='relu'),
                           keras.layers.Dense(10, activation='softmax')])


def chain(x, y, seed, args):
  """One chain of the README's recipe: its ensemble."""
  model = mlp(x.shape[1], args.hidden, seed)
  model.compile(keras.optimizers.Adam(3e-3), 'sparse_categorical_crossentropy',
                jit_compile=args.jit_compile)
  model.fit(x, y, batch_size=args.batch_size, epochs=args.warm_epochs,
            verbose=0, validation_split=HELD_OUT, callbacks=[
                keras.callbacks.EarlyStopping(patience=5,
                                              restore_best_weights=True)])
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x), seed=seed),
                'sparse_categorical_crossentropy',
                jit_compile=args.jit_compile)
  collector = tfa.keras.SampleCollector(burnin=2, unit='epoch')
  model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs,
            verbose=args.verbose, callbacks=[
                tfa.keras.CurvatureCalibration((x, y), epochs=2), collector])
  return collector.ensemble


def _positive(text):
  """An argparse type: a whole number of at least 1."""
  value = int(text)
  if value < 1:
    raise argparse.ArgumentTypeError('must be at least 1, got %d' % value)
  return value


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--dataset', choices=['digits', 'mnist'],
                      default='digits')
  parser.add_argument('--chains', type=_positive, default=5,
                      help='chains pooled, and members of the Adam ensemble')
  parser.add_argument('--warm-epochs', type=_positive, default=48,
                      help='most epochs of Adam before sampling')
  parser.add_argument('--epochs', type=_positive, default=20,
                      help='epochs of sampling a chain')
  parser.add_argument('--hidden', type=_positive, default=100)
  parser.add_argument('--batch-size', type=_positive, default=32)
  parser.add_argument('--jit-compile', action='store_true',
                      help='compile the steps with XLA')
  parser.add_argument('--verbose', type=int, default=0)
  args = parser.parse_args()
  x, y, xt, yt = (a.astype('float32') if a.dtype.kind == 'f' else a
                  for a in load(args.dataset))

  print('%d chains of corrected pSGLD after an early-stopped Adam (N=%d)'
        % (args.chains, len(x)))
  bayes = tfa.keras.BayesianEnsemble.combine(
      [chain(x, y, seed, args) for seed in range(args.chains)])
  # A chain that ran away shows weights of 1e3 and more.
  largest = max(float(np.max(np.abs(v.numpy())))
                for member in bayes.iterate_members()
                for v in member.trainable_weights)
  print('Largest |weight| in the ensemble: %.3g' % largest)

  # As many gradients as a chain at most: its Adam epochs see 1 - HELD_OUT.
  epochs = int((1. - HELD_OUT) * args.warm_epochs) + args.epochs
  print('Adam deep ensemble (%d members, %d epochs each)' % (args.chains,
                                                            epochs))
  probs = []
  for seed in range(args.chains):
    adam = mlp(x.shape[1], args.hidden, 1000 + seed)
    adam.compile(keras.optimizers.Adam(1e-3),
                 'sparse_categorical_crossentropy',
                 jit_compile=args.jit_compile)
    adam.fit(x, y, batch_size=args.batch_size, epochs=epochs,
             verbose=args.verbose)
    probs.append(adam.predict(xt, verbose=0))
  deep = classification_metrics(np.mean(probs, 0), yt)

  print('\n| %s test set (%d) | log-lik | accuracy | ECE | Brier |'
        % (args.dataset, len(xt)))
  print('|---|---|---|---|---|')
  for name, r in [('pSGLD ensemble (%d members)' % len(bayes),
                   bayes.evaluate(xt, yt)),
                  ('Adam deep ensemble (%d)' % args.chains, deep)]:
    print('| %s | %.4f | %.4f | %.4f | %.4f |' % (
        name, r['log_likelihood'], r['accuracy'], r['ece'], r['brier']))


if __name__ == '__main__':
  main()
