"""One least-squares fit of a network on rows in memory: the method chosen, run, and reported."""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
from scipy import optimize

from .._threads import blas_threads
from .._validation import check_positive_int
from ..errors import InputError
from ..network import TwoLayerNetwork
from .dense import _gauss_newton, _lbfgs, _minpack_lm
from .matrix_free import gauss_newton as matrix_free_gauss_newton
from .matrix_free import span_block_size
from .model import (
    _JACOBIAN_MEMORY,
    _ROUNDOFF_LOSS,
    BLOCKS,
    Model,
    _check_tol,
    _check_train,
    _check_xy,
    _checked_loss,
    _chunk_rows,
    _gn_row_bytes,
)

METHODS = ("auto", "lm", "trf", "lbfgs", "gn", "lm+gn")


_DEFAULT_MAX_ITER = {"lm": 200, "trf": 200, "lbfgs": 5000, "gn": 100}


#: parameters from which ``"auto"`` solves the full-space normal equations matrix free
#: (:func:`_matrix_free_choice`) even when ``J^T J`` fits ``jacobian_memory``: the two solvers cost the same
#: near P = 500 (below, the dense one's P^3 is smaller than the conjugate gradients' per-step overhead), and
#: 1000 leaves a factor 2 of margin; see the module docstring, "Matrix free", for the measurements
_MATRIX_FREE_MIN_PARAMS = 1000


#: the ``method`` recorded for a ``"gn"`` stage whose normal equations were solved matrix free
_MATRIX_FREE_METHOD = "gn-matrix-free"


def _matrix_free_applies(model: Model, jacobian_memory: int) -> bool:
    """Whether the matrix-free Gauss-Newton (:mod:`nnrecover.refine.matrix_free`) can run: ReLU units, every block
    trained (its rescaling null space and its preconditioner's span coordinates are those of the whole
    network), fewer hidden units than inputs (else the span is everything and ``M`` is ``J^T J`` itself), and
    the preconditioner's dense span block (``8 (k^2 + k + p k + p)^2`` bytes) within ``jacobian_memory``."""
    span = span_block_size(model.k, model.p)
    return (model.act.name == "relu" and model.train == BLOCKS and model.k < model.d
            and 8 * span * span <= jacobian_memory)


#: residuals per parameter from which "auto" runs the matrix-free Gauss-Newton (dense Gauss-Newton: 4): its
#: preconditioner, the population normal matrix, keeps the conjugate gradients convergent down to a few
#: residuals per parameter, where L-BFGS needs thousands of iterations at large P (d = 1000, k = 20, one
#: output, 53633 rows: 5000 iterations in 755 s)
_MATRIX_FREE_MIN_RESIDUALS = 2


def _matrix_free_choice(model: Model, jacobian_memory: int) -> bool:
    """Whether ``"auto"`` solves the full-space normal equations matrix free: when it applies and either
    ``J^T J`` (``8 P^2`` bytes) does not fit ``jacobian_memory`` or ``P >= _MATRIX_FREE_MIN_PARAMS``."""
    P = model.n_params
    return _matrix_free_applies(model, jacobian_memory) and (
        8 * P * P > jacobian_memory or P >= _MATRIX_FREE_MIN_PARAMS)


