"""Tests of nnrecover.hermite (polynomials, tensors, expansions, statistics) (ATV21 Hermite machinery, Appendix A).

Reference implementations used below are independent of the library code paths:
* 1-D: ``numpy.polynomial.hermite_e.hermeval`` (monomial/Clenshaw, not our recurrence);
* dense tensors: the entrywise product formula ``[He_k(x)]_alpha = prod_t He_{n_t(alpha)}(x_t)``
  (ATV21 Definition A.2), evaluated with hermeval;
* population: direct numerical integration (scipy.integrate.quad + Gauss-Hermite) and Monte Carlo.
"""

from __future__ import annotations

import itertools
import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
from numpy.polynomial import hermite_e as npher
from scipy import integrate

import nnrecover as nr
from nnrecover import hermite as h
from nnrecover.hermite.expansions import activation_hermite_coefficients
from nnrecover.activations import get_activation
from nnrecover.errors import AssumptionError, InputError
from nnrecover.data import accumulate
from nnrecover.hermite.statistics import HermiteContractionStatistic, HermiteMatrixSliceStatistic, HermiteMoments, HermitePartialContractionStatistic, HermiteRankOneStatistic, HermiteTensorStatistic, HermiteVectorSliceStatistic, PopulationHermiteMoments, SampleHermiteMoments

# --------------------------------------------------------------------------- reference helpers


def ref_he(k: int, t):
    """He_k(t) by numpy's hermite_e series evaluation (independent of our recurrence)."""
    return npher.hermeval(t, [0.0] * k + [1.0])


def ref_tensor(k: int, X: np.ndarray) -> np.ndarray:
    """Per-sample dense He_k(x_n) by the entrywise product formula; shape (n,) + (d,)*k."""
    n, d = X.shape
    table = np.stack([ref_he(j, X) for j in range(k + 1)], axis=-1)  # (n, d, k+1)
    out = np.empty((n,) + (d,) * k)
    for alpha in itertools.product(range(d), repeat=k):
        counts = [alpha.count(t) for t in range(d)]
        out[(slice(None),) + alpha] = np.prod([table[:, t, counts[t]] for t in range(d)], axis=0)
    return out


def ref_mean(k: int, X: np.ndarray, Y: np.ndarray) -> np.ndarray:
    """mean_n y_n He_k(x_n) with a leading output axis, from the product formula."""
    Y2 = Y[:, None] if Y.ndim == 1 else Y
    return np.tensordot(Y2.T, ref_tensor(k, X), axes=(1, 0)) / X.shape[0]


def contract_last(T: np.ndarray, *vectors) -> np.ndarray:
    """Contract the last len(vectors) axes of T with the given vectors (last axis with the last vector)."""
    for v in reversed(vectors):
        T = T @ v
    return T


def rel_err(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.max(np.abs(a - b)) / max(1.0, float(np.max(np.abs(b)))))


def relu_net(rng, d=3, m=4, p=2, bias_scale=0.8):
    W = rng.standard_normal((m, d)) * rng.uniform(0.5, 1.8, size=(m, 1))  # non-unit rows on purpose
    return nr.TwoLayerNetwork(W, bias_scale * rng.standard_normal(m), rng.standard_normal((p, m)),
                              rng.standard_normal(p), activation="relu")


@pytest.fixture
def data(rng):
    X = rng.standard_normal((60, 3))
    Y = rng.standard_normal((60, 2))
    return X, Y


# =========================================================================== 1-D polynomials


def test_hermite_1d_matches_numpy(rng):
    t = np.concatenate([rng.standard_normal(50) * 3, [0.0, -7.5, 9.0]])
    table = h.hermite_1d_all(12, t)
    assert table.shape == (53, 13)
    for k in range(13):
        ref = ref_he(k, t)
        assert np.max(np.abs(table[:, k] - ref) / np.maximum(1.0, np.abs(ref))) < 1e-12
    # orders as a sequence and as an int, any input shape
    T = rng.standard_normal((4, 5))
    assert h.hermite_1d([2, 5, 3], T).shape == (4, 5, 3)
    np.testing.assert_allclose(h.hermite_1d([2, 5, 3], T)[..., 1], ref_he(5, T), rtol=1e-13, atol=1e-13)
    assert h.hermite_1d(4, 1.5).shape == ()


