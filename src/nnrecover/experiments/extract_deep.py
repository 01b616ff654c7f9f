"""Experiment ``extract-deep``: black-box extraction of ReLU networks with several hidden layers.

For each shape ``d-n_1-...-n_L-p`` a random ReLU network in the manner of Carlini, Jagielski and
Mironov (CRYPTO 2020): He-scaled weights ``N(0, 2 / fan_in)`` and biases ``N(0, 0.1^2)``, is wrapped as a
float64 black box (plain numpy) and extracted with :func:`nnrecover.extraction.extract` with neither
depth nor widths given. Recorded per shape: the widths found, queries (and their log2), seconds, the
largest output difference on 20,000 fresh Gaussian inputs relative to the output's standard deviation
(and its log2), the certificate, and the queries the one-hidden-layer attempt took first.

The published figures the benchmark (``benchmarks/bench_extract_deep.py``) sets beside these rows are
in :data:`PUBLISHED`. ``quick``: the shapes 6-10-6-1 and 8-12-6-2.
"""

from __future__ import annotations

import math
import time
import warnings
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .._validation import check_random_state
from ..deep_network import DeepNetwork
from ..errors import InputError, NNRecoverError
from ..extraction import extract
from .registry import experiment

if TYPE_CHECKING:
    import matplotlib.figure
    import pandas

__all__ = ["run_extract_deep", "extract_shape", "random_deep_network", "parse_shape", "PUBLISHED", "SHAPES"]

#: the shapes of the benchmark: CJM's table, an expansive network, MNIST-shaped networks
SHAPES = ("10-20-20-1", "40-20-10-10-1", "80-40-20-1", "784-128-1", "8-32-16-1", "784-32-32-1", "784-64-64-10")

#: published figures for these shapes, as the papers report them (their machines, not this one)
PUBLISHED = {
    "80-40-20-1": "Carlini et al. 2020: 2^18.5 queries (their 4k-parameter model)",
    "784-128-1": "Carlini et al. 2020: 2^21.5 queries, under an hour, max error 2^-25",
    "784-64-64-10": "Foerster et al. 2024: a 16,721-parameter 2-hidden-layer MNIST network end to end in 98 min",
}


def parse_shape(shape: str) -> list[int]:
    """``"10-20-20-1"`` -> ``[10, 20, 20, 1]`` (at least one hidden layer)."""
    try:
        sizes = [int(v) for v in str(shape).split("-")]
    except ValueError as exc:
        raise InputError(f"a shape is written like 10-20-20-1 (inputs, hidden widths, outputs), got {shape!r}.") from exc
    if len(sizes) < 3 or min(sizes) < 1:
        raise InputError(f"a shape needs inputs, at least one hidden width and outputs, all positive, got {shape!r}.")
    return sizes


def random_deep_network(sizes: Sequence[int], rng: Any = None, bias_std: float = 0.1) -> DeepNetwork:
    """He-scaled weights ``N(0, 2 / fan_in)`` and biases ``N(0, bias_std^2)``."""
    gen = check_random_state(rng)
    weights = [gen.standard_normal((sizes[i + 1], sizes[i])) * math.sqrt(2.0 / sizes[i])
               for i in range(len(sizes) - 1)]
    biases = [gen.normal(0.0, bias_std, sizes[i + 1]) for i in range(len(sizes) - 1)]
    return DeepNetwork(weights, biases)


def _box(net: DeepNetwork):
    weights, biases = net.weights, net.biases

    def box(X):
        H = X
        for W, b in zip(weights[:-1], biases[:-1]):
            H = np.maximum(H @ W.T + b, 0.0)
        Y = H @ weights[-1].T + biases[-1]
        return Y[:, 0] if Y.shape[1] == 1 else Y
    return box


