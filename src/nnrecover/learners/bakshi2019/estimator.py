"""The estimators :class:`ExactReLULearner` and :class:`NoisyReLULearner` of Bakshi, Jayaram, Woodruff
(2019) (symbol table: the package docstring of :mod:`nnrecover.learners.bakshi2019`)."""

from __future__ import annotations

from functools import partial
from numbers import Integral, Real
from typing import Any

import numpy as np

from ..._validation import Interval, Options
from ...errors import InputError
from ...network import TwoLayerNetwork
from ._common import ExactResult, width_refusal
from .arbitrary_noise import algorithm8, gaussian_sketch, grid_candidates, pv_halfspace
from ...refine.certificate import MEANING, certificate_rows, held_assumption_warnings, unit_error_bound
from .diagnostics import sign_pattern_statistics
from .exact import (MARGIN_QUANTILES, algorithm5, refine_from_output_weights, refine_from_unmixing,
                                row_from_zero_set)
from .fpt import algorithm7, parallel_classes
from .hardness import (assignment_to_separator, brute_force_sat, brute_force_separability,
                                   check_network_instance, close_under_reversal, is_relu_separated, is_satisfied,
                                   lemma16_equal_outputs, lemma16_instances, sat_to_relu_separability,
                                   separability_to_network, separability_to_network_variable_alpha,
                                   separator_to_assignment)
from .noisy import OutputRegressionStatistic, algorithm6, noisy_pipeline, regression_output_weights
from .pipeline import (algorithm3, algorithm4, default_n_refine, gaussian_pipeline, ica_unmixing,
                                   split_refinement)
from .sparse import incoherence, polish_low_rank, principal_component_pursuit, sparse_noise_pipeline
from .tensor_step import (ApproximateResult, approximate_hidden_weights,
                                      approximate_hidden_weights_population, choose_order)
from .worst_case import algorithm2, enumerate_sign_patterns, iterative_lp, numerical_rank
from ..registry import register
from ..base import BaseLearner

__all__ = [
    "ExactReLULearner", "NoisyReLULearner", "ExactResult", "ApproximateResult",
    "gaussian_pipeline", "algorithm3", "algorithm4", "algorithm5", "algorithm6", "algorithm7", "algorithm8",
    "algorithm2", "iterative_lp", "enumerate_sign_patterns", "numerical_rank", "row_from_zero_set",
    "refine_from_output_weights", "refine_from_unmixing", "ica_unmixing", "approximate_hidden_weights",
    "approximate_hidden_weights_population", "choose_order", "noisy_pipeline", "regression_output_weights",
    "OutputRegressionStatistic", "parallel_classes", "pv_halfspace", "gaussian_sketch", "grid_candidates",
    "principal_component_pursuit", "polish_low_rank", "incoherence", "sparse_noise_pipeline",
    "sat_to_relu_separability", "close_under_reversal", "is_satisfied", "brute_force_sat", "is_relu_separated",
    "assignment_to_separator", "separator_to_assignment", "separability_to_network",
    "separability_to_network_variable_alpha", "check_network_instance", "brute_force_separability",
    "lemma16_instances", "lemma16_equal_outputs", "MARGIN_QUANTILES", "split_refinement", "default_n_refine",
    "sign_pattern_statistics", "unit_error_bound", "CERTIFICATE_MEANING",
]

#: what the certificate ``max_unit_error`` of both learners states
CERTIFICATE_MEANING = MEANING

_PAPER = "bakshi2019"


