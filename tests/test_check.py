"""nr.check: the verdicts on data that meets or violates each learner's input assumption.

Sizes: 40,000 rows. Under N(0, I) the per-direction skewness and kurtosis z-scores are standard normal,
so with 30 directions and the Bonferroni level 1e-3 a Gaussian sample is called non-Gaussian with
probability <= 1e-3; the non-Gaussian laws below have kurtosis z-scores of 20 or more at this size.
"""

from __future__ import annotations

import numpy as np
import pytest

import nnrecover as nr
from nnrecover import check
from nnrecover.errors import InputError

D = 10
N = 40_000


@pytest.fixture(scope="module")
def teacher():
    return nr.random_network(D, 4, n_outputs=6, rng=0)


def test_gaussian_teacher_data(teacher):
    X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(D), N, rng=1)
    r = check(X, Y, random_state=0)
    assert r.input_law == "standard Gaussian" and r.symmetric and not r.heavy_tailed
    assert r.width["estimate"] == 4 and r.width["sure"]
    for name in ("exact-relu", "bakshi2019-noisy", "pure-neuron"):
        assert r.verdict(name).applies == "yes", str(r)
    # HermiteTensorLearner refuses six target columns: one output at a time
    hermite = r.verdict("hermite-tensor")
    assert hermite.applies == "no" and any("one output at a time" in reason for reason in hermite.reasons)
    assert r.recommended == "nnrecover fit DATA --learner exact-relu -k 4"
    text = str(r)
    assert "standard Gaussian" in text and "recommended: nnrecover fit" in text


def test_gaussian_with_noise_rules_out_the_exact_learner(teacher):
    X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(D), N, rng=1, noise=0.1)
    r = check(X, Y, random_state=0)
    assert r.label_noise["kind"] == "estimate" and r.label_noise["std"] == pytest.approx(0.1, rel=0.1)
    assert r.verdict("exact-relu").applies == "no" and r.verdict("bakshi2019-noisy").applies == "yes"


def test_symmetric_mixture(teacher):
    rng = np.random.default_rng(2)
    X, Y = nr.sample(teacher, nr.distributions.SymmetricMixture(rng.standard_normal((3, D))), N, rng=1)
    r = check(X, Y, random_state=0)
    assert r.input_law == "not Gaussian" and r.symmetric
    assert r.verdict("pure-neuron").applies == "yes"
    for name in ("hermite-tensor", "exact-relu", "bakshi2019-noisy"):
        assert r.verdict(name).applies == "no"


def test_uniform_inputs(teacher):
    # uniform on [-sqrt 3, sqrt 3]^d has mean 0 and covariance I (so mean/covariance checks alone pass)
    # but excess kurtosis -1.2: only the fourth-moment tests can tell it from N(0, I)
    X = np.random.default_rng(3).uniform(-np.sqrt(3), np.sqrt(3), (N, D))
    r = check(X, teacher.predict(X), random_state=0)
    assert r.evidence["cov_deviation"] < r.evidence["cov_tolerance"]
    assert r.input_law == "not Gaussian" and r.symmetric
    assert r.verdict("exact-relu").applies == "no" and r.verdict("pure-neuron").applies == "yes"


def test_heavy_tailed_inputs(teacher):
    X = np.random.default_rng(4).standard_t(1.5, (N, D))
    r = check(X, teacher.predict(X), random_state=0)
    assert r.heavy_tailed and r.evidence["tail_index_min"] < 2.5  # true index 1.5
    for name in ("hermite-tensor", "exact-relu", "bakshi2019-noisy", "pure-neuron"):
        assert r.verdict(name).applies == "no"
    assert r.recommended is None and "what would be needed" in str(r)


def test_real_data_set_no_provable_learner_applies():
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    r = check(X, y, random_state=0)
    assert r.input_law == "not Gaussian" and not r.symmetric
    assert all(v.applies == "no" for v in r.verdicts if v.paper != "baseline")
    assert r.recommended is None
    assert "not measured" in str(r)  # 442 rows: no tail verdict is claimed


@pytest.mark.parametrize("seed", [3, 4, 5])
def test_width_from_the_hermite_matrix_for_a_scalar_output(seed):
    # p = 1: Cov(y) says nothing about k; the rank of T_2 = sum_i a_i phi(b_i) w_i w_i^T does (k <= d)
    t = nr.random_network(D, 5, rng=seed, bias_range=(-1, 1))
    X, y = nr.sample(t, nr.distributions.StandardGaussian(D), 100_000, rng=1)
    r = check(X, y, random_state=0)
    assert r.width["estimate"] == 5 and r.width["sure"]
    assert r.label_noise["kind"] == "upper bound"


def test_gaussian_not_standard_says_whiten(teacher):
    X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(D), N, rng=1)
    X = X * 2.0 + 1.0
    r = check(X, Y, random_state=0)
    assert r.input_law == "Gaussian, not standard"
    assert any("whiten" in reason for reason in r.verdict("exact-relu").reasons)


def test_same_seed_same_report(teacher):
    X, Y = nr.sample(teacher, nr.distributions.StandardGaussian(D), 5_000, rng=1)
    assert str(check(X, Y, random_state=7)) == str(check(X, Y, random_state=7))


def test_bad_input():
    with pytest.raises(InputError, match="at least 50 rows"):
        check(np.zeros((10, 3)), np.zeros(10))
    with pytest.raises(InputError, match="finite"):
        X = np.ones((100, 3))
        X[0, 0] = np.nan
        check(X, np.zeros(100))
    with pytest.raises(InputError, match="max_rows"):
        check(np.zeros((100, 3)), np.zeros(100), max_rows=0)


