"""Symmetric tensor power iteration with deflation (robust tensor power method).

Model: an orthogonally decomposable symmetric tensor ``T = sum_{i<r} λ_i v_i^{⊗k}`` (order
``k >= 3``, orthonormal ``v_i``), e.g. a whitened moment tensor (:func:`~nnrecover.tensor.whiten`).
The map ``u -> T(I, u, ..., u) / ||T(I, u, ..., u)||`` has the ``v_i`` as attracting fixed points.

Algorithm 1 of Anandkumar, Ge, Hsu, Kakade and Telgarsky 2014, "Tensor decompositions for learning
latent variable models", JMLR 15 (the method Bakshi-Jayaram-Woodruff 2019 cite as JSA15 in their tensor step), for each of the
``rank`` components:

1. ``n_restarts`` random unit starts, ``n_iter`` power updates each;
2. keep the start with the largest ``|T(u, ..., u)|``, run ``n_iter`` more updates from it;
3. ``λ = T(v, ..., v)``; deflate ``T <- T - λ v^{⊗k}``.

Symbols: ``L`` = ``n_restarts``, ``N`` = ``n_iter``, ``θ`` = ``u``; ``λ_i`` = ``weights``, ``v_i`` =
columns of ``factors``. Also used for the order-4 quartic of Goel-Panigrahy 2019 (Step 1, Section 2.1)
through the callable form (``T(I, u, u, u)`` from samples).

Sign convention: odd order: ``λ_i >= 0`` (``(λ, v) ~ (-λ, -v)``); even order: ``v_i`` has its
largest-magnitude entry positive (``v`` and ``-v`` are the same component) and ``λ_i`` keeps its sign.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..errors import AssumptionError, InputError
from .result import DecompositionResult
from .utils import _as_real_array

__all__ = ["power_iteration", "PowerIterationResult"]


class PowerIterationResult(DecompositionResult):
    """Result of :func:`power_iteration`: a :class:`~nnrecover.tensor.DecompositionResult`.

    Attributes
    ----------
    factors : list of one ndarray
        ``[V]``, ``V`` of shape ``(dim, rank)``: unit vectors ``v_i`` in the order found (largest ``|λ|``
        first when the restarts succeed); the tensor is symmetric, so ``V`` is every mode's factor.
    weights : ndarray, shape ``(rank,)``
        ``λ_i = T_deflated(v_i, ..., v_i)``.
    converged, n_iter, message
        ``converged``: every component's iteration met its tolerance; ``n_iter``: iterations summed
        over the components.
    diagnostics : dict
        ``residual`` (dense: ``||T - sum λ_i v_i^{⊗k}||_F / ||T||_F``; callable: the same for
        ``T(I, u, .., u)`` at a random unit ``u``), ``orthogonality`` (``max |V^T V - I|``),
        ``n_iter`` and ``converged`` per component, ``restart_values`` (per component, the
        ``|T(u, ..., u)|`` of every restart), ``order``.
    """

    def _mode_factors(self) -> list:
        return self.factors * int(self.diagnostics.get("order", 3))


def _dense_contract(T: np.ndarray, u: np.ndarray) -> np.ndarray:
    """``T(I, u, ..., u)`` for a dense symmetric tensor."""
    out = T
    for _ in range(T.ndim - 1):
        out = out @ u
    return out


def power_iteration(
    tensor: np.ndarray | Callable[[np.ndarray], np.ndarray],
    rank: int,
    *,
    n_restarts: int = 10,
    n_iter: int = 100,
    rng: Any = None,
    dim: int | None = None,
    order: int = 3,
    tol: float = 1e-14,
    symmetry_tol: float = 1e-8,
) -> PowerIterationResult:
    """Decompose an orthogonally decomposable symmetric tensor by power iteration with deflation.

    Parameters
    ----------
    tensor : ndarray of shape ``(dim,) * k`` or callable
        Dense symmetric tensor of order ``k >= 3``, or a callable ``u -> T(I, u, ..., u)`` returning a
        ``(dim,)`` vector (then ``dim`` is required and ``order`` gives ``k``).
    rank : int
        Number of components, ``1 <= rank <= dim``.
    n_restarts : int, default 10
        Random starts per component (``L`` of AGHKT14 Algorithm 1).
    n_iter : int, default 100
        Maximum power updates per start and for the final polish (``N``).
    rng : None, int or numpy.random.Generator
        Randomness of the starts.
    dim : int, optional
        Dimension, required with a callable.
    order : int, default 3
        Tensor order ``k`` for a callable (ignored for a dense tensor).
    tol : float, default 1e-14
        An iteration stops when ``1 - |<u_new, u>| <= tol``.
    symmetry_tol : float, default 1e-8
        Maximum relative asymmetry ``max_j ||T - swapaxes(T, 0, j)||_F / ||T||_F`` of a dense tensor
        (the transpositions of mode 0 with the other modes generate all permutations).

    Returns
    -------
    PowerIterationResult

    Raises
    ------
    InputError
        Bad shape, NaN/inf, not symmetric, ``rank > dim``, missing ``dim``.
    AssumptionError
        The (deflated) tensor vanishes before ``rank`` components are found (rank too high).

    Notes
    -----
    On an exact orthogonally decomposable tensor each component converges quadratically (order 3)
    from a random start, so the result is exact to round-off. For non-orthogonal tensors whiten
    first; ``residual`` and ``orthogonality`` certify the result.

    Examples
    --------
    >>> import numpy as np
    >>> V = np.linalg.qr(np.random.default_rng(0).standard_normal((5, 5)))[0][:, :3]
    >>> T = np.einsum("ai,bi,ci,i->abc", V, V, V, [3.0, 2.0, 1.0])
    >>> res = power_iteration(T, 3, rng=0)
    >>> bool(np.allclose(res.weights, [3.0, 2.0, 1.0]))
    True
    """
    rank = check_positive_int(rank, "rank")
    n_restarts = check_positive_int(n_restarts, "n_restarts")
    n_iter = check_positive_int(n_iter, "n_iter")
    if not (np.isfinite(tol) and tol >= 0):
        raise InputError(f"tol must be a finite number >= 0, got {tol!r}.")
    if callable(tensor):
        if dim is None:
            raise InputError("tensor is a callable contraction u -> T(I, u, ..., u), so dim is required.")
        dim = check_positive_int(dim, "dim")
        k = check_positive_int(order, "order", minimum=3)
        fn = tensor
        T = None

        def base(u: np.ndarray) -> np.ndarray:
            try:
                out = np.asarray(fn(u.copy()), dtype=np.float64)
            except Exception as exc:
                raise InputError(f"the contraction callable raised {type(exc).__name__}: {exc}") from exc
            if out.shape != (dim,):
                raise InputError(f"the contraction callable must return shape ({dim},), got {out.shape}.")
            if not np.all(np.isfinite(out)):
                raise InputError("the contraction callable returned NaN or infinite values.")
            return out
    else:
        T = _as_real_array(tensor, "tensor")
        k = T.ndim
        if k < 3:
            raise InputError(f"tensor must have order >= 3, got shape {T.shape}.")
        d0 = T.shape[0]
        if any(s != d0 for s in T.shape):
            raise InputError(f"tensor must be cubical (all dimensions equal), got shape {T.shape}.")
        if dim is not None and dim != d0:
            raise InputError(f"dim={dim} does not match the tensor dimension {d0}.")
        dim = d0
        tnorm = float(np.linalg.norm(T))
        if tnorm == 0:
            raise AssumptionError("the tensor is zero; there is nothing to decompose.")
        # symmetry over every transposition of mode 0 with another mode (these generate S_k)
        asym = max(float(np.linalg.norm(T - np.swapaxes(T, 0, j))) for j in range(1, k)) / tnorm
        if asym > symmetry_tol:
            raise InputError(f"tensor is not symmetric (relative asymmetry {asym:.3g} > symmetry_tol="
                             f"{symmetry_tol:g}); symmetrise it or use cp_als for general tensors.")
        T = T.copy()

        def base(u: np.ndarray) -> np.ndarray:
            return _dense_contract(T, u)
    if rank > dim:
        raise InputError(f"rank={rank} exceeds dim={dim}: an orthogonal decomposition has at most dim "
                         "components.")
    rng = check_random_state(rng)

    V = np.zeros((dim, 0))
    lams: list[float] = []

    def contract(u: np.ndarray) -> np.ndarray:
        """Deflated contraction (dense tensors are deflated in place instead)."""
        out = base(u)
        if T is None and lams:
            out = out - V @ (np.asarray(lams) * (V.T @ u) ** (k - 1))
        return out

    def run(u: np.ndarray) -> tuple[np.ndarray, int, bool]:
        for it in range(1, n_iter + 1):
            w = contract(u)
            nw = np.linalg.norm(w)
            if nw == 0:
                return u, it, False
            w = w / nw
            done = 1.0 - abs(float(w @ u)) <= tol
            u = w
            if done:
                return u, it, True
        return u, n_iter, False

    n_iters: list[int] = []
    conv: list[bool] = []
    restart_values: list[list[float]] = []
    for j in range(rank):
        starts = rng.standard_normal((n_restarts, dim))
        best_u, best_val, values = None, -1.0, []
        for s in range(n_restarts):
            u0 = starts[s] / np.linalg.norm(starts[s])
            u, _, _ = run(u0)
            val = abs(float(u @ contract(u)))
            values.append(val)
            if val > best_val:
                best_u, best_val = u, val
        restart_values.append(values)
        scale = tnorm if T is not None else max([abs(x) for x in lams] + [best_val])
        if best_u is None or best_val <= 1e-13 * max(scale, np.finfo(float).tiny):
            raise AssumptionError(f"the deflated tensor vanishes after {j} component(s) (|T(u,..,u)| = "
                                  f"{best_val:.3g}): rank={rank} exceeds the tensor's rank.")
        u, it, ok = run(best_u)
        lam = float(u @ contract(u))
        if k % 2 == 1:
            if lam < 0:
                u, lam = -u, -lam
        else:
            i0 = int(np.argmax(np.abs(u)))
            u = u * np.sign(u[i0])
        n_iters.append(it)
        conv.append(ok)
        if T is not None:  # deflate in place
            outer = u
            for _ in range(k - 1):
                outer = np.multiply.outer(outer, u)
            T -= lam * outer
        V = np.column_stack([V, u])
        lams.append(lam)

    weights = np.asarray(lams)
    if T is not None:
        residual = float(np.linalg.norm(T) / tnorm)  # T has been fully deflated
    else:
        probe = rng.standard_normal(dim)
        probe /= np.linalg.norm(probe)
        full = base(probe)
        model = V @ (weights * (V.T @ probe) ** (k - 1))
        residual = float(np.linalg.norm(full - model) / max(np.linalg.norm(full), np.finfo(float).tiny))
    diagnostics = {
        "residual": residual,
        "orthogonality": float(np.max(np.abs(V.T @ V - np.eye(rank)))),
        "n_iter": n_iters,
        "converged": conv,
        "restart_values": restart_values,
        "order": k,
    }
    ok = bool(np.all(conv))
    return PowerIterationResult(factors=[V], weights=weights, converged=ok, n_iter=int(np.sum(n_iters)),
                                message=f"tensor power iteration with deflation, {rank} component(s), residual "
                                        f"{residual:.3g}" + ("" if ok else "; some components hit max_iter"),
                                diagnostics=diagnostics)
