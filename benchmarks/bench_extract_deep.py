"""Benchmark: extraction of ReLU networks of several hidden layers, against the published attacks.

For each shape (default: :data:`nnrecover.experiments.extract_deep.SHAPES`: the shapes of Carlini,
Jagielski and Mironov's table 10-20-20-1, 40-20-10-10-1, 80-40-20-1 and 784-128-1, an expansive network
8-32-16-1, and the MNIST-shaped 784-32-32-1 and 784-64-64-10) a random network with He-scaled weights
and N(0, 0.1^2) biases is extracted from a float64 numpy black box with ``nr.extract`` (neither depth nor
widths given), each shape in its own process so that its peak memory (resident set size, from
``getrusage``) is its own. Printed and written to ``benchmarks/extract_deep.csv``: widths found,
queries (log2), seconds, peak memory, the largest output difference on 20,000 fresh Gaussian inputs
relative to the output's standard deviation (log2), the certificate, and the published figure for the
shape where the paper gives one. A figure goes to ``docs/figures/extract_deep.png``.

Default threads (what a user has). ``--timeout`` seconds per shape (default 1800): a shape that runs
longer is recorded as timed out.

Run: ``.venv/bin/python benchmarks/bench_extract_deep.py [--shapes 10-20-20-1 80-40-20-1] [--seeds 1]``.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import platform
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent

_CHILD = r"""
import json, resource, sys
from nnrecover.experiments.extract_deep import extract_shape
row = extract_shape(sys.argv[1], int(sys.argv[2]))
row["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print("ROW " + json.dumps(row))
"""


def main(argv=None) -> int:
    from nnrecover.experiments.extract_deep import PUBLISHED, SHAPES

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES))
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--csv", default=str(HERE / "extract_deep.csv"))
    ap.add_argument("--figure", default=str(HERE.parent / "docs" / "figures" / "extract_deep.png"))
    args = ap.parse_args(argv)
    rows = []
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    for shape in args.shapes:
        for seed in range(args.seeds):
            try:
                out = subprocess.run([sys.executable, "-c", _CHILD, shape, str(seed)], capture_output=True,
                                     text=True, timeout=args.timeout)
                line = [ln for ln in out.stdout.splitlines() if ln.startswith("ROW ")]
                row = json.loads(line[-1][4:]) if line else {"shape": shape, "seed": seed,
                                                             "status": "crashed: " + out.stderr[-300:]}
            except subprocess.TimeoutExpired:
                row = {"shape": shape, "seed": seed, "status": f"timed out after {args.timeout:.0f} s"}
            row["published"] = PUBLISHED.get(shape, "")
            rows.append(row)
            keys = ("widths_found", "complete", "log2_queries", "seconds", "peak_rss_mb", "log2_max_error", "status")
            print(shape, {k: (round(row[k], 2) if isinstance(row.get(k), float) else row.get(k)) for k in keys},
                  flush=True)
    import pandas as pd  # deferred: only for the table and the figure

    from nnrecover.experiments.extract_deep import figure
    df = pd.DataFrame(rows)
    df.to_csv(args.csv, index=False)
    if "queries" in df:
        fig = figure(df.dropna(subset=["queries"]))
        pathlib.Path(args.figure).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.figure, dpi=110)
    print(f"wrote {args.csv} and {args.figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
