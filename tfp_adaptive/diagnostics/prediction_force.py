"""The force along predictions: are a chain's predictions centred where its target's are?

For a density ``π ∝ exp(−U/τ)`` that vanishes fast enough at infinity and
any smooth function ``f`` of the state (a network's logit at one input),
integration by parts gives

``E_π[∇f·∇U] = τ · E_π[Δf]``                                  (prediction force)

The mean force of `tfp_adaptive.diagnostics.mean_force` is its case ``f = θ_i``.
A network's weights have no meaningful marginals (hidden units swap and
flip sign, chains settle in different copies), and the weights the data
pin down are few among many that the prior alone sets; what the data
set, and what a user reads, are its predictions. A chain whose
predictions' means are off by some fraction of their sds unbalances the
identity along those predictions, while every single weight can still
read in balance.

Read per prediction ``f_j`` in units of its spread,

``r_j = sd(f_j) · ⟨∇f_j·∇U − τΔf_j⟩ / ⟨|∇f_j|²⟩``,

it is the shift of ``f_j``'s mean in its sds where ``∇f_j`` lies along an
eigendirection of a Gaussian target's curvature (for a linear ``f`` the
``Δf`` term vanishes and this is exactly the mean force along ``∇f``).
The Laplacian term is essential for a curved ``f``: a network's logits
are, and ``∇f·∇U`` alone does not average to 0 at the target. For a
curved ``f`` the reading also moves with the spread: on a Gaussian
target with curvature ``H`` and ``f = θᵀAθ/2``, a chain whose covariance
is ``Σ_s`` reads ``tr(A(HΣ_s − τI))`` in the numerator, so a chain too hot
where ``f`` curves is off balance along ``f`` even with its mean right.
Either way the chain is off its target along what it predicts.

The terms come from forward-mode derivatives of the predictions, each a
forward pass over the prediction inputs: ``∇f·∇U`` along the gradient
the temperature's reading already takes, and, per Rademacher probe
``z``, ``∇f·z`` (whose square estimates ``|∇f|²``) and a Hutchinson
``Δf ≈ z·∇(∇f·z)`` as a difference of ``∇f·z`` at ``θ ± εz`` over
``2ε`` (so that kinks such as ReLUs count, as in the Laplacian form of
the temperature). Minibatch gradients add noise and no bias.

`read` gives a `tfp_adaptive.diagnostics.mean_force.Shift` whose ``coordinate``
is the prediction's flat index, and it is judged by
`tfp_adaptive.diagnostics.mean_force.verdict`: each of the ``K`` predictions'
intervals widened to the Šidák width of ``K``.
"""

import numpy as np

from tfp_adaptive.diagnostics import mean_force

__all__ = ['FORMULA', 'PROBES', 'read']

#: Rademacher probes per draw for the Hutchinson ``Δf``.
PROBES = 4

#: How a warning names the reading.
FORMULA = 'sd(f)·⟨∇f·∇U − τΔf⟩/⟨|∇f|²⟩'


def read(values, force, laplacian, squared, temperature=1.,
         shared_noise=False):
  """The `tfp_adaptive.diagnostics.mean_force.Shift` of a set of predictions along a chain.

  Args:
    values: array ``[draws, chains, K]`` of the predictions ``f_j``.
    force: array of the same shape of ``∇f_j·∇U`` (``U = −log π``; a
      minibatch gradient will do).
    laplacian: array of the same shape of unbiased estimates of ``Δf_j``.
    squared: array of the same shape of unbiased estimates of
      ``|∇f_j|²``.
    temperature: the sampling temperature ``τ``.
    shared_noise: whether the chains' gradients at a draw share their
      noise.

  Returns:
    `tfp_adaptive.diagnostics.mean_force.Shift` of the prediction furthest from
    balance; with non-finite terms, an infinite shift (judged off).
  """
  f, n, lap, sq = (np.asarray(a, np.float64) for a in (values, force,
                                                      laplacian, squared))
  size = f.shape[-1]
  if not all(np.all(np.isfinite(a)) for a in (f, n, lap, sq)):
    return mean_force.Shift(np.inf, np.inf, 0., np.inf, np.inf, 0., size, 0,
                            mean_force.interval_z(size))
  scale = sq.mean((0, 1))
  # A prediction that does not depend on the state has nothing to read.
  scale = np.where(scale > 0., scale, np.inf)
  return mean_force.read((n - temperature * lap) / scale,
                         spreads=f.reshape(-1, size).std(0),
                         shared_noise=shared_noise)
