"""Per-draw terms of the diagnostics' identities from any gradient function: Hutchinson probes and second differences.

The temperature's Laplacian form needs ``ΔU`` and the force along
predictions needs ``Δf`` and ``|∇f|²`` at each draw. Both are read along
Rademacher probes ``z`` (``E[zᵀAz] = tr A``) as second differences of a
first derivative at ``θ ± εz``, with ``ε`` a hundredth of each part's
spread over the draws (`difference_step`): exact for a quadratic, and,
unlike a Hessian-vector product, it counts the curvature of a kink (a
Laplace prior's ``|θ|``, a ReLU) that the difference crosses.

The functions take the derivative as a callable and the state as a list
of parts, TF tensors or NumPy arrays alike: the kernels
(`tfp_adaptive.mcmc.check_temperature`, compiled, chains batched) and the
Keras ensembles (`BayesianEnsemble.check_temperature`, on the training
data in batches) read the same terms through them.
"""

__all__ = ['RELATIVE_STEP', 'combine_probes', 'difference_step', 'laplacian',
           'probe_points', 'probe_terms']

#: The second differences' step, in units of a part's spread over the draws.
RELATIVE_STEP = 1e-2


def difference_step(spread):
  """The second differences' step ``ε`` of a part whose rms spread over the draws is `spread`."""
  return RELATIVE_STEP * spread if spread > 0. else RELATIVE_STEP


def laplacian(gradient, state, probes, steps, total):
  """A Hutchinson ``ΔU ≈ zᵀ∇²U z`` at `state`, as a second difference of ``∇U`` along one probe.

  ``Σ_k z_k·(∇U(θ + ε_k z) − ∇U(θ − ε_k z))_k / 2ε_k`` over the parts
  ``k``: ``zᵀ∇²U z`` to second order, and the curvature of a kink crossed
  within ``±εz`` with its weight on average.

  Args:
    gradient: ``parts -> ∇U`` at those parts (a list over the parts).
    state: the parts of ``θ``.
    probes: one ±1 array per part.
    steps: per part, ``ε`` (`difference_step`).
    total: ``x -> sum of x over a part's event axes`` (a chain's batch
      axes kept).

  Returns:
    The estimate, shaped as `total`'s result.
  """
  up = gradient([p + e * z for p, z, e in zip(state, probes, steps)])
  down = gradient([p - e * z for p, z, e in zip(state, probes, steps)])
  return sum(total((u - d) * z) / (2. * e)
             for u, d, z, e in zip(up, down, probes, steps))


def probe_terms(derivative, probes, steps):
  """Hutchinson estimates of ``Δf`` and of ``|∇f|²``, averaged over `probes`.

  Per probe ``z`` (a list of ±1 arrays, one per part of the state):
  ``(∇f·z)²``, unbiased for ``|∇f|²``, and half the difference of
  ``∇f·(E⁻¹z)`` at ``θ ± Ez``, ``E`` each part's step in `steps`. That
  difference is ``zᵀ∇²f z`` to second order (the parts' cross terms vanish
  on average over ``z``), and as a difference rather than a second
  derivative it counts the curvature of kinks crossed within ``±Ez``.

  Args:
    derivative: ``(offsets, tangents) -> ∇f·tangents`` at ``θ + offsets``
      (``offsets`` `None`: at ``θ``), lists over the parts; TF tensors or
      NumPy arrays alike.
    probes: list of probes, each a list over the parts.
    steps: per part, the step ``ε`` (a hundredth of its spread).

  Returns:
    ``(laplacian, squared)``, each shaped as `derivative`'s result.
  """
  return combine_probes([derivative(offsets, tangents)
                         for offsets, tangents in probe_points(probes,
                                                               steps)])


def probe_points(probes, steps):
  """The ``(offsets, tangents)`` at which `probe_terms` takes ``∇f·tangents``, three per probe.

  For callers that evaluate them all at once (stacked); `combine_probes`
  turns the results, in this order, into `probe_terms`' pair.
  """
  points = []
  for z in probes:
    scaled = [zk / e for zk, e in zip(z, steps)]
    points += [(None, z), ([e * zk for zk, e in zip(z, steps)], scaled),
               ([-e * zk for zk, e in zip(z, steps)], scaled)]
  return points


def combine_probes(derivatives):
  """``(laplacian, squared)`` from ``∇f·tangents`` at `probe_points`, in its order."""
  here, up, down = derivatives[0::3], derivatives[1::3], derivatives[2::3]
  laplacian = sum((u - d) / 2. for u, d in zip(up, down))
  squared = sum(a * a for a in here)
  return laplacian / len(here), squared / len(here)
