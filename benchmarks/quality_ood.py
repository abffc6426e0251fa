"""Ensemble quality where users look next: out-of-distribution inputs and shifted inputs, the README's recipe against an Adam deep ensemble.

The model is the README's digits MLP (64 inputs, ``Dense(100)`` ReLU,
10 logits) on scikit-learn's 8×8 digits (offline; the split of
`benchmarks.common.load_dataset`). At equal gradient budgets (the
budget of `benchmarks.quality`): the README's recipe (five chains, each
Adam early-stopped then corrected `PSGLD` at `CurvatureCalibration`'s
step, combined) and deep ensembles of five Adam runs at the quality
benchmark's two learning rates (1e-3 and the recipe's 3e-3), combined by
the same `BayesianEnsemble` code.

- **Unseen classes.** Trained on the digits 0–4 only; the test digits
  0–4 are in distribution, the test digits 5–9 out of it.
- **Noise.** Trained on all ten digits; out of distribution are images of
  the test set with their pixels permuted at random (the same intensities,
  no digit).
- **Shift.** The same models on the test digits rotated by 15° to 60°
  (bilinear, `scipy.ndimage.rotate`, the image kept 8×8): test
  log-likelihood and expected calibration error as the rotation grows
  (Ovadia et al. 2019's protocol on a small scale).

Out-of-distribution detection is scored by the area under the ROC curve
(`sklearn.metrics.roc_auc_score`) of the predictive entropy
``H[p̄]`` and of the mutual information ``H[p̄] − mean_s H[p_s]`` between
the label and the member (the part of the uncertainty that comes from
the weights). Mean ± standard error over seeds, and the wall time of
training.

    python -m benchmarks.quality_ood [--quick] [--seeds 3]
"""

import os
import time

import numpy as np
import scipy.ndimage

from benchmarks import common
from benchmarks import quality

ANGLES = (0, 15, 30, 45, 60)
METHODS = {'README recipe (5 chains)': quality._chains(quality._fit_warm),  # pylint: disable=protected-access
           quality.ADAM: quality._fit_adam,  # pylint: disable=protected-access
           quality.ADAM_FAST: quality._fit_adam_fast}  # pylint: disable=protected-access


def _model(n, y):
  del n, y
  import keras  # pylint: disable=g-import-not-at-top
  return keras.Sequential([keras.Input((64,)),
                           keras.layers.Dense(100, activation='relu'),
                           keras.layers.Dense(10)])


def _loss():
  import keras  # pylint: disable=g-import-not-at-top
  return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def rotate(x, angle):
  """The flat 8×8 images `x` rotated by `angle` degrees, kept 8×8."""
  images = x.reshape(-1, 8, 8)
  turned = scipy.ndimage.rotate(images, angle, axes=(1, 2), reshape=False,
                                order=1, mode='constant', cval=0.)
  return turned.reshape(len(x), 64).astype('float32')


def permuted(x, seed):
  """Each image of `x` with its pixels in a random order of its own."""
  rng = np.random.default_rng(seed)
  return np.stack([row[rng.permutation(64)] for row in x]).astype('float32')


def uncertainties(ensemble, x):
  """``(entropy of the mean prediction, mutual information)`` per input."""
  p = np.clip(ensemble.predict_members(x).astype(np.float64), 1e-12, 1.)
  w = ensemble.member_weights()[:, None, None]
  mean = (w * p).sum(0)
  entropy = -(mean * np.log(mean)).sum(-1)
  expected = (w[..., 0] * -(p * np.log(p)).sum(-1)).sum(0)
  return entropy, entropy - expected


def auroc(inside, outside):
  from sklearn.metrics import roc_auc_score  # pylint: disable=g-import-not-at-top
  labels = np.r_[np.zeros(len(inside)), np.ones(len(outside))]
  return float(roc_auc_score(labels, np.r_[inside, outside]))


