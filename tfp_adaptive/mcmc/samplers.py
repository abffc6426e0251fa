"""The public SG-MCMC kernels: SGLD, PSGLD, WenzelSGLD, MongeSGRLD, ShampooSGRLD, AdamSGLD.

All share `AdaptiveSGMCMC.one_step`; each only chooses its preconditioner.
Arguments common to all of them:

- ``target_log_prob_fn``: callable of the state parts returning ``û(θ)``,
  one value per chain (leading state axes equal its output shape). A
  `tfp_adaptive.minibatch.MinibatchLogProb` also receives each step's seed.
  The metric statistics are built from ∇ of this function (∇û).
- ``step_size``: ``h``, a float, a `Tensor`, or a callable of the int32
  step number (see `tfp_adaptive.schedules`).
- ``temperature``: ``τ > 0`` (1 = Bayes posterior).
- ``gamma``: ``'none' | 'original' | 'corrected'`` (see
  `tfp_adaptive.core.gamma`).
- ``gamma_estimator``: ``'hutchinson'`` (default) or ``'exact'`` (small D
  only).
- ``gamma_probability``: ``p`` in (0, 1], default 1: a step computes Γ with
  probability ``p`` and then adds ``Γ/p`` (unbiased; the second-order pass
  runs on a fraction ``p`` of the steps, see
  `tfp_adaptive.core.gamma.gradient_and_gamma`).
- ``nonfinite``: ``'reject'`` (default), ``'reject_at_proposal'``,
  ``'raise'`` or ``'ignore'``. A rejected chain returns to its last good
  state and draws fresh noise; ``kernel_results.num_nonfinite`` counts
  rejections and ``num_unmoved`` consecutive ones. ``'reject_at_proposal'``
  also evaluates the log-prob at the proposal (one more forward pass), so a
  state where it is -inf never enters the trace; with ``'reject'`` it is
  undone one step later. The proposal is tested through the sum of its
  entries (`tfp_adaptive.core.tensors.finite_chains`). ``'raise'``: outside
  XLA the step fails, and `tfp_adaptive.mcmc.sample` raises after each
  compiled chunk.
- ``name``: optional name scope.
"""

from tfp_adaptive.core import algorithms
from tfp_adaptive.mcmc import kernel

__all__ = ['AdamSGLD', 'MongeSGRLD', 'PSGLD', 'SGLD', 'ShampooSGRLD', 'WenzelSGLD']


class SGLD(kernel.AdaptiveSGMCMC):
  """Stochastic gradient Langevin dynamics (Welling & Teh 2011), M = I.

  ``θ' = θ + (h/2) ∇û + sqrt(h τ) ξ``; the lecture's ``w + η∇û + sqrt(2ητ)ξ``
  with ``h = 2η``.

  Example:
    >>> import tensorflow as tf
    >>> import tensorflow_probability as tfp
    >>> import tfp_adaptive as tfa
    >>> k = tfa.mcmc.SGLD(lambda x: -0.5 * x**2, step_size=0.1)
    >>> xs = tfp.mcmc.sample_chain(100, tf.zeros([8]), kernel=k,
    ...                            trace_fn=None, seed=(1, 2))
  """

  def __init__(self, target_log_prob_fn, step_size, temperature=1.,
               nonfinite='reject', name=None):
    parameters = dict(target_log_prob_fn=target_log_prob_fn,
                      step_size=step_size, temperature=temperature,
                      nonfinite=nonfinite, name=name)
    super().__init__(target_log_prob_fn, step_size,
                     algorithms.sgld(), temperature, 'none',
                     'hutchinson', nonfinite, parameters)


class PSGLD(kernel.AdaptiveSGMCMC):
  """Preconditioned SGLD (Li et al. 2016) with Rensmeyer & Niggemann's Γ fix.

  ``V_t = α V_{t-1} + (1-α)(∇û)²``, ``M = diag(1/sqrt(diagonal_bias + V))``
  (TFP; Rensmeyer Alg. 1 with ``diagonal_bias = λ²``), or Li et al.'s
  ``diag(1/(diagonal_bias + sqrt(V)))`` with ``bias_outside_sqrt=True``.
  ``gamma='corrected'`` is Algorithm 1 of Rensmeyer & Niggemann (2025);
  ``gamma='original'`` is what TFP's pSGLD optimizer computes. ``V_0 = 0``.

  Args:
    preconditioner_decay_rate: α in [0, 1), default 0.95 (as TFP).
    diagonal_bias: >= 0, default 1e-8 (as TFP). It bounds the metric,
      ``M ≤ diagonal_bias^{-1/2}``; at 1e-8 ``M`` and the corrected Γ (which
      grows like ``V^{-3/2}`` where the gradient vanishes) are practically
      unbounded, and on networks with flat directions a corrected chain can
      run away: use e.g. 1e-3 there (docs, "Choosing a sampler").
    bias_outside_sqrt: Python bool, default False.
    (and the common arguments of the module docstring)
  """

  def __init__(self, target_log_prob_fn, step_size,
               preconditioner_decay_rate=0.95, diagonal_bias=1e-8,
               bias_outside_sqrt=False, temperature=1., gamma='corrected',
               gamma_estimator='hutchinson', gamma_probability=1.,
               nonfinite='reject', name=None):
    parameters = dict(locals())
    parameters.pop('self')
    parameters.pop('__class__', None)
    algorithm = algorithms.psgld(preconditioner_decay_rate, diagonal_bias,
                           bias_outside_sqrt)
    super().__init__(target_log_prob_fn, step_size, algorithm, temperature, gamma,
                     gamma_estimator, nonfinite, parameters)


