"""`Chains`: K chains of one Keras model trained in one compiled `fit` step.

``Chains(model, chains=8)`` is a `keras.Model` whose variables are the
model's variables stacked on a leading chain axis: the trainable weights,
and the state that varies per chain (batch-normalisation statistics, the
seed state of dropout layers). Its call runs the model's stateless call
once per chain inside one compiled step (vectorised over the chain axis,
`tf.vectorized_map`; unrolled under XLA, where that is faster), so the
K chains share one step's overhead (data, callbacks, dispatch), and the
optimizer updates all of them at once.

The chains are independent: the loss is the sum of the chains' losses, so
each chain's gradient is its own loss's gradient; the samplers of
`tfp_adaptive.keras.optimizers` treat the leading axis as chains (the
metric's reductions, such as the Monge metric's gradient norm, the
non-finite check and the Γ of the corrected samplers are per chain, as in
the kernels of `tfp_adaptive.mcmc`), and a regularizer (prior) of the model
is applied to each chain's weights on their own. Layers that are frozen
(``trainable=False``) are shared by all chains, not stacked.

Outputs have the chain axis second, ``(batch, chains, ...)``, so that
`predict` concatenates batches as usual. The logged ``loss`` is the sum of
the chains' losses; the compiled metrics are the mean over chains.
With a `tfp_adaptive.keras.SampleCollector`, each sample is K members of
the original model, one per chain (`Member.chain`), and the ensemble is an
ensemble of that model.
"""

import numpy as np
import tensorflow as tf
import keras

from tfp_adaptive import _compat
from tfp_adaptive import validation
from tfp_adaptive.keras import frozen_part

__all__ = ['Chains', 'member_model', 'num_chains', 'per_chain', 'take']


def member_model(model):
  """The model a member of `model`'s run is a sample of: `Chains.member_model`, else `model`."""
  return model.member_model() if isinstance(model, Chains) else model


def num_chains(model):
  """The number of chains of `model`: ``model.num_chains`` for `Chains`, else 1."""
  return model.num_chains if isinstance(model, Chains) else 1


def take(model, previous=None):
  """``(values per chain, part)``: a copy of each chain's weights now, the frozen part shared (`frozen_part.take`; `previous`: the last part)."""
  if not isinstance(model, Chains):
    values, part = frozen_part.take(model, previous)
    return [values], part
  rows = model.all_chain_weights()
  part = frozen_part.snapshot(model.template, rows[0], previous)
  return [frozen_part.with_part(row, part) for row in rows], part


def per_chain(model, outputs):
  """`outputs` of `model` as a list with one entry per chain (the outputs themselves for a plain model)."""
  if not isinstance(model, Chains):
    return [outputs]
  return [tf.nest.map_structure(lambda a, k=k: a[:, k], outputs)
          for k in range(model.num_chains)]


class _PerChain(object):
  """A regularizer applied to each chain's slice of a stacked variable, summed."""

  def __init__(self, regularizer):
    self.regularizer = regularizer

  def __call__(self, stacked):
    return tf.add_n([self.regularizer(stacked[k])
                     for k in range(stacked.shape[0])])


