"""Each sampler declared once: its hyperparameters (name, default, meaning) and its builder.

The TFP kernels (`tfp_adaptive.mcmc`) and the Keras optimizers
(`tfp_adaptive.keras.optimizers`) are generated from these declarations:
their signatures, defaults and argument documentation come from here, and
their constructors hand the values to `SamplerSpec.build`, the function of
`tfp_adaptive.core.algorithms` that validates them (naming the argument)
and returns the `Algorithm`.
"""

import collections
import inspect

from tfp_adaptive.core import algorithms

__all__ = ['ADAM_SGLD', 'Hyperparameter', 'MONGE', 'PSGLD', 'SGHMC', 'SGLD',
           'SGNHT', 'SHAMPOO', 'SPECS', 'SamplerSpec', 'WENZEL', 'signature']

Hyperparameter = collections.namedtuple('Hyperparameter',
                                        ['name', 'default', 'doc'])


class SamplerSpec(collections.namedtuple('SamplerSpec', [
    'kernel_name', 'optimizer_name', 'summary', 'hyperparameters', 'build',
    'supports_gamma'])):  # pylint: disable=missing-class-docstring
  """A sampler: its class names, summary, hyperparameters and builder.

  Fields:

  - ``kernel_name``, ``optimizer_name``: the generated classes' names.
  - ``summary``: what the sampler is (the first lines of both docstrings).
  - ``hyperparameters``: tuple of `Hyperparameter`, in signature order.
  - ``build``: ``build(**hyperparameters, **fixed) -> Algorithm``.
  - ``supports_gamma``: whether ``gamma=`` is offered.
  """
  __slots__ = ()

  @property
  def names(self):
    return [h.name for h in self.hyperparameters]

  def algorithm(self, values, **fixed):
    """The `Algorithm` for hyperparameter `values` (a dict by name)."""
    return self.build(**{h.name: values[h.name] for h in
                         self.hyperparameters}, **fixed)

  def args_doc(self, indent='    '):
    """The ``Args:`` lines of the hyperparameters, for generated docstrings."""
    lines = []
    for h in self.hyperparameters:
      lines.append('%s%s: %s Default %r.' % (indent, h.name, h.doc, h.default))
    return '\n'.join(lines)


def signature(leading, spec, trailing, var_keyword=False):
  """`inspect.Signature`: `leading` names, the spec's hyperparameters, `trailing` (name, default) pairs.

  With `var_keyword`, a final ``**kwargs``.
  """
  kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
  params = [inspect.Parameter('self', kind)]
  params += [inspect.Parameter(n, kind, default=d) if d is not REQUIRED
             else inspect.Parameter(n, kind) for n, d in leading]
  params += [inspect.Parameter(h.name, kind, default=h.default)
             for h in spec.hyperparameters]
  params += [inspect.Parameter(n, kind, default=d) for n, d in trailing]
  if var_keyword:
    params.append(inspect.Parameter('kwargs', inspect.Parameter.VAR_KEYWORD))
  return inspect.Signature(params)


REQUIRED = object()  # A leading argument without a default.

_DECAY_RMS = ('α in [0, 1): the decay of the moving average ``V`` of squared '
              'gradients.')

# Every adaptive sampler's: adapt, then freeze (`algorithms.Algorithm.adapting`).
_ADAPTATION = Hyperparameter(
    'num_adaptation_steps', None,
    '`None` (the metric adapts throughout) or an int >= 1: the metric '
    'adapts during the first this many steps and is then frozen: no more '
    'statistics, Γ exactly zero and not computed, and the step costs what '
    'an SGLD step preconditioned by the fixed metric costs; the chain is '
    'then exact as h → 0 for that metric (guide "Choosing a sampler"). Set '
    'it to the burn-in, and keep only samples taken after it.')

_FRICTION_DOC = (
    'α in (0, 1]: the share of the velocity lost per step (Chen et al.\'s '
    '``ηC``; BlackJAX\'s ``alpha·step_size``). Lower keeps more momentum: '
    'longer moves per gradient, more sensitive to gradient noise.')

# Every Riemannian sampler's: the metric gathered before the chain moves.
_WARMUP = Hyperparameter(
    'metric_warmup_steps', None,
    '`None` or an int >= 0: the first this many steps only gather the '
    'metric\'s statistics at the initial state (their plain mean) and do '
    'not move the chain, so that it starts with a metric built from that '
    'many minibatch gradients and no coordinate starts at the metric\'s '
    'cusp, where the corrected Γ is largest. `None`: %d with a corrected '
    'Γ where the metric would otherwise start from the first gradient '
    'alone (the kernels\' PSGLD, Shampoo), 0 otherwise (a fixed start '
    'such as the Keras PSGLD\'s ``V_0 = 1``, or ``gamma=\'none\'``).'
    % algorithms.DEFAULT_METRIC_WARMUP)

