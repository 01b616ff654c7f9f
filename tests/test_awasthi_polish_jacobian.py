"""The analytic Jacobian of the Hermite-loss polish (Awasthi et al., Appendix B, Prop. B.1 truncated)
against finite differences."""

from __future__ import annotations

import numpy as np
import pytest

from nnrecover.learners.awasthi2021.polish import _multisets, _PackedHermiteProblem


def _central_differences(fun, theta, h):
    cols = []
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        cols.append((fun(theta + e) - fun(theta - e)) / (2 * h))
    return np.stack(cols, axis=1)


@pytest.mark.parametrize("orders, linear", [([2, 3, 4], False), ([0, 1, 2, 3, 4], True), ([0, 1, 2, 3, 4, 5, 6], False)])
def test_packed_jacobian_matches_central_differences(orders, linear):
    # Central differences with step h err by h^2 |r'''| / 6 (truncation) + eps |r| / h (round-off); the
    # residual is a polynomial in (a, V) times c_k(b), all derivatives O(1) at the O(1) parameters here,
    # so h = eps^(1/3) ~ 6e-6 gives an error of order eps^(2/3) ~ 4e-11 relative to max |J|; 1e-7 leaves
    # a wide margin and still catches any wrong term (a wrong factor, a missing tangent projection or
    # c_k' = c_{k+1} mistaken for c_{k-1} all change entries by O(1)).
    rng = np.random.default_rng(11)
    n, units = 5, 3
    targets = {k: rng.standard_normal(_multisets(n, k)[0].shape[0]) for k in orders}
    problem = _PackedHermiteProblem(targets, orders, n, units, linear)
    theta = rng.standard_normal(problem.size)
    J = problem.jacobian(theta)
    J_fd = _central_differences(problem.residual, theta, np.finfo(float).eps ** (1 / 3))
    assert J.shape == J_fd.shape == (problem.residual(theta).size, problem.size)
    assert np.max(np.abs(J - J_fd)) <= 1e-7 * np.max(np.abs(J))
    # the residual is invariant under rescaling a row of V: each unit's V-block annihilates v_i
    V = theta[2 * units:2 * units + units * n].reshape(units, n)
    JV = J[:, 2 * units:2 * units + units * n].reshape(-1, units, n)
    assert np.max(np.abs(np.einsum("mip,ip->mi", JV, V))) <= 1e-13 * np.max(np.abs(J)) * np.max(np.abs(V))
