"""``HighThresholdLearner``: the Goel-Panigrahy (2019) main line as a scikit-learn style estimator.

It validates, calls :mod:`.step1` (and :mod:`.step2` when asked) and stores; the algorithms are the
plain functions of those modules. Diagnostics (``diagnostics_``):

``lemma1``        Lemma 1 on the learned units: ``E[X_i X_j]`` (measured on the samples) against the bound
                  ``rho(t, 1) mu`` with ``mu = kappa(W) rho(t, ||W||)``; the worst ratio (<= 1 expected).
``lemma2``        the Lemma 2 bound ``d^3 rho(t, 1) rho(t, ||W||)`` and ``mean_abs_residual``, the mean of
                  ``|y - f_lin_hat(x)|`` over the rows where some unit fires, divided by all rows (the true
                  ``Delta = f - f_lin`` is exactly 0 where no unit fires): an estimate of the bias floor
                  ``E|Delta|`` of Step 1 that also carries the effect of the error of the learned units,
                  so it over-estimates ``E|Delta|`` at small ``N``.
``appendix_e``    ``max E[X_i X_j] / E[X_j]``, the divide-and-conquer ratio of Appendix E.
``split_half``    Step 1's sampling error per unit, from Step 1 on disjoint halves of the samples
                  (:func:`.step1.split_half_angles`).
``certificates``  ``unit_angles``: every unit's estimated angle (split halves, or Step 2's held-out
                  estimate where larger or for a unit it replaced) at most ``max_angle_error``; and the
                  (eps, tau)-local-minimum certificate of each landscape minimum (Definition 1).

The shared least-squares refinement of the other learners (:func:`nnrecover.refine.refine_network`) does
not apply here: it fits a known two-layer form, and ``P`` is unknown. ``refine=True`` instead runs the
paper's own Step 2 (Algorithm 1, :func:`.step2.refine_estimate`) on every unit, which needs step or relu
units and a monotone ``P`` (Section 2.2); when the data cannot support it the Step 1 estimate is kept
and the reason is recorded in ``diagnostics_["refinement"]``. The search's own estimates are biased low
(it keeps what lowers them on its rows), so a refined unit is kept only when rows held out of the search
confirm its gain (:func:`.step2.refine_units`).
"""

from __future__ import annotations

import inspect
import time
from numbers import Integral, Real

import numpy as np

from ..._validation import Interval, Options, check_random_state
from ...data import accumulate
from ...errors import AssumptionError, InputError
from ...network import TwoLayerNetwork
from ..base import BaseLearner
from ..width import is_auto
from .conditions import data_refusal
from .model import (
    ACTIVATIONS,
    HighThresholdNetwork,
    threshold_activation,
    threshold_hermite_coefficients,
)
from .statistics import (
    ActiveRows,
    PopulationMoments,
    SampleMoments,
    check_gaussian_inputs,
    lemma_diagnostics,
)
from .step1 import (
    STEP1_METHODS,
    Step1Result,
    check_extra_directions,
    split_half_angles,
    step1,
    unit_angle_certificate,
)
from .step2 import refine_estimate, refine_units

__all__ = ["HighThresholdLearner"]

