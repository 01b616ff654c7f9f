"""HermiteTensorLearner returns ``n_hidden`` units whenever the network is identifiable
(Awasthi, Tang, Vijayaraghavan 2021, Theorem 3.4 with the corrected eq. (2)); otherwise it says why.

The rewrite (:func:`nnrecover.learners.awasthi2021.reduce_network`) folds linearisable units (Lemma D.13),
merges units on one line and resolves sign flips against the linear part: ``relu(z) = z + relu(-z)``.
"""

import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.errors import AssumptionWarning, CertificateWarning, InputError
from nnrecover.learners.awasthi2021 import (HermiteTensorLearner, nonlinear_part, reduce_network,
                                           residual_lack_of_fit)
from nnrecover.metrics import parameter_error, relu_l2_distance, relu_second_moment


def _flipped_with_linear_part(teacher, flip):
    """``teacher`` written with the units in ``flip`` as ``(-w, -b)`` and the Claim D.14 pair carrying the
    linear part ``sum_F a_i (w_i^T x + b_i)`` (the same function, ``k + 2`` units)."""
    W, b, a = teacher.hidden_weights.copy(), teacher.hidden_bias.copy(), teacher.output_weights[0].copy()
    F = np.asarray(flip)
    v = a[F] @ W[F]
    c = float(a[F] @ b[F]) + float(teacher.output_bias[0])
    W[F], b[F] = -W[F], -b[F]
    lam = np.linalg.norm(v)
    W2 = np.vstack([W, v / lam, -v / lam])
    return nr.TwoLayerNetwork(W2, np.concatenate([b, [0.0, 0.0]]), np.concatenate([a, [lam, -lam]])[None, :],
                              np.array([c]))


def test_nonlinear_part_matches_quadrature():
    # nl(beta)^2 = E relu(z)^2 - (E relu z)^2 - (E relu(z) (z - beta))^2, z ~ N(beta, 1), by adaptive
    # quadrature of the smooth piece z > 0 (quad's absolute error ~1e-12)
    from scipy import integrate, stats

    for beta in (-3.0, -1.0, 0.0, 0.5, 2.0):
        pdf = stats.norm(beta, 1.0).pdf
        m1 = integrate.quad(lambda z: z * pdf(z), 0, np.inf, epsabs=1e-13)[0]
        m2 = integrate.quad(lambda z: z * z * pdf(z), 0, np.inf, epsabs=1e-13)[0]
        slope = integrate.quad(lambda z: z * (z - beta) * pdf(z), 0, np.inf, epsabs=1e-13)[0]
        assert nonlinear_part(beta) == pytest.approx(np.sqrt(m2 - m1 ** 2 - slope ** 2), abs=1e-10)
    # even in beta, positive, and decaying like sqrt(2 phi / |beta|^3) without cancellation
    assert nonlinear_part(-7.0) == pytest.approx(nonlinear_part(7.0), rel=1e-12)
    phi = np.exp(-30 ** 2 / 2) / np.sqrt(2 * np.pi)
    assert nonlinear_part(-30.0) == pytest.approx(np.sqrt(2 * phi / 30.0 ** 3), rel=1e-2)


