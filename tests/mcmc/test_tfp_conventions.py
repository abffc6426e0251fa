"""TFP's conventions, written as the TFP tutorials write client code: structured states and minibatch targets through wrappers.

A state may be any nest TFP's kernels take: a tensor, a list or tuple of
parts, a namedtuple or a joint distribution's `StructTuple`, a dict. The
target is called as TFP's kernels call it (``fn(*state)`` for a list or
tuple, ``fn(state)`` otherwise) and the chain comes back in the same nest.
The nest changes nothing else: a chain of a namedtuple or dict state is,
draw for draw, the chain of its list of parts. A pinned joint
distribution's `StructTuple` in its default event space, against NUTS:
`test_hierarchical_radon`.
"""

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_adaptive as tfa

tfd, tfb = tfp.distributions, tfp.bijectors

State = collections.namedtuple('State', ['loc', 'weights'])


def _log_prob(loc, weights):
  """A Gaussian in two parts (float64, chains ``[2, 3]``)."""
  return (-0.5 * loc ** 2 -
          0.5 * tf.reduce_sum((weights - 1.) ** 2 / 4., axis=-1))


def _run(kernel, state, steps=30):
  return tf.function(lambda: tfp.mcmc.sample_chain(
      steps, state, kernel=kernel, trace_fn=None, seed=(3, 4)))()


@pytest.mark.slow
def test_a_nest_samples_what_its_list_of_parts_samples():
  """A namedtuple and a dict state (float64, a rank-2 batch of chains) come back in their nest, each draw equal to the list state's.

  The nest is packed and unpacked by the kernels' shared base; PSGLD's
  metric state follows the parts.
  """
  cls = lambda fn, h: tfa.mcmc.PSGLD(fn, h, preconditioner_decay_rate=0.95)
  loc = tf.zeros([2, 3], tf.float64)
  weights = tf.zeros([2, 3, 4], tf.float64)
  as_list = _run(cls(_log_prob, 1e-2), [loc, weights])
  as_tuple = _run(cls(_log_prob, 1e-2), State(loc, weights))
  as_dict = _run(cls(lambda d: _log_prob(**d), 1e-2),
                 {'loc': loc, 'weights': weights})
  assert isinstance(as_tuple, State) and isinstance(as_dict, dict)
  samples, _, _ = tfa.mcmc.sample(cls(_log_prob, 1e-2), State(loc, weights),
                                  30, seed=(3, 4), progress=False,
                                  check_temperature=False)
  assert isinstance(samples, State)  # `tfa.mcmc.sample` keeps it too.
  for i, name in enumerate(State._fields):
    assert as_list[i].dtype == tf.float64
    assert as_list[i].shape[:3] == [30, 2, 3]
    np.testing.assert_array_equal(getattr(as_tuple, name), as_list[i])
    np.testing.assert_array_equal(as_dict[name], as_list[i])
  # The reading calls the target at the draws as the kernel does.
  read = lambda kernel, draws: tfa.mcmc.check_temperature(
      kernel, draws, warn=False)['overall'].temperature
  listed = read(cls(_log_prob, 1e-2), as_list)
  assert np.isfinite(listed)
  assert read(cls(lambda d: _log_prob(**d), 1e-2), as_dict) == listed


def _minibatch_target():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(200, 3)).astype(np.float32)
  y = (x @ np.array([1., -1., 0.5], np.float32) +
       rng.normal(size=200).astype(np.float32))
  return tfa.minibatch_log_prob(
      lambda parts, batch: -0.5 * (batch[1] - tf.linalg.matvec(
          batch[0], parts[0])) ** 2,
      (x, y), batch_size=20,
      log_prior_fn=lambda parts: -0.5 * tf.reduce_sum(parts[0] ** 2, -1))


@pytest.mark.slow
def test_minibatches_reach_the_target_through_transformed_transition_kernel():
  """`tfa.minibatch_log_prob` inside `TransformedTransitionKernel` (identity bijector) draws each step's minibatch: its chain is the bare kernel's, draw for draw, not a full-data chain."""
  target = _minibatch_target()
  init = tf.zeros([4, 3])
  bare = _run(tfa.mcmc.SGLD(target, 1e-3), init)
  wrapped = _run(tfp.mcmc.TransformedTransitionKernel(
      tfa.mcmc.SGLD(target, 1e-3), tfb.Identity()), init)
  np.testing.assert_allclose(wrapped, bare, rtol=1e-5, atol=1e-6)
  # A full-data chain (the same kernel on the exact log-posterior) differs.
  full = _run(tfa.mcmc.SGLD(lambda w: _exact(target, w), 1e-3), init)
  assert np.max(np.abs(np.asarray(full) - np.asarray(bare))) > 1e-3


def _exact(target, w):
  """The exact log-posterior of `_minibatch_target`, written out."""
  x, y = target.data
  residuals = y - tf.einsum('nd,...d->...n', x, w)
  return (-0.5 * tf.reduce_sum(residuals ** 2, -1) -
          0.5 * tf.reduce_sum(w ** 2, -1))


def test_a_call_without_a_seed_outside_a_step_reads_all_the_data():
  """Outside a kernel step (a wrapper's `bootstrap_results`, a reading), a `MinibatchLogProb` called without a seed is the exact log-posterior."""
  target = _minibatch_target()
  w = tf.constant([[0.3, -0.2, 0.1]])
  np.testing.assert_allclose(target(w), _exact(target, w), rtol=1e-5)
