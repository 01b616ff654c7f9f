"""Step 1 statistics of Goel & Panigrahy (2019): normalised H_1/H_2/H_4 correlations with the labels.

Every Step 1 route (whitening + tensor power iteration, the landscape ``G`` of Section 2.1, the
simultaneous landscape of Appendix B.4) reads the labels only through the normalised Hermite moments

* ``v1 = E[y~ x] / u_hat_1``                        (population, linear ``P``: ``sum_i c_i w_i``),
* ``M  = E[y~ (x x^T - I)] / (sqrt(2) u_hat_2)``      (``sum_i c_i w_i w_i^T``; ``m_2(z) = z^T M z``),
* ``T4 = E[y~ He_4(x)] / (sqrt(24) u_hat_4)``          (``sum_i c_i w_i^{(x)4}``; ``m_4(z) = T4(z, z, z, z)``),

with ``y~ = y - c_0`` (footnote 5: ``c_0`` is the median of ``y``; subtracting it changes no
population moment of order >= 1 and removes most of the variance). ``T4`` is never formed from
samples: the routes need only its contractions ``T4(I, a, b, c)``, ``T4(I, I, z, z)`` and
``T4(a, a, b, b)`` (the last is ``E[y~ psi(a, b, x)]/u_hat_4`` with the corrected kernel ``psi`` of
Appendix B.4), each ``O(m n)`` on the stored rows.

Streaming. For step and relu units with noiseless labels, ``y~ = 0`` on every sample where no unit
fires (Section 4.2 of the paper's setting: firing is rare, ``Pr ~ d Phi^c(t)``), so
:class:`ActiveRows`, a :class:`nnrecover.moments.Statistic`, keeps only the rows with ``y != c_0`` and the
count of all rows: one pass over arrays, chunk iterables or dask blocks (merge = concatenation).
For sigmoid units every row is active and all rows are kept (bounded by ``max_rows``).

:class:`SampleMoments` (from the stored rows) and :class:`PopulationMoments` (exact, from
:func:`~nnrecover.learners.goel2019.model.population_hermite_moment`) expose the same methods, and both
can be restricted to a subspace (``project``), which is how ``n > d`` is handled (the top-``d``
eigenspace of ``M``, the only directions in which ``G`` is not flat).
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..._validation import check_positive_int
from ...errors import AssumptionError, AssumptionWarning, InputError
from ...moments.base import Statistic
from ...moments.statistics import (
    CovarianceStatistic,
    excess_kurtosis_deviation,
    input_deviation_from_standard,
)
from .model import (
    HighThresholdNetwork,
    population_hermite_moment,
    tail_bound,
    threshold_hermite_coefficients,
)

__all__ = ["ActiveRows", "SampleMoments", "PopulationMoments", "hermite4_contraction", "hermite4_matrix",
           "lemma_diagnostics", "check_gaussian_inputs", "INPUT_CHECK_MIN_ROWS"]

_SQRT2, _SQRT24 = math.sqrt(2.0), math.sqrt(24.0)
#: rows per block of the second moment: 33 MB of weighted rows at d = 1000
_BLOCK_ROWS = 4096
#: row groups of :meth:`SampleMoments.second_groups`
M_GROUPS = 10
#: a first chunk shorter than this is not checked against N(0, I) (a mean and covariance need rows)
INPUT_CHECK_MIN_ROWS = 20


def hermite4_contraction(X: np.ndarray, weights: np.ndarray, a: np.ndarray, b: np.ndarray,
                         c: np.ndarray) -> np.ndarray:
    """``sum_s weights_s He_4(x_s)(I, a, b, c)`` for the multivariate Hermite tensor ``He_4``.

    ``He_4(x)(., a, b, c) = x [alpha beta gamma - alpha (b.c) - beta (a.c) - gamma (a.b)]
    - c alpha beta - b alpha gamma - a beta gamma + a (b.c) + b (a.c) + c (a.b)`` with
    ``alpha = a.x`` etc. (``He_4 = x^{(x)4} - Sym_6(x (x) x (x) I) + Sym_3(I (x) I)``, spec of H_4 in Section 2.1).
    """
    al, be, ga = X @ a, X @ b, X @ c
    ab, ac, bc = a @ b, a @ c, b @ c
    sw = weights.sum()
    scal = weights * (al * be * ga - al * bc - be * ac - ga * ab)
    return (X.T @ scal - c * (weights @ (al * be)) - b * (weights @ (al * ga)) - a * (weights @ (be * ga))
            + sw * (a * bc + b * ac + c * ab))


def hermite4_matrix(X: np.ndarray, weights: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``sum_s weights_s He_4(x_s)(I, I, z, z)``:
    ``(a^2 - r) x x^T - a^2 I - 2 a (x z^T + z x^T) + r I + 2 z z^T`` with ``a = z.x``, ``r = |z|^2``."""
    a = X @ z
    r = z @ z
    out = (X.T * (weights * (a * a - r))) @ X
    xa = X.T @ (weights * a)
    out -= 2.0 * (np.outer(xa, z) + np.outer(z, xa))
    out += np.eye(X.shape[1]) * (r * weights.sum() - weights @ (a * a))
    out += 2.0 * weights.sum() * np.outer(z, z)
    return out