def test_reduce_network_resolves_flips_and_folds_degenerate_units():
    teacher = nr.random_network(6, 4, rng=3, bias_range=(-1, 1))
    big = _flipped_with_linear_part(teacher, [0, 2])
    W, b, a = big.hidden_weights, big.hidden_bias, big.output_weights[0]
    # add a constant unit (w = 0), a never-active unit and a unit with zero output weight
    W = np.vstack([W, np.zeros(6), np.full(6, 0.1), np.ones(6)])
    b = np.concatenate([b, [0.7, -40.0, 0.3]])
    a = np.concatenate([a, [1.3, 2.0, 0.0]])
    net = nr.TwoLayerNetwork(W, b, a[None, :], big.output_bias + 0.0)
    assert relu_l2_distance(net, big) < 1.0  # the constant unit shifts the function by 1.3 * 0.7
    red = reduce_network(net, 4, atol=1e-10)
    assert red.n_units == 4 and red.within_limit
    assert sorted(red.flip["flipped"]) == [0, 2] and red.flip["unique"]
    reasons = " ".join(f["reason"] for f in red.folded)
    assert "constant" in reasons and "never active" in reasons and "zero output weight" in reasons
    # the same function (round-off of the exact L2 formula: ~1e-8 relative, see relu_l2_distance) and
    # the teacher's parameters to round-off (no flip allowed in the comparison)
    scale = np.sqrt(relu_second_moment(net))
    assert relu_l2_distance(red.network, net) <= 1e-7 * scale
    assert red.l2_change <= 1e-10
    X = np.random.default_rng(0).standard_normal((2000, 6))
    assert np.max(np.abs(red.network.predict(X) - net.predict(X))) < 1e-12
    shifted = nr.TwoLayerNetwork(teacher.hidden_weights, teacher.hidden_bias, teacher.output_weights,
                                 teacher.output_bias + 1.3 * 0.7)
    assert parameter_error(red.network, shifted)["max_unit_error"] < 1e-12
    assert abs(red.network.output_bias[0] - shifted.output_bias[0]) < 1e-12


def test_reduce_network_keeps_extra_units_and_says_why():
    teacher = nr.random_network(6, 4, rng=4, bias_range=(-1, 1))
    red = reduce_network(teacher, 3, atol=1e-10)
    assert red.n_units == 4 and not red.within_limit and "4 units remain" in red.reason
    # a linear part that no flip set explains stays as the Claim D.14 pair
    lin = nr.TwoLayerNetwork(np.vstack([teacher.hidden_weights, np.eye(6)[:1], -np.eye(6)[:1]]),
                             np.concatenate([teacher.hidden_bias, [0.0, 0.0]]),
                             np.concatenate([teacher.output_weights[0], [0.123, -0.123]])[None, :])
    red = reduce_network(lin, 4, atol=1e-10)
    assert red.n_units == 6 and red.linear_units == 2 and "no sign-flip set explains" in red.reason
    assert red.flip["residual"] > 1e-3
    with pytest.raises(InputError, match="atol"):
        reduce_network(teacher, 4, atol=-1.0)


def test_reduce_network_large_null_space_is_not_enumerated():
    # d = 3, k = 6: [a_i w_i] has a 3-dimensional null space; with max_free = 2 the 2^3 candidates are not
    # enumerated, uniqueness is reported as unknown (None), and the function is kept (flips or the linear
    # part, within the budget or as Claim D.14 units)
    teacher = nr.random_network(3, 6, rng=8, bias_range=(-1, 1))
    big = _flipped_with_linear_part(teacher, [1, 4])
    red = reduce_network(big, 6, atol=1e-10, max_free=2)
    assert red.flip["unique"] is None and red.flip["null_dimension"] == 3
    X = np.random.default_rng(1).standard_normal((2000, 3))
    assert np.max(np.abs(red.network.predict(X) - big.predict(X))) < 1e-9
    full = reduce_network(big, 6, atol=1e-10)
    assert full.n_units == 6 and full.flip["unique"] and sorted(full.flip["flipped"]) == [1, 4]


def test_reduce_network_one_free_unit_carries_the_linear_part():
    # 3 units + a linear part 0.5 e_1 that no flip explains, n_hidden = 4: one unit with a large bias B
    # (Lemma D.13) is within the budget, ||r|| nl(B) / Phi(B) <= atol; the exact L2 distance confirms it
    # (its own round-off ~1e-8 sqrt(E g^2), relu_l2_distance)
    teacher = nr.random_network(6, 3, rng=6, bias_range=(-1, 1))
    e1 = np.eye(6)[0]
    net = nr.TwoLayerNetwork(np.vstack([teacher.hidden_weights, e1, -e1]),
                             np.concatenate([teacher.hidden_bias, [0.0, 0.0]]),
                             np.concatenate([teacher.output_weights[0], [0.5, -0.5]])[None, :])
    red = reduce_network(net, 4, atol=1e-6)
    assert red.n_units == 4 and red.linear_units == 1 and red.within_limit
    assert red.network.hidden_bias[-1] >= 3.0
    assert red.l2_change <= 1e-6
    assert relu_l2_distance(red.network, net) <= 1e-6 + 1e-7 * np.sqrt(relu_second_moment(net))


