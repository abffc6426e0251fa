"""`BayesianEnsemble.to_arviz`: an ensemble's members as `arviz.InferenceData`.

Each sample directory the members came from is a chain; the members of a
chain are its draws. The groups are those PSIS-LOO, WAIC and R-hat read:
the members' weights (or steps), the pointwise log-likelihood of the
targets, one posterior-predictive draw per member and example, and the
observed targets.
"""

import collections
import warnings

import numpy as np

from tfp_adaptive import inference_data
from tfp_adaptive.keras.data_arrays import as_arrays
from tfp_adaptive.keras.members import outputs

__all__ = ['to_inference_data']


def to_inference_data(ensemble, x, y=None, batch_size=None, weights=True,
                      seed=0):
  """`ensemble` as `arviz.InferenceData` (`BayesianEnsemble.to_arviz`, whose arguments these are)."""
  az = inference_data.import_arviz()
  if ensemble.weighting != 'uniform':
    raise ValueError('`to_arviz` needs uniform member weights; this '
                     'ensemble has weighting=%r.' % ensemble.weighting)
  x, y = as_arrays(x, y)
  if y is None:
    raise ValueError('`to_arviz` needs targets: pass `y`, or a dataset of '
                     '(x, y) pairs.')
  lik = ensemble.likelihood
  rng = np.random.default_rng(seed)
  chains = collections.defaultdict(list)
  observed = None
  for member, model in zip(ensemble.members, ensemble.iterate_members(x)):
    out = lik.member_output(outputs(model, x, batch_size))
    if observed is None:
      observed = (lik.labels(y, lik.probabilities(out).shape[-1])
                  if lik.is_classification else lik.targets(y, out))
    chains[member.chain].append({
        'log_likelihood': {'y': lik.log_likelihood(out, y)},
        'posterior_predictive': {'y': lik.sample(out, rng)},
        'posterior': ({_var_name(v): v.numpy() for v in model.weights}
                      if weights else {'step': np.asarray(member.step)})})
  draws = min(len(c) for c in chains.values())
  if any(len(c) > draws for c in chains.values()):
    warnings.warn('to_arviz: chains hold %s members; each is cut to the '
                  'first %d.' % (sorted(len(c) for c in chains.values()),
                                 draws))
  groups = {}
  for group, names in chains[min(chains)][0].items():
    groups[group] = {name: np.stack([
        np.stack([d[group][name] for d in chains[c][:draws]])
        for c in sorted(chains)]) for name in names}
  return az.from_dict(observed_data={'y': observed}, **groups)


def _var_name(variable):
  return variable.path.replace('/', '.')
