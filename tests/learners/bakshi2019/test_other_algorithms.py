"""Bakshi-Jayaram-Woodruff 2019: noise (Algorithm 6, Lemma 20, Algorithm 8, PCP), Algorithm 7, the
worst-case LPs (Lemma 1, Algorithms 1-2) and the hardness / lower-bound builders."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.errors import AssumptionError, CertificateWarning, ConvergenceError, InputError

from nnrecover.learners.bakshi2019 import (NoisyReLULearner, algorithm2, algorithm6, algorithm7, algorithm8,
                                           assignment_to_separator,
                                           brute_force_sat, brute_force_separability, check_network_instance,
                                           close_under_reversal, enumerate_sign_patterns, grid_candidates,
                                           iterative_lp, lemma16_equal_outputs, lemma16_instances, noisy_pipeline,
                                           parallel_classes, principal_component_pursuit, pv_halfspace,
                                           regression_output_weights, sat_to_relu_separability,
                                           separability_to_network, separability_to_network_variable_alpha,
                                           separator_to_assignment, sparse_noise_pipeline)
from nnrecover.learners.bakshi2019._common import match_rows, row_space_basis

GAUSS = nr.distributions.StandardGaussian


def _aligned_errors(V_est, U_est, net):
    order, signs = match_rows(V_est, net.hidden_weights)
    return (float(np.linalg.norm(V_est[order] * signs[:, None] - net.hidden_weights)),
            float(np.linalg.norm(U_est[:, order] - net.output_weights)), signs)


# ------------------------------------------------------------------------------ Algorithm 6, Lemma 20

def test_algorithm6_signs_and_margin():
    """Exact directions with random signs, noise σ = 0.5: every sign right, and the exact-data margin
    (a^- - a^+)/(a^- + a^+) is Θ(1) (Corollary 6: the wrong-sign projection loses a constant fraction)."""
    net = nr.random_network(10, 3, 5, rng=1).canonical()
    X, Y = nr.sample(net, GAUSS(10), 5_000, noise=0.5, rng=2)
    xi = np.array([1.0, -1.0, -1.0])
    V, diag = algorithm6(net.hidden_weights * xi[:, None], X, Y)
    assert np.allclose(V, net.hidden_weights)
    assert np.array_equal(diag["signs"], xi)
    X0, Y0 = nr.sample(net, GAUSS(10), 5_000, rng=3)
    _, d0 = algorithm6(net.hidden_weights * xi[:, None], X0, Y0)
    assert np.max(d0["a_plus"] * (xi > 0) + d0["a_minus"] * (xi < 0)) < 1e-20 * np.sum(Y0 ** 2)
    assert np.min(d0["margins"]) > 0.05
    # erratum 5: the paper writes A (all n columns) in a^+ but Ā (the first ℓ) in a^-. Read literally, a^+
    # carries the noise energy of n columns (about n m σ^2 = 6250 here) against ℓ m σ^2 = 1250 for a^-, and
    # the comparison a^+ < a^- rejects even the right sign; both on Ā decide correctly
    _, full = algorithm6(net.hidden_weights, X, Y)
    _, part = algorithm6(net.hidden_weights, X[:1_000], Y[:1_000])
    assert np.all(full["a_plus"] > part["a_minus"]) and np.all(part["a_plus"] < part["a_minus"])


def test_lemma20_regression_exact_and_noisy():
    """With the true V: noiseless U exact; with noise σ the error is about σ sqrt(k m / (n λ_min(H^T H/n)))
    ~ σ sqrt(15/(n 0.2)) ~ 0.01 for σ = 0.5, n = 2e4 (tolerance 5x)."""
    net = nr.random_network(8, 3, 5, rng=4).canonical()
    X, Y = nr.sample(net, GAUSS(8), 20_000, rng=5)
    U, info = regression_output_weights(net.hidden_weights, X, Y)
    # normal equations: U to κ(H^T H) eps; the streamed residual cancels to ~sqrt(eps) only
    assert np.max(np.abs(U - net.output_weights)) < 1e-12 and info["residual"] < 1e-6
    Xn, Yn = nr.sample(net, GAUSS(8), 20_000, noise=0.5, rng=6)
    Un, _ = regression_output_weights(net.hidden_weights, Xn, Yn)
    assert np.linalg.norm(Un - net.output_weights) < 0.05
    # erratum 11: Lemma 20's error term is O(1) √ℓ ε (linear in ε = ||V - V*||), not √(ℓ ε): on noiseless
    # data a 10x smaller ε gives a 10x (not √10 = 3.2x) smaller ||U - U*||_F (first-order perturbation)
    G = np.random.default_rng(7).standard_normal(net.hidden_weights.shape)
    errs = [np.linalg.norm(regression_output_weights(net.hidden_weights + e * G / np.linalg.norm(G), X, Y)[0]
                           - net.output_weights) for e in (1e-2, 1e-3)]
    assert 7 < errs[0] / errs[1] < 13


def test_noisy_pipeline_rate():
    """Theorem 10: ||V - V*||_F falls like n^{-1/2}: 16x the samples should cut it about 4x (allow > 2x);
    signs all right (σ = 0.5)."""
    net = nr.random_network(10, 3, 4, rng=7, condition_number=3).canonical()
    errs = []
    for n in (20_000, 320_000):
        stream = nr.sample_stream(net, GAUSS(10), n, noise=0.5, rng=8)
        res = noisy_pipeline(stream, None, 3, rng=0)
        ev, eu, signs = _aligned_errors(res.hidden_weights, res.output_weights, net)
        assert np.all(signs > 0)
        assert not res.certified
        errs.append((ev, eu))
    assert errs[1][0] < errs[0][0] / 2 and errs[1][1] < errs[0][1] / 2
    assert errs[1][0] < 0.1


def test_noisy_learner():
    net = nr.random_network(8, 3, 4, rng=9).canonical()
    X, Y = nr.sample(net, GAUSS(8), 60_000, noise=0.1, rng=10)
    # unrefined, the tensor-step estimate is off the least-squares fit; its certificate bound (twice the
    # Gauss-Newton step plus the noise term) exceeds the default certificate_tol = 0.1 although the error
    # is about 0.05: the conservative side of the bound (docs/certificates.md counts these false alarms)
    with pytest.warns(CertificateWarning, match="max_unit_error"):
        plain = NoisyReLULearner(3, refine=False, random_state=0).fit(X, Y)
    refined = NoisyReLULearner(3, refine=True, refine_options={"max_samples": 20_000}, random_state=0).fit(X, Y)
    e0 = nr.metrics.parameter_error(plain.network_, net)["max_unit_error"]
    e1 = nr.metrics.parameter_error(refined.network_, net)["max_unit_error"]
    assert e0 < 0.3 and e1 <= e0 + 1e-12
    assert plain.diagnostics_["certificates"]["max_unit_error"]["bound"] >= e0
    assert e1 <= refined.diagnostics_["certificates"]["max_unit_error"]["bound"] <= 0.1
    assert refined.diagnostics_["refinement"]["ran"] is not False
    with pytest.warns(CertificateWarning, match="max_unit_error"):
        white = NoisyReLULearner(3, decomposition="whiten", refine=False, random_state=0).fit(X, Y)
    assert white.diagnostics_["noisy"]["approximate"]["decomposition"]["method"] == "whiten"
    assert nr.metrics.parameter_error(white.network_, net)["max_unit_error"] < 0.3
    with pytest.raises(InputError, match="decomposition"):
        NoisyReLULearner(3, decomposition="svd").fit(X, Y)


def test_noisy_learner_regression_auto_uses_algorithm6_rows_only_when_refining():
    net = nr.random_network(8, 3, 4, rng=9).canonical()
    X, Y = nr.sample(net, GAUSS(8), 60_000, noise=0.1, rng=10)
    opts = {"max_samples": 20_000}
    auto = NoisyReLULearner(3, refine_options=opts, random_state=0).fit(X, Y)
    every = NoisyReLULearner(3, regression="all", refine_options=opts, random_state=0).fit(X, Y)
    assert auto.diagnostics_["noisy"]["regression"] == "sign"
    assert every.diagnostics_["noisy"]["regression"] == "all"
    # both starts are within the tensor step's error (about 0.05) of the teacher, and the refinement
    # descends to the same least-squares minimiser of its rows from either; its stopping test (a relative
    # loss gain below 1e-9 on 20000 rows) leaves each within about sqrt(1e-9) ~ 3e-5 relative of it, far
    # below the statistical error (about 0.1 / sqrt(20000) per parameter)
    gap = nr.metrics.parameter_error(auto.network_, every.network_)["max_unit_error"]
    assert gap < 1e-4
    with pytest.warns(CertificateWarning, match="max_unit_error"):
        plain = NoisyReLULearner(3, refine=False, random_state=0).fit(X, Y)
    assert plain.diagnostics_["noisy"]["regression"] == "all"


# ------------------------------------------------------------------------------------------ Algorithm 7

def test_algorithm7_rank_deficient_u_exact():
    """Must show 4: m = 2 < k = 4, generic U*: exact (k read off the classes when not given)."""
    net = nr.random_network(5, 4, 2, rng=3).canonical()
    X, Y = nr.sample(net, GAUSS(5), 2_000, rng=4)
    for k in (4, None):
        res = algorithm7(X, Y, k)
        assert res.certified
        assert nr.metrics.parameter_error(res.network, net)["max_unit_error"] < 1e-10
    assert res.diagnostics["k_inferred"] == 4


def test_algorithm7_u_minus_u_erratum():
    """Erratum: with U*_{:,1} = -c U*_{:,0} (allowed by the paper), samples with only units 0 and 1 active
    output (f_0 - c f_1) u, parallel to ±u; the literal grouping mixes them into the unit classes. We show
    the contamination on the data and that algorithm7 refuses, naming the corrected condition."""
    base = nr.random_network(5, 4, 2, rng=3).canonical()
    U = base.output_weights.copy()
    U[:, 1] = -0.7 * U[:, 0]
    net = nr.TwoLayerNetwork(base.hidden_weights, None, U)
    X, Y = nr.sample(net, GAUSS(5), 2_000, rng=4)
    H = np.maximum(X @ net.hidden_weights.T, 0)
    two_sparse = (H[:, 0] > 0) & (H[:, 1] > 0) & (H[:, 2] == 0) & (H[:, 3] == 0)
    classes, _ = parallel_classes(Y, rng=0)
    u_dir = U[:, 0] / np.linalg.norm(U[:, 0])
    u_class = next(c for c in classes if abs(Y[c[0]] @ u_dir / np.linalg.norm(Y[c[0]])) > 1 - 1e-10
                   and Y[c[0]] @ u_dir > 0)
    assert np.any(two_sparse[u_class])          # 2-sparse columns contaminate the class of unit 0
    with pytest.raises(AssumptionError, match="collinear"):
        algorithm7(X, Y, 4)
    # with few samples (only 3 classes of >= d columns for k = 4) the refusal still names the condition
    # instead of reporting "insufficient samples"
    X, Y = nr.sample(net, GAUSS(5), 100, rng=4)
    assert sum(c.size >= 5 for c in parallel_classes(Y, rng=0)[0]) < 4
    with pytest.raises(AssumptionError, match="collinear"):
        algorithm7(X, Y, 4)


def test_algorithm7_refusals():
    net = nr.random_network(5, 4, 2, rng=3).canonical()
    X, Y = nr.sample(net, GAUSS(5), 300, rng=4)
    with pytest.raises(InputError, match="insufficient samples"):
        algorithm7(X, Y, 4)
    net1 = nr.random_network(5, 2, 1, rng=3).canonical()
    X, Y = nr.sample(net1, GAUSS(5), 300, rng=4)
    with pytest.raises(AssumptionError, match="m = 1"):
        algorithm7(X, Y, 2)


# ------------------------------------------------------------------------------ worst case (Thm 1-2)

def _integer_instance(seed, n=12, d=3, k=2, m=2):
    """Integer X, V, U; redrawn (deterministically) until rank(A) = min(m, k), the regime of Theorem 1
    (Lemma 4: a.s. for continuous X, but integer draws can be degenerate)."""
    g = np.random.default_rng(seed)
    while True:
        X = g.integers(-3, 4, size=(n, d)).astype(float)
        V = g.integers(-2, 3, size=(k, d)).astype(float)
        U = g.integers(-3, 4, size=(m, k)).astype(float)
        Y = np.maximum(X @ V.T, 0) @ U.T
        if np.linalg.matrix_rank(Y) == min(m, k) and np.linalg.matrix_rank(V) == k:
            return X, V, U, Y


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_algorithm2_tiny_integer_instances(seed):
    """Must show 5: n = 12, k = 2, integer X: A = U f(VX) to 1e-9 (LP solutions polished on the active
    equalities: round-off), every true row pattern in 𝒮 and |𝒮| <= C(2n, k) (Lemma 1)."""
    X, V, U, Y = _integer_instance(seed)
    res = algorithm2(X, Y, 2)
    assert res.certified and res.diagnostics["residual"] < 1e-9
    B, _ = row_space_basis(Y, 2)
    pats = enumerate_sign_patterns(B, method="lemma1")
    assert len(pats) <= comb(24, 2)
    for i in range(2):
        assert any(np.array_equal(p, X @ V[i] > 0) for p in pats)
    assert np.max(np.abs(res.network.predict(X) - Y)) < 1e-9 * np.max(np.abs(Y))


def test_algorithm2_refuses_rank_deficient():
    """Theorem 2: rank(A) < k is NP-hard; the worst-case solver refuses (m = 1 < k = 2)."""
    X, V, U, Y = _integer_instance(5, m=1)
    with pytest.raises(AssumptionError, match="NP-hard"):
        algorithm2(X, Y, 2)
    X, V, U, Y = _integer_instance(0)
    with pytest.raises(AssumptionError, match="only for ReLU"):
        algorithm2(X, Y, 2, activation="relu_power(2)")


def test_algorithm1_projection_erratum_and_independence():
    """Algorithm 1's projection is P = Q^T (Q Q^T)^{-1} Q (the paper's Q^T (Q^T Q)^{-1} Q inverts the
    singular n x n matrix Q^T Q when i - 1 < n); the LP output f(y) is independent of the previous rows."""
    X, V, U, Y = _integer_instance(1)
    Qrows = np.maximum(X @ V[:1].T, 0).T                       # (1, n): one previous f(y)
    assert np.linalg.matrix_rank(Qrows.T @ Qrows) == 1 < Qrows.shape[1]
    P = Qrows.T @ np.linalg.inv(Qrows @ Qrows.T) @ Qrows
    assert np.allclose(P @ P, P) and np.allclose(P @ Qrows[0], Qrows[0])
    B, _ = row_space_basis(Y, 2)
    out = iterative_lp(X, B, X @ V[1] > 0, Qrows)
    assert out is not None
    F = np.vstack([Qrows, np.maximum(out["y"], 0)])
    assert np.linalg.matrix_rank(F) == 2
    # the pattern of the unit already found: on this 12-row instance the LP still finds a y in rowspan(A)
    # with that pattern whose f(y) is independent of the previous one (Algorithm 1 asks exactly this);
    # what it returns must keep the pattern and be independent
    S = X @ V[0] > 0
    again = iterative_lp(X, B, S, Qrows)
    assert again is not None
    assert np.all(again["y"][S] > 0) and np.all(again["y"][~S] <= 1e-9)
    assert np.linalg.matrix_rank(np.vstack([Qrows, np.maximum(again["y"], 0)])) == 2


# ------------------------------------------------------------------------------------------ sparse noise

def test_sparse_noise_pcp_then_exact():
    """Must show 6 (test size m = 100, n = 800): 5% of entries corrupted by values up to 100x the signal
    RMS; PCP (λ = 1/√max(n, m)) + masked-ALS polish + exact pipeline: U*, V* to 1e-8."""
    g = np.random.default_rng(0)
    d, k, m, n = 6, 3, 100, 800
    Q, _ = np.linalg.qr(g.standard_normal((m, k)))
    V = g.standard_normal((k, d))
    V /= np.linalg.norm(V, axis=1, keepdims=True)
    net = nr.TwoLayerNetwork(V, None, Q * np.sqrt(m / k))
    X = g.standard_normal((n, d))
    M = net.predict(X)
    mask = g.random(M.shape) < 0.05
    Y = M + mask * g.uniform(-100, 100, M.shape) * np.sqrt(np.mean(M ** 2))
    _, _, info = principal_component_pursuit(Y)
    assert info["lam"] == pytest.approx(1 / np.sqrt(n)) and info["converged"]
    res = sparse_noise_pipeline(X, Y, k, rng=0)
    assert res.certified, res.diagnostics["failure_reasons"]
    assert nr.metrics.parameter_error(res.network, net)["max_unit_error"] < 1e-8
    assert abs(res.diagnostics["n_corrupted_detected"] - mask.sum()) <= 0.01 * mask.sum()
    raw = sparse_noise_pipeline(X, Y, k, polish=False, rng=0)   # PCP alone: solver precision only
    assert not raw.certified or nr.metrics.parameter_error(raw.network, net)["max_unit_error"] < 1e-8
    # erratum 12: the paper's display min ||M||_* + ||E||_1 has no weight. With λ = 1 the ℓ1 term costs
    # more than the nuclear norm of any full-rank part (||E||_1 >= ||E||_* here), so PCP puts everything
    # into M (rank m, no separation) and the pipeline refuses instead of certifying
    M1, _, info1 = principal_component_pursuit(Y, lam=1.0)
    assert info1["rank"] == m and np.linalg.norm(M1 - M) > np.linalg.norm(M)
    with pytest.raises(ConvergenceError, match="did not separate"):
        sparse_noise_pipeline(X, Y, k, lam=1.0, rng=0)


# ------------------------------------------------------------------------------------------ Algorithm 8

def test_pv_halfspace_estimator():
    """Clean labels sign(v.x): E[sign(v.x) x] = sqrt(2/π) v, so the estimate's error is ~ sqrt(d/n)/0.8."""
    g = np.random.default_rng(1)
    v = g.standard_normal(10)
    v /= np.linalg.norm(v)
    X = g.standard_normal((40_000, 10))
    w = pv_halfspace(X, np.sign(X @ v))
    assert np.linalg.norm(w - v) < 5 * np.sqrt(10 / 40_000) / 0.8


