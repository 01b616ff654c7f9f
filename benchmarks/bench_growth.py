"""Growth benchmark (``make bench``): every learner's fit against plain numpy passes over the same data.

For each size ``(d, k, N)`` a fresh child process draws a noiseless random ReLU teacher (unit rows,
``k`` outputs, no biases: the model every learner shares) and its samples, times in that process

* the baseline passes over the same data: one ``X.sum(axis=0)``, one ``X.T @ X`` and one ``X @ Q``
  (``Q``: d x k), chunk by chunk; for a streamed size also one iteration of the stream itself;
* the learner's provable stage (``refine=False``) and its complete fit (``refine=True``),

and reports the ratios fit time / ``X.T @ X`` time, the fit's peak memory allocated beyond the data
(tracemalloc: for data in memory in a second, untimed run of the complete fit; streamed, in the timed
run), and the max unit error against the teacher. Every fit has a time limit (the child is
killed; the row says ``timeout``); a learner that refuses a size reports its message. The slopes
of log time against log N (d = 100) and log d (N = 2e5) are fitted for the cheap learners.

Writes ``benchmarks/results.json``, ``docs/figures/bench_growth.png`` and the ``bench_growth``
section of ``benchmarks/README.md``. ``--quick`` runs the smallest size only (seconds).

Run: ``make bench`` or ``.venv/bin/python benchmarks/bench_growth.py [--quick] [--timeout S]``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import multiprocessing as mp
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "src"))

SIZES = [(10, 5, 100_000, False), (100, 10, 1_000_000, False), (200, 20, 1_000_000, False),
         (1000, 20, 1_000_000, True), (1000, 50, 1_000_000, True)]
LEARNERS = ["ExactReLULearner", "NoisyReLULearner", "HermiteTensorLearner", "PureNeuronLearner",
            "HighThresholdLearner", "GradientDescentLearner"]
# learners run at a size (GradientDescentLearner, a random-restart baseline, only at the smallest: it exceeds
# the time limit beyond; HermiteTensorLearner also at k = 20, where its sample rule admits 1e6 rows;
# HighThresholdLearner not at d = 1000: its 3 minutes there would take the run past 15 minutes, see the README)
RUN_AT = {(10, 5): LEARNERS, (100, 10): LEARNERS[:5], (200, 20): LEARNERS[:5],
          (1000, 20): ["HermiteTensorLearner"], (1000, 50): LEARNERS[:4]}
#: HighThresholdLearner (Goel-Panigrahy) learns another model, a high-threshold first layer under an unknown
#: upper part: its teacher has k step units at this threshold in d inputs and a monotone P with products
GOEL_THRESHOLD = 3.0
#: a streamed child's time limit, in units of --timeout (it times two fits of a 1e6 x 1000 stream)
STREAMED_TIMEOUT = 3
SLOPE_N = [(100, 10, n) for n in (100_000, 300_000, 1_000_000)]
SLOPE_D = [(d, 10, 200_000) for d in (50, 100, 200, 500)]
SLOPE_LEARNERS = ["ExactReLULearner", "HermiteTensorLearner"]


def _data(d: int, k: int, n: int, streamed: bool):
    import nnrecover as nr

    net = nr.random_network(d, k, n_outputs=k, rng=0)
    dist = nr.distributions.StandardGaussian(d)
    if streamed:
        return net, nr.sample_stream(net, dist, n, rng=1)
    X, Y = nr.sample(net, dist, n, rng=1)
    return net, (X, Y)


class _GoelStream:
    """A re-iterable stream of ``(X, f(X))`` chunks of a Goel-Panigrahy teacher (the same rows on every pass)."""

    def __init__(self, net, n: int, seed: int, chunk: int | None = None):
        # chunks of about 64 MiB, as nr.sample_stream's beyond 128 columns
        chunk = chunk or max(1024, min(65536, (64 << 20) // (8 * net.n_inputs)))
        self.net, self.n_samples, self.seed, self.chunk = net, n, seed, chunk
        self.n_inputs, self.n_outputs = net.n_inputs, 1

    def __iter__(self):
        gen = np.random.default_rng(self.seed)
        for start in range(0, self.n_samples, self.chunk):
            X = gen.standard_normal((min(self.chunk, self.n_samples - start), self.n_inputs))
            yield X, self.net.predict(X)[:, None]


def _goel_data(d: int, k: int, n: int, streamed: bool):
    """A Goel-Panigrahy teacher (k step units at GOEL_THRESHOLD in d inputs, monotone P) and its samples."""
    from nnrecover.learners.goel2019 import HighThresholdNetwork, random_unit_weights, random_upper_polynomial

    gen = np.random.default_rng(0)
    net = HighThresholdNetwork(random_unit_weights(k, d, rng=gen), GOEL_THRESHOLD, "step",
                               random_upper_polynomial(k, monotone=True, rng=gen))
    if streamed:
        return net, _GoelStream(net, n, seed=1)
    X = np.random.default_rng(1).standard_normal((n, d))
    return net, (X, net.predict(X))


def _warm_up_goel() -> None:
    """The Goel-Panigrahy learner's :func:`_timing.warm_up`: one small fit of its own teacher."""
    from nnrecover.learners import HighThresholdLearner

    _, (X, y) = _goel_data(10, 2, 100_000, False)
    try:
        HighThresholdLearner(2, threshold=GOEL_THRESHOLD, random_state=0).fit(X, y)
    except Exception:  # noqa: BLE001 (a refusal of the small problem still imported the modules)
        return


