"""Algorithms 2-4 and the Section 4 variant of Ge, Kuditipudi, Li, Wang (2019), chained from the stages in
:mod:`.core` (BuildT, NullSpan, SimDiag, SignFix) and :mod:`.moments`, plus the paper's data symmetrisation
(Section 1) and error metric (Section 4.1). :class:`~nnrecover.learners.ge2019.PureNeuronLearner` calls these.

The span reduction (:func:`span_basis`; ``span=`` of :func:`_run` and of the learner) runs the same
stages on ``z = Q^T x``, where ``Q`` spans the row space of ``W``; why that is exact is explained in
the package docstring.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._validation import (
    as_2d_float,
    as_targets,
    check_positive_int,
    check_random_state,
)
from ...data import accumulate, as_data_source
from ...distributions import Distribution, Gaussian, StandardGaussian
from ...errors import (
    AssumptionError,
    AssumptionWarning,
    CertificateWarning,
    ConvergenceError,
    InputError,
)
from ...moments.symmetry import SYMMETRY_GRAM_ROWS, SymmetryStatistic, symmetry_stride
from ...network import TwoLayerNetwork
from .conditions import symmetry_refusal, width_refusal
from .core import (
    build_detector_matrix,
    check_second_moment,
    cp_slices,
    fit_hidden_given_output,
    null_span,
    output_projection,
    readout,
    sign_fix,
    sim_diag,
)
from .moments import (
    DetectorMoments,
    PartMoments,
    PureNeuronMoments,
    PureNeuronStatistic,
    gaussian_population_moments,
)

__all__ = ["PureNeuronResult", "SpanBasis", "span_basis", "algorithm2", "algorithm3", "algorithm4", "section4_variant",
           "pure_neuron_moments", "paper_error", "symmetrize", "SYMMETRY_ALPHA", "GAP_WARNING", "SPAN_GAP_MIN"]

#: default significance level of the symmetry test (AssumptionError when the p-value is below it)
SYMMETRY_ALPHA = 1e-6
#: warn (CertificateWarning) when the null-space gap ratio s_{k2} / s_{k2+1} of T is below this; by
#: Wedin's theorem the sine of the angle between the estimated and true null spaces is about its inverse
GAP_WARNING = 5.0

#: warn (AssumptionWarning; AssumptionError with strict=True) when the k-th singular value of
#: E[y x^T] Sigma^{-1} is below this multiple of its estimated sampling error: by Wedin's theorem the sine
#: of the angle between the estimated and the true row space of W is at most about the inverse of the
#: ratio, so below 2 the estimated span may miss a whole hidden direction (a rank-deficient A with label
#: noise gives ratios well below 1)
SPAN_GAP_MIN = 2.0
#: relative size below which a singular value of E[y x^T] Sigma^{-1} counts as zero (exact moments)
_RANK_TOL = 1e-12

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


@dataclass
class SpanBasis:
    """The row space of ``W`` estimated from the low-order moments (:func:`span_basis`).

    Attributes
    ----------
    basis : (d, k) array ``Q`` with orthonormal columns: the top-``k`` right singular vectors of
        ``E[y x^T] Sigma^{-1}`` (``= A W / 2``, Lemma 1).
    singular_values : all singular values of ``E[y x^T] Sigma^{-1}``, descending.
    noise : estimate of the spectral norm of its sampling error (0 for exact moments; NaN when the
        halves of the sample were too small to estimate it).
    gap_ratio : ``s_k / noise`` (``inf`` for exact moments); Wedin's bound on the sine of the angle
        between ``span Q`` and the row space of ``W`` is about its inverse.
    """

    basis: np.ndarray
    singular_values: np.ndarray
    noise: float
    gap_ratio: float

    def as_dict(self) -> dict:
        """The diagnostics record (without the basis)."""
        return dict(dimension=int(self.basis.shape[1]), singular_values=self.singular_values.tolist(),
                    noise=self.noise, gap_ratio=self.gap_ratio)


class _SpanRankError(AssumptionError):
    """``E[y x^T] Sigma^{-1}`` has rank < k to round-off (``span="auto"`` then falls back)."""


def _solve_cross(part_second: np.ndarray, cross: np.ndarray) -> np.ndarray:
    return np.linalg.solve(part_second, cross.T).T


def span_basis(part, k: int, *, strict: bool = False) -> SpanBasis:
    """Orthonormal basis ``Q`` of the row space of ``W`` from ``E[x x^T]`` and ``E[y x^T]`` of one part.

    For a symmetric input ``E[relu(w.x) x] = Sigma w / 2`` (Lemma 1, from Lemma 6), so
    ``E[y x^T] Sigma^{-1} = A W / 2``: rank ``k`` when ``A`` and ``W`` have rank ``k`` (Theorems 4-6), with
    the row space of ``W``. ``Q`` holds its top-``k`` right singular vectors.

    Parameters
    ----------
    part : PartMoments
        Low-order moments; with ``halves`` (from ``PureNeuronStatistic(halves=True)``) the sampling
        error is estimated as ``||B_0 - B_1|| sqrt(n_0 n_1) / n`` from the estimates ``B_0``, ``B_1`` of
        the two halves (independent copies, so ``B_0 - B_1`` has the covariance of the error of the
        pooled ``B`` times ``n^2 / (n_0 n_1)``).
    k : int
    strict : bool, default False
        Raise instead of warning when ``s_k`` is not separated from the sampling error.

    Returns
    -------
    SpanBasis

    Raises
    ------
    AssumptionError
        When ``s_k`` is zero to round-off: ``A`` or ``W`` of rank < ``k`` (noiseless labels keep that
        exact in any sample, since ``E^[y x^T] = A E^[relu(W x) x^T]``); with ``strict``, also when
        ``s_k`` is below :data:`SPAN_GAP_MIN` times the estimated sampling error.

    Warns
    -----
    AssumptionWarning
        When ``s_k`` is below :data:`SPAN_GAP_MIN` times the estimated sampling error (and not
        ``strict``): the sample cannot tell ``rank A W = k`` from a smaller rank.
    """
    k = check_positive_int(k, "n_hidden")
    check_second_moment(part.second)
    B = _solve_cross(part.second, part.cross)  # (l, d) = A W / 2 in the population
    _, s, Vt = np.linalg.svd(B, full_matrices=False)
    if s.size < k:
        raise AssumptionError(f"E[y x^T] has only {s.size} singular values; n_hidden = {k} needs k <= d and at "
                              "least k outputs (Ge et al. 2019, Section 2.1).")
    noise = 0.0
    if part.halves is not None:
        (n0, S0, C0), (n1, S1, C1) = part.halves
        try:
            check_second_moment(S0)
            check_second_moment(S1)
            diff = _solve_cross(S0, C0) - _solve_cross(S1, C1)
            noise = float(np.linalg.norm(diff, 2) * np.sqrt(n0 * n1) / (n0 + n1))
        except (InputError, np.linalg.LinAlgError):  # a half with fewer rows than d: nothing to estimate
            noise = float("nan")
    sk = float(s[k - 1])
    gap = float("inf") if noise == 0 else (sk / noise if np.isfinite(noise) else float("nan"))
    what = "E[y x^T] E[x x^T]^-1 (= A W / 2 for a symmetric input, Lemma 1)"
    if not sk > _RANK_TOL * s[0]:
        raise _SpanRankError(
            f"{what} has rank < n_hidden = {k} (singular values {np.array2string(s[:k + 1], precision=3)}): A or "
            "W is rank deficient, e.g. two equal columns of A. Ge et al. 2019 need A and W of rank k "
            "(Theorems 4-6); use fewer hidden units or another learner.")
    if gap < SPAN_GAP_MIN:
        msg = (f"the k-th singular value of {what} is not separated from its sampling error: s_k = {sk:.3g}, "
               f"estimated error {noise:.3g} (ratio {gap:.3g} < {SPAN_GAP_MIN:g}), so its top-k right singular "
               "vectors need not span the rows of W. Either A or W is (nearly) rank deficient (Ge et al. 2019 "
               "need rank A = rank W = k, Theorems 4-6) or there are too few samples for this k: pass more "
               "samples, fewer hidden units, or span=False for the paper's statistics in all d dimensions.")
        if strict:
            raise AssumptionError(msg)
        warnings.warn(msg, AssumptionWarning, stacklevel=4)
    return SpanBasis(Vt[:k].T.copy(), s, noise, gap)


def _use_span(span, k: int, d: int | None, reiterable: bool) -> tuple[bool, str]:
    """The rule of ``span="auto"`` (and the checks of ``span=True``): ``(use it, why)``."""
    if isinstance(span, (bool, np.bool_)):
        span = bool(span)
    elif not (isinstance(span, str) and span == "auto"):
        raise InputError(f"span must be True, False or 'auto', got {span!r}.")
    if span is False:
        return False, "span=False: the paper's statistics in all d dimensions"
    if not reiterable:
        if span is True:
            raise InputError("span=True reads the data twice (the span of W first, then the detector on z = "
                             "Q^T x), but a one-pass iterator was given; pass arrays, a list of chunks or an "
                             "nnrecover.SampleStream, or span='auto' / False.")
        return False, ("one-pass iterator: the detector moments are accumulated in the same pass as the "
                       "span's, so in all d dimensions")
    if span is True:
        return True, "span=True"
    if d is not None and k >= d:
        return False, "k = d: the row space of W is the whole input space"
    return True, "k < d: the detector on z = Q^T x costs O(n (d k + k^4)) instead of O(n k^2 d^2)"


# ============================================================================================ data
def _source(X, Y=None):
    """The data source of ``fit(X, Y)``-style arguments and its output dimension ``l``."""

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
                        projection: np.ndarray | None = None, input_projection: np.ndarray | None = None,
                        halves: bool = False, symmetry_gram_rows: int | None = SYMMETRY_GRAM_ROWS
                        ) -> PureNeuronMoments:
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
    detector, B, projection, input_projection, halves
        See :class:`PureNeuronStatistic` (``detector=False``: low-order moments only; ``B`` given: the
        contracted detector ``K`` of a second pass; ``input_projection=Q``: moments of ``z = Q^T x``).
    symmetry_gram_rows : int or None, default ``SYMMETRY_GRAM_ROWS`` (20000)
        When the number of rows is known and exceeds ``max(symmetry_gram_rows, 100 d)``, the symmetry
        test takes the mean and variances of its odd features from every row and their correlations from
        every ``s``-th row (:func:`.moments.symmetry_stride`; ``O(n d)`` instead of ``O(n (2 d)^2)``, the
        power and p-value of :class:`.moments.SymmetryStatistic`). ``None``: the Gram of every row.
    """

    detector_part = _ROLES[split][1] if split in _ROLES else 0
    # the symmetry test's sums as a statistic of their own, so a pass with two workers computes them beside
    # the part moments; on large data its Gram sees only every stride-th row (O(n d) in all)
    separate = symmetry and input_projection is None
    stat = PureNeuronStatistic(split=split, detector_part=detector_part, symmetry=symmetry and not separate,
                               detector=detector, B=B, projection=projection, input_projection=input_projection,
                               halves=halves)
    source, _ = _source(X, Y)
    sym = None
    if separate:
        stride = 1 if symmetry_gram_rows is None else symmetry_stride(
            source.n_samples, source.n_inputs, check_positive_int(symmetry_gram_rows, "symmetry_gram_rows"))
        sym = SymmetryStatistic(stride)
        # sum x and sum x**2 over every row are the part moments' sum x and diagonal of sum x x^T (the
        # parts cover every row): the symmetry statistic does not sum them again
        sym._column_sums = stride == 1
    accumulate([stat] if sym is None else [stat, sym], source, chunk_size=chunk_size)
    if stat.n == 0:
        raise InputError("no samples were given.")
    mom = stat.finalize()
    if sym is not None:
        if not sym._column_sums:
            sym._set_column_sums(*stat._power_sums())
        mom.symmetry = sym.finalize()
    return mom


