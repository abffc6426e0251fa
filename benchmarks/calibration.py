"""Priors under the single-chain recipe: calibration of keras.io's convnet and an MLP on digits.

Each model is trained on scikit-learn's digits (1,300 training, 497 test
images) by

- a deep ensemble of 5 Adam-trained copies (the reference), and
- corrected `PSGLD` (``diagonal_bias=1e-3``, the default decay 0.95) whose
  learning rate `StepSizeCalibration` sets during the first epochs (from
  ``1e-4``, the README's value for the MLP), members collected by
  `SampleCollector` after burn-in;
- the Keras guide's single-chain recipe: with the default prior (what a
  Keras model without a prior of its own gets), with the horseshoe prior
  of `tfp_adaptive.keras.priors` and with the Gaussian ``fan_in`` prior;
  and, without calibration, at the fixed learning rate 1e-4 (the value
  that does not transfer from the MLP to the convnet).

The README's recipe (an early-stopped Adam, then `CurvatureCalibration`)
is measured against the Adam deep ensemble in `benchmarks.quality`.

Reported: the ensemble's test accuracy, log-likelihood and expected
calibration error (ECE, 10 bins), the learning rate chosen, and the last
epoch's ``drift_ratio``. The goal: ECE within 0.02 of the Adam ensemble's.

    python -m benchmarks.calibration [--quick]
"""

import os
import warnings

import numpy as np
import keras

import tfp_adaptive as tfa
from benchmarks import common
from tfp_adaptive.keras import predictive


def convnet():
  """keras.io's MNIST convnet, sized for 8×8 digits."""
  return keras.Sequential([
      keras.Input((8, 8, 1)),
      keras.layers.Conv2D(32, 3, activation='relu'),
      keras.layers.Conv2D(64, 3, activation='relu'),
      keras.layers.MaxPooling2D(2),
      keras.layers.Flatten(),
      keras.layers.Dropout(0.5),
      keras.layers.Dense(10, activation='softmax')])


def mlp():
  return keras.Sequential([
      keras.Input((8, 8, 1)), keras.layers.Flatten(),
      keras.layers.Dense(100, activation='relu'),
      keras.layers.Dense(100, activation='relu'),
      keras.layers.Dense(10, activation='softmax')])


MODELS = {'convnet': convnet, 'mlp': mlp}


def data():
  x, y, xt, yt = common.load_dataset('digits')
  return (x.reshape(-1, 8, 8, 1).astype('float32'), y,
          xt.reshape(-1, 8, 8, 1).astype('float32'), yt)


def adam_ensemble(name, epochs, members=5):
  x, y, xt, yt = data()
  probs = []
  for seed in range(members):
    keras.utils.set_random_seed(seed)
    model = MODELS[name]()
    model.compile(keras.optimizers.Adam(1e-3),
                  'sparse_categorical_crossentropy', jit_compile=True)
    model.fit(x, y, batch_size=64, epochs=epochs, verbose=0)
    probs.append(model.predict(xt, verbose=0))
  return predictive.classification_metrics(np.mean(probs, 0), yt)


def psgld(name, prior, epochs, calibration_epochs=5, seed=0, temperature=1.,
          jit_compile=True):
  """``(test metrics, learning rate chosen, last drift_ratio, warnings)``.

  ``calibration_epochs=0``: no `StepSizeCalibration`, the learning rate
  stays at 1e-4. ``jit_compile=False`` spares XLA's compile of the step
  with Γ (about 10 s on a CPU), which a short run does not earn back.
  """
  x, y, xt, yt = data()
  n = len(x)
  keras.utils.set_random_seed(seed)
  model = MODELS[name]()
  if prior == 'horseshoe':
    tfa.keras.priors.add_horseshoe_prior(model, data_size=n)
    tfa.keras.priors.add_gaussian_prior(model, data_size=n, scale=1.)
  elif prior == 'gaussian':
    tfa.keras.priors.add_gaussian_prior(model, data_size=n)
  model.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=n,
                                           diagonal_bias=1e-3, seed=seed,
                                           temperature=temperature),
                'sparse_categorical_crossentropy', jit_compile=jit_compile)
  burnin = max(epochs // 3, calibration_epochs + 3)
  callbacks = [tfa.keras.SampleCollector(burnin=burnin, unit='epoch')]
  if calibration_epochs:
    callbacks.insert(0, tfa.keras.StepSizeCalibration(
        epochs=calibration_epochs))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    history = model.fit(x, y, batch_size=64, epochs=epochs, verbose=0,
                        callbacks=callbacks)
  regime_warnings = [str(w.message) for w in caught
                     if 'drift_ratio' in str(w.message) or
                     'lag' in str(w.message)]
  lr = float(np.asarray(model.optimizer.learning_rate))
  return (callbacks[-1].ensemble.evaluate(xt, yt), lr,
          history.history['drift_ratio'][-1], regime_warnings)


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  epochs = 20 if args.quick else 60
  rows = []
  for name in MODELS:
    ref = adam_ensemble(name, epochs, 3 if args.quick else 5)
    rows.append([name, 'Adam deep ensemble', '%.3f' % ref['accuracy'],
                 '%.4f' % ref['log_likelihood'], '%.4f' % ref['ece'], '',
                 '%+.4f' % (ref['confidence'] - ref['accuracy']), '', ''])
    for prior, calibrate, temperature in (
        ('default', 0, 1.), ('default', 5, 1.), ('default', 5, 0.1),
        ('horseshoe', 5, 1.), ('gaussian', 5, 1.)):
      metrics, lr, drift, caught = psgld(name, prior, epochs, calibrate,
                                         temperature=temperature)
      rows.append([name, 'PSGLD, %s prior%s%s' % (
          prior, '' if calibrate else ', fixed learning rate',
          '' if temperature == 1. else ', temperature %g' % temperature),
                   '%.3f' % metrics['accuracy'],
                   '%.4f' % metrics['log_likelihood'],
                   '%.4f' % metrics['ece'],
                   '%+.4f' % (metrics['ece'] - ref['ece']),
                   '%+.4f' % (metrics['confidence'] - metrics['accuracy']),
                   '%.2g' % lr,
                   '%.3g' % drift + (' (warned)' if caught else '')])
      print(rows[-1], flush=True)
  common.write_table(
      os.path.join(out, 'calibration.md'),
      'Priors under the single-chain recipe on digits (%s, %d epochs)'
      % ('quick' if args.quick else 'full', epochs),
      ['model', 'method', 'accuracy', 'log-likelihood', 'ECE',
       'ECE − Adam\'s', 'confidence − accuracy', 'learning rate chosen',
       'last drift_ratio'], rows,
      'PSGLD: corrected Γ, diagonal_bias 1e-3, learning rate set by '
      'StepSizeCalibration(epochs=5) from 1e-4, burn-in a third of the '
      'epochs, every later epoch a member. "Confidence − accuracy": the '
      'mean largest probability less the accuracy (negative: '
      'under-confident). "Temperature 0.1": the tempered posterior '
      'p(θ | D)^{1/τ}, τ = 0.1 (not the Bayes posterior), to show how much '
      'of the gap the temperature accounts for.')


if __name__ == '__main__':
  main()
