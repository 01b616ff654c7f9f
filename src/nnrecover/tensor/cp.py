"""CP decomposition by alternating least squares (TensorLy ``parafac``), best of several restarts.

``T ≈ sum_i w_i a^{(1)}_i ⊗ ... ⊗ a^{(K)}_i``. ALS (Harshman 1970; Carroll and Chang 1970; the
"CP-ALS" of Comon, Luciani and de Almeida 2009 used by Ge-Kuditipudi-Li-Wang 2019 Section 4)
updates one factor at a time by the exact least-squares solution
``F_1 <- T_(1) (F_K ⊙ ... ⊙ F_2) [(F_K^T F_K) * ... * (F_2^T F_2)]^+``. ALS "can be unstable"
(local minima, swamps), so it is restarted ``n_restarts`` times from random starts and the run with
the smallest relative error ``||T - T_hat||_F / ||T||_F`` is kept (Ge et al. Section 4 keep the best of 10 restarts).

The iterations are TensorLy's :func:`tensorly.decomposition.parafac` on the NumPy backend (set only
for the duration of the call, thread-locally, when another backend is active). Convergence is
decided by our callback rather than TensorLy's ``tol``: TensorLy estimates the error through
``||T||^2 + ||T_hat||^2 - 2<T, T_hat>``, which cannot resolve relative errors below about 1e-8, so
once that estimate is below 1e-6 we compute the error exactly. A run stops when the relative error
is at round-off level (``<= 1e-14``) or decreases by less than ``tol`` (relative) in one sweep.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..errors import ConvergenceError, InputError
from .result import DecompositionResult
from .utils import _as_real_array, _cp_dense, normalize_columns

__all__ = ["cp_als", "CPResult"]

_SWITCH = 1e-6  # below this TensorLy's error estimate is replaced by the exact error
_FLOOR = 1e-14


class CPResult(DecompositionResult):
    """Result of :func:`cp_als`: a :class:`~nnrecover.tensor.DecompositionResult`.

    Attributes
    ----------
    factors : list of ndarray, shapes ``(n_j, rank)``
        One factor matrix per mode; unit columns, largest-magnitude entry positive.
    weights : ndarray, shape ``(rank,)``
        Signed weights; components sorted by decreasing ``|w_i|``.
    converged, n_iter, message
        Of the kept run (the one with the smallest relative error).
    diagnostics : dict
        ``relative_error`` (``||T - T_hat||_F / ||T||_F`` of the kept run, computed exactly),
        ``restart_errors`` (relative error of every run), ``n_iter`` and ``converged`` per run,
        ``best_restart``, ``condition`` (per mode, of the unit-column factor), ``max_congruence``
        (largest ``prod_j |<a^{(j)}_i, a^{(j)}_l>|`` over ``i != l``; near 1 signals degenerate,
        diverging components), ``seeds`` (the TensorLy ``random_state`` of every run).
    """

    @property
    def relative_error(self) -> float:
        """``||T - T_hat||_F / ||T||_F`` of the kept run."""
        return float(self.diagnostics["relative_error"])



def _normalise(factors: list[np.ndarray], weights: np.ndarray) -> tuple[list[np.ndarray], np.ndarray]:
    out, w = [], np.asarray(weights, dtype=np.float64).copy()
    for F in factors:
        U, norms, signs = normalize_columns(F)
        out.append(U)
        w = w * norms * signs
    order = np.argsort(-np.abs(w), kind="stable")
    return [F[:, order] for F in out], w[order]


def _start_factors(init: Any, shape: tuple[int, ...], rank: int):
    """One factor matrix per mode, checked against the tensor's shape, as a TensorLy start with unit weights."""
    from tensorly.cp_tensor import CPTensor  # deferred: TensorLy is slow to import

    try:
        factors = [np.array(F, dtype=np.float64) for F in init]
    except (TypeError, ValueError) as exc:
        raise InputError(f"init must be 'random', 'svd' or a list of factor matrices: {exc}") from None
    if len(factors) != len(shape) or any(F.shape != (n, rank) for F, n in zip(factors, shape)):
        raise InputError(f"init factors must have shapes {[(n, rank) for n in shape]}, got "
                         f"{[F.shape for F in factors]}.")
    if not all(np.all(np.isfinite(F)) for F in factors):
        raise InputError("init factors must be finite.")
    return CPTensor((np.ones(rank), factors))