def _detector_pass(source, layout: str, chunk_size: int | None, B: np.ndarray, P: np.ndarray | None,
                   Q: np.ndarray | None = None) -> DetectorMoments:
    """The second pass of the two-pass scheme: the contracted detector ``K`` alone (BuildT, Eq. 10).

    The parts' low-order moments are those of the first pass (the same rows in the same parts), so this
    pass does not sum them again: with ``Q`` (the span route) they are the first pass's projected by
    :func:`_projected_part`; without, the first pass's themselves."""

    stat = PureNeuronStatistic(split=layout, detector_part=_ROLES[layout][1], symmetry=False, B=B, projection=P,
                               input_projection=Q)
    stat._low_order = False
    accumulate([stat], source, chunk_size=chunk_size)
    return stat._finalize_detector()


def _projected_part(part: PartMoments, Q: np.ndarray) -> PartMoments:
    """The low-order moments of ``z = Q^T x`` from those of ``x`` over the same rows: ``E[z] = Q^T E[x]``,
    ``E[z z^T] = Q^T E[x x^T] Q``, ``E[y z^T] = E[y x^T] Q``; those of ``y`` alone unchanged. Equal, to
    round-off, to summing them over ``X Q`` chunk by chunk, without that ``O(n k^2)`` pass."""
    second = Q.T @ part.second @ Q
    return PartMoments(part.n, Q.T @ part.mean_x, (second + second.T) / 2, part.cross @ Q, part.yy, part.mean_y)


