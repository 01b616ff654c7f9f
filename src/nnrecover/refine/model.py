"""The least-squares model of a network: parameter vector, residuals, Jacobian and normal equations by chunks of rows."""

from __future__ import annotations

import numpy as np

from .._validation import as_2d_float, as_targets
from ..errors import InputError
from ..network import TwoLayerNetwork

BLOCKS = ("hidden_weights", "hidden_bias", "output_weights", "output_bias")
"""Names of the parameter blocks, in the order they are stacked into the parameter vector."""


_GN_CHUNK_BYTES = 1 << 23  # largest Jacobian chunk of "gn" (8 MiB; see _chunk_rows)


_JACOBIAN_MEMORY = 1 << 28  # 256 MiB


#: rows per chunk of the losses over training rows read from the data (about 8 MB of X at d = 100)
_LOSS_CHUNK_ROWS = 1 << 13


#: mean squared residual, relative to E[y^2], below which a fit is at round-off: (64 eps)^2
_ROUNDOFF_LOSS = (64 * np.finfo(float).eps) ** 2


def _check_xy(X, Y, network: TwoLayerNetwork, name: str) -> tuple[np.ndarray, np.ndarray]:
    X = as_2d_float(X, f"{name} X", n_features=network.n_inputs)
    Y = as_targets(Y, f"{name} Y", n_rows=X.shape[0])
    if Y.ndim == 1:
        Y = Y[:, None]
    if Y.shape[1] != network.n_outputs:
        raise InputError(f"{name} Y has {Y.shape[1]} target column(s) but the network has "
                         f"{network.n_outputs} output(s).")
    return X, Y


def mean_squared_loss(network: TwoLayerNetwork, X, Y) -> float:
    """``(1/N) sum_n ||network(x_n) - y_n||^2`` (sum over outputs); NaN for zero rows."""
    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] == 0:
        return float("nan")
    X = as_2d_float(X, "X", n_features=network.n_inputs)  # predict's checks
    Y = np.asarray(Y, dtype=np.float64)
    Y = Y[:, None] if Y.ndim == 1 else Y
    return _checked_loss(network, X, Y)


def _checked_loss(network: TwoLayerNetwork, X: np.ndarray, Y: np.ndarray) -> float:
    """:func:`mean_squared_loss` of rows the library has already checked (finite float64 ``X`` with the
    network's columns, 2-D ``Y``), without ``predict``'s validation (a read of ``X``) and in blocks of
    ``_LOSS_CHUNK_ROWS`` rows, whose temporaries stay in cache (800000 rows, d = 100, k = p = 10, one
    thread: 0.20-0.50 s whole, 0.12 s in blocks)."""
    n = X.shape[0]
    if n == 0:
        return float("nan")
    total = 0.0
    for s in range(0, n, _LOSS_CHUNK_ROWS):
        R = network._forward(X[s:s + _LOSS_CHUNK_ROWS])
        R -= Y[s:s + _LOSS_CHUNK_ROWS]
        total += float(np.einsum("ij,ij->", R, R))
    return total / n