def test_hermite_1d_normalized_and_stable_at_high_order(rng):
    t = rng.standard_normal(30) * 2
    norm = h.hermite_1d_all(25, t, normalized=True)
    plain = h.hermite_1d_all(25, t)
    scale = np.array([math.sqrt(math.factorial(k)) for k in range(26)])
    np.testing.assert_allclose(norm, plain / scale, rtol=1e-11, atol=1e-12)
    # k = 300, where He_k itself overflows float64 for |t| > ~10: exact rational reference
    # h_k(t)^2 = He_k(t)^2 / k! with He_k(t) from the integer recurrence in Fractions.
    points = [Fraction(1, 2), Fraction(3, 2), Fraction(7), Fraction(-49, 4)]
    got = h.hermite_1d(300, [float(q) for q in points], normalized=True)
    assert np.all(np.isfinite(got))
    for q, val in zip(points, got):
        prev, cur = Fraction(1), q
        for k in range(1, 300):
            prev, cur = cur, q * cur - k * prev
        ref = math.copysign(math.sqrt(float(cur * cur / math.factorial(300))), 1 if cur > 0 else -1)
        assert abs(val - ref) < 1e-10 * max(1.0, abs(ref))


def test_orthogonality_gauss_hermite():
    # 40-node probabilists' Gauss-Hermite quadrature is exact for polynomials of degree <= 79
    nodes, weights = npher.hermegauss(40)
    weights = weights / math.sqrt(2 * math.pi)
    H = h.hermite_1d_all(12, nodes)
    gram = (H * weights[:, None]).T @ H  # E[He_j He_k] = k! delta_jk; scale entry (j, k) by sqrt(j! k!)
    scale = np.array([math.sqrt(math.factorial(k)) for k in range(13)])
    assert np.max(np.abs(gram / np.outer(scale, scale) - np.eye(13))) < 1e-12
    Hn = h.hermite_1d_all(12, nodes, normalized=True)
    assert np.max(np.abs((Hn * weights[:, None]).T @ Hn - np.eye(13))) < 1e-12


def test_turan_identity_derivative_and_parity(rng):
    t = rng.uniform(-4, 4, size=40)
    H = h.hermite_1d_all(14, t)
    for k in range(12):
        lhs = H[:, k + 1] ** 2 - H[:, k] * H[:, k + 2]
        rhs = math.factorial(k) * sum(H[:, i] ** 2 / math.factorial(i) for i in range(k + 1))
        assert np.all(rhs > 0)
        assert np.max(np.abs(lhs - rhs) / rhs) < 1e-11
    # He_k' = k He_{k-1} (numpy derivative of the He_k series) and He_k(-t) = (-1)^k He_k(t)
    for k in range(1, 12):
        der = npher.hermeval(t, npher.hermeder([0.0] * k + [1.0]))
        np.testing.assert_allclose(der, k * H[:, k - 1], rtol=1e-11, atol=1e-9)
    np.testing.assert_array_equal(h.hermite_1d_all(14, -t), H * (-1.0) ** np.arange(15))


def test_n_matchings_counts_partial_matchings():
    def brute(k):
        def count(items):
            if not items:
                return 1
            rest = items[1:]
            return count(rest) + sum(count(rest[:i] + rest[i + 1:]) for i in range(len(rest)))
        return count(list(range(k)))
    assert [h.n_matchings(k) for k in range(10)] == [brute(k) for k in range(10)]


def test_scaled_hermite_handles_any_norm(rng):
    U = rng.standard_normal((5, 3))
    U[1] *= 3.0
    U[2] = 0.0
    X = rng.standard_normal((20, 3))
    out = h.hermite_rank_one(X, U, list(range(7)))  # (n, 7, r)
    norms = np.linalg.norm(U, axis=1)
    for k in range(7):
        for i in (0, 1, 3, 4):
            ref = norms[i] ** k * ref_he(k, X @ U[i] / norms[i])
            np.testing.assert_allclose(out[:, k, i], ref, rtol=1e-12, atol=1e-12)
        assert np.all(out[:, k, 2] == (1.0 if k == 0 else 0.0))


# =========================================================================== dense tensors


@pytest.mark.parametrize("k,d", [(0, 3), (1, 3), (2, 3), (3, 3), (4, 3), (5, 3), (6, 3), (7, 2), (8, 2)])
def test_hermite_tensor_matches_product_formula(rng, k, d):
    X = rng.standard_normal((5, d)) * 1.5
    T = h.hermite_tensor(k, X)
    assert T.shape == (5,) + (d,) * k
    assert rel_err(T, ref_tensor(k, X)) < 1e-12
    assert rel_err(h.hermite_tensor(k, X[2]), ref_tensor(k, X[2:3])[0]) < 1e-12
    # symmetric: invariant under every transposition of two adjacent slots
    for r in range(1, k):
        perm = list(range(k + 1))
        perm[r], perm[r + 1] = perm[r + 1], perm[r]
        assert rel_err(T.transpose(perm), T) < 1e-12


