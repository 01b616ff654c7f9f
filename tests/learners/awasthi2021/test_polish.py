"""The analytic Jacobian and normal equations of the Hermite-loss polish (Awasthi et al., Appendix B,
Prop. B.1 truncated) against finite differences and the explicit Jacobian, and its trust-region
solver on the normal equations against SciPy's on the Jacobian."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize

from nnrecover.learners.awasthi2021.polish import _trust_region_fit, _multisets, _PackedHermiteProblem


def _central_differences(fun, theta, h):
    cols = []
    for j in range(theta.size):
        e = np.zeros_like(theta)
        e[j] = h
        cols.append((fun(theta + e) - fun(theta - e)) / (2 * h))
    return np.stack(cols, axis=1)


def _random_problem(seed, orders, linear):
    """A packed Hermite problem in n = 5 dimensions with 3 units, random targets and a random point."""
    rng = np.random.default_rng(seed)
    n, units = 5, 3
    targets = {k: rng.standard_normal(_multisets(n, k)[0].shape[0]) for k in orders}
    problem = _PackedHermiteProblem(targets, orders, n, units, linear)
    return problem, rng.standard_normal(problem.size)


@pytest.mark.parametrize("orders, linear", [([2, 3, 4], False), ([0, 1, 2, 3, 4], True), ([0, 1, 2, 3, 4, 5, 6], False)])
def test_packed_jacobian_matches_central_differences(orders, linear):
    # Central differences with step h err by h^2 |r'''| / 6 (truncation) + eps |r| / h (round-off); the
    # residual is a polynomial in (a, V) times c_k(b), all derivatives O(1) at the O(1) parameters here,
    # so h = eps^(1/3) ~ 6e-6 gives an error of order eps^(2/3) ~ 4e-11 relative to max |J|; 1e-7 leaves
    # a wide margin and still catches any wrong term (a wrong factor, a missing tangent projection or
    # c_k' = c_{k+1} mistaken for c_{k-1} all change entries by O(1)).
    problem, theta = _random_problem(11, orders, linear)
    n, units = problem.n, problem.k_units
    J = problem.jacobian(theta)
    J_fd = _central_differences(problem.residual, theta, np.finfo(float).eps ** (1 / 3))
    assert J.shape == J_fd.shape == (problem.residual(theta).size, problem.size)
    assert np.max(np.abs(J - J_fd)) <= 1e-7 * np.max(np.abs(J))
    # the residual is invariant under rescaling a row of V: each unit's V-block annihilates v_i
    V = theta[2 * units:2 * units + units * n].reshape(units, n)
    JV = J[:, 2 * units:2 * units + units * n].reshape(-1, units, n)
    assert np.max(np.abs(np.einsum("mip,ip->mi", JV, V))) <= 1e-13 * np.max(np.abs(J)) * np.max(np.abs(V))


@pytest.mark.parametrize("orders, linear", [([2, 3, 4], False), ([0, 1, 2, 3, 4], True), ([0, 1, 2, 3, 4, 5, 6], False)])
def test_closed_form_normal_equations_match_the_jacobian(orders, linear):
    # J^T J from the inner products of the derivative tensors (closed forms in S = U U^T) and J^T r contracted
    # from the packed residual are the same sums as J^T J and J^T r of the explicit Jacobian, rearranged: they
    # agree to round-off (a few ulps of the largest entry)
    problem, theta = _random_problem(12, orders, linear)
    J, r = problem.jacobian(theta), problem.residual(theta)
    A, g, r2 = problem.normal_equations(theta)
    assert np.array_equal(r2, r)
    assert np.max(np.abs(A - J.T @ J)) <= 1e-13 * np.max(np.abs(J.T @ J))
    assert np.max(np.abs(g - J.T @ r)) <= 1e-13 * np.max(np.abs(J.T @ r))


def test_trust_region_on_normal_equations_reaches_the_minimum_scipy_finds():
    # noisy targets (a model's packed tensors plus 1e-3 noise) from a start 0.05 away: the polish's
    # trust-region iteration on the closed-form normal equations and SciPy's on an SVD of the explicit
    # Jacobian stop at the same local minimum. Both stop at a relative loss decrease below 1e-12 after
    # quadratic convergence, so their losses agree to far better than 1e-9; the minimum is non-degenerate up
    # to the scale of V (the eigenvalues of J^T J on the tangent space are 5e-3 and up here), so a loss
    # within 1e-12 L* of it (L* ~ 1e-4: 1e-3 noise on 203 entries, weights <= 1) moves the unit parameters
    # by at most about sqrt(1e-12 * 1e-4 / 5e-3) ~ 1.5e-7; 1e-5 leaves a margin for the two stopping points
    rng = np.random.default_rng(13)
    n, units, orders = 6, 3, [2, 3, 4]
    a, b = rng.uniform(0.5, 1.5, units), rng.uniform(-0.5, 0.5, units)
    U = rng.standard_normal((units, n))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    truth = np.concatenate([a, b, U.ravel()])
    zero = _PackedHermiteProblem({k: np.zeros(_multisets(n, k)[0].shape[0]) for k in orders}, orders, n, units, False)
    packed = -zero.residual(truth)  # w * g^_k at the multisets
    offsets = np.cumsum([0] + [_multisets(n, k)[0].shape[0] for k in orders])
    targets = {k: packed[offsets[j]:offsets[j + 1]] / _multisets(n, k)[1] + 1e-3 * rng.standard_normal(
        offsets[j + 1] - offsets[j]) for j, k in enumerate(orders)}
    problem = _PackedHermiteProblem(targets, orders, n, units, False)
    start = truth + 0.05 * rng.standard_normal(truth.size)
    theta, r, nfev, status = _trust_region_fit(problem, start, problem.residual(start), 200)
    sol = optimize.least_squares(problem.residual, start, jac=problem.jacobian, method="trf", xtol=1e-12,
                                 ftol=1e-12, gtol=1e-12, max_nfev=200)
    assert status > 0 and sol.status > 0
    assert abs(r @ r - sol.fun @ sol.fun) <= 1e-9 * (sol.fun @ sol.fun)
    got, want = problem.unpack(theta), problem.unpack(sol.x)
    for x, y in zip(got[:3], want[:3]):
        assert np.max(np.abs(x - y)) <= 1e-5
    # and the minimum is near the truth (noise 1e-3 per entry)
    assert np.max(np.abs(got[2] - U)) <= 0.05


def test_sign_search_matches_the_pattern_by_pattern_minimum():
    # _best_signs scores all 2^k sign patterns at once; a direct loop over the patterns with the exact
    # nonlinearity Phi(xi b) picks the same first minimum (targets from a random pattern plus 1e-2 noise,
    # so the minimum is separated from the others by far more than round-off)
    import dataclasses
    import itertools
    import types

    from nnrecover.activations import get_activation
    from nnrecover.learners.awasthi2021.polish import _best_signs

    @dataclasses.dataclass
    class Rec:
        a: np.ndarray
        b: np.ndarray
        U: np.ndarray
        W: np.ndarray | None = None

    relu = get_activation("relu")
    rng = np.random.default_rng(14)
    for _ in range(10):
        k = int(rng.integers(2, 9))
        rec = Rec(rng.standard_normal(k), rng.standard_normal(k), rng.standard_normal((k, k)))
        xi = np.where(rng.random(k) < 0.5, -1.0, 1.0)
        c = relu.hermite_coefficients(1, xi * rec.b)
        coeffs = types.SimpleNamespace(t0=rec.a @ c[:, 0] + 1e-2 * rng.standard_normal(),
                                       t1_projected=(rec.a * c[:, 1] * xi) @ rec.U + 1e-2 * rng.standard_normal(k),
                                       lift=lambda V: V)
        vals = []
        for pattern in itertools.product((1.0, -1.0), repeat=k):
            p = np.array(pattern)
            cp = relu.hermite_coefficients(1, p * rec.b)
            r1 = coeffs.t1_projected - (rec.a * cp[:, 1] * p) @ rec.U
            vals.append((coeffs.t0 - rec.a @ cp[:, 0]) ** 2 + r1 @ r1)
        want = np.array(list(itertools.product((1.0, -1.0), repeat=k)))[int(np.argmin(vals))]
        out, report = _best_signs(coeffs, rec)
        assert report["sign_search_flips"] == np.flatnonzero(want < 0).tolist()
        assert np.array_equal(out.b, want * rec.b) and np.array_equal(out.U, want[:, None] * rec.U)
