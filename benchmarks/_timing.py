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


def traced_peak_mb(fn) -> tuple[float, object]:
    """Run ``fn()`` under ``tracemalloc``; return its peak traced memory in MB and its result.

    A separate, untimed run: tracemalloc hooks every allocation and slows allocation-heavy Python code
    by 15-25 % (a d = 100, N = 1e6 fit: 0.83 s plain, 0.97 s traced), so timed runs go without it.
    (Resident-memory sampling was tried instead: a sampling thread's GIL requests slowed a fit with two
    worker threads from 0.50 to 0.84 s, and a fixed malloc mmap threshold, which it needs to see freed
    buffers leave, slowed the fits themselves.)
    """
    import tracemalloc

    tracemalloc.start()
    try:
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()
    return peak, out


def warm_up(learner_name: str, n_outputs: int = 2) -> None:
    """One small fit of the learner (d = 10, two hidden units, 20000 rows of its own teacher), so that the
    modules and caches it loads on first use are not counted in the time and memory of the fits measured
    next. Small in d on purpose: a fit with few rows per parameter at the measured d can take minutes."""
    import warnings

    import nnrecover as nr

    teacher = nr.random_network(10, 2, n_outputs=n_outputs, rng=7)
    X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(10), 20_000, rng=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            getattr(nr.learners, learner_name)(2, random_state=0).fit(X, Y[:, 0] if n_outputs == 1 else Y)
        except Exception:  # noqa: BLE001 (a refusal of the small problem still imported the modules)
            return
