"""Hermite coefficient tensors ``f^_k = E[f(x) He_k(x)]`` for the Awasthi et al. learner: exact
(Lemma 3.5) or estimated from samples (eq. (6)), in a small space (internal).

Design (Lemma 3.5 and the estimator of eq. (6)):

* order ``l = 1``: every tensor is projected onto the ``m``-dimensional range of ``T_2`` (which is
  ``span{w_i}``: ``f^_2 = sum_i a_i phi(b_i) w_i w_i^T`` and ``phi > 0``). For a matrix ``P`` with
  orthonormal columns, ``He_k(x)[P v_1, ..., P v_k] = He_k(P^T x)[v_1, ..., v_k]``, so the projected
  tensor is the Hermite tensor of ``z = P^T x ~ N(0, I_m)``: nothing of size ``d**k`` is formed.
  Pass 1 over the data finds ``P`` (exact top-``m`` eigenvectors of the full ``T_2`` when ``d`` is
  moderate; otherwise a randomized sketch plus subspace iterations -- one more pass each, each sketching
  the residual of the previous iteration's order <= 2 estimate, a control variate -- on a leading
  subset of the rows, the pilot, checked during pass 2) and ``T_0``, ``T_1``; pass 2 accumulates the raw
  moments of ``(r, z)``, ``r`` the residual of the control variate (:class:`ProjectedMomentStatistic`).
* order ``l = 2`` (overcomplete, ``m > d``): the tensors stay in ``R^d`` (``d`` is small there), one pass.

Raw moments ``S_r = (1/N) sum y z^{(x) r}`` are accumulated packed over multisets, each distinct
moment once (:meth:`~.symtensor.Monomials.add_moment_sums`: one small GEMM per coordinate of ``z``),
per row group (blocks of 4096 rows dealt to 8 groups in turn; even groups form half A, odd ones
half B); the halves give the split-sample spectral noise estimates of Algorithm 4's thresholds
(the noise-adaptive thresholds of Algorithm 4), the groups the standard deviations of the scalar estimates, and their sum
the estimate itself. Hermite tensors are assembled from raw moments by the matching
formula (:func:`~.symtensor.hermite_from_raw`).
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import linalg

from ..._validation import check_random_state
from ...data import accumulate, as_data_source
from ...data.views import Head
from ...errors import AssumptionError, AssumptionWarning, InputError
from ...hermite.expansions import network_hermite_expansion
from ...metrics import relu_second_moment
from ...moments.base import Statistic
from ...network import TwoLayerNetwork
from ...tensor import flatten
from .symtensor import Monomials, contract_rank_one, hermite_from_raw

SPLIT_BLOCK = 4096
"""Rows per block of the split-sample halves (alternating A, B, A, ...)."""

N_GROUPS = 8
"""Row groups of pass 2: block ``j`` (of ``SPLIT_BLOCK`` rows) goes to group ``j mod N_GROUPS``; the even
groups form half A, the odd ones half B. The spread of a statistic over the groups estimates its
sampling variance (:meth:`HermiteCoefficients.group_std`)."""

RANGE_CHECK_GROUP = 0
"""The row group (an eighth of the rows, blocks spread over the data) on which the moment pass of the
randomized range finder also estimates ``T_2 P`` (``ProjectedMomentStatistic(range_check=True)``)."""

FULL_RANGE_PROBE_STRIDE = 4
"""The full ``T_2`` pass (:class:`RangeStatistic` with ``method="full"``) adds the covariance probes of the
input check on every 4th row of each chunk (see ``RangeStatistic.__init__``)."""

__all__ = ["HermiteCoefficients", "exact_coefficients", "estimate_coefficients", "min_samples",
           "RangeStatistic", "ProjectedMomentStatistic"]


@dataclass
class HermiteCoefficients:
    """Hermite coefficient tensors ``T_0, ..., T_K`` of a ReLU network, in coordinates ``z = P^T x``.

    Attributes
    ----------
    basis : (d, n) array or None
        ``P`` with orthonormal columns (``None``: identity, ``n = d``).
    tensors : dict k -> (n,)*k array
        Dense symmetric ``T_k`` (``k >= 2``) in the projected coordinates.
    t0 : float
        ``T_0 = E[y]``.
    t1 : (d,) array
        ``T_1 = E[y x]`` in the input space (FIXSIGNS and the linear part need all of it).
    exact : bool
        True for the population coefficients of Lemma 3.5.
    n_samples : int or None
    y_second_moment : float
        ``E[y^2]``.
    residual_second_moment : float
        ``E[(y - p(x))^2]`` for the control variate ``p`` the estimates used (see
        :func:`estimate_coefficients`); equals ``y_second_moment`` without one. It sets the variance of
        rank-one contractions (eq. (6)).
    noise : dict k -> float
        Spectral noise ``sigma^_k`` of the flattening used for rank selection (``k = 2l+1``:
        ``flatten(T_k, l, l+1)``; ``k = 2l+2``: ``flatten(T_k, l, l+2)``; other ``k``:
        ``flatten(T_k, floor(k/2), ceil(k/2))``), from split halves; 0 for exact coefficients.
    halves : tuple of two dicts or None
        ``T_k`` of the two halves (noise estimation only).
    groups : tuple of (dict, int) or None
        ``(T_k of the group, rows)`` for the ``N_GROUPS`` row groups of pass 2 (orders >= 3; the
        variance of any contraction, :meth:`group_std`).
    info : dict
        Diagnostics of the passes (timings, range finder, input checks).
    """

    basis: np.ndarray | None
    tensors: dict
    t0: float
    t1: np.ndarray
    exact: bool
    n_samples: int | None = None
    y_second_moment: float = float("nan")
    residual_second_moment: float = float("nan")
    noise: dict = field(default_factory=dict)
    halves: tuple | None = None
    groups: tuple | None = None
    info: dict = field(default_factory=dict)

    # ---------------------------------------------------------------- coordinates
    @property
    def dim(self) -> int:
        """``n``, the dimension of the coordinates of the tensors."""
        return self.n_inputs if self.basis is None else self.basis.shape[1]

    @property
    def n_inputs(self) -> int:
        return self.t1.shape[0]

    def project(self, W: np.ndarray) -> np.ndarray:
        """Rows of ``W`` (input space) in the projected coordinates."""
        return W if self.basis is None else W @ self.basis

    def lift(self, U: np.ndarray) -> np.ndarray:
        """Rows of ``U`` (projected coordinates) back in the input space."""
        return U if self.basis is None else U @ self.basis.T

    @property
    def t1_projected(self) -> np.ndarray:
        return self.project(self.t1)

    # ---------------------------------------------------------------- access
    def tensor(self, k: int) -> np.ndarray:
        if k == 0:
            return np.asarray(self.t0)
        if k == 1:
            return self.t1_projected
        if k not in self.tensors:
            raise InputError(f"order-{k} coefficients were not computed (have {sorted(self.tensors)}).")
        return self.tensors[k]

    def rank_one(self, k: int, U: np.ndarray) -> np.ndarray:
        """``T_k(u_i, ..., u_i)`` for the rows ``u_i`` of ``U`` (projected coordinates)."""
        U = np.atleast_2d(U)
        if k == 0:
            return np.full(U.shape[0], self.t0)
        if k == 1:
            return U @ self.t1_projected
        return contract_rank_one(self.tensor(k), U)

    def rank_one_std(self, k: int) -> float:
        """Standard deviation of a rank-one contraction ``T_k(u, ..., u)`` for a unit ``u`` if ``r`` and
        ``He_k(u.z)`` were independent: ``sqrt(E[r^2] k! / N)`` (the variance of eq. (6)), with ``r = y - p(x)``
        the residual of the control variate for ``k >= 3`` and ``r = y`` otherwise; 0 for exact
        coefficients. With the control variate the residual is concentrated along the ``w_i`` and this
        underestimates the error of contractions along them (measured 1.2-5.5x): prefer
        :meth:`group_std` where groups exist."""
        if self.exact or not self.n_samples:
            return 0.0
        second = self.residual_second_moment if k >= 3 else self.y_second_moment
        if not np.isfinite(second):
            second = self.y_second_moment
        return math.sqrt(second * math.factorial(k) / self.n_samples)

    def group_std(self, k: int, fn) -> np.ndarray | None:
        """Standard deviation of ``fn(T_k)`` (any array-valued function of the order-``k`` tensor, e.g.
        rank-one contractions followed by a Gram solve) from its spread over the row groups:
        ``sqrt(sum_g n_g (fn(T_k^g) - fn(T_k))^2 / ((G - 1) N))`` (first order: ``fn`` is close to
        linear at the scale of the noise). None when there are no groups (exact coefficients, order 2
        with few samples) or ``k`` is not grouped."""
        if self.exact or not self.groups or k not in self.groups[0][0]:
            return None
        ref = np.asarray(fn(self.tensor(k)), dtype=np.float64)
        acc = np.zeros_like(ref)
        n_tot, used = 0, 0
        for tensors, n_g in self.groups:
            if n_g == 0:
                continue
            acc += n_g * (np.asarray(fn(tensors[k]), dtype=np.float64) - ref) ** 2
            n_tot += n_g
            used += 1
        if used < 2:
            return None
        return np.sqrt(acc / ((used - 1) * n_tot))


def _flat_shape(k: int, order: int) -> tuple[int, int]:
    if k == 2 * order + 1:
        return order, order + 1
    if k == 2 * order + 2:
        return order, order + 2
    return k // 2, k - k // 2


def exact_coefficients(network, order: int, n_components: int | None = None, *,
                       basis: str = "range", range_method: str = "full", rng=None) -> HermiteCoefficients:
    """Population Hermite coefficients of a ReLU network (Lemma 3.5), in the learner's coordinates.

    Parameters
    ----------
    network : TwoLayerNetwork
        One output, ReLU activation (any row norms; the output bias enters ``f^_0`` only).
    order : int
        ``l``: tensors up to order ``2l + 2`` are formed.
    n_components : int, optional
        For ``basis="range"``: the dimension ``m`` of the projection (default: hidden units).
    basis : {"range", "identity"}
        ``"range"``: project onto the top-``m`` eigenvectors of ``f^_2`` (what the sample path does,
        for ``l = 1``); ``"identity"``: stay in ``R^d``.
    range_method : {"full", "randomized", "auto", "sketch"}
        How the eigenvectors of ``f^_2`` are found for ``basis="range"``: ``"full"``, an eigendecomposition
        of the ``d x d`` matrix; ``"randomized"`` (also ``"sketch"``), the sample path's randomized range
        finder applied to the exact matrix (:func:`_randomized_top_eigvecs`: ``f^_2 Omega`` for a Gaussian
        ``d x (m + 10)`` ``Omega``, one more application, Rayleigh-Ritz). ``f^_2`` has rank ``m``, so both
        give the same basis to round-off; ``"auto"`` chooses as :func:`estimate_coefficients` does.
    rng : seed or Generator, optional
        For ``Omega``.
    """

    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"truth must be a TwoLayerNetwork, got {type(network).__name__}.")
    if network.activation.name != "relu":
        raise AssumptionError(f"Awasthi et al. 2021 learn ReLU networks; truth has activation "
                              f"{network.activation.spec!r}.")
    if network.n_outputs != 1:
        raise InputError(f"the Hermite learner handles one output; truth has {network.n_outputs}.")
    K = 2 * order + 2
    expansion = network_hermite_expansion(network, K)  # Lemma 3.5, unit directions
    d = network.n_inputs
    t0 = float(expansion.tensor(0)[0])
    t1 = expansion.tensor(1)[0]
    P = None
    if basis == "range":
        m = network.n_hidden if n_components is None else int(n_components)
        if range_method == "auto":
            range_method = "full" if d <= RANDOMIZED_MIN_RATIO * (m + RANDOMIZED_OVERSAMPLE) else "randomized"
        if range_method == "full":
            P = _top_eigvecs(expansion.tensor(2)[0], min(m, d))
        elif range_method in ("randomized", "sketch"):
            P = _randomized_top_eigvecs(expansion.tensor(2)[0], min(m, d), check_random_state(rng))
        else:
            raise InputError(f"range_method must be 'auto', 'full', 'sketch' or 'randomized', got {range_method!r}.")
    elif basis != "identity":
        raise InputError(f"basis must be 'range' or 'identity', got {basis!r}.")
    tensors = {k: expansion.tensor(k, P)[0] for k in range(2, K + 1)}
    y2 = relu_second_moment(network)
    return HermiteCoefficients(basis=P, tensors=tensors, t0=t0, t1=t1, exact=True, n_samples=None,
                               y_second_moment=float(y2), noise={k: 0.0 for k in range(K + 1)},
                               info={"mode": "population"})


def _top_eigvecs(S: np.ndarray, m: int) -> np.ndarray:
    """Eigenvectors of the symmetric ``S`` for its ``m`` eigenvalues of largest magnitude."""
    lam, V = linalg.eigh(0.5 * (S + S.T))
    idx = np.argsort(-np.abs(lam), kind="stable")[:m]
    return _fix_column_signs(V[:, np.sort(idx)])


def _randomized_top_eigvecs(S: np.ndarray, m: int, gen: np.random.Generator) -> np.ndarray:
    """The randomized range finder on a known symmetric ``S``: ``Y = S (S Omega)`` for a Gaussian
    ``d x (m + 10)`` ``Omega`` (one power step), ``Q = orth(Y)``, Rayleigh-Ritz on ``Q^T S Q``, the ``m``
    Ritz vectors of largest ``|lambda|`` (Halko, Martinsson, Tropp 2011, Algorithms 4.3 and 5.3). When
    ``rank S <= m + 10`` the range of ``Y`` is that of ``S`` and the Ritz vectors are its eigenvectors."""
    S = 0.5 * (S + S.T)
    d = S.shape[0]
    omega = gen.standard_normal((d, min(d, m + RANDOMIZED_OVERSAMPLE)))
    Q = linalg.qr(S @ (S @ omega), mode="economic")[0]
    lam, V = linalg.eigh(Q.T @ S @ Q)
    idx = np.argsort(-np.abs(lam), kind="stable")[:m]
    return _fix_column_signs(Q @ V[:, np.sort(idx)])


def _fix_column_signs(P: np.ndarray) -> np.ndarray:
    """Flip columns so that each one's largest-|entry| is positive (a deterministic basis, so the
    projected tensors do not depend on LAPACK's sign choices, e.g. between data sources)."""
    piv = P[np.argmax(np.abs(P), axis=0), np.arange(P.shape[1])]
    return P * np.where(piv < 0, -1.0, 1.0)


