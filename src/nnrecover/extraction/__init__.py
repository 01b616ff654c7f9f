"""Extraction of a one-hidden-layer network from a black box that can be queried but not read.

``nr.extract(model, d)`` recovers ``f(x) = A relu(W x + b) + c`` from queries of ``model``:

* ``method="critical-points"`` (chosen queries; the default): Carlini, Jagielski and Mironov,
  "Cryptanalytic Extraction of Neural Network Models", CRYPTO 2020, for one hidden layer -- critical
  points along random lines, hyperplanes from the gradient jump there, refined through further critical
  points, signs from the linear part, output layer by least squares, certificate on fresh queries
  (:mod:`nnrecover.extraction.critical_points`). Exact up to the black box's round-off, any width.
* ``method="moments"`` (sample-only): Gaussian queries handed to a moment learner of this library,
  followed by its refinement (:mod:`nnrecover.extraction.moments`).

Every query goes through one counter (:class:`~nnrecover.extraction.queries.QueryOracle`);
``max_queries`` is a hard budget and running out raises :class:`~nnrecover.errors.QueryBudgetError`
whose ``partial`` attribute holds what was recovered so far.
"""

from __future__ import annotations

import math
import numbers
import time
from typing import Any, Callable

import numpy as np

from .._validation import check_random_state
from .. import errors
from ..errors import InputError, QueryBudgetError
from .queries import QueryOracle

__all__ = ["extract", "ExtractionResult", "QueryBudgetError"]

_METHODS = ("auto", "critical-points", "moments")


class ExtractionResult:
    """Outcome of :func:`extract`.

    Attributes
    ----------
    network_ : TwoLayerNetwork or None
        The recovered network in canonical form (unit hidden rows); in a partial result the units found
        so far (``None`` before the first one).
    diagnostics_ : dict
        ``"queries"`` (rows queried), ``"model_calls"``, ``"seconds"``, ``"method"``, ``"complete"``,
        ``"n_hidden"`` and the width evidence (``"width"``), the measured noise level of the black box
        (``"noise"``), the certificate on fresh queries (``"certificate"``: relative error, max absolute
        error, tolerance, passed; the chosen-query route passes within ``10 sqrt(P)`` times the measured
        relative noise, ``P`` the parameters, at most 1000 times) and method-specific evidence.
    n_queries_ : int
        Rows sent to the model.
    """

    def __init__(self, network, diagnostics: dict, n_queries: int):
        self.network_ = network
        self.diagnostics_ = diagnostics
        self.n_queries_ = int(n_queries)

    def predict(self, X) -> np.ndarray:
        """The recovered network's output on ``X``."""
        if self.network_ is None:
            raise errors.NotFittedError("this partial extraction result has no network yet.")
        return self.network_.predict(X)

    def __repr__(self) -> str:
        k = None if self.network_ is None else self.network_.n_hidden
        return (f"ExtractionResult(n_hidden={k}, n_queries={self.n_queries_}, "
                f"complete={self.diagnostics_.get('complete')})")


def _check_budget(max_queries: Any) -> int | None:
    if max_queries is None:
        return None
    if isinstance(max_queries, (bool, np.bool_)) or not isinstance(max_queries, numbers.Integral) \
            or int(max_queries) < 1:
        raise InputError(f"max_queries must be None or a positive int, got {max_queries!r}.")
    return int(max_queries)


