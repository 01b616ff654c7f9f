"""The noiseless Gaussian pipelines: Algorithm 4 (tensor step + Algorithm 5) and Algorithm 3 (ICA).

Both have two phases (Algorithms 3-5):

1. approximate: hidden directions from moments (:mod:`.tensor_step`, Theorem 5 / Options A-C) or an
   unmixing matrix from ICA on the sketched outputs ``T A`` (Algorithm 3 steps 1-3);
2. exact: sparsity-pattern linear systems (:mod:`.exact`; Algorithm 5 or Algorithm 3 steps 4-8), then
   ``A = U f(V X)``.

Sample splitting: the first ``n_refine`` rows are the refinement sample ``X̄`` (the paper's "first ℓ
columns"); the moments / ICA use the remaining rows, so the approximate weights are independent of
``X̄`` (see the errata of Algorithm 5). The refinement tries ``ℓ`` = 1000·2^j rows (at least ``20 (d + k)``) up
to ``n_refine`` until the certificates hold.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import scipy.linalg
import scipy.stats

from ..._validation import check_positive_int, check_random_state
from ...data import accumulate, as_data_source
from ...data.views import Tail, tail
from ...errors import AssumptionError, InputError
from ...moments.statistics import SecondMoment
from ._common import ExactResult, check_rectified, check_tol, width_refusal
from .exact import algorithm5, certify_or_raise, refine_from_unmixing
from .tensor_step import approximate_hidden_weights

__all__ = ["gaussian_pipeline", "algorithm4", "algorithm3", "ica_unmixing", "split_refinement",
           "default_n_refine", "refinement_ladder"]


def default_n_refine(n: int | None, d: int, k: int) -> int:
    """Rows reserved for the exact step: ``min(max(5000, 100 (d + k)), n // 4)``."""
    want = max(5000, 100 * (d + k))
    return want if n is None else max(min(want, n // 4), 1)


def default_n_sign(n: int | None) -> int:
    """Rows reserved for Algorithm 6's sign step of the noisy pipeline: ``min(n // 4, 100000)``."""
    return min(n // 4, 100_000) if n is not None else 100_000


#: fewest rows the tensor step estimates its moments from (Theorem 5's sample bound, floored)
def min_moment_rows(d: int) -> int:
    return max(4 * d, 100)


def rows_refusal(n_rows: int | None, n_inputs: int, n_hidden: int, *, noisy: bool) -> str | None:
    """Why ``exact-relu`` (``noisy=False``) or ``bakshi2019-noisy`` (``noisy=True``) with their default row
    reservations refuses ``n_rows`` rows of data with ``n_inputs`` inputs and ``n_hidden`` units, or None.
    ``None`` rows (a stream of unknown length) is never refused here.

    The rows are split between the tensor step's moments (at least ``max(4 d, 100)``) and the rows the
    exact step (Algorithm 5: at least ``2 (d + 2k)`` on its first rung) or the sign step (Algorithm 6)
    holds out. The learners and :func:`nnrecover.check` both decide with this function."""
    if n_rows is None:
        return None
    n, d, k = int(n_rows), int(n_inputs), int(n_hidden)
    need_held = 1 if noisy else 2 * (d + 2 * k)

    def enough(rows: int) -> bool:
        held = default_n_sign(rows) if noisy else default_n_refine(rows, d, k)
        first = held if noisy else refinement_ladder(held, d, k)[0]
        return rows - held >= min_moment_rows(d) and first >= need_held

    if enough(n):
        return None
    # the smallest number of rows both parts accept (the reservations grow with the rows: a short scan)
    least = min_moment_rows(d) + need_held
    while not enough(least):
        least += 1
    held = ("a quarter held out for Algorithm 6's sign step" if noisy else
            f"a quarter held out for Algorithm 5, which needs at least 2 (d + 2k) = {need_held} of them")
    return (f"{'bakshi2019-noisy' if noisy else 'exact-relu'} needs at least {least} rows with {d} inputs and "
            f"{k} hidden units (at least max(4 d, 100) = {min_moment_rows(d)} rows for the moments of the tensor "
            f"step, and {held}); the data have {n}. Pass more samples.")


def refinement_ladder(n_refine: int, d: int, k: int) -> list[int]:
    """ℓ values tried by the exact step: doubling from ``max(1000, 20 (d + k))`` up to ``n_refine``."""
    ell = min(max(1000, 20 * (d + k)), n_refine)
    out = [ell]
    while out[-1] < n_refine:
        out.append(min(2 * out[-1], n_refine))
    return out


def split_refinement(source, n_refine: int, *, name: str = "n_refine", purpose: str = "the exact step"
                     ) -> tuple[np.ndarray, np.ndarray]:
    """The first ``n_refine`` rows of a data source, in memory (the refinement sample X̄, Ā^T); for dask
    arrays only these rows are gathered from the workers; of numpy arrays in memory they are read-only
    views (no copy)."""
    if getattr(source, "is_dask", False) and source.n_samples is not None and source.n_samples >= n_refine:
        return source.take_rows(np.arange(n_refine))
    if source.kind == "arrays" and source.n_samples is not None and source.n_samples >= n_refine:
        # an array source's chunk of n_refine rows is a validated view of its first rows
        X, Y = next(iter(source.chunks(n_refine, progress=False)))
        X, Y = X.view(), Y.view()
        X.flags.writeable = Y.flags.writeable = False
        return X, Y
    xs, ys, have = [], [], 0
    for X, Y in source.chunks(progress=False):
        take = min(n_refine - have, X.shape[0])
        xs.append(np.array(X[:take]))
        ys.append(np.array(Y[:take]))
        have += take
        if have >= n_refine:
            break
    if have < n_refine:
        raise InputError(f"the data have {have} rows but {name}={n_refine} are reserved for {purpose}; pass "
                         f"more samples or a smaller {name}.")
    return np.concatenate(xs), np.concatenate(ys)


def _prepare(X, Y, n_hidden, activation, n_refine, what):
    source = as_data_source(X, Y)
    source.require_targets(what)
    source.require_reiterable(what)
    k = check_positive_int(n_hidden, "n_hidden")
    act = check_rectified(activation, what=what)
    info = source.info
    d, m = info.n_inputs, info.n_outputs
    if d is None or m is None:
        Xp, Yp = source.peek()
        d, m = Xp.shape[1], Yp.shape[1]
    # the learner a command-line user ran, named beside the pipeline
    label = {"the Gaussian pipeline": "Bakshi et al.'s Gaussian pipeline (exact-relu)",
             "the noisy pipeline": "Bakshi et al.'s noisy pipeline (bakshi2019-noisy)",
             "Algorithm 3": "Bakshi et al.'s Algorithm 3 (exact-relu with approximate='ica')"}.get(what, what)
    why = width_refusal(k, d, m, what=label)
    if why:
        raise AssumptionError(why)
    n_ref = default_n_refine(info.n_samples, d, k) if n_refine is None else check_positive_int(n_refine, "n_refine")
    return source, k, act, d, m, n_ref


_TOLERANCES = ("tol_null", "tol_gap", "tol_consistency", "tol_residual")


def _check_tolerances(tolerances: dict, what: str) -> dict:
    """Only the certificate thresholds of :func:`.exact.algorithm5` may be passed through ``**tolerances``."""
    unknown = sorted(set(tolerances) - set(_TOLERANCES))
    if unknown:
        raise InputError(f"{what} got unknown keyword argument(s) {', '.join(unknown)}; the extra keywords are the "
                         f"certificate thresholds {', '.join(_TOLERANCES)}.")
    return dict(tolerances)


def _exact_ladder(V_approx, source, n_ref, act, form, d, k, tolerances) -> ExactResult:
    # each rung reads only its own ell rows: the largest rung (100 (d + k) rows, 840 MB at d = 1000) is
    # read only when the smaller ones fail their certificates
    res = None
    for ell in refinement_ladder(n_ref, d, k):
        Xb, Yb = split_refinement(source, ell)
        res = algorithm5(V_approx, Xb, Yb, activation=act, form=form, **tolerances)
        del Xb, Yb
        if res.certified:
            break
    return res


def gaussian_pipeline(X: Any, Y: Any = None, n_hidden: int | None = None, *, activation: Any = "relu",
                      order: "int | str" = "auto", span: str = "auto", form: str = "margin",
                      n_refine: int | None = None, whiten: bool = False, control_variates: bool = True,
                      n_draws: int = 8, decomposition: str = "joint", chunk_size: int | None = None,
                      strict: bool = False, rng: Any = None, **tolerances) -> ExactResult:
    """Exact recovery for Gaussian inputs (Theorem 7): tensor step, Algorithm 5, then ``A = U f(V X)``.

    Parameters
    ----------
    X, Y : data
        Noiseless samples ``Y = f(X V*^T) U*^T``: arrays, memory maps, dask arrays, or a re-iterable of
        ``(X, Y)`` chunks (``Y=None``).
    n_hidden : int
        ``k``; ``U*`` (m x k) and ``V*`` (k x d) of rank k.
    activation : str or Activation, default "relu"
        Rectified activation (Appendix 9.1).
    order, span, control_variates, whiten, n_draws, decomposition : see
        :func:`.tensor_step.approximate_hidden_weights`.
        ``order=3`` is the paper's Algorithm 4 (AssumptionError for ReLU, whose c_3 is 0).
    form : {"margin", "threshold"}, default "margin"
        Algorithm 5's form (:func:`.exact.algorithm5`).
    n_refine : int, optional
        Rows reserved for the exact step (default :func:`default_n_refine`).
    chunk_size : int, optional
        Rows per chunk in the moment passes.
    strict : bool, default False
        Raise :class:`~nnrecover.errors.ConvergenceError` when a certificate fails.
    rng : int, Generator or None
    **tolerances
        ``tol_null``, ``tol_gap``, ``tol_consistency``, ``tol_residual`` of :func:`.exact.algorithm5`.

    Returns
    -------
    ExactResult
        ``diagnostics`` holds the exact step's certificates plus ``approximate`` (the tensor step's
        diagnostics), ``approximate_hidden_weights``, ``n_refine``, ``ell``, ``time_approximate``.
    """
    t0 = time.perf_counter()
    gen = check_random_state(rng)
    tolerances = _check_tolerances(tolerances, "gaussian_pipeline")
    source, k, act, d, m, n_ref = _prepare(X, Y, n_hidden, activation, n_refine, "the Gaussian pipeline")
    if source.n_samples is not None and source.n_samples < n_ref:
        split_refinement(source, n_ref)        # the error that names n_refine
    approx = approximate_hidden_weights(source, None, k, activation=act, order=order, span=span,
                                        control_variates=control_variates, whiten=whiten, skip=n_ref,
                                        n_draws=n_draws, decomposition=decomposition, chunk_size=chunk_size,
                                        rng=gen)
    t1 = time.perf_counter()
    res = _exact_ladder(approx.hidden_weights, source, n_ref, act, form, d, k, tolerances)
    res.diagnostics.update(approximate=approx.diagnostics, approximate_hidden_weights=approx.hidden_weights,
                           n_refine=n_ref, ell=res.diagnostics["n_refine"], time_approximate=t1 - t0,
                           time_total=time.perf_counter() - t0, route="tensor -> Algorithm 5")
    if strict:
        certify_or_raise(res, "the Gaussian pipeline (Algorithm 4 + Algorithm 5)")
    return res


def algorithm4(X: Any, Y: Any = None, n_hidden: int | None = None, **options) -> ExactResult:
    """Algorithm 4 as in the paper: the order-3 score tensor, Algorithm 5, then ``A = U f(V X)``.

    Equivalent to :func:`gaussian_pipeline` with ``order=3``. Raises
    :class:`~nnrecover.errors.AssumptionError` for ReLU, whose third Hermite coefficient is zero (the
    expected tensor vanishes, erratum to Algorithm 4); works for activations with ``c_3 != 0`` such as
    ``relu_power(2)`` or ``exp_minus_one``.
    """
    if "order" in options:
        raise InputError("algorithm4 fixes order=3; use nnrecover.learners.bakshi2019.gaussian_pipeline (or the "
                         "exact-relu learner) to choose the order.")
    return gaussian_pipeline(X, Y, n_hidden, order=3, **options)


# ------------------------------------------------------------------------------------------------ ICA

def _skew_contrast(x: np.ndarray):
    """FastICA contrast ``g(u) = u^2`` (``G(u) = u^3/3``, a skewness contrast; in our runs it was the best
    for rectified-Gaussian sources, which are super-Gaussian and skewed, erratum 8)."""
    return x * x, (2.0 * x).mean(axis=-1)


def ica_unmixing(X: Any, Y: Any = None, n_hidden: int | None = None, *, sketch: str = "svd", skip: int = 0,
                 max_samples: int | None = None, fun: Any = "skew", max_iter: int = 1000, tol: float = 1e-10,
                 chunk_size: int | None = None, rng: Any = None) -> tuple[np.ndarray, dict]:
    """Algorithm 3 steps 1-3: the unmixing ``M = (\\widehat{TU})^{-1} T`` from ICA on ``T A``.

    Step 1 sketches the outputs to k dimensions, ``T A`` with ``T`` (k x m): ``sketch="gaussian"`` is the
    paper's i.i.d. N(0, 1) ``T`` (Lemma 6: ``κ(TU*) <= (k^2 m/δ) κ(U*)``), ``sketch="svd"`` the top-k
    left singular vectors of ``A`` (``κ(TU*) = κ(U*)``). Steps 2-3 run scikit-learn's FastICA on the
    columns of ``T A`` (``y = (TU*) s``, ``s = f(V* x)`` with independent coordinates when ``V*`` has
    orthonormal rows); the mixing estimate's column signs are fixed so that every recovered source has
    positive skewness, which makes ``D`` positive as Theorem 3 assumes (Algorithm 3).

    Returns
    -------
    M : ndarray (k, m)
        ``M Ā ≈ D f(V* X̄)`` (D positive diagonal, unknown order), applied to uncentred data.
    diagnostics : dict
        ``sketch``, ``n_ica_samples``, ``n_iter``, ``source_skewness``, ``mixing_condition``.
    """
    # deferred: scikit-learn is slow to import
    from sklearn.decomposition import FastICA

    gen = check_random_state(rng)
    source = as_data_source(X, Y)
    source.require_targets("Algorithm 3 (ICA)")
    k = check_positive_int(n_hidden, "n_hidden")
    if sketch not in ("svd", "gaussian"):
        raise InputError(f"sketch must be 'svd' or 'gaussian', got {sketch!r}.")
    skip = check_positive_int(skip, "skip", minimum=0)
    max_iter = check_positive_int(max_iter, "max_iter")
    tol = check_tol(tol, "tol")
    if max_samples is not None:
        max_samples = check_positive_int(max_samples, "max_samples")
    m = source.info.n_outputs if source.info.n_outputs is not None else source.peek()[1].shape[1]
    if k > m:
        raise AssumptionError(f"Algorithm 3 sketches the outputs to k dimensions and needs at least as many outputs "
                              f"as hidden units (U* of rank k, k <= m); got {k} hidden units and {m} output(s). With "
                              "Gaussian inputs fit hermite-tensor (one output at a time), or gradient-descent.")
    if fun == "skew":
        fun = _skew_contrast
    rest = Tail(source, skip, None, chunk_size)
    if sketch == "svd":
        sec = accumulate(SecondMoment(), tail(source, skip, None, chunk_size), chunk_size=chunk_size).finalize()
        lam, vec = np.linalg.eigh(0.5 * (sec.yy + sec.yy.T))
        T = vec[:, np.argsort(-lam)[:k]].T
    else:
        T = gen.standard_normal((k, m))
    parts, have = [], 0
    for Xc, Yc in rest:
        take = Yc if max_samples is None else Yc[: max_samples - have]
        parts.append(take @ T.T)
        have += take.shape[0]
        if max_samples is not None and have >= max_samples:
            break
    TA = np.concatenate(parts)
    if TA.shape[0] < 10 * k:
        raise InputError(f"ICA needs at least 10 k = {10 * k} samples after the refinement rows; got {TA.shape[0]}.")
    seed = int(gen.integers(0, 2**31 - 1))
    ica = FastICA(n_components=k, algorithm="parallel", whiten="unit-variance", fun=fun, max_iter=max_iter,
                  tol=tol, random_state=seed)
    with np.errstate(all="ignore"):
        S = ica.fit_transform(TA)
    skew = scipy.stats.skew(S, axis=0)
    mixing = ica.mixing_ * np.where(skew < 0, -1.0, 1.0)
    M = np.linalg.solve(mixing, T)
    diag = {"sketch": sketch, "n_ica_samples": int(TA.shape[0]), "n_iter": int(ica.n_iter_),
            "source_skewness": np.abs(skew), "mixing_condition": float(np.linalg.cond(mixing)),
            "converged": bool(ica.n_iter_ < max_iter)}
    return M, diag


def algorithm3(X: Any, Y: Any = None, n_hidden: int | None = None, *, activation: Any = "relu",
               sketch: str = "svd", form: str = "margin", n_refine: int | None = None,
               max_ica_samples: int | None = 1_000_000, chunk_size: int | None = None, strict: bool = False,
               rng: Any = None, **tolerances) -> ExactResult:
    """Algorithm 3 (Theorem 4): exact recovery for orthonormal ``V*`` via ICA, then steps 4-8.

    Preconditions (Section 4.1): ``x ~ N(0, I)`` (identity covariance: whitening would destroy the
    orthonormality), ``V*`` with orthonormal rows (so the sources ``f(V* x)`` are independent), ``U*`` of
    rank k. ``form="margin"`` bridges to Algorithm 5 (a robust bridge between Algorithms 3 and 5); ``"threshold"`` is
    the paper's rounding at ``τ``. Other parameters as :func:`gaussian_pipeline` and
    :func:`ica_unmixing`. The certificates reject the answer when ``V*`` is not orthonormal and ICA
    returns mixtures.
    """
    t0 = time.perf_counter()
    gen = check_random_state(rng)
    tolerances = _check_tolerances(tolerances, "algorithm3")
    source, k, act, d, m, n_ref = _prepare(X, Y, n_hidden, activation, n_refine, "Algorithm 3")
    Xb, Yb = split_refinement(source, n_ref)
    M, idiag = ica_unmixing(source, None, k, sketch=sketch, skip=n_ref, max_samples=max_ica_samples,
                            chunk_size=chunk_size, rng=gen)
    t1 = time.perf_counter()
    res = None
    for ell in refinement_ladder(n_ref, d, k):
        res = refine_from_unmixing(M, Xb[:ell], Yb[:ell], activation=act, form=form, **tolerances)
        if res.certified:
            break
    res.diagnostics.update(approximate=idiag, unmixing=M, n_refine=n_ref, ell=res.diagnostics["n_refine"],
                           time_approximate=t1 - t0, time_total=time.perf_counter() - t0,
                           route="ICA -> Algorithm 3 steps 4-8")
    if strict:
        certify_or_raise(res, "Algorithm 3 (ICA route)")
    return res
