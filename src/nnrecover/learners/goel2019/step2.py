"""Step 2 of Goel & Panigrahy (2019): refining one direction to any precision when P is monotone.

Section 2.2 and Appendix B.5 of the paper. After Step 1 has produced a direction ``z`` within
``1/poly(d)`` of a unit ``w_1*`` (the Step 1 error has a floor set by the nonlinear part of ``P``,
Lemma 2), Step 2 drives the angle to any ``epsilon``. It uses only the event ``{f(x) != c_0}``, which
for a monotone ``P`` with positive linear terms is the union of the events ``{w_i*^T x >= t}``
(Lemma 5): the *firing* event, passed here as a boolean label ``fired``.

* :func:`estimate_tan_alpha` is the paper's ``EstimateTanAlpha`` (Algorithm 2; its box is missing from
  the paper's text and is rebuilt from Lemmas 3, 4 and 6 and the displayed equation of their proof):
  in the slab ``l(z, t', eps) = {x : z^T x in [t' - eps, t']}`` the conditional firing probability is
  ``p(t') = Phi((t' cos alpha - t) / sin alpha) + O(eps t')`` (Lemma 4) plus a contamination
  ``eta = d e^{-Omega(t^2)}`` by the other units (Lemma 5). Bisection finds ``t_1, t_2`` with
  ``p = 0.4, 0.6`` (Lemma 6: ``0 <= t_1 <= t_2 <= t / cos alpha``), and
  ``(t_2 - t_1) / (Phi^{-1}(0.6) - Phi^{-1}(0.4)) = (1 +- O(eta)) tan alpha +- O(eps)`` (Lemma 3).
* :func:`refine_estimate` is Algorithm 1 (``RefineEstimate``): a random local search on the sphere
  that perturbs ``z`` by a Gaussian of scale ``0.1 sin(alpha) / d`` in the hyperplane orthogonal to
  ``z``, projects back to the sphere (Lemma 7), and keeps the move when the estimated angle drops by
  the factor ``1 - 0.01/d``. Theorem 5: ``O(T)`` iterations reach angle ``(1 - c/d)^T gamma``.

Two [IMPL] extensions, off by default, make a fixed sample go much further: more than two probability
``levels`` (the slope of the crossings ``t_k`` on ``Phi^{-1}(p_k)`` by least squares, which uses more slabs
of the same rows), and a slab width that shrinks with the estimated angle (``relative_slab_width``), so
that the ``O(eps)`` error of Lemma 3 stays below the angle while each slab keeps as many rows as possible.

Both work from two kinds of slab data (``SlabSource``):

:class:`SampleSlabs`             i.i.d. samples ``x ~ N(0, I)`` with their firing labels (the paper's
                                 setting); every estimate reuses the same rows.
:class:`ConditionalSlabSampler`  an exact conditional sampler: ``x = s z + (I - z z^T) g`` with ``s``
                                 from the truncated normal on the slab and ``g ~ N(0, I)``, which is the
                                 law of a Gaussian sample conditioned on the slab [IMPL: a query model;
                                 the paper assumes i.i.d. samples]. It lets the slab hold as many
                                 points as wanted, so the refinement can be followed far below the
                                 statistical floor of a fixed sample.

Paper symbols and their names here
----------------------------------
=========================  ==========================================================================
``z``, ``w_1*``            ``z`` (unit direction refined), the unknown target unit
``alpha_1``                ``angle`` (``arctan`` of the estimate); ``tan alpha_1``: ``tan_alpha``
``t``                      ``threshold`` (known, shared by all units)
``eps`` / ``eps_1``        ``slab_width``
``eps_2``                  ``target_angle``
``l(z, t', eps)``          the slab ``[t' - slab_width, t']`` along ``z``
``t_1``, ``t_2``           ``t_low``, ``t_high`` (conditional probability ``levels`` 0.4 and 0.6)
``d``                      ``step_dim`` (the paper has ``n = d``; default: the input dimension)
``0.1 sin(alpha) / d``     ``step_scale * sin(alpha) / step_dim``, ``step_scale = 0.1``
``0.01 alpha / d``         ``acceptance_decrease / step_dim``, ``acceptance_decrease = 0.01``
``f(x) != c_0``            ``fired`` (boolean firing labels)
=========================  ==========================================================================

Rules of the local search (:func:`refine_estimate`)
---------------------------------------------------
``mode="faithful"`` uses the paper's constants: step ``0.1 sin(alpha)/d`` (Lemma 7's proof; Algorithm 1
prints ``0.1 sin(alpha/d)``, the same for small ``alpha``) and acceptance ``alpha' <= (1 - 0.01/d) alpha``
(Algorithm 1 prints ``alpha' <= 0.01 alpha / d``, which would demand a 100d-fold decrease; the proof of
Lemma 7 shows a decrease by a factor ``1 - Omega(1/d)``, so the test is read as that factor). These
constants are safe but slow: one accepted move gains only ``0.01 alpha/d``, far below the statistical
resolution ``~3.5 / sqrt(n_slab)`` of one estimate unless the slabs are huge.
``mode="practical"`` [IMPL] takes the step ``sin(alpha)/d`` (close to the step ``alpha/(d - 2)`` that
maximises the expected decrease of a random search on the sphere) and accepts any decrease that exceeds
``confidence`` standard errors of the paired difference (``acceptance="significant"``). Every field can
be overridden individually. In both modes the two estimates of one iteration use common random numbers
(the same rows, or the same conditional draws rotated to the two directions), which makes their
difference far less noisy than either estimate.
"""

from __future__ import annotations

import math
import numbers
import warnings
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from scipy import special

from ..._threads import effective_n_jobs
from ..._validation import (
    as_2d_float,
    as_real_array,
    check_positive_int,
    check_random_state,
)
from ...errors import AssumptionError, AssumptionWarning, InputError
from ...refine import gather_samples
from ..registry import register

__all__ = ["SlabSource", "SampleSlabs", "ConditionalSlabSampler", "TanAlphaEstimate", "RefineEstimateResult",
           "estimate_tan_alpha", "refine_estimate", "angle_between", "PAPER_LEVELS", "REFINE_MODES",
           "refine_units", "step2_defaults", "step2_budget", "STEP2_HOLDOUT", "STEP2_GATHER_BYTES",
           "ES_PROGRESS_RATE", "STEP2_STEPS_PER_EFOLD", "STEP2_MAX_START_ANGLE", "DUPLICATE_ANGLE"]

#: conditional firing probabilities at ``t_1`` and ``t_2`` (paper Section 2.2, Lemma 6)
PAPER_LEVELS = (0.4, 0.6)

#: how far below the search's start a fixed sample keeps its candidate rows (:class:`SampleSlabs`): a
#: larger margin keeps more rows, and lets the direction move further before they are chosen again
CANDIDATE_MARGIN = 0.5
#: the candidates are not copied when they are more than this fraction of the rows and more than
#: _CANDIDATE_COPY_BYTES (a copy of most of a large X): every row is then projected for every direction
_CANDIDATE_MAX_FRACTION = 0.25
_CANDIDATE_COPY_BYTES = 256 << 20

#: the two presets of :func:`refine_estimate` (see the module docstring)
REFINE_MODES = {
    "faithful": dict(step_scale=0.1, acceptance="paper", acceptance_decrease=0.01),
    "practical": dict(step_scale=1.0, acceptance="significant", acceptance_decrease=0.01),
}

_ACCEPTANCE = ("paper", "greedy", "significant")