@keras.saving.register_keras_serializable(package='tfp_adaptive')
class Chains(keras.Model):
  """K independent chains of one Keras model, trained in one compiled step.

  Args:
    model: a built `keras.Model` (its weights are chain 0's), or a list of
      K built models of the same architecture (chain k starts from the
      k-th model's weights, e.g. K models built under K seeds).
    chains: K >= 1 when `model` is one model: chains 1..K-1 start from
      clones of it with fresh initial weights (`keras.models.clone_model`,
      so a Sequential or functional model). Leave `None` with a list.
    name: the Keras name of this model.

  Use it as the model: ``chains.compile(optimizer, loss, metrics)`` then
  ``chains.fit(x, y, callbacks=[SampleCollector()])``. The same optimizer
  samples every chain, each with its own metric state and noise.

  Example::

    chains = Chains(model, chains=8)
    chains.compile(optimizers.PSGLD(1e-3, data_size=n),
                   'sparse_categorical_crossentropy')
    collector = SampleCollector(burnin=500, thinning=50)
    chains.fit(x, y, batch_size=32, epochs=20, callbacks=[collector])
    collector.ensemble.to_arviz()   # R-hat across the 8 chains
  """

  def __init__(self, model, chains=None, name='chains', **kwargs):
    super().__init__(name=name, **kwargs)
    models = _models(model, chains)
    template = models[0]
    # The template model is held untracked: its own variables are not the
    # chains' and must not be trained or saved as theirs.
    object.__setattr__(self, '_template', template)
    object.__setattr__(self, '_compiled_for', None)
    self.num_chains = len(models)
    frozen = set(frozen_part.frozen_indices(template))
    position = {id(v): i for i, v in enumerate(template.weights)}
    shared, stacked = [], []
    for v in template.variables:
      i = position.get(id(v))
      if i in frozen:
        shared.append(v)
      else:
        stacked.append(v)
    index = [{id(v): j for j, v in enumerate(m.variables)} for m in models]
    ordered = [list(m.variables) for m in models]
    self._stacked_of = {}  # id(template variable) -> its stacked variable.
    self._stacked = []
    for v in stacked:
      j = index[0][id(v)]
      value = np.stack([np.asarray(ordered[k][j])
                        for k in range(len(models))])
      s = self.add_weight(
          shape=value.shape, dtype=v.dtype,
          initializer=lambda shape, dtype=None, value=value: value,
          trainable=v.trainable, name=v.path.replace('/', '_'))
      regularizer = getattr(v, 'regularizer', None)
      if v.trainable and regularizer is not None:
        s.regularizer = _PerChain(regularizer)
      self._stacked_of[id(v)] = s
      self._stacked.append(s)
    # The frozen variables: one copy for all chains, not trained, saved
    # with the chains.
    self._shared_of = {}  # id(template variable) -> the chains' copy.
    for v in shared:
      value = np.asarray(v)
      self._shared_of[id(v)] = self.add_weight(
          shape=value.shape, dtype=v.dtype,
          initializer=lambda shape, dtype=None, value=value: value,
          trainable=False, name=v.path.replace('/', '_'))
    self.built = True

  # -- the template ---------------------------------------------------------
  @property
  def template(self):
    """The model each chain is an instance of (its own variables keep chain 0's starting weights; `chain_weights` reads the chains)."""
    return self._template

  def member_model(self):
    """The template, compiled as one chain of this run: the members' model.

    Its optimizer is a copy of this model's (same class and settings, for
    variables without a chain axis) and its loss is this model's, so that
    an ensemble of the members reads its target (loss scale, prior,
    temperature) as that of a one-chain run, e.g. in
    `BayesianEnsemble.check_temperature`.
    """
    optimizer = getattr(self, 'optimizer', None)
    if optimizer is not None and self._compiled_for is not optimizer:
      twin = type(optimizer).from_config(optimizer.get_config())
      self._template.compile(twin, loss=self.loss)
      twin.build(self._template.trainable_variables)
      object.__setattr__(self, '_compiled_for', optimizer)
    return self._template

  def chain_weights(self, k):
    """Chain `k`'s values in ``template.weights`` order (NumPy), frozen layers included."""
    k = validation.check_int('k', k, low=0, high=self.num_chains - 1)
    return self._rows([k])[0]

  def all_chain_weights(self):
    """Every chain's values (`chain_weights`), reading each variable once."""
    return self._rows(range(self.num_chains))

  def _rows(self, chains):
    """The values of `chains` (`chain_weights` of each), each variable read once."""
    columns = []
    for v in self._template.weights:
      s = self._stacked_of.get(id(v))
      columns.append((np.asarray(self._shared_of[id(v)]), False) if s is None
                     else (np.asarray(s), True))
    return [[a[k] if stacked else a for a, stacked in columns]
            for k in chains]

  # -- Keras --------------------------------------------------------------------
  def call(self, inputs, training=None):
    template = self._template
    trainable = [self._stacked_of[id(v)] for v in template.trainable_variables]
    fixed = template.non_trainable_variables
    varying = [i for i, v in enumerate(fixed) if id(v) in self._stacked_of]
    stacked_fixed = [self._stacked_of[id(fixed[i])] for i in varying]

    def one(args):
      values, varying_values = args
      state = [self._shared_of[id(v)].value if id(v) in self._shared_of
               else v.value for v in fixed]
      for i, a in zip(varying, varying_values):
        state[i] = a
      out, new_state = template.stateless_call(values, state, inputs,
                                               training=bool(training))
      return out, [new_state[i] for i in varying]

    args = ([tf.convert_to_tensor(s) for s in trainable],
            [tf.convert_to_tensor(s) for s in stacked_fixed])
    if _compat.in_xla_context():
      # XLA runs a vectorised map whose variables are then assigned (the
      # update step) about a hundred times slower than the same calls
      # unrolled, which it fuses; outside XLA the map is the faster.
      outs = [one(tf.nest.map_structure(lambda a, k=k: a[k], args))
              for k in range(self.num_chains)]
      out, new_state = tf.nest.map_structure(lambda *a: tf.stack(a), *outs)
    else:
      out, new_state = tf.vectorized_map(one, args,
                                         fallback_to_while_loop=True)
    if training:
      for s, a in zip(stacked_fixed, new_state):
        s.assign(tf.cast(a, s.dtype))
    return tf.nest.map_structure(
        lambda t: tf.experimental.numpy.moveaxis(t, 0, 1), out)

  def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None,
                   training=True):
    losses = []
    if self._compile_loss is not None:
      for out in per_chain(self, y_pred):
        loss = self._compile_loss(y, out, sample_weight)
        if loss is not None:
          losses.append(loss)
    for loss in self.losses:
      losses.append(self._aggregate_additional_loss(loss))
    if not losses:
      raise ValueError('No loss to compute. Provide a `loss` argument in '
                       '`compile()`.')
    return tf.add_n(losses)

  def compute_metrics(self, x, y, y_pred, sample_weight=None):
    if self._compile_metrics is not None:
      for out in per_chain(self, y_pred):
        self._compile_metrics.update_state(y, out, sample_weight)
    return self.get_metrics_result()

  def get_config(self):
    return {'name': self.name, 'chains': self.num_chains,
            'model': keras.saving.serialize_keras_object(self._template)}

  @classmethod
  def from_config(cls, config, custom_objects=None):
    """Chains of the serialised model (their weights are then loaded, as `keras.models.load_model` does)."""
    config = dict(config)
    model = keras.saving.deserialize_keras_object(
        config.pop('model'), custom_objects=custom_objects)
    return cls(model, **config)

  def compile_from_config(self, config):
    """As `keras.Model`'s, through this `compile` (`keras.models.load_model`)."""
    self.compile(**keras.saving.deserialize_keras_object(config))
    if self.built:
      self.optimizer.build(self.trainable_variables)

  def compile(self, optimizer='rmsprop', *args, **kwargs):
    """`keras.Model.compile`; a sampler optimizer is told that its variables lead with a chain axis."""
    optimizer = keras.optimizers.get(optimizer)
    set_chains = getattr(optimizer, 'set_chain_axis', None)
    if callable(set_chains):
      set_chains()
    return super().compile(optimizer, *args, **kwargs)