def test_reduce_network_force_states_its_cost():
    # five genuine units for n_hidden = 4: force=True folds or merges the cheapest and reports an upper
    # bound of the L2 change (exact for a fold, Lipschitz bound for a merge), checked with the exact distance
    teacher = nr.random_network(6, 5, rng=7, bias_range=(-1, 1))
    assert not reduce_network(teacher, 4, atol=1e-6).within_limit
    red = reduce_network(teacher, 4, atol=1e-6, force=True)
    assert red.n_units == 4 and red.forced
    dist = relu_l2_distance(red.network, teacher)
    assert dist > 1e-3
    assert dist <= red.l2_change * (1 + 1e-9) + 1e-7 * np.sqrt(relu_second_moment(teacher))


def test_population_overcomplete_returns_n_hidden_units():
    # d = 5, m = 8 (order 2): the regression output has 10 units; M = [a_i w_i] has a 3-dimensional null
    # space, and exactly one of the 2^3 candidate flip sets explains the linear part, so the 8-unit
    # network is identifiable and is the teacher (Theorem 3.4: no subset F with sum_F a_i w_i = 0)
    for seed in (0, 1):
        teacher = nr.random_network(5, 8, rng=seed, bias_range=(-1, 1))
        with warnings.catch_warnings():
            warnings.simplefilter("error", AssumptionWarning)
            learner = HermiteTensorLearner(8, random_state=seed).fit_population(teacher)
        assert learner.network_.n_hidden == 8
        assert learner.provable_network_.n_hidden == 10
        assert learner.diagnostics_["unit_reduction"]["flip"]["unique"] is True
        assert parameter_error(learner.network_, teacher)["max_unit_error"] < 1e-9


def test_population_genuine_flip_ambiguity_is_reported():
    # Theorem 3.4 / Claim 4.8: with a = lambda, sum_i lambda_i w_i = 0, flipping all four units changes the
    # function by the constant sum_i a_i b_i only; both 4-unit networks are reported, the one without
    # output bias (the paper's model) is returned
    rng = np.random.default_rng(5)
    W = rng.standard_normal((4, 3))
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    lam = np.linalg.svd(W.T)[2][-1]
    lam /= np.abs(lam).max()
    teacher = nr.TwoLayerNetwork(W, rng.uniform(-1, 1, 4), lam[None, :])
    assert np.abs(lam).min() > 0.2
    with pytest.warns(AssumptionWarning, match="sign-flip sets"):
        learner = HermiteTensorLearner(4, random_state=0).fit_population(teacher)
    sets = learner.diagnostics_["sign_flip_sets"]
    assert len(sets) == 2 and set(sets[0]) ^ set(sets[1]) == {0, 1, 2, 3}
    assert learner.network_.n_hidden == 4
    assert parameter_error(learner.network_, teacher)["max_unit_error"] < 1e-9