def test_explicit_low_order_forms(rng):
    # ATV21 Definition A.2: (He_3)_ijk = x_i x_j x_k - d_ij x_k - d_ik x_j - d_jk x_i
    x = rng.standard_normal(4)
    I = np.eye(4)
    he3 = (np.einsum("i,j,k->ijk", x, x, x) - np.einsum("ij,k->ijk", I, x) - np.einsum("ik,j->ijk", I, x)
           - np.einsum("jk,i->ijk", I, x))
    np.testing.assert_allclose(h.hermite_tensor(3, x), he3, atol=1e-14)
    np.testing.assert_allclose(h.hermite_tensor(2, x), np.outer(x, x) - I, atol=1e-15)


def test_gaussian_moment_tensor_isserlis(rng):
    A = rng.standard_normal((3, 3))
    C = A @ A.T
    E4 = h.gaussian_moment_tensor(4, C)
    ref = (np.einsum("ij,kl->ijkl", C, C) + np.einsum("ik,jl->ijkl", C, C) + np.einsum("il,jk->ijkl", C, C))
    np.testing.assert_allclose(E4, ref, rtol=1e-14)
    assert np.all(h.gaussian_moment_tensor(3, C) == 0.0)
    # E[g^(x)6] has 15 matchings; its full trace with C^{-1} is E[(g'C^{-1}g)^3] = m(m+2)(m+4)
    E6 = h.gaussian_moment_tensor(6, C)
    Ci = np.linalg.inv(C)
    val = np.einsum("abcdef,ab,cd,ef->", E6, Ci, Ci, Ci)
    assert abs(val - 3 * 5 * 7) < 1e-9


@pytest.mark.parametrize("k,d", [(0, 3), (1, 3), (2, 3), (3, 3), (4, 3), (5, 3), (6, 3), (8, 2)])
def test_tensor_statistic_matches_product_formula(data, k, d):
    X, Y = data
    X = X[:, :d]
    res = HermiteTensorStatistic(k).update(X, Y).finalize()
    assert res.shape == (2,) + (d,) * k
    assert rel_err(res, ref_mean(k, X, Y)) < 1e-12


def test_assemble_from_raw_moments_of_points(rng):
    X = rng.standard_normal((4, 3))
    for k in range(7):
        raw = {r: h.khatri_rao_power(X, r).reshape((4,) + (3,) * r) for r in range(k, -1, -2)}
        assert rel_err(h.assemble_hermite_tensor(raw, k), ref_tensor(k, X)) < 1e-12


def test_projected_tensor(rng, data):
    X, Y = data
    d = X.shape[1]
    Q = np.linalg.qr(rng.standard_normal((d, 2)))[0]  # orthonormal basis (d, m=2)
    P = rng.standard_normal((d, 2))  # general matrix
    for k in range(6):
        # identity He_k(x)[Q, ..., Q] = He_k(Q^T x) for orthonormal Q
        proj = HermiteTensorStatistic(k, basis=Q).update(X, Y).finalize()
        assert proj.shape == (2,) + (2,) * k
        assert rel_err(proj, ref_mean(k, X @ Q, Y)) < 1e-12
        # general P: every slot of the dense tensor contracted with P
        dense = ref_mean(k, X, Y)
        for _ in range(k):
            dense = np.tensordot(dense, P, axes=([1], [0]))
        assert rel_err(HermiteTensorStatistic(k, basis=P).update(X, Y).finalize(), dense) < 1e-12


# =========================================================================== contractions and slices


def test_full_contraction_matches_dense(rng, data):
    X, Y = data
    for k in range(7):
        U = rng.standard_normal((4, k, 3))  # 4 tuples of k vectors
        dense = ref_tensor(k, X)
        ref = np.stack([contract_last(dense, *U[s]) for s in range(4)], axis=1)
        assert rel_err(h.hermite_contract(X, U), ref) < 1e-12
        assert rel_err(h.hermite_contract(X, U[1]), ref[:, 1]) < 1e-12
        stat = HermiteContractionStatistic(U).update(X, Y).finalize()
        assert stat.shape == (2, 4)
        assert rel_err(stat, Y.T @ ref / len(X)) < 1e-12
    # the rank-one identity He_k(x)[u..u] = |u|^k He_k(u.x/|u|) ties both paths together
    u = rng.standard_normal(3) * 2.2
    for k in range(7):
        np.testing.assert_allclose(h.hermite_contract(X, np.tile(u, (k, 1))),
                                   h.hermite_rank_one(X, u, k), rtol=1e-12, atol=1e-10)


