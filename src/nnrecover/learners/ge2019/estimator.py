"""The estimator :class:`PureNeuronLearner` of Ge, Kuditipudi, Li, Wang (2019): validates, calls the
algorithms of :mod:`.algorithms` and stores (symbol table: the package docstring)."""

from __future__ import annotations

from functools import partial
from numbers import Integral, Real

import numpy as np

from ..._validation import Interval, Options, check_positive_int
from ...distributions import Distribution, PerturbedSymmetric, StandardGaussian
from ...errors import AssumptionError
from ...network import TwoLayerNetwork
from ...sampling import sample
from ..registry import register
from ...refine.certificate import certificate_rows, certify_max_unit_error, held_assumption_warnings
from ..base import BaseLearner
from .algorithms import (GAP_WARNING, SPAN_GAP_MIN, SYMMETRY_ALPHA, PureNeuronResult, SpanBasis, _population_cov,
                         _population_pipeline, _run, algorithm2, algorithm3, algorithm4, paper_error,
                         pure_neuron_moments, section4_variant, span_basis, symmetrize)
from .core import (algorithm1, build_detector_matrix, cp_slices, detector_value, fit_hidden_given_output, null_span,
                   purity_score, sign_fix, sim_diag)
from .distinguishing import (distinguishing_matrix, gaussian_distinguishing_matrix, leave_one_out_distance,
                             perturb_weights, population_detector_matrix)
from .moments import gaussian_population_moments, symmetry_test
from .symmetric import duplication_matrix, mat_star, vec_star

__all__ = ["PureNeuronLearner", "PureNeuronResult", "algorithm1", "algorithm2", "algorithm3", "algorithm4",
           "section4_variant", "pure_neuron_moments", "build_detector_matrix", "null_span", "sim_diag",
           "sign_fix", "cp_slices", "fit_hidden_given_output", "detector_value", "purity_score",
           "distinguishing_matrix", "gaussian_distinguishing_matrix", "population_detector_matrix",
           "perturb_weights", "leave_one_out_distance", "symmetry_test", "gaussian_population_moments",
           "paper_error", "symmetrize", "vec_star", "mat_star", "duplication_matrix", "SYMMETRY_ALPHA",
           "span_basis", "SpanBasis", "SPAN_GAP_MIN"]


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
        from ...data import as_data_source

        practical = self.method == "practical"
        if practical:  # the gradient fit of W needs the samples in memory
            Xa, Ya = source.to_arrays()
            source = as_data_source(Xa, Ya)
        out: list = []
        rows = partial(certificate_rows, source, rng, int(self.certificate_rows))
        # the input-law and span warnings of the provable stage are held until the final network is certified:
        # when the certificate passes, the data themselves show the estimate is within certificate_tol, and the
        # warnings are only recorded (diagnostics_["input_law_notes"])
        with held_assumption_warnings(self, lambda: out[0], rows, diagnostics, tol=float(self.certificate_tol),
                                      stage=lambda: self._stage(diagnostics)):
            res = _run(source, None, self.n_hidden, noise_correction=self.noise_correction, split=self.split,
                       decomposition="cp-als" if practical else "simdiag", rng=rng,
                       check_symmetry=self.check_symmetry, symmetry_alpha=float(self.symmetry_alpha),
                       n_tries=self.n_tries, n_slices=self.n_slices, n_restarts=self.n_restarts,
                       strict=self.strict, chunk_size=self.chunk_size, warn=False, span=_span_value(self.span))
            if practical:
                V, info = fit_hidden_given_output(Xa, Ya, res.output_weights, res.hidden_weights,
                                                  max_iter=self.gd_max_iter)
                res.hidden_weights = V
                res.diagnostics["hidden_fit"] = info
            out.append(self._finish(res, source, rng, diagnostics, certify=False))
        return out[0]

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
        from .conditions import width_refusal

        why = width_refusal(network.n_hidden, network.n_inputs, network.n_outputs)
        if why:
            return False, why
        if network.activation.name != "relu":
            return False, f"activation {network.activation.name!r} (Ge et al. 2019 learn ReLU networks)"
        return True, "symmetric input, k <= d, l >= k, ReLU"


def _span_value(span):
    """``span`` as ``"auto"``, ``True`` or ``False`` (numpy booleans included)."""
    return span if isinstance(span, str) else bool(span)


# ============================================================================================ registry
_SYM = "symmetric input law (x and -x equal in distribution)"
_RANK = "A, W, E[xx^T] full rank"
register("pure-neuron", paper="ge2019", algorithm="Algorithms 2-4", target=PureNeuronLearner, is_learner=True,
         assumptions=(_SYM, "k <= d", "outputs >= k", "ReLU, no biases", _RANK, "M full column rank"),
         description="Pure-neuron detector: moments up to order 4, null space, SimDiag, Algorithm 1")
register("ge2019-algorithm1", paper="ge2019", algorithm="Algorithm 1", target=algorithm1,
         assumptions=(_SYM, "E[xx^T] full rank"), description="One ReLU unit: w = 2 E[xx^T]^-1 E[yx]")
register("ge2019-algorithm2", paper="ge2019", algorithm="Algorithm 2", target=algorithm2,
         assumptions=(_SYM, "no label noise", "A square", _RANK, "N full column rank"),
         description="Noiseless two-layer learner (Corollary 1 detector, SimDiag, SignFix, Algorithm 1)")
register("ge2019-algorithm3", paper="ge2019", algorithm="Algorithm 3", target=algorithm3,
         assumptions=(_SYM, "zero-mean label noise independent of x", "A square", _RANK, "M full column rank"),
         description="Noise-robust learner (Eq. 11 detector, sample split in +-x pairs)")
