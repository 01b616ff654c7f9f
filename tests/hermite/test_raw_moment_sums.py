"""The blocked sums behind two passes equal the plain products they replace, to round-off: the weighted
raw moments of the Hermite statistics, from monomial rows built with samples in columns
(``moments/hermite.py``), and pass 1 of Bakshi et al.'s tensor step in L2-sized row blocks
(``bakshi2019/tensor_step.py``). Both are re-orderings of the same finite
sums, so they agree to a few ulps of the sums' scale (1e-12 relative leaves room for n = 5000 terms)."""

import itertools

import numpy as np
import pytest

import nnrecover.hermite.statistics as hm
from nnrecover.errors import InputError
from nnrecover.learners.bakshi2019.tensor_step import _InputMoments


@pytest.mark.parametrize("q", [1, 7, 40])
@pytest.mark.parametrize("layout", ["C", "F"])
def test_order_two_sums_equal_the_direct_product(q, layout):
    rng = np.random.default_rng(0)
    Z, W = rng.standard_normal((5000, 6)), rng.standard_normal((5000, q))
    # F-ordered rows (samples in columns, as the tensor step's projection gives them) are read in place
    Z, W = np.asarray(Z, order=layout), np.asarray(W, order=layout)
    direct = np.einsum("no,na,nb->oab", W, Z, Z)
    acc: dict = {}
    hm._raw_sums(Z, W, [2, 0], acc, "S")
    got = hm._expand_raw(acc, "S", 2, 6, (q,), 1)
    assert np.max(np.abs(got - direct)) <= 1e-12 * np.max(np.abs(direct))
    assert np.allclose(hm._expand_raw(acc, "S", 0, 6, (q,), 1), W.sum(axis=0), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("m, orders", [(1, [3, 1]), (4, [4, 2, 0]), (5, [5, 3, 1]), (3, [6, 4, 2, 0])])
def test_raw_sums_equal_the_direct_products_in_several_row_blocks(m, orders, monkeypatch):
    # small blocks, so that the sums run over several of them and the last one is short
    monkeypatch.setattr(hm, "_RAW_BLOCK_ELEMENTS", 997)
    rng = np.random.default_rng(2)
    Z, W = rng.standard_normal((3001, m)), rng.standard_normal((3001, 2))
    acc: dict = {}
    hm._raw_sums(Z, W, orders, acc, "R")
    for r in orders:
        rows = np.ones((3001, 1))
        for _ in range(r):               # z^{(x) r} row by row, C order over the r indices
            rows = (rows[:, :, None] * Z[:, None, :]).reshape(3001, -1)
        direct = (W.T @ rows).reshape((2,) + (m,) * r)
        got = hm._expand_raw(acc, "R", r, m, (2,), 1)
        assert np.max(np.abs(got - direct)) <= 1e-12 * np.max(np.abs(direct))


def test_monomial_rows_are_the_monomials_in_their_order():
    rng = np.random.default_rng(3)
    ZT = rng.standard_normal((4, 7))
    powers = hm._monomial_rows(ZT, 3)
    for a in range(4):
        monos = list(itertools.combinations_with_replacement(range(4), a))
        want = np.array([np.prod(ZT[list(mono)], axis=0) for mono in monos]).reshape(len(monos), 7)
        assert powers[a].shape == want.shape
        assert np.max(np.abs(powers[a] - want)) <= 1e-14 * np.max(np.abs(want))


def test_input_moments_in_row_blocks_equal_plain_sums_and_merge():
    rng = np.random.default_rng(1)
    X, Y = rng.standard_normal((5003, 9)), rng.standard_normal((5003, 3))  # not a multiple of the block
    stride = 4
    whole = _InputMoments(stride).update(X, Y).finalize()
    Xs = X[::stride]
    for got, want in ((whole.x, X.mean(0)), (whole.y, Y.mean(0)), (whole.yx, Y.T @ X / len(X)),
                      (whole.xx, Xs.T @ Xs / len(Xs)), (whole.m2, (X ** 2).mean(0)), (whole.m4, (X ** 4).mean(0))):
        assert np.max(np.abs(got - want)) <= 1e-12 * np.max(np.abs(want))
    assert whole.n == len(X) and whole.n_xx == len(Xs)
    # two chunks merged: the stride restarts in each chunk, the rest is the same sums
    parts = _InputMoments(stride).update(X[:3000], Y[:3000])
    parts.merge(_InputMoments(stride).update(X[3000:], Y[3000:]))
    merged = parts.finalize()
    assert merged.n == len(X) and merged.n_xx == len(X[:3000:stride]) + len(X[3000::stride])
    assert np.max(np.abs(merged.yx - whole.yx)) <= 1e-12 * np.max(np.abs(whole.yx))
    assert np.max(np.abs(merged.m4 - whole.m4)) <= 1e-12 * np.max(np.abs(whole.m4))
    # an empty statistic refuses to finalize (no rows, no moments)
    with pytest.raises(InputError, match="at least 1 samples"):
        _InputMoments(stride).finalize()
