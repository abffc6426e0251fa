"""`SamplerOptimizer`: the Keras 3 adapter around `tfp_adaptive.core.algorithms`.

Semantics follow TFP's `tfp.optimizer.StochasticGradientLangevinDynamics`:
the loss is the minibatch mean negative log-likelihood plus ``prior / N``
(``N = data_size``), so ``∇û = -N g`` with ``g`` the loss gradient, and

``Δθ = -(lr/2)(N·M·g − τ c Γ) + N(0, lr·τ·M)``

with the metric statistics (EMAs, Kronecker factors) built from ``g``, as
TFP does. The noise is off while ``iterations <= burnin`` (TFP's rule). The
step's random numbers are a stateless function of ``seed`` and the iteration
counter, so a run restored from a checkpoint continues the same stream and
every replica of a `tf.distribute` strategy draws identical noise.

Distribution (`MirroredStrategy`, `MultiWorkerMirroredStrategy`): one chain,
data-parallel. Gradients are all-reduced as in any Keras optimizer (the mean
over the global batch); the metric update and the noise are then computed
identically on every replica, so the copies of the weights agree (to float
rounding, not bitwise: ~1e-8 after a few steps on two CPU replicas), and a
Γ-free run equals the single-device run on the same data and seed to the
same rounding.
With Γ, each replica differentiates the metric built from its own part of
the batch and the Γ's are averaged (close to, not equal to, the
single-device Γ). Multi-worker runs must pass the same explicit `seed` on
every worker: the default seed is drawn per process.
"""

import numpy as np
import tensorflow as tf
import keras

from tfp_adaptive import _compat
from tfp_adaptive import validation
from tfp_adaptive import vocabulary
from tfp_adaptive.core import gamma as gamma_lib
from tfp_adaptive.keras import distribute
from tfp_adaptive.keras import default_prior
from tfp_adaptive.keras import optimizer_step
from tfp_adaptive.keras import step_statistics

__all__ = ['NONFINITE_POLICIES', 'PRIORS', 'SamplerOptimizer',
           'backing_variable', 'sampler_of']

# The words of `tfp_adaptive.vocabulary` that an optimizer step can follow.
NONFINITE_POLICIES = ('reject', 'raise')
PRIORS = ('default', 'flat')


def backing_variable(v):
  """The `tf.Variable` behind `v`: a `keras.Variable`'s value, else `v`."""
  return v.value if isinstance(v, keras.Variable) else v


def sampler_of(model, who):
  """``model.optimizer`` if it is a `SamplerOptimizer`, else a `TypeError` naming `who`."""
  opt = model.optimizer
  if not isinstance(opt, SamplerOptimizer):
    raise TypeError('%s works with the samplers of '
                    'tfp_adaptive.keras.optimizers; the model is compiled '
                    'with %s.' % (who, type(opt).__name__))
  return opt


def constant_rate_sampler_of(model, who):
  """`sampler_of`, and a `TypeError` naming `who` if its learning rate is a schedule (`who` sets the rate)."""
  opt = sampler_of(model, who)
  if opt.learning_rate_schedule is not None:
    raise TypeError('%s needs a constant learning rate, not a schedule (%s).'
                    % (who, type(opt.learning_rate_schedule).__name__))
  return opt


def _random_seed():
  """From NumPy's global generator, which `keras.utils.set_random_seed` seeds."""
  return int(np.random.randint(0, 2**31 - 1))