# Every Riemannian sampler's: `None` is Langevin dynamics; a number gives it
# a velocity (preconditioned SGHMC, `diffusion.hamiltonian_step`).
_METRIC_FRICTION = Hyperparameter(
    'friction', None,
    '`None` (Langevin dynamics) or ' + _FRICTION_DOC + ' With a friction '
    'the sampler is SGHMC in this metric: ``v\' = (1 − α) v + (h/2)(S ∇û + '
    'τ c Γ) + sqrt(α h τ) ξ``, ``θ\' = θ + S v\'`` with ``S = M^{1/2}``, '
    'and Γ is the divergence of ``S`` (guide "Choosing a sampler").')

SGLD = SamplerSpec(
    'SGLD', 'SGLD',
    'Stochastic gradient Langevin dynamics (Welling & Teh 2011), ``M = I``: '
    '``θ\' = θ + (h/2) ∇û + sqrt(h τ) ξ``.',
    (), algorithms.sgld, False)

PSGLD = SamplerSpec(
    'PSGLD', 'PSGLD',
    'Preconditioned SGLD (Li et al. 2016) with the corrected Γ of Rensmeyer & '
    'Niggemann (2025, Algorithm 1). ``V ← α V + (1 − α) g²`` and '
    '``M = diag(1/sqrt(diagonal_bias + V))`` (TFP\'s form), or Li et al.\'s '
    '``diag(1/(diagonal_bias + sqrt(V)))`` with ``bias_outside_sqrt=True``. '
    '``gamma=\'original\'`` is the Γ TFP\'s pSGLD optimizer intends.',
    (Hyperparameter('preconditioner_decay_rate', 0.95, _DECAY_RMS),
     Hyperparameter('diagonal_bias', 1e-3,
                    '>= 0; bounds the metric, ``M <= diagonal_bias^{-1/2}``. '
                    'TFP\'s 1e-8 leaves it practically unbounded where '
                    'gradients vanish, and a corrected chain can run away '
                    'along flat directions of a network. With full-batch '
                    'gradients the metric has a cusp of height '
                    '``sqrt((diagonal_bias + E ĝ²)/diagonal_bias)`` at a '
                    'mode: a value near the mean squared gradient removes it '
                    '(guide "Step sizes and regimes").'),
     Hyperparameter('bias_outside_sqrt', False,
                    'Python bool, Li et al.\'s form of ``M``.'),
     _ADAPTATION, _METRIC_FRICTION, _WARMUP),
    algorithms.psgld, True)

WENZEL = SamplerSpec(
    'WenzelSGLD', 'WenzelSGLD',
    'Layer-wise preconditioned SGLD (Wenzel et al. 2020): one scale per '
    'state part (variable), ``σ_l = sqrt(ε + mean(V_l))`` normalised by the '
    'smallest.',
    (Hyperparameter('preconditioner_decay_rate', 0.95, _DECAY_RMS),
     Hyperparameter('update_interval', 100,
                    'int >= 1, steps between refreshes of the scales '
                    '(Wenzel et al. refresh once per epoch).'),
     Hyperparameter('diagonal_bias', 1e-8,
                    'ε >= 0 in ``σ_l = sqrt(ε + mean(V_l))``.'),
     _ADAPTATION, _METRIC_FRICTION, _WARMUP),
    algorithms.wenzel, True)

MONGE = SamplerSpec(
    'MongeSGRLD', 'MongeSGRLD',
    'SGRLD in the Monge metric (Yu et al. 2023, Sec. 3.1), O(D) per step: '
    '``ℓ ← λ ℓ + (1 − λ) g``, ``M = I − α² ℓℓᵀ/(1 + α²‖ℓ‖²)``.',
    (Hyperparameter('alpha2', 1., 'α² >= 0 (0 is SGLD).'),
     Hyperparameter('preconditioner_decay_rate', 0.9,
                    'λ in [0, 1), the decay of the gradient\'s moving '
                    'average ``ℓ``.'),
     Hyperparameter('fallback_threshold', 1000.,
                    '> 0; a chain whose preconditioned gradient is longer '
                    'uses ``M = I`` for that step (Yu et al. App. A.4).'),
     _ADAPTATION, _METRIC_FRICTION, _WARMUP),
    algorithms.monge, True)