def _check_assumptions(mom: PureNeuronMoments, k: int, *, check_symmetry: bool, symmetry_alpha: float) -> None:

    why = width_refusal(k, mom.n_inputs, mom.n_outputs)
    if why:
        raise AssumptionError(why)
    for part in mom.parts:
        check_second_moment(part.second)
    why = symmetry_refusal(mom.symmetry, symmetry_alpha) if check_symmetry else None
    if why:
        raise AssumptionError(why)


# ============================================================================================ pipeline
def _pipeline(mom: PureNeuronMoments, k: int, *, noise_correction: bool, decomposition: str, rng,
              n_tries: int = 20, n_slices: int | None = None, n_restarts: int = 10, cp_iter_max: int = 1000,
              strict: bool = False, roles: tuple[int, int, int] = (0, 0, 0), warn: bool = True,
              readout_part=None) -> PureNeuronResult:
    """Alg. 2/3 steps 2-13 (and Alg. 4 steps 2-4) on precomputed moments.

    ``readout_part`` (the span route): the ``x``-space moments of the readout part, so that Algorithm 1
    runs on ``(x, z_i^T y)`` unchanged while the detector moments ``mom`` are those of ``Q^T x``.
    """
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
        diag.update(cp_fit_error=cp.fit_error, cp_restarts=cp.n_restarts, cp_slices=cp.n_slices,
                    cp_kept=cp.cp_diagnostics.get("kept"),
                    cp_candidate_errors=cp.cp_diagnostics.get("candidate_errors"))
    else:
        raise InputError(f"decomposition must be 'simdiag' or 'cp-als', got {decomposition!r}.")
    timings["decomposition"] = time.perf_counter() - t0
    cond_Z = float(np.linalg.cond(Z))
    diag["Z_condition"] = cond_Z
    if not np.isfinite(cond_Z) or cond_Z > 1e12:
        other = ("or use the Section 4 variant (method='practical'; Ge et al. 2019, Section 4), whose CP-ALS "
                 "is less sensitive to noise than SimDiag" if decomposition == "simdiag" else
                 "or use Algorithm 3 (method='provable'), whose SimDiag is exact when the moments are")
        raise AssumptionError(f"the recovered pure-neuron directions are (nearly) linearly dependent "
                              f"(cond(Z) = {cond_Z:.3g}); Z^{{-1}} does not exist. Pass more samples {other}.")
    mean_y = read_part.mean_y if projection is None else projection.T @ read_part.mean_y
    Z, margins = sign_fix(Z, mean_y)
    diag["sign_margins"] = margins.tolist()
    V = readout(Z, read_part if readout_part is None else readout_part, projection)
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


