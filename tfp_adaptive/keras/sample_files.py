"""Atomic single files for samples and checkpoints (`.npz`, JSON; no pickle).

Every file is written to a temporary name in the same directory, flushed,
fsync'ed and renamed over the target (`os.replace` is atomic on POSIX), so a
crash leaves either the old file or the new one, never half of one. Files are
read with ``allow_pickle=False``; a truncated or corrupted file raises
`SampleFileError` naming it.
"""

import contextlib
import json
import os
import tempfile
import zipfile

import numpy as np

__all__ = ['SampleFileError', 'atomic_write', 'fsync_directory',
           'read_arrays', 'read_metadata', 'read_sample', 'write_arrays']

_META = '__metadata__'


class SampleFileError(IOError):
  """A sample or checkpoint file is missing, truncated or corrupted."""


def fsync_directory(directory):
  """Flushes `directory`'s entries (a rename or link in it) to disk, where the OS allows."""
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
  fsync_directory(directory)


def write_arrays(path, arrays, metadata):
  """Atomically writes a list of arrays and a JSON-able dict to `path`."""
  payload = {'a%d' % i: np.asarray(a) for i, a in enumerate(arrays)}
  payload[_META] = np.array(json.dumps(metadata))
  atomic_write(path, lambda f: np.savez(f, **payload))


@contextlib.contextmanager
def _open(path):
  """The `np.load` of `path`; damage or absence raise `SampleFileError` naming it."""
  try:
    with np.load(path, allow_pickle=False) as data:
      yield data
  except FileNotFoundError:
    raise SampleFileError('Sample file %s does not exist.' % path) from None
  except (ValueError, KeyError, OSError, EOFError, zipfile.BadZipFile,
          json.JSONDecodeError) as e:
    raise SampleFileError('Sample file %s is truncated or corrupted (%s: %s).'
                          % (path, type(e).__name__, e)) from None


def read_metadata(path):
  """The metadata dict of a file of `write_arrays`, without reading its arrays."""
  with _open(path) as data:
    return json.loads(str(data[_META]))


def read_arrays(path):
  """``(arrays, metadata)`` from a file of `write_arrays`; never unpickles."""
  with _open(path) as data:
    metadata = json.loads(str(data[_META]))
    n = len([k for k in data.files if k != _META])
    arrays = [data['a%d' % i] for i in range(n)]
  if len(arrays) != len(metadata.get('names', arrays)):
    raise SampleFileError('Sample file %s holds %d arrays but its metadata '
                          'names %d.' % (path, len(arrays),
                                         len(metadata['names'])))
  return arrays, metadata


def read_sample(path):
  """``(values, metadata)``: a member's values in ``model.weights`` order, its frozen part merged in.

  A sample of a model with frozen layers holds only the variables that
  vary; its metadata names their positions (``indices``), the number of
  the model's variables (``num_variables``) and the file of the frozen
  part (``frozen``, in the same directory), which is read once and shared
  (`tfp_adaptive.keras.frozen_part`). Any other sample holds them all.
  """
  arrays, meta = read_arrays(path)
  if not meta.get('frozen'):
    return arrays, meta
  frozen_path = os.path.join(os.path.dirname(path), meta['frozen'])
  frozen, frozen_meta = _read_frozen(frozen_path)
  try:
    values = [None] * int(meta['num_variables'])
    for i, a in zip(meta['indices'], arrays):
      values[i] = a
    for i, a in zip(frozen_meta['indices'], frozen):
      values[i] = a
  except (KeyError, IndexError, TypeError, ValueError) as e:
    raise SampleFileError('Sample file %s and its frozen part %s do not fit '
                          'together (%s: %s).' % (path, frozen_path,
                                                  type(e).__name__, e)) from None
  if any(v is None for v in values) or len(arrays) != len(meta['indices']):
    raise SampleFileError('Sample file %s and its frozen part %s do not hold '
                          'every variable once.' % (path, frozen_path))
  return values, meta


_FROZEN_CACHE = {}  # (path, size, mtime) -> (arrays, metadata); a few parts.


def _read_frozen(path):
  try:
    stat = os.stat(path)
  except FileNotFoundError:
    raise SampleFileError('Frozen part %s does not exist.' % path) from None
  key = (os.path.abspath(path), stat.st_size, stat.st_mtime_ns)
  if key not in _FROZEN_CACHE:
    if len(_FROZEN_CACHE) >= 4:
      _FROZEN_CACHE.pop(next(iter(_FROZEN_CACHE)))
    _FROZEN_CACHE[key] = read_arrays(path)
  return _FROZEN_CACHE[key]