def cp_als(
    tensor: Any,
    rank: int,
    *,
    n_restarts: int = 5,
    rng: Any = None,
    n_iter_max: int = 1000,
    tol: float = 1e-10,
    init: Any = "random",
) -> CPResult:
    """Rank-``rank`` CP decomposition by ALS (TensorLy), best of ``n_restarts`` runs.

    Parameters
    ----------
    tensor : array_like
        Dense tensor of order ``>= 3``.
    rank : int
        Number of components (may exceed the dimensions; ALS does not need full column rank).
    n_restarts : int, default 5
        Number of ALS runs; the one with the smallest relative error is kept.
    rng : None, int or numpy.random.Generator
        Source of the TensorLy ``random_state`` of every run.
    n_iter_max : int, default 1000
        Maximum ALS sweeps per run.
    tol : float, default 1e-10
        A run stops when its relative error decreases by less than ``tol`` times its value in a sweep.
    init : {"random", "svd"} or sequence of ndarray, default "random"
        TensorLy initialisation, or one factor matrix per mode ``(n_j, rank)`` to start from (e.g. an
        algebraic solution that ALS then polishes). ``"svd"`` and given factors are deterministic, so
        only one run is made.

    Returns
    -------
    CPResult

    Raises
    ------
    InputError
        Not a finite real tensor of order >= 3, zero tensor, bad ``rank``/``init``.

    Examples
    --------
    >>> import numpy as np
    >>> F = [np.random.default_rng(i).standard_normal((6, 3)) for i in range(3)]
    >>> T = np.einsum("ai,bi,ci->abc", *F)
    >>> res = cp_als(T, 3, rng=0)
    >>> bool(res.relative_error < 1e-10)
    True
    """
    T = _as_real_array(tensor, "tensor")
    if T.ndim < 3:
        raise InputError(f"tensor must have order >= 3, got shape {T.shape}; use an SVD for matrices.")
    rank = check_positive_int(rank, "rank")
    n_restarts = check_positive_int(n_restarts, "n_restarts")
    n_iter_max = check_positive_int(n_iter_max, "n_iter_max")
    if not (np.isfinite(tol) and tol >= 0):
        raise InputError(f"tol must be a finite number >= 0, got {tol!r}.")
    if isinstance(init, str):
        if init not in ("random", "svd"):
            raise InputError(f"init must be 'random', 'svd' or a list of factor matrices, got {init!r}.")
        start = init
    else:
        start = _start_factors(init, T.shape, rank)
    tnorm = float(np.linalg.norm(T))
    if tnorm == 0:
        raise InputError("tensor is zero; its CP decomposition is empty.")
    rng = check_random_state(rng)
    if not (isinstance(init, str) and init == "random"):
        n_restarts = 1

    import tensorly as tl  # deferred: TensorLy is slow to import
    from tensorly.decomposition import parafac  # deferred: TensorLy is slow to import

    ctx = nullcontext() if tl.get_backend() == "numpy" else tl.backend_context("numpy", local_threadsafe=True)
    runs = []
    seeds = [int(s) for s in rng.integers(0, 2**31 - 1, size=n_restarts)]
    with ctx:
        for seed in seeds:
            state = {"prev": None, "n_iter": 0, "converged": False}

            def callback(cp, est_err, state=state):
                # TensorLy calls this once before the first sweep (return value ignored), then after
                # every sweep; True stops the run.
                state["n_iter"] += 1
                err = float(est_err)
                if err < _SWITCH:
                    err = float(np.linalg.norm(T - tl.cp_to_tensor(cp)) / tnorm)
                prev = state["prev"]
                state["prev"] = err
                if err <= _FLOOR or (prev is not None and prev - err <= tol * prev):
                    state["converged"] = True
                    return True
                return False

            cp = parafac(T, rank, n_iter_max=n_iter_max, init=start, random_state=seed, tol=0.0,
                         return_errors=True, callback=callback, normalize_factors=False)[0]
            weights, factors = cp
            factors = [np.asarray(F, dtype=np.float64) for F in factors]
            weights = np.asarray(weights, dtype=np.float64)
            err = float(np.linalg.norm(T - _cp_dense(factors, weights)) / tnorm)
            if not np.isfinite(err):  # a diverged run (non-finite factors) never wins the argmin below
                err = np.inf
            # the first callback call (before any sweep) is counted as well; subtract it
            runs.append((err, factors, weights, max(state["n_iter"] - 1, 0), state["converged"]))

    errors = [r[0] for r in runs]
    best = int(np.argmin(errors))
    if not np.isfinite(errors[best]):
        raise ConvergenceError(f"every one of the {n_restarts} CP-ALS restart(s) diverged (non-finite factors); "
                               "rescale the tensor or try init='svd' or another rng.")
    err, factors, weights, _, _ = runs[best]
    factors, weights = _normalise(factors, weights)
    if rank > 1:
        cong = np.ones((rank, rank))
        for F in factors:
            cong = cong * np.abs(F.T @ F)
        np.fill_diagonal(cong, 0.0)
        max_cong = float(cong.max())
    else:
        max_cong = 0.0
    diagnostics = {
        "relative_error": float(err),
        "restart_errors": errors,
        "n_iter": [r[3] for r in runs],
        "converged": [r[4] for r in runs],
        "best_restart": best,
        "condition": [float(np.linalg.cond(F)) for F in factors],
        "max_congruence": max_cong,
        "seeds": seeds,
        "init": init if isinstance(init, str) else "given factors",
    }
    ok = bool(runs[best][4])
    return CPResult(factors=factors, weights=weights, converged=ok, n_iter=int(runs[best][3]),
                    message=(f"CP-ALS, best of {len(runs)} run(s) (restart {best}), relative error {err:.3g}"
                             + ("" if ok else "; the kept run stopped at n_iter_max before its tolerance")),
                    diagnostics=diagnostics)