def test_algorithm8_selects_oracle_and_is_competitive():
    """E = Student-t(2) + bias 0.5, independent of X. With the oracle (SU*)^† among perturbed distractors
    the selection by residual picks it and ||A - U f(VX)||_F / ||E||_F <= 1 (measured 0.995)."""
    net = nr.random_network(10, 3, 20, rng=0).canonical()
    g = np.random.default_rng(2)
    X = g.standard_normal((20_000, 10))
    E = g.standard_t(2, size=(20_000, 20)) + 0.5
    Y = net.predict(X) + E
    oracle = np.linalg.pinv(net.output_weights)
    cands = [oracle * (1 + 0.5 * g.standard_normal(oracle.shape)) for _ in range(4)] + [oracle]
    res = algorithm8(X, Y, 3, candidates=cands, rng=0)
    assert res.diagnostics["best_candidate"] == 4
    assert np.linalg.norm(Y - res.network.predict(X)) / np.linalg.norm(E) < 1.0
    ev, _, _ = _aligned_errors(res.hidden_weights, res.output_weights, net)
    assert ev < 0.3


def test_algorithm8_grid_has_signs_and_refuses_large():
    """Erratum: the paper's grid has only positive entries though (SU*)^{-1} has both signs; ours has ±
    and 0. The exhaustive grid is infeasible beyond toy sizes and is refused."""
    values = {float(M[0, 0]) for M in grid_candidates(1, 1, sigma_min=1.0, levels=3)}
    assert any(v < 0 for v in values) and 0.0 in values and any(v > 0 for v in values)
    with pytest.raises(InputError, match="infeasible"):
        next(iter(grid_candidates(3, 20, sigma_min=1.0, levels=10)))
    net = nr.random_network(4, 1, 1, rng=3, output_signs="positive").canonical()
    g = np.random.default_rng(4)
    X = g.standard_normal((5_000, 4))
    Y = net.predict(X) + 0.1 * g.standard_normal(5_000)
    res = algorithm8(X, Y, 1, candidates="grid", grid_options={"sigma_min": 1.0, "levels": 4})
    assert res.diagnostics["n_candidates"] == 9
    assert np.linalg.norm(res.hidden_weights[0] - net.hidden_weights[0]) < 0.1


