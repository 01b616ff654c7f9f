"""The estimator :class:`HermiteTensorLearner` of Awasthi, Tang, Vijayaraghavan (2021): validates, calls
the stages of the package and stores (symbol table: the package docstring of
:mod:`nnrecover.learners.awasthi2021`)."""

from __future__ import annotations

import time
import warnings
from numbers import Integral, Real
from typing import Any

import numpy as np

from ..._validation import Interval, Options
from ...data.views import Head
from ...errors import AssumptionWarning, InputError
from ...network import TwoLayerNetwork
from ...refine import default_gauss_newton_fits
from ..base import BaseLearner
from .certificates import (
    HERMITE_FIT_MEANING,
    RESIDUAL_FIT_MEANING,
    hermite_fit,
    residual_lack_of_fit,
)
from .coefficients import (
    HermiteCoefficients,
    _open_source,
    estimate_coefficients,
    exact_coefficients,
)
from .conditions import check_order
from .decompose import (
    HermiteRecovery,
    Thresholds,
    _make_thresholds,
    algorithm4,
    algorithm6,
)
from .output import output_network, polish_units, reduce_to_width
from .requirement import sample_requirement
from .scale import matrix_free_polish

__all__ = ["HermiteTensorLearner"]


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
    (``diagnostics_["sign_flip_sets"]``, :class:`~nnrecover.errors.AssumptionWarning`). A linear part that
    no flip explains is carried by units of its own (Claim D.14's pair ``lambda relu(u x) - lambda
    relu(-u x)``, as in a teacher with units ``w`` and ``-w``); then every flip of the other units is
    absorbed by them, the ``2^m`` networks fit equally, and the learner says so
    (``diagnostics_["non_identifiable"]``, :class:`~nnrecover.errors.AssumptionWarning`). The rewrite may
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
        Without ``refine_options`` (one output, ``m <= d``) the second step starts with the learner's
        matrix-free Gauss-Newton on the first ``3 P`` rows (:func:`~.scale.matrix_free_polish`,
        ``P = m (d + 2) + 1``): when it reaches round-off on the next rows (noiseless data) it is the
        refinement, at ``O(P d m)`` per step instead of the shared refinement's ``O(n P^2)``; otherwise
        the shared refinement runs as without it (or, when it would run L-BFGS there, too few rows or no
        solver for its normal equations, the better of the two on held-out rows is kept; see
        ``_refine_matrix_free``).
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
    range_method : {"auto", "full", "randomized", "sketch"}
        How order 1 finds the range of ``T_2`` (pass 1). ``"randomized"``: a randomized range finder
        (a Gaussian sketch with ``max(m + 10, 4 m)`` columns, then subspace iterations with ``m + 10``
        columns and the control variate) on the first ``max(N / 16, 65536)`` rows, grown until its
        statistical error is at most the full matrix's on all ``N`` rows, and checked on an eighth of the
        rows during the moment pass (``coefficients_.info["range_check"]``); ``O(N d m / 16)`` flops
        instead of ``O(N d^2)``. ``"full"``: the exact ``d x d`` matrix on every row. ``"sketch"``: the
        sketch and up to three subspace iterations on every row (four passes). "auto" (default):
        ``"full"`` when ``d <= 2 (m + 10)``, else ``"randomized"``. In population (``fit_population``)
        ``"randomized"`` applies the same finder to the exact ``f^_2`` and gives the full route's result
        to round-off.
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
        Minimum number of samples (default: ten per column of the ``k^l x k^(l+2)`` flattening of
        ``T_{2l+2}`` in the working space, ``10 k^(l+2)``, at least 1000; :func:`min_samples` says why).
        More than 4096 samples are needed in any case: the split halves behind Algorithm 4's noise-adaptive
        thresholds are alternate blocks of 4096 rows.
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
        ``sample_requirement`` (samples: the rows this teacher needs for every unit to stand above the
        noise, from the tensors of the pass, :func:`~.requirement.sample_requirement`; an
        :class:`~nnrecover.errors.AssumptionWarning` names the number when the data have fewer),
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
    # hermite_fit and residual_fit fail when a unit whose Hermite coefficients stand above the noise is
    # missing, and unit_count when more units than asked are needed: n_hidden="auto" lets them pick the width
    _width_by_certificates = True

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
        "range_method": [Options("auto", "full", "sketch", "randomized")],
        "control_variate": ["boolean"], "check_inputs": ["boolean"],
        "chunk_size": [None, Interval(Integral, 1, None)], "min_n": [None, Interval(Integral, 1, None)],
    }

    # ------------------------------------------------------------------ fitting
    def _fit(self, source, rng: np.random.Generator, diagnostics: dict) -> TwoLayerNetwork:
        if source.n_outputs not in (None, 1):
            raise InputError(f"HermiteTensorLearner learns one output (Awasthi et al. 2021); Y has "
                             f"{source.n_outputs} columns: fit one learner per column (Y[:, j]; at the command "
                             "line, save that column as its own --targets file: choosing it with --target-column "
                             "would make the other target columns inputs).")
        m = int(self.n_hidden)
        source, d = _peek_source(source, self.order)
        order = check_order(self.order, m, d)
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
        order = check_order(self.order, m, truth.n_inputs)
        t0 = time.perf_counter()
        coeffs = exact_coefficients(truth, order, m, basis="range" if order == 1 else "identity",
                                    range_method=self.range_method, rng=rng)
        diagnostics["timings"] = {"moments": time.perf_counter() - t0}
        return self._finish(coeffs, order, None, truth, rng, diagnostics)

    def _finish(self, coeffs: HermiteCoefficients, order: int, source, truth, rng, diagnostics) -> TwoLayerNetwork:
        m = int(self.n_hidden)
        self._state_requirement(coeffs, order, m, diagnostics)
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
        output_opts = dict(source=source, truth=truth, output=self.output, linear_part=self.linear_part,
                           feature_map=self.feature_map, regression_rows=self.regression_rows,
                           epsilon=self.epsilon, bound=self.bound, chunk_size=self.chunk_size)
        provable, out = output_network(rec, coeffs, order, m, **output_opts)
        diagnostics.update(out)
        diagnostics["timings"]["output_stage"] = time.perf_counter() - t1
        self.provable_network_ = provable
        diagnostics["provable_network_units"] = provable.n_hidden
        start = provable
        if self.refine and not coeffs.exact and rec.n_units:
            polished, report = polish_units(coeffs, rec, order, m, rng=rng, n_draws=self.n_draws,
                                            max_bias=float(self.max_bias))
            diagnostics["hermite_polish"] = report
            if polished is not None:
                start, _ = output_network(polished, coeffs, order, m, **output_opts)
        else:
            diagnostics["hermite_polish"] = {"ran": False, "reason": "refine=False" if not self.refine else
                                             "exact coefficients" if coeffs.exact else "no unit"}
        fitted = None
        if self._matrix_free_applies(start, source):
            fitted = self._refine_matrix_free(start, source, diagnostics)
        if fitted is None:  # not at round-off on held-out rows, or not applicable: the shared refinement
            fitted = self._maybe_refine(start, source, rng, diagnostics)
        out = reduce_to_width(fitted, coeffs, m, source=source, rng=rng,
                              refinement=diagnostics.get("refinement", {}), refine_options=self._refine_kwargs(),
                              diagnostics=diagnostics)
        self._certify_output(out, coeffs, order, source, diagnostics)
        return out

    @staticmethod
    def _state_requirement(coeffs: HermiteCoefficients, order: int, m: int, diagnostics: dict) -> None:
        """After the pass of the tensors: how many rows this teacher needs (:func:`sample_requirement`),
        in ``diagnostics_["sample_requirement"]``, and an :class:`~nnrecover.errors.AssumptionWarning`
        that names the number when the data have fewer."""
        req = sample_requirement(coeffs, order, m)
        diagnostics["sample_requirement"] = req
        if req is None or req["enough"]:
            return
        N, need = req["n_samples"], req["n_needed"]
        if req["lower_bound"]:
            what = (f"at least {need:.2g} rows" if need > N + 1 else f"more than the {N:.3g} rows it got")
            seen = (f"the weakest of the m units is within the noise (its signal is below {req['joint_snr']:.2g} noise "
                    "units)")
        else:
            what = f"about {need:.2g} rows"
            seen = f"the weakest of the m units has signal {req['joint_snr']:.3g} noise units"
        warnings.warn(f"HermiteTensorLearner: this teacher needs {what} for order l = {order} (got {N:.3g}): in the "
                      f"noise-whitened flattenings of T_{2 * order + 1} and T_{2 * order + 2}, {seen}; recovering "
                      f"every unit takes about {req['required_snr']:g}, and the noise falls like 1/sqrt(N). With "
                      "fewer rows some units are left to the linear part. "
                      "See diagnostics_['sample_requirement'].", AssumptionWarning, stacklevel=5)

    def _matrix_free_applies(self, start: TwoLayerNetwork, source) -> bool:
        """Whether the refinement starts matrix free (:func:`~.scale.matrix_free_polish`): ``refine=True``
        without ``refine_options`` (options ask for the shared refinement) on a re-iterable sample
        source, one ReLU output and no more hidden units than inputs (order 1)."""
        if not self.refine or source is None or not source.info.reiterable or self.refine_options:
            return False
        return start.n_outputs == 1 and start.activation.name == "relu" and start.n_hidden <= start.n_inputs

    @staticmethod
    def _shared_refinement_fits(start: TwoLayerNetwork, source) -> bool:
        """Whether the shared refinement fits ``source`` by Gauss-Newton on at least ``4 P`` residuals with its
        defaults (:func:`nnrecover.refine.default_gauss_newton_fits`), more rows than this learner's own
        polish of ``3 P``. Otherwise it has no more rows than that polish, or would run L-BFGS: at d = 1000,
        k = 20 (P = 20041) from a stream its 512 MiB hold 53633 training rows, and before the matrix-free
        solver ran from 2 P residuals they took 5000 L-BFGS iterations in 755 s, for no gain."""

        return default_gauss_newton_fits(start, source)

    def _refine_matrix_free(self, start: TwoLayerNetwork, source, diagnostics: dict) -> TwoLayerNetwork | None:
        """Matrix-free refinement: :func:`~.scale.matrix_free_polish` on the first ``3 P`` rows (three
        residuals per parameter: the sample normal matrix is then within ``(1 +- sqrt(1/3))^2`` of its
        expectation, the preconditioner, so the conjugate gradients need few steps), judged on the next
        ``max(2000, P / 4)`` rows. The rows of a source are exchangeable (i.i.d. samples, as eq. (6) and
        the split-sample estimates assume), so the first rows are as good as any: a stream is read only
        as far as they go.

        Noiseless data (the held-out mean squared residual at round-off, ``<= (256 eps)^2 mean(y^2)``, 16
        times the training stop of :func:`~.scale.matrix_free_polish`): the polished network is the
        teacher to round-off and is returned; its cost is ``O(P d k)`` per conjugate-gradient step,
        against ``O(n P^2)`` per step of the shared refinement's full-space stage. Otherwise (label
        noise: the ``3 P`` rows' fit carries their statistical error, not that of all rows) ``None``, so
        that the shared refinement runs from ``start`` as without this step, unless it could only run
        L-BFGS at this size (:meth:`_shared_refinement_fits`); then the better of ``{start, polished}`` on
        the held-out rows is returned (``diagnostics_["refinement"]["reason"]`` says why).
        """
        t0 = time.perf_counter()
        P = start.n_hidden * (start.n_inputs + 2) + 1
        n_fit, n_hold = 3 * P, max(2000, P // 4)
        X, y = _first_rows(source, n_fit + n_hold)
        if X.shape[0] < n_fit + n_hold:
            n_fit = int(0.8 * X.shape[0])
        polished, info = matrix_free_polish(start, X[:n_fit], y[:n_fit])
        Xh, yh = X[n_fit:], y[n_fit:]
        del X, y
        loss = lambda net: float(np.mean((net.predict(Xh).reshape(-1) - yh) ** 2))  # noqa: E731
        hold_start, hold_ref = loss(start), loss(polished)
        exact = bool(hold_ref <= (256 * np.finfo(float).eps) ** 2 * float(np.mean(yh ** 2)))
        record = {
            "ran": True, "method": "matrix-free Gauss-Newton (span-preconditioned conjugate gradients)",
            "train_loss_start": info["train_loss_start"], "train_loss_refined": info["train_loss_refined"],
            "holdout_loss_start": hold_start, "holdout_loss_refined": hold_ref, "n_iter": info["n_iter"],
            "cg_iterations": info["cg_iterations"], "stop": info["stop"], "n_samples_used": int(n_fit),
            "n_holdout": int(Xh.shape[0]), "at_round_off": exact, "time": time.perf_counter() - t0}
        if not exact and self._shared_refinement_fits(start, source):
            diagnostics["matrix_free_refinement"] = record
            return None
        keep = bool(np.isfinite(hold_ref) and not hold_ref > hold_start)
        record.update(kept="refined" if keep else "start", improved=bool(keep and hold_ref < hold_start))
        if not exact:
            record["reason"] = (f"not at round-off on held-out rows (label noise?), and the shared refinement "
                                f"would run L-BFGS for P = {P} parameters (fewer than 4 P training rows, or a "
                                f"normal matrix of {8 * P * P / 2**30:.2g} GiB that exceeds its budget where its "
                                f"matrix-free solver does not apply): the fit of {n_fit} rows is kept if better "
                                "on held-out rows")
        diagnostics["refinement"] = record
        return polished if keep else start

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


def _first_rows(source, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n`` rows of a source (fewer if it has fewer), ``X`` (rows, d) and ``y`` (rows,), copied
    into one preallocated array (no second copy of the rows: at ``d = 1000`` they are half a GB)."""
    if source.n_samples is not None:
        n = min(n, int(source.n_samples))
    Xo = yo = None
    have = 0
    for X, Y in Head(source, n, None):
        if Xo is None:
            Xo, yo = np.empty((n, X.shape[1])), np.empty(n)
        take = X.shape[0]
        Xo[have:have + take] = X
        yo[have:have + take] = np.asarray(Y).reshape(take, -1)[:, 0]
        have += take
    if Xo is None:
        raise InputError("the data source is empty.")
    return Xo[:have], yo[:have]


def _peek_source(source, order):
    """Make sure ``d`` is known (the engine leaves it None for one-pass iterators)."""
    if source.n_inputs is not None:
        return source, int(source.n_inputs)

    if order == "auto" or order == 1:
        if not source.info.reiterable:
            raise InputError("the data source is a one-pass iterator of unknown width; pass order=2 (one pass) "
                             "or a re-iterable source (arrays, dask arrays, SampleStream, list of chunks).")
    return _open_source(source, 2)
