"""The counting oracle: every query of a black-box model goes through one :class:`QueryOracle`.

The oracle validates what the model returns (shape ``(n,)`` or ``(n, p)``, finite, real), converts it to
float64 ``(n, p)``, counts the rows sent and enforces ``max_queries`` as a hard budget: a batch that
would exceed it is *not* sent, and :class:`~nnrecover.errors.QueryBudgetError` is raised instead, so
``n_queries <= max_queries`` always holds.

It also measures the model's evaluation noise (:meth:`QueryOracle.calibrate`): a ReLU network is
piecewise linear, so second differences ``f(x) - 2 f(x + h u) + f(x + 2 h u)`` over short segments
vanish in exact arithmetic; what is left is round-off (about 1e-16 relative for a float64 model, 1e-7
for float32). Every tolerance of the chosen-query method is a multiple of this measured level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ..errors import InputError, QueryBudgetError

__all__ = ["QueryOracle", "NoiseModel", "query_batched", "query_generated", "KAPPA", "MAX_BATCH", "unseen_below"]

_EPS = float(np.finfo(np.float64).eps)
#: multiple of the measured noise below which two values count as equal
KAPPA = 64.0
#: rows per model call (bounds the memory of a batch)
MAX_BATCH = 1 << 15


@dataclass(frozen=True)
class NoiseModel:
    """Absolute evaluation error of the black box, ``noise(x) = rel * (f_scale + |f(x)| + g_scale |x|)``.

    Attributes
    ----------
    rel : float
        Relative noise level (>= float64 epsilon).
    f_scale : float
        Typical ``|f(x)|`` at the calibration points.
    g_scale : float
        Typical gradient norm, so that ``g_scale * |x|`` is the size of the terms summed inside the model.
    """

    rel: float
    f_scale: float
    g_scale: float

    def abs(self, x_norm: np.ndarray, f_norm: np.ndarray) -> np.ndarray:
        """Absolute noise at points of norm ``x_norm`` with outputs of norm ``f_norm``."""
        return self.rel * (self.f_scale + np.asarray(f_norm) + self.g_scale * np.asarray(x_norm))


class QueryOracle:
    """Query counter and budget around a black-box model.

    Parameters
    ----------
    model : callable
        ``model(X)`` with ``X`` a float64 array ``(n, d)``; returns ``(n,)`` or ``(n, p)`` outputs.
    n_inputs : int
        ``d``.
    max_queries : int or None
        Hard budget on the number of rows sent to ``model`` (``None``: unlimited).
    progress : callable, optional
        Called with the number of rows of every batch sent (e.g. a tqdm bar's ``update``).

    Attributes
    ----------
    n_queries : int
        Rows sent so far.
    n_calls : int
        Calls of ``model`` so far.
    n_outputs : int or None
        ``p``, known after the first call.
    """

    def __init__(self, model: Callable[[np.ndarray], Any], n_inputs: int, max_queries: int | None = None,
                 progress: Callable[[int], Any] | None = None):
        if not callable(model):
            raise InputError(f"model must be a callable mapping an (n, d) array to outputs, got "
                             f"{type(model).__name__}.")
        self.model = model
        self.n_inputs = int(n_inputs)
        self.max_queries = None if max_queries is None else int(max_queries)
        self.progress = progress
        self.n_queries = 0
        self.n_calls = 0
        self.n_outputs: int | None = None
        self.scalar_output: bool | None = None

    @property
    def remaining(self) -> float:
        """Rows still allowed (``inf`` without a budget)."""
        return np.inf if self.max_queries is None else self.max_queries - self.n_queries

    def __call__(self, X: np.ndarray, *, allow_nonfinite: bool = False) -> np.ndarray:
        """Evaluate the model on the rows of ``X``; returns float64 ``(n, p)``.

        ``allow_nonfinite`` lets NaN and inf through (a probe of where the model saturates).

        Raises
        ------
        QueryBudgetError
            The batch would exceed ``max_queries`` (nothing is sent; the caller attaches the partial result).
        InputError
            The model raised (its exception is chained), or returned the wrong number of rows, more than two
            dimensions, or non-finite values.
        """
        X = np.ascontiguousarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.n_inputs:
            raise AssertionError(f"internal query of shape {X.shape}")  # pragma: no cover
        n = X.shape[0]
        if n == 0:
            return np.empty((0, self.n_outputs or 1))
        if n > self.remaining:
            raise QueryBudgetError(
                f"query budget exhausted: max_queries={self.max_queries}, {self.n_queries} rows used, the next "
                f"batch needs {n} more; raise max_queries (the partial result is in the exception's "
                f"'partial' attribute).", n_queries=self.n_queries)
        try:
            out = self.model(X)
        except Exception as exc:
            # the rows may or may not have been evaluated; they are counted as sent
            self.n_queries += n
            self.n_calls += 1
            raise InputError(f"model raised {type(exc).__name__}: {exc} when called on a float64 array of shape "
                             f"({n}, {self.n_inputs}); check n_inputs and that the model is vectorised over "
                             "rows.") from exc
        self.n_queries += n
        self.n_calls += 1
        if self.progress is not None:
            self.progress(n)
        try:
            Y = np.asarray(out, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"model returned {type(out).__name__}, which is not a real numeric array: {exc}") from exc
        if Y.ndim == 0 or Y.ndim > 2 or Y.shape[0] != n:
            raise InputError(f"model must return shape ({n},) or ({n}, p) for {n} input rows, got {Y.shape}.")
        scalar = Y.ndim == 1
        Y = Y.reshape(n, -1)
        if self.n_outputs is None:
            self.n_outputs, self.scalar_output = Y.shape[1], scalar
        elif Y.shape[1] != self.n_outputs:
            raise InputError(f"model returned {Y.shape[1]} outputs, earlier calls returned {self.n_outputs}.")
        if not allow_nonfinite and not np.all(np.isfinite(Y)):
            bad = ~np.all(np.isfinite(Y), axis=1)
            far = float(np.max(np.linalg.norm(X[bad], axis=1)))
            raise InputError(f"model returned NaN or infinite outputs on {int(bad.sum())} of {n} rows (inputs of "
                             f"norm up to {far:.3g}); extraction needs a finite function. A model that saturates "
                             "away from the origin (e.g. log-probabilities of a classifier) needs a smaller "
                             "input_scale (--input-scale), or an output_range attribute (lo, hi) so that the "
                             "scale is chosen.")
        return Y

    def calibrate(self, rng: np.random.Generator, scale: float, n_points: int = 64,
                  step: float = 1e-3) -> tuple[NoiseModel, dict]:
        """Measure the model's evaluation noise from second differences and repeated queries.

        At ``n_points`` Gaussian points ``x`` (standard deviation ``scale``) and random unit directions
        ``u``, query ``x, x + h u, x + 2 h u`` and ``x`` again (``h = step * scale``): ``4 n_points`` rows.
        The second difference of a piecewise-linear function is zero unless a kink lies in the segment
        (probability about ``k h sqrt(d)``-small); its 75% quantile is the round-off, robust to the few
        segments that do cross a kink. Repeated queries reveal a non-deterministic model.

        Returns
        -------
        (NoiseModel, dict)
            The noise model and its evidence (quantiles, repeat differences, queries used).
        """
        d = self.n_inputs
        x = scale * rng.standard_normal((n_points, d))
        u = rng.standard_normal((n_points, d))
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        h = step * scale
        F = self(np.concatenate([x, x + h * u, x + 2 * h * u, x]))
        F0, F1, F2, F3 = np.split(F, 4)
        second = np.linalg.norm(F0 - 2 * F1 + F2, axis=1)
        repeat = np.linalg.norm(F3 - F0, axis=1)
        f_scale = float(np.median(np.linalg.norm(F0, axis=1)))
        g_scale = float(np.median(np.linalg.norm(F1 - F0, axis=1)) / h * np.sqrt(d))
        x_norm = np.linalg.norm(x, axis=1)
        size = f_scale + np.linalg.norm(F0, axis=1) + g_scale * x_norm
        if not size.max() > 0:
            size = np.ones_like(size)
        ratio = np.maximum(second / 4, repeat) / np.where(size > 0, size, 1.0)
        rel = max(float(np.quantile(ratio, 0.75)), _EPS)
        noise = NoiseModel(rel=rel, f_scale=max(f_scale, 1e-300), g_scale=g_scale)
        evidence = {"relative_noise": rel, "f_scale": f_scale, "gradient_scale": g_scale,
                    "second_difference_quantiles": np.quantile(second / np.maximum(size, 1e-300),
                                                               [0.5, 0.75, 0.9]).tolist(),
                    "max_repeat_difference": float(repeat.max()), "queries": 4 * n_points}
        return noise, evidence


def unseen_below(n_queries: int) -> float:
    """The activity below which a neuron is likely unseen by ``n_queries`` fresh Gaussian queries.

    A neuron active on a fraction ``p`` of the query distribution is active at none of ``n`` independent
    queries with probability ``(1 - p)^n <= exp(-p n)``; that is at most 5% for ``p >= 3 / n``. A
    certificate on ``n`` queries therefore vouches for the function only up to neurons active on less
    than ``3 / n`` of the region (0.15% for the default 2,000).
    """
    return 3.0 / n_queries


def query_batched(oracle: QueryOracle, X: np.ndarray) -> np.ndarray:
    """Query in batches of at most ``MAX_BATCH`` rows (the budget check is per batch)."""
    if X.shape[0] <= MAX_BATCH:
        return oracle(X)
    return np.concatenate([oracle(X[i:i + MAX_BATCH]) for i in range(0, X.shape[0], MAX_BATCH)])


def query_generated(oracle: QueryOracle, n_points: int, rows_per_point: int,
                    make: Callable[[int, int], np.ndarray]) -> np.ndarray:
    """Query ``rows_per_point`` rows for each of ``n_points`` points, generated batch by batch.

    ``make(i, j)`` returns the rows of points ``i, ..., j - 1``, an array ``(j - i, rows_per_point, d)``
    (or its ``((j - i) rows_per_point, d)`` reshape), points in order and each point's rows in order.
    The rows go to the model in exactly the batches that :func:`query_batched` sends for all of them at
    once (``MAX_BATCH`` rows, the last one shorter), so the outputs are the same bits, but at most
    ``MAX_BATCH + 2 rows_per_point`` rows exist at a time (a batch may begin and end inside a point):
    the memory of a stage is ``O(MAX_BATCH d)`` instead of ``O(n_points rows_per_point d)``.

    Returns
    -------
    (n_points * rows_per_point, p) float64
    """
    n_rows = n_points * rows_per_point
    if n_rows == 0:
        return oracle(np.empty((0, oracle.n_inputs)))
    out = []
    for r0 in range(0, n_rows, MAX_BATCH):
        r1 = min(r0 + MAX_BATCH, n_rows)
        i, j = r0 // rows_per_point, -(-r1 // rows_per_point)
        rows = make(i, j).reshape(-1, oracle.n_inputs)
        out.append(oracle(rows[r0 - i * rows_per_point:r1 - i * rows_per_point]))
        del rows
    return out[0] if len(out) == 1 else np.concatenate(out)
