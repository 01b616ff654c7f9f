"""The span reduction of Ge et al. 2019's pure-neuron learner (``PureNeuronLearner(span=...)``).

``Q`` spans the row space of ``E[y x^T] Sigma^{-1} = A W / 2`` (Lemma 1); the detector, NullSpan,
SimDiag and SignFix run on ``z = Q^T x`` and Algorithm 1 on ``x`` (package docstring of
``nnrecover.learners.ge2019``).
"""

from __future__ import annotations

import tracemalloc
import warnings

import dask.array as da
import numpy as np
import pytest

import nnrecover as nr
from nnrecover.data import default_chunk_rows
from nnrecover.errors import AssumptionError, AssumptionWarning, InputError
from nnrecover.learners import ge2019 as ge
from nnrecover.metrics import parameter_error

# the provable stage alone (refine=False) is judged here against the sampling rate; the learner's own
# max_unit_error certificate (tolerance 0.1) may fail on it and says so with a CertificateWarning
unrefined = pytest.mark.filterwarnings("ignore::nnrecover.errors.CertificateWarning")


def max_unit_error(estimated, truth) -> float:
    return parameter_error(estimated, truth)["max_unit_error"]


def gaussian_data(d, k, l, n, *, seed, noise=0.0, antithetic=False):
    teacher = nr.random_network(d, k, l, rng=seed)
    X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(d), n, rng=seed + 1, noise=noise,
                     antithetic=antithetic)
    return teacher, X, Y


# ------------------------------------------------------------------------------------ (1) population
@pytest.mark.parametrize("d, k, l", [(20, 5, 5), (30, 4, 6)])
def test_population_exact(d, k, l):
    """Exact Gaussian moments: Q spans the rows of W exactly, the detector of z = Q^T x is the
    paper's in k dimensions, so the teacher comes back to round-off (Theorems 4-6)."""
    teacher = nr.random_network(d, k, l, rng=d + k)
    learner = ge.PureNeuronLearner(k, random_state=0).fit_population(teacher)
    span = learner.diagnostics_["span"]
    assert span["used"] is True and span["dimension"] == k and span["input_dimension"] == d
    assert span["noise"] == 0 and span["gap_ratio"] == float("inf")
    s = np.asarray(span["singular_values"])
    assert s[k - 1] > 1e-3 * s[0] and (s.size == k or s[k] < 1e-12 * s[0])  # rank k = rank A W / 2
    assert max_unit_error(learner.network_, teacher) <= 1e-9
    assert learner.diagnostics_["refinement"]["ran"] is False  # population mode: nothing to refine on


def test_population_correlated_gaussian_and_full_route_agree():
    """x ~ N(0, C) with C != I: Q comes from E[y x^T] C^{-1}, not E[y x^T]; span=False is the paper's route."""
    d, k = 12, 3
    teacher = nr.random_network(d, k, k, rng=5)
    G = np.random.default_rng(6).standard_normal((d, d))
    dist = nr.distributions.Gaussian(G @ G.T / d + 0.5 * np.eye(d))
    fast = ge.PureNeuronLearner(k, random_state=0).fit_population(teacher, distribution=dist)
    full = ge.PureNeuronLearner(k, random_state=0, span=False).fit_population(teacher, distribution=dist)
    assert fast.diagnostics_["span"]["used"] and not full.diagnostics_["span"]["used"]
    assert max_unit_error(fast.network_, teacher) <= 1e-9
    assert max_unit_error(full.network_, teacher) <= 1e-9


# ------------------------------------------------------------------------------------ (2) samples
D, K, N = 50, 5, 200_000


@pytest.fixture(scope="module")
def noiseless_sample():
    # a teacher whose A W / 2 has s_k = 0.46, well above the sampling error of about 0.045
    return gaussian_data(D, K, K, N, seed=12)


def test_samples_refined_to_round_off(noiseless_sample):
    teacher, X, Y = noiseless_sample
    learner = ge.PureNeuronLearner(K, random_state=0, refine=True).fit(X, Y)
    assert learner.diagnostics_["span"]["used"] is True
    assert learner.diagnostics_["refinement"]["ran"] is True
    assert max_unit_error(learner.network_, teacher) <= 1e-9


@unrefined
def test_samples_provable_error_matches_sampling_rate(noiseless_sample):
    """Tolerance from Algorithm 1's sampling error. For unit i the readout is
    v_i = 2 Sigma^-1 E^[(z_i^T y) x] = lambda_i w_i + 2 (E^ - E)[(z_i^T y) x] (Sigma = I); with
    z_i^T y = lambda_i relu(w_i x) every coordinate of the error has variance about
    4 lambda_i^2 E[relu(w_i x)^2] / N = 2 lambda_i^2 / N, so the unit direction is off by about
    sqrt(2 d / N) (0.022 here). The constant 5 covers the maximum over the k units (a chi_d tail) and
    the detector's own share (Z, hence A, carries an error of the same order from the fourth moments)."""
    teacher, X, Y = noiseless_sample
    learner = ge.PureNeuronLearner(K, random_state=0, refine=False).fit(X, Y)
    tol = 5 * np.sqrt(2 * D / N)
    assert max_unit_error(learner.network_, teacher) <= tol
    span = learner.diagnostics_["span"]
    assert span["used"] and span["dimension"] == K and np.isfinite(span["noise"]) and span["noise"] > 0
    assert span["gap_ratio"] >= ge.SPAN_GAP_MIN
    assert learner.diagnostics_["stage_checks"]["span_gap_ratio"]["detail"].startswith("s_k")


