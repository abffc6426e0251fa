"""The documentation site builds with warnings as errors, and its reference names every public name."""

import importlib
import json
import os
import re
import subprocess
import sys

import pytest
from tests.conftest import ROOT

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


@pytest.mark.slow
def test_kernel_users_do_not_load_the_keras_layer():
  code = ('import sys, tfp_adaptive as tfa\n'
          'assert "tfp_adaptive.keras" not in sys.modules\n'
          'tfa.mcmc.SGLD(lambda x: -x**2, 0.1)\n'
          'assert "tfp_adaptive.keras" not in sys.modules\n'
          'tfa.keras.optimizers.SGLD\n')
  subprocess.run([sys.executable, '-c', code], cwd=ROOT, check=True,
                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3'), timeout=300)


# Outside pages the project links to, each one known to exist (the paper
# gives its own review page). Anything else outside is an invented link.
KNOWN_URLS = {'https://openreview.net/forum?id=dXAuvo6CGI'}
TEXT_FILES = ('.md', '.rst', '.py', '.cff', '.txt', '.cfg', '.toml')
URL = re.compile(r'https?://[^\s)>\]"\'`]+')
MD_LINK = re.compile(r'\]\(([^)\s]+)\)')


def _project_files():
  skip = {'.git', '_build', 'build', 'dist', 'data', '__pycache__'}
  for top, dirs, files in os.walk(ROOT):
    dirs[:] = [d for d in dirs if d not in skip and not d.endswith(
        '.egg-info') and not d.startswith('.') or d == '.ci']
    for name in files:
      if name.endswith(TEXT_FILES):
        yield os.path.join(top, name)


def _anchors(path):
  """GitHub's anchors of the headings of a Markdown file."""
  with open(path, encoding='utf-8') as f:
    headings = [l.lstrip('#').strip() for l in f if l.startswith('#')]
  slug = lambda h: re.sub(r'[^\w\- ]', '', h.lower()).replace(' ', '-')
  return {slug(h) for h in headings}


def test_no_invented_links():
  """Outside links are known pages; links inside the project are relative and resolve."""
  bad = []
  for path in _project_files():
    with open(path, encoding='utf-8') as f:
      text = f.read()
    where = os.path.relpath(path, ROOT)
    bad += ['%s: %s' % (where, u) for u in URL.findall(text)
            if u.rstrip('.,;') not in KNOWN_URLS and
            not u.startswith(('http://localhost', 'http://127.0.0.1'))]
    if not path.endswith('.md'):
      continue
    for target in MD_LINK.findall(text):
      if target.startswith(('http://', 'https://', 'mailto:')):
        continue
      file_part, _, anchor = target.partition('#')
      resolved = (os.path.normpath(os.path.join(os.path.dirname(path),
                                                file_part))
                  if file_part else path)
      if not os.path.exists(resolved):
        bad.append('%s: %s (no such file)' % (where, target))
      elif anchor and resolved.endswith('.md') and (
          anchor not in _anchors(resolved)):
        bad.append('%s: %s (no such heading)' % (where, target))
  assert not bad, bad


def test_citation_file_is_valid_cff_1_2():
  """CITATION.cff against the Citation File Format 1.2.0 JSON schema.

  ``tests/data/cff_schema_1.2.0.json`` is the schema the format publishes
  (as shipped by cffconvert); the test runs it with `jsonschema`.
  """
  import jsonschema  # pylint: disable=g-import-not-at-top
  import yaml  # pylint: disable=g-import-not-at-top
  with open(os.path.join(ROOT, 'CITATION.cff'), encoding='utf-8') as f:
    citation = yaml.safe_load(f)
  with open(os.path.join(ROOT, 'tests', 'data', 'cff_schema_1.2.0.json'),
            encoding='utf-8') as f:
    schema = json.load(f)
  jsonschema.validate(citation, schema)
  titles = ' '.join(r['title'] for r in citation['references'])
  for paper in ('Convergence of Locally Adaptive', 'Non-Diagonal Metrics',
                'Stochastic gradient Langevin dynamics'):
    assert paper in titles, paper


def test_the_readme_is_a_page_users_read():
  """At most 12,000 characters: what and why, the two commands, quick starts, where to read more."""
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    text = f.read()
  assert len(text) <= 12000, len(text)


def test_ci_runs_the_readme_test_command_verbatim():
  """`.ci/run` runs the command the README gives for the tests, character for character."""
  with open(os.path.join(ROOT, 'README.md'), encoding='utf-8') as f:
    readme = f.read()
  commands = re.findall(r"^pip install -e '\.\[test\]' && .*$", readme, re.M)
  assert len(commands) == 1, commands
  with open(os.path.join(ROOT, '.ci', 'run'), encoding='utf-8') as f:
    ci = f.read().splitlines()
  assert commands[0] in ci, (commands[0], ci)
