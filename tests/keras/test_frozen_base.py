"""Sampling the head of a frozen, pretrained base, as keras.io's transfer-learning guide sets it up.

A base is trained with Adam on the digits, frozen (``base.trainable =
False``) and called with ``training=False`` inside a new functional model
whose head is sampled. The frozen base is stored once per sample
directory (`tfp_adaptive.keras.frozen_part`): each member's file holds the
head only, the in-memory members share one copy of the base, and the
ensemble computes the base once per input batch and the heads per member,
with the same predictions as member-by-member passes of the whole model.
Save, load, `combine` and damage to the shared file are checked here; the
resume after SIGKILL in `test_keras_resume.py`.
"""

import os

import keras
import numpy as np
import pytest

import tfp_adaptive as tfa
from tfp_adaptive.keras import frozen_part
from tfp_adaptive.keras import members as members_lib


def _digits():
  from sklearn.datasets import load_digits  # pylint: disable=g-import-not-at-top
  x, y = load_digits(return_X_y=True)
  return (x / 16.).astype('float32'), y.astype('int64')


def _pretrained_base(x, y):
  """A base trained with Adam (with a classifier it then drops), frozen."""
  keras.utils.set_random_seed(0)
  base = keras.Sequential([keras.Input((64,)),
                           keras.layers.Dense(128, activation='relu'),
                           keras.layers.BatchNormalization(),
                           keras.layers.Dense(64, activation='relu')],
                          name='base')
  pretrain = keras.Sequential([base, keras.layers.Dense(10)])
  pretrain.compile('adam', keras.losses.SparseCategoricalCrossentropy(
      from_logits=True))
  pretrain.fit(x, y, epochs=3, batch_size=64, verbose=0)
  base.trainable = False
  return base


def _model(base, seed):
  keras.utils.set_random_seed(seed)
  inputs = keras.Input((64,))
  h = base(inputs, training=False)
  h = keras.layers.Dropout(0.2)(h)
  return keras.Model(inputs, keras.layers.Dense(10)(h))


