"""A collector's run on disk: the members' files, the manifest that lists them, and the checkpoint to resume from.

`SampleCollector` decides when to sample and what its own state is; a
`RunDirectory` writes and reads them. Every write goes through
`tfp_adaptive.keras.sample_store.SampleStore` (one owner per directory,
file first, then the manifest that lists it, atomically), so a process
killed at any moment leaves a directory that either lists a file whole or
does not list it. A run of several chains also keeps one directory per
chain inside it (`tfp_adaptive.keras.chain_views`).
"""

import json
import os
import warnings

import numpy as np
import keras

from tfp_adaptive import validation
from tfp_adaptive.keras import chain_views
from tfp_adaptive.keras import chains as chains_lib
from tfp_adaptive.keras import frozen_part
from tfp_adaptive.keras import members as members_lib
from tfp_adaptive.keras import optimizer_base
from tfp_adaptive.keras import sample_files
from tfp_adaptive.keras import sample_store

__all__ = ['RunDirectory', 'from_arguments']


def from_arguments(directory, resume=False, overwrite=False):
  """The `RunDirectory` of a collector's arguments, checked; `None` without a `directory`.

  Raises:
    TypeError: `directory` is not a path or `None`.
    ValueError: `resume` or `overwrite` is not a bool, both are set, or
      either is set without a `directory`.
  """
  if directory is not None and not isinstance(directory, (str, os.PathLike)):
    raise TypeError('`directory` must be a path or None. Received: '
                    'directory=%r' % (directory,))
  resume = validation.check_bool('resume', resume)
  overwrite = validation.check_bool('overwrite', overwrite)
  if resume and overwrite:
    raise ValueError('Pass resume=True or overwrite=True, not both.')
  if (resume or overwrite) and directory is None:
    raise ValueError('`resume` and `overwrite` need a `directory`.')
  if directory is None:
    return None
  return RunDirectory(os.fspath(directory), resume, overwrite)


