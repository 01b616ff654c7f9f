"""Small dense symmetric tensors for the Awasthi-Tang-Vijayaraghavan learner (internal).

The learner never forms an order-k tensor in the input dimension ``d`` when ``d`` is large: for
order ``l = 1`` every tensor lives in the ``m``-dimensional span of the hidden weights (range of
``T_2``), for ``l = 2`` in the (small) input space itself. In those small spaces dense tensors of
order ``<= 2l + 2`` are cheap (``m**4`` or ``d**6`` entries) and make every later step -- Jennrich
slices, rank-one contractions, Gram least squares, split-sample noise estimates -- a matter of
reshapes, with no further pass over the data.

Symbols (specs/001 sections 2.2 and 2.5):

* raw moment ``S_r = (1/N) sum_n y_n z_n^{(x) r}``, stored packed over multisets (monomials)
  while accumulating and unpacked here;
* Hermite tensor ``T_k = sum_j (-1)^j sum_{j-matchings M} I^{(x) j} (x) S_{k-2j}`` (the matching /
  Wick form, specs/001 section 2.2 form 2), assembled by :func:`nnrecover.hermite.assemble_hermite_tensor`.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...hermite import assemble_hermite_tensor

__all__ = ["rank_one_sum", "contract_rank_one", "Monomials", "hermite_from_raw"]


def hermite_from_raw(raw: dict[int, np.ndarray], k: int) -> np.ndarray:
    """``T_k`` (dense ``n**k``) from dense raw moments ``S_r = E[y z^{(x) r}]``, ``r = k, k-2, ...``
    (matching form of specs/001 section 2.2, via :func:`nnrecover.hermite.assemble_hermite_tensor`)."""
    if k == 0:
        return np.asarray(raw[0], dtype=np.float64).copy()
    return assemble_hermite_tensor({r: raw[r] for r in range(k, -1, -2)}, k)


def rank_one_sum(coef: np.ndarray, U: np.ndarray, k: int) -> np.ndarray:
    """``sum_i coef_i u_i^{(x) k}`` for the rows ``u_i`` of ``U`` (shape ``(m, n)``); dense ``n**k``."""
    U = np.asarray(U, dtype=np.float64)
    coef = np.asarray(coef, dtype=np.float64)
    if k == 0:
        return np.asarray(coef.sum())
    cur = coef[:, None] * U  # (m, n)
    for _ in range(k - 1):
        cur = (cur[:, :, None] * U[:, None, :]).reshape(U.shape[0], -1)
    n = U.shape[1]
    return cur.sum(axis=0).reshape((n,) * k)


def contract_rank_one(T: np.ndarray, U: np.ndarray) -> np.ndarray:
    """``T(u_i, ..., u_i)`` for every row ``u_i`` of ``U``; ``T`` dense symmetric of order ``k``."""
    U = np.atleast_2d(np.asarray(U, dtype=np.float64))
    k = T.ndim
    if k == 0:
        return np.full(U.shape[0], float(T))
    n = U.shape[1]
    cur = T.reshape(-1, n) @ U.T  # (n^{k-1}, m)
    for r in range(k - 1, 0, -1):
        cur = np.einsum("pam,ma->pm", cur.reshape(n ** (r - 1), n, -1), U)
    return cur.reshape(-1)


class Monomials:
    """Packed monomial features ``z^alpha`` of degree ``<= top`` in ``n`` variables, and the maps that
    unpack the weighted Gram matrix ``F^T diag(y) F`` of those features into dense raw moments ``S_r``.

    Degree-``r`` monomials are the multisets ``i_1 <= ... <= i_r`` (``C(n+r-1, r)`` of them) in
    lexicographic order. A raw moment entry of order ``r <= 2 top`` is read from the Gram block
    (degree ``r - r1``, degree ``r1``) with ``r1 = min(r, top)``: the first ``r1`` sorted indices give
    the column monomial, the rest the row monomial. Only the blocks that are read are computed
    (:meth:`weighted_gram`): every row against the top degree, and the lower degrees among themselves.
    """

    def __init__(self, n: int, top: int):
        self.n, self.top = int(n), int(top)
        self.combos = [list(itertools.combinations_with_replacement(range(self.n), r))
                       for r in range(self.top + 1)]
        self.index = [{c: i for i, c in enumerate(cs)} for cs in self.combos]
        self.offsets = np.cumsum([0] + [len(cs) for cs in self.combos])
        self.size = int(self.offsets[-1])
        # lexicographic order: degree-r monomials with first index i are z_i times the tail of the
        # degree-(r-1) list that starts at its first monomial with first index >= i
        self._tails = [None]
        for r in range(1, self.top + 1):
            prev = self.combos[r - 1]
            self._tails.append([next((j for j, c in enumerate(prev) if not c or c[0] >= i), len(prev))
                                if r > 1 else 0 for i in range(self.n)])
        self._unpack: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def features(self, Z: np.ndarray) -> np.ndarray:
        """``F^T`` of shape ``(size, N)``: all monomials of degree ``0..top`` of the rows of ``Z``, one
        monomial per row (contiguous block products, no gathers)."""
        N = Z.shape[0]
        Zt = np.ascontiguousarray(Z.T)
        Ft = np.empty((self.size, N))
        Ft[0] = 1.0
        for r in range(1, self.top + 1):
            plo, phi = self.offsets[r - 1], self.offsets[r]
            row = self.offsets[r]
            for i in range(self.n):
                src = Ft[plo + self._tails[r][i]:phi]
                np.multiply(Zt[i], src, out=Ft[row:row + src.shape[0]])
                row += src.shape[0]
        return Ft

    def weighted_gram(self, Ft: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The blocks of ``F^T diag(y) F`` that :meth:`unpack` reads (others left at zero), from the
        transposed features ``Ft`` of :meth:`features`."""
        p, lo = self.size, int(self.offsets[self.top])
        G = np.zeros((p, p))
        Fy = Ft * y
        G[:, lo:] = Fy @ Ft[lo:].T
        if lo:
            G[:lo, :lo] = Fy[:lo] @ Ft[:lo].T
        return G

    def unpack(self, gram: np.ndarray, r: int) -> np.ndarray:
        """Dense symmetric ``S_r`` (``n**r``) from the weighted Gram matrix (``r <= 2 top``)."""
        if r not in self._unpack:
            r1 = min(r, self.top)
            r2 = r - r1
            grid = np.indices((self.n,) * r).reshape(r, -1).T if r else np.zeros((1, 0), dtype=int)
            srt = np.sort(grid, axis=1)
            cols = np.array([self.offsets[r1] + self.index[r1][tuple(s[:r1])] for s in srt], dtype=np.intp)
            rows = np.array([self.offsets[r2] + self.index[r2][tuple(s[r1:])] for s in srt], dtype=np.intp)
            self._unpack[r] = (rows, cols)
        rows, cols = self._unpack[r]
        return gram[rows, cols].reshape((self.n,) * r)
