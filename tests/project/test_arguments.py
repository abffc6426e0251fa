"""Every public constructor and function rejects bad arguments at once, naming the parameter.

One table: each row is a public callable, a valid call, and bad values for
one parameter (wrong type, a string for a number or bool, out of range,
zero or negative counts). Each must raise `TypeError`/`ValueError` whose
message names the parameter; suspects of hanging run under a timeout.
"""

import functools
import inspect
import multiprocessing

import numpy as np
import pytest
import tensorflow as tf
import keras

import tfp_adaptive as tfa

TARGET = lambda x: -0.5 * tf.reduce_sum(x ** 2, -1)
STATE = tf.zeros([4, 2])

# Values that must fail for every kind of parameter.
NUMBER = ['0.1', None, True, float('nan'), float('inf'), [0.1]]
POSITIVE = NUMBER + [0., -1.]
DECAY = NUMBER + [-0.1, 1., 1.5]
COUNT = ['10', 10.5, True, None, 0, -3]
BOOL = ['False', 'True', 0, 1, None]
SEED = ['1', -1, 2 ** 31, 2 ** 40, 1.5]
NOISE = ['normal', 'Gaussian', None, 1]
ADAPTATION = ['10', 10.5, True, 0, -3]  # None: adapt throughout.
# A metric's friction: None is Langevin dynamics.
FRICTION = ['0.1', True, float('nan'), float('inf'), [0.1], 0., -1., 1.5]


def _takes(cls, name):
  return name in inspect.signature(cls).parameters


def _kernel_rows(cls, own):
  base = dict(target_log_prob_fn=TARGET, step_size=0.1)
  rows = [(cls, base, 'step_size', POSITIVE),
          (cls, base, 'temperature', POSITIVE),
          (cls, base, 'noise', NOISE),
          (cls, base, 'nonfinite', ['skip', 'Reject', None, 1]),
          (cls, base, 'target_log_prob_fn', [None, 1.0, 'f'])]
  if _takes(cls, 'gamma'):
    rows += [(cls, base, 'gamma', ['corrected ', 'Corrected', None, True]),
             (cls, base, 'gamma_estimator', ['exactly', None]),
             (cls, base, 'gamma_probability', POSITIVE + [1.5])]
  if _takes(cls, 'num_adaptation_steps'):
    rows.append((cls, base, 'num_adaptation_steps', ADAPTATION))
    if _takes(cls, 'friction'):
      rows.append((cls, base, 'friction', FRICTION))
  rows += [(cls, base, name, bad) for name, bad in own]
  return rows


RMS = [('preconditioner_decay_rate', DECAY),
       ('diagonal_bias', NUMBER + [-1e-3])]
KERNELS = (
    _kernel_rows(tfa.mcmc.SGLD, []) +
    _kernel_rows(tfa.mcmc.PSGLD, RMS + [('bias_outside_sqrt', BOOL)]) +
    _kernel_rows(tfa.mcmc.WenzelSGLD, RMS + [('update_interval', COUNT)]) +
    _kernel_rows(tfa.mcmc.MongeSGRLD, [
        ('alpha2', NUMBER + [-1.]), ('preconditioner_decay_rate', DECAY),
        ('fallback_threshold', POSITIVE)]) +
    _kernel_rows(tfa.mcmc.ShampooSGRLD, [
        ('preconditioner_decay_rate', DECAY), ('epsilon', POSITIVE),
        ('update_interval', COUNT), ('max_dim', COUNT),
        ('block_size', ['10', 10.5, True, 0, -3, 1]),
        ('roots', ['Newton', 'qr', None, 1])]) +
    _kernel_rows(tfa.mcmc.AdamSGLD, RMS + [
        ('momentum_decay_rate', DECAY), ('drift_scale', NUMBER + [-1.]),
        ('bias_outside_sqrt', BOOL)]) +
    _kernel_rows(tfa.mcmc.SGHMC, [('friction', POSITIVE + [1.5]),
                                  ('gradient_noise', NUMBER + [-1., 0.1])]) +
    _kernel_rows(tfa.mcmc.SGNHT, [('diffusion', POSITIVE)]))


