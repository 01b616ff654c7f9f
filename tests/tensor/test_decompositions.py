"""Tests of nnrecover.tensor: Jennrich, joint diagonalisation, whitening, power iteration, CP-ALS,
Khatri-Rao / flatten.

Exact tests use exact low-rank tensors (errors at round-off, asserted < 1e-10). Finite-sample /
noisy tests use tolerances derived in the comments next to them.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from nnrecover.errors import AssumptionError, CertificateWarning, ConvergenceError, InputError
from nnrecover.tensor import (CPResult, JennrichResult, JointDiagResult, PowerIterationResult, WhiteningResult,
                              cp_als, cp_reconstruct, flatten, jennrich, joint_diagonalize, khatri_rao,
                              match_columns, power_iteration, whiten)

EXACT = 1e-10


def _cp3(A, B, C, w=None):
    w = np.ones(A.shape[1]) if w is None else w
    return np.einsum("ai,bi,ci,i->abc", A, B, C, w)


def _max_err(est, ref):
    return float(match_columns(est, ref)[2].max())


def _sym_power(V, lam, k):
    """sum_i lam_i v_i^{⊗k}."""
    T = np.zeros((V.shape[0],) * k)
    for i in range(V.shape[1]):
        o = V[:, i]
        for _ in range(k - 1):
            o = np.multiply.outer(o, V[:, i])
        T += lam[i] * o
    return T


# --------------------------------------------------------------------------------------------- utils
def test_khatri_rao_columns_are_kronecker_products():
    rng = np.random.default_rng(0)
    A, B, C = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((2, 4))
    KR = khatri_rao(A, B)
    assert KR.shape == (15, 4)
    for i in range(4):
        np.testing.assert_array_equal(KR[:, i], np.kron(A[:, i], B[:, i]))
    KR3 = khatri_rao(A, B, C)
    for i in range(4):
        np.testing.assert_allclose(KR3[:, i], np.kron(np.kron(A[:, i], B[:, i]), C[:, i]), rtol=0, atol=1e-15)
    with pytest.raises(InputError, match="columns"):
        khatri_rao(A, rng.standard_normal((5, 3)))
    with pytest.raises(InputError):
        khatri_rao(A, np.full((5, 4), np.nan))


def test_flatten_matches_spec_definition():
    rng = np.random.default_rng(1)
    w = rng.standard_normal(3)
    T5 = _sym_power(w[:, None], [1.0], 5)
    F = flatten(T5, 2, 2, 1)
    ww = np.kron(w, w)
    np.testing.assert_allclose(F, np.einsum("a,b,c->abc", ww, ww, w), rtol=0, atol=1e-14)
    M = flatten(T5, 2, 3)  # t3 = 0: a matrix d^2 x d^3
    assert M.shape == (9, 27)
    np.testing.assert_allclose(M, np.outer(ww, np.kron(ww, w)), rtol=0, atol=1e-14)
    # non-symmetric: the first t1 modes are merged first (row-major)
    X = rng.standard_normal((2, 3, 4, 5))
    np.testing.assert_array_equal(flatten(X, 1, 2, 1), X.reshape(2, 12, 5))
    # khatri_rao / flatten consistency: flatten(sum a⊗b⊗c, 2, 1) = (A ⊙ B) C^T
    A, B, C = rng.standard_normal((3, 2)), rng.standard_normal((4, 2)), rng.standard_normal((5, 2))
    np.testing.assert_allclose(flatten(_cp3(A, B, C), 2, 1), khatri_rao(A, B) @ C.T, rtol=0, atol=1e-14)
    with pytest.raises(InputError, match="must equal the order"):
        flatten(T5, 2, 2, 2)
    with pytest.raises(InputError):
        flatten(T5, 0, 4, 1)
    with pytest.raises(InputError):
        flatten(T5, 2, 2, -1)


def test_match_columns_recovers_permutation_and_sign():
    rng = np.random.default_rng(2)
    R = rng.standard_normal((6, 4))
    perm = np.array([2, 0, 3, 1])
    signs = np.array([1.0, -1.0, -1.0, 1.0])
    E = np.empty_like(R)
    E[:, perm] = R * signs
    p, s, err = match_columns(2.5 * E, R)
    np.testing.assert_array_equal(p, perm)
    np.testing.assert_array_equal(s, signs)
    assert err.max() < 1e-15


# ------------------------------------------------------------------------------------------ Jennrich
@pytest.mark.parametrize("n,p,r", [(10, 10, 3), (12, 8, 6), (30, 30, 10), (30, 6, 3), (20, 2, 5)])
def test_jennrich_exact_symmetric(n, p, r):
    rng = np.random.default_rng(n * 100 + p * 10 + r)
    A, C, w = rng.standard_normal((n, r)), rng.standard_normal((p, r)), rng.standard_normal(r)
    T = _cp3(A, A, C, w)
    res = jennrich(T, r, rng=0)
    assert isinstance(res, JennrichResult)
    assert res.factors[0].shape == (n, r) and res.factors_mode3.shape == (p, r)
    assert _max_err(res.factors[0], A) < EXACT
    assert _max_err(res.factors_mode3, C) < EXACT
    np.testing.assert_array_equal(res.factors_mode2, res.factors[0])
    # weights: T = sum w_i a_i a_i c_i with unit a, c  =>  |w_hat_i| = |w_i| ||a_i||^2 ||c_i||
    perm = match_columns(res.factors[0], A)[0]
    np.testing.assert_allclose(np.abs(res.weights[perm]),
                               np.abs(w) * np.linalg.norm(A, axis=0) ** 2 * np.linalg.norm(C, axis=0),
                               rtol=EXACT)
    np.testing.assert_allclose(res.to_tensor(), T, rtol=0, atol=EXACT * np.abs(T).max())
    d = res.diagnostics
    assert d["symmetric"] is True and d["n_draws"] == 5 and 0 <= d["draw"] < 5
    assert d["residual"] < EXACT and d["holdout_residual"] < EXACT
    assert d["max_imag"] < 1e-10 and d["eigenvalue_gap"] > 1e-6
    assert d["condition"] >= 1 and np.isfinite(d["error_amplification"])
    # sign convention: the largest-|entry| of every factor column is positive
    F = res.factors[0]
    assert np.all(F[np.argmax(np.abs(F), axis=0), np.arange(r)] > 0)
    np.testing.assert_allclose(np.linalg.norm(F, axis=0), 1.0, rtol=1e-14)


@pytest.mark.parametrize("p_kind", ["d", "d2"])
def test_jennrich_exact_ell2_shapes(p_kind):
    # Awasthi et al. ell = 2: T = sum beta_i (w_i⊗w_i) ⊗ (w_i⊗w_i) ⊗ z_i, n = d^2, z_i = w_i or w_i⊗w_i,
    # overcomplete m > d (Jennrich needs linearly independent factors only in the flattened modes)
    d, m = 5, 8
    rng = np.random.default_rng(7)
    W = rng.standard_normal((d, m))
    W /= np.linalg.norm(W, axis=0)
    W2 = khatri_rao(W, W)
    Z = W if p_kind == "d" else W2
    beta = rng.uniform(0.5, 2.0, m) * rng.choice([-1, 1], m)
    T = _cp3(W2, W2, Z, beta)
    assert T.shape == (d * d, d * d, Z.shape[0])
    res = jennrich(T, m, rng=3)
    assert _max_err(res.factors[0], W2) < EXACT
    assert _max_err(res.factors_mode3, Z) < EXACT
    # sign convention makes the w⊗w factors come out with the correct sign (positive diagonal)
    perm, signs, _ = match_columns(res.factors[0], W2)
    np.testing.assert_array_equal(signs, np.ones(m))
    assert res.diagnostics["residual"] < EXACT


def test_jennrich_exact_general_nonsymmetric():
    rng = np.random.default_rng(11)
    A, B, C = rng.standard_normal((12, 6)), rng.standard_normal((15, 6)), rng.standard_normal((9, 6))
    T = _cp3(A, B, C)
    res = jennrich(T, 6, rng=1)
    assert res.diagnostics["symmetric"] is False
    assert _max_err(res.factors[0], A) < EXACT
    assert _max_err(res.factors_mode2, B) < EXACT
    assert _max_err(res.factors_mode3, C) < EXACT
    assert res.diagnostics["residual"] < EXACT
    res_s = jennrich(T, 6, rng=1, subspace="slices")
    assert _max_err(res_s.factors_mode2, B) < EXACT


def test_jennrich_callable_matches_dense():
    rng = np.random.default_rng(5)
    n, p, r = 20, 7, 6
    A, C = rng.standard_normal((n, r)), rng.standard_normal((p, r))
    T = _cp3(A, A, C)
    calls = []

    def slice_fn(g):
        calls.append(1)
        return np.tensordot(T, g, axes=(2, 0))

    dense = jennrich(T, r, rng=4, subspace="slices")
    implicit = jennrich(slice_fn, r, third_dim=p, rng=4)
    assert implicit.factors_mode3 is None and implicit.weights is None
    assert implicit.diagnostics["subspace_method"] == "slices"
    assert implicit.diagnostics["n_slice_calls"] == 2 * 5 + 1 == len(calls)
    assert _max_err(implicit.factors[0], A) < EXACT
    assert implicit.diagnostics["holdout_residual"] < EXACT
    # same directions g, same algorithm: identical up to the summation order of the slices
    np.testing.assert_allclose(np.sort(implicit.eigenvalues), np.sort(dense.eigenvalues), rtol=0, atol=1e-10)
    assert _max_err(implicit.factors[0], dense.factors[0]) < EXACT
    # mode 3 from p basis slices, or from a cheap user contraction
    via_basis = jennrich(slice_fn, r, third_dim=p, rng=4, mode3=True)
    assert via_basis.diagnostics["n_slice_calls"] == 2 * 5 + 1 + p
    via_fn = jennrich(slice_fn, r, third_dim=p, rng=4,
                      mode3_fn=lambda U, V: np.einsum("abc,ai,bi->ci", T, U, V))
    for res in (via_basis, via_fn):
        assert _max_err(res.factors_mode3, C) < EXACT
        np.testing.assert_allclose(res.weights, dense.weights, rtol=1e-10)


def test_jennrich_noise_error_bounded_by_amplification():
    # First-order perturbation: the pencil M = Ta Tb^{-1} moves by ||dM|| <= ||Tb^{-1}|| (1 + ||M||) eps for
    # slices perturbed by a relative eps; the eigenvectors of M = R Λ R^{-1} then move by at most
    # cond(R) ||dM|| / min gap (Bauer-Fike type). So error <= error_amplification * eps to first order,
    # eps = ||E||_F / ||T||_F (a random unit combination preserves the relative size on average).
    # Measured on 200 draws: max ratio error / (amplification * eps) = 0.12.
    rng = np.random.default_rng(8)
    eps = 1e-7
    for trial in range(20):
        A, C = rng.standard_normal((10, 5)), rng.standard_normal((10, 5))
        T = _cp3(A, A, C)
        E = rng.standard_normal(T.shape)
        E = E + E.transpose(1, 0, 2)
        res = jennrich(T + eps * np.linalg.norm(T) * E / np.linalg.norm(E), 5, rng=trial)
        assert _max_err(res.factors[0], A) <= res.diagnostics["error_amplification"] * eps


def test_jennrich_flags_equal_mode3_factors():
    rng = np.random.default_rng(9)
    A, C = rng.standard_normal((10, 4)), rng.standard_normal((6, 4))
    C[:, 1] = C[:, 0]  # components 0 and 1 are not identifiable: their eigenvalues coincide
    T = _cp3(A, A, C)
    with pytest.warns(CertificateWarning, match="eigenvalue gap"):
        res = jennrich(T, 4, rng=0)
    assert res.diagnostics["eigenvalue_gap"] < 1e-8
    assert all(d["eigenvalue_gap"] < 1e-8 for d in res.diagnostics["per_draw"])
    with pytest.raises(AssumptionError, match="eigenvalue gap"):
        jennrich(T, 4, rng=0, strict=True)


def test_jennrich_flags_complex_eigenvalues():
    # slices I and J (rotation by 90 degrees): every pencil (aI + bJ)(cI + dJ)^{-1} has eigenvalues
    # (a ± bi)/(c ± di); the tensor has rank 2 over C but not over R, so Jennrich must not claim success.
    T = np.stack([np.eye(2), np.array([[0.0, 1.0], [-1.0, 0.0]])], axis=2)
    with pytest.warns(CertificateWarning, match="complex eigenvalues"):
        res = jennrich(T, 2, rng=0)
    assert res.diagnostics["max_imag"] > 1e-3
    assert res.diagnostics["holdout_residual"] > 1e-3
    with pytest.raises(AssumptionError, match="complex eigenvalues"):
        jennrich(T, 2, rng=0, strict=True)
    # warn=False (a caller that certifies its own output): the finding is recorded, not warned
    with warnings.catch_warnings():
        warnings.simplefilter("error", CertificateWarning)
        quiet = jennrich(T, 2, rng=0, warn=False)
    assert quiet.diagnostics["complex_eigenvalues"] is True
    assert quiet.diagnostics["holdout_residual"] == res.diagnostics["holdout_residual"]
    with pytest.raises(InputError, match="warn must be True or False"):
        jennrich(T, 2, warn="no")


def test_jennrich_detects_rank_above_true_rank():
    rng = np.random.default_rng(10)
    A, C = rng.standard_normal((10, 3)), rng.standard_normal((6, 3))
    T = _cp3(A, A, C)
    with pytest.raises(AssumptionError, match="numerical rank"):
        jennrich(T, 4, rng=0)
    with pytest.raises(AssumptionError, match="numerical rank"):
        jennrich(lambda g: np.tensordot(T, g, axes=(2, 0)), 4, third_dim=6, rng=0)
    # at the true rank the singular values show the gap
    res = jennrich(T, 3, rng=0)
    assert res.diagnostics["tail_ratio"] < 1e-12


def test_jennrich_input_validation():
    rng = np.random.default_rng(12)
    T = _cp3(*(rng.standard_normal((5, 2)) for _ in range(3)))
    with pytest.raises(InputError, match="3-dimensional"):
        jennrich(T[0], 2)
    bad = T.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        jennrich(bad, 2)
    with pytest.raises(InputError, match="rank"):
        jennrich(T, 6)
    with pytest.raises(InputError, match="rank"):
        jennrich(T, 0)
    with pytest.raises(InputError, match="rank"):
        jennrich(T, True)
    with pytest.raises(InputError, match="n_draws"):
        jennrich(T, 2, n_draws=0)
    with pytest.raises(InputError, match="third_dim"):
        jennrich(lambda g: T[:, :, 0], 2)
    with pytest.raises(InputError, match="third_dim"):
        jennrich(T, 2, third_dim=4)
    with pytest.raises(InputError, match="2-D"):
        jennrich(lambda g: np.ones(5), 2, third_dim=5)
    with pytest.raises(InputError, match="NaN"):
        jennrich(lambda g: np.full((5, 5), np.inf), 2, third_dim=5)
    with pytest.raises(InputError, match="subspace"):
        jennrich(T, 2, subspace="magic")
    with pytest.raises(AssumptionError, match="p = 1"):
        jennrich(T[:, :, :1], 2)
    with pytest.raises(AssumptionError, match="zero"):
        jennrich(np.zeros((4, 4, 3)), 2)
    with pytest.raises(InputError, match="rng"):
        jennrich(T, 2, rng="seed")


def test_jennrich_reproducible():
    rng = np.random.default_rng(13)
    A, C = rng.standard_normal((15, 5)), rng.standard_normal((8, 5))
    T = _cp3(A, A, C) + 1e-3 * rng.standard_normal((15, 15, 8))
    r1, r2 = jennrich(T, 5, rng=42), jennrich(T, 5, rng=42)
    np.testing.assert_array_equal(r1.factors[0], r2.factors[0])
    np.testing.assert_array_equal(r1.weights, r2.weights)
    assert r1.diagnostics["per_draw"] == r2.diagnostics["per_draw"]
    r3 = jennrich(T, 5, rng=np.random.default_rng(42))
    np.testing.assert_array_equal(r1.factors[0], r3.factors[0])
    assert jennrich(T, 5, rng=43).diagnostics["per_draw"] != r1.diagnostics["per_draw"]


# ------------------------------------------------------------------------------ joint diagonalisation
@pytest.mark.parametrize("symmetric", [True, False])
def test_joint_diagonalize_exact(symmetric):
    rng = np.random.default_rng(20 + symmetric)
    n, K, r = 12, 25, 7
    A, D = rng.standard_normal((n, r)), rng.standard_normal((K, r))
    B = A if symmetric else rng.standard_normal((n + 3, r))
    S = np.einsum("ai,ki,bi->kab", A, D, B)
    res = joint_diagonalize(S, r, rng=0)
    assert isinstance(res, JointDiagResult)
    assert res.diagnostics["symmetric"] is symmetric
    assert _max_err(res.factors[0], A) < EXACT and _max_err(res.factors_mode2, B) < EXACT
    np.testing.assert_allclose(res.reconstruct(), S, rtol=0, atol=EXACT * np.abs(S).max())
    assert res.diagnostics["residual"] < EXACT and res.diagnostics["converged"]
    # the diagonals: D_hat[:, perm^-1] = D * ||a|| ||b|| (up to sign)
    perm = match_columns(res.factors[0], A)[0]
    scale = np.linalg.norm(A, axis=0) * np.linalg.norm(B, axis=0)
    np.testing.assert_allclose(np.abs(res.diagonals[:, perm]), np.abs(D) * scale, rtol=1e-9, atol=1e-12)


def test_joint_diagonalize_beats_single_pair_jennrich_under_noise():
    # Many noisy slices vs one pair: the least-squares fit over K slices averages the slice noise, so
    # the factor error should be ~sqrt(K/2) = 4.5 times smaller than for one pencil of two slices, and
    # the pencil's error amplification (cond(R) ||Tb^{-1}|| / gap) only hurts the single pair more.
    # Measured with this seed (20 trials, n=8, r=5, K=40, noise 5% of the entry RMS): mean max-column
    # error 0.0223 (joint) vs 0.620 (single pair), ratio 27.8, joint better in 20/20 trials (Jennrich on
    # random combinations of all 40 slices, best of 5 draws: 0.280). We assert the averaging factor
    # 4.5 with a 1.5x margin, i.e. ratio > 3.
    rng = np.random.default_rng(0)
    n, K, r, sigma = 8, 40, 5, 0.05
    err_jd, err_pair = [], []
    for trial in range(20):
        A, D = rng.standard_normal((n, r)), rng.standard_normal((K, r))
        S = np.einsum("ai,ki,bi->kab", A, D, A)
        E = rng.standard_normal(S.shape)
        E = (E + E.transpose(0, 2, 1)) / np.sqrt(2)
        Sn = S + sigma * E * np.linalg.norm(S) / np.sqrt(S.size)
        err_jd.append(_max_err(joint_diagonalize(Sn, r, rng=trial).factors[0], A))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CertificateWarning)
            pair = jennrich(np.ascontiguousarray(Sn[:2].transpose(1, 2, 0)), r, rng=trial, n_draws=1)
        err_pair.append(_max_err(pair.factors[0], A))
    ratio = np.mean(err_pair) / np.mean(err_jd)
    assert ratio > 3.0, ratio
    assert np.mean(np.array(err_jd) < np.array(err_pair)) >= 0.9


def test_joint_diagonalize_validation_and_reproducibility():
    rng = np.random.default_rng(22)
    A, D = rng.standard_normal((6, 3)), rng.standard_normal((10, 3))
    S = np.einsum("ai,ki,bi->kab", A, D, A)
    with pytest.raises(InputError):
        joint_diagonalize(S[0], 3)
    with pytest.raises(InputError, match="rank"):
        joint_diagonalize(S, 7)
    with pytest.raises(AssumptionError, match="single matrix"):
        joint_diagonalize(S[:1], 3)
    with pytest.raises(AssumptionError, match="numerical rank"):
        joint_diagonalize(S, 4)
    bad = S.copy()
    bad[3, 1, 1] = np.inf
    with pytest.raises(InputError, match="NaN"):
        joint_diagonalize(bad, 3)
    noisy = S + 0.01 * rng.standard_normal(S.shape)
    r1, r2 = joint_diagonalize(noisy, 3, rng=5), joint_diagonalize(noisy, 3, rng=5)
    np.testing.assert_array_equal(r1.factors[0], r2.factors[0])
    np.testing.assert_array_equal(r1.diagonals, r2.diagonals)
    # ALS never increases the least-squares objective of the initialisation
    assert r1.diagnostics["core_residual"] <= r1.diagnostics["initial_residual"] + 1e-15


# ------------------------------------------------------------------------------------------ whitening
def test_whiten_exact_low_rank():
    rng = np.random.default_rng(30)
    n, r = 9, 4
    Mu, w = rng.standard_normal((n, r)), rng.uniform(0.5, 2.0, r)
    M = (Mu * w) @ Mu.T
    res = whiten(M, r)
    assert isinstance(res, WhiteningResult)
    assert res.whitener.shape == (r, n) and res.unwhitener.shape == (n, r)
    np.testing.assert_allclose(res.whitener @ M @ res.whitener.T, np.eye(r), rtol=0, atol=EXACT)
    np.testing.assert_allclose(res.whitener @ res.unwhitener, np.eye(r), rtol=0, atol=EXACT)
    np.testing.assert_allclose(res.unwhitener @ res.unwhitener.T, M, rtol=0, atol=EXACT * np.abs(M).max())
    # v_i = sqrt(w_i) W mu_i are orthonormal (JSA15 §4.3.1)
    V = res.whitener @ Mu * np.sqrt(w)
    np.testing.assert_allclose(V.T @ V, np.eye(r), rtol=0, atol=EXACT)
    assert res.diagnostics["gap_ratio"] < 1e-12 and res.diagnostics["n_negative"] == 0


def test_whiten_then_power_iteration_recovers_nonorthogonal_components():
    rng = np.random.default_rng(31)
    n, r = 10, 4
    Mu, w, lam = rng.standard_normal((n, r)), rng.uniform(0.5, 2.0, r), rng.uniform(0.5, 2.0, r)
    res = whiten((Mu * w) @ Mu.T, r)
    Tw = res.transform(_cp3(Mu, Mu, Mu, lam))
    assert Tw.shape == (r, r, r)
    pw = power_iteration(Tw, r, rng=0)
    assert _max_err(res.unwhitener @ pw.factors[0], Mu) < EXACT
    # whitened weights are lam_i w_i^{-3/2}
    perm = match_columns(res.unwhitener @ pw.factors[0], Mu)[0]
    np.testing.assert_allclose(pw.weights[perm], lam * w ** -1.5, rtol=1e-9)


def test_whiten_noisy_bound():
    # Exact inequality: W_hat M_hat W_hat^T = I with ||W_hat||_2^2 = 1/lam_r(M_hat), so for M_hat = M + E
    # ||W_hat M W_hat^T - I||_2 = ||W_hat E W_hat^T||_2 <= ||E||_2 / lam_r(M_hat)  (no first-order slack).
    rng = np.random.default_rng(32)
    n, r = 12, 5
    Mu = rng.standard_normal((n, r))
    M = Mu @ Mu.T
    E = 1e-3 * rng.standard_normal((n, n))
    E = E + E.T
    res = whiten(M + E, r)
    lhs = np.linalg.norm(res.whitener @ M @ res.whitener.T - np.eye(r), 2)
    assert lhs <= np.linalg.norm(E, 2) / res.eigenvalues[-1] * (1 + 1e-12)


def test_whiten_refuses_indefinite_and_bad_input():
    rng = np.random.default_rng(33)
    Mu = rng.standard_normal((6, 3))
    M = (Mu * np.array([1.0, -2.0, 1.5])) @ Mu.T
    with pytest.raises(AssumptionError, match="not positive definite"):
        whiten(M, 3)
    res = whiten(M, 3, allow_indefinite=True)
    np.testing.assert_allclose(res.whitener @ M @ res.whitener.T, np.diag(res.signs), rtol=0, atol=EXACT)
    assert res.diagnostics["n_negative"] == 1
    neg = whiten(-(Mu @ Mu.T), 3, allow_indefinite=True)
    assert np.all(neg.signs == -1)
    with pytest.raises(AssumptionError, match="numerical rank"):
        whiten(Mu @ Mu.T, 4)
    with pytest.raises(InputError, match="rank"):
        whiten(Mu @ Mu.T, 7)
    with pytest.raises(InputError, match="square"):
        whiten(Mu, 2)
    with pytest.raises(InputError, match="not symmetric"):
        whiten(Mu @ Mu.T + np.triu(np.ones((6, 6))), 2)
    with pytest.raises(InputError, match="NaN"):
        whiten(np.full((3, 3), np.nan), 2)


# ----------------------------------------------------------------------------------- power iteration
@pytest.mark.parametrize("dim,r,k", [(5, 5, 3), (10, 6, 3), (8, 8, 4), (6, 3, 5)])
def test_power_iteration_exact_orthogonal(dim, r, k):
    rng = np.random.default_rng(dim * 10 + r + k)
    V = np.linalg.qr(rng.standard_normal((dim, dim)))[0][:, :r]
    lam = rng.uniform(0.5, 2.0, r) * rng.choice([-1, 1], r)
    T = _sym_power(V, lam, k)
    res = power_iteration(T, r, rng=1)
    assert isinstance(res, PowerIterationResult)
    assert _max_err(res.factors[0], V) < EXACT
    perm, signs, _ = match_columns(res.factors[0], V)
    expected = lam * signs ** k  # odd order: lam_i >= 0 after the sign convention
    np.testing.assert_allclose(res.weights[perm], expected, rtol=0, atol=EXACT)
    if k % 2:
        assert np.all(res.weights > 0)
    assert res.diagnostics["residual"] < EXACT and res.diagnostics["orthogonality"] < EXACT
    assert all(res.diagnostics["converged"])


def test_power_iteration_callable_matches_dense():
    rng = np.random.default_rng(40)
    dim, r = 9, 5
    V = np.linalg.qr(rng.standard_normal((dim, dim)))[0][:, :r]
    lam = rng.uniform(0.5, 2.0, r)
    T = _sym_power(V, lam, 3)
    res = power_iteration(lambda u: T @ u @ u, r, dim=dim, rng=2)
    assert _max_err(res.factors[0], V) < EXACT and res.diagnostics["residual"] < EXACT
    dense = power_iteration(T, r, rng=2)
    np.testing.assert_allclose(res.factors[0], dense.factors[0], rtol=0, atol=1e-12)
    # order 4 through the callable (the Goel-Panigrahy quartic form)
    T4 = _sym_power(V, lam, 4)
    res4 = power_iteration(lambda u: T4 @ u @ u @ u, r, dim=dim, order=4, rng=2)
    assert _max_err(res4.factors[0], V) < EXACT


def test_power_iteration_noisy_within_aghkt_bound():
    # Anandkumar-Ge-Hsu-Kakade-Telgarsky 2014, Thm 5.1: for T + E with ||E||_op = eps small enough,
    # ||v_i - v_hat_i|| <= 8 eps / lam_i and |lam_i - lam_hat_i| <= 5 eps. We use ||E||_op <= ||E||_F.
    rng = np.random.default_rng(41)
    dim, r = 8, 4
    V = np.linalg.qr(rng.standard_normal((dim, dim)))[0][:, :r]
    lam = np.array([2.0, 1.6, 1.3, 1.0])
    E = rng.standard_normal((dim,) * 3)
    E = sum(E.transpose(p) for p in [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]) / 6
    E *= 1e-3 / np.linalg.norm(E)
    eps = np.linalg.norm(E)
    res = power_iteration(_sym_power(V, lam, 3) + E, r, rng=3)
    perm, signs, errs = match_columns(res.factors[0], V)
    assert np.all(errs <= 8 * eps / lam)
    assert np.all(np.abs(res.weights[perm] - lam) <= 5 * eps)


def test_power_iteration_refuses_bad_input():
    rng = np.random.default_rng(42)
    V = np.linalg.qr(rng.standard_normal((5, 5)))[0][:, :2]
    T = _sym_power(V, [2.0, 1.0], 3)
    with pytest.raises(AssumptionError, match="rank"):
        power_iteration(T, 3, rng=0)
    with pytest.raises(AssumptionError, match="rank"):
        power_iteration(lambda u: T @ u @ u, 3, dim=5, rng=0)
    with pytest.raises(InputError, match="rank"):
        power_iteration(T, 6)
    with pytest.raises(InputError, match="not symmetric"):
        power_iteration(T + rng.standard_normal(T.shape), 2)
    with pytest.raises(InputError, match="order"):
        power_iteration(T[0], 2)
    with pytest.raises(InputError, match="cubical"):
        power_iteration(np.ones((3, 3, 4)), 2)
    with pytest.raises(InputError, match="dim"):
        power_iteration(lambda u: u, 2)
    with pytest.raises(InputError, match="shape"):
        power_iteration(lambda u: np.ones(3), 2, dim=5)
    bad = T.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        power_iteration(bad, 2)


def test_power_iteration_reproducible():
    rng = np.random.default_rng(43)
    V = np.linalg.qr(rng.standard_normal((6, 6)))[0][:, :3]
    T = _sym_power(V, [1.0, 1.0, 1.0], 3)
    T = T + 1e-3 * sum(np.transpose(X, p) for X in [rng.standard_normal(T.shape)]
                       for p in [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)])
    r1, r2 = power_iteration(T, 3, rng=9), power_iteration(T, 3, rng=9)
    np.testing.assert_array_equal(r1.factors[0], r2.factors[0])
    np.testing.assert_array_equal(r1.weights, r2.weights)


# --------------------------------------------------------------------------------------------- CP-ALS
@pytest.mark.parametrize("shape,r", [((6, 7, 8), 3), ((10, 10, 10), 5), ((5, 5, 40), 5), ((4, 5, 6, 3), 3)])
def test_cp_als_exact(shape, r):
    rng = np.random.default_rng(sum(shape) + r)
    F = [rng.standard_normal((s, r)) for s in shape]
    T = cp_reconstruct(F)
    res = cp_als(T, r, rng=1)
    assert isinstance(res, CPResult)
    assert res.relative_error < EXACT
    for est, ref in zip(res.factors, F):
        assert _max_err(est, ref) < 1e-9
    np.testing.assert_allclose(res.to_tensor(), T, rtol=0, atol=EXACT * np.abs(T).max())
    assert len(res.diagnostics["restart_errors"]) == 5
    assert np.all(np.abs(res.weights[:-1]) >= np.abs(res.weights[1:]))


def test_cp_als_noisy_fit_not_worse_than_truth():
    # The truth is a feasible rank-r candidate, so the least-squares optimum has relative error
    # <= ||E||_F / ||T + E||_F; best-of-restarts ALS reaches it on this well-conditioned instance.
    rng = np.random.default_rng(50)
    F = [rng.standard_normal((8, 4)) for _ in range(3)]
    T = cp_reconstruct(F)
    E = 1e-2 * np.linalg.norm(T) / np.sqrt(T.size) * rng.standard_normal(T.shape)
    res = cp_als(T + E, 4, rng=0)
    assert res.relative_error <= np.linalg.norm(E) / np.linalg.norm(T + E)
    # and the factors are within the first-order noise level (relative noise 1e-2, cond ~ 10)
    assert max(_max_err(a, b) for a, b in zip(res.factors, F)) < 0.1


def test_cp_als_validation_and_reproducibility():
    rng = np.random.default_rng(51)
    T = cp_reconstruct([rng.standard_normal((5, 2)) for _ in range(3)])
    with pytest.raises(InputError, match="order >= 3"):
        cp_als(T[0], 2)
    with pytest.raises(InputError, match="zero"):
        cp_als(np.zeros((3, 3, 3)), 2)
    bad = T.copy()
    bad[1, 1, 1] = np.nan
    with pytest.raises(InputError, match="NaN"):
        cp_als(bad, 2)
    with pytest.raises(InputError, match="init"):
        cp_als(T, 2, init="jennrich")
    with pytest.raises(InputError, match="rank"):
        cp_als(T, 0)
    noisy = T + 0.01 * rng.standard_normal(T.shape)
    r1, r2 = cp_als(noisy, 2, rng=7, n_restarts=2), cp_als(noisy, 2, rng=7, n_restarts=2)
    for a, b in zip(r1.factors, r2.factors):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(r1.weights, r2.weights)
    assert r1.diagnostics["seeds"] == r2.diagnostics["seeds"]


def test_cp_als_from_given_factors():
    """A start near the solution is polished to round-off in one deterministic run; bad starts refused."""
    rng = np.random.default_rng(52)
    F = [rng.standard_normal((s, 3)) for s in (5, 6, 7)]
    T = cp_reconstruct(F)
    start = [f + 1e-3 * rng.standard_normal(f.shape) for f in F]
    res = cp_als(T, 3, init=start)
    assert res.relative_error < EXACT
    assert len(res.diagnostics["restart_errors"]) == 1 and res.diagnostics["init"] == "given factors"
    for est, ref in zip(res.factors, F):
        assert _max_err(est, ref) < 1e-9
    with pytest.raises(InputError, match="shapes"):
        cp_als(T, 3, init=start[:2])
    with pytest.raises(InputError, match="shapes"):
        cp_als(T, 2, init=start)
    with pytest.raises(InputError, match="finite"):
        cp_als(T, 3, init=[start[0] * np.nan, start[1], start[2]])


def test_cp_als_skips_diverged_restarts(monkeypatch):
    # a restart whose factors are not finite must never be chosen (np.argmin would pick a NaN error);
    # when every restart diverges the call raises instead of returning NaN factors
    import tensorly.decomposition as tld

    real = tld.parafac
    calls = []

    def flaky(*args, **kwargs):
        out = real(*args, **kwargs)
        calls.append(1)
        if len(calls) in bad:
            (w, factors), errs = out
            return (w, [np.full_like(np.asarray(F), np.nan) for F in factors]), errs
        return out

    monkeypatch.setattr(tld, "parafac", flaky)
    rng = np.random.default_rng(52)
    F = [rng.standard_normal((5, 2)) for _ in range(3)]
    T = cp_reconstruct(F)
    bad = {1}
    res = cp_als(T, 2, rng=0, n_restarts=3)
    assert res.diagnostics["restart_errors"][0] == np.inf and res.diagnostics["best_restart"] != 0
    assert res.relative_error < EXACT
    calls.clear()
    bad = {1, 2}
    with pytest.raises(ConvergenceError, match="diverged"):
        cp_als(T, 2, rng=0, n_restarts=2)


def test_cp_reconstruct_validates_factors():
    A, B = np.ones((3, 2)), np.ones((4, 2))
    assert cp_reconstruct([A, B], [1.0, 2.0]).shape == (3, 4)
    np.testing.assert_array_equal(cp_reconstruct([A, B], [1.0, 2.0]), 3.0 * np.ones((3, 4)))
    for factors, weights, match in [([], None, "non-empty"), (A, None, "non-empty list"),
                                    ([A, np.ones((4, 3))], None, "same number of columns"),
                                    ([A, B], [1.0], r"weights must have shape \(2,\)"),
                                    ([A, np.full((4, 2), np.nan)], None, "NaN"),
                                    ([A, np.ones(4)], None, "2-dimensional")]:
        with pytest.raises(InputError, match=match):
            cp_reconstruct(factors, weights)


def test_every_decomposition_returns_the_one_result_type():
    """CP-ALS, Jennrich, joint diagonalisation and power iteration all return a DecompositionResult with
    the same fields (factors list, weights, converged bool, n_iter int, message, diagnostics); the
    method-specific accessors callers know stay available."""
    from nnrecover.tensor import DecompositionResult, cp_als, jennrich, joint_diagonalize, power_iteration

    rng = np.random.default_rng(0)
    A = rng.standard_normal((6, 3))
    w = np.array([3.0, -2.0, 1.0])
    T = np.einsum("i,ai,bi,ci->abc", w, A, A, A)
    Q = np.linalg.qr(rng.standard_normal((6, 3)))[0]
    T_odeco = np.einsum("i,ai,bi,ci->abc", w, Q, Q, Q)
    results = {"cp": cp_als(T, 3, rng=0), "jennrich": jennrich(T, 3, rng=0),
               "joint": joint_diagonalize(np.moveaxis(T, 2, 0), 3, rng=0),
               "power": power_iteration(T_odeco, 3, rng=0)}
    for name, res in results.items():
        assert isinstance(res, DecompositionResult), name
        assert isinstance(res.factors, list) and all(F.shape[1] == 3 for F in res.factors), name
        assert isinstance(res.converged, bool), name
        assert res.converged or name == "cp", name  # ALS may stop at n_iter_max near the optimum (swamp)
        assert isinstance(res.n_iter, int) and isinstance(res.message, str) and res.message, name
        assert isinstance(res.diagnostics, dict) and res.rank == 3, name
    for name in ("jennrich", "power"):  # exact input, exact methods: reconstruction to round-off
        target = T_odeco if name == "power" else T
        np.testing.assert_allclose(results[name].to_tensor(), target, atol=1e-9 * np.abs(target).max())
    cp_err = np.linalg.norm(results["cp"].to_tensor() - T) / np.linalg.norm(T)
    assert cp_err == pytest.approx(results["cp"].relative_error, rel=1e-6, abs=1e-14)
    jr, jd = results["jennrich"], results["joint"]
    assert jr.factors_mode2 is jr.factors[1] and jr.factors_mode3 is jr.factors[2]
    assert jr.eigenvalues.shape == (3,) and jd.diagonals is jd.weights and jd.weights.shape == (6, 3)
    assert results["cp"].relative_error == results["cp"].diagnostics["relative_error"] < 1e-6
    assert results["jennrich"].n_iter == 0  # a direct method
    with pytest.raises(InputError, match="per-component weights"):
        jd.to_tensor()
