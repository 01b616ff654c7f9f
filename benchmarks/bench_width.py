"""n_hidden="auto" on random ReLU teachers at d = 50: the width chosen for k in {3, 5, 10, 20}.

Scalar outputs use ``HermiteTensorLearner`` (the rank of the Hermite matrix T_2); k + 5 outputs use
``ExactReLULearner`` (the rank of Cov(y)). Biases uniform in [-1, 1], x ~ N(0, I), label noise 0 and
0.1, ``--n`` samples (default 2e5). Prints one line per case: the chosen width, whether the rule was
sure, the spectrum's range and the method, and the widths fitted when the certificates judged them. The table is in README.md ("Which learner for my data").

Usage: ``.venv/bin/python benchmarks/bench_width.py [--n 200000] [--kinds scalar,vector]``
"""

import argparse
import time
import warnings

import nnrecover as nr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=200_000)
    parser.add_argument("--kinds", default="scalar,vector")
    args = parser.parse_args()
    d = 50
    for kind in args.kinds.split(","):
        for noise in (0.0, 0.1):
            for k in (3, 5, 10, 20):
                p = 1 if kind == "scalar" else k + 5
                teacher = nr.random_network(d, k, n_outputs=p, rng=k, bias_range=(-1, 1))
                X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(d), args.n, noise=noise, rng=k + 100)
                Learner = nr.learners.HermiteTensorLearner if p == 1 else nr.learners.ExactReLULearner
                t0 = time.time()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est = Learner("auto", random_state=0).fit(X, Y)
                w = est.diagnostics_["width"]
                # learners whose certificates judge the width list the widths they fitted (nnrecover.learners.width)
                tried = " ".join(f"{c['n_hidden']}:{'pass' if c['passed'] else 'fail'}({c['time']:.0f} s)"
                                 for c in w.get("candidates", []))
                print(f"{kind} noise {noise} k {k} -> {est.n_hidden_} ({est.network_.n_hidden} units) "
                      f"sure={w['sure']} rule_sure={w.get('rule_sure', w['sure'])} range={w['range']} "
                      f"[{w['method']}] {time.time() - t0:.1f} s" + (f" candidates {tried}" if tried else ""),
                      flush=True)


if __name__ == "__main__":
    main()
