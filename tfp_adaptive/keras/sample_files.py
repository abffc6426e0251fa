"""Safe, atomic files for posterior samples and checkpoints (`.npz`, JSON; no pickle).

Every file is written to a temporary name in the same directory, flushed,
fsync'ed and renamed over the target (`os.replace` is atomic on POSIX), so a
crash leaves either the old file or the new one, never half of one. Files are
read with ``allow_pickle=False``; a truncated or corrupted file raises
`SampleFileError` naming it.
"""

import json
import os
import re
import tempfile
import zipfile

import numpy as np

__all__ = ['SampleFileError', 'atomic_write', 'list_samples', 'read_arrays',
           'read_sample', 'remove_partial_writes', 'sample_path',
           'write_arrays', 'write_sample']

_SAMPLE_RE = re.compile(r'^sample_(\d{10})\.npz$')
_META = '__metadata__'


class SampleFileError(IOError):
  """A sample or checkpoint file is missing, truncated or corrupted."""


def _fsync_dir(directory):
  try:
    fd = os.open(directory, os.O_RDONLY)
  except OSError:
    return
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def atomic_write(path, write, binary=True):
  """Calls ``write(file)`` on a temporary file, then renames it to `path`."""
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(prefix='.tmp-', dir=directory)
  try:
    with os.fdopen(fd, 'wb' if binary else 'w') as f:
      write(f)
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.remove(tmp)
    raise
  _fsync_dir(directory)


def write_arrays(path, arrays, metadata):
  """Atomically writes a list of arrays and a JSON-able dict to `path`."""
  payload = {'a%d' % i: np.asarray(a) for i, a in enumerate(arrays)}
  payload[_META] = np.array(json.dumps(metadata))
  atomic_write(path, lambda f: np.savez(f, **payload))


def read_arrays(path):
  """``(arrays, metadata)`` from a file of `write_arrays`; never unpickles."""
  try:
    with np.load(path, allow_pickle=False) as data:
      metadata = json.loads(str(data[_META]))
      n = len([k for k in data.files if k != _META])
      arrays = [data['a%d' % i] for i in range(n)]
  except FileNotFoundError:
    raise SampleFileError('Sample file %s does not exist.' % path) from None
  except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile,
          json.JSONDecodeError) as e:
    raise SampleFileError('Sample file %s is truncated or corrupted (%s: %s).'
                          % (path, type(e).__name__, e)) from None
  if len(arrays) != len(metadata.get('names', arrays)):
    raise SampleFileError('Sample file %s holds %d arrays but its metadata '
                          'names %d.' % (path, len(arrays),
                                         len(metadata['names'])))
  return arrays, metadata


def sample_path(directory, step):
  return os.path.join(directory, 'sample_%010d.npz' % step)


def write_sample(directory, step, names, arrays, metadata=None):
  """Writes one posterior sample (weights by variable path) atomically."""
  meta = dict(metadata or {}, step=int(step), names=list(names))
  write_arrays(sample_path(directory, step), arrays, meta)


def read_sample(path):
  """``({variable path: array}, metadata)`` of one sample file."""
  arrays, meta = read_arrays(path)
  return dict(zip(meta['names'], arrays)), meta


def remove_partial_writes(directory):
  """Deletes temporary files a crash left behind mid-write; returns their count."""
  if not os.path.isdir(directory):
    return 0
  stale = [n for n in os.listdir(directory) if n.startswith('.tmp-')]
  for name in stale:
    os.remove(os.path.join(directory, name))
  return len(stale)


def list_samples(directory):
  """Sorted ``[(step, path)]`` of the sample files in `directory`."""
  if not os.path.isdir(directory):
    return []
  out = []
  for name in os.listdir(directory):
    m = _SAMPLE_RE.match(name)
    if m:
      out.append((int(m.group(1)), os.path.join(directory, name)))
  return sorted(out)
