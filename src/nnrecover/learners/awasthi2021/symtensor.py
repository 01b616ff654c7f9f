"""Small dense symmetric tensors for the Awasthi-Tang-Vijayaraghavan learner (internal).

The learner never forms an order-k tensor in the input dimension ``d`` when ``d`` is large: for
order ``l = 1`` every tensor lives in the ``m``-dimensional span of the hidden weights (range of
``T_2``), for ``l = 2`` in the (small) input space itself. In those small spaces dense tensors of
order ``<= 2l + 2`` are cheap (``m**4`` or ``d**6`` entries) and make every later step -- Jennrich
slices, rank-one contractions, Gram least squares, split-sample noise estimates -- a matter of
reshapes, with no further pass over the data.

Symbols (Definition A.2 and eq. (6)):

* raw moment ``S_r = (1/N) sum_n y_n z_n^{(x) r}``, stored packed over multisets (monomials)
  while accumulating and unpacked here;
* Hermite tensor ``T_k = sum_j (-1)^j sum_{j-matchings M} I^{(x) j} (x) S_{k-2j}`` (the matching /
  Wick form of Definition A.2), assembled by :func:`nnrecover.hermite.assemble_hermite_tensor`.
"""

from __future__ import annotations

import itertools

import numpy as np

from ...errors import InputError
from ...hermite import assemble_hermite_tensor

__all__ = ["rank_one_sum", "contract_rank_one", "Monomials", "hermite_from_raw"]