register("ge2019-algorithm4", paper="ge2019", algorithm="Algorithm 4", target=algorithm4,
         assumptions=(_SYM, "outputs l >= k", "rank A = k", "M full column rank"),
         description="Non-square A: project outputs on the top-k left singular space of E[yx^T]")
register("ge2019-section4", paper="ge2019", algorithm="Section 4", target=section4_variant,
         assumptions=(_SYM, "outputs >= k", _RANK),
         description="Practical variant: CP-ALS on 10k null-space slices, then W fitted with A fixed")
register("ge2019-build-t", paper="ge2019", algorithm="Eq. 10-11 (BuildT)", target=build_detector_matrix,
         assumptions=(_SYM,), description="Pure-neuron detector matrix T (noiseless or noise-corrected)")
register("ge2019-simdiag", paper="ge2019", algorithm="Algorithm 2 steps 7-8 (SimDiag)", target=sim_diag,
         assumptions=("null space spanned by vec*(z_i z_i^T)",),
         description="Eigenvectors of X Y^-1 for random X, Y in the null space, best of several draws")
register("ge2019-distinguishing", paper="ge2019", algorithm="Definition 1, Lemma 19", target=distinguishing_matrix,
         assumptions=("closed form: zero-mean Gaussian input",),
         description="Distinguishing matrix N / augmented M: Gaussian closed form or Monte Carlo")
register("ge2019-nullspan", paper="ge2019", algorithm="NullSpan (Algorithm 2/3 step 5; Lemmas 4, 10)", target=null_span,
         assumptions=("N (Alg. 2) or M (Alg. 3) full column rank",),
         description="The k least right singular vectors of T and the gap ratio s_k2 / s_k2+1 (Lemma 14)")
register("ge2019-signfix", paper="ge2019", algorithm="SignFix (Algorithm 2/3 step 9; Lemma 18)", target=sign_fix,
         assumptions=(_SYM, "E[relu(w_i^T x)] > 0"),
         description="Flip z_i so that E[z_i^T y] > 0")
register("ge2019-cp-slices", paper="ge2019", algorithm="Section 4 (a): CP-ALS on null-space slices", target=cp_slices,
         assumptions=("null space spanned by vec*(z_i z_i^T)",),
         description="Rank-k CP-ALS of 10k random slices mat*(S g_t), best of restarts (TensorLy)")
register("ge2019-hidden-fit", paper="ge2019", algorithm="Section 4 (b): W fitted with A fixed",
         target=fit_hidden_given_output, assumptions=("A^ recovered",),
         description="Gradient fit of the squared loss in W with the output layer frozen (L-BFGS)")
register("ge2019-detector", paper="ge2019", algorithm="Corollary 1 / Lemma 9 (Eq. 11)", target=detector_value,
         assumptions=(_SYM,), description="The pure-neuron detector f(u), evaluated directly from samples")
register("ge2019-purity-score", paper="ge2019", algorithm="Lemma 2", target=purity_score,
         assumptions=(_SYM, "no label noise"),
         description="Scalar purity test 2 E[yx]^T E[xx^T]^-1 E[yx] - E[y^2] = sum c_i c_j m_ij")
register("ge2019-gaussian-distinguishing", paper="ge2019", algorithm="Lemma 19 (and N(0, QQ^T), Theorem 10 proof)",
         target=gaussian_distinguishing_matrix, assumptions=("zero-mean Gaussian input",),
         description="Closed-form distinguishing matrix N / augmented M and the scalars m_ij")
register("ge2019-population-t", paper="ge2019", algorithm="Appendix B.1.1 (T = M B C F; Lemma 14)",
         target=population_detector_matrix, assumptions=("M full column rank", "A full rank"),
         description="Population detector matrix from M and A, with sigma_k2(T) >= sigma_min(M) sigma_min(A)^2")
register("ge2019-perturb-weights", paper="ge2019", algorithm="Eq. 18 (smoothed W + rho E; Theorem 9, Lemma 22)",
         target=perturb_weights, assumptions=("Gaussian input, k <= d / 5 for the theorem",),
         description="Smoothed-analysis perturbation of the first-layer weights")
register("ge2019-perturbed-input", paper="ge2019", algorithm="Appendix C.2 ((Q, lambda)-perturbation; Theorem 10)",
         target=PerturbedSymmetric, assumptions=(_SYM, "k <= d / 7 for the theorem"),
         description="Smoothed input law D_{Q,lambda}: with probability lambda x = Q n, n ~ N(0, I)")
register("ge2019-leave-one-out", paper="ge2019", algorithm="Definition 2, Lemmas 20-21", target=leave_one_out_distance,
         description="Leave-one-out distance d(A), bracketing sigma_min(A)")
register("ge2019-fit-population", paper="ge2019", algorithm="Theorems 4-6 on exact moments (fit_population)",
         target=PureNeuronLearner.fit_population, assumptions=("zero-mean Gaussian input", _RANK),
         description="Algorithms 2-4 on exact population moments (Lemmas 6, 7, 19)")
register("ge2019-symmetry-test", paper="ge2019", algorithm="Section 2.1 assumption (symmetric input)",
         target=symmetry_test, description="Hotelling chi-square test of E[x] = E[x**3] = 0 (p-value)")
register("ge2019-symmetrize", paper="ge2019", algorithm="Section 1 (data symmetrisation)", target=symmetrize,
         description="Antithetic pairs: every x with -x and its label")