def _t4_batch_samples(X, y, Z):
    """Columns ``He_4-sums(I, z_j, z_j, z_j)`` for every column of ``Z`` (unnormalised)."""
    A = X @ Z
    r = np.einsum("ij,ij->j", Z, Z)
    return X.T @ (y[:, None] * (A * (A * A - 3.0 * r))) + Z * (3.0 * r * y.sum() - 3.0 * (y @ (A * A)))


def _t4_sum_samples(X, y, Z):
    """Columns ``sum_k He_4-sums(I, z_j, z_k, z_k)`` for every column ``z_j`` of ``Z`` (unnormalised)."""
    A = X @ Z
    G = Z.T @ Z
    S = np.einsum("ij,ij->i", A, A)          # sum_k beta_k^2 per sample
    R = np.trace(G)                          # sum_k |z_k|^2
    C1 = A * (S - R)[:, None] - 2.0 * (A @ G)
    K = (A.T * y) @ A
    sy = y.sum()
    return X.T @ (y[:, None] * C1) - 2.0 * Z @ K - Z * (y @ S) + Z * (R * sy) + 2.0 * sy * (Z @ G)


class ActiveRows(Statistic):
    """Streaming store of the rows whose label differs from the baseline ``c_0`` (plus the total count).

    Parameters
    ----------
    baseline : float or None
        ``c_0``. ``None``: the median of the labels of the first chunk this statistic sees (footnote
        5 of the paper). Partial results with different baselines refuse to merge.
    keep_all : bool, default False
        Keep every row (sigmoid units, or noisy labels: ``y~`` is then never exactly 0).
    tol : float, default 0
        Rows with ``|y - c_0| <= tol`` count as inactive.
    max_rows : int, default 10_000_000
        Memory guard on the stored rows.
    """

    def __init__(self, baseline: float | None = None, *, keep_all: bool = False, tol: float = 0.0,
                 max_rows: int = 10_000_000):
        self.baseline = None if baseline is None else float(baseline)
        self.keep_all = bool(keep_all)
        self.tol = float(tol)
        self.max_rows = check_positive_int(max_rows, "max_rows")
        super().__init__()

    def _reset(self) -> None:
        self._X: list[np.ndarray] = []
        self._y: list[np.ndarray] = []
        self._rows = 0
        if getattr(self, "_auto", None) is None:
            self._auto = self.baseline is None
        if self._auto:
            self.baseline = None

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        if Y.shape[1] != 1:
            raise InputError(f"Goel-Panigrahy learns a scalar-output network; Y has {Y.shape[1]} columns.")
        y = Y[:, 0]
        if self.baseline is None:
            self.baseline = float(np.median(y))
        yt = y - self.baseline
        keep = slice(None) if self.keep_all else np.abs(yt) > self.tol
        Xk, yk = X[keep], yt[keep]
        self._rows += yk.shape[0]
        if self._rows > self.max_rows:
            raise InputError(f"more than max_rows={self.max_rows} active rows; raise max_rows (memory "
                             f"{self.max_rows * X.shape[1] * 8 / 1e9:.1f} GB) or pass fewer samples.")
        if yk.shape[0]:
            self._X.append(np.array(Xk, copy=True))
            self._y.append(np.array(yk, copy=True))

    def _merge(self, other: "ActiveRows") -> None:
        if self.baseline is None:
            self.baseline = other.baseline
        elif other.baseline != self.baseline:
            raise AssumptionError(
                f"two blocks of the data have different label medians ({self.baseline!r} and "
                f"{other.baseline!r}): more than half of the samples fire, so the threshold is too low for "
                "Goel-Panigrahy Step 1 (Lemma 1 needs rare firing), or the labels are noisy; pass baseline=c_0.")
        self._X.extend(other._X)
        self._y.extend(other._y)
        self._rows += other._rows

    def finalize(self) -> tuple[np.ndarray, np.ndarray, int, float]:
        """``(X_active, y_tilde_active, n_total, baseline)``."""
        self.require(1, "the Goel-Panigrahy statistics")
        d = self.n_inputs
        X = np.vstack(self._X) if self._X else np.zeros((0, d))
        y = np.concatenate(self._y) if self._y else np.zeros(0)
        # keep the stacked rows instead of the chunks: the store would otherwise hold the rows twice
        self._X, self._y = [X], [y]
        return X, y, int(self.n), float(self.baseline)