def hermite_from_raw(raw: dict[int, np.ndarray], k: int) -> np.ndarray:
    """``T_k`` (dense ``n**k``) from dense raw moments ``S_r = E[y z^{(x) r}]``, ``r = k, k-2, ...``
    (matching form of Definition A.2, via :func:`nnrecover.hermite.assemble_hermite_tensor`)."""
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
    """Packed monomial features ``z^alpha`` of degree ``<= top`` in ``n`` variables, and two ways to
    accumulate the weighted raw moments ``S_r = sum_n y_n z_n^{(x) r}``, ``r <= 2 top``, from them.

    Degree-``r`` monomials are the multisets ``i_1 <= ... <= i_r`` (``C(n+r-1, r)`` of them) in
    lexicographic order; ``F`` holds those of degree ``0..top`` (``size`` columns).

    * Dense reference, :meth:`weighted_gram` and :meth:`unpack`: the Gram matrix ``F^T diag(y) F``.
      A raw moment entry of order ``r`` is read from its block (degree ``r - r1``, degree ``r1``),
      ``r1 = min(r, top)``: the first ``r1`` sorted indices give the column monomial, the rest the row
      monomial. Every distinct moment of degree ``> top`` appears there several times (``55 x 55``
      entries for the ``715`` moments of degree 4 in 10 variables).
    * Streaming path, :meth:`new_moment_sums`, :meth:`add_moment_sums` and :meth:`raw_moment`: every
      distinct moment exactly once. Degrees ``<= top``: ``F^T y``. Degree ``s > top``: the sorted
      multiset ``mu`` splits as ``(alpha, g | beta)`` with ``g = mu_{s - top}`` the last index of the
      first ``s - top`` and ``beta`` the last ``top`` indices (all ``>= g``); grouping by ``g``, the
      sums are one small GEMM per variable ``g``:

          rows  y z_g z^alpha,  alpha of degree <= top - 1 with indices <= g,
          cols  z^beta,         beta of degree top with first index >= g (a tail of F's top block),

      so each ``(alpha, g, beta)`` is one multiset, once. For ``n = 10, top = 2`` that is ``~2000``
      flops per sample instead of ``~7300`` for the Gram blocks: faster than
      :meth:`weighted_gram` on 4096-sample blocks, features included, and than symmetric rank-k updates of the Gram matrix (which also need the samples split by
      the sign of ``y``).
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
        self._raw_index: dict[int, np.ndarray] = {}
        self._build_groups()

    def _build_groups(self) -> None:
        """Layout of :meth:`add_moment_sums`: per variable ``g`` the feature rows ``z^alpha`` (degree
        ``<= top - 1``, indices ``<= g``), the first column of the tail of the top-degree block
        (first index ``>= g``) and the offset of the group's block in the flat accumulator."""
        top, n = self.top, self.n
        self._group_rows, self._group_tail, self._group_off, self._group_pos = [], [], [], []
        off = self.size  # the flat accumulator starts with F^T y (degrees <= top)
        n_top = len(self.combos[top]) if top else 0
        for g in range(n if top else 0):
            alphas = [c for j in range(top) for c in self.combos[j] if not c or c[-1] <= g]
            rows = np.array([self.offsets[len(c)] + self.index[len(c)][c] for c in alphas], dtype=np.intp)
            if rows.size and np.array_equal(rows, np.arange(rows[0], rows[0] + rows.size)):
                rows = slice(int(rows[0]), int(rows[0]) + rows.size)  # contiguous (e.g. top = 2)
            tail = self.index[top][(g,) * top]
            self._group_rows.append(rows)
            self._group_tail.append(tail)
            self._group_off.append(off)
            self._group_pos.append({c: i for i, c in enumerate(alphas)})
            off += len(alphas) * (n_top - tail)
        self.n_sums = int(off)
        self._max_group_rows = max((len(p) for p in self._group_pos), default=0)

    def features(self, Z: np.ndarray) -> np.ndarray:
        """``F^T`` of shape ``(size, N)``: all monomials of degree ``0..top`` of the rows of ``Z``
        (shape ``(N, n)``), one monomial per row."""
        return self.features_of_columns(np.ascontiguousarray(Z.T))

    def features_of_columns(self, Zt: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """``F^T`` of shape ``(size, N)`` from ``Zt`` of shape ``(n, N)`` (one sample per column, as the
        projection ``P^T X^T`` comes out of BLAS): contiguous block products, no gathers. ``out``: a
        ``(size, N)`` array to write them into (a reused buffer)."""
        N = Zt.shape[1]
        Ft = np.empty((self.size, N)) if out is None else out
        if Ft.shape != (self.size, N):
            raise InputError(f"out must have shape ({self.size}, {N}), got {Ft.shape}.")
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
        transposed features ``Ft`` of :meth:`features` (dense reference of :meth:`add_moment_sums`)."""
        p, lo = self.size, int(self.offsets[self.top])
        G = np.zeros((p, p))
        Fy = Ft * y
        G[:, lo:] = Fy @ Ft[lo:].T
        if lo:
            G[:lo, :lo] = Fy[:lo] @ Ft[:lo].T
        return G

    def new_moment_sums(self) -> np.ndarray:
        """A zero accumulator for :meth:`add_moment_sums` (``n_sums`` entries)."""
        return np.zeros(self.n_sums)

    def add_moment_sums(self, acc: np.ndarray, Zt: np.ndarray, w: np.ndarray,
                        workspace: dict | None = None) -> np.ndarray:
        """Add ``sum_n w_n z_n^mu`` for every multiset ``mu`` of degree ``<= 2 top`` (each once) to the
        flat accumulator ``acc`` in place; the samples ``z_n`` are the columns of ``Zt``.

        Parameters
        ----------
        acc : (n_sums,) float64 array
            From :meth:`new_moment_sums`; read with :meth:`raw_moment`.
        Zt : (n, N) array
            One sample per column (rows may be strided views; a few thousand columns keep the
            features in cache).
        w : (N,) array
            Weights, any sign.
        workspace : dict, optional
            Scratch arrays kept by the caller between calls (start with ``{}``; one per thread): the
            features and products of a block are then written into buffers allocated once: a fresh
            block of a few MiB per call costs its page faults (benchmarks/README.md, "randomized range
            of T_2", "reused block buffers").

        Returns
        -------
        acc
        """
        if acc.shape != (self.n_sums,):
            raise InputError(f"acc must have shape ({self.n_sums},) (use new_moment_sums()), got {acc.shape}.")
        if Zt.shape[0] != self.n or w.shape != (Zt.shape[1],):
            raise InputError(f"Zt must have shape ({self.n}, N) and w shape (N,); got {Zt.shape} and {w.shape}.")
        cols = Zt.shape[1]
        if workspace is None:
            ft_buf, buf = None, np.empty((self._max_group_rows, cols))
        else:
            if workspace.get("columns", -1) < cols:
                workspace.update(columns=cols, features=np.empty((self.size, cols)),
                                 rows=np.empty((self._max_group_rows, cols)))
            ft_buf, buf = workspace["features"][:, :cols], workspace["rows"][:, :cols]
        Ft = self.features_of_columns(Zt, out=ft_buf)
        acc[:self.size] += Ft @ w
        if not self._group_rows:
            return acc
        Ftop = Ft[self.offsets[self.top]:]
        for g, rows in enumerate(self._group_rows):
            wz = w * Zt[g]
            k = len(self._group_pos[g])
            R = buf[:k]
            if isinstance(rows, slice):
                np.multiply(Ft[rows], wz, out=R)
            else:
                np.take(Ft, rows, axis=0, out=R)
                R *= wz
            block = R @ Ftop[self._group_tail[g]:].T  # (k, cols): small rows, long inner dimension
            off = self._group_off[g]
            acc[off:off + block.size] += block.ravel()
        return acc

    def raw_moment(self, acc: np.ndarray, r: int) -> np.ndarray:
        """Dense symmetric ``sum_n w_n z_n^{(x) r}`` (``n**r``) from an accumulator of
        :meth:`add_moment_sums` (``r <= 2 top``)."""
        if not 0 <= r <= 2 * self.top:
            raise InputError(f"r must be between 0 and {2 * self.top}, got {r}.")
        if r not in self._raw_index:
            self._raw_index[r] = self._build_raw_index(r)
        return acc[self._raw_index[r]].reshape((self.n,) * r)

    def _build_raw_index(self, r: int) -> np.ndarray:
        """Position in the flat accumulator of every entry of the dense ``n**r`` moment."""
        n, top = self.n, self.top
        if r == 0:
            return np.zeros(1, dtype=np.intp)
        grid = np.sort(np.indices((n,) * r).reshape(r, -1).T, axis=1)
        keys = grid @ (n ** np.arange(r - 1, -1, -1))
        uniq, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        pos = np.empty(uniq.size, dtype=np.intp)
        for u, i in enumerate(first):
            mu = tuple(int(v) for v in grid[i])
            if r <= top:
                pos[u] = self.offsets[r] + self.index[r][mu]
            else:
                j = r - top  # row degree, including z_g
                g = mu[j - 1]
                ncols = len(self.combos[top]) - self._group_tail[g]
                col = self.index[top][mu[j:]] - self._group_tail[g]
                pos[u] = self._group_off[g] + self._group_pos[g][mu[:j - 1]] * ncols + col
        return pos[inverse.reshape(-1)]

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
