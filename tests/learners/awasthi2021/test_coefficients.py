"""Streaming moment kernels of the Awasthi et al. 2021 learner (internal: ``learners/_awasthi``).

The fast paths (distinct-moment sums by per-coordinate GEMMs, sign-split symmetric rank-k updates for
the full ``T_2``, GEMMs with samples along the columns, 4096-row chunks) must equal plain dense numpy
computations up to round-off, must not depend on the chunking (the split halves are fixed by the row
index), and must give the same bits for the same input and seed.

Tolerances: every quantity compared is a sum of ``N`` products of O(1) factors (standard normal
entries, weights of either sign), computed in a different order or grouping on each side, so the
difference is a few ulps per term times ``sqrt(N)`` at most: with ``N <= 10^4`` and moments of degree
``<= 6``, whose terms are ``<= ~10^4`` in magnitude only in the tails, ``1e-12`` relative to the largest
entry leaves ample room above round-off (~1e-14 observed) while catching any misplaced or missing term
(which changes an entry by O(1/N) relative >= 1e-4).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.errors import InputError
from nnrecover.learners.awasthi2021 import coefficients as co
from nnrecover.learners.awasthi2021.symtensor import Monomials, hermite_from_raw

RTOL = 1e-12


def _dense_moment(Z: np.ndarray, w: np.ndarray, r: int) -> np.ndarray:
    """``sum_n w_n z_n^{(x) r}`` by repeated outer products (the definition)."""
    cur = w.copy()[:, None]
    for _ in range(r):
        cur = (cur[:, :, None] * Z[:, None, :]).reshape(Z.shape[0], -1)
    return cur.sum(axis=0).reshape((Z.shape[1],) * r)


def _largest_sine(span: np.ndarray, P: np.ndarray) -> float:
    """Largest principal-angle sine between the orthonormal bases ``span`` and ``P``."""
    from scipy import linalg

    return float(np.sqrt(max(0.0, 1.0 - linalg.svdvals(span.T @ P).min() ** 2)))


def _close(a, b, rtol=RTOL):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(a, b, rtol=0, atol=rtol * max(1.0, float(np.abs(b).max())))


# ============================================================================ Monomials.add_moment_sums

@pytest.mark.parametrize("n, top", [(4, 2), (3, 3), (10, 2), (1, 2), (5, 1)])
def test_moment_sums_equal_dense_moments_and_gram_reference(n, top):
    # every distinct moment once (per-coordinate GEMMs) == definition == the Gram-matrix reference
    # (Monomials.weighted_gram + unpack, the path used before), signed weights
    rng = np.random.default_rng(n * 10 + top)
    N = 3000
    Z, w = rng.standard_normal((N, n)), rng.standard_normal(N)
    mono = Monomials(n, top)
    acc = mono.add_moment_sums(mono.new_moment_sums(), np.ascontiguousarray(Z.T), w)
    gram = mono.weighted_gram(mono.features(Z), w)
    for r in range(2 * top + 1):
        ref = _dense_moment(Z, w, r)
        _close(mono.raw_moment(acc, r), ref)
        _close(mono.unpack(gram, r), ref)


def test_moment_sums_store_each_distinct_moment_once():
    # the accumulator length is the number of multisets of degree <= 2 top: C(n + 2 top, 2 top)
    for n, top in [(10, 2), (4, 3), (3, 1)]:
        assert Monomials(n, top).n_sums == math.comb(n + 2 * top, 2 * top)


def test_moment_sums_are_additive_over_arbitrary_column_splits():
    # accumulating in pieces (strided column views, uneven sizes) equals one call: chunking independence
    rng = np.random.default_rng(1)
    Zt, w = rng.standard_normal((6, 5000)), rng.standard_normal(5000)
    mono = Monomials(6, 2)
    whole = mono.add_moment_sums(mono.new_moment_sums(), Zt, w)
    acc = mono.new_moment_sums()
    for a, b in [(0, 1), (1, 777), (777, 4096), (4096, 5000)]:
        mono.add_moment_sums(acc, Zt[:, a:b], w[a:b])
    _close(acc, whole)


def test_moment_sums_with_a_reused_workspace_equal_fresh_buffers():
    # the caller's scratch buffers (grown when a block is wider, column views when narrower) change no sum
    rng = np.random.default_rng(3)
    Zt, w = rng.standard_normal((5, 9000)), rng.standard_normal(9000)
    mono = Monomials(5, 2)
    fresh, reused, workspace = mono.new_moment_sums(), mono.new_moment_sums(), {}
    for a, b in [(0, 3000), (3000, 3100), (3100, 9000)]:
        mono.add_moment_sums(fresh, Zt[:, a:b], w[a:b])
        mono.add_moment_sums(reused, Zt[:, a:b], w[a:b], workspace=workspace)
    assert workspace["columns"] == 5900
    _close(reused, fresh)
    with pytest.raises(InputError, match="out must have shape"):
        mono.features_of_columns(Zt[:, :10], out=np.empty((mono.size, 11)))


def test_moment_sums_with_hermite_assembly_match_dense_hermite_tensors():
    # the streaming sums feed the matching-formula assembly: mean(w He_k(z)) for k <= 4
    from nnrecover.hermite import hermite_tensor

    rng = np.random.default_rng(2)
    Z, w = rng.standard_normal((4000, 3)), rng.standard_normal(4000)
    mono = Monomials(3, 2)
    acc = mono.add_moment_sums(mono.new_moment_sums(), np.ascontiguousarray(Z.T), w)
    raw = {r: mono.raw_moment(acc, r) / 4000 for r in range(5)}
    for k in range(2, 5):
        ref = np.einsum("n,n...->...", w, hermite_tensor(k, Z)) / 4000
        _close(hermite_from_raw(raw, k), ref)


def test_moment_sums_reject_bad_shapes():
    mono = Monomials(3, 2)
    Zt, w = np.zeros((3, 10)), np.zeros(10)
    with pytest.raises(InputError, match="acc"):
        mono.add_moment_sums(np.zeros(5), Zt, w)
    with pytest.raises(InputError, match="Zt"):
        mono.add_moment_sums(mono.new_moment_sums(), np.zeros((4, 10)), w)
    with pytest.raises(InputError, match="Zt"):
        mono.add_moment_sums(mono.new_moment_sums(), Zt, np.zeros(9))
    with pytest.raises(InputError, match="r must be"):
        mono.raw_moment(mono.new_moment_sums(), 5)


# ============================================================================ pass 1: RangeStatistic

@pytest.mark.parametrize("sign", ["mixed", "positive", "negative"])
@pytest.mark.parametrize("chunk", [999, 9000])
def test_full_range_statistic_equals_dense_weighted_gram(sign, chunk):
    # sign-split dsyrk (upper triangle) == X^T diag(y) X; one-signed y exercises the empty group; chunks of
    # 9000 rows span three blocks of SIGNED_GRAM_BLOCK rows, the last one short
    rng = np.random.default_rng(3)
    n = 10000
    X, y = rng.standard_normal((n, 7)), rng.standard_normal(n)
    y = {"mixed": y, "positive": np.abs(y), "negative": -np.abs(y)}[sign]
    assert chunk > 2 * co.SIGNED_GRAM_BLOCK or chunk < co.SIGNED_GRAM_BLOCK
    stat = co.RangeStatistic(7, method="full", omega=None, omega_cov=rng.standard_normal((7, 4)))
    nr.data.accumulate(stat, (X, y[:, None]), chunk_size=chunk)
    fin = stat.finalize()
    ref = (X.T * y) @ X / n - y.mean() * np.eye(7)
    _close(fin["t2"], ref)
    np.testing.assert_array_equal(fin["t2"], fin["t2"].T)
    _close(fin["t1"], y @ X / n)
    _close(stat.sx, X.sum(axis=0))
    _close(stat.sxx, (X ** 2).sum(axis=0))
    # the covariance probes: every FULL_RANGE_PROBE_STRIDE-th row of each chunk
    rows = np.concatenate([np.arange(s, min(s + chunk, n), co.FULL_RANGE_PROBE_STRIDE) for s in range(0, n, chunk)])
    assert stat.n_probe == rows.size < n
    _close(stat.sprobe, X[rows].T @ (X[rows] @ stat.omega_cov))


def test_full_range_statistic_with_a_linear_control_variate_weights_by_the_residual():
    # T_2 = mean(r (x x^T - I)) with r = y - c - t1 . x: the sample statistic exactly, T_1 and E[y^2] of y
    rng = np.random.default_rng(4)
    n, d = 5000, 6
    X, y = rng.standard_normal((n, d)), rng.standard_normal(n) + 2.0
    t1, c = rng.standard_normal(d), 1.5
    stat = co.RangeStatistic(d, method="full", omega=None, omega_cov=rng.standard_normal((d, 2)), center=c,
                             control_variate=(t1,))
    nr.data.accumulate(stat, (X, y[:, None]), chunk_size=1000)
    fin = stat.finalize()
    r = y - c - X @ t1
    _close(fin["t2"], (X.T * r) @ X / n - r.mean() * np.eye(d))
    _close(fin["t1"], y @ X / n)
    _close(stat.srr, r @ r)
    with pytest.raises(InputError, match="control_variate"):
        co.RangeStatistic(d, method="full", omega=None, omega_cov=np.zeros((d, 1)), control_variate=(t1[:3],))


def test_sketch_range_statistic_equals_dense_sketch():
    rng = np.random.default_rng(4)
    X, y = rng.standard_normal((3000, 12)), rng.standard_normal(3000)
    om, oc = rng.standard_normal((12, 5)), rng.standard_normal((12, 4))
    stat = co.RangeStatistic(12, method="sketch", omega=om, omega_cov=oc)
    nr.data.accumulate(stat, (X, y[:, None]), chunk_size=1234)
    fin = stat.finalize()
    _close(fin["t2_omega"], X.T @ (y[:, None] * (X @ om)) / 3000 - y.mean() * om)
    _close(stat.sprobe, X.T @ (X @ oc))


# ============================================================================ pass 2 and the whole estimate

def _teacher_data(d=8, m=3, N=20_000, seed=5):
    truth = nr.random_network(d, m, rng=seed, bias_range=(-1, 1))
    return nr.sample(truth, nr.distributions.StandardGaussian(d), N, rng=seed + 1)


def test_projected_moments_equal_dense_control_variate_estimate():
    # T_k = mean(r He_k(P^T x)) for k >= 3 with r = y - p(x): recomputed densely from X, Y and pass 1's p;
    # T_0, T_1, T_2 are pass 1's plain estimates (t0, t1, B = P^T T_2 P)
    from nnrecover.hermite import hermite_tensor

    X, Y = _teacher_data()
    c = co.estimate_coefficients((X, Y), 1, 3, rng=0, range_method="full", chunk_size=3000)
    P = c.basis
    stat1 = co.RangeStatistic(8, method="full", omega=None, omega_cov=np.zeros((8, 1)),
                              center=float(np.asarray(Y).reshape(-1)[:co.SPLIT_BLOCK].mean()))
    nr.data.accumulate(stat1, (X, Y))
    fin = stat1.finalize()
    B = P.T @ fin["t2"] @ P
    Z = X @ P
    r = np.asarray(Y).reshape(-1) - fin["t0"] - X @ fin["t1"] - 0.5 * (np.einsum("ni,ij,nj->n", Z, B, Z) - np.trace(B))
    N = X.shape[0]
    for k in (3, 4):
        ref = np.einsum("n,n...->...", r, hermite_tensor(k, Z)) / N
        _close(c.tensors[k], ref, rtol=1e-10)  # also absorbs the eigenvector round-off of P (cond ~1e2)
    _close(c.tensors[2], 0.5 * (B + B.T), rtol=1e-10)
    _close(c.t1, fin["t1"], rtol=1e-12)
    assert c.t0 == pytest.approx(fin["t0"], rel=1e-12)
    assert c.residual_second_moment == pytest.approx(float(r @ r) / N, rel=1e-10)


@pytest.mark.parametrize("order, method", [(1, "sketch"), (1, "full"), (1, "randomized"), (2, None)])
def test_estimate_does_not_depend_on_chunking_and_is_bit_reproducible(order, method):
    X, Y = _teacher_data(d=5 if order == 2 else 12, m=6 if order == 2 else 3, N=30_000)
    kw = {"rng": 7}
    if method:
        kw["range_method"] = method
    m = 6 if order == 2 else 3
    ref = co.estimate_coefficients((X, Y), order, m, **kw)
    again = co.estimate_coefficients((X, Y), order, m, **kw)
    for k in ref.tensors:  # same input, same seed, same chunking: same bits
        np.testing.assert_array_equal(ref.tensors[k], again.tensors[k])
        np.testing.assert_array_equal(ref.halves[0][k], again.halves[0][k])
    assert ref.noise == again.noise
    for chunk in (1000, 4096, 7777, 30_000):
        other = co.estimate_coefficients((X, Y), order, m, chunk_size=chunk, **kw)
        for k in ref.tensors:
            _close(other.tensors[k], ref.tensors[k])
            for h in (0, 1):  # the halves are fixed by the row index, not by the chunks
                _close(other.halves[h][k], ref.halves[h][k])
        _close(other.t1, ref.t1)
        assert other.noise == pytest.approx(ref.noise, rel=1e-10)


def test_split_halves_follow_row_blocks_for_any_chunking():
    # rows go to half A/B by blocks of SPLIT_BLOCK counted from the first row, whatever the chunks
    rng = np.random.default_rng(8)
    N, d = 3 * co.SPLIT_BLOCK + 123, 4
    X, y = rng.standard_normal((N, d)), rng.standard_normal(N)
    P = np.linalg.qr(rng.standard_normal((d, 2)))[0]
    half = (np.arange(N) // co.SPLIT_BLOCK) % 2
    for chunk in (500, co.SPLIT_BLOCK, 5000, N):
        stat = co.ProjectedMomentStatistic(d, P, 4, np.zeros((d, 1)), check_inputs=False)
        nr.data.accumulate(stat, (X, y[:, None]), chunk_size=chunk)
        assert stat.counts == [int((half == 0).sum()), int((half == 1).sum())]
        for h in (0, 1):
            sel = half == h
            _close(stat.mono.raw_moment(stat.sums[h], 4), _dense_moment(X[sel] @ P, y[sel], 4))


def test_chunk_rows_default_is_a_multiple_of_the_split_block():
    assert co._chunk_rows(None, 100) == co.SPLIT_BLOCK  # 4 MiB of X at d = 100
    assert co._chunk_rows(None, 10) % co.SPLIT_BLOCK == 0
    assert co._chunk_rows(None, 10) * 11 * 8 <= co.CHUNK_BYTES
    assert co._chunk_rows(None, 100_000) == 1024
    assert co._chunk_rows(777, 100) == 777
    for d in (1, 3, 50, 100, 500, 5000):
        rows = co._chunk_rows(None, d)
        assert 1024 <= rows <= 1 << 16
        assert rows < co.SPLIT_BLOCK or rows % co.SPLIT_BLOCK == 0



def test_power_iterations_converge_to_the_full_range():
    # d = 100, m = 10, N = 2e5: the sampling noise of T_2 (spectral norm ||E|| ~ sqrt(E[y^2] d / N)) is
    # comparable to the weakest |a_i phi(b_i)|, so a one-pass sketch, whose error grows with the
    # Frobenius norm of the noise (~ sqrt(d - m) ||E||), misses directions, while subspace iteration
    # with a Rayleigh-Ritz finish converges to the top-m eigenspace of the same sample T_2, i.e. to
    # the full eigendecomposition's basis (the error left after q iterations shrinks like
    # (||E|| / |lambda_m|)^q: one application of the symmetric T_2 per pass). Asserted: monotone
    # improvement and the 3-iteration basis within 0.1 of the full one's largest principal-angle sine
    # (measured 0.34 vs 0.31, one-pass 0.99: at ||E|| / |lambda_m| ~ 0.6 three iterations leave a
    # factor ~0.2 of the one-pass excess, 0.2 * 0.68 ~ 0.14 at worst).
    from scipy import linalg

    from nnrecover.learners.awasthi2021.coefficients import estimate_coefficients

    truth = nr.random_network(100, 10, rng=0, bias_range=(-1.5, 1.5))
    X, Y = nr.sample(truth, nr.distributions.StandardGaussian(100), 200_000, rng=1)
    span = linalg.orth(truth.hidden_weights.T)

    full = _largest_sine(span, estimate_coefficients((X, Y), 1, 10, range_method="full", rng=0).basis)
    sketch = [_largest_sine(span, estimate_coefficients((X, Y), 1, 10, range_method="sketch", power_iterations=q,
                                                 rng=0).basis) for q in (0, 1, 3)]
    assert sketch[0] > sketch[1] > sketch[2]
    assert sketch[2] < full + 0.1
    assert sketch[0] > full + 0.3  # why the iterations are needed
    # the default: the randomized range finder on a pilot of 65536 rows (of 2e5), with the control variate
    # in its iterations, then the check on the moment pass's rows; measured sine 0.13 against the full T_2's
    # 0.31 (its noise is that of y - p(x), not of y)
    coeffs = estimate_coefficients((X, Y), 1, 10, rng=0)
    info = coeffs.info
    assert info["range_method"] == "randomized"  # d = 100 > 2 (m + 10): "auto" takes the randomized finder
    assert info["pilot_rows"][0] == co.PILOT_MIN_ROWS and info["range_check"]["accepted"]
    assert info["pilot_statistical_sine"] <= info["exact_route_statistical_sine"]
    assert _largest_sine(span, coeffs.basis) < full + 0.05
    with pytest.raises(InputError, match="power_iterations"):
        estimate_coefficients((X[:20000], Y[:20000]), 1, 10, range_method="sketch", power_iterations=-1)


@pytest.mark.parametrize("order", [1, 2])
def test_dask_blocks_give_the_in_memory_groups_and_halves(order):
    # a dask source gets one fresh statistic per block, which counts its rows from 0: blocks are made
    # multiples of N_GROUPS * SPLIT_BLOCK rows, so the groups (hence halves, noise estimates and group
    # spreads) are those of the in-memory path even for a tiny chunk_size (before: chunk_size=1000 put
    # every row in half A and failed with "both halves of the data need at least one row")
    da = pytest.importorskip("dask.array")
    m = 3 if order == 1 else 5
    X, Y = _teacher_data(d=5 if order == 2 else 6, m=m, N=2 * co.N_GROUPS * co.SPLIT_BLOCK + 5000)
    ref = co.estimate_coefficients((X, Y), order, m, rng=3, chunk_size=1000)
    dk = co.estimate_coefficients((da.from_array(X, chunks=(7000, -1)), da.from_array(Y, chunks=7000)), order, m,
                                  rng=3, chunk_size=1000)
    for k in ref.tensors:
        _close(dk.tensors[k], ref.tensors[k])
        for h in (0, 1):
            _close(dk.halves[h][k], ref.halves[h][k])
    assert [n for _, n in dk.groups] == [n for _, n in ref.groups]
    for (tg, _), (tr, _) in zip(dk.groups, ref.groups):
        for k in tr:
            _close(tg[k], tr[k])
    assert co._moment_chunk_rows(1000, 6, object()) == 1000  # not dask: as asked


def test_group_std_matches_the_spread_of_independent_estimates():
    # group_std estimates the standard deviation of a statistic of T_k from its spread over the
    # N_GROUPS row groups; check it against the actual spread of the same statistic over 12 independent
    # data sets (the ratio of two sd estimates with 7 and 11 degrees of freedom: within [0.4, 2.5] with
    # probability > 0.99 for a correct estimate)
    truth = nr.random_network(6, 3, rng=2, bias_range=(-1, 1))
    u = truth.hidden_weights[0] / np.linalg.norm(truth.hidden_weights[0])
    vals, sds = [], []
    for rep in range(12):
        X, Y = nr.sample(truth, nr.distributions.StandardGaussian(6), 40_000, rng=100 + rep)
        c = co.estimate_coefficients((X, Y), 2, 3, rng=0)  # order 2: R^d coordinates, same u for every set
        vals.append(float(c.rank_one(3, u[None, :])[0]))
        sds.append(float(c.group_std(3, lambda T: co.contract_rank_one(T, u[None, :]))[0]))
    ratio = float(np.mean(sds)) / float(np.std(vals, ddof=1))
    assert 0.4 < ratio < 2.5


def test_centered_t2_is_the_same_estimate_up_to_a_mean_zero_term_and_less_noisy():
    # T_2 = mean((y - c)(x x^T - I)) + ... : for a constant c the estimates differ by
    # -c (mean(x x^T) - I), whose expectation is 0 (exact algebra: to round-off); with c ~ E[y] the
    # variance E[(y - c)^2 ...] loses the mean of y, which dominates it for a teacher whose unit with
    # b = 4.5 makes E[y] ~ 5.5: the spectral error against the exact T_2 must shrink (measured 2.7x; asserted 2x)
    W = np.linalg.qr(np.random.default_rng(0).standard_normal((10, 10)))[0][:4]
    truth = nr.TwoLayerNetwork(W, [4.5, 0.3, -0.4, 0.1], [[1.2, -1.0, 0.8, 1.1]])
    X, Y = nr.sample(truth, nr.distributions.StandardGaussian(10), 100_000, rng=4)
    c = float(Y.reshape(-1)[:co.SPLIT_BLOCK].mean())
    stats = {}
    for center in (0.0, c):
        st = co.RangeStatistic(10, method="full", omega=None, omega_cov=np.zeros((10, 1)), center=center)
        nr.data.accumulate(st, (X, Y))
        stats[center] = st.finalize()["t2"]
    _close(stats[c], stats[0.0] - c * (X.T @ X / X.shape[0] - np.eye(10)), rtol=1e-11)
    exact = co.exact_coefficients(truth, 1, basis="identity").tensor(2)
    err = {k: np.linalg.norm(v - exact, 2) for k, v in stats.items()}
    assert err[c] < err[0.0] / 2
    assert co.estimate_coefficients((X, Y), 1, 4, rng=0).info["t2_center"] == pytest.approx(c, rel=1e-12)


def test_rayleigh_ritz_basis_projects_the_sample_t2_exactly():
    # with an orthonormal test matrix Omega (the previous iterate), pass 1's sketch gives
    # B = Omega^T T_2 Omega exactly; the basis P = Omega V_m and t2_projected = P^T T_2 P must equal the
    # same products of the full sample T_2 (same rows, same centre) to round-off
    X, Y = _teacher_data(d=9, m=3, N=20_000)
    c = float(np.asarray(Y).reshape(-1)[:co.SPLIT_BLOCK].mean())
    full = co.RangeStatistic(9, method="full", omega=None, omega_cov=np.zeros((9, 1)), center=c)
    nr.data.accumulate(full, (X, Y))
    T2 = full.finalize()["t2"]
    Omega = np.linalg.qr(np.random.default_rng(1).standard_normal((9, 6)))[0]
    rr = co.RangeStatistic(9, method="sketch", omega=Omega, omega_cov=np.zeros((9, 1)), rayleigh_ritz=True,
                           center=c)
    nr.data.accumulate(rr, (X, Y))
    P, info = rr.basis(3)
    _close(P.T @ P, np.eye(3), rtol=1e-13)
    _close(info["t2_projected"], P.T @ T2 @ P, rtol=1e-11)
    lam = np.linalg.eigvalsh(Omega.T @ T2 @ Omega)
    top = lam[np.argsort(-np.abs(lam))[:3]]
    _close(np.sort(np.linalg.eigvalsh(info["t2_projected"])), np.sort(top), rtol=1e-11)


def test_learner_validates_the_new_options():
    X, Y = _teacher_data(d=6, m=3, N=5_000)
    for bad in ({"control_variate": "yes"}, {"range_method": "nystrom"}):
        with pytest.raises(InputError, match=next(iter(bad))):
            nr.learners.HermiteTensorLearner(3, refine=False, min_n=1000, **bad).fit(X, Y)


def test_subspace_iterations_stop_at_the_statistical_accuracy():
    # d = 200, m = 5, N = 6e4: the iterations stop once rho_j * change_j <= e_j (rho_j = ||E|| / |lambda_m|,
    # e_j = s sqrt(d / N) / |lambda_m| the sine error of the sample T_2's own top-m eigenspace); to first
    # order the error then is at most e_j plus the removable part, itself <= e_j, so the largest sine to
    # the true span must be <= 2 e_j (measured 0.072 against e = 0.065; on two other teachers 0.145 / 0.135
    # and 0.099 / 0.097). A budget of one iteration stops on it and is worse; the residual-sketching
    # iterations also beat the full plain T_2's eigenvectors here (measured 0.35: its noise has the
    # variance of y, not of the residual). The sketch reads the first half of the rows only.
    from scipy import linalg

    from nnrecover.learners.awasthi2021.coefficients import estimate_coefficients

    truth = nr.random_network(200, 5, rng=0, bias_range=(-1, 1))
    X, Y = nr.sample(truth, nr.distributions.StandardGaussian(200), 60_000, rng=1)
    span = linalg.orth(truth.hidden_weights.T)

    conv = estimate_coefficients((X, Y), 1, 5, range_method="sketch", power_iterations=6, rng=0)
    records = conv.info["range_iterations"]
    assert conv.info["range_stop"] == "converged" and len(records) < 6
    assert conv.info["power_iterations"] == len(records)
    assert conv.info["sketch_rows"] == 30_000  # the sketch seeds the iterations from the first half
    last = records[-1]
    assert last["noise_ratio"] < 1 and last["noise_ratio"] * last["change"] <= last["statistical_sine"]
    assert _largest_sine(span, conv.basis) <= 2 * last["statistical_sine"]
    one = estimate_coefficients((X, Y), 1, 5, range_method="sketch", power_iterations=1, rng=0)
    assert one.info["range_stop"] == "max_iter" and _largest_sine(span, one.basis) > _largest_sine(span, conv.basis)
    full = estimate_coefficients((X, Y), 1, 5, range_method="full", rng=0)
    assert _largest_sine(span, conv.basis) < _largest_sine(span, full.basis)


def test_randomized_range_finder_equals_the_full_route_in_population():
    # f^_2 has rank m, so the randomized range finder's Ritz vectors are its eigenvectors: the same basis,
    # tensors and learned network as the d x d eigendecomposition, to round-off
    truth = nr.random_network(60, 6, rng=3, bias_range=(-1, 1))
    full = co.exact_coefficients(truth, 1, 6, range_method="full")
    rand = co.exact_coefficients(truth, 1, 6, range_method="randomized", rng=5)
    _close(rand.basis, full.basis, rtol=1e-12)
    for k in (2, 3, 4):
        np.testing.assert_allclose(rand.tensors[k], full.tensors[k], rtol=0, atol=1e-12)
    nets = [nr.learners.HermiteTensorLearner(6, refine=False, range_method=meth, random_state=0)
            .fit_population(truth).network_ for meth in ("full", "randomized", "auto")]
    for net in nets:
        assert nr.metrics.parameter_error(net, truth)["max_unit_error"] < 1e-12
    assert nr.metrics.parameter_error(nets[1], nets[0])["max_unit_error"] < 1e-12
    with pytest.raises(InputError, match="range_method"):
        co.exact_coefficients(truth, 1, 6, range_method="lanczos")


def test_range_check_statistic_is_mergeable_and_matches_dense_sums():
    # the moment pass of the randomized route: T_0, T_1 of all rows and S = sum r x z^T over row group 0,
    # the same for any chunking and when two parts are accumulated apart and merged (dask, chunk workers)
    rng = np.random.default_rng(4)
    N, d, n = 5 * co.SPLIT_BLOCK * co.N_GROUPS // 4 + 77, 7, 3
    X, y = rng.standard_normal((N, d)), rng.standard_normal(N)
    P = np.linalg.qr(rng.standard_normal((d, n)))[0]
    t1, B = 0.1 * rng.standard_normal(d), np.diag([0.3, -0.2, 0.1])
    kw = dict(check_inputs=False, control_variate=(0.2, t1, B), direct_t2=True, range_check=True)
    Z = X @ P
    r = y - (0.2 - 0.5 * np.trace(B)) - X @ t1 - 0.5 * np.einsum("ni,ij,nj->n", Z, B, Z)
    sel = (np.arange(N) // co.SPLIT_BLOCK) % co.N_GROUPS == co.RANGE_CHECK_GROUP
    S_ref = (X[sel] * r[sel, None]).T @ Z[sel]
    for chunk in (999, co.SPLIT_BLOCK, N):
        stat = co.ProjectedMomentStatistic(d, P, 4, np.zeros((d, 1)), **kw)
        nr.data.accumulate(stat, (X, y[:, None]), chunk_size=chunk)
        _close(stat.s_range, S_ref, rtol=1e-12)
        assert stat.n_check == int(sel.sum())
        t0_all, t1_all, _, _ = stat.low_orders()
        assert t0_all == pytest.approx(y.mean(), rel=1e-12)
        _close(t1_all, y @ X / N, rtol=1e-12)
    cut = 3 * co.SPLIT_BLOCK  # a part boundary on a block boundary: the groups continue across it
    a = co.ProjectedMomentStatistic(d, P, 4, np.zeros((d, 1)), **kw)
    nr.data.accumulate(a, (X[:cut], y[:cut, None]))
    b = co.ProjectedMomentStatistic(d, P, 4, np.zeros((d, 1)), **kw)
    nr.data.accumulate(b, (X[cut:], y[cut:, None]))
    S_parts, n_parts = a.s_range + b.s_range, a.n_check + b.n_check  # each part deals its own groups
    a.merge(b)
    assert a.n == N and a.n_check == n_parts
    _close(a.s_range, S_parts, rtol=1e-14)
    _close(a.low_orders()[1], y @ X / N, rtol=1e-12)
    with pytest.raises(InputError, match="range_check"):
        co.ProjectedMomentStatistic(d, None, 4, np.zeros((d, 1)), range_check=True)


def test_randomized_pilot_grows_until_as_accurate_as_the_full_route(monkeypatch):
    # a pilot of 4096 rows of 2e5 is too small (its statistical sine above the full T_2's on all rows): the
    # iterations continue from its basis on more rows, until the pilot's error is at most the full route's
    from scipy import linalg

    monkeypatch.setattr(co, "PILOT_MIN_ROWS", co.SPLIT_BLOCK)
    monkeypatch.setattr(co, "PILOT_FRACTION", 64)
    truth = nr.random_network(60, 5, rng=2, bias_range=(-1, 1))
    X, Y = nr.sample(truth, nr.distributions.StandardGaussian(60), 200_000, rng=3)
    c = co.estimate_coefficients((X, Y), 1, 5, range_method="randomized", rng=0)
    info = c.info
    assert info["pilot_rows"][0] == co.SPLIT_BLOCK and len(info["pilot_rows"]) > 1
    assert info["pilot_rows"] == sorted(info["pilot_rows"]) and info["pilot_rows"][-1] <= 200_000
    assert info["pilot_statistical_sine"] <= info["exact_route_statistical_sine"] or info["pilot_rows"][-1] == 200_000
    assert info["range_check"]["accepted"]
    span = linalg.orth(truth.hidden_weights.T)
    full = co.estimate_coefficients((X, Y), 1, 5, range_method="full", rng=0)
    assert _largest_sine(span, c.basis) < _largest_sine(span, full.basis) + 0.05


def test_randomized_pilot_that_cannot_see_the_range_falls_back_to_the_full_t2(monkeypatch):
    # 512 rows at d = 150 cannot tell T_2's range from noise (noise ratio >= 1): the full T_2 of all rows
    # is formed instead, weighted by the residual of the pilot's linear part, which leaves T_2's expectation
    # as it is and lowers its noise: a basis no worse than the plain full route's
    from scipy import linalg

    monkeypatch.setattr(co, "PILOT_MIN_ROWS", 512)
    monkeypatch.setattr(co, "PILOT_FRACTION", 1000)
    truth = nr.random_network(150, 5, rng=4, bias_range=(-1, 1))
    X, Y = nr.sample(truth, nr.distributions.StandardGaussian(150), 60_000, rng=5)
    c = co.estimate_coefficients((X, Y), 1, 5, range_method="randomized", rng=0)
    assert c.info["pilot_failed"]["rows"] == 512 and c.info["pilot_failed"]["noise_ratio"] >= 1
    assert c.info["range_method"] == "full" and c.n_samples == 60_000
    full = co.estimate_coefficients((X, Y), 1, 5, range_method="full", rng=0)
    span = linalg.orth(truth.hidden_weights.T)
    assert _largest_sine(span, c.basis) <= _largest_sine(span, full.basis) + 0.01
    _close(c.t1, full.t1, rtol=1e-12)
