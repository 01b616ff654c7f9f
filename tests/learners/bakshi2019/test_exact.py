"""Bakshi-Jayaram-Woodruff 2019: the exact linear-system steps (Algorithm 5, Algorithm 3 steps 4-8, R0).

Every exact routine must return the teacher to round-off when its input is good enough, and must refuse
(certified=False; ConvergenceError with strict=True) rather than return a wrong network otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.errors import AssumptionError, ConvergenceError, InputError
from nnrecover.learners.bakshi2019 import (algorithm5, refine_from_output_weights, refine_from_unmixing,
                                           row_from_zero_set)
from nnrecover.learners.bakshi2019._common import row_space_basis

D, K, M = 20, 5, 8


@pytest.fixture(scope="module")
def teacher():
    return nr.random_network(D, K, M, rng=11, condition_number=10).canonical()


def _data(net, ell, seed):
    X = np.random.default_rng(seed).standard_normal((ell, net.n_inputs))
    return X, net.predict(X).reshape(ell, -1)


def _perturbed(V, eps, seed):
    """Rows ξ_i V*_i + eps g_i/||g_i|| with random signs ξ_i."""
    g = np.random.default_rng(seed)
    G = g.standard_normal(V.shape)
    G /= np.linalg.norm(G, axis=1, keepdims=True)
    xi = g.choice([-1.0, 1.0], size=V.shape[0])
    return xi[:, None] * V + eps * G, xi


# ------------------------------------------------------------------------------------------ Algorithm 5

@pytest.mark.parametrize("eps", [1e-3, 0.05, 0.2])
def test_algorithm5_margin_exact(teacher, eps):
    X, Y = _data(teacher, 2000, 1)
    Va, xi = _perturbed(teacher.hidden_weights, eps, 2)
    res = algorithm5(Va, X, Y)
    assert res.certified, res.diagnostics["failure_reasons"]
    # round-off: the unit solves are least squares on |P| >= 200 Gaussian rows (condition ~ 3) and the
    # final U solve has cond(f(XV^T)) ~ 10, so errors are a few hundred ulps at most
    assert np.max(np.abs(res.hidden_weights - teacher.hidden_weights)) < 1e-12
    assert np.max(np.abs(res.output_weights - teacher.output_weights)) < 1e-11
    units = res.diagnostics["units"]
    assert [u["sign"] for u in units] == xi.astype(int).tolist()
    # right sign: null ratio at round-off; wrong sign: Θ(1) (measured 0.3-0.46)
    assert max(u["null_ratio"] for u in units) < 1e-12
    assert min(u["wrong_sign_null_ratio"] for u in units) > 0.01
    assert res.diagnostics["residual"] < 1e-13


def test_algorithm5_threshold_form_needs_tiny_error_margin_form_does_not(teacher):
    """Erratum to Algorithm 5 (docs errata page): the paper's zero set {f(v x) <= τ} contains every true positive
    entry below τ + |(v - V*) x|. With ε = 1e-9 and τ = 0.1/ℓ the expected number of such entries per unit
    is about ℓ (τ + ε E||x||) φ(0) 2 ≈ 0.1, so the paper's form works; with ε = 1e-2 it is about ℓ ε √d 0.8
    ≈ 70, and the true system becomes infeasible, while the margin form (zero set {v x < -τ}) is exact."""
    X, Y = _data(teacher, 1000, 3)
    Va, _ = _perturbed(teacher.hidden_weights, 1e-9, 4)
    ok = algorithm5(Va, X, Y, form="threshold")
    assert ok.certified
    assert np.max(np.abs(ok.hidden_weights - teacher.hidden_weights)) < 1e-12
    Va, _ = _perturbed(teacher.hidden_weights, 1e-2, 4)
    bad = algorithm5(Va, X, Y, form="threshold")
    assert not bad.certified
    assert any("below τ" in r or "inconsistent" in r for r in bad.diagnostics["failure_reasons"])
    good = algorithm5(Va, X, Y, form="margin")
    assert good.certified
    assert np.max(np.abs(good.hidden_weights - teacher.hidden_weights)) < 1e-12


def test_row_system_needs_k_row_basis_not_A(teacher):
    """Erratum: the paper solves (w Ā)_Z = 0 with w ∈ R^k, but Ā has m > k rows. With w ∈ R^m the left null
    space of Ā (dimension m - k) gives spurious solutions, so the solution is not unique; with a k-row
    basis B of rowspan(Ā) the solution is unique (null space of dimension exactly 1)."""
    X, Y = _data(teacher, 1000, 5)
    zero = X @ teacher.hidden_weights[0] < -0.1          # a true zero set of unit 0
    sA = np.linalg.svd(Y[zero].T, compute_uv=False)      # (w Ā)_Z = 0 with w ∈ R^m
    null_dim_A = M - int(np.sum(sA > 1e-10 * sA[0]))
    B, _ = row_space_basis(Y, K)
    sB = np.linalg.svd(B[:, zero], compute_uv=False)
    null_dim_B = K - int(np.sum(sB > 1e-10 * sB[0]))
    assert null_dim_A == M - K + 1 >= 2
    assert null_dim_B == 1
    r0 = row_from_zero_set(B, zero, X @ teacher.hidden_weights[0] > 0.1)
    assert r0["ok"] and r0["null_ratio"] < 1e-12 and r0["gap_ratio"] > 1e-3
    y = r0["y"] / np.max(r0["y"])
    h = np.maximum(X @ teacher.hidden_weights[0], 0)
    assert np.max(np.abs(y - h / np.max(h))) < 1e-12


def test_algorithm5_refuses_bad_estimates(teacher):
    """Certificates hold the line: random directions (ε ~ 1.4) must not be certified, and strict raises."""
    X, Y = _data(teacher, 2000, 6)
    Va = np.random.default_rng(7).standard_normal((K, D))
    res = algorithm5(Va, X, Y)
    assert not res.certified
    assert res.diagnostics["failed_units"]
    assert np.all(np.isnan(res.hidden_weights[res.diagnostics["failed_units"]]))
    with pytest.raises(InputError, match="unrecovered"):
        res.network
    with pytest.raises(ConvergenceError, match="certificates failed"):
        algorithm5(Va, X, Y, strict=True)


@pytest.mark.parametrize("seed", range(6))
def test_algorithm5_never_certifies_a_wrong_network(teacher, seed):
    """Property: across estimate errors from tiny to useless and refinement sizes down to the minimum,
    certified implies exact (the certificate tests the answer, not the input)."""
    g = np.random.default_rng(100 + seed)
    eps = float(g.choice([0.05, 0.3, 0.6, 1.0]))
    ell = int(g.choice([70, 150, 1000]))
    X, Y = _data(teacher, ell, 200 + seed)
    Va, _ = _perturbed(teacher.hidden_weights, eps, 300 + seed)
    res = algorithm5(Va, X, Y)
    if res.certified:
        assert np.max(np.abs(res.hidden_weights - teacher.hidden_weights)) < 1e-10
    else:
        assert res.diagnostics["failure_reasons"]


def test_algorithm5_refuses_noisy_labels(teacher):
    """Label noise breaks the exact row-span structure: rank(Ā) = m and no null vector exists."""
    X, Y = _data(teacher, 2000, 8)
    Y = Y + 1e-4 * np.random.default_rng(9).standard_normal(Y.shape)
    Va, _ = _perturbed(teacher.hidden_weights, 0.01, 10)
    res = algorithm5(Va, X, Y)
    assert not res.certified
    assert res.diagnostics["tail_ratio_A"] > 1e-6


def test_algorithm5_unit_in_wrong_span_refused(teacher):
    """Two approximate rows pointing at the same unit: the other unit is never recovered."""
    X, Y = _data(teacher, 2000, 11)
    Va = teacher.hidden_weights.copy()
    Va[1] = Va[0] + 1e-3
    res = algorithm5(Va, X, Y)
    assert not res.certified
    assert any("parallel" in r or "unit" in r for r in res.diagnostics["failure_reasons"])


@pytest.mark.parametrize("act", ["relu_power(2)", "relu_power(3)", "exp_minus_one"])
def test_algorithm5_rectified_activations_via_inverse(act):
    """Appendix 9.1: solve φ^{-1}((W_i)_S) = V_i X̄_S. For relu_power the scale passes through φ^{-1}; for
    exp_minus_one row norms are identifiable and the unknown scale c is found by a 1-D search."""
    net = nr.random_network(10, 3, 4, activation=act, rng=21, condition_number=3).canonical()
    X, Y = _data(net, 1500, 22)
    V = net.hidden_weights
    Va, _ = _perturbed(V / np.linalg.norm(V, axis=1, keepdims=True), 0.05, 23)
    res = algorithm5(Va, X, Y, activation=act)
    assert res.certified, res.diagnostics["failure_reasons"]
    # exp_minus_one: the scale c is refined by Gauss-Newton on the residual vector, so it is exact to
    # round-off like the homogeneous case (a scalar minimiser would stop at ~sqrt(eps) = 1e-8)
    assert nr.metrics.parameter_error(res.network, net)["max_unit_error"] < 1e-11


def test_algorithm5_validation(teacher):
    X, Y = _data(teacher, 500, 12)
    with pytest.raises(AssumptionError, match="rectified"):
        algorithm5(teacher.hidden_weights, X, Y, activation="tanh")
    with pytest.raises(InputError, match="form"):
        algorithm5(teacher.hidden_weights, X, Y, form="exact")
    with pytest.raises(InputError, match="columns"):
        algorithm5(teacher.hidden_weights[:, :-1], X, Y)
    with pytest.raises(InputError, match="zero row"):
        algorithm5(np.zeros((K, D)), X, Y)
    with pytest.raises(InputError, match="refinement samples"):
        algorithm5(teacher.hidden_weights, X[:20], Y[:20])
    with pytest.raises(InputError, match="NaN"):
        algorithm5(teacher.hidden_weights, np.where(X > 3, np.nan, X), Y)
    with pytest.raises(InputError, match="tol_null"):
        algorithm5(teacher.hidden_weights, X, Y, tol_null=-1)


# ------------------------------------------------------------------------ Algorithm 3 steps 4-8 (Cor 5)

@pytest.mark.parametrize("form", ["margin", "threshold"])
def test_refine_from_output_weights_exact(teacher, form):
    """Û = U* Π D (D > 0) exactly: both forms recover U*, V*; the threshold form needs the rounding of
    exact zeros only (Z = D f(V X̄) exactly, so no positive entry is below τ = 0.1/ℓ w.h.p.)."""
    X, Y = _data(teacher, 1500, 13)
    perm = np.array([2, 0, 4, 1, 3])
    Ua = teacher.output_weights[:, perm] * np.array([0.5, 2.0, 1.0, 3.0, 0.7])
    res = refine_from_output_weights(Ua, X, Y, form=form)
    assert res.certified, res.diagnostics["failure_reasons"]
    assert np.max(np.abs(res.hidden_weights - teacher.hidden_weights[perm])) < 1e-12
    assert np.max(np.abs(res.output_weights - teacher.output_weights[:, perm])) < 1e-11


def test_refine_from_output_weights_approximate(teacher):
    """Û = U* D + noise (relative 5%): the margin bridge is exact, the paper's rounding is not certified."""
    X, Y = _data(teacher, 2000, 14)
    g = np.random.default_rng(15)
    Ua = teacher.output_weights * g.uniform(0.5, 2, K) + 0.05 * g.standard_normal((M, K))
    res = refine_from_output_weights(Ua, X, Y, form="margin")
    assert res.certified
    assert np.max(np.abs(res.hidden_weights - teacher.hidden_weights)) < 1e-12
    paper = refine_from_output_weights(Ua, X, Y, form="threshold")
    assert not paper.certified
    with pytest.raises(InputError, match="shape"):
        refine_from_unmixing(np.ones((K, M + 1)), X, Y)