@pytest.mark.parametrize("seed", [0, 1])
def test_a_teacher_with_an_antipodal_pair_is_reported_as_not_identifiable(seed):
    # units w and -w with output weights a and -a add up to the linear function a w.x (Claim D.14's pair):
    # the function is recovered exactly, but flipping any other unit and moving a_i w_i into the pair gives
    # the same function, so the units are not determined; the learner must say so
    base = nr.random_network(10, 4, rng=seed)
    W, a = base.hidden_weights.copy(), base.output_weights.copy()
    W[1], a[0, 1] = -W[0], -a[0, 0]
    teacher = nr.TwoLayerNetwork(W, base.hidden_bias, a, base.output_bias)
    with pytest.warns(AssumptionWarning, match="Claim D.14"):
        learner = HermiteTensorLearner(4, random_state=0).fit_population(teacher)
    net = learner.network_
    info = learner.diagnostics_["non_identifiable"]
    X = np.random.default_rng(3).standard_normal((10_000, 10))
    scale = np.abs(teacher.predict(X)).max()
    assert np.abs(net.predict(X) - teacher.predict(X)).max() < 1e-9 * scale
    assert len(info["linear_units"]) == 2 and info["equivalent_networks"] == 2 ** len(info["free_flip_units"])
    # one of the equivalent networks: flip the first free unit, the pair takes its linear part
    i, (p, q) = info["free_flip_units"][0], info["linear_units"]
    Wn, bn, An = net.hidden_weights.copy(), net.hidden_bias.copy(), net.output_weights.copy()
    v = An[0, p] * Wn[p] + An[0, i] * Wn[i]             # the pair's a_p w_p (= -a_q w_q) plus a_i w_i
    c = net.output_bias + An[0, i] * bn[i]
    Wn[i], bn[i] = -Wn[i], -bn[i]
    Wn[p], Wn[q] = v / np.linalg.norm(v), -v / np.linalg.norm(v)
    An[0, p], An[0, q] = np.linalg.norm(v), -np.linalg.norm(v)
    other = nr.TwoLayerNetwork(Wn, bn, An, c)
    assert np.abs(other.predict(X) - net.predict(X)).max() < 1e-9 * scale
    assert parameter_error(other, net)["max_unit_error"] > 0.1


def test_population_parallel_units_fail_the_hermite_certificate():
    # two parallel w_i violate Theorem 3.4's assumption: the decomposition finds 2 directions and the
    # returned network misses the teacher's T_4 (a residual of order 1 against a round-off threshold)
    base = nr.random_network(6, 3, rng=2, bias_range=(-1, 1))
    W = base.hidden_weights.copy()
    W[1] = W[0]
    teacher = nr.TwoLayerNetwork(W, np.array([0.8, -0.6, 0.2]), base.output_weights)
    with pytest.warns(CertificateWarning, match="hermite_fit"):
        learner = HermiteTensorLearner(3, random_state=0).fit_population(teacher)
    cert = learner.diagnostics_["certificates"]["hermite_fit"]
    assert not cert["passed"] and "Lemma 3.5" in cert["meaning"]
    assert relu_l2_distance(learner.network_, teacher) > 0.1