def _baselines(data, k: int, streamed: bool) -> dict:
    """Seconds of one X.sum, one X.T @ X and one X @ Q pass over the data (chunk by chunk)."""
    Q = np.linalg.qr(np.random.default_rng(2).standard_normal((_dim(data, streamed), k)))[0]
    passes = (("X.sum", lambda X: X.sum(axis=0)), ("X.T @ X", lambda X: X.T @ X), ("X @ Q", lambda X: X @ Q))
    out = {name: 0.0 for name, _ in passes}
    if streamed:
        # one iteration of the stream alone (the generation of the samples), then one that times the three
        # passes chunk by chunk (each generated chunk used by all three): the stream draws its next blocks
        # in worker threads, which would overlap with the passes and hide in their time
        rows = 0
        t0 = time.perf_counter()
        for X, _ in data:
            rows += X.shape[0]
        out["stream_iteration"] = time.perf_counter() - t0
        out["stream_rows"] = rows
        for X, _ in data:
            for name, fn in passes:
                t1 = time.perf_counter()
                fn(X)
                out[name] += time.perf_counter() - t1
        return out
    X = data[0]
    step = 1 << 16
    chunks = [X[i:i + step] for i in range(0, X.shape[0], step)]
    for name, fn in passes:
        t0 = time.perf_counter()
        for chunk in chunks:
            fn(chunk)
        out[name] = time.perf_counter() - t0
    return out


def _dim(data, streamed: bool) -> int:
    return data.n_inputs if streamed else data[0].shape[1]


