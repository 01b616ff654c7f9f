"""Shared local refinement: polish any network estimate by nonlinear least squares on samples.

Every learner built on a provable algorithm can finish with this step (``refine=True``), and the
gradient-descent baseline is nothing but random starts followed by it. The provable algorithms give a
start inside the basin of the true parameters; local optimisation then removes the estimation error
that the moment-based method leaves (for noiseless data, down to round-off). This is the "optional
refinement" of specs/001 section 6.1 item 3 and the local-convergence regime of Awasthi et al.
Appendix B (Prop. B.1: the population squared loss is a sum of tensor-decomposition objectives), applied
on the empirical loss.

Objective. For the network ``f(x) = A act(W x + b) + c`` and samples ``(x_n, y_n)``, n = 1..N,

    L(theta) = (1/N) sum_n ||f(x_n) - y_n||^2          (mean over rows, sum over outputs)

over the trainable blocks ``theta`` (any subset of ``hidden_weights W``, ``hidden_bias b``,
``output_weights A``, ``output_bias c``). Analytic Jacobian, with ``z = W x + b``:

    d f_r / d W_ij = A_ri act'(z_i) x_j,   d f_r / d b_i = A_ri act'(z_i),
    d f_r / d A_ri = act(z_i),             d f_r / d c_r = 1.

``act'`` is :meth:`nnrecover.Activation.derivative`; at a kink (ReLU at 0) it is one of the one-sided
derivatives. The loss is piecewise smooth, the kink sets ``{x : w_i.x + b_i = 0}`` have measure zero,
so the Jacobian is correct almost surely and Gauss-Newton converges locally (quadratically on
noiseless data: the residual vanishes at the truth).

Methods.

* ``"lm"``: Levenberg-Marquardt, :func:`scipy.optimize.least_squares` (MINPACK ``lmder``) with the
  analytic Jacobian. The tool for round-off convergence (``tol`` ~ 1e-15). Needs the dense Jacobian,
  ``(N p) x P`` doubles (``P`` trainable parameters): rows are capped so that it stays below
  ``jacobian_memory`` bytes (MINPACK keeps one more copy), and at least as many residuals as parameters.
* ``"trf"``: trust-region reflective least squares with the same dense Jacobian; also works with fewer
  residuals than parameters.
* ``"lbfgs"``: :func:`scipy.optimize.minimize` (``L-BFGS-B``) with the analytic gradient
  ``J^T r``, computed without forming ``J``: memory ``O(N k)``. For large networks.
* ``"auto"`` (default): ``"lm"`` when its Jacobian fits the memory budget with at least ``4 P`` rows,
  else ``"lbfgs"``.

Data. ``data`` is anything :func:`nnrecover.moments.engine.as_data_source` accepts: ``(X, Y)`` arrays
(numpy, memory maps, dask), an iterable of ``(X, Y)`` chunks (:class:`nnrecover.SampleStream`), a
one-pass iterator. :func:`gather_samples` reads it once in chunks and keeps a uniformly random subset of
at most ``max_samples`` rows (priority sampling: every row gets a uniform key from ``rng``, the rows with
the smallest keys are kept), so memory is ``O((max_samples + chunk) (d + p))`` for any ``N``. The keys
are drawn row by row in data order, so the subset does not depend on how the data are chunked.

Keeping the better. The gathered rows are split into a training part and a held-out part
(``holdout_fraction``, or explicit ``validation_data``). The optimiser sees only the training part; the
result keeps whichever of ``{start, refined}`` has the smaller held-out loss (``kept``), so refinement
never makes an estimate worse on fresh data, e.g. when a few noisy samples let it overfit. Everything
it did is recorded in :class:`RefineResult` (``as_dict()`` for ``diagnostics_``).

API: :func:`refine_network` (the pipeline), :func:`gather_samples`, :func:`fit_least_squares` (the
optimiser on in-memory arrays, no split), :func:`mean_squared_loss`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from scipy import optimize

from ._validation import as_2d_float, as_targets, check_positive_int, check_random_state
from .errors import InputError
from .network import TwoLayerNetwork

__all__ = ["refine_network", "RefineResult", "gather_samples", "fit_least_squares", "mean_squared_loss",
           "BLOCKS", "METHODS"]

BLOCKS = ("hidden_weights", "hidden_bias", "output_weights", "output_bias")
"""Names of the parameter blocks, in the order they are stacked into the parameter vector."""

METHODS = ("auto", "lm", "trf", "lbfgs")

_DEFAULT_MAX_ITER = {"lm": 200, "trf": 200, "lbfgs": 5000}
_JACOBIAN_MEMORY = 1 << 28  # 256 MiB


# =========================================================================== results

@dataclass
class RefineResult:
    """What :func:`refine_network` did.

    Attributes
    ----------
    network : TwoLayerNetwork
        The kept network (``start`` or ``refined``).
    start, refined : TwoLayerNetwork
        The input network and the optimiser's output.
    kept : {"start", "refined"}
        Which of the two had the smaller held-out loss (ties keep ``refined``).
    improved : bool
        ``kept == "refined"`` and the held-out loss strictly decreased.
    train_loss_start, train_loss_refined : float
        Mean squared loss on the rows the optimiser used.
    holdout_loss_start, holdout_loss_refined : float
        Mean squared loss on the held-out rows (NaN when there are none; the comparison then uses the
        training loss).
    n_iter : int
        Function evaluations (least squares) or iterations (L-BFGS).
    n_samples_seen, n_samples_used, n_holdout : int
        Rows read from the data, rows the optimiser used, held-out rows.
    method : str
        The optimiser that ran (``"lm"``, ``"trf"`` or ``"lbfgs"``); ``requested_method`` is the argument.
    success : bool
        The optimiser's own convergence flag; ``status``/``message`` are its report.
    trained : tuple of str
        The parameter blocks that were optimised.
    time : float
        Wall-clock seconds of the whole call.
    """

    network: TwoLayerNetwork
    start: TwoLayerNetwork
    refined: TwoLayerNetwork
    kept: str
    improved: bool
    train_loss_start: float
    train_loss_refined: float
    holdout_loss_start: float
    holdout_loss_refined: float
    n_iter: int
    n_samples_seen: int
    n_samples_used: int
    n_holdout: int
    method: str
    requested_method: str
    success: bool
    status: int
    message: str
    trained: tuple
    time: float
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """The record without the networks (plain Python types; for ``diagnostics_``)."""
        out = {k: getattr(self, k) for k in (
            "kept", "improved", "train_loss_start", "train_loss_refined", "holdout_loss_start",
            "holdout_loss_refined", "n_iter", "n_samples_seen", "n_samples_used", "n_holdout", "method",
            "requested_method", "success", "status", "message", "time")}
        out["trained"] = list(self.trained)
        out["ran"] = True
        out.update(self.extra)
        return out


# =========================================================================== data

def gather_samples(data: Any, max_samples: int = 200_000, *, rng=None, chunk_size: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray, int]:
    """A uniformly random subset of at most ``max_samples`` rows of a data source, in bounded memory.

    Priority sampling: each row gets a key ``U(0, 1)`` drawn from ``rng`` in data order; the rows with
    the ``max_samples`` smallest keys are kept (a uniform sample without replacement), returned in
    their original order. One pass; memory ``O((max_samples + chunk) (d + p))``.

    Parameters
    ----------
    data : data source
        ``(X, Y)`` arrays (numpy, memmap, dask), an iterable of ``(X, Y)`` chunks, a one-pass
        iterator, or a :class:`nnrecover.moments.engine.DataSource`. Targets are required.
    max_samples : int, default 200_000
    rng : int, Generator or None
    chunk_size : int, optional
        Rows per chunk when reading arrays.

    Returns
    -------
    X : (m, d) array
    Y : (m, p) array (2-D)
    n_seen : int
        Rows in the data.
    """
    from .moments.engine import as_data_source

    max_samples = check_positive_int(max_samples, "max_samples")
    gen = check_random_state(rng)
    source = as_data_source(data)
    source.require_targets("refinement")
    keep_key = np.empty(0)
    keep_idx = np.empty(0, dtype=np.int64)
    Xr = Yr = None
    seen = 0
    for X, Y in source.chunks(chunk_size=chunk_size, progress=False):
        if Y.shape[1] == 0:
            raise InputError("refinement needs targets Y; the data have none.")
        m = X.shape[0]
        keys = gen.random(m)
        idx = np.arange(seen, seen + m, dtype=np.int64)
        seen += m
        if keep_key.size >= max_samples:  # only rows that beat the current threshold can enter
            sel = keys < keep_key.max()
            if not np.any(sel):
                continue
            X, Y, keys, idx = X[sel], Y[sel], keys[sel], idx[sel]
        if Xr is None:
            Xr, Yr = np.array(X), np.array(Y)
        else:
            if X.shape[1] != Xr.shape[1] or Y.shape[1] != Yr.shape[1]:
                raise InputError("every chunk must have the same numbers of input and target columns.")
            Xr, Yr = np.concatenate([Xr, X]), np.concatenate([Yr, Y])
        keep_key = np.concatenate([keep_key, keys])
        keep_idx = np.concatenate([keep_idx, idx])
        if keep_key.size > max_samples:
            part = np.argpartition(keep_key, max_samples - 1)[:max_samples]
            Xr, Yr, keep_key, keep_idx = Xr[part], Yr[part], keep_key[part], keep_idx[part]
    if Xr is None or Xr.shape[0] == 0:
        raise InputError("the data are empty: refinement needs samples (X, Y).")
    order = np.argsort(keep_idx, kind="stable")
    return Xr[order], Yr[order], seen


def _check_xy(X, Y, network: TwoLayerNetwork, name: str) -> tuple[np.ndarray, np.ndarray]:
    X = as_2d_float(X, f"{name} X", n_features=network.n_inputs)
    Y = as_targets(Y, f"{name} Y", n_rows=X.shape[0])
    if Y.ndim == 1:
        Y = Y[:, None]
    if Y.shape[1] != network.n_outputs:
        raise InputError(f"{name} Y has {Y.shape[1]} target column(s) but the network has "
                         f"{network.n_outputs} output(s).")
    return X, Y


# =========================================================================== model pieces

def mean_squared_loss(network: TwoLayerNetwork, X, Y) -> float:
    """``(1/N) sum_n ||network(x_n) - y_n||^2`` (sum over outputs); NaN for zero rows."""
    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] == 0:
        return float("nan")
    Y = np.asarray(Y, dtype=np.float64)
    F = network.predict(X)
    F = F[:, None] if F.ndim == 1 else F
    Y = Y[:, None] if Y.ndim == 1 else Y
    return float(np.mean(np.sum((F - Y) ** 2, axis=1)))


class _Model:
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

    def residuals(self, theta, X, Y) -> np.ndarray:
        return self.forward(theta, X, Y)[-1].ravel() / np.sqrt(X.shape[0])

    def jacobian(self, theta, X, Y) -> np.ndarray:
        """``d residuals / d theta``, shape (N p, P): row ``n p + r`` is output ``r`` of sample ``n``."""
        W, b, A, c = self.unpack(theta)
        n = X.shape[0]
        Z = X @ W.T + b
        J = np.zeros((n, self.p, self.n_params))
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
        J /= np.sqrt(n)
        return J.reshape(n * self.p, self.n_params)

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


# =========================================================================== optimiser

def fit_least_squares(network: TwoLayerNetwork, X, Y, *, method: str = "auto", max_iter: int | None = None,
                      tol: float = 1e-15, train: Sequence[str] = BLOCKS,
                      jacobian_memory: int = _JACOBIAN_MEMORY) -> tuple[TwoLayerNetwork, dict]:
    """Minimise the mean squared loss over the ``train`` blocks from ``network`` on in-memory samples.

    No split and no comparison: this is the optimiser that :func:`refine_network` calls (and the
    gradient-descent baseline, once per restart). See the module docstring for the methods.

    Parameters
    ----------
    network : TwoLayerNetwork
        Start.
    X : (N, d) array
    Y : (N,) or (N, p) array
    method : {"auto", "lm", "trf", "lbfgs"}
    max_iter : int, optional
        Function evaluations (``lm``, ``trf``; default 200) or iterations (``lbfgs``; default 5000).
    tol : float, default 1e-15
        ``ftol = xtol = gtol`` of the least-squares methods; ``ftol`` and ``gtol`` of L-BFGS-B.
    train : sequence of str
        Blocks to optimise (subset of :data:`BLOCKS`); the others stay fixed.
    jacobian_memory : int, default 256 MiB
        Bytes allowed for the dense Jacobian of ``lm``/``trf``; rows beyond that are not used.

    Returns
    -------
    network : TwoLayerNetwork
    info : dict
        ``method``, ``n_iter``, ``n_samples_used``, ``success``, ``status``, ``message``,
        ``train_loss_start``, ``train_loss_refined`` (on the rows used).
    """
    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    if method not in METHODS:
        raise InputError(f"method must be one of {METHODS}, got {method!r}.")
    train = _check_train(train)
    tol = _check_tol(tol)
    jacobian_memory = check_positive_int(jacobian_memory, "jacobian_memory")
    X, Y = _check_xy(X, Y, network, "training")
    model = _Model(network, train)
    P, p, n = model.n_params, network.n_outputs, X.shape[0]
    rows_fit = int(jacobian_memory // (8 * p * P))
    if method == "auto":
        method = "lm" if min(rows_fit, n) >= 4 * P else "lbfgs"
    if method in ("lm", "trf"):
        n_use = min(n, rows_fit)
        if n_use < 1:
            raise InputError(f"the Jacobian of one sample ({p * P * 8} bytes) exceeds jacobian_memory="
                             f"{jacobian_memory}; raise it or use method='lbfgs'.")
        if method == "lm" and n_use * p < P:
            raise InputError(
                f"method='lm' needs at least as many residuals as parameters ({P}); it has {n_use * p} "
                f"(rows used: {n_use}). Pass more samples, raise jacobian_memory, or use method='trf' or 'lbfgs'.")
        X, Y = X[:n_use], Y[:n_use]
    max_iter = _DEFAULT_MAX_ITER[method] if max_iter is None else check_positive_int(max_iter, "max_iter")
    theta0 = model.pack(network)
    loss0 = mean_squared_loss(network, X, Y)
    if method in ("lm", "trf"):
        res = optimize.least_squares(model.residuals, theta0, jac=model.jacobian, args=(X, Y), method=method,
                                     ftol=tol, xtol=tol, gtol=tol, max_nfev=max_iter, x_scale="jac")
        theta, n_iter, status, message, success = res.x, int(res.nfev), int(res.status), str(res.message), \
            bool(res.success)
    else:
        res = optimize.minimize(model.loss_and_grad, theta0, args=(X, Y), jac=True, method="L-BFGS-B",
                                options={"maxiter": max_iter, "ftol": tol, "gtol": tol, "maxcor": 20,
                                         "maxfun": 2 * max_iter})
        theta, n_iter, status, success = res.x, int(res.nit), int(res.status), bool(res.success)
        message = res.message if isinstance(res.message, str) else str(res.message)
    refined = model.network(theta)
    info = {"method": method, "n_iter": n_iter, "n_samples_used": int(X.shape[0]), "success": success,
            "status": status, "message": message, "train_loss_start": loss0,
            "train_loss_refined": mean_squared_loss(refined, X, Y)}
    return refined, info


def refine_network(network: TwoLayerNetwork, data: Any, *, method: str = "auto", max_samples: int = 200_000,
                   holdout_fraction: float = 0.2, validation_data: Any = None, max_iter: int | None = None,
                   tol: float = 1e-15, train: Sequence[str] = BLOCKS, jacobian_memory: int = _JACOBIAN_MEMORY,
                   rng=None) -> RefineResult:
    """Polish a network estimate by nonlinear least squares; keep it only if it helps on held-out data.

    Parameters
    ----------
    network : TwoLayerNetwork
        The start (e.g. a provable algorithm's estimate).
    data : data source
        ``(X, Y)`` arrays (numpy, memmap, dask), an iterable of ``(X, Y)`` chunks (e.g. a
        :class:`nnrecover.SampleStream`), a one-pass iterator, or a ``DataSource``.
    method : {"auto", "lm", "trf", "lbfgs"}, default "auto"
        See the module docstring; ``"lm"`` for round-off accuracy on noiseless data.
    max_samples : int, default 200_000
        At most this many rows are gathered (uniformly at random, :func:`gather_samples`).
    holdout_fraction : float in [0, 1), default 0.2
        Share of the gathered rows held out for the start-vs-refined comparison (ignored when
        ``validation_data`` is given). With 0 the comparison uses the training loss.
    validation_data : (X, Y) arrays, optional
        Explicit held-out samples; then all gathered rows train.
    max_iter : int, optional
        Budget of the optimiser (see :func:`fit_least_squares`).
    tol : float, default 1e-15
        Convergence tolerance (see :func:`fit_least_squares`).
    train : sequence of str, default all four blocks
        Which of ``hidden_weights``, ``hidden_bias``, ``output_weights``, ``output_bias`` to optimise.
    jacobian_memory : int, default 256 MiB
        Memory budget of the dense Jacobian (``lm``/``trf``).
    rng : int, Generator or None
        Seeds the subsample and the split; same seed, same result.

    Returns
    -------
    RefineResult
    """
    t0 = time.perf_counter()
    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    if method not in METHODS:
        raise InputError(f"method must be one of {METHODS}, got {method!r}.")
    train = _check_train(train)
    _check_tol(tol)
    try:
        frac = float(holdout_fraction)
    except (TypeError, ValueError):
        raise InputError(f"holdout_fraction must be a number in [0, 1), got {holdout_fraction!r}.") from None
    if not 0.0 <= frac < 1.0:
        raise InputError(f"holdout_fraction must be in [0, 1), got {holdout_fraction!r}.")
    gen = check_random_state(rng)
    X, Y, n_seen = gather_samples(data, max_samples, rng=gen)
    X, Y = _check_xy(X, Y, network, "data")
    if validation_data is not None:
        if not (isinstance(validation_data, (tuple, list)) and len(validation_data) == 2):
            raise InputError("validation_data must be a pair (X, Y) of arrays.")
        Xv, Yv = _check_xy(validation_data[0], validation_data[1], network, "validation_data")
        Xt, Yt = X, Y
    else:
        n_hold = int(round(frac * X.shape[0]))
        if frac > 0 and n_hold == 0:
            n_hold = 1
        if n_hold >= X.shape[0]:
            raise InputError(f"holdout_fraction={frac} leaves no training rows out of {X.shape[0]}; pass more "
                             "samples or a smaller holdout_fraction.")
        perm = gen.permutation(X.shape[0])
        hold, tr = np.sort(perm[:n_hold]), np.sort(perm[n_hold:])
        Xv, Yv, Xt, Yt = X[hold], Y[hold], X[tr], Y[tr]

    refined, info = fit_least_squares(network, Xt, Yt, method=method, max_iter=max_iter, tol=tol, train=train,
                                      jacobian_memory=jacobian_memory)
    hold_start = mean_squared_loss(network, Xv, Yv)
    hold_ref = mean_squared_loss(refined, Xv, Yv)
    if Xv.shape[0]:
        # NaN (overflow) never wins
        keep_refined = bool(np.isfinite(hold_ref) and not hold_ref > hold_start)
        improved = keep_refined and hold_ref < hold_start
    else:
        keep_refined = bool(np.isfinite(info["train_loss_refined"])
                            and not info["train_loss_refined"] > info["train_loss_start"])
        improved = keep_refined and info["train_loss_refined"] < info["train_loss_start"]
    return RefineResult(
        network=refined if keep_refined else network.copy(), start=network, refined=refined,
        kept="refined" if keep_refined else "start", improved=bool(improved),
        train_loss_start=info["train_loss_start"], train_loss_refined=info["train_loss_refined"],
        holdout_loss_start=hold_start, holdout_loss_refined=hold_ref, n_iter=info["n_iter"],
        n_samples_seen=int(n_seen), n_samples_used=info["n_samples_used"], n_holdout=int(Xv.shape[0]),
        method=info["method"], requested_method=method, success=info["success"], status=info["status"],
        message=info["message"], trained=train, time=time.perf_counter() - t0)
