"""Which learners' assumptions does a data set meet? ``nr.check(X, Y)`` and ``nnrecover check``.

(The module is called ``assumptions`` so that ``nnrecover.check`` stays the function: a submodule of the
same name would replace the package attribute once imported.)

Every provable learner rests on an assumption about the input law (Gaussian, or symmetric), on the
width (at least as many inputs as hidden units for the order-1 algorithms, and at least as many
outputs for Bakshi et al. and Ge et al.: ``k <= min(m, d)``) and on moments that exist. :func:`check` measures each of these on the data and gives a verdict per learner with the
evidence, so that a user knows before fitting which algorithm's guarantee applies.

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
* **the learners' own refusals**: each verdict is "no" where the learner's fit would refuse the data,
  decided by the functions the fit itself calls (numbers of inputs, outputs, hidden units and rows; Ge et
  al.'s symmetry and second-moment tests), so "yes" is never followed by a refusal.
* **label noise**: with ``p`` larger than the rank of ``Cov(y)``, the mean of its trailing
  eigenvalues (isotropic noise); with Gaussian inputs, an upper bound from Parseval's identity:
  ``Var(y) - ||T_1||^2 - ||T_2||_F^2 / 2`` (the energy of ``f`` above order 2 is counted as noise).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._validation import check_random_state
from .errors import InputError

__all__ = ["check", "estimate_width", "CheckReport", "Verdict"]

#: rows and elements read at most (the first rows of the data)
MAX_ROWS = 200_000
MAX_ELEMENTS = 20_000_000
#: a tail index below this means fourth moments may be infinite
TAIL_INDEX_MIN = 4.5
#: significance level of the Gaussianity and symmetry tests
ALPHA = 1e-3
#: a column whose variance is at most this times the largest column variance is reported as constant
CONSTANT_VARIANCE = 1e-12


@dataclass
class Verdict:
    """One learner's verdict: ``applies`` is ``"yes"``, ``"no"`` or ``"unsure"``, with the reasons."""

    learner: str
    paper: str
    applies: str
    reasons: list[str]
    command: str | None = None