def _child(spec: dict, queue) -> None:
    """One (size, learner) measurement in a fresh process; puts a result dict on ``queue``."""
    import warnings

    from _timing import traced_peak_mb, warm_up

    from threadpoolctl import threadpool_limits

    import nnrecover as nr

    warnings.simplefilter("ignore")
    d, k, n, streamed = spec["d"], spec["k"], spec["n"], spec["streamed"]
    row = dict(spec)
    # threadpoolctl limits only the BLAS libraries already loaded: load SciPy's and scikit-learn's first,
    # so that a thread limit applies to the baselines and the fits alike
    import scipy.linalg  # noqa: F401
    import sklearn.utils  # noqa: F401
    from contextlib import nullcontext

    try:
        with (nullcontext() if spec["threads"] is None else threadpool_limits(spec["threads"])):
            goel = spec["learner"] == "HighThresholdLearner"
            net, data = (_goel_data if goel else _data)(d, k, n, streamed)
            row["baselines"] = _baselines(data, k, streamed)
            Learner = getattr(nr.learners, spec["learner"])
            target = net
            fit_data = data
            if spec["learner"] == "HermiteTensorLearner":  # one output (Awasthi et al.'s model)
                target = nr.TwoLayerNetwork(net.hidden_weights, net.hidden_bias, net.output_weights[:1],
                                            net.output_bias[:1])
                fit_data = _FirstColumn(data) if streamed else (data[0], data[1][:, 0])
            # the modules and caches a first fit loads are not part of the time and memory measured
            if goel:
                _warm_up_goel()
            else:
                warm_up(spec["learner"], 1 if spec["learner"] == "HermiteTensorLearner" else 2)
            for refine in spec["refine"]:
                opts = {"random_state": 0}
                if spec["learner"] != "GradientDescentLearner":
                    opts["refine"] = refine
                if goel:
                    opts["threshold"] = GOEL_THRESHOLD
                key = "full" if refine else "provable"

                def fit():
                    return Learner(k, **opts).fit(fit_data)

                if streamed:
                    # one run, timed and traced: a second pass over a 1e6 x 1000 stream would double the
                    # cell; these fits are BLAS-bound, where tracemalloc's per-allocation hooks cost least
                    t0 = time.perf_counter()
                    peak, est = traced_peak_mb(fit)
                    dt = time.perf_counter() - t0
                else:
                    t0 = time.perf_counter()
                    est = fit()
                    dt = time.perf_counter() - t0
                    # memory from a second, untimed run (tracemalloc slows allocation-heavy code), of the
                    # complete fit: the one the memory target is about
                    peak = traced_peak_mb(fit)[0] if refine else None
                # the Goel-Panigrahy learner recovers the first layer only: its error is the largest angle (rad)
                error = (nr.metrics.weight_error(est.hidden_weights_, net.hidden_weights)["max_angle"] if goel
                         else nr.metrics.parameter_error(est.network_, target)["max_unit_error"])
                row[key] = {"seconds": dt, "peak_mb": peak, "max_unit_error": float(error)}
    except Exception as exc:  # reported in the table, not raised: one learner must not stop the run
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        row["traceback"] = traceback.format_exc()[-2000:]
    queue.put(row)


class _FirstColumn:
    """A re-iterable stream of (X, first column of Y): views of a SampleStream's chunks, which are never
    rewritten and were checked finite by the stream (the data layer's ``fresh_chunks`` / ``finite_chunks``)."""

    fresh_chunks = True
    finite_chunks = True

    def __init__(self, stream):
        self.stream = stream
        self.n_inputs, self.n_outputs, self.n_samples = stream.n_inputs, 1, stream.n_samples

    def __iter__(self):
        for X, Y in self.stream:
            yield X, Y[:, :1]


def measure(spec: dict, timeout: float) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(spec, queue))
    t0 = time.perf_counter()
    proc.start()
    try:
        row = queue.get(timeout=timeout)
    except Exception:
        row = dict(spec, error=f"timeout: no result in {timeout:.0f} s")
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    row["wall"] = time.perf_counter() - t0
    return row


def _fmt(row: dict, key: str) -> str:
    if key not in row:
        return "-"
    r = row[key]
    base = row["baselines"]
    ref = base.get("stream_iteration", base["X.T @ X"])  # streamed: against one iteration of the stream
    memory = "" if r.get("peak_mb") is None else f", {r['peak_mb']:.0f} MB"
    return f"{r['seconds']:.2f} s ({r['seconds'] / ref:.1f}x){memory}, {r['max_unit_error']:.0e}"