def _applies(network: TwoLayerNetwork, distribution: Any, *, noiseless: bool) -> tuple[bool, str]:
    """Shared ``applies_to`` of the two learners (Bakshi et al. Sections 1, 4, 5; Remark 3; Appendix 9.1)."""
    from ...distributions import Gaussian, StandardGaussian

    if not isinstance(network, TwoLayerNetwork):
        return False, f"not a TwoLayerNetwork ({type(network).__name__})"
    act = network.activation
    if not act.rectified or act.inverse_positive is None:
        return False, (f"activation {act.spec!r} is not rectified (Bakshi et al. need f = 0 on t <= 0 and an "
                       "injective φ > 0 on t > 0: relu, relu_power(p), exp_minus_one)")
    k, d, m = network.n_hidden, network.n_inputs, network.n_outputs
    why = width_refusal(k, d, m)
    if why:
        return False, why
    if np.linalg.matrix_rank(network.hidden_weights) < k:
        return False, "the hidden weights V* are rank deficient (rank V* = k is required)"
    if np.linalg.matrix_rank(network.output_weights) < k:
        return False, "the output weights U* are rank deficient (rank U* = k is required)"
    if not isinstance(distribution, (StandardGaussian, Gaussian)):
        return False, (f"the input law {type(distribution).__name__} is not Gaussian (the moment step assumes "
                       "x ~ N(0, I), or N(0, Σ) with whiten=True; Stein's identity needs the Gaussian score)")
    if np.any(np.asarray(distribution.mean) != 0):
        return False, "the Gaussian input has a non-zero mean (Bakshi et al. assume x ~ N(0, Σ))"
    if np.linalg.matrix_rank(np.asarray(distribution.covariance)) < d:
        return False, "the input covariance is singular (Remark 3 needs a non-degenerate Gaussian)"
    notes = ["Gaussian input, k <= min(d, m), U* and V* of rank k, rectified activation"]
    if not distribution.is_standard_gaussian:
        notes.append("Σ != I: fit with whiten=True (Remark 3)")
    if np.any(network.hidden_bias != 0) or np.any(network.output_bias != 0):
        notes.append("biases are outside the model" + (": the exact certificates will fail" if noiseless else ""))
    return True, "; ".join(notes)
def _refuse_rows(source, k: int, *, noisy: bool) -> None:
    """The row-count refusal of :func:`.pipeline.rows_refusal`, before any pass over the data."""
    from .pipeline import rows_refusal

    d = source.info.n_inputs
    why = rows_refusal(source.info.n_samples, d, k, noisy=noisy) if d is not None else None
    if why:
        raise InputError(why)


_GAUSS = "x ~ N(0, I) (N(0, Σ) with whiten=True)"
_RANKS = "U* (m x k) and V* (k x d) of rank k"
_RECT = "rectified activation f = φ > 0 on t > 0 (relu, relu_power, exp_minus_one)"


