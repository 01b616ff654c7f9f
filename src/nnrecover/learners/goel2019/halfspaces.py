"""Intersections and unions of halfspaces far from the origin (Goel & Panigrahy 2019, Section 2.3, Theorem 6).

Target: ``g(x) = AND_i 1[w_i^T x + t >= 0]``, an intersection of ``d`` halfspaces at distance ``t`` from the
origin (each contains the origin), for ``x ~ N(0, I)`` and noiseless labels. Its complement is an OR of
high-threshold step units,

    ``1 - g(x) = OR_i 1[(-w_i)^T x >= t] = P(X_1, ..., X_d)``,  ``P(X) = 1 - prod_i (1 - X_i)``,
    ``X_i = u_t((-w_i)^T x)`` (step ``u``; the paper prints the OR as a square root),

and ``P`` is multilinear and monotone with ``c_i = 1`` and ``c_S = (-1)^{|S|+1}``, so Assumptions 1-2 hold with
the step activation (Lemma 11) and Step 2 applies (Lemma 5). Algorithm of Theorem 6:

1. flip the labels, ``f = 1 - g`` (the *firing* event: the point lies outside some halfspace);
2. Step 1 on ``f`` (:func:`nnrecover.learners.goel2019.step1.step1`, the Step 1 routes of Section 2.1 /
   Appendix B.4): approximate ``-w_i``;
3. Step 2 on each (:func:`nnrecover.learners.goel2019.step2.refine_estimate`, Algorithm 1): any precision
   (the refined normal replaces Step 1's when it scores better on the same slabs);
4. return ``w_i`` and the classifier ``AND_i 1[w_i^T x + t >= 0]``.

A union of halfspaces that do not contain the origin, ``g(x) = OR_i 1[w_i^T x >= t]``, is already such an
OR: the same pipeline without the flip (``union=True``).

Paper symbols and their names here
----------------------------------
======================  ========================================================================
``w_i``                 ``normals_`` (unit rows, the learned halfspaces' normals)
``t``                   ``threshold`` (known; Theorem 6 assumes ``t = Omega(sqrt(log d))``)
``d``                   ``n_halfspaces``
``g``                   the labels (``classes_[1]``: inside the intersection / union)
``f = 1 - g``           ``fired`` (intersection), ``f = g`` (union)
``eps``                 Step 2's target angle / slab width (``step2_options``)
======================  ========================================================================

The learner works only from the labels: Step 1 reads the normalised Hermite moments of ``f`` (the active
rows are the points outside the intersection, see :class:`~nnrecover.learners.goel2019.statistics.SampleMoments`)
and Step 2 reads the firing fractions of thin slabs (:class:`~nnrecover.learners.goel2019.step2.SampleSlabs`).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from ..._validation import as_2d_float, check_positive_int, check_random_state
from ...errors import AssumptionError, AssumptionWarning, InputError, NotFittedError
from ..registry import register
from .statistics import SampleMoments
from .step1 import STEP1_METHODS, step1
from .step2 import RefineEstimateResult, SampleSlabs, refine_estimate

__all__ = ["HalfspaceResult", "learn_halfspaces", "HalfspaceIntersectionClassifier", "STEP2_DEFAULTS",
           "halfspace_labels"]

#: Step 2 settings of :func:`learn_halfspaces` (keyword arguments of
#: :func:`~nnrecover.learners.goel2019.step2.refine_estimate`; ``step2_options`` overrides any of them).
#: [IMPL] The paper's two levels 0.4/0.6 and its step constants are valid but slow on a fixed sample (see
#: the Step 2 module); these use the practical rule, five levels (more slabs of the same rows), a slab
#: width that shrinks with the angle, and stop after 60 consecutive rejections (the minimum of the
#: empirical criterion of the sample).
STEP2_DEFAULTS = dict(mode="practical", slab_width=0.1, relative_slab_width=0.5, min_slab_width=0.002,
                      levels=(0.4, 0.5, 0.6, 0.7, 0.8), max_iter=400, max_rejections=60, target_angle=0.0)

#: Step 2 searches slab positions in ``[t - SEARCH_BELOW, t + 3]``: Lemma 6 allows ``[0, t/cos alpha]``;
#: for the angles Step 1 leaves (``sin alpha <= 0.5``) the firing fraction at ``t - 0.75`` is at most
#: ``eta + Phi(-1.5) = eta + 0.07`` (``eta``: the other units, Lemma 5), below the lowest level 0.4, and
#: skipping the rows below keeps each estimate to sorting ``N Phi^c(t - 0.75)`` projections.
SEARCH_BELOW = 0.75

#: the adaptive slab width of Step 2 never drops below the width at which a slab at ``t`` holds this many
#: sample points (relative error of one crossing ~ ``sqrt(p(1-p)/n)``: 3.5% at 200 points)
MIN_SLAB_POINTS = 200


def halfspace_labels(X: Any, normals: Any, threshold: float, *, union: bool = False) -> np.ndarray:
    """Labels ``g(x)`` (bool) of the intersection ``AND_i [w_i.x + t >= 0]`` or the union ``OR_i [w_i.x >= t]``."""
    X = as_2d_float(X, "X", min_rows=0)
    W = as_2d_float(normals, "normals", n_features=X.shape[1])
    A = X @ W.T
    t = float(threshold)
    return np.any(A >= t, axis=1) if union else np.all(A + t >= 0.0, axis=1)


@dataclass
class HalfspaceResult:
    """Result of :func:`learn_halfspaces`.

    Attributes
    ----------
    normals : ndarray (d, n)          learned unit normals ``w_i``: after Step 2 when it ran, except where
                                      Step 2's final slab estimate scores the Step 1 normal lower
    kept_step2 : ndarray of bool      which normals come from Step 2
    step1_normals : ndarray (d, n)    Step 1's normals (same orientation convention)
    threshold : float
    union : bool
    refinements : list                one :class:`~nnrecover.learners.goel2019.step2.RefineEstimateResult` per
                                      normal (empty when Step 2 did not run); their traces are Step 2's
                                      angle-estimate diagnostics
    fire_rate : float                 fraction of samples with ``f = 1``
    timings : dict                    seconds in Step 1 and Step 2
    step1_info : dict                 Step 1's eigenvalues, coefficients and route details
    """

    normals: np.ndarray
    step1_normals: np.ndarray
    threshold: float
    union: bool
    refinements: list = field(default_factory=list)
    kept_step2: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    fire_rate: float = math.nan
    timings: dict = field(default_factory=dict)
    step1_info: dict = field(default_factory=dict)

    def predict(self, X: Any) -> np.ndarray:
        """``g(x)`` of the learned intersection (or union), bool."""
        return halfspace_labels(X, self.normals, self.threshold, union=self.union)


def learn_halfspaces(X: Any, inside: Any, n_halfspaces: int, threshold: float, *, union: bool = False,
                     step2: bool = True, step1_method: str = "power", step1_options: dict | None = None,
                     step2_options: dict | None = None, rng: Any = None) -> HalfspaceResult:
    """Learn an intersection (or union) of halfspaces at distance ``threshold`` from the origin (Theorem 6).

    Parameters
    ----------
    X : array-like of shape (N, n)
        Inputs, i.i.d. ``N(0, I)``.
    inside : array-like of shape (N,)
        Booleans (or 0/1): ``g(x)``, whether the point lies in the intersection (or the union).
    n_halfspaces : int
        ``d <= n``.
    threshold : float
        ``t > 0``, the known distance of every halfspace from the origin.
    union : bool, default False
        ``False``: ``g = AND_i [w_i.x + t >= 0]``; ``True``: ``g = OR_i [w_i.x >= t]``.
    step2 : bool, default True
        Run Step 2 (Algorithm 1) on each Step 1 normal; ``False`` returns Step 1 alone.
    step1_method : {"power", "landscape", "simultaneous"}, default "power"
    step1_options, step2_options : dict, optional
        Keyword arguments of :func:`~nnrecover.learners.goel2019.step1.step1` and
        :func:`~nnrecover.learners.goel2019.step2.refine_estimate` (over :data:`STEP2_DEFAULTS`).
    rng : seed

    Returns
    -------
    HalfspaceResult

    Raises
    ------
    AssumptionError
        Half or more of the samples fire (the halfspaces are not far from the origin: Theorem 6 needs
        ``t = Omega(sqrt(log d))``), no sample fires, or a Step 1 / Step 2 assumption fails.
    """
    X = as_2d_float(X, "X", min_rows=2)
    g = np.asarray(inside)
    if g.shape != (X.shape[0],):
        raise InputError(f"inside/labels must have shape ({X.shape[0]},), one label per row of X; got {g.shape}.")
    if g.dtype != bool:
        gf = np.asarray(g, dtype=np.float64) if np.issubdtype(g.dtype, np.number) else None
        if gf is None or not np.all((gf == 0) | (gf == 1)):
            raise InputError("inside must be boolean or 0/1 (1: inside the intersection or union).")
        g = gf.astype(bool)
    d = check_positive_int(n_halfspaces, "n_halfspaces")
    if d > X.shape[1]:
        raise InputError(f"n_halfspaces ({d}) must not exceed the input dimension ({X.shape[1]}).")
    t = float(threshold)
    if not (math.isfinite(t) and t > 0):
        raise InputError(f"threshold must be a finite number > 0, got {threshold!r}.")
    if step1_method not in STEP1_METHODS:
        raise InputError(f"step1_method must be one of {STEP1_METHODS}, got {step1_method!r}.")
    gen = check_random_state(rng)
    fired = g if union else ~g                          # f = 1 - g for an intersection (Section 2.3)
    rate = float(fired.mean())
    if not 0.0 < rate < 0.5:
        raise AssumptionError(
            f"{100 * rate:.1f}% of the samples lie {'inside the union' if union else 'outside the intersection'}; "
            "Goel-Panigrahy Theorem 6 needs halfspaces far from the origin (t = Omega(sqrt(log d))), where this "
            "event is rare (and the samples must contain some of it). Check threshold, union and the labels.")
    expected = -math.expm1(d * math.log(0.5 * math.erfc(-t / math.sqrt(2.0))))   # 1 - (1 - Phi^c(t))^d
    if rate > 3.0 * expected + 5.0 / math.sqrt(X.shape[0]):
        warnings.warn(f"{100 * rate:.2f}% of the samples fire, more than 3x the {100 * expected:.2f}% of {d} "
                      f"halfspaces at distance {t:g} in general position; is the threshold right?",
                      AssumptionWarning, stacklevel=2)

    t0 = time.perf_counter()
    moments = SampleMoments(X[fired], np.ones(int(fired.sum())), X.shape[0], "step", t)
    s1 = step1(moments, d, method=step1_method, rng=gen, **(step1_options or {}))
    V = np.array(s1.weights, dtype=np.float64)          # rows ~ the firing directions (-w_i or w_i)
    t1 = time.perf_counter()
    refinements: list[RefineEstimateResult] = []
    if step2:
        # thinnest slab that still holds about MIN_SLAB_POINTS rows at t (N phi(t) eps points)
        min_width = MIN_SLAB_POINTS / (X.shape[0] * math.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi))
        opts = dict(STEP2_DEFAULTS, search_interval=(max(0.0, t - SEARCH_BELOW), t + 3.0),
                    min_slab_width=max(STEP2_DEFAULTS["min_slab_width"], min_width))
        opts.update(step2_options or {})
        source = SampleSlabs(X, fired)
        for i in range(d):
            res = refine_estimate(V[i], source, threshold=t, rng=gen, **opts)
            refinements.append(res)
            # keep the refined normal unless the start scores better on the same slabs (a Step 1 normal
            # already below the statistical resolution of the sample)
            if res.estimate.angle <= res.start_estimate.angle:
                V[i] = res.direction
    t2 = time.perf_counter()
    sign = 1.0 if union else -1.0
    info = dict(s1.info, eigenvalues=s1.eigenvalues, coefficients=s1.coefficients, route=step1_method)
    return HalfspaceResult(normals=sign * V, step1_normals=sign * np.array(s1.weights), threshold=t, union=bool(union),
                           refinements=refinements, fire_rate=rate,
                           kept_step2=np.array([r.estimate.angle <= r.start_estimate.angle for r in refinements],
                                               dtype=bool),
                           timings=dict(step1=t1 - t0, step2=t2 - t1), step1_info=info)


class HalfspaceIntersectionClassifier(ClassifierMixin, BaseEstimator):
    """Intersection (or union) of halfspaces far from the origin, learned by Theorem 6 (Step 1 + Step 2).

    Parameters
    ----------
    n_halfspaces : int
        ``d``.
    threshold : float
        ``t``, the known distance of the halfspaces from the origin.
    union : bool, default False
        ``False``: the positive class is ``AND_i [w_i.x + t >= 0]``; ``True``: ``OR_i [w_i.x >= t]``.
    step2 : bool, default True
        Refine every Step 1 normal with Step 2 (Algorithm 1); ``False``: Step 1 alone.
    step1_method : {"power", "landscape", "simultaneous"}, default "power"
    step1_options, step2_options : dict, optional
        See :func:`learn_halfspaces`.
    random_state : None, int or Generator

    Attributes
    ----------
    normals_ : ndarray (d, n)        unit normals ``w_i``
    threshold_ : float               ``t``
    step1_normals_ : ndarray (d, n)  Step 1's normals
    classes_ : ndarray (2,)          sorted labels; ``classes_[1]`` is "inside"
    n_features_in_ : int
    result_ : HalfspaceResult
    diagnostics_ : dict              fire rate, timings, Step 1 details, Step 2 traces (``step2_traces``:
                                     one DataFrame per normal) and final angle estimates

    Notes
    -----
    Labels: two classes; the larger one (``1``, ``True``) marks points inside the intersection (or union).
    """

    def __init__(self, n_halfspaces: int, threshold: float, *, union: bool = False, step2: bool = True,
                 step1_method: str = "power", step1_options: dict | None = None,
                 step2_options: dict | None = None, random_state: Any = None):
        self.n_halfspaces = n_halfspaces
        self.threshold = threshold
        self.union = union
        self.step2 = step2
        self.step1_method = step1_method
        self.step1_options = step1_options
        self.step2_options = step2_options
        self.random_state = random_state

    def fit(self, X: Any, y: Any) -> "HalfspaceIntersectionClassifier":
        """Learn the halfspaces from samples ``X ~ N(0, I)`` and their labels ``y`` (two classes)."""
        for flag in ("union", "step2"):
            if not isinstance(getattr(self, flag), (bool, np.bool_)):
                raise InputError(f"{flag} must be True or False, got {getattr(self, flag)!r}.")
        X = as_2d_float(X, "X", min_rows=2)
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise InputError(f"y must have shape ({X.shape[0]},), one label per row of X; got {y.shape}.")
        classes = np.unique(y)
        if classes.size != 2:
            raise InputError(f"y must contain exactly two classes (inside / outside), got {classes.size}: "
                             f"{classes[:5]!r}.")
        res = learn_halfspaces(X, y == classes[1], self.n_halfspaces, self.threshold, union=self.union,
                               step2=self.step2, step1_method=self.step1_method, step1_options=self.step1_options,
                               step2_options=self.step2_options, rng=check_random_state(self.random_state))
        self.classes_ = classes
        self.n_features_in_ = X.shape[1]
        self.result_ = res
        self.normals_ = res.normals
        self.step1_normals_ = res.step1_normals
        self.threshold_ = res.threshold
        self.diagnostics_ = dict(fire_rate=res.fire_rate, timings=res.timings, step1=res.step1_info,
                                 step2_ran=bool(res.refinements), step2_kept=res.kept_step2,
                                 step2_traces=[r.trace() for r in res.refinements],
                                 step2_angle_estimates=np.array([r.estimate.angle for r in res.refinements]),
                                 step2_stop_reasons=[r.stop_reason for r in res.refinements])
        return self

    def _check_fitted(self, X: Any) -> np.ndarray:
        if not hasattr(self, "normals_"):
            raise NotFittedError("this HalfspaceIntersectionClassifier is not fitted yet; call fit(X, y) first.")
        return as_2d_float(X, "X", n_features=self.n_features_in_, min_rows=0)

    def decision_function(self, X: Any) -> np.ndarray:
        """Signed margin: ``min_i (w_i.x + t)`` (intersection) or ``max_i (w_i.x - t)`` (union); >= 0 is inside."""
        A = self._check_fitted(X) @ self.normals_.T
        return (A - self.threshold_).max(axis=1) if self.union else (A + self.threshold_).min(axis=1)

    def predict(self, X: Any) -> np.ndarray:
        """``classes_[1]`` inside the learned intersection (or union), ``classes_[0]`` outside."""
        inside = self.decision_function(X) >= 0.0
        return self.classes_[inside.astype(np.intp)]


register("goel2019-halfspaces", paper="goel2019", algorithm="Theorem 6", target=HalfspaceIntersectionClassifier,
         assumptions=("x ~ N(0, I)", "noiseless labels", "halfspaces at a known distance t = Omega(sqrt(log d)) "
                      "from the origin", "d <= n normals, pairwise at constant angles"),
         description="intersection (or union) of halfspaces far from the origin: Step 1 on the complement "
                     "(an OR of step units), then Step 2 on each normal")