def test_rank_one_statistic_matches_dense(rng, data):
    X, Y = data
    U = rng.standard_normal((5, 3)) * rng.uniform(0.2, 2.0, size=(5, 1))
    res = HermiteRankOneStatistic(U, [0, 2, 3, 5]).update(X, Y).finalize()
    assert res.shape == (2, 4, 5)
    for j, k in enumerate([0, 2, 3, 5]):
        dense = ref_tensor(k, X)
        ref = np.stack([contract_last(dense, *([U[i]] * k)) for i in range(5)], axis=1)
        assert rel_err(res[:, j], Y.T @ ref / len(X)) < 1e-12
    assert HermiteRankOneStatistic(U[0], 4).update(X, Y).finalize().shape == (2,)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6, 7])
def test_vector_slices_match_dense(rng, data, k):
    X, Y = data
    g = rng.standard_normal((2, 3))
    dense = ref_tensor(k, X)
    ref = np.stack([dense @ g[s] for s in range(2)], axis=1)  # (n, s) + (d,)*(k-1)
    assert rel_err(h.hermite_vector_slice(X, k, g), ref) < 1e-12
    res = HermiteVectorSliceStatistic(k, g).update(X, Y).finalize()
    assert res.shape == (2, 2) + (3,) * (k - 1)
    assert rel_err(res, np.tensordot(Y.T, ref, axes=(1, 0)) / len(X)) < 1e-12
    # one vector is the same sums as a column of two, taken by BLAS products of another shape: equal to the
    # round-off of a mean of n products of k factors (gamma_{k + log2 n} in units of eps, times the
    # cancellation of the Hermite terms, a factor 64 here), not to the last bit (OPENBLAS_CORETYPE=Prescott
    # differs from the AVX kernels by 6.5 eps at k = 7)
    tol = 64 * (k + np.log2(len(X))) * np.finfo(float).eps
    assert rel_err(HermiteVectorSliceStatistic(k, g[1]).update(X, Y).finalize(), res[:, 1]) < tol


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6, 7])
def test_matrix_slices_match_dense(rng, data, k):
    X, Y = data
    G = rng.standard_normal((2, 3, 3))  # not symmetric: only the symmetric part can matter
    dense = ref_tensor(k, X)
    ref = np.stack([np.tensordot(dense, G[s], axes=([k - 1, k], [0, 1])) for s in range(2)], axis=1)
    assert rel_err(h.hermite_matrix_slice(X, k, G), ref) < 1e-12
    res = HermiteMatrixSliceStatistic(k, G).update(X, Y).finalize()
    assert res.shape == (2, 2) + (3,) * (k - 2)
    assert rel_err(res, np.tensordot(Y.T, ref, axes=(1, 0)) / len(X)) < 1e-12


@pytest.mark.parametrize("k,c", [(0, 0), (2, 1), (3, 2), (4, 2), (4, 3), (5, 3), (5, 5), (6, 4), (6, 2)])
def test_partial_contractions_match_dense(rng, data, k, c):
    X, Y = data
    V = rng.standard_normal((2, c, 3)) * rng.uniform(0.3, 2.0, size=(2, c, 1))
    dense = ref_mean(k, X, Y)  # (p,) + (d,)*k; contract its last c slots
    ref = np.stack([contract_last(dense, *V[s]) for s in range(2)], axis=1)
    res = HermitePartialContractionStatistic(k, V).update(X, Y).finalize()
    assert res.shape == (2, 2) + (3,) * (k - c)
    assert rel_err(res, ref) < 1e-12
    assert rel_err(HermitePartialContractionStatistic(k, V[1]).update(X, Y).finalize(), ref[:, 1]) < 1e-12


def test_partial_contraction_special_cases(rng, data):
    # c = 1 is the vector slice, f = 0 the full contraction, repeated vectors the rank-one value
    X, Y = data
    hm = SampleHermiteMoments((X, Y))
    g, U, u = rng.standard_normal(3), rng.standard_normal((4, 3)), rng.standard_normal(3)
    assert rel_err(hm.partial_contract(4, g[None]), hm.vector_slice(4, g, flatten=False)) < 1e-12
    assert rel_err(hm.partial_contract(4, U), hm.contract(U)) < 1e-12
    assert rel_err(hm.partial_contract(5, np.tile(u, (5, 1))), hm.rank_one(u, 5)) < 1e-12
    assert hm.partial_contract(5, U[:1], flatten=True).shape == (2, 9, 9)


def test_slice_formulas_of_spec(rng):
    # ATV21 Definition A.2: He_3(x)[.,.,g] = (x'g)(xx' - I) - x g' - g x';
    # He_4(x)[.,.,G] = (x'Gx - tr G)(xx' - I) - 2(G x x' + x x' G) + 2G for symmetric G
    x, g = rng.standard_normal(4), rng.standard_normal(4)
    A = rng.standard_normal((4, 4))
    G = A + A.T
    I = np.eye(4)
    xx = np.outer(x, x)
    np.testing.assert_allclose(h.hermite_vector_slice(x, 3, g),
                               (x @ g) * (xx - I) - np.outer(x, g) - np.outer(g, x), atol=1e-13)
    np.testing.assert_allclose(h.hermite_matrix_slice(x, 4, G),
                               (x @ G @ x - np.trace(G)) * (xx - I) - 2 * (G @ xx + xx @ G) + 2 * G,
                               atol=1e-12)


