"""A directory of posterior samples that a crash, a second writer or a damaged file cannot corrupt silently.

The directory holds sample files (``sample_<step>.npz``), checkpoints
(``checkpoint_<step>_<epoch>.npz``), the model's config (``model.json``) and one
``manifest.json``, the only record of what is committed. A model with
frozen layers has their variables stored once, in ``frozen_<digest>.npz``,
which the manifest lists beside the samples that use it
(`tfp_adaptive.keras.frozen_part`). Every file is
written atomically (`sample_files.atomic_write`). The write-ahead rule:

1. write the new sample or checkpoint file;
2. write the manifest that lists it, with its size and SHA-256;
3. only then delete the files of ours that this manifest no longer lists.

A kill between any two instructions leaves the previous manifest, which
lists only whole files, and perhaps files it does not list. The run that
writes a directory draws a random run id (``run.json``, written before its
first data file) and stamps it into the metadata of every sample and
checkpoint it writes; the next writer removes an unlisted file only if it
carries that id (or is one of our temporary files). Files of our naming
pattern that another run or the user put there, and files of other names,
are never deleted; they are reported once, by name. Readers trust nothing
but the manifest and verify every file's size and checksum.

One run owns a directory: it holds an advisory lock (`filelock`, the OS's
``flock``), released by the OS when the process dies. The owner record
(``.owner.json``) is written only once the run has passed its checks: a
refused writer changes nothing. The manifest stores the run's identity
(the model's variable shapes, the optimizer's config), so that a resumed
run can be checked against it.
"""

import hashlib
import json
import os
import re
import socket
import time
import uuid
import warnings

import filelock

from tfp_adaptive.keras import sample_files

__all__ = ['MANIFEST', 'RUN', 'SampleStore', 'check_identity',
           'checkpoint_name', 'entry_for', 'file_run_id', 'frozen_name',
           'is_deletable', 'run_identity', 'sample_name']

MANIFEST = 'manifest.json'
RUN = 'run.json'
FORMAT = 'tfp_adaptive.samples/1'
_OURS = re.compile(r'^(sample_\d{10}(_chain\d{3})?\.npz|checkpoint_\d{10}_\d{6}\.npz|model\.json|'
                   r'frozen_[0-9a-f]{16}\.npz|'
                   r'manifest\.json|run\.json|\.tmp-.*|\.lock|\.owner\.json)$')
_SAMPLE = re.compile(r'^sample_\d{10}(_chain\d{3})?\.npz$')
_FROZEN = re.compile(r'^frozen_[0-9a-f]{16}\.npz$')
_DELETABLE = re.compile(r'^(sample_\d{10}(_chain\d{3})?\.npz|checkpoint_\d{10}_\d{6}\.npz|'
                        r'frozen_[0-9a-f]{16}\.npz|\.tmp-.*)$')


def _sha256(path):
  digest = hashlib.sha256()
  with open(path, 'rb') as f:
    for block in iter(lambda: f.read(1 << 20), b''):
      digest.update(block)
  return digest.hexdigest()


def entry_for(path, **fields):
  """A manifest entry of the file at `path`: its name, size and SHA-256."""
  return dict(fields, file=os.path.basename(path),
              size=os.path.getsize(path), sha256=_sha256(path))


