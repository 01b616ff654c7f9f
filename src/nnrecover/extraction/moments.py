"""Sample-only extraction: Gaussian queries handed to a moment learner of this library.

``extract(model, d, method="moments")`` queries ``model`` at ``n`` points ``x ~ N(0, s^2 I)`` (``s`` =
``input_scale``) and fits, on ``(x / s, f(x))``:

* scalar output: :class:`nnrecover.learners.HermiteTensorLearner` (Awasthi, Tang, Vijayaraghavan 2021,
  ReLU with biases);
* vector output: :class:`nnrecover.learners.ExactReLULearner` (Bakshi, Jayaram, Woodruff 2019);

both followed by their local refinement; the rows are then divided by ``s``.

Width (``n_hidden="auto"``), from the spectrum of Hermite moments of the queries. For Gaussian
inputs ``E[f(x) He_2(x)] = sum_j c_2(b_j) A[:, j] w_j w_j^T`` (``He_2(x) = x x^T - I``) has rank ``k``
when ``k < d``; the order-4 moment ``E[f(x) He_4(x)]``, unfolded to a ``d^2 x d^2`` matrix
``sum_j c_4(b_j) a_j vec(w_j w_j^T) vec(w_j w_j^T)^T``, has rank ``k`` for ``k < d (d + 1) / 2``
(formed for ``d <= 40``). Each rank is the number of singular values above three times the sampling
error, measured as the spectral norm of the difference of the two half-sample estimates; the width
is the larger of the two ranks (evidence in ``diagnostics["width"]``). Sampling noise limits this route: it reaches the precision of the
learner's statistics and refinement, not the round-off of the chosen-query method.
"""

from __future__ import annotations

import numbers
import time
import warnings
from typing import Any, Callable

import numpy as np

from ..errors import AssumptionError, CertificateWarning, InputError
from ..network import TwoLayerNetwork
from .queries import QueryOracle

__all__ = ["extract_moments", "moment_width"]