def test_l2_slices_are_d2_by_d2(rng, data):
    X, Y = data
    g = rng.standard_normal(3)
    G = rng.standard_normal((3, 3))
    hm = SampleHermiteMoments((X, Y), output=0)
    S5 = hm.vector_slice(5, g)
    S6 = hm.matrix_slice(6, G)
    assert S5.shape == S6.shape == (9, 9)
    T5, T6 = ref_mean(5, X, Y[:, 0])[0], ref_mean(6, X, Y[:, 0])[0]
    # flatten(T_5, 2, 2, 1) contracted with g; flatten(T_6, 2, 2, 2) with vec(G)
    assert rel_err(S5, (T5 @ g).reshape(9, 9)) < 1e-12
    assert rel_err(S6, T6.reshape(9, 9, 9) @ G.reshape(9)) < 1e-12
    np.testing.assert_allclose(S5, S5.T, atol=1e-12)


# =========================================================================== streaming


def _all_statistics(rng, d=3):
    return [
        HermiteTensorStatistic(4),
        HermiteTensorStatistic(3, basis=rng.standard_normal((d, 2))),
        HermiteRankOneStatistic(rng.standard_normal((3, d)), [1, 4, 6]),
        HermiteContractionStatistic(rng.standard_normal((2, 5, d))),
        HermiteVectorSliceStatistic(5, rng.standard_normal((2, d))),
        HermiteMatrixSliceStatistic(6, rng.standard_normal((2, d, d))),
        HermitePartialContractionStatistic(5, rng.standard_normal((2, 3, d))),
    ]


def test_chunk_size_invariance(rng):
    X = rng.standard_normal((300, 3))
    Y = rng.standard_normal((300, 2))
    stats = _all_statistics(rng)
    reference = [s.finalize() for s in accumulate([s.empty_like() for s in stats], (X, Y), chunk_size=300)]
    for chunk in (1, 7, 64, 299):
        got = accumulate([s.empty_like() for s in stats], (X, Y), chunk_size=chunk)
        for a, b in zip(got, reference):
            assert rel_err(a.finalize(), b) < 1e-12
    # an iterable of unequal chunks, and a one-shot generator
    pieces = [(X[:5], Y[:5]), (X[5:180], Y[5:180]), (X[180:], Y[180:])]
    for src in (pieces, iter(pieces)):
        got = accumulate([s.empty_like() for s in stats], src)
        for a, b in zip(got, reference):
            assert rel_err(a.finalize(), b) < 1e-12


def test_merge_empty_like_and_pickle(rng):
    X = rng.standard_normal((200, 3))
    Y = rng.standard_normal(200)
    for stat in _all_statistics(rng):
        whole = stat.empty_like().update(X, Y).finalize()
        parts = [stat.empty_like().update(X[a:b], Y[a:b]) for a, b in ((0, 70), (70, 71), (71, 200))]
        merged = stat.empty_like().merge(parts[0]).merge(parts[1].merge(parts[2]))
        assert merged.n == 200
        assert rel_err(merged.finalize(), whole) < 1e-12
        assert stat.empty_like().merge(stat.empty_like()).n == 0
        # picklable mid-stream (dask ships statistics to workers)
        half = pickle.loads(pickle.dumps(stat.empty_like().update(X[:90], Y[:90])))
        assert rel_err(half.update(X[90:], Y[90:]).finalize(), whole) < 1e-12


def test_sample_stream_and_dask_sources(rng):
    net = relu_net(rng, p=1)
    stream = nr.sample_stream(net, nr.distributions.StandardGaussian(3), 3000, chunk_size=512, rng=5)
    X, Y = nr.sample(net, nr.distributions.StandardGaussian(3), 3000, rng=5)
    hm_stream = SampleHermiteMoments(stream)
    hm_arr = SampleHermiteMoments((X, Y), chunk_size=1000)
    g = rng.standard_normal(3)
    for name, args in (("tensor", (4,)), ("vector_slice", (3, g)), ("rank_one", (np.eye(3), [2, 3]))):
        a = getattr(hm_stream, name)(*args)  # the stream is re-iterable: one pass per call
        assert rel_err(a, getattr(hm_arr, name)(*args)) < 1e-12
    assert hm_stream.n_samples == 3000
    import dask.array as da
    hm_dask = SampleHermiteMoments((da.from_array(X, chunks=(700, 3)), da.from_array(Y, chunks=700)))
    assert rel_err(hm_dask.matrix_slice(4, np.eye(3)), hm_arr.matrix_slice(4, np.eye(3))) < 1e-12


