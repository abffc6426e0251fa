"""The public SG-MCMC kernels: SGLD, PSGLD, WenzelSGLD, MongeSGRLD, ShampooSGRLD, AdamSGLD, SGHMC, SGNHT.

All share `AdaptiveSGMCMC.one_step`; each only chooses its preconditioner.
Arguments common to all of them:

- ``target_log_prob_fn``: callable of the state parts returning ``û(θ)``,
  one value per chain (leading state axes equal its output shape). A
  `tfp_adaptive.minibatch.MinibatchLogProb` also receives each step's seed.
  The metric statistics are built from ∇ of this function (∇û).
- ``step_size``: ``h``, a float, a `Tensor`, or a callable of the int32
  step number (see `tfp_adaptive.schedules`).
- ``temperature``: ``τ > 0`` (1 = Bayes posterior).
- ``noise``: the law of the injected ``ξ``, ``'gaussian'`` (default) or
  ``'rademacher'`` (±1 with equal probability: the two-point noise of a
  weak order-1 scheme, one random sign per parameter; see the guide on
  performance for when not to use it).
- ``gamma``: ``'none' | 'original' | 'corrected' | 'corrected_published'
  | 'corrected_lagged'`` (see `tfp_adaptive.core.gamma`). ``'corrected'``
  (default) is Rensmeyer & Niggemann's Algorithm 1 with the metric and Γ
  built from a second minibatch of the step (one more gradient when the
  target is a minibatch; none with exact gradients), which removes the
  bias Algorithm 1 keeps with minibatches (guide "Choosing a sampler");
  ``'corrected_published'`` is Algorithm 1 as published, for
  reproductions; ``'corrected_lagged'`` moves with the metric from before
  the current gradient (one gradient a step).
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

from tfp_adaptive.core import specs
from tfp_adaptive.mcmc import kernel

__all__ = ['AdamSGLD', 'MongeSGRLD', 'PSGLD', 'SGHMC', 'SGLD', 'SGNHT',
           'ShampooSGRLD', 'WenzelSGLD']

_GAMMA = (('gamma', 'corrected'), ('gamma_estimator', 'hutchinson'),
          ('gamma_probability', 1.))
_EXAMPLE = """
  Example:
    >>> import tensorflow as tf, tensorflow_probability as tfp
    >>> import tfp_adaptive as tfa
    >>> k = tfa.mcmc.{name}(lambda x: -0.5 * x**2, step_size=0.01{extra})
    >>> xs = tfp.mcmc.sample_chain(100, tf.zeros([8]), kernel=k,
    ...                            trace_fn=None, seed=(1, 2))
"""


# The kernels whose metric, at its default moving average and kept adapting,
# is biased on a target without minibatch noise whatever the step: the
# average lags the chain, and the RMSprop metric has a cusp where the
# gradient vanishes (`python -m benchmarks.defaults` measures them).
# AdamSGLD samples another law by design (its docstring); WenzelSGLD's one
# scale per part is not biased there.
_BIASED_ON_EXACT_GRADIENTS = ('PSGLD', 'MongeSGRLD', 'ShampooSGRLD')


def _refuse_biased_defaults(spec, parameters, given):
  """Raises `ValueError` for a default moving average on a target without minibatch noise.

  A target is taken to have minibatch noise when it takes the step's seed
  (`tfa.minibatch_log_prob`, or any callable with ``needs_seed = True``).
  The user's own `preconditioner_decay_rate`, or `num_adaptation_steps`
  (adapt during the burn-in, then freeze: exact as the step shrinks),
  is accepted; `tfa.mcmc.check_run` judges the run.
  """
  if (spec.kernel_name not in _BIASED_ON_EXACT_GRADIENTS or
      'preconditioner_decay_rate' in given or
      parameters.get('num_adaptation_steps') is not None or
      getattr(parameters['target_log_prob_fn'], 'needs_seed', False)):
    return
  raise ValueError(
      '%s: at its default `preconditioner_decay_rate` (%r), a metric that '
      'keeps adapting is biased on a target without minibatch noise (one '
      'that takes no seed) whatever the step size: its moving average lags '
      'the chain, and where the gradient vanishes the metric peaks (a '
      'standard normal comes out far too narrow). Pass '
      '`num_adaptation_steps` (the burn-in\'s length: the metric adapts, '
      'then is frozen, and the chain is exact as the step shrinks; guide '
      '"Choosing a sampler", "Adapt, then freeze"), or choose '
      '`preconditioner_decay_rate` yourself (guide "Step sizes and '
      'regimes"). A target that draws minibatches from the step\'s seed: '
      '`tfa.minibatch_log_prob`.'
      % (spec.kernel_name, parameters['preconditioner_decay_rate']))


def _kernel_class(spec):
  """A `tfp.mcmc.TransitionKernel` class for `spec`: ``(target_log_prob_fn, step_size, <hyperparameters>, <common>)``."""
  trailing = (('temperature', 1.), ('noise', 'gaussian'))
  trailing += _GAMMA if spec.supports_gamma else ()
  trailing += (('nonfinite', 'reject'), ('name', None))
  sig = specs.signature((('target_log_prob_fn', specs.REQUIRED),
                         ('step_size', specs.REQUIRED)), spec, trailing)

  def __init__(self, *args, **kwargs):
    bound = sig.bind(self, *args, **kwargs)
    given = set(bound.arguments)
    bound.apply_defaults()
    parameters = dict(bound.arguments)
    parameters.pop('self')
    kernel.AdaptiveSGMCMC.__init__(
        self, parameters['target_log_prob_fn'], parameters['step_size'],
        spec.algorithm(parameters).with_noise(parameters['noise']),
        parameters['temperature'],
        parameters.get('gamma', 'none'),
        parameters.get('gamma_estimator', 'hutchinson'),
        parameters['nonfinite'], parameters)
    _refuse_biased_defaults(spec, parameters, given)

  __init__.__signature__ = sig
  doc = '%s\n\n  Args:\n%s\n    (and the common arguments of the module docstring)\n%s' % (
      spec.summary, spec.args_doc() or '    (the common arguments of the '
      'module docstring)', _EXAMPLE.format(
          name=spec.kernel_name,
          extra=(',\n    ...                     num_adaptation_steps=50'
                 if spec.kernel_name in _BIASED_ON_EXACT_GRADIENTS else '')))
  return type(spec.kernel_name, (kernel.AdaptiveSGMCMC,), {
      '__init__': __init__, '__doc__': doc, '__module__': __name__,
      '__qualname__': spec.kernel_name})


SGLD = _kernel_class(specs.SGLD)
PSGLD = _kernel_class(specs.PSGLD)
WenzelSGLD = _kernel_class(specs.WENZEL)
MongeSGRLD = _kernel_class(specs.MONGE)
ShampooSGRLD = _kernel_class(specs.SHAMPOO)
AdamSGLD = _kernel_class(specs.ADAM_SGLD)
SGHMC = _kernel_class(specs.SGHMC)
SGNHT = _kernel_class(specs.SGNHT)
