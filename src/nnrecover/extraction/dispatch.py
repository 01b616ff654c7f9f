"""``extract``: argument checks, the query budget, and the route (critical points or moments) run.

Every query goes through one counter (:class:`~nnrecover.extraction.queries.QueryOracle`);
``max_queries`` is a hard budget (by default :func:`default_budget`) and running out raises
:class:`~nnrecover.errors.QueryBudgetError` whose ``partial`` attribute is an :class:`ExtractionResult`
with what was recovered so far. Routes: ``"critical-points"``
(:class:`~nnrecover.extraction.extractor.CriticalPointExtractor`, Carlini, Jagielski and Mironov,
CRYPTO 2020) and ``"moments"`` (:func:`~nnrecover.extraction.moments.extract_moments`).
"""

from __future__ import annotations

import math
import numbers
import time
import warnings
from typing import Any, Callable

import numpy as np

from .. import errors
from .._validation import check_positive_int, check_random_state
from ..deep_network import DeepNetwork
from ..errors import AssumptionError, InputError, QueryBudgetError
from .deep import DeepExtractor
from .extractor import CriticalPointExtractor
from .moments import extract_moments
from .queries import QueryOracle
from .region import choose_scale, model_output_range

__all__ = ["extract", "ExtractionResult", "default_budget"]

_METHODS = ("auto", "critical-points", "moments")


def default_budget(n_inputs: int) -> int:
    """Queries allowed by ``max_queries="auto"``: ``max(2**24, 2**14 d)``.

    Extraction of a one-hidden-layer network costs about ``10-40 d k`` queries (d = 100, k = 200:
    0.32 million from a float64 box, 6.8 million from a float32 one; 784-128-1: 1.7 million), so
    the default stops only a search that does not converge, such as a box whose outputs are much
    noisier on the long search lines than at the query scale (16.8 million queries take about two
    minutes of a fast box).
    """
    return max(2 ** 24, 2 ** 14 * int(n_inputs))