def _optimizer_rows(cls, own):
  base = dict(learning_rate=1e-3, data_size=100)
  rows = [(cls, base, 'learning_rate', NUMBER + [0., -1.]),
          (cls, base, 'data_size', NUMBER + [0., 0.5]),
          (cls, base, 'burnin', ['10', 10.5, True, -1]),
          (cls, base, 'temperature', POSITIVE),
          (cls, base, 'noise', NOISE),
          (cls, base, 'nonfinite', ['skip', None]),
          (cls, base, 'prior', ['Flat', 'gaussian', None, 1.]),
          (cls, base, 'seed', SEED)]
  if _takes(cls, 'gamma'):
    rows += [(cls, base, 'gamma', ['Corrected', None, 'independent']),
             (cls, base, 'gamma_subsample', POSITIVE + [2.]),
             (cls, base, 'gamma_probability', POSITIVE + [2.])]
  if _takes(cls, 'num_adaptation_steps'):
    rows.append((cls, base, 'num_adaptation_steps', ADAPTATION))
    if _takes(cls, 'friction'):
      rows.append((cls, base, 'friction', FRICTION))
  return rows + [(cls, base, name, bad) for name, bad in own]


K = tfa.keras.optimizers
OPTIMIZERS = (
    _optimizer_rows(K.SGLD, []) +
    _optimizer_rows(K.PSGLD, RMS + [('bias_outside_sqrt', BOOL)]) +
    _optimizer_rows(K.WenzelSGLD, RMS + [('update_interval', COUNT)]) +
    _optimizer_rows(K.MongeSGRLD, [('alpha2', NUMBER + [-1.])]) +
    _optimizer_rows(K.ShampooSGRLD, [('epsilon', POSITIVE),
                                     ('max_dim', COUNT),
                                     ('roots', ['Newton', None])]) +
    _optimizer_rows(K.AdamSGLD, RMS + [('momentum_decay_rate', DECAY)]) +
    _optimizer_rows(K.SGHMC, [('friction', POSITIVE + [1.5]),
                              ('gradient_noise', NUMBER + [-1., 0.1])]) +
    _optimizer_rows(K.SGNHT, [('diffusion', POSITIVE)]))

COLLECTOR = [(tfa.keras.SampleCollector, {}, name, bad) for name, bad in [
    ('burnin', ['10', 10.5, True, None, -1]), ('thinning', COUNT),
    ('max_samples', COUNT[:3] + COUNT[4:]), ('window', ['all', None]),
    ('unit', ['steps', None]), ('directory', [1, ['a']]),
    ('likelihood', ['softmax', 'mse', 1]), ('from_logits', BOOL[:-1]),
    ('noise_variance', [v for v in POSITIVE if v is not None]), ('weighting', ['lr', None]),
    ('nonfinite', ['ignore', None]), ('validation_data', [1, (1, 2, 3)]),
    ('training_data', [1, (1, 2, 3)]), ('stuck_steps', COUNT),
    ('seed', SEED), ('monitor', ['yes', 1, None])]]
# The same without a likelihood: checked at construction, not at `fit`.
COLLECTOR += [(tfa.keras.SampleCollector, {}, 'from_logits_alone', BOOL[:-1]),
              (tfa.keras.SampleCollector, {}, 'noise_variance_alone',
               [0., -1., '1'])]
COLLECTOR_NEEDS_LIKELIHOOD = {'from_logits', 'noise_variance'}

CALIBRATION = [(tfa.keras.StepSizeCalibration, {}, name, bad)
               for name, bad in [('epochs', COUNT), ('target', [v for v in POSITIVE if v is not None] + [0.5]),
                                 ('max_factor', NUMBER + [1., 0.5])]] + [
    (tfa.keras.CurvatureCalibration, dict(training_data=(np.zeros((4, 2)), np.zeros(4))), name, bad)
    for name, bad in [('training_data', [None, 1, (1, 2, 3)]),
                      ('heat', POSITIVE + [1., 2.]),
                      ('epochs', ['2', 1.5, True, None, -1]),
                      ('batches', COUNT + [1]), ('iterations', COUNT),
                      ('rows', COUNT), ('seed', SEED)]] + [
    (tfa.keras.priors.HorseshoePrior, dict(data_size=10), name, bad)
    for name, bad in [('data_size', NUMBER + [0.]),
                      ('scale', POSITIVE + ['fan']),
                      ('global_scale', POSITIVE)]]

MONITOR = [(tfa.keras.SamplerMonitor, {}, name, bad) for name, bad in [
    ('burnin_epochs', ['2', 1.5, True, -1]), ('window', COUNT + [1]),
    ('tolerance', NUMBER + [-0.1, 0.]),
    ('min_steps', COUNT), ('validation_data', [1, (1, 2, 3)]),
    ('batches', ['sometimes', 1])]]

