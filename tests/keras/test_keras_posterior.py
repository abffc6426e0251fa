"""Keras optimizers recover the exact Bayesian linear-regression posterior through `fit`.

Likelihood N(y; xᵀw, σ²=1/2) is Keras' 'mse' loss (mean of (y - xᵀw)² is
the mean NLL up to a constant), prior N(0, 1) enters as `GaussianPrior(N)`:
the posterior is Gaussian with precision ``2 XᵀX + I``. One long chain per
sampler; the tolerance is 4.5 standard errors from batch means of the chain
itself (plus the relative Euler–Maruyama bias allowance stated below).
"""

import numpy as np
import pytest
import tensorflow as tf
import keras

import tfp_adaptive as tfa
from tests.conftest import full_size_only
from tests.conftest import stat_scale

N, D = 40, 2


def _posterior():
  rng = np.random.default_rng(11)
  x = rng.normal(size=(N, D)).astype('float32')
  y = (x @ np.array([[0.7], [-0.4]]) +
       rng.normal(scale=np.sqrt(0.5), size=(N, 1))).astype('float32')
  prec = 2. * x.T.astype(np.float64) @ x + np.eye(D)
  cov = np.linalg.inv(prec)
  return x, y, cov @ (2. * x.T @ y).ravel(), cov


def _batch_means_se(samples, num_batches=25):
  b = np.array_split(samples, num_batches)
  means = np.stack([s.mean(0) for s in b])
  return means.std(0, ddof=1) / np.sqrt(num_batches)


CASES = {
    'SGLD': lambda: tfa.keras.optimizers.SGLD(2e-3, data_size=N, seed=5),
    'PSGLD-corrected': lambda: tfa.keras.optimizers.PSGLD(
        1e-3, data_size=N, burnin=0, preconditioner_decay_rate=0.5,
        diagonal_bias=1e-2, gamma='corrected', seed=5),
    # Adapt for the burn-in, then freeze (no Γ): the Keras path of a frozen
    # metric (an average over ~100 steps, decay 0.99) samples the posterior.
    # At this decay the metric barely moves, so the same optimizer adapting
    # throughout passes too; where adapting without Γ fails and freezing
    # does not is tested on the kernels (`test_posteriors.py`).
    'PSGLD-frozen': lambda: tfa.keras.optimizers.PSGLD(
        1e-3, data_size=N, burnin=0, preconditioner_decay_rate=0.99,
        diagonal_bias=1e-2, gamma='none', num_adaptation_steps=1000, seed=5),
    'MongeSGRLD-corrected': lambda: tfa.keras.optimizers.MongeSGRLD(
        2e-3, data_size=N, preconditioner_decay_rate=0.5, alpha2=1.,
        gamma='corrected', seed=5),
}


# CI: the two corrected metrics; plain SGLD and the frozen metric, whose
# paths the chains' and the kernels' posterior tests also sample, at full
# size.
@pytest.mark.statistical
@pytest.mark.parametrize('name', [
    n if n.endswith('corrected') else pytest.param(n, marks=full_size_only())
    for n in sorted(CASES)])
def test_linear_regression_posterior(name):
  x, y, mean, cov = _posterior()
  steps = int(40000 * stat_scale())
  keras.utils.set_random_seed(0)
  model = keras.Sequential([keras.Input((D,)),
                            keras.layers.Dense(1, use_bias=False)])
  tfa.keras.priors.add_gaussian_prior(model, data_size=N, scale=1.)
  # One sample per compiled call of 100 steps: the chain's correlation time
  # is about 10 steps, so the samples are nearly independent, and the batch
  # means below measure what correlation is left.
  model.compile(CASES[name](), 'mse', jit_compile=True,
                steps_per_execution=100)
  tfa.keras.enable_gamma(model)
  col = tfa.keras.SampleCollector(burnin=1000, thinning=100)
  data = tf.data.Dataset.from_tensors((x, y)).repeat()  # Full batch.
  model.fit(data, steps_per_epoch=steps // 10, epochs=10, verbose=0,
            callbacks=[col])
  w = np.stack([m.weights[0].ravel()
                for m in col.members])
  se_mean = _batch_means_se(w)
  centred = w - w.mean(0)
  second = np.stack([centred[:, 0] ** 2, centred[:, 1] ** 2,
                     centred[:, 0] * centred[:, 1]], 1)
  se_cov = _batch_means_se(second)
  emp = np.array([second[:, 0].mean(), second[:, 1].mean(),
                  second[:, 2].mean()])
  exact = np.array([cov[0, 0], cov[1, 1], cov[0, 1]])
  assert np.all(np.abs(w.mean(0) - mean) < 4.5 * se_mean), (w.mean(0), mean)
  # Euler–Maruyama bias of O(h·λ_max) is below 3% of the variances here.
  tol = 4.5 * se_cov + 0.03 * np.sqrt(cov[0, 0] * cov[1, 1])
  assert np.all(np.abs(emp - exact) < tol), (emp, exact, tol)