def _fit(base, x, y, seed, directory=None):
  model = _model(base, seed)
  model.compile(tfa.keras.optimizers.PSGLD(2e-4, data_size=len(x),
                                           seed=seed),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  collector = tfa.keras.SampleCollector(burnin=2, unit='epoch',
                                        directory=directory, monitor=False)
  model.fit(x, y, batch_size=100, epochs=6, verbose=0, callbacks=[collector])
  return model, collector.ensemble


def _whole_model_outputs(ensemble, x):
  """Every member's logits from passes of the whole model (no cut)."""
  return np.stack([members_lib.outputs(m, x)
                   for m in ensemble.iterate_members(x)])


@pytest.fixture(scope='module')
def run(tmp_path_factory):
  x, y = _digits()
  base = _pretrained_base(x, y)
  directory = str(tmp_path_factory.mktemp('frozen') / 'samples')
  model, streamed = _fit(base, x, y, seed=1, directory=directory)
  return x, y, base, model, streamed, directory


def _head_bytes(model):
  return sum(v.numpy().nbytes for v in model.weights
             if v.trainable or 'dropout' in v.path)


@pytest.mark.slow
def test_a_member_file_holds_the_head_and_the_base_is_stored_once(run):
  x, _, base, model, ensemble, directory = run
  assert len(ensemble) == 4
  names = sorted(os.listdir(directory))
  frozen = [n for n in names if n.startswith('frozen_')]
  samples = [n for n in names if n.startswith('sample_')]
  assert len(frozen) == 1 and len(samples) == 4
  head = _head_bytes(model)
  base_bytes = sum(v.numpy().nbytes for v in base.weights)
  assert base_bytes > 10 * head
  for name in samples:
    # The head's arrays plus the npz container and the metadata.
    assert os.path.getsize(os.path.join(directory, name)) <= 1.1 * head + 4096
  assert os.path.getsize(os.path.join(directory, frozen[0])) >= base_bytes
  # The members read back whole: the base's values are the frozen ones.
  for member in ensemble.members:
    values = members_lib.member_values(member)
    for i in frozen_part.frozen_indices(model):
      np.testing.assert_array_equal(values[i], model.weights[i].numpy())


@pytest.mark.slow
def test_the_cut_model_predicts_as_the_whole_one(run):
  x, y, _, model, ensemble, _ = run
  assert ensemble._cut(x) is not None  # pylint: disable=protected-access
  np.testing.assert_allclose(ensemble.predict_members(x),
                             _softmax(_whole_model_outputs(ensemble, x)),
                             rtol=1e-5, atol=1e-6)
  before = [v.numpy() for v in model.weights]
  metrics = ensemble.evaluate(x, y)
  assert metrics['accuracy'] > 0.8
  for v, a in zip(model.weights, before):  # The model's weights restored.
    np.testing.assert_array_equal(v.numpy(), a)


@pytest.mark.slow
def test_in_memory_members_share_one_copy_of_the_base(run):
  x, y, base, _, _, _ = run
  model, ensemble = _fit(base, x, y, seed=2)
  indices = frozen_part.frozen_indices(model)
  assert indices and len(ensemble) == 4
  first = ensemble.members[0]
  assert all(m.frozen == first.frozen for m in ensemble.members)
  for m in ensemble.members[1:]:
    assert all(m.weights[i] is first.weights[i] for i in indices)
  np.testing.assert_allclose(ensemble.predict_members(x),
                             _softmax(_whole_model_outputs(ensemble, x)),
                             rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_save_load_and_combine(run, tmp_path):
  x, y, base, _, streamed, directory = run
  loaded = tfa.keras.BayesianEnsemble.load(directory)
  np.testing.assert_allclose(loaded.predict(x), streamed.predict(x),
                             rtol=1e-5, atol=1e-6)
  _, other = _fit(base, x, y, seed=3)
  combined = tfa.keras.BayesianEnsemble.combine([streamed, other])
  assert combined.chains == [0, 1]
  expected = (len(streamed) * streamed.predict(x) +
              len(other) * other.predict(x)) / len(combined)
  np.testing.assert_allclose(combined.predict(x), expected, rtol=1e-5,
                             atol=1e-6)
  combined.save(str(tmp_path / 'saved'))
  for chain in ('chain_0', 'chain_1'):
    names = os.listdir(str(tmp_path / 'saved' / chain))
    assert len([n for n in names if n.startswith('frozen_')]) == 1
  again = tfa.keras.BayesianEnsemble.load(str(tmp_path / 'saved'))
  np.testing.assert_allclose(again.predict(x), expected, rtol=1e-5,
                             atol=1e-6)


@pytest.mark.slow
def test_a_damaged_base_file_is_named(run, tmp_path):
  x, _, _, _, streamed, _ = run
  streamed.save(str(tmp_path / 'saved'))
  frozen, = [n for n in os.listdir(str(tmp_path / 'saved'))
             if n.startswith('frozen_')]
  path = str(tmp_path / 'saved' / frozen)
  with open(path, 'r+b') as f:
    f.seek(200)
    f.write(b'\0' * 16)
  with pytest.raises(tfa.keras.SampleFileError, match=frozen):
    tfa.keras.BayesianEnsemble.load(str(tmp_path / 'saved'))
  os.remove(path)
  with pytest.raises(tfa.keras.SampleFileError, match=frozen):
    tfa.keras.BayesianEnsemble.load(str(tmp_path / 'saved'))


def test_a_model_without_a_frozen_first_part_is_not_cut():
  inputs = keras.Input((4,))
  h = keras.layers.Dense(8)(inputs)
  frozen = keras.layers.Dense(8)
  frozen.trainable = False
  model = keras.Model(inputs, keras.layers.Dense(2)(frozen(h)))
  x = np.zeros((3, 4), 'float32')
  assert frozen_part.frozen_indices(model) == (2, 3)
  assert frozen_part.split_model(model, x) is None
  # The inputs skip the frozen layer into the head: no cut either.
  inputs = keras.Input((4,))
  first = keras.layers.Dense(4)
  first.trainable = False
  h = keras.layers.Dense(3)(first(inputs))
  out = keras.layers.Dense(2)(keras.layers.Concatenate()([h, inputs]))
  assert frozen_part.split_model(keras.Model(inputs, out), x) is None
  # A subclassed model has no graph to cut.
  assert frozen_part.split_model(_Subclassed(), x) is None


class _Subclassed(keras.Model):

  def __init__(self):
    super().__init__()
    self.base = keras.layers.Dense(4)
    self.base.trainable = False
    self.head = keras.layers.Dense(2)

  def call(self, x):
    return self.head(self.base(x))


def _softmax(logits):
  z = np.exp(logits - logits.max(-1, keepdims=True))
  return z / z.sum(-1, keepdims=True)


@pytest.mark.slow
def test_members_of_two_bases_and_a_sampled_batch_norm(run):
  """Members on different frozen bases: each group gets its own base pass.

  The second run's head has a batch normalisation that trains, whose
  moving statistics vary by member and are stored with each member.
  """
  x, y, base, _, streamed, _ = run
  other = keras.models.clone_model(base)
  other.set_weights([w * 1.1 for w in base.get_weights()])
  other.trainable = False
  keras.utils.set_random_seed(4)
  inputs = keras.Input((64,))
  h = keras.layers.BatchNormalization()(other(inputs, training=False))
  model = keras.Model(inputs, keras.layers.Dense(10)(h))
  model.compile(tfa.keras.optimizers.PSGLD(2e-4, data_size=len(x), seed=4),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  collector = tfa.keras.SampleCollector(burnin=2, unit='epoch', monitor=False)
  model.fit(x, y, batch_size=100, epochs=5, verbose=0, callbacks=[collector])
  second = collector.ensemble
  moving = [i for i, v in enumerate(model.weights) if 'moving_mean' in v.path
            and v.path.startswith('batch_norm')]
  assert moving and not np.array_equal(second.members[0].weights[moving[0]],
                                       second.members[-1].weights[moving[0]])
  assert second.members[0].frozen != streamed.members[0].frozen
  # Members on another base (its values scaled) beside them: two groups.
  indices = frozen_part.frozen_indices(model)
  scaled = [np.float32(0.9) * second.members[0].weights[i] for i in indices]
  moved = [m._replace(weights=frozen_part.with_part(
      m.weights, frozen_part.FrozenPart('0' * 16, indices, scaled)),
                      frozen='0' * 16) for m in second.members[:2]]
  mixed = tfa.keras.BayesianEnsemble(model, moved + second.members + moved)
  np.testing.assert_allclose(mixed.predict_members(x),
                             _softmax(_whole_model_outputs(mixed, x)),
                             rtol=1e-5, atol=1e-6)