class ExactReLULearner(BaseLearner):
    """Exact recovery of ``A = U* f(V* X)`` from noiseless Gaussian samples (Bakshi et al. 2019, Theorem 7).

    The approximate phase estimates the hidden directions from moments (``approximate="tensor"``:
    order-2/3/4 Hermite tensors, :func:`approximate_hidden_weights`) or an unmixing matrix by ICA
    (``approximate="ica"``: Algorithm 3, orthonormal ``V*`` only); the exact phase reads the weights
    off sparsity-pattern linear systems (Algorithm 5 / Algorithm 3 steps 4-8) on a held-out refinement
    sample, and solves ``A = U f(V X)``. Every answer is checked by certificates (null-space ratios,
    sign-pattern consistency, final residual); ``diagnostics_["certified"]`` says whether they held.

    Parameters
    ----------
    n_hidden : int
        ``k``.
    activation : str, default "relu"
        Rectified activation: relu, relu_power(p), exp_minus_one (Appendix 9.1).
    approximate : {"tensor", "ica"}, default "tensor"
    order : {"auto", 2, 3, 4}, default "auto"
        Moment order of the tensor step (``order=3`` is the paper's Algorithm 4: AssumptionError for ReLU).
    span : {"auto", "linear", "second"}, default "auto"
    form : {"margin", "threshold"}, default "margin"
        Algorithm 5's form (the paper's threshold form is fragile in floating point).
    n_refine : int, optional
        Rows held out for the exact step (default ``min(max(5000, 100 (d + k)), n // 4)``).
    whiten : bool, default False
        Inputs ``N(0, Σ)``: whiten the moments (Remark 3). Not available with ``approximate="ica"``.
    control_variates : bool, default True
    n_draws : int, default 8
    decomposition : {"joint", "jennrich", "whiten"}, default "joint"
        How the projected moment tensor is decomposed (joint diagonalisation; plain Jennrich; Option A's
        whitening by a definite combination of slices).
    sketch : {"svd", "gaussian"}, default "svd"
        ICA route: the sketch ``T``.
    chunk_size : int, optional
    refine : bool, default True
        When the exact step's checks fail, polish the (fallback) estimate with
        :func:`nnrecover.refine.refine_network`. When they hold the estimate is exact to round-off and
        the polish is skipped (recorded in ``diagnostics_["refinement"]``).
    refine_options : dict, optional
    certificate_tol : float, default 1e-6
        The certificate ``max_unit_error`` of the returned network passes when its bound on the max
        unit error (:func:`~nnrecover.learners.bakshi2019.unit_error_bound`) is at most this. The
        default states exact recovery: noiseless in-model data give bounds of 1e-10 or less.
    certificate_rows : int, default 20000
        Rows (drawn uniformly from the data) on which that bound is computed.
    strict : bool, default False
        Raise :class:`~nnrecover.errors.ConvergenceError` when the certificate fails (else a
        :class:`~nnrecover.errors.CertificateWarning`).
    random_state : int, Generator or None

    Attributes
    ----------
    network_, hidden_weights_, n_features_in_, n_outputs_, diagnostics_
        ``diagnostics_``: ``certificates`` (``max_unit_error``: its ``meaning``, ``bound``, ``tolerance``,
        verdict; the only check that warns), ``certified`` and ``failure_reasons`` (the exact step's
        own checks, Algorithm 5 / Algorithm 3 steps 4-8: they decide between the exact answer and the
        refined fallback and never warn), ``exact`` (all diagnostics of the pipeline: per-unit checks,
        residual, the approximate step's spectra and input-law measurement), ``route``, ``refinement``,
        ``fit_time``.

    Examples
    --------
    >>> import nnrecover as nr
    >>> truth = nr.random_network(10, 3, 4, rng=0).canonical()
    >>> X, Y = nr.sample(truth, nr.distributions.StandardGaussian(10), 100_000, rng=1)
    >>> learner = nr.learners.ExactReLULearner(3, random_state=0).fit(X, Y)
    >>> learner.diagnostics_["certified"]
    True
    >>> nr.metrics.parameter_error(learner.network_, truth)["max_unit_error"] < 1e-10
    True
    """

    def __init__(self, n_hidden: int, *, activation: str = "relu", approximate: str = "tensor",
                 order: "int | str" = "auto", span: str = "auto", form: str = "margin", n_refine: int | None = None,
                 whiten: bool = False, control_variates: bool = True, n_draws: int = 8,
                 decomposition: str = "joint", sketch: str = "svd", chunk_size: int | None = None,
                 refine: bool = True, refine_options: dict | None = None, certificate_tol: float = 1e-6,
                 certificate_rows: int = 20_000, strict: bool = False, random_state: Any = None):
        self.n_hidden = n_hidden
        self.activation = activation
        self.approximate = approximate
        self.order = order
        self.span = span
        self.form = form
        self.n_refine = n_refine
        self.whiten = whiten
        self.control_variates = control_variates
        self.n_draws = n_draws
        self.decomposition = decomposition
        self.sketch = sketch
        self.chunk_size = chunk_size
        self.refine = refine
        self.refine_options = refine_options
        self.certificate_tol = certificate_tol
        self.certificate_rows = certificate_rows
        self.strict = strict
        self.random_state = random_state

    _parameter_constraints = {
        "activation": [str], "approximate": [Options("tensor", "ica")],
        "order": [Options("auto"), Interval(Integral, 1, None)], "span": [Options("auto", "linear", "second")],
        "form": [Options("margin", "threshold")], "n_refine": [None, Interval(Integral, 1, None)],
        "whiten": ["boolean"], "control_variates": ["boolean"], "n_draws": [Interval(Integral, 1, None)],
        "decomposition": [Options("joint", "jennrich", "whiten")], "sketch": [Options("svd", "gaussian")],
        "chunk_size": [None, Interval(Integral, 1, None)],
        "certificate_tol": [Interval(Real, 0, None, closed="neither")], "certificate_rows": [Interval(Integral, 1, None)],
    }

    def _check_params(self) -> None:
        super()._check_params()
        if self.approximate == "ica" and self.whiten:
            raise InputError("approximate='ica' needs identity input covariance (Algorithm 3 relies on the "
                             "orthonormal rows of V*; whitening would destroy them, Remark 3); use "
                             "approximate='tensor' with whiten=True.")

    def _fit(self, source, rng: np.random.Generator, diagnostics: dict) -> TwoLayerNetwork:
        k = self.n_hidden
        if self.n_refine is None:
            _refuse_rows(source, k, noisy=False)
        out: list = []
        rows = partial(certificate_rows, source, rng, self.certificate_rows)
        with held_assumption_warnings(self, lambda: out[0], rows, diagnostics, tol=float(self.certificate_tol)):
            if self.approximate == "tensor":
                res = gaussian_pipeline(source, None, k, activation=self.activation, order=self.order,
                                        span=self.span, form=self.form, n_refine=self.n_refine, whiten=self.whiten,
                                        control_variates=self.control_variates, n_draws=self.n_draws,
                                        decomposition=self.decomposition, chunk_size=self.chunk_size, rng=rng)
            else:
                res = algorithm3(source, None, k, activation=self.activation, sketch=self.sketch, form=self.form,
                                 n_refine=self.n_refine, chunk_size=self.chunk_size, rng=rng)
            diagnostics["exact"] = res.diagnostics
            diagnostics["route"] = res.diagnostics.get("route")
            diagnostics["certified"] = bool(res.certified)
            diagnostics["failure_reasons"] = list(res.diagnostics.get("failure_reasons", []))
            if res.certified:
                diagnostics["refinement"] = {"ran": False, "reason": "exact-recovery checks held: the estimate "
                                             "is exact to round-off"}
                out.append(res.network)
            else:
                out.append(self._maybe_refine(self._fallback(res, source), source, rng, diagnostics))
        return out[0]

    def _fallback(self, res: ExactResult, source) -> TwoLayerNetwork:
        """Uncertified estimate: recovered units where they passed, else the approximate direction with its
        sign from Algorithm 6; ``U`` by least squares on the refinement rows (Lemma 20)."""
        n_ref = res.diagnostics["n_refine"]
        Xb, Yb = split_refinement(source, n_ref)
        V = np.array(res.hidden_weights, dtype=float)
        bad = ~np.all(np.isfinite(V), axis=1)
        if np.any(bad):
            if self.approximate == "tensor":
                approx = res.diagnostics["approximate_hidden_weights"]
            else:   # ICA: directions from the unmixed sources by least squares
                Z = Yb @ res.diagnostics["unmixing"].T
                approx = np.linalg.lstsq(Xb, np.maximum(Z, 0.0), rcond=None)[0].T
            signed, _ = algorithm6(approx, Xb, Yb, activation=self.activation)
            V[bad] = signed[bad]
        U, _ = regression_output_weights(V, Xb, Yb, activation=self.activation)
        return TwoLayerNetwork(V, None, U, None, self.activation)

    @classmethod
    def applies_to(cls, network: TwoLayerNetwork, distribution: Any) -> tuple[bool, str]:
        """Whether Theorem 7's assumptions hold for a teacher and an input law: ``(bool, reason)``.

        Requires a rectified activation, ``k <= min(d, m)`` with ``U*`` and ``V*`` of rank k, and zero-mean
        non-degenerate Gaussian inputs (``N(0, Σ)`` with ``Σ != I`` needs ``whiten=True``; the reason says
        so). Biases are outside the paper's model: the teacher is still accepted (the learner then
        reports failed certificates and falls back), and the reason says so. Never raises.
        """
        return _applies(network, distribution, noiseless=True)


