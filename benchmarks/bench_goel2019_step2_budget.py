"""Goel-Panigrahy Step 2 inside ``HighThresholdLearner`` against Step 1 alone, over seeds (issue 34, item 2).

Teacher per seed: ``d`` step units with orthonormal rows (``random_unit_weights(d, rng=seed)``) at ``t = 2``
under a linear (monotone) ``P`` with ``c_i ~ U[0.5, 1.5]`` (``rng=seed + 1``) and ``c_0 = 0.3``; ``N``
noiseless samples ``x ~ N(0, I)`` (``rng=seed + 1``). The learner runs with ``refine=False`` and
``refine=True`` (``random_state=seed``). Printed per seed: the largest and mean true angle (rad) of each,
their ratio, the fit times, and per unit (kept, stop reason, iterations, budget, true angle).

Run: ``PYTHONPATH=src .venv/bin/python benchmarks/bench_goel2019_step2_budget.py --seeds 0,1,2,3,4``
(defaults d = 10, N = 10^6: about 2-4 minutes per seed on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def _angles(estimate: np.ndarray, W: np.ndarray) -> np.ndarray:
    C = (estimate @ W.T) / np.linalg.norm(estimate, axis=1)[:, None]
    return np.arccos(np.clip(C.max(axis=1), -1.0, 1.0))


def run(seed: int, d: int, n: int, t: float = 2.0) -> dict:
    from nnrecover.learners.goel2019 import (HighThresholdLearner, HighThresholdNetwork, UpperPolynomial,
                                             random_unit_weights)

    W = random_unit_weights(d, rng=np.random.default_rng(seed))
    P = UpperPolynomial.linear(np.random.default_rng(seed + 1).uniform(0.5, 1.5, d), 0.3)
    net = HighThresholdNetwork(W, t, "step", P)
    X = np.random.default_rng(seed + 1).standard_normal((n, d))
    y = net.predict(X)
    out: dict = {"seed": seed}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for refine in (False, True):
            t0 = time.perf_counter()
            est = HighThresholdLearner(d, threshold=t, refine=refine, random_state=seed).fit(X, y)
            a = _angles(est.hidden_weights_, W)
            out[refine] = dict(max=float(a.max()), mean=float(a.mean()), seconds=time.perf_counter() - t0)
            if refine:
                out["units"] = [(u["unit"], u["kept"], u.get("stop_reason"), u["iterations"], u.get("max_iter"),
                                 round(float(a[u["unit"]]), 4)) for u in est.diagnostics_["refinement"]["units"]]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--units", type=int, default=10)
    ap.add_argument("--samples", type=float, default=1e6)
    args = ap.parse_args(argv)
    for seed in (int(s) for s in args.seeds.split(",")):
        r = run(seed, args.units, int(args.samples))
        s1, s2 = r[False], r[True]
        print(f"seed {seed}: refine=False max {s1['max']:.4f} mean {s1['mean']:.4f} ({s1['seconds']:.0f} s) | "
              f"refine=True max {s2['max']:.4f} mean {s2['mean']:.4f} ({s2['seconds']:.0f} s) | "
              f"ratio {s2['max'] / s1['max']:.3f}", flush=True)
        print("   ", r["units"], flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
