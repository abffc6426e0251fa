"""The Bayesian MLP with minibatches at the smallest steps, with enough chains that their own Monte Carlo error is below the distance read.

`benchmarks.minibatch_bias` reads the MLP's test predictive against NUTS
with 16 chains a sampler. There the chains' own Monte Carlo floor (the
distance between two of their groups) is about three of NUTS's, so a
distance of about two NUTS floors is what an exact sampler with that
many chains would show: the table cannot tell a bias from noise at the
smallest steps. Here the same target (`benchmarks.bayesian_mlp`: two
moons, 500 examples, 2-20-20-1 tanh, 501 weights, prior N(0, 1),
minibatches of 50) and the same NUTS reference are read with 48 chains a
sampler, at the smallest step of each sampler there, over the same
horizon:

* SGLD at ``h = 1e-4``;
* PSGLD (decay 0.95, ``diagonal_bias=1e-3``) at ``h = 1e-3``, with
  ``gamma='corrected'`` (the metric and Γ from a second minibatch) and
  with ``gamma='corrected_published'`` (the metric and Γ from the drift's
  own minibatch).

Columns: the distance to NUTS (mean total variation of the test
predictive between a group of 12 chains and a group of NUTS's 4, over
all pairs, in units of NUTS's floor), its standard error over the
groups; the chains' own floor in the same units; and the distance that
Monte Carlo error alone would give, ``sqrt((1 + own²)/2)`` (total
variations of independent errors add about in quadrature; for NUTS
against itself this is 1). A distance above that by more than its
standard errors is a bias. Writes ``minibatch_mlp.md``.

    python -m benchmarks.minibatch_mlp [--quick]
"""

import os
import time

from benchmarks import common
from benchmarks import minibatch_bias


def samplers():
  """`minibatch_bias`'s SGLD and its default and published corrected PSGLD: ``(label, kernel factory, preconditioned?)``."""
  keep = ('SGLD', "PSGLD, gamma='corrected'",
          "PSGLD, gamma='corrected_published'")
  return [s for s in minibatch_bias.samplers() if s[0] in keep]


def main():
  args = common.parser(__doc__.splitlines()[0]).parse_args()
  common.select_device(args.device)
  out = common.out_dir(args.out)
  target, reference = minibatch_bias.mlp_target(args.quick)
  nuts_chains = minibatch_bias.MLP_NUTS[args.quick][0]
  chains, horizon, kept = (8, 0.05, 50) if args.quick else (48, 30., 1000)
  floor = minibatch_bias.predictive_floor(reference)
  rows = []
  for k, (label, factory, preconditioned) in enumerate(samplers()):
    start = time.perf_counter()
    # The smallest step of each in `benchmarks.minibatch_bias`, and the
    # horizon in units of SGLD's time: h = 1e-3 of a preconditioned
    # sampler is about SGLD's 1e-4 here.
    h = 1e-3 if preconditioned else 1e-4
    scaled = horizon * (10. if preconditioned else 1.)
    error, se, own = minibatch_bias.mlp_error(
        factory, target, reference, floor, h, chains, scaled, (11, k),
        draws=kept)
    rows.append([label, '%g' % h, int(scaled / h), '%.2f ± %.2f' % (error, se),
                 '%.2f' % own,
                 '%.2f' % minibatch_bias.monte_carlo_alone(own),
                 '%.0f' % (time.perf_counter() - start)])
    print(rows[-1], flush=True)
  common.write_table(
      os.path.join(out, 'minibatch_mlp.md'),
      'The MLP with minibatches: %d chains a sampler at the smallest steps'
      % chains,
      ['sampler', 'h', 'steps', 'distance to NUTS (NUTS floors, ± se)',
       'own floor', 'Monte Carlo alone', 'seconds'], rows,
      note=('%d chains in %d groups; NUTS: %d chains in %d groups. A quarter '
            'of each run is burn-in; %d predictives kept, evenly spaced. '
            '"Monte Carlo alone": sqrt((1 + own²)/2), the distance of an '
            'exact sampler with these chains.' % (
                chains, minibatch_bias.GROUPS, nuts_chains,
                minibatch_bias.GROUPS, kept)))


if __name__ == '__main__':
  main()