def _span_or_fallback(part, k: int, span, strict: bool, reason: str) -> tuple[SpanBasis | None, str]:
    """:func:`span_basis`, or with ``span="auto"`` and ``rank E[y x^T] < k`` a warning and ``None``: the
    paper's statistics see all of ``x``, so no hidden direction can be lost, and their own checks
    (gap of ``T``, the certificate) judge the result."""
    try:
        return span_basis(part, k, strict=strict), reason
    except _SpanRankError as exc:
        if not (isinstance(span, str) and span == "auto"):
            raise
        warnings.warn(f"{exc} The span reduction does not apply; span='auto' runs the paper's statistics in "
                      "all d dimensions instead.", AssumptionWarning, stacklevel=4)
        return None, "rank E[y x^T] < k: the span reduction does not apply (AssumptionWarning)"


def _span_record(used: bool, reason: str, sb: SpanBasis | None, d: int) -> dict:
    record = dict(used=bool(used), reason=reason, input_dimension=int(d))
    if sb is not None:
        record.update(sb.as_dict())
        record["gap_threshold"] = SPAN_GAP_MIN
    else:
        record["dimension"] = int(d)
    return record


def _population_pipeline(W: np.ndarray, A: np.ndarray, cov: np.ndarray | None, k: int, *, span,
                         noise_correction: bool, decomposition: str, rng, **options) -> PureNeuronResult:
    """Algorithms 2-4 on the exact moments of ``y = A relu(W x)``, ``x ~ N(0, cov)`` (population mode).

    With the span reduction the detector moments are the exact ones of ``z = Q^T x ~ N(0, Q^T cov Q)``
    and hidden weights ``W Q`` (:func:`gaussian_population_moments` in ``k`` dimensions, ``O(k^4)``
    memory instead of ``O(l d^3)``), ``Q`` from the exact ``E[y x^T] Sigma^{-1} = A W / 2``; Algorithm 1
    reads the exact ``x``-space moments ``Sigma`` and ``E[y x^T] = A W Sigma / 2``.
    """

    d = W.shape[1]
    use_span, reason = _use_span(span, k, d, True)
    readout_part, sb = None, None
    if use_span:
        Sigma = np.eye(d) if cov is None else np.asarray(cov, dtype=np.float64)
        part = PartMoments(None, np.zeros(d), Sigma, 0.5 * A @ (W @ Sigma), None, None)
        _check_assumptions(PureNeuronMoments([part], None, 0), k, check_symmetry=False, symmetry_alpha=0.0)
        sb, reason = _span_or_fallback(part, k, span, options.get("strict", False), reason)
        use_span = sb is not None
    if use_span:
        Q = sb.basis
        mom = gaussian_population_moments(W @ Q, A, Q.T @ Sigma @ Q)
        part.yy, part.mean_y = mom.parts[0].yy, mom.parts[0].mean_y  # moments of y alone
        readout_part = part
    else:
        mom = gaussian_population_moments(W, A, cov)
        _check_assumptions(mom, k, check_symmetry=False, symmetry_alpha=0.0)
    res = _pipeline(mom, k, noise_correction=noise_correction, decomposition=decomposition, rng=rng,
                    readout_part=readout_part, **options)
    res.diagnostics["span"] = _span_record(use_span, reason, sb, d)
    return res