class SampleStore(object):
  """The files of one sample directory (see the module docstring).

  Args:
    directory: the directory (created if missing).
  """

  def __init__(self, directory):
    self.directory = os.fspath(directory)
    self._lock = None
    self._reported = set()
    self._run_id = None  # Read from `run.json` once it exists.
    self._frozen = {}  # Frozen parts written or listed: file name -> entry.

  def path(self, name):
    return os.path.join(self.directory, name)

  # -- ownership ------------------------------------------------------------
  def acquire(self):
    """Takes the directory's lock; raises `SampleFileError` naming the owner."""
    if self._lock is not None:
      return
    os.makedirs(self.directory, exist_ok=True)
    lock = filelock.FileLock(self.path('.lock'))
    try:
      # A reader checks the lock for an instant (`is_live`): wait that out.
      lock.acquire(timeout=1.)
    except filelock.Timeout:
      owner = self._owner()
      raise sample_files.SampleFileError(
          'Sample directory %s is in use by another run (%s). One directory '
          'has one writer: wait for it, or give this run its own directory '
          '(e.g. a sibling chain_<k> directory).' % (self.directory, owner)
      ) from None
    self._lock = lock

  def claim(self):
    """Records this process as the owner and makes sure the run has an id.

    Call once the run has the right to write (after `acquire` and its
    checks), before its first data file.
    """
    info = {'pid': os.getpid(), 'host': socket.gethostname(),
            'since': time.strftime('%Y-%m-%dT%H:%M:%S')}
    sample_files.atomic_write(self.path('.owner.json'),
                              lambda f: json.dump(info, f), binary=False)
    if self.run_id is None:
      run_id = uuid.uuid4().hex
      sample_files.atomic_write(
          self.path(RUN), lambda f: json.dump({'run_id': run_id}, f),
          binary=False)
      self._run_id = run_id

  @property
  def run_id(self):
    """The id of the run that writes this directory (`None` before any).

    Read once from ``run.json``: every commit's cleanup asks for it.
    """
    if self._run_id is None:
      try:
        with open(self.path(RUN)) as f:
          self._run_id = str(json.load(f)['run_id'])
      except (OSError, ValueError, KeyError, TypeError):
        return None
    return self._run_id

  def release(self):
    if self._lock is not None:
      self._lock.release()
      self._lock = None

  def is_live(self):
    """True if another process holds the directory's lock (a run is writing it)."""
    if self._lock is not None:
      return False
    lock = filelock.FileLock(self.path('.lock'))
    try:
      lock.acquire(timeout=0)
    except filelock.Timeout:
      return True
    except OSError:  # A directory we may not write: nobody writes it either.
      return False
    lock.release()
    return False

  @property
  def owned(self):
    return self._lock is not None

  def _owner(self):
    try:
      with open(self.path('.owner.json')) as f:
        info = json.load(f)
      return 'pid %s on %s since %s' % (info['pid'], info['host'],
                                        info['since'])
    except (OSError, ValueError, KeyError):
      return 'owner unknown'

  # -- the manifest ---------------------------------------------------------
  def read_manifest(self):
    """The committed manifest, or `None` if there is none.

    Raises:
      SampleFileError: the manifest is damaged (not JSON, wrong format,
        entries duplicated or malformed).
    """
    path = self.path(MANIFEST)
    if not os.path.exists(path):
      return None
    try:
      with open(path) as f:
        manifest = json.load(f)
    except (OSError, ValueError) as e:
      raise sample_files.SampleFileError(
          'Manifest %s is damaged (%s).' % (path, e)) from None
    _check_manifest(manifest, path)
    return manifest

  def commit(self, manifest):
    """Writes `manifest` atomically, then deletes our files it does not list."""
    manifest = dict(manifest, format=FORMAT)
    _check_manifest(manifest, self.path(MANIFEST))
    sample_files.atomic_write(
        self.path(MANIFEST), lambda f: json.dump(manifest, f, indent=1),
        binary=False)
    self.cleanup(manifest)

  def listed(self, manifest):
    """Names of every file `manifest` refers to."""
    if manifest is None:
      return set()
    names = {e['file'] for e in manifest.get('samples', [])}
    names.update(e['file'] for e in manifest.get('frozen', []))
    if manifest.get('checkpoint'):
      names.add(manifest['checkpoint']['file'])
    return names

  def cleanup(self, manifest):
    """Deletes this run's files that `manifest` does not list (see the module docstring).

    An unlisted sample or checkpoint is deleted only if it carries this
    run's id; temporary files of ours always are. Anything else is left
    alone and reported once, naming the file.
    """
    keep = self.listed(manifest)
    run_id = self.run_id
    for name in sorted(os.listdir(self.directory)):
      full = self.path(name)
      if os.path.isdir(full) or name in keep or name in self._reported:
        continue
      if name.startswith('.tmp-') or (
          _DELETABLE.match(name) and run_id is not None and
          file_run_id(full) == run_id):
        os.remove(full)
        self._frozen.pop(name, None)  # Written again if a sample needs it.
      elif _DELETABLE.match(name):
        self._report(name, 'a file of our naming pattern that this run did '
                     'not write and the manifest does not list (another '
                     'run\'s, or copied in); it is not a member')
      elif not _OURS.match(name):
        self._report(name, 'a file it did not write')

  def _report(self, name, what):
    self._reported.add(name)
    warnings.warn('Sample directory %s holds %s, left alone: %s'
                  % (self.directory, what, name))

  def unlisted_samples(self, manifest):
    """Sample files here that `manifest` neither lists as members nor keeps for its checkpoint.

    Returns ``{name: why}``.
    """
    members = set(manifest.get('members', []))
    kept = set(manifest.get('pinned', members))
    listed = {e['file'] for e in manifest.get('samples', [])}
    found = {}
    for name in sorted(os.listdir(self.directory)):
      if not _SAMPLE.match(name) or name in members or name in kept:
        continue
      found[name] = ('listed as a sample but neither as a member nor as '
                     'kept for the checkpoint' if name in listed else
                     'not listed in the manifest')
    return found

  def wipe(self):
    """Deletes every file of ours (``overwrite=True``); others stay."""
    for name in os.listdir(self.directory):
      if _OURS.match(name) and name not in ('.lock', '.owner.json'):
        os.remove(self.path(name))
    self._run_id = None  # `run.json` is gone; the next claim draws anew.
    self._frozen = {}

  # -- files ----------------------------------------------------------------
  def write_arrays(self, name, arrays, metadata, **fields):
    """Writes an array file atomically, stamped with the run id; returns its manifest entry."""
    path = self.path(name)
    sample_files.write_arrays(path, arrays, dict(metadata,
                                                 run_id=self.run_id))
    return entry_for(path, **fields)

  def write_sample(self, step, values, names, metadata, part=None, **fields):
    """Writes the sample of `step` and returns its manifest entry.

    With a `FrozenPart` (`tfp_adaptive.keras.frozen_part`), the sample
    holds only the variables outside it; the part's own file is written
    first, once per directory (its name is its digest), and the entry
    names it (``frozen``), so that `frozen_entries` lists it beside.
    """
    metadata = dict(metadata, step=step)
    if part is not None:
      name = frozen_name(part.digest)
      if name not in self._frozen:
        self._frozen[name] = self.write_arrays(
            name, part.arrays, {'names': [names[i] for i in part.indices],
                                'indices': list(part.indices),
                                'digest': part.digest})
      held = [i for i in range(len(values)) if i not in set(part.indices)]
      metadata.update(names=[names[i] for i in held], indices=held,
                      num_variables=len(values), frozen=name)
      values = [values[i] for i in held]
      fields['frozen'] = name
    else:
      metadata['names'] = names
    chain = fields.get('chain')
    if chain is not None:
      metadata['chain'] = chain
    return self.write_arrays(sample_name(step, chain), values, metadata,
                             step=step, **fields)

  def frozen_entries(self, entries):
    """The manifest entries of the frozen parts that sample `entries` use."""
    used = sorted({e['frozen'] for e in entries if e.get('frozen')})
    return [self._frozen[name] for name in used]

  def adopt_frozen(self, manifest):
    """Takes the frozen parts a committed `manifest` lists as written."""
    for e in (manifest or {}).get('frozen', []):
      self._frozen[e['file']] = e

  def frozen_entry(self, manifest, entry):
    """The manifest's entry of the frozen part a sample `entry` uses, or `None`."""
    name = entry.get('frozen')
    if not name:
      return None
    for e in manifest.get('frozen', []):
      if e['file'] == name:
        return e
    raise sample_files.SampleFileError(
        'Manifest %s lists no frozen part %s, which sample %s uses.'
        % (self.path(MANIFEST), name, entry['file']))

  def verify(self, entry):
    """Raises `SampleFileError` unless the entry's file is whole and unchanged."""
    path = self.path(entry['file'])
    try:
      size = os.path.getsize(path)
      digest = _sha256(path)
    except FileNotFoundError:  # Also if a writer deletes it meanwhile.
      raise sample_files.SampleFileError('Sample file %s is missing.'
                                         % path) from None
    if size != entry['size']:
      raise sample_files.SampleFileError(
          'Sample file %s has %d bytes, the manifest says %d (truncated or '
          'replaced).' % (path, size, entry['size']))
    if digest != entry['sha256']:
      raise sample_files.SampleFileError(
          'Sample file %s does not match its SHA-256 in the manifest '
          '(altered).' % path)
    return path