class NoisyReLULearner(BaseLearner):
    """Approximate recovery under i.i.d. sub-Gaussian label noise (Bakshi et al. 2019, Theorem 10).

    Tensor step -> Algorithm 6 (signs by projections) -> Lemma 20 (least-squares ``U``; see ``regression``),
    then optionally the shared local refinement (``refine=True``). See :func:`noisy_pipeline`.

    Parameters
    ----------
    n_hidden : int
    activation, order, span, whiten, control_variates, n_draws, decomposition, chunk_size : as
        :class:`ExactReLULearner`
    n_sign : int, optional
        Rows reserved for Algorithm 6 (default ``min(n // 4, 100000)``).
    regression : {"auto", "all", "sign"}, default "auto"
        Rows of the Lemma 20 least squares for ``U``: all ``n`` samples (``"all"``) or the Algorithm 6
        rows only (``"sign"``, the paper's ``X̄``). ``"auto"``: ``"sign"`` when the refinement will run
        (``refine=True`` on re-readable data), since it fits ``U`` again with the hidden rows and the
        all-rows pass (an ``O(n d k)`` product) would only move its start; ``"all"`` otherwise.
    refine : bool, default True
    refine_options : dict, optional
    certificate_tol : float, default 0.1
        The certificate ``max_unit_error`` of the returned network passes when its bound on the max
        unit error (:func:`~nnrecover.learners.bakshi2019.unit_error_bound`, first order, probability
        ``1 - 1e-3``) is at most this; else a :class:`~nnrecover.errors.CertificateWarning` (or
        :class:`~nnrecover.errors.ConvergenceError` with ``strict``).
    certificate_rows : int, default 20000
        Rows (drawn uniformly from the data) on which that bound is computed.
    strict : bool, default False
    random_state : int, Generator or None

    Notes
    -----
    The tensor step measures the input law (``diagnostics_["noisy"]["approximate"]["input_deviation"]``)
    and warns (:class:`~nnrecover.errors.AssumptionWarning`) when the mean or covariance is further
    from N(0, I) than sampling explains.
    """

    def __init__(self, n_hidden: int, *, activation: str = "relu", order: "int | str" = "auto", span: str = "auto",
                 n_sign: int | None = None, whiten: bool = False, control_variates: bool = True, n_draws: int = 8,
                 regression: str = "auto", chunk_size: int | None = None, refine: bool = True,
                 refine_options: dict | None = None, random_state: Any = None, decomposition: str = "joint",
                 certificate_tol: float = 0.1, certificate_rows: int = 20_000, strict: bool = False):
        self.n_hidden = n_hidden
        self.activation = activation
        self.order = order
        self.span = span
        self.n_sign = n_sign
        self.whiten = whiten
        self.control_variates = control_variates
        self.n_draws = n_draws
        self.decomposition = decomposition
        self.regression = regression
        self.chunk_size = chunk_size
        self.refine = refine
        self.refine_options = refine_options
        self.random_state = random_state
        self.certificate_tol = certificate_tol
        self.certificate_rows = certificate_rows
        self.strict = strict

    _parameter_constraints = {
        "activation": [str], "order": [Options("auto"), Interval(Integral, 1, None)], "span": [Options("auto", "linear", "second")],
        "n_sign": [None, Interval(Integral, 1, None)], "whiten": ["boolean"], "control_variates": ["boolean"],
        "n_draws": [Interval(Integral, 1, None)], "regression": [Options("auto", "all", "sign")],
        "decomposition": [Options("joint", "jennrich", "whiten")], "chunk_size": [None, Interval(Integral, 1, None)],
        "certificate_tol": [Interval(Real, 0, None, closed="neither")], "certificate_rows": [Interval(Integral, 1, None)],
    }

    def _fit(self, source, rng: np.random.Generator, diagnostics: dict) -> TwoLayerNetwork:
        if self.n_sign is None:
            _refuse_rows(source, self.n_hidden, noisy=True)
        out: list = []
        rows = partial(certificate_rows, source, rng, self.certificate_rows)
        regression = self.regression
        if regression == "auto":
            regression = "sign" if self.refine and source.info.reiterable else "all"
        with held_assumption_warnings(self, lambda: out[0], rows, diagnostics, tol=float(self.certificate_tol)):
            res = noisy_pipeline(source, None, self.n_hidden, activation=self.activation, order=self.order,
                                 span=self.span, n_sign=self.n_sign, whiten=self.whiten,
                                 control_variates=self.control_variates, n_draws=self.n_draws,
                                 decomposition=self.decomposition, regression=regression,
                                 chunk_size=self.chunk_size, rng=rng)
            diagnostics["noisy"] = res.diagnostics
            diagnostics["route"] = res.diagnostics["route"]
            out.append(self._maybe_refine(res.network, source, rng, diagnostics))
        return out[0]

    @classmethod
    def applies_to(cls, network: TwoLayerNetwork, distribution: Any) -> tuple[bool, str]:
        """Whether Theorem 10's assumptions hold for a teacher and an input law: ``(bool, reason)``.

        The same conditions as :meth:`ExactReLULearner.applies_to` (label noise is allowed). Never raises.
        """
        return _applies(network, distribution, noiseless=False)


