"""A directory of posterior samples that a crash, a second writer or a damaged file cannot corrupt silently.

The directory holds sample files (``sample_<step>.npz``), checkpoints
(``checkpoint_<step>_<epoch>.npz``), the model's config (``model.json``) and one
``manifest.json``, the only record of what is committed. Every file is
written atomically (`sample_files.atomic_write`). The write-ahead rule:

1. write the new sample or checkpoint file;
2. write the manifest that lists it, with its size and SHA-256;
3. only then delete the files of ours that this manifest no longer lists.

A kill between any two instructions leaves the previous manifest, which
lists only whole files, and perhaps files it does not list; those are
removed by the next writer (our name patterns only: files we did not write
are never deleted, and are reported once). Readers trust nothing but the
manifest and verify every file's size and checksum.

One run owns a directory: it holds an advisory lock (`filelock`, the OS's
``flock``), released by the OS when the process dies. The manifest stores
the run's identity (the model's variable shapes, the optimizer's config),
so that a resumed run can be checked against it.
"""

import hashlib
import json
import os
import re
import socket
import time
import warnings

import filelock

from tfp_adaptive.keras import sample_files

__all__ = ['MANIFEST', 'SampleStore', 'check_identity', 'checkpoint_name',
           'entry_for', 'is_deletable', 'run_identity', 'sample_name']

MANIFEST = 'manifest.json'
FORMAT = 'tfp_adaptive.samples/1'
_OURS = re.compile(r'^(sample_\d{10}\.npz|checkpoint_\d{10}_\d{6}\.npz|model\.json|'
                   r'manifest\.json|\.tmp-.*|\.lock|\.owner\.json)$')
_DELETABLE = re.compile(r'^(sample_\d{10}\.npz|checkpoint_\d{10}_\d{6}\.npz|\.tmp-.*)$')


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
      lock.acquire(timeout=0)
    except filelock.Timeout:
      owner = self._owner()
      raise sample_files.SampleFileError(
          'Sample directory %s is in use by another run (%s). One directory '
          'has one writer: wait for it, or give this run its own directory '
          '(e.g. a sibling chain_<k> directory).' % (self.directory, owner)
      ) from None
    self._lock = lock
    info = {'pid': os.getpid(), 'host': socket.gethostname(),
            'since': time.strftime('%Y-%m-%dT%H:%M:%S')}
    sample_files.atomic_write(self.path('.owner.json'),
                              lambda f: json.dump(info, f), binary=False)

  def release(self):
    if self._lock is not None:
      self._lock.release()
      self._lock = None

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
    if manifest.get('checkpoint'):
      names.add(manifest['checkpoint']['file'])
    return names

  def cleanup(self, manifest):
    """Deletes our sample/checkpoint/temporary files that `manifest` does not list.

    Files that do not match our names are left alone and reported once.
    """
    keep = self.listed(manifest)
    for name in sorted(os.listdir(self.directory)):
      full = self.path(name)
      if os.path.isdir(full):
        continue
      if _DELETABLE.match(name):
        if name not in keep:
          os.remove(full)
      elif not _OURS.match(name) and name not in self._reported:
        self._reported.add(name)
        warnings.warn('Sample directory %s holds a file it did not write, '
                      'left alone: %s' % (self.directory, name))

  def wipe(self):
    """Deletes every file of ours (``overwrite=True``); others stay."""
    for name in os.listdir(self.directory):
      if _OURS.match(name) and name not in ('.lock', '.owner.json'):
        os.remove(self.path(name))

  # -- files ----------------------------------------------------------------
  def write_arrays(self, name, arrays, metadata, **fields):
    """Writes an array file atomically; returns its manifest entry."""
    path = self.path(name)
    sample_files.write_arrays(path, arrays, metadata)
    return entry_for(path, **fields)

  def verify(self, entry):
    """Raises `SampleFileError` unless the entry's file is whole and unchanged."""
    path = self.path(entry['file'])
    if not os.path.exists(path):
      raise sample_files.SampleFileError('Sample file %s is missing.' % path)
    size = os.path.getsize(path)
    if size != entry['size']:
      raise sample_files.SampleFileError(
          'Sample file %s has %d bytes, the manifest says %d (truncated or '
          'replaced).' % (path, size, entry['size']))
    if _sha256(path) != entry['sha256']:
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
    raise ValueError(
        'Sample directory %s holds a run of %s; this optimizer is %s and '
        'differs in %s (%s). Resume with the same optimizer settings, or '
        'use another directory.' % (
            directory, name_a, name_b, ', '.join(keys) or 'its class',
            '; '.join('%s: %r there, %r here' % (k, a.get(k), b.get(k))
                      for k in keys[:3])))


def is_deletable(name):
  """True for our sample, checkpoint and temporary file names."""
  return bool(_DELETABLE.match(name))


def sample_name(step):
  return 'sample_%010d.npz' % step


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
            re.match(r'^sample_\d{10}\.npz$', e['file']) and
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
