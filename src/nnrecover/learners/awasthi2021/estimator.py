"""The estimator :class:`HermiteTensorLearner` of Awasthi, Tang, Vijayaraghavan (2021), and the
module-level entry points that wire the stages of the package together (symbol table: the package
docstring of :mod:`nnrecover.learners.awasthi2021`)."""

from __future__ import annotations

import math
import time
import warnings
from numbers import Integral, Real
from typing import Any

import numpy as np

from ..._validation import Interval, Options, check_random_state
from ...errors import AssumptionError, AssumptionWarning, InputError
from ...network import TwoLayerNetwork
from .coefficients import HermiteCoefficients, estimate_coefficients, exact_coefficients, min_samples
from .decompose import (HermiteRecovery, Thresholds, adaptive_thresholds, algorithm1, algorithm4,
                                 algorithm6, complete_units, paper_thresholds)
from .identifiability import (adversarial_weights, claim48_instance, flip_units, hermite_separation,
                                       khatri_rao_smin, sign_flip_sets, smoothed_instance)
from .regression import (RegressionResult, algorithm5_regression, consolidate, linear_correction,
                                  population_regression, relu_features)
from .polish import hermite_loss_polish, truncated_hermite_loss
from .reduce import UnitReduction, nonlinear_part, reduce_network
from .scalars import RecoveredScalars, SignFix, fix_signs, gram_lstsq, recover_scalars
from .._registry import register
from ..base import BaseLearner

__all__ = ["HermiteTensorLearner", "hermite_coefficients", "HermiteCoefficients", "algorithm1", "algorithm4",
           "algorithm5", "algorithm6", "recover_scalars", "fix_signs", "gram_lstsq", "RecoveredScalars", "SignFix",
           "HermiteRecovery", "Thresholds", "adaptive_thresholds", "paper_thresholds", "algorithm5_regression",
           "population_regression", "consolidate", "linear_correction", "relu_features",
           "RegressionResult", "sign_flip_sets", "flip_units", "claim48_instance", "smoothed_instance",
           "khatri_rao_smin", "adversarial_weights", "hermite_separation", "order_limit", "min_samples",
           "hermite_loss_polish", "reduce_network", "UnitReduction", "nonlinear_part", "hermite_fit",
           "HERMITE_FIT_MEANING", "residual_lack_of_fit", "RESIDUAL_FIT_MEANING"]


def order_limit(d: int, order: int) -> int:
    """Largest ``m`` the learner accepts at order ``l``: ``d`` for ``l = 1`` (full rank, Theorem 3.1);
    ``floor(0.9 C(d + 1, 2))`` for ``l = 2`` (``{w_i^{(x)2}}`` must be robustly independent, which needs
    ``m <= C(d + 1, 2)``; Corollary 3.3 needs ``m <= (1 - delta) C(d + l - 1, l)``)."""
    if order == 1:
        return int(d)
    return int(math.floor(0.9 * math.comb(d + order - 1, order)))


def _check_order(order: Any, m: int, d: int) -> int:
    if order == "auto":
        order = 1 if m <= d else 2
    if order not in (1, 2):
        raise InputError(f"order must be 'auto', 1 or 2, got {order!r}.")
    limit = order_limit(d, order)
    if m > limit:
        if order == 1:
            raise AssumptionError(
                f"order 1 is the full-rank setting of Awasthi et al. 2021 (Theorem 3.1: s_m(W) > 0 needs "
                f"m <= d), but n_hidden = {m} > d = {d}; use order=2 (overcomplete, m up to {order_limit(d, 2)}).")
        raise AssumptionError(
            f"order 2 needs {{w_i (x) w_i}} linearly independent, robustly (Theorem 3.2 / Corollary 3.3: "
            f"m <= (1 - delta) C(d+1, 2)); supported up to 0.9 C(d+1, 2) = {limit} for d = {d}, got "
            f"n_hidden = {m}.")
    return int(order)


def hermite_coefficients(source: Any, order: int, n_hidden: int, **options) -> HermiteCoefficients:
    """Hermite coefficient tensors ``T_0, ..., T_{2l+2}`` in the learner's working coordinates.

    ``source`` is a :class:`~nnrecover.TwoLayerNetwork` (exact, Lemma 3.5) or data
    (``(X, Y)``, dask arrays, a SampleStream...; eq. (6) estimates). For ``l = 1`` the tensors of order
    ``>= 2`` are projected onto the ``m``-dimensional range of ``T_2``. ``options`` go to
    :func:`~nnrecover.learners.awasthi2021.coefficients.estimate_coefficients` (samples) or
    :func:`~nnrecover.learners.awasthi2021.coefficients.exact_coefficients` (``basis``).
    """
    if isinstance(source, TwoLayerNetwork):
        return exact_coefficients(source, order, n_hidden, basis=options.pop("basis", "range" if order == 1
                                                                              else "identity"), **options)
    return estimate_coefficients(source, order, n_hidden, **options)


def algorithm5(data: Any, n_hidden: int, *, order: int | str = "auto", thresholds: Any = "adaptive",
               feature_map: str = "reduced", solver: str = "exact", epsilon: float = 1e-2, rng=None,
               control_variate: bool = True, **options) -> tuple[RegressionResult, HermiteRecovery]:
    """Algorithm 5 as printed: tensors from the first half of the samples (even rows of every chunk),
    Algorithm 4, then regression on the second half and consolidation (Claim D.14).

    Returns the regression result (its ``network`` has at most ``|S| + 2 <= m + 2`` units) and the
    Algorithm 4 output ``S``. ``control_variate`` goes to
    :func:`~nnrecover.learners.awasthi2021.coefficients.estimate_coefficients` (False: the paper's plain
    estimator); ``options`` go to :func:`algorithm4`.
    """
    from ...data import as_data_source

    gen = check_random_state(rng)
    source = as_data_source(data)
    if not source.info.reiterable:
        raise InputError("Algorithm 5 reads the data twice (tensors, then regression); pass a re-iterable source.")
    d = source.n_inputs
    if d is None:
        raise InputError("Algorithm 5 needs a source with a known number of inputs (arrays or a SampleStream).")
    order = _check_order(order, int(n_hidden), int(d))
    first_half = _RowsSource(source, 0)
    coeffs = estimate_coefficients(first_half, order, n_hidden, rng=gen, control_variate=control_variate)
    th = _make_thresholds(thresholds, coeffs, order, n_hidden, epsilon, options.pop("bound", None))
    rec = algorithm4(coeffs, order, n_hidden, thresholds=th, rng=gen, **options)
    if rec.n_units == 0:
        raise AssumptionError("Algorithm 4 recovered no unit above the noise: more samples are needed.")
    reg = algorithm5_regression(source, (rec.a, rec.b, rec.W), feature_map=feature_map, rows="second_half",
                                epsilon=epsilon, n_hidden=n_hidden, solver=solver)
    return reg, rec


