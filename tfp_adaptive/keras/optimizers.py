"""Keras 3 SG-MCMC optimizers: SGLD, PSGLD, WenzelSGLD, MongeSGRLD, ShampooSGRLD, AdamSGLD.

Each only names its hyperparameters (TFP-style, as the kernels of
`tfp_adaptive.mcmc`) and builds its `tfp_adaptive.core.algorithms.Algorithm`;
the update is `SamplerOptimizer`'s. Common arguments are documented there:
``learning_rate, data_size, burnin, temperature, gamma, gamma_estimator,
nonfinite, seed, name``.

Example:
  >>> import keras, tfp_adaptive as tfa
  >>> model.compile(optimizer=tfa.keras.optimizers.PSGLD(
  ...     1e-3, data_size=len(x), gamma='corrected'), loss='...')
  >>> tfa.keras.enable_gamma(model)          # Γ needs the loss
  >>> model.fit(x, y, callbacks=[tfa.keras.SampleCollector()])
"""

import warnings

import keras

from tfp_adaptive.core import algorithms
from tfp_adaptive.keras.optimizer_base import SamplerOptimizer

__all__ = ['AdamSGLD', 'MongeSGRLD', 'PSGLD', 'SGLD', 'SamplerOptimizer',
           'ShampooSGRLD', 'WenzelSGLD']

_register = keras.saving.register_keras_serializable(package='tfp_adaptive')


@_register
class SGLD(SamplerOptimizer):
  """SGLD (Welling & Teh 2011): ``Δθ = -(lr/2) N g + N(0, lr τ)``."""

  _supports_gamma = False

  def __init__(self, learning_rate=1e-3, **kwargs):
    super().__init__(learning_rate, **kwargs)

  def _make_algorithm(self):
    return algorithms.sgld()


@_register
class PSGLD(SamplerOptimizer):
  """pSGLD, mirroring `tfp.optimizer.StochasticGradientLangevinDynamics`.

  ``V ← α V + (1-α) g²`` (``V_0 = 1`` as TFP), ``M = 1/sqrt(diagonal_bias +
  V)`` (or Li et al.'s ``1/(diagonal_bias + sqrt(V))`` with
  ``bias_outside_sqrt=True``), ``Δθ = -(lr/2)(N M g − τ c Γ) + N(0, lr τ M)``
  (Li et al. 2016; Rensmeyer & Niggemann 2025, Algorithm 1 for
  ``gamma='corrected'``). Same names and defaults as TFP:
  ``preconditioner_decay_rate=0.95, data_size=1, burnin=25,
  diagonal_bias=1e-8``. ``gamma='original'`` is TFP's intended drift (TFP's
  own optimizer drops it on TF2 resource variables).

  TFP's ``diagonal_bias=1e-8`` leaves ``M`` unbounded where the gradient
  vanishes, and Γ (the metric's divergence) grows like ``V^{-3/2}`` there;
  in flat directions of a network's posterior (e.g. ReLU layers' scale
  symmetry under a horseshoe prior) a corrected chain can run away. For
  sampling networks use a bounded metric, ``M ≤ diagonal_bias^{-1/2}``:
  ``examples/keras_digits.py`` uses 1e-3.
  """

  _default_burnin = 25

  def __init__(self, learning_rate=1e-3, preconditioner_decay_rate=0.95,
               diagonal_bias=1e-8, bias_outside_sqrt=False, gamma='corrected',
               **kwargs):
    super().__init__(
        learning_rate, hyperparameters=dict(
            preconditioner_decay_rate=preconditioner_decay_rate,
            diagonal_bias=diagonal_bias,
            bias_outside_sqrt=bias_outside_sqrt),
        gamma=gamma, **kwargs)

  def _make_algorithm(self):
    return algorithms.psgld(self.preconditioner_decay_rate, self.diagonal_bias,
                            self.bias_outside_sqrt, initial_value=1.)


@_register
class WenzelSGLD(SamplerOptimizer):
  """Layer-wise preconditioned SGLD (Wenzel et al. 2020), one scale per variable."""

  def __init__(self, learning_rate=1e-3, preconditioner_decay_rate=0.95,
               update_interval=100, diagonal_bias=1e-8, gamma='corrected',
               **kwargs):
    super().__init__(
        learning_rate, hyperparameters=dict(
            preconditioner_decay_rate=preconditioner_decay_rate,
            update_interval=update_interval,
            diagonal_bias=diagonal_bias),
        gamma=gamma, **kwargs)

  def _make_algorithm(self):
    return algorithms.wenzel(self.preconditioner_decay_rate,
                             self.update_interval, self.diagonal_bias)