class HighThresholdLearner(BaseLearner):
    """Recover the lowest layer of ``f(x) = P(u_t(W x))`` (Goel & Panigrahy 2019, Theorems 1, 2, 5, 12).

    Parameters
    ----------
    n_hidden : int or "auto"
        ``d``, the number of lowest-layer units. ``"auto"`` reads it from the rank of
        ``M = sum_i c_i u_hat_2 w_i w_i^T`` (the Hermite matrix ``T_2 = E[(y - E y)(x x^T - I)]`` of the
        labels, which Step 1 estimates anyway; its rank is ``d <= n`` under Assumption 1, ``c_i > 0``) with
        the rule of :mod:`nnrecover.learners.width`, checked on held-out rows; the evidence is in
        ``diagnostics_["width"]``.
    activation : {"step", "relu", "sigmoid"}, default "step"
    threshold : float
        The known shared threshold ``t`` (required).
    method : {"power", "landscape", "simultaneous"}, default "power"
        The Step 1 route (:mod:`nnrecover.learners.goel2019.step1`).
    refine : bool, default True
        Run Step 2 (Algorithm 1, RefineEstimate) on every unit after Step 1 (step/relu units,
        monotone ``P``). The search runs on 80 % of the rows; a refined unit replaces the Step 1 one only
        when the other 20 % confirm the gain (``diagnostics_["refinement"]["units"]``). ``False`` returns
        Step 1 alone.
    refine_options : dict, optional
        Keyword arguments of :func:`nnrecover.learners.goel2019.step2.refine_estimate`, each replacing one
        of :func:`~nnrecover.learners.goel2019.step2.step2_defaults` (the fixed-sample settings of the experiment
        ``goel2019-refine``; ``max_iter="auto"``, Theorem 5's ``O(n log(gamma / eps))`` iterations per unit
        from its start, :func:`~nnrecover.learners.goel2019.step2.step2_budget`; an int fixes it).
    baseline : float, optional
        ``c_0``; default the median of the labels of the first chunk (footnote 5).
    min_coefficient_ratio : float, default 0.05
        Refuse (Assumption 1, ``c_i = Theta(1) > 0``) when an estimated linear coefficient, or the
        ``d``-th eigenvalue of ``M`` (``sum_i c_i w_i w_i^T``), is below this fraction of the median.
    step1_options : dict, optional
        Extra keyword arguments of the Step 1 route (``n_restarts``, ``lam``, ``gamma``, ...).
    max_angle_error : float or None, default 0.1
        Certify the result (``diagnostics_["certificates"]["unit_angles"]``): every unit's estimated angle
        to its population direction must be at most this many radians. A Step 1 unit's angle is estimated
        by running Step 1 again on two disjoint halves of the samples
        (:func:`~nnrecover.learners.goel2019.step1.split_half_angles`, ``diagnostics_["split_half"]``),
        or by Step 2's estimate on its held-out rows where that is larger (it also sees the bias of
        Step 1, Lemma 2); a unit Step 2 replaced has its held-out estimate. A failed certificate warns
        (:class:`~nnrecover.errors.CertificateWarning`, or raises with ``strict=True``) and names the
        number of samples that would meet it (sampling error ``~ N^{-1/2}``). ``None`` skips the check.
    max_rows : int, default 10_000_000
        Memory guard on the stored active rows, and the most rows Step 2 holds in memory (a uniform
        subsample of the data when there are more; from data not already in memory as an array, also at
        most :data:`~nnrecover.learners.goel2019.step2.STEP2_GATHER_BYTES` of inputs).
    strict : bool, default False
    random_state : None, int or Generator

    Attributes
    ----------
    hidden_weights_ : (d, n) unit rows (signs resolved)
    coefficients_ : (d,) estimated linear coefficients ``c_i`` of ``P``
    baseline_ : float, ``c_0``
    step1_ : Step1Result
    network_ : TwoLayerNetwork
        The learned linear part ``f_lin(x) = c_0 + sum_i c_i u_t(w_i . x)`` (hidden bias ``-t``); it
        predicts ``f`` only in expectation (Lemma 2), since ``P`` is not learned.
    diagnostics_ : dict
    """

    _supports_population = True

    @staticmethod
    def applies_to(network, distribution) -> tuple[bool, str]:
        """Whether a comparison on ``network`` (a two-layer network teacher) is meaningful: it is not,
        since this learner recovers a high-threshold first layer (known ``t``) under an unknown upper
        network, another model than ``A act(W x + b) + c`` with small biases."""
        return False, ("recovers a high-threshold first layer (known threshold t) under an unknown upper "
                       "network, another model than this teacher")

    def __init__(self, n_hidden, *, activation: str = "step", threshold: float | None = None, method: str = "power",
                 refine: bool = True, refine_options: dict | None = None, baseline: float | None = None,
                 min_coefficient_ratio: float = 0.05, step1_options: dict | None = None,
                 max_angle_error: float | None = 0.1, max_rows: int = 10_000_000, strict: bool = False,
                 random_state=None):
        self.n_hidden = n_hidden
        self.activation = activation
        self.threshold = threshold
        self.method = method
        self.refine = refine
        self.refine_options = refine_options
        self.baseline = baseline
        self.min_coefficient_ratio = min_coefficient_ratio
        self.step1_options = step1_options
        self.max_angle_error = max_angle_error
        self.max_rows = max_rows
        self.strict = strict
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    _parameter_constraints = {
        "activation": [Options(*ACTIVATIONS)],
        "threshold": [Interval(Real, None, None)],
        "method": [Options(*STEP1_METHODS)],
        "step1_options": [None, dict],
        "baseline": [None, Interval(Real, None, None)],
        "min_coefficient_ratio": [Interval(Real, 0, 1, closed="left")],
        "max_angle_error": [None, Interval(Real, 0, None, closed="neither")],
        "max_rows": [Interval(Integral, 1, None)],
    }

    #: refine_estimate's arguments that refine_options may not set (the learner passes them itself)
    _STEP2_FIXED = ("z0", "source", "threshold", "rng")

    def _refine_kwargs(self) -> dict:
        """``refine_options``, checked against :func:`.step2.refine_estimate` (Step 2 is this learner's
        refinement, not the shared least-squares one of the other learners)."""
        opts = self.refine_options
        if opts is None:
            return {}
        if not isinstance(opts, dict):
            raise InputError(f"refine_options must be a dict of refine_estimate keyword arguments or None, "
                             f"got {type(opts).__name__}.")
        allowed = [name for name in inspect.signature(refine_estimate).parameters if name not in self._STEP2_FIXED]
        unknown = sorted(set(opts) - set(allowed))
        if unknown:
            raise InputError(f"unknown refine_options {unknown} (keyword arguments of Step 2, "
                             f"nnrecover.learners.goel2019.step2.refine_estimate); allowed: {allowed}.")
        return dict(opts)

    def _check_params(self) -> None:
        if self.threshold is None:
            raise InputError("threshold must be the known finite threshold t of the units (Goel-Panigrahy "
                             "Section 1 assumes t known); pass threshold=t.")
        super()._check_params()
        u = threshold_hermite_coefficients(self.activation, float(self.threshold), 4)
        if abs(u[4]) < 1e-3 * abs(u[2]):
            raise AssumptionError(
                f"u_hat_4 of {self.activation} at t = {self.threshold} is {u[4]:.3g}, nearly 0 (it changes sign at "
                f"t = {'sqrt(3)' if self.activation == 'step' else '1'}); the H_4 landscape of Goel-Panigrahy "
                "Section 2.1 (Assumption 2: |u_hat_4| = t^Theta(1) rho(t, 1)) degenerates there. Use another t.")

    # ------------------------------------------------------------------ fitting
    def _run_step1(self, moments, rng, n_active: int | str = "population: no",
                   diagnostics: dict | None = None) -> Step1Result:
        if diagnostics is not None:
            diagnostics["extra_directions"] = check_extra_directions(moments, int(self.n_hidden))
        result = step1(moments, int(self.n_hidden), method=self.method, rng=rng, **(self.step1_options or {}))
        c, ev = result.coefficients, result.eigenvalues
        ratio = float(self.min_coefficient_ratio)
        if ratio > 0 and (np.min(c) < ratio * np.median(c) or ev[-1] < ratio * np.median(ev)):
            raise AssumptionError(
                f"P has a vanishing linear coefficient: the smallest estimated c_i is {np.min(c):.3g} (median "
                f"{np.median(c):.3g}) and the d-th eigenvalue of M-hat = sum c_i w_i w_i^T is {ev[-1]:.3g} (median "
                f"{np.median(ev):.3g}), below the ratio {ratio:g}. Goel-Panigrahy Assumption 1 (c_i = Theta(1) > 0) "
                "excludes this: such a unit is visible only through products of P. With few firing samples "
                f"({n_active} rows) sampling noise can also cause this: pass more samples. "
                "Lower min_coefficient_ratio to accept the estimate anyway.")
        return result

    def _fit(self, source, rng: np.random.Generator, diagnostics: dict) -> TwoLayerNetwork:
        t_start = time.perf_counter()
        why = data_refusal(None, None, source.info.n_outputs)
        if why:
            raise InputError(why)
        X0, Y0 = source.peek()
        why = data_refusal(None, None, Y0.shape[1] if Y0.ndim == 2 else 1)
        if why:
            raise InputError(why)
        c0 = float(np.median(Y0[:, 0])) if self.baseline is None else float(self.baseline)
        diagnostics["input_check"] = check_gaussian_inputs(X0)
        del X0, Y0                                       # a chunk of memory the rest of the fit does not need
        keep_all = self.activation == "sigmoid"
        stat = accumulate(ActiveRows(c0, keep_all=keep_all, max_rows=self.max_rows), source)
        Xa, ya, n_total, c0 = stat.finalize()
        d = int(self.n_hidden)
        why = data_refusal(d, Xa.shape[1], 1)
        if why:
            raise InputError(why)
        frac = Xa.shape[0] / n_total
        diagnostics.update(n_samples=n_total, n_active=int(Xa.shape[0]), active_fraction=frac, baseline=c0)
        if not keep_all and frac > 0.5:
            raise AssumptionError(
                f"{100 * frac:.0f}% of the labels differ from their median c_0 = {c0:.6g}: the units fire too often "
                "for a high-threshold network (Goel-Panigrahy Lemma 1 needs Pr[unit fires] = rho(t, 1) small), so "
                "t is too low for the Step 1 statistics, or the labels are noisy. Raise t or pass baseline=c_0.")
        moments = SampleMoments(Xa, ya, n_total, self.activation, float(self.threshold))
        diagnostics["statistics_time"] = time.perf_counter() - t_start
        result = self._run_step1(moments, rng, int(Xa.shape[0]), diagnostics)
        W, c = result.weights, result.coefficients
        # a generator of its own, spawned either way, so that Step 2 draws the same whether or not the check runs
        check_rng = rng.spawn(1)[0]
        if self.max_angle_error is not None:
            diagnostics["split_half"] = split_half_angles(moments, result, method=self.method, rng=check_rng,
                                                          **(self.step1_options or {}))
        if self.refine:
            W, diagnostics["refinement"] = refine_units(W, source, rng, threshold=float(self.threshold),
                                                        activation=self.activation, baseline=self.baseline,
                                                        max_rows=self.max_rows, options=self._refine_kwargs())
        self._store(result, W, c, c0, diagnostics)
        if self.max_angle_error is not None:
            detail = unit_angle_certificate(diagnostics["split_half"], diagnostics.get("refinement", {}),
                                            float(self.max_angle_error), n_total)
            self._certify("unit_angles", "reason" not in detail, detail.get("reason", detail), diagnostics)
            diagnostics["certificates"]["unit_angles"]["detail"] = detail
        u_t = threshold_activation(self.activation, float(self.threshold))
        H = u_t(Xa @ W.T)
        diagnostics["lemmas"] = lemma_diagnostics(W, float(self.threshold), self.activation, H, n_total,
                                                  residual=ya - H @ c)
        return self._network(W, c, c0)

    def _store(self, result: Step1Result, W, c, c0, diagnostics) -> None:
        self.step1_ = result
        self.coefficients_ = c
        self.baseline_ = c0
        diagnostics["method"] = self.method
        diagnostics.setdefault("certificates", {}).update(
            {f"local_minimum_{i}": {"passed": cert["tau"] <= 1e-6, "detail": cert}
             for i, cert in enumerate(result.certificates)})
        diagnostics["M_eigenvalues"] = result.eigenvalues
        diagnostics["step1_info"] = result.info

    def _network(self, W, c, c0) -> TwoLayerNetwork:
        d = W.shape[0]
        return TwoLayerNetwork(W, -float(self.threshold) * np.ones(d), c[None, :], np.array([c0]), self.activation)

    # ------------------------------------------------------------------ population
    def fit_population(self, truth: HighThresholdNetwork, **kwargs) -> "HighThresholdLearner":
        """Run Step 1 on the exact population moments of ``truth`` (a :class:`HighThresholdNetwork`).

        Exact when ``P`` is linear (any ``W*``), and available for polynomial ``P`` with orthonormal
        ``W*`` (product-Hermite formula; then the result carries the bias of the product terms).
        Step 2 needs samples and does not run here.
        """
        t0 = time.perf_counter()
        self._check_params()
        if is_auto(self.n_hidden):
            raise InputError("n_hidden='auto' reads the width from samples; population mode needs n_hidden given "
                             "(the teacher's width).")
        if not isinstance(truth, HighThresholdNetwork):
            raise InputError(f"truth must be a HighThresholdNetwork, got {type(truth).__name__}.")
        if truth.activation != self.activation or truth.threshold != float(self.threshold):
            raise InputError(f"truth has activation {truth.activation!r}, t = {truth.threshold}; the learner was "
                             f"built for {self.activation!r}, t = {self.threshold}.")
        if truth.n_hidden != int(self.n_hidden):
            raise InputError(f"truth has {truth.n_hidden} units but n_hidden = {self.n_hidden}.")
        rng = check_random_state(self.random_state)
        self._clear_fitted()
        diagnostics: dict = {"population": True}
        moments = PopulationMoments(truth)
        result = self._run_step1(moments, rng, diagnostics=diagnostics)
        c0 = float(truth.upper.constant)
        self._store(result, result.weights, result.coefficients, c0, diagnostics)
        diagnostics["refinement"] = {"ran": False, "reason": "no samples (population mode)"}
        self._set_fitted(self._network(result.weights, result.coefficients, c0), diagnostics, t0)
        return self