class _RowsSource:
    """The even (``parity = 0``) or odd rows of every chunk of a source (re-iterable)."""

    def __init__(self, source, parity: int):
        self.source, self.parity = source, parity

    def __iter__(self):
        for X, Y in self.source.chunks():
            yield X[self.parity::2], Y[self.parity::2]


def _make_thresholds(spec: Any, coeffs: HermiteCoefficients, order: int, m: int, epsilon: float | None,
                     bound: float | None, snr: float = 3.0, dedup: float = 0.25) -> Thresholds:
    if isinstance(spec, Thresholds):
        return spec
    if spec == "adaptive":
        return adaptive_thresholds(coeffs, order, snr=snr, dedup=dedup)
    if spec == "paper":
        if epsilon is None or bound is None:
            raise InputError("thresholds='paper' needs epsilon (target accuracy) and bound (B of the "
                             "B-boundedness assumption).")
        from scipy import linalg

        from ...tensor import flatten

        # s_m(W^{(.)l}) is not observable; flatten(f^_{2l}, l, l) = W^{(.)l} D W^{(.)l T} with
        # |D_ii| <= B sqrt((2l-2)!) / sqrt(2 pi) (Cramer's bound, Claim D.8) gives the estimate below
        sv = linalg.svdvals(flatten(coeffs.tensor(2 * order), order, order))
        s_m = sv[min(m, sv.size) - 1]
        cramer = bound * math.sqrt(math.factorial(2 * order - 2)) / math.sqrt(2 * math.pi)
        s_min = math.sqrt(max(s_m, 1e-300) / cramer)
        return paper_thresholds(epsilon, bound, m, order, min(s_min, 1.0))
    if isinstance(spec, dict):
        missing = {"eta1", "eta2", "eta3"} - set(spec)
        if missing:
            raise InputError(f"a thresholds dict needs the keys eta1, eta2, eta3; missing {sorted(missing)}.")
        Ks = (2 * order + 1, 2 * order + 2)
        as_dict = lambda v: dict(v) if isinstance(v, dict) else {K: float(v) for K in Ks}  # noqa: E731
        return Thresholds(as_dict(spec["eta1"]), as_dict(spec["eta2"]), float(spec["eta3"]),
                          {K: float("nan") for K in Ks}, "user", None)
    raise InputError(f"thresholds must be 'adaptive', 'paper', a dict of eta1/eta2/eta3 or a Thresholds, "
                     f"got {spec!r}.")


