"""Complete fits against one ``X.T @ X`` pass at one size, in one process (the "3x one X.T @ X" target).

Builds the data of ``bench_growth.py`` once (its ``_data``: random unit rows, ``k`` outputs, no biases,
N(0, I) inputs, noiseless rows in memory; default d = 100, k = 10, N = 1e6), times one ``X.T @ X`` pass
over it chunk by chunk as ``bench_growth.py`` does (best of 3), then each chosen learner's provable
(``refine=False``) and complete (``refine=True``) fit, and prints per fit the time, its ratio to the
``X.T @ X`` pass (timed without instrumentation), the peak memory allocated beyond the data (tracemalloc, in
a second, untimed run) and the max unit error against
the teacher (``nnrecover.metrics.parameter_error``). ``HermiteTensorLearner`` fits the first output only
(Awasthi et al.'s one-output model), and ``HighThresholdLearner`` its own model (``bench_growth._goel_data``:
k step units at t = 3 under a monotone ``P``; error: the largest unit angle), as in ``bench_growth.py``. ``--profile`` writes one cProfile file
per complete fit.

Run: ``.venv/bin/python benchmarks/bench_complete_fit.py [--learners ExactReLULearner,...] [--threads 1] [--serial]``
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from contextlib import nullcontext
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from _timing import warm_up  # noqa: E402
from bench_growth import GOEL_THRESHOLD, _data, _goel_data, _warm_up_goel  # noqa: E402

LEARNERS = ["ExactReLULearner", "NoisyReLULearner", "PureNeuronLearner", "HermiteTensorLearner", "HighThresholdLearner"]


def xtx_seconds(X: np.ndarray, repeat: int = 3) -> tuple[float, float]:
    """Fastest of ``repeat`` chunked ``X.T @ X`` passes (the chunks of ``bench_growth._baselines``): wall
    seconds and CPU seconds (all threads of the process)."""
    step = 1 << 16
    chunks = [X[i:i + step] for i in range(0, X.shape[0], step)]
    wall, cpu = [], []
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        [c.T @ c for c in chunks]
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), min(cpu)


def run_fit(name: str, k: int, data, target, refine: bool, memory: bool = True) -> dict:
    """One fit: seconds and CPU seconds of an uninstrumented run, then (``memory``) the peak traced memory
    in MB of a second, untimed run (:func:`_timing.traced_peak_mb`), and the max unit error against
    ``target`` (HighThresholdLearner: the largest unit angle in radians, against its own teacher)."""
    import nnrecover as nr
    from _timing import traced_peak_mb

    goel = name == "HighThresholdLearner"
    opts = {"threshold": GOEL_THRESHOLD} if goel else {}

    def fit():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return getattr(nr.learners, name)(k, refine=refine, random_state=0, **opts).fit(data)

    c0, t0 = time.process_time(), time.perf_counter()
    learner = fit()
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = traced_peak_mb(fit)[0] if memory else float("nan")
    err = float(nr.metrics.weight_error(learner.hidden_weights_, target.hidden_weights)["max_angle"] if goel
                else nr.metrics.parameter_error(learner.network_, target)["max_unit_error"])
    return {"seconds": seconds, "cpu": cpu, "peak_mb": peak, "max_unit_error": err}


def main() -> None:
    import nnrecover as nr
    from threadpoolctl import threadpool_limits

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--learners", default=",".join(LEARNERS), help="comma-separated learner class names")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS threads for the baseline and the fits, and so the fits' chunk workers "
                             "(default: the machine's defaults, every core, as a user runs it)")
    parser.add_argument("--provable", action=argparse.BooleanOptionalAction, default=True,
                        help="also time refine=False")
    parser.add_argument("--profile", metavar="DIR", help="write DIR/<learner>.prof of each complete fit")
    parser.add_argument("--serial", action="store_true", help="one BLAS thread and one chunk worker (--threads 1)")
    args = parser.parse_args()
    if args.serial:
        args.threads = 1
    # threadpoolctl limits only loaded libraries: load SciPy's and scikit-learn's BLAS before the limit
    import scipy.linalg  # noqa: F401
    import sklearn.utils  # noqa: F401
    names = [s for s in args.learners.split(",") if s]
    with (nullcontext() if args.threads is None else threadpool_limits(args.threads)):
        net, (X, Y) = _data(args.d, args.k, args.n, False)
        base, base_cpu = xtx_seconds(X)
        from nnrecover._threads import effective_n_jobs

        print(f"d={args.d} k={args.k} N={args.n:.0e} BLAS threads={args.threads or 'default'} (chunk workers of the fits: "
              f"{effective_n_jobs(None)}): X.T @ X {base:.3f} s, CPU {base_cpu:.3f} s")
        # CPU time (every thread of the process) is less sensitive to other jobs on a shared machine
        print("| learner | fit | time (s) | / X.T @ X | CPU / X.T @ X CPU | peak MB | max unit error |")
        print("|---|---|---|---|---|---|---|")
        for name in names:
            target, data = net, (X, Y)
            if name == "HermiteTensorLearner":  # one output (Awasthi et al.'s model), as in bench_growth.py
                target = nr.TwoLayerNetwork(net.hidden_weights, net.hidden_bias, net.output_weights[:1],
                                            net.output_bias[:1])
                data = (X, Y[:, 0])
            if name == "HighThresholdLearner":  # its own model and teacher, as in bench_growth.py
                target, data = _goel_data(args.d, args.k, args.n, False)
                _warm_up_goel()
            else:
                warm_up(name, 1 if name == "HermiteTensorLearner" else 2)
            for refine in ([False, True] if args.provable else [True]):
                r = run_fit(name, args.k, data, target, refine)
                print(f"| {name} | {'complete' if refine else 'provable'} | {r['seconds']:.2f} | "
                      f"{r['seconds'] / base:.1f}x | {r['cpu'] / base_cpu:.1f}x | {r['peak_mb']:.0f} | "
                      f"{r['max_unit_error']:.1e} |", flush=True)
            if args.profile:
                import cProfile

                out = Path(args.profile)
                out.mkdir(parents=True, exist_ok=True)
                prof = cProfile.Profile()
                prof.enable()
                r = run_fit(name, args.k, data, target, True, memory=False)
                prof.disable()
                prof.dump_stats(out / f"{name}.prof")
                print(f"  profiled complete fit {r['seconds']:.2f} s -> {out / (name + '.prof')}")


if __name__ == "__main__":
    main()
