"""The estimators :class:`ExactReLULearner` and :class:`NoisyReLULearner` of Bakshi, Jayaram, Woodruff
(2019) (symbol table: the package docstring of :mod:`nnrecover.learners.bakshi2019`)."""

from __future__ import annotations

from functools import partial
from numbers import Integral, Real
from typing import Any

import numpy as np

from ..._validation import Interval, Options
from ...distributions import Gaussian, StandardGaussian
from ...errors import InputError
from ...network import TwoLayerNetwork
from ...refine.certificate import MEANING, certificate_rows, held_assumption_warnings
from ..base import BaseLearner
from ._common import width_refusal
from .noisy import noisy_pipeline, uncertified_network
from .pipeline import algorithm3, gaussian_pipeline, rows_refusal

__all__ = ["ExactReLULearner", "NoisyReLULearner", "CERTIFICATE_MEANING"]

#: what the certificate ``max_unit_error`` of both learners states
CERTIFICATE_MEANING = MEANING

def _applies(network: TwoLayerNetwork, distribution: Any, *, noiseless: bool) -> tuple[bool, str]:
    """Shared ``applies_to`` of the two learners (Bakshi et al. Sections 1, 4, 5; Remark 3; Appendix 9.1)."""

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

    d = source.info.n_inputs
    why = rows_refusal(source.info.n_samples, d, k, noisy=noisy) if d is not None else None
    if why:
        raise InputError(why)


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
        rows = partial(certificate_rows, source, rng, self.certificate_rows)
        net = None
        with held_assumption_warnings(self, lambda: net, rows, diagnostics, tol=float(self.certificate_tol)):
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
                net = res.network
            else:
                net = self._maybe_refine(uncertified_network(res, source, approximate=self.approximate, activation=self.activation), source, rng, diagnostics)
        return net

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
        rows = partial(certificate_rows, source, rng, self.certificate_rows)
        net = None
        regression = self.regression
        if regression == "auto":
            regression = "sign" if self.refine and source.info.reiterable else "all"
        with held_assumption_warnings(self, lambda: net, rows, diagnostics, tol=float(self.certificate_tol)):
            res = noisy_pipeline(source, None, self.n_hidden, activation=self.activation, order=self.order,
                                 span=self.span, n_sign=self.n_sign, whiten=self.whiten,
                                 control_variates=self.control_variates, n_draws=self.n_draws,
                                 decomposition=self.decomposition, regression=regression,
                                 chunk_size=self.chunk_size, rng=rng)
            diagnostics["noisy"] = res.diagnostics
            diagnostics["route"] = res.diagnostics["route"]
            net = self._maybe_refine(res.network, source, rng, diagnostics)
        return net

    @classmethod
    def applies_to(cls, network: TwoLayerNetwork, distribution: Any) -> tuple[bool, str]:
        """Whether Theorem 10's assumptions hold for a teacher and an input law: ``(bool, reason)``.

        The same conditions as :meth:`ExactReLULearner.applies_to` (label noise is allowed). Never raises.
        """
        return _applies(network, distribution, noiseless=False)