# ------------------------------------------------------------------------------------------ registry
register("exact-relu", paper=_PAPER, algorithm="Algorithms 4-5 (Theorem 7)", target=ExactReLULearner,
         assumptions=(_GAUSS, _RANKS, _RECT, "noiseless"), is_learner=True,
         description="tensor step (order from Hermite coefficients) + exact sparsity-pattern systems, certified")
register("bakshi2019-noisy", paper=_PAPER, algorithm="Algorithm 6, Lemma 20 (Theorem 10)", target=NoisyReLULearner,
         assumptions=(_GAUSS, _RANKS, _RECT, "i.i.d. mean-zero sub-Gaussian noise"), is_learner=True,
         description="tensor step + projection signs + least-squares U (+ optional refinement)")
register("bakshi2019-lemma1", paper=_PAPER, algorithm="Lemma 1", target=enumerate_sign_patterns,
         assumptions=("rank(A) = k",), description="candidate sign patterns from k tight constraints")
register("bakshi2019-algorithm1", paper=_PAPER, algorithm="Algorithm 1 (Remark 1)", target=iterative_lp,
         assumptions=("ReLU",), description="IterativeLP: a new independent row of f(VX) in rowspan(A) (HiGHS)")
register("bakshi2019-algorithm2", paper=_PAPER, algorithm="Algorithm 2 (Theorem 1)", target=algorithm2,
         assumptions=("any X", "rank(A) = k", "ReLU", "small n"),
         description="worst-case exact factorisation A = U f(VX); refuses rank(A) < k (Theorem 2)")
