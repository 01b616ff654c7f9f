"""Goel & Panigrahy (2019) Theorem 6: intersections and unions of halfspaces far from the origin."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import clone

from nnrecover.errors import AssumptionError, InputError, NotFittedError
from nnrecover.learners.goel2019.halfspaces import (HalfspaceIntersectionClassifier, halfspace_labels,
                                                    learn_halfspaces)
from nnrecover.learners.goel2019.model import HighThresholdNetwork, UpperPolynomial
from nnrecover.metrics import weight_error


def _normals(d: int, seed: int) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))[0]


def test_complement_is_or_of_step_units_exactly():
    # Section 2.3: 1 - AND_i [w_i.x + t >= 0] = OR_i [(-w_i).x >= t] = P(X) with P = 1 - prod (1 - X_i)
    # and X_i = u_t((-w_i).x); and a union with normals w is the complement of an intersection with -w.
    gen = np.random.default_rng(0)
    W, t = _normals(4, 1), 1.3
    X = gen.standard_normal((20_000, 4))
    g = halfspace_labels(X, W, t)
    net = HighThresholdNetwork(-W, t, "step", UpperPolynomial.or_polynomial(4))
    np.testing.assert_array_equal(1.0 - g, net.predict(X))
    np.testing.assert_array_equal(halfspace_labels(X, -W, t, union=True), ~g)


def test_fitted_classifier_predicts_its_own_normals():
    # the classifier's decision is AND_i [w_i.x + t >= 0] with its normals_, exactly
    gen = np.random.default_rng(3)
    W, t = _normals(3, 4), 2.5
    X = gen.standard_normal((60_000, 3))
    clf = HalfspaceIntersectionClassifier(3, t, step2=False, random_state=0).fit(X, halfspace_labels(X, W, t))
    Xt = gen.standard_normal((5_000, 3))
    np.testing.assert_array_equal(clf.predict(Xt), halfspace_labels(Xt, clf.normals_, t))
    margin = clf.decision_function(Xt)
    np.testing.assert_allclose(margin, (Xt @ clf.normals_.T + t).min(axis=1), rtol=0, atol=1e-15)
    np.testing.assert_allclose(np.linalg.norm(clf.normals_, axis=1), 1.0, rtol=0, atol=1e-14)
    assert clf.diagnostics_["step2_ran"] is False
    np.testing.assert_array_equal(clf.normals_, clf.step1_normals_)


def test_intersection_recovered_below_005_rad_and_1_percent():
    # representative case of goel2019-halfspaces: d = 3 orthonormal normals at t = 2.5, N = 1e5 samples.
    # Statistical scale: a slab of the adaptive minimum width holds ~200 rows, so each tan estimate has
    # ~7% relative error (3.5/sqrt(200) for two levels, less with five), and the search stops near the
    # empirical minimum: a few hundredths of a radian at most. A normal off by theta moves a boundary
    # mass of about phi(t) E|s| theta = 0.014 theta per halfspace, so 0.05 rad on 3 normals costs
    # < 0.25% disagreement; the 1% bar leaves room for the sampling error of 1e5 test points (0.03%).
    gen = np.random.default_rng(21)
    W, t = _normals(3, 22), 2.5
    X = gen.standard_normal((100_000, 3))
    labels = np.where(halfspace_labels(X, W, t), 1, 0)
    clf = HalfspaceIntersectionClassifier(3, t, random_state=5).fit(X, labels)
    err = weight_error(clf.normals_, W)
    assert err["max_angle"] < 0.05
    assert err["sign_flips"].sum() == 0
    Xt = gen.standard_normal((100_000, 3))
    assert np.mean(clf.predict(Xt) != np.where(halfspace_labels(Xt, W, t), 1, 0)) < 0.01
    assert clf.score(Xt, halfspace_labels(Xt, W, t).astype(int)) > 0.99
    # Step 2 traces are kept (diagnostics) and the refined normals are no worse than Step 1's by more
    # than the search's noise
    assert len(clf.diagnostics_["step2_traces"]) == 3
    assert err["max_angle"] < weight_error(clf.step1_normals_, W)["max_angle"] + 0.01


def test_union_of_halfspaces():
    # union OR_i [w_i.x >= t]: the same pipeline without the flip; labels may be any two classes
    gen = np.random.default_rng(31)
    W, t = _normals(3, 32), 2.5
    X = gen.standard_normal((100_000, 3))
    y = np.where(halfspace_labels(X, W, t, union=True), "in", "out")   # classes_ sorted: ["in", "out"]
    # "in" < "out", so classes_[1] = "out" is the positive class: the complement of the union, which is an
    # intersection with normals -W
    clf = HalfspaceIntersectionClassifier(3, t, union=False, step2=False, random_state=0).fit(X, y)
    assert list(clf.classes_) == ["in", "out"]
    assert weight_error(clf.normals_, -W)["max_angle"] < 0.15
    res = learn_halfspaces(X, y == "in", 3, t, union=True, step2=False, rng=0)
    assert weight_error(res.normals, W)["max_angle"] < 0.15
    np.testing.assert_allclose(res.normals, -clf.normals_, atol=1e-12)


def test_refuses_halfspaces_near_the_origin():
    # t = 0.2: most points lie outside the intersection of 3 halfspaces, so the firing event is not rare
    # (Theorem 6 needs t = Omega(sqrt(log d)))
    gen = np.random.default_rng(0)
    W = _normals(3, 0)
    X = gen.standard_normal((5_000, 3))
    with pytest.raises(AssumptionError, match="far from the origin"):
        HalfspaceIntersectionClassifier(3, 0.2).fit(X, halfspace_labels(X, W, 0.2))


def test_validation_and_sklearn_api():
    gen = np.random.default_rng(0)
    X = gen.standard_normal((1_000, 3))
    clf = HalfspaceIntersectionClassifier(2, 2.0)
    assert clone(clf).get_params()["n_halfspaces"] == 2
    with pytest.raises(NotFittedError):
        clf.predict(X)
    with pytest.raises(InputError, match="two classes"):
        clf.fit(X, np.ones(1_000))
    with pytest.raises(InputError, match="one label per row"):
        clf.fit(X, np.ones(10))
    with pytest.raises(InputError, match="n_halfspaces"):
        HalfspaceIntersectionClassifier(4, 2.0).fit(X, np.arange(1_000) % 2)
    with pytest.raises(InputError, match="threshold"):
        HalfspaceIntersectionClassifier(2, -1.0).fit(X, np.arange(1_000) % 2)
    with pytest.raises(InputError, match="union"):
        HalfspaceIntersectionClassifier(2, 2.0, union="yes").fit(X, np.arange(1_000) % 2)


def test_goel2019_halfspaces_experiment_quick(tmp_path):
    from nnrecover.experiments.runner import RESULT_FILES, run_experiment

    df = run_experiment("goel2019-halfspaces", tmp_path, quick=True, rng=0)
    assert all((tmp_path / f).exists() for f in RESULT_FILES)
    assert set(df["stage"]) == {"step1", "step2"}
    step2 = df[df["stage"] == "step2"].iloc[0]
    assert step2["max_angle"] < 0.05 and step2["disagreement"] < 0.01
