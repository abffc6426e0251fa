"""Runs every benchmark and writes `benchmarks/RESULTS.md` with its figures, stamped.

  python -m benchmarks --all            # the record: RESULTS.md + results/*.png
  python -m benchmarks --all --quick    # small sizes, into benchmarks/out/quick
  python -m benchmarks speed yu_funnel  # some of them

Each benchmark runs in its own process (``python -m benchmarks.<name>``),
one after the other, so the timing benchmarks never share the CPU with
another benchmark. The stamp gives the date, the commit (and whether the
work tree had changes), the CPU, the GPU if any, and the versions of
Python, TensorFlow, TensorFlow Probability and Keras. Numbers in the
documentation come from this file only.
"""

import argparse
import os
import platform
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (module, extra arguments of the full run, title). Timing first.
BENCHMARKS = [
    ('speed', [], 'Speed'),
    ('noise_draw', [], 'The Gaussian noise draw'),
    ('gamma_cost', [], 'Cost of Γ against model size'),
    ('compile_cost', [], 'What XLA costs and saves a Keras fit with Γ'),
    ('shampoo_cost', [], 'Cost of the Shampoo metric'),
    ('monitor', [], 'SamplerMonitor: the configurational temperature'),
    ('rensmeyer_figures', [], 'Stationary densities (Rensmeyer & Niggemann, '
     'Figures 1–3)'),
    ('tfp_side_by_side', [], 'Side by side with TFP\'s pSGLD optimizer'),
    ('peers', [], 'Side by side with BlackJAX (needs the peers extra)'),
    ('peers_loglik', [], 'Time to a held-out log-likelihood against BlackJAX '
     '(needs the peers extra)'),
    ('yu_funnel', [], 'Neal\'s funnel (Yu et al.)'),
    ('lecture_regression', [], 'Bayesian linear regression (exact posterior)'),
    ('minibatch_bias', [], 'Minibatches: error against the step size'),
    ('minibatch_mlp', [], 'Minibatches: the MLP with enough chains to read '
     'a bias'),
    ('defaults', [], 'Every kernel at its defaults, step by the documented '
     'rule'),
    ('regimes', [], 'Regimes: where the samplers are biased'),
    ('panel', [], 'The panel: runs off their target against the warnings'),
    ('panel_generated', ['--advice'], 'The generated panel: misses and '
     'false alarms on drawn targets, and the advice followed'),
    ('thermometer', [], 'The thermometer against the empirical temperature, '
     'small and large models'),
    ('cyclical', [], 'Cyclical step sizes against a constant step'),
    ('calibration', [], 'Priors under the single-chain recipe'),
    ('quality', [], 'Ensemble quality against an Adam deep ensemble'),
    ('quality_ood', [], 'Ensemble quality: out-of-distribution inputs and '
     'shift'),
    # 5 of the protocol's 20 splits: 20 take about 4 hours on 2 cores.
    ('quality_uci', ['--splits', '5'], 'Ensemble quality: the UCI '
     'regression protocol'),
    ('recipe_members', [], 'The README recipe\'s members: temperature '
     'against length and step'),
    ('ensemble_memory', [], 'Memory of an ensemble on disk'),
    ('frozen_base', [], 'Sampling part of a model: a frozen base'),
    ('chains', [], 'Chain parallelism: K processes'),
    ('chains_one_fit', [], 'K chains in one fit'),
    ('yu_tables', ['--seeds', '2'], 'Bayesian MLP on digits (Yu et al.\'s '
     'protocol)'),
]


def _run(cmd):
  return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                        check=False).stdout.strip()