class RunDirectory(object):
  """The sample directory of one `SampleCollector`: members, manifest and checkpoint.

  Args:
    directory: the folder (created if needed).
    resume: continue the run it holds (`restore` before `fit`).
    overwrite: delete a run it holds at the start of `fit`.
  """

  def __init__(self, directory, resume=False, overwrite=False):
    self.store = sample_store.SampleStore(directory)
    self.resume = resume
    self.overwrite = overwrite
    self._restored = False
    self._opened = False
    self._manifest = {}
    self._entries = {}   # Manifest entry per member path.
    self._pinned = {}    # Entries of the members at the last checkpoint.
    self.views = chain_views.ChainViews(self.store)  # One per chain.

  @property
  def directory(self):
    return self.store.directory

  def open(self, model):
    """At the start of `fit`: own the directory, refuse another run's samples."""
    store = self.store
    store.acquire()
    try:
      if not (self._restored or self._opened):
        self._check_unused()
    except ValueError:
      store.release()
      raise
    if not self._opened:
      store.claim()  # Only now: a refused run changes nothing.
    self._opened = True  # A second `fit` with this collector continues.
    config = keras.saving.serialize_keras_object(
        chains_lib.member_model(model))
    sample_files.atomic_write(store.path('model.json'),
                              lambda f: json.dump(config, f), binary=False)

  def release(self):
    self.views.release()
    self.store.release()

  def _check_unused(self):
    store = self.store
    used = store.read_manifest() is not None or any(
        sample_store.is_deletable(n) for n in os.listdir(store.directory))
    if used and self.overwrite:
      store.wipe()
      self.views.wipe()
    elif used and self.resume:
      raise ValueError(
          'SampleCollector(resume=True): call `initial_epoch = '
          'collector.restore(model)` before `model.fit(..., '
          'initial_epoch=initial_epoch)`, so that the run continues from the '
          'checkpoint in %s.' % store.directory)
    elif used:
      raise ValueError(
          'Sample directory %s already holds samples of a run. Pass '
          'resume=True (then `collector.restore(model)` before `fit`) to '
          'continue it, or overwrite=True to delete them and start again.'
          % store.directory)

  def write_member(self, step, learning_rate, names, values, cycle=None,
                   part=None, chain=None):
    """Writes one sample's file and returns its `Member` (listed at the next `commit`).

    `part`: the model's `FrozenPart`, stored once apart (`None`: every
    variable in the sample's file). `chain`: the chain the sample is of,
    in a run of several chains (`tfp_adaptive.keras.chains`).
    """
    tags = {} if cycle is None else {'cycle': cycle}
    meta = dict({'learning_rate': learning_rate}, **tags)
    if chain is not None:
      tags['chain'] = chain
    entry = self.store.write_sample(step, values, names, meta, part,
                                    learning_rate=learning_rate, **tags)
    member = members_lib.Member(step, learning_rate, None,
                                 self.store.path(entry['file']),
                                 chain=chain or 0, cycle=cycle,
                                 frozen=None if part is None else part.digest)
    self._entries[member.path] = entry
    return member

  def commit(self, members, model, likelihood, weighting, checkpoint=None):
    """Writes the manifest listing `members`, the pinned ones and `checkpoint`.

    A file no manifest lists any more (an evicted member) is deleted after.
    """
    manifest = self._manifest
    if checkpoint is not None:
      manifest['checkpoint'] = checkpoint
      self._pinned = {m.path: self._entries[m.path] for m in members}
    listed = dict(self._pinned)
    listed.update({m.path: self._entries[m.path] for m in members})
    self._entries = listed
    manifest.update(
        samples=sorted(listed.values(), key=lambda e: e['step']),
        members=[self._entries[m.path]['file'] for m in
                 sorted(members, key=lambda m: m.step)],
        pinned=sorted(e['file'] for e in self._pinned.values()),
        frozen=self.store.frozen_entries(listed.values()),
        likelihood=likelihood.get_config(), weighting=weighting,
        identity=sample_store.run_identity(model))
    self.store.commit(manifest)
    chains = chains_lib.num_chains(model)
    if chains > 1:  # One directory per chain too, after the run's commit.
      self.views.update(manifest, chains)

  def save_checkpoint(self, model, epoch, state, arrays, members, likelihood,
                      weighting):
    """Writes the model, its optimizer and the collector's `state`, then commits.

    Args:
      model: the model (its optimizer built).
      epoch: the epoch a resumed run replays.
      state: the collector's own state, JSON-serialisable.
      arrays: the collector's own arrays, stored after the variables.
      members, likelihood, weighting: as `commit`.
    """
    opt = model.optimizer
    step = int(np.asarray(opt.iterations))
    values = [np.asarray(v) for v in model.variables + opt.variables]
    values += list(arrays)
    meta = dict(state, names=[None] * len(values),
                num_model=len(model.variables), epoch=epoch, step=step,
                members=[os.path.basename(m.path) for m in members])
    name = sample_store.checkpoint_name(step, epoch)
    last = self._manifest.get('checkpoint')
    if last and last['file'] == name:  # Nothing moved since: never rewrite
      self.commit(members, model, likelihood, weighting, checkpoint=last)
      return                           # a file the manifest lists.
    entry = self.store.write_arrays(name, values, meta, step=step, epoch=epoch)
    self.commit(members, model, likelihood, weighting, checkpoint=entry)

  def restore(self, model, extra_arrays, apply):
    """Sets the model and optimizer to the checkpoint, then hands the collector its state.

    Owns the directory from here on (released on error).

    Args:
      model: the compiled model.
      extra_arrays: ``meta -> how many of the checkpoint's last arrays are
        the collector's``.
      apply: ``(meta, arrays, members) -> epoch``: sets the collector's
        state as saved (its own arrays, the members the checkpoint held)
        and returns the epoch to resume from.

    Returns:
      `apply`'s epoch, or 0 when the directory holds no checkpoint.
    """
    self.store.acquire()
    try:
      saved = self._restore(model, extra_arrays)
      epoch = 0 if saved is None else apply(*saved)
    except BaseException:
      self.store.release()
      raise
    self.store.claim()
    self._opened = True
    return epoch

  def _restore(self, model, extra_arrays):
    store = self.store
    manifest = store.read_manifest()
    self._restored = True
    if manifest is None or not manifest.get('checkpoint'):
      store.cleanup(manifest)
      return None
    opt = model.optimizer
    if not opt.built:
      opt.build(model.trainable_variables)
    _adopt_seed(opt, manifest['identity'])
    sample_store.check_identity(manifest['identity'],
                                sample_store.run_identity(model),
                                store.directory)
    checkpoint = manifest['checkpoint']['file']
    arrays, meta = sample_files.read_arrays(
        store.verify(manifest['checkpoint']))
    variables = model.variables + opt.variables
    split = len(arrays) - extra_arrays(meta)
    arrays, own = arrays[:split], arrays[split:]
    if len(arrays) != len(variables):
      raise sample_files.SampleFileError(
          'Checkpoint %s holds %d arrays, the model and optimizer have %d '
          'variables.' % (checkpoint, len(arrays), len(variables)))
    for v, a in zip(variables, arrays):
      if tuple(v.shape) != a.shape:
        raise sample_files.SampleFileError(
            'Checkpoint %s does not fit variable %r (shape %s, saved %s).'
            % (checkpoint, v.path, tuple(v.shape), a.shape))
      v.assign(a)
    entries = {e['file']: e for e in manifest['samples']}
    _check_replay(store, manifest, meta)
    members = []
    self._entries = {}
    for name in meta['members']:
      if name not in entries:
        raise sample_files.SampleFileError(
            'Manifest %s does not list %s, a member of its checkpoint %s.'
            % (store.path(sample_store.MANIFEST), name, checkpoint))
      path = store.verify(entries[name])
      frozen = store.frozen_entry(manifest, entries[name])
      if frozen is not None:
        store.verify(frozen)
      members.append(members_lib.Member(
          entries[name]['step'], entries[name]['learning_rate'], None, path,
          chain=entries[name].get('chain', 0),
          cycle=entries[name].get('cycle'),
          frozen=frozen_part.digest_of(entries[name])))
      self._entries[path] = entries[name]
    self._pinned = dict(self._entries)
    self._manifest = dict(manifest)
    store.adopt_frozen(manifest)
    return meta, own, members


