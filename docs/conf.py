"""Sphinx configuration of the tfp_adaptive documentation (`sphinx-build -W docs docs/_build`)."""

import os
import sys

sys.path.insert(0, os.path.abspath('..'))
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '3')

project = 'tfp_adaptive'
author = 'The tfp_adaptive authors'
copyright = 'The tfp_adaptive authors'  # pylint: disable=redefined-builtin
release = '0.3.0'

extensions = ['sphinx.ext.autodoc', 'sphinx.ext.napoleon', 'myst_parser']
source_suffix = {'.rst': 'restructuredtext', '.md': 'markdown'}
exclude_patterns = ['_build']
myst_enable_extensions = ['dollarmath']
myst_heading_anchors = 3
napoleon_google_docstring = True
napoleon_numpy_docstring = True
autodoc_member_order = 'bysource'
autodoc_default_options = {'members': True, 'undoc-members': False}
autodoc_typehints = 'none'
suppress_warnings = ['myst.xref_missing']
html_theme = 'alabaster'
autodoc_inherit_docstrings = False
