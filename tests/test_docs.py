"""The documentation site builds with warnings as errors, and its reference names every public name."""

import importlib
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PUBLIC = ['tfp_adaptive.mcmc', 'tfp_adaptive.keras',
          'tfp_adaptive.keras.optimizers', 'tfp_adaptive.keras.likelihoods',
          'tfp_adaptive.keras.priors', 'tfp_adaptive.keras.schedules',
          'tfp_adaptive.schedules', 'tfp_adaptive.minibatch',
          'tfp_adaptive.diagnostics', 'tfp_adaptive.core',
          'tfp_adaptive.inference_data', 'tfp_adaptive.plot']


@pytest.mark.slow
def test_sphinx_build_without_warnings(tmp_path):
  out = tmp_path / 'html'
  done = subprocess.run(
      [sys.executable, '-m', 'sphinx', '-W', '--keep-going', '-q', '-b',
       'html', 'docs', str(out)], cwd=ROOT, capture_output=True, text=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'), timeout=600)
  problems = [l for l in done.stderr.splitlines()
              if ('WARNING' in l or 'ERROR' in l) and 'absl' not in l]
  assert done.returncode == 0 and not problems, done.stderr[-3000:]
  reference = (out / 'api.html').read_text()
  missing = []
  for module in PUBLIC:
    for name in importlib.import_module(module).__all__:
      obj = getattr(importlib.import_module(module), name)
      if type(obj).__name__ == 'module':
        continue
      if '.' + name + '"' not in reference and '.' + name + '<' not in reference:
        missing.append('%s.%s' % (module, name))
  assert not missing, missing


def test_kernel_users_do_not_load_the_keras_layer():
  code = ('import sys, tfp_adaptive as tfa\n'
          'assert "tfp_adaptive.keras" not in sys.modules\n'
          'tfa.mcmc.SGLD(lambda x: -x**2, 0.1)\n'
          'assert "tfp_adaptive.keras" not in sys.modules\n'
          'tfa.keras.optimizers.SGLD\n')
  subprocess.run([sys.executable, '-c', code], cwd=ROOT, check=True,
                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'), timeout=300)
