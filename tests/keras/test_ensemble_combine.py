"""Several chains in one process: `BayesianEnsemble.combine`, as a user runs it.

Each chain is a `fit` of a fresh functional model (logits out,
``from_logits=True``) with its own seed and collector, as a deep ensemble
is trained; the combined ensemble predicts the average over every member
of every chain (checked against the per-chain ensembles' predictions,
weighted by their member counts), keeps the chains apart in
`Member.chain`, and saves one sample directory per chain that `load` reads
back to the same predictions. Ensembles that do not belong together are
refused, naming what differs.
"""

import keras
import numpy as np
import pytest

import tfp_adaptive as tfa


def _data(n=200, seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 4)).astype('float32')
  y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype('int64')
  return x, y


def _model(hidden=8):
  inputs = keras.Input((4,))
  h = keras.layers.Dense(hidden, activation='relu')(inputs)
  return keras.Model(inputs, keras.layers.Dense(2)(h))


def _chain(seed, x, y, hidden=8, epochs=6):
  keras.utils.set_random_seed(seed)
  model = _model(hidden)
  model.compile(tfa.keras.optimizers.SGLD(1e-4, data_size=len(x), seed=seed),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  collector = tfa.keras.SampleCollector(burnin=2, unit='epoch',
                                        monitor=False)
  model.fit(x, y, batch_size=50, epochs=epochs, verbose=0,
            callbacks=[collector])
  return collector.ensemble


@pytest.fixture(scope='module')
def chains():
  x, y = _data()
  return x, y, [_chain(k, x, y) for k in range(3)]


@pytest.mark.slow
def test_combined_chains_predict_the_mean_over_all_members(chains, tmp_path):
  x, y, ensembles = chains
  combined = tfa.keras.BayesianEnsemble.combine(ensembles)
  counts = [len(e) for e in ensembles]
  assert len(combined) == sum(counts) and min(counts) >= 3
  assert combined.chains == [0, 1, 2]
  assert [m.chain for m in combined.members] == [
      k for k, n in enumerate(counts) for _ in range(n)]
  expected = sum(n * e.predict(x) for n, e in zip(counts, ensembles))
  np.testing.assert_allclose(combined.predict(x), expected / sum(counts),
                             rtol=1e-5, atol=1e-6)
  metrics = combined.evaluate(x, y)
  assert np.isfinite(metrics['log_likelihood']) and metrics['accuracy'] > 0.5

  combined.save(str(tmp_path / 'samples'))
  assert sorted(p.name for p in (tmp_path / 'samples').iterdir()) == [
      'chain_0', 'chain_1', 'chain_2']
  loaded = tfa.keras.BayesianEnsemble.load(str(tmp_path / 'samples'),
                                           model=_model())
  assert loaded.chains == [0, 1, 2] and len(loaded) == len(combined)
  np.testing.assert_allclose(loaded.predict(x), combined.predict(x),
                             rtol=1e-5, atol=1e-6)
  with pytest.raises(ValueError, match='already holds samples'):
    combined.save(str(tmp_path / 'samples' / 'chain_0'))


@pytest.mark.slow
def test_combine_refuses_what_does_not_belong_together(chains):
  x, y, ensembles = chains
  with pytest.raises(ValueError, match='at least one'):
    tfa.keras.BayesianEnsemble.combine([])
  with pytest.raises(TypeError, match=r'`ensembles\[1\]`'):
    tfa.keras.BayesianEnsemble.combine([ensembles[0], 'chain'])
  wider = _chain(7, x, y, hidden=16, epochs=3)
  with pytest.raises(ValueError, match=r'`ensembles\[1\]`.*shape'):
    tfa.keras.BayesianEnsemble.combine([ensembles[0], wider])
  bernoulli = tfa.keras.BayesianEnsemble(ensembles[1].model,
                                         ensembles[1].members,
                                         likelihood='bernoulli')
  with pytest.raises(ValueError, match='likelihood'):
    tfa.keras.BayesianEnsemble.combine([ensembles[0], bernoulli])