@dataclass
class CheckReport:
    """Result of :func:`check`; ``str(report)`` is the human-readable report.

    Attributes
    ----------
    n_samples, n_inputs, n_outputs : int
        Rows read, ``d`` and ``p``.
    input_law : str
        ``"standard Gaussian"``, ``"Gaussian, not standard"`` or ``"not Gaussian"``.
    symmetric : bool
    heavy_tailed : bool
    width : dict
        ``estimate`` (int or None), ``range`` (low, high; high None: no upper bound from the data), ``sure``
        (bool), ``method`` and the spectrum.
    label_noise : dict
        ``std`` (an estimate or an upper bound) and ``kind`` (``"estimate"``, ``"upper bound"`` or ``None``).
    evidence : dict
        Every measured statistic with its tolerance.
    verdicts : list of Verdict
    recommended : str or None
        The command of the first learner that applies.
    """

    n_samples: int
    n_inputs: int
    n_outputs: int
    input_law: str
    symmetric: bool
    heavy_tailed: bool
    width: dict
    label_noise: dict
    evidence: dict = field(repr=False)
    verdicts: list = field(default_factory=list)
    recommended: str | None = None

    def verdict(self, learner: str) -> Verdict:
        """The verdict of the learner registered as ``learner``."""
        for v in self.verdicts:
            if v.learner == learner:
                return v
        raise InputError(f"no verdict for {learner!r}; learners checked: {[v.learner for v in self.verdicts]}.")

    def __str__(self) -> str:
        ev = self.evidence
        w = self.width
        lines = [f"data: {self.n_samples} rows read, d = {self.n_inputs} inputs, p = {self.n_outputs} output(s)",
                 "",
                 f"input law       {self.input_law}: max |mean| {ev['max_abs_mean']:.3g} (tolerance "
                 f"{ev['mean_tolerance']:.3g}), ||Cov - I||_2 {ev['cov_deviation']:.3g} (tolerance "
                 f"{ev['cov_tolerance']:.3g}); whitened: max |skewness| z {ev['max_skew_z']:.1f}, max |excess "
                 f"kurtosis| z {ev['max_kurtosis_z']:.1f}, normality p-value {ev['normality_p']:.2g} "
                 f"(Bonferroni over {ev['n_directions']} directions; reject below {ALPHA:g})",
                 ("tails           not measured (fewer than %d rows)" % TAIL_MIN_ROWS
                  if np.isnan(ev["tail_index_min"]) else
                  f"tails           tail index (Hill, top 1%) min {ev['tail_index_min']:.2f} "
                  f"({'heavy: fourth moments may not exist' if self.heavy_tailed else 'light'}; "
                  f"threshold {TAIL_INDEX_MIN})"),
                 "constant inputs " + (f"{_constant_text(ev)} (zero variance, columns counted from 0): not "
                                       "Gaussian; not symmetric unless 0" if ev.get("constant_columns") else "none"),
                 f"symmetry        {'symmetric' if self.symmetric else 'not symmetric'}: x vs -x test p-value "
                 f"{ev['symmetry_p']:.2g}" + ("" if not self.heavy_tailed else " (unreliable with heavy tails)"),
                 "width           " + (f"k = {w['estimate']}" if w["estimate"] is not None else "not estimated")
                 + ("" if w["sure"] or w["estimate"] is None else
                    f" (unsure: {w['range'][0]}-{w['range'][1] if w['range'][1] is not None else 'more'})")
                 + f" [{w['method']}]",
                 "label noise     " + (f"std {self.label_noise['std']:.3g} ({self.label_noise['kind']})"
                                       if self.label_noise["std"] is not None else "not estimated"),
                 ""]
        rows = [("learner", "paper", "applies", "why")]
        rows += [(v.learner, v.paper, v.applies, "; ".join(v.reasons)) for v in self.verdicts]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        for r in rows:
            lines.append("  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3])
        lines.append("")
        lines.append("recommended: " + (self.recommended if self.recommended else
                                        "no provable learner applies; see the reasons above. "
                                        "gradient-descent (nnrecover fit DATA --learner gradient-descent -k K) "
                                        "fits any data without a guarantee."))
        if not self.recommended:
            lines.append("what would be needed: inputs x ~ N(0, I) with no constant column, and one output "
                         "(Awasthi et al.) or at least as many outputs as hidden units (Bakshi et al.); or a "
                         "symmetric input law with at least as many outputs as hidden units (Ge et al.); finite "
                         "fourth moments; if you can query the model at inputs of your choice, "
                         "query it at Gaussian inputs (nnrecover extract).")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------ measurements
def _read(X, Y, max_rows: int):
    """The first rows of the data (arrays or any data source of ``as_data_source``), as float64 arrays, and
    the number of rows the data hold (``None`` when not known: a stream read only in part)."""
    from .data import as_data_source

    if Y is not None:
        from .learners.base import _coerce_array

        X = _coerce_array(X, "X", is_X=True)
        Y = _coerce_array(Y, "Y", is_X=False)
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
    from .learners.base import MAGNITUDE_RANGE

    lo, hi = MAGNITUDE_RANGE
    for name, A in (("X", Xa), ("Y", Ya)):
        m = float(np.max(np.abs(A), initial=0.0))
        if m > hi or 0 < m < lo:
            # the same range every learner computes in (learners.base._check_magnitude): the moments of
            # the checks below overflow or underflow outside it
            raise InputError(f"the largest |{name}| entry is {m:.3g}, outside the range [2^-64, 2^64] in which "
                             f"the checks' moments stay finite and nonzero in float64; rescale {name} (e.g. divide "
                             "by its standard deviation).")
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


def _measure(X: np.ndarray, Y: np.ndarray, rng: np.random.Generator) -> dict:
    from scipy import stats

    from .learners.ge2019.conditions import second_moment_refusal, symmetry_refusal
    from .learners.ge2019.moments import symmetry_test
    from .moments.statistics import Covariance, input_deviation_from_standard

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
    # Ge et al.'s learner refuses with these two tests (its own functions); the check's symmetry level ALPHA
    # is stricter than the learner's default, so it says no wherever the learner would refuse
    ev["symmetry_refusal"] = symmetry_refusal(sym, ALPHA)
    ev["second_moment_refusal"] = second_moment_refusal(X.T @ X / n)
    ev["y_std"] = float(np.sqrt(np.mean(Y.var(axis=0))))
    return ev


def _width_and_noise(X: np.ndarray, Y: np.ndarray, gaussian: bool, standard: bool) -> tuple[dict, dict]:
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


# ------------------------------------------------------------------------------------------ verdicts
def _constant_text(ev: dict) -> str:
    return ", ".join(f"x_{j} = {v:.4g}" for j, v in zip(ev.get("constant_columns", []), ev.get("constant_values", [])))


def _verdicts(report: CheckReport) -> list[Verdict]:
    """One verdict per registered learner. A learner's refusals are decided by the function its own fit
    calls (``width_refusal`` of Bakshi et al. and of Ge et al., Goel-Panigrahy's ``data_refusal``, Awasthi et
    al.'s ``order_limit``, Ge et al.'s symmetry and second-moment tests, Bakshi et al.'s row counts), so a
    verdict is never "yes" on data the learner then refuses."""
    from .learners import available
    from .learners.awasthi2021.coefficients import SPLIT_BLOCK
    from .learners.awasthi2021.estimator import order_limit
    from .learners.bakshi2019._common import width_refusal as bakshi_width
    from .learners.bakshi2019.pipeline import rows_refusal as bakshi_rows
    from .learners.ge2019.conditions import width_refusal as ge_width
    from .learners.goel2019.estimator import data_refusal as goel_refusal

    ev = report.evidence
    d, p = report.n_inputs, report.n_outputs
    w = report.width
    k = w["estimate"]
    if k == 0:
        # no singular value above the noise: the data show no hidden unit, so no width to judge by (and
        # "-k 0" is no command); n_hidden="auto" refuses these data for the same reason
        k = None
    low, high = (w.get("range") or (k, k)) if k is not None else (None, None)
    if k is not None and "k >= d" in w.get("method", ""):
        high = None  # a full-rank T_2 bounds the width from below only
    gauss_std = report.input_law == "standard Gaussian"
    gauss = report.input_law != "not Gaussian"
    tails = report.heavy_tailed
    constant = _constant_text(ev)
    k_arg = f" -k {k}" if k is not None else " -k K"
    out = []

    def width_check(refusal, reasons: list) -> str:
        """'no' when the learner refuses every width the data allow (its own message), 'unsure' when it
        refuses some of them or the width is unsure, 'yes' when it accepts the (sure) width."""
        if k is None:
            why = refusal(1)  # refused whatever the width (e.g. for its number of outputs)
            if why:
                reasons.append(why.rstrip("."))
                return "no"
            reasons.append("width not estimated: pass -k K" if w["estimate"] is None else
                           "no hidden unit stands out of the noise in the width statistic: pass -k K if you "
                           "know the width")
            return "unsure"
        why = refusal(low)
        if why:
            reasons.append(why.rstrip("."))
            return "no"
        if high is None:
            if refusal(10 ** 9):
                reasons.append(f"at least {low} hidden units, no upper bound from the data: the learner refuses "
                               "too many units for these inputs and outputs")
                return "unsure"
        elif refusal(high):
            reasons.append(f"{low} to {high} hidden units; with {high}: {refusal(high).rstrip('.')}")
            return "unsure"
        reasons.append(f"{k} hidden units" + ("" if w["sure"] else " (width unsure)") + " accepted")
        return "yes" if w["sure"] else "unsure"

    def law(reasons: list) -> str:
        """The Gaussian input law of Awasthi et al., Bakshi et al. and Goel-Panigrahy."""
        if constant:
            reasons.append(f"constant input(s) {constant} (zero variance): the inputs are not N(0, I)")
            return "no"
        if tails:
            reasons.append("heavy tails: fourth moments may not exist")
            return "no"
        if gauss_std:
            reasons.append("inputs look N(0, I)")
            return "yes"
        if gauss:
            reasons.append("Gaussian but not N(0, I): whiten X first (mean and covariance off)")
            return "unsure"
        reasons.append("inputs are not Gaussian")
        return "no"

    def combine(*parts: str) -> str:
        return "no" if "no" in parts else ("unsure" if "unsure" in parts else "yes")

    def hermite_width(kk: int) -> str | None:
        order = 1 if kk <= d else 2
        limit = order_limit(d, order)
        if kk <= limit:
            return None
        return (f"hermite-tensor takes at most {order_limit(d, 2)} hidden units with {d} inputs (order 2: "
                f"0.9 d(d+1)/2, Theorem 3.2); got {kk}")

    for rec in available(learners_only=True):
        reasons: list[str] = []
        cmd = f"nnrecover fit DATA --learner {rec.name}{k_arg}"
        if rec.name == "hermite-tensor":
            parts = [law(reasons)]
            if constant:
                reasons.append("a constant input only shifts the hidden biases, which this learner fits: drop "
                               "the constant column(s) and check again")
            if p != 1:
                reasons.append(f"learns one output (Awasthi et al.), the data have {p}: fit one output at a time "
                               "(save that column as its own --targets file)")
                parts.append("no")
            parts.append(width_check(hermite_width, reasons))
            if k is not None and k >= d:
                reasons.append(f"with {d} or more hidden units (k >= d) the data cannot tell the width: pass -k "
                               "yourself (order 2)")
                parts.append("unsure")
            rows = ev.get("rows_available")
            if rows is not None and rows <= SPLIT_BLOCK:
                reasons.append(f"needs more than {SPLIT_BLOCK} samples (the split halves of Algorithm 4's "
                               f"thresholds), got {rows}")
                parts.append("no")
            verdict = combine(*parts)
        elif rec.name in ("exact-relu", "bakshi2019-noisy"):
            a = law(reasons)
            noisy = rec.name == "bakshi2019-noisy"
            rows = ev.get("rows_available")
            b = width_check(lambda kk: bakshi_width(kk, d, p) or bakshi_rows(rows, d, kk, noisy=noisy), reasons)
            reasons.append("no hidden biases in Bakshi et al.'s model; refine=True fits biases afterwards")
            noise = report.label_noise
            if rec.name == "exact-relu" and noise["kind"] == "estimate" and noise["std"] > 1e-6 * ev["y_std"]:
                reasons.append(f"label noise std {noise['std']:.2g}: the exact algorithm needs noiseless labels, "
                               "use bakshi2019-noisy")
                b = combine(b, "no")
            elif rec.name == "exact-relu" and noise["kind"] == "upper bound" and noise["std"] > 1e-6 * ev["y_std"]:
                reasons.append(f"label noise std at most {noise['std']:.2g} (an upper bound: the data cannot tell "
                               "noise from signal here): the exact algorithm needs noiseless labels; its "
                               "certificate says whether they were, else use bakshi2019-noisy")
                b = combine(b, "unsure")
            verdict = combine(a, b)
        elif rec.name == "pure-neuron":
            parts = []
            if tails:
                reasons.append("heavy tails: the detector uses fourth moments")
                parts.append("no")
            elif ev.get("symmetry_refusal"):
                reasons.append(ev["symmetry_refusal"].rstrip("."))
                parts.append("no")
            else:
                reasons.append("inputs symmetric (x and -x equal in law)")
            if ev.get("second_moment_refusal"):
                reasons.append(ev["second_moment_refusal"].rstrip("."))
                parts.append("no")
            parts.append(width_check(lambda kk: ge_width(kk, d, p), reasons))
            reasons.append("no hidden biases in Ge et al.'s model")
            verdict = combine(*parts)
        elif rec.name == "goel2019":
            a = law(reasons)
            b = width_check(lambda kk: goel_refusal(kk, d, p), reasons)
            reasons.append("the threshold t of the units must be known (--option threshold=T) and high enough "
                           "(Assumption 3); the data cannot tell it")
            verdict = combine(a, b, "unsure")
            cmd = f"nnrecover fit DATA --learner {rec.name}{k_arg} --option threshold=T"
        elif rec.paper == "baseline":
            reasons.append("any data; no guarantee (random starts + local optimisation)")
            verdict = "yes"
        else:
            reasons.append(f"{rec.algorithm}: assumptions {', '.join(rec.assumptions) or '(none listed)'} "
                           "cannot all be judged from (X, Y); read them before fitting")
            verdict = "no" if law([]) == "no" else "unsure"
            cmd = None
        out.append(Verdict(rec.name, rec.paper, verdict, reasons, cmd))
    return out


def _law(ev: dict, d: int) -> tuple[bool, bool, bool]:
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
    from ._validation import check_positive_int

    check_positive_int(max_rows, "max_rows")
    rng = check_random_state(random_state)
    Xa, Ya, _ = _read(X, Y, int(max_rows))
    if Xa.shape[0] < 50:
        raise InputError(f"estimating the width needs at least 50 rows, got {Xa.shape[0]}.")
    ev = _measure(Xa, Ya, rng)
    normal, standard, _ = _law(ev, Xa.shape[1])
    width, _ = _width_and_noise(Xa, Ya, normal, standard)
    width["input_law"] = "standard Gaussian" if normal and standard else (
        "Gaussian, not standard" if normal else "not Gaussian")
    width["constant_columns"] = ev["constant_columns"]
    return width


def check(X, Y=None, *, max_rows: int = MAX_ROWS, random_state=None) -> CheckReport:
    """Measure which learners' assumptions the data ``(X, Y)`` meets.

    Parameters
    ----------
    X : array of shape (n, d), or a data source
        Inputs (or any data source of :func:`nnrecover.data.as_data_source` with ``Y=None``).
    Y : array of shape (n,) or (n, p), optional
        Targets.
    max_rows : int, default 200000
        Rows read at most (the first ones; also at most 2e7 values of ``X``).
    random_state : int, Generator or None
        Seeds the random projections of the normality test.

    Returns
    -------
    CheckReport
        ``str(report)`` is the report: the measured evidence, one verdict per registered learner
        (``yes``, ``no`` or ``unsure`` with the reasons) and a recommended command.

    Examples
    --------
    >>> import nnrecover as nr
    >>> teacher = nr.random_network(8, 3, n_outputs=5, rng=0)
    >>> X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(8), 20_000, rng=1)
    >>> report = nr.check(X, Y, random_state=0)
    >>> report.input_law, report.width["estimate"]
    ('standard Gaussian', 3)
    """
    from ._validation import check_positive_int

    check_positive_int(max_rows, "max_rows")
    rng = check_random_state(random_state)
    Xa, Ya, available = _read(X, Y, int(max_rows))
    n, d = Xa.shape
    if n < 50:
        raise InputError(f"check needs at least 50 rows to measure anything, got {n}.")
    if np.all(Xa == Xa[:1]):
        raise InputError("every row of X is the same (each input column is constant): there is nothing to "
                         "learn from; check that the right columns were read.")
    ev = _measure(Xa, Ya, rng)
    ev["rows_available"] = available
    normal, standard, heavy = _law(ev, d)
    law = ("standard Gaussian" if normal and standard else "Gaussian, not standard" if normal else "not Gaussian")
    symmetric = ev["symmetry_p"] >= ALPHA
    width, noise = _width_and_noise(Xa, Ya, normal, standard)
    report = CheckReport(n_samples=n, n_inputs=d, n_outputs=Ya.shape[1], input_law=law, symmetric=symmetric,
                         heavy_tailed=heavy, width=width, label_noise=noise, evidence=ev)
    report.verdicts = _verdicts(report)
    # the exact learner when it applies, learners that use every output before the scalar one
    order = (["hermite-tensor", "exact-relu", "bakshi2019-noisy", "pure-neuron"] if report.n_outputs == 1 else
             ["exact-relu", "bakshi2019-noisy", "pure-neuron", "hermite-tensor"])
    ranked = sorted(report.verdicts, key=lambda v: order.index(v.learner) if v.learner in order else len(order))
    first = next((v for v in ranked if v.applies == "yes" and v.paper != "baseline" and v.command), None)
    report.recommended = first.command if first else None
    return report