def test_population_certificates_pass_on_identifiable_teachers():
    # exact coefficients: the returned network's Hermite coefficients equal the teacher's to round-off,
    # far below the 1e-8 ||T_k|| threshold; every certificate states what it bounds
    teacher = nr.random_network(8, 4, rng=1, bias_range=(-1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        learner = HermiteTensorLearner(4, random_state=0).fit_population(teacher)
    certs = learner.diagnostics_["certificates"]
    assert set(certs) == {"unit_count", "hermite_fit"}
    assert all(c["passed"] and c["meaning"] for c in certs.values())
    assert all(certs["hermite_fit"]["detail"][f"T{k}"]["ratio"] < 1e-3 for k in (1, 3, 4))


def test_unit_count_certificate_fails_when_a_linear_part_remains():
    # refine=False on noiseless samples of a teacher whose unreliable signs leave a linear part larger than
    # the T_1 error budget: 7 units for n_hidden = 5, said by the unit_count certificate
    teacher = nr.random_network(10, 5, rng=1, bias_range=(-1, 1))
    X = np.random.default_rng(0).standard_normal((50_000, 10))
    with pytest.warns(CertificateWarning, match="unit_count"):
        learner = HermiteTensorLearner(5, random_state=0, refine=False).fit(X, teacher.predict(X))
    cert = learner.diagnostics_["certificates"]["unit_count"]
    assert learner.network_.n_hidden == 7 and not cert["passed"]
    assert "no sign-flip set explains" in cert["detail"]["reason"]


@pytest.mark.parametrize("d, k, seed", [(10, 5, 0), (20, 10, 0), pytest.param(20, 10, 2, marks=pytest.mark.slow),
                                        pytest.param(20, 10, 3, marks=pytest.mark.slow)])
def test_samples_noiseless_exact_units(d, k, seed):
    # seeds where the paper's output has k + 2 units (a linear part for sign-unreliable units); the refined
    # network is exact on noiseless data (round-off ~1e-15), so the rewrite may only change the function
    # by round-off (budget 3 sqrt(mse P / n) ~ 1e-14) and must give the teacher's k units
    teacher = nr.random_network(d, k, rng=seed, bias_range=(-1, 1))
    rng = np.random.default_rng(1000 + seed)
    X = rng.standard_normal((100_000, d))
    learner = HermiteTensorLearner(k, random_state=seed).fit(X, teacher.predict(X))
    assert learner.provable_network_.n_hidden == k + 2
    assert learner.network_.n_hidden == k
    assert parameter_error(learner.network_, teacher)["max_unit_error"] < 1e-8
    # the exact network's Hermite coefficients differ from the estimates by their sampling error, whose
    # size sigma^_k the split halves estimate within ~25%: far below the 3 sigma^_k threshold
    certs = learner.diagnostics_["certificates"]
    assert certs["unit_count"]["passed"] and certs["hermite_fit"]["passed"]


def test_residual_moment_statistic_equals_its_dense_sums():
    # the lack-of-fit sums of r = y - g(x) over chunks that span several blocks of the signed Gram
    from nnrecover.learners.awasthi2021.certificates import ResidualMomentStatistic
    from nnrecover.learners.awasthi2021.coefficients import SIGNED_GRAM_BLOCK

    teacher = nr.random_network(6, 3, rng=2)
    rng = np.random.default_rng(2)
    X = rng.standard_normal((3 * SIGNED_GRAM_BLOCK + 7, 6))
    clean = teacher.predict(X).reshape(-1)
    Y = (clean + 0.3 * rng.standard_normal(X.shape[0]))[:, None]
    stat = nr.data.accumulate(ResidualMomentStatistic(teacher), (X, Y), chunk_size=2 * SIGNED_GRAM_BLOCK + 5)
    r = Y[:, 0] - clean
    np.testing.assert_allclose(stat.S2, (X.T * r) @ X, rtol=0, atol=1e-12 * np.abs(r).sum())
    np.testing.assert_array_equal(stat.S2, stat.S2.T)
    np.testing.assert_allclose(stat.s1, X.T @ r, rtol=0, atol=1e-12 * np.abs(r).sum())
    assert stat.s0 == pytest.approx(r.sum(), abs=1e-9) and stat.rr == pytest.approx(r @ r, rel=1e-12)


def test_residual_lack_of_fit_sees_a_missing_unit_not_the_noise():
    # the true network on noisy labels: Q ~ chi-square(J) (the truth has no estimation error, so the 2P
    # allowance is slack), z far below 4; the network without one unit (|a| >= 0.5, b = 0: half of its
    # energy in orders 1 and 2) leaves a residual whose order <= 2 projection is ~n times the noise's
    from nnrecover.data import as_data_source

    teacher = nr.random_network(8, 3, rng=9)
    rng = np.random.default_rng(9)
    X = rng.standard_normal((20_000, 8))
    Y = teacher.predict(X) + 0.1 * rng.standard_normal(20_000)
    good = residual_lack_of_fit(teacher, as_data_source(X, Y))
    assert good["passed"] and good["z"] < 0 and not good["exact"]
    short = nr.TwoLayerNetwork(teacher.hidden_weights[:2], teacher.hidden_bias[:2], teacher.output_weights[:, :2])
    bad = residual_lack_of_fit(short, as_data_source(X, Y))
    assert not bad["passed"] and bad["z"] > 50
    exact = residual_lack_of_fit(teacher, as_data_source(X, teacher.predict(X)))
    assert exact["passed"] and exact["exact"]


def test_residual_fit_flags_a_wrong_network_and_passes_the_teacher():
    # d = 16, k = 6, n = 1e4: a network whose units are wrong (one unit replaced) leaves a residual that
    # depends on x through orders <= 2; the lack-of-fit test sees it, while the teacher passes, with and
    # without label noise (its residual is then noise alone)
    from nnrecover.learners.awasthi2021 import residual_lack_of_fit
    from nnrecover.data import as_data_source
    from nnrecover.network import TwoLayerNetwork, random_network

    gen = np.random.default_rng(1937629660)
    teacher = random_network(16, 6, 1, rng=gen).canonical()
    X = gen.standard_normal((10_000, 16))
    y = teacher.predict(X)
    W = teacher.hidden_weights.copy()
    W[0] = gen.standard_normal(16)
    W[0] /= np.linalg.norm(W[0])
    wrong = TwoLayerNetwork(W, teacher.hidden_bias, teacher.output_weights, teacher.output_bias, "relu")
    assert parameter_error(wrong, teacher)["max_unit_error"] > 1.0
    assert residual_lack_of_fit(teacher, as_data_source(X, y))["passed"]
    assert not residual_lack_of_fit(wrong, as_data_source(X, y))["passed"]
    noisy = y + 0.1 * gen.standard_normal(y.shape)
    assert residual_lack_of_fit(teacher, as_data_source(X, noisy))["passed"]


def test_residual_lack_of_fit_decides_a_clear_misfit_on_the_first_rows_and_a_small_one_on_all():
    # d = 8 (J = 45 features, first look max(20000, 4 J) = 20000 rows), n = 1e5 noisy rows (sigma = 0.1).
    # A missing unit: the first look's z is far above 2 z_max = 8, so the test fails there. An output bias
    # off by c = 0.005 (order-0 misfit energy c^2 = 2.5e-5, 0.25 % of s^2 = 0.01): on 20000 rows
    # E[Q] - J - 2P = 20000 * 0.0025 - 62 = -12, z = -1.3 +- 1.7 (sd of Q: sqrt(2 J) from the noise and
    # 2 sqrt(50) from its cross term with the misfit), below 8, so all rows decide: there
    # z = (1e5 * 0.0025 - 62) / 9.5 = 20 +- 3.9 > 4 fails it. The teacher itself passes on all rows.
    from nnrecover.data import as_data_source
    from nnrecover.learners.awasthi2021.certificates import first_look_rows

    assert first_look_rows(8) == 20_000 and first_look_rows(200) == 4 * (1 + 400 + 200 * 199 // 2)
    teacher = nr.random_network(8, 3, rng=9)
    rng = np.random.default_rng(10)
    X = rng.standard_normal((100_000, 8))
    Y = teacher.predict(X) + 0.1 * rng.standard_normal(100_000)
    short = nr.TwoLayerNetwork(teacher.hidden_weights[:2], teacher.hidden_bias[:2], teacher.output_weights[:, :2])
    clear = residual_lack_of_fit(short, as_data_source(X, Y))
    assert clear["first_look"] and not clear["passed"] and clear["n"] == 20_000 and clear["z"] > 8
    shifted = nr.TwoLayerNetwork(teacher.hidden_weights, teacher.hidden_bias, teacher.output_weights,
                                 teacher.output_bias + 0.005)
    small = residual_lack_of_fit(shifted, as_data_source(X, Y))
    assert not small["first_look"] and small["n"] == 100_000 and not small["passed"] and small["z"] > 4
    good = residual_lack_of_fit(teacher, as_data_source(X, Y))
    assert good["passed"] and not good["first_look"] and good["n"] == 100_000


def test_fewer_units_than_asked_are_said():
    # the target is one ReLU unit; with n_hidden = 2 the second unit has nothing to fit (zero output
    # weight), so the learner returns one unit, and says so with an AssumptionWarning
    X = np.random.default_rng(0).standard_normal((20_000, 5))
    y = np.maximum(X[:, 0], 0)
    with pytest.warns(AssumptionWarning, match="returned 1 hidden unit"):
        learner = HermiteTensorLearner(2, random_state=0).fit(X, y)
    assert learner.network_.n_hidden == 1
    assert np.max(np.abs(learner.predict(X) - y)) < 1e-9


def test_residual_statistics_refuse_rows_of_another_width():
    from nnrecover.learners.awasthi2021.certificates import ResidualEnergyStatistic, ResidualMomentStatistic

    net = nr.random_network(5, 2, 1, rng=0)
    for stat in (ResidualMomentStatistic(net), ResidualEnergyStatistic(net)):
        with pytest.raises(InputError, match="4 columns but the network has 5 inputs"):
            stat.update(np.ones((3, 4)), np.ones(3))