def _layout(split: bool, l: int, k: int) -> str:
    if not split:
        return "none"
    return "alg4" if l > k else "alg3"


def _run(X, Y, n_hidden, *, noise_correction, split, decomposition, rng, check_symmetry, symmetry_alpha,
         n_tries=20, n_slices=None, n_restarts=10, cp_iter_max=1000, strict=False, chunk_size=None,
         require_square=False, warn=True, span=False):
    k = check_positive_int(n_hidden, "n_hidden")
    source, l = _source(X, Y)
    d = source.n_inputs

    why = width_refusal(k, d, l)
    if why:
        raise AssumptionError(why)
    if require_square and l != k:
        raise AssumptionError(f"this algorithm needs exactly n_hidden = {k} outputs, got {l}; "
                              "use nnrecover.learners.ge2019.algorithm4 (or the pure-neuron learner) for more outputs.")
    layout = _layout(split, l, k)
    roles = _ROLES[layout]
    use_span, reason = _use_span(span, k, d, source.info.reiterable)
    if not source.info.reiterable and not (isinstance(span, (bool, np.bool_)) and not span) and \
            (d is None or k < d):
        # the same rows as arrays take the span route: the two estimates differ by their sampling errors
        warnings.warn("Ge et al.: the data came as a one-pass iterator, so the detector's statistics were "
                      "accumulated in all d dimensions in the same pass (O(n k^2 d^2) flops), not on the span "
                      "of W read in a first pass; the estimate differs from a fit of the same rows given as "
                      "arrays by its sampling error. Pass arrays, a list of chunks or an nnrecover.SampleStream "
                      "for the span route, or span=False to silence this.", UserWarning, stacklevel=3)
    readout_part, sb = None, None
    if source.info.reiterable:
        # two passes: low-order moments first (and every cheap check), then the detector contracted
        # with the now known B = E[y x^T] Sigma^{-1} (and Algorithm 4's P): 2-3 times fewer flops
        mom = pure_neuron_moments(source, split=layout, symmetry=check_symmetry, chunk_size=chunk_size,
                                  detector=False, halves=use_span)
        _check_assumptions(mom, k, check_symmetry=check_symmetry, symmetry_alpha=symmetry_alpha)
        P, _ = _projection(mom.parts[roles[0]], k, l)
        det = mom.parts[roles[1]]
        cross = det.cross if P is None else P.T @ det.cross
        if use_span:
            sb, reason = _span_or_fallback(mom.parts[roles[0]], k, span, strict, reason)
            use_span = sb is not None
        if use_span:
            # y depends on x only through z = Q^T x, and z is symmetric again: the detector pass runs in
            # k dimensions, streaming z = X Q chunk by chunk (package docstring, "Span reduction")
            Q = sb.basis
            B = np.linalg.solve(Q.T @ det.second @ Q, (cross @ Q).T).T
            first = mom
            mom = PureNeuronMoments([_projected_part(part, Q) for part in first.parts],
                                    _detector_pass(source, layout, chunk_size, B, P, Q), first.detector_part,
                                    first.symmetry, first.layout)
            readout_part = first.parts[roles[2]]
        else:
            B = np.linalg.solve(det.second, cross.T).T
            mom.detector = _detector_pass(source, layout, chunk_size, B, P)
    else:  # a one-pass iterator: raw third/fourth-order moments in the same pass
        mom = pure_neuron_moments(source, split=layout, symmetry=check_symmetry, chunk_size=chunk_size)
        _check_assumptions(mom, k, check_symmetry=check_symmetry, symmetry_alpha=symmetry_alpha)
    res = _pipeline(mom, k, noise_correction=noise_correction, decomposition=decomposition, rng=rng,
                    n_tries=n_tries, n_slices=n_slices, n_restarts=n_restarts, cp_iter_max=cp_iter_max,
                    strict=strict, roles=roles, warn=warn, readout_part=readout_part)
    res.diagnostics["span"] = _span_record(use_span, reason, sb, d if d is not None else mom.n_inputs)
    res.diagnostics["split"] = layout
    if mom.symmetry is not None:
        res.diagnostics["symmetry_p_value"] = mom.symmetry.p_value
    return res