class ExtractionResult:
    """Outcome of :func:`extract`.

    Attributes
    ----------
    network_ : TwoLayerNetwork, DeepNetwork or None
        The recovered network in canonical form (unit hidden rows): a ``TwoLayerNetwork`` for one hidden
        layer, a ``DeepNetwork`` for more. In a partial result of the one-hidden-layer route, the units
        found so far (``None`` before the first one); the layer-by-layer route's partial result has
        ``None`` here and its layers in ``diagnostics_["partial_layers"]``.
    diagnostics_ : dict
        ``"queries"`` (rows queried), ``"model_calls"``, ``"seconds"``, ``"method"``, ``"complete"``,
        ``"n_hidden"`` and the width evidence (``"width"``), the measured noise level of the black box
        (``"noise"``), the certificate on fresh queries (``"certificate"``: relative error, max absolute
        error, tolerance, passed; the chosen-query route passes within ``10 sqrt(P)`` times the measured
        relative noise, ``P`` the parameters, at most 1000 times) and method-specific evidence;
        ``"query_region"`` (the scale chosen for a model with an ``output_range``), and for a model
        that declares its width (``n_hidden`` attribute, the loaders) ``"declared_n_hidden"`` and,
        after a passed certificate, ``"unidentifiable_units"`` (declared units that left no critical
        point: never active on the searched region, or a zero output weight).
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
        net = self.network_
        k = None if net is None else getattr(net, "n_hidden", None) or list(net.hidden_sizes)
        return (f"ExtractionResult(n_hidden={k}, n_queries={self.n_queries_}, "
                f"complete={self.diagnostics_.get('complete')})")


def _check_budget(max_queries: Any, d: int) -> int | None:
    if max_queries is None:
        return None
    if isinstance(max_queries, str) and max_queries == "auto":
        return default_budget(d)
    if isinstance(max_queries, (bool, np.bool_)) or not isinstance(max_queries, numbers.Integral) \
            or int(max_queries) < 1:
        raise InputError(f"max_queries must be 'auto', None (no budget) or a positive int, got {max_queries!r}.")
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
            depth: "int | str" = "auto", method: str = "auto", max_queries: "int | str | None" = "auto", rng: Any = None,
            input_scale: float | None = None, radius: float | None = None, n_certify: int = 2000,
            patience: int | None = None, sign_time_limit: float = 120.0, n_samples: int | None = None,
            progress: bool = False,
            log: Callable[[str], None] | None = None) -> ExtractionResult:
    """Recover a ReLU network (any number of hidden layers) from queries of a black box.

    Parameters
    ----------
    model : callable
        ``model(X)`` for a float64 array ``X`` of shape ``(n, d)`` returns ``(n,)`` or ``(n, p)``
        outputs; it is called with batches of rows (it must be vectorised). A model that computes in
        float32 is fine: the precision reached then follows its round-off (``diagnostics_["noise"]``).
    n_inputs : int
        ``d``.
    n_hidden : int, sequence of int, or "auto"
        Number of hidden units. ``"auto"``: the number of distinct hyperplanes found (critical points),
        or the width chosen by the learner from its statistics (moments); the evidence is in
        ``diagnostics_["width"]`` (one hidden layer) or ``diagnostics_["layers"]`` (deeper). With an int
        (one hidden layer) the search stops once that many units are certified; fewer found after the
        search is reported (``CertificateWarning``) as unidentifiable units. A sequence gives one width
        per hidden layer (and the depth); each layer's search stops at its width.
    depth : int or "auto"
        Number of hidden layers. ``"auto"``: the one-hidden-layer extraction runs first; when no unit lies
        on a hyperplane, or its certificate fails, the network is extracted layer by layer
        (:mod:`~nnrecover.extraction.deep`) on the same query counter and budget, and the depth is where
        an output layer on the features found explains the box. ``diagnostics_["one_layer_attempt"]``
        records the queries the first attempt took. ``1``: one hidden layer only; ``>= 2``: layer by layer.
    method : {"auto", "critical-points", "moments"}
        ``"auto"`` is ``"critical-points"``.
    max_queries : int, "auto" or None, default "auto"
        Hard budget on the rows sent to ``model``. A batch that would exceed it is not sent;
        :class:`~nnrecover.errors.QueryBudgetError` is raised with the partial result attached.
        ``"auto"``: :func:`default_budget` (``max(2**24, 2**14 d)``, far above what a one-hidden-layer
        network needs; it stops a search that does not converge). ``None``: no budget.
    rng : None, int or numpy.random.Generator
        All query points are drawn from it; same seed and deterministic model, same result.
    input_scale : float, optional
        Standard deviation of the Gaussian query points (the region of interest); lines start there.
        Default 1.0; for a model with an ``output_range`` attribute (the loaders' classifiers, whose
        logits are exact only while their probabilities do not saturate) the largest ``2^-j`` whose
        Gaussian points keep the outputs within it (``diagnostics_["query_region"]``); the search lines
        are cut where the outputs leave it. A scale given for such a model whose points leave that
        range raises an ``InputError`` naming the scale to use.
    radius : float, optional
        Half-length of the searched lines (default ``4 sqrt(d) input_scale``; every third line is four
        times longer, to find rarely active units whose hyperplane is far from the origin).
    n_certify : int, default 2000
        Fresh Gaussian queries on which the recovered network is compared with the black box. A
        neuron active on less than ``3 / n_certify`` of them is likely unseen there (the certificate's
        ``unseen_below``): raise it for a box whose neurons may be active on a smaller part. With more
        than one hidden layer the certificate also queries both sides of every neuron's boundary and
        the inside of every side that holds under 5% of the region (``boundary_queries``).
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
        ``network_`` is a :class:`~nnrecover.network.TwoLayerNetwork` for one hidden layer and a
        :class:`~nnrecover.deep_network.DeepNetwork` for more.

    Raises
    ------
    QueryBudgetError
        The budget ran out; ``exc.partial`` is an :class:`ExtractionResult` with what was recovered.
    InputError
        Bad arguments, or a model returning the wrong shape or non-finite values.
    """
    d = check_positive_int(n_inputs, "n_inputs")
    if method not in _METHODS:
        raise InputError(f"method must be one of {_METHODS}, got {method!r}.")
    depth_ = _check_depth(depth)
    widths = None
    if isinstance(n_hidden, str):
        if n_hidden != "auto":
            raise InputError(f"n_hidden must be a positive int, a sequence of ints (one per hidden layer) or "
                             f"'auto', got {n_hidden!r}.")
        k = None
    elif isinstance(n_hidden, (list, tuple)):
        widths = [check_positive_int(w, f"n_hidden[{i}]") for i, w in enumerate(n_hidden)]
        if not widths:
            raise InputError("n_hidden must not be an empty sequence; give one width per hidden layer or 'auto'.")
        if depth_ is None:
            depth_ = len(widths)
        elif depth_ != len(widths):
            raise InputError(f"n_hidden gives {len(widths)} widths but depth={depth_}; give one width per hidden "
                             "layer.")
        k = widths[0] if depth_ == 1 else None
    else:
        k = check_positive_int(n_hidden, "n_hidden")
        if depth_ is None:
            depth_ = 1   # one width: one hidden layer
        elif depth_ > 1:
            raise InputError(f"n_hidden={k} is one width but depth={depth_}; give a sequence of {depth_} widths "
                             "(one per hidden layer) or 'auto'.")
    if method == "moments" and depth_ is not None and depth_ > 1:
        raise InputError("method='moments' recovers one hidden layer; use method='critical-points' (the default) "
                         f"for depth={depth_}.")
    budget = _check_budget(max_queries, d)
    auto_budget = isinstance(max_queries, str)
    explicit_scale = input_scale is not None
    scale = _check_positive(1.0 if input_scale is None else input_scale, "input_scale")
    out_range = model_output_range(model)
    rad = None if radius is None else _check_positive(radius, "radius")
    n_cert = check_positive_int(n_certify, "n_certify", minimum=10)
    pat = None if patience is None else check_positive_int(patience, "patience")
    sign_limit = _check_positive(sign_time_limit, "sign_time_limit")
    gen = check_random_state(rng)
    bar = None
    if progress:
        # deferred: tqdm.auto takes about 80 ms to import and only a progress bar needs it
        from tqdm.auto import tqdm

        # the default budget is a runaway stop, not an estimate of the queries needed
        bar = tqdm(total=None if auto_budget else budget, unit="query", desc="extract", leave=False)
    oracle = QueryOracle(model, d, budget, progress=None if bar is None else bar.update)
    method = "critical-points" if method == "auto" else method
    t0 = time.perf_counter()
    region = None
    try:
        if out_range is not None:
            scale, region = choose_scale(oracle, d, gen, scale, out_range, explicit_scale)
            if rad is None:
                # the lines keep the length of the requested scale: they are cut where the outputs
                # leave the range, and units whose hyperplanes lie beyond the smaller Gaussian region
                # are still crossed
                rad = 4.0 * math.sqrt(d) * region["requested_input_scale"]
        if method == "critical-points":
            net, diag = _critical_points(oracle, d, gen, k, widths, depth_, scale, rad, pat, n_cert, sign_limit,
                                         out_range, log, bar, auto_budget, t0)
        else:
            try:
                net, diag = extract_moments(oracle, d, gen, n_hidden=k, input_scale=scale,
                                            n_samples=n_samples, n_certify=n_cert, log=log)
            except QueryBudgetError as exc:
                diag = {"method": "moments", "complete": False, "queries": oracle.n_queries,
                        "model_calls": oracle.n_calls, "seconds": time.perf_counter() - t0, "n_hidden": 0}
                exc.partial = ExtractionResult(None, diag, oracle.n_queries)
                exc.args = (f"{exc.args[0]} Recovered so far: nothing (the moment route needs all its "
                            f"samples).{_budget_hint(auto_budget, d)}",)
                raise
    finally:
        if bar is not None:
            bar.close()
    diag["queries"] = oracle.n_queries
    diag["model_calls"] = oracle.n_calls
    diag["seconds"] = time.perf_counter() - t0
    diag["max_queries"] = budget
    declared = getattr(model, "n_hidden", None)
    passed = diag.get("certificate", {}).get("passed", False)
    sizes = getattr(model, "hidden_sizes", None)
    found = list(net.hidden_sizes) if hasattr(net, "hidden_sizes") else [int(getattr(net, "n_hidden", 0) or 0)]
    if sizes is not None and passed and len(sizes) == len(found):
        # a loaded file declares its widths: neurons the queries cannot see are counted per layer
        diag["declared_hidden_sizes"] = [int(w) for w in sizes]
        diag["unidentifiable_per_layer"] = [max(0, int(w) - f) for w, f in zip(sizes, found)]
    if isinstance(declared, numbers.Integral) and not isinstance(declared, bool) and passed \
            and isinstance(diag.get("n_hidden", 0), numbers.Integral) and (k is None or diag.get("n_hidden", 0) < k):
        # a loaded file declares its width: the units the queries cannot see are counted, not guessed
        diag["declared_n_hidden"] = int(declared)
        if int(declared) > diag.get("n_hidden", 0) and "unidentifiable_units" not in diag:
            diag["unidentifiable_units"] = int(declared) - int(diag["n_hidden"])
    if region is not None:
        diag["query_region"] = region
    return ExtractionResult(net, diag, oracle.n_queries)


def _check_depth(depth: Any) -> int | None:
    if isinstance(depth, str):
        if depth != "auto":
            raise InputError(f"depth must be a positive int or 'auto', got {depth!r}.")
        return None
    return check_positive_int(depth, "depth")


def _critical_points(oracle, d, gen, k, widths, depth, scale, rad, pat, n_cert, sign_limit, out_range, log, bar,
                     auto_budget, t0):
    """The chosen-query route: one hidden layer (:class:`CriticalPointExtractor`) or any depth
    (:class:`DeepExtractor`).

    With ``depth="auto"`` the one-hidden-layer extractor runs first (the common case, and the cheaper
    search); when it finds no unit on a hyperplane, or its certificate fails, or the linear part is not
    made of flipped units, the box has more than one hidden layer (or missed units) and the layer-by-layer
    extractor continues on the same query counter and budget, with the noise already measured.
    """
    attempt = None
    noise = None
    first = None
    if depth is None or depth == 1:
        runner = CriticalPointExtractor(oracle, d, gen, n_hidden=k, input_scale=scale, radius=rad,
                                        patience=pat, n_certify=n_cert, milp_time_limit=sign_limit,
                                        output_range=out_range, log=log, give_up_off_plane=depth is None)
        try:
            if depth == 1:
                return runner.run()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    net, diag = runner.run()
                    # a linear part kept as flagged unit pairs is an exact one-hidden-layer answer
                    ok = bool(diag["certificate"]["passed"])
                    why = "" if ok else "certificate failed"
                    first = (net, diag, list(caught))
                except AssumptionError as exc:
                    ok, why, first = False, str(exc), None
            if ok:
                for w in caught:
                    warnings.warn(w.message, w.category, stacklevel=4)
                return net, diag
            noise = runner.noise
            attempt = {"queries": oracle.n_queries, "reason": why, "lines": len(runner.lines)}
            if log:
                log(f"one hidden layer does not explain the box ({why}); extracting layer by layer")
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
                        f"'{runner.stage}'.{_budget_hint(auto_budget, d)}",)
            raise

    def on_layer(layer):
        if bar is not None:
            bar.set_description(f"extract layer {layer}")
    deep = DeepExtractor(oracle, d, gen, depth=depth, widths=widths, input_scale=scale, radius=rad, patience=pat,
                         n_certify=n_cert, sign_time_limit=sign_limit, output_range=out_range, noise=noise,
                         log=log, on_layer=on_layer)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                weights, biases, diag = deep.run()
            except AssumptionError:
                if first is None:
                    raise
                weights = None
        deep_error = np.inf if weights is None else diag["certificate"]["relative_error"]
        if first is not None and not deep_error < first[1]["certificate"]["relative_error"]:
            # neither explains the box: the one-hidden-layer result, which fits it better, is returned
            # with its own warnings (a one-hidden-layer box with a unit missed, rather than a deeper one)
            net, diag, first_caught = first
            for w in first_caught:
                warnings.warn(w.message, w.category, stacklevel=4)
            diag["deep_attempt"] = {"queries": oracle.n_queries - attempt["queries"],
                                    "relative_error": deep_error}
            return net, diag
        for w in caught:
            warnings.warn(w.message, w.category, stacklevel=4)
    except QueryBudgetError as exc:
        diag = dict(deep.diag)
        diag.update(complete=False, stage=deep.stage, queries=oracle.n_queries, model_calls=oracle.n_calls,
                    seconds=time.perf_counter() - t0, widths=deep.found_widths(), layers=deep.layer_info,
                    partial_layers=deep.partial_layers(), one_layer_attempt=attempt)
        exc.partial = ExtractionResult(None, diag, oracle.n_queries)
        exc.args = (f"{exc.args[0]} Recovered so far: neurons per hidden layer {deep.found_widths()} (orientation "
                    f"of the last layer unresolved; in diagnostics_['partial_layers']), stage '{deep.stage}'."
                    f"{_budget_hint(auto_budget, d)}",)
        raise
    net = DeepNetwork(weights, biases).canonical()
    if net.depth == 1:
        net = net.to_two_layer()
        diag["n_hidden"] = int(net.n_hidden)
    diag["one_layer_attempt"] = attempt
    return net, diag


def _budget_hint(auto_budget: bool, d: int) -> str:
    if not auto_budget:
        return ""
    return (f" This was the default budget (max_queries='auto' = {default_budget(d):,} for d = {d}), far above "
            "what a one-hidden-layer ReLU network of this size needs: the search is not converging. Usual "
            "causes: outputs much noisier on the long search lines than at the query scale (e.g. saturating "
            "probabilities: lower input_scale), or a model that is not piecewise linear. Give max_queries "
            "(--max-queries) a larger number, or None ('none') for no budget, to search on.")