def _he2(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``mean(y (x x^T - I))``."""
    return (X.T * y) @ X / X.shape[0] - np.mean(y) * np.eye(X.shape[1])


def _he4_unfolded(X: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``mean(y He_4(x))`` unfolded as a ``(d^2, d^2)`` matrix, without forming per-sample tensors.

    ``He_4(x)_{ijkl} = x_i x_j x_k x_l - (delta_ij x_k x_l + 5 terms) + (delta_ij delta_kl + 2 terms)``.
    """
    n, d = X.shape
    Z = (X[:, :, None] * X[:, None, :]).reshape(n, d * d)
    S = ((Z.T * y) @ Z / n).reshape(d, d, d, d)
    T = (X.T * y) @ X / n
    m0 = float(np.mean(y))
    I = np.eye(d)
    E = (np.einsum("ij,kl->ijkl", I, T) + np.einsum("kl,ij->ijkl", I, T) + np.einsum("ik,jl->ijkl", I, T)
         + np.einsum("il,jk->ijkl", I, T) + np.einsum("jk,il->ijkl", I, T) + np.einsum("jl,ik->ijkl", I, T))
    D = np.einsum("ij,kl->ijkl", I, I) + np.einsum("ik,jl->ijkl", I, I) + np.einsum("il,jk->ijkl", I, I)
    return (S - E + m0 * D).reshape(d * d, d * d)


def moment_width(X: np.ndarray, Y: np.ndarray, *, max_order4_dim: int = 40) -> tuple[int, dict]:
    """Number of hidden units from the spectra of the order-2 and order-4 Hermite moments.

    Parameters
    ----------
    X : (n, d) standard Gaussian inputs; Y : (n, p) outputs.
    max_order4_dim : int
        The order-4 moment is used only for ``d <= max_order4_dim`` (its unfolding is ``d^2 x d^2``).

    Returns
    -------
    (k, evidence)
    """
    n, d = X.shape
    half = n // 2
    evidence: dict[str, Any] = {"method": "Hermite moment spectrum", "samples": int(n)}
    ranks = []
    for order in (2, 4):
        if order == 4 and d > max_order4_dim:
            evidence["note"] = (f"d > {max_order4_dim}: the order-4 unfolding (d^2 x d^2) was not formed; "
                                "the order-2 moment sees at most d units")
            break
        build = _he2 if order == 2 else _he4_unfolded
        # one matrix per output, side by side: the rank of the union of their column spaces
        full = np.hstack([build(X, Y[:, j]) for j in range(Y.shape[1])])
        a = np.hstack([build(X[:half], Y[:half, j]) for j in range(Y.shape[1])])
        b = np.hstack([build(X[half:], Y[half:, j]) for j in range(Y.shape[1])])
        sv = np.linalg.svd(full, compute_uv=False)
        err = float(np.linalg.norm(a - b, 2) / 2)
        rank = int(np.sum(sv > 3 * err))
        ranks.append(rank)
        evidence[f"order{order}"] = {"singular_values": sv[: min(sv.size, 2 * d + 10)].tolist(),
                                     "sampling_error": err, "rank": rank}
    # a unit can be invisible at one order (its Hermite coefficient c_2(b) or c_4(b) vanishes, or
    # units of opposite signs cancel in a direction): the width is the larger rank
    k = max(ranks)
    evidence["order"] = 2 + 2 * int(np.argmax(ranks))
    return k, evidence


def extract_moments(oracle: QueryOracle, d: int, rng: np.random.Generator, *, n_hidden: int | None,
                    input_scale: float, n_samples: int | None, n_certify: int,
                    log: Callable[[str], None] | None = None):
    """The ``method="moments"`` route of :func:`nnrecover.extraction.extract`; returns ``(network, diagnostics)``."""
    log = log or (lambda msg: None)
    t0 = time.perf_counter()
    budget = oracle.remaining
    if n_samples is None:
        n_samples = int(min(200_000, budget - n_certify)) if np.isfinite(budget) else 200_000
        if n_samples < 1000:
            raise InputError(f"method='moments' needs at least 1000 Gaussian queries plus n_certify="
                             f"{n_certify} certificate queries, but max_queries={oracle.max_queries} leaves "
                             f"{n_samples}; raise max_queries (or lower n_certify).")
    elif isinstance(n_samples, (bool, np.bool_)) or not isinstance(n_samples, numbers.Integral) \
            or n_samples < 1000:
        raise InputError(f"n_samples must be an int >= 1000 for method='moments', got {n_samples!r}.")
    X = rng.standard_normal((n_samples, d))
    Y = oracle(input_scale * X)
    diag: dict[str, Any] = {"method": "moments", "complete": False, "samples": int(n_samples)}
    if n_hidden is None:
        k, evidence = moment_width(X, Y)
        if k == 0:
            raise AssumptionError("the Hermite moments of the model's outputs vanish to sampling precision: "
                                  "no hidden unit is visible from Gaussian queries (use method='critical-points').")
        diag["width"] = {"n_hidden": k, **evidence}
        log(f"width {k} from the order-{evidence.get('order')} moment spectrum")
    else:
        k = n_hidden
        diag["width"] = {"n_hidden": k, "method": "given"}
    if Y.shape[1] == 1:
        # deferred: the learners import scikit-learn (about 2 s), which the critical-point route never needs
        from ..learners import HermiteTensorLearner

        learner = HermiteTensorLearner(k, random_state=rng)
        target = Y[:, 0]
    else:
        # deferred: the learners import scikit-learn (about 2 s), which the critical-point route never needs
        from ..learners import ExactReLULearner

        learner = ExactReLULearner(k, random_state=rng)
        target = Y
    learner.fit(X, target)
    net = learner.network_
    net = TwoLayerNetwork(net.hidden_weights / input_scale, net.hidden_bias, net.output_weights,
                          net.output_bias, net.activation).canonical()
    diag["learner"] = type(learner).__name__
    diag["learner_diagnostics"] = {key: val for key, val in learner.diagnostics_.items()
                                   if isinstance(val, (int, float, str, bool))}
    Xc = input_scale * rng.standard_normal((n_certify, d))
    Yc = oracle(Xc)
    G = net.predict(Xc).reshape(Yc.shape)
    diff = np.linalg.norm(G - Yc, axis=1)
    rel = float(np.linalg.norm(diff) / max(np.linalg.norm(Yc), 1e-300))
    diag["certificate"] = {"queries": int(n_certify), "relative_error": rel, "max_abs_error": float(diff.max()),
                           "tolerance": 1e-6, "passed": bool(rel <= 1e-6)}
    if not diag["certificate"]["passed"]:
        warnings.warn(f"extraction certificate failed: relative error {rel:.3g} on {n_certify} fresh queries exceeds "
                      "the tolerance 1e-06 of the moments route; more samples (n_samples, max_queries), or "
                      "method='critical-points' (see diagnostics['certificate']).", CertificateWarning, stacklevel=3)
    diag.update(complete=True, n_hidden=int(net.n_hidden), seconds=time.perf_counter() - t0)
    return net, diag