# ---------------------------------------------------------------------------------- hardness / bounds

def test_sat_reduction_equivalence():
    """Prop 2 / Theorem 2 on tiny reversible 6-CNFs: satisfying assignments correspond exactly to
    separators, a satisfying assignment gives α f(VX) = A exactly (α fixed and α variable), and the
    all-sign formula over 6 variables (unsatisfiable, closed under reversal) has no separator."""
    g = np.random.default_rng(0)
    nv = 7
    base = [tuple(int(s) * int(v) for s, v in zip(g.choice([-1, 1], 6),
                                                  g.choice(np.arange(1, nv + 1), 6, replace=False)))
            for _ in range(12)]
    clauses = close_under_reversal(base)
    sats = brute_force_sat(clauses, nv)
    P, Q = sat_to_relu_separability(clauses, nv)
    assert set(sats) == set(brute_force_separability(P, Q, nv)) and sats
    x, y = assignment_to_separator(sats[0])
    assert separator_to_assignment(x, nv) == sats[0]
    alpha, Xn, A = separability_to_network(P, Q)
    assert check_network_instance(alpha, Xn, A, np.array([x, y]))
    Xp, Ap = separability_to_network_variable_alpha(P, Q)
    assert Xp.shape[0] == P.shape[0] + Q.shape[0] + 2
    assert check_network_instance(alpha, Xp, Ap, np.array([np.append(x, 1.0), np.append(y, -1.0)]))
    bad = [tuple(i + 1 if s else -(i + 1) for i, s in enumerate(signs))
           for signs in np.ndindex(*(2,) * 6)]
    assert brute_force_sat(bad, 6) == []
    P2, Q2 = sat_to_relu_separability(bad, 6)
    assert brute_force_separability(P2, Q2, 6) == []
    with pytest.raises(InputError, match="exactly 6"):
        sat_to_relu_separability([(1, 2, 3)], 3)