#: fraction of Step 2's rows held out of its search, on which a refined unit must beat its start
STEP2_HOLDOUT = 0.2
#: the largest normalised progress rate of a (1+1) evolution strategy on the sphere model as the dimension
#: n grows (Beyer, The Theory of Evolution Strategies, 2001, Section 3.2; Rechenberg's 1/5 rule): with the
#: best step size and exact selection, the expected distance to the optimum shrinks by this / n per step.
#: Step 2's search (Algorithm 1) is such a strategy on the angle, with noisy selection, so it does no better.
ES_PROGRESS_RATE = 0.202
#: the learner's budget of Step 2 iterations (``max_iter="auto"``, :func:`step2_budget`), per input dimension
#: and per e-fold of the angle: Theorem 5's ``O(n log(1/eps))`` with the constant ``2 / ES_PROGRESS_RATE``,
#: half the best rate of a (1+1) evolution strategy (on 10^6 fixed samples at n = 10 the searches fell by
#: about 0.1 / n of the angle per step while far from their floor, half of ``ES_PROGRESS_RATE / n``: the
#: selection is noisy). 3 / ES_PROGRESS_RATE did not help where a search ran out: it ended at the minimum
#: of its rows' estimates, 0.0136 rad, against 0.0117 after 343 iterations (n = 10, 10^6 rows)
STEP2_STEPS_PER_EFOLD = 2.0 / ES_PROGRESS_RATE
#: most bytes of inputs Step 2 gathers into memory from data that are not an in-memory array (a stream, a
#: memory map, a dask array): 2 GiB, 2.7e6 rows at d = 100, 2.7e5 at d = 1000
STEP2_GATHER_BYTES = 2 << 30
#: two units Step 2 leaves closer than this (radians) are one unit found twice (see :func:`refine_units`)
DUPLICATE_ANGLE = 0.1
#: the largest start angle (radians, the start's held-out estimate) the learner's Step 2 searches from:
#: Theorem 5 assumes a start within ``1/poly(d)`` of its unit, and from 0.54-0.67 rad (a Step 1 unit biased by
#: P's products, Lemma 2) a search of Theorem 5's length ended on another unit (test_split_half.py)
STEP2_MAX_START_ANGLE = 0.25


# ------------------------------------------------------------------------------------------ helpers
def _unit(z: Any, name: str, n: int | None = None) -> np.ndarray:
    z = as_real_array(z, name)
    if z.ndim != 1:
        raise InputError(f"{name} must be a 1-D vector, got shape {z.shape}.")
    if n is not None and z.shape[0] != n:
        raise InputError(f"{name} has {z.shape[0]} entries but the data have {n} inputs.")
    norm = float(np.linalg.norm(z))
    if not norm > 0.0:
        raise InputError(f"{name} must be a nonzero vector.")
    return z / norm


def _positive(value: Any, name: str, *, allow_zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise InputError(f"{name} must be a finite real number, got {value!r}.")
    value = float(value)
    if value < 0.0 or (value == 0.0 and not allow_zero):
        raise InputError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}.")
    return value


def angle_between(u: Any, v: Any) -> float:
    """Angle in radians between two nonzero vectors (sign counts), accurate for tiny angles.

    Uses ``2 atan2(||a - b||, ||a + b||)`` on the normalised vectors, which keeps full relative accuracy
    where ``arccos`` of the cosine loses half the digits.
    """
    a = _unit(u, "u")
    b = _unit(v, "v", a.shape[0])
    return float(2.0 * math.atan2(np.linalg.norm(a - b), np.linalg.norm(a + b)))


def _norm_sf_inverse(q: np.ndarray) -> np.ndarray:
    return -special.ndtri(q)


