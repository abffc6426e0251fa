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
# at least one process per core (`-n 3` on two), and more thread pools than
# cores only contend.
os.environ.setdefault('TF_NUM_INTRAOP_THREADS', '1')
os.environ.setdefault('TF_NUM_INTEROP_THREADS', '1')

import pytest  # pylint: disable=g-import-not-at-top


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


def pytest_configure(config):
  config.addinivalue_line('markers', 'statistical: seeded Monte Carlo tests '
                          '(size set by TFPA_STAT_SCALE)')
  config.addinivalue_line('markers', 'slow: subprocess / multi-device tests')


# Tests that spend most of their time waiting for processes they start
# (SIGKILL soaks): started first, their waits overlap the other tests'
# work instead of leaving cores idle at the end of the run.
_WAITING = ('test_keras_resume.py::test_sigkill',)


def pytest_collection_modifyitems(items):
  items.sort(key=lambda item: not any(w in item.nodeid for w in _WAITING))


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