def _adopt_seed(optimizer, identity):
  """A sampler built without `seed` continues the recorded run's random stream.

  Each process draws its own default seed; the run recorded the one it
  drew (in the manifest's identity), and the resumed run takes it. An
  explicit seed that differs is left to `check_identity`, which refuses.
  """
  inner = getattr(optimizer, 'inner_optimizer', optimizer)
  if not isinstance(inner, optimizer_base.SamplerOptimizer):
    return
  (_, config), = identity['optimizer'].items()
  if isinstance(config.get('seed'), int):
    inner.adopt_seed(config['seed'])


def _check_replay(store, manifest, meta):
  """What `restore` drops: only the samples taken after the checkpoint, and it says so.

  A sample the manifest lists from before the checkpoint that the
  checkpoint does not hold as a member means that the two disagree (an
  edited file): `SampleFileError`, and nothing is deleted.
  """
  step, members = int(meta['step']), set(meta['members'])
  early = [e['file'] for e in manifest['samples']
           if e['file'] not in members and e['step'] <= step]
  if early:
    raise sample_files.SampleFileError(
        'Checkpoint %s of %s does not hold %s as member(s), though the '
        'manifest lists them from before its step %d: the checkpoint and the '
        'manifest disagree. Nothing was deleted. Restore the files as they '
        'were, or move these samples out of the directory to drop them.'
        % (manifest['checkpoint']['file'], store.directory,
           ', '.join(early), step))
  late = [e['file'] for e in manifest['samples']
          if e['file'] not in members]
  if late:
    warnings.warn(
        'SampleCollector.restore: %d sample(s) taken after the checkpoint '
        '(step %d) are dropped and will be taken again as epoch %d is '
        'replayed: %s.' % (len(late), step, int(meta['epoch']),
                           ', '.join(late)))
