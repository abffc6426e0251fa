"""Eight schools (TFP `JointDistribution`, non-centred) under `TransformedTransitionKernel`, against NUTS.

A corrected PSGLD chain composed with TFP's own wrapper must give the
posterior that `tfp.mcmc.NoUTurnSampler` gives on the same model (whose
configurational temperature, read through TFP's wrappers, is 1 in every
part), at the
settings the guide "Step sizes and regimes" recommends for a small
full-batch model, where the run reports no regime warning: step 1e-3,
``preconditioner_decay_rate=0.5`` (a short moving average) and
``diagonal_bias=1e-3``.

Tolerance. Both samplers run independent chains; each chain's averages of
``x`` and ``x²`` are one draw of a statistic, and the posterior mean and
standard deviation are smooth functions of their across-chain means. Their
standard errors come from the jackknife over groups of chains (delete one
group), which needs no autocorrelation model. The difference of the two
estimates must lie within 4.5 combined standard errors,
``4.5·sqrt(se_ours² + se_nuts²)``: for 20 roughly normal, independent
comparisons the chance that any exceeds 4.5 is below 1e-4. The step's own
O(h) bias is not allowed for separately; it must be below that error.
"""

import warnings

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from tests.conftest import stat_scale
from tests.mcmc.against_nuts import jackknife

tfd, tfb = tfp.distributions, tfp.bijectors

Y = np.array([28, 8, -3, 7, -1, 1, 18, 12], np.float32)
SIGMA = np.array([15, 10, 16, 11, 9, 11, 10, 18], np.float32)

MODEL = tfd.JointDistributionSequential([
    tfd.Normal(0., 5.),                               # mu
    tfd.HalfCauchy(0., 5.),                           # tau
    tfd.Sample(tfd.Normal(0., 1.), 8),                # theta_tilde
    lambda theta_tilde, tau, mu: tfd.Independent(
        tfd.Normal(mu[..., None] + tau[..., None] * theta_tilde, SIGMA), 1),
])
BIJECTORS = [tfb.Identity(), tfb.Exp(), tfb.Identity()]


def _log_prob(mu, tau, theta_tilde):
  return MODEL.log_prob([mu, tau, theta_tilde, Y])


def _start(chains):
  return [tf.zeros([chains]), tf.ones([chains]), tf.zeros([chains, 8])]


def _quantities(samples):
  """``[draws, chains, 10]``: mu, tau and the eight school effects theta_j."""
  mu, tau, tt = [np.asarray(s, np.float64) for s in samples]
  theta = mu[..., None] + tau[..., None] * tt
  return np.concatenate([mu[..., None], tau[..., None], theta], -1)


def _nuts_kernel():
  return tfp.mcmc.DualAveragingStepSizeAdaptation(
      tfp.mcmc.TransformedTransitionKernel(
          tfp.mcmc.NoUTurnSampler(_log_prob, step_size=0.3), BIJECTORS),
      num_adaptation_steps=400)


@tf.function(jit_compile=True, autograph=False)
def _nuts(chains, draws):
  return tfp.mcmc.sample_chain(draws, _start(chains), kernel=_nuts_kernel(),
                               num_burnin_steps=500, trace_fn=None,
                               seed=(1, 2))


# The documented recommended settings (guide "Step sizes and regimes"):
# inside the regime, so the run must not warn.
RECOMMENDED = {
    'psgld': lambda: tfa.mcmc.PSGLD(
        _log_prob, step_size=1e-3, preconditioner_decay_rate=0.5,
        diagonal_bias=1e-3, gamma='corrected'),
}


@pytest.mark.statistical
@pytest.mark.parametrize('name', sorted(RECOMMENDED))
def test_corrected_sampler_matches_nuts(name):
  scale = stat_scale()
  nuts_samples = _nuts(int(16 * scale), 1000)
  _nuts_reads_the_temperature_one_in_every_part(nuts_samples)
  nuts = _quantities(nuts_samples)
  kernel = tfp.mcmc.TransformedTransitionKernel(RECOMMENDED[name](),
                                                BIJECTORS)
  thin = 4
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    samples, _, results = tfa.mcmc.sample(
        kernel, _start(int(128 * scale)), num_results=8000,
        num_burnin_steps=40000 // (5 - thin), num_steps_between_results=thin,
        seed=(3, 4), chunk_size=8000, progress=False)
  assert not [w for w in caught if 'lag' in str(w.message) or
              'temperature' in str(w.message)], [str(w.message) for w in caught]
  assert int(np.sum(results.inner_results.num_nonfinite)) == 0
  ours = _quantities(samples)
  (est_o, se_o), (est_n, se_n) = jackknife(ours, 32), jackknife(nuts, 16)
  z = (est_o - est_n) / np.sqrt(se_o ** 2 + se_n ** 2)
  names = ['mu', 'tau'] + ['theta_%d' % j for j in range(8)]
  report = {'%s %s' % (k, n): (round(float(est_o[i, j]), 3),
                               round(float(est_n[i, j]), 3),
                               round(float(z[i, j]), 2))
            for i, k in enumerate(['mean', 'sd']) for j, n in enumerate(names)}
  assert np.all(np.abs(z) < 4.5), report


def _nuts_reads_the_temperature_one_in_every_part(samples):
  """The identity holds in the space NUTS samples in (log tau's included).

  Read through TFP's own wrappers, each part within 4 of its standard
  errors of 1, and no warning.
  """
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    readings = tfa.mcmc.check_temperature(_nuts_kernel(), samples)
  assert not [w for w in caught if 'temperature' in str(w.message)]
  for part in range(3):
    r = readings[part]
    assert abs(r.temperature - 1.) < 4. * r.standard_error, (part, r)
    assert r.standard_error < 0.05, (part, r)  # The test can fail.
