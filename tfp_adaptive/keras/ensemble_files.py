"""An ensemble on disk: `BayesianEnsemble.save` and `BayesianEnsemble.load`.

A directory holds ``model.json``, one file per member and a manifest that
lists them with their sizes and SHA-256 (`tfp_adaptive.keras.sample_store`).
`load` reads a directory that a run may be writing at the same time (a
`SampleCollector(directory=...)` of a live `fit`) and sees one committed
manifest, read again if it changes while the files are read.
"""

import json
import os
import time
import warnings

import keras

from tfp_adaptive.keras import chain_views
from tfp_adaptive.keras import frozen_part
from tfp_adaptive.keras import members as members_lib
from tfp_adaptive.keras import sample_files
from tfp_adaptive.keras import sample_store

__all__ = ['READ_ATTEMPTS', 'load', 'save']


def save(ensemble, directory):
  """Writes `ensemble` to `directory`: `BayesianEnsemble.save`, which documents it."""
  chains = ensemble.chains
  if len(chains) > 1:
    if os.path.exists(os.path.join(directory, sample_store.MANIFEST)):
      raise ValueError('%s already holds samples; save into a new '
                       'directory.' % directory)
    for k, chain in enumerate(chains):
      type(ensemble)(ensemble.model, [m._replace(chain=0)
                                      for m in ensemble.members
                                      if m.chain == chain],
                     likelihood=ensemble.likelihood,
                     weighting=ensemble.weighting).save(
                         chain_views.view_directory(directory, k,
                                                    len(chains)))
    return
  store = sample_store.SampleStore(directory)
  store.acquire()
  try:
    if store.read_manifest() is not None:
      raise ValueError('%s already holds samples; save into a new '
                       'directory.' % directory)
    store.claim()
    config = keras.saving.serialize_keras_object(ensemble.model)
    sample_files.atomic_write(store.path('model.json'),
                              lambda f: json.dump(config, f), binary=False)
    names = [v.path for v in ensemble.model.weights]
    entries, part = [], None
    for m in ensemble.members:
      values = members_lib.member_values(m)
      part = frozen_part.snapshot(ensemble.model, values, part)
      entries.append(store.write_sample(
          int(m.step), values, names, {'learning_rate': m.learning_rate},
          part, learning_rate=m.learning_rate))
    store.commit({'samples': entries,
                  'frozen': store.frozen_entries(entries),
                  'members': [e['file'] for e in entries],
                  'likelihood': ensemble.likelihood.get_config(),
                  'weighting': ensemble.weighting})
  finally:
    store.release()


def load(cls, directory, model=None, repair=False):
  """An ensemble of class `cls` read from `directory`: `BayesianEnsemble.load`, which documents it."""
  directories = _sample_directories(directory)
  first = sample_store.SampleStore(directories[0])
  manifest = first.read_manifest()
  if model is None:
    model = keras.saving.deserialize_keras_object(
        _read_json(first.path('model.json')), safe_mode=True)
  members, dropped = [], []
  offset = 0  # The first chain index of the next directory.
  for k, path in enumerate(directories):
    store = sample_store.SampleStore(path)
    found, kept, lost = _read_consistently(store, model, offset, repair)
    manifest = manifest if k else found
    offset = max([offset] + [m.chain + 1 for m in kept])
    members += kept
    dropped += lost
  if dropped:
    warnings.warn('BayesianEnsemble.load(repair=True) dropped %d damaged '
                  'member(s) and kept %d:\n  %s'
                  % (len(dropped), len(members), '\n  '.join(dropped)))
  if not members:
    raise sample_files.SampleFileError('%s holds no intact members.'
                                       % directory)
  return cls(model, members, likelihood=manifest.get('likelihood'),
             weighting=manifest.get('weighting', 'uniform'))


READ_ATTEMPTS = 20  # Reads of a directory whose manifest keeps changing.