def stamp():
  """Markdown lines: date, commit, machine and library versions."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_probability as tfp  # pylint: disable=g-import-not-at-top
  import keras  # pylint: disable=g-import-not-at-top
  commit = _run(['git', 'rev-parse', '--short', 'HEAD']) or 'unknown'
  # The benchmarks' own outputs (this file's figures) do not count.
  if _run(['git', 'status', '--porcelain', '--untracked-files=no', '--',
           '.', ':!benchmarks/RESULTS.md', ':!benchmarks/results']):
    commit += ' (with uncommitted changes)'
  cpu = platform.processor() or platform.machine()
  try:
    with open('/proc/cpuinfo') as f:
      cpu = next(l.split(':', 1)[1].strip() for l in f
                 if l.startswith('model name'))
  except (OSError, StopIteration):
    pass
  gpus = tf.config.list_physical_devices('GPU')
  return [
      '- Date: %s' % time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime()),
      '- Commit: %s' % commit,
      '- CPU: %s, %d cores; GPU: %s' % (
          cpu, os.cpu_count(), ', '.join(g.name for g in gpus) or
          'none (no GPU was lent to this run: not measured on a GPU)'),
      '- Python %s, TensorFlow %s, TensorFlow Probability %s, Keras %s'
      % (platform.python_version(), tf.__version__, tfp.__version__,
         keras.__version__),
  ]


def main():
  names = [b[0] for b in BENCHMARKS]
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument('names', nargs='*', metavar='NAME',
                 help='benchmarks to run: %s' % ', '.join(names))
  p.add_argument('--all', action='store_true', help='run every benchmark')
  p.add_argument('--quick', action='store_true', help='small sizes (CI)')
  p.add_argument('--device', choices=('auto', 'cpu', 'gpu'), default='auto',
                 help='passed to every benchmark (each prints its device)')
  args = p.parse_args()
  unknown = sorted(set(args.names) - set(names))
  if unknown:
    p.error('unknown benchmark(s) %s; choose from %s'
            % (', '.join(unknown), ', '.join(names)))
  chosen = names if args.all or not args.names else args.names
  if args.quick:
    out = os.path.join(ROOT, 'benchmarks', 'out', 'quick')
    report = os.path.join(out, 'RESULTS.md')
    figures = '.'
  else:
    out = os.path.join(ROOT, 'benchmarks', 'results')
    report = os.path.join(ROOT, 'benchmarks', 'RESULTS.md')
    figures = 'results'
  os.makedirs(out, exist_ok=True)
  sections = _read_sections(report)
  for name, extra, title in BENCHMARKS:
    if name not in chosen:
      continue
    before = set(os.listdir(out))
    start = time.time()
    command = [sys.executable, '-m', 'benchmarks.' + name, '--out', out,
               '--device', args.device]
    command += ['--quick'] if args.quick else extra
    print('== %s' % ' '.join(['python'] + command[1:]), flush=True)
    run = subprocess.run(command, cwd=ROOT, check=True, text=True,
                         stdout=subprocess.PIPE)
    print(run.stdout, end='', flush=True)
    device = next((l.split(':', 1)[1].strip() for l in
                   run.stdout.splitlines() if l.startswith('Device:')),
                  'unknown')
    written = sorted(set(os.listdir(out)) - before | _touched(out, start))
    sections[name] = _section(out, figures, name, title, written,
                              time.time() - start, args.quick, extra, device)
    _write(report, sections, args.quick)  # After each: a crash keeps the rest.
  print('Wrote %s' % report)


def _write(report, sections, quick):
  order = [b[0] for b in BENCHMARKS]
  body = [sections[n] for n in order if n in sections]
  text = '\n'.join(
      ['# Benchmark results', '',
       'Written by `python -m benchmarks --all%s` (or by `python -m benchmarks '
       'NAME ...`, which replaces those sections); do not edit by hand. Each '
       'section gives the commit and date of its run; the machine and '
       'versions of the last run are:' % (' --quick' if quick else ''), ''] +
      stamp()[2:] + [''] + body)
  with open(report, 'w') as f:
    f.write(text)


def _read_sections(report):
  """The sections of an existing report, by benchmark name."""
  if not os.path.exists(report):
    return {}
  with open(report) as f:
    text = f.read()
  sections = {}
  for name in [b[0] for b in BENCHMARKS]:
    start = text.find(_MARK % name)
    end = text.find(_END % name)
    if start >= 0 and end > start:
      sections[name] = text[start:end + len(_END % name)] + '\n'
  return sections


def _touched(out, since):
  return {n for n in os.listdir(out)
          if os.path.getmtime(os.path.join(out, n)) >= since}


_MARK = '<!-- benchmark:%s -->'
_END = '<!-- end:%s -->'


def _section(out, figures, name, title, written, seconds, quick, extra,
             device):
  head = stamp()
  lines = [_MARK % name, '## %s' % title, '',
           '`python -m benchmarks.%s%s` (%.0f s on %s); %s; %s.' % (
               name, ' --quick' if quick else ''.join(' ' + a for a in extra),
               seconds, device, head[1][2:], head[0][2:]), '']
  for file in written:
    if file.endswith('.md'):
      with open(os.path.join(out, file)) as f:
        body = f.read().split('\n', 1)[1]  # Drop the table's own title.
      lines += [body.strip(), '']
  lines += ['![%s](%s/%s)' % (file, figures, file) for file in written
            if file.endswith('.png')]
  lines += ['', _END % name]
  return '\n'.join(lines) + '\n'


if __name__ == '__main__':
  main()