def test_lemma16_pair():
    """Lemma 16: κ(V^1) = 1/a and A^1 = A^2 whenever |x_1| > 2a|x_2| on every sample: for n << 1/a this
    happens with constant probability (here P[one sample fails] <= 4a/π·... ≈ 1e-3, n = 20)."""
    n1, n2 = lemma16_instances(1e-3)
    assert np.linalg.cond(n1.hidden_weights) == pytest.approx(1e3, rel=1e-6)
    g = np.random.default_rng(0)
    hits = sum(lemma16_equal_outputs(g.standard_normal((20, 2)), 1e-3) for _ in range(50))
    assert hits >= 40
    assert not lemma16_equal_outputs(g.standard_normal((200, 2)), 0.5)
    # erratum: the paper's second instance has a (not 2a) in its first row; then on the same samples the
    # output is (x_1 + a x_2 + x_1 - 2a x_2)/2 = x_1 - a x_2/2 on x_1 > 0, not x_1: the pair is not equal
    a = 1e-3
    s2 = np.sqrt(1 + 4 * a * a)
    literal = nr.TwoLayerNetwork(np.array([[1.0, a], [1.0, -2 * a]]) / s2, None, np.array([[s2 / 2, s2 / 2]]))
    Xs = g.standard_normal((40, 2))
    Xs = Xs[np.abs(Xs[:, 0]) > 2 * a * np.abs(Xs[:, 1])]        # the event of Lemma 16
    assert lemma16_equal_outputs(Xs, a)
    assert np.max(np.abs(literal.predict(Xs) - n1.predict(Xs))) > 1e-6