SHAMPOO = SamplerSpec(
    'ShampooSGRLD', 'ShampooSGRLD',
    'SGRLD in the Shampoo metric (Yu et al. 2023, Sec. 3.2): per tensor, one '
    'Kronecker factor per mode, ``M = ⊗_i (H_i + εI)^{-1/(2d)}``, roots by '
    'a float64 eigendecomposition or Newton iteration. ``gamma=\'corrected\'`` matches its '
    'predicted density on small targets but can diverge on networks: Γ '
    'differentiates the inverse roots, which blow up along nearly singular '
    'factor directions.',
    (Hyperparameter('preconditioner_decay_rate', 0.9995,
                    'λ in [0, 1) of the Kronecker factors.'),
     Hyperparameter('epsilon', 1e-3,
                    'persistent ridge ε > 0 added at every root '
                    'computation. It bounds the metric by ``ε^{-1/2}`` '
                    '(a matrix\'s two factors, each ``ε^{-1/4}``), as '
                    'PSGLD\'s ``diagonal_bias`` bounds its own. Yu et al. '
                    'use 1e-6, under which Γ along a nearly singular '
                    'factor throws a corrected chain out (non-finite steps '
                    'on a small network with minibatches).'),
     Hyperparameter('update_interval', 1,
                    'int >= 1, steps between refreshes of the inverse roots '
                    '(the factors themselves are updated every step).'),
     Hyperparameter('max_dim', 1024,
                    'modes larger than this get a diagonal factor.'),
     Hyperparameter('block_size', None,
                    '`None` or an int >= 2: axes longer than this are split '
                    'into equal blocks (of their largest divisor <= '
                    '`block_size`), each with its own factors (Yu et al. '
                    'Sec. 3.2, Anil et al. 2021).'),
     Hyperparameter('roots', 'eigh',
                    '``\'eigh\'`` (a float64 eigendecomposition; needed '
                    'for Γ) or ``\'newton\'`` (the coupled Newton '
                    'iteration, matrix products only: for accelerators, '
                    'and ``gamma=\'none\'`` only; see the guide '
                    '"Performance").'),
     _ADAPTATION, _METRIC_FRICTION, _WARMUP),
    algorithms.shampoo, True)

ADAM_SGLD = SamplerSpec(
    'AdamSGLD', 'AdamSGLD',
    'Adam-SGLD (Kim, Song & Liang 2022): drift ``∇û + a M m`` with the '
    'momentum ``m`` and RMSprop\'s ``M``, noise not preconditioned. Not '
    'Riemannian and without a Γ fix: its 1-D stationary density is '
    'Rensmeyer & Niggemann\'s eq. (35), not the target.',
    (Hyperparameter('preconditioner_decay_rate', 0.9, _DECAY_RMS),
     Hyperparameter('momentum_decay_rate', 0.5,
                    'β in [0, 1) of the momentum ``m``.'),
     Hyperparameter('drift_scale', 1., 'Kim et al.\'s ``a`` >= 0.'),
     Hyperparameter('diagonal_bias', 0.1, 'λ >= 0 of RMSprop\'s ``M``.'),
     Hyperparameter('bias_outside_sqrt', True,
                    'Python bool; Adam\'s form ``1/(λ + sqrt(V))``.'),
     _ADAPTATION),
    algorithms.adam_sgld, False)

SGHMC = SamplerSpec(
    'SGHMC', 'SGHMC',
    'Stochastic gradient Hamiltonian Monte Carlo (Chen, Fox & Guestrin '
    '2014), ``M = I``: ``v\' = (1 − α) v + (h/2) ∇û + sqrt((α − β̂) h τ) ξ``, '
    '``θ\' = θ + v\'``. Chen et al.\'s learning rate ``η`` is ``h/2`` and '
    'BlackJAX\'s ``step_size`` ``sqrt(h/2)`` (docs, "The mathematics"); at '
    '``friction=1`` the step is SGLD\'s.',
    (Hyperparameter('friction', 0.1, _FRICTION_DOC),
     Hyperparameter('gradient_noise', 0.,
                    'β̂ in [0, friction): the estimate of the minibatch '
                    'gradient\'s noise in the velocity (Chen et al.\'s '
                    '``ηB̂/2``), subtracted from the '
                    'injected noise.')),
    algorithms.sghmc, False)

SGNHT = SamplerSpec(
    'SGNHT', 'SGNHT',
    'Stochastic gradient Nosé–Hoover thermostat (Ding et al. 2014), ``M = '
    'I``: SGHMC whose friction ``ξ`` (one per chain) adapts, '
    '``v\' = (1 − ξ) v + (h/2) ∇û + sqrt(A h τ) ζ``, ``θ\' = θ + v\'``, '
    '``ξ\' = ξ + ‖v\'‖²/D − τh/(2 − ξ)``. The thermostat absorbs gradient '
    'noise of unknown size. Ding et al.\'s ``h`` is ``h/2`` here and '
    'BlackJAX\'s ``step_size`` ``sqrt(h/2)`` (docs, "The mathematics").',
    (Hyperparameter('diffusion', 0.01,
                    'A > 0: the injected noise (variance ``A h τ``) and the '
                    'thermostat\'s start (Ding et al.\'s ``A``; BlackJAX\'s '
                    '``alpha·step_size``).'),),
    algorithms.sgnht, False)

SPECS = (SGLD, PSGLD, WENZEL, MONGE, SHAMPOO, ADAM_SGLD, SGHMC, SGNHT)