@unrefined
def test_span_and_full_routes_agree_at_d10():
    """Both routes estimate the same teacher from the same sample; each is within the tolerance above
    (5 sqrt(2 d / N)), so they agree to twice it."""
    d, k, n = 10, 3, N
    teacher, X, Y = gaussian_data(d, k, k, n, seed=21)
    fast = ge.PureNeuronLearner(k, random_state=0, refine=False).fit(X, Y)
    full = ge.PureNeuronLearner(k, random_state=0, refine=False, span=False).fit(X, Y)
    assert fast.diagnostics_["span"]["used"] and not full.diagnostics_["span"]["used"]
    tol = 5 * np.sqrt(2 * d / n)
    assert max_unit_error(fast.network_, teacher) <= tol
    assert max_unit_error(full.network_, teacher) <= tol
    assert max_unit_error(fast.network_, full.network_) <= 2 * tol


def test_antithetic_sample_exact_without_refinement():
    """An exactly symmetric sample (+-x pairs) makes E^[y x^T] = A W E^[x x^T] / 2 exact (Lemma 6 holds
    for the empirical law), so Q is exact and so is the provable estimate (Theorem 4)."""
    teacher, X, Y = gaussian_data(30, 4, 4, 4000, seed=31, antithetic=True)
    res = ge.algorithm2(X, Y, 4, rng=0, span=True)
    assert res.diagnostics["span"]["used"] and res.diagnostics["span"]["gap_ratio"] > 1e6
    assert max_unit_error(res.network(), teacher) <= 1e-9


@pytest.mark.parametrize("l, algorithm", [(4, "algorithm3"), (6, "algorithm4")])
def test_sample_split_layouts_exact_on_antithetic_data(l, algorithm):
    """Algorithms 3-4's splits keep +-x pairs inside a part, so every part is exactly symmetric: Q from
    the first part, the detector on z of the detector part and Algorithm 1 on x of the readout part are
    all exact (Theorems 5-6 on the empirical law)."""
    teacher, X, Y = gaussian_data(20, 4, l, 40_000, seed=101 + l, antithetic=True)
    res = getattr(ge, algorithm)(X, Y, 4, split=True, span=True, rng=0)
    assert res.diagnostics["span"]["used"] and res.diagnostics["split"] in ("alg3", "alg4")
    assert max_unit_error(res.network(), teacher) <= 1e-9


@unrefined
def test_streams_and_dask_match_arrays():
    """The projection pass streams z = X Q chunk by chunk (a SampleStream) and runs on the blocks of a
    dask array; the moments are the same sums in another order, so the estimate agrees to round-off."""
    d, k, n = 16, 3, 40_000
    teacher = nr.random_network(d, k, k, rng=41)
    dist = nr.distributions.StandardGaussian(d)
    stream = nr.sample_stream(teacher, dist, n, rng=42, chunk_size=7_000)
    X, Y = nr.sample(teacher, dist, n, rng=42)  # the stream's rows (sample_stream's contract)
    kw = dict(random_state=0, refine=False)
    ref = ge.PureNeuronLearner(k, **kw).fit(X, Y)
    fits = [ge.PureNeuronLearner(k, **kw).fit(stream),
            ge.PureNeuronLearner(k, **kw).fit(da.from_array(X, chunks=(9_000, d)), da.from_array(Y, chunks=(9_000, k)))]
    for got in fits:
        assert got.diagnostics_["span"]["used"] is True
        assert max_unit_error(got.network_, ref.network_) <= 1e-10


def test_one_pass_iterator():
    """A generator can be read once: "auto" takes the paper's one-pass route, True refuses."""
    teacher, X, Y = gaussian_data(8, 2, 2, 20_000, seed=51)

    def chunks():
        for s in range(0, X.shape[0], 5_000):
            yield X[s:s + 5_000], Y[s:s + 5_000]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # refinement skipped: the iterator is consumed
        learner = ge.PureNeuronLearner(2, random_state=0).fit(chunks())
    assert learner.diagnostics_["span"]["used"] is False
    assert "one-pass" in learner.diagnostics_["span"]["reason"]
    with pytest.raises(InputError, match="one-pass iterator"):
        ge.PureNeuronLearner(2, span=True).fit(chunks())