def test_compute_several_statistics_in_one_pass(rng, data):
    X, Y = data
    hm = SampleHermiteMoments((X, Y))
    stats = [HermiteTensorStatistic(k) for k in range(5)]
    values = hm.compute(stats)
    for k, v in enumerate(values):
        assert rel_err(v, ref_mean(k, X, Y)) < 1e-12
    assert hm.n_samples == 60


# =========================================================================== population


def test_population_internal_consistency(rng):
    # every method of the population form agrees with the dense f_hat_k (different code paths)
    net = relu_net(rng)
    pop = PopulationHermiteMoments(net)
    U = rng.standard_normal((2, 5, 3))
    V = rng.standard_normal((4, 3))
    g = rng.standard_normal(3)
    G = rng.standard_normal((3, 3))
    P = rng.standard_normal((3, 2))
    for k in range(7):
        T = pop.tensor(k)
        assert T.shape == (2,) + (3,) * k
        ref = np.stack([contract_last(T, *([v] * k)) for v in V], axis=-1)
        assert rel_err(pop.rank_one(V, k), ref) < 1e-12
        if k == 5:
            assert rel_err(pop.contract(U), np.stack([contract_last(T, *U[s]) for s in range(2)], -1)) < 1e-12
        if k >= 3:
            assert rel_err(pop.partial_contract(k, U[0, :3]), contract_last(T, *U[0, :3])) < 1e-12
        if k >= 1:
            assert rel_err(pop.vector_slice(k, g, flatten=False), T @ g) < 1e-12
        if k >= 2:
            ref = np.tensordot(T, 0.5 * (G + G.T), axes=([k - 1, k], [0, 1]))
            assert rel_err(pop.matrix_slice(k, G, flatten=False), ref) < 1e-12
        proj = T
        for _ in range(k):
            proj = np.tensordot(proj, P, axes=([1], [0]))
        assert rel_err(pop.tensor(k, basis=P), proj) < 1e-12
    # Lemma 3.5: f_hat_0 = E[y] includes the output bias, f_hat_1 = sum_i a_i Phi(b_i) w_i / |w_i|
    can = net.canonical()
    Phi = get_activation("relu").hermite_coefficients(1, can.hidden_bias)[:, 1]
    np.testing.assert_allclose(pop.linear(), (can.output_weights * Phi) @ can.hidden_weights, rtol=1e-13)


def test_population_relu_exact_vs_quadrature():
    # One unit a relu(w.x + b) with |w| = s != 1 in d = 2 and a unit direction v at angle theta to w:
    # f_hat_k(v, .., v) = E[a relu(s z1 + b) He_k(cos(theta) z1 + sin(theta) z2)], z1, z2 iid N(0,1).
    # z2 is integrated exactly by 30-node Gauss-Hermite (polynomial of degree k <= 8), z1 by adaptive
    # quadrature on [-b/s, 40] (relu vanishes below the kink; mass beyond 40 is < 1e-300).
    s, b, a, theta = 1.6, -0.4, 1.3, 0.7
    u = np.array([0.6, 0.8])
    net = nr.TwoLayerNetwork(s * u[None], [b], [[a]], activation="relu")
    rot = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]])
    v = rot @ u
    pop = PopulationHermiteMoments(net)
    nodes, weights = npher.hermegauss(30)
    weights = weights / math.sqrt(2 * math.pi)
    for k in range(9):
        def integrand(z1, k=k):
            inner = np.sum(weights * ref_he(k, np.cos(theta) * z1 + np.sin(theta) * nodes))
            return a * max(s * z1 + b, 0.0) * inner * math.exp(-z1 * z1 / 2) / math.sqrt(2 * math.pi)
        ref, _ = integrate.quad(integrand, -b / s, 40.0, epsabs=1e-13, epsrel=1e-11, limit=200)
        assert abs(pop.rank_one(v, k) - ref) < 1e-10 * max(1.0, abs(ref))


def test_scale_handling_homogeneous_equals_canonical(rng):
    for act in ("relu", "leaky_relu(0.2)", "relu_power(2)", "step"):
        W = rng.standard_normal((3, 3)) * np.array([[0.3], [1.0], [2.5]])
        net = nr.TwoLayerNetwork(W, rng.standard_normal(3), rng.standard_normal((1, 3)), activation=act)
        a, b = PopulationHermiteMoments(net), PopulationHermiteMoments(net.canonical())
        for k in range(6):
            assert rel_err(a.tensor(k), b.tensor(k)) < 1e-12


