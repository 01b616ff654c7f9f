"""Baseline: random initialisation + the shared local refinement (no provable guarantee).

This is the comparison point for the provable learners (specs/001 section 5, experiment E7: "SGD/Adam
training of an (m+2)-unit network from random init"). Instead of SGD it uses the same second-order
least-squares optimiser that polishes the provable estimates (:func:`nnrecover.refine.fit_least_squares`),
so differences between a provable learner and this baseline come from the starting point alone.

Algorithm (:func:`fit_random_restarts`):

1. gather a uniform subsample of at most ``max_samples`` rows (:func:`nnrecover.refine.gather_samples`);
2. for each of ``n_restarts`` restarts: draw hidden weights ``W_ij ~ N(0, init_scale^2 / d)`` (rows of
   norm about ``init_scale``) and biases ``b_i ~ N(0, (init_scale bias_scale)^2)``; set the output layer
   ``(A, c)`` by linear least squares on the random features ``act(W x + b)`` (the optimum for that
   hidden layer); then minimise the mean squared loss over all parameters;
3. keep the restart with the smallest training loss (put in canonical form for homogeneous activations).
"""

from __future__ import annotations

import time

import numpy as np

from .._validation import check_positive_int, check_random_state, check_xy
from ..activations import get_activation
from ..errors import InputError
from ..network import TwoLayerNetwork
from ..refine import METHODS, fit_least_squares, gather_samples
from ._registry import register
from .base import BaseLearner

__all__ = ["GradientDescentLearner", "fit_random_restarts", "random_start"]


def _check_scale(value, name: str, *, allow_zero: bool) -> float:
    """A finite ``value >= 0`` (``> 0`` unless ``allow_zero``) as float, else InputError naming ``name``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.floating, np.integer)) \
            or not np.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{name} must be a finite {'non-negative' if allow_zero else 'positive'} number, "
                         f"got {value!r}.")
    return float(value)


def random_start(X: np.ndarray, Y: np.ndarray, n_hidden: int, *, activation="relu", init_scale: float = 1.0,
                 bias_scale: float = 0.5, rng=None) -> TwoLayerNetwork:
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

    Returns
    -------
    TwoLayerNetwork

    Raises
    ------
    InputError
        Bad shapes, NaN/inf, X/Y length mismatch, ``n_hidden < 1``, negative or non-finite scales.
    """
    X, Y = check_xy(X, Y)
    n_hidden = check_positive_int(n_hidden, "n_hidden")
    init_scale = _check_scale(init_scale, "init_scale", allow_zero=False)
    bias_scale = _check_scale(bias_scale, "bias_scale", allow_zero=True)
    gen = check_random_state(rng)
    act = get_activation(activation)
    d = X.shape[1]
    W = gen.standard_normal((n_hidden, d)) * (init_scale / np.sqrt(d))
    b = gen.standard_normal(n_hidden) * (init_scale * bias_scale)
    H = np.hstack([act(X @ W.T + b), np.ones((X.shape[0], 1))])
    coef, *_ = np.linalg.lstsq(H, Y, rcond=None)  # (k + 1, p)
    return TwoLayerNetwork(W, b, coef[:-1].T, coef[-1], act)


def fit_random_restarts(X: np.ndarray, Y: np.ndarray, n_hidden: int, *, activation="relu", n_restarts: int = 5,
                        method: str = "auto", max_iter: int | None = None, tol: float = 1e-15,
                        init_scale: float = 1.0, bias_scale: float = 0.5, jacobian_memory: int = 1 << 28,
                        rng=None) -> tuple[TwoLayerNetwork, dict]:
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

    Returns
    -------
    network : TwoLayerNetwork
        The restart with the smallest training loss.
    info : dict
        ``restarts`` (one record per restart: training loss before/after, iterations, method, success,
        message, time) and ``best_restart``.

    Raises
    ------
    InputError
        Bad data (see :func:`random_start`), ``n_restarts < 1``, or a bad optimiser setting (see
        :func:`nnrecover.refine.fit_least_squares`).
    """
    X, Y2 = check_xy(X, Y)
    n_restarts = check_positive_int(n_restarts, "n_restarts")
    gen = check_random_state(rng)
    records, nets = [], []
    for r in range(n_restarts):
        t0 = time.perf_counter()
        start = random_start(X, Y2, n_hidden, activation=activation, init_scale=init_scale, bias_scale=bias_scale,
                             rng=gen)
        net, info = fit_least_squares(start, X, Y2, method=method, max_iter=max_iter, tol=tol,
                                      jacobian_memory=jacobian_memory)
        info["time"] = time.perf_counter() - t0
        info["restart"] = r
        records.append(info)
        nets.append(net)
    losses = np.array([rec["train_loss_refined"] for rec in records])
    losses = np.where(np.isfinite(losses), losses, np.inf)
    best = int(np.argmin(losses))
    return nets[best], {"restarts": records, "best_restart": best, "train_loss": float(losses[best])}


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
        Memory budget of the dense Jacobian (``lm``/``trf``).
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
        ``restarts`` (per-restart losses, iterations, optimiser messages, times), ``best_restart``,
        ``train_loss``, ``n_samples_seen``, ``n_samples_used``, ``refinement`` (the best restart's
        optimiser record), ``fit_time``.
    """

    def __init__(self, n_hidden: int, *, activation: str = "relu", n_restarts: int = 5, method: str = "auto",
                 max_samples: int = 200_000, max_iter: int | None = None, tol: float = 1e-15,
                 init_scale: float = 1.0, bias_scale: float = 0.5, jacobian_memory: int = 1 << 28,
                 random_state=None):
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
        self.random_state = random_state

    def _check_params(self) -> None:
        super()._check_params()
        get_activation(self.activation)
        check_positive_int(self.n_restarts, "n_restarts")
        check_positive_int(self.max_samples, "max_samples")
        check_positive_int(self.jacobian_memory, "jacobian_memory")
        if self.max_iter is not None:
            check_positive_int(self.max_iter, "max_iter")
        if self.method not in METHODS:
            raise InputError(f"method must be one of {METHODS}, got {self.method!r}.")
        for name in ("tol", "init_scale", "bias_scale"):
            _check_scale(getattr(self, name), name, allow_zero=name == "bias_scale")
        if self.tol <= np.finfo(float).eps:
            raise InputError(f"tol must be > machine epsilon (2.2e-16), got {self.tol!r}.")

    def _fit(self, source, rng, diagnostics) -> TwoLayerNetwork:
        X, Y, seen = gather_samples(source, self.max_samples, rng=rng)
        net, info = fit_random_restarts(
            X, Y, check_positive_int(self.n_hidden, "n_hidden"), activation=self.activation,
            n_restarts=self.n_restarts, method=self.method, max_iter=self.max_iter, tol=float(self.tol),
            init_scale=float(self.init_scale), bias_scale=float(self.bias_scale),
            jacobian_memory=self.jacobian_memory, rng=rng)
        diagnostics.update(info)
        diagnostics["n_samples_seen"] = int(seen)
        diagnostics["n_samples_used"] = int(X.shape[0])
        best = dict(info["restarts"][info["best_restart"]])
        best["ran"] = True
        diagnostics["refinement"] = best
        self.n_iter_ = int(best["n_iter"])
        return net.canonical() if net.activation.is_homogeneous else net


register("gradient-descent", paper="baseline", algorithm="random init + local refinement",
         target=GradientDescentLearner, is_learner=True,
         assumptions=("none (local optimisation: no recovery guarantee)",),
         description="Best of random restarts, each refined by nonlinear least squares (LM / L-BFGS)")