def test_registry_lists_bakshi2019():
    """Every algorithm of the paper is registered under its own label, with a public target; the two
    estimators are the only learners."""
    import re

    import nnrecover.learners.bakshi2019 as mod

    recs = {r.name: r for r in nr.learners.available("bakshi2019")}
    for name, label in [("exact-relu", "Algorithms 4-5"), ("bakshi2019-algorithm5", "Algorithm 5"),
                        ("bakshi2019-algorithm7", "Algorithm 7"), ("bakshi2019-algorithm2", "Algorithm 2"),
                        ("bakshi2019-algorithm8", "Algorithm 8"), ("bakshi2019-pcp", "Theorem 14")]:
        assert label in recs[name].algorithm
    assert recs["exact-relu"].is_learner and recs["exact-relu"].target is nr.learners.ExactReLULearner
    assert {n for n, r in recs.items() if r.is_learner} == {"exact-relu", "bakshi2019-noisy"}
    labels = " | ".join(r.algorithm for r in recs.values())
    for i in range(1, 9):                        # Algorithms 1-8, each with a record of its own
        assert any(re.match(rf"Algorithm {i}\b", r.algorithm) for r in recs.values()), i
    for ref in ("Lemma 1", "Lemma 16", "Lemma 20", "Theorem 2", "Theorem 10", "Theorem 14", "Corollary 5",
                "Proposition 2", "Definition 13"):
        assert ref in labels, ref
    for r in recs.values():                      # targets are public API of the module
        assert r.target.__name__ in mod.__all__ and getattr(mod, r.target.__name__) is r.target


