"""Sphinx configuration of WheelFed's documentation.

Build (CI runs both through tests/docs/test_docs.py)::

    .venv/bin/python -m sphinx -W -b html docs docs/_build/html
    .venv/bin/python -m sphinx -W -b doctest docs docs/_build/doctest

Pages are Markdown (MyST); the API reference (``docs/api/``) is generated from the modules'
numpydoc docstrings (autodoc + napoleon), and every ``>>>`` example in it runs under the
doctest builder. Diagrams are Graphviz sources in ``docs/diagrams/`` rendered by ``dot`` at
build time.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path[:0] = [str(DOCS.parent), str(DOCS / "_ext")]

import shared  # noqa: E402  (after the path is set)

project = "WheelFed"
author = "WheelFed developers"
copyright = "WheelFed developers"  # noqa: A001 - Sphinx's name
release = version = shared.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.graphviz",
    "sphinx.ext.viewcode",
    "wheelfed_api",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store"]
root_doc = "index"

# Markdown: GitHub-style heading anchors, so that the same links work on the rendered site and
# when the .md files are read in the repository.
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "deflist"]
# BENCHMARKS.md and PRIVACY.md are included as they are written by every issue; a heading that
# skips a level there (## then ####) is style, not a broken document, and must not fail the build.
# The README's console blocks mix commands with their output, which Pygments' console lexer may
# not tokenise; it then highlights them plainly, which is no reason to fail the build either.
suppress_warnings = ["myst.header", "misc.highlighting_failure"]

# The docstrings are numpydoc (Parameters / Returns / Examples sections).
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_default_options = {"member-order": "bysource"}
autoclass_content = "class"

# Modules the API reference leaves out, and why (see docs/_ext/wheelfed_api.py).
wheelfed_api_exclude = {
    # Alembic's env.py runs a migration when imported; the revisions are data, not API.
    "aggregator.server.migrations": "Alembic's migration environment runs on import",
}

# The repository's Markdown files that a page of the site includes (repository path -> page).
# The pages link to these files where they lie in the repository, so that the links work when
# the Markdown is read there; the build points those links at the including pages instead
# (docs/_ext/wheelfed_api.py), and the link check of tests/docs/test_docs.py reads this table.
wheelfed_site_pages = {
    "README.md": "readme",
    "PRIVACY.md": "privacy",
    "RELIABILITY.md": "reliability",
    "BENCHMARKS.md": "benchmarks",
    "SCALING.md": "scaling",
    "deploy/README.md": "deploy",
    "edge_client/features/FEATURES.md": "features",
}

# Docstrings to show verbatim while they are not valid reStructuredText (key: the exact object,
# value: why). Empty: every docstring renders; fix a new one rather than adding it here.
wheelfed_api_verbatim: dict[str, str] = {}

# Every example in the docstrings and pages runs (``-b doctest``).
import doctest  # noqa: E402

doctest_global_setup = "import numpy as np"
doctest_default_flags = (
    doctest.ELLIPSIS | doctest.IGNORE_EXCEPTION_DETAIL | doctest.DONT_ACCEPT_TRUE_FOR_1 | doctest.NORMALIZE_WHITESPACE
)
doctest_test_doctest_blocks = "default"

graphviz_output_format = "svg"
graphviz_dot_args = ["-Gfontname=DejaVu Sans", "-Nfontname=DejaVu Sans", "-Efontname=DejaVu Sans"]

try:
    import furo  # noqa: F401
except ImportError:  # the theme is optional: alabaster ships with Sphinx
    html_theme = "alabaster"
else:
    html_theme = "furo"
html_title = f"WheelFed {release}"
html_static_path: list[str] = []
