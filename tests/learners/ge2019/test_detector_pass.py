"""The second pass of Ge et al. 2019's two-pass learner sums only the contracted detector ``K``: the parts'
low-order moments come from the first pass (projected by ``Q`` on the span route), and the low-order sums
read ``sum x`` and ``sum y`` off the products with ``[Y, 1]``."""

from __future__ import annotations

import numpy as np
import pytest

from nnrecover.errors import InputError
from nnrecover.learners.ge2019 import algorithms as ga
from nnrecover.learners.ge2019 import moments as gm
from nnrecover.moments import symmetry


@pytest.mark.parametrize("split", ["none", "alg3", "alg4"])
def test_projected_first_pass_moments_equal_those_summed_over_x_q(split, rng):
    # E[z z^T] = Q^T E[x x^T] Q etc. hold exactly for the empirical moments of the same rows; the two
    # orders of evaluation (sums of products of z = X Q, or Q^T (sums over x) Q) differ by the rounding of
    # ~400-term sums of terms of size <= max|x|^2 ~ 20 (relative ~400 eps ~ 1e-13 of the sums), far below
    # the 1e-12 allowed here
    d, k, l = 7, 3, 4
    X, Y = rng.standard_normal((400, d)), rng.standard_normal((400, l))
    Q = np.linalg.qr(rng.standard_normal((d, k)))[0]
    first = ga.pure_neuron_moments(X, Y, split=split, symmetry=False, detector=False, halves=True, chunk_size=61)
    summed = ga.pure_neuron_moments(X, Y, split=split, symmetry=False, detector=False, input_projection=Q,
                                    chunk_size=61)
    for part, ref in zip(first.parts, summed.parts):
        got = ga._projected_part(part, Q)
        assert got.n == ref.n and got.halves is None
        for name in ("mean_x", "second", "cross", "yy", "mean_y"):
            np.testing.assert_allclose(getattr(got, name), getattr(ref, name), rtol=0, atol=1e-12)
        np.testing.assert_array_equal(got.second, got.second.T)


@pytest.mark.parametrize("split", ["none", "alg3", "alg4"])
@pytest.mark.parametrize("span", [False, True])
def test_detector_pass_gives_the_detector_of_the_full_statistic(split, span, rng):
    # the same rows reach the same detector part in the same order. Without Q the arithmetic is the same
    # (bit for bit); with Q the detector pass projects each row block as Q^T X_b^T instead of slicing X Q:
    # the coordinates z differ by the rounding of d-term dot products (~d eps relative), so K, a mean of
    # 300 degree-4 products of coordinates of size <~ 4, agrees to ~1e-14 of its largest entry
    d, k, l = 6, 3, 5
    X, Y = rng.standard_normal((300, d)), rng.standard_normal((300, l))
    m = k if span else d
    Q = np.linalg.qr(rng.standard_normal((d, k)))[0] if span else None
    B, P = rng.standard_normal((k, m)), np.linalg.qr(rng.standard_normal((l, k)))[0]
    full = ga.pure_neuron_moments(X, Y, split=split, symmetry=False, B=B, projection=P, input_projection=Q,
                                  chunk_size=53).detector
    alone = ga._detector_pass(ga._source(X, Y)[0], split, 53, B, P, Q)
    assert alone.n == full.n
    if span:
        np.testing.assert_allclose(alone.K, full.K, rtol=0, atol=1e-12 * np.abs(full.K).max())
    else:
        np.testing.assert_array_equal(alone.K, full.K)
    np.testing.assert_array_equal(alone.B, B)
    np.testing.assert_array_equal(alone.projection, P)


def test_a_statistic_without_low_order_sums_refuses_to_finalize_its_parts(rng):
    X, Y = rng.standard_normal((40, 4)), rng.standard_normal((40, 2))
    stat = gm.PureNeuronStatistic(symmetry=False, B=rng.standard_normal((2, 4)))
    stat._low_order = False
    stat.update(X, Y)
    with pytest.raises(InputError, match="no low-order sums"):
        stat.finalize()
    assert stat._finalize_detector().n == 40


def test_detector_pass_refuses_an_empty_detector_part():
    # 4 rows = pairs 0, 1: with "alg4" (layout 0, 0, 1, 2) the detector part 1 receives none
    X, Y = np.ones((4, 3)), np.ones((4, 3))
    with pytest.raises(InputError, match="received no samples"):
        ga._detector_pass(ga._source(X, Y)[0], "alg4", None, np.eye(3), None)


def test_low_order_sums_from_products_with_ones_cancel_exactly_on_an_antithetic_sample(rng):
    # rows (x, -x) adjacent: in each part the pairs' odd sums (sum x, sum y x^T with y even) cancel
    # exactly, because a product with a negated operand is the exactly negated product
    X = rng.standard_normal((64, 5))
    X = np.repeat(X, 2, axis=0)
    X[1::2] *= -1
    Y = np.abs(X[:, :3]) + 1.0  # an even function of x
    for split in ("none", "alg3", "alg4"):
        mom = gm.PureNeuronStatistic(split=split, symmetry=False, detector=False, halves=True).update(
            X, Y).finalize()
        layout = np.asarray(gm.SPLIT_LAYOUTS[split])
        of_row = layout[(np.arange(X.shape[0]) // 2) % layout.size]
        for p, part in enumerate(mom.parts):
            assert np.all(part.mean_x == 0.0) and np.all(part.cross == 0.0)
            # ~128 positive terms of size ~3: the orders of summation agree to ~128 eps relative
            np.testing.assert_allclose(part.mean_y, Y[of_row == p].mean(axis=0), rtol=1e-13)


@pytest.mark.parametrize("split", ["none", "alg3", "alg4"])
def test_strided_symmetry_test_takes_sum_x_and_sum_x2_from_the_part_moments(split, rng):
    # sum x and sum x**2 over every row come from the part moments (sum x, diagonal of sum x x^T) instead of
    # the symmetry statistic's own column sums: the same sums in another order (~2000 eps relative). The
    # statistic n z^T R^+ z depends on them through the means and variances, smoothly away from a zero
    # variance, so it agrees to ~1e-12 relative; 1e-9 leaves room for the conditioning of R (features x, x^3)
    X = rng.standard_normal((2000, 3)) + 0.05  # slightly asymmetric: a statistic well above zero
    Y = rng.standard_normal((2000, 4))
    mom = ga.pure_neuron_moments(X, Y, split=split, detector=False, halves=split == "none", symmetry_gram_rows=50,
                                 chunk_size=301)
    stride = symmetry.symmetry_stride(2000, 3, 50)
    assert stride > 1
    alone = symmetry.SymmetryStatistic(stride)
    for s in range(0, 2000, 301):
        alone.update(X[s:s + 301])
    ref = alone.finalize()
    assert mom.symmetry.statistic > 10
    assert (mom.symmetry.df, mom.symmetry.n, mom.symmetry.gram_rows) == (ref.df, ref.n, ref.gram_rows)
    assert mom.symmetry.statistic == pytest.approx(ref.statistic, rel=1e-9)
    assert mom.symmetry.p_value == pytest.approx(ref.p_value, rel=1e-6, abs=1e-300)
