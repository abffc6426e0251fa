"""Every Python snippet of the README and the guides runs as printed, and prints no warning.

A snippet that continues another (it uses ``model``, ``x``, ``kernel``...)
runs in the context the guide's text gives it: the README's data (the
digits split of ``examples/keras_digits.py``), the guides' compiled model
and kernel, a collector that has run. Each snippet runs with every warning
recorded, TensorFlow's log included: a newcomer's first runs must print
nothing they did not cause. The README's two quick starts run in
`tests/project/test_examples.py`, which also checks their answers.
"""

import glob
import logging
import os
import re
import warnings

import numpy as np
import pytest
from tests.conftest import full_size_only
from tests.conftest import ROOT

BLOCK = re.compile(r'```python\n(.*?)```', re.S)


def _blocks():
  """``[(id, code)]`` of every Python block, each distinct code once."""
  files = ['README.md'] + sorted(
      glob.glob(os.path.join(ROOT, 'docs', '**', '*.md'), recursive=True))
  seen, blocks = set(), []
  for path in files:
    with open(os.path.join(ROOT, path), encoding='utf-8') as f:
      text = f.read()
    for i, code in enumerate(BLOCK.findall(text)):
      if code not in seen:
        seen.add(code)
        blocks.append(('%s#%d' % (os.path.relpath(path, ROOT), i), code))
  return blocks


# Run with their answers checked in tests/project/test_examples.py (same text).
ELSEWHERE = {'README.md#0', 'README.md#1', 'README.md#2'}
BLOCKS = [b for b in _blocks() if b[0] not in ELSEWHERE]
# Run at full size only (`TFPA_STAT_SCALE > 1`), their paths run in CI with
# their answers checked: four chains of a digits MLP in one compiled `fit`
# (tests/keras/test_chains.py); the README's recipe with one chain
# (tests/project/test_examples.py); `MultiWorkerMirroredStrategy` with
# `enable_multi_worker` (tests/keras/test_keras_distribute.py, in two
# processes); eight schools (tests/mcmc/test_eight_schools.py, against NUTS).
# Each with a text of its code: a snippet added before it in its page moves
# its number, and the check below says so instead of leaving another out.
FULL_SIZE_ONLY = {
    'docs/guides/distributed.md#1': 'tfa.keras.Chains(models)',
    'docs/getting_started.md#1': 'CurvatureCalibration((x, y), epochs=2)',
    'docs/guides/keras.md#4': 'CurvatureCalibration((x, y), epochs=2)',
    'docs/guides/distributed.md#0': 'MultiWorkerMirroredStrategy()',
    'docs/guides/kernels.md#0': '# eight schools'}
_CODE = dict(BLOCKS)
assert all(text in _CODE.get(name, '')
           for name, text in FULL_SIZE_ONLY.items()), FULL_SIZE_ONLY

_UNSETTLED = 'SampleCollector: the configurational temperature'
# A demonstration shorter than a reading needs: the collector says that
# its members come back unchecked, and how long a run would be read.
_TOO_SHORT = 'SampleCollector: this run was too short to tell'
# Warnings a snippet exists to show: PSIS-LOO's Pareto-k diagnostic reports
# on the user's model and data (the guide says how to read it), and so does
# the members' temperature (here of a 10-epoch run, which has not settled).
EXPECTED = {'docs/guides/diagnostics.md#6': ('Pareto distribution',),
            'docs/guides/diagnostics.md#3': (
                'BayesianEnsemble.check_temperature',),
            'docs/guides/keras.md#3': ('BayesianEnsemble.check_temperature',),
            # TFP's, for any kernel without a Metropolis test; the snippet
            # shows the check that replaces it.
            'docs/guides/kernels.md#3': ('is not calibrated',),
            # The warm start leaves the prior's directions at Adam's scale;
            # the collector's thermometer says so, as both pages tell.
            'docs/getting_started.md#1': (_UNSETTLED, _TOO_SHORT),
            'docs/guides/keras.md#4': (_UNSETTLED,),
            'docs/guides/keras.md#5': (_TOO_SHORT,),
            'docs/guides/keras.md#6': (_TOO_SHORT,),
            'docs/guides/choosing.md#1': (_TOO_SHORT,),
            # TensorFlow's, because this test process used TensorFlow before
            # the snippet created its strategy; a script that follows the
            # guide creates it at startup.
            'docs/guides/distributed.md#0': (
                'Collective ops is not configured at program startup',
                _TOO_SHORT),
            'docs/guides/distributed.md#1': (_TOO_SHORT,)}
# Keras itself warns on every `fit` of a `tf.data.Dataset` (its `shuffle`
# defaults to True): not ours, and not the user's doing either.
KERAS_OWN = ('`shuffle=True` was passed, but will be ignored',)


