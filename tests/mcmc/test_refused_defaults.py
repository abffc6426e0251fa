"""Defaults a kernel cannot stand behind are refused at construction, naming the parameters to choose.

On a target without minibatch noise, a metric that keeps adapting at its
default moving average is biased whatever the step (`benchmarks.defaults`
measures it); the kernel says so when it is built, not after a run.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa
from tests.conftest import full_size_only

REFUSED = ['PSGLD', 'MongeSGRLD', 'ShampooSGRLD']


def normal(x):
  return -0.5 * tf.reduce_sum(x ** 2, -1)


def _minibatch_target():
  x = np.random.default_rng(0).normal(size=(40, 2)).astype(np.float32)
  return tfa.minibatch_log_prob(
      lambda parts, batch: -0.5 * tf.reduce_sum(
          (batch - parts[0][..., None, :]) ** 2, -1),
      x, batch_size=8, log_prior_fn=lambda parts: normal(parts[0]))


@pytest.mark.parametrize('name', REFUSED)
def test_the_default_moving_average_on_exact_gradients_is_refused(name):
  with pytest.raises(ValueError) as raised:
    getattr(tfa.mcmc, name)(normal, 1e-2)
  message = str(raised.value)
  for said in (name, 'preconditioner_decay_rate', 'num_adaptation_steps',
               'tfa.minibatch_log_prob'):
    assert said in message, (said, message)


@pytest.mark.parametrize('name', REFUSED)
def test_a_choice_or_minibatches_are_accepted_and_copies_pass(name):
  cls = getattr(tfa.mcmc, name)
  frozen = cls(normal, 1e-2, num_adaptation_steps=100, gamma='none')
  chosen = cls(normal, 1e-2, preconditioner_decay_rate=0.5)
  cls(_minibatch_target(), 1e-2)  # Minibatch noise: the defaults stand.
  # TFP's wrappers rebuild the kernel from its parameters.
  for kernel in (frozen, chosen):
    assert kernel.copy().parameters == kernel.parameters
    wrapped = tfp.mcmc.TransformedTransitionKernel(kernel, tfp.bijectors.Exp())
    assert type(wrapped.inner_kernel) is cls  # pylint: disable=unidiomatic-typecheck


@pytest.mark.parametrize('name', ['SGLD', 'WenzelSGLD', 'AdamSGLD', 'SGHMC',
                                  'SGNHT'])
def test_kernels_without_the_bias_keep_their_defaults(name):
  getattr(tfa.mcmc, name)(normal, 1e-2)


def test_the_refusal_follows_the_argument_checks():
  """A bad argument is named first, whatever the defaults."""
  with pytest.raises(ValueError, match='gamma'):
    tfa.mcmc.PSGLD(normal, 1e-2, gamma='fixed')


@pytest.mark.slow
@pytest.mark.parametrize('name, input_scales', [
    # CI runs Monge on the network as it comes and Shampoo on the badly
    # scaled copy, where it failed most at Yu et al.'s ridge (its XLA roots
    # cost about 30 ms a step and chain here); the other two at full size.
    ('MongeSGRLD', (1., 1.)),
    pytest.param('MongeSGRLD', (30., 1. / 30.), marks=full_size_only()),
    pytest.param('ShampooSGRLD', (1., 1.), marks=full_size_only()),
    ('ShampooSGRLD', (30., 1. / 30.))])
def test_the_riemannian_defaults_take_no_nonfinite_step_on_a_network(
    name, input_scales):
  """The panel's Bayesian MLP with minibatches, and a badly scaled copy (inputs ×30 and ÷30).

  At their defaults, corrected, with the step set by TFP's
  `SimpleStepSizeAdaptation` (the documented rule), no chain rejects a
  step as non-finite. (Shampoo at Yu et al.'s ridge, ``epsilon=1e-6``,
  rejects up to 15% of its steps here at ``h = 1e-3``.)
  """
  from benchmarks import bayesian_mlp  # pylint: disable=g-import-not-at-top
  target = bayesian_mlp.Target(input_scales=input_scales)
  kernel = tfp.mcmc.SimpleStepSizeAdaptation(
      getattr(tfa.mcmc, name)(target.minibatch, 1e-3), 250)
  # Shampoo's roots cost about 30 ms a step and chain here: fewer chains.
  chains = 2 if name == 'ShampooSGRLD' else 8

  @tf.function(jit_compile=True, autograph=False)
  def run():
    return tfp.mcmc.sample_chain(
        100, target.init(chains, 5), kernel=kernel, num_burnin_steps=300,
        trace_fn=lambda _, r: r.inner_results.num_nonfinite, seed=(1, 2))
  samples, nonfinite = run()
  assert int(np.sum(nonfinite[-1])) == 0
  assert np.all(np.isfinite(samples))