def _models(model, chains):
  """The K models whose weights start the chains."""
  if isinstance(model, (list, tuple)):
    if chains is not None:
      raise ValueError('Pass `chains` with one model, not with a list of '
                       'models (their number is the number of chains). '
                       'Received: chains=%r' % (chains,))
    models = list(model)
    if not models:
      raise ValueError('`model` is an empty list.')
  else:
    if chains is None:
      raise ValueError('Pass `chains` (the number of chains, >= 1) with one '
                       'model, or a list of models.')
    chains = validation.check_int('chains', chains, low=1)
    models = [model]
  for m in models:
    if not isinstance(m, keras.Model):
      raise TypeError('`model` must be a keras.Model or a list of them. '
                      'Received: %r' % (m,))
    if not m.built or not m.weights:
      raise ValueError('`model` must be built (call it on a batch, or give '
                       'it an Input) before its chains are stacked.')
  template = models[0]
  while len(models) < (chains or 0):
    clone = keras.models.clone_model(template)
    if not clone.built:
      clone.build(template.inputs[0].shape if hasattr(template, 'inputs')
                  else None)
    models.append(clone)
  shapes = [tuple(v.shape) for v in template.variables]
  for m in models[1:]:
    if [tuple(v.shape) for v in m.variables] != shapes:
      raise ValueError('The models of `model` differ in their variables\' '
                       'shapes: the chains must be one architecture.')
  return models
