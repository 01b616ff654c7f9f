"""The estimator :class:`PureNeuronLearner` of Ge, Kuditipudi, Li, Wang (2019): validates, calls the
algorithms of :mod:`.algorithms` and stores (symbol table: the package docstring)."""

from __future__ import annotations

from functools import partial
from numbers import Integral, Real

import numpy as np

from ..._validation import Interval, Options, check_positive_int
from ...data import as_data_source
from ...distributions import Distribution, StandardGaussian
from ...errors import AssumptionError
from ...network import TwoLayerNetwork
from ...refine.certificate import (
    certificate_rows,
    certify_max_unit_error,
    held_assumption_warnings,
)
from ...sampling import sample
from ..base import BaseLearner
from .algorithms import (
    GAP_WARNING,
    SPAN_GAP_MIN,
    SYMMETRY_ALPHA,
    PureNeuronResult,
    _population_cov,
    _population_pipeline,
    fit_source,
)
from .conditions import width_refusal

__all__ = ["PureNeuronLearner"]


class PureNeuronLearner(BaseLearner):
    """Ge-Kuditipudi-Li-Wang 2019: the pure-neuron-detector learner for symmetric inputs.

    Learns ``y = A relu(W x) + xi`` (no biases, ``k <= d`` hidden units, ``l >= k`` outputs) when the
    input law is symmetric. ``method="provable"`` runs the paper's Algorithms 2/3 (and Algorithm 4 when
    ``l > k``): moments up to order four, the pure-neuron detector matrix ``T``, its null space,
    simultaneous diagonalisation, SignFix and Algorithm 1. ``method="practical"`` is the paper's Section 4
    variant (CP-ALS on ``10 k`` null-space slices, best of restarts, then a gradient fit of ``W`` with
    ``A`` fixed).

    Parameters
    ----------
    n_hidden : int
        ``k``.
    method : {"provable", "practical"}, default "provable"
    noise_correction : bool, default True
        Eq. 11's detector (Algorithm 3), robust to label noise; False is Algorithm 2's detector (exact
        only without noise).
    split : bool, default False
        The sample split of Algorithms 3/4 (halves; 1/2, 1/4, 1/4 with ``l > k``), in ``+-x`` pairs. The
        paper needs it only for the independence in its proof; it halves the data of each stage.
    n_tries : int, default 20
        SimDiag draws; the one whose ``Z`` best diagonalises the whole null space is kept (1 is the
        paper's single draw).
    n_slices : int, optional
        Slices for the practical variant (default ``10 k``, the paper).
    n_restarts : int, default 10
        CP-ALS restarts of the practical variant (the paper: 10).
    gd_max_iter : int, default 500
        Iterations of the gradient fit of ``W`` (practical variant).
    check_symmetry : bool, default True
        Test the symmetry assumption (Hotelling test of ``E[x] = E[x**3] = 0``); AssumptionError when
        its p-value is below ``symmetry_alpha``. On more than ``max(20000, 100 d)`` rows the means and
        variances come from every row and the correlations from every ``s``-th row
        (:class:`~nnrecover.learners.ge2019.moments.SymmetryStatistic`: ``O(n d)`` instead of
        ``O(n d^2)``, an F p-value, the all-rows noncentrality, a critical value about 1 % larger).
    symmetry_alpha : float, default 1e-6
        Significance level of that test.
    refine : bool, default True
        Polish the estimate with the shared local refinement of both layers
        (:func:`nnrecover.refine.refine_network`); False returns the paper's algorithm's output alone.
    refine_options : dict, optional
        Keyword arguments of ``refine_network``. Default: its ``"auto"`` method, Levenberg-Marquardt on
        the normal equations (``O(n (k d)^2)`` per step for any number ``l`` of outputs), which reaches
        round-off on noiseless data where L-BFGS stalls near ``1e-7``.
    certificate_tol : float, default 0.1
        The certificate ``max_unit_error`` of the returned network (after refinement) passes when its
        bound on the max unit error (:func:`nnrecover.learners.bakshi2019.unit_error_bound`: first
        order, probability ``1 - 1e-3`` over the label noise) is at most this.
    certificate_rows : int, default 20000
        Rows (drawn uniformly from the data; in ``fit_population`` drawn from the input law) on which
        that bound is computed.
    strict : bool, default False
        Raise :class:`ConvergenceError` when the certificate fails (else a
        :class:`~nnrecover.errors.CertificateWarning`).
    chunk_size : int, optional
        Rows per chunk when accumulating moments from arrays.
    span : {"auto", True, False}, default "auto"
        The span reduction: estimate the row space of ``W`` as the top-``k`` right singular space ``Q``
        of ``E[y x^T] E[x x^T]^{-1}`` (``= A W / 2``, Lemma 1) in the first pass, then run the paper's
        detector, NullSpan, SimDiag and SignFix on ``z = Q^T x`` (``k`` dimensions) in a second pass,
        and Algorithm 1 on ``x``. Exact for symmetric inputs (package docstring); memory
        ``O(d^2 + k^4)`` and ``O(n (d^2 + d k + k^4))`` flops instead of ``O(k^2 d^2)`` and
        ``O(n k^2 d^2)``. ``"auto"``: used when ``k < d`` and the data can be read twice (always in
        ``fit_population`` when ``k < d``); a one-pass iterator or ``k = d`` takes the paper's
        full-dimension route. ``True`` forces it (InputError for a one-pass iterator); ``False`` is
        the paper's statistics in all ``d`` dimensions. When the ``k``-th singular value is zero (``A``
        or ``W`` of rank < ``k``, e.g. two equal columns of ``A``) ``True`` raises AssumptionError and
        ``"auto"`` warns (AssumptionWarning) and takes the full-dimension route; when it is below
        ``SPAN_GAP_MIN`` times its estimated sampling error, AssumptionWarning (AssumptionError with
        ``strict=True``).
    random_state : int, Generator or None

    Attributes
    ----------
    network_ : TwoLayerNetwork
        The learned network in canonical form (unit rows of ``W``, zero biases).
    hidden_weights_ : (k, d) array
    output_weights_ : (l, k) array
    result_ : PureNeuronResult
        The provable stage's output (before refinement).
    diagnostics_ : dict
        Singular values of ``T``, gap ratio, SimDiag/CP-ALS scores, sign margins, symmetry p-value,
        ``certificates`` (``max_unit_error``: ``meaning``, ``bound``, ``tolerance``, verdict; the only
        check that warns), ``span`` (``used``, ``reason``, ``dimension``, ``input_dimension``, and when
        used the ``singular_values`` of ``E[y x^T] Sigma^{-1}`` that chose ``Q``, the estimated
        sampling ``noise`` and ``gap_ratio = s_k / noise``), ``stage_checks`` (``null_gap_ratio``: a
        check of the provable stage only,
        Lemma 14, recorded and never warned about: the refinement usually repairs a poorly separated
        null space), timings, and ``refinement`` (what ran).

    Examples
    --------
    >>> import numpy as np, nnrecover as nr
    >>> teacher = nr.random_network(6, 4, 4, rng=0)
    >>> X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(6), 4000, rng=1, antithetic=True)
    >>> learner = nr.learners.PureNeuronLearner(4, refine=False, random_state=0).fit(X, Y)
    >>> bool(np.allclose(learner.predict(X), Y, atol=1e-10))
    True
    """

    _supports_population = True

    def __init__(self, n_hidden: int, *, method: str = "provable", noise_correction: bool = True,
                 split: bool = False, n_tries: int = 20, n_slices: int | None = None, n_restarts: int = 10,
                 gd_max_iter: int = 500, check_symmetry: bool = True, symmetry_alpha: float = SYMMETRY_ALPHA,
                 refine: bool = True, refine_options: dict | None = None, certificate_tol: float = 0.1,
                 certificate_rows: int = 20_000, strict: bool = False, chunk_size: int | None = None,
                 span: bool | str = "auto", random_state=None):
        self.n_hidden = n_hidden
        self.method = method
        self.noise_correction = noise_correction
        self.split = split
        self.n_tries = n_tries
        self.n_slices = n_slices
        self.n_restarts = n_restarts
        self.gd_max_iter = gd_max_iter
        self.check_symmetry = check_symmetry
        self.symmetry_alpha = symmetry_alpha
        self.refine = refine
        self.refine_options = refine_options
        self.certificate_tol = certificate_tol
        self.certificate_rows = certificate_rows
        self.strict = strict
        self.chunk_size = chunk_size
        self.span = span
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    _parameter_constraints = {
        "method": [Options("provable", "practical")],
        "noise_correction": ["boolean"], "split": ["boolean"], "check_symmetry": ["boolean"],
        "n_tries": [Interval(Integral, 1, None)], "n_restarts": [Interval(Integral, 1, None)], "gd_max_iter": [Interval(Integral, 1, None)],
        "n_slices": [None, Interval(Integral, 1, None)], "chunk_size": [None, Interval(Integral, 1, None)],
        "symmetry_alpha": [Interval(Real, 0, 1, closed="neither")],
        "certificate_tol": [Interval(Real, 0, None, closed="neither")], "certificate_rows": [Interval(Integral, 1, None)],
        "span": ["boolean", Options("auto")],
    }

    # ------------------------------------------------------------------ fitting
    def _fit(self, source, rng: np.random.Generator, diagnostics: dict) -> TwoLayerNetwork:

        practical = self.method == "practical"
        if practical:  # the gradient fit of W needs the samples in memory
            Xa, Ya = source.to_arrays()
            source = as_data_source(Xa, Ya)
        rows = partial(certificate_rows, source, rng, int(self.certificate_rows))
        net = None
        # the input-law and span warnings of the provable stage are held until the final network is certified:
        # when the certificate passes, the data themselves show the estimate is within certificate_tol, and the
        # warnings are only recorded (diagnostics_["input_law_notes"])
        with held_assumption_warnings(self, lambda: net, rows, diagnostics, tol=float(self.certificate_tol),
                                      stage=lambda: self._stage(diagnostics)):
            res = fit_source(source, self.n_hidden, practical=practical, samples=(Xa, Ya) if practical else None,
                             gd_max_iter=self.gd_max_iter, noise_correction=self.noise_correction,
                             split=self.split, rng=rng, check_symmetry=self.check_symmetry,
                             symmetry_alpha=float(self.symmetry_alpha), n_tries=self.n_tries,
                             n_slices=self.n_slices, n_restarts=self.n_restarts, strict=self.strict,
                             chunk_size=self.chunk_size, warn=False, span=_span_value(self.span))
            net = self._finish(res, source, rng, diagnostics, certify=False)
        return net

    @staticmethod
    def _stage(diagnostics: dict) -> str:
        return "final estimate" + (" (after refinement)" if diagnostics.get("refinement", {}).get("ran") else "")

    def fit_population(self, truth: TwoLayerNetwork, distribution: Distribution | None = None
                       ) -> "PureNeuronLearner":
        """Run the same algorithm on exact population moments (Gaussian input).

        Parameters
        ----------
        truth : TwoLayerNetwork
            The teacher ``A relu(W x)`` (ReLU, zero biases).
        distribution : StandardGaussian or zero-mean Gaussian, optional
            Input law (``N(0, I)`` by default). The moments up to order four are exact: Lemma 6 removes
            the ReLU from every even moment, Lemma 7 and Lemma 19 give the rest.

        Returns
        -------
        self
            With exact moments the output equals the teacher up to unit order (Theorems 4-6), to round-off.
        """
        return super().fit_population(truth, distribution=distribution)

    def _fit_population(self, truth: TwoLayerNetwork, rng: np.random.Generator, diagnostics: dict,
                        distribution: Distribution | None = None) -> TwoLayerNetwork:
        if truth.activation.name != "relu":
            raise AssumptionError(f"Ge et al. 2019 learn ReLU networks; the teacher uses {truth.activation.name!r}.")
        if np.any(truth.hidden_bias) or np.any(truth.output_bias):
            raise AssumptionError("Ge et al. 2019's model has no biases (y = A relu(W x)); the teacher has "
                                  "non-zero biases.")
        cov = _population_cov(distribution, truth.n_inputs)
        k = check_positive_int(self.n_hidden, "n_hidden")
        res = _population_pipeline(truth.hidden_weights, truth.output_weights, cov, k, span=_span_value(self.span),
                                   noise_correction=self.noise_correction,
                                   decomposition="cp-als" if self.method == "practical" else "simdiag", rng=rng,
                                   n_tries=self.n_tries, n_slices=self.n_slices, n_restarts=self.n_restarts,
                                   strict=self.strict, warn=False)
        dist = distribution if distribution is not None else StandardGaussian(truth.n_inputs)
        rows = sample(truth, dist, int(self.certificate_rows), rng=rng)
        return self._finish(res, None, rng, diagnostics, rows=rows)

    def _finish(self, res: PureNeuronResult, source, rng, diagnostics: dict, rows=None,
                certify: bool = True) -> TwoLayerNetwork:
        self.result_ = res
        diagnostics.update(res.diagnostics)
        gap = res.diagnostics["null_gap_ratio"]
        diagnostics["stage_checks"] = {"null_gap_ratio": {
            "passed": bool(gap >= GAP_WARNING), "stage": "provable estimate (before refinement)",
            "meaning": "sine of the angle between the estimated and the true null space of T <~ 1 / ratio "
                       "(Wedin; Lemma 14); says nothing about the refined network",
            "detail": f"s_k2 / s_k2+1 = {gap:.3g} (well separated when >= {GAP_WARNING:g})"}}
        span = res.diagnostics.get("span", {})
        if span.get("used"):
            ratio = span["gap_ratio"]
            diagnostics["stage_checks"]["span_gap_ratio"] = {
                "passed": bool(not ratio < GAP_WARNING), "stage": "span of W (before the detector)",
                "meaning": "sine of the angle between span Q and the row space of W <~ 1 / ratio (Wedin); "
                           f"AssumptionWarning below {SPAN_GAP_MIN:g}",
                "detail": f"s_k / estimated sampling error = {ratio:.3g}"}
        net = self._maybe_refine(res.network(), source, rng, diagnostics).canonical()
        if certify:
            if rows is None:
                rows = certificate_rows(source, rng, int(self.certificate_rows))
            certify_max_unit_error(self, net, rows, diagnostics, tol=float(self.certificate_tol),
                                   stage=self._stage(diagnostics))
        self.output_weights_ = net.output_weights
        return net

    @classmethod
    def applies_to(cls, network: TwoLayerNetwork, distribution: Distribution):
        """Whether the learner's assumptions hold for a teacher and an input law: ``(bool, reason)``."""
        if not distribution.is_symmetric:
            return False, "the input distribution is not symmetric (Ge et al. 2019 assume x ~ -x)"
        why = width_refusal(network.n_hidden, network.n_inputs, network.n_outputs)
        if why:
            return False, why
        if network.activation.name != "relu":
            return False, f"activation {network.activation.name!r} (Ge et al. 2019 learn ReLU networks)"
        return True, "symmetric input, k <= d, l >= k, ReLU"


def _span_value(span):
    """``span`` as ``"auto"``, ``True`` or ``False`` (numpy booleans included)."""
    return span if isinstance(span, str) else bool(span)