class SamplerOptimizer(default_prior.DefaultPrior,
                       keras.optimizers.Optimizer):
  """Base class of the SG-MCMC optimizers (subclasses pick the `Algorithm`).

  Args:
    learning_rate: ``h`` (TFP's ``learning_rate``): float or
      `keras.optimizers.schedules.LearningRateSchedule`.
    data_size: ``N``, the number of training examples (>= 1).
    burnin: int >= 0; no noise while ``iterations <= burnin``.
    temperature: ``τ > 0`` (1 = Bayes posterior; < 1 cold posterior).
    noise: the law of the injected ``ξ``: ``'gaussian'`` (default) or
      ``'rademacher'`` (±1, one random sign per weight; as the kernels').
    gamma: ``'none' | 'original' | 'corrected' | 'corrected_published' |
      'corrected_lagged'`` (as the kernels'); anything but ``'none'``
      needs the loss, see `tfp_adaptive.keras.enable_gamma`. With
      ``'corrected'`` `fit` steps with the gradient of a random half of
      each minibatch and builds the metric and Γ from the other half (in
      custom loops see `gradients_and_gamma`); ``'corrected_published'``
      builds them from the drift's own gradient, as published.
    gamma_estimator: ``'hutchinson' | 'exact'``.
    gamma_subsample: fraction in (0, 1] of each minibatch on which Γ's
      Hessian-vector product is computed (a random subset, drawn per step;
      the metric and the drift always use the whole minibatch). Γ is linear
      in that product, so it stays unbiased while the second-order pass costs
      about this fraction; the extra variance enters the step at O(h), below
      the injected noise (the argument that justifies Hutchinson's probe).
    gamma_probability: ``p`` in (0, 1]: each step computes Γ with
      probability ``p`` and then adds ``Γ/p``, otherwise none (unbiased; the
      second-order pass runs on a fraction ``p`` of the steps; see
      `tfp_adaptive.core.gamma.gradient_and_gamma`).
    nonfinite: ``'reject'`` (default, as in the kernels: a step whose
      gradient, Γ, new weights or new metric state are NaN/Inf is not
      applied (an overflowing metric statistic would otherwise freeze the
      weights silently), the weights
      stay at the last good state, and `num_nonfinite` counts it; the weights
      are tested through their sum, so weights too large for that sum to
      stay finite count too, see `tfp_adaptive.core.tensors.finite_chains`) or
      ``'raise'`` (the step is not applied and, outside XLA, fails with
      `tf.errors.InvalidArgumentError`; `SampleCollector` raises
      `FloatingPointError` after the batch in every mode).
    prior: the prior of the variables that have no regularizer:
      ``'default'`` (`tfp_adaptive.keras.priors.default_prior`, a Gaussian
      of variance ``DEFAULT_GAIN²/fan_in`` per tensor; one log line names
      the variables it covers) or ``'flat'`` (none: the loss holds the whole
      posterior; warns when a Keras variable has no regularizer, since
      without a prior a network's posterior may be improper). Variables with
      a regularizer (`tfp_adaptive.keras.priors`, or any Keras regularizer)
      take it as their prior, as Keras adds it to the loss. The default
      prior's gradient ``θ/(σ²N)`` is added to the loss gradient before the
      metric and the drift see it, in `fit` and in custom loops alike, and
      Γ differentiates it too (`gradients_and_gamma`). Which variables it
      covers is decided when the optimizer is built.
    seed: int seed of the sampler's noise (if `None`, drawn from NumPy's
      global generator, so `keras.utils.set_random_seed` makes a run
      reproducible, as it does Keras' own random ops; stored in the config so
      a saved optimizer continues the same stream).
    name: the optimizer's name; other keyword arguments go to
      `keras.optimizers.Optimizer` (e.g. ``clipnorm``).
    hyperparameters: (for subclasses) dict of the sampler's own arguments,
      set as attributes and stored in the config.
  """

  _default_burnin = 0
  _supports_gamma = True

  def __init__(self, learning_rate, data_size=1, burnin=None, temperature=1.,
               noise='gaussian', gamma='none', gamma_estimator='hutchinson', gamma_subsample=1.,
               gamma_probability=1., nonfinite='reject', prior='default',
               seed=None, name=None, hyperparameters=None, **kwargs):
    if not isinstance(learning_rate,
                      keras.optimizers.schedules.LearningRateSchedule):
      if not callable(learning_rate):
        validation.check_number('learning_rate', learning_rate, low=0.,
                                low_open=True)
    super().__init__(learning_rate=learning_rate,
                     name=name or type(self).__name__, **kwargs)
    validation.check_number('data_size', data_size, low=1.)
    burnin = self._default_burnin if burnin is None else burnin
    self.burnin = validation.check_int('burnin', burnin, low=0)
    self.data_size = data_size
    self._temperature = validation.check_number('temperature', temperature,
                                                low=0., low_open=True)
    self._temperature_variable = None
    # What the steps sum for the callbacks (`step_statistics`).
    self.statistics = step_statistics.StepStatistics()
    allowed = vocabulary.GAMMA_MODES if self._supports_gamma else ('none',)
    self.gamma = validation.check_choice('gamma', gamma, allowed)
    self.gamma_estimator = validation.check_choice(
        'gamma_estimator', gamma_estimator, gamma_lib.GAMMA_ESTIMATORS)
    self.gamma_subsample = validation.check_number(
        'gamma_subsample', gamma_subsample, low=0., high=1., low_open=True)
    self.gamma_probability = validation.check_number(
        'gamma_probability', gamma_probability, low=0., high=1.,
        low_open=True)
    self.nonfinite = vocabulary.nonfinite_policy(nonfinite,
                                                 NONFINITE_POLICIES)
    self.prior = validation.check_choice('prior', prior, PRIORS)
    self._prior_precisions = None  # 1/(σ²N) per variable, set by `build`.
    self._seed_given = seed is not None
    self.seed = _random_seed() if seed is None else validation.check_seed(
        'seed', seed)
    self._hyperparameters = dict(hyperparameters or {})
    for key, value in self._hyperparameters.items():
      setattr(self, key, value)
    self._algorithm = self._make_algorithm().with_noise(noise).for_gamma(
        self.gamma)
    self.noise = noise
    self._step_inputs = (None, None, None)
    self.chain_ndims = 0  # 1 when the variables lead with a chain axis.

  # -- what subclasses provide --------------------------------------------
  spec = None      # A `tfp_adaptive.core.specs.SamplerSpec`.
  _fixed = {}      # Builder arguments fixed by the adapter (e.g. TFP's V_0).

  def _make_algorithm(self):
    return self.spec.algorithm(self._hyperparameters, **self._fixed)

  # -- public -------------------------------------------------------------
  @property
  def algorithm(self):
    """The `tfp_adaptive.core.algorithms.Algorithm` this optimizer adapts."""
    return self._algorithm

  @property
  def preconditioner(self):
    return self._algorithm.preconditioner

  @property
  def hyperparameter_names(self):
    """Names of the sampler's own hyperparameters (its spec's)."""
    return list(self._hyperparameters)

  @property
  def needs_gamma(self):
    """True when the update needs Γ (`enable_gamma` provides it in `fit`)."""
    return self.gamma != 'none' and self.preconditioner.is_adaptive

  @property
  def num_nonfinite(self):
    """Number of steps skipped because of NaN/Inf (int64 variable)."""
    return self._num_nonfinite

  def check_dtype_policy(self):
    """Raises `ValueError` under a mixed-precision Keras dtype policy.

    Keras wraps the optimizer in a `LossScaleOptimizer`, which silently skips
    steps while it searches its loss scale (a skipped step is a sample not
    taken), and float16 gradients lose the precision that the noise and Γ
    are measured against.
    """
    policy = keras.config.dtype_policy().name
    if policy.startswith('mixed'):
      raise ValueError(
          '%s does not support the %r dtype policy: its loss scaling skips '
          'steps without counting them as samples, and float16 gradients '
          'are too coarse for Γ. Use keras.config.set_dtype_policy(\'float32\')'
          ' for sampling.' % (type(self).__name__, policy))

  def set_chain_axis(self):
    """The variables lead with an axis of independent chains (`tfp_adaptive.keras.chains.Chains`).

    The metric's reductions, the non-finite check and Γ are then per
    chain, and the default prior's scale is that of one chain's tensor.
    Call before the optimizer is built.
    """
    if self.built and not self.chain_ndims:
      raise ValueError('%s is already built for variables without a chain '
                       'axis: give the chains a new optimizer.'
                       % type(self).__name__)
    self.chain_ndims = 1

  @property
  def seed_given(self):
    """True if `seed` was passed, False if it was drawn by this process."""
    return self._seed_given

  def adopt_seed(self, seed):
    """Continues a recorded run's random stream: takes `seed` unless one was passed.

    Each process draws its own default seed; a resumed run takes the one
    the run recorded (`SampleCollector.restore`). An explicit seed is kept
    (a mismatch is refused by the run's identity check).
    """
    if not self._seed_given:
      self.seed = int(seed)

  def _agree_on_seed(self):
    """Under `MultiWorkerMirroredStrategy`, every worker takes the chief's seed.

    The workers must draw the same noise to hold one chain. A seed drawn
    per process (``seed=None``) is replaced by the chief's; explicit seeds
    that differ between workers are an error.
    """
    self.seed = distribute.agree_on_seed(self.seed, self._seed_given,
                                         type(self).__name__)

  def build(self, var_list):
    if self.built:
      return
    self.check_dtype_policy()
    self._agree_on_seed()
    super().build(var_list)
    self._prior_precisions = self._resolve_prior(var_list)
    values = [tf.convert_to_tensor(v) for v in var_list]
    template = (self.preconditioner.init(values, self.chain_ndims),
                self._algorithm.init_momentum(values, self.chain_ndims))
    self._state_template = template
    self._state_is_bool = []
    state_variables = []
    for i, leaf in enumerate(tf.nest.flatten(template)):
      is_bool = leaf.dtype == tf.bool
      value = tf.cast(leaf, tf.int32) if is_bool else leaf
      state_variables.append(self.add_variable(
          shape=tuple(leaf.shape), dtype=value.dtype.name,
          initializer=lambda shape, dtype=None, v=value: v,
          name='sampler_state_%d' % i))
      self._state_is_bool.append(is_bool)
    self._state_variables = state_variables
    self._num_nonfinite = self.add_variable((), dtype='int64',
                                            name='num_nonfinite')
    self._temperature_variable = self.add_variable(
        (), dtype='float32', name='temperature',
        initializer=keras.initializers.Constant(self._temperature))

  @property
  def learning_rate_schedule(self):
    """The `LearningRateSchedule` given as `learning_rate` (`None` for a constant rate)."""
    lr = self._learning_rate
    return (lr if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule)
            else None)

  @property
  def temperature(self):
    """τ, the temperature sampled at: held once, in `temperature_variable` once built.

    Setting it assigns the variable (as `TemperatureRamp` does during
    `fit`).
    """
    if self._temperature_variable is None:
      return self._temperature
    return float(np.asarray(self._temperature_variable))

  @temperature.setter
  def temperature(self, value):
    value = validation.check_number('temperature', value, low=0.,
                                    low_open=True)
    if self._temperature_variable is None:
      self._temperature = value
    else:
      self._temperature_variable.assign(value)

  @property
  def temperature_variable(self):
    """τ as a variable, once built (`TemperatureRamp` assigns it during `fit`)."""
    return self._temperature_variable

  @property
  def state_is_bool(self):
    """Per variable of the sampler state: whether it holds a bool (stored as int32)."""
    return self._state_is_bool

  def sampler_state(self, state_variables=None):
    """The metric state and momentum as tensors, ``(pstate, momentum)``."""
    state_variables = state_variables or self._state_variables
    leaves = []
    for v, is_bool in zip(state_variables, self._state_is_bool):
      t = tf.convert_to_tensor(v)
      leaves.append(tf.cast(t, tf.bool) if is_bool else t)
    return tf.nest.pack_sequence_as(self._state_template, leaves)

  def step_seeds(self, step):
    """Stateless seeds ``(gamma, noise)`` of the step numbered `step`.

    The first seeds Γ's coin (``gamma_probability``) and minibatch subsample
    (``gamma_subsample``); the second the injected noise, whose signs are
    also Hutchinson's probe (`tfp_adaptive.core.gamma`).
    """
    base = tf.constant([self.seed, 0x5eed], tf.int32)
    step_seed = tf.random.experimental.stateless_fold_in(
        base, tf.cast(step, tf.int32))
    return tf.unstack(tf.random.experimental.stateless_split(step_seed, 2))

  def apply(self, grads, trainable_variables=None, gamma=None,
            metric_state=None, metric_gradients=None):
    """`keras.optimizers.Optimizer.apply`, with this step's Γ when it needs one.

    Args:
      grads, trainable_variables: as Keras' `apply`.
      gamma: list of ``c·Γ`` per variable (from `gradients_and_gamma`), or
        `None` (required when `needs_gamma`).
      metric_state: optional metric state already updated with these
        gradients (also from `gradients_and_gamma`), which the step then
        reuses instead of updating the metric a second time (single replica,
        variables in the optimizer's order).
      metric_gradients: optional gradients, like `grads`, from which the
        metric is updated instead of `grads` (``gamma='corrected'``: the
        gradients of the metric's own minibatch). Summed over replicas as
        `grads` are; under a distribution strategy, where each replica's
        `metric_state` is only its own, `fit` passes them.
    """
    if gamma is not None:
      variables = trainable_variables or self._trainable_variables
      gamma = dict(zip([self._var_key(v) for v in variables], gamma))
    self._step_inputs = (gamma, metric_state, metric_gradients)
    try:
      return super().apply(grads, trainable_variables)
    finally:
      self._step_inputs = (None, None, None)

  def get_config(self):
    config = super().get_config()
    config.update(self._hyperparameters)
    config.update(data_size=self.data_size, burnin=self.burnin,
                  temperature=self.temperature, noise=self.noise,
                  nonfinite=self.nonfinite, prior=self.prior,
                  seed=self.seed)
    if self._supports_gamma:
      config.update(gamma=self.gamma, gamma_estimator=self.gamma_estimator,
                    gamma_subsample=self.gamma_subsample,
                    gamma_probability=self.gamma_probability)
    return config

  # -- the update -----------------------------------------------------------
  def _backend_update_step(self, grads, trainable_variables, learning_rate):
    gamma, metric_state, metric_grads = self._step_inputs
    if self.needs_gamma and gamma is None:
      raise ValueError(
          '%s(gamma=%r) needs Γ, which depends on the loss: use it with '
          '`SampleCollector()` in `fit` (or `tfp_adaptive.keras.enable_gamma'
          '(model)`), or in a custom loop `apply(grads, variables, gamma=...)` '
          'with Γ from `gradients_and_gamma`; or pass gamma=\'none\'.'
          % (type(self).__name__, self.gamma))
    gamma = None if not self.needs_gamma else [
        gamma[self._var_key(v)] for v in trainable_variables]
    index = [self._get_variable_index(v) for v in trainable_variables]
    variables = [backing_variable(v) for v in trainable_variables]
    grads_and_vars = self._all_reduce_sum_gradients(list(zip(grads, variables)))
    grads = [g for g, _ in grads_and_vars]
    if metric_grads is not None:
      metric_grads = [g for g, _ in self._all_reduce_sum_gradients(
          list(zip(metric_grads, variables)))]
    strategy = self._distribution_strategy
    if gamma is not None and strategy.num_replicas_in_sync > 1:
      ctx = tf.distribute.get_replica_context()
      gamma = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, gamma)
    if strategy.num_replicas_in_sync > 1 or index != list(
        range(len(self._trainable_variables))):
      metric_state = None  # Recomputed from the all-reduced gradients.
    if (metric_state is None and metric_grads is None and
        self._algorithm.independent_metric):
      raise ValueError(
          "%s(gamma='corrected') builds its metric from a minibatch apart "
          'from the gradients given to `apply`: use it in `fit`, or in a '
          'custom loop pass the `metric_state` that `gradients_and_gamma('
          '..., metric_loss_fn=...)` returns (for all the optimizer\'s '
          "variables), or pass gamma='corrected_published'."
          % type(self).__name__)
    _compat.maybe_merge_call(
        self._distributed_step, strategy, grads, gamma, metric_state,
        metric_grads, index, learning_rate,
        tf.convert_to_tensor(self.iterations))

  def _distributed_step(self, strategy, grads, gamma, metric_state,
                        metric_grads, index, learning_rate, step):
    """Runs `_local_step` on each local replica's copies (cross-replica)."""
    def local(x, i):
      copies = strategy.experimental_local_results(x)
      return copies[i] if len(copies) > 1 else copies[0]
    per = lambda xs, i: None if xs is None else [local(x, i) for x in xs]
    all_vars = [backing_variable(v) for v in self._trainable_variables]
    n = len(strategy.experimental_local_results(all_vars[0]))
    for i in range(n):
      vars_i = per(all_vars, i)
      with tf.device(vars_i[0].device):
        self._local_step(vars_i, per(grads, i), per(gamma, i), metric_state,
                         per(metric_grads, i), index, local(learning_rate, i), local(step, i),
                         per([v.value for v in self._state_variables], i),
                         local(self._num_nonfinite.value, i))

  def _local_step(self, *args):
    optimizer_step.local_step(self, *args)
