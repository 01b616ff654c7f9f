"""The blocked sums behind two passes equal the plain products they replace, to round-off: the order-2
Hermite sums one weighted Gram per output (``moments/hermite.py``) and pass 1 of Bakshi et al.'s tensor
step in L2-sized row blocks (``bakshi2019/tensor_step.py``). Both are re-orderings of the same finite
sums, so they agree to a few ulps of the sums' scale (1e-12 relative leaves room for n = 5000 terms)."""

import numpy as np
import pytest

import nnrecover.moments.hermite as hm
from nnrecover.errors import InputError
from nnrecover.learners.bakshi2019.tensor_step import _InputMoments


@pytest.mark.parametrize("q", [1, 7, 40])
def test_order_two_sums_equal_the_direct_product(q, monkeypatch):
    rng = np.random.default_rng(0)
    Z, W = rng.standard_normal((5000, 6)), rng.standard_normal((5000, q))
    direct = np.einsum("no,na,nb->oab", W, Z, Z)
    acc: dict = {}
    hm._raw_sums(Z, W, [2, 0], acc, "S")
    assert np.max(np.abs(acc[("S", 2)] - direct)) <= 1e-12 * np.max(np.abs(direct))
    assert np.allclose(acc[("S", 0)].reshape(q), W.sum(axis=0), rtol=1e-12, atol=1e-12)
    # the one-GEMM form (used above 32 columns) gives the same sums
    monkeypatch.setattr(hm, "_GRAM_PER_OUTPUT_MAX", 0)
    gemm: dict = {}
    hm._raw_sums(Z, W, [2], gemm, "S")
    assert np.max(np.abs(gemm[("S", 2)] - acc[("S", 2)])) <= 1e-12 * np.max(np.abs(direct))


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
