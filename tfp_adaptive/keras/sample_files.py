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

__all__ = ['SampleFileError', 'atomic_write', 'read_arrays', 'read_metadata',
           'write_arrays']

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
