"""A test that the input law is symmetric (``x`` and ``-x`` equal in law), in one pass over the rows.

Ge et al. 2019 assume a symmetric input law (Section 2.1); :func:`nnrecover.check` reports the test,
and :class:`~nnrecover.learners.ge2019.PureNeuronLearner` refuses data that fail it.

:func:`symmetry_test` tests ``H0: x and -x have the same law`` through the odd features
``g(x) = (x, x**3)`` (elementwise), whose mean vanishes under H0: Hotelling's statistic
``n gbar^T Cov(g)^+ gbar`` is asymptotically chi-square with ``rank Cov(g)`` degrees of freedom.
On many rows (``gram_rows`` / :class:`SymmetryStatistic` with ``stride > 1``) the mean ``gbar`` and the
variances of ``g`` come from all ``n`` rows (``O(n d)``) and only the correlations of ``g`` from every
``stride``-th row (``O(m (2 d)^2)``, ``m ~ n / stride``), see :class:`SymmetryStatistic` for the law and
the power of that form. A constant non-zero input column makes ``g`` of zero variance with a non-zero
mean: the test then rejects with certainty and names the column (``constant_inputs``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as _stats

from ..errors import InputError
from .base import Statistic, row_blocks

__all__ = ["SymmetryTest", "SymmetryStatistic", "symmetry_test", "symmetry_stride", "symmetry_from_sums",
           "add_symmetry_sums", "SYMMETRY_GRAM_ROWS", "CONSTANT_FEATURE_RATIO"]


@dataclass
class SymmetryTest:
    """Result of :func:`symmetry_test`: statistic, degrees of freedom and p-value.

    ``gram_rows`` is the number of rows the correlations of ``g`` were estimated from (``None``: all
    ``n``; the p-value is then the chi-square one, else the F form of :class:`SymmetryStatistic`).
    """

    statistic: float
    df: int
    p_value: float
    n: int
    gram_rows: int | None = None
    #: input columns whose odd feature (``x_j`` or ``x_j**3``) is constant and non-zero: ``x_j`` and ``-x_j``
    #: then differ in law for certain (statistic inf, p-value 0), whatever the sample size
    constant_inputs: tuple = ()

#: a feature whose mean is this many standard deviations from 0 or more is constant up to round-off (the
#: variance of a constant column, computed from sums, is ``c**2`` times a few ulps, not 0)
CONSTANT_FEATURE_RATIO = 1e6


def _constant_odd_features(gbar: np.ndarray, scale: np.ndarray, n: int, gram_rows=None) -> SymmetryTest | None:
    """The test's answer when some odd feature is constant and non-zero (a constant input column, e.g.
    ``x_3 = 1``): the Hotelling statistic drops zero-variance features, which would hide exactly this
    asymmetry (Ge et al.'s Section 2.1 assumes ``x`` and ``-x`` equal in law)."""
    fixed = (gbar != 0) & (scale * CONSTANT_FEATURE_RATIO <= np.abs(gbar))
    if not fixed.any():
        return None
    d = gbar.size // 2
    cols = tuple(sorted({int(j) % d for j in np.flatnonzero(fixed)}))
    return SymmetryTest(float("inf"), int(fixed.sum()), 0.0, n, gram_rows, cols)

#: float64 values per temporary row block of the O(n d) sums of the strided symmetry test (1 MiB): its
#: elementwise products then stay in cache (measured at d = 100: 3x faster than 8 MiB blocks)
_POWER_BLOCK_VALUES = 1 << 17

#: rows of the symmetry test's correlation estimate on large data (:func:`symmetry_stride`): at least this many
SYMMETRY_GRAM_ROWS = 20_000

#: ... and at least this many per odd feature (``2 d`` of them): the F critical value of
#: :class:`SymmetryStatistic` is then within 2.2 % of the chi-square one at ``alpha = 1e-6`` (``p = 2000``)
_SYMMETRY_ROWS_PER_FEATURE = 50


def symmetry_stride(n_samples: int | None, n_inputs: int | None, gram_rows: int = SYMMETRY_GRAM_ROWS) -> int:
    """The stride of :class:`SymmetryStatistic` for ``n_samples`` rows of ``n_inputs`` inputs.

    Every ``stride``-th row enters the correlation estimate, so that it sees at least
    ``max(gram_rows, 50 * 2 * n_inputs)`` rows; 1 (every row: the plain Hotelling test) when the data are
    not larger than that or their size is unknown (a one-pass iterator of unknown length).
    """
    if n_samples is None or n_inputs is None:
        return 1
    rows = max(int(gram_rows), _SYMMETRY_ROWS_PER_FEATURE * 2 * int(n_inputs))
    return max(1, int(n_samples) // rows)


class SymmetryStatistic(Statistic):
    """The sums of :func:`symmetry_test`, as a statistic of its own (it runs on another worker in the same
    pass as the part moments, :func:`nnrecover.moments.accumulate`).

    Parameters
    ----------
    stride : int, default 1
        ``1``: ``n``, ``sum g`` and ``sum g g^T`` of ``g(x) = (x, x**3)`` over every row, the same
        arithmetic, row block by row block, as :class:`PureNeuronStatistic` with ``symmetry=True`` (so the
        same bits): Hotelling's test, ``O(n (2 d)^2)``. ``s > 1``: the sums ``sum x``, ``sum x**3`` and the
        variances (``sum x**2``, ``sum x**6``) over every row, ``O(n d)``, and the Gram of ``g`` only over
        the rows ``s j`` (``j = 0, 1, ...`` counted over the rows this statistic is fed, in order; on a
        dask array within each block), ``O(m (2 d)^2)`` for ``m ~ n / s`` rows
        (:func:`symmetry_stride` chooses ``s``).

    Notes
    -----
    With ``stride > 1`` the statistic is ``n z^T R_m^+ z``, ``z_j = gbar_j / sd_j`` with the mean and
    standard deviation of feature ``j`` over all ``n`` rows and ``R_m`` the correlation matrix of ``g``
    over the ``m`` strided rows (rank ``p``, eigenvalues below ``1e-10`` of the largest dropped, as in the
    plain test). Under H0 (``E[g] = 0``), if ``R_m`` were the true correlation the law would be
    chi-square with ``p`` degrees of freedom (``n -> infinity``); with the covariance estimated from
    ``m`` independent rows Hotelling's ``(m - p) / (p (m - 1)) T^2`` is ``F(p, m - p)`` (exact for
    Gaussian features), and the p-value is taken from that F law, whose tail is heavier than the
    chi-square's; here only the correlations are estimated from ``m`` rows, so for Gaussian features the
    F p-value is conservative. The features ``x**3`` are not Gaussian: the error of ``R_m`` is then larger
    than Wishart's by their kurtosis, and the calibration is asymptotic (``m -> infinity``), as the plain
    test's chi-square is.

    Power: the mean is still that of all ``n`` rows, so under an alternative ``E[g] = mu`` the
    noncentrality ``n mu^T C^{-1} mu`` is that of the all-rows test; what changes is the critical value,
    ``p (m - 1) / (m - p) F_{p, m - p}(1 - alpha)`` instead of ``chi2_p(1 - alpha)``: 1.3 % larger at
    ``p = 200``, ``m = 20000``, ``alpha = 1e-6`` (2.2 % at ``p = 2000``, ``m = 10^5``), plus the relative
    error ``O(sqrt(p / m))`` of ``R_m`` in the statistic. A feature whose variance is positive over all
    rows but zero on the strided rows (rare nonzero values) is taken as uncorrelated with the others.
    """

    def __init__(self, stride: int = 1) -> None:
        if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) or stride < 1:
            raise InputError(f"stride must be a positive integer, got {stride!r}.")
        self.stride = int(stride)
        #: False (stride > 1): leave ``sum x`` and ``sum x**2`` to the caller, who has them from another
        #: statistic of the same pass (:meth:`_set_column_sums`; :func:`.algorithms.pure_neuron_moments`)
        self._column_sums = True
        super().__init__()

    def _reset(self) -> None:
        self._sym: dict | None = None

    def _set_column_sums(self, s1: np.ndarray, s2: np.ndarray) -> None:
        """``sum x`` and ``sum x**2`` over every row seen, from another statistic of the same pass."""
        if self._sym is not None and self.stride > 1:
            self._sym["s1"], self._sym["s2"] = np.array(s1, dtype=np.float64), np.array(s2, dtype=np.float64)

    def _allocate(self, d: int) -> dict:
        if self.stride == 1:
            return dict(n=0, sg=np.zeros(2 * d), sgg=np.zeros((2 * d, 2 * d)))
        return dict(n=0, s1=np.zeros(d), s2=np.zeros(d), s3=np.zeros(d), s6=np.zeros(d), m=0,
                    sg=np.zeros(2 * d), sgg=np.zeros((2 * d, 2 * d)))

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        d = X.shape[1]
        if self._sym is None:
            self._sym = self._allocate(d)
        elif self._sym["sg"].shape[0] != 2 * d:
            raise InputError(f"chunk has {d} inputs, earlier chunks had {self._sym['sg'].shape[0] // 2}.")
        if self.stride == 1:
            add_symmetry_sums(self._sym, X)
        else:
            _add_strided_symmetry_sums(self._sym, X, self.stride, self._column_sums)

    def _merge(self, other: "SymmetryStatistic") -> None:
        if other.stride != self.stride:
            raise InputError("cannot merge symmetry statistics with different strides.")
        if other._sym is None:
            return
        if self._sym is None:
            self._sym = {key: np.copy(val) if isinstance(val, np.ndarray) else val for key, val in other._sym.items()}
            return
        if self._sym["sg"].shape != other._sym["sg"].shape:
            raise InputError("cannot merge symmetry statistics of different dimensions.")
        for key in self._sym:
            self._sym[key] = self._sym[key] + other._sym[key]

    def finalize(self) -> SymmetryTest:
        """The symmetry test of the rows seen."""
        if self._sym is None:
            raise InputError("no samples were seen; pass a non-empty data set.")
        acc = self._sym
        if self.stride == 1:
            return symmetry_from_sums(acc["n"], acc["sg"], acc["sgg"])
        return _symmetry_from_strided_sums(acc)


def add_symmetry_sums(acc: dict, X: np.ndarray) -> None:
    """``n``, ``sum g`` and ``sum g g^T`` of ``g = (x, x**3)`` over the rows of ``X``, in row blocks."""
    n, d = X.shape
    acc["n"] += n
    for b in row_blocks(n, 2 * d):
        g = _odd_features(X[b])
        acc["sg"] += g.sum(axis=0)
        acc["sgg"] += g.T @ g


def _add_strided_symmetry_sums(acc: dict, X: np.ndarray, stride: int, column_sums: bool = True) -> None:
    """``sum x``, ``sum x**2`` (only with ``column_sums``), ``sum x**3``, ``sum x**6`` over every row of
    ``X``, and ``sum g``, ``sum g g^T`` over the rows whose running index is a multiple of ``stride``.

    The column sums are products with a vector of ones (BLAS) over row blocks of about 1 MiB, so each
    block is read from memory once and its powers stay in cache. An antithetic sample's odd sums then
    vanish to round-off (not exactly, as in :func:`add_symmetry_sums`)."""
    n, d = X.shape
    first = (-acc["n"]) % stride
    acc["n"] += n
    step = max(64, _POWER_BLOCK_VALUES // d)
    buf = np.empty((min(step, n), d))
    ones = np.ones(min(step, n))
    for s in range(0, n, step):
        Xb = X[s:s + step]
        o = ones[:Xb.shape[0]]
        t = np.multiply(Xb, Xb, out=buf[:Xb.shape[0]])
        if column_sums:
            acc["s1"] += o @ Xb
            acc["s2"] += o @ t
        t *= Xb
        acc["s3"] += o @ t
        t *= t
        acc["s6"] += o @ t
    Xs = X[first::stride]
    acc["m"] += Xs.shape[0]
    for b in row_blocks(Xs.shape[0], 2 * d):
        g = _odd_features(Xs[b])
        acc["sg"] += g.sum(axis=0)
        acc["sgg"] += g.T @ g


# -------------------------------------------------------------------------------------------- symmetry
def _odd_features(X: np.ndarray) -> np.ndarray:
    """``g(x) = (x, x**3)`` row by row. The cube is two products: ``np.power`` costs about 50 times
    more and dominated a whole fit at d = 100; ``(-x) (-x) (-x) = -(x x x)`` stays exact, so an
    antithetic sample still has odd sums of exactly zero."""
    n, d = X.shape
    g = np.empty((n, 2 * d))
    g[:, :d] = X
    np.multiply(X, X, out=g[:, d:])
    g[:, d:] *= X
    return g


def symmetry_from_sums(n: int, sg: np.ndarray, sgg: np.ndarray) -> SymmetryTest:
    gbar = sg / n
    cov = sgg / n - np.outer(gbar, gbar)
    scale = np.sqrt(np.clip(np.diag(cov), 0, None))
    constant = _constant_odd_features(gbar, scale, n)
    if constant is not None:
        return constant
    ok = scale > 1e-300
    if not ok.any():
        return SymmetryTest(0.0, 0, 1.0, n)
    corr = cov[np.ix_(ok, ok)] / np.outer(scale[ok], scale[ok])
    stat, df = _hotelling(n, gbar[ok] / scale[ok], corr)
    return SymmetryTest(stat, df, float(_stats.chi2.sf(stat, df)), n)


def _hotelling(n: int, z: np.ndarray, corr: np.ndarray) -> tuple[float, int]:
    """``n z^T corr^+ z`` and the rank of ``corr`` (eigenvalues below ``1e-10`` of the largest dropped)."""
    vals, vecs = np.linalg.eigh(corr)
    keep = vals > 1e-10 * vals.max()
    proj = vecs[:, keep].T @ z
    return float(n * np.sum(proj ** 2 / vals[keep])), int(keep.sum())


def _symmetry_from_strided_sums(acc: dict) -> SymmetryTest:
    """The test of :class:`SymmetryStatistic` with ``stride > 1`` (see its Notes)."""
    n, m = acc["n"], acc["m"]
    gbar = np.concatenate([acc["s1"], acc["s3"]]) / n
    var = np.concatenate([acc["s2"], acc["s6"]]) / n - gbar ** 2
    scale = np.sqrt(np.clip(var, 0, None))
    constant = _constant_odd_features(gbar, scale, n, m)
    if constant is not None:
        return constant
    ok = scale > 1e-300
    if not ok.any():
        return SymmetryTest(0.0, 0, 1.0, n, m)
    mean_m = acc["sg"] / max(m, 1)
    cov_m = acc["sgg"] / max(m, 1) - np.outer(mean_m, mean_m)
    sd_m = np.sqrt(np.clip(np.diag(cov_m), 0, None))
    seen = sd_m > 1e-300
    corr = np.eye(gbar.size)
    both = np.ix_(seen, seen)
    corr[both] = cov_m[both] / np.outer(sd_m[seen], sd_m[seen])
    stat, df = _hotelling(n, gbar[ok] / scale[ok], corr[np.ix_(ok, ok)])
    if m - df >= 1:
        p_value = float(_stats.f.sf(stat * (m - df) / (df * (m - 1)), df, m - df))
    else:  # fewer strided rows than features: no F law, the asymptotic chi-square
        p_value = float(_stats.chi2.sf(stat, df))
    return SymmetryTest(stat, df, p_value, n, m)


def symmetry_test(X: np.ndarray, *, gram_rows: int | None = None) -> SymmetryTest:
    """Test whether the law of ``x`` is symmetric (``x`` and ``-x`` equal in law), Ge et al.'s assumption.

    Parameters
    ----------
    X : array of shape (n, d)
    gram_rows : int, optional
        ``None`` (default): the covariance of ``g`` from every row (Hotelling, ``O(n (2 d)^2)``). An
        integer: the mean and variances of ``g`` from every row, its correlations from every
        ``n // gram_rows``-th row (at least ``gram_rows`` rows; ``O(n d + gram_rows (2 d)^2)``), with the
        p-value of the F law and the power described in :class:`SymmetryStatistic`.

    Returns
    -------
    SymmetryTest
        Hotelling's statistic for ``E[g(x)] = 0`` with the odd features ``g(x) = (x, x**3)``, its
        degrees of freedom (rank of the feature covariance) and the asymptotic chi-square p-value (F with
        ``gram_rows``). An exactly symmetric sample (``+-x`` pairs, adjacent) gives statistic 0 and
        p-value 1.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 2:
        raise InputError(f"symmetry_test needs X of shape (n >= 2, d), got {X.shape}.")
    if gram_rows is not None:
        if isinstance(gram_rows, bool) or not isinstance(gram_rows, (int, np.integer)) or gram_rows < 2:
            raise InputError(f"gram_rows must be an integer >= 2 or None, got {gram_rows!r}.")
        stride = max(1, X.shape[0] // int(gram_rows))
        if stride > 1:
            return SymmetryStatistic(stride).update(X).finalize()
    g = _odd_features(X)
    return symmetry_from_sums(X.shape[0], g.sum(axis=0), g.T @ g)