# ------------------------------------------------------------------------------------------ experiments

@pytest.mark.parametrize("name, options", [("bakshi2019-exact", {}), ("bakshi2019-exact", {"suite": "must-show", "trials": 1}),
                                           ("bakshi2019-noise", {}), ("bakshi2019-fpt", {})])
def test_experiments_quick(tmp_path, name, options):
    from nnrecover.experiments.runner import RESULT_FILES, run_experiment

    df = run_experiment(name, tmp_path, quick=True, rng=0, **options)
    assert all((tmp_path / f).exists() for f in RESULT_FILES)
    if name == "bakshi2019-exact":
        assert df["success"].all() and (df["max_unit_error"] < 1e-10).all() and not df["certified_wrong"].any()
        assert (df["kappa_u"] <= 10).all() and (df.loc[df["route"] == "tensor", "kappa_v"] <= 10).all()
        if options:                                  # must-show: trials=1 seed per configuration and route
            assert len(df) == 2 and set(df["route"]) == {"tensor", "ica"}
    elif name == "bakshi2019-noise":
        assert (df["signs_correct"] == 1.0).all()
        assert (df["slope_V"] < -0.3).all()          # n^{-1/2} up to the noise of one trial per point
    else:
        assert df.loc[df["case"] == "[u, -u]", "refused"].all()
        assert df.loc[(df["case"] == "generic") & (df["k"] == 3), "success"].all()