@blas_threads(1)  # a public heavy entry point: many small products, bits independent of the thread count
def fit_least_squares(network: TwoLayerNetwork, X, Y, *, method: str = "auto", max_iter: int | None = None,
                      tol: float = 1e-15, train: Sequence[str] = BLOCKS,
                      jacobian_memory: int = _JACOBIAN_MEMORY,
                      deadline: float | None = None, ftol: float | None = None) -> tuple[TwoLayerNetwork, dict]:
    """Minimise the mean squared loss over the ``train`` blocks from ``network`` on in-memory samples.

    No split and no comparison: this is the optimiser that :func:`refine_network` calls (and the
    gradient-descent baseline, once per restart). See the module docstring for the methods.

    Parameters
    ----------
    network : TwoLayerNetwork
        Start.
    X : (N, d) array
    Y : (N,) or (N, p) array
    method : {"auto", "lm", "trf", "lbfgs", "gn", "lm+gn"}
        ``"auto"`` runs ``"gn"`` on all rows (matrix free for large ``P`` or when ``J^T J`` does not fit
        ``jacobian_memory``; ``"lbfgs"`` with fewer than ``4 P`` residuals, ``2 P`` matrix free, or when
        ``J^T J`` does not fit and the matrix-free solver does not apply); see the module docstring.
    max_iter : int, optional
        Function evaluations (``lm``, ``trf``; default 200), trial steps (``gn``; default 100) or
        iterations (``lbfgs``; default 5000). For ``"lm+gn"`` it bounds each stage (defaults 200 and 100).
    tol : float, default 1e-15
        ``ftol = xtol = gtol`` of the least-squares methods (``gn``: the same three tests, see
        :func:`_gauss_newton`); ``ftol`` and ``gtol`` of L-BFGS-B.
    train : sequence of str
        Blocks to optimise (subset of :data:`BLOCKS`); the others stay fixed.
    jacobian_memory : int, default 256 MiB
        Bytes allowed for the dense Jacobian of ``lm``/``trf``: only the first ``jacobian_memory // (8 p
        P)`` rows are used by them. ``gn`` uses all rows and keeps one chunk of at most
        ``min(jacobian_memory, 8 MiB)``; ``"auto"`` runs the dense ``"gn"`` only when ``J^T J`` (``8 P^2``
        bytes) fits it, and the matrix-free one when its span block (``8 (k^2 + k + p k + p)^2`` bytes)
        does; the latter keeps a float32 copy of the rows when ``4 N d`` bytes fit it.
    deadline : float, optional
        A ``time.perf_counter()`` value. ``"gn"`` and ``"lbfgs"`` stop at their first check after it
        (before each pass over the rows) and return the best iterate so far with ``status = -2`` and
        ``success = False``; ``"lm"`` and ``"trf"`` (MINPACK / SciPy loops) cannot be interrupted and
        ignore it.
    ftol : float, optional
        ``"gn"`` only: a looser relative-reduction test than ``tol`` (never tighter). For a fit whose
        minimiser is itself only an intermediate (a subsample's, followed by stages on all rows), where
        Gauss-Newton's linear convergence on nonzero residuals would spend tens of passes on digits the
        next stage replaces. On noiseless data each step removes most of the loss, so the test does not
        fire before round-off.

    Returns
    -------
    network : TwoLayerNetwork
    info : dict
        ``method`` (the one that ran), ``n_iter``,
        ``n_samples_used``, ``success``, ``status``, ``message``, ``train_loss_start``,
        ``train_loss_refined`` (on the rows used); ``n_jacobian`` for ``"gn"`` (0 when matrix free);
        ``n_operator`` (points at which the operator was built) and ``cg_iterations`` (per trial step) for
        ``"gn-matrix-free"``; ``stages`` (the records of the ``"lm"`` and ``"gn"`` stages, each with its
        ``time``) for ``"lm+gn"``.

    Raises
    ------
    InputError
        Bad ``network``, ``method``, ``train``, ``tol``, ``max_iter`` or ``jacobian_memory``, data that do
        not match the network, the Jacobian of one row larger than ``jacobian_memory`` (``lm``, ``trf``,
        ``gn``), or fewer residuals than parameters for ``lm``.
    """
    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    if method not in METHODS:
        raise InputError(f"method must be one of {METHODS}, got {method!r}.")
    train = _check_train(train)
    tol = _check_tol(tol)
    jacobian_memory = check_positive_int(jacobian_memory, "jacobian_memory")
    X, Y = _check_xy(X, Y, network, "training")
    model = Model(network, train)
    P, p, n = model.n_params, network.n_outputs, X.shape[0]
    rows_fit = int(jacobian_memory // (8 * p * P))
    finish = False
    if method == "lm+gn":
        # "lm" on the first rows_fit rows, then "gn" on all of them (just "lm" when every row fits)
        method, finish = "lm", n > rows_fit
    matrix_free = False
    if method == "auto":
        few = n * p < 4 * P
        if few and not (n * p >= _MATRIX_FREE_MIN_RESIDUALS * P and _matrix_free_choice(model, jacobian_memory)):
            method = "lbfgs"
        elif _matrix_free_choice(model, jacobian_memory):
            # the normal equations by conjugate gradients, nothing P x P formed (module docstring, "Matrix free")
            method, matrix_free = "gn", True
        elif 8 * P * P > jacobian_memory or _gn_row_bytes(model) > jacobian_memory:
            method = "lbfgs"
        else:  # the normal equations over all rows: as accurate as "lm", 10-20x faster (module docstring)
            method = "gn"
    if method in ("lm", "trf") and rows_fit < 1:
        raise InputError(f"the Jacobian of one sample ({p * P * 8} bytes) exceeds jacobian_memory="
                         f"{jacobian_memory}; raise it or use method='lbfgs'.")
    if method == "gn" and _gn_row_bytes(model) > jacobian_memory:
        raise InputError(f"one row of the normal-equation chunk ({_gn_row_bytes(model)} bytes) exceeds "
                         f"jacobian_memory={jacobian_memory}; raise it or use method='lbfgs'.")
    X_all, Y_all = X, Y
    if method in ("lm", "trf"):
        n_use = min(n, rows_fit)
        if method == "lm" and n_use * p < P:
            raise InputError(
                f"method='lm' needs at least as many residuals as parameters ({P}); it has {n_use * p} "
                f"(rows used: {n_use}). Pass more samples, raise jacobian_memory, or use method='trf', 'gn' "
                "or 'lbfgs'.")
        X, Y = X[:n_use], Y[:n_use]
    user_max_iter = None if max_iter is None else check_positive_int(max_iter, "max_iter")
    max_iter = _DEFAULT_MAX_ITER[method] if user_max_iter is None else user_max_iter
    theta0 = model.pack(network)
    loss0 = _checked_loss(network, X, Y)
    n_jac = None
    t0 = time.perf_counter()
    if method == "lm":
        theta, n_iter, status, message, success = _minpack_lm(model, theta0, X, Y, tol=tol, max_iter=max_iter)
    elif method == "trf":
        res = optimize.least_squares(model.residuals, theta0, jac=model.jacobian, args=(X, Y), method=method,
                                     ftol=tol, xtol=tol, gtol=tol, max_nfev=max_iter, x_scale="jac")
        theta, n_iter, status, message, success = res.x, int(res.nfev), int(res.status), str(res.message), \
            bool(res.success)
    elif matrix_free:
        out = matrix_free_gauss_newton(theta0, X, Y, (model.k, model.d, p), max_iter=max_iter, tol=tol,
                                        ftol=tol if ftol is None else max(float(ftol), tol),
                                        roundoff=_ROUNDOFF_LOSS * float(np.mean(Y * Y)),
                                        chunk_rows=_chunk_rows(jacobian_memory, model)[0],
                                        operator_bytes=jacobian_memory, deadline=deadline)
        theta, n_iter, status, message, success = (out["theta"], out["n_iter"], out["status"], out["message"],
                                                   out["success"])
        n_jac, n_chord = 0, 0
    elif method == "gn":
        chunk_rows, loss_rows = _chunk_rows(jacobian_memory, model)
        out = _gauss_newton(model, theta0, X, Y, max_iter=max_iter, tol=tol, chunk_rows=chunk_rows,
                            loss_rows=loss_rows, deadline=deadline, ftol=ftol)
        theta, n_iter, status, message, success, n_jac = (out["theta"], out["n_iter"], out["status"],
                                                          out["message"], out["success"], out["n_jacobian"])
        n_chord = out["n_chord"]
    else:
        theta, n_iter, status, message, success = _lbfgs(model, theta0, X, Y, tol=tol, max_iter=max_iter,
                                                         deadline=deadline)
    refined = model.network(theta)
    info = {"method": _MATRIX_FREE_METHOD if matrix_free else method, "n_iter": n_iter,
            "n_samples_used": int(X.shape[0]), "success": success, "status": status, "message": message,
            "train_loss_start": loss0, "train_loss_refined": _checked_loss(refined, X, Y)}
    if n_jac is not None:
        info["n_jacobian"], info["n_chord"] = n_jac, n_chord
    if matrix_free:
        info["n_operator"], info["cg_iterations"] = out["n_operator"], out["cg_iterations"]
    if finish:
        # Levenberg-Marquardt used only the first rows_fit rows; finish on all rows from its solution
        lm_info = dict(info, time=time.perf_counter() - t0)
        t0 = time.perf_counter()
        gn_max_iter = _DEFAULT_MAX_ITER["gn"] if user_max_iter is None else user_max_iter
        chunk_rows, loss_rows = _chunk_rows(jacobian_memory, model)
        out = _gauss_newton(model, theta, X_all, Y_all, max_iter=gn_max_iter, tol=tol, chunk_rows=chunk_rows,
                            loss_rows=loss_rows, deadline=deadline)
        refined = model.network(out["theta"])
        gn_info = {"method": "gn", "n_iter": out["n_iter"], "n_jacobian": out["n_jacobian"],
                   "n_samples_used": n, "success": out["success"], "status": out["status"],
                   "message": out["message"],
                   "train_loss_start": _checked_loss(model.network(theta), X_all, Y_all),
                   "train_loss_refined": _checked_loss(refined, X_all, Y_all), "time": time.perf_counter() - t0}
        info = {"method": "lm+gn", "n_iter": lm_info["n_iter"] + gn_info["n_iter"], "n_samples_used": n,
                "success": gn_info["success"], "status": gn_info["status"],
                "message": f"lm on the first {lm_info['n_samples_used']} rows: {lm_info['message']} "
                           f"gn on all {n} rows: {gn_info['message']}",
                "train_loss_start": _checked_loss(network, X_all, Y_all),
                "train_loss_refined": gn_info["train_loss_refined"], "stages": [lm_info, gn_info]}
    return refined, info