def _slope(xs, ys) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the smallest size only")
    parser.add_argument("--timeout", type=float, default=150.0, help="seconds per (size, learner) child")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS threads (and so chunk workers of the fits) in the children; default: the "
                             "machine's defaults, as a user runs it")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--from-json", action="store_true",
                        help="rewrite the README section and figure from benchmarks/results.json (no run)")
    args = parser.parse_args()
    if args.from_json:
        saved = json.loads((HERE / "results.json").read_text())
        args.threads = saved["meta"]["blas_threads"]
        report(saved["rows"], saved["meta"]["total_seconds"], args, meta=saved["meta"])
        return
    t_start = time.perf_counter()
    rows = []
    sizes = SIZES[:1] if args.quick else SIZES
    for d, k, n, streamed in sizes:
        for learner in RUN_AT[(d, k)]:
            spec = {"d": d, "k": k, "n": n, "streamed": streamed, "learner": learner, "threads": args.threads,
                    "refine": [True] if learner == "GradientDescentLearner" else [False, True], "kind": "size"}
            row = measure(spec, args.timeout * (STREAMED_TIMEOUT if streamed else 1))
            print(f"d={d} k={k} N={n:.0e} {learner}: {row.get('error') or _fmt(row, 'full')} [{row['wall']:.0f} s]",
                  flush=True)
            rows.append(row)
    if not args.quick:
        for d, k, n in SLOPE_N + SLOPE_D:
            for learner in SLOPE_LEARNERS:
                if any(r["d"] == d and r["k"] == k and r["n"] == n and r["learner"] == learner for r in rows):
                    continue
                spec = {"d": d, "k": k, "n": n, "streamed": False, "learner": learner, "threads": args.threads,
                        "refine": [True], "kind": "slope"}
                row = measure(spec, args.timeout)
                print(f"slope d={d} N={n:.0e} {learner}: {row.get('error') or _fmt(row, 'full')}", flush=True)
                rows.append(row)
    total = time.perf_counter() - t_start
    report(rows, total, args)


