"""The one-pass sums of Ge et al. 2019's learner at scale: split halves read as strided residue classes,
pair products column-major, the contracted detector's coefficients as z z^T - u u^T."""

from __future__ import annotations

import numpy as np
import pytest

from nnrecover.learners.ge2019 import moments as gm


@pytest.mark.parametrize("split", ["none", "alg3", "alg4"])
def test_halves_by_residue_classes_equal_the_sums_over_their_rows(split, rng):
    # rows of pair j = r // 2 go to part layout[j % L] and half (j // L) % 2; chunks of 37 rows start at
    # every residue of the period 4 L. Each sum has at most 301 terms of size <= max|x|^2 ~ 20: the two
    # orders of summation agree to ~301 * 20 * eps relative, far below 1e-12
    X, Y = rng.standard_normal((301, 5)), rng.standard_normal((301, 3))
    stat = gm.PureNeuronStatistic(split=split, symmetry=False, detector=False, halves=True)
    for s in range(0, 301, 37):
        stat.update(X[s:s + 37], Y[s:s + 37])
    mom = stat.finalize()
    layout = gm.SPLIT_LAYOUTS[split]
    pair = np.arange(301) // 2
    part, half = np.asarray(layout)[pair % len(layout)], (pair // len(layout)) % 2
    for p, pm in enumerate(mom.parts):
        sel = part == p
        assert pm.n == sel.sum()
        np.testing.assert_allclose(pm.second, X[sel].T @ X[sel] / sel.sum(), rtol=0, atol=1e-13)
        np.testing.assert_allclose(pm.cross, Y[sel].T @ X[sel] / sel.sum(), rtol=0, atol=1e-13)
        np.testing.assert_allclose(pm.mean_x, X[sel].mean(axis=0), rtol=0, atol=1e-14)
        for h, (m, second, cross) in enumerate(pm.halves):
            rows = sel & (half == h)
            assert m == rows.sum()
            np.testing.assert_allclose(second, X[rows].T @ X[rows] / m, rtol=0, atol=1e-13)
            np.testing.assert_allclose(cross, Y[rows].T @ X[rows] / m, rtol=0, atol=1e-13)
    # the part's moments are those of a pass without halves (to round-off: another order of summation)
    plain = gm.PureNeuronStatistic(split=split, symmetry=False, detector=False).update(X, Y).finalize()
    for a, b in zip(mom.parts, plain.parts):
        np.testing.assert_allclose(a.second, b.second, rtol=0, atol=1e-13)
        np.testing.assert_allclose(a.yy, b.yy, rtol=0, atol=1e-13)


def test_pair_products_and_contracted_detector_match_their_definitions(rng):
    X = rng.standard_normal((50, 6))
    iu = np.triu_indices(6)
    np.testing.assert_array_equal(gm._vech_products(X), X[:, iu[0]] * X[:, iu[1]])
    # K[ab, rs] = E[(y_a z_b + y_b z_a - y_a y_b) x_r x_s] with z = B x (BuildT, Eq. 10), the definition
    # evaluated directly; the statistic forms z_a z_b - (y - z)_a (y - z)_b, the same polynomial: both
    # agree to the rounding of ~50-term sums of products of size ~1e2
    k = 3
    Y, B = rng.standard_normal((50, k)), rng.standard_normal((k, 6))
    stat = gm.PureNeuronStatistic(symmetry=False, B=B).update(X, Y).finalize()
    Z = X @ B.T
    ia, ib = np.triu_indices(k)
    C = Y[:, ia] * Z[:, ib] + Y[:, ib] * Z[:, ia] - Y[:, ia] * Y[:, ib]
    K = C.T @ (X[:, iu[0]] * X[:, iu[1]]) / 50
    packed = stat.detector.K[ia, ib]
    np.testing.assert_allclose(packed, K, rtol=0, atol=1e-12 * np.abs(K).max())