register("bakshi2019-algorithm3", paper=_PAPER, algorithm="Algorithm 3 (Theorem 4)", target=algorithm3,
         assumptions=("x ~ N(0, I)", "V* orthonormal rows", "U* rank k", _RECT),
         description="ICA (FastICA, skewness signs) + exact steps 4-8")
register("bakshi2019-algorithm3-ica", paper=_PAPER, algorithm="Algorithm 3 steps 1-3 (Lemma 6, Theorem 3)",
         target=ica_unmixing, assumptions=("x ~ N(0, I)", "V* orthonormal rows", "U* rank k"),
         description="sketch T A, FastICA, column signs by positive skewness: unmixing M ≈ D Π (TU*)^-1 T")
register("bakshi2019-algorithm3-steps4-8", paper=_PAPER, algorithm="Algorithm 3 steps 4-8", target=refine_from_unmixing,
         assumptions=(_RANKS, "M Ā ≈ D f(V* X̄), D > 0"),
         description="exact V*, U* from an approximate unmixing matrix (threshold or margin form)")
register("bakshi2019-algorithm3-refine", paper=_PAPER, algorithm="Corollary 5 (Algorithm 3 steps 4-8 from Û)",
         target=refine_from_output_weights, assumptions=(_RANKS, "Û ≈ U* Π D, D > 0"),
         description="exact V*, U* from approximate output weights")
register("bakshi2019-row-from-zero-set", paper=_PAPER, algorithm="Algorithm 5 step 3 / Algorithm 3 step 5 (Lemma 10)",
         target=row_from_zero_set, assumptions=("B a k-row basis of rowspan(Ā)",),
         description="the row-span vector vanishing on a zero set, with null-space certificates (R0)")
register("bakshi2019-tensor-step", paper=_PAPER, algorithm="Algorithm 4 steps 1-4 (Theorem 5)",
         target=approximate_hidden_weights, assumptions=(_GAUSS, _RANKS, "c_r(f) != 0"),
         description="approximate ±V* from order-2/3/4 Hermite moments (Options A-C)")
register("bakshi2019-algorithm4", paper=_PAPER, algorithm="Algorithm 4 (Theorem 7)", target=algorithm4,
         assumptions=(_GAUSS, _RANKS, "c_3(f) != 0 (not ReLU)"),
         description="the paper's order-3 pipeline; AssumptionError for ReLU (c_3 = 0)")
register("bakshi2019-gaussian-pipeline", paper=_PAPER, algorithm="Algorithms 4-5 (Theorem 7)",
         target=gaussian_pipeline, assumptions=(_GAUSS, _RANKS, _RECT, "noiseless"),
         description="tensor step + Algorithm 5 + A = U f(VX), certified")
register("bakshi2019-algorithm5", paper=_PAPER, algorithm="Algorithm 5 (Theorem 6)", target=algorithm5,
         assumptions=(_RANKS, "||v_i - ±V*_i|| <= ε", "noiseless"),
         description="exact V* and signs by sparsity-pattern systems (threshold / margin form)")
