"""Sphinx configuration of the nnrecover documentation (``make docs``)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "nnrecover"
author = "the nnrecover developers"
copyright = "2026, the nnrecover developers"
from nnrecover import __version__ as release  # noqa: E402

version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "myst_parser",
    "nnrecover_docs",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "helpers", "figures/README.md"]
root_doc = "index"

# numpydoc-style docstrings through napoleon (no Google style); fitted attributes as a section
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False
napoleon_custom_sections = [("Attributes (after ``fit``)", "params_style"),
                            ("Attributes (after fit)", "params_style")]
autosummary_generate = True
autosummary_ignore_module_all = False  # document what each module lists in __all__, re-exports included
templates_path = ["_templates"]
autodoc_default_options = {"members": True, "show-inheritance": False}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autoclass_content = "class"
# The scikit-learn base classes' inherited members (get_params, set_params, score...) are documented
# upstream; listing them on every learner page only repeats them.
autodoc_inherit_docstrings = False

myst_heading_anchors = 3
# Type fields such as "array of shape (n, d)" make Sphinx try to link each word; several objects have an
# attribute called ``n``, so those words are ambiguous targets. They are shapes, not references.
suppress_warnings = ["ref.python"]

html_theme = "furo"
html_title = f"nnrecover {release}"
html_static_path = []
