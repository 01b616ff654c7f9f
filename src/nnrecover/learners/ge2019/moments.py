"""Streaming moments for the pure-neuron detector, exact Gaussian population moments, symmetry test.

Paper symbol -> name here (Ge, Kuditipudi, Li, Wang 2019, Algorithms 1-4):

==========================================  ==========================================================
``E[x x^T]``                                ``PartMoments.second``  (Sigma, d x d)
``E[y x^T]``                                ``PartMoments.cross``   (P, l x d; = A W Sigma / 2, Lemma 1)
``E[y y^T]``                                ``PartMoments.yy``      (only the noisy detector, Eq. 11)
``E[y]``                                    ``PartMoments.mean_y``  (SignFix)
``E[y (x) x^{(x)3}]``                       ``DetectorMoments.h3``  (l, d, d(d+1)/2): ``E[y_a x_p x_r x_s]``
``E[y (x) y (x) (x (x) x)]``                ``DetectorMoments.g4``  (l, l, d(d+1)/2): ``E[y_a y_b x_r x_s]``
==========================================  ==========================================================

The last index of ``h3``/``g4`` runs over pairs ``r <= s`` (``numpy.triu_indices(d)``); the fourth-order
moments are symmetric in ``(r, s)`` so nothing is lost.

Span reduction (the learner's ``span`` option, see the package docstring): with ``input_projection=Q``
(``d x m``, orthonormal columns) every chunk is replaced by ``z = X Q`` before anything is accumulated, so
the detector moments live in ``m`` dimensions (``O(m^4)`` memory, ``O(n (d m + k^2 m^2 / 4))`` flops)
and the data are still read chunk by chunk (on a dask array, on the workers). ``halves=True`` also keeps
the low-order sums of the odd-numbered pairs of every part (``PartMoments.halves``), from which the
sampling error of ``E[y x^T] Sigma^{-1}`` is estimated without any distributional assumption (the two
halves are independent copies of the same estimator).

:class:`PureNeuronStatistic` accumulates all of them in one pass (a :class:`nnrecover.moments.Statistic`:
``update``/``merge``/``finalize``, picklable) and routes rows to the parts of the paper's sample split.
Rows are assigned **by pairs** ``(2j, 2j+1)``: pair ``j`` goes to part ``layout[j % len(layout)]``. An
antithetic sample (rows ``x, -x`` adjacent) therefore keeps every ``+-x`` pair inside one part, so each
part is itself exactly symmetric (Algorithm 3's split "keeping +-x pairs together").

:func:`gaussian_population_moments` gives the same moments exactly for ``x ~ N(0, Sigma)``: by Lemma 6
the ReLU disappears from every moment of even total degree, and by Lemma 7
``E[s(a.x) s(b.x) x x^T] = E[(a.x)(b.x) x x^T] / 2 - mat(N_ab) / 2``, with Isserlis' theorem for the
Gaussian fourth moments and Lemma 19 for ``N_ab``.

The same pass adds the sums of the test that ``x`` and ``-x`` are equal in law (Section 2.1), whose
statistic is :mod:`nnrecover.moments.symmetry`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import InputError
from ...moments.base import ROW_BLOCK_VALUES, Statistic, row_blocks
from ...moments.symmetry import SymmetryTest, add_symmetry_sums, symmetry_from_sums
from .distinguishing import gaussian_distinguishing_matrix
from .symmetric import n_sym

__all__ = ["PartMoments", "DetectorMoments", "PureNeuronMoments", "PureNeuronStatistic", "gaussian_population_moments",
           "SPLIT_LAYOUTS"]

#: pair-to-part layouts: "none" one part; "alg3" halves (T | readout); "alg4" 1/2, 1/4, 1/4
#: (projection | T | readout), Appendix A.3.
SPLIT_LAYOUTS = {"none": (0,), "alg3": (0, 1), "alg4": (0, 0, 1, 2)}


@dataclass
class PartMoments:
    """Low-order moments of one part of the sample (``n`` is ``None`` for population moments)."""

    n: int | None
    mean_x: np.ndarray
    second: np.ndarray
    cross: np.ndarray
    yy: np.ndarray
    mean_y: np.ndarray
    #: ``((n_0, second_0, cross_0), (n_1, second_1, cross_1))`` of the even- and odd-numbered pairs of the
    #: part (only with ``PureNeuronStatistic(halves=True)``): two independent copies of the estimator
    halves: tuple | None = None


@dataclass
class DetectorMoments:
    """Third/fourth-order moments entering the pure-neuron detector (BuildT).

    Either the raw moments ``h3``, ``g4`` (one pass; any ``B``), or, when ``B = E[y x^T] Sigma^{-1}``
    (and Algorithm 4's ``P``) were known before the pass, the contracted coefficient array
    ``K[a, b, rs] = E[(y_a z_b + y_b z_a - y_a y_b) x_r x_s]``, ``z = B x``, ``y`` projected by ``P``
    (BuildT, Eq. 10), which is 2-3 times cheaper to accumulate.
    """

    n: int | None
    h3: np.ndarray | None
    g4: np.ndarray | None
    K: np.ndarray | None = None
    B: np.ndarray | None = None
    projection: np.ndarray | None = None


@dataclass
class PureNeuronMoments:
    """Everything the learner needs, per part of the split (see :data:`SPLIT_LAYOUTS`)."""

    parts: list[PartMoments]
    detector: DetectorMoments | None
    detector_part: int
    symmetry: SymmetryTest | None = None
    layout: tuple = field(default=(0,))

    @property
    def n_inputs(self) -> int:
        return self.parts[0].second.shape[0]

    @property
    def n_outputs(self) -> int:
        return self.parts[0].cross.shape[0]


#: float64 values per pair-product temporary of the contracted detector (2 MiB): measured at d = 100,
#: k = 10, N = 1e6 (one BLAS thread, 8 MiB chunks), the detector pass takes 0.33 s with these blocks
#: against 0.35 s with 1 MiB ones, 0.36 s with 512 KiB ones and 0.36-0.41 s with 4-8 MiB ones: fewer
#: Python-level products per chunk, while the temporaries still stay in the last-level cache
_DETECTOR_BLOCK_VALUES = 1 << 18


def _vech_products(X: np.ndarray) -> np.ndarray:
    """Rows ``(x_r x_s)_{r <= s}`` for every sample, shape (n, d(d+1)/2), in ``numpy.triu_indices`` order.

    Computed column-major (the result is the transpose of a C-ordered ``(d(d+1)/2, n)`` array): one
    product per ``r``, ``x_r`` times ``x_{r..d-1}``, over contiguous rows of length ``n``. The same products
    as gathering the two factors by ``triu_indices``, without the gathered copies and the short inner loops
    of a row-major layout (measured, one thread: 0.06 against 0.86 us per row at d = 10, 6.7 against 41 us
    at d = 100)."""
    return _vech_products_t(np.ascontiguousarray(X.T)).T


def _vech_products_t(XT: np.ndarray) -> np.ndarray:
    """:func:`_vech_products` of the samples in the columns of ``XT`` (d, n), as a C-ordered (d(d+1)/2, n)."""
    d, n = XT.shape
    out = np.empty((d * (d + 1) // 2, n))
    o = 0
    for r in range(d):
        np.multiply(XT[r], XT[r:], out=out[o:o + d - r])
        o += d - r
    return out


class PureNeuronStatistic(Statistic):
    """One-pass sums for Algorithms 1-4 of Ge et al. 2019, with the paper's sample split.

    Parameters
    ----------
    split : {"none", "alg3", "alg4"}
        How rows (in pairs) are routed to parts, see :data:`SPLIT_LAYOUTS`.
    detector_part : int
        The part on which the third/fourth-order detector moments are accumulated (Algorithm 3: the
        first half; Algorithm 4 with split: the second quarter, part 1).
    symmetry : bool
        Also accumulate the odd features of :func:`symmetry_test` (over all rows).
    detector : bool
        Accumulate the detector moments at all (False: only the low-order moments, the first pass of
        the two-pass scheme).
    B : (k, d) array, optional
        ``E[y x^T] Sigma^{-1}`` of the detector part (from a first pass). Then the contracted ``K`` is
        accumulated instead of ``h3``/``g4``.
    projection : (l, k) array, optional
        Algorithm 4's ``P`` (with ``B``): ``y`` is replaced by ``P^T y`` in ``K``.
    input_projection : (d, m) array, optional
        Orthonormal columns ``Q``: every chunk ``X`` is replaced by ``z = X Q`` first (the span
        reduction); all moments, ``B`` and the dimensions are then those of ``z``.
    halves : bool, default False
        Accumulate the low-order sums of the even- and odd-numbered pairs of every part separately (pair
        ``j`` of a part is in half ``j % 2``; the part's sums are their total), for the sampling error of
        ``E[y x^T] Sigma^{-1}``. Each half is a set of residue classes of the row index, read as strided
        views: no extra flops and no gathered copy.

    Notes
    -----
    One-pass detector moments cost ``O(n l d (d^2 / 2) + n l^2 d^2 / 4)`` flops and
    ``O(l d^3 / 2 + l^2 d^2 / 4)`` memory; with ``B`` given, ``O(n k^2 d^2 / 4)`` flops and memory
    ``O(k^2 d^2 / 4)``; with ``input_projection`` ``d`` becomes ``m`` in these counts, plus ``O(n d m)``
    flops for ``X Q``. The wide per-row temporaries (pair products, ``(x, x**3)``) are
    formed in row blocks of about 8 MiB, so their memory does not grow with the chunk. Dimensions are
    fixed by the first chunk.
    """

    def __init__(self, split: str = "none", detector_part: int = 0, symmetry: bool = True, detector: bool = True,
                 B: np.ndarray | None = None, projection: np.ndarray | None = None,
                 input_projection: np.ndarray | None = None, halves: bool = False) -> None:
        if split not in SPLIT_LAYOUTS:
            raise InputError(f"split must be one of {sorted(SPLIT_LAYOUTS)}, got {split!r}.")
        self.split = split
        self.layout = SPLIT_LAYOUTS[split]
        n_parts = max(self.layout) + 1
        if not 0 <= detector_part < n_parts:
            raise InputError(f"detector_part must be in [0, {n_parts}), got {detector_part}.")
        self.detector_part = detector_part
        self.symmetry = bool(symmetry)
        self.detector = bool(detector)
        self.B = None if B is None else np.asarray(B, dtype=np.float64)
        self.projection = None if projection is None else np.asarray(projection, dtype=np.float64)
        if self.projection is not None and self.B is None:
            raise InputError("projection is used together with B (the two-pass detector).")
        self.input_projection = None if input_projection is None else np.asarray(input_projection, dtype=np.float64)
        if self.input_projection is not None and self.input_projection.ndim != 2:
            raise InputError(f"input_projection must be a (d, m) matrix, got shape {self.input_projection.shape}.")
        self.halves = bool(halves)
        # with one part and no halves no sum depends on a row's index, only on the chunk: a pass with
        # several workers may then add chunks side by side (nnrecover.moments.base, "Threads"); the split
        # layouts and the halves route rows by their index and stay in row order
        self.parallel_chunks = split == "none" and not self.halves
        #: False: skip the low-order sums of the parts (only their row counts are kept), for a detector pass
        #: whose parts' moments are known from an earlier pass over the same rows (:meth:`_finalize_detector`)
        self._low_order = True
        super().__init__()

    # ---------------------------------------------------------------- Statistic protocol
    def _reset(self) -> None:
        self.dims: tuple[int, int] | None = None
        self._row = 0  # running row counter: pairs are (2j, 2j+1)
        self._parts: list[dict] | None = None
        self._odd: list[dict] | None = None
        self._det: dict | None = None
        self._sym: dict | None = None

    def _allocate(self, d: int, l: int) -> None:
        self.dims = (d, l)
        n_parts = max(self.layout) + 1
        self._parts = [dict(n=0, sx=np.zeros(d), sxx=np.zeros((d, d)), syx=np.zeros((l, d)),
                            syy=np.zeros((l, l)), sy=np.zeros(l)) for _ in range(n_parts)]
        # with halves, _parts holds the even-numbered pairs of each part and _odd the odd-numbered ones
        # (finalize adds them): each row enters one Gram, so the halves cost no flops beyond the part's
        self._odd = ([dict(n=0, sx=np.zeros(d), sxx=np.zeros((d, d)), syx=np.zeros((l, d)),
                           syy=np.zeros((l, l)), sy=np.zeros(l)) for _ in range(n_parts)]
                     if self.halves else None)
        D2 = n_sym(d)
        if not self.detector:
            self._det = None
        elif self.B is None:
            self._det = dict(n=0, h3=np.zeros((l * d, D2)), g4=np.zeros((n_sym(l), D2)))
        else:
            k = self.B.shape[0]
            if self.B.shape[1] != d or (self.projection is not None and self.projection.shape != (l, k)) or (
                    self.projection is None and l != k):
                raise InputError(f"B {self.B.shape} / projection do not fit data with {d} inputs and {l} outputs.")
            self._det = dict(n=0, kc=np.zeros((n_sym(k), D2)))
        if self.symmetry:
            self._sym = dict(n=0, sg=np.zeros(2 * d), sgg=np.zeros((2 * d, 2 * d)))

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        Q = self.input_projection
        # a pass that sums only the contracted detector projects inside the detector's row blocks, straight
        # into samples-in-columns form (Q^T X_b^T): no projected chunk and no transposed copy of it
        defer = Q is not None and not self._low_order and self.B is not None and not (self.halves or self.symmetry)
        if Q is not None:
            if X.shape[1] != Q.shape[0]:
                raise InputError(f"the chunk has {X.shape[1]} inputs but input_projection has {Q.shape[0]} rows.")
            if not defer:
                X = X @ Q
        n = X.shape[0]
        d = Q.shape[1] if defer else X.shape[1]
        l = Y.shape[1]
        if l == 0:
            raise InputError("the pure-neuron statistic needs targets Y (got none).")
        if self.dims is None:
            self._allocate(d, l)
        elif self.dims != (d, l):
            raise InputError(f"chunk has {d} inputs and {l} outputs, earlier chunks had {self.dims}.")
        row0 = self._row
        self._row += n
        if self._odd is not None:
            _add_half_sums(self._parts, self._odd, self.layout, row0, X, Y)
        part_of_row = None
        if len(self._parts) > 1:
            part_of_row = np.asarray(self.layout)[((row0 + np.arange(n)) // 2) % len(self.layout)]
        for p, acc in enumerate(self._parts):
            if part_of_row is None:  # one part: every row
                Xp, Yp = X, Y
            else:
                sel = part_of_row == p
                if not sel.any():
                    continue
                Xp, Yp = (X, Y) if sel.all() else (X[sel], Y[sel])
            if self._odd is None and self._low_order:
                _add_low_order(acc, Xp, Yp)
            elif self._odd is None:
                acc["n"] += Xp.shape[0]
            if p == self.detector_part and self._det is not None:
                self._update_detector(Xp, Yp, project=defer)
        if self._sym is not None:
            add_symmetry_sums(self._sym, X)

    def _update_detector(self, Xp: np.ndarray, Yp: np.ndarray, project: bool = False) -> None:
        """Add the detector sums of the rows ``Xp`` (``Xp Q`` with ``project``: raw rows, ``B`` given)."""
        m, d = Xp.shape[0], self.dims[0]
        self._det["n"] += m
        QT = np.ascontiguousarray(self.input_projection.T) if project else None
        # the contracted detector's three pair-product temporaries in blocks of 2 MiB each stay in cache
        # for the product that follows (_DETECTOR_BLOCK_VALUES)
        for b in row_blocks(m, n_sym(d), ROW_BLOCK_VALUES if self.B is None else _DETECTOR_BLOCK_VALUES):
            Xb, Yb = Xp[b], Yp[b]
            if self.B is None:
                phi = _vech_products(Xb)
                l = Yb.shape[1]
                yx = (Yb[:, :, None] * Xb[:, None, :]).reshape(Xb.shape[0], l * d)
                self._det["h3"] += yx.T @ phi
                self._det["g4"] += _vech_products(Yb).T @ phi
            else:
                # y_a z_b + y_b z_a - y_a y_b = z_a z_b - u_a u_b with u = y - z: two pair products of k
                # columns instead of three products of gathered columns; everything with samples in columns
                XT = np.ascontiguousarray(Xb.T) if QT is None else QT @ Xb.T
                YT = Yb.T if self.projection is None else self.projection.T @ Yb.T
                ZT = self.B @ XT
                C = _vech_products_t(ZT)
                C -= _vech_products_t(np.subtract(YT, ZT, order="C"))
                self._det["kc"] += C @ _vech_products_t(XT).T

    def _merge(self, other: "PureNeuronStatistic") -> None:
        if (other.split, other.detector_part, other.symmetry, other.detector, other.halves) != (
                self.split, self.detector_part, self.symmetry, self.detector, self.halves):
            raise InputError("cannot merge pure-neuron statistics with different settings.")
        if other.dims is None:
            return
        if self.dims is None:
            self._allocate(*other.dims)
        elif self.dims != other.dims:
            raise InputError(f"cannot merge statistics of dimensions {other.dims} into {self.dims}.")
        for mine, theirs in zip(self._parts + (self._odd or []), other._parts + (other._odd or [])):
            for key in mine:
                mine[key] = mine[key] + theirs[key]
        for acc, oth in ((self._det, other._det), (self._sym, other._sym)):
            if acc is not None:
                for key in acc:
                    acc[key] = acc[key] + oth[key]
        self._row += other._row

    def finalize(self) -> PureNeuronMoments:
        """The moments of every part, the detector moments and the symmetry test."""
        if self.dims is None:
            raise InputError("no samples were seen; pass a non-empty data set.")
        if not self._low_order:
            raise InputError("this statistic kept no low-order sums; read its detector moments alone.")
        parts = []
        for p, acc in enumerate(self._parts):
            halves = None
            if self._odd is not None:
                even, odd = acc, self._odd[p]
                acc = {key: even[key] + odd[key] for key in even}
                m0, m1 = even["n"], odd["n"]
                if min(m0, m1) >= 1:
                    halves = ((m0, even["sxx"] / m0, even["syx"] / m0), (m1, odd["sxx"] / m1, odd["syx"] / m1))
            m = acc["n"]
            if m < 2:
                raise InputError(f"part {p} of the sample split received {m} samples; more samples are "
                                 "needed (or use split=False).")
            parts.append(PartMoments(m, acc["sx"] / m, acc["sxx"] / m, acc["syx"] / m, acc["syy"] / m,
                                     acc["sy"] / m, halves))
        det = self._finalize_detector()
        sym = None
        if self._sym is not None:
            sym = symmetry_from_sums(self._sym["n"], self._sym["sg"], self._sym["sgg"])
        return PureNeuronMoments(parts, det, self.detector_part, sym, self.layout)

    def _power_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """``sum x`` and ``sum x**2`` (the diagonal of ``sum x x^T``) over every row seen (all parts)."""
        accs = self._parts + (self._odd or [])
        return sum(acc["sx"] for acc in accs), sum(np.diag(acc["sxx"]) for acc in accs)

    def _finalize_detector(self) -> DetectorMoments | None:
        """The detector moments alone (``None`` without ``detector``)."""
        if self.dims is None:
            raise InputError("no samples were seen; pass a non-empty data set.")
        if self._det is None:
            return None
        m = self._det["n"]
        if m < 1:
            raise InputError(f"the detector part {self.detector_part} of the sample split received no samples; "
                             "more samples are needed (or use split=False).")
        if self.B is None:
            l = self.dims[1]
            return DetectorMoments(m, (self._det["h3"] / m).reshape(l, self.dims[0], -1),
                                   _unpack_pairs(self._det["g4"] / m, l))
        return DetectorMoments(m, None, None, K=_unpack_pairs(self._det["kc"] / m, self.B.shape[0]),
                               B=self.B, projection=self.projection)


def _add_low_order(acc: dict, X: np.ndarray, Y: np.ndarray, Y1: np.ndarray | None = None) -> None:
    """Add ``n``, ``sum x``, ``sum x x^T``, ``sum y x^T``, ``sum y y^T``, ``sum y`` of the rows to ``acc``.

    ``Y1`` is ``[Y, 1]`` (built here when not given): ``Y1^T X`` holds ``sum y x^T`` and ``sum x``, and
    ``Y1^T Y1`` holds ``sum y y^T`` and ``sum y``, so the column sums come with the products and cost no read
    of the rows of their own (on a strided view NumPy's own reduction is also about six times slower than
    BLAS). A product with a negated operand is exactly the negated product, so the odd sums of an antithetic
    sample's two residue classes still cancel exactly."""
    l = Y.shape[1]
    if Y1 is None:
        Y1 = _with_ones(Y)
    acc["n"] += X.shape[0]
    yx = Y1.T @ X
    yy = Y1.T @ Y1
    acc["sx"] += yx[l]
    acc["syx"] += yx[:l]
    acc["sy"] += yy[l, :l]
    acc["syy"] += yy[:l, :l]
    acc["sxx"] += X.T @ X


def _with_ones(Y: np.ndarray) -> np.ndarray:
    """``[Y, 1]``: ``Y`` with a column of ones appended."""
    Y1 = np.empty((Y.shape[0], Y.shape[1] + 1))
    Y1[:, :-1] = Y
    Y1[:, -1] = 1.0
    return Y1


def _add_half_sums(even: list[dict], odd: list[dict], layout: tuple, row0: int, X: np.ndarray,
                   Y: np.ndarray) -> None:
    """The low-order sums of a chunk starting at row ``row0``, split by part and by half.

    Row ``r`` is in pair ``j = r // 2``, part ``layout[j % L]`` and half ``(j // L) % 2``: both repeat with
    period ``4 L`` in ``r``, so each residue class of rows modulo ``4 L`` is one strided view of the chunk
    (no gathered copy), whose sums go to one part and one half."""
    period = 4 * len(layout)
    Y1 = _with_ones(Y)
    for c in range(period):
        first = (c - row0) % period
        if first >= X.shape[0]:
            continue
        pair = c // 2
        target = (odd if (pair // len(layout)) % 2 else even)[layout[pair % len(layout)]]
        _add_low_order(target, X[first::period], Y[first::period], Y1[first::period])


def _unpack_pairs(packed: np.ndarray, k: int) -> np.ndarray:
    """(k(k+1)/2, D) rows indexed by pairs a <= b -> symmetric (k, k, D)."""
    ia, ib = np.triu_indices(k)
    out = np.empty((k, k, packed.shape[1]))
    out[ia, ib] = packed
    out[ib, ia] = packed
    return out


# -------------------------------------------------------------------------------------------- population
def gaussian_population_moments(hidden_weights: np.ndarray, output_weights: np.ndarray,
                                cov: np.ndarray | None = None) -> PureNeuronMoments:
    """Exact moments of ``y = A relu(W x)``, ``x ~ N(0, cov)`` (no noise), for population mode.

    Parameters
    ----------
    hidden_weights : (k, d) array ``W``
    output_weights : (l, k) array ``A``
    cov : (d, d) array, optional
        Input covariance ``Q Q^T`` (identity by default).

    Returns
    -------
    PureNeuronMoments
        One part (no split is needed with exact moments, Appendix A.2), ``n = None``.
    """

    W = np.asarray(hidden_weights, dtype=np.float64)
    A = np.asarray(output_weights, dtype=np.float64)
    k, d = W.shape
    Sigma = np.eye(d) if cov is None else np.asarray(cov, dtype=np.float64)
    U = W @ Sigma  # rows u_i = Sigma w_i
    G = U @ W.T  # w_i^T Sigma w_j
    N, m = gaussian_distinguishing_matrix(W, cov=Sigma, return_scalars=True)  # (d*d, k2), (k2,)
    ip, jp = np.triu_indices(k, 1)
    # E[h_i h_j] = (w_i^T Sigma w_j - m_ij) / 2 (Lemma 7 with Lemma 6); m_ii = 0.
    Mfull = np.zeros((k, k))
    Mfull[ip, jp] = m
    Mfull[jp, ip] = m
    Ehh = (G - Mfull) / 2
    mean_h = np.sqrt(np.diag(G) / (2 * np.pi))
    iu = np.triu_indices(d)
    # E[h_i x_p x_r x_s] = (u_ip S_rs + u_ir S_ps + u_is S_pr) / 2  (Lemma 6, Isserlis)
    S_rs = Sigma[iu[0], iu[1]]
    Eh3 = 0.5 * (U[:, :, None] * S_rs[None, None, :]
                 + U[:, iu[0]][:, None, :] * Sigma[:, iu[1]][None, :, :]
                 + U[:, iu[1]][:, None, :] * Sigma[:, iu[0]][None, :, :])  # (k, d, D2)
    h3 = np.einsum("ai,ipq->apq", A, Eh3)
    # E[h_i h_j x_r x_s] = ((w_i S w_j) S_rs + u_ir u_js + u_is u_jr) / 2 - N_ij[r, s] / 2
    Ehh4 = 0.5 * (G[:, :, None] * S_rs[None, None, :]
                  + U[:, None, iu[0]] * U[None, :, iu[1]] + U[:, None, iu[1]] * U[None, :, iu[0]])
    Npk = N.reshape(d, d, -1)[iu[0], iu[1]].T  # (k2, D2) (vec of a symmetric matrix)
    Ehh4[ip, jp] -= Npk / 2
    Ehh4[jp, ip] -= Npk / 2
    g4 = np.einsum("ai,bj,ijq->abq", A, A, Ehh4)
    part = PartMoments(None, np.zeros(d), Sigma.copy(), 0.5 * A @ U, A @ Ehh @ A.T, A @ mean_h)
    return PureNeuronMoments([part], DetectorMoments(None, h3, g4), 0, None, (0,))
