"""Running kernels for long: compiled chunks with progress, and streaming histograms."""

import sys
import time
import warnings
import weakref

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from tfp_adaptive import _compat
from tfp_adaptive import minibatch
from tfp_adaptive import validation
from tfp_adaptive.diagnostics import advice as advice_lib
from tfp_adaptive.diagnostics import regime as regime_lib
from tfp_adaptive.mcmc import kernel as kernel_lib
from tfp_adaptive.mcmc import temperature as temperature_lib

__all__ = ['check_regime', 'report_nonfinite', 'sample', 'stationary_histogram']


class _Progress(object):
  """A tqdm bar when tqdm is installed, else a line every ~10 seconds."""

  def __init__(self, total, desc, enabled):
    self.total, self.desc, self.enabled = total, desc, enabled
    self.done, self.start, self.last = 0, time.time(), 0.
    self.bar = None
    if enabled:
      try:
        import tqdm  # pylint: disable=g-import-not-at-top
        self.bar = tqdm.tqdm(total=total, desc=desc, unit='step')
      except ImportError:
        pass

  def update(self, n):
    self.done += n
    if not self.enabled:
      return
    if self.bar is not None:
      self.bar.update(n)
      return
    now = time.time()
    if now - self.last > 10. or self.done >= self.total:
      self.last = now
      rate = self.done / max(now - self.start, 1e-9)
      print('%s: %d/%d steps (%.0f steps/s)' % (self.desc, self.done, self.total,
                                                rate), file=sys.stderr)

  def close(self):
    if self.bar is not None:
      self.bar.close()


def check_finite(kernel, results, stuck_steps):
  """Warns about chains stuck for `stuck_steps` steps; raises `FloatingPointError` on a non-finite step under ``nonfinite='raise'``."""
  count = find_field(results, 'num_nonfinite')
  if count is None:
    return
  unmoved = find_field(results, 'num_unmoved')
  stuck = 0 if unmoved is None else int(np.sum(np.asarray(unmoved) >= stuck_steps))
  if stuck:
    advice_lib.warn(advice_lib.Advice(
        '%s: %d chain(s) have not moved for the last %d or more steps (every '
        'step rejected as non-finite). Lower `step_size` (about %gx, a first '
        'try), or check the target for NaN/Inf and constraints without a '
        'bijector.' % (type(kernel).__name__, stuck, stuck_steps,
                       advice_lib.DIVERGED),
        advice_lib.smaller_step('step_size', advice_lib.DIVERGED)))
  total = int(np.sum(count))
  policy = getattr(kernel, 'parameters', {}).get('nonfinite')
  if total and policy == 'raise':
    raise FloatingPointError(
        '%s: %d step(s) had a non-finite log-prob, gradient or state (chains '
        'kept their last finite state). Lower `step_size` or check the model.'
        % (type(kernel).__name__, total))


def report_nonfinite(kernel, results):
  """Warns once how many steps of a finished run were non-finite, per chain.

  Returns the per-chain counts (``kernel_results.num_nonfinite``) as a NumPy
  array, or `None` for a kernel that does not count them.
  """
  count = find_field(results, 'num_nonfinite')
  if count is None:
    return None
  count = np.asarray(count)
  total = int(np.sum(count))
  if total:
    policy = getattr(kernel_lib.sampler_in(kernel), 'parameters', {}).get(
        'nonfinite')
    what = ('were kept (nonfinite=\'ignore\')' if policy == 'ignore' else
            'were rejected, each chain returning to its last finite state')
    worst = np.unravel_index(int(np.argmax(count)), count.shape)
    advice_lib.warn(advice_lib.Advice(
        '%s: %d step(s) had a non-finite log-prob, gradient or state and %s: '
        '%d of %d chain(s) affected, at most %d step(s) in chain %s '
        '(per chain: `kernel_results.num_nonfinite`). The samples of those '
        'chains over-represent where the rejections left them. Lower '
        '`step_size` (about %gx, a first try: no reading gives the factor), '
        'or check the target for NaN/Inf.'
        % (type(kernel).__name__, total, what, int(np.sum(count > 0)),
           count.size, int(count[worst]),
           worst[0] if len(worst) == 1 else worst, advice_lib.DIVERGED),
        advice_lib.smaller_step('step_size', advice_lib.DIVERGED)))
  return count