def extract_shape(shape: str, seed: int = 0, max_queries: "int | str | None" = "auto") -> dict:
    """Extract one random network of ``shape`` (network seed ``seed``, query seed ``seed + 1``); one row."""
    sizes = parse_shape(shape)
    truth = random_deep_network(sizes, seed)
    t0 = time.perf_counter()
    row: dict[str, Any] = {"shape": shape, "parameters": int(truth.n_parameters), "seed": seed}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            res = extract(_box(truth), sizes[0], rng=seed + 1, max_queries=max_queries)
            row["status"] = "ok"
        except NNRecoverError as exc:  # recorded, the sweep goes on
            res = None
            row["status"] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    row["seconds"] = time.perf_counter() - t0
    if res is None:
        return row
    net = res.network_
    found = list(getattr(net, "hidden_sizes", [getattr(net, "n_hidden", 0)]))
    X = np.random.default_rng(seed + 2).standard_normal((20_000, sizes[0]))
    Y = truth.predict(X).reshape(X.shape[0], -1)
    G = net.predict(X).reshape(X.shape[0], -1)
    err = float(np.max(np.abs(G - Y)) / np.std(Y))
    diag = res.diagnostics_
    first = diag.get("one_layer_attempt") or {}
    row.update(widths_true="-".join(map(str, sizes[1:-1])), widths_found="-".join(map(str, found)),
               complete=found == sizes[1:-1] and diag["certificate"]["passed"],
               queries=int(res.n_queries_), log2_queries=math.log2(res.n_queries_),
               one_layer_attempt_queries=int(first.get("queries", 0)),
               max_error_over_std=err, log2_max_error=math.log2(err) if err > 0 else -math.inf,
               certificate_passed=bool(diag["certificate"]["passed"]),
               certificate_error=float(diag["certificate"]["relative_error"]),
               linear_neurons=int(diag.get("linear_neurons", 0) or 0),
               warnings="; ".join(str(w.message)[:80] for w in caught))
    return row


@experiment("extract-deep", paper="baseline",
            description="black-box extraction of deep ReLU networks: widths, queries, time, precision per shape")
def run_extract_deep(*, rng, quick: bool = False, shapes: Sequence[str] | None = None,
                     seeds: int = 1) -> tuple[pandas.DataFrame, matplotlib.figure.Figure]:
    """Widths found, queries, time and precision of ``nr.extract`` on random deep ReLU networks."""
    import pandas as pd  # deferred: pandas is slow to import
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import

    gen = check_random_state(rng)
    if shapes is None:
        shapes = ("6-10-6-1", "8-12-6-2") if quick else SHAPES[:3] + ("8-32-16-1",)
    if isinstance(shapes, str):
        shapes = [shapes]
    for s in shapes:
        parse_shape(s)
    rows = []
    for shape in shapes:
        for _ in range(int(seeds)):
            rows.append(extract_shape(shape, int(gen.integers(0, 2**31 - 1))))
    df = pd.DataFrame(rows)
    fig = figure(df, Figure)
    return df, fig


def figure(df, figure_class=None):
    """Queries against parameters and the worst output error per shape (published anchors as stars)."""
    if figure_class is None:
        from matplotlib.figure import Figure as figure_class  # deferred: matplotlib is slow to import
    fig = figure_class(figsize=(11, 4))
    axes = fig.subplots(1, 2)
    ok = df[df["status"] == "ok"] if "status" in df else df
    for _, r in ok.iterrows():
        marker = "o" if r.get("complete", False) else "x"
        axes[0].loglog(r["parameters"], r["queries"], marker, color="C0")
        axes[0].annotate(r["shape"], (r["parameters"], r["queries"]), fontsize=7)
        axes[1].loglog(r["parameters"], max(r["max_error_over_std"], 1e-17), marker, color="C0")
        axes[1].annotate(r["shape"], (r["parameters"], max(r["max_error_over_std"], 1e-17)), fontsize=7)
    # the two published query counts the papers give for these shapes (CJM 2020)
    axes[0].loglog([4_000], [2 ** 18.5], "*", color="C3", ms=12, label="Carlini et al. 2020, 4k-parameter model")
    axes[0].loglog([784 * 128 + 128 + 129], [2 ** 21.5], "*", color="C1", ms=12, label="Carlini et al. 2020, 784-128-1")
    axes[1].loglog([784 * 128 + 128 + 129], [2 ** -25], "*", color="C1", ms=12, label="Carlini et al. 2020, 784-128-1")
    axes[0].set(xlabel="parameters", ylabel="queries", title="queries (o: complete, x: not)")
    axes[1].set(xlabel="parameters", ylabel="max |output error| / std(output)", title="worst output error (20,000 inputs)")
    for ax in axes:
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
