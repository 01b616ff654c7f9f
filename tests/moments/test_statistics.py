"""Tests of the moment engine (data sources, accumulate, progress) and the generic statistics."""

from __future__ import annotations

import io
import math
import sys
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, special

import nnrecover as nr
from nnrecover.distributions import Gaussian, StandardGaussian, SymmetricMixture
from nnrecover.errors import InputError
from nnrecover.data import progress
from nnrecover.moments.base import Statistic
from nnrecover.data import accumulate
from nnrecover.data import (DataInfo, DataSource, as_data_source, default_chunk_rows, describe_data,
                                      iterate_chunks)
from nnrecover.moments.statistics import (Covariance, CovarianceStatistic, MeanStatistic, SecondMoment,
                                          ThirdMomentContraction, WeightedSecondMoment,
                                          input_deviation_from_standard)

D, P, N = 3, 2, 300
G_DIRS = np.array([[0.6, -0.8, 0.0], [0.1, 0.2, 0.3]])


def _data(n=N, d=D, p=P, seed=7):
    gen = np.random.default_rng(seed)
    X = gen.standard_normal((n, d)) + 0.5
    Y = np.tanh(X @ gen.standard_normal((d, p))) + 0.1 * gen.standard_normal((n, p))
    return X, Y


X0, Y0 = _data()


def _fresh():
    return [MeanStatistic(), SecondMoment(), CovarianceStatistic(), WeightedSecondMoment(),
            ThirdMomentContraction(G_DIRS)]


def _arrays(stat):
    """The finalized value of a statistic as a flat list of arrays."""
    v = stat.finalize()
    if isinstance(v, np.ndarray):
        return [v]
    return [np.asarray(getattr(v, f.name)) for f in v.__dataclass_fields__.values()
            if isinstance(getattr(v, f.name), np.ndarray)]


def _assert_same(stats_a, stats_b, rtol=1e-12):
    for a, b in zip(stats_a, stats_b):
        assert a.n == b.n
        for u, v in zip(_arrays(a), _arrays(b)):
            scale = max(1.0, float(np.max(np.abs(v)))) if v.size else 1.0
            np.testing.assert_allclose(u, v, rtol=0, atol=rtol * scale)


REFERENCE = accumulate(_fresh(), (X0, Y0), chunk_size=N)  # one chunk: the in-memory result


# ------------------------------------------------------------------------------- basic correctness