def run_identity(model):
  """What a resumed run must share with the run it continues."""
  opt = model.optimizer
  config = dict(opt.get_config())
  config.pop('name', None)
  return {'architecture': [[list(v.shape), v.dtype] for v in model.weights],
          'optimizer': json.loads(json.dumps(
              {type(opt).__name__: config}, default=str))}


def check_identity(saved, now, directory):
  """Raises `ValueError` naming how a resumed run differs from the stored one."""
  if saved['architecture'] != now['architecture']:
    a, b = saved['architecture'], now['architecture']
    if len(a) != len(b):
      why = 'it has %d variables, this model %d' % (len(a), len(b))
    else:
      i = next(i for i in range(len(a)) if a[i] != b[i])
      why = 'variable %d is %s there and %s here' % (i, a[i], b[i])
    raise ValueError('Sample directory %s holds a run of another model: %s. '
                     'Resume with the same architecture, or use another '
                     'directory.' % (directory, why))
  if saved['optimizer'] != now['optimizer']:
    (name_a, a), = saved['optimizer'].items()
    (name_b, b), = now['optimizer'].items()
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    hint = (' Pass seed=%r (the seed the run recorded), or no seed to take '
            'it.' % a['seed'] if keys == ['seed'] else '')
    raise ValueError(
        'Sample directory %s holds a run of %s; this optimizer is %s and '
        'differs in %s (%s). Resume with the same optimizer settings, or '
        'use another directory.%s' % (
            directory, name_a, name_b, ', '.join(keys) or 'its class',
            '; '.join('%s: %r there, %r here' % (k, a.get(k), b.get(k))
                      for k in keys[:3]), hint))