class _Moments:
    """Shared normalisation (``u_hat_1, u_hat_2, u_hat_4`` of the activation) and derived methods."""

    def __init__(self, activation: str, threshold: float):
        self.activation = activation
        self.threshold = float(threshold)
        self.u_hat = threshold_hermite_coefficients(activation, threshold, 4)

    def m2(self, z: np.ndarray) -> float:
        return float(z @ self.second() @ z)

    def m4(self, z: np.ndarray) -> float:
        return float(z @ self.t4(z, z, z))


class SampleMoments(_Moments):
    """The normalised moments of stored active rows (see the module docstring).

    Parameters
    ----------
    X : (m, n) active rows; y_tilde : (m,) their centred labels; n_total : int, all samples seen.
    activation, threshold : the known activation and ``t``.
    """

    def __init__(self, X: np.ndarray, y_tilde: np.ndarray, n_total: int, activation: str, threshold: float):
        super().__init__(activation, threshold)
        self.X = np.asarray(X, dtype=np.float64)
        self.y = np.asarray(y_tilde, dtype=np.float64)
        self.n_total = int(n_total)
        self.n_inputs = self.X.shape[1]
        self._M = None

    def first(self) -> np.ndarray:
        return self.X.T @ self.y / (self.n_total * self.u_hat[1])

    def second(self) -> np.ndarray:
        if self._M is None:
            # by blocks of rows: the weighted copy of all the rows would double their memory
            S = np.zeros((self.n_inputs, self.n_inputs))
            for lo in range(0, self.X.shape[0], _BLOCK_ROWS):
                Xb = self.X[lo:lo + _BLOCK_ROWS]
                S += (Xb * self.y[lo:lo + _BLOCK_ROWS, None]).T @ Xb
            self._M = (S - np.eye(self.n_inputs) * self.y.sum()) / (self.n_total * _SQRT2 * self.u_hat[2])
        return self._M

    def second_group_spread(self) -> list[float]:
        """``||M_g - M||_2`` for each of :data:`M_GROUPS` row groups (active row ``r`` in group ``r mod G``,
        the quiet rows shared out evenly through ``n_total``): ``M_g`` are independent estimates whose mean
        is ``M``, so their spread gives ``M``'s sampling error (:func:`.step1.extra_directions`). One group
        at a time (one more ``n x n`` matrix in memory), the flops of one more ``M``."""
        M = self.second()
        G, n = M_GROUPS, self.n_inputs
        norm = self.n_total / G * _SQRT2 * self.u_hat[2]
        spread = []
        for g in range(G):
            Xg, yg = self.X[g::G], self.y[g::G]
            S = np.zeros((n, n))
            for lo in range(0, Xg.shape[0], _BLOCK_ROWS):
                Xb = Xg[lo:lo + _BLOCK_ROWS]
                S += (Xb * yg[lo:lo + _BLOCK_ROWS, None]).T @ Xb
            D = (S - np.eye(n) * yg.sum()) / norm - M
            # symmetric: the spectral norm is the largest |eigenvalue| (eigvalsh: 0.04 s at n = 1000 against
            # 0.11 s for the SVD of norm(., 2))
            spread.append(float(np.max(np.abs(np.linalg.eigvalsh(0.5 * (D + D.T))))))
        return spread

    def t4(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        """``T4(I, a, b, c)``."""
        return hermite4_contraction(self.X, self.y, a, b, c) / (self.n_total * _SQRT24 * self.u_hat[4])

    def t4_matrix(self, z: np.ndarray) -> np.ndarray:
        """``T4(I, I, z, z)``."""
        return hermite4_matrix(self.X, self.y, z) / (self.n_total * _SQRT24 * self.u_hat[4])

    def t4_pairs(self, Z: np.ndarray) -> np.ndarray:
        A = self.X @ Z                        # a_sj = z_j . x_s
        G = Z.T @ Z
        nrm = np.diag(G)
        A2 = A * A
        y = self.y
        # He_4(x)(a, a, b, b) = A_a^2 A_b^2 - |b|^2 A_a^2 - |a|^2 A_b^2 - 4 (a.b) A_a A_b + |a|^2|b|^2 + 2 (a.b)^2
        out = (A2.T * y) @ A2 - np.outer(y @ A2, nrm) - np.outer(nrm, y @ A2) - 4.0 * G * ((A.T * y) @ A) \
            + y.sum() * (np.outer(nrm, nrm) + 2.0 * G * G)
        return out / (self.n_total * _SQRT24 * self.u_hat[4])

    def t4_batch(self, Z: np.ndarray) -> np.ndarray:
        """Columns ``T4(I, z_j, z_j, z_j)`` for the columns of ``Z``."""
        return _t4_batch_samples(self.X, self.y, Z) / (self.n_total * _SQRT24 * self.u_hat[4])

    def t4_sum(self, Z: np.ndarray) -> np.ndarray:
        """Columns ``sum_k T4(I, z_j, z_k, z_k)`` (the simultaneous objective's cross term, Appendix B.4)."""
        return _t4_sum_samples(self.X, self.y, Z) / (self.n_total * _SQRT24 * self.u_hat[4])

    def project(self, U: np.ndarray) -> "SampleMoments":
        """The moments of ``q = U^T x`` (``U`` with orthonormal columns: ``q ~ N(0, I)`` again)."""
        return SampleMoments(self.X @ U, self.y, self.n_total, self.activation, self.threshold)

    @property
    def n_active(self) -> int:
        return self.y.shape[0]


class PopulationMoments(_Moments):
    """Exact normalised moments of a :class:`HighThresholdNetwork` (dense; small ``n`` only).

    Exact for linear ``P`` with any ``W*`` and for polynomial ``P`` with orthonormal ``W*``
    (:func:`~nnrecover.learners.goel2019.model.population_hermite_moment`).
    """

    def __init__(self, network: HighThresholdNetwork | None = None, *, tensors=None, activation=None,
                 threshold=None):
        if network is not None:
            super().__init__(network.activation, network.threshold)
            u = self.u_hat
            T1 = population_hermite_moment(network, 1) / u[1]
            T2 = population_hermite_moment(network, 2) / (_SQRT2 * u[2])
            T4 = population_hermite_moment(network, 4) / (_SQRT24 * u[4])
        else:
            super().__init__(activation, threshold)
            T1, T2, T4 = tensors
        self.T1, self.T2, self.T4 = T1, T2, T4
        self.n_inputs = T2.shape[0]
        self.n_total = None

    def first(self) -> np.ndarray:
        return self.T1

    def second(self) -> np.ndarray:
        return self.T2

    # contractions by reshaped matrix products (BLAS) rather than einsum: T4 is symmetric, so the order
    # in which the free axes are contracted does not matter
    def t4(self, a, b, c) -> np.ndarray:
        n = self.n_inputs
        return self.T4.reshape(n, -1) @ np.kron(a, np.kron(b, c))

    def t4_matrix(self, z) -> np.ndarray:
        n = self.n_inputs
        return (self.T4.reshape(n * n, n * n) @ np.kron(z, z)).reshape(n, n)

    def t4_batch(self, Z) -> np.ndarray:
        n = self.n_inputs
        K = np.einsum("ia,ja,ka->ijka", Z, Z, Z).reshape(n ** 3, -1)
        return self.T4.reshape(n, -1) @ K

    def t4_sum(self, Z) -> np.ndarray:
        n = self.n_inputs
        S = (Z @ Z.T).reshape(-1)                               # sum_k z_k z_k^T
        A = (self.T4.reshape(n * n, n * n) @ S).reshape(n, n)   # T4(I, I, S)
        return A @ Z

    def t4_pairs(self, Z) -> np.ndarray:
        n = self.n_inputs
        K = np.einsum("ia,ja->ija", Z, Z).reshape(n * n, -1)
        return K.T @ self.T4.reshape(n * n, n * n) @ K

    def project(self, U: np.ndarray) -> "PopulationMoments":
        T4 = np.einsum("ijkl,ia,jb,kc,ld->abcd", self.T4, U, U, U, U, optimize=True)
        return PopulationMoments(tensors=(U.T @ self.T1, U.T @ self.T2 @ U, T4), activation=self.activation,
                                 threshold=self.threshold)


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


def check_gaussian_inputs(X0: np.ndarray) -> dict:
    """Whether the first chunk ``X0`` is plausible for N(0, I), the only input law of Goel-Panigrahy (Section 1);
    warns (:class:`~nnrecover.errors.AssumptionWarning`) when it is not. It checks
    its mean and covariance (:func:`~nnrecover.moments.input_deviation_from_standard`) and the excess
    kurtosis of its coordinates (:func:`~nnrecover.moments.excess_kurtosis_deviation`), which sees laws
    with the mean and covariance of N(0, I) but another shape. Such a law leaves Step 1 biased by the
    same amount on both split halves, so the certificate ``unit_angles`` cannot see it (measured:
    uniform, Rademacher and Laplace inputs, 5 units in 10 inputs at t = 2, 3e5 rows: every unit
    0.5-1.2 rad off, split halves 0.02-0.08 rad).

    Returns
    -------
    dict
        ``plausible`` (None when the chunk has fewer than :data:`INPUT_CHECK_MIN_ROWS` rows), ``message``,
        ``rows`` and the excess kurtosis statistics with their tolerances.
    """
    n0 = X0.shape[0]
    if n0 < INPUT_CHECK_MIN_ROWS:
        return {"plausible": None, "rows": n0,
                "message": f"not checked: the first chunk has {n0} row(s), fewer than {INPUT_CHECK_MIN_ROWS}"}
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
    check = {"plausible": plausible, "message": message, "rows": n0, "excess_kurtosis": kurt,
             "excess_kurtosis_tolerance": kurt_tol, "mean_excess_kurtosis": mean_kurt,
             "mean_excess_kurtosis_tolerance": mean_tol}
    if not plausible:
        warnings.warn(f"HighThresholdLearner: {message} Goel-Panigrahy assume x ~ N(0, I) (Section 1): "
                      "every Step 1 statistic is a Hermite correlation under that law, so the estimate is "
                      "biased, on both split halves alike (the certificate unit_angles does not see it). "
                      "Whiten the inputs first if they are Gaussian with another mean/covariance; other "
                      "input laws are outside the model.", AssumptionWarning, stacklevel=4)
    return check