@_register
class MongeSGRLD(SamplerOptimizer):
  """SGRLD in the Monge metric (Yu et al. 2023, Sec. 3.1), from the loss gradient."""

  def __init__(self, learning_rate=1e-3, alpha2=1.,
               preconditioner_decay_rate=0.9, fallback_threshold=1000.,
               gamma='corrected', **kwargs):
    super().__init__(
        learning_rate, hyperparameters=dict(
            alpha2=alpha2,
            preconditioner_decay_rate=preconditioner_decay_rate,
            fallback_threshold=fallback_threshold),
        gamma=gamma, **kwargs)

  def _make_algorithm(self):
    return algorithms.monge(self.alpha2, self.preconditioner_decay_rate,
                            self.fallback_threshold)


@_register
class ShampooSGRLD(SamplerOptimizer):
  """SGRLD in the Shampoo metric (Yu et al. 2023, Sec. 3.2), per-variable Kronecker factors.

  The roots come from a float64 eigendecomposition every `update_interval`
  steps. XLA's CPU eigendecomposition is much slower than LAPACK's for
  large modes, so on CPU with modes above a few hundred compile with
  ``jit_compile=False`` (Keras' default ``"auto"`` already does on CPU-only
  machines), lower `max_dim` (larger modes get a diagonal factor) or raise
  `update_interval`. A warning says so at build time. Full factors also
  cost on every step: each of the statistics and the products ``M g`` and
  ``M^{1/2} ξ`` takes ``Σ_i n_i`` multiply-adds per parameter (the sum over
  its full modes), several times a PSGLD step on an MLP with wide layers
  (`benchmarks/keras_speed.py` measures both configurations).
  ``block_size=b`` splits every axis longer than ``b`` into equal blocks
  with factors of their own (Yu et al. Sec. 3.2; Anil et al. 2021; see
  `tfp_adaptive.mcmc.ShampooSGRLD`): smaller eigendecompositions and fewer
  multiply-adds, though under XLA on CPU the many small batched products
  gain less than their count suggests.

  ``gamma='corrected'`` is not yet reliable on networks. Γ contains the
  derivative of the roots, which grows like ``ε^(p-1)`` (``p = -1/(2d)``)
  in the directions where a factor is nearly singular, for example a bias's
  rank-deficient ``ĝĝᵀ`` early in the run; ``1/(1-α)`` then multiplies it.
  On the digits MLP of `benchmarks/yu_tables.py` corrected Shampoo chains
  diverge at small ``epsilon``. On 1-D and small Gaussian targets it
  matches its predicted density (`tests/`).
  """

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    widest = max([n for v in var_list
                  for n in self.preconditioner.factor_sizes(v.shape)] + [0])
    if widest > 256:
      warnings.warn(
          'ShampooSGRLD: a %d-wide Kronecker factor is eigendecomposed every '
          '%d step(s); compiled with XLA on CPU (`jit_compile=True`; Keras\' '
          '"auto" does not use XLA on CPU-only machines) this is very slow. '
          'There, use jit_compile=False, a smaller max_dim or block_size, '
          'or a larger update_interval.' % (widest, self.update_interval))

  def __init__(self, learning_rate=1e-3, preconditioner_decay_rate=0.9995,
               epsilon=1e-6, update_interval=1, max_dim=1024,
               gamma='corrected', block_size=None, **kwargs):
    super().__init__(
        learning_rate, hyperparameters=dict(
            preconditioner_decay_rate=preconditioner_decay_rate,
            epsilon=epsilon,
            update_interval=update_interval,
            max_dim=max_dim,
            block_size=block_size),
        gamma=gamma, **kwargs)

  def _make_algorithm(self):
    return algorithms.shampoo(self.preconditioner_decay_rate, self.epsilon,
                              self.update_interval, self.max_dim,
                              self.block_size)


@_register
class AdamSGLD(SamplerOptimizer):
  """Adam-SGLD (Kim, Song & Liang 2022): drift ``N g + a M m``, noise unpreconditioned; no Γ."""

  _supports_gamma = False

  def __init__(self, learning_rate=1e-3, preconditioner_decay_rate=0.9,
               momentum_decay_rate=0.5, drift_scale=1., diagonal_bias=0.1,
               bias_outside_sqrt=True, **kwargs):
    super().__init__(
        learning_rate, hyperparameters=dict(
            preconditioner_decay_rate=preconditioner_decay_rate,
            momentum_decay_rate=momentum_decay_rate,
            drift_scale=drift_scale,
            diagonal_bias=diagonal_bias,
            bias_outside_sqrt=bias_outside_sqrt),
        **kwargs)

  def _make_algorithm(self):
    return algorithms.adam_sgld(
        self.preconditioner_decay_rate, self.momentum_decay_rate,
        self.drift_scale, self.diagonal_bias, self.bias_outside_sqrt)