# ==================================================================== streaming statistics

class _InputCheck:
    """Accumulators for the N(0, I) check: sums of ``x``, ``x**2`` and covariance probes."""

    #: the covariance probes use every ``probe_stride``-th row of a chunk (``n_probe`` rows in all)
    probe_stride = 1

    def _reset_check(self) -> None:
        d = self.d
        self.sx = np.zeros(d)
        self.sxx = np.zeros(d)
        self.sprobe = np.zeros((d, self.omega_cov.shape[1]))
        self.n_probe = 0

    def _update_check(self, X: np.ndarray) -> None:
        rc = self.omega_cov.shape[1]
        M = np.empty((rc + 1, X.shape[0]))
        np.matmul(self.omega_cov.T, X.T, out=M[:rc])
        M[rc] = 1.0
        R = M @ X  # (rows, n) @ (n, d): the faster BLAS orientation for a tall X (see RangeStatistic)
        self.sprobe += R[:rc].T
        self.n_probe += X.shape[0]
        self.sx += R[rc]
        self.sxx += np.einsum("ij,ij->j", X, X)

    def _merge_check(self, other) -> None:
        self.sx += other.sx
        self.sxx += other.sxx
        self.sprobe += other.sprobe
        self.n_probe += other.n_probe

    def input_deviation(self) -> dict:
        """Measured deviation of the inputs from N(0, I): max |mean|, max |var - 1|, and a
        Hutchinson estimate of ``||Cov - I||_F / sqrt(d)`` from the Gaussian probes."""
        n = max(self.n, 1)
        n_probe = max(self.n_probe, 1)
        mean = self.sx / n
        var = self.sxx / n - mean ** 2
        cov_probe = self.sprobe / n_probe - np.outer(mean, mean @ self.omega_cov) - self.omega_cov
        frob = float(np.linalg.norm(cov_probe) / math.sqrt(self.omega_cov.shape[1]))
        d = self.d
        return {"max_abs_mean": float(np.abs(mean).max()), "max_abs_var_minus_1": float(np.abs(var - 1).max()),
                "cov_minus_identity_frobenius_per_sqrt_d": frob / math.sqrt(d),
                "expected_mean": float(math.sqrt(2 * math.log(2 * d) / n)),
                "expected_var": float(math.sqrt(2.0) * math.sqrt(2 * math.log(2 * d) / n)),
                "expected_cov": float(math.sqrt((d + 1) / n_probe))}


#: rows per block of :func:`_add_signed_gram`: a block's sign groups (3.2 MiB at d = 100) are gathered
#: and scaled in the cache and multiplied from there, where gathering a whole chunk's rows first sends
#: them through memory (one thread, d = 100, N = 10^6: 0.36 s against 0.47 s, one ``X^T X`` 0.24 s)
SIGNED_GRAM_BLOCK = 4096


def _add_signed_gram(G: np.ndarray, X: np.ndarray, w: np.ndarray) -> None:
    """``G += X^T diag(w) X`` on the upper triangle (``G`` Fortran-ordered, lower triangle untouched).

    A symmetric rank-k update (BLAS ``dsyrk``, half the flops of a GEMM) needs a sign-definite weight,
    so the rows with ``w >= 0`` add ``A^T A`` and those with ``w < 0`` subtract it, with
    ``A = diag(sqrt|w|) X`` of that group, block by block of :data:`SIGNED_GRAM_BLOCK` rows (faster
    than ``(X^T diag(w)) X``, gathers included)."""
    from scipy.linalg import blas  # deferred: SciPy's submodules are slow to import

    buf = np.empty((min(SIGNED_GRAM_BLOCK, X.shape[0]), X.shape[1]))
    for start in range(0, X.shape[0], SIGNED_GRAM_BLOCK):
        Xb, wb = X[start:start + SIGNED_GRAM_BLOCK], w[start:start + SIGNED_GRAM_BLOCK]
        neg = wb < 0
        for alpha, sel in ((1.0, ~neg), (-1.0, neg)):
            idx = np.flatnonzero(sel)
            if idx.size == 0:
                continue
            A = np.take(Xb, idx, axis=0, out=buf[:idx.size])
            A *= np.sqrt(np.abs(wb[idx]))[:, None]
            out = blas.dsyrk(alpha, A.T, beta=1.0, c=G, trans=0, lower=0, overwrite_c=1)  # A.T: Fortran, no copy
            if out is not G:  # f2py copied G (not Fortran-ordered float64): keep the result anyway
                G[...] = out


def _target_column(Y: np.ndarray) -> np.ndarray:
    if Y.shape[1] != 1:
        raise InputError(f"the Hermite learner needs exactly one target column per sample, got {Y.shape[1]}.")
    return Y[:, 0]


