"""Shared test set-up: quiet TF logs; size of the statistical runs from the environment.

`TFPA_STAT_SCALE` (default 1.0) multiplies the number of chains/steps of the
statistical tests; CI runs them at the default reduced size, a value like 10
gives the slow, tighter runs. The tolerances are always derived from the
Monte Carlo error measured in the run itself, so they tighten with the size.
"""

import contextlib
import os
import warnings

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
# One thread per test process (and the processes they start): the suite runs
# one process per core (`-n 2` on two), and more thread pools than cores only
# contend (a third process on two cores costs more in contention than it
# gains while the subprocess tests wait).
os.environ.setdefault('TF_NUM_INTRAOP_THREADS', '1')
os.environ.setdefault('TF_NUM_INTEROP_THREADS', '1')

import pytest  # pylint: disable=g-import-not-at-top

#: The repository's root.
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stat_scale():
  return float(os.environ.get('TFPA_STAT_SCALE', '1'))


def full_size_only():
  """`pytest.param` marks for cases that run only with ``TFPA_STAT_SCALE > 1``.

  CI runs each sampler's statistical tests at reduced size, some of their
  variants only at full size (the statistical flag).
  """
  import pytest  # pylint: disable=g-import-not-at-top
  return pytest.mark.skipif(stat_scale() <= 1.,
                            reason='full size only (TFPA_STAT_SCALE > 1)')


def in_ci(cases, chosen):
  """`cases` (values or tuples of parameters) as test parameters: those in `chosen` run in CI, the others at full size only.

  For products of variants (sampler x execution mode, ...): `chosen` covers
  every value of every factor in some case, the full-size run the whole
  product.
  """
  import pytest  # pylint: disable=g-import-not-at-top
  unknown = [c for c in chosen if c not in cases]
  assert not unknown, unknown
  return [c if c in chosen else pytest.param(
      *(c if isinstance(c, tuple) else (c,)), marks=full_size_only())
          for c in cases]


def pytest_configure(config):
  config.addinivalue_line('markers', 'statistical: seeded Monte Carlo tests '
                          '(size set by TFPA_STAT_SCALE)')
  config.addinivalue_line('markers', 'slow: over a few seconds on one core '
                          '(training runs, compiles, subprocesses, devices); '
                          '`-m "not slow and not statistical"` is the quick '
                          'tier')


# The longest tests, longest first (from `--durations`). Under xdist's
# `worksteal` each worker starts on a contiguous slice of the collection and
# idle workers steal from the end of the others' queues; these are dealt
# round-robin to the heads of the slices, so that each worker starts with
# its share of them and the run ends on short tests, not on one long test
# started late. The SIGKILL soaks mostly wait for the processes they start:
# started first, their waits overlap the other tests' work.
_LONGEST = (
    'test_benchmarks_quick.py::test_benchmark_quick_mode_writes_outputs[benchmarks.panel-outputs11',
    'test_keras_distribute.py::test_mirrored_strategy',
    'test_keras_resume.py::test_sigkill_at_random',
    'test_refused_defaults.py::test_the_riemannian_defaults_take_no_nonfinite_step_on_a_network[ShampooSGRLD-input_scales3]',
    'test_regimes.py::test_a_reading_too_wide_to_vouch',
    'test_keras_resume.py::test_sigkill_with_chains_in_one_fit',
    'test_eight_schools.py::test_corrected_sampler_matches_nuts[psgld]',
    'test_keras_resume.py::test_sigkill_without_seeds',
    'test_regimes.py::test_full_batch_regression_at_the_recommended_settings',
    'test_keras_distribute.py::test_multi_worker',
    'test_minibatch_consistency.py::test_the_corrected_sampler_matches_nuts',
    'test_examples.py::test_readme_keras_quick_start',
    'test_minibatch_consistency.py::test_lagged_corrected_sampler_is_consistent',
    'test_regression_noise.py::test_diabetes_in_its_own_units',
    'test_snippets.py::test_snippet_runs_without_warnings[docs/guides/keras.md#5]',
    'test_keras_optimizers.py::test_preconditioned_sghmc_fits_with_gamma_and_saves_its_velocity[PSGLD-xla]',
    'test_posteriors.py::test_bayesian_linear_regression_exact_posterior[psgld]',
    'test_temperature.py::test_the_monitor_reads_a_small_model',
    'test_examples.py::test_readme_regression_recipe',
    'test_panel_verdicts.py::test_a_control_in_fit_runs_many_chains',
)