def test_statistics_equal_direct_numpy_formulas():
    mean, second, cov, m2, m3 = (s.finalize() for s in REFERENCE)
    np.testing.assert_allclose(mean.x, X0.mean(0), rtol=1e-13)
    np.testing.assert_allclose(mean.y, Y0.mean(0), rtol=1e-13)
    np.testing.assert_allclose(second.xx, X0.T @ X0 / N, rtol=1e-13)
    np.testing.assert_allclose(second.yx, Y0.T @ X0 / N, rtol=1e-13)
    np.testing.assert_allclose(second.yy, Y0.T @ Y0 / N, rtol=1e-13)
    full = np.cov(np.hstack([X0, Y0]).T)  # ddof = 1
    np.testing.assert_allclose(cov.xx, full[:D, :D], rtol=1e-12)
    np.testing.assert_allclose(cov.yx, full[D:, :D], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(cov.yy, full[D:, D:], rtol=1e-12)
    want_m2 = np.einsum("nj,na,nb->jab", Y0, X0, X0) / N
    np.testing.assert_allclose(m2, want_m2, rtol=1e-12)
    want_m3 = np.einsum("nj,nl,na,nb->jlab", Y0, X0 @ G_DIRS.T, X0, X0) / N
    np.testing.assert_allclose(m3, want_m3, rtol=1e-12, atol=1e-15)
    single = ThirdMomentContraction(G_DIRS[0]).update(X0, Y0).finalize()
    np.testing.assert_allclose(single, want_m3[:, 0], rtol=1e-12, atol=1e-15)


def test_covariance_merge_is_numerically_stable_for_a_large_mean():
    # With mean 1e6 and unit variance the naive E[x x^T] - E[x] E[x]^T loses ~ eps * 1e12 = 1e-4;
    # Chan's pairwise update keeps the error at about eps * 1e6 * sqrt(n) relative to the variance.
    gen = np.random.default_rng(3)
    X = 1e6 + gen.standard_normal((4000, 2))
    stat = accumulate(CovarianceStatistic(ddof=1), (X, None), chunk_size=37)
    np.testing.assert_allclose(stat.finalize().xx, np.cov(X.T), rtol=0, atol=1e-8)
    np.testing.assert_allclose(stat.finalize().mean_x, X.mean(0), rtol=1e-13)  # ~ eps per merge


# ------------------------------------------------------------------------------- chunking and merging

@settings(max_examples=40)
@given(st.lists(st.integers(min_value=1, max_value=120), min_size=1, max_size=40))
def test_any_chunking_of_a_stream_gives_the_same_statistics(sizes):
    cuts = np.cumsum(sizes)
    cuts = cuts[cuts < N]
    bounds = [0, *cuts.tolist(), N]
    chunks = [(X0[a:b], Y0[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    _assert_same(accumulate(_fresh(), chunks), REFERENCE)


@settings(max_examples=25)
@given(st.integers(min_value=1, max_value=N + 5))
def test_any_chunk_size_of_an_array_gives_the_same_statistics(chunk_size):
    _assert_same(accumulate(_fresh(), (X0, Y0), chunk_size=chunk_size), REFERENCE)


@settings(max_examples=10)
@given(st.integers(min_value=1, max_value=2500))
def test_sample_stream_chunk_size_does_not_change_statistics(chunk_size):
    net = nr.random_network(D, 2, P, rng=1, bias_range=(-1, 1))
    dist = StandardGaussian(D)
    ref = accumulate(_fresh(), nr.sample(net, dist, 2000, rng=5))
    stream = nr.sample_stream(net, dist, 2000, chunk_size=chunk_size, rng=5)
    _assert_same(accumulate(_fresh(), stream), ref)


def test_merge_is_associative_and_empty_is_its_identity():
    parts = [(X0[:70], Y0[:70]), (X0[70:71], Y0[70:71]), (X0[71:], Y0[71:])]
    a, b, c = ([s.update(*part) for s in _fresh()] for part in parts)
    left = [s.empty_like().merge(x).merge(y).merge(z) for s, x, y, z in zip(_fresh(), a, b, c)]
    right_inner = [y.empty_like().merge(y).merge(z) for y, z in zip(b, c)]
    right = [x.empty_like().merge(x).merge(yz) for x, yz in zip(a, right_inner)]
    _assert_same(left, REFERENCE)
    _assert_same(right, REFERENCE)
    ident = [s.empty_like().merge(r).merge(r.empty_like()) for s, r in zip(_fresh(), REFERENCE)]
    _assert_same(ident, REFERENCE)


def test_merge_refuses_a_different_statistic_or_shape():
    with pytest.raises(InputError, match="cannot merge"):
        MeanStatistic().merge(SecondMoment())
    a = MeanStatistic().update(X0, Y0)
    b = MeanStatistic().update(X0[:, :2], Y0)
    with pytest.raises(InputError, match="n_inputs=3"):
        a.merge(b)
    t = ThirdMomentContraction(G_DIRS).update(X0, Y0)
    with pytest.raises(InputError, match="different directions"):
        t.merge(ThirdMomentContraction(G_DIRS + 1).update(X0, Y0))


def test_accumulate_adds_to_existing_contents_and_keeps_identity():
    stat = MeanStatistic().update(X0[:100], Y0[:100])
    out = accumulate(stat, (X0[100:], Y0[100:]))
    assert out is stat
    _assert_same([stat], REFERENCE[:1])


# ------------------------------------------------------------------------------- data sources

def test_memmap_source_reads_chunks_and_matches_in_memory(tmp_path):
    np.save(tmp_path / "X.npy", X0)
    np.save(tmp_path / "Y.npy", Y0)
    Xm = np.load(tmp_path / "X.npy", mmap_mode="r")
    Ym = np.load(tmp_path / "Y.npy", mmap_mode="r")
    assert describe_data(Xm, Ym) == DataInfo("memmap", N, D, P, True)
    _assert_same(accumulate(_fresh(), (Xm, Ym), chunk_size=64), REFERENCE)
    # paths to .npy files are memory-mapped the same way
    _assert_same(accumulate(_fresh(), (str(tmp_path / "X.npy"), tmp_path / "Y.npy"), chunk_size=50), REFERENCE)
    with pytest.raises(InputError, match=r"\.npy"):
        as_data_source(str(tmp_path / "X.csv"))
    with pytest.raises(InputError, match="does not exist"):
        as_data_source(str(tmp_path / "missing.npy"))


def test_memmap_pass_memory_is_bounded_by_the_chunk(tmp_path):
    # n d = 200_000 x 10 doubles = 16 MB on disk; a pass with 1000-row chunks (80 kB) must not
    # allocate anything close to the file size (numpy reports its allocations to tracemalloc).
    n, d = 200_000, 10
    mm = np.lib.format.open_memmap(tmp_path / "big.npy", mode="w+", dtype=np.float64, shape=(n, d))
    gen = np.random.default_rng(0)
    for start in range(0, n, 50_000):
        mm[start:start + 50_000] = gen.standard_normal((50_000, d))
    mm.flush()
    del mm
    Xm = np.load(tmp_path / "big.npy", mmap_mode="r")
    tracemalloc.start()
    try:
        stat = accumulate(SecondMoment(), (Xm, None), chunk_size=1000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stat.n == n
    assert peak < 2_000_000, f"peak traced memory {peak} bytes for a 16 MB memmap"


class _RecordingArray:
    """A sliceable array-like that records how many rows each read asks for."""

    def __init__(self, a):
        self.a, self.shape, self.dtype, self.reads = a, a.shape, a.dtype, []

    def __getitem__(self, key):
        part = self.a[key]
        self.reads.append(part.shape[0])
        return part


def test_generic_array_like_is_read_in_chunks_only():
    rec = _RecordingArray(X0)
    accumulate(SecondMoment(), (rec, Y0), chunk_size=40)
    assert rec.reads and max(rec.reads) <= 40 and sum(rec.reads) == N


def test_list_of_chunks_and_reiterable_streams():
    chunks = [(X0[i:i + 100], Y0[i:i + 100]) for i in range(0, N, 100)]
    src = as_data_source(chunks)
    assert src.info == DataInfo("iterable", N, D, P, True)
    _assert_same(accumulate(_fresh(), src), REFERENCE)
    _assert_same(accumulate(_fresh(), src), REFERENCE)  # re-iterable: a second pass sees the same data
    Xc, Yc = src.to_arrays()
    np.testing.assert_array_equal(Xc, X0)
    np.testing.assert_array_equal(Yc, Y0)


def test_sample_stream_is_described_and_equals_sample():
    net = nr.random_network(4, 3, 1, rng=2)
    dist = StandardGaussian(4)
    stream = nr.sample_stream(net, dist, 1000, chunk_size=300, rng=9)
    assert describe_data(stream) == DataInfo("stream", 1000, 4, 1, True)
    X, Y = nr.sample(net, dist, 1000, rng=9)
    a = accumulate(SecondMoment(), stream).finalize()
    b = accumulate(SecondMoment(), (X, Y)).finalize()
    np.testing.assert_allclose(a.yx, b.yx, rtol=1e-13)
    # a stream's chunks honour its chunk size (bounded memory): 300, 300, 300, 100
    assert [c[0].shape[0] for c in iterate_chunks(stream)] == [300, 300, 300, 100]


def test_one_pass_generator_can_be_peeked_and_read_exactly_once():
    gen = ((X0[i:i + 64], Y0[i:i + 64]) for i in range(0, N, 64))
    assert describe_data(gen) == DataInfo("iterator", None, None, None, False)  # not advanced
    src = as_data_source(gen)
    assert src.info == DataInfo("iterator", None, D, P, False)  # looked at the first chunk ...
    Xp, _ = src.peek()
    np.testing.assert_array_equal(Xp, X0[:64])
    _assert_same(accumulate(_fresh(), src), REFERENCE)  # ... and still passes it on
    with pytest.raises(InputError, match="already consumed"):
        accumulate(MeanStatistic(), src)
    with pytest.raises(InputError, match="more than once"):
        as_data_source(iter([(X0, Y0)])).require_reiterable("the test algorithm")


def test_fit_style_arguments_are_normalised():
    assert as_data_source(X0, Y0).info == DataInfo("arrays", N, D, P, True)
    assert as_data_source(X0).info.n_outputs == 0
    assert as_data_source(X0, Y0[:, 0]).info.n_outputs == 1
    assert as_data_source((X0, Y0)).info == as_data_source(X0, Y0).info
    assert as_data_source(X0.tolist(), Y0.tolist()).info == DataInfo("arrays", N, D, P, True)
    src = as_data_source(X0, Y0)
    assert as_data_source(src) is src
    Xp, Yp = src.peek()
    assert Yp.shape[1] == P and Xp.shape[1] == D
    with pytest.raises(InputError, match="needs targets"):
        as_data_source(X0).require_targets("the test algorithm")
    # without targets, every statistic that needs none still works; Y has p = 0 columns
    m = accumulate(MeanStatistic(), X0).finalize()
    assert m.y.shape == (0,)
    np.testing.assert_allclose(m.x, X0.mean(0), rtol=1e-13)


def test_default_chunk_rows_bounds_chunk_memory():
    assert default_chunk_rows(10) == 65536
    assert default_chunk_rows(1000) * 1000 * 8 <= 8 << 20
    assert default_chunk_rows(10**7) == 1024
    sizes = [x.shape[0] for x, _ in iterate_chunks((np.zeros((5000, 2000)), None))]
    assert max(sizes) == default_chunk_rows(2000) and sum(sizes) == 5000


# ------------------------------------------------------------------------------- validation

@pytest.mark.parametrize("data, pattern", [
    ((X0, Y0[:-1]), "different numbers of samples"),
    ((X0[:, 0], Y0), "2-D"),
    ((X0[:, :, None], Y0), "2-D"),
    ((X0, Y0[:, :, None]), r"shape \(n,\) or \(n, p\)"),
    ((X0.astype(str), Y0), "numeric"),
    ([(X0[:5], Y0[:5]), (X0[5:], Y0[5:4])], "different numbers of samples"),
    ([(X0[:5], Y0[:5]), (X0[5:, :2], Y0[5:])], "same columns"),
    ([(X0[:5], Y0[:5]), (X0[5:], None)], "same columns"),
    ([(X0[:5], Y0[:5]), X0[5:]], "pairs"),
    (None, "X is None"),
    (42, "iterable of"),
])
def test_bad_data_is_refused_with_a_clear_message(data, pattern):
    with pytest.raises(InputError, match=pattern):
        accumulate(MeanStatistic(), data)


def test_nan_and_inf_are_reported_with_their_rows():
    X = X0.copy()
    X[150, 1] = np.nan
    with pytest.raises(InputError, match=r"rows 100:200.*NaN"):
        accumulate(MeanStatistic(), (X, Y0), chunk_size=100)
    Y = Y0.copy()
    Y[3, 0] = np.inf
    with pytest.raises(InputError, match=r"chunk 0.*infinite"):
        accumulate(MeanStatistic(), [(X0[:10], Y[:10])])
    with pytest.raises(InputError, match="NaN"):
        MeanStatistic().update(X)


def test_argument_errors():
    with pytest.raises(InputError, match="leave Y=None"):
        as_data_source([(X0, Y0)], Y0)
    with pytest.raises(InputError, match="chunk_size"):
        accumulate(MeanStatistic(), (X0, Y0), chunk_size=0)
    with pytest.raises(InputError, match="progress"):
        accumulate(MeanStatistic(), (X0, Y0), progress="yes")
    with pytest.raises(InputError, match="Statistic"):
        accumulate([], (X0, Y0))
    with pytest.raises(InputError, match="at least 1 samples"):
        MeanStatistic().finalize()
    with pytest.raises(InputError, match="at least 2 samples"):
        CovarianceStatistic(ddof=1).update(X0[:1]).finalize()
    with pytest.raises(InputError, match="ddof"):
        CovarianceStatistic(ddof=-1)
    with pytest.raises(InputError, match="needs targets"):
        WeightedSecondMoment().update(X0)
    with pytest.raises(InputError, match="directions have length"):
        ThirdMomentContraction(np.ones(2)).update(X0, Y0)
    with pytest.raises(InputError, match="directions must have shape"):
        ThirdMomentContraction(np.ones((2, 2, 2)))


# ------------------------------------------------------------------------------- progress bars

class _FakeTTY(io.StringIO):
    def isatty(self):
        return True


def _slow_stream():
    return [(X0[i:i + 50], Y0[i:i + 50]) for i in range(0, N, 50)]


def test_progress_bar_is_off_when_stderr_is_not_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr(progress, "PROGRESS_DELAY", 0.0)
    accumulate(MeanStatistic(), _slow_stream())  # progress=None, pytest's stderr is not a TTY
    assert capsys.readouterr().err == ""
    accumulate(MeanStatistic(), _slow_stream(), progress=True)  # explicitly requested: shown anyway
    assert "rows" in capsys.readouterr().err


def test_progress_bar_on_a_terminal_unless_disabled(monkeypatch):
    monkeypatch.setattr(progress, "PROGRESS_DELAY", 0.0)
    tty = _FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    accumulate(MeanStatistic(), (X0, Y0), chunk_size=50)
    assert "rows" in tty.getvalue() and "MeanStatistic" in tty.getvalue()
    quiet = _FakeTTY()
    monkeypatch.setattr(sys, "stderr", quiet)
    accumulate(MeanStatistic(), (X0, Y0), chunk_size=50, progress=False)
    assert quiet.getvalue() == ""


# ------------------------------------------------------------------------------- exact population forms

def _norm_pdf(t):
    return np.exp(-t * t / 2) / math.sqrt(2 * math.pi)


def test_exact_forms_reduce_to_lemma_3_5_for_standard_gaussian_relu():
    # Awasthi et al. Lemma 3.5 written out with scipy's ndtr (independent of activations.py):
    # E[y] = sum a_i (b Phi(b) + phi(b)) + c, E[y x] = sum a_i Phi(b_i) w_i,
    # E[y (x x^T - I)] = sum a_i phi(b_i) w_i w_i^T, E[y He_3(x)[., ., g]] = sum a_i (-b_i phi(b_i)) (w_i.g) w_i w_i^T.
    net = nr.random_network(5, 4, 2, rng=3, bias_range=(-1.5, 1.5), output_bias_range=(-1, 1))
    W, b, A, c = net.hidden_weights, net.hidden_bias, net.output_weights, net.output_bias
    dist = StandardGaussian(5)
    g = np.array([0.3, -1.0, 0.2, 0.5, 0.1])
    Ey = A @ (b * special.ndtr(b) + _norm_pdf(b)) + c
    Eyx = A @ (special.ndtr(b)[:, None] * W)
    He2 = np.einsum("ji,i,ia,ib->jab", A, _norm_pdf(b), W, W)
    He3g = np.einsum("ji,i,ia,ib->jab", A, -b * _norm_pdf(b) * (W @ g), W, W)
    np.testing.assert_allclose(MeanStatistic.exact(net, dist).y, Ey, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(SecondMoment.exact(net, dist).yx, Eyx, rtol=1e-14, atol=1e-15)
    M2 = WeightedSecondMoment.exact(net, dist)
    np.testing.assert_allclose(M2 - Ey[:, None, None] * np.eye(5), He2, rtol=1e-13, atol=1e-15)
    M3 = ThirdMomentContraction.exact(net, dist, g)
    eye = np.eye(5)
    He3_from_M3 = (M3 - (Eyx @ g)[:, None, None] * eye - np.einsum("ja,b->jab", Eyx, g)
                   - np.einsum("a,jb->jab", g, Eyx))
    np.testing.assert_allclose(He3_from_M3, He3g, rtol=1e-13, atol=1e-14)
    cov = CovarianceStatistic.exact(net, dist)
    np.testing.assert_allclose(cov.yx, Eyx, rtol=1e-14, atol=1e-15)
    np.testing.assert_array_equal(MeanStatistic.exact(net).y, MeanStatistic.exact(net, dist).y)  # default N(0, I)
    assert SecondMoment.exact(net, dist).yy is None


def test_exact_linear_network_under_a_general_gaussian():
    # identity activation: y = A (W x + b) + c, so E[y x^T] = A W E[x x^T] + (A b + c) mu^T and
    # E[y_j x x^T] = sum_a (A W)_ja E[x_a x x^T] + (A b + c)_j E[x x^T], with Gaussian third moments
    # E[x_a x_b x_c] = mu_a mu_b mu_c + mu_a S_bc + mu_b S_ac + mu_c S_ab.
    gen = np.random.default_rng(4)
    d = 3
    L = gen.standard_normal((d, d))
    S = L @ L.T + 0.5 * np.eye(d)
    mu = gen.standard_normal(d)
    dist = Gaussian(S, mean=mu)
    net = nr.TwoLayerNetwork(gen.standard_normal((2, d)), gen.standard_normal(2), gen.standard_normal((2, 2)),
                             gen.standard_normal(2), activation="identity")
    AW = net.output_weights @ net.hidden_weights
    const = net.output_weights @ net.hidden_bias + net.output_bias
    M = S + np.outer(mu, mu)
    T = (np.einsum("a,b,c->abc", mu, mu, mu) + np.einsum("a,bc->abc", mu, S) + np.einsum("b,ac->abc", mu, S)
         + np.einsum("c,ab->abc", mu, S))
    np.testing.assert_allclose(SecondMoment.exact(net, dist).yx, AW @ M + np.outer(const, mu), rtol=1e-13)
    np.testing.assert_allclose(WeightedSecondMoment.exact(net, dist),
                               np.einsum("ja,abc->jbc", AW, T) + const[:, None, None] * M, rtol=1e-12, atol=1e-12)
    # fourth Gaussian moment contracted with g: E[(g.x) x_a x_b x_c] via Isserlis on x = mu + x0
    g = gen.standard_normal(d)
    samples = _isserlis_third_contraction(mu, S, g)
    want = np.einsum("ja,abc->jbc", AW, samples) + const[:, None, None] * np.einsum("abc,a->bc", T, g)
    np.testing.assert_allclose(ThirdMomentContraction.exact(net, dist, g), want, rtol=1e-12, atol=1e-12)


def _isserlis_third_contraction(mu, S, g):
    """E[x_a (g.x) x_b x_c] for x ~ N(mu, S), by expanding x = mu + x0 and Isserlis' theorem."""
    d = mu.size
    out = np.zeros((d, d, d))
    idx = range(d)
    # E[x_a x_e x_b x_c] for all a, e, b, c; contract e with g
    m = mu
    for a in idx:
        for e in idx:
            for b in idx:
                for c in idx:
                    v = m[a] * m[e] * m[b] * m[c]
                    pairs = [(a, e, b, c), (a, b, e, c), (a, c, e, b), (e, b, a, c), (e, c, a, b), (b, c, a, e)]
                    v += sum(S[i, j] * m[k] * m[l] for i, j, k, l in pairs)
                    v += S[a, e] * S[b, c] + S[a, b] * S[e, c] + S[a, c] * S[e, b]
                    out[a, b, c] += g[e] * v
    return out


def test_rescaled_smooth_activation_coefficients_match_direct_quadrature():
    # non-homogeneous activation with pre-activation std s != 1 goes through numerical quadrature
    # of act(s t); check kappa_k = E[sigmoid(s z + m) He_k(z)] against scipy.integrate.quad.
    from nnrecover.activations import get_activation
    from nnrecover.hermite.polynomials import hermite_table
    from nnrecover.moments.statistics import _unit_coefficients

    act = get_activation("sigmoid")
    s, m = np.array([1.7, 0.4]), np.array([0.3, -1.2])
    got = _unit_coefficients(act, 3, s, m)
    for i in range(2):
        for k in range(4):
            want, _ = integrate.quad(lambda z: special.expit(s[i] * z + m[i]) * hermite_table(k, z)[k] * _norm_pdf(z),
                                     -40, 40, epsabs=1e-14, epsrel=1e-13, limit=200)
            assert abs(got[i, k] - want) < 1e-12


def _zscores(estimate, exact, per_sample):
    """(estimate - exact) / standard error, the standard error from the per-sample values."""
    se = per_sample.std(axis=0, ddof=1) / math.sqrt(per_sample.shape[0])
    return (estimate - exact) / se


@pytest.mark.parametrize("case", ["relu-standard", "relu-gaussian", "tanh-gaussian"])
def test_exact_forms_agree_with_monte_carlo_by_z_score(case):
    # Each estimate is a mean of n i.i.d. per-sample values, so (estimate - exact) / (sd / sqrt(n))
    # is approximately N(0, 1). With K <= 120 entries, P(max |z| > 5) <= K * 2 * (1 - Phi(5))
    # ~ 7e-5 under correct formulas (fixed seed: the test is deterministic); a wrong formula
    # (bias of order 0.1 at n = 200_000, standard errors ~ 3e-3) gives |z| >> 5.
    d, n = 3, 200_000
    act = case.split("-")[0]
    if case.endswith("standard"):
        dist = StandardGaussian(d)
        net = nr.random_network(d, 3, 2, rng=11, bias_range=(-1, 1), activation=act)
    else:
        dist = Gaussian(np.array([[1.5, 0.3, 0.0], [0.3, 0.8, -0.2], [0.0, -0.2, 1.2]]), mean=[0.2, -0.4, 0.1])
        net = nr.random_network(d, 3, 2, rng=12, bias_range=(-1, 1), activation=act, rows="gaussian")
    g = np.array([0.5, -0.3, 0.8])
    X, Y = nr.sample(net, dist, n, rng=13)
    stats = accumulate([MeanStatistic(), SecondMoment(), WeightedSecondMoment(), ThirdMomentContraction(g)],
                       (X, Y))
    mean, second, m2, m3 = (s.finalize() for s in stats)
    z = [
        _zscores(mean.y, MeanStatistic.exact(net, dist).y, Y),
        _zscores(mean.x, MeanStatistic.exact(net, dist).x, X),
        _zscores(second.yx, SecondMoment.exact(net, dist).yx, Y[:, :, None] * X[:, None, :]),
        _zscores(second.xx, SecondMoment.exact(net, dist).xx, X[:, :, None] * X[:, None, :]),
        _zscores(m2, WeightedSecondMoment.exact(net, dist), np.einsum("nj,na,nb->njab", Y, X, X)),
        _zscores(m3, ThirdMomentContraction.exact(net, dist, g),
                 np.einsum("nj,n,na,nb->njab", Y, X @ g, X, X)),
    ]
    zmax = max(float(np.max(np.abs(zz))) for zz in z)
    assert zmax < 5.0, f"max |z| = {zmax}"


def test_exact_moments_of_x_exist_for_any_distribution_but_y_needs_a_gaussian():
    mix = SymmetricMixture([[1.0, 0.0], [0.0, 2.0]])
    np.testing.assert_allclose(SecondMoment.exact(None, mix).xx, mix.second_moment, rtol=1e-15)
    np.testing.assert_allclose(CovarianceStatistic.exact(None, mix).xx, mix.covariance, rtol=1e-15)
    net = nr.random_network(2, 2, rng=0)
    with pytest.raises(InputError, match="Gaussian inputs"):
        SecondMoment.exact(net, mix)
    with pytest.raises(InputError, match="dimension"):
        MeanStatistic.exact(net, StandardGaussian(3))
    with pytest.raises(InputError, match="network is required"):
        WeightedSecondMoment.exact(None, StandardGaussian(2))


# ------------------------------------------------------------------------------- input deviation

def test_input_deviation_reports_the_measured_values():
    cov = Covariance(np.array([0.1, -0.3]), np.zeros(0), np.diag([2.0, 1.0]), np.zeros((0, 2)), None,
                     n=None)
    dev = input_deviation_from_standard(cov)
    assert dev.mean == pytest.approx(0.3, abs=1e-15)
    assert dev.covariance == pytest.approx(1.0, abs=1e-14)
    assert not dev.plausible and "not N(0, I)" in dev.message and "0.3" in dev.message
    exact = input_deviation_from_standard(CovarianceStatistic.exact(None, StandardGaussian(4)))
    assert exact.mean == 0.0 and exact.covariance == 0.0 and exact.plausible


def test_input_deviation_separates_standard_from_non_standard_samples():
    # N(0, I) samples are within the concentration tolerances (fail with probability <= 1e-3 by
    # construction; fixed seed); a covariance of 1.2 I exceeds them (deviation 0.2 against a
    # tolerance of about 2 (sqrt(d) + 3.7) / sqrt(n) ~ 0.06 at n = 20_000, d = 5), and so does a
    # mean shift of 0.1 (tolerance sqrt(2 log(2e4) / n) ~ 0.03).
    gen = np.random.default_rng(21)
    n, d = 20_000, 5
    Z = gen.standard_normal((n, d))
    ok = input_deviation_from_standard(CovarianceStatistic().update(Z))
    assert ok.plausible, ok.message
    assert ok.covariance_tolerance < 0.1 and ok.mean_tolerance < 0.05
    wide = input_deviation_from_standard(CovarianceStatistic().update(math.sqrt(1.2) * Z))
    assert not wide.plausible and wide.covariance > wide.covariance_tolerance
    shifted = input_deviation_from_standard(CovarianceStatistic().update(Z + 0.1))
    assert not shifted.plausible and shifted.mean > shifted.mean_tolerance
    with pytest.raises(InputError, match="CovarianceStatistic"):
        input_deviation_from_standard(MeanStatistic().update(Z))
    with pytest.raises(InputError, match="failure_probability"):
        input_deviation_from_standard(CovarianceStatistic().update(Z), failure_probability=2.0)


def test_excess_kurtosis_deviation_exact_and_its_tolerance():
    from nnrecover.moments import excess_kurtosis_deviation

    # Gaussian marginals of any variance have E[x^4] = 3 E[x^2]^2: deviation 0; uniform on
    # [-sqrt 3, sqrt 3] has E[x^4] = 9/5: deviation 1.2
    dev, tol = excess_kurtosis_deviation(np.array([1.0, 4.0]), np.array([3.0, 48.0]), 10_000)
    assert dev == 0.0 and tol == pytest.approx(2 * math.sqrt(96 / 1e4) * math.sqrt(2 * math.log(8 / 1e-3)))
    assert excess_kurtosis_deviation(np.ones(3), np.array([3.0, 1.8, 3.0]), 100)[0] == pytest.approx(1.2)
    # N(0, 1) samples stay inside the tolerance (probability of failing <= 1e-3 by construction, fixed seed)
    Z = np.random.default_rng(4).standard_normal((20_000, 8))
    dev, tol = excess_kurtosis_deviation((Z ** 2).mean(axis=0), (Z ** 4).mean(axis=0), 20_000)
    assert dev <= tol
    with pytest.raises(InputError, match="m2 and m4"):
        excess_kurtosis_deviation(np.ones(2), np.ones(3), 10)
    with pytest.raises(InputError, match="failure_probability"):
        excess_kurtosis_deviation(np.ones(2), np.ones(2), 10, failure_probability=0.0)
    # the mean over coordinates: d times less variance, so it sees a law every coordinate shares at large d
    U = np.random.default_rng(5).uniform(-math.sqrt(3), math.sqrt(3), (5000, 200))
    m2, m4 = (U ** 2).mean(axis=0), (U ** 4).mean(axis=0)
    top, top_tol = excess_kurtosis_deviation(m2, m4, 5000)
    mean, mean_tol = excess_kurtosis_deviation(m2, m4, 5000, statistic="mean")
    assert top < top_tol and mean == pytest.approx(1.2, abs=0.05) and mean > 10 * mean_tol
    assert mean_tol == pytest.approx(2 * math.sqrt(96 / 1e6) * math.sqrt(2 * math.log(4 / 1e-3)))
    with pytest.raises(InputError, match="statistic"):
        excess_kurtosis_deviation(m2, m4, 5000, statistic="median")


def test_subclass_contract_of_statistic():
    class Count(Statistic):
        def _reset(self):
            self.rows = 0

        def _update(self, X, Y):
            self.rows += X.shape[0]

        def _merge(self, other):
            self.rows += other.rows

        def finalize(self):
            return self.rows

    c = accumulate(Count(), [(X0[:10], None), (X0[10:25], None)])
    assert c.finalize() == c.n == 25 and (c.n_inputs, c.n_outputs) == (D, 0)
    e = c.empty_like()
    assert e.n == 0 and e.finalize() == 0 and e.n_inputs is None
    assert "Count(n=25" in repr(c)

    # the four hooks are abstract: a subclass missing one cannot be instantiated
    class NoMerge(Statistic):
        def _reset(self):
            self.rows = 0

        def _update(self, X, Y):
            self.rows += X.shape[0]

        def finalize(self):
            return self.rows

    with pytest.raises(TypeError, match="_merge"):
        NoMerge()
    with pytest.raises(TypeError, match="abstract"):
        Statistic()
    with pytest.raises(TypeError, match="abstract"):
        DataSource()


def test_data_imports_nothing_from_moments():
    """nnrecover.data calls a statistic's methods and imports nothing from nnrecover.moments."""
    import subprocess

    code = ("import sys; import nnrecover.data; "
            "assert not any(m.startswith('nnrecover.moments') for m in sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