def test_zero_hidden_row_is_a_constant_unit(rng):
    # act(0.x + b) = act(b): it shifts f_hat_0 by A[:, i] act(b) and leaves every other order alone
    for act in ("relu", "sigmoid"):
        W = rng.standard_normal((2, 3))
        A = rng.standard_normal((1, 3))
        with_zero = nr.TwoLayerNetwork(np.vstack([W, np.zeros(3)]), [0.3, -0.2, 0.7], A, activation=act)
        without = nr.TwoLayerNetwork(W, [0.3, -0.2], A[:, :2], [A[0, 2] * float(get_activation(act)(0.7))],
                                     activation=act)
        a, b = PopulationHermiteMoments(with_zero), PopulationHermiteMoments(without)
        for k in range(5):
            assert rel_err(a.tensor(k), b.tensor(k)) < 1e-13


@pytest.mark.parametrize("act", ["sigmoid", "exp", "exp_minus_one", "relu"])
def test_scaled_coefficients_vs_direct_quadrature(act):
    # c_k(b; s) = E[act(s z + b) He_k(z)] against scipy quad of the unscaled activation
    f = get_activation(act)
    biases, scales = np.array([0.4, -1.1, 0.0]), np.array([1.7, 0.45, 0.0])
    got = activation_hermite_coefficients(act, 6, biases, scales)
    assert got.shape == (3, 7)
    for (b, s), row in zip(zip(biases, scales), got):
        for k in range(7):
            if s == 0:  # a zero row is the constant act(b)
                assert row[k] == (float(f(b)) if k == 0 else 0.0)
                continue
            pts = [-b / s] if f.kinks else None
            ref, _ = integrate.quad(lambda z: float(f(s * z + b)) * ref_he(k, z) * math.exp(-z * z / 2)
                                    / math.sqrt(2 * math.pi), -30, 30, points=pts, epsabs=1e-13,
                                    epsrel=1e-11, limit=400)
            assert abs(row[k] - ref) < 1e-9 * max(1.0, abs(ref))


def _z_scores(est, exact, se):
    return np.abs(est - exact) / se


@pytest.mark.parametrize("act", ["relu", "sigmoid"])
def test_population_vs_monte_carlo(rng, act):
    # T_k is an average of N iid terms y He_k(.), so (T_k - f_hat_k) / (sample std / sqrt(N)) is
    # asymptotically N(0, 1) (CLT; the per-sample std is estimated from the same samples, relative
    # error O(1/sqrt(N))). With about 60 such scores per test, P(max |z| > 5) < 60 * 6e-7: a failure
    # means a wrong formula, not bad luck. N = 2e5 keeps the test fast.
    W = rng.standard_normal((3, 3)) * np.array([[0.6], [1.0], [1.7]])
    net = nr.TwoLayerNetwork(W, [0.5, -0.3, 1.0], rng.standard_normal((2, 3)), [0.4, -0.2], activation=act)
    X, Y = nr.sample(net, nr.distributions.StandardGaussian(3), 200_000, rng=11)
    U = rng.standard_normal((4, 3))
    stats = [HermiteRankOneStatistic(U, list(range(7))),
             HermiteContractionStatistic(rng.standard_normal((3, 4, 3)))]
    SampleHermiteMoments((X, Y)).compute(stats)
    for stat in stats:
        z = _z_scores(stat.finalize(), stat.exact(net), stat.std_error())
        assert np.max(z) < 5.0, np.max(z)
    # dense T_4 and a d x d slice entrywise, with per-entry standard errors from per-sample tensors
    Xs, Ys = X[:50_000], Y[:50_000, 0]
    per_sample = Ys.reshape(-1, 1, 1, 1, 1) * h.hermite_tensor(4, Xs)
    se = per_sample.std(axis=0, ddof=1) / math.sqrt(len(Xs))
    pop = PopulationHermiteMoments(net, output=0)
    assert np.max(_z_scores(per_sample.mean(axis=0), pop.tensor(4), se)) < 5.0
    g = rng.standard_normal(3)
    sl = Ys[:, None, None] * h.hermite_vector_slice(Xs, 3, g)
    assert np.max(_z_scores(sl.mean(0), pop.vector_slice(3, g), sl.std(0, ddof=1) / math.sqrt(len(Xs)))) < 5.0


