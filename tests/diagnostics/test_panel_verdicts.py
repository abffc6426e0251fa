"""How the panel (`benchmarks.panel`) judges a run: every quantity counts, and the empirical temperature of exact Gaussian draws."""

import numpy as np
import pytest

from benchmarks import panel_truth as truth


def _verdict(rel, se):
  k = truth.deciding(rel, se)
  return truth.classify(rel[k], se[k])


@pytest.mark.parametrize('rel, se, expected', [
    # One quantity clearly within 5%, another too uncertain to call.
    ([-0.010, 0.033], [0.013, 0.035], 'unclear'),
    ([-0.010, 0.020], [0.013, 0.010], 'accurate'),
    # One clearly outside, however the others look.
    ([0.001, 0.09, 0.03], [0.001, 0.01, 0.04], 'biased'),
    # Off by more than 100%, whatever its error.
    ([0.02, 5., 0.3], [0.01, 100., 0.01], 'biased'),
])
def test_a_run_is_accurate_only_when_every_quantity_is(rel, se, expected):
  assert _verdict(np.array(rel), np.array(se)) == expected


@pytest.mark.parametrize('err, se, off, within', [
    (0.08, 0.01, False, False),  # Beyond 5%, not beyond 10%: neither.
    (0.13, 0.01, True, False),
    (0.13, 0.02, False, False),  # Not beyond 10% by two errors.
    (0.02, 0.01, False, True),
    (-3., 10., True, False),  # Off by more than 100%, whatever its error.
])
def test_the_generated_panel_calls_a_run_off_beyond_10_and_within_5(err, se,
                                                                     off,
                                                                     within):
  from benchmarks import panel_generated  # pylint: disable=g-import-not-at-top
  row = panel_generated.judged('gaussian', 't', 's', err, se, 'sd', [], 0.)
  assert (row['off'], row['within']) == (off, within)
  assert truth.classify(err, se) == ('biased' if abs(err) - 2 * se > 0.05 or
                                     abs(err) > 1 else 'accurate' if within
                                     else 'unclear')


def test_the_empirical_temperature_of_exact_draws_is_their_temperature():
  """Draws of N(μ, τΣ) read τ in both forms, within 4 standard errors, and
  draws at τ = 1 read 1: so a reading beside them is judged against the
  truth."""
  rng = np.random.default_rng(0)
  a = rng.normal(size=(5, 5))
  cov = a @ a.T + 0.1 * np.eye(5)
  mean = rng.normal(size=5)
  _, _, empirical = truth.gaussian(cov, mean)
  chol = np.linalg.cholesky(cov)
  for tau in (1., 1.5):
    draws = mean + np.sqrt(tau) * rng.normal(size=(4000, 8, 5)) @ chol.T
    for reading in empirical(draws):
      assert abs(reading.temperature - tau) < 4. * reading.standard_error, (
          tau, reading)
      assert reading.standard_error < 0.05 * tau


def test_control_runs_are_a_share_drawn_apart_from_each_runs_own_draws():
  """The generated panel's control runs: about `CONTROL` of the runs, about `FIT_CONTROL` of them in `fit` (binomial counts within 4 sds), none at share 0, all at 1; SGLD or a frozen metric, at least `CONTROL_STEPS[0]` steps with a quarter of burn-in."""
  from benchmarks import panel_generated as generated  # pylint: disable=g-import-not-at-top
  seed, n = int(np.random.default_rng().integers(1 << 20)), 2000
  kinds = [generated.is_control(seed, i) for i in range(n)]
  assert set(kinds) == {False, 'kernel', 'fit'}, (seed, set(kinds))
  within_4_sds = lambda k, n, p: abs(k - n * p) < 4. * np.sqrt(
      n * p * (1. - p))
  k = sum(map(bool, kinds))
  assert within_4_sds(k, n, generated.CONTROL), (seed, k)
  assert within_4_sds(kinds.count('fit'), k, generated.FIT_CONTROL), (
      seed, kinds.count('fit'), k)
  assert not any(generated.is_control(seed, i, 0.) for i in range(50))
  assert all(generated.is_control(seed, i, 1.) for i in range(50))
  for i in range(20):
    st = generated.draw_control_settings(np.random.default_rng([seed, i]),
                                         False)
    assert st.name in ('SGLD', 'PSGLD frozen') and st.gamma == 'none', st
    assert st.steps + st.burn >= generated.CONTROL_STEPS[0] - 1, st
    assert st.burn == (st.steps + st.burn) // 4, st
    assert (st.frozen == st.burn) == (st.name == 'PSGLD frozen'), st


@pytest.mark.slow
def test_a_control_in_fit_runs_many_chains_of_the_full_batch_and_is_judged():
  """The generated panel's control in `fit` (quick size): chains of SGLD in one `fit` on a well-conditioned regression, the full batch, judged against the exact posterior as the other runs are."""
  from benchmarks import panel_generated as generated  # pylint: disable=g-import-not-at-top
  row = generated.one_fit_control(np.random.default_rng([99, 2]), True)
  assert row['family'] == 'fit control', row
  assert row['target'].endswith('batch full'), row
  assert row['sampler'].startswith('SGLD (2 chains, CurvatureCalibration'), row
  assert np.isfinite(row['err']) and 0. < row['se'] < 1., row
  assert isinstance(row['said'], list), row
