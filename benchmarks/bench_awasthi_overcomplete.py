"""Overcomplete networks (Theorem 3.2) from samples: success against N, and the rows the learner says it needs
(issue 34, item 3).

Runs the experiment ``awasthi2021-overcomplete-samples`` (d = 6, m/d in {1.5, 2, 2.5}, 3 random teachers
each, biases U[-1, 1], N in {1e5, 3e5, 1e6, 3e6, 1e7} streamed from ``nr.sample_stream``), appending every fit
to ``--csv`` as it finishes (about 27 minutes on one core of a shared 2-core machine), then draws
``docs/figures/awasthi2021-overcomplete-samples-full.png``. ``--from-csv`` only redraws, after recomputing the
stated requirement from the stored ``sv_m`` (the ``m``-th singular value of the joint matrix over its noise)
with :func:`nnrecover.learners.awasthi2021.requirement.rows_needed`, the function the learner calls, so that
a changed ``REQUIRED_SNR`` needs no new fits.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_awasthi_overcomplete.py [--from-csv]``
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))


def restate(df):
    """The stated requirement of every row, from its ``sv_m`` (identical to what the learner computes)."""
    from nnrecover.learners.awasthi2021.requirement import rows_needed

    out = df.copy()
    rows = [rows_needed(s, (d * d) / (d ** 3 + d ** 4), n)
            for s, d, n in zip(df["sv_m"], df["n_inputs"], df["n_samples"])]
    out["n_needed"] = [r[0] for r in rows]
    out["lower_bound"] = [r[1] for r in rows]
    out["joint_snr"] = [r[2] for r in rows]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--csv", default=str(HERE / "awasthi_overcomplete.csv"))
    parser.add_argument("--figure", default=str(HERE.parent / "docs" / "figures" / "awasthi2021-overcomplete-samples-full.png"))
    parser.add_argument("--seed", type=int, default=34)
    parser.add_argument("--from-csv", action="store_true", help="only redraw the figure from --csv")
    args = parser.parse_args()
    import pandas as pd

    from nnrecover.experiments.awasthi2021 import awasthi2021_overcomplete_samples, plot_overcomplete_samples

    if not args.from_csv:
        Path(args.csv).unlink(missing_ok=True)
        awasthi2021_overcomplete_samples(rng=args.seed, csv_path=args.csv)
    df = restate(pd.read_csv(args.csv))
    df.to_csv(args.csv, index=False)
    plot_overcomplete_samples(df).savefig(args.figure, dpi=110)
    summary = df.groupby(["ratio", "n_samples"])[["success", "all_units"]].mean().unstack(0)
    print(summary.to_string())


if __name__ == "__main__":
    main()
