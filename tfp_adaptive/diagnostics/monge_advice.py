"""A Monge-metric chain that crawls: pulled the same way all run, slowed along that pull by its metric, and the ``alpha2`` that frees it.

The Monge metric ``M = I − α² ℓℓᵀ/(1 + α²‖ℓ‖²)`` (``ℓ`` the moving average
of the gradient) divides a step along ``ℓ`` by ``1 + α²‖ℓ‖²``. Near the
target the gradient keeps changing direction, ``ℓ`` averages it out and
the metric is close to ``I``. A chain still on its way to the target feels
a gradient ``g`` that points the same way step after step: then ``ℓ ≈ g``,
and its drift along the pull, ``h g/(1 + α²‖g‖²)``, is at most ``h/(2α)``
per step whatever the gradient. On a posterior from a few hundred data
points, where ``‖g‖`` far from the mode runs into the hundreds, a chain
started there moves thousands of times more slowly than SGLD at the same
step, and reads "not settled" run after run: no length that a user can
afford, and no frozen metric (frozen along that same ``ℓ``), brings it in.

The reading needs only the gradients the temperature's reading already
takes (`tfp_adaptive.mcmc.check_temperature`): per chain, the mean of
``∇log p`` over the draws read, ``ḡ``, and its fluctuation about that
mean. A chain whose ``‖ḡ‖²`` outweighs its fluctuation ``⟨‖g − ḡ‖²⟩`` is
pulled more than it is shaken: it has not arrived (at its target the
mean gradient vanishes, `tfp_adaptive.diagnostics.mean_force`). Where
that holds and ``α²‖ḡ‖²`` exceeds `CRAWL` (``ḡ`` in the units the metric
averages), the advice is ``alpha2`` about ``1/(α²‖ḡ‖²)`` times smaller, so that the metric at most halves the step
along the pull; ``alpha2 = 0`` is SGLD.
"""

import collections

import numpy as np

from tfp_adaptive.diagnostics import advice as advice_lib

__all__ = ['CRAWL', 'Pull', 'advice', 'read']

#: ``α²‖ḡ‖²`` beyond which a chain pulled one way is said to crawl: its
#: steps along the pull at least this many times shorter than SGLD's.
CRAWL = 10.


Pull = collections.namedtuple('Pull', ['pull', 'shake'])
Pull.__doc__ = """The chains' mean ``‖ḡ‖²`` (`pull`) and mean ``⟨‖g − ḡ‖²⟩`` (`shake`), from `read`."""


def read(grads, chain_ndims):
  """The pull on the chains from their gradients at the draws: a `Pull`.

  Args:
    grads: list of arrays ``[draws, chains..., event...]``, ``∇log p`` of
      each state part at each draw (one chain per index of the chain axes).
    chain_ndims: the number of chain axes.

  Returns:
    `Pull`: the mean over chains of ``‖ḡ‖²`` (``ḡ`` the chain's mean
    gradient over its draws, all parts together) and of its fluctuation
    ``⟨‖g − ḡ‖²⟩``; not finite when a chain left the target (`advice` is
    then `None`: the non-finite reading is told elsewhere).
  """
  pull = shake = 0.
  with np.errstate(invalid='ignore', over='ignore'):  # A chain that left.
    for g in grads:
      g = np.asarray(g, np.float64)
      g = g.reshape(g.shape[:1 + chain_ndims] + (-1,))
      mean = g.mean(0)
      pull = pull + np.sum(mean ** 2, -1)
      shake = shake + np.mean(np.sum((g - mean) ** 2, -1), 0)
  return Pull(float(np.mean(pull)), float(np.mean(shake)))


def advice(pull, alpha2, gradient_scale=1.):
  """The warning for chains that crawl in the Monge metric (an `Advice` with ``alpha2`` lowered), else `None`.

  Args:
    pull: a `Pull` (`read`).
    alpha2: the sampler's ``α²``.
    gradient_scale: the gradient the metric averages, over the one read:
      1 for the kernels (both ``∇log p``); ``1/N`` for the Keras
      optimizers, whose metric averages the gradient of the mean loss
      over a batch while the reading takes the posterior's.
  """
  alpha2 = float(alpha2)
  slowed = alpha2 * float(gradient_scale) ** 2 * pull.pull
  if not (np.isfinite(slowed) and pull.pull > pull.shake and
          slowed > CRAWL):
    return None
  factor = 1. / slowed
  return advice_lib.Advice(
      'the chains are pulled the same way through the whole run (the mean '
      'of ∇log p over the draws, ‖ḡ‖² = %.3g, outweighs its fluctuation, '
      '%.3g): they have not arrived. Along that pull the Monge metric '
      'divides each step by 1 + α²‖ℓ‖² ≈ %.3g (ℓ, the moving average of the '
      'gradient, follows ḡ), so they crawl towards their '
      'target at most about step_size/(2α) a step, and neither a longer run '
      'nor a metric frozen along the pull brings them in. Lower `alpha2` '
      'about %.3gx (to about %.3g, so that the metric at most halves a step '
      'along the pull; 0 is SGLD), then read the run again.'
      % (pull.pull, pull.shake, 1. + slowed, slowed, alpha2 * factor),
      (advice_lib.Change('alpha2', factor=factor),))
