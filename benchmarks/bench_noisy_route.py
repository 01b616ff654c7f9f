"""NoisyReLULearner (Bakshi et al.'s noise-robust route) against ExactReLULearner on the same noiseless teacher.

Issue setting: d = 50, k = 20 hidden units, 20 outputs, no biases, x ~ N(0, I), N = 1e5 noiseless rows in
memory; both learners with ``refine=True`` (their complete fits) and default threads, best of ``--repeat``
runs each (the machine is shared), alternating the two. Prints and (``--write``) records in
benchmarks/README.md the times, their ratio and the max unit errors.

Usage: ``.venv/bin/python benchmarks/bench_noisy_route.py [--repeat 3] [--write]``
"""

from __future__ import annotations

import argparse
import platform
import time
import warnings


def main() -> None:
    import nnrecover as nr

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--d", type=int, default=50)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    teacher = nr.random_network(args.d, args.k, n_outputs=args.k, rng=0)
    X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(args.d), args.n, rng=1)
    best = {"ExactReLULearner": float("inf"), "NoisyReLULearner": float("inf")}
    errors = {}
    for _ in range(args.repeat):
        for name in best:
            est = getattr(nr.learners, name)(args.k, random_state=0)
            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(X, Y)
            best[name] = min(best[name], time.perf_counter() - t0)
            errors[name] = nr.metrics.parameter_error(est.network_, teacher)["max_unit_error"]
    ratio = best["NoisyReLULearner"] / best["ExactReLULearner"]
    rows = [f"| {name} | {best[name]:.2f} | {errors[name]:.1e} |" for name in best]
    print("\n".join(rows), f"\nratio {ratio:.2f}")
    section = "\n".join([
        "<!-- bench_noisy_route: start -->",
        "## The noise-robust route against the exact one (`bench_noisy_route.py`)", "",
        f"d = {args.d}, k = {args.k}, {args.k} outputs, N = {args.n:.0e} noiseless N(0, I) rows in memory, both "
        f"learners with `refine=True`, default threads, best of {args.repeat} alternating runs; "
        f"{platform.machine()}, measured {time.strftime('%Y-%m-%d')} with "
        f"`.venv/bin/python benchmarks/bench_noisy_route.py --repeat {args.repeat} --write`.", "",
        "| learner | time (s) | max unit error |", "|---|---|---|", *rows, "",
        f"`NoisyReLULearner` takes {ratio:.1f}x the time of `ExactReLULearner` here: its tensor step (Algorithm 6's "
        "moment estimates and decomposition) and the shared refinement, which starts from its noisy estimate "
        "instead of an exact one.",
        "<!-- bench_noisy_route: end -->", ""])
    if args.write:
        from _timing import write_readme_section

        write_readme_section("bench_noisy_route", section)


if __name__ == "__main__":
    main()
