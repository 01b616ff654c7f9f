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