class HermiteTensorLearner(BaseLearner):
    """Learn a one-hidden-layer ReLU network with biases by Hermite tensor decomposition
    (Awasthi, Tang, Vijayaraghavan 2021).

    Pipeline: Hermite coefficient tensors (streamed; for order 1 projected onto the range of ``T_2``)
    -> Algorithm 4 (Jennrich on both ``T_{2l+1}`` and ``T_{2l+2}``, so biases at Hermite roots are
    handled; rank selection, per-unit SNR filter, deduplication up to sign) -> RECOVERSCALARS ->
    FIXSIGNS (order 1: Algorithm 6) -> the paper's output network -> optional shared refinement.

    The paper's output network (``provable_network_``) is

    * order 1, every one of the ``m`` units recovered and every sign decided by FIXSIGNS beyond its
      noise (``|z_i| > 3 std``, counting the leak of the other units' direction errors): the
      Algorithm 6 parameters (``m`` units);
    * otherwise (some units undetectable, e.g. ``|b_i|`` large; a sign that ``T_1`` cannot decide,
      e.g. ``b_i`` strongly negative so that ``Phi(b_i)`` is below the noise; or order 2, where the
      signs ``xi_i`` are unidentifiable): the recovered units plus a linear part -- Algorithm 5's
      regression, or for order 1 its closed-form version -- consolidated into at most ``m' + 2``
      units (Claim D.14; the constant goes to the output bias). The linear part absorbs a wrong sign
      exactly, since ``relu(t) - relu(-t) = t``.

    The returned network (``network_``) has at most ``n_hidden`` units whenever the fitted function
    allows it (:func:`reduce_network`): units that are constant, never or always active or carry no
    output weight are folded into the linear part (Lemma D.13), units on one line are merged, and the
    linear part is explained by sign flips, ``relu(z) = z + relu(-z)``: the flip set ``F`` solves
    ``sum_{i in F} a_i w_i = -v`` (Theorem 3.4, corrected eq. (2)), a unique 0/1 solution when the
    ``a_i w_i`` are independent (full-rank ``W``), else every solution is found and reported
    (``diagnostics_["sign_flip_sets"]``, :class:`~nnrecover.errors.AssumptionWarning`). The rewrite may
    change the function by at most its accuracy (round-off with exact coefficients; the estimation error
    of the refinement on samples), and a rewrite that changed it is refined again. When more units
    remain, an ``n_hidden``-unit version is refitted and kept unless worse on held-out rows (refinement
    only); otherwise the ``unit_count`` certificate fails and says why.

    Parameters
    ----------
    n_hidden : int
        ``m``, the number of hidden units of the teacher (an upper bound works: fewer units are
        returned when fewer are detected).
    order : {"auto", 1, 2}
        ``l``: 1 (full rank, ``m <= d``) or 2 (overcomplete, ``m <= 0.9 C(d+1, 2)``); "auto" picks 1 when
        ``m <= d``.
    refine : bool, default True
        Polish the paper's output and keep the better on held-out rows: first the Hermite-loss polish
        (:func:`hermite_loss_polish`: Prop. B.1's loss truncated at order ``2l + 2``, fitted to the
        estimated tensors, no pass over the data), then :func:`nnrecover.refine.refine_network` on the
        samples from the polished network. False returns the paper's output.
    refine_options : dict, optional
        Keyword arguments of :func:`nnrecover.refine.refine_network`.
    thresholds : {"adaptive", "paper"} or dict or Thresholds
        "adaptive" (default): split-sample spectral noise ``sigma^_K``, ``eta_1 = eta_2 = snr_threshold
        sigma^_K``; "paper": the Theorem D.1 chain (needs ``epsilon`` and ``bound``); a dict
        ``{"eta1", "eta2", "eta3"}`` of absolute values.
    snr_threshold : float, default 1.5
        Multiple of the split-sample spectral noise ``sigma^_K`` used by the adaptive thresholds
        ``eta_1 = eta_2``: singular values that pure noise produces are at most ``||E|| ~ sigma^_K``
        (which the split estimate gets within about 25%), while a signal singular value above the
        noise norm is already separated from it, so 1.5 keeps every detectable term (the spec's 3 was
        measured to lose units at N = 10^6, d = 10).
    scalar_snr : float, default 3
        From samples, units whose output weight ``a~`` has a predicted relative error above
        ``1 / scalar_snr`` (the standard deviation of the Gram solutions ``zeta_j``, from their spread
        over 8 row groups, propagated through RECOVERSCALARS, which amplifies it like
        ``|b| exp(b^2/2)``) are left to the linear part.
    dedup_threshold : float, default 0.25
        ``eta_3``: largest l2 distance (up to sign) for two candidates to be the same unit.
    epsilon, bound : float, optional
        Target accuracy and ``B`` for ``thresholds="paper"`` (``epsilon`` also sets Algorithm 5's
        truncation radius, default 1e-2).
    max_bias : float, default 4.0
        Recovered units with ``|b| > max_bias`` are left to the linear part (RECOVERSCALARS amplifies their noise by ``exp(b^2/2)``).
    decomposer : {"joint", "jennrich"}
        "joint" (default): Jennrich's pencil, then least squares over all slices; "jennrich": the
        paper's single pencil.
    n_draws : int, default 5
        Random slice pairs per Jennrich call.
    output : {"auto", "parameters", "regression"}
        Which network is the paper's output: "auto" as above; "parameters": the recovered units alone
        (raises if none); "regression": always the units plus a linear part (see ``linear_part``).
    linear_part : {"auto", "closed_form", "regression"}
        How the units are completed into a low-L2 network when not every unit was recovered:
        "regression" is Algorithm 5 (least squares on the unit features, ``x`` and 1 over the data,
        one more pass); "closed_form" adds the best linear fit of the residual,
        ``(T_1 - sum a~ Phi(b~) w~)^T x + T_0 - sum a~ c_0(b~)`` (exact when the residual is linear;
        needs the signs, so order 1 only; no pass over the data). "auto": closed form for order 1,
        regression for order 2.
    feature_map : {"reduced", "coordinated", "general"}
        Algorithm 5 features.
    regression_rows : {"all", "second_half"}
        Rows of the Algorithm 5 regression; the paper uses the half not used for the tensors.
    range_method : {"auto", "full", "sketch"}
        How order 1 finds the range of ``T_2``: the ``d x d`` matrix, or a randomized sketch with
        ``m + 5`` columns and three power iterations (four passes); "auto" takes the full matrix when
        it costs no more (``d <= 16 (m + 5)``), else the sketch.
    control_variate : bool, default True
        Order 1: estimate ``T_3``, ``T_4`` from the residual ``y - p(x)`` of the first pass's fit ``p``
        of the orders 0-2 (whose Hermite coefficients above order 2 vanish) -- the expectation of the
        paper's eq. (6) up to an ``O(1/N)`` in-sample bias, a much smaller variance (a ReLU network keeps
        most of ``E[y^2]`` in its orders 0-2); ``T_0 .. T_2`` stay the plain estimates. False: the
        paper's plain estimator throughout. Order 2 (one pass) always uses the plain estimator.
    chunk_size : int, optional
        Rows per chunk when streaming arrays.
    check_inputs : bool, default True
        Warn (:class:`~nnrecover.errors.AssumptionWarning`) when the inputs look far from N(0, I).
    input_tolerance : float, default 0.1
        Deviation tolerated (on top of the sampling fluctuation) before warning.
    min_n : int, optional
        Minimum number of samples (default: ten per distinct entry of ``T_{2l+2}`` in the working space,
        at least 1000).
    random_state : int, Generator or None

    Attributes
    ----------
    network_ : TwoLayerNetwork
        The returned network (refined if ``refine`` and better on held-out data).
    provable_network_ : TwoLayerNetwork
        The paper's output.
    units_ : HermiteRecovery
        The units recovered by Algorithm 4 / 6 / 1 (order 2: ``(a_i, xi_i b_i, xi_i w_i)``).
    coefficients_ : HermiteCoefficients
        The Hermite tensors used.
    order_ : int
    hidden_weights_, n_features_in_, n_outputs_ : see :class:`~nnrecover.learners.base.BaseLearner`.
    diagnostics_ : dict
        ``per_unit_snr``, ``unit_source`` (tensor that supplied each unit), ``also_in``, ``ranks``,
        ``jennrich`` (gaps, conditioning per tensor), ``noise``, ``thresholds``, ``units_recovered``,
        ``units_left_to_linear_part``, ``dropped_units``, ``fixsigns``, ``output`` (which network),
        ``regression``, ``input_deviation``, ``timings``, ``refinement``, ``unit_reduction`` (what
        :func:`reduce_network` folded, merged and flipped, its L2 change and budget, ``reason`` when more
        than ``n_hidden`` units remain, ``refit``/``forced_refit``), ``sign_flip_sets`` (when several flip
        sets give the same function), ``certificates``: ``unit_count`` and ``hermite_fit``
        (:func:`hermite_fit`), each ``{"passed", "detail", "meaning"}``, the meaning saying in words what
        it bounds; a failed one warns with :class:`~nnrecover.errors.CertificateWarning`.

    Examples
    --------
    >>> import nnrecover as nr
    >>> teacher = nr.random_network(6, 3, rng=0, bias_range=(-1, 1))
    >>> learner = nr.learners.HermiteTensorLearner(3, refine=False).fit_population(teacher)
    >>> nr.metrics.parameter_error(learner.network_, teacher)["max_unit_error"] < 1e-9
    True
    """

    _supports_population = True

    def __init__(self, n_hidden: int, *, order: "int | str" = "auto", refine: bool = True,
                 refine_options: dict | None = None, thresholds: Any = "adaptive", snr_threshold: float = 1.5,
                 scalar_snr: float = 3.0,
                 dedup_threshold: float = 0.25, epsilon: float | None = None, bound: float | None = None,
                 max_bias: float = 4.0, decomposer: str = "joint", n_draws: int = 5, output: str = "auto",
                 linear_part: str = "auto", feature_map: str = "reduced", regression_rows: str = "all",
                 range_method: str = "auto", control_variate: bool = True,
                 chunk_size: int | None = None, check_inputs: bool = True, input_tolerance: float = 0.1,
                 min_n: int | None = None, random_state=None):
        self.n_hidden = n_hidden
        self.order = order
        self.refine = refine
        self.refine_options = refine_options
        self.thresholds = thresholds
        self.snr_threshold = snr_threshold
        self.scalar_snr = scalar_snr
        self.dedup_threshold = dedup_threshold
        self.epsilon = epsilon
        self.bound = bound
        self.max_bias = max_bias
        self.decomposer = decomposer
        self.n_draws = n_draws
        self.output = output
        self.linear_part = linear_part
        self.feature_map = feature_map
        self.regression_rows = regression_rows
        self.range_method = range_method
        self.control_variate = control_variate
        self.chunk_size = chunk_size
        self.check_inputs = check_inputs
        self.input_tolerance = input_tolerance
        self.min_n = min_n
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    _parameter_constraints = {
        "order": [Options("auto", 1, 2)],
        "thresholds": [Options("adaptive", "paper"), Thresholds],
        "snr_threshold": [Interval(Real, 0, None, closed="neither")], "scalar_snr": [Interval(Real, 0, None, closed="neither")], "dedup_threshold": [Interval(Real, 0, None, closed="neither")],
        "max_bias": [Interval(Real, 0, None, closed="neither")], "input_tolerance": [Interval(Real, 0, None, closed="neither")],
        "epsilon": [None, Interval(Real, 0, None, closed="neither")], "bound": [None, Interval(Real, 0, None, closed="neither")],
        "decomposer": [Options("joint", "jennrich")],
        "n_draws": [Interval(Integral, 1, None)],
        "output": [Options("auto", "parameters", "regression")],
        "linear_part": [Options("auto", "closed_form", "regression")],
        "feature_map": [Options("reduced", "coordinated", "general")],
        "regression_rows": [Options("all", "second_half")],
        "range_method": [Options("auto", "full", "sketch")],
        "control_variate": ["boolean"], "check_inputs": ["boolean"],
        "chunk_size": [None, Interval(Integral, 1, None)], "min_n": [None, Interval(Integral, 1, None)],
    }

    # ------------------------------------------------------------------ fitting
    def _fit(self, source, rng: np.random.Generator, diagnostics: dict) -> TwoLayerNetwork:
        if source.n_outputs not in (None, 1):
            raise InputError(f"HermiteTensorLearner learns one output (Awasthi et al. 2021); Y has "
                             f"{source.n_outputs} columns: fit one learner per column.")
        m = int(self.n_hidden)
        source, d = _peek_source(source, self.order)
        order = _check_order(self.order, m, d)
        t0 = time.perf_counter()
        coeffs = estimate_coefficients(source, order, m, range_method=self.range_method, chunk_size=self.chunk_size,
                                       rng=rng, check_inputs=self.check_inputs,
                                       input_tolerance=self.input_tolerance, min_n=self.min_n,
                                       control_variate=self.control_variate)
        diagnostics["timings"] = {"moments": time.perf_counter() - t0}
        return self._finish(coeffs, order, source, None, rng, diagnostics)

    def _fit_population(self, truth: TwoLayerNetwork, rng: np.random.Generator, diagnostics: dict,
                        **kwargs) -> TwoLayerNetwork:
        if kwargs:
            raise InputError(f"fit_population takes no options, got {sorted(kwargs)}.")
        if truth.n_outputs != 1:
            raise InputError(f"HermiteTensorLearner learns one output; truth has {truth.n_outputs}.")
        m = int(self.n_hidden)
        order = _check_order(self.order, m, truth.n_inputs)
        t0 = time.perf_counter()
        coeffs = exact_coefficients(truth, order, m, basis="range" if order == 1 else "identity")
        diagnostics["timings"] = {"moments": time.perf_counter() - t0}
        return self._finish(coeffs, order, None, truth, rng, diagnostics)

    def _finish(self, coeffs: HermiteCoefficients, order: int, source, truth, rng, diagnostics) -> TwoLayerNetwork:
        m = int(self.n_hidden)
        t0 = time.perf_counter()
        th = _make_thresholds(self.thresholds, coeffs, order, m, self.epsilon, self.bound,
                              snr=float(self.snr_threshold), dedup=float(self.dedup_threshold))
        opts = dict(thresholds=th, rng=rng, n_draws=self.n_draws, decomposer=self.decomposer,
                    max_bias=float(self.max_bias) if not coeffs.exact else np.inf,
                    scalar_snr=float(self.scalar_snr) if not coeffs.exact else 0.0)
        rec = algorithm6(coeffs, m, **opts) if order == 1 else algorithm4(coeffs, order, m, **opts)
        diagnostics["timings"]["tensor_stage"] = time.perf_counter() - t0
        self.coefficients_ = coeffs
        self.units_ = rec
        self.order_ = order
        self._record_units(coeffs, rec, order, m, diagnostics)

        t1 = time.perf_counter()
        provable, out = self._output_network(rec, coeffs, order, source, truth)
        diagnostics.update(out)
        diagnostics["timings"]["output_stage"] = time.perf_counter() - t1
        self.provable_network_ = provable
        diagnostics["provable_network_units"] = provable.n_hidden
        start = provable
        if self.refine and not coeffs.exact and rec.n_units:
            # Hermite-loss polish (Prop. B.1 truncated at order 2l + 2): moment space, no data pass. It
            # starts from every detected unit, also those whose scalars were too inaccurate for the
            # paper's output: the joint fit repairs scalars, which the refinement needs for all m units
            t2 = time.perf_counter()
            base = _with_inaccurate_units(rec, coeffs, m)
            polished, report = hermite_loss_polish(coeffs, base, order, m)
            max_bias = float(self.max_bias)
            if not _detectable(polished, max_bias):
                # the moment fit drove a unit to |b| > max_bias (or a non-finite value): such a unit is
                # nearly never active (b < -max_bias) or nearly linear (b > max_bias), i.e. its orders >= 2
                # are below the noise, and fitting noise with it degenerates (|a| -> inf, |b| -> inf);
                # keep the provable units
                report["kept"] = "start"
                report["rejected"] = f"a polished unit has |b| > max_bias = {max_bias:g} or is not finite"
            if order == 1 and base.n_units < m:
                # undetected units: try m units (the missing ones from forced-rank decompositions) against
                # the units + linear part, and keep the smaller truncated Hermite loss -- unless a completed
                # unit ends up undetectable itself (|b| > max_bias: a rarely active unit fitted to noise,
                # which the samples cannot correct either)
                alt = complete_units(coeffs, base, order, m, rng=rng, n_draws=self.n_draws, max_bias=max_bias)
                if alt is not None:
                    alt_pol, alt_rep = hermite_loss_polish(coeffs, alt, order, m)
                    loss_lin = report.get("full_fit", {}).get("loss_end", np.inf)
                    if report.get("kept") != "polished":  # compare with what is kept: the provable units
                        loss_lin = truncated_hermite_loss(coeffs, base, order, linear_part=True)
                    loss_alt = alt_rep.get("full_fit", {}).get("loss_end", np.inf)
                    plausible = _detectable(alt_pol, max_bias)
                    chosen = bool(plausible and loss_alt < loss_lin)
                    report["completion"] = {"units_added": alt.n_units - base.n_units, "loss_linear_part": loss_lin,
                                            "loss_completed": loss_alt, "completed_units_detectable": plausible,
                                            "chosen": chosen}
                    if chosen:
                        polished = alt_pol
                        report["kept"] = "polished"
            report["time"] = time.perf_counter() - t2
            diagnostics["hermite_polish"] = report
            if report.get("kept") == "polished":
                start, _ = self._output_network(polished, coeffs, order, source, truth)
        else:
            diagnostics["hermite_polish"] = {"ran": False, "reason": "refine=False" if not self.refine else
                                             "exact coefficients" if coeffs.exact else "no unit"}
        fitted = self._maybe_refine(start, source, rng, diagnostics)
        out = self._reduce(fitted, coeffs, source, rng, diagnostics)
        self._certify_output(out, coeffs, order, source, diagnostics)
        return out

    def _certify_output(self, net: TwoLayerNetwork, coeffs: HermiteCoefficients, order: int, source,
                        diagnostics: dict) -> None:
        """Certificates of the returned network (``diagnostics_["certificates"]``, each with a ``meaning``).

        * ``unit_count``: at most ``n_hidden`` hidden units.
        * ``hermite_fit``: the exact Hermite coefficients ``g^_k`` of the returned network (Lemma 3.5)
          agree with the data's ``T_1``, ``T_3 .. T_{2l+2}`` within three times their noise.
        * ``residual_fit`` (samples, re-iterable sources): :func:`residual_lack_of_fit`.
        """
        m = int(self.n_hidden)
        red = diagnostics.get("unit_reduction", {})
        self._certify("unit_count", net.n_hidden <= m,
                      {"n_units": net.n_hidden, "n_hidden": m, "reason": red.get("reason", "")}, diagnostics)
        diagnostics["certificates"]["unit_count"]["meaning"] = (
            "the returned network has at most n_hidden hidden units. It fails when the fitted function needs "
            "more: a linear part that no sign-flip set explains (Theorem 3.4) and that two extra units carry "
            "(Claim D.14), e.g. units of the teacher that were not found; diagnostics_['unit_reduction'] "
            "gives the reason")
        if net.n_hidden < m:
            # fewer units than asked: the data determine only these (the others were folded into the
            # linear part, dropped as never active or constant, or merged); not an error, but said
            items = [*(diagnostics.get("dropped_units") or []), *(red.get("folded") or [])]
            dropped = "; ".join(str(f.get("reason", f)) if isinstance(f, dict) else str(f) for f in items) or \
                str(red.get("reason") or "merged or folded units")
            warnings.warn(f"{type(self).__name__}: returned {net.n_hidden} hidden unit(s) of the n_hidden = {m} "
                          f"asked: the data determine no more ({dropped}); see diagnostics_['unit_reduction'].",
                          AssumptionWarning, stacklevel=4)
        detail = hermite_fit(net, coeffs, order)
        self._certify("hermite_fit", detail["passed"], detail, diagnostics)
        diagnostics["certificates"]["hermite_fit"]["meaning"] = HERMITE_FIT_MEANING
        if source is not None and source.info.reiterable:
            detail = residual_lack_of_fit(net, source, chunk_size=self.chunk_size)
            self._certify("residual_fit", detail["passed"], detail, diagnostics)
            diagnostics["certificates"]["residual_fit"]["meaning"] = RESIDUAL_FIT_MEANING

    def _reduce(self, fitted: TwoLayerNetwork, coeffs: HermiteCoefficients, source, rng,
                diagnostics: dict) -> TwoLayerNetwork:
        """At most ``n_hidden`` units whenever the function allows it (:func:`reduce_network`): fold
        linearisable units (Lemma D.13), merge units on one line, resolve sign flips against the linear
        part (Theorem 3.4, corrected eq. (2)); warn when more units remain or the flip set is not unique.

        A rewrite that changed the function by more than round-off (noisy data: within the estimation
        error) is refined again on the samples when the refinement ran, so that the returned ``n_hidden``
        units are themselves a least-squares fit."""
        m = int(self.n_hidden)
        refinement = diagnostics.get("refinement", {})
        atol, basis = _reduction_budget(fitted, coeffs, refinement)
        red = reduce_network(fitted, m, atol=atol)
        info = red.as_dict()
        info["budget_basis"] = basis
        info["units_before"] = fitted.n_hidden
        diagnostics["unit_reduction"] = info
        out = red.network
        from ...metrics import relu_second_moment

        can_refit = bool(refinement.get("ran") and source is not None and source.info.reiterable)
        if can_refit and red.within_limit and red.l2_change > 1e-8 * math.sqrt(relu_second_moment(fitted)):
            from ...refine import refine_network

            again = refine_network(out, source, rng=rng, **self._refine_kwargs())
            info["refit"] = again.as_dict()
            out = again.network
        elif can_refit and not red.within_limit:
            forced = reduce_network(fitted, m, atol=atol, force=True)
            test = self._refit_paired(forced.network, fitted, source, rng)
            test["forced"] = forced.forced
            test["flipped"] = forced.flip.get("flipped")
            info["forced_refit"] = test
            if test["accepted"]:
                red = forced
                info.update(forced.as_dict())
                out = test.pop("network")
            else:
                test.pop("network")
                red.reason += (f"; refitted with {m} units it is worse on held-out rows (mean squared "
                               f"error {test['holdout_mse_candidate']:.3g} vs {test['holdout_mse_fitted']:.3g}, "
                               f"paired z = {test['z']:.1f})")
        flip = red.flip
        if red.within_limit and flip.get("unique") is False:
            sets = [flip["flipped"]] + flip["alternatives"]
            diagnostics["sign_flip_sets"] = sets
            warnings.warn(
                f"HermiteTensorLearner: {len(sets)} sign-flip sets {sets[:6]} give {m}-unit networks with the "
                f"same function up to a constant (Theorem 3.4: the flips differ on sets F with sum_F a_i w_i = 0, "
                f"possible when the w_i are linearly dependent); returned the one with the smallest output bias.",
                AssumptionWarning, stacklevel=4)
        elif red.within_limit and flip.get("unique") is None and flip.get("flipped"):
            # flips were needed and found by rounding; with no linear part to explain, the empty flip set is
            # kept without a word (a generic network has no subset F with sum_F a_i w_i = 0)
            diagnostics["sign_flip_sets"] = [flip["flipped"]]
            warnings.warn(
                f"HermiteTensorLearner: the sign flips were resolved by rounding the minimum-norm solution; the "
                f"null space of [a_i w_i] has dimension {flip['null_dimension']}, too large to check that no other "
                f"flip set explains the linear part (Theorem 3.4).", AssumptionWarning, stacklevel=4)
        info["reason"] = red.reason if not red.within_limit else ""
        return out

    def _refit_paired(self, candidate: TwoLayerNetwork, fitted: TwoLayerNetwork, source, rng) -> dict:
        """Refine ``candidate`` and ``fitted`` on the training share of the samples and compare them on the
        held-out share (:func:`_paired_holdout`)."""
        from ...refine import gather_samples, refine_network

        kwargs = self._refine_kwargs()
        frac = float(kwargs.pop("holdout_fraction", 0.2)) or 0.2
        X, Y, _ = gather_samples(source, int(kwargs.pop("max_samples", 200_000)), rng=rng)
        n_hold = max(int(round(frac * X.shape[0])), 1)
        perm = rng.permutation(X.shape[0])
        hold, train = perm[:n_hold], perm[n_hold:]
        # both networks are refined on the same training rows and compared as refined (the start of
        # ``fitted`` was trained on rows that are held out here)
        res = refine_network(candidate, (X[train], Y[train]), validation_data=(X[hold], Y[hold]), rng=rng,
                             **kwargs)
        ref = refine_network(fitted, (X[train], Y[train]), validation_data=(X[hold], Y[hold]), rng=rng, **kwargs)
        test = _paired_holdout(res.refined, ref.refined, X[hold], Y[hold])
        test["refinement"] = res.as_dict()
        test["refinement_fitted"] = ref.as_dict()
        test["network"] = res.refined
        return test

    def _output_network(self, rec: HermiteRecovery, coeffs: HermiteCoefficients, order: int, source, truth):
        """The paper's output network for the recovered units (see the class docstring)."""
        m = int(self.n_hidden)
        out: dict = {}
        fs = rec.diagnostics.get("fixsigns") or {}
        unreliable = [i for i, ok in enumerate(fs.get("reliable", [])) if not ok]
        if unreliable:
            out["unreliable_signs"] = unreliable
        # with a sign that T_1 cannot decide, the units alone may be off by a linear function; the
        # linear part absorbs a wrong sign exactly (relu(t) - relu(-t) = t)
        use_params = (self.output == "parameters" or
                      (self.output == "auto" and order == 1 and rec.n_units == m and not rec.dropped
                       and not unreliable))
        if use_params:
            if rec.n_units == 0:
                raise AssumptionError("no unit was recovered above the noise level (Algorithm 4); supply more "
                                      "samples or use output='regression'.")
            out["output"] = "Algorithm 6 parameters" if order == 1 else "Algorithm 4 parameters"
            return rec.network(), out
        units = (rec.a, rec.b, rec.W)
        how = self.linear_part
        if how == "auto":
            how = "closed_form" if order == 1 else "regression"
        if how == "closed_form" and order != 1:
            raise AssumptionError("the closed-form linear part needs known signs, i.e. order 1 (FIXSIGNS); "
                                  "use linear_part='regression' (Algorithm 5) for order 2.")
        if how == "closed_form":
            out["output"] = "recovered units + closed-form linear part (T_0, T_1; Claim D.14)"
            return linear_correction(units, coeffs.t0, coeffs.t1), out
        if truth is not None:
            reg = population_regression(units, truth)
        else:
            reg = algorithm5_regression(source, units, feature_map=self.feature_map, rows=self.regression_rows,
                                        epsilon=self.epsilon or 1e-2, bound=self.bound, n_hidden=m,
                                        chunk_size=self.chunk_size)
        out["output"] = "Algorithm 5 regression (Claim D.14 consolidation)"
        out["regression"] = {"loss": reg.loss, "n_units": reg.network.n_hidden, **reg.info}
        return reg.network, out

    @staticmethod
    def _record_units(coeffs: HermiteCoefficients, rec: HermiteRecovery, order: int, m: int,
                      diagnostics: dict) -> None:
        tens = rec.diagnostics.get("tensors", {})
        diagnostics.update({
            "order": order,
            "mode": "population" if coeffs.exact else "samples",
            "n_samples": coeffs.n_samples,
            "working_dimension": coeffs.dim,
            "units_recovered": rec.n_units,
            "units_left_to_linear_part": m - rec.n_units,
            "per_unit_snr": rec.snr.tolist(),
            "unit_source": list(rec.source),
            "also_in": [list(x) for x in rec.also_in],
            "ranks": {k: v.get("rank") for k, v in tens.items()},
            "singular_values": {k: v.get("singular_values") for k, v in tens.items()},
            "jennrich": {k: v.get("jennrich") for k, v in tens.items()},
            "jennrich_warnings": {k: v.get("jennrich_warnings") for k, v in tens.items() if v.get("jennrich_warnings")},
            "noise": {f"T{k}": v for k, v in coeffs.noise.items()},
            "thresholds": rec.diagnostics.get("thresholds"),
            "dropped_units": rec.dropped,
            "gram_condition": rec.diagnostics.get("gram_condition"),
            "signs_fixed": rec.signs_fixed,
            "fixsigns": rec.diagnostics.get("fixsigns"),
            "coefficients": coeffs.info,
        })
        if "input_deviation" in coeffs.info:
            diagnostics["input_deviation"] = coeffs.info["input_deviation"]