def test_parameter_validation_and_k_equals_d():
    with pytest.raises(InputError, match="span"):
        ge.PureNeuronLearner(2, span="yes").fit(np.ones((10, 3)), np.ones((10, 2)))
    teacher, X, Y = gaussian_data(4, 4, 4, 20_000, seed=61, antithetic=True)
    learner = ge.PureNeuronLearner(4, random_state=0, refine=False).fit(X, Y)
    assert learner.diagnostics_["span"]["used"] is False and "k = d" in learner.diagnostics_["span"]["reason"]


# ------------------------------------------------------------------------------------ (3) violation
def rank_deficient_teacher(d=12, k=4, seed=71):
    """Two equal output columns: rank A = k - 1, so A W / 2 misses the direction w_0 - w_1."""
    net = nr.random_network(d, k, k, rng=seed)
    A = net.output_weights.copy()
    A[:, 1] = A[:, 0]
    return nr.TwoLayerNetwork(net.hidden_weights, None, A)


def test_rank_deficient_A_population_refused():
    teacher = rank_deficient_teacher()
    with pytest.raises(AssumptionError, match="rank A = rank W = k|A and W of rank k"):
        ge.PureNeuronLearner(4, span=True).fit_population(teacher)


@unrefined
def test_rank_deficient_A_samples():
    """Noiseless labels keep rank E^[y x^T] < k exactly (E^[y x^T] = A E^[relu(W x) x^T]): span=True
    refuses, "auto" warns and falls back to the paper's statistics in all d dimensions. With label noise
    s_k is only noise: a warning (AssumptionError with strict=True)."""
    teacher = rank_deficient_teacher()
    X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(12), 20_000, rng=72)
    with pytest.raises(AssumptionError, match="A and W of rank k"):
        ge.PureNeuronLearner(4, span=True, refine=False).fit(X, Y)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        learner = ge.PureNeuronLearner(4, refine=False, random_state=0).fit(X, Y)
    assert any(issubclass(w.category, AssumptionWarning) and "span reduction does not apply" in str(w.message)
               for w in caught)
    assert learner.diagnostics_["span"]["used"] is False
    Xn, Yn = nr.sample(teacher, nr.distributions.StandardGaussian(12), 20_000, rng=73, noise=0.1)
    with pytest.warns(AssumptionWarning, match="not separated from its sampling error"):
        res = ge.algorithm3(Xn, Yn, 4, split=False, span=True, rng=0)
    assert res.diagnostics["span"]["gap_ratio"] < ge.SPAN_GAP_MIN
    with pytest.raises(AssumptionError, match="not separated from its sampling error"):
        ge.algorithm3(Xn, Yn, 4, split=False, span=True, rng=0, strict=True)


# ------------------------------------------------------------------------------------ (4) memory
def test_memory_far_below_pair_products():
    """d = 300: the paper's per-chunk pair products x_r x_s (r <= s) would take
    rows * d (d + 1) / 2 * 8 bytes = 3437 * 45150 * 8 = 1.24 GB for the default chunk of 8 MiB of (x, y).
    The span route's two passes hold a chunk, its odd half, z = X Q and O(d^2 + k^4) sums: bounded here
    by 4 chunks + 16 d x d float64 matrices (45 MB). The whole fit adds the certificate's Gauss-Newton
    matrices (P x P, P = k d + k l + l = 1530 parameters: 18.7 MB each), bounded by a quarter of the
    pair products."""
    d, k = 300, 5
    teacher, X, Y = gaussian_data(d, k, k, 20_000, seed=81, antithetic=True)
    rows = default_chunk_rows(d + k)
    pair_bytes = rows * d * (d + 1) // 2 * 8
    passes_budget = 4 * rows * (d + k) * 8 + 16 * d * d * 8
    assert passes_budget < pair_bytes / 25
    tracemalloc.start()
    try:
        res = ge.algorithm2(X, Y, k, rng=0, span=True, check_symmetry=False)
        passes_peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.reset_peak()
        learner = ge.PureNeuronLearner(k, random_state=0, refine=False).fit(X, Y)
        fit_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert res.diagnostics["span"]["used"]
    assert passes_peak < passes_budget
    assert fit_peak < pair_bytes / 4
    assert max_unit_error(learner.network_, teacher) <= 1e-9  # antithetic: exact without refinement


# ------------------------------------------------------------------------------------ (5) reproducible
@unrefined
def test_same_seed_bit_identical():
    teacher, X, Y = gaussian_data(20, 3, 4, 30_000, seed=91, noise=0.05)
    fits = [ge.PureNeuronLearner(3, random_state=7, refine=False).fit(X, Y) for _ in range(2)]
    a, b = (f.network_ for f in fits)
    assert np.array_equal(a.hidden_weights, b.hidden_weights)
    assert np.array_equal(a.output_weights, b.output_weights)
    assert fits[0].diagnostics_["span"] == fits[1].diagnostics_["span"]
