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
confirm its gain (``HighThresholdLearner._step2``).
"""

from __future__ import annotations

import math
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from numbers import Integral, Real

import numpy as np

from ..._threads import effective_n_jobs
from ..._validation import Interval, Options, check_random_state
from ...errors import AssumptionError, AssumptionWarning, InputError
from ...data import accumulate
from ...moments.statistics import CovarianceStatistic, excess_kurtosis_deviation, input_deviation_from_standard
from ...network import TwoLayerNetwork
from ..width import is_auto
from ..base import BaseLearner
from .model import ACTIVATIONS, HighThresholdNetwork, tail_bound, threshold_activation, threshold_hermite_coefficients
from .statistics import ActiveRows, PopulationMoments, SampleMoments
from .step1 import STEP1_METHODS, Step1Result, extra_directions, split_half_angles, step1

__all__ = ["HighThresholdLearner", "data_refusal", "lemma_diagnostics", "step2_defaults", "STEP2_HOLDOUT",
           "STEP2_GATHER_BYTES", "ES_PROGRESS_RATE"]

#: a first chunk shorter than this is not checked against N(0, I) (a mean and covariance need rows)
INPUT_CHECK_MIN_ROWS = 20


def data_refusal(n_hidden: int | None, n_inputs: int | None, n_outputs: int | None) -> str | None:
    """Why :class:`HighThresholdLearner` refuses data of this shape, in the user's terms, or None.

    Goel-Panigrahy's model ``f(x) = P(u_t(W* x))`` has one output and at most as many (unit-norm) hidden
    units as inputs (Section 1; Step 1 reads them off a d x d matrix, Claim 1). The learner and
    :func:`nnrecover.check` both decide with this function.
    """
    if n_outputs is not None and n_outputs != 1:
        return (f"HighThresholdLearner learns one output (Goel-Panigrahy's model f(x) = P(u_t(W x)), Section 1); "
                f"the data have {n_outputs} outputs: fit one output at a time.")
    if n_hidden is not None and n_inputs is not None and int(n_hidden) > int(n_inputs):
        return (f"HighThresholdLearner needs at least as many inputs as hidden units (k <= d, Claim 1); got "
                f"{n_hidden} hidden units and {n_inputs} inputs.")
    return None
#: fraction of Step 2's rows held out of its search, on which a refined unit must beat its start
STEP2_HOLDOUT = 0.2
#: the largest normalised progress rate of a (1+1) evolution strategy on the sphere model as the dimension
#: n grows (Beyer, The Theory of Evolution Strategies, 2001, Section 3.2; Rechenberg's 1/5 rule): with the
#: best step size and exact selection, the expected distance to the optimum shrinks by this / n per step.
#: Step 2's search (Algorithm 1) is such a strategy on the angle, with noisy selection, so it does no better.
ES_PROGRESS_RATE = 0.202
#: most bytes of inputs Step 2 gathers into memory from data that are not an in-memory array (a stream, a
#: memory map, a dask array): 2 GiB, 2.7e6 rows at d = 100, 2.7e5 at d = 1000
STEP2_GATHER_BYTES = 2 << 30


def lemma_diagnostics(weights: np.ndarray, threshold: float, activation: str, hidden: np.ndarray, n_total: int,
                      residual: np.ndarray | None = None) -> dict:
    """Lemma 1 / Lemma 2 / Appendix E quantities for units ``weights`` from their outputs on samples.

    Parameters
    ----------
    weights : (d, n) unit rows.
    threshold, activation : the known ``t`` and ``u``.
    hidden : (m, d) unit outputs ``X_i`` on the rows where some unit may fire (the rows left out must
        have ``X = 0``; for step/relu that is every row where no unit fires).
    n_total : int, the number of samples the rows come from.
    residual : (m,), optional, ``Delta = y - f_lin`` on the same rows (0 elsewhere).
    """
    d = weights.shape[0]
    sv = np.linalg.svd(weights, compute_uv=False)
    kappa = float(sv[0] / sv[-1])
    rho1 = tail_bound(activation, threshold, 1.0)
    rhoW = tail_bound(activation, threshold, float(sv[0]))
    mu = kappa * rhoW
    pair = (hidden.T @ hidden) / n_total
    single = hidden.sum(axis=0) / n_total
    off = ~np.eye(d, dtype=bool)
    out = {"kappa": kappa, "rho_t_1": rho1, "rho_t_W": rhoW, "mu": mu}
    if d > 1:
        out["lemma1"] = {"max_pair_moment": float(pair[off].max()), "bound": rho1 * mu,
                         "max_ratio": float(pair[off].max() / (rho1 * mu))}
        ratio = pair / np.where(single > 0, single, np.inf)[None, :]
        out["appendix_e"] = {"max_ratio": float(ratio[off].max())}
    out["lemma2"] = {"bound": d ** 3 * rho1 * rhoW,
                     "applies": bool(d * rhoW <= 0.1)}
    if residual is not None:
        out["lemma2"]["mean_abs_residual"] = float(np.abs(residual).sum() / n_total)
    return out


def step2_defaults(threshold: float, n_rows: int) -> dict:
    """The learner's :func:`.step2.refine_estimate` options for a fixed sample of ``n_rows`` rows at threshold ``t``.

    The "practical" rule with the fixed-sample settings of the experiment ``goel2019-refine``: slabs of
    width ``min(0.1, 0.5 tan(alpha))`` (the ``O(eps)`` error of Lemma 3 below the angle), but at least
    ``max(0.002, 200 / (n_rows phi(t)))``, which holds about 200 of the rows near ``t``; five levels
    0.4-0.8 (the least-squares slope, more slabs of the same rows); the search from ``t - 1`` (Lemma 6:
    ``t_k = (t + sin(alpha) Phi^-1(p_k)) / cos(alpha) >= t - 0.26 tan(alpha)`` for these levels, so no
    crossing lies below ``t - 1`` while ``alpha < 75`` degrees, and rows below it are never read); 100
    iterations, or 30 rejections in a row.
    """
    phi_t = math.exp(-0.5 * threshold * threshold) / math.sqrt(2.0 * math.pi)
    return dict(mode="practical", slab_width=0.1, relative_slab_width=0.5,
                min_slab_width=max(2e-3, 200.0 / (max(n_rows, 1) * phi_t)), levels=(0.4, 0.5, 0.6, 0.7, 0.8),
                max_iter=100, max_rejections=30, search_interval=(threshold - 1.0, threshold + 3.0))


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
        of :func:`step2_defaults` (the fixed-sample settings of the experiment ``goel2019-refine``).
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
        most :data:`STEP2_GATHER_BYTES` of inputs).
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
        import inspect

        from .step2 import refine_estimate

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
            self._check_extra_directions(moments, diagnostics)
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
        self._check_gaussian(X0, diagnostics)
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
            W = self._step2(W, source, rng, diagnostics)
        self._store(result, W, c, c0, diagnostics)
        if self.max_angle_error is not None:
            self._certify_angles(diagnostics, n_total)
        u_t = threshold_activation(self.activation, float(self.threshold))
        H = u_t(Xa @ W.T)
        diagnostics["lemmas"] = lemma_diagnostics(W, float(self.threshold), self.activation, H, n_total,
                                                  residual=ya - H @ c)
        return self._network(W, c, c0)

    def _check_extra_directions(self, moments, diagnostics: dict) -> None:
        """Warn when ``M`` has more eigenvalues above its sampling error than ``n_hidden``
        (:func:`.step1.extra_directions`): the data then come from more units, and the ones not returned
        are missing without any certificate failing (``unit_angles`` judges the returned units only)."""
        k = int(self.n_hidden)
        info = extra_directions(moments, k)
        diagnostics["extra_directions"] = info
        if info["extra"]:
            ev = info["eigenvalues"]
            warnings.warn(
                f"HighThresholdLearner: M-hat = E[y~ (x x^T - I)]/(sqrt(2) u_hat_2) has {info['count']} eigenvalues "
                f"above twice its sampling error ({2 * info['noise_level']:.3g}), more than n_hidden = {k}: its "
                f"({k + 1})-th is {ev[k]:.3g} against a largest of {ev[0]:.3g}. Its rank is the number of units "
                f"(Claim 1, Lemma 2), so the data look like they come from more units, and the units beyond the "
                f"{k} returned are missing. Pass n_hidden={info['count']} or n_hidden='auto'.",
                AssumptionWarning, stacklevel=5)

    def _check_gaussian(self, X0: np.ndarray, diagnostics: dict) -> None:
        """Warn when the first chunk is implausible for N(0, I) (the only input law of the paper, Section 1):
        its mean and covariance (:func:`~nnrecover.moments.input_deviation_from_standard`) and the excess
        kurtosis of its coordinates (:func:`~nnrecover.moments.excess_kurtosis_deviation`), which sees laws
        with the mean and covariance of N(0, I) but another shape. Such a law leaves Step 1 biased by the
        same amount on both split halves, so the certificate ``unit_angles`` cannot see it (measured:
        uniform, Rademacher and Laplace inputs, 5 units in 10 inputs at t = 2, 3e5 rows: every unit
        0.5-1.2 rad off, split halves 0.02-0.08 rad)."""
        n0 = X0.shape[0]
        if n0 < INPUT_CHECK_MIN_ROWS:
            diagnostics["input_check"] = {"plausible": None, "rows": n0,
                                          "message": f"not checked: the first chunk has {n0} row(s), fewer than "
                                                     f"{INPUT_CHECK_MIN_ROWS}"}
            return
        stat = CovarianceStatistic()
        stat.update(X0)
        dev = input_deviation_from_standard(stat)
        m2 = np.einsum("ij,ij->j", X0, X0) / n0
        X2 = X0 * X0
        m4 = np.einsum("ij,ij->j", X2, X2) / n0
        # the largest coordinate's and the mean's, each at half the failure probability: the mean sees a
        # law shared by all coordinates at large d, where the largest's tolerance grows past it
        kurt, kurt_tol = excess_kurtosis_deviation(m2, m4, n0, failure_probability=5e-4)
        mean_kurt, mean_tol = excess_kurtosis_deviation(m2, m4, n0, failure_probability=5e-4, statistic="mean")
        plausible = bool(dev.plausible and kurt <= kurt_tol and mean_kurt <= mean_tol)
        message = dev.message
        if not (kurt <= kurt_tol and mean_kurt <= mean_tol):
            message = (f"{message[:-1]}; the excess kurtosis of the coordinates is {kurt:.3g} at most (tolerance "
                       f"{kurt_tol:.3g}) and {mean_kurt:.3g} on average (tolerance {mean_tol:.3g}): the inputs are "
                       "not Gaussian.")
        diagnostics["input_check"] = {"plausible": plausible, "message": message, "rows": n0,
                                      "excess_kurtosis": kurt, "excess_kurtosis_tolerance": kurt_tol,
                                      "mean_excess_kurtosis": mean_kurt, "mean_excess_kurtosis_tolerance": mean_tol}
        if not plausible:
            warnings.warn(f"HighThresholdLearner: {message} Goel-Panigrahy assume x ~ N(0, I) (Section 1): "
                          "every Step 1 statistic is a Hermite correlation under that law, so the estimate is "
                          "biased, on both split halves alike (the certificate unit_angles does not see it). "
                          "Whiten the inputs first if they are Gaussian with another mean/covariance; other "
                          "input laws are outside the model.", AssumptionWarning, stacklevel=4)

    def _step2(self, W: np.ndarray, source, rng, diagnostics: dict) -> np.ndarray:
        """Step 2 (Algorithm 1) on every unit, searched on most rows and judged on held-out ones.

        The search accepts a proposal when its estimate on the search rows is lower, so its final
        estimate is biased low by the selection, the more so the noisier the estimates (benchmarks/README.md,
        "Goel-Panigrahy Step 2 in the learner"). A refined unit replaces the Step 1 one only when, on
        the held-out rows (:data:`STEP2_HOLDOUT` of them), its estimated angle is below the start's by
        ``confidence`` (default 2) standard errors of the difference (the two errors added as if
        independent: the common rows make the true error of the difference smaller, so the test is
        conservative).
        """
        if self.activation == "sigmoid":
            diagnostics["refinement"] = {"ran": False, "reason": "Step 2 needs step or relu units (a sigmoid unit "
                                         "never has u_t = 0, so the firing event of Lemma 5 does not exist)"}
            return W
        if not source.info.reiterable:
            diagnostics["refinement"] = {"ran": False, "reason": "one-pass iterator: Step 2 needs the samples again"}
            warnings.warn("HighThresholdLearner: the data came as a one-pass iterator, so Step 2 was skipped.",
                          UserWarning, stacklevel=4)
            return W
        from .step2 import SampleSlabs, estimate_tan_alpha, refine_estimate

        from ...refine import gather_samples

        t = float(self.threshold)
        # Step 2 reads the samples in memory: a uniform subsample of at most max_rows of them, and of at most
        # STEP2_GATHER_BYTES of inputs, when there are more (on a dask array only those rows travel to the
        # client). The subsample's keys come from a spawned generator, so the draws of Step 2 itself are the
        # same whatever the data size. Arrays already in memory that fit max_rows are used in place (the
        # gather would return every row, in order).
        keys_rng, split_rng = rng.spawn(2)
        X, y = getattr(source, "X", None), getattr(source, "Y", None)
        if (type(X) is np.ndarray and isinstance(y, np.ndarray) and X.dtype == np.float64
                and X.shape[0] <= self.max_rows):
            y = y if y.ndim == 1 else y[:, 0]
        else:
            n_gather = max(1, min(int(self.max_rows), STEP2_GATHER_BYTES // (8 * source.info.n_inputs)))
            X, Y, _ = gather_samples(source, n_gather, rng=keys_rng)
            y = Y[:, 0]
        search, check = SampleSlabs.from_labels(X, y, baseline=self.baseline).split(STEP2_HOLDOUT, split_rng)
        opts = step2_defaults(t, search.n_rows)
        opts.update(self._refine_kwargs())
        confidence = float(opts.get("confidence", 2.0))
        est_opts = {key: opts[key] for key in ("levels", "search_interval", "xtol") if key in opts}
        max_iter = int(opts["max_iter"])

        def angle_error(e):
            return e.std_error / (1.0 + e.tan_alpha ** 2)

        def refine_unit(i: int, unit_rng: np.random.Generator) -> tuple[np.ndarray | None, dict]:
            """Step 2 on unit ``i``: the refined direction when the held-out rows confirm it, and its report."""
            # sources of its own (their candidate rows follow this unit's direction), over the same rows of X
            search_i, check_i = search.copy(), check.copy()
            # the start on the held-out rows first: when even a perfect refinement (angle 0) would stay within
            # the confirmation margin, no search result could be kept, and the search is not run
            try:
                before = estimate_tan_alpha(W[i], check_i, threshold=t, slab_width=float(opts["slab_width"]),
                                            **est_opts)
            except AssumptionError as exc:
                return None, {"unit": i, "kept": "step1", "iterations": 0, "reason": f"held-out rows: {exc}"}
            margin = confidence * math.sqrt(2.0) * angle_error(before)
            skipped = {"unit": i, "kept": "step1", "iterations": 0, "angle_estimate_start": before.angle,
                       "held_out_std_error": angle_error(before)}
            if before.angle <= margin:
                return None, dict(skipped, reason=f"the held-out rows cannot confirm a gain: on them the start's "
                                  f"estimated angle is below the margin a gain must clear ({confidence:g} standard "
                                  "errors of a difference), so not even angle 0 could be confirmed (more samples, "
                                  "or a wider slab_width)")
            # the most a random search of max_iter steps can gain in n dimensions, from a start at the upper
            # end of its estimate: the search is a (1+1) evolution strategy on a sphere model, whose expected
            # progress is at most ES_PROGRESS_RATE / n of the angle per step; twice that covers one run's luck
            reach = 1.0 - math.exp(-2.0 * ES_PROGRESS_RATE * max_iter / W.shape[1])
            if (before.angle + confidence * angle_error(before)) * reach <= margin:
                return None, dict(skipped, reason=f"{max_iter} steps of a random search in {W.shape[1]} dimensions "
                                  f"gain at most {100 * reach:.0f} % of the angle (twice the best expected "
                                  "progress of a (1+1) evolution strategy), less than the held-out rows could "
                                  "confirm; Theorem 5 asks for O(n log(1/eps)) steps (raise max_iter in "
                                  "refine_options, or pass more samples)")
            try:
                res = refine_estimate(W[i], search_i, threshold=t, rng=unit_rng, **opts)
            except AssumptionError as exc:
                return None, {"unit": i, "kept": "step1", "iterations": 0, "reason": str(exc)}
            entry = {"unit": i, "iterations": res.n_iter, "accepted": int(res.accepted.sum()),
                     "angle_estimate_start": before.angle, "held_out_std_error": angle_error(before),
                     "search_angle_estimate_start": float(res.start_estimate.angle),
                     "search_angle_estimate_end": float(res.estimate.angle)}
            if np.array_equal(res.direction, res.directions[0]):
                return None, dict(entry, kept="step1", reason="the search accepted no move")
            width = float(res.estimate.slab_width)
            try:
                if width != before.slab_width:
                    before = estimate_tan_alpha(W[i], check_i, threshold=t, slab_width=width, **est_opts)
                after = estimate_tan_alpha(res.direction, check_i, threshold=t, slab_width=width, **est_opts)
            except AssumptionError as exc:
                return None, dict(entry, kept="step1", reason=f"held-out rows: {exc}")
            se = math.hypot(angle_error(before), angle_error(after))
            better = after.angle < before.angle - confidence * se
            return (res.direction if better else None), dict(
                entry, kept="step2" if better else "step1", angle_estimate_start=before.angle,
                angle_estimate_end=after.angle, held_out_std_error=angle_error(before), difference_std_error=se)

        # the units are independent searches, each with a generator of its own: the fit's worker threads run
        # them side by side (numpy releases the GIL in the products), with the same result for any number
        units = list(range(W.shape[0]))
        unit_rngs = rng.spawn(len(units))
        workers = min(effective_n_jobs(None), len(units))
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                results = list(pool.map(refine_unit, units, unit_rngs))
        else:
            results = [refine_unit(i, g) for i, g in zip(units, unit_rngs)]
        W_new = W.copy()
        report = []
        for i, (direction, entry) in zip(units, results):
            if direction is not None:
                W_new[i] = direction
            report.append(entry)
        improved = sum(unit["kept"] == "step2" for unit in report)
        diagnostics["refinement"] = {"ran": True, "method": "Goel-Panigrahy Step 2 (Algorithm 1)", "options": opts,
                                     "search_rows": search.n_rows, "held_out_rows": check.n_rows,
                                     "improved_units": improved, "units": report}
        return W_new

    def _certify_angles(self, diagnostics: dict, n_total: int) -> None:
        """The certificate ``unit_angles``: every unit's estimated angle at most ``max_angle_error``."""
        split = diagnostics["split_half"]
        angles = np.array(split["unit_angles"], dtype=float)
        source = ["split_half"] * angles.size
        # Step 2's held-out tan(alpha) estimates see the whole angle, the bias of Step 1's population
        # direction (Lemma 2) included, which split halves cannot: for a unit Step 2 replaced it is the
        # only estimate of the returned direction; for a Step 1 unit the larger of the two counts
        for unit in diagnostics.get("refinement", {}).get("units", []):
            i = unit["unit"]
            if unit.get("kept") == "step2":
                angles[i], source[i] = unit["angle_estimate_end"], "step2_held_out"
            elif unit.get("angle_estimate_start", -np.inf) > angles[i]:
                angles[i], source[i] = unit["angle_estimate_start"], "step2_held_out"
        limit = float(self.max_angle_error)
        worst = int(np.argmax(angles))
        detail = {"unit_angles": angles, "source": source, "max_angle_error": limit}
        if "failed" in split:
            detail["reason"] = (f"{split['failed']}; the estimate cannot be checked, and is near the limit of what "
                                f"{n_total} samples support. Pass more samples")
        elif angles[worst] > limit:
            needed = n_total * (angles[worst] / limit) ** 2
            detail["samples_needed"] = int(math.ceil(needed))
            if source[worst] == "split_half":
                remedy = (f"the sampling error falls like N^-1/2, so about {needed:.2g} samples (now {n_total}) "
                          "would meet it")
            else:
                remedy = (f"that estimate also carries the bias of Step 1's population direction (Lemma 2, the "
                          f"products of P), which more samples do not remove: about {needed:.2g} samples (now "
                          f"{n_total}) would meet it if it is sampling error; else a higher threshold, or Step 2 "
                          "with more steps (refine_options max_iter)")
            detail["reason"] = (f"unit {worst}'s estimated angle is {angles[worst]:.3g} rad ({source[worst]}), "
                                f"above max_angle_error = {limit:g}; {remedy}")
        self._certify("unit_angles", "reason" not in detail, detail.get("reason", detail), diagnostics)
        diagnostics["certificates"]["unit_angles"]["detail"] = detail

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