_MODEL = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
L = tfa.keras.likelihoods
_REGRESSION = tfa.keras.BayesianEnsemble(_MODEL, [], likelihood='gaussian')
OTHERS = [
    (tfa.keras.BayesianEnsemble, dict(model=_MODEL, members=[],
                                      likelihood='categorical'),
     'from_logits', BOOL[:-1]),
    (tfa.keras.BayesianEnsemble, dict(model=_MODEL, members=[],
                                      likelihood='gaussian'),
     'noise_variance', [0., -1., '1', True]),
    (tfa.keras.BayesianEnsemble, dict(model=_MODEL, members=[],
                                      likelihood='gaussian'),
     'weighting', ['lr', None]),
    (L.Bernoulli, {}, 'from_logits', BOOL),
    (L.Categorical, {}, 'from_logits', BOOL),
    (L.Gaussian, {}, 'noise_variance', [0., -1., '1', True]),
    (tfa.keras.priors.add_gaussian_prior, dict(model=_MODEL, data_size=10),
     'biases', BOOL),
    (tfa.keras.priors.add_horseshoe_prior, dict(model=_MODEL, data_size=10),
     'global_scale', POSITIVE),
    (tfa.keras.schedules.Cyclical,
     dict(initial_learning_rate=0.1, cycle_length=10),
     'initial_learning_rate', POSITIVE),
    (tfa.keras.schedules.TemperatureRamp, dict(start=0.1), 'start', POSITIVE),
    (tfa.keras.schedules.TemperatureRamp, dict(start=0.1), 'end', POSITIVE),
    (tfa.plot.reliability_diagram,
     dict(probs=np.ones([3, 2]) / 2, labels=np.zeros(3, int)), 'num_bins',
     COUNT),
    (tfa.schedules.PolynomialDecay, dict(scale=0.1), 'scale', POSITIVE),
    (tfa.schedules.PolynomialDecay, dict(scale=0.1), 'power', NUMBER + [2.]),
    (tfa.keras.schedules.Cyclical,
     dict(initial_learning_rate=0.1, cycle_length=10), 'cycle_length', COUNT),
    (tfa.keras.schedules.Cyclical,
     dict(initial_learning_rate=0.1, cycle_length=10), 'exploration',
     NUMBER + [1., -0.1]),
    (tfa.schedules.Cyclical, dict(initial_step_size=0.1, cycle_length=10),
     'initial_step_size', POSITIVE),
    (tfa.keras.schedules.TemperatureRamp, dict(start=0.1), 'steps', COUNT),
    (tfa.keras.priors.GaussianPrior, dict(data_size=10), 'scale',
     POSITIVE + ['fan-in']),
    (tfa.keras.priors.GaussianPrior, dict(data_size=10), 'data_size',
     NUMBER + [0.]),
    (tfa.keras.priors.GaussianPrior, dict(data_size=10), 'gain', POSITIVE),
    (tfa.minibatch_log_prob,
     dict(log_likelihood_fn=lambda p, d: d[0] * 0., data=(np.zeros([10]),),
          batch_size=5), 'batch_size', COUNT + [11]),
    (tfa.minibatch_log_prob,
     dict(log_likelihood_fn=lambda p, d: d[0] * 0., data=(np.zeros([10]),),
          batch_size=5), 'log_likelihood_fn', [None, 'f']),
    (tfa.keras.NoiseScale, dict(data_size=10), 'data_size', NUMBER + [0.]),
    (tfa.keras.NoiseScale, dict(data_size=10), 'prior_scale', POSITIVE),
    (tfa.keras.NoiseScale, dict(data_size=10), 'initial_scale', POSITIVE),
    (_REGRESSION.predict_interval, dict(x=np.zeros([2, 3])), 'level',
     NUMBER + [0., 1., 1.5]),
    (_REGRESSION.predict_quantiles, dict(x=np.zeros([2, 3])), 'quantiles',
     [['0.5'], [0.], [1.], [0.5, 1.5], [None]]),
]

SAMPLE = functools.partial(tfa.mcmc.sample, tfa.mcmc.SGLD(TARGET, 0.1), STATE)
HIST = functools.partial(tfa.mcmc.stationary_histogram,
                         tfa.mcmc.SGLD(lambda x: -0.5 * x ** 2, 0.1),
                         tf.zeros([4]))
