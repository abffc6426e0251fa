"""Cost of the corrected Γ against the number of parameters D (one run, side by side).

For MLPs 784-h-h-10 (batch 100) of growing width, the time of one
XLA-compiled kernel step with ``gamma='corrected'`` (Hutchinson, one
forward-over-reverse pass) over the same step with ``gamma='none'``, for the
diagonal (PSGLD), layer-wise (Wenzel) and rank-one (Monge) metrics. Writes
``gamma_cost.md`` and ``gamma_cost.png``.

    python -m benchmarks.gamma_cost [--quick]
"""

import os

import tfp_adaptive as tfa
from benchmarks import common
from benchmarks import speed

SAMPLERS = {
    'PSGLD': lambda lp, mode: tfa.mcmc.PSGLD(lp, 1e-6, 0.99, 1e-8, gamma=mode),
    'WenzelSGLD': lambda lp, mode: tfa.mcmc.WenzelSGLD(lp, 1e-6, 0.99,
                                                       gamma=mode),
    'MongeSGRLD': lambda lp, mode: tfa.mcmc.MongeSGRLD(lp, 1e-6, 1e-3, 0.99,
                                                       gamma=mode),
}


def num_params(hidden):
  return 784 * hidden + hidden + hidden * hidden + hidden + hidden * 10 + 10


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  out = common.out_dir(args.out)
  widths = [4] if args.quick else [4, 16, 64, 256, 1024]
  repeats = 3 if args.quick else 30
  ratios = {name: [] for name in SAMPLERS}
  rows = []
  for h in widths:
    for name, make in SAMPLERS.items():
      t = speed.mlp_step_times(repeats, hidden=h, make_kernel=make)
      ratios[name].append(t['corrected'] / t['none'])
      rows.append([name, h, num_params(h), '%.2f ms' % (1e3 * t['none']),
                   '%.2f ms' % (1e3 * t['corrected']),
                   '%.2f' % ratios[name][-1]])
  common.write_table(
      os.path.join(out, 'gamma_cost.md'),
      'Γ cost vs D (%s)' % ('quick' if args.quick else 'full'),
      ['sampler', 'width', 'D', 'none', 'corrected', 'ratio'], rows,
      'Command: `python -m benchmarks.gamma_cost%s`.' %
      (' --quick' if args.quick else ''))
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for name, r in ratios.items():
    ax.plot([num_params(h) for h in widths], r, 'o-', label=name)
  ax.set_xscale('log')
  ax.set_xlabel('number of parameters D')
  ax.set_ylabel('step time, corrected / none')
  ax.axhline(1.5, color='gray', ls=':', label='1.5× target')
  ax.legend()
  fig.tight_layout()
  fig.savefig(os.path.join(out, 'gamma_cost.png'), dpi=120)


if __name__ == '__main__':
  main()