class WenzelSGLD(kernel.AdaptiveSGMCMC):
  """Layer-wise preconditioned SGLD of Wenzel et al. (2020), one scale per part.

  Args:
    preconditioner_decay_rate: EMA rate of ``(∇û)²`` in [0, 1), default 0.95.
    update_interval: int >= 1, steps between refreshes of the layer scales
      (Wenzel et al. refresh once per epoch), default 100.
    diagonal_bias: ε >= 0 in ``σ_l = sqrt(ε + mean(V_l))``, default 1e-8.
  """

  def __init__(self, target_log_prob_fn, step_size,
               preconditioner_decay_rate=0.95, update_interval=100,
               diagonal_bias=1e-8, temperature=1., gamma='corrected',
               gamma_estimator='hutchinson', gamma_probability=1.,
               nonfinite='reject', name=None):
    parameters = dict(locals())
    parameters.pop('self')
    parameters.pop('__class__', None)
    algorithm = algorithms.wenzel(preconditioner_decay_rate, update_interval,
                            diagonal_bias)
    super().__init__(target_log_prob_fn, step_size, algorithm, temperature, gamma,
                     gamma_estimator, nonfinite, parameters)


class MongeSGRLD(kernel.AdaptiveSGMCMC):
  """SGRLD in the Monge metric (Yu et al. 2023, Sec. 3.1), O(D) per step.

  ``ℓ_t = λ ℓ_{t-1} + (1-λ) ∇û``, ``M = I - α²ℓℓᵀ/(1 + α²‖ℓ‖²)``.

  Args:
    alpha2: α² >= 0, default 1.0 (0 is SGLD).
    preconditioner_decay_rate: λ in [0, 1), default 0.9.
    fallback_threshold: > 0; a chain with ``‖M∇û‖`` above it uses M = I for
      that step (Yu et al. App. A.4), default 1000.
  """

  def __init__(self, target_log_prob_fn, step_size, alpha2=1.,
               preconditioner_decay_rate=0.9, fallback_threshold=1000.,
               temperature=1., gamma='corrected', gamma_estimator='hutchinson',
               gamma_probability=1., nonfinite='reject', name=None):
    parameters = dict(locals())
    parameters.pop('self')
    parameters.pop('__class__', None)
    algorithm = algorithms.monge(alpha2, preconditioner_decay_rate,
                           fallback_threshold)
    super().__init__(target_log_prob_fn, step_size, algorithm, temperature, gamma,
                     gamma_estimator, nonfinite, parameters)


class ShampooSGRLD(kernel.AdaptiveSGMCMC):
  """SGRLD in the Shampoo metric (Yu et al. 2023, Sec. 3.2).

  Args:
    preconditioner_decay_rate: λ in [0, 1) of the Kronecker factors, default
      0.9995 (Yu et al.'s funnel).
    epsilon: persistent ridge ε > 0 added at every root computation, default
      1e-6.
    update_interval: int >= 1, steps between eigendecompositions, default 1.
    max_dim: modes larger than this use a diagonal factor, default 1024.
    block_size: `None` (default) or an int >= 2: axes longer than this are
      split into equal blocks (of their largest divisor <= `block_size`),
      each block with its own factors (Yu et al. Sec. 3.2, Anil et al.
      2021); cuts the cost of a step and of an eigendecomposition.

  ``gamma='corrected'`` matches its predicted density on 1-D and Gaussian
  targets but diverged on an MLP (see `tfp_adaptive.keras.optimizers.
  ShampooSGRLD`): Γ differentiates the inverse roots, which blow up along
  nearly singular factor directions.
  """

  def __init__(self, target_log_prob_fn, step_size,
               preconditioner_decay_rate=0.9995, epsilon=1e-6,
               update_interval=1, max_dim=1024, temperature=1.,
               gamma='corrected', gamma_estimator='hutchinson',
               gamma_probability=1., nonfinite='reject', name=None,
               block_size=None):
    parameters = dict(locals())
    parameters.pop('self')
    parameters.pop('__class__', None)
    algorithm = algorithms.shampoo(preconditioner_decay_rate, epsilon,
                                   update_interval, max_dim, block_size)
    super().__init__(target_log_prob_fn, step_size, algorithm, temperature, gamma,
                     gamma_estimator, nonfinite, parameters)


class AdamSGLD(kernel.AdaptiveSGMCMC):
  """Adam-SGLD (Kim, Song & Liang 2022; Rensmeyer & Niggemann 2025, eq. 28–31).

  ``θ' = θ + (h/2)(∇û + a M m) + sqrt(h τ) ξ``: not Riemannian, no Γ; its
  1-D stationary density is Rensmeyer eq. (35), not the target.

  Args:
    preconditioner_decay_rate: α of ``V`` in [0, 1), default 0.9.
    momentum_decay_rate: β of ``m`` in [0, 1), default 0.5.
    drift_scale: Kim's ``a`` >= 0, default 1.0.
    diagonal_bias: λ >= 0, default 0.1.
    bias_outside_sqrt: default True (Adam's and Rensmeyer's eq. 29 form).
  """

  def __init__(self, target_log_prob_fn, step_size,
               preconditioner_decay_rate=0.9, momentum_decay_rate=0.5,
               drift_scale=1., diagonal_bias=0.1, bias_outside_sqrt=True,
               temperature=1., nonfinite='reject', name=None):
    parameters = dict(locals())
    parameters.pop('self')
    parameters.pop('__class__', None)
    algorithm = algorithms.adam_sgld(preconditioner_decay_rate, momentum_decay_rate,
                               drift_scale, diagonal_bias, bias_outside_sqrt)
    super().__init__(target_log_prob_fn, step_size, algorithm, temperature, 'none',
                     'hutchinson', nonfinite, parameters)