def test_front_ends_return_identical_shapes(rng):
    for p in (1, 2):
        net = relu_net(rng, p=p)
        X, Y = nr.sample(net, nr.distributions.StandardGaussian(3), 500, rng=2)
        sample, pop = HermiteMoments.from_samples((X, Y)), HermiteMoments.exact(net)
        calls = [("mean", ()), ("linear", ()), ("tensor", (3,)), ("tensor", (2, np.eye(3)[:, :2])),
                 ("rank_one", (np.eye(3), 4)), ("rank_one", (np.ones(3), [1, 2])), ("contract", (np.eye(3),)),
                 ("vector_slice", (5, np.ones(3))), ("vector_slice", (3, np.eye(3))),
                 ("matrix_slice", (6, np.eye(3))), ("matrix_slice", (4, np.ones((2, 3, 3)))),
                 ("partial_contract", (4, np.eye(3)[:2])), ("partial_contract", (3, np.ones((2, 1, 3))))]
        lead = () if p == 1 else (p,)
        expected = [(), (3,), (3, 3, 3), (2, 2), (3,), (2,), (), (9, 9), (3, 3, 3), (9, 9), (2, 3, 3),
                    (3, 3), (2, 3, 3)]
        for (name, args), shape in zip(calls, expected):
            a, b = getattr(sample, name)(*args), getattr(pop, name)(*args)
            assert np.shape(a) == np.shape(b) == lead + shape, (name, np.shape(a), np.shape(b))
        if p == 2:
            np.testing.assert_allclose(PopulationHermiteMoments(net, output=1).tensor(3), pop.tensor(3)[1])
            np.testing.assert_allclose(SampleHermiteMoments((X, Y), output=1).tensor(3), sample.tensor(3)[1])


# =========================================================================== validation


def test_input_validation(rng, data):
    X, Y = data
    net = relu_net(rng)
    with pytest.raises(InputError, match="order"):
        HermiteTensorStatistic(-1)
    with pytest.raises(InputError, match="integer"):
        HermiteTensorStatistic(2.5)
    with pytest.raises(InputError, match="integer"):
        h.hermite_1d(True, 1.0)
    with pytest.raises(InputError, match="NaN"):
        h.hermite_1d(2, [1.0, np.nan])
    with pytest.raises(InputError, match="needs targets"):
        HermiteTensorStatistic(2).update(X)
    with pytest.raises(InputError, match="columns"):
        HermiteRankOneStatistic(np.ones((2, 4)), 3).update(X, Y)
    with pytest.raises(InputError, match="square"):
        HermiteMatrixSliceStatistic(4, np.ones((3, 2)))
    with pytest.raises(InputError, match=">= 2"):
        HermiteMatrixSliceStatistic(1, np.eye(3))
    with pytest.raises(InputError, match="NaN"):
        HermiteVectorSliceStatistic(3, [1.0, np.inf, 0.0])
    with pytest.raises(InputError, match="contraction"):
        HermiteTensorStatistic(8).update(np.zeros((2, 30)), np.zeros(2))  # 30^8 entries
    with pytest.raises(InputError, match="at least 1"):
        HermiteTensorStatistic(2).finalize()
    with pytest.raises(InputError, match="output"):
        HermiteTensorStatistic(2, output=5).update(X, Y)
    with pytest.raises(InputError, match="output"):
        PopulationHermiteMoments(net, output=2)
    with pytest.raises(InputError, match="TwoLayerNetwork"):
        PopulationHermiteMoments("relu")
    with pytest.raises(InputError, match="inputs"):
        HermiteRankOneStatistic(np.ones((2, 5)), 3).exact(net)
    with pytest.raises(InputError, match="basis"):
        HermiteTensorStatistic(2, basis=np.ones(3))
    with pytest.raises(InputError, match="scale"):
        activation_hermite_coefficients("relu", 3, 0.0, -1.0)
    with pytest.raises(InputError, match="no samples"):
        hm = SampleHermiteMoments(iter([(X, Y)]))
        hm.tensor(1)
        hm.tensor(1)  # the one-shot iterator is exhausted
    with pytest.raises(InputError):
        HermiteTensorStatistic(2).update(X, Y).merge(HermiteTensorStatistic(2).update(X[:, :2], Y))
    with pytest.raises(AssumptionError, match="N\\(0, I_d\\)"):
        PopulationHermiteMoments(net, distribution=nr.distributions.Gaussian(2.0 * np.eye(3)))
    with pytest.raises(AssumptionError, match="Lemma 3.5"):
        PopulationHermiteMoments(net, distribution=nr.distributions.SymmetricMixture(np.ones((1, 3))))
    with pytest.raises(InputError, match="dimension"):
        PopulationHermiteMoments(net, distribution=nr.distributions.StandardGaussian(4))
    PopulationHermiteMoments(net, distribution=nr.distributions.StandardGaussian(3))  # accepted
    with pytest.raises(InputError, match="at most"):
        HermitePartialContractionStatistic(2, np.ones((3, 3)))
    with pytest.raises(InputError, match="MAX|<="):
        h.hermite_contract(X, np.ones((17, 3)))