def _read_consistently(store, model, chain, repair):
  """``(manifest, members, dropped)`` of one committed manifest of `store`.

  A run that writes the directory may commit a new manifest and delete an
  evicted file between our reading the manifest and the file. Then the
  manifest has changed, and the directory is read again from the new one,
  up to `READ_ATTEMPTS` times. A file that is missing or altered while
  the manifest stays the same is damage (`SampleFileError`). While a run
  holds the directory, the members' weights are kept in memory (the run
  may delete their files at any time), and files the manifest does not
  list are not reported (the run writes each file before listing it).
  """
  live = store.is_live()
  for _ in range(READ_ATTEMPTS):
    manifest = store.read_manifest()
    if manifest is None:
      raise sample_files.SampleFileError('%s holds no manifest (no samples '
                                         'committed yet).' % store.directory)
    try:
      members, dropped = _read_members(store, manifest, model, chain, repair,
                                       keep_weights=live)
    except sample_files.SampleFileError:
      if store.read_manifest() == manifest:
        raise
      time.sleep(0.01)
      continue
    if dropped and store.read_manifest() != manifest:
      continue  # A file went missing because the run moved on: read again.
    return manifest, members, dropped
  raise sample_files.SampleFileError(
      '%s is being written: its manifest changed %d times while it was read. '
      'Load it again, or wait for the run to finish.'
      % (store.directory, READ_ATTEMPTS))


def _read_members(store, manifest, model, chain, repair, keep_weights):
  """The members `manifest` lists (verified), then the unlisted sample files."""
  entries = {e['file']: e for e in manifest['samples']}
  members, dropped, verified = [], [], set()
  for name in manifest['members']:
    try:
      file = store.verify(entries[name])
      frozen = store.frozen_entry(manifest, entries[name])
      if frozen is not None and frozen['file'] not in verified:
        store.verify(frozen)
        verified.add(frozen['file'])
      values, _ = sample_files.read_sample(file)
    except sample_files.SampleFileError as e:
      if not repair:
        raise
      dropped.append(str(e))
      continue
    if model.weights:
      members_lib.check_structure(model, values, file)
    e = entries[name]
    members.append(members_lib.Member(
        e['step'], e.get('learning_rate', 1.),
        values if keep_weights else None, file, chain + e.get('chain', 0),
        e.get('cycle'),
        frozen_part.digest_of(e)))
  if not keep_weights:  # A live run's next sample may not be listed yet.
    members += _unlisted_members(store, manifest, model, chain, repair)
  return members, dropped


def _unlisted_members(store, manifest, model, chain, repair):
  """Sample files `manifest` does not hold as members: warned about, or taken in with `repair`."""
  found = store.unlisted_samples(manifest)
  taken, left = [], []
  for name, why in found.items():
    path = store.path(name)
    if repair:
      try:
        values, meta = sample_files.read_sample(path)
        if model.weights:
          members_lib.check_structure(model, values, path)
        taken.append(members_lib.Member(
            int(meta['step']), meta.get('learning_rate', 1.), None, path,
            chain + meta.get('chain', 0), meta.get('cycle'),
            frozen_part.digest_of(meta)))
        continue
      except (sample_files.SampleFileError, ValueError, KeyError) as e:
        why += '; not taken in: %s' % e
    left.append('%s (%s)' % (name, why))
  if taken:
    warnings.warn('BayesianEnsemble.load(repair=True) took in %d sample '
                  'file(s) of %s that its manifest does not hold as members: '
                  '%s' % (len(taken), store.directory,
                          ', '.join(os.path.basename(m.path) for m in taken)))
  if left:
    warnings.warn('BayesianEnsemble.load: %s holds sample file(s) that are '
                  'not members: %s. Pass repair=True to take in those that '
                  'read whole and fit the model.'
                  % (store.directory, '; '.join(left)))
  return taken


def _sample_directories(directory):
  """`directory` if it holds a manifest, else its subdirectories that do."""
  if os.path.exists(os.path.join(directory, sample_store.MANIFEST)):
    return [directory]
  if not os.path.isdir(directory):
    raise sample_files.SampleFileError('%s is not a directory.' % directory)
  subs = sorted(os.path.join(directory, d) for d in os.listdir(directory)
                if os.path.exists(os.path.join(directory, d,
                                               sample_store.MANIFEST)))
  if not subs:
    raise sample_files.SampleFileError(
        '%s holds no manifest (%s), neither itself nor in a subdirectory.'
        % (directory, sample_store.MANIFEST))
  return subs


def _read_json(path):
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError) as e:
    raise sample_files.SampleFileError('Cannot read %s (%s).' % (path, e)) from None