HERMITE_FIT_MEANING = (
    "bounds the Hermite orders of the error that the data measures: for each order k = 1, 3 .. 2l+2 the "
    "spectral norm of flatten(g^_k - T_k) (g^_k: exact Hermite coefficients of the returned network by "
    "Lemma 3.5, T_k: the estimate of eq. (6), in the learner's working coordinates; the Euclidean norm for "
    "k = 1) is at most 3 sigma^_k + 1e-8 ||T_k||, sigma^_k the size of the sampling error of T_k (split "
    "halves for k >= 2, sqrt((d + 2) E[y^2] / N) for k = 1; 0 with exact coefficients). k = 1 checks the "
    "signs and the linear part (a wrong flip moves T_1 by a_i w_i), k >= 2 the units (a missing or wrong "
    "unit whose |a_i c_k(b_i)| is above the noise of some order fails). Not seen: orders above 2l+2 and "
    "units whose coefficients are below the noise (|b_i| large: nearly linear or never active, Lemma "
    "D.13). A network equal to the truth has residual ~ sigma^_k, a third of the threshold; with "
    "refine=False the paper's output carries its own estimation error, which can exceed T_1's noise, "
    "and the check then says the data disagree with it. T_2 is not checked: for l = 1 its top eigenvectors "
    "are the working coordinates, which bias it towards its own noise")