def _truncated_normal(u: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Quantile transform of uniforms ``u`` to N(0, 1) conditioned on ``[lo, hi]`` (inverse-cdf method).

    Works on the upper tail (survival function) for ``lo >= 0`` and on the lower tail otherwise, so a
    slab at ``t = 6`` (``Phi^c = 1e-9``) keeps full relative accuracy.
    """
    if lo >= 0.0:
        a, b = special.ndtr(-lo), special.ndtr(-hi)          # Phi^c(lo) >= Phi^c(hi)
        s = _norm_sf_inverse(a - u * (a - b))
    else:
        a, b = special.ndtr(lo), special.ndtr(hi)
        s = special.ndtri(a + u * (b - a))
    return np.clip(s, lo, hi)


# ------------------------------------------------------------------------------------------ slab data
class SlabSource(ABC):
    """Where the slab statistics of Step 2 come from (i.i.d. samples or a conditional sampler).

    A source answers, for a unit direction ``z``, how many points fall in a slab ``[lo, hi]`` along
    ``z`` and how many of them fire. :meth:`along` returns a callable ``counts(lo, hi) ->
    (n_fired, n_in_slab)`` bound to ``z``; the ``seed`` makes two directions share random numbers.
    """

    n_inputs: int

    @abstractmethod
    def along(self, z: np.ndarray, seed: int, lower: float = -np.inf) -> Callable[[float, float], tuple[int, int]]:
        """Slab counter for the unit direction ``z``; equal ``seed`` values give common random numbers.

        ``lower``: no slab will start below it (a fixed sample drops those rows before sorting)."""

    @property
    def deterministic(self) -> bool:
        """True when the counts do not depend on ``seed`` (a fixed sample)."""
        return False

    def upper_limit(self, counts_for_z, hi: float, width: float) -> float:  # noqa: ARG002
        """Largest slab position worth searching (samples: the slab must still hold points)."""
        return hi


class SampleSlabs(SlabSource):
    """Slab counts from a fixed sample ``x_k ~ N(0, I)`` with firing labels (the paper's setting).

    Parameters
    ----------
    X : array-like of shape (N, n)
        Inputs, i.i.d. standard Gaussian.
    fired : array-like of shape (N,)
        Whether ``f(x_k) != c_0`` (Lemma 5). Booleans, or 0/1 values; use :meth:`from_labels` for raw
        network outputs.
    min_count : int, default 20
        Fewest points a slab must hold for its firing fraction to be used; the bisection stops at the
        last slab position with this many points.

    Notes
    -----
    For a direction ``z`` the projections ``X z`` above the search interval's start are sorted once (firing
    and silent rows apart), so each slab query is four binary searches (``O(log N)``), and a whole
    ``EstimateTanAlpha`` costs one matrix-vector product and one sort.

    The product is taken over *candidate* rows only: those whose projection on a reference direction
    ``z_ref`` is at least ``lower - margin`` (``margin`` = :data:`CANDIDATE_MARGIN`). A row left out has
    ``z^T x < z_ref^T x + ||z - z_ref|| ||x|| <= lower`` as long as ``||z - z_ref|| max_k ||x_k|| <=
    margin``, so it could not enter any slab; the candidates are chosen again (one product with every
    row) only when ``z`` has moved further, or the search starts lower. The counts are those of all rows.
    At a threshold ``t = 3`` with the search from ``t - 1``, about 8 % of the rows are candidates; when more
    than a quarter of the rows would be (a search from near 0) and their copy would exceed 256 MiB, every
    row is projected each time instead.
    """

    def __init__(self, X: Any, fired: Any, *, min_count: int = 20):
        self.X = as_2d_float(X, "X", min_rows=2)
        f = np.asarray(fired)
        if f.shape != (self.X.shape[0],):
            raise InputError(f"fired must have shape ({self.X.shape[0]},) (one label per row of X), "
                             f"got {f.shape}.")
        if f.dtype != bool:
            f = as_real_array(f, "fired")
            if not np.all((f == 0) | (f == 1)):
                raise InputError("fired must be boolean or 0/1; convert outputs with "
                                 "SampleSlabs.from_labels(X, y).")
            f = f.astype(bool)
        self.fired = f
        self.min_count = check_positive_int(min_count, "min_count")
        self.n_inputs = self.X.shape[1]
        self._rows: np.ndarray | None = None        # the rows of X this source holds (None: all)
        self._member: np.ndarray | None = None      # the same rows as a mask over X (None: all)
        self._max_norm: float | None = None         # max_k ||x_k|| over every row of X (the margin's bound)
        self._candidates: tuple | None = None       # (z_ref, lower, rows, X of those rows, their labels)

    def split(self, fraction: float, rng: Any = None) -> tuple["SampleSlabs", "SampleSlabs"]:
        """Two sources over disjoint random rows of this one: about ``fraction`` of them in the second.

        Both read the same ``X`` (no copy). A search that chooses among directions by their estimates on
        one set of rows favours the directions whose estimates happen to be low on those rows; the other
        set gives an estimate free of that selection (the learner's held-out check of Step 2).
        """
        fraction = _positive(fraction, "fraction")
        if not fraction < 1.0:
            raise InputError(f"fraction must be in (0, 1), got {fraction}.")
        rows = np.arange(self.X.shape[0]) if self._rows is None else self._rows
        self._norm_bound()                          # once, for both parts
        held = check_random_state(rng).random(rows.size) < fraction
        if held.all() or not held.any():
            raise InputError(f"a split with fraction {fraction} of {rows.size} rows leaves one side empty.")
        return self._subset(rows[~held]), self._subset(rows[held])

    def copy(self) -> "SampleSlabs":
        """The same rows of the same ``X`` (no copy of the data) with a candidate cache of its own, for a
        search in another thread."""
        return self._subset(self._rows, self._member)

    def _subset(self, rows: np.ndarray | None, member: np.ndarray | None = None) -> "SampleSlabs":
        """A source over ``rows`` of the same ``X`` (``None``: all), with an empty candidate cache."""
        out = object.__new__(SampleSlabs)
        out.X, out.fired, out.min_count, out.n_inputs = self.X, self.fired, self.min_count, self.n_inputs
        out._rows, out._max_norm, out._candidates = rows, self._max_norm, None
        if rows is not None and member is None:
            member = np.zeros(self.X.shape[0], dtype=bool)
            member[rows] = True
        out._member = member                        # read only: shared by copies
        return out

    @property
    def n_rows(self) -> int:
        """Rows this source holds."""
        return self.X.shape[0] if self._rows is None else int(self._rows.size)

    @classmethod
    def from_labels(cls, X: Any, y: Any, *, baseline: float | None = None, tol: float = 0.0,
                    min_count: int = 20) -> "SampleSlabs":
        """Build from network outputs: ``fired = |y - c_0| > tol`` with ``c_0 = median(y)`` by default.

        The paper's footnote 5: ``f`` equals ``c_0`` most of the time, so ``c_0`` is the median.
        """
        y = as_real_array(y, "y")
        if y.ndim != 1:
            raise InputError(f"y must be 1-D, got shape {y.shape}.")
        c0 = float(np.median(y)) if baseline is None else float(baseline)
        return cls(X, np.abs(y - c0) > _positive(tol, "tol", allow_zero=True), min_count=min_count)

    @property
    def deterministic(self) -> bool:
        return True

    def along(self, z: np.ndarray, seed: int = 0, lower: float = -np.inf):
        a, fired = self._projections(z, lower)
        keep = a >= lower
        on = np.sort(a[keep & fired])                 # two plain sorts are cheaper than one argsort
        off = np.sort(a[keep & ~fired])

        def counts(lo: float, hi: float) -> tuple[int, int]:
            k = int(np.searchsorted(on, hi, side="right") - np.searchsorted(on, lo, side="left"))
            m = int(np.searchsorted(off, hi, side="right") - np.searchsorted(off, lo, side="left"))
            return k, k + m

        counts.top = np.sort(np.concatenate((on[-self._TOP:], off[-self._TOP:])))  # type: ignore[attr-defined]
        return counts

    #: the upper end of the search is found among the largest _TOP projections of each label
    _TOP = 20_000

    def _norm_bound(self) -> float:
        """``max_k ||x_k||`` over every row of ``X`` (computed once)."""
        if self._max_norm is None:
            self._max_norm = float(np.sqrt(np.max(np.einsum("ij,ij->i", self.X, self.X))))
        return self._max_norm

    def _projections(self, z: np.ndarray, lower: float) -> tuple[np.ndarray, np.ndarray]:
        """``X z`` and the labels of every row that can lie at or above ``lower`` (see the Notes)."""
        if not math.isfinite(lower):
            a = self.X @ z
            return (a, self.fired) if self._rows is None else (a[self._rows], self.fired[self._rows])
        self._norm_bound()
        c = self._candidates
        if c is None or lower < c[1] or self._max_norm * float(np.linalg.norm(z - c[0])) > CANDIDATE_MARGIN:
            a = self.X @ z
            near = a >= lower - CANDIDATE_MARGIN
            if self._rows is not None:
                near &= self._member
            rows = np.flatnonzero(near)
            if (rows.size > _CANDIDATE_MAX_FRACTION * self.X.shape[0]
                    and rows.size * self.X.shape[1] * 8 > _CANDIDATE_COPY_BYTES):
                # a search starting low (near 0) would copy most of a large X: project every row each time instead
                self._candidates = None
                return a[rows], self.fired[rows]
            c = self._candidates = (np.array(z, dtype=np.float64), float(lower), rows,
                                    np.take(self.X, rows, axis=0), self.fired[rows])
        return c[3] @ z, c[4]

    def upper_limit(self, counts_for_z, hi: float, width: float) -> float:
        top = counts_for_z.top
        # the last slab position [p_j - width, p_j] that still holds min_count rows (the _TOP largest
        # projections of each label include every row above the smaller of the two cut-offs, so the
        # counts are exact there)
        n_in = np.arange(top.size) - np.searchsorted(top, top - width, side="left") + 1
        ok = np.flatnonzero(n_in >= self.min_count)
        return min(hi, float(top[ok[-1]])) if ok.size else -np.inf


class ConditionalSlabSampler(SlabSource):
    """Exact conditional sampler for the slabs of Step 2 [IMPL; a query model, see the module docstring].

    For a slab ``[lo, hi]`` along unit ``z`` it draws ``n_per_slab`` points ``x = s z + (I - z z^T) g``
    with ``s`` from N(0, 1) truncated to ``[lo, hi]`` and ``g ~ N(0, I)``: exactly the law of
    ``x ~ N(0, I)`` conditioned on ``z^T x in [lo, hi]``. Within one :meth:`along` call the uniforms behind
    ``s`` and the Gaussian ``g`` are drawn once, so the firing fraction is a smooth function of the slab
    position during a bisection, and two directions with the same ``seed`` see the same points rotated.

    Parameters
    ----------
    fires : callable
        ``fires(H) -> bool array (m,)``. ``H`` is ``X`` of shape ``(m, n)``, or, when ``hidden_weights`` is
        given, the pre-activations ``X @ hidden_weights.T`` of shape ``(m, k)`` (cheaper: one ``(m, k)``
        product per slab instead of ``(m, n)`` inputs).
    n_inputs : int
        ``n``.
    n_per_slab : int, default 200_000
        Points per slab. The relative standard error of one tan estimate is about ``3.5/sqrt(n_per_slab)``.
    hidden_weights : array-like of shape (k, n), optional
        See ``fires``.
    """

    def __init__(self, fires: Callable[[np.ndarray], np.ndarray], n_inputs: int, *, n_per_slab: int = 200_000,
                 hidden_weights: Any = None):
        if not callable(fires):
            raise InputError("fires must be a callable returning one boolean per row.")
        self.fires = fires
        self.n_inputs = check_positive_int(n_inputs, "n_inputs")
        self.n_per_slab = check_positive_int(n_per_slab, "n_per_slab", minimum=10)
        if hidden_weights is not None:
            hidden_weights = as_2d_float(hidden_weights, "hidden_weights", n_features=self.n_inputs)
        self.hidden_weights = hidden_weights

    @classmethod
    def for_units(cls, hidden_weights: Any, threshold: float, *, n_per_slab: int = 200_000,
                  which: str = "any") -> "ConditionalSlabSampler":
        """Sampler for the firing event of step units ``u_t(w_i^T x)``: ``any`` (monotone P, Lemma 5)
        or ``all`` (the product ``X_1 ... X_k``, a P without linear part, for which Step 2 must fail)."""
        W = as_2d_float(hidden_weights, "hidden_weights")
        t = float(threshold)
        if which not in ("any", "all"):
            raise InputError(f"which must be 'any' or 'all', got {which!r}.")
        red = np.any if which == "any" else np.all
        return cls(lambda H: red(H >= t, axis=1), W.shape[1], n_per_slab=n_per_slab, hidden_weights=W)

    def along(self, z: np.ndarray, seed: int, lower: float = -np.inf):  # noqa: ARG002
        gen = np.random.default_rng(seed)
        m = self.n_per_slab
        u = gen.random(m)
        G = gen.standard_normal((m, self.n_inputs))
        G -= np.outer(G @ z, z)                    # (I - z z^T) g
        if self.hidden_weights is not None:
            base, dirn = G @ self.hidden_weights.T, self.hidden_weights @ z
        else:
            base, dirn = G, z

        def counts(lo: float, hi: float) -> tuple[int, int]:
            s = _truncated_normal(u, lo, hi)
            fired = np.asarray(self.fires(base + s[:, None] * dirn))
            if fired.shape != (m,):
                raise InputError(f"fires returned shape {fired.shape}; expected ({m},), one value per row.")
            return int(np.count_nonzero(fired)), m

        return counts


# ------------------------------------------------------------------------------------------ EstimateTanAlpha
@dataclass(frozen=True)
class TanAlphaEstimate:
    """Result of :func:`estimate_tan_alpha`.

    Attributes
    ----------
    tan_alpha : float      ``s = (t_2 - t_1) / (Phi^{-1}(p_2) - Phi^{-1}(p_1))`` (Lemma 3), or the least-squares
                           slope of the crossings on ``Phi^{-1}(p_k)`` for more than two levels
    angle : float          ``arctan(tan_alpha)``, radians
    t_low, t_high : float  slab positions ``t_1``, ``t_2`` where the firing fraction crosses the lowest and
                           the highest level
    n_low, n_high : int    points in those two slabs
    std_error : float      delta-method standard error of ``tan_alpha`` from the binomial counts
                           (``sqrt(p(1-p)/n)`` divided by the probit slope at each level)
    levels : tuple         the probabilities ``(p_1, p_2)`` (or more)
    slab_width : float     the slab width ``eps`` used
    """

    tan_alpha: float
    angle: float
    t_low: float
    t_high: float
    n_low: int
    n_high: int
    std_error: float
    levels: tuple = PAPER_LEVELS
    slab_width: float = math.nan


def _crossing(counts, level: float, lo: float, hi: float, width: float, xtol: float) -> tuple[float, int]:
    """Bisection for the slab position where the firing fraction crosses ``level`` (Lemma 6)."""

    def frac(tp: float) -> tuple[float, int]:
        k, m = counts(tp - width, tp)
        return (k / m if m else math.nan), m

    p_lo, _ = frac(lo)
    if p_lo >= level:           # an empty slab (nan) counts as below the level
        raise AssumptionError(
            f"the firing fraction is {p_lo:.3f} >= {level} already in the slab at t' = {lo:g}; Lemma 6 of "
            "Goel & Panigrahy (2019) needs it small there (a high threshold t and other units far from z). "
            "Raise the threshold, or check that the labels mark f(x) != c_0.")
    p_hi, m_hi = frac(hi)
    if not (p_hi >= level):
        raise AssumptionError(
            f"the firing fraction never reaches {level} along z on [{lo:g}, {hi:g}] (it is {p_hi:.3f} at the "
            "end): z is not close to a unit, or P is not monotone with a positive linear term (Lemma 5 of "
            "Goel & Panigrahy 2019), or a fixed sample has too few points far out along z.")
    m_at = m_hi
    while hi - lo > xtol:
        mid = 0.5 * (lo + hi)
        p, m = frac(mid)
        if p >= level:          # an empty slab (nan) counts as below the level
            hi, m_at = mid, m
        else:
            lo = mid
    return hi, m_at


def estimate_tan_alpha(z: Any, source: SlabSource, *, threshold: float, slab_width: float,
                       levels: Any = PAPER_LEVELS, search_interval: tuple[float, float] | None = None,
                       xtol: float | None = None, seed: int = 0) -> TanAlphaEstimate:
    """EstimateTanAlpha (paper Algorithm 2, reconstructed from Lemmas 3, 4 and 6): ``tan`` of the angle
    between ``z`` and the nearest unit, from conditional firing probabilities in thin slabs.

    Bisection finds, for each level ``p_k``, the slab position ``t_k`` where the firing fraction crosses
    ``p_k``. By Lemma 4, ``t_k = (t + sin(alpha) Phi^{-1}(p_k)) / cos(alpha)``, so ``t_k`` is linear in
    ``Phi^{-1}(p_k)`` with slope ``tan alpha``. With the paper's two levels the slope is
    ``(t_2 - t_1) / (Phi^{-1}(0.6) - Phi^{-1}(0.4))``; with more levels [IMPL] it is the least-squares slope,
    which uses more slabs of the same data.

    Parameters
    ----------
    z : array-like of shape (n,)
        Direction (normalised here).
    source : SlabSource
        :class:`SampleSlabs` (i.i.d. samples) or :class:`ConditionalSlabSampler`.
    threshold : float
        The units' threshold ``t > 0`` (known; Section 1).
    slab_width : float
        ``eps``; Lemma 3 needs ``eps < eta / t`` and the estimate carries an additive ``O(eps)`` error
        (for ``eps`` above ``tan alpha`` the slab blurs the probit curve and the estimate levels off near
        ``eps / sqrt(12)``).
    levels : sequence of float, default (0.4, 0.6)
        Increasing firing probabilities in (0, 1), at least two (the paper: 0.4 and 0.6).
    search_interval : (float, float), optional
        Where ``t'`` is searched; default ``[0, t + 3]`` (Lemma 6: ``0 <= t_1 <= t_2 <= t / cos alpha``).
    xtol : float, optional
        Bisection tolerance; default ``1e-3 * slab_width``.
    seed : int, default 0
        Common random numbers of a conditional sampler (ignored by samples).

    Returns
    -------
    TanAlphaEstimate

    Raises
    ------
    AssumptionError
        The firing fraction is already above the lowest level at the start of the search, or never reaches
        the highest (Lemmas 5 and 6: a monotone P with positive linear terms and a high threshold).
    InputError
        Bad arguments.
    """
    if not isinstance(source, SlabSource):
        raise InputError("source must be a SampleSlabs or a ConditionalSlabSampler.")
    z = _unit(z, "z", source.n_inputs)
    t = _positive(threshold, "threshold")
    width = _positive(slab_width, "slab_width")
    p = _check_levels(levels)
    lo, hi = (0.0, t + 3.0) if search_interval is None else (float(v) for v in search_interval)
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise InputError(f"search_interval must be two finite numbers lo < hi, got {search_interval!r}.")
    xtol = 1e-3 * width if xtol is None else _positive(xtol, "xtol")

    counts = source.along(z, seed, lo - width)
    hi = source.upper_limit(counts, hi, width)
    if not hi > lo:
        raise AssumptionError("too few samples lie beyond the start of the search along z; more samples "
                              "are needed for EstimateTanAlpha.")
    pos, cnt = np.empty(p.size), np.empty(p.size, dtype=np.int64)
    for k, level in enumerate(p):
        pos[k], cnt[k] = _crossing(counts, level, lo, hi, width, xtol)
    q = special.ndtri(p)
    c = (q - q.mean()) / np.sum((q - q.mean()) ** 2)    # least-squares slope weights (2 levels: +-1/(q2-q1))
    s = float(c @ pos)
    # standard error: t_k moves by sqrt(p(1-p)/n) / (dp/dt'), dp/dt' = phi(q_k) / tan(alpha) (Lemma 4)
    phi = np.exp(-0.5 * q * q) / math.sqrt(2.0 * math.pi)
    se_t = np.sqrt(p * (1.0 - p) / np.maximum(cnt, 1)) / phi * max(abs(s), width)
    se = float(np.sqrt(np.sum((c * se_t) ** 2)))
    return TanAlphaEstimate(s, float(math.atan(max(s, 0.0))), float(pos[0]), float(pos[-1]), int(cnt[0]),
                            int(cnt[-1]), se, tuple(float(v) for v in p), width)


def _check_levels(levels: Any) -> np.ndarray:
    try:
        p = np.asarray(levels, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InputError(f"levels must be a sequence of probabilities, got {levels!r}.") from exc
    if p.size < 2 or not np.all(np.isfinite(p)) or not (0.0 < p[0]) or not (p[-1] < 1.0) or np.any(np.diff(p) <= 0):
        raise InputError(f"levels must be at least two increasing probabilities in (0, 1), got {levels!r}.")
    return p


# ------------------------------------------------------------------------------------------ RefineEstimate
@dataclass
class RefineEstimateResult:
    """Result of :func:`refine_estimate` with the angle-estimate trace (one entry per iteration).

    Attributes
    ----------
    direction : ndarray (n,)      the refined unit direction
    estimate : TanAlphaEstimate   the last estimate at ``direction``
    start_estimate : TanAlphaEstimate  the estimate at the start ``z0`` with the final slab width (and, for a
                                  conditional sampler, the same draws as ``estimate``): compare the two to
                                  see what the refinement gained
    converged : bool              the estimated angle reached ``target_angle``
    n_iter : int                  iterations run
    angle_estimates : ndarray     estimated angle of the current direction at the start of each iteration
    candidate_estimates : ndarray estimated angle of each proposal
    std_errors : ndarray          standard error of each current estimate (radians, about)
    accepted : ndarray of bool    whether each proposal was taken
    step_sizes : ndarray          ``sigma`` of each proposal
    slab_widths : ndarray         slab width used in each iteration
    directions : ndarray (n_iter + 1, n)  the current direction before each iteration and at the end
    stop_reason : str             ``"target"``, ``"max_iter"`` or ``"max_rejections"``
    settings : dict               the rule that ran (mode, step_scale, acceptance, ...)
    """

    direction: np.ndarray
    estimate: TanAlphaEstimate
    start_estimate: TanAlphaEstimate
    converged: bool
    n_iter: int
    angle_estimates: np.ndarray
    candidate_estimates: np.ndarray
    std_errors: np.ndarray
    accepted: np.ndarray
    step_sizes: np.ndarray
    slab_widths: np.ndarray
    directions: np.ndarray
    stop_reason: str
    settings: dict = field(default_factory=dict)

    def true_angles(self, w: Any) -> np.ndarray:
        """Angle (radians) between ``w`` and the current direction before each iteration and at the end."""
        w = _unit(w, "w", self.directions.shape[1])
        D = self.directions
        return 2.0 * np.arctan2(np.linalg.norm(D - w, axis=1), np.linalg.norm(D + w, axis=1))

    def trace(self) -> "Any":
        """The trace as a pandas DataFrame (one row per iteration)."""
        import pandas as pd  # deferred: pandas is slow to import

        return pd.DataFrame(dict(iteration=np.arange(self.n_iter), angle_estimate=self.angle_estimates,
                                 candidate_estimate=self.candidate_estimates, std_error=self.std_errors,
                                 accepted=self.accepted, step_size=self.step_sizes,
                                 slab_width=self.slab_widths))


def refine_estimate(z0: Any, source: SlabSource, *, threshold: float, slab_width: float,
                    target_angle: float = 0.0, max_iter: int = 1000, mode: str = "faithful",
                    step_scale: float | None = None, step_dim: int | None = None, acceptance: str | None = None,
                    acceptance_decrease: float | None = None, confidence: float = 2.0,
                    max_rejections: int | None = None, relative_slab_width: float | None = None,
                    min_slab_width: float = 0.0, width_jitter: float = 0.0, levels: Any = PAPER_LEVELS,
                    search_interval: tuple[float, float] | None = None, xtol: float | None = None,
                    rng: Any = None) -> RefineEstimateResult:
    """RefineEstimate (paper Algorithm 1; Lemma 7, Theorem 5): random local search that shrinks the angle
    between ``z`` and a unit, scored by :func:`estimate_tan_alpha`.

    Each iteration: ``alpha = arctan EstimateTanAlpha(z)``; stop if ``alpha <= target_angle``; draw
    ``g ~ N(0, I)``, ``dz = g - (g^T z) z``; ``z' = (z + sigma dz)/||.||`` with
    ``sigma = step_scale sin(alpha) / step_dim``; keep ``z'`` if the acceptance rule holds.

    Parameters
    ----------
    z0 : array-like of shape (n,)
        Start (Step 1's estimate of a unit; Theorem 5 assumes an angle ``<= 1/poly(d)``).
    source : SlabSource
        :class:`SampleSlabs` or :class:`ConditionalSlabSampler`; must mark the firing event of a monotone
        P (Lemma 5).
    threshold, slab_width, levels, search_interval, xtol
        As in :func:`estimate_tan_alpha` (``slab_width`` is the paper's ``eps_1``: take ``eps_1`` well
        below the target, the additive ``O(eps_1)`` error sets the floor of Theorem 5).
    target_angle : float, default 0
        ``eps_2``: stop when the estimated angle is at most this (0: run ``max_iter`` iterations).
    max_iter : int, default 1000
    mode : {"faithful", "practical"}
        Presets of ``step_scale``, ``acceptance``, ``acceptance_decrease`` (:data:`REFINE_MODES`); an explicit
        argument overrides its preset.
    step_scale : float, optional
        ``0.1`` in the paper.
    step_dim : int, optional
        The ``d`` of ``0.1 sin(alpha)/d`` and ``0.01 alpha/d``; default the input dimension ``n``.
    acceptance : {"paper", "greedy", "significant"}, optional
        ``"paper"``: ``alpha' <= (1 - acceptance_decrease/step_dim) alpha`` (Algorithm 1, errata read as a
        factor); ``"greedy"``: ``alpha' < alpha``; ``"significant"``: ``alpha' < alpha - confidence * SE`` with
        SE the standard error of a single estimate at ``alpha'`` scaled by ``sqrt(2)`` when the source is random
        and ``0`` for a fixed sample (common rows make the comparison exact for that sample).
    acceptance_decrease : float, optional
        ``0.01`` in the paper.
    confidence : float, default 2
        Standard errors demanded by ``"significant"``.
    max_rejections : int, optional
        Stop after this many consecutive rejected proposals (useful on a fixed sample, whose empirical
        criterion has a minimum).
    relative_slab_width : float, optional
        [IMPL] Shrink the slab with the angle: each iteration uses
        ``max(min_slab_width, min(slab_width, relative_slab_width * tan(alpha)))`` with ``alpha`` the last
        estimate (both estimates of one iteration use the same width, so they stay comparable). The paper
        fixes ``eps_1`` in advance; a width proportional to ``tan alpha`` keeps the ``O(eps)`` error of Lemma 3
        below the angle while using as many slab points as that allows.
    min_slab_width : float, default 0
        Floor of the adaptive width.
    width_jitter : float in [0, 1), default 0
        [IMPL] Each iteration scores the current direction and the proposal at a width of its own,
        ``max(min_slab_width, w (1 + width_jitter U[-1, 1]))`` with ``w`` the width above. On a fixed sample
        the current direction otherwise keeps the estimate it was accepted with, the lowest of many noisy
        comparisons, and the search stalls behind it; at another width its slabs hold other rows, so it is
        estimated again (two estimates per iteration instead of one during a run of rejections).
    rng : seed
        Proposals and the common random numbers of each iteration.

    Returns
    -------
    RefineEstimateResult
        With the angle-estimate trace (Step 2 diagnostics).

    Raises
    ------
    AssumptionError
        From :func:`estimate_tan_alpha` (no crossing: not a monotone P, ``z0`` not near a unit).
    """
    if not isinstance(source, SlabSource):
        raise InputError("source must be a SampleSlabs or a ConditionalSlabSampler.")
    z = _unit(z0, "z0", source.n_inputs)
    if mode not in REFINE_MODES:
        raise InputError(f"mode must be one of {sorted(REFINE_MODES)}, got {mode!r}.")
    preset = REFINE_MODES[mode]
    step_scale = _positive(preset["step_scale"] if step_scale is None else step_scale, "step_scale")
    acceptance = preset["acceptance"] if acceptance is None else acceptance
    if acceptance not in _ACCEPTANCE:
        raise InputError(f"acceptance must be one of {_ACCEPTANCE}, got {acceptance!r}.")
    decrease = _positive(preset["acceptance_decrease"] if acceptance_decrease is None else acceptance_decrease,
                         "acceptance_decrease", allow_zero=True)
    step_dim = source.n_inputs if step_dim is None else check_positive_int(step_dim, "step_dim")
    confidence = _positive(confidence, "confidence", allow_zero=True)
    target = _positive(target_angle, "target_angle", allow_zero=True)
    max_iter = check_positive_int(max_iter, "max_iter", minimum=0)
    if max_rejections is not None:
        max_rejections = check_positive_int(max_rejections, "max_rejections")
    gen = check_random_state(rng)
    width0 = _positive(slab_width, "slab_width")
    if relative_slab_width is not None:
        relative_slab_width = _positive(relative_slab_width, "relative_slab_width")
    min_width = _positive(min_slab_width, "min_slab_width", allow_zero=True)
    jitter = _positive(width_jitter, "width_jitter", allow_zero=True)
    if not jitter < 1.0:
        raise InputError(f"width_jitter must be in [0, 1), got {width_jitter}.")
    opts = dict(threshold=threshold, levels=levels, search_interval=search_interval, xtol=xtol)
    if decrease >= step_dim and acceptance == "paper":
        raise InputError("acceptance_decrease / step_dim must be < 1 (a decrease factor).")

    n = source.n_inputs
    est_trace, cand_trace, se_trace, acc_trace, step_trace, width_trace = [], [], [], [], [], []
    dirs = [z.copy()]
    z_start = z.copy()
    cached, width = None, width0
    base = width0                   # the width before the jitter
    if relative_slab_width is not None and max_iter > 0:
        # a first estimate at slab_width sets the width of the first comparison
        cached = estimate_tan_alpha(z, source, seed=int(gen.integers(0, 2**63 - 1)), slab_width=width0, **opts)
    stop = "max_iter"
    for _ in range(max_iter):
        seed = int(gen.integers(0, 2**63 - 1))
        previous = width
        if cached is not None and relative_slab_width is not None:
            base = max(min_width, min(width0, relative_slab_width * max(cached.tan_alpha, 0.0)))
            if base <= 0.0:
                raise InputError("the adaptive slab width reached 0; set min_slab_width > 0.")
        width = base
        if jitter > 0.0:
            # both estimates of this iteration at a width of its own: the current direction is estimated again
            # on other slabs of the same rows, so a low estimate of one slab set does not hold it
            width = max(min_width, base * (1.0 + jitter * (2.0 * float(gen.random()) - 1.0)))
        reuse = cached is not None and source.deterministic and cached.slab_width == width
        try:
            current = cached if reuse else estimate_tan_alpha(z, source, seed=seed, slab_width=width, **opts)
        except AssumptionError:
            if width >= previous:
                raise
            # a thinner slab ran out of points far along z (a fixed sample): keep the last width
            width = previous
            reuse = cached is not None and source.deterministic and cached.slab_width == width
            current = cached if reuse else estimate_tan_alpha(z, source, seed=seed, slab_width=width, **opts)
        alpha = current.angle
        cached = current
        if alpha <= target:
            stop = "target"
            break
        sigma = step_scale * math.sin(alpha) / step_dim
        g = gen.standard_normal(n)
        dz = g - (g @ z) * z
        cand_z = z + sigma * dz
        cand_z /= np.linalg.norm(cand_z)
        try:
            cand = estimate_tan_alpha(cand_z, source, seed=seed, slab_width=width, **opts)
        except AssumptionError:     # no crossing along the proposal: it is no improvement
            cand = None
        if cand is None:
            ok = False
        elif acceptance == "paper":
            ok = cand.angle <= (1.0 - decrease / step_dim) * alpha
        elif acceptance == "greedy":
            ok = cand.angle < alpha
        else:
            se = 0.0 if source.deterministic else math.sqrt(2.0) * cand.std_error / (1.0 + cand.tan_alpha ** 2)
            ok = cand.angle < alpha - confidence * se
        est_trace.append(alpha)
        cand_trace.append(math.nan if cand is None else cand.angle)
        se_trace.append(current.std_error / (1.0 + current.tan_alpha ** 2))
        acc_trace.append(bool(ok))
        step_trace.append(sigma)
        width_trace.append(width)
        if ok:
            z, cached = cand_z, cand
        dirs.append(z.copy())
        if max_rejections is not None and len(acc_trace) >= max_rejections and not any(acc_trace[-max_rejections:]):
            stop = "max_rejections"
            break
    final_seed = int(gen.integers(0, 2**63 - 1))
    if cached is None or cached.slab_width != width or not source.deterministic:
        cached = estimate_tan_alpha(z, source, seed=final_seed, slab_width=width, **opts)
    # the start scored with the final width and random numbers, so that the two are comparable
    first = cached if np.array_equal(z, z_start) else \
        estimate_tan_alpha(z_start, source, seed=final_seed, slab_width=width, **opts)
    settings = dict(mode=mode, step_scale=step_scale, step_dim=step_dim, acceptance=acceptance,
                    acceptance_decrease=decrease, confidence=confidence, slab_width=width0,
                    relative_slab_width=relative_slab_width, min_slab_width=min_width,
                    target_angle=target, source=type(source).__name__)
    return RefineEstimateResult(direction=z, estimate=cached, start_estimate=first,
                        converged=stop == "target" or cached.angle <= target,
                        n_iter=len(acc_trace), angle_estimates=np.asarray(est_trace, dtype=np.float64),
                        candidate_estimates=np.asarray(cand_trace, dtype=np.float64),
                        std_errors=np.asarray(se_trace, dtype=np.float64), accepted=np.asarray(acc_trace, dtype=bool),
                        step_sizes=np.asarray(step_trace, dtype=np.float64),
                        slab_widths=np.asarray(width_trace, dtype=np.float64), directions=np.asarray(dirs),
                        stop_reason=stop, settings=settings)


def step2_defaults(threshold: float, n_rows: int) -> dict:
    """The learner's :func:`refine_estimate` options for a fixed sample of ``n_rows`` rows at threshold ``t``.

    The "practical" rule with the fixed-sample settings of the experiment ``goel2019-refine``: slabs of
    width ``min(0.1, 0.5 tan(alpha))`` (the ``O(eps)`` error of Lemma 3 below the angle), but at least
    ``max(0.002, 200 / (n_rows phi(t)))``, which holds about 200 of the rows near ``t``; five levels
    0.4-0.8 (the least-squares slope, more slabs of the same rows); the search from ``t - 1`` (Lemma 6:
    ``t_k = (t + sin(alpha) Phi^-1(p_k)) / cos(alpha) >= t - 0.26 tan(alpha)`` for these levels, so no
    crossing lies below ``t - 1`` while ``alpha < 75`` degrees, and rows below it are never read).

    The stopping rule is Theorem 5's: ``max_iter="auto"`` is :func:`step2_budget` of each unit's start
    (``O(n log(gamma / eps))`` iterations), the search stops when its estimate reaches the target
    ``eps_2 = min_slab_width / 2`` (below it the slab, not the angle, sets the estimate: Lemma 3's
    additive ``O(eps_1)``). A run of rejections does not stop it: on a fixed sample the current direction
    keeps the estimate of its own rows, and a search held by a low one for 50-125 iterations went on to
    shrink its angle 3-4 fold (n = 10, 10^6 rows); the budget bounds what such a wait costs. Each iteration
    scores both directions at a slab width jittered by +-50 % (``width_jitter``), so that a low estimate of
    one set of slabs does not hold the current direction.
    """
    phi_t = math.exp(-0.5 * threshold * threshold) / math.sqrt(2.0 * math.pi)
    min_width = max(2e-3, 200.0 / (max(n_rows, 1) * phi_t))
    return dict(mode="practical", slab_width=0.1, relative_slab_width=0.5, min_slab_width=min_width,
                levels=(0.4, 0.5, 0.6, 0.7, 0.8), max_iter="auto", target_angle=0.5 * min_width,
                max_rejections=None, width_jitter=0.5,
                search_interval=(threshold - 1.0, threshold + 3.0))


def step2_budget(start_angle: float, n_inputs: int, target_angle: float) -> int:
    """Iterations for Step 2's search from ``start_angle`` down to ``target_angle`` in ``n_inputs``
    dimensions (the learner's ``max_iter="auto"``): Theorem 5's ``O(n log(gamma / eps))``,
    ``ceil(STEP2_STEPS_PER_EFOLD * n * ln(gamma / eps))`` with at least one e-fold.

    Each step gains at most ``ES_PROGRESS_RATE / n`` of the angle in expectation (a (1+1) evolution
    strategy); on a fixed sample the search gains about half that far from its floor, so the budget is twice
    the e-folds of the best rate. It was 100 iterations whatever ``n`` and the start: at n = 10, t = 2, 10^6 rows 8 of 10 searches
    were still descending when it ran out (the largest angle 0.032 rad; 0.008 with 300 iterations).
    """
    target = max(float(target_angle), 1e-12)
    efolds = max(1.0, math.log(max(float(start_angle), target) / target))
    return int(math.ceil(STEP2_STEPS_PER_EFOLD * int(n_inputs) * efolds))


def refine_units(W: np.ndarray, source, rng: np.random.Generator, *, threshold: float, activation: str,
                 baseline: float | None, max_rows: int, options: dict) -> tuple[np.ndarray, dict]:
    """Step 2 of Goel-Panigrahy (Algorithm 1, RefineEstimate) on every unit of ``W``, searched on most
    rows and judged on held-out ones (the refinement of
    :class:`~nnrecover.learners.goel2019.estimator.HighThresholdLearner` with ``refine=True``).

    The search accepts a proposal when its estimate on the search rows is lower, so its final
    estimate is biased low by the selection, the more so the noisier the estimates (benchmarks/README.md,
    "Goel-Panigrahy Step 2 in the learner"). A refined unit replaces the Step 1 one only when, on
    the held-out rows (:data:`STEP2_HOLDOUT` of them), its estimated angle is below the start's by
    ``confidence`` (default 2) standard errors of the difference (the two errors added as if
    independent: the common rows make the true error of the difference smaller, so the test is
    conservative).

    Parameters
    ----------
    W : (d, n) array
        The Step 1 unit rows.
    source : data source
        The learner's validated samples (read again here, so a one-pass iterator skips Step 2).
    rng : numpy.random.Generator
        Spawns the subsample keys, the search / held-out split and one generator per unit.
    threshold : float
        The known threshold ``t``.
    activation : str
        ``u``; Step 2 needs step or relu units (the firing event of Lemma 5).
    baseline : float or None
        ``c_0`` of the firing labels (None: from the labels, as :meth:`SampleSlabs.from_labels`).
    max_rows : int
        The most rows held in memory (a uniform subsample when there are more).
    options : dict
        Keyword arguments of :func:`refine_estimate`, each replacing one of :func:`step2_defaults`.

    Returns
    -------
    W_new : (d, n) array
        ``W`` with every unit the held-out rows confirmed replaced by its refined direction.
    report : dict
        ``ran``; when Step 2 ran, its options, row counts, ``improved_units`` and the per-unit ``units``
        records (``kept`` is ``"step1"`` or ``"step2"``; ``second_search`` is None, the two ends' held-out
        estimates and which was chosen, or ``{"failed": reason}``), else the ``reason`` it did not.
    """
    if activation == "sigmoid":
        return W, {"ran": False, "reason": "Step 2 needs step or relu units (a sigmoid unit never has u_t = 0, "
                   "so the firing event of Lemma 5 does not exist)"}
    if not source.info.reiterable:
        warnings.warn("HighThresholdLearner: the data came as a one-pass iterator, so Step 2 was skipped.",
                      UserWarning, stacklevel=4)
        return W, {"ran": False, "reason": "one-pass iterator: Step 2 needs the samples again"}
    t = float(threshold)
    # Step 2 reads the samples in memory: a uniform subsample of at most max_rows of them, and of at most
    # STEP2_GATHER_BYTES of inputs, when there are more (on a dask array only those rows travel to the
    # client). The subsample's keys come from a spawned generator, so the draws of Step 2 itself are the
    # same whatever the data size. Arrays already in memory that fit max_rows are used in place (the
    # gather would return every row, in order).
    keys_rng, split_rng = rng.spawn(2)
    X, y = getattr(source, "X", None), getattr(source, "Y", None)
    if (type(X) is np.ndarray and isinstance(y, np.ndarray) and X.dtype == np.float64
            and X.shape[0] <= max_rows):
        y = y if y.ndim == 1 else y[:, 0]
    else:
        n_gather = max(1, min(int(max_rows), STEP2_GATHER_BYTES // (8 * source.info.n_inputs)))
        X, Y, _ = gather_samples(source, n_gather, rng=keys_rng)
        y = Y[:, 0]
    search, check = SampleSlabs.from_labels(X, y, baseline=baseline).split(STEP2_HOLDOUT, split_rng)
    n = W.shape[1]
    opts = step2_defaults(t, search.n_rows)
    opts.update(options)
    confidence = float(opts.get("confidence", 2.0))
    est_opts = {key: opts[key] for key in ("levels", "search_interval", "xtol") if key in opts}
    auto_budget = isinstance(opts["max_iter"], str)
    if auto_budget:
        if opts["max_iter"] != "auto":
            raise InputError(f"max_iter must be a positive int or 'auto', got {opts['max_iter']!r}.")
        # the search's end point for the budget: its target, else the estimate's floor at the thinnest slab
        floor = float(opts.get("target_angle") or 0.5 * float(opts.get("min_slab_width") or 0.0))
        if not floor > 0.0:
            raise InputError("max_iter='auto' needs target_angle > 0 or min_slab_width > 0 (the angle its "
                             "budget of iterations aims at); pass max_iter as a number.")

    def angle_error(e):
        return e.std_error / (1.0 + e.tan_alpha ** 2)

    def refine_unit(i: int, unit_rng: np.random.Generator) -> tuple[np.ndarray | None, dict]:
        """Step 2 on unit ``i``: the refined direction when the held-out rows confirm it, and its report."""
        # sources of its own (their candidate rows follow this unit's direction), over the same rows of X
        search_i, check_i = search.copy(), check.copy()
        # the start on the held-out rows first: when even a perfect refinement (angle 0) would stay within
        # the confirmation margin, no search result could be kept, and the search is not run
        try:
            before = estimate_tan_alpha(W[i], check_i, threshold=t, slab_width=float(opts["slab_width"]),
                                        **est_opts)
        except AssumptionError as exc:
            return None, {"unit": i, "kept": "step1", "iterations": 0, "reason": f"held-out rows: {exc}"}
        margin = confidence * math.sqrt(2.0) * angle_error(before)
        skipped = {"unit": i, "kept": "step1", "iterations": 0, "angle_estimate_start": before.angle,
                   "held_out_std_error": angle_error(before)}
        if before.angle > STEP2_MAX_START_ANGLE:
            return None, dict(skipped, far=True, reason=(
                f"the start's estimated angle on the held-out rows is {before.angle:.3g} rad, above "
                f"STEP2_MAX_START_ANGLE = {STEP2_MAX_START_ANGLE:g}: Theorem 5 assumes a start within a small "
                "angle of its unit, and from further a search can end on another unit"))
        if before.angle <= margin:
            return None, dict(skipped, reason=f"the held-out rows cannot confirm a gain: on them the start's "
                              f"estimated angle is below the margin a gain must clear ({confidence:g} standard "
                              "errors of a difference), so not even angle 0 could be confirmed (more samples, "
                              "or a wider slab_width)")
        # Theorem 5's budget, O(n log(gamma / eps)) iterations, from the start's upper end on the held-out rows
        upper = before.angle + confidence * angle_error(before)
        max_iter = step2_budget(upper, n, floor) if auto_budget else int(opts["max_iter"])
        skipped["max_iter"] = max_iter
        # the most a random search of max_iter steps can gain in n dimensions, from a start at the upper
        # end of its estimate: the search is a (1+1) evolution strategy on a sphere model, whose expected
        # progress is at most ES_PROGRESS_RATE / n of the angle per step; twice that covers one run's luck
        reach = 1.0 - math.exp(-2.0 * ES_PROGRESS_RATE * max_iter / n)
        if upper * reach <= margin:
            return None, dict(skipped, reason=f"{max_iter} steps of a random search in {n} dimensions "
                              f"gain at most {100 * reach:.0f} % of the angle (twice the best expected "
                              "progress of a (1+1) evolution strategy), less than the held-out rows could "
                              "confirm; Theorem 5 asks for O(n log(1/eps)) steps (raise max_iter in "
                              "refine_options, or pass more samples)")
        second_rng = unit_rng.spawn(1)[0]           # the second search's draws (spawned: the same either way)
        try:
            res = refine_estimate(W[i], search_i, threshold=t, rng=unit_rng, **dict(opts, max_iter=max_iter))
        except AssumptionError as exc:
            return None, {"unit": i, "kept": "step1", "iterations": 0, "max_iter": max_iter, "reason": str(exc)}
        n_iter, second = res.n_iter, None
        if auto_budget and res.stop_reason == "max_iter":
            # the budget ran out above the target: the search can end in a minimum of its rows' estimates
            # (a trap of the fixed sample). A second search from the start, with draws of its own, and the
            # held-out rows choose between the two ends (at the wider of their final widths)
            try:
                res2 = refine_estimate(W[i], search_i, threshold=t, rng=second_rng, **dict(opts, max_iter=max_iter))
                w2 = max(float(res.estimate.slab_width), float(res2.estimate.slab_width))
                ends = [estimate_tan_alpha(r.direction, check_i, threshold=t, slab_width=w2, **est_opts).angle
                        for r in (res, res2)]
            except AssumptionError as exc:
                # the first search's end is kept; the report says why there is no second
                second = {"failed": str(exc)}
            else:
                n_iter += res2.n_iter
                second = {"held_out_angle_estimates": ends, "stop_reason": res2.stop_reason,
                          "chosen": "second" if ends[1] < ends[0] else "first"}
                if ends[1] < ends[0]:
                    res = res2
        entry = {"unit": i, "iterations": n_iter, "max_iter": max_iter, "stop_reason": res.stop_reason,
                 "accepted": int(res.accepted.sum()), "second_search": second,
                 "angle_estimate_start": before.angle, "held_out_std_error": angle_error(before),
                 "search_angle_estimate_start": float(res.start_estimate.angle),
                 "search_angle_estimate_end": float(res.estimate.angle)}
        if np.array_equal(res.direction, res.directions[0]):
            return None, dict(entry, kept="step1", reason="the search accepted no move")
        width = float(res.estimate.slab_width)
        try:
            if width != before.slab_width:
                before = estimate_tan_alpha(W[i], check_i, threshold=t, slab_width=width, **est_opts)
            after = estimate_tan_alpha(res.direction, check_i, threshold=t, slab_width=width, **est_opts)
        except AssumptionError as exc:
            return None, dict(entry, kept="step1", reason=f"held-out rows: {exc}")
        se = math.hypot(angle_error(before), angle_error(after))
        better = after.angle < before.angle - confidence * se
        return (res.direction if better else None), dict(
            entry, kept="step2" if better else "step1", angle_estimate_start=before.angle,
            angle_estimate_end=after.angle, held_out_std_error=angle_error(before), difference_std_error=se)

    # the units are independent searches, each with a generator of its own: the fit's worker threads run
    # them side by side (numpy releases the GIL in the products), with the same result for any number
    units = list(range(W.shape[0]))
    unit_rngs = rng.spawn(len(units))
    workers = min(effective_n_jobs(None), len(units))
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(refine_unit, units, unit_rngs))
    else:
        results = [refine_unit(i, g) for i, g in zip(units, unit_rngs)]
    W_new = W.copy()
    report = []
    for i, (direction, entry) in zip(units, results):
        if direction is not None:
            W_new[i] = direction
        report.append(entry)
    far = [entry["unit"] for entry in report if entry.pop("far", False)]
    if far:
        warnings.warn(f"HighThresholdLearner: Step 2 did not search from unit(s) {far}: their estimated angles on "
                      f"the held-out rows exceed {STEP2_MAX_START_ANGLE:g} rad, and Theorem 5 assumes a start within "
                      "a small angle of its unit (Step 1 is far off: too few samples, or the bias of P's products, "
                      "Lemma 2). They keep their Step 1 directions.", AssumptionWarning, stacklevel=4)
    # Theorem 5 needs each start within a small angle of its own unit: from a start far off (a biased Step 1
    # unit, Lemma 2) a search of Theorem 5's length can end on another unit, which the held-out rows then
    # confirm (its estimated angle is small). Two units that end closer than half their starts' angle and
    # than DUPLICATE_ANGLE are one unit twice: the one that moved further goes back to its Step 1 direction
    while True:
        pairs = []
        for a in units:
            for b in units[a + 1:]:
                if report[a]["kept"] != "step2" and report[b]["kept"] != "step2":
                    continue
                gap = angle_between(W_new[a], W_new[b])
                if gap < min(DUPLICATE_ANGLE, 0.5 * angle_between(W[a], W[b])):
                    pairs.append((gap, a, b))
        if not pairs:
            break
        gap, a, b = min(pairs)
        moved = {k: angle_between(W[k], W_new[k]) for k in (a, b) if report[k]["kept"] == "step2"}
        back = max(moved, key=moved.get)
        other = b if back == a else a
        W_new[back] = W[back]
        report[back] = dict(report[back], kept="step1", reason=(
            f"the search moved {moved[back]:.3g} rad and ended {gap:.3g} rad from unit {other}: one unit found "
            "twice, so this start was not near a unit of its own (Theorem 5 assumes a small start angle)"))
        warnings.warn(f"HighThresholdLearner: Step 2 took units {min(a, b)} and {max(a, b)} to the same direction "
                      f"({gap:.3g} rad apart); unit {back}, which moved {moved[back]:.3g} rad, keeps its Step 1 "
                      "direction. Theorem 5 assumes each start within a small angle of its unit: Step 1's units "
                      "are far from the truth here (too few samples, or the bias of P's products, Lemma 2).",
                      AssumptionWarning, stacklevel=4)
    improved = sum(unit["kept"] == "step2" for unit in report)
    return W_new, {"ran": True, "method": "Goel-Panigrahy Step 2 (Algorithm 1)", "options": opts,
                   "search_rows": search.n_rows, "held_out_rows": check.n_rows, "improved_units": improved,
                   "units": report}


register("goel2019-refine-estimate", paper="goel2019", algorithm="Algorithm 1", target=refine_estimate,
         assumptions=("x ~ N(0, I)", "P monotone with positive linear terms (Lemma 5)",
                      "step or ReLU units with a known high threshold t",
                      "start within a small angle of a unit (Theorem 5)"),
         description="RefineEstimate: random local search driven by EstimateTanAlpha, refines a Step 1 "
                     "direction to any angle (Step 2)")
register("goel2019-estimate-tan-alpha", paper="goel2019", algorithm="Algorithm 2 (Lemma 3)",
         target=estimate_tan_alpha,
         assumptions=("x ~ N(0, I)", "P monotone with positive linear terms (Lemma 5)", "known threshold t"),
         description="EstimateTanAlpha: tan of the angle to the nearest unit from slab firing probabilities")