class RangeStatistic(_InputCheck, Statistic):
    """Pass 1 for ``l = 1``: ``T_0``, ``T_1``, ``E[y^2]``, and the range of ``T_2``.

    ``method="full"`` accumulates ``sum y x x^T`` (``d x d``); ``method="sketch"`` accumulates
    ``sum y x (x^T Omega)`` for a Gaussian ``d x r`` test matrix (cost ``O(N d r)``), from which the
    range is found by the one-pass symmetric Nystrom-type approximation of Halko, Martinsson and
    Tropp (2011, section 5.5). With ``rayleigh_ritz=True`` (``Omega`` orthonormal, the previous
    iterate of a subspace iteration) the sample product ``B = Omega^T T_2 Omega`` is exact and the
    basis is its Rayleigh-Ritz one, ``P = Omega V_m`` (Halko et al. Algorithm 5.3): no Nystrom step,
    which is unstable for the indefinite ``T_2`` of networks with output weights of both signs.

    Per chunk two GEMMs read ``X`` (plus one pass for ``sum x**2``): ``M = [Omega, Omega_c]^T X^T`` with
    the rows ``y * (x^T Omega)``, ``x^T Omega_c``, ``y``, ``1``, then ``M X``, which gives
    ``sum y x x^T Omega``, the covariance probes, ``sum y x`` and ``sum x`` at once. Both products put
    the long sample dimension ``N`` on the outside of a (short, wide) times (tall) product, the faster
    BLAS orientation than ``X^T M^T`` (benchmarks/README.md).
    ``method="full"`` adds ``sum y x x^T`` by two symmetric rank-k updates (:func:`_add_signed_gram`,
    upper triangle).

    ``control_variate = (t1,)`` with ``method="full"`` weights ``x x^T`` by ``r = y - c - t1^T x`` (the linear
    part has no order-2 coefficient, so nothing is added back).
    ``control_variate = (t1, Q, M)`` (``method="sketch"``; the subspace iterations) sketches the residual
    ``r = y - c - p(x)`` of the degree-2 polynomial ``p(x) = t1^T x + (u^T M u - tr M) / 2``, ``u = Q^T x``,
    whose order-2 Hermite coefficient ``Q M Q^T`` is known exactly and whose orders 0 and 1 are
    ``0`` and ``t1``; it is added back, so ``T_2 Omega = mean(r He_2(x)) Omega + Q M Q^T Omega`` has the
    same expectation as eq. (6) for every fixed ``p`` (``p`` comes from the previous pass). Its
    variance is that of ``r``, not of ``y``: a ReLU network keeps most of ``Var(y)`` in its orders 1
    and 2 (per unit with ``b = 0``: 0.25 and 0.08 of ``E[relu^2] - E[relu]^2 = 0.34``, against 0.011 for
    all orders >= 3), and the sketch's noise, which grows like ``sqrt(Var(y) d / N)``, decides which
    eigenvectors of ``T_2`` can be told from noise at large ``d`` (the spiked-matrix threshold).
    """

    def __init__(self, d: int, *, method: str, omega: np.ndarray | None, omega_cov: np.ndarray,
                 rayleigh_ritz: bool = False, center: float = 0.0, control_variate: tuple | None = None):
        self.d = int(d)
        self.method = method
        # T_2 = mean((y - c) (x x^T - I)) for any constant c (E[x x^T - I] = 0); c near E[y] removes the
        # mean of y from the noise, which dominates it when |E[y]| is large (large positive biases)
        self.center = float(center)
        self.omega = omega
        self.rayleigh_ritz = bool(rayleigh_ritz)
        self.omega_cov = omega_cov
        # rows of the first product: the sketch test vectors (method "sketch") and the probes
        left = omega_cov if method == "full" else np.hstack([omega, omega_cov])
        self.control_variate = None
        self.linear_variate = None
        if control_variate is not None and method == "full":
            t1 = np.asarray(control_variate[0], dtype=np.float64).reshape(-1)
            if len(control_variate) != 1 or t1.shape != (self.d,):
                raise InputError(f"with method='full' control_variate must be (t1,) with t1 of shape ({self.d},).")
            self.linear_variate = t1
        elif control_variate is not None:
            if method != "sketch":
                raise InputError("RangeStatistic: a control variate needs method='sketch' or 'full'.")
            t1, Q, M = (np.asarray(v, dtype=np.float64) for v in control_variate)
            t1 = t1.reshape(-1)
            if t1.shape != (self.d,) or Q.ndim != 2 or Q.shape[0] != self.d or M.shape != (Q.shape[1],) * 2:
                raise InputError(f"control_variate must be (t1 of shape ({self.d},), Q of shape ({self.d}, q), "
                                 f"M of shape (q, q)); got {t1.shape}, {Q.shape}, {M.shape}.")
            M = 0.5 * (M + M.T)
            # p^_2 Omega = Q M Q^T Omega, added back in finalize
            self.control_variate = (t1, Q, M, Q @ (M @ (Q.T @ omega)))
            left = np.hstack([left, Q, t1[:, None]])
        self._left_t = np.ascontiguousarray(left.T)
        if method == "full":
            # the probes on every 4th row: with them the two thin GEMMs over all rows cost 0.17 s, 0.7x one
            # X^T X at d = 100, N = 10^6 (one thread); [y, 1]^T X on all rows and the probes on a quarter
            # take 0.11 s. The covariance check's noise sqrt((d + 1) / n) doubles (0.02 at n = 10^6,
            # d = 100), well inside its tolerance (input_tolerance = 0.1)
            self.probe_stride = FULL_RANGE_PROBE_STRIDE
        super().__init__()

    def _reset(self) -> None:
        d = self.d
        self.sy = 0.0
        self.syy = 0.0
        self.sr = 0.0
        self.srr = 0.0
        self.syx = np.zeros(d)
        # "full": upper triangle of sum y x x^T (Fortran order: updated in place by BLAS)
        self.syxx = np.zeros((d, d), order="F") if self.method == "full" else np.zeros((d, self.omega.shape[1]))
        self._reset_check()

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        if X.shape[1] != self.d:
            raise InputError(f"a chunk has {X.shape[1]} columns; earlier chunks had {self.d}.")
        y = _target_column(Y)
        self.sy += float(y.sum())
        self.syy += float(y @ y)
        if self.method == "full":
            self._update_full(X, y)
            return
        rc = self.omega_cov.shape[1]
        r = self.omega.shape[1]
        # one GEMM in: M = [Omega, Omega_c]^T X^T; one GEMM out: M X with M's rows
        # [y * (X Omega)^T, (X Omega_c)^T, y, 1]
        M = np.empty((r + rc + 2, X.shape[0]))
        yc = y - self.center if self.center else y
        if self.control_variate is None:
            np.matmul(self._left_t, X.T, out=M[:r + rc])
        else:
            # the same GEMM also gives u = Q^T x and t1^T x: the residual r = y - c - p(x)
            _, _, Mq, _ = self.control_variate
            U = self._left_t @ X.T
            M[:r + rc] = U[:r + rc]
            u = U[r + rc:-1]
            yc = yc - U[-1] - 0.5 * (np.einsum("in,in->n", u, Mq @ u) - np.trace(Mq))
        self.sr += float(yc.sum())
        self.srr += float(yc @ yc)
        M[:r] *= yc
        M[r + rc] = y
        M[r + rc + 1] = 1.0
        R = M @ X
        self.syxx += R[:r].T
        self.sprobe += R[r:r + rc].T
        self.n_probe += X.shape[0]
        self.syx += R[r + rc]
        self.sx += R[r + rc + 1]
        self.sxx += np.einsum("ij,ij->j", X, X)

    def _update_full(self, X: np.ndarray, y: np.ndarray) -> None:
        """``method="full"``: ``sum y x x^T`` by :func:`_add_signed_gram`, ``sum y x`` and ``sum x`` by one
        product ``[y, 1]^T X``, the covariance probes on every ``probe_stride``-th row."""
        yc = y - self.center if self.center else y
        if self.linear_variate is not None:
            yc = yc - X @ self.linear_variate
        self.sr += float(yc.sum())
        self.srr += float(yc @ yc)
        Xs = X[::self.probe_stride]
        self.sprobe += ((self._left_t @ Xs.T) @ Xs).T
        self.n_probe += Xs.shape[0]
        M = np.empty((2, X.shape[0]))
        M[0] = y
        M[1] = 1.0
        R = M @ X
        self.syx += R[0]
        self.sx += R[1]
        self.sxx += np.einsum("ij,ij->j", X, X)
        _add_signed_gram(self.syxx, X, yc)

    def _merge(self, other: "RangeStatistic") -> None:
        self.sy += other.sy
        self.syy += other.syy
        self.sr += other.sr
        self.srr += other.srr
        self.syx += other.syx
        self.syxx += other.syxx
        self._merge_check(other)

    def finalize(self) -> dict:
        n = self.n
        out = {"n": n, "t0": self.sy / n, "t1": self.syx / n, "y2": self.syy / n}
        if self.method == "full":
            syxx = np.triu(self.syxx) + np.triu(self.syxx, 1).T
            mean_r = self.sr / n if self.linear_variate is not None else out["t0"] - self.center
            out["t2"] = syxx / n - mean_r * np.eye(self.d)
        else:
            # mean(r (x x^T - I)) Omega, plus p^_2 Omega with a control variate
            out["t2_omega"] = self.syxx / n - (self.sr / n) * self.omega
            if self.control_variate is not None:
                out["t2_omega"] = out["t2_omega"] + self.control_variate[3]
        return out

    def basis(self, m: int) -> tuple[np.ndarray, dict]:
        """Orthonormal ``(d, m)`` basis ``P`` of the dominant range of ``T_2`` and diagnostics, among them
        ``t2_projected``, the estimate of ``P^T T_2 P`` (the control variate of pass 2)."""
        fin = self.finalize()
        if self.method == "full":
            T2 = 0.5 * (fin["t2"] + fin["t2"].T)
            lam = linalg.eigvalsh(T2)
            P = _top_eigvecs(T2, m)
            mags = np.sort(np.abs(lam))[::-1]
            t2_projected = P.T @ T2 @ P
        elif self.rayleigh_ritz:
            B = self.omega.T @ fin["t2_omega"]
            B = 0.5 * (B + B.T)
            lam, V = linalg.eigh(B)
            idx = np.argsort(-np.abs(lam), kind="stable")[:m]
            P = _fix_column_signs(linalg.qr(self.omega @ V[:, np.sort(idx)], mode="economic")[0])
            mags = np.sort(np.abs(lam))[::-1]
            OP = self.omega.T @ P
            t2_projected = OP.T @ B @ OP
        else:
            Y = fin["t2_omega"]
            Q, _ = linalg.qr(Y, mode="economic")
            # B (Q^T Omega) = Q^T Y  for the symmetric B ~ Q^T T_2 Q (exact when rank T_2 <= r)
            C = Q.T @ self.omega
            B = linalg.solve(C.T, (Q.T @ Y).T).T
            B = 0.5 * (B + B.T)
            lam, V = linalg.eigh(B)
            idx = np.argsort(-np.abs(lam), kind="stable")[:m]
            P = Q @ V[:, np.sort(idx)]
            P = _fix_column_signs(linalg.qr(P, mode="economic")[0])
            mags = np.sort(np.abs(lam))[::-1]
            QP = Q.T @ P
            t2_projected = QP.T @ B @ QP
        # the sample T_2 is T_2 + E, E a mean of N independent matrices r (x x^T - I) with variance scale
        # s^2 = E[r^2]: an eigenvalue below s sqrt(d / N) leaves no trace in the top eigenvectors (the
        # detection threshold of a spiked Wigner-type matrix; ||E|| ~ 2 s sqrt(d / N)), whatever the method
        threshold = self._detection_threshold()
        return P, {"range_method": self.method, "t2_eigenvalue_magnitudes": mags[: m + 1].tolist(),
                   "t2_detection_threshold": threshold,
                   "t2_below_threshold": int(np.sum(mags[:m] < threshold)),
                   "t2_projected": 0.5 * (t2_projected + t2_projected.T)}

    def _detection_threshold(self) -> float:
        """``s sqrt(d / N)``, ``s^2`` the mean square of the sketched residual: the sample ``T_2`` is
        ``T_2 + E``, ``E`` a mean of ``N`` independent matrices ``r (x x^T - I)`` with entry variance about
        ``s^2 / N``, so ``||E|| ~ 2 s sqrt(d / N)`` (a Wigner-type matrix) and an eigenvalue below
        ``s sqrt(d / N)`` leaves no trace in the top eigenvectors (the spiked-matrix threshold)."""
        n = self.n
        return math.sqrt(max(self.srr, 0.0) / n * self.d / n) if n else float("inf")

    def power_basis(self, m: int, keep: int) -> tuple[np.ndarray, np.ndarray, dict]:
        """Basis after one more application of ``T_2`` to the Ritz vectors (``rayleigh_ritz=True`` only).

        The pass gave ``Y = T_2 Omega`` for the orthonormal ``Omega``; Rayleigh-Ritz on ``B = Omega^T Y``
        gives the Ritz pairs ``(lambda_i, v_i)``, and ``Y V_m`` is ``T_2`` applied once more to the top-``m``
        Ritz vectors ``Omega V_m``: one more step of the subspace iteration without another pass (the
        Rayleigh-Ritz basis :meth:`basis` stays in ``span(Omega)``, one step behind; measured at
        d = 1000, m = 20, N = 10^6, largest sine to the true span 0.34 against 0.12 after three
        iterations). ``P R = Y V_m`` (QR), and ``P^T T_2 P`` is estimated from the Ritz pairs,
        ``T_2 ~ (Y V_m) Lambda_m^{-1} (Y V_m)^T`` (Nystrom restricted to the top ``m`` Ritz values, which
        stay clear of zero, unlike the indefinite ``T_2``'s small ones): ``M = R Lambda_m^{-1} R^T``,
        exact when ``T_2`` has rank ``m`` and ``span(Omega)`` contains its range.

        Returns ``(P, M, info)``; ``info`` has ``ritz_values`` (by decreasing magnitude), ``next_omega``
        (orthonormal, ``T_2`` applied to the top-``keep`` Ritz vectors: the next iterate),
        ``noise_ratio`` ``rho = 2 s sqrt(d / N) / |lambda_m|`` (``||E|| / |lambda_m|``, the contraction of
        the subspace iteration for the weakest direction) and ``statistical_sine``
        ``s sqrt(d / N) / |lambda_m|`` (the sine error of the top-``m`` eigenspace of the sample ``T_2``
        itself, by Davis-Kahan with ``||E U||`` for the ``d x m`` true basis ``U``).
        """
        if not self.rayleigh_ritz:
            raise InputError("power_basis needs rayleigh_ritz=True (an orthonormal Omega).")
        Y = self.finalize()["t2_omega"]
        B = self.omega.T @ Y
        lam, V = linalg.eigh(0.5 * (B + B.T))
        order = np.argsort(-np.abs(lam), kind="stable")
        top = order[:m]
        P, R = linalg.qr(Y @ V[:, top], mode="economic")
        signs = np.where(P[np.argmax(np.abs(P), axis=0), np.arange(m)] < 0, -1.0, 1.0)
        P, R = P * signs, R * signs[:, None]
        lam_top = lam[top]
        M = (R / lam_top) @ R.T
        nxt = linalg.qr(Y @ V[:, order[:keep]], mode="economic")[0]
        threshold = self._detection_threshold()
        lam_m = float(np.abs(lam_top).min()) if m else float("inf")
        stat = threshold / lam_m if lam_m > 0 else float("inf")
        return P, 0.5 * (M + M.T), {"ritz_values": lam[order].tolist(), "next_omega": nxt,
                                    "t2_detection_threshold": threshold, "statistical_sine": stat,
                                    "noise_ratio": 2.0 * stat}


