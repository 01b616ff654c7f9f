"""Shared pieces of the Bakshi-Jayaram-Woodruff 2019 implementation (internal).

Layout conventions. The paper stores samples as columns (``X`` is d x n, ``A = U* f(V* X)`` is m x n);
nnrecover stores them as rows: ``X`` is ``(n, d)``, ``Y = A^T`` is ``(n, m)``. So the paper's row span of
``A`` (a subspace of R^n) is the column span of ``Y``, and a "row vector ``w A``" is ``Y @ w``.

=====================  =====================================================================
paper                  here
=====================  =====================================================================
``V*`` (k x d)         ``hidden_weights`` / ``V`` (k, d), unit rows for homogeneous activations
``U*`` (m x k)         ``output_weights`` / ``U`` (m, k)
``X`` (d x n)          ``X.T``; ``X`` is (n, d)
``A`` (m x n)          ``Y.T``; ``Y`` is (n, m)
``X̄, Ā`` (first ℓ)    ``X_bar`` (ℓ, d), ``Y_bar`` (ℓ, m): the refinement samples
basis of rowspan(Ā)    ``B`` (k, ℓ), orthonormal rows (:func:`row_space_basis`)
``f``, ``φ^{-1}``      :class:`~nnrecover.activations.Activation`, ``act.inverse``
=====================  =====================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.linalg
from scipy.optimize import minimize_scalar

from ..._validation import as_2d_float, as_targets, check_positive_int
from ...activations import Activation, get_activation
from ...errors import AssumptionError, InputError
from ...network import TwoLayerNetwork

__all__ = ["ExactResult", "check_rectified", "check_samples", "row_space_basis", "solve_output_weights",
           "relative_residual", "fit_unit", "unit_consistency", "check_hidden_estimate", "check_tol", "check_flag",
           "EPS", "width_refusal"]

EPS = float(np.finfo(np.float64).eps)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def width_refusal(n_hidden: int, n_inputs: int, n_outputs: int, what: str | None = None) -> str | None:
    """Why ``what`` refuses ``n_hidden`` units on data with ``n_inputs`` inputs and ``n_outputs`` outputs, in the
    user's terms, or None when the width is acceptable.

    The exact and noisy algorithms (Theorems 7 and 10; Algorithm 3, Theorem 4) need the output weights
    ``U*`` (outputs x units) and the hidden weights ``V*`` (units x inputs) of rank ``k``: at least as many
    outputs and at least as many inputs as hidden units, ``k <= min(m, d)``. With one output that leaves
    ``k = 1``. The learners (``exact-relu``, ``bakshi2019-noisy``) and :func:`nnrecover.check` both decide
    with this function.
    """
    k, d, m = int(n_hidden), int(n_inputs), int(n_outputs)
    if k <= min(d, m):
        return None
    need = []
    if m < k:
        need.append("at least as many outputs as hidden units")
    if d < k:
        need.append("at least as many inputs as hidden units")
    # learners that accept these data (names `nnrecover fit --learner` takes)
    hermite = ("hermite-tensor (Gaussian inputs, one output at a time, hidden biases allowed" +
               (", order 2 for more units than inputs)" if d < k else ")"))
    subject = "Bakshi et al.'s learners need" if what is None else f"{what} needs"
    return (f"{subject} {' and '.join(need)} (k <= min(m, d): U* and V* of rank k, Theorems 7 and 10); got "
            f"{_plural(k, 'hidden unit')}, {_plural(m, 'output')} and {_plural(d, 'input')}. Fit {hermite} or "
            "gradient-descent (no guarantee) instead.")


@dataclass
class ExactResult:
    """Output of an exact (or approximate) recovery routine of Bakshi-Jayaram-Woodruff 2019.

    Attributes
    ----------
    hidden_weights : ndarray (k, d)
        ``V``; rows are unit vectors for positively homogeneous activations (the paper's canonical form).
        Rows of units that could not be recovered are NaN (only when ``certified`` is False).
    output_weights : ndarray (m, k)
        ``U``, the least-squares solution of ``A = U f(V X)`` (NaN if ``V`` is incomplete).
    activation : Activation
    certified : bool
        True when every certificate of the routine held (see ``diagnostics``). A routine never
        reports ``certified=True`` for an answer that failed a check.
    diagnostics : dict
        Certificates (null-space ratios, sign-pattern consistency, final residual), sizes, timings.
    """

    hidden_weights: np.ndarray
    output_weights: np.ndarray
    activation: Activation
    certified: bool
    diagnostics: dict = field(default_factory=dict)

    @property
    def network(self) -> TwoLayerNetwork:
        """The recovered :class:`~nnrecover.TwoLayerNetwork` (zero biases).

        Raises :class:`~nnrecover.errors.InputError` if some unit was not recovered (NaN rows).
        """
        if not (np.all(np.isfinite(self.hidden_weights)) and np.all(np.isfinite(self.output_weights))):
            raise InputError("this result has unrecovered units (NaN rows); see diagnostics['failed_units'].")
        return TwoLayerNetwork(self.hidden_weights, None, self.output_weights, None, self.activation)


def check_rectified(activation: Any, *, what: str = "this algorithm") -> Activation:
    """The activation, which must be rectified (f(t) = 0 for t <= 0, f = φ > 0 injective for t > 0)."""
    act = get_activation(activation)
    if not act.rectified or act.inverse_positive is None:
        raise AssumptionError(
            f"{what} needs a rectified activation f(t) = 0 for t <= 0, f(t) = φ(t) > 0 injective for t > 0 "
            f"(Bakshi et al. 2019, Section 1 and Appendix 9.1), got {act.spec!r}; use relu, "
            "relu_power(p) or exp_minus_one.")
    return act


def check_samples(X: Any, Y: Any, *, n_features: int | None = None, min_rows: int = 1,
                  name_x: str = "X", name_y: str = "Y") -> tuple[np.ndarray, np.ndarray]:
    """Validate an in-memory pair of samples; ``Y`` is returned 2-D ``(n, m)``."""
    X = as_2d_float(X, name_x, n_features=n_features, min_rows=min_rows)
    Y = as_targets(Y, name_y, n_rows=X.shape[0])
    return X, (Y[:, None] if Y.ndim == 1 else Y)


def check_tol(value: Any, name: str, *, allow_zero: bool = False) -> float:
    """``value`` as a finite float ``> 0`` (``>= 0`` with ``allow_zero``), else InputError naming ``name``."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = float("nan")
    if isinstance(value, bool) or not np.isfinite(v) or v < 0 or (v == 0 and not allow_zero):
        raise InputError(f"{name} must be a {'non-negative' if allow_zero else 'positive'} finite number, "
                         f"got {value!r}.")
    return v


def check_flag(value: Any, name: str) -> bool:
    """``value`` as a bool (True/False or numpy bools only), else InputError naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        raise InputError(f"{name} must be True or False, got {value!r}.")
    return bool(value)


def check_hidden_estimate(V: Any, k: int | None, d: int, name: str = "V_approx") -> np.ndarray:
    """Validate approximate hidden weights (k, d) and return them with unit rows."""
    V = as_2d_float(V, name, n_features=d)
    if k is not None and V.shape[0] != k:
        raise InputError(f"{name} has {V.shape[0]} rows but n_hidden={k}.")
    norms = np.linalg.norm(V, axis=1)
    if np.any(norms == 0):
        raise InputError(f"{name} has a zero row (unit {int(np.flatnonzero(norms == 0)[0])}); every row must "
                         "approximate a hidden unit's direction.")
    return V / norms[:, None]


def row_space_basis(Y_bar: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Orthonormal basis ``B`` (k, ℓ) of the paper's rowspan(Ā) (= column span of ``Y_bar``).

    The paper takes k linearly independent rows of Ā; the top-k right singular vectors of Ā span the
    same space when rank(Ā) = k and are better conditioned (Algorithm 2; the null-space read-out of Lemma 10).

    Returns
    -------
    B : ndarray (k, ℓ)
    singular_values : ndarray (min(ℓ, m),)
    """
    U, s, _ = scipy.linalg.svd(Y_bar, full_matrices=False, check_finite=False)
    if U.shape[1] < k:
        raise AssumptionError(f"rank(A) = k needs at least k = {k} outputs and samples; got Y of shape "
                              f"{Y_bar.shape}.")
    return np.ascontiguousarray(U[:, :k].T), s


def solve_output_weights(X: np.ndarray, Y: np.ndarray, V: np.ndarray, act: Activation
                         ) -> tuple[np.ndarray, dict]:
    """Solve ``A = U f(V X)`` for ``U`` by least squares (the final linear system of every pipeline).

    Returns ``U`` (m, k) and a dict with ``residual`` (``||Y - f(X V^T) U^T||_F / ||Y||_F``) and
    ``rank_ratio`` (``σ_k / σ_1`` of ``f(X V^T)``; the system has a unique solution iff it is > 0,
    Lemma 4).
    """
    H = act(X @ V.T)
    sol, _, _, sv = scipy.linalg.lstsq(H, Y, check_finite=False, lapack_driver="gelsd")
    U = np.ascontiguousarray(sol.T)
    res = relative_residual(Y, H @ sol)
    ratio = float(sv[-1] / sv[0]) if sv.size and sv[0] > 0 else 0.0
    return U, {"residual": res, "rank_ratio": ratio}


def relative_residual(Y: np.ndarray, Y_hat: np.ndarray) -> float:
    """``||Y - Y_hat||_F / ||Y||_F`` (``inf`` when ``Y`` is zero and ``Y_hat`` is not)."""
    num = float(np.linalg.norm(Y - Y_hat))
    den = float(np.linalg.norm(Y))
    if den == 0:
        return 0.0 if num == 0 else float("inf")
    return num / den


def _lstsq_residual(Q: np.ndarray, g: np.ndarray) -> float:
    """Relative residual of projecting ``g`` on the orthonormal columns ``Q``."""
    ng = float(np.linalg.norm(g))
    if ng == 0 or not np.isfinite(ng):
        return float("inf")
    return float(np.linalg.norm(g - Q @ (Q.T @ g)) / ng)


def _solve_well_posed(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares ``A z = b`` for a tall ``A`` whose columns are far from dependent (e.g. ``2 d`` rows
    of a Gaussian-like sample: condition number about 6), by the normal equations: a third of the
    flops of a QR-based solve. Squaring the condition number costs nothing measurable there (relative
    error 3e-15 at d = 1000). The ratio of the Cholesky factor's diagonal entries is a lower bound of
    ``cond(A)``: when it exceeds 1e4 (or the factorisation fails) the QR-based solver is used instead;
    the callers check the residual of the solution on every row."""
    G = A.T @ A
    try:
        c, low = scipy.linalg.cho_factor(G, check_finite=False)
    except np.linalg.LinAlgError:
        c = None
    if c is not None:
        diag = np.abs(np.diag(c))
        if diag.min() > 1e-4 * diag.max():
            return scipy.linalg.cho_solve((c, low), A.T @ b, check_finite=False)
    return scipy.linalg.lstsq(A, b, check_finite=False, lapack_driver="gelsy")[0]


def fit_unit(y_pos: np.ndarray, X_pos: np.ndarray, act: Activation, *, solve_rows: int | None = None
             ) -> tuple[np.ndarray, float, float]:
    """Weights of one unit from a recovered row ``y = c φ(v x)`` (c > 0) on columns where it is positive.

    This is step 5 of Algorithm 5 / step 8 of Algorithm 3, ``(W_i)_S = V_i X̄_S``, in the form of
    Appendix 9.1 for a rectified ``φ``: ``φ^{-1}((W_i)_S) = V_i X̄_S``.

    * ReLU and ``relu_power(p)`` (homogeneous of degree q): ``φ^{-1}(y / c) = c^{-1/q} φ^{-1}(y)``, so the
      scale passes through and the row is normalised to unit norm (Appendix 9.1).
    * Non-homogeneous ``φ`` (e.g. ``exp_minus_one``): the row norm is identifiable and ``c`` is not
      known. ``c`` is found by a 1-D search on ``log c`` minimising the relative least-squares residual
      of ``φ^{-1}(y_S / c) ∈ rowspace(X̄_S)`` (Appendix 9.1); the row is not normalised.

    ``solve_rows`` (homogeneous ``φ`` only): solve on that many evenly spaced rows when there are more,
    and report the residual over all of them. On a consistent (noiseless) system any ``d`` independent
    rows give the exact ``v``, so this is the same answer for ``O(solve_rows d^2)`` instead of
    ``O(|S| d^2)`` (at d = 1000 the unit systems of Algorithm 5 were 101 of 157 s); an inconsistent
    system (a wrong sign pattern, noise) still shows in the residual, which is what the callers certify.

    Returns
    -------
    v : ndarray (d,)
    residual : float
        Relative residual of the linear system (zero to round-off when the pattern is right).
    scale : float
        ``c`` (1 for homogeneous activations, where it is not identifiable).
    """
    if act.degree is not None:
        g = act.inverse(y_pos)
        n_rows = X_pos.shape[0]
        if solve_rows is not None and n_rows > solve_rows:
            rows = np.linspace(0, n_rows - 1, solve_rows).round().astype(np.int64)
            z = _solve_well_posed(X_pos[rows], g[rows])
        else:
            z, *_ = scipy.linalg.lstsq(X_pos, g, check_finite=False, lapack_driver="gelsy")
        res = relative_residual(g, X_pos @ z)
        nz = float(np.linalg.norm(z))
        return (z / nz if nz > 0 else z), res, 1.0
    Q, _ = np.linalg.qr(X_pos)
    ymax = float(np.max(y_pos))

    def objective(s: float) -> float:
        with np.errstate(all="ignore"):
            r = _lstsq_residual(Q, act.inverse(y_pos * np.exp(-s)))
        return r if np.isfinite(r) else 1e300

    centre = np.log(ymax)
    grid = centre + np.linspace(-25.0, 25.0, 101)
    vals = np.array([objective(s) for s in grid])
    j = int(np.argmin(vals))
    lo, hi = grid[max(j - 1, 0)], grid[min(j + 1, grid.size - 1)]
    opt = minimize_scalar(objective, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
    s = float(opt.x) if opt.fun <= vals[j] else float(grid[j])
    # Gauss-Newton on the residual vector r(s) = (I - QQ^T) φ^{-1}(y e^{-s}): a scalar minimiser locates
    # the minimum of |r| only to ~sqrt(eps); the vector iteration converges quadratically to round-off
    for _ in range(50):
        with np.errstate(all="ignore"):
            u = y_pos * np.exp(-s)
            g = act.inverse(u)
            dg = -u / act.derivative(g)        # d/ds φ^{-1}(y e^{-s}) = -u / φ'(φ^{-1}(u))
        if not (np.all(np.isfinite(g)) and np.all(np.isfinite(dg))):
            break
        r = g - Q @ (Q.T @ g)
        J = dg - Q @ (Q.T @ dg)
        jj = float(J @ J)
        if jj == 0:
            break
        step = -float(J @ r) / jj
        s += step
        if abs(step) <= 4 * EPS * max(1.0, abs(s)):
            break
    c = float(np.exp(s))
    g = act.inverse(y_pos / c)
    z, *_ = scipy.linalg.lstsq(X_pos, g, check_finite=False)
    return z, relative_residual(g, X_pos @ z), c


def unit_consistency(y: np.ndarray, X_bar: np.ndarray, v: np.ndarray, act: Activation) -> dict:
    """Sign-pattern consistency certificate of one recovered unit over all ℓ refinement columns.

    The recovered row ``y`` (a vector of the row span of Ā) must equal ``c f(v X̄)`` for one ``c > 0``
    on *every* column, not only on the columns used to solve for ``v``. Returns ``consistency``
    (``||y - c h||_∞ / ||y||_∞`` with ``h = f(v X̄)`` and the least-squares ``c``), ``scale`` ``c`` and
    ``pattern_mismatches`` (columns where exactly one of ``y``, ``c h`` exceeds ``1e-8 ||y||_∞``).
    """
    h = act(X_bar @ v)
    hh = float(h @ h)
    ymax = float(np.max(np.abs(y))) if y.size else 0.0
    if hh == 0 or ymax == 0:
        return {"consistency": float("inf"), "scale": float("nan"), "pattern_mismatches": int(y.size)}
    c = float(y @ h) / hh
    cons = float(np.max(np.abs(y - c * h)) / ymax)
    thr = 1e-8 * ymax
    mism = int(np.count_nonzero((y > thr) != (c * h > thr)))
    return {"consistency": cons, "scale": c, "pattern_mismatches": mism}


def match_rows(V_est: np.ndarray, V_true: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Match estimated to true rows up to sign (Hungarian on |cosine|); returns (order, signs)."""
    # deferred: SciPy's submodules are slow to import
    from scipy.optimize import linear_sum_assignment

    a = V_est / np.linalg.norm(V_est, axis=1, keepdims=True)
    b = V_true / np.linalg.norm(V_true, axis=1, keepdims=True)
    C = a @ b.T
    r, c = linear_sum_assignment(-np.abs(C))
    order = np.empty(V_true.shape[0], dtype=int)
    order[c] = r
    signs = np.sign(C[order, np.arange(V_true.shape[0])])
    return order, signs


def check_n_hidden(n_hidden: Any) -> int:
    return check_positive_int(n_hidden, "n_hidden")