def test_refinement_on_symmetric_mixture_inputs():
    """Section 4.3 / Remark 6: the exact steps use only sign patterns and linear systems, so they work for
    symmetric inputs with full support (here a mixture of N(±mu_j, I)) given Û ≈ U* D (as from GKLW18)."""
    net = nr.random_network(8, 3, 4, rng=31).canonical()
    g = np.random.default_rng(32)
    dist = nr.distributions.SymmetricMixture(g.standard_normal((2, 8)))
    X = dist.sample(3000, g)
    Y = net.predict(X)
    Ua = net.output_weights * g.uniform(0.5, 2, 3) + 0.02 * g.standard_normal((4, 3))
    res = refine_from_output_weights(Ua, X, Y)
    assert res.certified
    assert nr.metrics.parameter_error(res.network, net)["max_unit_error"] < 1e-11


def test_fit_unit_on_a_row_subset_is_exact_on_consistent_systems_and_certifies_on_all_rows():
    from nnrecover.activations import get_activation
    from nnrecover.learners.bakshi2019._common import fit_unit

    rng = np.random.default_rng(4)
    d = 30
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    X = rng.standard_normal((3000, d))
    X = X[X @ v > 0]  # the positive set of the unit: y = 2.5 relu(v x) there
    y = 2.5 * (X @ v)
    act = get_activation("relu")
    full, res_full, _ = fit_unit(y, X, act)
    sub, res_sub, _ = fit_unit(y, X, act, solve_rows=2 * d)
    assert np.max(np.abs(sub - v)) < 1e-12 and np.max(np.abs(full - v)) < 1e-12
    assert res_sub < 1e-12 and res_full < 1e-12
    # one row outside the solved subset breaks the system: the residual over all rows shows it
    y_bad = y.copy()
    y_bad[1] += 1.0
    _, res_bad, _ = fit_unit(y_bad, X, act, solve_rows=2 * d)
    assert res_bad > 1e-4