def test_nr_check_is_the_function_even_after_the_module_is_imported():
    import importlib

    import nnrecover

    importlib.import_module("nnrecover.assumptions")
    importlib.import_module("nnrecover.learners.width")
    assert callable(nnrecover.check) and nnrecover.check.__name__ == "check"
    assert callable(nnrecover.extract) and nnrecover.extract.__name__ == "extract"


def test_noise_floor_not_taken_from_signal_when_outputs_equal_width():
    """With p = k outputs Cov(y) has no noise-only direction; if T_2 sees more units than Cov(y) stood
    out for, the smallest eigenvalue is signal and only bounds the noise from above, so a noiseless
    teacher must not be called noisy (exact-relu is 'unsure' at worst, never 'no')."""
    from nnrecover.experiments.compare import demo_teacher

    teacher, dist = demo_teacher(np.random.default_rng(0))  # d = 10, k = 4, p = 4, biases
    X, Y = nr.sample(teacher, dist, 20_000, rng=1)
    report = nr.check(X, Y)
    assert report.width["estimate"] == 4
    assert report.label_noise["kind"] == "upper bound"
    verdict = {v.learner: v.applies for v in report.verdicts}
    assert verdict["exact-relu"] in ("yes", "unsure")
    assert verdict["bakshi2019-noisy"] == "yes"


@pytest.mark.parametrize("k", [3, 5])
def test_width_is_unsure_when_every_output_eigenvalue_may_be_signal(k):
    # p = 3 outputs, k >= p units, uniform inputs (no T_2 test): all three eigenvalues of Cov(y) are
    # signal, so taking the smallest for the noise floor must not give a sure width p - 1
    net = nr.random_network(8, k, 3, rng=8)
    X = np.random.default_rng(1).uniform(-np.sqrt(3), np.sqrt(3), (50_000, 8))
    report = check(X, net.predict(X), random_state=0)
    assert not report.width["sure"] and report.width["range"] == (2, None)  # p - 1, or more


def test_a_full_rank_t2_overrules_a_smaller_output_rank():
    # p = 3 outputs, k = 12 > d = 8 units, Gaussian inputs: T_2 has full rank d, so the width is at least d
    net = nr.random_network(8, 12, 3, rng=4)
    X, Y = nr.sample(net, nr.distributions.StandardGaussian(8), 50_000, rng=1)
    report = check(X, Y, random_state=0)
    assert report.width["estimate"] == 8 and not report.width["sure"] and "k >= d" in report.width["method"]


def test_constant_or_out_of_range_inputs_get_a_clear_error():
    Y = np.random.default_rng(0).standard_normal(1000)
    with pytest.raises(InputError, match="every row of X is the same"):
        check(np.ones((1000, 5)), Y)
    with pytest.raises(InputError, match=r"largest \|X\| entry .* rescale X"):
        check(1e200 * np.random.default_rng(1).standard_normal((1000, 5)), Y)
    with pytest.raises(InputError, match=r"largest \|Y\| entry"):
        check(np.random.default_rng(1).standard_normal((1000, 5)), 1e-30 * Y)


def test_a_sure_t2_rank_settles_an_unsure_output_rank():
    # Gaussian inputs, k = p - 1 units, label noise: Cov(y) alone cannot tell p - 1 from k >= p, the rank of
    # T_2 (below d) can
    gen = np.random.default_rng(0)
    net = nr.random_network(8, 2, 3, rng=gen)
    X = gen.standard_normal((20_000, 8))
    Y = net.predict(X) + 0.1 * gen.standard_normal((20_000, 3))
    width = check(X, Y, random_state=0).width
    assert width["estimate"] == 2 and width["sure"] and "T_2" in width["method"]


def test_hermite_tensor_is_not_recommended_on_4096_rows_or_fewer():
    net = nr.random_network(6, 2, rng=0)
    X, Y = nr.sample(net, nr.distributions.StandardGaussian(6), 2000, rng=1)
    verdict = check(X, Y, random_state=0).verdict("hermite-tensor")
    assert verdict.applies == "no" and any("4096" in r for r in verdict.reasons)


def test_t2_never_settles_a_width_below_what_the_outputs_show():
    # one unit with bias 3 is nearly linear: Cov(y) sees it, T_2 hardly does; the T_2 rank (1) must not
    # replace Cov(y)'s range (2 or more) as a sure width
    from nnrecover.evidence import estimate_width

    gen = np.random.default_rng(1)
    W = gen.standard_normal((2, 8))
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    net = nr.TwoLayerNetwork(W, [0.0, 3.0], gen.standard_normal((3, 2)), np.zeros(3))
    X = gen.standard_normal((20_000, 8))
    Y = net.predict(X) + 0.1 * gen.standard_normal((20_000, 3))
    width = estimate_width(X, Y, max_rows=20_000, random_state=0)
    assert not (width["sure"] and width["estimate"] < 2)


def test_the_hermite_verdict_counts_the_rows_the_data_hold_not_the_rows_read():
    net = nr.random_network(6, 2, rng=0)
    X, Y = nr.sample(net, nr.distributions.StandardGaussian(6), 50_000, rng=1)
    verdict = check(X, Y, max_rows=3000, random_state=0).verdict("hermite-tensor")
    assert not any("4096" in r for r in verdict.reasons)