DRIVERS = [
    (SAMPLE, dict(num_results=5, progress=False), name, bad)
    for name, bad in [('num_results', COUNT), ('num_burnin_steps', ['1', -1]),
                      ('num_steps_between_results', ['1', -1]),
                      ('chunk_size', COUNT), ('stuck_steps', COUNT),
                      ('progress', BOOL), ('jit_compile', BOOL)]] + [
    (HIST, dict(num_steps=5, edges=np.linspace(-1, 1, 5), progress=False),
     name, bad)
    for name, bad in [('num_steps', COUNT), ('chunk_steps', COUNT),
                      ('num_groups', COUNT + [3]),
                      ('edges', [[0.], [1., 0.], np.zeros([2, 2])]),
                      ('progress', BOOL), ('jit_compile', BOOL)]] + [
    (functools.partial(tfa.mcmc.check_regime, tfa.mcmc.SGLD(TARGET, 0.1)),
     dict(step_norms=[np.ones([2])] * 4), 'warn', BOOL)]

ROWS = (KERNELS + OPTIMIZERS + COLLECTOR + MONITOR + CALIBRATION + OTHERS +
        DRIVERS)
CASES = [(fn, base, name, value) for fn, base, name, bad in ROWS
         for value in bad]


def _id(case):
  fn, _, name, value = case
  fn_name = getattr(fn, '__name__', None) or getattr(fn.func, '__name__', '?')
  return '%s-%s=%r' % (fn_name, name, value)


@pytest.mark.parametrize('case', CASES, ids=[_id(c) for c in CASES])
def test_bad_argument_is_named(case):
  fn, base, name, value = case
  name = name.replace('_alone', '')
  kwargs = dict(base, **{name: value})
  if (fn is tfa.keras.SampleCollector and name in COLLECTOR_NEEDS_LIKELIHOOD
      and not case[2].endswith('_alone')):
    kwargs.setdefault('likelihood', 'gaussian' if name == 'noise_variance'
                      else 'categorical')
  with pytest.raises((TypeError, ValueError)) as info:
    fn(**kwargs)
  assert name in str(info.value), (name, str(info.value))


def test_every_public_constructor_is_in_the_table():
  tested = {getattr(fn, '__name__', None) for fn, _, _, _ in ROWS}
  for module in (tfa.mcmc, tfa.keras.optimizers):
    for public in module.__all__:
      obj = getattr(module, public)
      if isinstance(obj, type) and public not in (
          'AdaptiveSGMCMC', 'AdaptiveSGMCMCKernelResults', 'SamplerOptimizer',
          'RunChecks', 'RunReport'):  # Results, not constructors.
        assert public in tested, public


def _kernel_state_cases():
  k = lambda fn: tfa.mcmc.PSGLD(fn, 0.1, 0.95)
  return [
      ('mixed dtypes', k(lambda a, b: tf.reduce_sum(a, -1)),
       [tf.zeros([3, 2]), tf.zeros([3, 2], tf.float64)], 'one dtype'),
      ('integer state', k(lambda a: tf.reduce_sum(a, -1)),
       [tf.zeros([3, 2], tf.int32)], 'floating point'),
      ('python float', k(lambda a: 1.0), [tf.zeros([3])], 'Tensor'),
      ('None', k(lambda a: None), [tf.zeros([3])], 'Tensor'),
      ('wrong shape', k(lambda a: tf.zeros([5])), [tf.zeros([3, 2])],
       'Shape mismatch'),
  ]


@pytest.mark.parametrize('case', _kernel_state_cases(),
                         ids=[c[0] for c in _kernel_state_cases()])
def test_bad_state_or_target_is_named(case):
  _, kernel, state, match = case
  with pytest.raises((TypeError, ValueError), match=match):
    kernel.bootstrap_results(state)


def _histogram_with_zero_chunk(queue):
  try:
    HIST(num_steps=5, edges=np.linspace(-1, 1, 5), progress=False,
         chunk_steps=0)
    queue.put('returned')
  except (TypeError, ValueError) as e:
    queue.put(type(e).__name__)


@pytest.mark.slow
def test_suspects_do_not_hang():
  ctx = multiprocessing.get_context('spawn')
  queue = ctx.Queue()
  proc = ctx.Process(target=_histogram_with_zero_chunk, args=(queue,))
  proc.start()
  proc.join(120)
  hung = proc.is_alive()
  if hung:
    proc.kill()
  assert not hung
  assert queue.get(timeout=5) == 'ValueError'