def file_run_id(path):
  """The run id stamped in an array file, or `None` (unreadable, or none)."""
  try:
    return sample_files.read_metadata(path).get('run_id')
  except sample_files.SampleFileError:
    return None


def is_deletable(name):
  """True for our sample, checkpoint and temporary file names."""
  return bool(_DELETABLE.match(name))


def frozen_name(digest):
  return 'frozen_%s.npz' % digest


def sample_name(step, chain=None):
  """The file of the sample of `step` (of chain `chain` in a run of several, `tfp_adaptive.keras.chains`)."""
  if chain is None:
    return 'sample_%010d.npz' % step
  return 'sample_%010d_chain%03d.npz' % (step, chain)


def checkpoint_name(step, epoch):
  return 'checkpoint_%010d_%06d.npz' % (step, epoch)


def _check_manifest(manifest, path):
  def bad(why):
    raise sample_files.SampleFileError('Manifest %s is damaged: %s.'
                                       % (path, why))
  if not isinstance(manifest, dict) or manifest.get('format') != FORMAT:
    bad('not a %s manifest' % FORMAT)
  samples = manifest.get('samples')
  if not isinstance(samples, list):
    bad('no list of samples')
  seen = set()
  for e in samples:
    if not (isinstance(e, dict) and isinstance(e.get('file'), str) and
            _SAMPLE.match(e['file']) and
            isinstance(e.get('size'), int) and isinstance(e.get('sha256'), str)
            and isinstance(e.get('step'), int)):
      bad('malformed sample entry %r' % (e,))
    if e['file'] in seen:
      bad('sample %s listed twice' % e['file'])
    seen.add(e['file'])
  members = manifest.get('members', [])
  if not isinstance(members, list) or len(set(members)) != len(members):
    bad('members listed twice')
  if not set(members) <= seen:
    bad('members %s have no sample entry' % sorted(set(members) - seen))
  frozen = manifest.get('frozen', [])
  if not isinstance(frozen, list) or not all(
      isinstance(e, dict) and isinstance(e.get('file'), str) and
      _FROZEN.match(e['file']) and isinstance(e.get('size'), int) and
      isinstance(e.get('sha256'), str) for e in frozen):
    bad('malformed frozen parts %r' % (frozen,))
  parts = {e['file'] for e in frozen}
  missing = sorted({e['frozen'] for e in samples if e.get('frozen')} - parts)
  if missing:
    bad('samples use frozen parts %s it does not list' % missing)