RESIDUAL_FIT_MEANING = (
    "tests that the residual r = y - g(x) of the returned network on the samples is label noise "
    "independent of x, as far as the Hermite polynomials of orders 0, 1, 2 see: with the orthonormal "
    "features 1, x_i, x_i x_j (i < j), (x_i^2 - 1)/sqrt(2) (J of them) and s^2 = mean(r^2), "
    "Q = n sum_j mean(r phi_j)^2 / s^2 is chi-square with J degrees of freedom when it is, plus at most "
    "about 2 P from the network's own least-squares error (P parameters, trained on 80% of the rows); it "
    "fails when z = (Q - J - 2 P)/sqrt(2 J) > 4, i.e. when the "
    "network misses a part of the target whose order <= 2 Hermite component exceeds about "
    "s (2 J)^{1/4} / sqrt(n) in L2 (a local minimum, a missing or wrong unit; a ReLU unit keeps "
    "a large share of its energy in orders 1 and 2). A residual below 1e-10 times the RMS of y passes "
    "(exact to round-off). Misfits orthogonal to all polynomials of degree <= 2 are not seen")


def residual_lack_of_fit(network: TwoLayerNetwork, source, *, chunk_size: int | None = None,
                         z_max: float = 4.0) -> dict:
    """Lack-of-fit test of ``network`` on the samples of ``source`` (see ``RESIDUAL_FIT_MEANING``).

    One pass accumulating ``sum r``, ``sum r x`` and ``sum r x x^T``, from which the projections on the
    orthonormal Hermite features of orders 0-2 (``J = 1 + d + d (d + 1) / 2``) follow; memory ``O(d^2)``.

    Returns
    -------
    dict
        ``passed``, ``z``, ``Q``, ``J``, ``P``, ``n``, ``residual_rms``, ``y_rms``, ``exact``.
    """
    d = network.n_inputs
    iu = np.triu_indices(d, 1)
    J = 1 + d + d + iu[0].size
    # sums of r, r x and r x x^T (a d x d matrix, never the n x J feature matrix)
    s0, s1, S2 = 0.0, np.zeros(d), np.zeros((d, d))
    n, rr, yy = 0, 0.0, 0.0
    for X, Y in source.chunks(chunk_size):
        y = np.asarray(Y, dtype=np.float64).reshape(X.shape[0], -1)[:, 0]
        X = np.asarray(X, dtype=np.float64)
        r = y - network.predict(X).reshape(-1)
        s0 += float(r.sum())
        s1 += X.T @ r
        S2 += (X * r[:, None]).T @ X
        n += X.shape[0]
        rr += float(r @ r)
        yy += float(y @ y)
    proj = np.concatenate([[s0], s1, (np.diag(S2) - s0) / math.sqrt(2.0), S2[iu]])
    s2 = rr / max(n, 1)
    y_rms = math.sqrt(yy / max(n, 1))
    out = {"n": int(n), "J": int(J), "residual_rms": math.sqrt(s2), "y_rms": y_rms}
    if math.sqrt(s2) <= 1e-10 * max(y_rms, 1e-300):
        out.update(Q=0.0, z=-math.sqrt(J / 2.0), passed=True, exact=True)
        return out
    Q = float(np.sum((proj / n) ** 2) * n / s2)
    # the network's own estimation error delta (least squares, P parameters) adds n ||proj delta||^2 / s^2,
    # about P n / n_train <= 2 P (the refinement trains on 80% of the rows), to the chi-square's mean
    P = network.hidden_weights.size + 2 * network.n_hidden + 1
    z = (Q - J - 2 * P) / math.sqrt(2.0 * J)
    out.update(Q=Q, P=int(P), z=float(z), passed=bool(z <= z_max), exact=False)
    return out