def check_regime(kernel, step_norms, warn=True):
  """The regime numbers of a run, with a warning naming what to change when outside.

  Args:
    kernel: the kernel that ran (ours, or one wrapping ours such as
      `tfp.mcmc.TransformedTransitionKernel`).
    step_norms: the kernel results' ``step_norms`` traced over the run
      (e.g. ``trace_fn=lambda _, r: r.step_norms`` in
      `tfp.mcmc.sample_chain`; through a wrapper,
      ``r.inner_results.step_norms``), leaves shaped ``[steps, chains...]``.
    warn: issue a `UserWarning` for each number above its tolerance.

  Returns:
    `tfp_adaptive.diagnostics.regime.Regime` of the run, pooled over its chains
    (means over steps and chains; docs, guide "Step sizes and regimes").

  Example:
    >>> _, norms = tfp.mcmc.sample_chain(
    ...     1000, state, kernel=kernel, seed=(0, 1),
    ...     trace_fn=lambda _, r: r.step_norms)
    >>> tfa.mcmc.check_regime(kernel, norms)
  """
  validation.check_bool('warn', warn)
  return regime_of(kernel, run_means(step_norms), warn)[0]


def run_means(step_norms):
  """The run means (over steps and chains) of traced `StepNorms`."""
  return [np.mean(np.asarray(x, np.float64)) for x in step_norms]


def regime_of(kernel, means, warn, estimates=True):
  """``(Regime, messages)`` from run means; warns with the messages if `warn`."""
  inner = kernel_lib.sampler_in(kernel)
  if inner is None:
    raise TypeError('`kernel` must be (or wrap) a tfp_adaptive.mcmc kernel. '
                    'Received: %r' % (kernel,))
  params = inner.parameters
  regime = regime_lib.numbers(
      means, inner.preconditioner,
      with_gamma=inner.algorithm.tracks_metric_with_gamma(
          params.get('gamma', 'none')))
  messages = _advice(inner, regime, estimates)
  if warn:
    for message in messages:
      advice_lib.warn(message, type(inner).__name__)
  return regime, messages


def _advice(kernel, regime, estimates=True):
  """The warnings `regime` gets for `kernel` (ours or a wrapper of ours)."""
  inner = kernel_lib.sampler_in(kernel)
  params = inner.parameters
  stochastic = bool(getattr(params['target_log_prob_fn'], 'needs_seed',
                            False))
  return regime_lib.advice(regime, params, 'step_size', inner.preconditioner,
                           stochastic, estimates,
                           gamma=params.get('gamma', 'none'))


class _RegimeMeans(object):
  """Running means of the step norms over the chunks of a run."""

  def __init__(self):
    self.sums, self.steps = None, 0

  def add(self, norms, steps):
    """`norms`: per-chain sums over `steps` steps (or per-step traces)."""
    if norms is None:
      return
    values = [np.asarray(x, np.float64) for x in norms]
    self.sums = values if self.sums is None else [
        a + b for a, b in zip(self.sums, values)]
    self.steps += steps

  def means(self):
    """The run means so far, or `None` before any step."""
    if self.sums is None or self.steps == 0:
      return None
    return [np.mean(x) / self.steps for x in self.sums]

  def regime(self, kernel):
    """The `Regime` of the means so far, or `None` before any step."""
    means = self.means()
    return None if means is None else regime_of(kernel, means, warn=False)[0]

  def check(self, kernel, warned, estimates=True):
    """Warns once per run when the means so far are outside the regime."""
    means = self.means()
    if warned or means is None:
      return warned
    return bool(regime_of(kernel, means, warn=True, estimates=estimates)[1])


def find_field(results, name):
  """The field `name` of `results` or of the first inner results that has it, or `None`."""
  while results is not None:
    if hasattr(results, name):
      return getattr(results, name)
    results = getattr(results, 'inner_results', None)
  return None


