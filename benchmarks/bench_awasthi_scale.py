"""HermiteTensorLearner on a streamed teacher at large d against one iteration of the stream (issue 15).

Builds the streamed data of ``bench_growth.py`` (its ``_data``: random unit rows, ``k`` outputs, no biases,
N(0, I) inputs, ``nr.sample_stream``, never materialised) and fits the first output only (Awasthi et
al.'s one-output model), in one process:

* one iteration of the stream (the samples' generation: the floor of any streamed fit);
* the provable stage (``refine=False``) and the complete fit (``refine=True``),

each with its time, its ratio to the stream iteration, the tracemalloc peak (everything allocated during
the call, the stream's own blocks included) and the max unit error against the teacher
(``nnrecover.metrics.parameter_error``). ``--profile FILE`` writes a cProfile of the complete fit
(timed without tracemalloc). ``--serial`` limits BLAS and the chunk workers to one thread.

Run: ``.venv/bin/python benchmarks/bench_awasthi_scale.py [--d 1000] [--k 20] [--n 1000000] [--serial]
[--range-method auto|full|randomized|sketch]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from bench_growth import _FirstColumn, _data  # noqa: E402


def stream_iteration(data, memory: bool = True) -> dict:
    """Seconds (and tracemalloc peak) of one iteration of the stream, touching every chunk."""
    if memory:
        tracemalloc.start()
    t0 = time.perf_counter()
    rows = 0
    for X, _ in data:
        rows += X.shape[0]
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 1e6 if memory else float("nan")
    if memory:
        tracemalloc.stop()
    return {"seconds": seconds, "peak_mb": peak, "rows": rows}


def run_fit(k: int, data, target, refine: bool, memory: bool = True, profile: str | None = None,
            range_method: str = "auto") -> dict:
    import nnrecover as nr

    learner = nr.learners.HermiteTensorLearner(k, refine=refine, random_state=0, range_method=range_method)
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
    if memory:
        tracemalloc.start()
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if prof is not None:
            prof.enable()
        learner.fit(data)
        if prof is not None:
            prof.disable()
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 1e6 if memory else float("nan")
    if memory:
        tracemalloc.stop()
    if prof is not None:
        prof.dump_stats(profile)
    err = float(nr.metrics.parameter_error(learner.network_, target)["max_unit_error"])
    timings = dict(learner.diagnostics_.get("timings", {}))
    ref = learner.diagnostics_.get("refinement", {})
    if ref.get("ran"):
        timings["refinement"] = float(ref.get("time", float("nan")))
    info = learner.coefficients_.info
    rng_info = {key: info.get(key) for key in ("range_method", "pilot_rows", "power_iterations", "range_stop")}
    rng_info["range_check"] = {key: info["range_check"].get(key) for key in ("accepted", "moment_passes")} \
        if "range_check" in info else None
    return {"seconds": seconds, "peak_mb": peak, "max_unit_error": err, "timings": timings, "range": rng_info}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d", type=int, default=1000)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--provable", action=argparse.BooleanOptionalAction, default=True,
                        help="also time refine=False")
    parser.add_argument("--memory", action=argparse.BooleanOptionalAction, default=True,
                        help="trace allocations (tracemalloc slows allocation-heavy code a little)")
    parser.add_argument("--profile", metavar="FILE", help="write a cProfile of the complete fit to FILE")
    parser.add_argument("--serial", action="store_true", help="one BLAS thread and one chunk worker")
    parser.add_argument("--range-method", default="auto", choices=["auto", "full", "randomized", "sketch"],
                        help="HermiteTensorLearner(range_method=...) (default auto: randomized at d = 1000)")
    args = parser.parse_args()
    from threadpoolctl import threadpool_limits

    import scipy.linalg  # noqa: F401  (load SciPy's BLAS before the limit, so that it reaches it)

    import nnrecover as nr

    with threadpool_limits(1 if args.serial else None):
        net, stream = _data(args.d, args.k, args.n, True)
        target = nr.TwoLayerNetwork(net.hidden_weights, net.hidden_bias, net.output_weights[:1],
                                    net.output_bias[:1])
        data = _FirstColumn(stream)
        print(f"d = {args.d}, k = {args.k}, N = {args.n:.0e} streamed, range_method={args.range_method!r}; "
              f"load {os.getloadavg()}", flush=True)
        base = stream_iteration(data, args.memory)
        print(f"stream iteration: {base['seconds']:.2f} s, peak {base['peak_mb']:.0f} MB", flush=True)
        fits = [False, True] if args.provable else [True]
        for refine in fits:
            row = run_fit(args.k, data, target, refine, args.memory, args.profile if refine else None,
                          args.range_method)
            name = "complete" if refine else "provable"
            timings = ", ".join(f"{key} {val:.2f}" for key, val in row["timings"].items()
                                if isinstance(val, float))
            print(f"{name}: {row['seconds']:.2f} s ({row['seconds'] / base['seconds']:.2f}x the stream), "
                  f"peak {row['peak_mb']:.0f} MB, max unit error {row['max_unit_error']:.1e}  [{timings}]; "
                  f"range {row['range']}", flush=True)
        print(f"load at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