def run(quick, seeds):
  """``{method: [metrics per seed]}``."""
  x, y, xt, yt = [a.astype('float32') if a.dtype.kind == 'f' else a
                  for a in common.load_dataset('digits')]
  low, low_test = y < 5, yt < 5
  epochs, size = (6, 2) if quick else (300, 5)
  results = {}
  for method, fit in METHODS.items():
    for seed in range(seeds):
      t0 = time.time()
      ens, _ = fit((x, y, xt, yt), _model, _loss, epochs, seed, size)
      seconds = time.time() - t0
      m = {'seconds': seconds}
      noise = permuted(xt, seed)
      h_in, i_in = uncertainties(ens, xt)
      h_out, i_out = uncertainties(ens, noise)
      m['noise entropy'], m['noise MI'] = auroc(h_in, h_out), auroc(i_in,
                                                                    i_out)
      for angle in ANGLES:
        shifted = ens.evaluate(rotate(xt, angle) if angle else xt, yt)
        m['ll %d' % angle] = shifted['log_likelihood']
        m['ece %d' % angle] = shifted['ece']
        m['accuracy %d' % angle] = shifted['accuracy']
      if quick:  # The same fits on fewer classes: not run again.
        m['classes entropy'] = m['classes MI'] = float('nan')
        results.setdefault(method, []).append(m)
        continue
      t0 = time.time()
      part, _ = fit((x[low], y[low], xt[low_test], yt[low_test]), _model,
                    _loss, epochs, seed, size)
      m['seconds'] += time.time() - t0
      h_in, i_in = uncertainties(part, xt[low_test])
      h_out, i_out = uncertainties(part, xt[~low_test])
      m['classes entropy'], m['classes MI'] = (auroc(h_in, h_out),
                                               auroc(i_in, i_out))
      results.setdefault(method, []).append(m)
      print(method, seed, m, flush=True)
  return results


_cell = quality._cell  # pylint: disable=protected-access


def main():
  # The quality benchmark's command line: `--seeds`, one seed when quick.
  p = common.parser(__doc__.splitlines()[0])
  p.add_argument('--seeds', type=int, default=3)
  args = p.parse_args()
  seeds = 1 if args.quick else args.seeds
  results, out = run(args.quick, seeds), common.out_dir(args.out)
  note = ('scikit-learn\'s digits (1,300 training images, 497 test); %d '
          'seed(s)%s. AUROC: 0.5 is chance, 1 separates in- from '
          'out-of-distribution inputs.' % (
              seeds, ' (--quick: 6 epochs, 2 chains or members, no '
              'unseen classes)'
              if args.quick else ''))
  detect = [[m, _cell(r, 'classes entropy'), _cell(r, 'classes MI'),
             _cell(r, 'noise entropy'), _cell(r, 'noise MI'),
             '%.0f s' % np.mean([x['seconds'] for x in r])]
            for m, r in results.items()]
  shift = [[m] + ['%s / %s' % (_cell(r, 'll %d' % a, 2),
                               _cell(r, 'ece %d' % a, 3)) for a in ANGLES]
           for m, r in results.items()]
  text = '## Out-of-distribution inputs (digits MLP)\n\n%s\n\n%s\n\n' % (
      common.markdown_table(
          ['method', 'AUROC, digits 5–9 (trained on 0–4): entropy',
           'mutual information', 'AUROC, permuted pixels: entropy',
           'mutual information', 'training time (both models)'], detect),
      note)
  text += '## Rotated digits: log-likelihood / ECE\n\n%s\n\n%s\n' % (
      common.markdown_table(['method'] + ['%d°' % a for a in ANGLES], shift),
      'Test log-likelihood per digit and expected calibration error (15 '
      'bins) of the models trained on all ten digits, on the test digits '
      'rotated by each angle.')
  with open(os.path.join(out, 'quality_ood.md'), 'w') as f:
    f.write(text)
  print(text)


if __name__ == '__main__':
  main()
