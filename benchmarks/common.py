"""Shared bits of the benchmark scripts: output folder, markdown tables, 1-D predictions."""

import argparse
import os
import platform

import numpy as np

from tfp_adaptive import diagnostics

__all__ = ['binned', 'markdown_table', 'out_dir', 'parser', 'write_table']

EDGES = np.arange(-4.5, 4.5001, 0.1)


def parser(description):
  p = argparse.ArgumentParser(description=description)
  p.add_argument('--quick', action='store_true',
                 help='small sizes (CI): checks that it runs and writes outputs')
  p.add_argument('--out', default='benchmarks/out', help='output folder')
  return p


def out_dir(path):
  os.makedirs(path, exist_ok=True)
  return path


def binned(density, edges=EDGES):
  """Bin probabilities of an unnormalised 1-D density."""
  return diagnostics.bin_probabilities(density, edges)


def markdown_table(header, rows):
  lines = ['| ' + ' | '.join(header) + ' |',
           '|' + '---|' * len(header)]
  lines += ['| ' + ' | '.join(str(c) for c in r) + ' |' for r in rows]
  return '\n'.join(lines)


def write_table(path, title, header, rows, note=''):
  text = '## %s\n\nMachine: %s, %d cores.\n\n%s\n\n%s\n' % (
      title, platform.processor() or platform.machine(), os.cpu_count(),
      markdown_table(header, rows), note)
  with open(path, 'w') as f:
    f.write(text)
  print(text)
