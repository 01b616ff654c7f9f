"""Benchmark: a streaming moment pass against a plain numpy pass over the same data.

For each ``d`` in ``--dims`` (default 10, 100, 1000) and ``n = --n`` rows (default 10^6), the script

1. writes ``X`` (n x d, float64, N(0, 1) entries) to a ``.npy`` memory map in a temporary directory,
   block by block (the generation is not timed; at d = 1000 the file is 8 GB, never in memory at once);
2. reads the file once untimed, so that every timed pass starts from the same page-cache state;
3. times, over the same memory map:

   * ``numpy sum``: ``X.sum(axis=0)`` (the baseline: one plain numpy pass over the data),
   * ``MeanStatistic``: ``accumulate(MeanStatistic(), (X, None))``, the same sums through the engine
     (chunked reads, validation of every chunk: dtype, shape, NaN/inf),
   * ``SecondMoment``: ``accumulate(SecondMoment(), (X, None))``, i.e. E[x x^T] by one BLAS syrk
     ``X_c^T X_c`` per chunk (n d^2 flops),
   * ``numpy X^T X``: ``X_c.T @ X_c`` summed over the same chunks with no validation, the raw BLAS
     cost of the second moment (so ``SecondMoment / numpy X^T X`` is the engine's overhead);

4. writes the ratios (time / numpy-sum time) to ``benchmarks/README.md``.

Each pass is repeated ``--repeat`` times (default 2) and the fastest run is reported, except the
O(n d^2) passes at d >= 1000, which run once. BLAS is limited to ``--blas-threads`` threads
(default 1, with threadpoolctl) so that numbers are per core and comparable on a shared machine.

Run: ``make bench-moments`` (or ``.venv/bin/python benchmarks/run.py``); ``--quick`` uses n = 10^5.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from nnrecover.data import accumulate  # noqa: E402
from nnrecover.data import default_chunk_rows  # noqa: E402
from nnrecover.moments.statistics import MeanStatistic, SecondMoment  # noqa: E402
from _timing import best_of as _best  # noqa: E402  (benchmarks/ is on sys.path)

GEN_BLOCK_BYTES = 256 << 20


def _write_memmap(path: Path, n: int, d: int, seed: int) -> float:
    t0 = time.perf_counter()
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, d))
    rows = max(1, GEN_BLOCK_BYTES // (8 * d))
    gen = np.random.default_rng(seed)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        mm[start:stop] = gen.standard_normal((stop - start, d))
    mm.flush()
    del mm
    return time.perf_counter() - t0


def _numpy_xtx(X: np.ndarray, rows: int) -> np.ndarray:
    acc = np.zeros((X.shape[1], X.shape[1]))
    for start in range(0, X.shape[0], rows):
        c = np.asarray(X[start:start + rows])
        acc += c.T @ c
    return acc


def bench_one(n: int, d: int, tmpdir: Path, repeat: int, seed: int) -> dict:
    path = tmpdir / f"X_{n}x{d}.npy"
    t_write = _write_memmap(path, n, d, seed)
    try:
        X = np.load(path, mmap_mode="r")
        X.sum(axis=0)  # untimed read: page-cache warm-up
        heavy_repeat = 1 if d >= 1000 else repeat
        t_sum, s = _best(lambda: X.sum(axis=0), repeat)
        t_mean, m = _best(lambda: accumulate(MeanStatistic(), (X, None), progress=False), repeat)
        t_second, sm = _best(lambda: accumulate(SecondMoment(), (X, None), progress=False), heavy_repeat)
        rows = default_chunk_rows(d)
        t_xtx, xtx = _best(lambda: _numpy_xtx(X, rows), heavy_repeat)
        t_sum2, _ = _best(lambda: X.sum(axis=0), repeat)  # baseline again after the long passes
        t_sum = min(t_sum, t_sum2)
        # the timed passes computed the right thing
        err_mean = float(np.max(np.abs(m.finalize().x - s / n)))
        err_second = float(np.max(np.abs(sm.finalize().xx - xtx / n)))
        assert err_mean < 1e-12 and err_second < 1e-12, (err_mean, err_second)
    finally:
        path.unlink(missing_ok=True)
    return {"n": n, "d": d, "gb": n * d * 8 / 1e9, "write": t_write, "sum": t_sum, "mean": t_mean,
            "second": t_second, "xtx": t_xtx, "chunk_rows": rows}


def _blas_limit(threads: int):
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return None
    return threadpool_limits(limits=threads, user_api="blas")


def _environment(threads: int) -> list[str]:
    try:
        load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        load = "n/a"
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):  # no /proc/cpuinfo: keep platform's answer
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    return [f"CPU: {cpu}, {os.cpu_count()} logical cores; BLAS threads: {threads}",
            f"Python {platform.python_version()}, numpy {np.__version__}",
            f"load average (1/5/15 min) at the end of the run: {load}"]


README_HEAD = """# Benchmarks

`make bench` (not part of `make test`) runs the growth benchmark `benchmarks/bench_growth.py` (its section is
`bench_growth` below). `make bench-moments` runs `benchmarks/run.py`, the moment engine against numpy,
which rewrites the part above the first script section and keeps every marked section.

## Method

For each `d`, `X` (n x d float64, N(0, 1) entries) is written block by block to a `.npy` memory map
in a temporary directory (at d = 1000, n = 10^6 that is 8 GB, never held in memory at once; the
generation is not timed), read once untimed so that all timed passes start from the same page-cache
state, and then these passes run over **the same memory map in the same process**:

