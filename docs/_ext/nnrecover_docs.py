"""Sphinx directives that build reference pages from nnrecover's own registries.

The pages stay true to the code because they are generated from it at build time:

``.. nnrecover-algorithms:: PAPER``
    one section per record of :func:`nnrecover.learners.available` for that paper: the paper's label
    as the section title (so the search finds "Algorithm 5" on the paper's page), the registry name,
    the implementing class or function (linked to the API reference), assumptions and description.
``.. nnrecover-experiments::``
    one section per registered experiment: its command, paper, description, and its figure when
    ``docs/figures/NAME.png`` exists (made by ``make docs-figures``).
``.. nnrecover-cli::``
    the ``--help`` text of ``nnrecover`` and of every subcommand, from the argparse parser.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.util.nodes import nested_parse_with_titles


_PUBLIC_MODULES = {"awasthi2021": "nnrecover.learners.awasthi2021", "ge2019": "nnrecover.learners.ge2019",
                   "bakshi2019": "nnrecover.learners.bakshi2019", "goel2019": "nnrecover.learners.goel2019",
                   "baseline": "nnrecover.learners.baseline"}


def _target_role(target, paper: str) -> str:
    """A cross-reference to the implementing object at its public address (the paper's learner module
    re-exports the functions of its private package), or its plain name."""
    import importlib

    module = getattr(target, "__module__", None)
    qual = getattr(target, "__qualname__", None)
    if not module or not qual:
        return f"``{target!r}``"
    public = _PUBLIC_MODULES.get(paper)
    if public:
        # the object at the public address, or None when the paper's module does not re-export it
        obj = importlib.import_module(public)
        for part in qual.split("."):
            obj = getattr(obj, part, None)
        if obj is target or (obj is not None and getattr(obj, "__func__", None) is getattr(target, "__func__", target)):
            module = public
    role = "class" if isinstance(target, type) else ("meth" if "." in qual else "func")
    return f":{role}:`~{module}.{qual}`"


class _Generated(Directive):
    """Base: a subclass's ``lines()`` gives reStructuredText that is parsed in place (titles allowed)."""

    def run(self):
        node = nodes.section()
        node.document = self.state.document
        source = self.state.document.current_source or "<nnrecover-docs>"
        nested_parse_with_titles(self.state, StringList(self.lines(), source=source), node)
        return node.children


def _plain(text: str) -> str:
    """Registry text is plain (the CLI prints it): escape what reStructuredText would read as markup."""
    for ch in "\\*`|_[]<>":
        text = text.replace(ch, "\\" + ch)
    return text


class Algorithms(_Generated):
    required_arguments = 1

    def lines(self):
        import nnrecover as nr

        paper = self.arguments[0]
        records = [r for r in nr.learners.available() if r.paper == paper]
        if not records:
            return [f"No algorithm of ``{paper}`` is registered in this version.", ""]
        out = [".. list-table:: Every registered algorithm of this paper",
               "   :header-rows: 1", "   :widths: 25 25 50", "",
               "   * - the paper's label", "     - registry name", "     - implemented by"]
        for r in records:
            out += [f"   * - {_plain(r.algorithm)}", f"     - ``{r.name}``", f"     - {_target_role(r.target, paper)}"]
        out.append("")
        for r in records:
            title = f"{_plain(r.algorithm)}: ``{r.name}``"
            out += [title, "~" * (len(title) + 4), ""]
            if r.description:
                out += [_plain(r.description), ""]
            out += [f"Implemented by {_target_role(r.target, paper)}"
                    + (" (an estimator: ``nnrecover fit --learner " + r.name + "``)." if r.is_learner else "."), ""]
            if r.assumptions:
                out += ["Assumptions:", ""] + [f"- {_plain(str(a))}" for a in r.assumptions] + [""]
        return out


class Experiments(_Generated):
    def lines(self):
        from nnrecover.experiments import available_experiments

        figures = Path(__file__).resolve().parents[1] / "figures"
        out = []
        for rec in available_experiments():
            title = f"``{rec.name}``"
            out += [title, "-" * (len(title) + 4), "", _plain(rec.description or ""), "",
                    f"Paper: :doc:`papers/{rec.paper}`.", "", "Full run and quick run:", "",
                    ".. code-block:: console", "",
                    f"   $ nnrecover experiment {rec.name} --seed 0 --out results/{rec.name}",
                    f"   $ nnrecover experiment {rec.name} --quick --seed 0 --out results/{rec.name}-quick", ""]
            png = figures / f"{rec.name}.png"
            if png.exists():
                out += [f".. figure:: figures/{rec.name}.png", "   :width: 90%", "",
                        f"   ``nnrecover experiment {rec.name} --quick --seed 0`` (made by ``make docs-figures``).", ""]
        return out


class CommandLine(_Generated):
    def lines(self):
        import argparse

        from nnrecover.cli.parser import build_parser

        parser = build_parser()
        out = ["``nnrecover``", "-" * 17, "", ".. code-block:: text", ""]
        out += ["   " + line for line in parser.format_help().splitlines()] + [""]
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    title = f"``nnrecover {name}``"
                    out += [title, "-" * (len(title) + 4), "", ".. code-block:: text", ""]
                    out += ["   " + line for line in sub.format_help().splitlines()] + [""]
        return out


def setup(app):
    app.add_directive("nnrecover-algorithms", Algorithms)
    app.add_directive("nnrecover-experiments", Experiments)
    app.add_directive("nnrecover-cli", CommandLine)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
