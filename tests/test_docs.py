"""The documentation site builds without a warning and finds what a researcher looks for.

``make docs`` runs the same build; this test keeps it green (about 30 s: no experiment runs at build
time, the figures are committed).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# the Sphinx build of the whole site takes 30-60 s on 2 cores
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("html")
    doctrees = tmp_path_factory.mktemp("doctrees")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           "-d", str(doctrees), str(ROOT / "docs"), str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, f"sphinx-build failed:\n{proc.stderr[-5000:]}"
    assert proc.stderr.strip() == "", f"sphinx-build printed warnings:\n{proc.stderr[-5000:]}"
    return out


def _search_index(out: Path) -> dict:
    text = (out / "searchindex.js").read_text(encoding="utf-8")
    return json.loads(re.match(r"Search\.setIndex\((.*)\)\s*;?\s*$", text, re.S).group(1))


def test_search_finds_algorithm_5_on_the_bakshi_page(built):
    index = _search_index(built)
    docnames = index["docnames"]
    hits = {docnames[entry[0]] for title, entries in index["alltitles"].items()
            if title.startswith("Algorithm 5") for entry in entries}
    assert "papers/bakshi2019" in hits
    assert "papers/awasthi2021" in hits  # both papers have an Algorithm 5


def test_every_registered_algorithm_is_on_its_paper_page(built):
    import nnrecover as nr

    for rec in nr.learners.available():
        page = (built / "papers" / f"{rec.paper}.html").read_text(encoding="utf-8")
        assert rec.name in page, f"{rec.name} ({rec.paper}) is missing from papers/{rec.paper}.html"


def test_every_subcommand_is_on_the_cli_page(built):
    from nnrecover.cli.parser import build_parser

    page = (built / "cli.html").read_text(encoding="utf-8")
    import argparse

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name in action.choices:
                assert f"nnrecover {name}" in page
