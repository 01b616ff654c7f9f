"""Training from random starts with the libraries people use: the baselines of the ``compare`` studies.

Each baseline fits a one-hidden-layer ReLU network of ``k`` units to ``(X, Y)`` from random starts and
returns it as a :class:`~nnrecover.network.TwoLayerNetwork`, so that it is scored exactly like the
nnrecover learners. All run in float64 with no weight penalty (the teacher is exactly representable).
Each takes a ``deadline`` (a ``time.perf_counter()`` value): it starts new random starts, and runs the
current one, only until then, and keeps the start with the smallest training loss. That is what an
equal wall-time comparison needs: a random-start method may use the time a provable learner took for as
many starts as fit into it.

How each is configured, and why:

``"sklearn-lbfgs"``
    scikit-learn's ``MLPRegressor(solver="lbfgs")``, ``max_iter=5000``, ``max_fun=10**6``, ``tol=0``.
    scikit-learn passes ``tol`` to SciPy's gradient test only; a run then ends on SciPy's own relative
    reduction test ``ftol = 2.2e-9``, which scikit-learn does not expose, so a noiseless teacher can stop
    short of round-off. With a deadline the iterations run in slices of 50 (``warm_start=True``; each
    slice restarts the L-BFGS memory from the current weights) so that the clock is read between slices:
    scikit-learn offers no callback to stop L-BFGS, and its public API is all this module uses. The
    overrun is at most one slice; the time actually used is what the studies report.
``"sklearn-adam"``
    ``MLPRegressor(solver="adam")``, ``learning_rate_init=1e-3``, ``batch_size=256``, ``max_iter`` epochs
    (default 200) with no early stop on a plateau (``n_iter_no_change=max_iter``). With a deadline the
    epochs run one at a time through ``partial_fit`` (which keeps Adam's moment estimates).
``"torch-lbfgs"``
    PyTorch's ``torch.optim.LBFGS`` on the full batch, ``history_size=20``, strong-Wolfe line search,
    ``tolerance_grad=0``, ``tolerance_change=1e-15``, up to ``max_iter`` iterations (default 5000) per start.
``"torch-adam"``
    ``torch.optim.Adam(lr=1e-3)``, mini-batches of 256 rows reshuffled every epoch, ``max_iter`` epochs
    (default 200) per start.

The PyTorch weights are drawn with nnrecover's generator from PyTorch's own default law for
``nn.Linear`` (uniform on ``[-1/sqrt(fan_in), 1/sqrt(fan_in)]`` for weights and biases), so that the
same seed gives the same start in every process; PyTorch is the optional ``torch`` extra
(``pip install nnrecover[torch]``) and runs with its own default number of threads.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np

from .._validation import check_positive_int, check_random_state, check_xy
from ..errors import InputError
from ..network import TwoLayerNetwork

__all__ = ["SKLEARN_BASELINES", "TORCH_BASELINES", "TRAINING_BASELINES", "sklearn_baseline", "torch_baseline",
           "train_baseline"]

SKLEARN_BASELINES = ("sklearn-lbfgs", "sklearn-adam")
TORCH_BASELINES = ("torch-lbfgs", "torch-adam")
TRAINING_BASELINES = SKLEARN_BASELINES + TORCH_BASELINES
_LBFGS_SLICE = 50
_TORCH_LBFGS_SLICE = 10


def _past(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() >= deadline


def _check_data(X, Y, n_hidden) -> tuple[np.ndarray, np.ndarray, int]:

    X, Y2 = check_xy(X, Y)
    return X, Y2, check_positive_int(n_hidden, "n_hidden")


def _starts(restarts: int | None, deadline: float | None) -> int:
    if restarts is None:
        if deadline is None:
            raise InputError("restarts=None (as many starts as fit into the time) needs a deadline.")
        return 1 << 30
    return check_positive_int(restarts, "restarts")


def sklearn_baseline(method: str, X: np.ndarray, Y: np.ndarray, n_hidden: int, *, random_state: int,
                     restarts: int | None = 3, max_iter: int | None = None, deadline: float | None = None):
    """Fit scikit-learn's ``MLPRegressor`` as configured in the module docstring.

    Parameters
    ----------
    method : {"sklearn-lbfgs", "sklearn-adam"}
    X : (n, d) array
    Y : (n,) or (n, p) array
    n_hidden : int
    random_state : int
        Seed of the first start; start ``r`` uses ``random_state + r``.
    restarts : int or None, default 3
        Random starts (the one with the smallest training loss is kept); ``None``: as many as the
        ``deadline`` allows. Adam uses one start unless ``restarts`` is ``None``.
    max_iter : int, optional
        L-BFGS iterations (default 5000) or Adam epochs (default 200) per start.
    deadline : float, optional
        ``time.perf_counter()`` value after which no start begins and the running one stops at its next
        slice (module docstring). At least one start runs one slice.

    Returns
    -------
    (TwoLayerNetwork, dict)
        The fitted network and ``{"n_iter", "loss", "starts"}`` (iterations of the kept start, its
        training loss as scikit-learn reports it, starts run).
    """
    # deferred: scikit-learn is slow to import
    from sklearn.exceptions import ConvergenceWarning
    # deferred: scikit-learn is slow to import
    from sklearn.neural_network import MLPRegressor


    if method not in SKLEARN_BASELINES:
        raise InputError(f"unknown scikit-learn baseline {method!r}; use one of {SKLEARN_BASELINES}.")
    X, Y2, k = _check_data(X, Y, n_hidden)
    y = Y2[:, 0] if Y2.shape[1] == 1 else Y2
    starts = _starts(restarts, deadline) if (method == "sklearn-lbfgs" or restarts is None) else 1
    best, run = None, 0
    for r in range(starts):
        if r > 0 and _past(deadline):
            break
        run += 1
        if method == "sklearn-lbfgs":
            total = max_iter or 5000
            model = MLPRegressor(hidden_layer_sizes=(k,), activation="relu", solver="lbfgs", alpha=0.0,
                                 max_iter=total if deadline is None else min(total, _LBFGS_SLICE), max_fun=10**6,
                                 tol=0.0, random_state=random_state + r, warm_start=deadline is not None)
            done = 0
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                while True:
                    model.fit(X, y)
                    done += int(model.n_iter_)
                    # a slice that stopped before its iteration limit met SciPy's own stopping test
                    if deadline is None or done >= total or model.n_iter_ < model.max_iter or _past(deadline):
                        break
                    model.max_iter = min(_LBFGS_SLICE, total - done)
            n_iter = done
        else:
            epochs = max_iter or 200
            model = MLPRegressor(hidden_layer_sizes=(k,), activation="relu", solver="adam", alpha=0.0, batch_size=256,
                                 learning_rate_init=1e-3, max_iter=epochs, n_iter_no_change=epochs, tol=0.0,
                                 random_state=random_state + r)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ConvergenceWarning)
                if deadline is None:
                    model.fit(X, y)
                    n_iter = int(model.n_iter_)
                else:
                    n_iter = 0
                    while n_iter < epochs:
                        model.partial_fit(X, y)
                        n_iter += 1
                        if _past(deadline):
                            break
        if best is None or model.loss_ < best[0].loss_:
            best = (model, n_iter)
    model, n_iter = best
    return TwoLayerNetwork.from_sklearn(model), {"n_iter": int(n_iter), "loss": float(model.loss_), "starts": run}


def _torch_start(d: int, k: int, p: int, gen: np.random.Generator) -> list[np.ndarray]:
    """PyTorch's default ``nn.Linear`` law, drawn with nnrecover's generator (module docstring)."""
    b1, b2 = 1.0 / np.sqrt(d), 1.0 / np.sqrt(k)
    return [gen.uniform(-b1, b1, (k, d)), gen.uniform(-b1, b1, k), gen.uniform(-b2, b2, (p, k)), gen.uniform(-b2, b2, p)]


def torch_baseline(method: str, X: np.ndarray, Y: np.ndarray, n_hidden: int, *, random_state: Any = None,
                   restarts: int | None = 1, max_iter: int | None = None, deadline: float | None = None,
                   threads: int | None = None):
    """Fit a one-hidden-layer ReLU network with PyTorch's L-BFGS or Adam (module docstring).

    Parameters
    ----------
    method : {"torch-lbfgs", "torch-adam"}
    X : (n, d) array
    Y : (n,) or (n, p) array
    n_hidden : int
    random_state : int, Generator or None
        Draws every start's weights and Adam's batch order.
    restarts : int or None, default 1
        Random starts (the smallest training loss is kept); ``None``: as many as the ``deadline`` allows.
    max_iter : int, optional
        L-BFGS iterations (default 5000) or Adam epochs (default 200) per start.
    deadline : float, optional
        ``time.perf_counter()`` value after which no start begins and the running one stops (checked
        after every 10 L-BFGS iterations and every 20 Adam batches).
    threads : int, optional
        PyTorch intra-op threads for this call (restored afterwards); default PyTorch's own (one per
        core). On a machine whose cores are busy with other work one thread is much faster: measured
        here, 10 L-BFGS iterations at d = 6, k = 3, 20000 rows took 1.0-2.5 s with 2 threads and one
        other busy process on 2 cores, 0.04 s with one thread.

    Returns
    -------
    (TwoLayerNetwork, dict)
        The fitted network and ``{"n_iter", "loss", "starts", "threads"}`` (iterations or epochs of the
        kept start, its mean squared training loss, starts run, PyTorch's intra-op threads).

    Raises
    ------
    ImportError
        PyTorch is not installed (``pip install nnrecover[torch]``).
    """
    try:
        import torch  # deferred: torch is an optional extra
    except ImportError as exc:  # pragma: no cover - the test extra installs torch
        raise ImportError("the PyTorch baselines need PyTorch: pip install 'nnrecover[torch]'") from exc

    if method not in TORCH_BASELINES:
        raise InputError(f"unknown PyTorch baseline {method!r}; use one of {TORCH_BASELINES}.")
    X, Y2, k = _check_data(X, Y, n_hidden)
    gen = check_random_state(random_state)
    starts = _starts(restarts, deadline)
    total = max_iter or (5000 if method == "torch-lbfgs" else 200)
    saved_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(check_positive_int(threads, "threads"))
    try:
        return _torch_fit(torch, method, X, Y2, k, gen, starts, total, deadline)
    finally:
        torch.set_num_threads(saved_threads)


def _torch_fit(torch, method, X, Y2, k, gen, starts, total, deadline):

    Xt, Yt = torch.from_numpy(np.ascontiguousarray(X)), torch.from_numpy(np.ascontiguousarray(Y2))
    n, d, p = X.shape[0], X.shape[1], Y2.shape[1]

    def loss_of(params, xb, yb):
        W, b, A, c = params
        return 0.5 * torch.mean(torch.sum((torch.relu(xb @ W.T + b) @ A.T + c - yb) ** 2, dim=1))

    best, run = None, 0
    for r in range(starts):
        if r > 0 and _past(deadline):
            break
        run += 1
        params = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in _torch_start(d, k, p, gen)]
        n_iter = 0
        if method == "torch-lbfgs":
            opt = torch.optim.LBFGS(params, lr=1.0, max_iter=_TORCH_LBFGS_SLICE, max_eval=25 * _TORCH_LBFGS_SLICE,
                                    history_size=20, line_search_fn="strong_wolfe", tolerance_grad=0.0,
                                    tolerance_change=1e-15)

            def closure():
                opt.zero_grad()
                value = loss_of(params, Xt, Yt)
                value.backward()
                return value

            while n_iter < total:
                opt.param_groups[0]["max_iter"] = min(_TORCH_LBFGS_SLICE, total - n_iter)
                value = float(opt.step(closure).detach())
                done = int(opt.state[params[0]]["n_iter"]) - n_iter  # the optimiser's own running count
                n_iter += done
                # a slice that ended early met LBFGS's own tolerance_change / tolerance_grad test
                if done < opt.param_groups[0]["max_iter"] or not np.isfinite(value) or _past(deadline):
                    break
        else:
            opt = torch.optim.Adam(params, lr=1e-3)
            stop = False
            while n_iter < total and not stop:
                order = torch.from_numpy(gen.permutation(n))
                for j, start in enumerate(range(0, n, 256)):
                    idx = order[start:start + 256]
                    opt.zero_grad()
                    loss_of(params, Xt[idx], Yt[idx]).backward()
                    opt.step()
                    if j % 20 == 19 and _past(deadline):
                        stop = True
                        break
                n_iter += 1
                stop = stop or _past(deadline)
        with torch.no_grad():
            final = float(2.0 * loss_of(params, Xt, Yt)) / p  # mean squared error per output
        if best is None or (np.isfinite(final) and not final >= best[1]):
            best = ([a.detach().numpy().copy() for a in params], final, n_iter)
    (W, b, A, c), final, n_iter = best
    net = TwoLayerNetwork(W, b, A, c, "relu")
    return net, {"n_iter": int(n_iter), "loss": float(final), "starts": run, "threads": int(torch.get_num_threads())}


def train_baseline(method: str, X: np.ndarray, Y: np.ndarray, n_hidden: int, *, random_state: int = 0,
                   restarts: int | None = None, max_iter: int | None = None, deadline: float | None = None,
                   torch_threads: int | None = None):
    """Dispatch to :func:`sklearn_baseline` or :func:`torch_baseline` by ``method`` (see them).

    ``restarts=None`` keeps each method's default number of starts without a deadline (scikit-learn
    L-BFGS 3, the others 1) and runs as many as fit before a deadline.
    """
    if method in SKLEARN_BASELINES:
        r = restarts if (restarts is not None or deadline is not None) else (3 if method == "sklearn-lbfgs" else 1)
        return sklearn_baseline(method, X, Y, n_hidden, random_state=random_state, restarts=r, max_iter=max_iter,
                                deadline=deadline)
    if method in TORCH_BASELINES:
        r = restarts if (restarts is not None or deadline is not None) else 1
        return torch_baseline(method, X, Y, n_hidden, random_state=random_state, restarts=r, max_iter=max_iter,
                              deadline=deadline, threads=torch_threads)
    raise InputError(f"unknown training baseline {method!r}; use one of {TRAINING_BASELINES}.")