def sample(kernel, current_state, num_results, num_burnin_steps=0,
           num_steps_between_results=0, trace_fn=None, seed=None,
           chunk_size=1000, progress=True, jit_compile=True, stuck_steps=100,
           check_temperature=True, predictions=None):
  """`tfp.mcmc.sample_chain` in compiled chunks, with a progress bar.

  Each chunk of `chunk_size` results is one XLA-compiled `sample_chain` call
  (traced once and reused); between chunks the kernel results are checked
  for non-finite steps (``nonfinite='raise'`` raises `FloatingPointError`,
  also under XLA, which drops the kernel's in-graph check; otherwise one
  warning at the end gives how many steps were rejected, in how many
  chains, see `report_nonfinite`), for chains
  that have not moved for `stuck_steps` steps (a warning), and, for our
  kernels, at the end, for the samples' configurational temperature per
  state part and, in its Laplacian form, for the whole state
  (`check_temperature`): a run that is hot, cold or still moving gets one
  warning per part, naming the parameter to change and by how much. The regime numbers that only predict a bias (`check_regime`)
  are then not warned about; a moving average too short for minibatch
  gradients still is. With ``check_temperature=False`` they all are.

  Args:
    kernel: a `tfp.mcmc.TransitionKernel`.
    current_state: initial state (Tensor or list).
    num_results: int >= 1, samples to return.
    num_burnin_steps: int >= 0, steps discarded first.
    num_steps_between_results: int >= 0, thinning.
    trace_fn: as in `sample_chain` (default: no trace).
    seed: stateless seed.
    chunk_size: int >= 1, results per compiled call.
    progress: show a bar / periodic lines.
    jit_compile: compile each chunk with XLA.
    stuck_steps: int >= 1; warn when a chain's last this many steps were all
      rejected (``kernel_results.num_unmoved``).
    check_temperature: read the samples' configurational temperature at the
      end and warn when it is off. The reading costs four gradients per
      chain for each draw it reads: 256 draws, or on a long run as many as
      keep it within a tenth of the run's gradients.
    predictions: optional callable of the state parts returning smooth
      predictions ``[chains..., K...]`` (a network's logits at some
      inputs): the force along them is read and warned on with the
      temperature (`check_temperature`'s `predictions`); needs
      ``check_temperature=True`` and one of our kernels (`ValueError`
      otherwise).

  Returns:
    ``(samples, trace, final_kernel_results)`` (trace is `None` without
    `trace_fn`).
  """
  validation.check_int('num_results', num_results)
  validation.check_int('num_burnin_steps', num_burnin_steps, low=0)
  validation.check_int('num_steps_between_results', num_steps_between_results,
                       low=0)
  validation.check_int('chunk_size', chunk_size)
  validation.check_int('stuck_steps', stuck_steps)
  validation.check_bool('progress', progress)
  validation.check_bool('jit_compile', jit_compile)
  validation.check_bool('check_temperature', check_temperature)
  validation.check_optional_callable(
      'predictions', predictions,
      'a callable taking the state parts and returning a Tensor')
  if predictions is not None and not (
      check_temperature and kernel_lib.sampler_in(kernel) is not None):
    raise ValueError(
        '`predictions` are read at the end of the run with the temperature, '
        'which needs check_temperature=True and one of our kernels. '
        'Received: check_temperature=%r, kernel=%s. For another kernel, call '
        'tfa.mcmc.check_temperature(kernel, samples, predictions=...) after '
        'the run.' % (check_temperature, type(kernel).__name__))
  seed = tfp.random.sanitize_seed(seed)
  key = ('sample', trace_fn, num_steps_between_results, jit_compile)
  runners = _RUNNERS.setdefault(kernel, {})
  if key not in runners:
    runners[key] = _sample_runner(kernel, trace_fn, num_steps_between_results,
                                  jit_compile)
  run = runners[key]

  results = kernel.bootstrap_results(current_state)
  total = num_burnin_steps + num_results * (1 + num_steps_between_results)
  bar = _Progress(total, type(kernel).__name__, progress)
  state, samples, traces, done = current_state, [], [], 0
  track = _RegimeMeans() if kernel_lib.sampler_in(kernel) is not None else None
  warned = False
  try:
    while done < num_results:
      n = min(chunk_size, num_results - done)
      # The burn-in is a loop count, not a shape: as a tensor, the first
      # chunk and the next ones of the same length share one compiled run.
      burn = num_burnin_steps if done == 0 else 0
      seed, chunk_seed = tfp.random.split_seed(seed)
      out = run(state, results, n, tf.constant(burn, tf.int32), chunk_seed)
      chunk, (tr, norms), results = (out.all_states, out.trace,
                                     out.final_kernel_results)
      check_finite(kernel, results, stuck_steps)
      if track is not None:
        track.add([np.sum(x, axis=0) for x in norms], n)
        warned = track.check(kernel, warned,
                             estimates=not check_temperature)
      samples.append(chunk)
      traces.append(tr)
      state = tf.nest.map_structure(lambda x: x[-1], chunk)
      done += n
      bar.update(burn + n * (1 + num_steps_between_results))
  finally:
    bar.close()
  report_nonfinite(kernel, results)
  concat = lambda *xs: tf.concat(xs, axis=0)
  samples = tf.nest.map_structure(concat, *samples)
  traces = tf.nest.map_structure(concat, *traces) if trace_fn else None
  if check_temperature and track is not None:
    seed, temperature_seed = tfp.random.split_seed(seed)
    temperature_lib.check_temperature(kernel, samples, seed=temperature_seed,
                                      max_draws=_reading_draws(kernel, total),
                                      predictions=predictions,
                                      regime=track.regime(kernel),
                                      burnin_share=num_burnin_steps /
                                      (total - num_burnin_steps))
  return samples, traces, results