def _rank(item):
  for rank, name in enumerate(_LONGEST):
    if name in item.nodeid:
      return rank
  return None


def pytest_collection_modifyitems(config, items):
  workers = int(getattr(config, 'workerinput', {}).get('workercount', 1))
  long_ones = sorted((i for i in items if _rank(i) is not None), key=_rank)
  rest = [i for i in items if _rank(i) is None]
  ordered, remaining = [], len(items)
  for k in range(workers):  # The slice sizes of xdist's first deal.
    size = remaining // (workers - k)
    remaining -= size
    head = long_ones[k::workers]
    cut = max(size - len(head), 0)
    tail, rest = rest[:cut], rest[cut:]
    ordered += head + tail
  items[:] = ordered + rest


@pytest.fixture
def scale():
  return stat_scale()


@pytest.fixture
def noise_draw_seeds(monkeypatch):
  """Seeds of `noise.normal` and `noise.normal_signs` draws: ``{name: [seed]}``.

  Eager only (the seeds are read as NumPy values).
  """
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tfp_adaptive.core import noise  # pylint: disable=g-import-not-at-top
  seeds = {'normal': [], 'normal_signs': []}

  def recording(name):
    draw = getattr(noise, name)

    def wrapped(parts, seed):
      seeds[name].append(tuple(np.asarray(seed).tolist()))
      return draw(parts, seed)
    return wrapped
  for name in seeds:
    monkeypatch.setattr(noise, name, recording(name))
  return seeds


@contextlib.contextmanager
def no_warning(containing=''):
  """Fails if the block warns with a message containing `containing` (any, if empty).

  Deprecation warnings (of the libraries underneath) do not count.
  """
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    yield
  found = [str(w.message) for w in caught
           if containing in str(w.message) and not issubclass(
               w.category, (DeprecationWarning, PendingDeprecationWarning))]
  assert not found, found


def repeated(x, y, batch_size, seed=0):
  """``(dataset, steps_per_epoch)``: `x, y` reshuffled every epoch, batched, repeated.

  For tests that run hundreds of short epochs: Keras builds a new iterator
  over NumPy inputs every epoch (about 25 ms on two cores, more than such
  an epoch's steps), and iterates a repeated dataset once. The batches
  differ from ``fit(x, y, batch_size=...)``'s: under
  `keras.utils.set_random_seed`, Keras deals its NumPy inputs in one
  permutation every epoch; this reshuffles.
  """
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
      len(x), seed=seed, reshuffle_each_iteration=True)
  return data.batch(batch_size).repeat(), -(-len(x) // batch_size)


def only_unsettled(caught, too_short=False):
  """Asserts that the only warnings in `caught` are the collector's thermometer saying the chain has not settled.

  What the README's recipe may say: its warm start leaves the weights the
  data do not pin down at Adam's scale. Deprecation warnings do not count.
  ``too_short``: the collector may also say that the run had too few steps
  to be read (a small data set's epochs are few steps), as the README says.
  """
  said = [str(w.message) for w in caught if not issubclass(
      w.category, (DeprecationWarning, PendingDeprecationWarning))]
  unsettled = lambda m: (
      m.startswith('SampleCollector: the configurational temperature')
      and 'has not settled' in m)
  short = lambda m: too_short and m.startswith(
      'SampleCollector: this run was too short to tell')
  assert all(unsettled(m) or short(m) for m in said), said