class ProjectedMomentStatistic(_InputCheck, Statistic):
    """Raw moments ``S_r = (1/N) sum r_n z_n^{(x) r}``, ``r <= K``, of ``z = P^T x``, per row group.

    ``r_n = y_n`` (the paper's estimator, eq. (6)) or, with a ``control_variate`` ``(t0, t1, B)``, the
    residual ``r_n = y_n - p(x_n)`` of the degree-2 polynomial

        p(x) = t0 + t1^T x + (z^T B z - tr B) / 2,    z = P^T x,

    whose Hermite coefficients are known exactly: ``p^_0 = t0``, ``p^_1 = t1``, ``p^_2 = B`` (in the
    projected coordinates) and ``p^_k = 0`` for ``k >= 3`` (Hermite orthogonality). Then for ``k >= 3``
    ``T_k = mean(r He_k(z))`` is unbiased for every fixed ``p`` and, with ``p`` the pass-1 estimate of
    the order <= 2 part of ``f``, far less noisy: a ReLU network keeps most of ``E[y^2]`` in its orders
    0-2 (a control variate in the Monte Carlo sense; measured 13x smaller spectral error of ``T_3`` and
    ``T_4`` on a d = 10, m = 5 teacher with two large biases). Since ``p`` and ``P`` come from the same
    rows, the estimate has an in-sample bias of order ``1/N`` (measured at most ~0.5 standard deviations
    for ``T_4`` at d = 30, N = 10^4). ``T_0``, ``T_1``, ``T_2`` stay the plain estimates (pass 1's): a
    residual of an in-sample fit of these orders has no smaller variance, only that bias. With
    ``direct_t2`` (``B`` only an approximation of ``P^T T_2 P``, after the subspace iterations) ``T_2`` is
    ``mean(r He_2(z)) + B``.

    Rows go to ``N_GROUPS`` groups in blocks of ``SPLIT_BLOCK`` consecutive rows (block ``j`` to group
    ``j mod N_GROUPS``; even groups form half A, odd ones half B), counted from the first row this
    statistic sees, so the split does not depend on the chunking (dask blocks are made multiples of
    ``N_GROUPS * SPLIT_BLOCK`` rows by :func:`estimate_coefficients`, so every block starts a group
    cycle); the estimate is their sum. Cost per sample: ``O(d n)`` for the projection and
    ``O(C(n + K, K))`` for the distinct moments of order ``<= K`` (``K = 4``: 1001 for ``n = 10``).

    Per chunk (the order matters for the cache): one GEMM ``[P, t1]^T X^T`` gives ``z`` and ``t1^T x``
    with samples along the columns; the residual ``r`` follows from ``z`` (``z^T B z`` by an ``n x n``
    product); then the moment sums of each group are updated block by block
    (:meth:`~.symtensor.Monomials.add_moment_sums`).
    With a control variate ``sum y x`` is not formed again (pass 1 has it: ``t1``), unless
    ``range_check``.

    ``range_check=True`` (the randomized range finder of :func:`estimate_coefficients`, whose range and
    ``p`` come from a leading subset of the rows) also accumulates ``sum y x`` over every row (``T_0``,
    ``T_1`` of all rows: :meth:`low_orders` returns them; one matrix-vector product per chunk) and, over
    the rows of group :data:`RANGE_CHECK_GROUP` (an eighth of them, spread over the data),
    ``S = sum r x z^T`` (``d x n``), from which :meth:`range_residual` gives ``T_2 P``: how far ``P`` is
    from an invariant subspace of ``T_2`` estimated on those rows.
    """

    def __init__(self, d: int, basis: np.ndarray | None, top_order: int, omega_cov: np.ndarray,
                 check_inputs: bool = True, control_variate: tuple | None = None, direct_t2: bool = False,
                 range_check: bool = False):
        self.d = int(d)
        self.direct_t2 = bool(direct_t2)
        self.range_check = bool(range_check)
        if self.range_check and (basis is None or control_variate is None):
            raise InputError("ProjectedMomentStatistic: range_check needs a basis and a control variate.")
        self.P = basis
        self.K = int(top_order)
        self.n_dim = self.d if basis is None else basis.shape[1]
        self.mono = Monomials(self.n_dim, (self.K + 1) // 2)
        self.omega_cov = omega_cov
        self.check_inputs = check_inputs
        self.control_variate = None
        if control_variate is not None:
            t0, t1, B = control_variate
            t1 = np.asarray(t1, dtype=np.float64).reshape(-1)
            B = np.asarray(B, dtype=np.float64)
            if t1.shape != (self.d,) or B.shape != (self.n_dim, self.n_dim):
                raise InputError(f"control_variate must be (t0, t1 of shape ({self.d},), B of shape "
                                 f"({self.n_dim}, {self.n_dim})); got t1 {t1.shape}, B {B.shape}.")
            self.control_variate = (float(t0), t1, 0.5 * (B + B.T))
        # rows of the projection GEMM: P^T (if any) and t1^T (with a control variate)
        rows = [] if basis is None else [np.asarray(basis, dtype=np.float64).T]
        if self.control_variate is not None:
            rows.append(self.control_variate[1][None, :])
        self._left_t = np.ascontiguousarray(np.vstack(rows)) if rows else None
        super().__init__()

    def _reset(self) -> None:
        self.group_sums = [self.mono.new_moment_sums() for _ in range(N_GROUPS)]
        self.group_counts = [0] * N_GROUPS
        self.syy = 0.0
        self.sy = 0.0
        self.syx = np.zeros(self.d)
        self.srr = 0.0
        self.sr = 0.0
        self.s_range = np.zeros((self.d, self.n_dim)) if self.range_check else None
        self.n_check = 0
        self.sr_check = 0.0
        self.srr_check = 0.0
        self._workspace = {}  # reused block buffers (a partial's own: empty_like starts from a shallow copy)
        self._reset_check()

    def _update(self, X: np.ndarray, Y: np.ndarray) -> None:
        if X.shape[1] != self.d:
            raise InputError(f"a chunk has {X.shape[1]} columns; earlier chunks had {self.d}.")
        y = _target_column(Y)
        n = X.shape[0]
        ZE = None if self._left_t is None else self._left_t @ X.T  # (n_dim [+ 1] [+ rc], N)
        Zt = np.ascontiguousarray(X.T) if self.P is None else ZE[:self.n_dim]
        if self.control_variate is None:
            r = y
        else:
            t0, _, B = self.control_variate
            # r = y - p(x) in buffers of this statistic: fresh temporaries of every chunk cost their page
            # faults (d = 100, n = 10, 1e6 rows: GEMM and residual 0.30 s fresh, 0.20 s in buffers, the GEMM
            # alone 0.17 s; benchmarks/README.md, "reused block buffers")
            ws = self._workspace
            if ws.get("chunk_rows", -1) < n:
                ws.update(chunk_rows=n, bz=np.empty((self.n_dim, n)), r=np.empty(n), quad=np.empty(n))
            BZ, r, quad = ws["bz"][:, :n], ws["r"][:n], ws["quad"][:n]
            np.matmul(B, Zt, out=BZ)
            np.multiply(BZ, Zt, out=BZ)
            np.sum(BZ, axis=0, out=quad)  # z^T B z
            np.subtract(y, ZE[self.n_dim], out=r)
            r -= t0 - 0.5 * np.trace(B)
            quad *= 0.5
            r -= quad
        self.syy += float(y @ y)
        self.sy += float(y.sum())
        if self.range_check:  # T_0, T_1 of all rows (p's came from the pilot)
            self.syx += y @ X
            self.srr += float(r @ r)
        elif self.control_variate is None:
            self.syx += y @ X
        else:  # sum y x is pass 1's (t1), not needed here
            self.srr += float(r @ r)
        if self.check_inputs:
            self._update_check(X)
        # groups (hence halves) by blocks of SPLIT_BLOCK consecutive rows, counted from the first row
        # this statistic saw (self.n): contiguous column ranges of Zt (<= SPLIT_BLOCK columns: the
        # monomial features of one range stay in cache) and independent of the chunking
        g0, start = self.n, 0
        while start < n:
            block = (g0 + start) // SPLIT_BLOCK
            stop = min(n, (block + 1) * SPLIT_BLOCK - g0)
            g = block % N_GROUPS
            self.mono.add_moment_sums(self.group_sums[g], Zt[:, start:stop], r[start:stop],
                                      workspace=self._workspace)
            self.group_counts[g] += stop - start
            if self.range_check and g == RANGE_CHECK_GROUP:
                rb = r[start:stop]
                # (n, rows) @ (rows, d): X's rows as stored (faster than X^T @ (z r)^T, measured)
                self.s_range += ((Zt[:, start:stop] * rb) @ X[start:stop]).T
                self.n_check += stop - start
                self.sr_check += float(rb.sum())
                self.srr_check += float(rb @ rb)
            start = stop

    @property
    def counts(self) -> list[int]:
        """Rows of half A (even groups) and half B (odd groups)."""
        return [sum(self.group_counts[0::2]), sum(self.group_counts[1::2])]

    @property
    def sums(self) -> list[np.ndarray]:
        """Moment sums of half A and half B."""
        return [sum(self.group_sums[0::2]), sum(self.group_sums[1::2])]

    def _merge(self, other: "ProjectedMomentStatistic") -> None:
        for g in range(N_GROUPS):
            self.group_sums[g] += other.group_sums[g]
            self.group_counts[g] += other.group_counts[g]
        self.syy += other.syy
        self.sy += other.sy
        self.syx += other.syx
        self.srr += other.srr
        self.sr += other.sr
        if self.range_check:
            self.s_range += other.s_range
            self.n_check += other.n_check
            self.sr_check += other.sr_check
            self.srr_check += other.srr_check
        if self.check_inputs:
            self._merge_check(other)

    def _hermite(self, sums: np.ndarray, n: int, *, full: bool = False) -> dict:
        raw = {r: self.mono.raw_moment(sums, r) / n for r in range(self.K + 1)}
        out = {k: hermite_from_raw(raw, k) for k in range(2, self.K + 1)}
        if self.control_variate is not None:
            # p^_2 = B; p^_k = 0 for k >= 3. The full T_2 is B itself when B is pass 1's plain estimate
            # P^T T_2 P: p was fitted on these rows, so mean(r He_2) + B has no smaller variance, only an
            # in-sample bias. With direct_t2 (B an approximation: the Nystrom estimate of
            # RangeStatistic.power_basis) it is mean(r He_2) + B, unbiased for every fixed B
            B = self.control_variate[2]
            out[2] = B.copy() if full and not self.direct_t2 else out[2] + B
        return out

    def low_orders(self) -> tuple[float, np.ndarray, float, float]:
        """``(T_0, T_1, E[y^2], E[r^2])``. ``T_0``, ``T_1`` are the plain means (with a control variate:
        pass 1's, which ``p`` carries): the residual of an in-sample fit of these orders gains no variance
        and has an in-sample bias."""
        n = self.n
        if self.control_variate is None:
            y2 = self.syy / n
            return self.sy / n, self.syx / n, y2, y2
        if self.range_check:  # p came from a leading subset of the rows: the plain means of all rows
            return self.sy / n, self.syx / n, self.syy / n, self.srr / n
        t0, t1, _ = self.control_variate
        return t0, t1.copy(), self.syy / n, self.srr / n

    def range_residual(self, center: float) -> dict:
        """``range_check=True``: how far ``span(P)`` is from an invariant subspace of ``T_2`` estimated on the
        check rows (``Y = T_2 P`` there).

        ``T_2 P = mean(r (x x^T - I)) P + P B`` (``p^_2 = P B P^T`` added back, as in :meth:`_hermite`), with
        ``mean(r x x^T) P = S / n_check``. With ``G = P^T Y`` and ``R = Y - P G``, the residual sine
        ``||R|| / |lambda_min(G)|`` bounds, by the Davis-Kahan residual theorem (up to the gap to the
        rest of the spectrum), the largest principal-angle sine between ``span(P)`` and the top-``n``
        eigenspace of that ``T_2``. Returned with it: ``statistical_sine`` ``s_c sqrt(d / N) / |lambda_min|``,
        ``s_c^2 = mean((y - c)^2)`` over all rows (the sampling error of the exact route's basis, the full
        ``T_2`` of eq. (6) on all ``N`` rows), and ``check_statistical_sine`` ``s_r sqrt(d / n_check) /
        |lambda_min|`` (the sampling error of the check itself, ``s_r^2`` the residual's mean square).
        """
        n = self.n
        nc = max(self.n_check, 1)
        B = self.control_variate[2]
        Y = self.s_range / nc - (self.sr_check / nc) * self.P + self.P @ B
        G = self.P.T @ Y
        G = 0.5 * (G + G.T)
        lam = linalg.eigvalsh(G)
        lam_min = float(np.abs(lam).min()) if lam.size else float("inf")
        R = Y - self.P @ G
        res = float(linalg.norm(R, 2)) if R.size else 0.0
        s2 = self.syy / n - 2.0 * center * self.sy / n + center ** 2
        ok = lam_min > 0
        stat = math.sqrt(max(s2, 0.0) * self.d / n) / lam_min if ok else float("inf")
        chk = math.sqrt(max(self.srr_check / nc, 0.0) * self.d / nc) / lam_min if ok else float("inf")
        return {"residual_sine": res / lam_min if ok else float("inf"), "statistical_sine": stat,
                "check_statistical_sine": chk, "check_rows": int(self.n_check)}

    def finalize(self) -> tuple[dict, tuple[dict, dict]]:
        nA, nB = self.counts
        if min(nA, nB) == 0:
            raise InputError("too few samples: both halves of the data need at least one row.")
        sA, sB = self.sums
        full = self._hermite(sA + sB, nA + nB, full=True)
        halves = (self._hermite(sA, nA), self._hermite(sB, nB))
        return full, halves

    def group_tensors(self) -> tuple:
        """``(T_k of group g for k >= 3, rows of g)`` for every group (see :data:`N_GROUPS`)."""
        out = []
        for sums, n_g in zip(self.group_sums, self.group_counts):
            if n_g == 0:
                out.append(({}, 0))
                continue
            t = self._hermite(sums, n_g)
            out.append(({k: v for k, v in t.items() if k >= 3}, int(n_g)))
        return tuple(out)


def min_samples(order: int, n_dim: int) -> int:
    """Smallest sample size accepted: ten samples per column of the widest flattening of ``T_{2l+2}`` that
    the algorithm uses in the ``n``-dimensional working space (``n^(l+2)`` columns), and at least 1000.

    Why this and not a count of tensor entries: the algorithm uses ``T_{2l+1}`` and ``T_{2l+2}`` only
    through the flattenings ``flatten(T_K, l, K - l)`` (``n^l x n^(K - l)``: their singular values set
    the ranks ``k'``, ``k''`` of Algorithm 4, and their range and contractions the decomposition), so
    what matters is those matrices' *spectral* sampling error. Each estimate is a mean of ``N``
    independent ``D_1 x D_2`` matrices ``y He(z) He(z)^T``; by the rectangular matrix Bernstein
    inequality (Tropp 2012, Theorem 1.6) its spectral error is ``O(sigma sqrt(max(D_1, D_2) log(D_1 +
    D_2) / N))``, ``sigma^2`` the per-sample variance scale. The widest is ``T_{2l+2}``'s, with
    ``D_2 = n^(l+2)``, so ``N = 10 n^(l+2)`` is the least for which that error falls below about a third
    of ``sigma`` (up to the log factor); the square flattening (``n^(l+1)`` rows) would allow ``n`` times
    fewer samples but is not the matrix the ranks are read from. Whether the error is also small against
    the signal (the units' singular values) depends on the network and is measured after the pass: the
    spread of the row groups gives the spectral noise of each flattening (``diagnostics_["noise"]``),
    which the scalar filter, the unit count and the certificates compare with the signal. Ten samples
    per distinct entry of ``T_{2l+2}`` (``10 C(n + 3, 4)`` for order 1: 2.9e6 at n = 50) would bound the
    entrywise error, a requirement the algorithm, which never reads single entries, does not have."""
    return max(1000, 10 * n_dim ** (order + 2))


def _noise_from_halves(halves: tuple[dict, dict], counts: tuple[int, int], order: int) -> dict:
    nA, nB = counts
    scale = math.sqrt(nA * nB) / (nA + nB)
    noise = {}
    for k in halves[0]:
        t1, t2 = _flat_shape(k, order)
        D = flatten(halves[0][k] - halves[1][k], t1, t2)
        noise[k] = float(scale * linalg.svdvals(D)[0])
    return noise


def estimate_coefficients(data: Any, order: int, n_components: int, *, range_method: str = "auto",
                          oversample: int = 5, chunk_size: int | None = None, rng=None,
                          check_inputs: bool = True, input_tolerance: float = 0.1,
                          min_n: int | None = None, control_variate: bool = True,
                          power_iterations: int = 3) -> HermiteCoefficients:
    """Estimate ``T_k = (1/N) sum y_n He_k(x_n)`` (eq. (6)) in the learner's working coordinates.

    Parameters
    ----------
    data : tuple (X, Y) of arrays (numpy, memmap, dask) or a re-iterable of (X, Y) chunks
    order : int
        ``l``; ``l = 1`` projects onto the range of ``T_2`` (two passes), ``l >= 2`` works in ``R^d``
        (one pass).
    n_components : int
        ``m``.
    range_method : {"auto", "full", "randomized", "sketch"}
        How pass 1 finds the range of ``T_2`` for ``l = 1``. ``"randomized"``: the randomized range finder
        on a pilot of the rows, checked in the moment pass (:func:`_estimate_randomized` describes it;
        ``oversample`` does not apply, it uses ``m + 10`` columns); when the pilot cannot see the range,
        the full matrix of all rows (``info["pilot_failed"]``). ``"full"``: the full ``d x d`` matrix (cost
        ``N d^2 / 2``). ``"sketch"``: a randomized sketch with ``r = m + oversample`` columns followed by
        ``power_iterations`` subspace iterations (Halko, Martinsson, Tropp 2011, Algorithm 4.4,
        re-orthonormalised every pass; one more pass over the data each; cost ``2 N d r`` per pass). The plain sketch's error is governed by the
        Frobenius norm of the sampling noise of ``T_2`` outside its top-``m`` part (``~sqrt(d)`` times
        its spectral norm), the full matrix's by the spectral norm: at d = 100, m = 10, N = 10^6 the
        plain sketch missed 2-3 of the 10 directions for every oversampling tried (2 to 20), the full
        matrix none (benchmarks/README.md); each power iteration (one application of the symmetric
        ``T_2``) multiplies the noise part by another factor ``~||E|| / |lambda_m|``, which is not
        small for weak units (measured at d = 100,
        m = 10, largest principal-angle sine to the true span after 0 / 1 / 2 / 3 iterations: 0.98 /
        0.59 / 0.25 / 0.21 at N = 10^6, full matrix 0.20; 0.99 / 0.81 / 0.57 / 0.46 at N = 2 10^5,
        full 0.42). With ``control_variate`` the iterations sketch a residual of smaller variance (see
        :class:`RangeStatistic`), which lowers that noise itself: measured at d = 100, m = 10, biases in
        [-1.5, 1.5], N = 2 10^5, largest sine after 1 / 2 / 3 iterations 0.68 / 0.38 / 0.34 without,
        0.68 / 0.18 / 0.09 with it (full matrix 0.31; ``"randomized"`` on a pilot of 65536 rows 0.13).
        Each iteration ends with a Rayleigh-Ritz step on its test matrix and one more application of
        ``T_2`` to the Ritz vectors from the same pass (:meth:`RangeStatistic.power_basis`); the first
        sketch and the first iteration use ``max(m + oversample, 4 m)`` columns, and the iterations stop
        once the error another pass could remove is below the statistical one
        (:func:`_subspace_iterations` states the rule). ``"auto"``: ``"full"`` when
        ``d <= 2 (m + 10)``, else ``"randomized"``.
    oversample : int, default 5
        Extra columns of the sketch.
    power_iterations : int, default 3
        Largest number of subspace iterations after the sketch (``range_method="sketch"``; 0 is the
        one-pass sketch; ``"randomized"`` runs at least one per pilot size); fewer run when the range has converged to its statistical accuracy
        (``info["range_iterations"]``, ``info["range_stop"]``).
    chunk_size : int, optional
        Rows per chunk when reading arrays (default: about 4 MiB of ``X``, see :func:`_chunk_rows`).
    rng : seed for the random test matrices.
    check_inputs : bool
        Warn (:class:`~nnrecover.errors.AssumptionWarning`) when the inputs look far from N(0, I).
    input_tolerance : float
        Deviation tolerated on top of the sampling fluctuation before warning.
    min_n : int, optional
        Minimum number of samples (default :func:`min_samples`).
    control_variate : bool, default True
        For ``l = 1``: estimate pass 2's moments from the residual ``y - p(x)`` of pass 1's estimate
        ``p`` of the order <= 2 part of ``f`` and add ``p``'s exact Hermite coefficients back (see
        :class:`ProjectedMomentStatistic`): the same expectation as eq. (6), a much smaller variance.
        False: the paper's plain estimator ``mean(y He_k(x))``. ``l = 2`` (one pass, no earlier
        estimate of ``p``) always uses the plain estimator. With ``range_method="sketch"`` the subspace
        iterations of pass 1 sketch ``T_2`` from the residual of the previous iteration's estimate of
        the same ``p`` in the same way (:class:`RangeStatistic`).
    """

    gen = check_random_state(rng)
    if isinstance(oversample, bool) or not isinstance(oversample, (int, np.integer)) or oversample < 0:
        raise InputError(f"oversample must be an integer >= 0, got {oversample!r}.")
    if not isinstance(control_variate, (bool, np.bool_)):
        raise InputError(f"control_variate must be True or False, got {control_variate!r}.")
    info: dict = {"mode": "samples"}
    t_start = time.perf_counter()
    data, d = _open_source(data, order)
    if getattr(data, "n_outputs", None) not in (None, 1):
        raise InputError(f"the Hermite learner handles one output; the data have {data.n_outputs} target columns.")
    n_cov = min(d, 4)
    omega_cov = gen.standard_normal((d, n_cov))
    if order == 1:
        r = min(d, n_components + oversample)
        if isinstance(power_iterations, bool) or not isinstance(power_iterations, (int, np.integer)) \
                or power_iterations < 0:
            raise InputError(f"power_iterations must be an integer >= 0, got {power_iterations!r}.")
        method = range_method
        if method == "auto":
            method = "full" if d <= RANDOMIZED_MIN_RATIO * (n_components + RANDOMIZED_OVERSAMPLE) else "randomized"
        if method not in ("full", "sketch", "randomized"):
            raise InputError(f"range_method must be 'auto', 'full', 'sketch' or 'randomized', got {range_method!r}.")
        m = min(n_components, d)
        q = int(power_iterations)
        if method == "randomized":
            est = _estimate_randomized(data, d, m, gen, omega_cov, q, min_n, chunk_size, check_inputs,
                                       input_tolerance, info, t_start)
            if isinstance(est, HermiteCoefficients):
                return est
            # the pilot could not see the range (info["pilot_failed"]): the full T_2 of all rows, one pass,
            # weighted by the residual of the pilot's linear part (est: its T_1)
            method = "full"
            range_cv = (est,)
        else:
            range_cv = None
        # the first sketch (and the first iteration, which starts from its range) with 4 m columns: its
        # noise columns E omega have norm ~ s sqrt(d) ||E|| / 2 (the Frobenius norm of the noise, not the
        # spectral one), so the weakest units reach its range only with many columns; measured at d = 1000,
        # m = 20, N = 10^6: largest sine of the range 0.99 with m + 5 columns, 0.92 with 4 m, and after
        # the first iteration 1.0 against 0.41 (later iterations start near the span, m + 5 suffice)
        r1 = min(d, max(r, 4 * m)) if q else r
        omega = gen.standard_normal((d, r1)) if method == "sketch" else None
        if data.n_samples is not None:  # known size: refuse before reading anything
            _check_n(int(data.n_samples), order, m, min_n)
        center = _pilot_mean(data)
        info["t2_center"] = center
        first = data
        if method == "sketch" and q and data.n_samples is not None:
            # the sketch only seeds the iterations (their last pass, on all rows, sets the statistical
            # error), so it reads the first half of the rows (exchangeable i.i.d. rows, eq. (6))
            first = Head(data, max(int(data.n_samples) // 2, min(int(data.n_samples), SPLIT_BLOCK)),
                            _chunk_rows(chunk_size, d))
        stat1 = accumulate(RangeStatistic(d, method=method, omega=omega, omega_cov=omega_cov, center=center,
                                          control_variate=range_cv), first,
                           chunk_size=_chunk_rows(chunk_size, d))
        if first is data:
            _check_n(stat1.n, order, m, min_n)
        if method == "sketch":
            info["sketch_rows"] = int(stat1.n)
        if check_inputs:
            _warn_inputs(stat1.input_deviation(), input_tolerance)
        input_deviation = stat1.input_deviation()
        t2_projected = None
        if method == "sketch" and q:
            stat1, P, t2_projected, info["range_iterations"], info["range_stop"] = _subspace_iterations(
                stat1, data, m, r, q, center, omega_cov, control_variate, _chunk_rows(chunk_size, d))
            _check_n(stat1.n, order, m, min_n)
            info["power_iterations"] = len(info["range_iterations"])
            last = info["range_iterations"][-1]
            info.update({"range_method": "sketch", "t2_eigenvalue_magnitudes": last["ritz_magnitudes"],
                         "t2_detection_threshold": last["t2_detection_threshold"],
                         "t2_below_threshold": int(np.sum(np.asarray(last["ritz_magnitudes"][:m])
                                                          < last["t2_detection_threshold"]))})
        else:
            if method == "sketch":
                info["power_iterations"] = 0
            P, rinfo = stat1.basis(m)
            t2_projected = rinfo.pop("t2_projected")
            info.update(rinfo)
        info["time_pass1"] = time.perf_counter() - t_start
        fin1 = stat1.finalize()
        n = fin1["n"]
        info["input_deviation"] = input_deviation
        cv = (fin1["t0"], fin1["t1"], t2_projected) if control_variate else None
        info["control_variate"] = bool(control_variate)
        t_mid = time.perf_counter()
        stat2 = accumulate(ProjectedMomentStatistic(d, P, 2 * order + 2, omega_cov, check_inputs=False,
                                                    control_variate=cv,
                                                    direct_t2=method == "sketch" and q > 0),
                           data, chunk_size=_moment_chunk_rows(chunk_size, d, data))
        if stat2.n != n:
            raise InputError(f"the data source gave {n} samples in pass 1 but {stat2.n} in pass 2; "
                             "order 1 needs a re-iterable source (arrays, dask arrays, SampleStream).")
        t0, t1, y2, r2 = stat2.low_orders()
        info["time_pass2"] = time.perf_counter() - t_mid
    else:
        P = None
        stat2 = accumulate(ProjectedMomentStatistic(d, None, 2 * order + 2, omega_cov, check_inputs=True),
                           data, chunk_size=_moment_chunk_rows(chunk_size, d, data))
        _check_n(stat2.n, order, d, min_n)
        if check_inputs:
            _warn_inputs(stat2.input_deviation(), input_tolerance)
        info["input_deviation"] = stat2.input_deviation()
        n = stat2.n
        t0, t1, y2, r2 = stat2.low_orders()
        info["control_variate"] = False
        info["time_pass1"] = time.perf_counter() - t_start
    full, halves = stat2.finalize()
    groups = stat2.group_tensors()
    noise = _noise_from_halves(halves, tuple(stat2.counts), order)
    info["time_moments"] = time.perf_counter() - t_start
    return HermiteCoefficients(basis=P, tensors=full, t0=float(t0), t1=np.asarray(t1), exact=False,
                               n_samples=int(n), y_second_moment=float(y2), residual_second_moment=float(r2),
                               noise=noise, halves=halves, groups=groups,
                               info=info)


RANDOMIZED_OVERSAMPLE = 10
"""Columns of the randomized range finder beyond ``m`` (``range_method="randomized"``)."""

RANDOMIZED_MIN_RATIO = 2
"""``range_method="auto"`` takes the full ``d x d`` ``T_2`` when ``d <= 2 (m + 10)``: there the moments of
pass 2 dominate either way, and the full matrix needs no range check."""

PILOT_FRACTION = 16
"""The randomized range finder's passes read the first ``N / 16`` rows (at least :data:`PILOT_MIN_ROWS`)."""

PILOT_MIN_ROWS = 1 << 16
"""Fewest rows of the randomized range finder's pilot (all rows when there are fewer)."""


def _pilot_rows(n: int) -> int:
    return int(min(n, max(n // PILOT_FRACTION, PILOT_MIN_ROWS)))


def _estimate_randomized(data, d: int, m: int, gen, omega_cov: np.ndarray, max_iter: int, min_n, chunk_size,
                         check_inputs: bool, input_tolerance: float, info: dict, t_start: float
                         ) -> "HermiteCoefficients | np.ndarray":
    """``range_method="randomized"`` for order 1: a randomized range finder with subspace iterations on a
    leading subset of the rows (the pilot), then the moment pass on every row, which also checks the range.

    1. Pilot (the first ``n_p = max(N / 16, 65536)`` rows, or all when fewer; rows are exchangeable, eq. (6)):
       a Gaussian sketch ``T_2 Omega`` with ``max(m + 10, 4 m)`` columns and up to ``max_iter`` subspace
       iterations with the control variate (:func:`_subspace_iterations`, ``m + 10`` columns after the
       first), each a pass of ``X^T (r * (X Omega))`` over the pilot: ``O(n_p d (m + 10))`` flops, against
       ``N d^2 / 2`` for the full ``T_2`` (two symmetric rank-k updates).
    2. Pilot size. The exact route's basis (top-``m`` eigenvectors of the full ``T_2`` on all ``N`` rows,
       weights ``y - c``) has statistical sine ``e_full = s_c sqrt(d / N) / |lambda_m|`` (Davis-Kahan,
       ``s_c^2 = mean((y - c)^2)``); the pilot's, with the control variate's residual ``r``,
       ``e_p = s_r sqrt(d / n_p) / |lambda_m|``. When ``e_p > e_full`` the pilot grows to
       ``n_p (e_p / e_full)^2`` rows (all of them at most) and the iterations continue from the current
       basis: the range is then no less accurate than the exact route's. With a ReLU teacher
       ``s_r << s_c`` (most of ``Var(y)`` is in the orders 1 and 2), so ``N / 16`` rows usually suffice.
       When the pilot cannot see the range at all (its last noise ratio ``||E|| / |lambda_m| >= 1``, e.g.
       d = 1000, m = 20 from 65536 rows), the pilot's ``T_1`` is returned instead of coefficients
       (``info["pilot_failed"]``) and the caller forms the full ``T_2`` of all rows, weighted by the residual
       ``y - c - T_1 . x`` (the control variate of order 1): one pass, where iterations on all rows at that
       noise level take 2-3.
    3. The moment pass (:class:`ProjectedMomentStatistic` with ``range_check``) reads every row: the
       projected moments, ``T_0``, ``T_1`` and, on an eighth of the rows (row group 0, spread over the
       data), ``T_2 P``. Its residual sine (:meth:`ProjectedMomentStatistic.range_residual`) must be at most
       ``e_full + e_check`` (the exact route's statistical sine on all rows plus the check's own);
       otherwise subspace iterations on all rows continue from the pilot's basis (the ``"sketch"`` route)
       and the moment pass is repeated (once; ``info["range_check"]``).
    The input check (mean, variances, covariance probes) is the pilot's: its fluctuation allowance
    scales with the pilot's rows.
    """
    N = None if data.n_samples is None else int(data.n_samples)
    if N is not None:
        _check_n(N, 1, m, min_n)
    rows = _chunk_rows(chunk_size, d)
    center = _pilot_mean(data)
    info["t2_center"] = center
    keep = min(d, m + RANDOMIZED_OVERSAMPLE)
    r1 = min(d, max(keep, 4 * m))
    n_p = N if N is None else _pilot_rows(N)
    pilot = data if N is None or n_p >= N else Head(data, n_p, rows)
    omega = gen.standard_normal((d, r1))
    stat1 = accumulate(RangeStatistic(d, method="sketch", omega=omega, omega_cov=omega_cov, center=center),
                       pilot, chunk_size=rows)
    if N is None:
        N = int(stat1.n)
        n_p = N
        _check_n(N, 1, m, min_n)
    sc2 = stat1.srr / stat1.n  # mean((y - c)^2): the noise scale of the exact route's T_2
    pilots = [int(stat1.n)]
    stat, P, M, records, stop = _subspace_iterations(stat1, pilot, m, keep, max(max_iter, 1), center, omega_cov,
                                                     True, rows)
    if n_p < N and not records[-1]["noise_ratio"] < 1.0:
        # the pilot cannot see the range (its sampling noise ||E|| above the weakest eigenvalue; e.g. d = 1000,
        # m = 20 from 65536 rows: noise ratio 3.6, 10 and 15 after its three iterations, whose control
        # variates, fitted to a basis of noise, made the residual larger). The range is then near the noise
        # level of all N rows too, where subspace iterations on all rows need 2-3 passes: the caller forms
        # the full T_2 in one (measured at d = 1000, m = 20, N = 1e6 streamed, one BLAS thread: iterations
        # 3 passes, 60 s, the full T_2 one pass, 40 s; benchmarks/README.md, "randomized range of T_2").
        # The input check is the full pass's, on every row.
        info["pilot_failed"] = {"rows": n_p, "noise_ratio": records[-1]["noise_ratio"],
                                "iterations": len(records), "time": time.perf_counter() - t_start}
        return stat1.finalize()["t1"]
    # the input check on the pilot's sketch pass (its mean, variances and covariance probes; the fluctuation
    # allowed for scales with the pilot's rows)
    if check_inputs:
        _warn_inputs(stat1.input_deviation(), input_tolerance)
    info["input_deviation"] = stat1.input_deviation()
    info["input_check_rows"] = int(stat1.n)
    while True:
        last = records[-1]
        lam_m = float(min(last["ritz_magnitudes"][:m])) if m else float("inf")
        e_p = last["statistical_sine"]
        e_full = math.sqrt(sc2 * d / N) / lam_m if lam_m > 0 else float("inf")
        if n_p >= N or not e_p > e_full:
            break
        n_p = int(min(N, math.ceil(1.1 * n_p * (e_p / e_full) ** 2)))
        pilot = data if n_p >= N else Head(data, n_p, rows)
        pilots.append(n_p)
        cv = (stat.finalize()["t1"], P, M)
        stat, P, M, more, stop = _subspace_iterations(None, pilot, m, keep, max(max_iter, 1), center, omega_cov,
                                                      True, rows, start=(stat._next_omega, cv))
        records.extend(more)
    info.update({"range_method": "randomized", "pilot_rows": pilots, "range_iterations": records,
                 "range_stop": stop, "power_iterations": len(records), "sketch_rows": int(stat1.n),
                 "pilot_statistical_sine": e_p, "exact_route_statistical_sine": e_full,
                 "t2_eigenvalue_magnitudes": last["ritz_magnitudes"],
                 "t2_detection_threshold": last["t2_detection_threshold"],
                 "t2_below_threshold": int(np.sum(np.asarray(last["ritz_magnitudes"][:m]) < last["t2_detection_threshold"]))})
    info["time_pass1"] = time.perf_counter() - t_start
    t0_cv, t1_cv = stat.finalize()["t0"], stat.finalize()["t1"]
    checks = []
    for attempt in range(2):
        t_mid = time.perf_counter()
        stat2 = accumulate(ProjectedMomentStatistic(d, P, 4, omega_cov, check_inputs=False,
                                                    control_variate=(t0_cv, t1_cv, M), direct_t2=True,
                                                    range_check=True),
                           data, chunk_size=_moment_chunk_rows(chunk_size, d, data))
        if stat2.n != N:
            raise InputError(f"the data source gave {N} samples in the first pass but {stat2.n} in the moment "
                             "pass; order 1 needs a re-iterable source (arrays, dask arrays, SampleStream).")
        chk = stat2.range_residual(center)
        chk["time"] = time.perf_counter() - t_mid
        checks.append(chk)
        info["time_pass2"] = chk["time"]
        chk["accepted"] = bool(chk["residual_sine"] <= chk["statistical_sine"] + chk["check_statistical_sine"])
        if chk["accepted"] or attempt == 1:
            break
        # the pilot's basis is off: subspace iterations on all rows from it (the "sketch" route's), and the
        # moment pass again
        stat, P, M, more, stop = _subspace_iterations(None, data, m, keep, max(max_iter, 1), center, omega_cov,
                                                      True, rows, start=(stat._next_omega, (t1_cv, P, M)))
        records.extend(more)
        info["range_stop"] = stop
        pilots.append(N)
        t0_cv, t1_cv = stat.finalize()["t0"], stat.finalize()["t1"]
    info["range_check"] = {"passes": checks, "accepted": checks[-1]["accepted"], "moment_passes": len(checks)}
    info["control_variate"] = True
    t0, t1, y2, r2 = stat2.low_orders()
    full, halves = stat2.finalize()
    groups = stat2.group_tensors()
    noise = _noise_from_halves(halves, tuple(stat2.counts), 1)
    info["time_moments"] = time.perf_counter() - t_start
    return HermiteCoefficients(basis=P, tensors=full, t0=float(t0), t1=np.asarray(t1), exact=False,
                               n_samples=int(N), y_second_moment=float(y2), residual_second_moment=float(r2),
                               noise=noise, halves=halves, groups=groups, info=info)


def _subspace_iterations(stat1: RangeStatistic | None, data, m: int, keep: int, max_iter: int, center: float,
                         omega_cov: np.ndarray, control_variate: bool, chunk_rows: int, start: tuple | None = None):
    """Subspace iterations of pass 1 after the sketch ``stat1`` (one pass each), each finished by
    :meth:`RangeStatistic.power_basis`; returns ``(last statistic, P, estimate of P^T T_2 P, records, stop)``.

    Each pass sketches ``T_2`` from the residual of the previous iteration's order <= 2 estimate
    (``t1``, ``P``, ``M``; after the sketch only ``t1``: the Nystrom estimate of the one-pass sketch is
    unstable for the indefinite ``T_2``), a control variate (:class:`RangeStatistic`).

    Stopping rule. With ``rho_j = ||E_j|| / |lambda_m|`` (the contraction of the iteration for the weakest
    direction, ``||E_j|| ~ 2 s_j sqrt(d / N)`` for the residual scale ``s_j`` of pass ``j``) and
    ``e_j = s_j sqrt(d / N) / |lambda_m|`` (the sine error of the top-``m`` eigenspace of the sample
    ``T_2`` itself, Davis-Kahan), one step gives ``sin(P_j) <~ e_j + rho_j sin(Omega_j)`` to first order,
    and ``sin(Omega_j) ~ sin(P_{j-1}) ~ sin(P_j, P_{j-1})`` (the change of the basis) while the iteration
    is still far from its limit. So once ``rho_j < 1`` (every direction above the noise) and
    ``rho_j sin(P_j, P_{j-1}) <= e_j``, the part of the error that another pass could remove is at most
    the statistical error ``e_j`` that no pass removes: the iterations stop (``"converged"``), else at
    ``max_iter`` (``"max_iter"``). The first iteration has no previous basis (change 1).
    Measured at d = 1000, m = 20, N = 10^6 (``benchmarks/bench_awasthi_scale.py``'s teacher): largest
    sine to the true span 0.41 / 0.098 / 0.079 after 1 / 2 / 3 iterations, ``e_j`` 0.73 / 0.10 / 0.075;
    it stops after 2. The sketch reads the first half of the rows only (it seeds the iterations):
    0.104 after 2 (``e_2`` = 0.11), and the same number of iterations and final sines within 5% on three
    smaller teachers (d = 150-300).
    """
    if start is None:
        d = stat1.d
        fin = stat1.finalize()
        omega = linalg.qr(fin["t2_omega"], mode="economic")[0]
        cv = (fin["t1"], np.zeros((d, 0)), np.zeros((0, 0))) if control_variate else None
    else:  # continue from an orthonormal test matrix and a control variate (t1, Q, M)
        omega, cv = start
        d = omega.shape[0]
    P = M = None
    records, stop = [], "max_iter"
    for _ in range(max_iter):
        stat1 = accumulate(RangeStatistic(d, method="sketch", omega=omega, omega_cov=omega_cov,
                                          rayleigh_ritz=True, center=center, control_variate=cv),
                           data, chunk_size=chunk_rows)
        P_new, M, pinfo = stat1.power_basis(m, keep)
        change = 1.0 if P is None else float(
            np.sqrt(max(0.0, 1.0 - linalg.svdvals(P.T @ P_new).min() ** 2)) if m else 0.0)
        P, omega = P_new, pinfo.pop("next_omega")
        stat1._next_omega = omega
        rho, e = pinfo["noise_ratio"], pinfo["statistical_sine"]
        ritz = pinfo.pop("ritz_values")
        records.append({"change": change, "statistical_sine": e, "noise_ratio": rho, "columns": stat1.omega.shape[1],
                        "t2_detection_threshold": pinfo["t2_detection_threshold"],
                        "ritz_magnitudes": np.abs(ritz[:m + 1]).tolist(),
                        "residual_second_moment": stat1.srr / stat1.n})
        if rho < 1.0 and rho * change <= e:
            stop = "converged"
            break
        if control_variate:
            cv = (stat1.finalize()["t1"], P, M)
    return stat1, P, M, records, stop


CHUNK_BYTES = 1 << 22
"""Target size of a chunk of ``X`` read by the two passes (4 MiB; see :func:`_chunk_rows`)."""


def _chunk_rows(chunk_size: int | None, d: int) -> int:
    """Rows per chunk of the passes over an array: ``chunk_size`` if given, else about
    ``CHUNK_BYTES`` of ``X`` (between 1024 and 65536 rows), rounded down to a multiple of
    ``SPLIT_BLOCK`` when larger (so pass 2 sees whole split blocks). A chunk is read several times
    (the finite check, two GEMMs, ``sum x**2`` in pass 1; the finite check and one GEMM in pass 2), so it
    should stay in cache: chunks of a few MiB beat both the engine's 8 MiB chunks and much larger ones
    (benchmarks/bench_awasthi2021.py)."""
    if chunk_size:
        return int(chunk_size)
    rows = int(min(1 << 16, max(1024, CHUNK_BYTES // (8 * (d + 1)))))
    return rows - rows % SPLIT_BLOCK if rows >= SPLIT_BLOCK else rows


def _pilot_mean(source) -> float:
    """Mean of ``y`` over the first ``SPLIT_BLOCK`` rows (all of them when fewer), read across as many
    chunks as it takes: the centre of pass 1's ``T_2``, fixed before the pass. The same rows for any
    chunking, so the estimate does not depend on how the data are cut (a first chunk of 1234 rows moved
    the provable estimate by 1e-3 when only the first chunk was read)."""
    it = iter(source.chunks(SPLIT_BLOCK))
    parts, rows = [], 0
    try:
        for _, Y in it:
            y = _target_column(np.asarray(Y))[:SPLIT_BLOCK - rows]
            parts.append(y)
            rows += y.shape[0]
            if rows >= SPLIT_BLOCK:
                break
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    if rows == 0:
        raise InputError("the data source is empty.")
    return float(np.concatenate(parts).mean())


def _moment_chunk_rows(chunk_size: int | None, d: int, source) -> int:
    """Rows per chunk of pass 2: :func:`_chunk_rows`, except that for dask sources (one fresh statistic
    per block) it is rounded up to a multiple of ``N_GROUPS * SPLIT_BLOCK`` rows, so that every block
    starts a cycle of the groups and the groups / halves are those of the in-memory path."""
    rows = _chunk_rows(chunk_size, d)
    if getattr(getattr(source, "info", None), "kind", None) == "dask":
        cycle = N_GROUPS * SPLIT_BLOCK
        rows = -(-rows // cycle) * cycle
    return rows


def _open_source(data: Any, order: int):
    """A :class:`~nnrecover.data.DataSource` with known ``d`` (peeking at a one-pass iterator
    and chaining the chunk back), after checking that order 1 (two passes) gets a re-iterable source."""


    source = as_data_source(data)
    if order == 1 and not source.info.reiterable:
        raise InputError("order l = 1 makes two passes over the data (range of T_2, then the projected "
                         "moments), but the data source is a one-pass iterator; pass arrays, dask arrays, "
                         "a SampleStream or a list of (X, Y) chunks.")
    if source.n_inputs is None:
        it = iter(source.chunks())
        try:
            first = next(it)
        except StopIteration:
            raise InputError("the data source is empty.") from None
        if source.info.reiterable:  # read it again from the start later
            return source, int(first[0].shape[1])
        return as_data_source(itertools.chain([first], it)), int(first[0].shape[1])
    return source, int(source.n_inputs)


def _check_n(n: int, order: int, n_dim: int, min_n: int | None) -> None:
    rule_n = min_samples(order, n_dim) if min_n is None else int(min_n)
    # whatever the rule says, the split-sample halves are alternate blocks of SPLIT_BLOCK rows, and the
    # noise estimates of Algorithm 4's thresholds need rows in both
    need = max(rule_n, SPLIT_BLOCK + 1)
    if n < need:
        rule = ("min_n" if min_n is not None else
                f"ten per column of the {n_dim}^{order} x {n_dim}^{order + 2} flattening of T_{2 * order + 2} in "
                f"dimension {n_dim}, whose spectral sampling error it bounds")
        if need > rule_n:
            rule = (f"more than {SPLIT_BLOCK}: the noise-adaptive thresholds of Algorithm 4 compare two halves of "
                    f"the data made of alternate blocks of {SPLIT_BLOCK} rows; {rule}: {rule_n}")
        raise InputError(f"too few samples for order l = {order}: got {n}, need at least {need} ({rule}); "
                         "supply more samples.")


def _warn_inputs(dev: dict, tol: float) -> None:
    msgs = []
    if dev["max_abs_mean"] > tol + 4 * dev["expected_mean"]:
        msgs.append(f"max |mean| = {dev['max_abs_mean']:.3g}")
    if dev["max_abs_var_minus_1"] > tol + 4 * dev["expected_var"]:
        msgs.append(f"max |variance - 1| = {dev['max_abs_var_minus_1']:.3g}")
    if dev["cov_minus_identity_frobenius_per_sqrt_d"] > tol + 4 * dev["expected_cov"]:
        msgs.append(f"||Cov - I||_F / sqrt(d) ~ {dev['cov_minus_identity_frobenius_per_sqrt_d']:.3g}")
    if msgs:
        warnings.warn("inputs look far from N(0, I), which Awasthi et al. 2021 assume (Lemma 3.5): "
                      + ", ".join(msgs) + f" (tolerance {tol:g} plus sampling fluctuation); the Hermite "
                      "coefficients, hence the recovered network, are then biased. Whiten the inputs "
                      "if they are Gaussian with another mean/covariance.", AssumptionWarning, stacklevel=3)