class Model:
    """Flattening of the trainable blocks and the residual / Jacobian / gradient of the loss."""

    def __init__(self, network: TwoLayerNetwork, train: tuple[str, ...]):
        self.net = network
        self.act = network.activation
        self.train = train
        self.k, self.d, self.p = network.n_hidden, network.n_inputs, network.n_outputs
        sizes = {"hidden_weights": self.k * self.d, "hidden_bias": self.k,
                 "output_weights": self.p * self.k, "output_bias": self.p}
        self.slices: dict[str, slice] = {}
        start = 0
        for name in BLOCKS:
            if name in train:
                self.slices[name] = slice(start, start + sizes[name])
                start += sizes[name]
        self.n_params = start

    def pack(self, net: TwoLayerNetwork) -> np.ndarray:
        return np.concatenate([getattr(net, name).ravel() for name in BLOCKS if name in self.train])

    def unpack(self, theta: np.ndarray):
        net = self.net
        W = theta[self.slices["hidden_weights"]].reshape(self.k, self.d) if "hidden_weights" in self.slices \
            else net.hidden_weights
        b = theta[self.slices["hidden_bias"]] if "hidden_bias" in self.slices else net.hidden_bias
        A = theta[self.slices["output_weights"]].reshape(self.p, self.k) if "output_weights" in self.slices \
            else net.output_weights
        c = theta[self.slices["output_bias"]] if "output_bias" in self.slices else net.output_bias
        return W, b, A, c

    def network(self, theta: np.ndarray) -> TwoLayerNetwork:
        W, b, A, c = self.unpack(theta)
        return TwoLayerNetwork(W.copy(), b.copy(), A.copy(), c.copy(), self.act)

    def forward(self, theta, X, Y):
        W, b, A, c = self.unpack(theta)
        Z = X @ W.T + b
        H = self.act(Z)
        R = H @ A.T + c - Y
        return W, b, A, c, Z, H, R

    def residuals(self, theta, X, Y, n_total: int | None = None) -> np.ndarray:
        """``(f(x_n) - y_n) / sqrt(N)`` flattened; ``N = n_total`` (default: the rows given)."""
        return self.forward(theta, X, Y)[-1].ravel() / np.sqrt(X.shape[0] if n_total is None else n_total)

    def jacobian(self, theta, X, Y, n_total: int | None = None, *, zero_columns: int = 0) -> np.ndarray:
        """``d residuals / d theta``, shape (n p, P): row ``n p + r`` is output ``r`` of sample ``n``.

        ``n_total`` is the ``N`` of the normalisation ``1/sqrt(N)`` (default: the rows given); a chunk of
        the rows passes the total so that the chunks stack into the Jacobian of all rows.
        ``zero_columns`` appends that many all-zero columns (inert parameters, see :func:`_minpack_lm`).
        """
        W, b, A, c = self.unpack(theta)
        n = X.shape[0]
        Z = X @ W.T + b
        J = np.zeros((n, self.p, self.n_params + zero_columns))
        if "hidden_weights" in self.slices or "hidden_bias" in self.slices:
            AG = A[None, :, :] * self.act.derivative(Z)[:, None, :]  # (n, p, k): A_ri act'(z_ni)
            if "hidden_weights" in self.slices:
                block = J[:, :, self.slices["hidden_weights"]]
                block.shape = (n, self.p, self.k, self.d)  # a view (raises rather than copy)
                np.multiply(AG[:, :, :, None], X[:, None, None, :], out=block)
            if "hidden_bias" in self.slices:
                J[:, :, self.slices["hidden_bias"]] = AG
        if "output_weights" in self.slices:
            H = self.act(Z)
            s = self.slices["output_weights"].start
            for r in range(self.p):
                J[:, r, s + r * self.k: s + (r + 1) * self.k] = H
        if "output_bias" in self.slices:
            s = self.slices["output_bias"].start
            J[:, np.arange(self.p), s + np.arange(self.p)] = 1.0
        J /= np.sqrt(n if n_total is None else n_total)
        return J.reshape(n * self.p, self.n_params + zero_columns)

    def loss_and_grad(self, theta, X, Y):
        """``(1/2N) sum ||R||^2`` and its gradient ``J^T r`` without forming ``J``."""
        W, b, A, c, Z, H, R = self.forward(theta, X, Y)
        n = X.shape[0]
        grad = np.empty(self.n_params)
        if "hidden_weights" in self.slices or "hidden_bias" in self.slices:
            D = (R @ A) * self.act.derivative(Z)  # (n, k)
            if "hidden_weights" in self.slices:
                grad[self.slices["hidden_weights"]] = (D.T @ X).ravel() / n
            if "hidden_bias" in self.slices:
                grad[self.slices["hidden_bias"]] = D.sum(axis=0) / n
        if "output_weights" in self.slices:
            grad[self.slices["output_weights"]] = (R.T @ H).ravel() / n
        if "output_bias" in self.slices:
            grad[self.slices["output_bias"]] = R.sum(axis=0) / n
        return 0.5 * float(np.sum(R * R)) / n, grad


def _check_train(train) -> tuple[str, ...]:
    if isinstance(train, str):
        train = (train,)
    try:
        names = tuple(train)
    except TypeError:
        raise InputError(f"train must be a sequence of block names from {BLOCKS}, got {train!r}.") from None
    unknown = [t for t in names if t not in BLOCKS]
    if unknown or not names:
        raise InputError(f"train must be a non-empty subset of {BLOCKS}; got {names!r}.")
    return tuple(name for name in BLOCKS if name in names)


def _check_tol(tol) -> float:
    try:
        tol = float(tol)
    except (TypeError, ValueError):
        raise InputError(f"tol must be a number, got {tol!r}.") from None
    if not (np.isfinite(tol) and tol > np.finfo(float).eps):
        raise InputError(f"tol must be a finite number > machine epsilon (2.2e-16), got {tol}.")
    return tol