def test_incoherence_parameters():
    """Definition 13: a matrix whose left factor is e_1..e_k has μ_left = m/k (maximal); a random
    orthonormal factor is far less coherent."""
    from nnrecover.learners.bakshi2019 import incoherence

    g = np.random.default_rng(0)
    m, n, k = 50, 80, 3
    R = g.standard_normal((k, n))
    spiky = np.zeros((m, k))
    spiky[:k, :k] = np.eye(k)
    assert incoherence(spiky @ R, k)["mu_left"] == pytest.approx(m / k)
    Q, _ = np.linalg.qr(g.standard_normal((m, k)))
    # random leverage scores are ~ χ²_k / m: max over m rows <= (k + 2 sqrt(2 k log m) + 2 log m)/m ≈ 0.35
    # w.h.p., i.e. μ_left <= 0.35 m / k ≈ 6 < 0.5 m / k
    assert incoherence(Q @ R, k)["mu_left"] < 0.5 * m / k


def test_sign_pattern_statistics_lemmas():
    """Lemma 8: split frequency of (i, j) is θ_ij/(2π) (binomial, n = 2e4: std <= 0.0036, tolerance 5 std);
    Lemma 7: κ(V) >= √2/θ_min for unit rows (σ_min <= ||v_i ∓ v_j||/√2 = √2 sin(θ/2) <= θ/√2,
    σ_max >= 1); Lemma 19:
    σ_min(f(VX))/√n bounded away from 0; Lemma 21: 1-sparse columns exist for every unit."""
    from nnrecover.learners.bakshi2019 import sign_pattern_statistics

    net = nr.random_network(6, 3, 1, rng=2, condition_number=4).canonical()
    X = np.random.default_rng(3).standard_normal((20_000, 6))
    st = sign_pattern_statistics(net.hidden_weights, X)
    assert np.max(np.abs(st["split_frequency"] - st["split_theory"]) * (1 - np.eye(3))) < 5 * 0.0036
    assert st["condition"] >= np.sqrt(2) / st["min_angle"] * (1 - 1e-12)
    assert st["sigma_min_over_sqrt_n"] > 0.05
    assert np.all(st["one_sparse_counts"] > 0)


# ------------------------------------------------------------------------------------------ validation

def _small_data():
    net = nr.random_network(8, 3, 4, rng=1).canonical()
    X, Y = nr.sample(net, GAUSS(8), 2_000, rng=2)
    return net, X, Y


_BAD_CALLS = {
    # Algorithm 7: a negative tolerance used to make the grouping loop spin forever
    "alg7 tol": (lambda net, X, Y: algorithm7(X, Y, 3, tol=-1.0), InputError, "tol must be a positive"),
    "alg7 tol_residual": (lambda net, X, Y: algorithm7(X, Y, 3, tol_residual="x"), InputError, "tol_residual"),
    "parallel_classes NaN": (lambda net, X, Y: parallel_classes(np.full((5, 2), np.nan)), InputError, "finite"),
    "alg5 min_set_size": (lambda net, X, Y: nr.learners.bakshi2019.algorithm5(net.hidden_weights, X, Y,
                                                                              min_set_size=0),
                          InputError, "min_set_size must be >= 9"),
    "noisy n_sign = n": (lambda net, X, Y: NoisyReLULearner(3, n_sign=2_000).fit(X, Y), InputError,
                         "no moment samples left"),
    "noisy n_sign > n": (lambda net, X, Y: NoisyReLULearner(3, n_sign=5_000).fit(X, Y), InputError,
                         "n_sign=5000 are reserved for Algorithm 6"),
    "noisy control_variates": (lambda net, X, Y: NoisyReLULearner(3, control_variates="yes").fit(X, Y),
                               InputError, "control_variates must be True or False"),
    "ica k > m": (lambda net, X, Y: nr.learners.bakshi2019.ica_unmixing(X, Y, 6), AssumptionError, "k <= m"),
    "pcp rho": (lambda net, X, Y: principal_component_pursuit(Y[:50], rho=0.5), InputError, "rho"),
    "pcp tol": (lambda net, X, Y: principal_component_pursuit(Y[:50], tol=-1), InputError, "tol"),
    "sparse k > m": (lambda net, X, Y: sparse_noise_pipeline(X, Y, 6), AssumptionError, "k <= min"),
    "incoherence rank": (lambda net, X, Y: nr.learners.bakshi2019.incoherence(Y[:50], 10), InputError, "rank"),
    "pv NaN": (lambda net, X, Y: pv_halfspace(np.where(X > 3, np.nan, X), np.sign(X[:, 0])), InputError, "NaN"),
    "alg8 n_guesses": (lambda net, X, Y: algorithm8(X, Y, 3, candidates=[np.eye(3, 4)], n_guesses=-1),
                       InputError, "n_guesses"),
    "alg8 perturb_scale": (lambda net, X, Y: algorithm8(X, Y, 3, perturb_scale=np.inf), InputError,
                           "perturb_scale"),
    "pipeline tolerance typo": (lambda net, X, Y: nr.learners.bakshi2019.gaussian_pipeline(X, Y, 3, tol_nul=1.0),
                                InputError, "tol_nul"),
    "algorithm3 unknown option": (lambda net, X, Y: nr.learners.bakshi2019.algorithm3(X, Y, 3, foo=1),
                                  InputError, "foo"),
    "sparse unknown option": (lambda net, X, Y: sparse_noise_pipeline(X, Y, 3, bar=2), InputError, "bar"),
    "iterative_lp NaN": (lambda net, X, Y: iterative_lp(np.full((10, 3), np.nan), np.ones((2, 10)),
                                                        np.ones(10, bool)), InputError, "NaN"),
    "iterative_lp previous": (lambda net, X, Y: iterative_lp(X[:10], np.ones((2, 10)), np.ones(10, bool),
                                                             np.ones((1, 9))), InputError, "previous"),
}


