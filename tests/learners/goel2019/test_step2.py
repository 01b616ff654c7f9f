"""Step 2 of Goel & Panigrahy (2019): EstimateTanAlpha (Lemmas 3-6) and RefineEstimate (Algorithm 1)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from nnrecover.errors import AssumptionError, AssumptionWarning, InputError
from nnrecover.learners.goel2019.step2 import (STEP2_STEPS_PER_EFOLD, ConditionalSlabSampler, SampleSlabs,
                                               SlabSource, angle_between, estimate_tan_alpha, refine_estimate,
                                               step2_budget, step2_defaults)
from nnrecover.learners.goel2019.step2 import _truncated_normal


def _tilted(w: np.ndarray, alpha: float, gen: np.random.Generator) -> np.ndarray:
    """A unit vector at angle ``alpha`` from the unit ``w``."""
    v = gen.standard_normal(w.size)
    v -= (v @ w) * w
    v /= np.linalg.norm(v)
    return math.cos(alpha) * w + math.sin(alpha) * v


def _orthonormal(n: int, seed: int) -> np.ndarray:
    return np.linalg.qr(np.random.default_rng(seed).standard_normal((n, n)))[0]


class _ProbitSource(SlabSource):
    """Exact slab fractions of Lemma 4 in the thin-slab limit: ``p(t') = Phi((t' cos a - t) / sin a)``.

    Counts are ``p`` times 10^15, so the bisection sees the population curve to ~1e-15."""

    def __init__(self, n: int, alpha: float, t: float):
        self.n_inputs, self.alpha, self.t = n, alpha, t

    def along(self, z, seed, lower=-np.inf):
        def counts(lo, hi):
            p = special.ndtr((hi * math.cos(self.alpha) - self.t) / math.sin(self.alpha))
            return int(round(p * 1e15)), 10**15
        return counts


# ------------------------------------------------------------------------------------------ EstimateTanAlpha
@pytest.mark.parametrize("levels", [(0.4, 0.6), (0.2, 0.35, 0.5, 0.65, 0.8)])
@pytest.mark.parametrize("alpha", [0.3, 0.01])
def test_tan_alpha_exact_on_population_curve(alpha, levels):
    # Lemma 4: t_k = (t + sin(a) Phi^{-1}(p_k)) / cos(a), so the slope on Phi^{-1}(p_k) is tan(a) exactly;
    # only the bisection tolerance (1e-13) and the 1e-15 count resolution remain.
    src = _ProbitSource(4, alpha, 2.5)
    est = estimate_tan_alpha(np.eye(4)[0], src, threshold=2.5, slab_width=0.01, levels=levels, xtol=1e-13)
    assert est.tan_alpha == pytest.approx(math.tan(alpha), rel=1e-9)
    q = special.ndtri(levels[0])
    assert est.t_low == pytest.approx((2.5 + math.sin(alpha) * q) / math.cos(alpha), abs=1e-12)


def test_truncated_normal_transform_matches_scipy():
    # the inverse-cdf transform of a uniform grid gives the truncated-normal quantiles (upper and lower tails)
    u = np.linspace(0.01, 0.99, 99)
    for lo, hi in ((3.0, 3.01), (5.5, 6.0), (-2.0, -1.5), (-0.3, 0.2)):
        ref = stats.truncnorm.ppf(u, lo, hi)
        np.testing.assert_allclose(_truncated_normal(u, lo, hi), ref, rtol=1e-10, atol=1e-12)


def test_tan_alpha_conditional_sampler_accuracy():
    # t = 3, orthonormal units, alpha = 0.1, 50_000 points per slab. Relative standard error of s is about
    # 3.5/sqrt(5e4) = 1.6% (reported as std_error). Bias: the other 4 units fire with probability
    # eta = 1 - (1 - Phi^c(3))^4 = 0.54% in every slab, which moves the levels to (p - eta)/(1 - eta):
    # expected s = tan(a) (Phi^{-1}(p2') - Phi^{-1}(p1')) / (Phi^{-1}(p2) - Phi^{-1}(p1)); the slab of width
    # 1e-3 adds eps^2/(24 tan a) = 4e-7 (negligible). Tolerance: 4 standard errors.
    W = _orthonormal(5, 1)
    t, alpha = 3.0, 0.1
    z = _tilted(W[0], alpha, np.random.default_rng(2))
    src = ConditionalSlabSampler.for_units(W, t, n_per_slab=50_000)
    est = estimate_tan_alpha(z, src, threshold=t, slab_width=1e-3, seed=3)
    eta = 1.0 - (1.0 - special.ndtr(-t)) ** 4
    p1, p2 = ((p - eta) / (1 - eta) for p in (0.4, 0.6))
    expected = math.tan(alpha) * (special.ndtri(p2) - special.ndtri(p1)) / (special.ndtri(0.6) - special.ndtri(0.4))
    assert 0.005 < est.std_error / expected < 0.03
    assert abs(est.tan_alpha - expected) <= 4.0 * est.std_error
    # same seed: the same conditional draws, bit-identical result
    assert estimate_tan_alpha(z, src, threshold=t, slab_width=1e-3, seed=3) == est


def test_tan_alpha_from_samples_within_standard_error():
    # one step unit at t = 2, 4e5 Gaussian samples, alpha = 0.25; slabs of width 0.05 hold
    # ~4e5 * phi(2) * 0.05 = 1080 rows; the reported delta-method standard error covers the noise
    # (tolerance 4 SE); the slab blur adds eps^2 / (24 tan a) = 4e-4 (0.15%).
    gen = np.random.default_rng(5)
    n, t, alpha = 6, 2.0, 0.25
    w = np.eye(n)[0]
    X = gen.standard_normal((400_000, n))
    src = SampleSlabs(X, X @ w >= t)
    z = _tilted(w, alpha, gen)
    est = estimate_tan_alpha(z, src, threshold=t, slab_width=0.05, levels=(0.3, 0.4, 0.5, 0.6, 0.7))
    assert est.n_low > 500 and est.n_high > 500
    assert abs(est.tan_alpha - math.tan(alpha)) <= 4.0 * est.std_error
    assert est.std_error < 0.1 * math.tan(alpha)


def test_tan_alpha_refuses_without_monotone_linear_part():
    # P = X_1 X_2 (no linear term): along w_1 the firing fraction is Pr[w_2.x >= t] ~ 2% at every slab,
    # never 0.6 (Lemma 5 needs a monotone P with positive linear terms)
    W = _orthonormal(4, 0)
    src = ConditionalSlabSampler.for_units(W, 2.0, n_per_slab=5_000, which="all")
    with pytest.raises(AssumptionError, match="Lemma 5"):
        estimate_tan_alpha(W[0], src, threshold=2.0, slab_width=0.01)
    # a direction far from every unit of a monotone P fails the same way
    src_any = ConditionalSlabSampler.for_units(W[:2], 2.0, n_per_slab=5_000)
    with pytest.raises(AssumptionError):
        estimate_tan_alpha(-W[0] - W[1], src_any, threshold=2.0, slab_width=0.01)
    # a threshold so low that the first slab already fires (Lemma 6: p(0) must be small)
    with pytest.raises(AssumptionError, match="Lemma 6"):
        estimate_tan_alpha(W[0], ConditionalSlabSampler.for_units(W, 0.0 + 1e-9, n_per_slab=2_000),
                           threshold=1.0, slab_width=0.01, search_interval=(0.5, 4.0))


def test_tan_alpha_input_validation():
    W = _orthonormal(3, 0)
    src = ConditionalSlabSampler.for_units(W, 2.0, n_per_slab=100)
    with pytest.raises(InputError, match="levels"):
        estimate_tan_alpha(W[0], src, threshold=2.0, slab_width=0.01, levels=(0.6, 0.4))
    with pytest.raises(InputError, match="nonzero"):
        estimate_tan_alpha(np.zeros(3), src, threshold=2.0, slab_width=0.01)
    with pytest.raises(InputError, match="entries"):
        estimate_tan_alpha(np.ones(4), src, threshold=2.0, slab_width=0.01)
    with pytest.raises(InputError, match="slab_width"):
        estimate_tan_alpha(W[0], src, threshold=2.0, slab_width=0.0)
    with pytest.raises(InputError, match="source"):
        estimate_tan_alpha(W[0], object(), threshold=2.0, slab_width=0.01)
    with pytest.raises(InputError, match="fired"):
        SampleSlabs(np.zeros((5, 3)), np.arange(5))


def test_angle_between_small_angles():
    w = np.array([1.0, 0.0, 0.0])
    for a in (1e-12, 1e-6, 0.5, 3.0):
        assert angle_between(w, [math.cos(a), math.sin(a), 0.0]) == pytest.approx(a, rel=1e-12)


# ------------------------------------------------------------------------------------------ RefineEstimate
def test_refine_oracle_beats_start():
    # t = 3, d = n = 5, start at 0.06 rad; practical rule with 10_000 conditional points per slab. Each
    # estimate has ~3.5% relative error, and the paired draws make the comparisons far sharper, so the
    # random search (expected decrease ~alpha/(4 d) per accepted step) must at least halve the angle in
    # 50 iterations (Theorem 5: geometric decay (1 - c/d)^T).
    W = _orthonormal(5, 7)
    z0 = _tilted(W[0], 0.06, np.random.default_rng(8))
    src = ConditionalSlabSampler.for_units(W, 3.0, n_per_slab=10_000)
    opts = dict(threshold=3.0, slab_width=5e-4, mode="practical", search_interval=(2.0, 4.0))
    res = refine_estimate(z0, src, max_iter=50, rng=9, **opts)
    true = res.true_angles(W[0])
    assert true[0] == pytest.approx(0.06, rel=1e-12)
    assert true[-1] < 0.03
    assert res.accepted.sum() >= 3
    df = res.trace()
    assert list(df.columns[:3]) == ["iteration", "angle_estimate", "candidate_estimate"]
    assert len(df) == res.n_iter == 50 and res.stop_reason == "max_iter"
    # reproducible bit for bit
    res2 = refine_estimate(z0, src, max_iter=5, rng=9, **opts)
    np.testing.assert_array_equal(res.directions[:6], res2.directions)


def test_refine_faithful_rule_uses_paper_constants():
    # Algorithm 1: sigma = 0.1 sin(alpha) / d, accept iff alpha' <= (1 - 0.01/d) alpha (errata read as a factor)
    W = _orthonormal(4, 3)
    z0 = _tilted(W[1], 0.1, np.random.default_rng(4))
    src = ConditionalSlabSampler.for_units(W, 2.5, n_per_slab=4_000)
    res = refine_estimate(z0, src, threshold=2.5, slab_width=1e-3, max_iter=12, rng=0)
    assert res.settings["step_scale"] == 0.1 and res.settings["acceptance"] == "paper"
    np.testing.assert_allclose(res.step_sizes, 0.1 * np.sin(res.angle_estimates) / 4, rtol=1e-14)
    ok = res.candidate_estimates <= (1 - 0.01 / 4) * res.angle_estimates
    np.testing.assert_array_equal(res.accepted, ok)


def test_refine_on_fixed_sample_is_monotone_and_improves():
    # common rows: with a fixed slab width the current estimate never increases under the greedy rule;
    # the true angle must drop well below the start (0.15 rad, d = 4, t = 2, N = 3e5)
    gen = np.random.default_rng(11)
    W = _orthonormal(4, 12)
    X = gen.standard_normal((300_000, 4))
    src = SampleSlabs(X, np.any(X @ W.T >= 2.0, axis=1))
    z0 = _tilted(W[2], 0.15, gen)
    res = refine_estimate(z0, src, threshold=2.0, slab_width=0.03, max_iter=60, mode="practical",
                          levels=(0.4, 0.5, 0.6, 0.7, 0.8), search_interval=(0.5, 5.0), rng=1)
    assert np.all(np.diff(res.angle_estimates) <= 0.0)
    assert res.true_angles(W[2])[-1] < 0.075


def test_width_jitter_estimates_the_current_direction_again_from_the_seed():
    # width_jitter: each iteration scores the current direction and the proposal at a width of its own, so the
    # current one is estimated again (without it a fixed sample keeps the estimate it was accepted with);
    # every width comes from rng (same seed, same bits) and stays within +-50 % of the adaptive one
    gen = np.random.default_rng(11)
    W = _orthonormal(4, 12)
    X = gen.standard_normal((200_000, 4))
    src = SampleSlabs(X, np.any(X @ W.T >= 2.0, axis=1))
    z0 = _tilted(W[2], 0.1, gen)
    kw = dict(threshold=2.0, slab_width=0.1, relative_slab_width=0.5, min_slab_width=0.01, max_iter=25,
              mode="practical", levels=(0.4, 0.5, 0.6, 0.7, 0.8), search_interval=(1.0, 5.0))
    a, b = (refine_estimate(z0, src, width_jitter=0.5, rng=3, **kw) for _ in range(2))
    np.testing.assert_array_equal(a.directions, b.directions)
    np.testing.assert_array_equal(a.angle_estimates, b.angle_estimates)
    assert np.unique(a.slab_widths).size > 20 and np.all(a.slab_widths >= 0.01)
    # the adaptive width of iteration k comes from the estimate of the direction kept at the end of k - 1
    kept = np.where(a.accepted, a.candidate_estimates, a.angle_estimates)[:-1]
    base = np.maximum(0.01, np.minimum(0.1, 0.5 * np.tan(kept)))
    widths = a.slab_widths[1:]
    assert np.all((widths >= np.maximum(0.01, 0.5 * base) - 1e-12) & (widths <= 1.5 * base + 1e-12))
    # a rejected iteration leaves the direction, but its estimate is new (another width): it may rise
    still = ~a.accepted[:-1]
    assert np.any(a.angle_estimates[1:][still] != a.angle_estimates[:-1][still])
    plain = refine_estimate(z0, src, rng=3, **kw)
    # without it a rejection at an unchanged width keeps the estimate, bit for bit
    same = ~plain.accepted[:-1] & (plain.slab_widths[1:] == plain.slab_widths[:-1])
    assert same.sum() >= 3
    np.testing.assert_array_equal(plain.angle_estimates[1:][same], plain.angle_estimates[:-1][same])
    with pytest.raises(InputError, match="width_jitter"):
        refine_estimate(z0, src, width_jitter=1.0, rng=3, **kw)


def test_step2_budget_is_n_log_of_the_angle_ratio():
    # Theorem 5: O(n log(gamma / eps)) iterations; the constant 2 / ES_PROGRESS_RATE, at least one e-fold
    assert step2_budget(0.1, 10, 0.1 / math.e ** 3) == math.ceil(STEP2_STEPS_PER_EFOLD * 10 * 3)
    assert step2_budget(0.2, 20, 0.1 / math.e ** 3) == 2 * step2_budget(0.2, 10, 0.1 / math.e ** 3)
    assert step2_budget(0.001, 10, 0.01) == math.ceil(STEP2_STEPS_PER_EFOLD * 10)
    opts = step2_defaults(2.0, 800_000)
    phi = math.exp(-2.0) / math.sqrt(2 * math.pi)
    assert opts["max_iter"] == "auto" and opts["max_rejections"] is None
    assert opts["min_slab_width"] == pytest.approx(200 / (800_000 * phi))
    assert opts["target_angle"] == pytest.approx(0.5 * opts["min_slab_width"])


class _AllRows(SampleSlabs):
    """SampleSlabs that projects every row for every direction (no candidate rows)."""

    def _projections(self, z, lower):
        a = self.X @ z
        return (a, self.fired) if self._rows is None else (a[self._rows], self.fired[self._rows])


def test_candidate_rows_give_the_counts_of_all_rows():
    # the projections are taken over the rows near or above the search's start only; the search must run
    # exactly as over every row, also after the direction has moved far enough to choose them again
    gen = np.random.default_rng(3)
    W = _orthonormal(30, 4)[:5]
    X = gen.standard_normal((200_000, 30))
    fired = np.any(X @ W.T >= 2.5, axis=1)
    z0 = _tilted(W[0], 0.08, gen)
    opts = dict(threshold=2.5, slab_width=0.05, mode="practical", max_iter=40, search_interval=(1.5, 5.5), rng=1)
    fast, plain = SampleSlabs(X, fired), _AllRows(X, fired)
    got, ref = refine_estimate(z0, fast, **opts), refine_estimate(z0, plain, **opts)
    assert ref.accepted.sum() >= 3
    # only the rows that can reach the search's start were projected: P(N(0, 1) >= 1.5 - 0.05 - 0.5) = 0.17
    assert fast._candidates[3].shape[0] < 0.2 * X.shape[0]
    np.testing.assert_array_equal(got.accepted, ref.accepted)
    np.testing.assert_allclose(got.directions, ref.directions, rtol=0, atol=1e-14)
    np.testing.assert_allclose(got.angle_estimates, ref.angle_estimates, rtol=1e-12, atol=0)
    # far from the candidates' direction (beyond the margin) and below their start: chosen again
    for z, lower in ((W[1], 1.5), (z0, 0.5), (z0, -np.inf)):
        a, b = fast.along(z, 0, lower), plain.along(z, 0, lower)
        for lo, hi in ((1.0, 1.1), (2.0, 2.05), (2.5, 3.5)):
            assert a(lo, hi) == b(lo, hi)
        if lower == 0.5:              # 0.5 - 0.5 = 0: half the rows (49 MB) are still worth a copy
            assert fast._candidates[3].shape[0] > 0.45 * X.shape[0]


def test_candidates_of_most_of_a_large_array_are_not_copied(monkeypatch):
    import nnrecover.learners.goel2019.step2 as step2_module

    gen = np.random.default_rng(6)
    X = gen.standard_normal((40_000, 10))
    fired = X[:, 0] >= 2.0
    z = np.eye(10)[0]
    monkeypatch.setattr(step2_module, "_CANDIDATE_COPY_BYTES", 1 << 20)     # a "large" array: 3.2 MB
    fast, plain = SampleSlabs(X, fired), _AllRows(X, fired)
    a, b = fast.along(z, 0, 0.3), plain.along(z, 0, 0.3)        # rows above -0.2: 58 %, 1.9 MB
    assert fast._candidates is None
    for lo, hi in ((0.3, 0.5), (1.0, 1.5), (2.0, 2.5)):
        assert a(lo, hi) == b(lo, hi)
    fast.along(z, 0, 2.0)                                       # rows above 1.5: 7 %, a copy of 0.2 MB
    assert fast._candidates is not None and fast._candidates[3].shape[0] < 0.1 * X.shape[0]


def test_split_holds_disjoint_rows_of_the_same_array():
    gen = np.random.default_rng(5)
    X = gen.standard_normal((50_000, 6))
    fired = X[:, 0] >= 1.5
    src = SampleSlabs(X, fired)
    a, b = src.split(0.25, rng=0)
    assert a.X is X and b.X is X                              # no copy of the rows
    assert np.intersect1d(a._rows, b._rows).size == 0 and a.n_rows + b.n_rows == X.shape[0]
    assert 0.23 < b.n_rows / X.shape[0] < 0.27
    z = _tilted(np.eye(6)[0], 0.1, gen)
    for part in (a, b):
        own = SampleSlabs(X[part._rows], fired[part._rows])
        for lower in (1.0, -np.inf):
            mine, ref = part.along(z, 0, lower), own.along(z, 0, lower)
            for lo, hi in ((1.0, 1.2), (1.5, 1.6), (2.0, 3.0)):
                assert mine(lo, hi) == ref(lo, hi)
    for part in (src, a):                                     # a copy: the same rows and X, its own cache
        twin = part.copy()
        assert twin.X is X and twin.n_rows == part.n_rows and twin._candidates is None
        assert twin.along(z, 0, 1.0)(1.5, 1.6) == part.along(z, 0, 1.0)(1.5, 1.6)
    c, d = a.split(0.5, rng=1)                                # a split of a split stays within its rows
    assert set(c._rows) | set(d._rows) == set(a._rows)
    np.testing.assert_array_equal(src.split(0.25, rng=0)[1]._rows, b._rows)     # reproducible
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(InputError, match="fraction"):
            src.split(bad)


def test_refine_stops_at_target_and_validates():
    W = _orthonormal(3, 5)
    src = ConditionalSlabSampler.for_units(W, 2.5, n_per_slab=3_000)
    z0 = _tilted(W[0], 0.2, np.random.default_rng(0))
    res = refine_estimate(z0, src, threshold=2.5, slab_width=0.01, target_angle=0.5, rng=0)
    assert res.converged and res.stop_reason == "target" and res.n_iter == 0
    assert res.start_estimate is res.estimate and res.estimate.angle <= 0.5
    np.testing.assert_array_equal(res.direction, z0 / np.linalg.norm(z0))
    with pytest.raises(InputError, match="mode"):
        refine_estimate(z0, src, threshold=2.5, slab_width=0.01, mode="fast")
    with pytest.raises(InputError, match="acceptance"):
        refine_estimate(z0, src, threshold=2.5, slab_width=0.01, acceptance="always")
    with pytest.raises(InputError, match="max_iter"):
        refine_estimate(z0, src, threshold=2.5, slab_width=0.01, max_iter=-1)


def test_goel2019_refine_experiment_quick(tmp_path):
    # smoke run of the registered experiment: files written, both data sources traced, and the
    # conditional-sampler run ends below its start (the population Step 1 floor of that unit)
    from nnrecover.experiments.runner import RESULT_FILES, run_experiment

    df = run_experiment("goel2019-refine", tmp_path, quick=True, rng=0)
    assert all((tmp_path / f).exists() for f in RESULT_FILES)
    assert set(df["source"]) == {"oracle", "samples"}
    oracle = df[df["source"] == "oracle"].sort_values("iteration")
    assert oracle["true_angle"].iloc[0] == pytest.approx(oracle["step1_floor"].iloc[0], rel=1e-12)
    assert oracle["true_angle"].iloc[-1] < oracle["true_angle"].iloc[0]


def _three_step_units(n, tilts):
    """Three orthonormal step units at threshold 2 in 3 dimensions, ``n`` Gaussian rows, and starts tilted
    from the units named in ``tilts`` (pairs of unit index and angle)."""
    W = _orthonormal(3, 7)
    gen = np.random.default_rng(8)
    X = gen.standard_normal((n, 3))
    y = np.any(X @ W.T >= 2.0, axis=1).astype(float)
    starts = np.stack([_tilted(W[i], angle, gen) for i, angle in tilts])
    return W, X, y, starts


def test_refine_units_does_not_return_one_unit_twice():
    # Theorem 5 assumes each start within a small angle of its own unit. Unit 1's start lies 0.2 rad from
    # unit 0 (below STEP2_MAX_START_ANGLE, so it is searched) and far from every other unit (there is no unit of
    # its own): Theorem 5's budget takes its search onto unit 0, which the held-out rows confirm. One unit
    # twice: the start that moved further goes back to Step 1, with an AssumptionWarning naming the two
    from nnrecover.data.sources import ArraySource
    from nnrecover.learners.goel2019.step2 import refine_units

    W, X, y, starts = _three_step_units(300_000, [(0, 0.03), (0, 0.2), (2, 0.03)])
    with pytest.warns(AssumptionWarning, match="units 0 and 1 to the same direction"):
        W_new, report = refine_units(starts, ArraySource(X, y), np.random.default_rng(0), threshold=2.0,
                                     activation="step", baseline=0.0, max_rows=10**7, options={})
    units = report["units"]
    assert units[1]["kept"] == "step1" and "found" in units[1]["reason"] and "Theorem 5" in units[1]["reason"]
    np.testing.assert_array_equal(W_new[1], starts[1])
    assert angle_between(W_new[0], W[0]) < 0.03 and angle_between(W_new[1], W_new[0]) > 0.1


def test_refine_units_does_not_search_from_far_starts():
    # a start 0.5 rad from its unit (its held-out estimate above STEP2_MAX_START_ANGLE) is not searched: it keeps
    # its Step 1 direction, with the reason and an AssumptionWarning naming it (Theorem 5's small start angle)
    from nnrecover.data.sources import ArraySource
    from nnrecover.learners.goel2019.step2 import STEP2_MAX_START_ANGLE, refine_units

    W, X, y, starts = _three_step_units(200_000, [(0, 0.03), (1, 0.5), (2, 0.03)])
    with pytest.warns(AssumptionWarning, match=r"did not search from unit\(s\) \[1\]"):
        W_new, report = refine_units(starts, ArraySource(X, y), np.random.default_rng(0), threshold=2.0,
                                     activation="step", baseline=0.0, max_rows=10**7,
                                     options={"max_iter": 5})
    unit = report["units"][1]
    assert unit["kept"] == "step1" and unit["iterations"] == 0 and "Theorem 5" in unit["reason"]
    assert unit["angle_estimate_start"] > STEP2_MAX_START_ANGLE and "far" not in unit
    np.testing.assert_array_equal(W_new[1], starts[1])