class _TensorFlowLog(logging.Handler):
  """Records TensorFlow's Python log (its retracing warning goes there)."""

  def __init__(self):
    super().__init__(logging.WARNING)
    self.records = []

  def emit(self, record):
    self.records.append(record.getMessage())


def _fresh_retracing_counts(monkeypatch):
  """TensorFlow's retracing counts as a new process has them.

  TensorFlow counts traces per Python code object, process-wide: every Keras
  model's predict function shares one count, so the models that earlier
  tests in this process built would make a snippet's first predictions
  look like retracing. A user's script starts from zero.
  """
  from tensorflow.python.eager.polymorphic_function import polymorphic_function  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(polymorphic_function, '_frequent_tracing_detector_manager',
                      polymorphic_function._FrequentTracingDetectorManager())  # pylint: disable=protected-access


@pytest.fixture(scope='module')
def context(tmp_path_factory):
  """What the guides' text says a snippet continues from."""
  import keras  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import arviz as az  # pylint: disable=g-import-not-at-top
  import tfp_adaptive as tfa  # pylint: disable=g-import-not-at-top
  from examples import keras_digits  # pylint: disable=g-import-not-at-top
  x, y, x_test, y_test = [a.astype('float32') if a.dtype.kind == 'f' else a
                          for a in keras_digits.load('digits')]

  def model():
    keras.utils.set_random_seed(0)
    m = keras.Sequential([keras.Input((64,)),
                          keras.layers.Dense(100, activation='relu'),
                          keras.layers.Dense(10)])
    m.compile(tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x),
                                         friction=0.1),
              keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m
  trained = model()
  collector = tfa.keras.SampleCollector(burnin=5, unit='epoch')
  trained.fit(x, y, epochs=10, verbose=0, callbacks=[
      tfa.keras.StepSizeCalibration(epochs=3), collector])
  opt = tfa.keras.optimizers.PSGLD(1e-4, data_size=len(x))
  return dict(
      x=x, y=y, x_test=x_test, y_test=y_test, x_train=x, y_train=y,
      new_model=model, tf=tf, keras=keras, tfa=tfa, az=az, np=np,
      collector=collector, ensemble=collector.ensemble,
      kernel=tfa.mcmc.PSGLD(lambda s: -0.5 * s ** 2, step_size=1e-2,
                            preconditioner_decay_rate=0.9, diagonal_bias=1.),
      state=tf.zeros([4, 100]), opt=opt,
      loss_fn=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      directory=str(tmp_path_factory.mktemp('snippets')))


@pytest.mark.slow
@pytest.mark.parametrize('name, code', [
    pytest.param(*b, marks=full_size_only()) if b[0] in FULL_SIZE_ONLY else b
    for b in BLOCKS], ids=[b[0] for b in BLOCKS])
def test_snippet_runs_without_warnings(name, code, context, monkeypatch):
  """Each snippet runs as printed, except that a `fit` of 150 epochs runs 30.

  The guides' long runs follow the single-chain recipe (150 epochs,
  burn-in 60). Shortened to 30, with burn-ins of 12, they still take
  samples and meet every check that warns, except one: the chain has not
  settled by then, which the collector reports at the end, and which is the
  one warning expected of a shortened run. The shortening spares the
  suite's longest snippets.
  """
  shortened = 'epochs=150,' in code
  if shortened:  # Burn-in scaled with the run, as 60 of 150 epochs.
    code = (code.replace('epochs=150,', 'epochs=30,')
            .replace('burnin=60,', 'burnin=12,')
            .replace('burnin_epochs=60)', 'burnin_epochs=12)'))
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  monkeypatch.syspath_prepend(ROOT)
  monkeypatch.chdir(context['directory'])  # Snippets may write files.
  namespace = {k: v for k, v in context.items() if k != 'new_model'}
  namespace['model'] = context['new_model']()
  namespace['d'] = os.path.join(context['directory'], name.replace('/', '_'))
  _fresh_retracing_counts(monkeypatch)
  tf_log = _TensorFlowLog()
  logging.getLogger('tensorflow').addHandler(tf_log)
  try:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter('always')
      exec(compile(code, name, 'exec'), namespace)  # pylint: disable=exec-used
  finally:
    logging.getLogger('tensorflow').removeHandler(tf_log)
  ours = [str(w.message) for w in caught
          if not issubclass(w.category, (DeprecationWarning,
                                         PendingDeprecationWarning)) and
          not any(text in str(w.message)
                  for text in EXPECTED.get(name, ()) + KERAS_OWN +
                  (('has not settled',) if shortened else ()))]
  assert not ours, ours
  tf_records = [r for r in tf_log.records
                if not any(text in r for text in EXPECTED.get(name, ()))]
  assert not tf_records, tf_records
