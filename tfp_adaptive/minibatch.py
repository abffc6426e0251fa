"""Stochastic log-posteriors û(θ) = (N/m) Σ_batch log p(y|x,θ) + log p(θ) from in-memory data."""

import contextlib
import threading

import tensorflow as tf

from tfp_adaptive import validation

__all__ = ['MinibatchLogProb', 'minibatch_log_prob', 'step_seed']

# The batch seeds of the kernel steps being traced, innermost last (per
# thread): `step_seed`.
_STEP_SEEDS = threading.local()


@contextlib.contextmanager
def step_seed(seed):
  """While a kernel step is traced, the seed a `MinibatchLogProb` called without one takes.

  A wrapper that passes the kernel a target of its own, as
  `tfp.mcmc.TransformedTransitionKernel` does (the target of the
  transformed state, which calls ours without the seed), would otherwise
  make every step evaluate all the data. The kernels of `tfp_adaptive.mcmc`
  trace each step inside this context, so such a step still draws its
  minibatch from the step's seed; outside a step (a wrapper's
  `bootstrap_results`, `tfp_adaptive.mcmc.check_temperature`) a call
  without a seed still reads all the data.
  """
  stack = getattr(_STEP_SEEDS, 'stack', None)
  if stack is None:
    stack = _STEP_SEEDS.stack = []
  entry = _StepSeed(seed)
  stack.append(entry)
  try:
    yield entry
  finally:
    stack.pop()


class _StepSeed(object):
  """A `step_seed` context's seed, and whether a `MinibatchLogProb` drew from it (`drawn`)."""

  def __init__(self, seed):
    self.seed = seed
    self.drawn = False


def _current_step_seed():
  """The innermost `step_seed`'s seed, marked as drawn; `None` outside one."""
  stack = getattr(_STEP_SEEDS, 'stack', None)
  if not stack:
    return None
  stack[-1].drawn = True
  return stack[-1].seed


class MinibatchLogProb(object):
  """Callable ``û(*state, seed)`` drawing its minibatch from a stateless seed.

  The kernels of `tfp_adaptive.mcmc` recognise this type and pass each step's
  seed, so the minibatch is drawn inside the compiled chain (no Python loop),
  and the gradient and Γ of one step see the same minibatch. Indices are drawn
  uniformly with replacement.

  Args:
    log_likelihood_fn: callable ``(state_parts_list, batch) -> [..., m]``
      log-likelihood of each example of ``batch`` (leading state axes are
      chains; the returned last axis runs over the ``m`` examples).
    data: a `Tensor` or a (nested) structure of them with leading axis N.
    batch_size: ``m``, an int in [1, N].
    log_prior_fn: optional callable ``(state_parts_list) -> [...]``.
    gamma_batch_size: optional int in [1, batch_size]: Γ's second-order pass
      (the Hessian-vector product) uses only the first this many examples of
      each step's minibatch, rescaled by ``N / gamma_batch_size``; the
      gradient and the metric still use all of it. The draws are i.i.d., so
      these examples are a uniform subset and Γ stays unbiased at about
      ``gamma_batch_size / batch_size`` of the second-order cost.
  """

  needs_seed = True

  def __init__(self, log_likelihood_fn, data, batch_size, log_prior_fn=None,
               gamma_batch_size=None):
    if not callable(log_likelihood_fn):
      raise TypeError('`log_likelihood_fn` must be callable. Received: %r'
                      % (log_likelihood_fn,))
    if log_prior_fn is not None and not callable(log_prior_fn):
      raise TypeError('`log_prior_fn` must be callable or None. Received: %r'
                      % (log_prior_fn,))
    self.data = tf.nest.map_structure(tf.convert_to_tensor, data)
    self.num_examples = int(tf.nest.flatten(self.data)[0].shape[0])
    self.batch_size = validation.check_int('batch_size', batch_size)
    if self.batch_size > self.num_examples:
      raise ValueError('`batch_size` must lie in [1, %d] (the data size). '
                       'Received: batch_size=%d'
                       % (self.num_examples, batch_size))
    self.log_likelihood_fn = log_likelihood_fn
    self.log_prior_fn = log_prior_fn
    if gamma_batch_size is not None:
      validation.check_int('gamma_batch_size', gamma_batch_size)
      if gamma_batch_size > self.batch_size:
        raise ValueError('`gamma_batch_size` must lie in [1, %d] (the '
                         '`batch_size`). Received: gamma_batch_size=%d'
                         % (self.batch_size, gamma_batch_size))
    self.gamma_batch_size = gamma_batch_size

  def __call__(self, *parts, seed=None, rows=None):
    """``û(θ)`` on the seed's minibatch (all data without a seed).

    ``rows=k`` keeps the minibatch's first ``k`` examples, scaled by ``N/k``.
    Called without a seed inside a kernel step (through a wrapper's target,
    `step_seed`), it takes the step's seed.
    """
    parts = list(parts)
    if seed is None:
      seed = _current_step_seed()
    if seed is None:
      batch = self.data
      scale = 1.
    else:
      idx = tf.random.stateless_uniform(
          [self.batch_size], seed=seed, minval=0, maxval=self.num_examples,
          dtype=tf.int32, alg='philox')
      if rows is not None:
        idx = idx[:rows]
      batch = tf.nest.map_structure(lambda d: tf.gather(d, idx), self.data)
      scale = self.num_examples / int(idx.shape[0])
    ll = tf.reduce_sum(self.log_likelihood_fn(parts, batch), axis=-1)
    out = tf.cast(scale, ll.dtype) * ll
    if self.log_prior_fn is not None:
      out = out + self.log_prior_fn(parts)
    return out


def minibatch_log_prob(log_likelihood_fn, data, batch_size, log_prior_fn=None,
                       gamma_batch_size=None):
  """Builds a `MinibatchLogProb`; without a seed it evaluates the full data."""
  return MinibatchLogProb(log_likelihood_fn, data, batch_size, log_prior_fn,
                          gamma_batch_size)