def hermite_fit(network: TwoLayerNetwork, coeffs: HermiteCoefficients, order: int) -> dict:
    """Compare the exact Hermite coefficients of ``network`` (Lemma 3.5) with the estimated ``T_1`` and
    ``T_3, ..., T_{2l+2}`` in the coordinates of ``coeffs`` (see ``HERMITE_FIT_MEANING``).

    Returns
    -------
    dict
        ``passed``; per order ``"T<k>"``: ``residual`` (spectral norm of the flattened difference; the
        Euclidean norm for ``k = 1``), ``noise`` (``sigma^_k``), ``threshold`` and ``ratio``
        (``residual / threshold``).
    """
    from ...hermite import network_hermite_expansion
    from ...tensor import flatten
    from .coefficients import _flat_shape

    K = 2 * order + 2
    expansion = network_hermite_expansion(network, K)
    out: dict = {}
    passed = True
    d = coeffs.n_inputs
    for k in [1] + list(range(3, K + 1)):
        if k == 1:
            diff = np.asarray(expansion.tensor(1)[0]) - coeffs.t1
            residual = float(np.linalg.norm(diff))
            size = float(np.linalg.norm(coeffs.t1))
            noise = 0.0 if coeffs.exact else math.sqrt((d + 2) * max(coeffs.y_second_moment, 0.0)
                                                       / max(int(coeffs.n_samples or 1), 1))
        else:
            t1, t2 = _flat_shape(k, order)
            est = coeffs.tensor(k)
            diff = flatten(expansion.tensor(k, coeffs.basis)[0] - est, t1, t2)
            residual = float(np.linalg.norm(diff, 2))
            size = float(np.linalg.norm(flatten(est, t1, t2), 2))
            noise = 0.0 if coeffs.exact else float(coeffs.noise.get(k, 0.0))
        threshold = 3.0 * noise + 1e-8 * max(size, 1e-300)
        ok = residual <= threshold
        passed &= ok
        out[f"T{k}"] = {"residual": residual, "noise": noise, "threshold": threshold,
                        "ratio": residual / threshold, "passed": bool(ok)}
    out["passed"] = bool(passed)
    return out


