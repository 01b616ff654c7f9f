"""The refinement pipeline: span first, then the full space on a subsample, then every training row.

Span first (:func:`refine_network`, ``span=True``, with ``"auto"``/``"gn"`` and ``k < d``). A pass of
``"gn"`` costs ``O(N (k d)^2)``, i.e. ``k^2`` passes of ``X^T X``. The hidden rows of a good start nearly
span the true rows, so the polish runs first in that span: ``W = V Q^T`` with ``Q`` (d x k) an
orthonormal basis of the start's rows, the rows projected once (``z = Q^T x``, ``O(N d k)``), then
``k^2 + k + p (k + 1)`` parameters at ``O(N k^4)`` per pass. The part of the true rows outside that
span is removed by a full-space ``"gn"`` on at most ``full_samples`` evenly strided rows (at least ``5 P / p``
when there are as many, so that ``"auto"`` runs Gauss-Newton there), preceded, when
those hold at least three times ``m_c = max(5 P / p, 20 d)`` rows, by the same ``"gn"`` on an evenly strided
``m_c`` of them (at most 10 trial steps, which does the passes far from the answer at a third of the cost or
less and, on noiseless data, already reaches round-off), and otherwise, unless the stage runs matrix free
(its preconditioner holds the span block), by a span polish on the subsample;
then steps with that subsample's ``J^T J`` and the gradient of ALL rows (``O(N d k)`` each; their fixed
point is the least-squares fit of all rows, :func:`_fixed_hessian_steps`), and a last span polish in the
span of the corrected rows (:func:`_span_then_full`); these two all-rows stages stop when a step gains
less than ``_ALL_ROWS_FTOL = 1e-9`` of the loss, far below its statistical resolution ``loss P / N``.
Before the all-rows stages the training rows are read only to check that a fit is at round-off on every
row (one ``O(N d k)`` loss pass per check).
Noiseless data: round-off as with ``span=False``; with label noise the same statistical error at about half
the time (benchmarks/README.md, "Refinement").

Keeping the better. The gathered rows are split into a training part and a held-out part
(``holdout_fraction``, or explicit ``validation_data``). The optimiser sees only the training part; the
result keeps whichever of ``{start, refined}`` has the smaller held-out loss (``kept``), so refinement
never makes an estimate worse on fresh data, e.g. when a few noisy samples let it overfit. Everything
it did is recorded in :class:`RefineResult` (``as_dict()`` for ``diagnostics_``).
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..data import as_data_source
from ..errors import InputError
from ..network import TwoLayerNetwork
from .dense import _GN_LAMBDA_MIN
from .least_squares import (
    _MATRIX_FREE_METHOD,
    METHODS,
    _matrix_free_applies,
    _matrix_free_choice,
    fit_least_squares,
)
from .matrix_free import subsample_solver
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
    _normal_equations,
)
from .result import RefineResult
from .rows import (
    _DEFAULT_HOLDOUT,
    _chosen_rows,
    _default_max_samples,
    _read_sorted_rows,
    _TrainingRows,
    gather_samples,
)

_SPAN_FIRST_STEPS = 10  # trial steps of the first span stage (see _span_then_full)


_FULL_GRADIENT_STEPS = 50  # steps of _fixed_hessian_steps (linear rate ~ sqrt(P / m) per step)


#: residuals per parameter of the coarse full-space stage (see _span_then_full), and rows per input: with
#: 5 P residuals the Jacobian's extreme singular values are within a factor (1 + 5^-1/2) / (1 - 5^-1/2) = 2.6
#: of each other for generic features (Marchenko-Pastur), and with 20 d rows each unit is active on about
#: 10 d of them, so the noiseless least-squares minimiser is the truth and Gauss-Newton well conditioned
_COARSE_RESIDUALS_PER_PARAMETER = 5


_COARSE_ROWS_PER_INPUT = 20


#: relative-reduction test of the full-space stage on the subsample (see _span_then_full)
_SUBSAMPLE_FTOL = 1e-9


#: relative-reduction test of the stages on all N training rows (the fixed-Hessian steps and the last span
#: stage), which run only when no fit is at round-off on every row (label noise): the statistical error of N
#: rows moves the loss by about loss * P / N (3e-3 at P = 4420, N = 1.6e6 residuals), and a step that gains
#: less than 1e-9 of the loss changes the parameters by at most sqrt(1e-9 N) of their statistical error
#: (1.3% at N = 1.6e5 rows). With tol (1e-15) alone these stages creep on through the ReLU kinks: d = 200,
#: k = 20, sigma = 0.05, 1.6e5 rows, 47-62 trial steps of the last span stage (12-21 s) against 6-9 with this
#: test, for held-out losses that differ by less than 3e-8 of themselves
_ALL_ROWS_FTOL = _SUBSAMPLE_FTOL


#: trial steps of the coarse stage: Gauss-Newton's quadratic phase from a provable start reaches round-off
#: on noiseless data in about five; with label noise (kinks, a nonzero residual) its steps slow down, and
#: the stage on all the subsample's rows takes over
_COARSE_STEPS = 10


def _span_stage(network: TwoLayerNetwork, X: np.ndarray, Y: np.ndarray, *, method: str, max_iter, tol: float,
                train: tuple[str, ...], jacobian_memory: int, ftol: float | None = None
                ) -> tuple[TwoLayerNetwork, dict]:
    """Least squares over networks whose hidden rows stay in the span of ``network``'s hidden rows.

    With ``Q`` (d x k) an orthonormal basis of that span (QR of ``W^T``), ``W = V Q^T`` and ``W x = V z``
    with ``z = Q^T x``: the rows are projected once (``O(N d k)``) and the problem is the same one in ``k``
    inputs, ``k^2 + k + p (k + 1)`` parameters instead of ``k d + ...``, so one Gauss-Newton pass costs
    ``O(N k^4)`` instead of ``O(N k^2 d^2)``.
    """
    W = network.hidden_weights
    Q = np.linalg.qr(W.T)[0]
    small = TwoLayerNetwork(W @ Q, network.hidden_bias, network.output_weights, network.output_bias,
                            network.activation)
    t0 = time.perf_counter()
    fitted, info = fit_least_squares(small, X @ Q, Y, method=method, max_iter=max_iter, tol=tol, train=train,
                                     jacobian_memory=jacobian_memory, ftol=ftol)
    out = TwoLayerNetwork(fitted.hidden_weights @ Q.T, fitted.hidden_bias, fitted.output_weights,
                          fitted.output_bias, network.activation)
    info = dict(info, stage="span", time=time.perf_counter() - t0,
                train_loss_start=_checked_loss(network, X, Y), train_loss_refined=_checked_loss(out, X, Y))
    return out, info


def _fixed_hessian_steps(model: Model, theta: np.ndarray, X: np.ndarray, Y: np.ndarray, Xs: np.ndarray,
                         Ys: np.ndarray, *, max_steps: int, tol: float, chunk_rows: int,
                         matrix_free: bool = False, operator_bytes: int = _JACOBIAN_MEMORY,
                         ftol: float = 0.0) -> tuple[np.ndarray, dict]:
    """Newton-type steps with ``J^T J`` of the subsample ``(Xs, Ys)`` and the gradient ``J^T r`` of all rows.

    ``h = -(H_m + lambda D)^{-1} g_N``: the gradient over all ``N`` rows costs ``O(N d k)``
    (:meth:`Model.loss_and_grad`, no Jacobian), the Gauss-Newton matrix ``H_m`` of ``m`` rows one
    ``O(m (k d)^2)`` pass, factorised once. The fixed point is a stationary point of the loss on ALL rows
    (so the statistical error is that of ``N`` rows, not ``m``), reached linearly at the rate
    ``||I - H_m^{-1} H_N|| ~ sqrt(P / m)`` (subsampled Newton). A step that does not lower the loss of all
    rows is halved (at most 4 times; past the statistical noise floor the ReLU kinks make longer searches
    useless); the loop stops when the step is below ``tol (||theta|| + tol)``, a step lowers the loss by at
    most ``max(ftol, tol)`` of it, no step lowers it, or after ``max_steps`` steps.

    ``matrix_free``: ``H_m`` is never formed; each step solves ``(H_m + lambda M) h = -g_N`` by the
    preconditioned conjugate gradients of :mod:`nnrecover.refine.matrix_free` (``O(m d k)`` per iteration) to the
    relative tolerance ``_FIXED_HESSIAN_CG_RTOL``, well below the iteration's own contraction.
    """
    from scipy.linalg import (  # deferred: SciPy's submodules are slow to import
        LinAlgError,
        cho_factor,
        cho_solve,
    )

    if matrix_free:
        solve = subsample_solver(theta, Xs, (model.k, model.d, model.p), damping=_GN_LAMBDA_MIN,
                                              rtol=_FIXED_HESSIAN_CG_RTOL, chunk_rows=chunk_rows,
                                              operator_bytes=operator_bytes)
    else:
        R = model.forward(theta, Xs, Ys)[-1]
        H, _ = _normal_equations(model, theta, Xs, Ys, R, chunk_rows)
        D = np.diag(H).copy()
        D = np.where(D > 0, D, 1.0)
        lam = _GN_LAMBDA_MIN
        while True:
            try:
                factor = cho_factor(H + np.diag(lam * D), check_finite=False)
                break
            except LinAlgError:
                lam *= 10.0
                if lam > 1.0:
                    return theta, {"n_iter": 0, "message": "the subsample's normal matrix is not positive definite."}
        del H

        def solve(g):
            return -cho_solve(factor, g, check_finite=False)
    F, g = model.loss_and_grad(theta, X, Y)
    steps, message = 0, "the maximum number of steps is reached."
    while steps < max_steps:
        h = solve(g)
        steps += 1
        for _ in range(4):
            F_new, g_new = model.loss_and_grad(theta + h, X, Y)
            if np.isfinite(F_new) and F_new <= F:
                break
            h = h / 2
        else:
            message = "no step lowers the loss of all rows."
            break
        theta = theta + h
        done = np.linalg.norm(h) <= tol * (np.linalg.norm(theta) + tol) or F - F_new <= max(ftol, tol) * F
        F, g = F_new, g_new
        if done:
            message = "the step or the loss decrease is below tol."
            break
    return theta, {"n_iter": steps, "message": message}


#: relative tolerance of the conjugate gradients of a matrix-free fixed-Hessian step: the iteration contracts by
#: about sqrt(P / m) per step, and a solve error of 1e-3 adds at most that to the contraction
_FIXED_HESSIAN_CG_RTOL = 1e-3




def _span_then_full(network: TwoLayerNetwork, data: _TrainingRows, *, method: str, max_iter, tol: float,
                    train: tuple[str, ...], jacobian_memory: int, full_samples: int) -> tuple[TwoLayerNetwork, dict]:
    """Full-space polish on an evenly strided subsample of at most ``full_samples`` rows, but at least
    ``5 P / p`` when there are as many (first a coarse one on ``max(5 P / p, 20 d)`` of them when it holds
    three times that, else a span polish first unless the full-space stage runs matrix free), then
    (unless that already fits every row to round-off) steps with its normal matrix and the gradient of all
    rows, and a span polish on all rows.

    The true hidden rows leave the span of the start's rows by the start's error, which a span polish
    cannot remove: the span optimum has a nonzero residual, where Gauss-Newton converges only linearly.
    Without the coarse stage a span stage on the subsample, capped at ``_SPAN_FIRST_STEPS`` trial steps,
    comes first (it only has to bring the in-span parameters close, for fewer full-space steps on the
    whole subsample); before the coarse stage it is left out, because the coarse stage does the passes far
    from the answer at a fraction of a full stage's cost anyway (measured from the provable starts of
    three learners at d = 100, k = 10, noiseless and with label noise: the same number of coarse passes
    with or without it). The full-space stage on the subsample (``O(m (k d)^2)`` per pass) removes the
    start's error to the statistical error of ``m`` rows (to round-off on noiseless data);
    :func:`_fixed_hessian_steps` then moves to the least-squares fit of all rows, and the last span stage,
    in the span of the corrected rows, polishes the in-span parameters on all rows. Only those all-rows
    stages hold all training rows in memory (:class:`_TrainingRows`); before them the rows are read once
    per check that a fit is at round-off on every row (the start's loss comes from the same read).
    """
    n = data.n
    stages = []
    full_model = Model(network, train)
    P = full_model.n_params
    stride = -(-n // full_samples)
    # but at least 5 P / p rows when there are as many, the coarse stage's count: with fewer than 4 P
    # residuals "auto" runs L-BFGS on the subsample (one output at d = 300, k = 20, P = 6041 > 20000 / 4:
    # 5000 iterations in 99 s, where the matrix-free Gauss-Newton on 26667 rows took 7 s)
    min_rows = -(-_COARSE_RESIDUALS_PER_PARAMETER * P // network.n_outputs)
    if -(-n // stride) < min_rows:
        stride = max(1, n // min_rows)
    Xs, Ys = data.strided(stride)
    start_loss = None
    if _checked_loss(network, Xs, Ys) <= _ROUNDOFF_LOSS * float(np.mean(Ys * Ys)):
        # possibly an exact learner on noiseless data: every stage below could only move the fit within
        # round-off, and the full-space ones cost O(m (k d)^2) per pass; one O(N d k) loss pass decides it
        start_loss = data.loss(network)
        if start_loss <= _ROUNDOFF_LOSS * data.mean_square_y():
            return network.copy(), {"method": "gn", "n_iter": 0, "n_samples_used": n, "success": True,
                                    "status": 1, "message": "the start fits every row to round-off: nothing to refine",
                                    "train_loss_start": start_loss, "train_loss_refined": start_loss, "stages": []}

    all_rows_loss = {}

    def fits_every_row(current: TwoLayerNetwork) -> bool:
        nonlocal start_loss
        if start_loss is None:
            start_loss, loss = data.losses([network, current])
        else:
            loss = data.loss(current)
        all_rows_loss["refined"] = loss
        return loss <= _ROUNDOFF_LOSS * data.mean_square_y()

    # the Gauss-Newton passes far from the answer need not be over all m rows: a coarse stage of at most
    # _COARSE_STEPS trial steps on an evenly strided part of the subsample (5 residuals per parameter, 20
    # rows per input) does them at a third of the cost or less. On noiseless data it reaches round-off by
    # itself (checked on all rows below); otherwise the stage on all m rows starts from it, near its own
    # minimiser, and needs fewer passes
    # (only for Gauss-Newton, dense or matrix free: otherwise the stage runs L-BFGS)
    matrix_free = method == "auto" and _matrix_free_choice(full_model, jacobian_memory)
    n_coarse = max(-(-_COARSE_RESIDUALS_PER_PARAMETER * P // Ys.shape[1]), _COARSE_ROWS_PER_INPUT * Xs.shape[1])
    coarse = Xs.shape[0] >= 3 * n_coarse and (8 * P * P <= jacobian_memory or matrix_free)
    current = network
    if not coarse and not matrix_free:
        # the first span stage only has to bring the in-span parameters close for the full-space stage, which
        # works on the subsample anyway: on the subsample it costs 1/stride of an all-rows stage. Not before a
        # matrix-free stage: its preconditioner holds the exact normal matrix of the span coordinates, so it
        # solves the in-span part of each step itself (NoisyReLULearner's start at d = 1000, k = 50: the same
        # 6 full-space steps without the span stage, whose 10 dense steps on 5100 span parameters took 13 s)
        first_iter = _SPAN_FIRST_STEPS if max_iter is None else min(max_iter, _SPAN_FIRST_STEPS)
        current, info = _span_stage(network, Xs, Ys, method=method, max_iter=first_iter, tol=tol, train=train,
                                    jacobian_memory=jacobian_memory)
        stages.append(info)
    fits_all = False
    if coarse:
        step = Xs.shape[0] // n_coarse         # the first n_coarse rows of the stride-step subsample
        coarse_iter = _COARSE_STEPS if max_iter is None else min(max_iter, _COARSE_STEPS)
        t0 = time.perf_counter()
        current, info = fit_least_squares(current, Xs[::step][:n_coarse], Ys[::step][:n_coarse], method=method,
                                          max_iter=coarse_iter, tol=tol, train=train,
                                          jacobian_memory=jacobian_memory)
        stages.append(dict(info, stage="full", time=time.perf_counter() - t0))
        fits_all = fits_every_row(current)
    if not fits_all:
        t0 = time.perf_counter()
        # the subsample's minimiser is off the all-rows one by its statistical error, which the stages on
        # all rows below remove: stopping when a step gains less than 1e-9 of the loss leaves it within
        # sqrt(1e-9 m) (0.5% at m = 20000 rows) of that error; with label noise Gauss-Newton converges
        # only linearly there (nonzero residuals, ReLU kinks) and the tighter tests would not fire
        current, info = fit_least_squares(current, Xs, Ys, method=method, max_iter=max_iter, tol=tol,
                                          train=train, jacobian_memory=jacobian_memory,
                                          ftol=_SUBSAMPLE_FTOL)
        stages.append(dict(info, stage="full", time=time.perf_counter() - t0))
        fits_all = fits_every_row(current)
    if fits_all:
        # the subsample's fit already fits every row to round-off (noiseless data): the all-rows
        # stages below could only move it within round-off
        stages[-1]["stopped"] = "fits all rows to round-off"
        refined_loss = all_rows_loss["refined"]
    elif Xs.shape[0] < n and 8 * P * P > jacobian_memory and not matrix_free:
        # the subsample's normal matrix (8 P^2 bytes) does not fit jacobian_memory and the matrix-free solver
        # does not apply: the full-space stage above ran L-BFGS, and the fixed-Hessian steps are skipped
        # rather than allocating P^2 doubles
        stages[-1]["skipped"] = (f"all-rows steps: J^T J of {P} parameters needs {8 * P * P / 2**30:.1f} GiB "
                                 "> jacobian_memory")
    elif Xs.shape[0] < n:  # the same least squares on all rows, with the subsample's normal matrix
        t0 = time.perf_counter()
        X, Y = data.arrays()
        model = Model(current, train)
        theta, info = _fixed_hessian_steps(model, model.pack(current), X, Y, Xs, Ys, max_steps=_FULL_GRADIENT_STEPS,
                                           tol=tol, chunk_rows=_chunk_rows(jacobian_memory, model)[0],
                                           matrix_free=matrix_free, operator_bytes=jacobian_memory,
                                           ftol=_ALL_ROWS_FTOL)
        stage_start = _checked_loss(current, X, Y)
        current = model.network(theta)
        stages.append(dict(info, stage="full-gradient", method=_MATRIX_FREE_METHOD if matrix_free else "gn",
                           n_samples_used=n, success=True, status=1,
                           train_loss_start=stage_start, train_loss_refined=_checked_loss(current, X, Y),
                           time=time.perf_counter() - t0))
    if "stopped" not in stages[-1]:
        X, Y = data.arrays()
        current, info = _span_stage(current, X, Y, method=method, max_iter=max_iter, tol=tol, train=train,
                                    jacobian_memory=jacobian_memory, ftol=_ALL_ROWS_FTOL)
        stages.append(info)
    last = stages[-1]
    if "stopped" not in last:
        refined_loss = last["train_loss_refined"]
    full = next(st for st in stages if st["stage"] == "full")
    summary = {"method": full["method"], "n_iter": sum(st["n_iter"] for st in stages), "n_samples_used": n,
               "success": last["success"], "status": last["status"],
               "message": "; ".join(f"{st['stage']} on {st['n_samples_used']} rows: {st['message']}"
                                    for st in stages),
               "train_loss_start": start_loss, "train_loss_refined": refined_loss, "stages": stages}
    if all("n_jacobian" in st for st in stages if st["stage"] != "full-gradient"):
        summary["n_jacobian"] = sum(st.get("n_jacobian", 0) for st in stages)
    return current, summary


def default_gauss_newton_fits(network: TwoLayerNetwork, source) -> bool:
    """Whether ``refine_network(network, source)`` with its defaults fits by Gauss-Newton (dense or matrix
    free) on at least ``4 P`` residuals in its full-space stages.

    Its training rows (``min(n_samples, max_samples)`` less the held-out fifth; the count must be known) must
    hold ``4 P`` residuals, and ``J^T J`` (``8 P^2`` bytes) fit the default ``jacobian_memory`` or the
    matrix-free solver apply (ReLU units, ``k < d``, any ``P``). With fewer residuals ``"auto"`` runs the
    matrix-free solver from ``2 P`` (:data:`_MATRIX_FREE_MIN_RESIDUALS`), else L-BFGS, which stops far from
    round-off at large ``P``.
    """
    model = Model(network, BLOCKS)
    P, p = model.n_params, network.n_outputs
    n = getattr(source, "n_samples", None)
    if n is None:
        return False
    n_train = min(int(n), _default_max_samples(source))
    n_train -= int(round(_DEFAULT_HOLDOUT * n_train))
    return n_train * p >= 4 * P and (8 * P * P <= _JACOBIAN_MEMORY or _matrix_free_applies(model, _JACOBIAN_MEMORY))


def refine_network(network: TwoLayerNetwork, data: Any, *, method: str = "auto", max_samples: int | None = None,
                   holdout_fraction: float = _DEFAULT_HOLDOUT, validation_data: Any = None, max_iter: int | None = None,
                   tol: float = 1e-15, train: Sequence[str] = BLOCKS, jacobian_memory: int = _JACOBIAN_MEMORY,
                   span: bool = True, full_samples: int = 20_000, rng=None) -> RefineResult:
    """Polish a network estimate by nonlinear least squares; keep it only if it helps on held-out data.

    Parameters
    ----------
    network : TwoLayerNetwork
        The start (e.g. a provable algorithm's estimate).
    data : data source
        ``(X, Y)`` arrays (numpy, memmap, dask), an iterable of ``(X, Y)`` chunks (e.g. a
        :class:`nnrecover.SampleStream`), a one-pass iterator, or a ``DataSource``.
    method : {"auto", "lm", "trf", "lbfgs", "gn", "lm+gn"}, default "auto"
        See the module docstring. ``"auto"`` runs ``"gn"`` (Levenberg-Marquardt on the normal equations,
        all ``max_samples`` rows whatever their number, round-off accurate on noiseless data; solved matrix
        free for large networks, ``"gn-matrix-free"``); ``"lm"``
        (MINPACK on the dense Jacobian) uses at most the rows its Jacobian budget holds.
    max_samples : int, optional
        At most this many rows are gathered (uniformly at random, :func:`gather_samples`; the first ones of a
        :class:`~nnrecover.SampleStream`). Default: 200000,
        and from a source read in chunks (a stream, a list of chunks), whose gathered rows are copies, at
        most the rows that fit ``GATHER_MEMORY`` (512 MiB: 63900 rows at d = 1000, p = 50).
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
        Memory budget of the dense Jacobian (``lm``/``trf``; they use only the rows that fit), of one
        chunk of ``gn`` and of its normal matrix, or of the matrix-free solver's preconditioner (see
        :func:`fit_least_squares`).
    span : bool, default True
        With ``"auto"`` or ``"gn"``, trained hidden weights and fewer hidden units than inputs, polish in
        the full space on at most ``full_samples`` evenly strided training rows (first on a coarse part of
        them when they are many, else, unless it runs matrix free, after a polish in the span of the start's
        hidden rows), then, unless that fits every training row to round-off, with that subsample's normal
        matrix and the gradient of all rows, then in the new span on all rows (module docstring, "Span
        first"; the records are in ``extra["stages"]``). False: one optimiser run on all training rows.
    full_samples : int, default 20_000
        Rows (evenly strided) whose normal matrix the full-space stage uses when ``span`` applies, but at
        least ``5 P / p`` of them when there are as many (five residuals per parameter, so that the stage
        runs Gauss-Newton); its cost per step is ``O(full_samples (k d)^2)``, or ``O(full_samples d k)``
        per conjugate-gradient step matrix free.
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
    source = as_data_source(data)
    if max_samples is None:
        max_samples = _default_max_samples(source)
    max_samples = check_positive_int(max_samples, "max_samples")
    rows = None
    by_index = source.supports_take_rows
    if validation_data is None and source.n_samples is not None and (by_index or source.info.reiterable):
        # the same rows as gather_samples, but the training and held-out parts are read from the data
        # directly (by index, or in one pass of a stream): no gathered copy of all rows next to its two parts
        source.require_targets("refinement")
        rows, n_seen = _chosen_rows(source, max_samples, gen)
        n_rows = rows.size
    else:
        X, Y, n_seen = gather_samples(source, max_samples, rng=gen)
        X, Y = _check_xy(X, Y, network, "data")
        n_rows = X.shape[0]
    if validation_data is not None:
        if not (isinstance(validation_data, (tuple, list)) and len(validation_data) == 2):
            raise InputError("validation_data must be a pair (X, Y) of arrays.")
        Xv, Yv = _check_xy(validation_data[0], validation_data[1], network, "validation_data")
        Xt, Yt = X, Y
    else:
        n_hold = int(round(frac * n_rows))
        if frac > 0 and n_hold == 0:
            n_hold = 1
        if n_hold >= n_rows:
            raise InputError(f"holdout_fraction={frac} leaves no training rows out of {n_rows}; pass more "
                             "samples or a smaller holdout_fraction.")
        perm = gen.permutation(n_rows)
        hold, tr = np.sort(perm[:n_hold]), np.sort(perm[n_hold:])
        if rows is None:
            Xv, Yv, Xt, Yt = X[hold], Y[hold], X[tr], Y[tr]
        elif not by_index:
            (Xt, Yt), (Xv, Yv) = _read_sorted_rows(source, [rows[tr], rows[hold]], n_seen)
            Xt, Yt = _check_xy(Xt, Yt, network, "data")
            rows = None
        else:
            # the training rows are read when a stage needs them (the span path on noiseless data: only its
            # subsample and chunked losses), the held-out rows after the optimisation
            _check_xy(*source.take_rows(rows[tr[:1]]), network, "data")

    if not isinstance(span, (bool, np.bool_)):
        raise InputError(f"span must be True or False, got {span!r}.")
    full_samples = check_positive_int(full_samples, "full_samples")
    train_rows = (_TrainingRows(Xt, Yt) if rows is None else
                  _TrainingRows(source=source, rows=rows[tr], network=network))
    if span and method in ("auto", "gn") and "hidden_weights" in train and network.n_hidden < network.n_inputs:
        refined, info = _span_then_full(network, train_rows, method=method, max_iter=max_iter, tol=tol,
                                        train=train, jacobian_memory=jacobian_memory, full_samples=full_samples)
    else:
        refined, info = fit_least_squares(network, *train_rows.arrays(), method=method, max_iter=max_iter, tol=tol,
                                          train=train, jacobian_memory=jacobian_memory)
    if rows is not None:
        del train_rows
        Xv, Yv = source.take_rows(rows[hold])
        if n_hold:
            Xv, Yv = _check_xy(Xv, Yv, network, "data")
    # every held-out row was checked (_check_xy, take_rows)
    hold_start = _checked_loss(network, Xv, Yv)
    hold_ref = _checked_loss(refined, Xv, Yv)
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
        message=info["message"], trained=train, time=time.perf_counter() - t0,
        extra={key: info[key] for key in ("stages", "n_jacobian") if key in info})
