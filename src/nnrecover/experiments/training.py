"""Training from random starts with the libraries people use: the baselines of the ``compare`` studies.

Each baseline fits a one-hidden-layer ReLU network of ``k`` units to ``(X, Y)`` from random starts and
returns it as a :class:`~nnrecover.network.TwoLayerNetwork`, so that it is scored exactly like the
nnrecover learners. All run in float64 with no weight penalty (the teacher is exactly representable).
:func:`expand_and_cluster` is the exception: it is not given ``k`` but finds a width (below). The
others take a ``deadline`` (a ``time.perf_counter()`` value): it starts new random starts, and runs the
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

``"expand-and-cluster"`` (:func:`expand_and_cluster`)
    Expand-and-Cluster (Martinelli, Simsek, Gerstner and Brea, "Expand-and-Cluster: Parameter Recovery
    of Neural Networks", ICML 2024; their code is ``github.com/flavio-martinelli/expand-and-cluster``,
    read for the method and its defaults, none of it copied): the one baseline here that is not told
    the teacher's width. It is given the students' width (the compare study passes ``4 k``, the
    paper's overparameterisation factor, which a practitioner finds by the paper's quick "expansion"
    runs of growing width; the study skips those runs and so gives the baseline that factor for free).
    The steps and every choice:

    1. *Expand.* ``n_students`` (default 5; the repository's default is 10) students of
       ``student_width`` ReLU units are trained independently, each by the ``"torch-lbfgs"`` start
       above (PyTorch's ``nn.Linear`` law drawn from ``random_state``, full-batch L-BFGS, strong Wolfe)
       for ``student_iter`` iterations (default 1500) on the first ``student_samples`` rows (default
       20,000). The paper trains with Adam (learning rate 1e-3, batches of 512, a plateau schedule, up to
       25,000 epochs, on GPUs); on a CPU budget of seconds per student full-batch L-BFGS reaches far
       lower training losses, and the clustering needs students near zero loss.
    2. *Cluster.* ReLU's symmetry is positive scaling, so each unit is represented by its unit-norm
       incoming vector ``[w, b] / ||[w, b]||`` (bias included) and the norm moved into its outgoing
       weights, as the repository does for ReLU. Units that do nothing on the training rows (active on
       none of them, or outgoing weights of norm below 1e-8 times the largest outgoing weight, or 1e-8
       when that is below 1) are left out: their directions are arbitrary. The pooled vectors of all students are clustered by average-linkage hierarchical
       clustering on L2 distances (the repository's choice). A cluster is *big* when it holds units of
       at least ``max(2, ceil(gamma N))`` different students (``gamma = min_fraction``, default 0.5, the
       repository's; the repository counts units, not students: a student that splits a teacher unit in
       two would count twice). The tree is cut on the first *plateau*: the first stretch of merge heights
       longer than 0.1 (the repository's ``plateau_threshold``) over which the number of big clusters
       does not change, 5% of the way into it; without a plateau, at the highest merge of the first run
       with the most big clusters. The repository's default cuts at that maximum (its plateau rule, an
       option there, looks only below the maximum and cuts at 95% of the plateau). Measured here with 5
       students, both fail: chance clusters of three students' leftover units form at heights 0.6-1.0,
       above the teacher's clusters (d = 10, k = 5: the maximum, 12 big clusters at height 0.98, merged
       the teacher's 5 clusters, tight below 0.002, into junk), and a teacher unit split into two tight
       sub-clusters makes a short-lived maximum just above them (d = 50, k = 20: 21 at height 0.0039, 20
       from 0.0043 to 0.95). A big cluster whose median pairwise angle between its vectors exceeds
       ``beta = max_angle`` (default pi/6, the repository's) is dropped as unaligned.
    3. *Reduce.* One unit per kept cluster, from the student with the smallest training loss that has
       a unit in it (the repository's rule): the mean of that student's unit vectors in the cluster, the
       sum of their outgoing weights (a split unit is merged). The output bias is set so that the mean
       prediction is the mean target (the repository's bias alignment). The width found is the number of
       kept clusters. The repository's extra linear path for ReLU students (a least-squares linear term
       fine-tuned with the network) is left out: the teacher has none and a
       :class:`~nnrecover.network.TwoLayerNetwork` cannot hold one.
    4. *Fine-tune.* Every weight of the reduced network, full-batch L-BFGS on all rows for
       ``finetune_iter`` iterations (default 500) with no tolerance on the loss change, so that a
       noiseless teacher is fitted to round-off (the repository fine-tunes with Adam, learning rate
       1e-4, 5000 epochs).

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

from .._validation import check_positive_int, check_random_state, check_real, check_xy
from ..errors import ConvergenceError, InputError
from ..network import TwoLayerNetwork

__all__ = ["EAC_BASELINE", "SKLEARN_BASELINES", "TORCH_BASELINES", "TRAINING_BASELINES", "expand_and_cluster",
           "sklearn_baseline", "torch_baseline",
           "train_baseline"]

SKLEARN_BASELINES = ("sklearn-lbfgs", "sklearn-adam")
TORCH_BASELINES = ("torch-lbfgs", "torch-adam")
TRAINING_BASELINES = SKLEARN_BASELINES + TORCH_BASELINES
#: the width-finding baseline (its own function: it is given the students' width, not the teacher's)
EAC_BASELINE = "expand-and-cluster"
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


def _lbfgs_loop(torch, params, loss_fn, total: int, deadline: float | None, tolerance_change: float = 1e-15) -> int:
    """Full-batch ``torch.optim.LBFGS`` (module docstring) on ``params`` for up to ``total`` iterations,
    in slices of 10 so that the ``deadline`` is read between them; returns the iterations run."""
    opt = torch.optim.LBFGS(params, lr=1.0, max_iter=_TORCH_LBFGS_SLICE, max_eval=25 * _TORCH_LBFGS_SLICE,
                            history_size=20, line_search_fn="strong_wolfe", tolerance_grad=0.0,
                            tolerance_change=tolerance_change)

    def closure():
        opt.zero_grad()
        value = loss_fn()
        value.backward()
        return value

    n_iter = 0
    while n_iter < total:
        opt.param_groups[0]["max_iter"] = min(_TORCH_LBFGS_SLICE, total - n_iter)
        value = float(opt.step(closure).detach())
        done = int(opt.state[params[0]]["n_iter"]) - n_iter  # the optimiser's own running count
        n_iter += done
        # a slice that ended early met LBFGS's own tolerance_change / tolerance_grad test
        if done < opt.param_groups[0]["max_iter"] or not np.isfinite(value) or _past(deadline):
            break
    return n_iter


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
            n_iter = _lbfgs_loop(torch, params, lambda: loss_of(params, Xt, Yt), total, deadline)
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


def _relu_canonical_units(W: np.ndarray, b: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ReLU's positive scaling symmetry: unit-norm incoming vectors ``[w, b]`` and the norms moved into
    the outgoing columns. Returns ``(U, A_scaled)`` of shapes ``(m, d + 1)`` and ``(p, m)``."""
    V = np.hstack([W, b[:, None]])
    norms = np.linalg.norm(V, axis=1)
    # a unit with a zero incoming vector is constant zero: any direction, and no output weight
    safe = np.where(norms > 0, norms, 1.0)
    U = np.where(norms[:, None] > 0, V / safe[:, None], 0.0)
    return U, A * norms[None, :]