def _paired_holdout(candidate: TwoLayerNetwork, fitted: TwoLayerNetwork, X: np.ndarray, Y: np.ndarray) -> dict:
    """Paired comparison of the squared errors of two networks on the same held-out rows: the candidate
    is accepted unless its mean squared error is larger by more than three standard errors of the
    mean of the per-row differences (a one-sided paired z-test at about 0.1%)."""
    y = Y.reshape(-1)
    diff = (candidate.predict(X).reshape(-1) - y) ** 2 - (fitted.predict(X).reshape(-1) - y) ** 2
    n = diff.shape[0]
    mean = float(diff.mean())
    se = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else float("inf")
    z = mean / se if se > 0 else (0.0 if mean <= 0 else float("inf"))
    return {"holdout_mse_candidate": float(np.mean((candidate.predict(X).reshape(-1) - y) ** 2)),
            "holdout_mse_fitted": float(np.mean((fitted.predict(X).reshape(-1) - y) ** 2)),
            "n_holdout": int(n), "z": float(z), "accepted": bool(z <= 3.0)}


def _reduction_budget(net: TwoLayerNetwork, coeffs: HermiteCoefficients, refinement: dict) -> tuple[float, str]:
    """L2 budget of :func:`reduce_network`: the accuracy the fitted network has anyway.

    Exact coefficients: ``1e-8 sqrt(E g^2)`` (round-off of the population solve). Refined on samples: three
    times ``sqrt(mse P / n)``, the L2 estimation error of a least-squares fit of ``P`` parameters to ``n`` rows
    with held-out mean squared error ``mse`` (noiseless data: ``mse`` ~ 1e-30, so only round-off-sized
    changes pass). Not refined: three times ``sqrt(d E[y^2] / N)``, the L2 error of ``T_1`` that sets the
    linear part.
    """
    from ...metrics import relu_second_moment

    floor = 1e-8 * math.sqrt(relu_second_moment(net))
    if coeffs.exact:
        return floor, "round-off: 1e-8 sqrt(E g^2)"
    if refinement.get("ran"):
        kept = refinement.get("kept", "refined")
        mse = refinement.get(f"holdout_loss_{kept}", float("nan"))
        if not np.isfinite(mse):
            mse = refinement.get(f"train_loss_{kept}", float("nan"))
        n = max(int(refinement.get("n_samples_used", 0)), 1)
        P = net.hidden_weights.size + 2 * net.n_hidden + 1
        if np.isfinite(mse):
            return max(floor, 3.0 * math.sqrt(max(mse, 0.0) * P / n)), "3 sqrt(mse P / n) of the refinement"
    N = max(int(coeffs.n_samples or 1), 1)
    return (max(floor, 3.0 * math.sqrt(coeffs.n_inputs * max(coeffs.y_second_moment, 0.0) / N)),
            "3 sqrt(d E[y^2] / N), the L2 error of T_1")