def _loss_pass(model: Model, theta: np.ndarray, X: np.ndarray, Y: np.ndarray, out: np.ndarray,
               chunk_rows: int) -> np.ndarray:
    """Unnormalised residuals ``f(x_n) - y_n`` of all rows into ``out`` (n, p), in row chunks."""
    for s in range(0, X.shape[0], chunk_rows):
        out[s:s + chunk_rows] = model.forward(theta, X[s:s + chunk_rows], Y[s:s + chunk_rows])[-1]
    return out


def _gradient_pass(model: Model, theta: np.ndarray, X: np.ndarray, Y: np.ndarray, chunk_rows: int) -> np.ndarray:
    """``g = J^T r`` over all rows (the gradient of ``F``) in row chunks, without ``J^T J``: ``O(n d k)``."""
    n = X.shape[0]
    g = np.zeros(model.n_params)
    for s in range(0, n, chunk_rows):
        Xc = X[s:s + chunk_rows]
        g += Xc.shape[0] * model.loss_and_grad(theta, Xc, Y[s:s + chunk_rows])[1]
    return g / n


def _normal_equations(model: Model, theta: np.ndarray, X: np.ndarray, Y: np.ndarray, R: np.ndarray,
                      chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``J^T J`` and ``g = J^T r`` over all rows, accumulated from the Jacobian's structure in row chunks.

    ``J`` and ``r = R / sqrt(n)`` are those of :meth:`Model.jacobian` / :meth:`Model.residuals` on all
    ``n`` rows; ``R`` holds the residuals at ``theta``. The rows of ``J`` for output ``r`` are
    ``[A_ri e_n, delta_rr' h_n, delta_rr']`` with ``e_n = (act'(z_n) (x) x_n, act'(z_n))`` (the hidden
    columns, unit ``u(col)``) and ``h_n = act(z_n)``. Summing over outputs first,

        J_hid^T J_hid = (sum_n e_n e_n^T) * (A^T A)[u, u],   J_hid^T J_A = (sum_n e_n h_n^T) (x) A[:, u]^T,
        J_A^T J_A = I_p (x) sum_n h_n h_n^T,                 J_c^T J_c = n I_p,  ...

    so one pass costs ``O(n (k (d + 1))^2)`` whatever the number of outputs ``p`` (the dense Jacobian
    costs ``p`` times more), and memory is one chunk of ``e`` (``chunk_rows k (d + 1)`` doubles). From
    ``UNIT_PAIR_MIN_INPUTS`` inputs the hidden block is summed by unit pairs instead
    (:func:`unit_pair_sums`: half the flops, a sixth for ReLU) and ``e`` is never formed: memory is then
    chunks of ``x`` of at most 8 MiB and the ``k^2`` blocks of ``(d + 1)^2``.
    """
    sums = normal_sums(model, theta, X, R, chunk_rows)
    n, k, p = X.shape[0], model.k, model.p
    A, u, nE = sums["A"], sums["u"], sums["u"].size
    EH, Es, HH, Hs = sums["EH"], sums["Es"], sums["HH"], sums["Hs"]
    sl = model.slices
    blocks: dict[str, np.ndarray] = {}
    Au = A[:, u]  # (p, nE): A_{r, u(col)}
    Ip = np.eye(p)
    hid = {"hid": sums["hid"],
           "output_weights": (Au.T[:, :, None] * EH[:, None, :]).reshape(nE, p * k),
           "output_bias": Es[:, None] * Au.T}
    ow = {"output_weights": np.kron(Ip, HH), "output_bias": np.kron(Ip, Hs[:, None])}
    names = [name for name in ("output_weights", "output_bias") if name in sl]
    parts = (["hid"] if nE else []) + names
    for i, a in enumerate(parts):
        for bname in parts[i:]:
            if a == "hid":
                blk = hid["hid"] if bname == "hid" else hid[bname]
            elif a == "output_weights":
                blk = ow["output_weights"] if bname == "output_weights" else ow["output_bias"]
            else:
                blk = n * Ip
            blocks[a, bname] = blk
    # laid out block by block into one array, divided by n on the way (np.block and a division would write
    # the (P, P) array twice more: 0.35 s of 1.25 s for the 5100 coordinates at k = p = 50)
    sizes = [blocks[a, a].shape[0] for a in parts]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    JtJ = np.empty((offsets[-1], offsets[-1]))
    for i, a in enumerate(parts):
        for j, bname in enumerate(parts):
            blk = blocks[a, bname] if (a, bname) in blocks else blocks[bname, a].T
            np.divide(blk, n, out=JtJ[offsets[i]:offsets[i + 1], offsets[j]:offsets[j + 1]])
    g = np.concatenate([sums["grads"][name] for name in BLOCKS if name in sl]) / n
    return JtJ, g


def normal_sums(model: Model, theta: np.ndarray, X: np.ndarray, R: np.ndarray, chunk_rows: int) -> dict:
    """The sums behind :func:`_normal_equations` (its docstring): ``hid`` = ``J_hid^T J_hid`` (the hidden
    columns ``e_n``, unit ``u(col)``, times ``(A^T A)[u, u]``), ``EH`` = ``sum e h^T``, ``Es`` = ``sum e``,
    ``HH`` = ``sum h h^T``, ``Hs`` = ``sum h``, the unscaled gradient blocks ``grads`` (``J^T R``), ``u``,
    ``A`` and ``n``; nothing of size ``P x P`` beyond the hidden block."""
    n, k, d, p = X.shape[0], model.k, model.d, model.p
    W, b, A, c = model.unpack(theta)
    sl = model.slices
    hw, hb = "hidden_weights" in sl, "hidden_bias" in sl
    u = np.concatenate([np.repeat(np.arange(k), d) if hw else np.empty(0, dtype=np.int64),
                        np.arange(k) if hb else np.empty(0, dtype=np.int64)]).astype(np.int64)
    nE = u.size
    EE, EH, Es = np.zeros((nE, nE)), np.zeros((nE, k)), np.zeros(nE)
    HH, Hs = np.zeros((k, k)), np.zeros(k)
    gW, gb, gA, gc = np.zeros((k, d)), np.zeros(k), np.zeros((p, k)), np.zeros(p)
    unit_pairs = hw and d >= UNIT_PAIR_MIN_INPUTS
    if unit_pairs:
        # the hidden block by unit pairs (see unit_pair_sums): no chunk of e_n, chunks of x only
        d1 = d + hb
        # per row: x~, Z, H, G and one unit's G_i H (no k^2 products per row, which at d1 = k = 50, the span
        # block of the matrix-free solver, would leave chunks of 388 rows and 1275 pair products on each)
        chunk_rows = max(1, _GN_CHUNK_BYTES // (8 * (d1 + 4 * k)))
        M = np.zeros((k, k, d1, d1))
        XG, XGH = np.zeros((d1, k)), np.zeros((d1, k * k))
    for s in range(0, n, chunk_rows):
        Xc, Rc = X[s:s + chunk_rows], R[s:s + chunk_rows]
        Z = Xc @ W.T + b
        H = model.act(Z)
        if unit_pairs:
            G = model.act.derivative(Z)
            Xt = np.hstack([Xc, np.ones((Xc.shape[0], 1))]) if hb else Xc
            unit_pair_sums(M, Xt, G)
            XG += Xt.T @ G
            for i in range(k):
                XGH[:, i * k:(i + 1) * k] += Xt.T @ (H * G[:, i:i + 1])
            D = (Rc @ A) * G
            gW += D.T @ Xc
            gb += D.sum(axis=0)
        elif nE:
            G = model.act.derivative(Z)
            E = np.empty((Xc.shape[0], nE))
            if hw:
                block = E[:, :k * d]
                block.shape = (Xc.shape[0], k, d)  # a view (raises rather than copy)
                np.multiply(G[:, :, None], Xc[:, None, :], out=block)
            if hb:
                E[:, nE - k:] = G
            EE += E.T @ E
            EH += E.T @ H
            Es += E.sum(axis=0)
            D = (Rc @ A) * G
            gW += D.T @ Xc
            gb += D.sum(axis=0)
        HH += H.T @ H
        Hs += H.sum(axis=0)
        gA += Rc.T @ H
        gc += Rc.sum(axis=0)
    if unit_pairs:
        # e_n = (g_n (x) x_n, g_n): sum e e^T has block (i r, j s) = M[i, j, r, s], the bias columns are the
        # last coordinate of x~ = (x, 1); sum e h^T and sum e from the sums of x~ g^T and x~ (g (x) h)^T
        ij = np.triu_indices(k, 1)
        M[ij[1], ij[0]] = M[ij]
        # J_hid^T J_hid = EE * (A^T A)[u, u]: scaled here block by block, then laid out with one copy
        M *= (A.T @ A)[:, :, None, None]
        EE[:k * d, :k * d] = M[:, :, :d, :d].transpose(0, 2, 1, 3).reshape(k * d, k * d)
        T = XGH.reshape(d1, k, k).transpose(1, 0, 2)  # (unit i, coordinate r, unit j)
        EH[:k * d] = T[:, :d].reshape(k * d, k)
        Es[:k * d] = XG[:d].T.reshape(k * d)
        if hb:
            EE[:k * d, k * d:] = M[:, :, :d, d].transpose(0, 2, 1).reshape(k * d, k)
            EE[k * d:, :k * d] = EE[:k * d, k * d:].T
            EE[k * d:, k * d:] = M[:, :, d, d]
            EH[k * d:] = T[:, d]
            Es[k * d:] = XG[d]
        del M  # (k d1)^2 doubles: freed before J^T J is laid out
    return {"n": n, "u": u, "A": A, "hid": EE if unit_pairs else EE * (A.T @ A)[np.ix_(u, u)],
            "EH": EH, "Es": Es, "HH": HH, "Hs": Hs,
            "grads": {"hidden_weights": gW.ravel(), "hidden_bias": gb, "output_weights": gA.ravel(), "output_bias": gc}}


#: inputs from which :func:`_normal_equations` sums the hidden block by unit pairs (:func:`unit_pair_sums`);
#: below, the ``k (k + 1) / 2`` products per chunk cost more in calls than they save in flops
UNIT_PAIR_MIN_INPUTS = 24


def unit_pair_sums(M: np.ndarray, Xt: np.ndarray, G: np.ndarray) -> None:
    """Add ``sum_n g_ni g_nj x~_n x~_n^T`` to ``M[i, j]`` for every pair ``i <= j`` of units.

    The hidden block of ``J^T J`` is ``sum_n (g_n (x) x~_n)(g_n (x) x~_n)^T``, whose block ``(i, j)`` is
    this symmetric ``d1 x d1`` matrix. As one product over the ``k d1`` columns it costs ``n (k d1)^2 / 2``
    multiply-adds; by pairs, ``k (k + 1) / 2`` symmetric products of ``d1`` columns cost half that, and only
    over the rows where ``g_ni g_nj != 0``: for ReLU (``g`` in {0, 1}) a unit is active on about half the
    rows, two units on about a quarter, a sixth of the flops in all (``O(n (k d)^2 / 12)``). Derivatives
    outside {0, 1} (smooth activations): the rows scaled by ``sqrt(g_i g_j)`` (by ``g_i g_j`` on one side
    when that is negative somewhere).
    """
    k = G.shape[1]
    if np.all((G == 0.0) | (G == 1.0)):
        active = G != 0.0
        for i in range(k):
            rows = np.flatnonzero(active[:, i])
            Xi, Ai = Xt[rows], active[rows]
            M[i, i] += Xi.T @ Xi
            for j in range(i + 1, k):
                Xij = Xi[Ai[:, j]]
                M[i, j] += Xij.T @ Xij
        return
    for i in range(k):
        for j in range(i, k):
            w = G[:, i] * G[:, j]
            rows = np.flatnonzero(w)
            Xr, w = Xt[rows], w[rows]
            if np.all(w > 0):
                Xw = Xr * np.sqrt(w)[:, None]
                M[i, j] += Xw.T @ Xw
            else:
                P = (Xr * w[:, None]).T @ Xr
                M[i, j] += (P + P.T) / 2


def _gn_row_bytes(model: Model) -> int:
    """Bytes per row of a ``"gn"`` chunk: the hidden columns ``e_n`` (``k (d + 1)``) and ``act(z_n)``."""
    return 8 * (model.k * (model.d + 2) + model.p)


def _chunk_rows(jacobian_memory: int, model: Model) -> tuple[int, int]:
    """Rows per Jacobian chunk and per loss chunk of ``"gn"``.

    A Jacobian chunk holds the hidden columns ``e_n`` of :func:`_normal_equations` (``k (d + 2) + p`` doubles
    per row) and stays within ``min(jacobian_memory, 8 MiB)``: the
    budget is a ceiling, and chunks that fit in cache accumulate ``J^T J`` faster (measured with one BLAS
    thread, d = 10, k = 5, 8e5 rows: 0.13 s per pass with 4-8 MiB chunks, 1.3 s with one 256 MiB chunk).
    A loss chunk holds ``W x + b``, its activation and the residuals (``2 k + 2 p`` doubles per row).
    """
    budget = min(jacobian_memory, _GN_CHUNK_BYTES)
    return (max(1, int(budget // _gn_row_bytes(model))),
            max(1, int(budget // (8 * (2 * model.k + 2 * model.p)))))