def _shared_clusters(U: np.ndarray, owner: np.ndarray, min_students: int, max_angle: float,
                     plateau_length: float = 0.1):
    """The clustering step of Expand-and-Cluster on the pooled unit vectors ``U`` (module docstring).

    Returns ``(clusters, info)``: the kept clusters as arrays of row indices of ``U``, and the numbers the
    rule saw (cut height, big clusters at the cut, how many were removed as unaligned).
    """
    from scipy.cluster import hierarchy  # deferred: only this baseline clusters
    from scipy.spatial.distance import pdist

    if U.shape[0] < 2:
        return [], {"cut_height": float("nan"), "big_clusters": 0, "unaligned_removed": 0}
    tree = hierarchy.average(pdist(U))  # L2 distances of unit vectors, average linkage

    def big_ones(height: float) -> list[np.ndarray]:
        labels = hierarchy.fcluster(tree, height, criterion="distance")
        out = []
        for lab in np.unique(labels):
            members = np.flatnonzero(labels == lab)
            if np.unique(owner[members]).size >= min_students:
                out.append(members)
        return out

    # the number of big clusters after each merge, read at every merge height of the tree
    heights = tree[:, 2]
    counts = np.array([len(big_ones(h)) for h in heights])
    best = int(counts.max())
    # the first plateau: the first stretch of heights longer than plateau_length over which the count
    # does not change, cut 5% of the way into it (module docstring: where this departs from the
    # repository's rule); without one, the rule "most big clusters" at the end of the first run of them
    changes = np.flatnonzero(np.diff(counts) != 0) + 1
    ends = np.append(heights[changes[1:]], heights[-1]) if changes.size else np.array([])
    lengths = ends - heights[changes] if changes.size else np.array([])
    long_ones = np.flatnonzero((lengths > plateau_length) & (counts[changes] > 0))
    if long_ones.size:
        j = int(long_ones[0])
        cut = float(heights[changes[j]] + 0.05 * lengths[j])
    else:
        top = int(np.flatnonzero(counts == best)[0])
        while top + 1 < counts.size and counts[top + 1] == best:
            top += 1
        cut = float(heights[top])
    clusters = big_ones(cut) if best > 0 else []
    # unaligned: the median pairwise angle of a cluster's unit vectors exceeds max_angle; for unit
    # vectors the cosine distance is ||u - v||^2 / 2
    cos_tol = 1.0 - np.cos(max_angle)
    kept = []
    for members in clusters:
        pair = pdist(U[members], "sqeuclidean") / 2.0
        if pair.size == 0 or np.median(pair) <= cos_tol:
            kept.append(members)
    return kept, {"cut_height": cut, "big_clusters": len(clusters), "unaligned_removed": len(clusters) - len(kept),
                  "big_cluster_curve": (heights, counts)}