_READING_SHARE = 0.1


def _reading_draws(kernel, total_steps):
  """How many draws `sample` reads the temperature from after `total_steps` steps.

  At least `check_temperature`'s default; more on a long run, as long as
  the reading's gradients stay within `_READING_SHARE` of the run's. A
  reading's standard error falls
  with the number of effective draws it reads, and a noisy gradient adds
  to each draw's variance what only more draws average out. A draw costs
  a virial, a second difference and a second noise draw (four gradients),
  each a pass over the data for a `MinibatchLogProb`, which is read exact.
  """
  fn = getattr(kernel_lib.sampler_in(kernel), 'target_log_prob_fn', None)
  per_draw = 4.
  if isinstance(fn, minibatch.MinibatchLogProb):
    per_draw = 3. * fn.num_examples / fn.batch_size
  return max(temperature_lib.MAX_DRAWS,
             int(_READING_SHARE * total_steps / per_draw))


def _sample_runner(kernel, trace_fn, num_steps_between_results, jit_compile):
  """A compiled `sample_chain` chunk; cached per kernel so calls reuse traces."""
  trace = trace_fn if trace_fn is not None else (lambda *_: ())

  def run(state, results, n, burn, chunk_seed):
    with warnings.catch_warnings():
      # TFP warns that a kernel without a Metropolis correction is "not
      # calibrated". That is what these samplers are by design; their
      # discretisation bias is checked by the regime numbers instead.
      warnings.filterwarnings('ignore', message=_NOT_CALIBRATED)
      return tfp.mcmc.sample_chain(
          n, state, previous_kernel_results=results, kernel=kernel,
          num_burnin_steps=burn,
          num_steps_between_results=num_steps_between_results,
          trace_fn=lambda s, r: (trace(s, r),
                                 find_field(r, 'step_norms') or ()),
          seed=chunk_seed,
          return_final_kernel_results=True)
  return _compat.quiet_function(run, jit_compile)


_NOT_CALIBRATED = '.*supplied `TransitionKernel` is not calibrated'


