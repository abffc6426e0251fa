"""Keras 3 SG-MCMC optimizers: SGLD, PSGLD, WenzelSGLD, MongeSGRLD, ShampooSGRLD, AdamSGLD, SGHMC, SGNHT.

Each class is generated from its sampler's declaration in
`tfp_adaptive.core.specs` (the same declaration as the kernel's in
`tfp_adaptive.mcmc`); the update is `SamplerOptimizer`'s. Common arguments
are documented there: ``data_size, burnin, temperature, gamma_estimator,
gamma_subsample, gamma_probability, nonfinite, seed, name``.

Example:
  >>> import keras, tfp_adaptive as tfa
  >>> model.compile(optimizer=tfa.keras.optimizers.PSGLD(
  ...     1e-4, data_size=len(x), diagonal_bias=1e-3), loss='...')
  >>> model.fit(x, y, callbacks=[tfa.keras.SampleCollector()])
"""

import warnings

import keras

from tfp_adaptive.core import specs
from tfp_adaptive.keras.optimizer_base import SamplerOptimizer

__all__ = ['AdamSGLD', 'MongeSGRLD', 'PSGLD', 'SGHMC', 'SGLD', 'SGNHT',
           'SamplerOptimizer', 'ShampooSGRLD', 'WenzelSGLD']

_register = keras.saving.register_keras_serializable(package='tfp_adaptive')


def _optimizer_class(spec, class_name=None, default_burnin=0, fixed=None,
                     notes=''):
  """A `SamplerOptimizer` class for `spec`: ``(learning_rate, <hyperparameters>, gamma, **kwargs)``."""
  trailing = (('gamma', 'corrected'),) if spec.supports_gamma else ()
  sig = specs.signature((('learning_rate', 1e-3),), spec, trailing,
                        var_keyword=True)

  def __init__(self, *args, **kwargs):
    bound = sig.bind(self, *args, **kwargs)
    bound.apply_defaults()
    values = dict(bound.arguments)
    rest = values.pop('kwargs')
    if spec.supports_gamma:
      rest['gamma'] = values['gamma']
    SamplerOptimizer.__init__(
        self, values['learning_rate'],
        hyperparameters={n: values[n] for n in spec.names}, **rest)

  __init__.__signature__ = sig
  name = class_name or spec.optimizer_name
  doc = ('%s\n\n  Args:\n    learning_rate: ``h``, a float or a Keras learning-rate '
         'schedule. Default 1e-3.\n%s\n    (and the common arguments of '
         '`SamplerOptimizer`)\n%s' % (spec.summary, spec.args_doc(), notes))
  return type(name, (SamplerOptimizer,), {
      '__init__': __init__, '__doc__': doc, '__module__': __name__,
      '__qualname__': name, 'spec': spec, '_fixed': dict(fixed or {}),
      '_default_burnin': default_burnin,
      '_supports_gamma': spec.supports_gamma})


SGLD = _register(_optimizer_class(specs.SGLD))
PSGLD = _register(_optimizer_class(
    specs.PSGLD, default_burnin=25, fixed={'initial_value': 1.}, notes="""
  As TFP's `tfp.optimizer.StochasticGradientLangevinDynamics`: ``V_0 = 1``
  and no noise while ``iterations <= burnin`` (default 25).
"""))
WenzelSGLD = _register(_optimizer_class(specs.WENZEL))
MongeSGRLD = _register(_optimizer_class(specs.MONGE))
AdamSGLD = _register(_optimizer_class(specs.ADAM_SGLD))
SGHMC = _register(_optimizer_class(specs.SGHMC))
SGNHT = _register(_optimizer_class(specs.SGNHT))


@_register
class ShampooSGRLD(_optimizer_class(specs.SHAMPOO, '_Shampoo')):
  """SGRLD in the Shampoo metric (Yu et al. 2023, Sec. 3.2), per-variable Kronecker factors.

  The arguments are those of `tfp_adaptive.mcmc.ShampooSGRLD` (and the
  common ones of `SamplerOptimizer`). XLA's CPU eigendecomposition is much
  slower than LAPACK's for large modes, so on CPU with modes above a few
  hundred compile with ``jit_compile=False`` (Keras' default ``"auto"``
  already does on CPU-only machines), lower `max_dim` (larger modes get a
  diagonal factor) or raise `update_interval`; a warning says so at build
  time. Full factors also cost on every step: each of the statistics and the
  products ``M g`` and ``M^{1/2} ξ`` takes ``Σ_i n_i`` multiply-adds per
  parameter (the sum over its full modes), several times a PSGLD step on an
  MLP with wide layers (`benchmarks/keras_speed.py` measures both).
  ``block_size`` splits long axes into blocks with factors of their own:
  smaller eigendecompositions and fewer multiply-adds. ``roots='newton'``
  (Γ-free runs) replaces the eigendecomposition by matrix products
  (`tfp_adaptive.core.roots`); `benchmarks/shampoo_cost.py` compares the
  two.
  """

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    widest = max([n for v in var_list
                  for n in self.preconditioner.factor_sizes(v.shape)] + [0])
    if widest > 256 and self.roots == 'eigh':
      warnings.warn(
          'ShampooSGRLD: a %d-wide Kronecker factor is eigendecomposed every '
          '%d step(s); compiled with XLA on CPU (`jit_compile=True`; Keras\' '
          '"auto" does not use XLA on CPU-only machines) this is very slow. '
          'There, use roots=\'newton\' (without Γ), jit_compile=False, a '
          'smaller max_dim or block_size, or a larger update_interval.'
          % (widest, self.update_interval))