def _detectable(rec: HermiteRecovery, max_bias: float) -> bool:
    """Every unit has finite parameters and ``|b| <= max_bias`` (the detectability limit)."""
    return bool(np.all(np.isfinite(rec.a)) and np.all(np.isfinite(rec.b)) and np.all(np.isfinite(rec.U))
                and np.all(np.abs(rec.b) <= max_bias))


def _with_inaccurate_units(rec: HermiteRecovery, coeffs: HermiteCoefficients, m: int) -> HermiteRecovery:
    """``rec`` plus the units dropped only for inaccurate scalars (finite, |b| <= max_bias), up to m."""
    from dataclasses import replace

    extra = [d for d in rec.dropped if d.get("scalars_inaccurate")][: max(0, m - rec.n_units)]
    if not extra:
        return rec
    U = np.vstack([rec.U] + [np.asarray(d["u"])[None, :] for d in extra])
    return replace(rec, a=np.concatenate([rec.a, [d["a"] for d in extra]]),
                   b=np.concatenate([rec.b, [d["b"] for d in extra]]), U=U, W=coeffs.lift(U),
                   source=rec.source + [d["source"] for d in extra], also_in=rec.also_in + [[] for _ in extra],
                   snr=np.concatenate([rec.snr, [d["snr"] for d in extra]]))


def _peek_source(source, order):
    """Make sure ``d`` is known (the engine leaves it None for one-pass iterators)."""
    if source.n_inputs is not None:
        return source, int(source.n_inputs)
    from .coefficients import _open_source

    if order == "auto" or order == 1:
        if not source.info.reiterable:
            raise InputError("the data source is a one-pass iterator of unknown width; pass order=2 (one pass) "
                             "or a re-iterable source (arrays, dask arrays, SampleStream, list of chunks).")
    return _open_source(source, 2)


# ---------------------------------------------------------------------------------------- registry
_PAPER = "awasthi2021"
_GAUSS = "x ~ N(0, I_d)"
_RELU = "f(x) = sum_i a_i relu(w_i^T x + b_i), a_i != 0"
register("hermite-tensor", paper=_PAPER, algorithm="Algorithms 4-6 (Theorems 3.1, 3.2)", target=HermiteTensorLearner,
         assumptions=(_GAUSS, _RELU, "order 1: m <= d, s_m(W) > 0; order 2: m <= 0.9 C(d+1, 2), s_m(W^(.)2) > 0",
                      "no two w_i parallel"),
         description="Hermite tensor decomposition (Jennrich on T_{2l+1} and T_{2l+2}) + regression/refinement",
         is_learner=True)
register("awasthi2021-algorithm1", paper=_PAPER, algorithm="Algorithm 1", target=algorithm1,
         assumptions=(_GAUSS, _RELU, "exact Hermite coefficients", "{w_i^(x)l} linearly independent"),
         description="order-l recovery from exact coefficients (Theorems 4.1, 4.2)")
register("awasthi2021-recoverscalars", paper=_PAPER, algorithm="Algorithm 2", target=recover_scalars,
         assumptions=("directions w_i up to sign", "Gram matrices G^(o j) nonsingular"),
         description="RECOVERSCALARS: a_i and xi_i b_i from T_l..T_{l+3} (corrected l > 1 formula)")
register("awasthi2021-fixsigns", paper=_PAPER, algorithm="Algorithm 3", target=fix_signs,
         assumptions=("full rank: w_i linearly independent",), description="FIXSIGNS from T_1")
register("awasthi2021-algorithm4", paper=_PAPER, algorithm="Algorithm 4", target=algorithm4,
         assumptions=(_GAUSS, _RELU, "s_m(W^(.)l) >= 1/poly"), description="robust order-l recovery (Theorem D.1)")
register("awasthi2021-algorithm5", paper=_PAPER, algorithm="Algorithm 5", target=algorithm5,
         assumptions=(_GAUSS, _RELU), description="low-L2-error ReLU network with <= m + 2 units (Lemma D.12)")
register("awasthi2021-algorithm6", paper=_PAPER, algorithm="Algorithm 6", target=algorithm6,
         assumptions=(_GAUSS, _RELU, "m <= d, s_m(W) >= 1/poly"), description="robust full-rank recovery (Theorem 3.1)")
register("awasthi2021-consolidate", paper=_PAPER, algorithm="Claim D.14", target=consolidate,
         description="regression output as a ReLU network with <= |S| + 2 units")
register("awasthi2021-population-regression", paper=_PAPER, algorithm="Theorem 4.2 (SQ regression)",
         target=population_regression, assumptions=(_GAUSS,), description="exact-moment Algorithm 5 (zero L2 error)")
register("awasthi2021-linear-correction", paper=_PAPER, algorithm="Section 1 overview (iv) / Algorithm 5 linear part",
         target=linear_correction, assumptions=(_GAUSS, "signs known"),
         description="closed-form linear part from T_0, T_1")
register("awasthi2021-sign-flip-sets", paper=_PAPER, algorithm="Theorem 3.4", target=sign_flip_sets,
         description="sign patterns giving the same function (corrected eq. (2))")
register("awasthi2021-claim-4.8", paper=_PAPER, algorithm="Claim 4.8", target=claim48_instance,
         assumptions=("w_i linearly dependent",), description="sign non-identifiability construction")
register("awasthi2021-smoothed-instance", paper=_PAPER, algorithm="Appendix E (Corollary 3.3)", target=smoothed_instance,
         description="smoothed instances and s_m(W^(.)l)")
register("awasthi2021-hermite-separation", paper=_PAPER, algorithm="Lemma 4.3", target=hermite_separation,
         description="min_x max(|He_k|, |He_{k+1}|) (corrected constant)")