register("bakshi2019-algorithm6", paper=_PAPER, algorithm="Algorithm 6 (Theorem 9)", target=algorithm6,
         assumptions=(_RANKS, "||v_i - ±V*_i|| <= ε"), description="signs by projection residuals")
register("bakshi2019-lemma20", paper=_PAPER, algorithm="Lemma 20", target=regression_output_weights,
         description="least-squares U for given V (streamed normal equations)")
register("bakshi2019-noisy-pipeline", paper=_PAPER, algorithm="Theorem 10", target=noisy_pipeline,
         assumptions=(_GAUSS, _RANKS, "i.i.d. sub-Gaussian noise"), description="tensor step + Algorithm 6 + Lemma 20")
register("bakshi2019-algorithm7", paper=_PAPER, algorithm="Algorithm 7 (Theorem 11)", target=algorithm7,
         assumptions=("x ~ N(0, I)", "rank V* = k", "no two columns of U* collinear (corrected)", "noiseless"),
         description="FPT exact recovery from 1-sparse columns; any m >= 2, m < k allowed")
register("bakshi2019-algorithm8", paper=_PAPER, algorithm="Algorithm 8 (Theorem 13)", target=algorithm8,
         assumptions=("x ~ N(0, I)", "E independent of X"),
         description="sketch, candidate (SU*)^-1, noisy-halfspace PV estimator, selection by residual")
register("bakshi2019-algorithm8-sketch", paper=_PAPER, algorithm="Algorithm 8 step 1 (Proposition 4)",
         target=gaussian_sketch, description="Gaussian subspace-embedding sketch S with N(0, 1/k) entries")
register("bakshi2019-algorithm8-grid", paper=_PAPER, algorithm="Algorithm 8 step 2 (Proposition 5)",
         target=grid_candidates, assumptions=("toy sizes only",),
         description="the exhaustive guess grid for (SU*)^-1, with signs; infeasible beyond toy sizes")
register("bakshi2019-pv-halfspace", paper=_PAPER, algorithm="Algorithm 8 step 3 (eqs. 5-6, Theorem 12)",
         target=pv_halfspace, assumptions=("x ~ N(0, I)", "label noise independent of X"),
         description="Plan-Vershynin noisy-halfspace estimator in closed form X^T y / ||X^T y||")
register("bakshi2019-pcp", paper=_PAPER, algorithm="Theorem 14, Corollary 8", target=sparse_noise_pipeline,
         assumptions=("x ~ N(0, I)", "U* orthonormal incoherent columns", "sparse E"),
         description="principal component pursuit (ADMM) + polish + exact pipeline")
register("bakshi2019-principal-component-pursuit", paper=_PAPER, algorithm="Theorem 14 (principal component pursuit)",
         target=principal_component_pursuit, assumptions=("M incoherent, E sparse with random support",),
         description="min ||M||_* + λ ||E||_1 s.t. M + E = A by ADMM, λ = 1/sqrt(max(n, m))")
register("bakshi2019-incoherence", paper=_PAPER, algorithm="Definition 13, Lemma 24", target=incoherence,
         description="left, right and joint incoherence parameters of a rank-k matrix")
register("bakshi2019-hardness", paper=_PAPER, algorithm="Proposition 2 (Definitions 4-5)", target=sat_to_relu_separability,
         description="reversible 6-SAT -> ReLU-separability point sets (checker: is_relu_separated)")
register("bakshi2019-theorem2", paper=_PAPER, algorithm="Theorem 2 (α fixed)", target=separability_to_network,
         description="ReLU-separability -> 'is there V with α f(VX) = A' (k = 2; checker: check_network_instance)")
register("bakshi2019-theorem2-variable-alpha", paper=_PAPER, algorithm="Theorem 2 (α a variable)",
         target=separability_to_network_variable_alpha,
         description="the same reduction with α a variable (two extra columns force α > 0)")
register("bakshi2019-pattern-statistics", paper=_PAPER, algorithm="Lemmas 7, 8, 19, 21", target=sign_pattern_statistics,
         description="split frequencies θ/2π, κ vs θ_min, σ_min(f(VX)), 1-sparse column counts")
register("bakshi2019-lemma16", paper=_PAPER, algorithm="Lemma 16", target=lemma16_instances,
         description="two instances with equal outputs for n << 1/a (n = Ω(κ) lower bound)")
