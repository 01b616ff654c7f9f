"""Benchmark: Expand-and-Cluster against the provable learners with ``n_hidden="auto"`` (compare study).

Grid: d in {10, 50}, k in {5, 10, 20} (the k > d cell kept: ``wide_cells=True``), hidden biases uniform
in [-1, 1], N(0, I) inputs, scalar or k outputs, label noise 0 or 0.1, ``--n-samples`` rows (default
20,000), one teacher per cell per run. Each run ``r`` in ``--runs`` (default 0 1 2) is
``compare_experiment(rng=r, seeds=1, ...)``: the grid is covered once per run, so a run that is
stopped leaves whole grids of the earlier runs (and the finished teachers of its own). Methods: every
provable learner that applies, asked for ``n_hidden="auto"`` with the shared refinement
(``refine=True`` only), and Expand-and-Cluster (:func:`nnrecover.experiments.training.expand_and_cluster`,
students of 4k units, options below). Rows are written after every teacher to ``--out`` (default
``benchmarks/compare_eac.csv``); one PyTorch thread, one BLAS thread.

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_compare_eac.py`` (``--quick``: d = 6,
k in {2, 8}, vector output, noiseless, 5,000 rows, one run: about a minute).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

#: the Expand-and-Cluster options of the study (their reasons are in the README's compare section)
EAC_OPTIONS = {"n_students": 5, "min_fraction": 0.5, "student_iter": 150, "student_samples": 5_000,
               "finetune_iter": 1000}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--n-samples", type=int, default=20_000)
    parser.add_argument("--out", default="benchmarks/compare_eac.csv")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    from threadpoolctl import threadpool_limits  # one BLAS thread: the numbers are per core

    import pandas as pd

    from nnrecover.experiments.compare import compare_experiment

    grid = dict(dims=(10, 50), widths=(5, 10, 20), outputs=("vector", "scalar"), noises=(0.0, 0.1))
    options = dict(EAC_OPTIONS)
    runs, n = args.runs, args.n_samples
    if args.quick:
        grid = dict(dims=(6,), widths=(2, 8), outputs=("vector",), noises=(0.0,))
        runs, n = runs[:1], 5_000
        options.update(student_iter=100, finetune_iter=100)
    frames = []
    t_all = time.perf_counter()
    for r in runs:
        part = f"{os.path.splitext(args.out)[0]}.run{r}.csv"
        with threadpool_limits(1):
            df, _ = compare_experiment(rng=r, seeds=1, biases=(True,), inputs=("gaussian",), n_samples=(n,),
                                       baselines=("expand-and-cluster",), learner_width="auto",
                                       with_unrefined=False, wide_cells=True, eac_options=options,
                                       torch_threads=1, csv_path=part, eval_samples=20_000,
                                       log=lambda line: print(f"[{time.strftime('%H:%M:%S')}] run {r} {line}",
                                                              flush=True), **grid)
        df.insert(0, "run", r)
        frames.append(df)
        pd.concat(frames).to_csv(args.out, index=False)
    print(f"done in {time.perf_counter() - t_all:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