# ============================================================================================ functions
def algorithm2(X, Y, n_hidden: int, *, rng=None, n_tries: int = 20, check_symmetry: bool = True,
               symmetry_alpha: float = SYMMETRY_ALPHA, strict: bool = False, span: bool | str = False) -> PureNeuronResult:
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
    span : {False, True, "auto"}, default False
        False: the paper's statistics in all ``d`` dimensions. True / "auto": the span reduction of
        :class:`PureNeuronLearner` (detector on ``z = Q^T x``; see the package docstring).

    Returns
    -------
    PureNeuronResult
    """
    return _run(X, Y, n_hidden, noise_correction=False, split=False, decomposition="simdiag", rng=rng,
                check_symmetry=check_symmetry, symmetry_alpha=symmetry_alpha, n_tries=n_tries, strict=strict,
                require_square=True, span=span)


def algorithm3(X, Y, n_hidden: int, *, split: bool = True, rng=None, n_tries: int = 20,
               check_symmetry: bool = True, symmetry_alpha: float = SYMMETRY_ALPHA,
               strict: bool = False, span: bool | str = False) -> PureNeuronResult:
    """Algorithm 3: learn ``y = A relu(W x) + xi`` (zero-mean noise independent of ``x``; ``A`` square).

    BuildT uses Eq. 11's noise-corrected detector, whose null space is unaffected by the noise
    (Lemma 9-10; needs the augmented ``M`` of full rank, Theorem 5). With ``split=True`` (the paper)
    steps 2-5 use the first half of the sample and SignFix / Algorithm 1 the second half; rows go to
    halves in pairs ``(2j, 2j+1)``, so antithetic ``+-x`` pairs stay together.

    Parameters and return value as :func:`algorithm2`, plus ``split``.
    """
    return _run(X, Y, n_hidden, noise_correction=True, split=split, decomposition="simdiag", rng=rng,
                check_symmetry=check_symmetry, symmetry_alpha=symmetry_alpha, n_tries=n_tries, strict=strict,
                require_square=True, span=span)


def algorithm4(X, Y, n_hidden: int, *, split: bool = True, noise_correction: bool = True, rng=None,
               n_tries: int = 20, check_symmetry: bool = True, symmetry_alpha: float = SYMMETRY_ALPHA,
               strict: bool = False, span: bool | str = False) -> PureNeuronResult:
    """Algorithm 4 (Appendix A.3): ``A`` of shape ``(l, k)``, ``l >= k``.

    ``P`` = top-``k`` left singular vectors of ``E[y x^T]`` (``= A W Sigma / 2``, so ``col P = col A``);
    Algorithm 3 on ``P^T y``; output ``V`` and ``P Z^{-1}`` (Theorem 6). With ``split=True`` the sample
    is split 1/2 (``P``), 1/4 (``T``), 1/4 (SignFix, Algorithm 1), in ``+-x`` pairs.

    Parameters and return value as :func:`algorithm3`; ``noise_correction=False`` uses Algorithm 2's
    detector inside.
    """
    return _run(X, Y, n_hidden, noise_correction=noise_correction, split=split, decomposition="simdiag",
                rng=rng, check_symmetry=check_symmetry, symmetry_alpha=symmetry_alpha, n_tries=n_tries,
                strict=strict, span=span)


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


def fit_source(source, n_hidden, *, practical: bool = False, samples=None, gd_max_iter: int = 500,
               **options) -> PureNeuronResult:
    """The run of :class:`~nnrecover.learners.ge2019.estimator.PureNeuronLearner` on a data source.

    ``practical=False``: Algorithms 2-4 (SimDiag). ``practical=True``: the Section 4 variant, CP-ALS on
    null-space slices, then the gradient fit of ``W`` with ``A`` fixed on ``samples = (X, Y)``, the same
    rows in memory (see :func:`section4_variant`). ``options`` go to the shared pipeline (``split``,
    ``noise_correction``, ``check_symmetry``, ``n_tries``, ``span``, ...).

    Returns
    -------
    PureNeuronResult
        With ``practical=True``, ``hidden_weights`` is the fitted ``W`` and ``diagnostics["hidden_fit"]``
        reports the losses.
    """
    res = _run(source, None, n_hidden, decomposition="cp-als" if practical else "simdiag", **options)
    if practical:
        Xa, Ya = samples
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
    # deferred: SciPy's submodules are slow to import
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


