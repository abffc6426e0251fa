"""One sample directory per chain of a run of several chains: views of the run's directory.

A `fit` of K chains (`tfp_adaptive.keras.chains.Chains`) writes one sample
directory, whose manifest stays the only truth of the run: its checkpoints
and every chain's members (`tfp_adaptive.keras.sample_store`). After each
of its commits, every chain ``k`` gets a directory ``chain_<k>/`` inside it
that holds that chain's members alone, in the same format, so that
``BayesianEnsemble.load('run/chain_<k>')`` reads one chain and any tool made
for a one-chain directory works on it. A view holds hard links to the run's
files (no second copy of any bytes; a copy where the file system has no
hard links) and a manifest of its own. Per view, in order:

1. link the files its new manifest lists (and ``model.json``, ``run.json``);
2. write that manifest atomically;
3. only then delete the links it no longer lists.

A kill anywhere leaves every view's manifest whole and every file it lists
intact (a link keeps a file's bytes when the run deletes its own name),
at most one commit behind the run's; the run's next commit, or the resumed
run's, brings every view up to date. The run holds each view's lock while
it writes, so a reader of a view sees a live directory, as it does the
run's.
"""

import os
import shutil
import uuid

from tfp_adaptive.keras import sample_files
from tfp_adaptive.keras import sample_store

__all__ = ['ChainViews', 'view_directory']

#: The files every view holds beside its members.
_SHARED = ('model.json', sample_store.RUN)


def view_directory(directory, chain, num_chains):
  """``<directory>/chain_<k>``, ``k`` zero-padded to the width of ``num_chains − 1`` (as `BayesianEnsemble.save` names them)."""
  width = len(str(max(num_chains - 1, 0)))
  return os.path.join(directory, 'chain_%0*d' % (width, chain))


def _link(source, target):
  """Makes `target` the same file as `source` (atomically replaced if it is another)."""
  if os.path.exists(target) and os.path.samefile(source, target):
    return
  temporary = os.path.join(os.path.dirname(target),
                           '.tmp-' + uuid.uuid4().hex)
  try:
    os.link(source, temporary)
  except OSError:  # No hard links here: a copy, still whole or absent.
    shutil.copyfile(source, temporary)
  os.replace(temporary, target)
  sample_files.fsync_directory(os.path.dirname(target))


class ChainViews(object):
  """The per-chain views of one run's sample directory (see the module docstring).

  Args:
    store: the run's `SampleStore`, owned by the run.
  """

  def __init__(self, store):
    self.store = store
    self._views = {}  # Chain -> its `SampleStore`, locked.

  def _view(self, chain, num_chains):
    view = self._views.get(chain)
    if view is None:
      view = sample_store.SampleStore(
          view_directory(self.store.directory, chain, num_chains))
      view.acquire()
      self._views[chain] = view
    return view

  def update(self, manifest, num_chains):
    """Brings every chain's view to the run's committed `manifest`."""
    entries = {e['file']: e for e in manifest['samples']}
    frozen = {e['file']: e for e in manifest.get('frozen', [])}
    for chain in range(num_chains):
      names = [n for n in manifest['members']
               if entries[n].get('chain', 0) == chain]
      samples = [entries[n] for n in names]
      used = sorted({e['frozen'] for e in samples if e.get('frozen')})
      view = self._view(chain, num_chains)
      for name in list(_SHARED) + names + used:
        if os.path.exists(self.store.path(name)):
          _link(self.store.path(name), view.path(name))
      view.commit(dict(
          samples=samples, members=names, pinned=names,
          frozen=[frozen[n] for n in used],
          likelihood=manifest.get('likelihood'),
          weighting=manifest.get('weighting', 'uniform')))

  def release(self):
    for view in self._views.values():
      view.release()
    self._views = {}

  def wipe(self):
    """Deletes our files in every view directory (``overwrite=True``); others stay."""
    for name in sorted(os.listdir(self.store.directory)):
      path = self.store.path(name)
      if name.startswith('chain_') and os.path.isdir(path):
        view = sample_store.SampleStore(path)
        view.acquire()
        try:
          view.wipe()  # `model.json` and `run.json` too.
        finally:
          view.release()