def expand_and_cluster(X: np.ndarray, Y: np.ndarray, *, student_width: int, random_state: Any = None,
                       n_students: int = 5, min_fraction: float = 0.5, max_angle: float = np.pi / 6,
                       student_iter: int = 1500, student_samples: int | None = 20_000,
                       finetune_iter: int = 500, threads: int | None = None):
    """Expand-and-Cluster (Martinelli, Simsek, Gerstner and Brea, ICML 2024): a width found by clustering
    the units of several over-wide students, then fine-tuned (module docstring, "expand-and-cluster").

    Parameters
    ----------
    X : (n, d) array
    Y : (n,) or (n, p) array
    student_width : int
        Hidden units of every student (the paper trains students about 4 times wider than the
        target; the study passes ``4 * k``).
    random_state : int, Generator or None
        Draws every student's start (PyTorch's ``nn.Linear`` law, drawn with nnrecover's generator);
        nothing else is random, so the same seed gives the same bits (with the same ``threads``).
    n_students : int, default 5
        Students trained (``N``; the repository's default is 10).
    min_fraction : float, default 0.5
        ``gamma``: a cluster is kept when it holds units of at least ``max(2, ceil(gamma * N))``
        different students.
    max_angle : float, default pi/6
        ``beta``: a cluster whose median pairwise angle between its unit vectors exceeds this is dropped.
    student_iter : int, default 1500
        L-BFGS iterations per student.
    student_samples : int or None, default 20000
        The students are trained on the first this many rows (None: all); the fine-tuning uses all rows.
    finetune_iter : int, default 500
        L-BFGS iterations of the final fine-tuning of the reduced network (0: none).
    threads : int, optional
        PyTorch intra-op threads for this call (see :func:`torch_baseline`).

    Returns
    -------
    (TwoLayerNetwork, dict)
        The reduced, fine-tuned network (its ``n_hidden`` is the width found) and ``{"width",
        "student_losses", "student_iter", "cut_height", "big_clusters", "unaligned_removed",
        "big_cluster_curve", "loss", "n_iter", "threads", "seconds"}``: the students' mean squared
        training errors per output, the tree's cut, the big clusters there and how many of them were
        dropped as unaligned, ``(merge heights, big clusters after each merge)``, the mean squared
        training error per output after the fine-tuning and its L-BFGS iterations, PyTorch's threads,
        and the seconds of the students, the clustering and the fine-tuning.

    Raises
    ------
    InputError
        Bad data or arguments.
    ConvergenceError
        No cluster is shared by enough students (no unit to keep).
    ImportError
        PyTorch is not installed.
    """
    try:
        import torch  # deferred: torch is an optional extra
    except ImportError as exc:  # pragma: no cover - the test extra installs torch
        raise ImportError("expand_and_cluster needs PyTorch: pip install 'nnrecover[torch]'") from exc

    X, Y2 = check_xy(X, Y)
    m = check_positive_int(student_width, "student_width")
    N = check_positive_int(n_students, "n_students", minimum=2)
    gamma = check_real(min_fraction, "min_fraction", minimum=0.0, meaning="the fraction of students a kept cluster "
                                                                        "spans (gamma)")
    if not 0.0 < gamma <= 1.0:
        raise InputError(f"min_fraction is the fraction of students a kept cluster spans and must be in (0, 1], "
                         f"got {gamma}.")
    beta = check_real(max_angle, "max_angle", minimum=0.0, meaning="the largest median angle (radians) of a kept cluster")
    if not 0.0 < beta <= np.pi:
        raise InputError(f"max_angle is an angle in radians and must be in (0, pi], got {beta}.")
    student_iter = check_positive_int(student_iter, "student_iter")
    finetune_iter = check_positive_int(finetune_iter, "finetune_iter", minimum=0)
    rows = X.shape[0] if student_samples is None else min(check_positive_int(student_samples, "student_samples"),
                                                          X.shape[0])
    gen = check_random_state(random_state)
    saved_threads = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(check_positive_int(threads, "threads"))
    try:
        return _expand_and_cluster(torch, X, Y2, m, N, gamma, beta, student_iter, rows, finetune_iter, gen)
    finally:
        torch.set_num_threads(saved_threads)


