"""Baseline: random initialisation + the shared local refinement (no provable guarantee).

This is the comparison point for the provable learners: training from a random start, what people do
without a guarantee (and what Awasthi et al. contrast their algorithms with in Section 1). Instead of SGD it uses the same second-order
least-squares optimiser that polishes the provable estimates (:func:`nnrecover.refine.fit_least_squares`),
so differences between a provable learner and this baseline come from the starting point alone.

Algorithm (:func:`fit_random_restarts`):

1. gather a uniform subsample of at most ``max_samples`` rows (:func:`nnrecover.refine.gather_samples`);
2. for each of ``n_restarts`` restarts: draw hidden weights ``W_ij ~ N(0, init_scale^2 / d)`` (rows of
   norm about ``init_scale``) and biases ``b_i ~ N(0, (init_scale bias_scale)^2)``; set the output layer
   ``(A, c)`` by linear least squares on the random features ``act(W x + b)`` (the optimum for that
   hidden layer); then minimise the mean squared loss over all parameters;
3. keep the restart with the smallest training loss (put in canonical form for homogeneous activations).

Scale. Data whose root-mean-square entry lies outside ``[2^-10, 2^10]`` (about ``[1e-3, 1e3]``) are
fitted as ``X 2^-e_x`` and ``Y 2^-e_y``, where ``2^e`` is the power of two nearest to the root-mean-square
entry (data inside that range are used as they are), and the scaling is undone in the result:
``act((W 2^-e_x) x + b)`` is the hidden layer on the original inputs for any activation, and the output
layer is linear, so ``A 2^e_y``, ``c 2^e_y``. Multiplying by a power of two is exact in floating point,
so the returned network is the one fitted on the rescaled data, exactly, and data at scale ``1e300`` or
``1e-300`` are fitted as well as data at scale 1. A network that cannot be represented at the data's
scale (a parameter overflows) and a fit whose every restart has a non-finite loss are errors.

Time. With ``time_budget`` the fit stops once that many seconds have passed since ``fit`` began: no
new restart starts, and the running one stops at its optimiser's next check of the clock (``"gn"`` and
``"lbfgs"`` check before every pass over the rows; ``"lm"``/``"trf"`` cannot be interrupted), keeping
its best iterate. At least one restart always starts. The learner then warns
(:class:`~nnrecover.errors.TimeBudgetWarning`) and records the stop in ``diagnostics_``.
"""

from __future__ import annotations

import time
import warnings
from numbers import Integral, Real

import numpy as np

from .._validation import (
    Interval,
    Options,
    check_positive_int,
    check_random_state,
    check_xy,
)
from ..activations import Activation, get_activation
from ..errors import ConvergenceError, InputError, TimeBudgetWarning
from ..network import TwoLayerNetwork
from ..refine import METHODS, fit_least_squares, gather_samples
from .base import BaseLearner
from .registry import register

__all__ = ["GradientDescentLearner", "fit_random_restarts", "random_start"]


