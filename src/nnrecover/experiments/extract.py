"""Experiment ``extract``: black-box extraction by critical points against the width.

For each input dimension ``d``, width ``k`` and black-box precision (float64, float32), a random ReLU
teacher with biases (unit rows, biases uniform in [-1, 1], scalar output) is wrapped as a vectorised
black box and extracted with :func:`nnrecover.extraction.extract` (``n_hidden="auto"``). Recorded:
queries and seconds (in all and per recovered unit), units found, the largest angle between a true
row and its recovered row, the relative L2 function error on fresh Gaussian inputs, the black box's
measured noise level and how the unit orientations were resolved (least squares or the 0/1 solve).

Defaults: d in (10, 100), k in (5, 10, 20, 50, 100, 200), float64 and float32. ``quick``: d = 10,
k in (5, 10), float64 and float32.
"""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..errors import InputError, NNRecoverError
from ..extraction import extract
from ..network import random_network
from .registry import experiment

if TYPE_CHECKING:
    import matplotlib.figure
    import pandas

__all__ = ["run_extract", "float_box"]


def float_box(net, dtype) -> Any:
    """The network as a black box computing in ``dtype`` (inputs rounded to ``dtype`` too)."""
    arrays = [np.asarray(a, dtype) for a in (net.hidden_weights, net.hidden_bias, net.output_weights,
                                             net.output_bias)]

    def box(X):
        W, b, A, c = arrays
        Y = np.maximum(np.asarray(X, dtype) @ W.T + b, 0) @ A.T + c
        return Y[:, 0] if Y.shape[1] == 1 else Y
    return box


def _max_angle(est, truth) -> float:
    E, T = est.canonical().hidden_weights, truth.canonical().hidden_weights
    if E.shape[0] == 0:
        return float(np.pi)
    # nearest recovered row of every true row, angle 2 arcsin(|w - w'|/2) (accurate near 0);
    # blocks keep the (k_true, k_est, d) distance array small
    best = np.empty(T.shape[0])
    for i in range(0, T.shape[0], 64):
        dist = np.linalg.norm(T[i:i + 64, None, :] - E[None, :, :], axis=2)   # no |t|^2 + |e|^2 - 2 t.e cancellation
        best[i:i + 64] = dist.min(axis=1)
    return float(np.max(2 * np.arcsin(np.minimum(best, 2.0) / 2)))


def _positive_ints(value, default, name: str) -> list[int]:
    """``value`` as a list of positive integers: one integer (``--option dims=10``) or a sequence."""
    if value is None:
        return list(default)
    if isinstance(value, (int, np.integer)):
        value = [value]
    if isinstance(value, str):
        raise InputError(f"{name} must be an integer or a list of integers (on the command line: "
                         f"--option {name}=[5,10]), got {value!r}.")
    return [check_positive_int(v, name) for v in value]


@experiment("extract", paper="baseline",
            description="black-box extraction by critical points: queries, time and precision vs width")
def run_extract(*, rng, quick: bool = False, dims: Sequence[int] | None = None,
                widths: Sequence[int] | None = None, dtypes: Sequence[str] = ("float64", "float32"),
                sign_time_limit: float = 60.0) -> tuple[pandas.DataFrame, matplotlib.figure.Figure]:
    """Queries, time and precision of ``nr.extract`` against the width (float64 and float32 boxes)."""
    import pandas as pd  # deferred: pandas is slow to import
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import


    gen = check_random_state(rng)
    dims = _positive_ints(dims, (10,) if quick else (10, 100), "dims")
    widths = _positive_ints(widths, (5, 10) if quick else (5, 10, 20, 50, 100, 200), "widths")
    rows = []
    for d in dims:
        for k in widths:
            net = random_network(d, k, rng=gen, bias_range=(-1, 1))
            X = gen.standard_normal((20_000, d))
            for dt in dtypes:
                box = float_box(net, np.dtype(dt))
                seed = int(gen.integers(0, 2**63 - 1))
                t0 = time.perf_counter()
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    try:
                        res = extract(box, d, rng=seed, sign_time_limit=sign_time_limit)
                        status = "ok"
                    except NNRecoverError as exc:  # recorded, the sweep goes on
                        res, status = None, f"failed: {type(exc).__name__}: {exc}"
                seconds = time.perf_counter() - t0
                row = {"d": d, "k": k, "dtype": dt, "status": status, "seconds": seconds}
                if res is not None:
                    diag = res.diagnostics_
                    est = res.network_
                    y = net.predict(X)
                    k_found = int(diag["n_hidden"])
                    row.update(queries=res.n_queries_, k_found=k_found,
                               queries_per_unit=res.n_queries_ / max(k_found, 1),
                               seconds_per_unit=seconds / max(k_found, 1),
                               max_angle=_max_angle(est, net) if diag["linear_units"] == 0 else np.nan,
                               function_error=float(np.linalg.norm(est.predict(X) - y) / np.linalg.norm(y)),
                               certificate_error=diag["certificate"]["relative_error"],
                               noise=diag["noise"]["relative_noise"], signs=diag["signs"]["method"],
                               linear_units=diag["linear_units"],
                               warnings="; ".join(str(w.message)[:80] for w in caught))
                rows.append(row)
    df = pd.DataFrame(rows)
    fig = Figure(figsize=(13, 4))
    axes = fig.subplots(1, 3)
    for (d, dt), grp in df.groupby(["d", "dtype"]):
        grp = grp[grp["status"] == "ok"]
        style = "-" if dt == "float64" else "--"
        axes[0].loglog(grp["k"], grp["queries"], style, marker="o", label=f"d={d}, {dt}")
        axes[1].loglog(grp["k"], grp["seconds"], style, marker="o", label=f"d={d}, {dt}")
        line = axes[2].loglog(grp["k"], grp["function_error"].clip(lower=1e-17), style, marker="o",
                              label=f"d={d}, {dt}")[0]
        # a scalar output whose orientation (a subset sum) was not solved in sign_time_limit: the
        # function is exact with its linear part kept as extra units, the time is mostly that limit
        open_ = grp[grp["linear_units"] > 0]
        for ax, col in ((axes[1], "seconds"), (axes[2], "function_error")):
            ax.scatter(open_["k"], open_[col].clip(lower=1e-17), s=110, facecolors="none",
                       edgecolors=line.get_color(), linewidths=1.5, zorder=3)
    if (df.get("linear_units", 0) > 0).any():
        axes[1].scatter([], [], s=110, facecolors="none", edgecolors="k",
                        label="units not oriented in time\n(linear part kept as 2 units)")
    axes[0].set(xlabel="hidden units k", ylabel="queries", title="queries")
    axes[1].set(xlabel="hidden units k", ylabel="seconds", title="time")
    axes[2].set(xlabel="hidden units k", ylabel="relative L2 error", title="function error (fresh inputs)")
    for ax in axes:
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    return df, fig