def _expand_and_cluster(torch, X, Y2, m, N, gamma, beta, student_iter, rows, finetune_iter, gen):
    t0 = time.perf_counter()
    d = X.shape[1]
    # 1. expand: N students of m units, each an L-BFGS run from its own random start
    students, losses = [], []
    for _ in range(N):
        net, info = _torch_fit(torch, "torch-lbfgs", X[:rows], Y2[:rows], m, gen, 1, student_iter, None)
        students.append(net)
        losses.append(info["loss"] if np.isfinite(info["loss"]) else np.inf)
    t_students = time.perf_counter() - t0
    # 2. cluster the pooled unit vectors [w, b] / ||[w, b]|| of all students
    pooled = [_relu_canonical_units(s.hidden_weights, s.hidden_bias, s.output_weights) for s in students]
    # units that do nothing on the training rows (never active, or no outgoing weight) have arbitrary
    # directions: they would only form chance clusters, so they are not clustered
    Xs = X[:rows]
    useful = [((np.maximum(Xs @ s.hidden_weights.T + s.hidden_bias, 0.0).max(axis=0) > 0)
               & (np.linalg.norm(a, axis=0) > 1e-8 * max(1.0, float(np.abs(a).max()))))
              for s, (_, a) in zip(students, pooled)]
    U = np.vstack([u[keep] for (u, _), keep in zip(pooled, useful)])
    owner = np.concatenate([np.full(int(keep.sum()), i) for i, keep in enumerate(useful)])
    column = np.concatenate([np.flatnonzero(keep) for keep in useful])  # the unit's index in its student
    min_students = max(2, int(np.ceil(gamma * N - 1e-12)))
    clusters, cinfo = _shared_clusters(U, owner, min_students, beta)
    if not clusters:
        raise ConvergenceError(f"expand-and-cluster: no cluster of unit vectors is shared by {min_students} of the "
                               f"{N} students (student losses {np.round(losses, 6).tolist()}).")
    # 3. one unit per cluster, from the best student (smallest training loss) that has a unit in it:
    #    its member directions averaged (a unit the student split in two), their outgoing columns summed
    hidden, outgoing = [], []
    for members in clusters:
        best = min(np.unique(owner[members]), key=lambda s: losses[s])
        mine = members[owner[members] == best]
        hidden.append(U[mine].mean(axis=0))
        outgoing.append(pooled[best][1][:, column[mine]].sum(axis=1))
    V = np.array(hidden)
    W, b, A = V[:, :d], V[:, d], np.array(outgoing).T
    # the output bias that matches the mean of the targets (the repository's bias alignment)
    c = np.mean(Y2 - np.maximum(X @ W.T + b, 0.0) @ A.T, axis=0)
    t_cluster = time.perf_counter() - t0 - t_students
    # 4. fine-tune every weight of the reduced network on all rows
    params = [torch.tensor(np.ascontiguousarray(a), dtype=torch.float64, requires_grad=True) for a in (W, b, A, c)]
    Xt, Yt = torch.from_numpy(np.ascontiguousarray(X)), torch.from_numpy(np.ascontiguousarray(Y2))

    def loss_fn():
        Wt, bt, At, ct = params
        return 0.5 * torch.mean(torch.sum((torch.relu(Xt @ Wt.T + bt) @ At.T + ct - Yt) ** 2, dim=1))

    # no tolerance on the loss change: a noiseless teacher's loss goes far below 1e-15 on the way to round-off
    n_iter = _lbfgs_loop(torch, params, loss_fn, finetune_iter, None, tolerance_change=0.0) if finetune_iter else 0
    with torch.no_grad():
        final = float(2.0 * loss_fn()) / Y2.shape[1]
    W, b, A, c = (a.detach().numpy().copy() for a in params)
    if not (np.all(np.isfinite(W)) and np.all(np.isfinite(A)) and np.isfinite(final)):
        # a diverged fine-tuning: the reduced network before it is the answer
        W, b, A = V[:, :d], V[:, d], np.array(outgoing).T
        c = np.mean(Y2 - np.maximum(X @ W.T + b, 0.0) @ A.T, axis=0)
        final = float(np.mean((np.maximum(X @ W.T + b, 0.0) @ A.T + c - Y2) ** 2))
    net = TwoLayerNetwork(W, b, A, c, "relu")
    t_all = time.perf_counter() - t0
    return net, {"width": int(net.n_hidden), "student_losses": [float(v) for v in losses],
                 "student_iter": int(student_iter), **cinfo, "loss": float(final), "n_iter": int(n_iter),
                 "threads": int(torch.get_num_threads()),
                 "seconds": {"students": t_students, "clustering": t_cluster, "finetune": t_all - t_students - t_cluster}}
