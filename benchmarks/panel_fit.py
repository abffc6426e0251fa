"""The panel's runs through `model.fit`: a Bayesian linear regression with an exact posterior, sampled by the Keras optimizers.

The model is keras.io's smallest regression (`Sequential`, one `Dense`,
loss ``'mse'``, so the likelihood is ``N(y; ŷ, 1/2)``) with a ``N(0, 1)``
prior from `tfa.keras.priors.add_gaussian_prior`; its posterior is
Gaussian with precision ``P = 2XᵀX + I`` over the weights and the bias.
The data come from a `tf.data` pipeline reshuffled every pass (batches
dealt without replacement) or as one full batch. `SampleCollector` keeps
one member every `THINNING` steps after a quarter of the run, and reads
its members on the training data at the end of `fit`
(``SampleCollector(training_data=(x, y))``).

The members fall at four places in each reshuffled pass of 20 batches
(steps 0, 5, 10 and 15 of it), as a user's members taken every step
would fall at all of them. Members taken only at the ends of passes
would show less of the heat of reshuffled minibatches than the chain
carries: the minibatch errors of a pass sum to zero, so the excursion
they cause closes at its end (the more so, the more slowly the chain
relaxes over a pass).

`benchmarks.panel` runs each configuration as 8 chains (seeds) and
reports them as its kernel rows: the sd error against the exact posterior,
and for the first chain, the run a user makes, the members' reading and
every warning, the live reading's ("live") apart from the members'
("members"). The live reading, from the gradients the optimizer already
has, takes out the step's own heating (the diagnostics guide), so it
cannot see a step or minibatches that heat the chain; the members'
reading, with exact gradients, can.
"""

import time
import warnings

import keras
import numpy as np
import tensorflow as tf

import tfp_adaptive as tfa
from benchmarks import common

N = 1000
EPOCHS = 300
STEPS_PER_EPOCH = 100
THINNING = 25  # Also `fit`'s steps per execution: a member per execution.
# The default prior's log line; Keras' own note on `fit` of a dataset.
NOT_OURS = ('default prior', '`shuffle=True` was passed')
MEMBERS = 'SampleCollector (its members on `training_data`)'


def regression():
  """``(x, y, precision, mean)``: 3 inputs and a bias, the exact posterior's precision and mean."""
  rng = np.random.default_rng(0)
  x = rng.normal(1., 1., size=(N, 3)).astype('float32')
  y = (x @ np.array([[0.5], [-1.], [0.3]]) + 2. +
       rng.normal(scale=np.sqrt(0.5), size=(N, 1))).astype('float32')
  xa = np.concatenate([x, np.ones((N, 1))], 1).astype(np.float64)
  precision = 2. * xa.T @ xa + np.eye(4)
  mean = np.linalg.solve(precision, 2. * xa.T @ y.astype(np.float64))[:, 0]
  return x, y, precision, mean


def run_one(optimizer, batch_size, seed=0, epochs=EPOCHS, data=None,
            steps=STEPS_PER_EPOCH, callbacks=(), warm_start=False,
            chains=None):
  """``(members [n, D], said {'live': [...], 'members': [...]}, readings, seconds)`` of one chain (or of `chains`).

  `readings`: the members' (``SampleCollector(training_data=(x, y))``
  reads them at the end of `fit`, `BayesianEnsemble.check_temperature`),
  and ``'live'``, the whole model's reading in `fit`
  (`SampleCollector.live_readings`). `seconds` counts both. `data`: ``(x, y)``, by default
  `regression`'s; the model is one `Dense` from ``x``'s columns to
  ``y``'s, and a member's row its kernel (row-major), then its bias.

  An epoch is `steps` steps: for `regression`, 5 reshuffled passes in
  batches of 50, or the full batch 100 times. `callbacks` run before the
  collector (a step-size rule, for instance). `warm_start`: first train
  with Adam to a mode, as the README's recipe does
  (`common.adam_to_a_mode`, at most 48 epochs); `seconds` counts it.
  `chains`: K chains in the one `fit` (`tfa.keras.Chains`), their
  members ``[n, K, D]``; each starts from the warm start's weights, or
  from fresh ones.
  """
  x, y = regression()[:2] if data is None else data
  n = len(x)
  keras.utils.set_random_seed(seed)

  def build():
    model = keras.Sequential([keras.Input((x.shape[1],)),
                              keras.layers.Dense(y.shape[1])])
    tfa.keras.priors.add_gaussian_prior(model, data_size=n, scale=1.)
    return model
  model = build()
  t0 = time.time()
  if warm_start:
    common.adam_to_a_mode(model, x, y, 'mse', 48, batch_size)
  if chains is not None:
    models = [model] + [build() for _ in range(chains - 1)]
    if warm_start:
      for other in models[1:]:
        other.set_weights(model.get_weights())
    model = tfa.keras.Chains(models)
  model.compile(optimizer, 'mse', steps_per_execution=THINNING)
  data = tf.data.Dataset.from_tensor_slices((x, y))
  if batch_size < n:
    data = data.shuffle(n, seed=seed, reshuffle_each_iteration=True)
  data = data.batch(batch_size).repeat()
  collector = tfa.keras.SampleCollector(burnin=epochs * steps // 4,
                                        thinning=THINNING,
                                        training_data=(x, y))
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    model.fit(data, steps_per_epoch=steps, epochs=epochs, verbose=0,
              callbacks=list(callbacks) + [collector])
  seconds = time.time() - t0
  # The members' reading on the training data at the end of `fit` says so
  # at the start of its warnings; the rest is the reading in `fit`.
  ours = [str(w.message) for w in caught
          if issubclass(w.category, UserWarning) and
          not any(s in str(w.message) for s in NOT_OURS)]
  said = {'members': [m for m in ours if m.startswith(MEMBERS)]}
  said['live'] = [m for m in ours if not m.startswith(MEMBERS)]
  # No members' reading where the collector could not take one (it says
  # why among its warnings).
  readings = dict(collector.member_readings or {})
  row = lambda m: np.concatenate([m.weights[0].ravel(), m.weights[1].ravel()])
  if collector.members and chains is not None:
    members = np.stack([np.stack([row(m) for m in collector.members
                                  if m.chain == k]) for k in range(chains)], 1)
  elif collector.members:
    members = np.stack([row(m) for m in collector.members])
  else:  # Every step after burn-in was non-finite (it says so).
    members = np.zeros([0, 0])
  readings['live'] = collector.live_readings.get('temperature')
  return members, said, readings, seconds


def configurations(quick):
  """``[(label, optimizer(seed), batch size, h)]``."""
  sgld = lambda h: (lambda seed: tfa.keras.optimizers.SGLD(h, data_size=N,
                                                           seed=seed))
  psgld = lambda h: (lambda seed: tfa.keras.optimizers.PSGLD(
      h, data_size=N, seed=seed, preconditioner_decay_rate=0.99,
      diagonal_bias=1e-3))
  table = [('SGLD, full batch', sgld(1e-5), N, 1e-5),
           ('SGLD, full batch', sgld(1e-4), N, 1e-4),
           ('SGLD, reshuffled batches of 50', sgld(1e-5), 50, 1e-5),
           ('SGLD, reshuffled batches of 50', sgld(3e-5), 50, 3e-5),
           ('SGLD, reshuffled batches of 50', sgld(1e-4), 50, 1e-4),
           ('PSGLD α=0.99 corrected, reshuffled batches of 50', psgld(1e-5),
            50, 1e-5),
           ('PSGLD α=0.99 corrected, reshuffled batches of 50', psgld(1e-4),
            50, 1e-4)]
  return table[4:5] if quick else table

