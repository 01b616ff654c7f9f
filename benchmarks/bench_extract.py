"""Benchmark: black-box extraction by critical points (``nr.extract``), queries and time per unit.

For d in ``--dims`` (default 10, 100) and k in ``--widths`` (default 5, 10, 20, 50, 100, 200), a
random ReLU teacher with biases (unit rows, b uniform in [-1, 1], scalar output, seed 0) is wrapped as
a float64 black box (numpy, the model's own cost is part of the time) and extracted with
``n_hidden="auto"``. Printed per case: queries, model calls, wall time, queries and milliseconds per
recovered unit, how much of the time the 0/1 sign solve took, the largest row angle and the
relative function error on 20,000 fresh Gaussian inputs. ``--float32`` adds float32 boxes.

BLAS is limited to ``--blas-threads`` threads (default 1) for the model too, so that the numbers are
per core and comparable on a shared machine. Each case runs once (a run is deterministic given the
seed; the spread between runs is the machine's).

Run: ``.venv/bin/python benchmarks/bench_extract.py`` (``--quick``: d = 10, k = 5, 10, 20).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

import nnrecover as nr
from nnrecover.experiments.extract import _max_angle, float_box
from nnrecover.extraction import extract


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dims", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--widths", type=int, nargs="+", default=[5, 10, 20, 50, 100, 200])
    ap.add_argument("--float32", action="store_true", help="also extract float32 black boxes")
    ap.add_argument("--blas-threads", type=int, default=1)
    ap.add_argument("--sign-time-limit", type=float, default=60.0)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    dims, widths = ([10], [5, 10, 20]) if args.quick else (args.dims, args.widths)
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"# {os.cpu_count()} cores; uptime: {uptime}; numpy {np.__version__}; BLAS threads {args.blas_threads}")
    print("| d | k | dtype | units found | queries | calls | seconds | queries/unit | ms/unit | sign solve s "
          "| max angle | function error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    dtypes = ["float64", "float32"] if args.float32 else ["float64"]
    with threadpool_limits(args.blas_threads):
        for d in dims:
            for k in widths:
                net = nr.random_network(d, k, rng=0, bias_range=(-1, 1))
                X = np.random.default_rng(1).standard_normal((20_000, d))
                y = net.predict(X)
                for dt in dtypes:
                    t0 = time.perf_counter()
                    res = extract(float_box(net, np.dtype(dt)), d, rng=0, sign_time_limit=args.sign_time_limit)
                    sec = time.perf_counter() - t0
                    diag = res.diagnostics_
                    kf = diag["n_hidden"]
                    angle = _max_angle(res.network_, net) if diag["linear_units"] == 0 else float("nan")
                    err = np.linalg.norm(res.predict(X) - y) / np.linalg.norm(y)
                    sign_s = diag["signs"].get("sign_seconds", 0.0)
                    print(f"| {d} | {k} | {dt} | {kf} | {res.n_queries_} | {diag['model_calls']} | {sec:.2f} | "
                          f"{res.n_queries_ / max(kf, 1):.0f} | {1e3 * sec / max(kf, 1):.1f} | {sign_s:.2f} | "
                          f"{angle:.1e} | {err:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