def _check_scale(value, name: str, *, allow_zero: bool) -> float:
    """A finite ``value >= 0`` (``> 0`` unless ``allow_zero``) as float, else InputError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{name} must be a finite {'non-negative' if allow_zero else 'positive'} number, "
                         f"got {value!r}.")
    return float(value)


def _check_feature_memory(n_rows: int, n_hidden: int, jacobian_memory: int) -> None:
    """Refuse, before allocating it, a random-feature matrix ``act(X W^T + b)`` larger than the budget.

    That ``n x (k + 1)`` matrix is the Jacobian of the network with respect to the output layer
    ``(A, c)``, so it shares the ``jacobian_memory`` budget of the optimiser's Jacobian.
    """
    need = 8 * int(n_rows) * (int(n_hidden) + 1)
    if need > jacobian_memory:
        raise InputError(f"n_hidden={n_hidden} with {n_rows} rows needs a {n_rows} x {n_hidden + 1} random-feature "
                         f"matrix of {need / 2**20:.1f} MiB, above jacobian_memory={jacobian_memory} bytes "
                         f"({jacobian_memory / 2**20:.1f} MiB); lower n_hidden or max_samples, or raise "
                         "jacobian_memory.")


def random_start(X: np.ndarray, Y: np.ndarray, n_hidden: int, *, activation="relu", init_scale: float = 1.0,
                 bias_scale: float = 0.5, rng=None, jacobian_memory: int = 1 << 28) -> TwoLayerNetwork:
    """A random hidden layer with the least-squares output layer for it.

    Parameters
    ----------
    X : (n, d) array
    Y : (n, p) array
    n_hidden : int
    activation : str or Activation
    init_scale : float
        Hidden rows have norm about ``init_scale`` (entries ``N(0, init_scale^2/d)``).
    bias_scale : float
        Hidden biases are ``N(0, (init_scale bias_scale)^2)``.
    rng : int, Generator or None
    jacobian_memory : int, default 256 MiB
        Bytes allowed for the ``n x (k + 1)`` random-feature matrix (checked before it is formed).

    Returns
    -------
    TwoLayerNetwork

    Raises
    ------
    InputError
        Bad shapes, NaN/inf, X/Y length mismatch, ``n_hidden < 1``, negative or non-finite scales, a
        random-feature matrix larger than ``jacobian_memory``.
    """
    X, Y = check_xy(X, Y)
    n_hidden = check_positive_int(n_hidden, "n_hidden")
    init_scale = _check_scale(init_scale, "init_scale", allow_zero=False)
    bias_scale = _check_scale(bias_scale, "bias_scale", allow_zero=True)
    gen = check_random_state(rng)
    act = get_activation(activation)
    d = X.shape[1]
    _check_feature_memory(X.shape[0], n_hidden, jacobian_memory)
    W = gen.standard_normal((n_hidden, d)) * (init_scale / np.sqrt(d))
    b = gen.standard_normal(n_hidden) * (init_scale * bias_scale)
    H = np.hstack([act(X @ W.T + b), np.ones((X.shape[0], 1))])
    coef, *_ = np.linalg.lstsq(H, Y, rcond=None)  # (k + 1, p)
    return TwoLayerNetwork(W, b, coef[:-1].T, coef[-1], act)


def fit_random_restarts(X: np.ndarray, Y: np.ndarray, n_hidden: int, *, activation="relu", n_restarts: int = 5,
                        method: str = "auto", max_iter: int | None = None, tol: float = 1e-15,
                        init_scale: float = 1.0, bias_scale: float = 0.5, jacobian_memory: int = 1 << 28,
                        rng=None, deadline: float | None = None) -> tuple[TwoLayerNetwork, dict]:
    """Best of ``n_restarts`` random starts, each refined by nonlinear least squares (module docstring).

    Parameters
    ----------
    X : (n, d) array
    Y : (n,) or (n, p) array
    n_hidden : int
    activation, init_scale, bias_scale : see :func:`random_start`
    n_restarts : int
    method, max_iter, tol, jacobian_memory : see :func:`nnrecover.refine.fit_least_squares`
    rng : int, Generator or None
    deadline : float, optional
        A ``time.perf_counter()`` value after which no new restart starts (the first always starts) and
        the running one stops (see ``deadline`` of :func:`nnrecover.refine.fit_least_squares`).

    Returns
    -------
    network : TwoLayerNetwork
        The restart with the smallest training loss.
    info : dict
        ``restarts`` (one record per restart: training loss before/after, iterations, method, success,
        message, time), ``best_restart``, ``train_loss``, ``stopped_by_deadline`` (restarts that did
        not run because the deadline had passed; 0 when all ran) and ``interrupted`` (whether the last
        restart that ran was stopped by the deadline).

    Raises
    ------
    InputError
        Bad data (see :func:`random_start`), ``n_restarts < 1``, or a bad optimiser setting (see
        :func:`nnrecover.refine.fit_least_squares`).
    ConvergenceError
        Every restart ended with a non-finite training loss.
    """
    X, Y2 = check_xy(X, Y)
    n_restarts = check_positive_int(n_restarts, "n_restarts")
    gen = check_random_state(rng)
    records, nets = [], []
    for r in range(n_restarts):
        t0 = time.perf_counter()
        if r > 0 and deadline is not None and t0 >= deadline:
            break
        start = random_start(X, Y2, n_hidden, activation=activation, init_scale=init_scale, bias_scale=bias_scale,
                             rng=gen, jacobian_memory=jacobian_memory)
        net, info = fit_least_squares(start, X, Y2, method=method, max_iter=max_iter, tol=tol,
                                      jacobian_memory=jacobian_memory, deadline=deadline)
        info["time"] = time.perf_counter() - t0
        info["restart"] = r
        records.append(info)
        nets.append(net)
    losses = np.array([rec["train_loss_refined"] for rec in records])
    losses = np.where(np.isfinite(losses), losses, np.inf)
    best = int(np.argmin(losses))
    if not np.isfinite(losses[best]):
        raise ConvergenceError(f"every one of the {len(records)} random restart(s) ended with a non-finite training "
                               "loss; rescale the data to values of order 1 or lower init_scale.")
    return nets[best], {"restarts": records, "best_restart": best, "train_loss": float(losses[best]),
                        "stopped_by_deadline": n_restarts - len(records),
                        "interrupted": records[-1]["status"] == -2}


class GradientDescentLearner(BaseLearner):
    """Baseline learner: random initialisation + local least-squares refinement, best of restarts.

    Parameters
    ----------
    n_hidden : int
        Hidden units ``k`` of the fitted network.
    activation : str, default "relu"
        Activation of the fitted network (any with a derivative, see
        :func:`nnrecover.activations.available_activations`).
    n_restarts : int, default 5
        Random starts; the one with the smallest training loss is kept.
    method : {"auto", "lm", "trf", "lbfgs", "gn", "lm+gn"}, default "auto"
        Local optimiser (:func:`nnrecover.refine.fit_least_squares`).
    max_samples : int, default 200_000
        Rows used (a uniform subsample of larger data, read in bounded memory).
    max_iter : int, optional
        Optimiser budget per restart (function evaluations for ``lm``/``trf``, trial steps for ``gn``,
        iterations for ``lbfgs``).
    tol : float, default 1e-15
        Optimiser tolerance.
    init_scale : float, default 1.0
        Norm scale of the random hidden rows.
    bias_scale : float, default 0.5
        Scale of the random hidden biases relative to ``init_scale``.
    jacobian_memory : int, default 256 MiB
        Memory budget of the dense Jacobian (``lm``/``trf``) and of the random-feature matrix
        ``act(X W^T + b)`` of each start (checked before it is formed).
    time_budget : float, optional
        Seconds from the start of ``fit`` after which no new restart starts and the running one stops at
        its optimiser's next check (module docstring; at least one restart starts). Stopping early warns
        with :class:`~nnrecover.errors.TimeBudgetWarning` and is recorded in ``diagnostics_["time_budget"]``.
    random_state : int, Generator or None

    Attributes
    ----------
    network_ : TwoLayerNetwork
        The best restart (canonical form for ReLU-like activations).
    hidden_weights_ : (k, d) array
    n_features_in_, n_outputs_ : int
    n_iter_ : int
        Optimiser iterations of the best restart.
    diagnostics_ : dict
        ``restarts`` (per-restart losses on the rescaled data, iterations, optimiser messages,
        times), ``best_restart``, ``train_loss`` (mean squared loss of the returned network on the
        rows used, original scale; ``inf`` only when it exceeds the float64 range, the loss on the
        rescaled data is that of the best restart), ``data_scaling`` (the exponents ``e_x``, ``e_y``:
        the fit ran on ``X 2^-e_x``, ``Y 2^-e_y``; see the module docstring), ``time_budget`` (``seconds``,
        ``restarts_run``, ``restarts_requested``, ``exhausted``, ``interrupted``), ``n_samples_seen``,
        ``n_samples_used``, ``refinement`` (the best restart's optimiser record), ``fit_time``.
    """

    _rescales_data = True  # BaseLearner skips its magnitude check: _fit rescales by powers of two

    def __init__(self, n_hidden: int, *, activation: str = "relu", n_restarts: int = 5, method: str = "auto",
                 max_samples: int = 200_000, max_iter: int | None = None, tol: float = 1e-15,
                 init_scale: float = 1.0, bias_scale: float = 0.5, jacobian_memory: int = 1 << 28,
                 time_budget: float | None = None, random_state=None):
        self.n_hidden = n_hidden
        self.activation = activation
        self.n_restarts = n_restarts
        self.method = method
        self.max_samples = max_samples
        self.max_iter = max_iter
        self.tol = tol
        self.init_scale = init_scale
        self.bias_scale = bias_scale
        self.jacobian_memory = jacobian_memory
        self.time_budget = time_budget
        self.random_state = random_state

    _parameter_constraints = {
        "activation": [str, Activation],
        "n_restarts": [Interval(Integral, 1, None)], "max_samples": [Interval(Integral, 1, None)], "jacobian_memory": [Interval(Integral, 1, None)],
        "max_iter": [None, Interval(Integral, 1, None)], "method": [Options(*METHODS)],
        # tol at or below machine epsilon can never be met by a float64 loss
        "tol": [Interval(Real, float(np.finfo(float).eps), None, closed="neither")],
        "init_scale": [Interval(Real, 0, None, closed="neither")], "bias_scale": [Interval(Real, 0, None)],
        "time_budget": [None, Interval(Real, 0, None)],
    }

    def _check_params(self) -> None:
        super()._check_params()
        get_activation(self.activation)

    def _fit(self, source, rng, diagnostics) -> TwoLayerNetwork:
        t0 = time.perf_counter()
        X, Y, seen = gather_samples(source, self.max_samples, rng=rng)
        k = check_positive_int(self.n_hidden, "n_hidden")
        _check_feature_memory(X.shape[0], k, self.jacobian_memory)
        ex, ey = _pow2_exponent(X), _pow2_exponent(Y)
        deadline = None if self.time_budget is None else t0 + float(self.time_budget)
        net, info = fit_random_restarts(
            np.ldexp(X, -ex), np.ldexp(Y, -ey), k, activation=self.activation,
            n_restarts=self.n_restarts, method=self.method, max_iter=self.max_iter, tol=float(self.tol),
            init_scale=float(self.init_scale), bias_scale=float(self.bias_scale),
            jacobian_memory=self.jacobian_memory, rng=rng, deadline=deadline)
        net = _undo_scaling(net, ex, ey)
        skipped = info.pop("stopped_by_deadline")
        interrupted = info.pop("interrupted")
        diagnostics.update(info)
        with np.errstate(over="ignore"):  # a loss beyond 1.8e308 (|Y| ~ 1e154 and more) is reported as inf
            diagnostics["train_loss"] = float(np.ldexp(info["train_loss"], 2 * ey))
        diagnostics["data_scaling"] = {"x_exponent": ex, "y_exponent": ey}
        ran = len(info["restarts"])
        diagnostics["time_budget"] = {"seconds": None if self.time_budget is None else float(self.time_budget),
                                      "restarts_run": ran, "restarts_requested": int(self.n_restarts),
                                      "exhausted": bool(skipped > 0 or interrupted), "interrupted": interrupted}
        if skipped or interrupted:
            cut = " (the last one stopped at the budget)" if interrupted else ""
            warnings.warn(f"GradientDescentLearner: time_budget={float(self.time_budget):g} s was spent after "
                          f"{ran} of {self.n_restarts} restarts{cut}; returning the best of those {ran}.",
                          TimeBudgetWarning, stacklevel=3)
        diagnostics["n_samples_seen"] = int(seen)
        diagnostics["n_samples_used"] = int(X.shape[0])
        best = dict(info["restarts"][info["best_restart"]])
        best["ran"] = True
        diagnostics["refinement"] = best
        self.n_iter_ = int(best["n_iter"])
        return net.canonical() if net.activation.is_homogeneous else net


def _pow2_exponent(A: np.ndarray) -> int:
    """``e`` with ``2^e`` the power of two nearest (in log scale) to the root-mean-square entry of ``A``.

    0 for an all-zero array and when ``|e| <= _KEEP_EXPONENT`` (data of ordinary scale are not touched).
    The RMS is computed after an exact power-of-two prescaling by the largest entry, so that neither
    ``1e300`` nor ``1e-300`` data overflow or underflow while it is computed.
    """
    m = float(np.max(np.abs(A))) if A.size else 0.0
    if m == 0.0:
        return 0
    e_max = int(np.frexp(m)[1])
    rms = float(np.sqrt(np.mean(np.square(np.ldexp(A, -e_max)))))  # in (0, 1]
    e = e_max + int(np.round(np.log2(rms)))
    return 0 if abs(e) <= _KEEP_EXPONENT else e


#: data whose RMS entry is within [2^-10, 2^10] are fitted as they are (see the module docstring)
_KEEP_EXPONENT = 10


def _undo_scaling(net: TwoLayerNetwork, ex: int, ey: int) -> TwoLayerNetwork:
    """The network on the original data from one fitted on ``X 2^-ex``, ``Y 2^-ey`` (exact: powers of two)."""
    if ex == 0 and ey == 0:
        return net
    W = np.ldexp(net.hidden_weights, -ex)
    A = np.ldexp(net.output_weights, ey)
    c = np.ldexp(net.output_bias, ey)
    for name, value in (("hidden_weights", W), ("output_weights", A), ("output_bias", c)):
        if not np.all(np.isfinite(value)):
            raise ConvergenceError(
                f"the network fitted to the rescaled data cannot be represented at the data's scale: its {name} "
                f"overflow float64 when scaled back (X ~ 2^{ex}, Y ~ 2^{ey}); rescale the data to values of order 1.")
    return TwoLayerNetwork(W, net.hidden_bias, A, c, net.activation)


register("gradient-descent", paper="baseline", algorithm="random init + local refinement",
         target=GradientDescentLearner, is_learner=True,
         assumptions=("none (local optimisation: no recovery guarantee)",),
         description="Best of random restarts, each refined by nonlinear least squares (LM / L-BFGS)")
