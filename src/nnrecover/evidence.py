"""Measures of a data set that the learners' assumptions rest on: the input law, the width, the label noise.

:func:`nnrecover.check` turns them into verdicts per learner (:mod:`nnrecover.assumptions`), and
``n_hidden="auto"`` reads the width from them (:mod:`nnrecover.learners.width`); this module knows no
learner.

What is measured (on at most ``max_rows`` rows, the first ones of the data):

* **input law**: the largest mean and ``||Cov - I||_2`` against the concentration tolerances of
  :func:`nnrecover.moments.input_deviation_from_standard`; the skewness and excess kurtosis of the
  whitened coordinates and of random unit projections with their standard errors under Gaussianity
  (``sqrt(6/n)``, ``sqrt(24/n)``), and D'Agostino's K^2 normality test on those projections
  (:func:`scipy.stats.normaltest`), Bonferroni-corrected. A law that passes only after whitening is
  reported as "Gaussian, not standard": whiten the inputs first.
* **heavy tails**: Hill's estimate of the tail index of ``|x_j|`` over the top 1% of each whitened
  coordinate; an index below 4.5 means fourth moments may not exist, and every moment method here uses
  fourth moments (Ge et al.'s detector, the Hermite tensors of order 4, Bakshi et al.'s tensor step).
* **constant inputs**: columns whose variance is at most ``1e-12`` of the largest (the whitening's rank
  threshold), by index and value. No Gaussian law with a full-rank covariance has them, and a constant
  non-zero column makes ``x`` and ``-x`` differ in law (the symmetry test then gives p-value 0).
* **symmetry** (Ge et al., Section 2.1): the test of :func:`nnrecover.learners.ge2019.symmetry_test`.
* **width**: (a) with ``p`` outputs, the rank of ``Cov(y)``, which is ``min(p, k)`` for a generic
  network whatever the input law. Sampling moves ``Cov(y)`` only inside the span of the units'
  outputs, so outside it the eigenvalues are the label-noise variance: an eigenvalue counts when it
  exceeds the smallest one by the spread of white-noise eigenvalues (``10 sqrt(p/n)`` relative, a wide
  margin over the Marchenko-Pastur edge) plus 4 of its standard errors over 10 row groups (5 and 2 for
  the "unsure" bound). (b) When that does not decide (``k >= p``) and the inputs look Gaussian, the
  rank of the stacked Hermite matrices ``T_2^(j) = E[(y_j - E y_j)(x x^T - I)]`` (Lemma 3.5 of
  Awasthi et al.: ``sum_i a_ij c_2(b_i) w_i w_i^T`` with ``c_2 = phi(b) > 0`` for ReLU, so its rank is
  ``k`` when ``k <= d``): singular values count above twice the noise level ``tau``, the spread of 10
  row-group estimates (by Weyl's inequality a zero singular value of the exact matrix shows as at most
  ``||error||_2 ~ tau``); values between ``tau`` and ``2 tau`` make the estimate "unsure".
* **label noise**: with ``p`` larger than the rank of ``Cov(y)``, the mean of its trailing
  eigenvalues (isotropic noise); with Gaussian inputs, an upper bound from Parseval's identity:
  ``Var(y) - ||T_1||^2 - ||T_2||_F^2 / 2`` (the energy of ``f`` above order 2 is counted as noise).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._validation import check_positive_int, check_random_state
from .data import as_data_source
from .data.checks import coerce_array, magnitude_refusal
from .errors import InputError
from .moments.statistics import Covariance, input_deviation_from_standard
from .moments.symmetry import SymmetryTest, symmetry_test

__all__ = ["estimate_width", "measure_data", "read_rows", "width_and_noise", "input_law_flags", "streamed_t2_rank",
           "MAX_ROWS", "MAX_ELEMENTS", "ALPHA", "TAIL_INDEX_MIN", "TAIL_MIN_ROWS", "CONSTANT_VARIANCE"]


#: rows and elements read at most (the first rows of the data)
MAX_ROWS = 200_000


MAX_ELEMENTS = 20_000_000


#: a tail index below this means fourth moments may be infinite
TAIL_INDEX_MIN = 4.5


#: significance level of the Gaussianity and symmetry tests
ALPHA = 1e-3


#: a column whose variance is at most this times the largest column variance is reported as constant
CONSTANT_VARIANCE = 1e-12


# ------------------------------------------------------------------------------------------ measurements
def read_rows(X, Y, max_rows: int) -> tuple[np.ndarray, np.ndarray, int | None]:
    """The first rows of the data (arrays or any data source of ``as_data_source``), as float64 arrays, and
    the number of rows the data hold (``None`` when not known: a stream read only in part)."""
    if Y is not None:
        X = coerce_array(X, "X", is_X=True)
        Y = coerce_array(Y, "Y", is_X=False)
    source = as_data_source(X, Y)
    if source.info.n_outputs == 0:
        raise InputError("check needs targets: call check(X, Y), or pass chunks (X, Y) with Y not None.")
    d = source.info.n_inputs
    rows = max(1, min(max_rows, MAX_ELEMENTS // max(d, 1)))
    xs, ys, got = [], [], 0
    for Xc, Yc in source.chunks():
        xs.append(np.asarray(Xc, dtype=np.float64))
        ys.append(np.asarray(Yc, dtype=np.float64).reshape(len(Xc), -1))
        got += len(Xc)
        if got >= rows:
            break
    Xa = np.concatenate(xs)[:rows]
    Ya = np.concatenate(ys)[:rows]
    available = source.info.n_samples if source.info.n_samples is not None else (got if got < rows else None)
    if not (np.isfinite(Xa).all() and np.isfinite(Ya).all()):
        raise InputError("X and Y must be finite (NaN or inf found); remove or impute those rows first.")
    for name, A in (("X", Xa), ("Y", Ya)):
        # the range every learner computes in: the moments of the checks below overflow or underflow outside it
        why = magnitude_refusal(float(np.max(np.abs(A), initial=0.0)), name, "check")
        if why:
            raise InputError(why)
    return Xa, Ya, available


#: rows needed for a tail-index estimate (the top 1% must hold at least 50 points)
TAIL_MIN_ROWS = 5000


def _hill_tail_index(Z: np.ndarray) -> np.ndarray:
    """Hill's estimator of the tail index of ``|Z_j|`` from the top 1% of each column (NaN: too few rows)."""
    n = Z.shape[0]
    m = n // 100
    if n < TAIL_MIN_ROWS:
        return np.full(Z.shape[1], np.nan)
    A = np.sort(np.abs(Z), axis=0)
    top = A[n - m:]
    u = A[n - m - 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_log = np.mean(np.log(top / u), axis=0)
        return np.where(mean_log > 0, 1.0 / mean_log, np.inf)


def _rank_from_groups(B: np.ndarray, groups: list[np.ndarray]) -> dict:
    """Numerical rank of the mean matrix ``B`` against the noise level of its group estimates."""
    s = np.linalg.svd(B, compute_uv=False)
    G = len(groups)
    # the mean of G independent group estimates: its error's spectral norm is about the groups' spread
    # divided by sqrt(G); the median over groups is robust to one unusual group
    spread = np.median([np.linalg.norm(Bg - B, 2) for Bg in groups])
    tau = float(spread / np.sqrt(max(G - 1, 1)))
    # Weyl: a singular value of the true matrix that is zero appears as at most ||E||_2 ~ tau; the
    # factor 2 leaves room for the error of tau itself (a median over 10 groups)
    high = int(np.sum(s > tau))
    low = int(np.sum(s > 2 * tau))
    return {"low": low, "high": high, "singular_values": s.tolist(), "noise_level": tau}


def streamed_t2_rank(source, *, groups: int = 10, max_bytes: int = 1 << 29) -> dict | None:
    """The T_2 rank rule of :func:`_rank_from_groups` over **every** row of ``source`` (standard Gaussian
    inputs), in one pass and bounded memory.

    ``T_2^(j) = E[(y_j - E y_j)(x x^T - I)] = E[y_j x x^T] - E[y_j] E[x x^T]`` is accumulated per row group
    (chunks dealt round-robin to ``groups`` groups): ``sum y x x^T``, ``sum x x^T``, ``sum y`` and the row
    count, so the noise level ``tau`` falls like ``1/sqrt(rows)`` with all the data, not the first rows.
    Returns None when the group sums would take more than ``max_bytes`` (``groups d^2 (p + 1)`` doubles).
    """
    d, p = source.info.n_inputs, max(source.info.n_outputs or 1, 1)
    if groups * d * d * (p + 1) * 8 > max_bytes:
        return None
    Syxx = np.zeros((groups, p, d, d))
    Sxx = np.zeros((groups, d, d))
    Sy = np.zeros((groups, p))
    cnt = np.zeros(groups)
    for i, (Xc, Yc) in enumerate(source.chunks()):
        g = i % groups
        Xc = np.asarray(Xc, dtype=np.float64)
        Yc = np.asarray(Yc, dtype=np.float64).reshape(len(Xc), -1)
        Sxx[g] += Xc.T @ Xc
        for j in range(p):
            Syxx[g, j] += (Xc * Yc[:, [j]]).T @ Xc
        Sy[g] += Yc.sum(axis=0)
        cnt[g] += len(Xc)
    used = cnt > 0
    if used.sum() < 2:
        return None
    n = cnt.sum()
    mu = Sy.sum(axis=0) / n

    def t2(syxx, sxx, m):
        return np.hstack([syxx[j] / m - mu[j] * sxx / m for j in range(p)])

    B = t2(Syxx.sum(axis=0), Sxx.sum(axis=0), n)
    out = _rank_from_groups(B, [t2(Syxx[g], Sxx[g], cnt[g]) for g in np.flatnonzero(used)])
    out["rows"] = int(n)
    return out


def measure_data(X: np.ndarray, Y: np.ndarray, rng: np.random.Generator) -> tuple[dict, SymmetryTest]:
    """The evidence of the module docstring measured on the rows ``X``, ``Y`` (the input law, heavy tails,
    constant inputs, symmetry), and the symmetry test itself."""
    from scipy import stats  # deferred: scipy.stats costs a third of a second to import

    n, d = X.shape
    p = Y.shape[1]
    ev: dict[str, Any] = {}
    mean = X.mean(axis=0)
    Xc = X - mean
    cov = Xc.T @ Xc / max(n - 1, 1)
    dev = input_deviation_from_standard(Covariance(mean_x=mean, mean_y=Y.mean(axis=0), xx=cov, yx=np.zeros((p, d)),
                                                   yy=None, n=n, ddof=1))
    ev.update(max_abs_mean=dev.mean, mean_tolerance=dev.mean_tolerance,
              cov_deviation=dev.covariance, cov_tolerance=dev.covariance_tolerance)
    # zero-variance (constant) columns, at the whitening's numerical-rank threshold below: each is a
    # direction the covariance lacks, so no Gaussian law N(mu, Sigma) with Sigma of full rank fits them
    var = np.diag(cov)
    const = np.flatnonzero(var <= CONSTANT_VARIANCE * max(float(var.max()), 1e-300))
    ev["constant_columns"] = [int(j) for j in const]
    ev["constant_values"] = [float(mean[j]) for j in const]
    # whiten (on the numerical range of the covariance)
    vals, vecs = np.linalg.eigh(cov)
    keep = vals > 1e-12 * max(vals.max(), 1e-300)
    Z = Xc @ (vecs[:, keep] / np.sqrt(vals[keep]))
    ev["covariance_rank"] = int(keep.sum())
    r = Z.shape[1]
    dirs = rng.standard_normal((r, min(2 * r, 40)))
    dirs /= np.linalg.norm(dirs, axis=0)
    proj = np.hstack([Z, Z @ dirs])
    m = proj.shape[1]
    skew = stats.skew(proj, axis=0)
    kurt = stats.kurtosis(proj, axis=0)
    ev["max_skew_z"] = float(np.max(np.abs(skew)) / np.sqrt(6.0 / n))
    ev["max_kurtosis_z"] = float(np.max(np.abs(kurt)) / np.sqrt(24.0 / n))
    if n >= 20:
        pvals = stats.normaltest(proj, axis=0).pvalue
        ev["normality_p"] = float(min(1.0, np.min(pvals) * m))
    else:
        ev["normality_p"] = float("nan")
    ev["n_directions"] = m
    tail = _hill_tail_index(Z)
    ev["tail_index_min"] = float(np.min(tail)) if tail.size else float("nan")
    sym = symmetry_test(X)
    ev["symmetry_p"] = float(sym.p_value)
    ev["symmetry_statistic"] = float(sym.statistic)
    ev["y_std"] = float(np.sqrt(np.mean(Y.var(axis=0))))
    return ev, sym


def width_and_noise(X: np.ndarray, Y: np.ndarray, gaussian: bool, standard: bool) -> tuple[dict, dict]:
    n, d = X.shape
    p = Y.shape[1]
    G = 10
    width: dict[str, Any] = {"estimate": None, "range": None, "sure": False, "method": "none"}
    noise: dict[str, Any] = {"std": None, "kind": None}
    idx = np.array_split(np.arange(n), G) if n >= 10 * G else None
    yc = Y - Y.mean(axis=0)
    low = p
    # (b) the rank of Cov(y): min(p, k) for a generic network. Sampling moves Cov(y) only inside the span
    # of the k units' outputs, so outside it the eigenvalues are the label-noise variance alone: an
    # eigenvalue is signal when it stands clearly above the smallest one (the noise floor), by the
    # spread of p - k white-noise eigenvalues (Marchenko-Pastur edge ~ (1 + sqrt(p/n))^2, taken with a
    # wide margin) plus 4 standard errors of its own (from the row groups)
    if p > 1 and idx is not None:
        cy = yc.T @ yc / n
        lam, vec = np.linalg.eigh(cy)
        groups = np.array([[v @ (yc[i].T @ yc[i] / len(i)) @ v for v in vec.T] for i in idx])
        se = groups.std(axis=0, ddof=1) / np.sqrt(G)
        floor, edge = lam[0], np.sqrt(p / n)
        tiny = 1e-12 * max(lam[-1], 1e-300)
        high = int(np.sum(lam > floor * (1 + 5 * edge) + 2 * se + tiny))
        low = int(np.sum(lam > floor * (1 + 10 * edge) + 4 * se + tiny))
        if low < p:
            noise = {"std": float(np.sqrt(max(np.mean(lam[:p - low]), 0.0))), "kind": "estimate"}
            width = {"estimate": low, "range": (low, high), "sure": low == high,
                     "method": "rank of Cov(y) (p > k)", "spectrum": lam[::-1].tolist(),
                     "noise_level": float(max(floor, 0.0))}
            if low == p - 1 and floor > 1e-10 * max(lam[-1], 1e-300):
                # only the smallest eigenvalue was taken for the noise floor: with k >= p it is signal
                # too (uniform inputs, p = 3, k = 3 or 5 were reported as a sure 2), and Cov(y) alone
                # cannot tell k = p - 1 under label noise from k >= p
                width.update(range=(low, None), sure=False,
                             method="rank of Cov(y): p - 1, or k >= p with the smallest eigenvalue signal")
    # (a) the rank of the stacked T_2 (Gaussian inputs, whitened if needed)
    if gaussian and idx is not None and d >= 2:
        if standard:
            Z = X
        else:
            mean = X.mean(axis=0)
            vals, vecs = np.linalg.eigh(np.cov(X, rowvar=False))
            keep = vals > 1e-12 * vals.max()
            Z = (X - mean) @ (vecs[:, keep] / np.sqrt(vals[keep]))

        def t2(rows):
            Zr, yr = Z[rows], yc[rows]
            m = len(rows)
            return np.hstack([(Zr * yr[:, [j]]).T @ Zr / m - np.eye(Z.shape[1]) * yr[:, j].mean()
                              for j in range(p)])

        B = t2(np.arange(n))
        rk = _rank_from_groups(B, [t2(i) for i in idx])
        # a full-rank T_2 (k >= d) overrules a smaller Cov(y) rank too (p = 3, k = 12 > d = 8 was a sure 2),
        # and a sure T_2 rank below d settles an unsure Cov(y) one (p - 1 with label noise)
        t2_sure = rk["low"] == rk["high"] and rk["low"] < Z.shape[1]
        if width["estimate"] is None or rk["low"] < Z.shape[1] or rk["low"] > width["estimate"]:
            # (never below the Cov(y) rule's own lower bound: a nearly linear unit shows in Cov(y), hardly
            # in T_2)
            if width["estimate"] is None or width["estimate"] >= p or rk["low"] > width["estimate"] or (
                    t2_sure and not width["sure"] and rk["low"] >= width["range"][0]):
                width = {"estimate": rk["low"], "range": (rk["low"], rk["high"]),
                         "sure": rk["low"] == rk["high"] and rk["low"] < Z.shape[1],
                         "method": "rank of the Hermite matrices T_2 (Gaussian inputs)",
                         "spectrum": rk["singular_values"], "noise_level": rk["noise_level"]}
                if rk["low"] >= Z.shape[1]:
                    width["method"] += "; full rank: k >= d"
        if noise["kind"] == "estimate" and width["estimate"] is not None and width["estimate"] > low:
            # T_2 sees more units than Cov(y) stood out for, so the eigenvalues taken as the noise floor
            # hold signal too; the smallest one still bounds the noise variance from above, because
            # Cov(y) = Cov(network output) + sigma^2 I
            noise = {"std": float(np.sqrt(max(lam[0], 0.0))), "kind": "upper bound"}
        if noise["std"] is None and p == 1:
            Zs, ys = Z, yc[:, 0]
            t1 = Zs.T @ ys / n
            T2 = (Zs * ys[:, None]).T @ Zs / n - np.eye(Zs.shape[1]) * ys.mean()
            bound = float(ys.var() - t1 @ t1 - 0.5 * np.sum(T2 * T2))
            noise = {"std": float(np.sqrt(max(bound, 0.0))), "kind": "upper bound"}
    return width, noise


def input_law_flags(ev: dict, d: int) -> tuple[bool, bool, bool]:
    """(looks Gaussian, looks standard, heavy-tailed) from the measured evidence."""
    standard = ev["max_abs_mean"] <= ev["mean_tolerance"] and ev["cov_deviation"] <= ev["cov_tolerance"]
    heavy = bool(ev["tail_index_min"] < TAIL_INDEX_MIN)  # False when not measured (NaN)
    normal = (not heavy) and ev["normality_p"] >= ALPHA and ev["covariance_rank"] == d
    return normal, standard, heavy


def estimate_width(X, Y=None, *, max_rows: int = MAX_ROWS, random_state=None) -> dict:
    """The number of hidden units, from the rank of ``Cov(y)`` or of the Hermite matrices ``T_2``.

    The rule of :func:`check` (module docstring): singular values above ``2 tau`` count, those in
    ``(tau, 2 tau]`` make the estimate unsure. Reads at most ``max_rows`` rows (the first ones).

    Returns
    -------
    dict
        ``estimate`` (int, or None when no rule applies: one output and non-Gaussian inputs),
        ``range`` ``(low, high)``, ``sure`` (bool), ``method``, ``spectrum`` and ``noise_level``,
        ``input_law`` (the law the rule assumed) and ``constant_columns`` (zero-variance inputs, from 0).
    """
    check_positive_int(max_rows, "max_rows")
    rng = check_random_state(random_state)
    Xa, Ya, _ = read_rows(X, Y, int(max_rows))
    if Xa.shape[0] < 50:
        raise InputError(f"estimating the width needs at least 50 rows, got {Xa.shape[0]}.")
    ev, _ = measure_data(Xa, Ya, rng)
    normal, standard, _ = input_law_flags(ev, Xa.shape[1])
    width, _ = width_and_noise(Xa, Ya, normal, standard)
    width["input_law"] = "standard Gaussian" if normal and standard else (
        "Gaussian, not standard" if normal else "not Gaussian")
    width["constant_columns"] = ev["constant_columns"]
    return width
