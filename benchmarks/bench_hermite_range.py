"""HermiteTensorLearner's range of T_2: the randomized range finder against the full d x d matrix (issue 34,
item 4), timed against one ``X.T @ X`` pass over the same data in the same process.

Data of ``bench_growth.py`` (its ``_data``: random unit rows, no biases, N(0, I) inputs, noiseless rows in
memory; default d = 100, k = 10, N = 1e6; first output). For ``range_method`` in ``("randomized", "full")``:
the provable stage (``refine=False``) and the complete fit (``refine=True``), each the best of ``--repeat``
runs, wall and CPU seconds (``time.process_time``: every thread of the process, less sensitive to other jobs on
a shared machine), with their ratios to the chunked ``X.T @ X`` (best of 3, wall and CPU), the max unit error
against the teacher and the largest principal-angle sine between the basis ``P`` and the span of the hidden
weights. ``--serial`` (default) runs BLAS on one thread.

Run: ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/bench_hermite_range.py``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from bench_complete_fit import xtx_seconds  # noqa: E402
from bench_growth import _data  # noqa: E402


def fit_once(k, data, refine, method):
    import nnrecover as nr

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c0, t0 = time.process_time(), time.perf_counter()
        learner = nr.learners.HermiteTensorLearner(k, refine=refine, random_state=0, range_method=method).fit(*data)
        return time.perf_counter() - t0, time.process_time() - c0, learner


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    from scipy import linalg
    from threadpoolctl import threadpool_limits

    import nnrecover as nr

    with threadpool_limits(args.threads):
        net, (X, Y) = _data(args.d, args.k, args.n, False)
        y = Y[:, 0].copy()
        del Y
        target = nr.TwoLayerNetwork(net.hidden_weights, net.hidden_bias, net.output_weights[:1], net.output_bias[:1])
        span = linalg.orth(target.hidden_weights.T)
        fit_once(args.k, (X[:50_000], y[:50_000]), False, "auto")  # warm-up
        base, base_cpu = xtx_seconds(X)
        print(f"d={args.d} k={args.k} N={args.n:.0e}, BLAS threads {args.threads}, load {os.getloadavg()}")
        print(f"X.T @ X: {base:.3f} s, CPU {base_cpu:.3f} s")
        print("| range_method | fit | wall (s) | / X.T @ X | CPU (s) | CPU / X.T @ X CPU | pass 1 | pass 2 | "
              "max unit error | sine of P |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for method in ("randomized", "full"):
            for refine in (False, True):
                runs = [fit_once(args.k, (X, y), refine, method) for _ in range(args.repeat if not refine else 1)]
                wall = min(r[0] for r in runs)
                cpu = min(r[1] for r in runs)
                learner = runs[-1][2]
                info = learner.coefficients_.info
                err = nr.metrics.parameter_error(learner.network_, target)["max_unit_error"]
                sine = float(np.sqrt(max(0.0, 1 - linalg.svdvals(span.T @ learner.coefficients_.basis).min() ** 2)))
                print(f"| {method} | {'complete' if refine else 'provable'} | {wall:.2f} | {wall / base:.2f}x | "
                      f"{cpu:.2f} | {cpu / base_cpu:.2f}x | {info.get('time_pass1', float('nan')):.2f} | "
                      f"{info.get('time_pass2', float('nan')):.2f} | {err:.1e} | {sine:.3f} |", flush=True)
        base2, base2_cpu = xtx_seconds(X)
        print(f"X.T @ X again at the end: {base2:.3f} s, CPU {base2_cpu:.3f} s; load {os.getloadavg()}")


if __name__ == "__main__":
    main()
