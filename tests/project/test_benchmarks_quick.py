"""The benchmark scripts run in --quick mode and write their tables and plots.

`benchmarks.keras_speed` is exercised through `benchmarks.speed`, which runs
its measurement (`keras_speed.measure`, `table_rows`, `plot`) in the same
process. Each script runs as ``python -m`` would run it (as ``__main__``,
with its command line), inside the test process: that spares a TensorFlow
import per script; the scripts set their own seeds.
"""

import json
import runpy
import sys

import pytest
from tests.conftest import ROOT
from tests.conftest import full_size_only

# CI runs the quick modes of the benchmarks that hold the library's claims
# and whose code no other test runs (the papers' stationary densities, the
# generated panel with its advice, the quality table); the others' quick
# modes run with the full-size tests (`TFPA_STAT_SCALE > 1`), and every one
# of them with `python -m benchmarks --all --quick`. The regimes' and the
# fixed panel's code is run in CI by tests/diagnostics/test_regimes.py and
# tests/diagnostics/test_panel_verdicts.py (how the panel judges a run).
CI = (('benchmarks.rensmeyer_figures', ()),
      ('benchmarks.panel', ('--generated', '--runs', '2', '--seed', '5',
                            '--advice')),
      ('benchmarks.quality', ()))


def _cases(cases):
  keys = [(c[0], tuple(c[2])) for c in cases]
  assert set(CI) <= set(keys), set(CI) - set(keys)
  return [c if k in CI else pytest.param(*c, marks=full_size_only())
          for c, k in zip(cases, keys)]


@pytest.mark.slow
@pytest.mark.parametrize('module, outputs, args', _cases([
    ('benchmarks.rensmeyer_figures',
     ['%s_%s' % (f, k) for f in ('fig1', 'fig2', 'fig3', 'mixture')
      for k in ('table.md', 'stationary.png')], []),
    ('benchmarks.tfp_side_by_side', ['tfp_side_by_side.md',
                                     'tfp_side_by_side.png'], []),
    ('benchmarks.speed', ['speed.md', 'speed.png'], []),
    ('benchmarks.noise_draw', ['noise_draw.md'], []),
    ('benchmarks.compile_cost', ['compile_cost.md'], []),
    ('benchmarks.gamma_cost', ['gamma_cost.md', 'gamma_cost.png',
                               'gamma_cost_tfp.md', 'gamma_cost_tfp.png'], []),
    ('benchmarks.yu_funnel', ['funnel.md', 'funnel.png'], []),
    ('benchmarks.monitor', ['monitor.md', 'monitor.png'], []),
    # Tunes, then writes the tables with the tuned rate (one run for both).
    ('benchmarks.yu_tables', ['yu_lr_sweep.md', 'yu_learning_rates.json',
                              'yu_tables.md', 'yu_tables.png'],
     ['--tune', 'corrected', '--metrics', 'RMSprop']),
    ('benchmarks.regimes', ['regimes.md', 'regimes.png'], []),
    ('benchmarks.panel', ['panel.md'], []),
    # Two drawn runs, a logistic regression and a Gaussian (seed 5); the
    # first warns, and is run again following its advice.
    ('benchmarks.panel', ['panel_generated.md', 'panel_advice.md'],
     ['--generated', '--runs', '2', '--seed', '5', '--advice']),
    ('benchmarks.cyclical', ['cyclical.md'], []),
    ('benchmarks.frozen_base', ['frozen_base.md'], []),
    ('benchmarks.quality', ['quality.md', 'quality_band.png'], []),
    ('benchmarks.quality_ood', ['quality_ood.md'], []),
    ('benchmarks.quality_uci', ['quality_uci.md'], []),
    ('benchmarks.recipe_members', ['recipe_members.md'], []),
    ('benchmarks.lecture_regression', ['lecture_regression.md',
                                       'lecture_batch.png', 'lecture_tau.png'],
     []),
]))
def test_benchmark_quick_mode_writes_outputs(module, outputs, args, tmp_path,
                                             monkeypatch):
  monkeypatch.syspath_prepend(ROOT)
  monkeypatch.chdir(ROOT)
  monkeypatch.setattr(sys, 'argv', [module, '--quick', '--out',
                                    str(tmp_path)] + args)
  runpy.run_module(module, run_name='__main__', alter_sys=True)
  for name in outputs:
    path = tmp_path / name
    smallest = 20 if name.endswith('.json') else 100  # JSON: one rate.
    assert path.exists() and path.stat().st_size > smallest, name
  if '--tune' in args:  # The corrected variant got its own rate.
    with open(tmp_path / 'yu_learning_rates.json') as f:
      assert 'RMSprop (corrected)' in json.load(f)['gaussian']
