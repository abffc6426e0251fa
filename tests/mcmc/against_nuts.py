"""Shared by the tests that hold a chain against NUTS: jackknife moments and a run that must not warn."""

import warnings

import numpy as np

import tfp_adaptive as tfa


def jackknife(q, groups):
  """Posterior means and sds of ``[draws, chains, k]`` draws, with jackknife standard errors over chain groups.

  Each chain's averages of ``q`` and ``q²`` are one draw of a statistic;
  the means and sds are smooth functions of their across-chain means, so
  deleting one group at a time gives their errors without an
  autocorrelation model. Returns ``(estimates, se)``, each ``[2, k]``.
  """
  chains = q.shape[1] - q.shape[1] % groups
  m1 = q[:, :chains].mean(0).reshape(groups, -1, q.shape[-1]).mean(1)
  m2 = (q[:, :chains] ** 2).mean(0).reshape(groups, -1, q.shape[-1]).mean(1)
  stat = lambda a, b: np.stack([a, np.sqrt(np.maximum(b - a ** 2, 0.))])
  full = stat(m1.mean(0), m2.mean(0))
  loo = np.stack([stat(np.delete(m1, g, 0).mean(0),
                       np.delete(m2, g, 0).mean(0)) for g in range(groups)])
  se = np.sqrt((groups - 1) / groups * ((loo - loo.mean(0)) ** 2).sum(0))
  return full, se


def assert_run_is_silent(kernel, draws, trace):
  """`tfa.mcmc.check_run` on a `sample_chain` run traced by `trace_checks`: no non-finite step, no warning."""
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter('always')
    report = tfa.mcmc.check_run(kernel, draws, trace, seed=(7, 8))
  assert not np.any(report.num_nonfinite)
  assert not report.warnings, report.warnings
  assert not [w for w in caught if 'tfp_adaptive' in w.filename]