def _check_positive(value: Any, name: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a positive number, got {value!r}.") from exc
    if not (math.isfinite(out) and out > 0):
        raise InputError(f"{name} must be a positive finite number, got {value!r}.")
    return out


def extract(model: Callable[[np.ndarray], Any], n_inputs: int, *, n_hidden: "int | str" = "auto",
            method: str = "auto", max_queries: int | None = None, rng: Any = None,
            input_scale: float = 1.0, radius: float | None = None, n_certify: int = 2000,
            patience: int | None = None, sign_time_limit: float = 120.0, n_samples: int | None = None,
            progress: bool = False,
            log: Callable[[str], None] | None = None) -> ExtractionResult:
    """Recover a one-hidden-layer ReLU network from queries of a black box.

    Parameters
    ----------
    model : callable
        ``model(X)`` for a float64 array ``X`` of shape ``(n, d)`` returns ``(n,)`` or ``(n, p)``
        outputs; it is called with batches of rows (it must be vectorised). A model that computes in
        float32 is fine: the precision reached then follows its round-off (``diagnostics_["noise"]``).
    n_inputs : int
        ``d``.
    n_hidden : int or "auto"
        Number of hidden units. ``"auto"``: the number of distinct hyperplanes found (critical points),
        or the width chosen by the learner from its statistics (moments); the evidence is in
        ``diagnostics_["width"]``. With an int the search stops once that many units are certified;
        fewer found after the search is reported (``CertificateWarning``) as unidentifiable units.
    method : {"auto", "critical-points", "moments"}
        ``"auto"`` is ``"critical-points"``.
    max_queries : int, optional
        Hard budget on the rows sent to ``model``. A batch that would exceed it is not sent;
        :class:`~nnrecover.errors.QueryBudgetError` is raised with the partial result attached.
    rng : None, int or numpy.random.Generator
        All query points are drawn from it; same seed and deterministic model, same result.
    input_scale : float, default 1.0
        Standard deviation of the Gaussian query points (the region of interest); lines start there.
    radius : float, optional
        Half-length of the searched lines (default ``4 sqrt(d) input_scale``; every third line is four
        times longer, to find rarely active units whose hyperplane is far from the origin).
    n_certify : int, default 2000
        Fresh Gaussian queries on which the recovered network is compared with the black box.
    patience : int, optional
        With ``n_hidden="auto"``: stop after this many consecutive lines without a new unit. Default 4
        for a box that evaluates to float64 round-off, 10 for a noisier one (float32): its gradient
        jumps need longer steps, so among dense kinks (d = 10, k = 200) a unit's kink is unreadable on
        more lines, and 4 quiet lines were measured to stop one unit short.
    sign_time_limit : float, default 120
        Seconds allowed to the 0/1 solve that orients the units when ``k > p d`` (scalar output, more
        units than inputs); if it finds no solution in time the linear part is kept as extra unit pairs
        and a ``CertificateWarning`` says so (``diagnostics_["linear_units"]``).
    n_samples : int, optional
        ``method="moments"`` only: Gaussian queries drawn (default: the budget, else 200,000).
    progress : bool, default False
        Show a tqdm progress bar of the queries on stderr.
    log : callable, optional
        Called with one-line progress messages.

    Returns
    -------
    ExtractionResult

    Raises
    ------
    QueryBudgetError
        The budget ran out; ``exc.partial`` is an :class:`ExtractionResult` with what was recovered.
    InputError
        Bad arguments, or a model returning the wrong shape or non-finite values.
    """
    from .._validation import check_positive_int

    d = check_positive_int(n_inputs, "n_inputs")
    if method not in _METHODS:
        raise InputError(f"method must be one of {_METHODS}, got {method!r}.")
    if isinstance(n_hidden, str):
        if n_hidden != "auto":
            raise InputError(f"n_hidden must be a positive int or 'auto', got {n_hidden!r}.")
        k = None
    else:
        k = check_positive_int(n_hidden, "n_hidden")
    budget = _check_budget(max_queries)
    scale = _check_positive(input_scale, "input_scale")
    rad = None if radius is None else _check_positive(radius, "radius")
    n_cert = check_positive_int(n_certify, "n_certify", minimum=10)
    pat = None if patience is None else check_positive_int(patience, "patience")
    sign_limit = _check_positive(sign_time_limit, "sign_time_limit")
    gen = check_random_state(rng)
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=budget, unit="query", desc="extract", leave=False)
    oracle = QueryOracle(model, d, budget, progress=None if bar is None else bar.update)
    method = "critical-points" if method == "auto" else method
    t0 = time.perf_counter()
    try:
        if method == "critical-points":
            from .critical_points import CriticalPointExtractor

            runner = CriticalPointExtractor(oracle, d, gen, n_hidden=k, input_scale=scale, radius=rad,
                                            patience=pat, n_certify=n_cert, milp_time_limit=sign_limit,
                                            log=log)
            try:
                net, diag = runner.run()
            except QueryBudgetError as exc:
                diag = dict(runner.diag)
                diag.update(complete=False, stage=runner.stage, lines=runner.lines,
                            queries=oracle.n_queries, model_calls=oracle.n_calls,
                            seconds=time.perf_counter() - t0,
                            n_hidden=0 if runner.units is None else int(runner.units.W.shape[0]),
                            orientation="unresolved (the partial network's units may be flipped; its "
                                        "output weights are the slope changes at the critical points)")
                exc.partial = ExtractionResult(runner.partial_network(), diag, oracle.n_queries)
                exc.args = (f"{exc.args[0]} Recovered so far: {diag['n_hidden']} hidden unit(s), stage "
                            f"'{runner.stage}'.",)
                raise
        else:
            from .moments import extract_moments

            try:
                net, diag = extract_moments(oracle, d, gen, n_hidden=k, input_scale=scale,
                                            n_samples=n_samples, n_certify=n_cert, log=log)
            except QueryBudgetError as exc:
                diag = {"method": "moments", "complete": False, "queries": oracle.n_queries,
                        "model_calls": oracle.n_calls, "seconds": time.perf_counter() - t0, "n_hidden": 0}
                exc.partial = ExtractionResult(None, diag, oracle.n_queries)
                exc.args = (f"{exc.args[0]} Recovered so far: nothing (the moment route needs all its "
                            "samples).",)
                raise
    finally:
        if bar is not None:
            bar.close()
    diag["queries"] = oracle.n_queries
    diag["model_calls"] = oracle.n_calls
    diag["seconds"] = time.perf_counter() - t0
    diag["max_queries"] = budget
    return ExtractionResult(net, diag, oracle.n_queries)
