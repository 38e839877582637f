"""Sphinx configuration of chatledger's documentation site (``make docs``).

The pages are the Markdown files of this directory (MyST); the API reference is
generated from the docstrings (autodoc) and the CLI reference from the argument parser
(sphinx-argparse). Nothing is fetched while building: no intersphinx, and Furo uses the
system's fonts. ``docs/contributing.md`` says why Sphinx.
"""

from __future__ import annotations

import logging
from typing import Any

from sphinx.application import Sphinx
from sphinx.ext.napoleon import Config, GoogleDocstring

import chatledger

# Imported before the build starts: the OpenAI Agents SDK's and LangChain's (under
# LangGraph's saver) pydantic models, first imported inside autodoc (Sphinx 9), fail to
# build their schemas (PydanticSchemaGenerationError on ``__pydantic_extra__``);
# imported here they load as in any program.
import chatledger.langgraph.saver
import chatledger.openai_agents

project = "chatledger"
author = "chatledger's developers"
copyright = "chatledger's developers"
release = chatledger.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinxarg.ext",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# GitHub's heading anchors (`#two-roles-owner-and-runtime`), so the same links work in
# the repository's Markdown view and on the site, down to ### headings.
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# The docstrings are reST with Google-style sections; signatures show the annotations as written.
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_preserve_defaults = True
autodoc_default_options = {"members": True, "show-inheritance": True}

html_theme = "furo"
html_title = f"chatledger {release}"
html_static_path: list[str] = []
html_show_sourcelink = False

# accessible-pygments (Furo's dependency) sets the root logger to INFO on import, which
# would print Alembic's INFO lines while autodoc imports chatledger.migrate.
logging.getLogger("alembic").setLevel(logging.WARNING)
html_copy_source = False
# Option names stay as typed (`--sql`, not an en dash), in help texts and pages alike.
smartquotes = False


# The docstrings' Google-style sections (Args:, Returns:, Raises:), through napoleon's
# parser. Not for attributes, data and properties: their "#:" comments are prose, and
# napoleon would take the text before a first colon ("``None``: yes for SQLite") for a
# type.
GOOGLE = Config(napoleon_numpy_docstring=False)


def google_sections(app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    if what not in ("attribute", "data", "property"):
        lines[:] = GoogleDocstring(lines, GOOGLE, app, what, name, obj, options).lines()


def setup(app: Sphinx) -> None:
    app.connect("autodoc-process-docstring", google_sections)