def stationary_histogram(kernel, current_state, num_steps, edges, seed=None,
                         chunk_steps=100000, num_groups=1, progress=True,
                         jit_compile=True, stuck_steps=100000):
  """Histogram of every visited state of a 1-D kernel, streamed (no storage).

  Rensmeyer & Niggemann's estimator of the stationary density (eq. 40–41):
  every step of every chain adds to the bin counts. Values outside the edges
  are counted in ``outside``.

  Args:
    kernel: a kernel whose state is one Tensor of shape ``[num_chains]``.
    current_state: that Tensor.
    num_steps: int, steps per chain.
    edges: 1-D array of bin edges (uniform spacing).
    seed: stateless seed.
    chunk_steps: steps per compiled call.
    num_groups: chains are split into this many contiguous groups with
      separate counts (their spread measures the Monte Carlo error).
    stuck_steps: warn when a chain's last this many steps were all rejected.

  Returns:
    ``(counts, outside, final_state, final_kernel_results)``: NumPy int64
    counts per bin (shape ``[num_groups, bins]`` if ``num_groups > 1``), the
    visits outside the edges (per group), and the last state/results.
  """
  validation.check_int('num_steps', num_steps)
  validation.check_int('chunk_steps', chunk_steps)
  validation.check_int('num_groups', num_groups)
  validation.check_int('stuck_steps', stuck_steps)
  validation.check_bool('progress', progress)
  validation.check_bool('jit_compile', jit_compile)
  edges = np.asarray(edges, np.float64)
  if edges.ndim != 1 or len(edges) < 2 or np.any(np.diff(edges) <= 0):
    raise ValueError('`edges` must be a 1-D increasing array of at least 2 '
                     'bin edges. Received shape %s.' % (edges.shape,))
  lo, hi, nbins = float(edges[0]), float(edges[-1]), len(edges) - 1
  seed = tfp.random.sanitize_seed(seed)
  num_chains = int(current_state.shape[0])
  if num_chains % num_groups:
    raise ValueError('`num_groups` must divide the number of chains (%d). '
                     'Received: num_groups=%d' % (num_chains, num_groups))
  group = np.repeat(np.arange(num_groups), num_chains // num_groups)
  offsets = tf.constant(group * (nbins + 1), tf.int32)

  key = (lo, hi, nbins, num_groups, num_chains, jit_compile)
  runners = _RUNNERS.setdefault(kernel, {})
  if key not in runners:
    runners[key] = _histogram_runner(kernel, lo, hi, nbins, num_groups,
                                     offsets, jit_compile)
  run = runners[key]

  state = tf.convert_to_tensor(current_state)
  results = kernel.bootstrap_results(state)
  total = np.zeros([num_groups * (nbins + 1)], np.int64)
  bar = _Progress(num_steps, type(kernel).__name__, progress)
  done = 0
  track, warned = _RegimeMeans(), False
  try:
    while done < num_steps:
      n = min(chunk_steps, num_steps - done)
      seed, run_seed = tfp.random.split_seed(seed)
      state, results, counts, norms = run(state, results, tf.constant(n),
                                          run_seed)
      check_finite(kernel, results, stuck_steps)
      track.add(norms, n)
      warned = track.check(kernel, warned)
      total += counts.numpy()
      done += n
      bar.update(n)
  finally:
    bar.close()
  report_nonfinite(kernel, results)
  total = total.reshape(num_groups, nbins + 1)
  if num_groups == 1:
    return total[0, :-1], int(total[0, -1]), state, results
  return total[:, :-1], total[:, -1], state, results


# Compiled histogram loops, one per kernel and binning (traced once, reused).
# Compiled loops per kernel (a kernel is immutable), so repeated calls on the
# same kernel reuse their traces; entries die with the kernel.
_RUNNERS = weakref.WeakKeyDictionary()


def _histogram_runner(kernel, lo, hi, nbins, num_groups, offsets, jit_compile):
  """An XLA-compiled loop of `n` steps adding every visited state to counts."""
  def run(state, results, n, run_seed):
    dtype = state.dtype

    def body(i, s, r, counts, norms, seed):
      seed, step_seed = tfp.random.split_seed(seed)
      s, r = kernel.one_step(s, r, seed=step_seed)
      norms = [a + b for a, b in zip(norms, find_field(r, 'step_norms'))]
      idx = tf.cast(tf.floor((s - tf.cast(lo, dtype)) /
                             tf.cast((hi - lo) / nbins, dtype)), tf.int32)
      inside = (idx >= 0) & (idx < nbins)
      counts += tf.math.unsorted_segment_sum(
          tf.ones_like(idx, tf.int64), tf.where(inside, idx, nbins) + offsets,
          num_groups * (nbins + 1))
      return i + 1, s, r, counts, norms, seed
    _, s, r, counts, norms, _ = tf.while_loop(
        lambda i, *_: i < n, body,
        (tf.constant(0), state, results,
         tf.zeros([num_groups * (nbins + 1)], tf.int64),
         [tf.zeros_like(state)] * 4, run_seed))
    return s, r, counts, norms
  return _compat.quiet_function(run, jit_compile)