@pytest.mark.parametrize("case", sorted(_BAD_CALLS))
def test_bad_inputs_raise_clear_errors(case):
    """Every public function validates its arguments with an nnrecover error naming the argument (before:
    TypeError, LinAlgError, silent NaN output, or an endless loop in Algorithm 7's grouping)."""
    call, err, match = _BAD_CALLS[case]
    net, X, Y = _small_data()
    with pytest.raises(err, match=match):
        call(net, X, Y)


def test_algorithm8_noisy_candidates_gaussian_sketch():
    """Default candidate generator ((S Û)^† from the noisy pipeline + perturbations) with a Gaussian sketch
    S (20 x 40, N(0, 1/k) entries, step 1) and heavy-tailed biased noise E = t_3 + 0.5 independent of X:
    the selected network is competitive, ||A - U f(VX)||_F <= ||E||_F (measured 0.995 with
    an oracle), and the directions carry the right signs (the labels sign(M S A) are positive where the unit
    is active) with an error of the PV estimator's order, well below 0.3 at n = 5000 (measured 0.19)."""
    net = nr.random_network(8, 2, 40, rng=0).canonical()
    g = np.random.default_rng(1)
    X = g.standard_normal((5_000, 8))
    E = g.standard_t(3, size=(5_000, 40)) + 0.5
    Y = net.predict(X) + E
    res = algorithm8(X, Y, 2, sketch="gaussian", rng=0)
    assert res.diagnostics["sketch_rows"] == 20 and res.diagnostics["n_candidates"] == 21
    assert not res.certified
    assert np.linalg.norm(Y - res.network.predict(X)) / np.linalg.norm(E) < 1.0
    ev, _, signs = _aligned_errors(res.hidden_weights, res.output_weights, net)
    assert np.all(signs > 0) and ev < 0.3


def test_noisy_pipeline_on_a_stream_projects_the_algorithm6_rows_and_equals_the_arrays_fit():
    # the rows of a stream are read again after the tensor step and kept only as T = X̄ V^T; Algorithm 6's
    # signs and both regressions depend on X̄ through T alone, so the stream's fit is the arrays' fit up to
    # the rounding of X̄ V^T computed chunk by chunk instead of at once (a few ulps of T)
    from nnrecover.learners.bakshi2019 import noisy_pipeline
    from nnrecover.learners.bakshi2019.noisy import _projected_rows

    net = nr.random_network(12, 3, 4, rng=21).canonical()
    stream = nr.sample_stream(net, GAUSS(12), 60_000, noise=0.05, chunk_size=7_000, rng=22)
    X, Y = stream.to_arrays()
    for regression in ("all", "sign"):
        a = noisy_pipeline(X, Y, 3, regression=regression, rng=3)
        s = noisy_pipeline(stream, None, 3, regression=regression, rng=3)
        np.testing.assert_array_equal(a.diagnostics["signs"]["signs"], s.diagnostics["signs"]["signs"])
        np.testing.assert_allclose(s.network.hidden_weights, a.network.hidden_weights, rtol=0, atol=1e-12)
        np.testing.assert_allclose(s.network.output_weights, a.network.output_weights, rtol=0, atol=1e-10)
    V = nr.random_network(12, 3, rng=23).hidden_weights
    T, Yb = _projected_rows(nr.data.as_data_source(stream), 15_000, V)
    np.testing.assert_allclose(T, X[:15_000] @ V.T, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(Yb, Y[:15_000])
    with pytest.raises(InputError, match="n_sign"):
        _projected_rows(nr.data.as_data_source(stream), 70_000, V)
