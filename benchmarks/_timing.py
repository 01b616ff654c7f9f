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


def _fixed_mmap_threshold(nbytes: int = 1 << 17) -> None:
    """Make glibc serve every allocation of ``nbytes`` or more by its own mapping, returned on free.

    By default glibc raises that threshold after a large buffer is freed (up to 32 MiB), and buffers
    below it come from the heap, whose freed pages stay resident: a fit after another one would then
    reuse them and show no growth. A fixed threshold (``mallopt(M_MMAP_THRESHOLD)``) turns that off.
    Nothing happens outside glibc.
    """
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, int(nbytes))   # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pass


_SAMPLER = """
import os, select, sys
path, interval = f"/proc/{sys.argv[1]}/statm", float(sys.argv[2])
page, peak = os.sysconf("SC_PAGE_SIZE"), 0
print("ready", flush=True)
while True:
    with open(path) as f:
        peak = max(peak, int(f.read().split()[1]) * page)
    if select.select([sys.stdin], [], [], interval)[0]:
        break
print(peak, flush=True)
"""


class PeakMemory:
    """Peak memory of a block above the level at its start, without slowing the block down.

    Resident memory (``/proc/PID/statm``, Linux) is sampled every ``interval`` seconds by a separate
    process (a temporary that lives shorter can be missed). Not ``tracemalloc``, whose hooks on every
    allocation slow allocation-heavy Python code by 15-25 % (a d = 100, N = 1e6 fit: 0.83 s plain,
    0.97 s traced), and not a sampling thread, whose requests for the GIL slowed a fit with two worker
    threads from 0.50 to 0.84 s. Buffers of 128 KiB or more are mapped and returned to the system on
    free (a fixed glibc mmap threshold, :func:`_fixed_mmap_threshold`), so the resident level falls
    back when they are freed. Modules imported inside the block count too: warm up first
    (:func:`warm_up`). Where ``/proc`` is missing, ``tracemalloc``'s peak is used (and the block is
    slower). ``peak_mb`` holds the result after the block.
    """

    def __init__(self, interval: float = 0.001) -> None:
        import os

        _fixed_mmap_threshold()
        self.interval = interval
        self.peak_mb = float("nan")
        self._statm = "/proc/self/statm" if os.path.exists("/proc/self/statm") else None
        self._page = os.sysconf("SC_PAGE_SIZE") if self._statm else 1

    def _resident(self) -> int:
        with open(self._statm) as f:
            return int(f.read().split()[1]) * self._page

    def __enter__(self) -> "PeakMemory":
        import os
        import subprocess
        import sys
        import tracemalloc

        if self._statm is None:
            tracemalloc.start()
            return self
        self._start = self._resident()
        self._proc = subprocess.Popen([sys.executable, "-c", _SAMPLER, str(os.getpid()), str(self.interval)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._proc.stdout.readline()  # "ready": sampling has started
        return self

    def __exit__(self, *exc) -> bool:
        import tracemalloc

        if self._statm is None:
            self.peak_mb = tracemalloc.get_traced_memory()[1] / 1e6
            tracemalloc.stop()
            return False
        end = self._resident()
        out, _ = self._proc.communicate("stop\n")
        peak = max(int(out.split()[-1]), end)
        self.peak_mb = max(peak - self._start, 0) / 1e6
        return False


def warm_up(learner_name: str, X: np.ndarray, Y: np.ndarray, rows: int = 20_000) -> None:
    """One small fit (two hidden units, the first ``rows`` rows) of the learner, so that the modules and
    caches it loads on first use are not counted in the time and memory of the fits measured next."""
    import warnings

    import nnrecover as nr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            getattr(nr.learners, learner_name)(2, random_state=0).fit(X[:rows], Y[:rows])
        except Exception:  # noqa: BLE001 (a refusal of the small problem still imported the modules)
            pass
