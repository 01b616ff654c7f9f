"""Algorithms 2-4 and the Section 4 variant of Ge, Kuditipudi, Li, Wang (2019), chained from the stages in
:mod:`.core` (BuildT, NullSpan, SimDiag, SignFix) and :mod:`.moments`, plus the paper's data symmetrisation
(Section 1) and error metric (Section 4.1). :class:`~nnrecover.learners.ge2019.PureNeuronLearner` calls these."""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._validation import as_2d_float, as_targets, check_positive_int, check_random_state
from ...distributions import Distribution, Gaussian, StandardGaussian
from ...errors import AssumptionError, CertificateWarning, ConvergenceError, InputError
from ...network import TwoLayerNetwork
from .core import (build_detector_matrix, check_second_moment, cp_slices, fit_hidden_given_output, null_span,
                   output_projection, readout, sign_fix, sim_diag)
from .moments import PureNeuronMoments, PureNeuronStatistic

__all__ = ["PureNeuronResult", "algorithm2", "algorithm3", "algorithm4", "section4_variant", "pure_neuron_moments",
           "paper_error", "symmetrize", "SYMMETRY_ALPHA", "GAP_WARNING"]

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