def report(rows: list, total: float, args, meta: dict | None = None) -> None:
    if meta is None:
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name")), platform.processor())
        meta = {"date": _dt.date.today().isoformat(), "cpu": cpu, "cores": os.cpu_count(),
                "blas_threads": args.threads, "python": platform.python_version(), "numpy": np.__version__,
                "load_average": os.getloadavg(), "total_seconds": total, "timeout": args.timeout,
                "command": "make bench" if not args.quick else "bench_growth.py --quick"}
    cpu, load = meta["cpu"], meta["load_average"]
    args.timeout = meta.get("timeout", args.timeout)
    slopes = {}
    for learner in SLOPE_LEARNERS:
        pts_n = sorted((r["n"], r["full"]["seconds"]) for r in rows if r["learner"] == learner and r["d"] == 100
                       and r["k"] == 10 and "full" in r)
        pts_d = sorted((r["d"], r["full"]["seconds"]) for r in rows if r["learner"] == learner and r["k"] == 10
                       and r["n"] == 200_000 and "full" in r)
        slopes[learner] = {"N": _slope(*zip(*pts_n)) if len(pts_n) >= 2 else None,
                           "d": _slope(*zip(*pts_d)) if len(pts_d) >= 2 else None,
                           "points_N": pts_n, "points_d": pts_d}
    print(json.dumps(slopes, indent=1))
    if args.no_write:
        return
    clean = [{k: v for k, v in r.items() if k != "traceback"} for r in rows]
    (HERE / "results.json").write_text(json.dumps({"meta": meta, "rows": clean, "slopes": slopes}, indent=1))
    _figure(slopes)
    lines = ["<!-- bench_growth: start -->", "## Growth: every learner against numpy passes (`bench_growth.py`, `make bench`)", "",
             "Each cell: complete fit time (`refine=True`) and its ratio to one `X.T @ X` pass over the same data "
             "in the same process, the fit's peak memory allocated beyond the data (tracemalloc; for data in memory measured in a second, untimed run of the complete fit, since tracemalloc slows allocation-heavy code by 15-25 %; streamed, in the one timed run), and the max unit error against "
             "the noiseless teacher. `provable` is the same for `refine=False` (its memory is given for streamed data only). Teachers: random unit rows, k "
             "outputs, no biases; N(0, I) inputs; the largest size is streamed from `nr.sample_stream` (never in "
             "memory; its ratios are to one iteration of the stream, which generates the samples). "
             f"`HighThresholdLearner` (Goel-Panigrahy) learns another model: its teacher has k step units at t = {GOEL_THRESHOLD:g} "
             "in d inputs under a monotone upper polynomial with products, one output; its error is the largest "
             "unit angle in radians (the paper's Step 1 has a bias floor set by the products, Lemma 2; Step 2 is its "
             "refinement); it is not run at d = 1000 (below the table). Each (size, learner) runs in a fresh process "
             f"with a time limit of {args.timeout:.0f} s ({STREAMED_TIMEOUT * args.timeout:.0f} s streamed).", "",
             "| d | k | N | learner | X.T @ X (s) | provable | complete fit |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("kind") != "size":
            continue
        base = r.get("baselines", {})
        if "stream_iteration" in base:  # a pass over a stream also generates it: report that time
            bt = f"stream {base['stream_iteration']:.1f}"
        else:
            bt = f"{base['X.T @ X']:.2f}" if "X.T @ X" in base else "-"
        full = r.get("error") or _fmt(r, "full")
        lines.append(f"| {r['d']} | {r['k']} | {r['n']:.0e} | {r['learner']} | {bt} | {_fmt(r, 'provable')} | {full} |")
    lines += ["", "`HermiteTensorLearner` at d = 1000, k = 50 refuses 1e6 rows before reading them: its sample rule "
              "is ten samples per column of the k x k^3 flattening of T_4 in the k-dimensional span, the matrix "
              "whose singular values give Algorithm 4's rank (10 k^3 = 1.25e6; `min_samples`). "
              "GradientDescentLearner (random restarts, a baseline, not one of the papers' algorithms) runs "
              "at d = 10 only.",
              "", "Slopes of log time against log N (d = 100, k = 10) and log d (N = 2e5, k = 10), complete fit:", ""]
    for learner, s in slopes.items():
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        lines.append(f"- {learner}: N slope {fmt(s['N'])}, d slope {fmt(s['d'])}")
    lines += ["", "![growth](../docs/figures/bench_growth.png)", "",
              f"Measured {meta['date']} on {cpu}, {meta['cores']} logical cores, "
              f"{'default threads (every core for BLAS and for the chunk workers of the fits)' if args.threads is None else f'{args.threads} BLAS thread(s) and as many chunk workers'}, Python "
              f"{meta['python']}, numpy {meta['numpy']}; load average at the end {load[0]:.1f} / {load[1]:.1f} / "
              f"{load[2]:.1f}; whole run {total / 60:.1f} min. Reproduce: `make bench`.", "<!-- bench_growth: end -->"]
    text = "\n".join(lines)
    readme = HERE / "README.md"
    old = readme.read_text()
    start, end = old.find("<!-- bench_growth: start -->"), old.find("<!-- bench_growth: end -->")
    new = (old[:start] + text + old[end + len("<!-- bench_growth: end -->"):] if start >= 0 and end > start
           else old.rstrip() + "\n\n" + text + "\n")
    readme.write_text(new)
    print(text)


def _figure(slopes: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), layout="constrained")
    for learner, s in slopes.items():
        for ax, key, label in ((axes[0], "points_N", "N"), (axes[1], "points_d", "d")):
            if s[key]:
                xs, ys = zip(*s[key])
                slope = s["N" if label == "N" else "d"]
                ax.loglog(xs, ys, "o-", label=f"{learner} (slope {slope:.2f})" if slope is not None else learner)
    axes[0].set(xlabel="N (d = 100, k = 10)", ylabel="complete fit (s)", title="time vs N")
    axes[1].set(xlabel="d (N = 2e5, k = 10)", ylabel="complete fit (s)", title="time vs d")
    for ax in axes:
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.savefig(ROOT / "docs" / "figures" / "bench_growth.png", dpi=110)


if __name__ == "__main__":
    main()
