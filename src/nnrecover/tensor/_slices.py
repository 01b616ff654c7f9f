"""Uniform access to mode-3 slices ``T(., ., g)`` of a dense or implicit order-3 tensor (internal)."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .._validation import check_positive_int
from ..errors import InputError
from .utils import _as_real_array

SliceFn = Callable[[np.ndarray], Any]
Mode3Fn = Callable[[np.ndarray, np.ndarray], Any]


class SliceOperator:
    """Slices ``T(., ., g) = sum_c T[:, :, c] g_c`` and contractions ``T(u_i, v_i, .)``.

    ``tensor`` is a dense ``(n, n2, p)`` array or a callable ``g -> (n, n2)`` matrix (then
    ``third_dim = p`` is required). ``mode3_fn(U, V) -> (p, r)`` optionally supplies the contraction
    ``T(U[:, i], V[:, i], .)`` for an implicit tensor.
    """

    def __init__(self, tensor: Any, third_dim: int | None = None, mode3_fn: Mode3Fn | None = None,
                 name: str = "tensor") -> None:
        self.name = name
        self.mode3_fn = mode3_fn
        if mode3_fn is not None and not callable(mode3_fn):
            raise InputError(f"mode3_fn must be callable (U, V) -> (p, r) array, got {type(mode3_fn).__name__}.")
        if callable(tensor):
            self.dense = None
            self.fn: SliceFn | None = tensor
            if third_dim is None:
                raise InputError(f"{name} is a callable slice function, so third_dim (the length p of the "
                                 "mode-3 vectors g) is required.")
            self.p = check_positive_int(third_dim, "third_dim")
            self.n: int | None = None
            self.n2: int | None = None
            self.n_calls = 0
        else:
            T = _as_real_array(tensor, name, ndim=3)
            if third_dim is not None and check_positive_int(third_dim, "third_dim") != T.shape[2]:
                raise InputError(f"third_dim={third_dim} does not match {name}.shape[2]={T.shape[2]}; "
                                 "omit third_dim for a dense tensor.")
            self.dense = T
            self.fn = None
            self.n, self.n2, self.p = T.shape
            self.n_calls = 0

    @property
    def is_dense(self) -> bool:
        return self.dense is not None

    def _call(self, g: np.ndarray) -> np.ndarray:
        assert self.fn is not None
        g = np.array(g, dtype=np.float64)  # private copy: the callee may not modify ours
        try:
            S = np.asarray(self.fn(g))
        except Exception as exc:
            raise InputError(f"the slice function {self.name} raised {type(exc).__name__}: {exc}") from exc
        self.n_calls += 1
        if S.ndim != 2:
            raise InputError(f"the slice function {self.name} must return a 2-D (n, n2) matrix, got shape "
                             f"{S.shape}.")
        if np.iscomplexobj(S):
            raise InputError(f"the slice function {self.name} returned a complex matrix; it must be real.")
        S = np.asarray(S, dtype=np.float64)
        if self.n is None:
            self.n, self.n2 = S.shape
            if min(S.shape) == 0:
                raise InputError(f"the slice function {self.name} returned an empty matrix {S.shape}.")
        elif S.shape != (self.n, self.n2):
            raise InputError(f"the slice function {self.name} returned shape {S.shape}, but earlier calls "
                             f"returned {(self.n, self.n2)}; every slice must have the same shape.")
        if not np.all(np.isfinite(S)):
            raise InputError(f"the slice function {self.name} returned NaN or infinite values.")
        return S

    def slices(self, G: np.ndarray) -> np.ndarray:
        """Slices for the rows of ``G`` (shape ``(m, p)``); returns ``(m, n, n2)``."""
        if self.dense is not None:
            return np.ascontiguousarray(np.moveaxis(np.tensordot(self.dense, G.T, axes=(2, 0)), 2, 0))
        return np.stack([self._call(g) for g in G])

    def contract12(self, U: np.ndarray, V: np.ndarray) -> np.ndarray:
        """``T(U[:, i], V[:, i], .)`` for every column ``i``; returns ``(p, r)``."""
        r = U.shape[1]
        if self.dense is not None:
            tmp = np.tensordot(U.T, self.dense, axes=(1, 0))  # (r, n2, p)
            return np.einsum("ibc,bi->ci", tmp, V)
        if self.mode3_fn is not None:
            try:
                out = np.asarray(self.mode3_fn(U.copy(), V.copy()), dtype=np.float64)
            except Exception as exc:
                raise InputError(f"mode3_fn raised {type(exc).__name__}: {exc}") from exc
            if out.shape != (self.p, r):
                raise InputError(f"mode3_fn must return shape (p, r) = {(self.p, r)}, got {out.shape}.")
            if not np.all(np.isfinite(out)):
                raise InputError("mode3_fn returned NaN or infinite values.")
            return out
        out = np.empty((self.p, r))
        e = np.zeros(self.p)
        for c in range(self.p):  # p slice calls with the basis vectors
            e[c] = 1.0
            S = self._call(e)
            e[c] = 0.0
            out[c] = np.einsum("ai,ab,bi->i", U, S, V)
        return out
