"""Timing helper shared by the benchmark scripts (run as scripts: this folder is on sys.path)."""

from __future__ import annotations

import time

import numpy as np


def best_of(fn, repeat: int) -> tuple[float, object]:
    """Run ``fn`` ``repeat`` times; return the fastest wall time and the last result."""
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def write_readme_section(name: str, section: str) -> None:
    """Replace the block ``<!-- name: start --> ... <!-- name: end -->`` of benchmarks/README.md by
    ``section`` (which carries both markers), or append it; the file is written whole or not at all."""
    from pathlib import Path

    readme = Path(__file__).with_name("README.md")
    text = readme.read_text()
    start, end = f"<!-- {name}: start -->", f"<!-- {name}: end -->"
    if start in text and end in text:
        text = text[:text.index(start)] + section.rstrip("\n") + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + "\n\n" + section.rstrip("\n") + "\n"
    tmp = readme.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(readme)
