"""The estimator :class:`PureNeuronLearner` of Ge, Kuditipudi, Li, Wang (2019), and the algorithms that
chain the stages of the package (symbol table: the package docstring of :mod:`nnrecover.learners.ge2019`)."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from numbers import Integral, Real
from typing import Any

import numpy as np

from ..._validation import Interval, Options, as_2d_float, as_targets, check_positive_int, check_random_state
from ...distributions import Distribution, Gaussian, PerturbedSymmetric, StandardGaussian
from ...errors import AssumptionError, CertificateWarning, ConvergenceError, InputError
from ...network import TwoLayerNetwork
from ...sampling import sample
from .core import (algorithm1, build_detector_matrix, check_second_moment, cp_slices, detector_value,
                           fit_hidden_given_output, null_span, output_projection, purity_score, readout,
                           sign_fix, sim_diag)
from .distinguishing import (distinguishing_matrix, gaussian_distinguishing_matrix,
                                     leave_one_out_distance, perturb_weights, population_detector_matrix)
from .moments import (PureNeuronMoments, PureNeuronStatistic, gaussian_population_moments,
                              symmetry_test)
from .symmetric import duplication_matrix, mat_star, vec_star
from ..bakshi2019.certificate import certificate_rows, certify_max_unit_error, check_certificate_params
from .._registry import register
from ..base import BaseLearner

__all__ = ["PureNeuronLearner", "PureNeuronResult", "algorithm1", "algorithm2", "algorithm3", "algorithm4",
           "section4_variant", "pure_neuron_moments", "build_detector_matrix", "null_span", "sim_diag",
           "sign_fix", "cp_slices", "fit_hidden_given_output", "detector_value", "purity_score",
           "distinguishing_matrix", "gaussian_distinguishing_matrix", "population_detector_matrix",
           "perturb_weights", "leave_one_out_distance", "symmetry_test", "gaussian_population_moments",
           "paper_error", "symmetrize", "vec_star", "mat_star", "duplication_matrix", "SYMMETRY_ALPHA"]

#: default significance level of the symmetry test (AssumptionError when the p-value is below it)
SYMMETRY_ALPHA = 1e-6
#: warn (CertificateWarning) when the null-space gap ratio s_{k2} / s_{k2+1} of T is below this; by
#: Wedin's theorem the sine of the angle between the estimated and true null spaces is about its inverse
GAP_WARNING = 5.0

# roles of the parts of each split layout: (projection part, detector part, readout part)
_ROLES = {"none": (0, 0, 0), "alg3": (0, 0, 1), "alg4": (0, 1, 2)}


# ============================================================================================ results
@dataclass
class PureNeuronResult:
    """Output of Algorithms 2-4 and of the Section 4 variant.

    Attributes
    ----------
    hidden_weights : (k, d) array ``V`` (rows ``v_i = lambda_i w_i``, ``lambda_i > 0``)
    output_weights : (l, k) array ``P Z^{-1}`` (``= A diag(lambda)^{-1}`` up to unit order)
    Z : (k, k) array, rows the pure-neuron directions ``z_i`` (after SignFix)
    projection : (l, k) array ``P`` (identity when ``l = k``)
    diagnostics : dict (singular values of ``T``, gap ratio, SimDiag/CP-ALS scores, sign margins, ...)
    """

    hidden_weights: np.ndarray
    output_weights: np.ndarray
    Z: np.ndarray
    projection: np.ndarray
    diagnostics: dict = field(default_factory=dict)

    def network(self) -> TwoLayerNetwork:
        """The learned network ``P Z^{-1} relu(V x)`` in canonical form (unit rows of ``W``)."""
        return TwoLayerNetwork(self.hidden_weights, None, self.output_weights).canonical()


# ============================================================================================ data
def _source(X, Y=None):
    """The data source of ``fit(X, Y)``-style arguments and its output dimension ``l``."""
    from ...data import as_data_source

    source = as_data_source(X, Y)
    l = source.n_outputs
    if l is None:
        l = source.peek()[1].shape[1]
    if l == 0:
        raise InputError("Ge et al. 2019 learn from labelled samples: pass targets Y (fit(X, Y) or (X, Y) "
                         "chunks).")
    return source, l


def _materialize(X, Y=None) -> tuple[np.ndarray, np.ndarray]:
    """In-memory ``(X, Y)`` (``Y`` 2-D) from any data source (``O(n (d + l))`` memory)."""
    source, _ = _source(X, Y)
    return source.to_arrays()


def pure_neuron_moments(X, Y=None, *, split: str = "none", symmetry: bool = True, chunk_size: int | None = None,
                        detector: bool = True, B: np.ndarray | None = None,
                        projection: np.ndarray | None = None) -> PureNeuronMoments:
    """One pass over the data: every moment Algorithms 1-4 need (see :class:`PureNeuronStatistic`).

    Parameters
    ----------
    X : (n, d) array, or an iterable of ``(X, Y)`` chunks / a ``SampleStream`` (then ``Y=None``)
    Y : (n,) or (n, l) array, optional
    split : {"none", "alg3", "alg4"}
        Sample split: none; halves (Algorithm 3); 1/2, 1/4, 1/4 (Algorithm 4). Rows go to parts in
        pairs, so an antithetic sample keeps every ``+-x`` pair inside one part.
    symmetry : bool
        Also compute the symmetry test.
    chunk_size : int, optional
        Rows per chunk for in-memory arrays.
    detector, B, projection
        See :class:`PureNeuronStatistic` (``detector=False``: low-order moments only; ``B`` given: the
        contracted detector ``K`` of a second pass).
    """
    from ...moments import accumulate

    detector_part = _ROLES[split][1] if split in _ROLES else 0
    stat = PureNeuronStatistic(split=split, detector_part=detector_part, symmetry=symmetry, detector=detector,
                               B=B, projection=projection)
    source, _ = _source(X, Y)
    accumulate(stat, source, chunk_size=chunk_size)
    if stat.n == 0:
        raise InputError("no samples were given.")
    return stat.finalize()


def _check_assumptions(mom: PureNeuronMoments, k: int, *, check_symmetry: bool, symmetry_alpha: float) -> None:
    d, l = mom.n_inputs, mom.n_outputs
    if k > d:
        raise AssumptionError(f"n_hidden = {k} > n_inputs = {d}: Ge et al. 2019 need k <= d (Theorems 4-7); "
                              "use fewer hidden units or another learner.")
    if l < k:
        raise AssumptionError(f"the output dimension {l} is smaller than n_hidden = {k}: Ge et al. 2019 need "
                              "at least k outputs (Section 2.1, Appendix A.3); use another learner.")
    for part in mom.parts:
        check_second_moment(part.second)
    if check_symmetry and mom.symmetry is not None and mom.symmetry.p_value < symmetry_alpha:
        s = mom.symmetry
        raise AssumptionError(
            f"the input distribution does not look symmetric (x and -x equal in law), the assumption of Ge "
            f"et al. 2019: the odd moments E[x], E[x**3] are non-zero (Hotelling chi-square = "
            f"{s.statistic:.4g} on {s.df} degrees of freedom, p-value {s.p_value:.3g} < {symmetry_alpha:g}). "
            "Symmetrise the data (add -x with its label) or pass check_symmetry=False.")


# ============================================================================================ pipeline
def _pipeline(mom: PureNeuronMoments, k: int, *, noise_correction: bool, decomposition: str, rng,
              n_tries: int = 20, n_slices: int | None = None, n_restarts: int = 10, cp_iter_max: int = 1000,
              strict: bool = False, roles: tuple[int, int, int] = (0, 0, 0), warn: bool = True) -> PureNeuronResult:
    """Alg. 2/3 steps 2-13 (and Alg. 4 steps 2-4) on precomputed moments."""
    gen = check_random_state(rng)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    l = mom.n_outputs
    proj_part, det_part, read_part = (mom.parts[r] for r in roles)
    projection, sv_cross = _projection(proj_part, k, l)
    if mom.detector.K is not None:
        projection = mom.detector.projection
    T = build_detector_matrix(mom.detector, det_part, projection=projection, noise_correction=noise_correction)
    timings["build_T"] = time.perf_counter() - t0
    ns = null_span(T, k)
    diag: dict[str, Any] = dict(
        algorithm=("Algorithm 3" if noise_correction else "Algorithm 2") + (" + Algorithm 4" if l > k else ""),
        noise_correction=noise_correction, decomposition=decomposition,
        T_singular_values_tail=ns.singular_values[-(k + 1):].tolist(), null_gap_ratio=ns.gap_ratio,
        n_samples=[p.n for p in mom.parts])
    if sv_cross is not None:
        diag["cross_singular_values"] = sv_cross.tolist()
    if warn and ns.gap_ratio < GAP_WARNING:
        msg = (f"the null space of the detector matrix T is not well separated (s_k2 / s_k2+1 = "
               f"{ns.gap_ratio:.3g} < {GAP_WARNING:g}): too few samples, or the distinguishing matrix is "
               "near rank deficient (Ge et al. 2019, Lemma 14). The estimate may be poor.")
        diag["certificate_failed"] = "null_gap_ratio"
        if strict:
            raise ConvergenceError(msg)
        warnings.warn(msg, CertificateWarning, stacklevel=3)
    t0 = time.perf_counter()
    if decomposition == "simdiag":
        sd = sim_diag(ns.basis, rng=gen, n_tries=n_tries)
        Z = sd.Z
        diag.update(simdiag_residual=sd.residual, simdiag_separation=sd.separation, simdiag_imaginary=sd.imaginary,
                    simdiag_condition=sd.condition, simdiag_tries=sd.n_tries)
    elif decomposition == "cp-als":
        cp = cp_slices(ns.basis, rng=gen, n_slices=n_slices, n_restarts=n_restarts, n_iter_max=cp_iter_max)
        Z = cp.Z
        diag.update(cp_fit_error=cp.fit_error, cp_restarts=cp.n_restarts, cp_slices=cp.n_slices)
    else:
        raise InputError(f"decomposition must be 'simdiag' or 'cp-als', got {decomposition!r}.")
    timings["decomposition"] = time.perf_counter() - t0
    cond_Z = float(np.linalg.cond(Z))
    diag["Z_condition"] = cond_Z
    if not np.isfinite(cond_Z) or cond_Z > 1e12:
        raise AssumptionError(f"the recovered pure-neuron directions are (nearly) linearly dependent "
                              f"(cond(Z) = {cond_Z:.3g}); Z^{{-1}} does not exist. Pass more samples or use "
                              "the Section 4 variant (method='practical'; Ge et al. 2019, Section 4).")
    mean_y = read_part.mean_y if projection is None else projection.T @ read_part.mean_y
    Z, margins = sign_fix(Z, mean_y)
    diag["sign_margins"] = margins.tolist()
    V = readout(Z, read_part, projection)
    Zinv = np.linalg.inv(Z)
    out_w = Zinv if projection is None else projection @ Zinv
    diag["timings"] = timings
    return PureNeuronResult(V, out_w, Z, np.eye(l) if projection is None else projection, diag)


def _projection(part, k: int, l: int):
    """Algorithm 4 step 2 (``l > k``): ``P`` and the singular values of ``E[y x^T]``; ``(None, None)`` else."""
    if l <= k:
        return None, None
    P, sv_cross = output_projection(part, k)
    if sv_cross[k - 1] <= 1e-12 * sv_cross[0]:
        raise AssumptionError(f"E[y x^T] has rank < n_hidden = {k} (singular values {sv_cross[:k + 1]}): "
                              "A or W is rank deficient (Ge et al. 2019, Theorem 6 needs rank A = k).")
    return P, sv_cross


def _layout(split: bool, l: int, k: int) -> str:
    if not split:
        return "none"
    return "alg4" if l > k else "alg3"


def _run(X, Y, n_hidden, *, noise_correction, split, decomposition, rng, check_symmetry, symmetry_alpha,
         n_tries=20, n_slices=None, n_restarts=10, cp_iter_max=1000, strict=False, chunk_size=None,
         require_square=False, warn=True):
    k = check_positive_int(n_hidden, "n_hidden")
    source, l = _source(X, Y)
    d = source.n_inputs
    if d is not None and k > d:
        raise AssumptionError(f"n_hidden = {k} > n_inputs = {d}: Ge et al. 2019 need k <= d (Theorems 4-7); "
                              "use fewer hidden units or another learner.")
    if l < k:
        raise AssumptionError(f"the output dimension {l} is smaller than n_hidden = {k}: Ge et al. 2019 need "
                              "at least k outputs (Section 2.1, Appendix A.3); use another learner.")
    if require_square and l != k:
        raise AssumptionError(f"this algorithm needs exactly n_hidden = {k} outputs, got {l}; "
                              "use algorithm4 for more outputs.")
    layout = _layout(split, l, k)
    roles = _ROLES[layout]
    if source.info.reiterable:
        # two passes: low-order moments first (and every cheap check), then the detector contracted
        # with the now known B = E[y x^T] Sigma^{-1} (and Algorithm 4's P): 2-3 times fewer flops
        mom = pure_neuron_moments(source, split=layout, symmetry=check_symmetry, chunk_size=chunk_size,
                                  detector=False)
        _check_assumptions(mom, k, check_symmetry=check_symmetry, symmetry_alpha=symmetry_alpha)
        P, _ = _projection(mom.parts[roles[0]], k, l)
        det = mom.parts[roles[1]]
        cross = det.cross if P is None else P.T @ det.cross
        B = np.linalg.solve(det.second, cross.T).T
        mom.detector = pure_neuron_moments(source, split=layout, symmetry=False, chunk_size=chunk_size,
                                           B=B, projection=P).detector
    else:  # a one-pass iterator: raw third/fourth-order moments in the same pass
        mom = pure_neuron_moments(source, split=layout, symmetry=check_symmetry, chunk_size=chunk_size)
        _check_assumptions(mom, k, check_symmetry=check_symmetry, symmetry_alpha=symmetry_alpha)
    res = _pipeline(mom, k, noise_correction=noise_correction, decomposition=decomposition, rng=rng,
                    n_tries=n_tries, n_slices=n_slices, n_restarts=n_restarts, cp_iter_max=cp_iter_max,
                    strict=strict, roles=roles, warn=warn)
    res.diagnostics["split"] = layout
    if mom.symmetry is not None:
        res.diagnostics["symmetry_p_value"] = mom.symmetry.p_value
    return res


# ============================================================================================ functions
def algorithm2(X, Y, n_hidden: int, *, rng=None, n_tries: int = 20, check_symmetry: bool = True,
               symmetry_alpha: float = SYMMETRY_ALPHA, strict: bool = False) -> PureNeuronResult:
    """Algorithm 2: learn ``y = A relu(W x)`` (noiseless, ``A`` square) by the pure-neuron detector.

    Steps: moments up to order 4; BuildT with Corollary 1's detector; NullSpan; SimDiag; SignFix;
    Algorithm 1 on ``z_i^T y``. Theorem 4: with exact moments (or an exactly symmetric sample, e.g.
    antithetic ``+-x`` pairs) and ``A``, ``W``, ``E[x x^T]``, ``N`` of full rank, the output computes
    exactly the same function, and its canonical form equals ``(A Pi^T, Pi W)`` for unit rows ``w_i``.

    Parameters
    ----------
    X : (n, d) array
    Y : (n, k) array
    n_hidden : int
    rng : int, Generator or None
        Random draws of SimDiag.
    n_tries : int, default 20
        SimDiag draws; the one whose ``Z`` best diagonalises the whole null space is kept (1 is the
        paper's single draw).
    check_symmetry, symmetry_alpha : symmetry test of the input (AssumptionError when p < alpha).
    strict : bool
        Raise :class:`ConvergenceError` instead of warning when the null-space gap certificate fails.

    Returns
    -------
    PureNeuronResult
    """
    return _run(X, Y, n_hidden, noise_correction=False, split=False, decomposition="simdiag", rng=rng,
                check_symmetry=check_symmetry, symmetry_alpha=symmetry_alpha, n_tries=n_tries, strict=strict,
                require_square=True)


def algorithm3(X, Y, n_hidden: int, *, split: bool = True, rng=None, n_tries: int = 20,
               check_symmetry: bool = True, symmetry_alpha: float = SYMMETRY_ALPHA,
               strict: bool = False) -> PureNeuronResult:
    """Algorithm 3: learn ``y = A relu(W x) + xi`` (zero-mean noise independent of ``x``; ``A`` square).

    BuildT uses Eq. 11's noise-corrected detector, whose null space is unaffected by the noise
    (Lemma 9-10; needs the augmented ``M`` of full rank, Theorem 5). With ``split=True`` (the paper)
    steps 2-5 use the first half of the sample and SignFix / Algorithm 1 the second half; rows go to
    halves in pairs ``(2j, 2j+1)``, so antithetic ``+-x`` pairs stay together.

    Parameters and return value as :func:`algorithm2`, plus ``split``.
    """
    return _run(X, Y, n_hidden, noise_correction=True, split=split, decomposition="simdiag", rng=rng,
                check_symmetry=check_symmetry, symmetry_alpha=symmetry_alpha, n_tries=n_tries, strict=strict,
                require_square=True)


def algorithm4(X, Y, n_hidden: int, *, split: bool = True, noise_correction: bool = True, rng=None,
               n_tries: int = 20, check_symmetry: bool = True, symmetry_alpha: float = SYMMETRY_ALPHA,
               strict: bool = False) -> PureNeuronResult:
    """Algorithm 4 (Appendix A.3): ``A`` of shape ``(l, k)``, ``l >= k``.

    ``P`` = top-``k`` left singular vectors of ``E[y x^T]`` (``= A W Sigma / 2``, so ``col P = col A``);
    Algorithm 3 on ``P^T y``; output ``V`` and ``P Z^{-1}`` (Theorem 6). With ``split=True`` the sample
    is split 1/2 (``P``), 1/4 (``T``), 1/4 (SignFix, Algorithm 1), in ``+-x`` pairs.

    Parameters and return value as :func:`algorithm3`; ``noise_correction=False`` uses Algorithm 2's
    detector inside.
    """
    return _run(X, Y, n_hidden, noise_correction=noise_correction, split=split, decomposition="simdiag",
                rng=rng, check_symmetry=check_symmetry, symmetry_alpha=symmetry_alpha, n_tries=n_tries,
                strict=strict)


def section4_variant(X, Y, n_hidden: int, *, rng=None, noise_correction: bool = True, split: bool = False,
                     n_slices: int | None = None, n_restarts: int = 10, cp_iter_max: int = 1000,
                     gd_max_iter: int = 500, check_symmetry: bool = True,
                     symmetry_alpha: float = SYMMETRY_ALPHA, strict: bool = False) -> PureNeuronResult:
    """The practical variant of Section 4 (what the paper's experiments ran).

    (a) SimDiag is replaced by rank-``k`` CP-ALS on ``n_slices = 10 k`` random slices ``mat*(S g_t)``
    of the null space, best of ``n_restarts = 10`` (lowest reconstruction error); (b) with ``A^ = P Z^{-1}``
    fixed, ``W`` is fitted by minimising the squared loss (L-BFGS) from Algorithm 1's output.

    Returns
    -------
    PureNeuronResult
        ``hidden_weights`` is the fitted ``W``; ``diagnostics["hidden_fit"]`` reports the losses.
    """
    Xa, Ya = _materialize(X, Y)
    res = _run(Xa, Ya, n_hidden, noise_correction=noise_correction, split=split, decomposition="cp-als",
               rng=rng, check_symmetry=check_symmetry, symmetry_alpha=symmetry_alpha, n_slices=n_slices,
               n_restarts=n_restarts, cp_iter_max=cp_iter_max, strict=strict)
    V, info = fit_hidden_given_output(Xa, Ya, res.output_weights, res.hidden_weights, max_iter=gd_max_iter)
    res.hidden_weights = V
    res.diagnostics["hidden_fit"] = info
    return res


def symmetrize(X, labels) -> tuple[np.ndarray, np.ndarray]:
    """Data symmetrisation (the paper's Section 1 remark): every ``x`` together with ``-x``.

    Parameters
    ----------
    X : (n, d) array
    labels : callable
        Returns the labels of an ``(m, d)`` array of inputs, e.g. ``teacher.predict`` or a lookup that
        queries the labelling process for the negated inputs.

    Returns
    -------
    Xs : (2n, d) array with rows ``x_1, -x_1, x_2, -x_2, ...`` (pairs adjacent, so the sample splits of
        Algorithms 3-4 keep them together)
    Ys : labels of ``Xs``
        The empirical law of ``Xs`` is exactly symmetric: every odd empirical moment is zero and the
        identities of Lemmas 1-10 hold for the empirical measure.
    """
    X = as_2d_float(X, "X")
    if not callable(labels):
        raise InputError("labels must be a callable returning the labels of an array of inputs "
                         "(e.g. teacher.predict).")
    Xs = np.empty((2 * X.shape[0], X.shape[1]))
    Xs[0::2] = X
    Xs[1::2] = -X
    Ys = as_targets(labels(Xs), "labels(X)", n_rows=Xs.shape[0])
    return Xs, Ys


# ============================================================================================ metrics
def paper_error(estimated: TwoLayerNetwork, truth: TwoLayerNetwork) -> dict:
    """The error metric of the paper's Section 4.1.

    Columns of ``A`` and rows of ``W`` of both networks are normalised to unit length, units are
    paired by a Hungarian matching on ``|cos|`` between the rows of ``W``, and the squared distances
    are summed: ``err_W = sum_i ||w_i - w^_pi(i)||^2``, ``err_A = sum_i ||a_i - a^_pi(i)||^2``.

    Returns
    -------
    dict with ``err_W``, ``err_A``, ``normalized_W = sqrt(err_W / k)``, ``normalized_A``,
    ``permutation`` (unit ``i`` of the truth is unit ``permutation[i]`` of the estimate).
    """
    from scipy.optimize import linear_sum_assignment

    if not isinstance(estimated, TwoLayerNetwork) or not isinstance(truth, TwoLayerNetwork):
        raise InputError("paper_error compares two TwoLayerNetwork objects.")
    if (estimated.n_hidden, estimated.n_inputs, estimated.n_outputs) != (truth.n_hidden, truth.n_inputs,
                                                                         truth.n_outputs):
        raise InputError("paper_error needs networks of equal shape (n_inputs, n_hidden, n_outputs).")

    def unit_rows(M):
        return M / np.linalg.norm(M, axis=1, keepdims=True)

    W, We = unit_rows(truth.hidden_weights), unit_rows(estimated.hidden_weights)
    A, Ae = unit_rows(truth.output_weights.T), unit_rows(estimated.output_weights.T)
    _, perm = linear_sum_assignment(-np.abs(W @ We.T))
    err_W = float(np.sum((W - We[perm]) ** 2))
    err_A = float(np.sum((A - Ae[perm]) ** 2))
    k = truth.n_hidden
    return dict(err_W=err_W, err_A=err_A, normalized_W=float(np.sqrt(err_W / k)),
                normalized_A=float(np.sqrt(err_A / k)), permutation=perm)


# ============================================================================================ estimator
def _population_cov(distribution: Distribution | None, d: int) -> np.ndarray | None:
    if distribution is None:
        return None
    if not isinstance(distribution, Distribution) or distribution.dim != d:
        raise InputError(f"distribution must be an nnrecover distribution of dimension {d}.")
    if isinstance(distribution, StandardGaussian):
        return None
    if isinstance(distribution, Gaussian) and not np.any(distribution.mean):
        return distribution.covariance
    raise InputError(f"fit_population has exact moments for zero-mean Gaussian inputs only, got "
                     f"{type(distribution).__name__}; fit on samples instead.")


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
        its p-value is below ``symmetry_alpha``.
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
        check that warns), ``stage_checks`` (``null_gap_ratio``: a check of the provable stage only,
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
                 random_state=None):
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
        self.random_state = random_state

    # ------------------------------------------------------------------ validation
    _parameter_constraints = {
        "method": [Options("provable", "practical")],
        "noise_correction": ["boolean"], "split": ["boolean"], "check_symmetry": ["boolean"],
        "n_tries": [Interval(Integral, 1, None)], "n_restarts": [Interval(Integral, 1, None)], "gd_max_iter": [Interval(Integral, 1, None)],
        "n_slices": [None, Interval(Integral, 1, None)], "chunk_size": [None, Interval(Integral, 1, None)],
        "symmetry_alpha": [Interval(Real, 0, 1, closed="neither")],
        "certificate_tol": [Interval(Real, 0, None, closed="neither")], "certificate_rows": [Interval(Integral, 1, None)],
    }

    # ------------------------------------------------------------------ fitting
    def _fit(self, source, rng: np.random.Generator, diagnostics: dict) -> TwoLayerNetwork:
        from ...data import as_data_source

        practical = self.method == "practical"
        if practical:  # the gradient fit of W needs the samples in memory
            Xa, Ya = source.to_arrays()
            source = as_data_source(Xa, Ya)
        res = _run(source, None, self.n_hidden, noise_correction=self.noise_correction, split=self.split,
                   decomposition="cp-als" if practical else "simdiag", rng=rng,
                   check_symmetry=self.check_symmetry, symmetry_alpha=float(self.symmetry_alpha),
                   n_tries=self.n_tries, n_slices=self.n_slices, n_restarts=self.n_restarts,
                   strict=self.strict, chunk_size=self.chunk_size, warn=False)
        if practical:
            V, info = fit_hidden_given_output(Xa, Ya, res.output_weights, res.hidden_weights,
                                              max_iter=self.gd_max_iter)
            res.hidden_weights = V
            res.diagnostics["hidden_fit"] = info
        return self._finish(res, source, rng, diagnostics)

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
        mom = gaussian_population_moments(truth.hidden_weights, truth.output_weights, cov)
        k = check_positive_int(self.n_hidden, "n_hidden")
        _check_assumptions(mom, k, check_symmetry=False, symmetry_alpha=float(self.symmetry_alpha))
        res = _pipeline(mom, k, noise_correction=self.noise_correction,
                        decomposition="cp-als" if self.method == "practical" else "simdiag", rng=rng,
                        n_tries=self.n_tries, n_slices=self.n_slices, n_restarts=self.n_restarts,
                        strict=self.strict, warn=False)
        dist = distribution if distribution is not None else StandardGaussian(truth.n_inputs)
        rows = sample(truth, dist, int(self.certificate_rows), rng=rng)
        return self._finish(res, None, rng, diagnostics, rows=rows)

    def _finish(self, res: PureNeuronResult, source, rng, diagnostics: dict, rows=None) -> TwoLayerNetwork:
        self.result_ = res
        diagnostics.update(res.diagnostics)
        gap = res.diagnostics["null_gap_ratio"]
        diagnostics["stage_checks"] = {"null_gap_ratio": {
            "passed": bool(gap >= GAP_WARNING), "stage": "provable estimate (before refinement)",
            "meaning": "sine of the angle between the estimated and the true null space of T <~ 1 / ratio "
                       "(Wedin; Lemma 14); says nothing about the refined network",
            "detail": f"s_k2 / s_k2+1 = {gap:.3g} (well separated when >= {GAP_WARNING:g})"}}
        net = self._maybe_refine(res.network(), source, rng, diagnostics).canonical()
        if rows is None:
            rows = certificate_rows(source, rng, int(self.certificate_rows))
        certify_max_unit_error(self, net, rows, diagnostics, tol=float(self.certificate_tol),
                               stage="final estimate" + (" (after refinement)"
                                                         if diagnostics["refinement"].get("ran") else ""))
        self.output_weights_ = net.output_weights
        return net

    @classmethod
    def applies_to(cls, network: TwoLayerNetwork, distribution: Distribution):
        """Whether the learner's assumptions hold for a teacher and an input law: ``(bool, reason)``."""
        if not distribution.is_symmetric:
            return False, "the input distribution is not symmetric (Ge et al. 2019 assume x ~ -x)"
        if network.n_hidden > network.n_inputs:
            return False, "n_hidden > n_inputs (Ge et al. 2019 need k <= d)"
        if network.n_outputs < network.n_hidden:
            return False, "fewer outputs than hidden units (Ge et al. 2019 need l >= k)"
        if network.activation.name != "relu":
            return False, f"activation {network.activation.name!r} (Ge et al. 2019 learn ReLU networks)"
        return True, "symmetric input, k <= d, l >= k, ReLU"


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