| pass | what it computes |
|---|---|
| numpy sum | `X.sum(axis=0)`: the baseline, one plain numpy pass |
| MeanStatistic | `accumulate(MeanStatistic(), (X, None))`: the same sums through the moment engine (chunked reads, validation of every chunk) |
| SecondMoment | `accumulate(SecondMoment(), (X, None))`: E[x x^T], one BLAS syrk per chunk, n d^2 flops |
| numpy X^T X | `sum_c X_c.T @ X_c` over the same chunks, no validation: the raw BLAS cost of E[x x^T] |

Ratios are time / (numpy sum time). Each pass is repeated and the fastest run reported (the
O(n d^2) passes at d = 1000 run once). BLAS runs on one thread (threadpoolctl), so the numbers are
per core and comparable on a shared machine; the script also asserts that the timed passes agree with
numpy to 1e-12.

Reading the table: MeanStatistic does the baseline's O(n d) work plus a finite-value check of every
chunk (one more pass over a chunk that is still in cache), so its ratio is of order 1 to 3. At small d
it can beat the baseline: numpy's `X.sum(axis=0)` over a narrow array runs an inner loop of length d,
while the engine sums columns with a vectorised `einsum`. The SecondMoment ratio grows about linearly
in d, because E[x x^T] costs n d^2 flops against n d for the sum; the last column is the engine's
overhead over raw BLAS on the same chunks (validation and bookkeeping). The machine is shared with
other jobs (see the load average below), so absolute times are inflated and differences of tens of
percent between runs are noise; the ratios within one row are measured minutes apart in one process.
"""


def write_readme(results: list[dict], command: str, env: list[str]) -> Path:
    lines = [README_HEAD, "## Results", "",
             f"Measured {_dt.date.today().isoformat()} with `{command}`.", ""]
    lines += [f"- {e}" for e in env]
    lines += ["", "| d | n | data | chunk rows | numpy sum (s) | MeanStatistic (s) | ratio | SecondMoment (s) | "
              "ratio | numpy X^T X (s) | SecondMoment / numpy X^T X |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(
            f"| {r['d']} | {r['n']:.0e} | {r['gb']:.2f} GB | {r['chunk_rows']} | {r['sum']:.3f} | {r['mean']:.3f} | "
            f"{r['mean'] / r['sum']:.2f} | {r['second']:.3f} | {r['second'] / r['sum']:.1f} | {r['xtx']:.3f} | "
            f"{r['second'] / r['xtx']:.2f} |")
    lines += ["", "Reproduce: `make bench-moments` (about 5 minutes on 2 cores, 8 GB of free disk for the d = 1000 "
              "memory map; `--tmpdir DIR` chooses where it goes), or "
              "`.venv/bin/python benchmarks/run.py --quick` for n = 10^5.", ""]
    out = HERE / "README.md"
    out.write_text("\n".join(lines + _other_sections(out)))
    return out


def _other_sections(path: Path) -> list[str]:
    """Sections other benchmark scripts keep in the README between ``<!-- NAME: start -->`` and
    ``<!-- NAME: end -->`` (e.g. ``bench_awasthi2021.py``): kept, in order, after this script's part."""
    if not path.exists():
        return []
    pattern = re.compile(r"<!-- ([\w.-]+): start -->.*?<!-- \1: end -->", flags=re.DOTALL)
    return [m.group(0) + "\n" for m in pattern.finditer(path.read_text())]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=10**6, help="rows (default 10^6)")
    ap.add_argument("--dims", type=int, nargs="+", default=[10, 100, 1000], help="dimensions d")
    ap.add_argument("--repeat", type=int, default=2, help="repeats per pass; the fastest is reported")
    ap.add_argument("--blas-threads", type=int, default=1, help="BLAS threads (default 1)")
    ap.add_argument("--tmpdir", type=Path, default=None, help="directory for the memory maps")
    ap.add_argument("--quick", action="store_true", help="n = 10^5 (a smoke run)")
    ap.add_argument("--no-write", action="store_true", help="print the table, leave README.md alone")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.quick:
        args.n = 10**5
    if args.n < 1 or args.repeat < 1 or args.blas_threads < 1 or any(d < 1 for d in args.dims):
        ap.error("--n, --repeat, --blas-threads and --dims must be positive")
    need = max(args.dims) * args.n * 8
    base = args.tmpdir or Path(tempfile.gettempdir())
    free = shutil.disk_usage(base).free
    if free < need * 1.1:
        ap.error(f"{base} has {free / 1e9:.1f} GB free but the largest memory map needs {need / 1e9:.1f} GB; "
                 "use --tmpdir or smaller --dims/--n")
    limit = _blas_limit(args.blas_threads)
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="nnrecover-bench-", dir=args.tmpdir) as tmp:
            for d in args.dims:
                r = bench_one(args.n, d, Path(tmp), args.repeat, args.seed)
                results.append(r)
                print(f"d={d:5d} n={args.n:.0e} ({r['gb']:.2f} GB, written in {r['write']:.1f} s): "
                      f"numpy sum {r['sum']:.3f} s | MeanStatistic {r['mean']:.3f} s ({r['mean'] / r['sum']:.2f}x) | "
                      f"SecondMoment {r['second']:.3f} s ({r['second'] / r['sum']:.1f}x) | "
                      f"numpy X^T X {r['xtx']:.3f} s", flush=True)
    finally:
        if limit is not None:
            limit.restore_original_limits()
    if not args.no_write:
        argv_shown = " ".join(sys.argv[1:])
        command = "make bench-moments" if not argv_shown else f".venv/bin/python benchmarks/run.py {argv_shown}"
        print("wrote", write_readme(results, command, _environment(args.blas_threads)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
