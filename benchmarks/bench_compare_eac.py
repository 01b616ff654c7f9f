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


def _label(row) -> str:
    return row["method"] if row["method"] == "expand-and-cluster" else f"{row['method']} (auto)"


def tables(df) -> str:
    """The README's markdown tables: per method and (output, noise) the successes, the teachers whose
    width was found and the median max unit error; per method and (d, k) successes and right widths;
    median times."""
    import numpy as np

    # a learner that refused a teacher (not applicable) is left out of that teacher's counts
    df = df[~df["status"].astype(str).str.startswith("not applicable")].copy()
    df["label"] = df.apply(_label, axis=1)
    ran = df[df["width"].notna()]
    df["right_width"] = df["width"].astype(float) == df["k"].astype(float)
    order = ["expand-and-cluster"] + sorted(m for m in df["label"].unique() if m != "expand-and-cluster")
    kinds = [(o, z) for o in ("vector", "scalar") for z in sorted(df["noise"].unique())]
    out = ["| method | " + " | ".join(f"{o}, noise {z:g}" for o, z in kinds) + " | median time (s) |",
           "|---|" + "---|" * (len(kinds) + 1)]
    for m in order:
        cells = []
        for o, z in kinds:
            g = df[(df["label"] == m) & (df["outputs"] == o) & (df["noise"] == z)]
            g_ran = g[g["width"].notna()]
            if g.empty:
                cells.append("n/a")
                continue
            if g_ran.empty:
                cells.append(f"0/{len(g)} / 0/{len(g)} / -")
                continue
            err = np.median(g_ran["max_unit_error"].astype(float))
            cells.append(f"{int(g['success'].sum())}/{len(g)} / {int(g['right_width'].sum())}/{len(g)} / {err:.1e}")
        t = ran[ran["label"] == m]["time_s"]
        out.append(f"| {m} | " + " | ".join(cells) + f" | {np.median(t):.1f} |")
    out.append("")
    dk = sorted({(int(d), int(k)) for d, k in zip(df["d"], df["k"])})
    out.append("| method | " + " | ".join(f"d={d}, k={k}" for d, k in dk) + " |")
    out.append("|---|" + "---|" * len(dk))
    for m in order:
        cells = []
        for d, k in dk:
            g = df[(df["label"] == m) & (df["d"] == d) & (df["k"] == k)]
            if g.empty:
                cells.append("n/a")
                continue
            cells.append(f"{int(g['success'].sum())} / {int(g['right_width'].sum())} of {len(g)}")
        out.append(f"| {m} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def figure(df, path: str) -> None:
    """Width found against the teacher's, success rate and time against k, one line per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = df[~df["status"].astype(str).str.startswith("not applicable")].copy()
    df["label"] = df.apply(_label, axis=1)
    ran = df[df["width"].notna()]
    order = ["expand-and-cluster"] + sorted(m for m in ran["label"].unique() if m != "expand-and-cluster")
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    jitter = {m: 0.6 * (i - (len(order) - 1) / 2) for i, m in enumerate(order)}
    for m in order:
        g = ran[ran["label"] == m]
        eac = m == "expand-and-cluster"
        axes[0].scatter(g["k"] + jitter[m], g["width"] - g["k"], s=22 if eac else 14, alpha=0.6, label=m,
                        marker="s" if eac else "o")
        rate = df[df["label"] == m].groupby("k")["success"].mean()
        axes[1].plot(rate.index, rate.values, label=m, marker="s" if eac else "o", lw=2.5 if eac else 1.2)
        t = g.groupby("k")["time_s"].median()
        axes[2].plot(t.index, t.values, label=m, marker="s" if eac else "o", lw=2.5 if eac else 1.2)
    ks = sorted(int(k) for k in df["k"].unique())
    axes[0].axhline(0, color="0.5", lw=0.8, zorder=0)
    axes[0].set_xlim(min(ks) - 2.5, max(ks) + 2.5)
    axes[0].set_title("width found - k (every teacher; 0: the teacher's width)", fontsize=10)
    axes[1].set_title("success rate (width right and max unit error < 1e-6)", fontsize=10)
    axes[1].set_ylim(-0.05, 1.05)
    axes[2].set_title("median wall time (s)", fontsize=10)
    axes[2].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("hidden units k of the teacher")
        ax.set_xticks(ks)
        ax.grid(alpha=0.3)
    axes[2].legend(fontsize=7, loc="best")
    n = df.groupby(["d", "k", "outputs", "noise"])["run"].nunique()
    fig.suptitle(f"Expand-and-Cluster against n_hidden='auto': d in {sorted(int(d) for d in df['d'].unique())}, scalar and k "
                 f"outputs, noise 0 and 0.1, {n.min()}-{n.max()} teachers per cell, N = {int(df['n_samples'].iloc[0])}",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--n-samples", type=int, default=20_000)
    parser.add_argument("--out", default="benchmarks/compare_eac.csv")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--report", metavar="FIGURE", help="no run: print the tables of --out and draw FIGURE")
    args = parser.parse_args(argv)
    if args.report:
        import pandas as pd

        df = pd.read_csv(args.out)
        print(tables(df))
        figure(df, args.report)
        return 0
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
