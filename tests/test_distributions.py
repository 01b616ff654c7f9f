"""Tests of the input distributions (src/nnrecover/distributions.py).

Monte Carlo checks use z-scores with the standard deviation estimated from the same sample:
for an average of n i.i.d. terms with finite variance, z = (estimate - exact) / (sd_hat / sqrt(n)) is
approximately N(0, 1) (n = 2e5 here; the terms have finite fourth moments, so the CLT applies with
a negligible Berry-Esseen correction). The bound |z| < 6 has a false-alarm probability of 2e-9 per
entry, so about 1e-7 over every entry tested in this file, while a wrong mean or covariance of a few
per cent (more than 6 sd/sqrt(n) ~ 1e-2 here) is caught. Seeds are fixed, so the tests are deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from nnrecover.distributions import (Distribution, Gaussian, PerturbedSymmetric, Rademacher, StandardGaussian,
                                     SymmetricMixture)
from nnrecover.errors import InputError

N_MC = 200_000
Z_MAX = 6.0


def _random_cov(d, rng):
    B = rng.standard_normal((d, d))
    return B @ B.T / d + 0.2 * np.eye(d)


def _distributions():
    rng = np.random.default_rng(7)
    d = 4
    means = rng.standard_normal((2, d))
    return {
        "standard": StandardGaussian(d),
        "gaussian": Gaussian(_random_cov(d, rng), mean=rng.standard_normal(d)),
        "gaussian_singular": Gaussian(np.outer([1.0, 2.0, 0.0, -1.0], [1.0, 2.0, 0.0, -1.0]) + np.diag([0, 0, 1.0, 0])),
        "mixture": SymmetricMixture(means, cov=0.5 * _random_cov(d, rng)),
        "mixture_identity": SymmetricMixture(means[0]),
        "rademacher": Rademacher(d),
        "perturbed": PerturbedSymmetric(SymmetricMixture(means), 0.3, rng=3),
        "perturbed_all": PerturbedSymmetric(Rademacher(d), 1.0, Q=rng.standard_normal((d, d))),
    }


DISTRIBUTIONS = _distributions()


def _z_scores(terms: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """z-scores of the column means of ``terms`` (n, m) against ``exact`` (m,)."""
    n = terms.shape[0]
    sd = terms.std(axis=0, ddof=1)
    err = terms.mean(axis=0) - exact
    # an entry that is exactly constant (sd = 0, e.g. x_i^2 = 1 for Rademacher) must match exactly
    return np.where(sd > 0, err / np.where(sd > 0, sd, 1.0) * math.sqrt(n), np.where(err == 0, 0.0, np.inf))


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_mean_and_covariance_match_monte_carlo(name):
    dist = DISTRIBUTIONS[name]
    X = dist.sample(N_MC, rng=11)
    assert X.shape == (N_MC, dist.dim) and X.dtype == np.float64
    mu, cov = dist.mean, dist.covariance
    assert mu.shape == (dist.dim,) and cov.shape == (dist.dim, dist.dim)
    assert np.array_equal(cov, cov.T)
    assert np.linalg.eigvalsh(cov).min() >= -1e-12
    assert np.allclose(dist.second_moment, cov + np.outer(mu, mu), rtol=1e-15, atol=1e-15)
    z_mean = _z_scores(X, mu)
    assert np.all(np.abs(z_mean) < Z_MAX), (name, z_mean)
    # E[(x_i - mu_i)(x_j - mu_j)] with the exact mean: an unbiased average of i.i.d. products
    Xc = X - mu
    iu = np.triu_indices(dist.dim)
    prods = Xc[:, iu[0]] * Xc[:, iu[1]]
    z_cov = _z_scores(prods, cov[iu])
    assert np.all(np.abs(z_cov) < Z_MAX), (name, z_cov)


def test_standard_gaussian_and_rademacher_facts():
    d = 3
    g = StandardGaussian(d)
    assert g.dim == 3 and g.is_standard_gaussian and g.is_symmetric
    assert np.array_equal(g.mean, np.zeros(3)) and np.array_equal(g.covariance, np.eye(3))
    r = Rademacher(d)
    X = r.sample(1000, rng=0)
    assert set(np.unique(X)) == {-1.0, 1.0}
    assert not r.is_standard_gaussian and r.is_symmetric and np.array_equal(r.covariance, np.eye(3))
    assert "dim=3" in repr(g)


def test_gaussian_facts():
    cov = np.array([[2.0, 0.5], [0.5, 1.0]])
    assert Gaussian(np.eye(2)).is_standard_gaussian
    assert not Gaussian(cov).is_standard_gaussian and Gaussian(cov).is_symmetric
    shifted = Gaussian(np.eye(2), mean=[0.0, 1.0])
    assert not shifted.is_symmetric and not shifted.is_standard_gaussian
    assert np.array_equal(shifted.second_moment, [[1.0, 0.0], [0.0, 2.0]])
    # a singular covariance: the samples lie in its range
    v = np.array([1.0, -2.0, 0.5])
    X = Gaussian(np.outer(v, v)).sample(100, rng=0)
    resid = X - np.outer(X @ v, v) / (v @ v)
    assert np.abs(resid).max() <= 1e-13 * np.abs(X).max()
    # a covariance symmetric only to rounding is accepted and stored exactly symmetric
    nearly = Gaussian([[1.0, 0.5 + 1e-13], [0.5, 1.0]])
    assert np.array_equal(nearly.covariance, nearly.covariance.T)
    # the returned moments are copies
    g = Gaussian(cov)
    g.covariance[0, 0] = 99.0
    assert g.covariance[0, 0] == 2.0


def test_symmetric_mixture_structure():
    mu = np.array([[3.0, 0.0], [0.0, -2.0]])
    mix = SymmetricMixture(mu, cov=0.01 * np.eye(2))
    assert np.allclose(mix.covariance, 0.01 * np.eye(2) + (np.outer(mu[0], mu[0]) + np.outer(mu[1], mu[1])) / 2,
                       rtol=1e-15, atol=0)
    X = mix.sample(20_000, rng=1)
    # every row is within 0.1 * 8 = 0.8 (8 sd) of one of the four centres +-mu_j
    centres = np.concatenate([mu, -mu])
    dist = np.linalg.norm(X[:, None, :] - centres[None], axis=2).min(axis=1)
    assert dist.max() < 0.8
    # each centre has probability 1/4: binomial z-score of the counts
    counts = np.bincount(np.linalg.norm(X[:, None, :] - centres[None], axis=2).argmin(axis=1), minlength=4)
    z = (counts - 5000) / math.sqrt(20_000 * 0.25 * 0.75)
    assert np.all(np.abs(z) < Z_MAX), z
    assert mix.is_symmetric and not mix.is_standard_gaussian


def test_perturbed_symmetric_mixture_weights_and_moments():
    rng = np.random.default_rng(5)
    d, lam = 3, 0.25
    Q = rng.standard_normal((d, d))
    pert = PerturbedSymmetric(Rademacher(d), lam, Q=Q)
    assert np.array_equal(pert.Q, Q) and pert.lam == lam and pert.dim == d
    assert np.allclose(pert.second_moment, (1 - lam) * np.eye(d) + lam * Q @ Q.T, rtol=1e-15, atol=1e-15)
    assert np.array_equal(pert.covariance, pert.second_moment)  # zero mean
    assert pert.is_symmetric and not pert.is_standard_gaussian
    # rows from the perturbation Q n are (almost surely) not in {-1, 1}^d: their fraction is ~ lam
    X = pert.sample(40_000, rng=2)
    frac = np.mean(~np.all(np.abs(X) == 1.0, axis=1))
    z = (frac - lam) / math.sqrt(lam * (1 - lam) / 40_000)
    assert abs(z) < Z_MAX, z
    # the perturbation is drawn from rng when Q is omitted, reproducibly
    def q_of(seed):
        return PerturbedSymmetric(Rademacher(d), 0.1, rng=seed).Q

    assert np.array_equal(q_of(4), q_of(4)) and not np.array_equal(q_of(4), q_of(5))
    # symmetric only when the base is
    shifted = Gaussian(np.eye(d), mean=np.ones(d))
    assert not PerturbedSymmetric(shifted, 0.5, rng=0).is_symmetric
    assert np.allclose(PerturbedSymmetric(shifted, 0.5, Q=Q).mean, 0.5 * np.ones(d), rtol=0, atol=0)
    # lam = 0 leaves the base law untouched
    X0 = PerturbedSymmetric(Rademacher(d), 0.0, rng=0).sample(1000, rng=1)
    assert np.all(np.abs(X0) == 1.0)


@pytest.mark.parametrize("name", sorted(n for n, dist in DISTRIBUTIONS.items() if dist.is_symmetric))
def test_antithetic_pairs_are_exact(name):
    dist = DISTRIBUTIONS[name]
    X = dist.sample(1000, rng=3, antithetic=True)
    assert X.shape == (1000, dist.dim)
    assert np.array_equal(X[1::2], -X[0::2])
    assert np.all(X[0::2] + X[1::2] == 0)  # every odd empirical moment cancels pair by pair
    assert np.all(X[0::2] * X[0::2] * X[0::2] + X[1::2] * X[1::2] * X[1::2] == 0)
    # the first row of each pair is the plain draw of n/2 rows with the same seed
    assert np.array_equal(X[0::2], dist.sample(500, rng=3))
    assert dist.sample(0, rng=3, antithetic=True).shape == (0, dist.dim)


def test_antithetic_errors():
    with pytest.raises(InputError, match="n must be even"):
        StandardGaussian(2).sample(5, rng=0, antithetic=True)
    with pytest.raises(InputError, match="symmetric"):
        DISTRIBUTIONS["gaussian"].sample(4, rng=0, antithetic=True)


@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_reproducible_and_shape(name):
    dist = DISTRIBUTIONS[name]
    assert np.array_equal(dist.sample(50, rng=9), dist.sample(50, rng=9))
    assert np.array_equal(dist.sample(50, rng=9), dist.sample(50, rng=np.random.default_rng(9)))
    assert not np.array_equal(dist.sample(50, rng=9), dist.sample(50, rng=10))
    gen = np.random.default_rng(1)
    assert not np.array_equal(dist.sample(5, gen), dist.sample(5, gen))  # a Generator is advanced
    assert dist.sample(0, rng=0).shape == (0, dist.dim)


@pytest.mark.parametrize("make, match", [
    (lambda: StandardGaussian(0), "d must be >= 1"),
    (lambda: StandardGaussian(2.0), "d must be an integer"),
    (lambda: Rademacher(-1), "d must be >= 1"),
    (lambda: Gaussian(np.ones(3)), "square"),
    (lambda: Gaussian(np.ones((2, 3))), "square"),
    (lambda: Gaussian(np.zeros((0, 0))), "square"),
    (lambda: Gaussian([[1.0, 0.5], [0.0, 1.0]]), "symmetric"),
    (lambda: Gaussian([[1.0, 0.0], [0.0, -1.0]]), "positive semi-definite"),
    (lambda: Gaussian([[1.0, np.nan], [np.nan, 1.0]]), "NaN"),
    (lambda: Gaussian([["a", "b"], ["c", "d"]]), "cov must be an array of real numbers"),
    (lambda: Gaussian([[1j, 0], [0, 1]]), "cov must be real"),
    (lambda: Gaussian(np.eye(2), mean=[0.0, 0.0, 0.0]), "mean must have shape"),
    (lambda: Gaussian(np.eye(2), mean=[0.0, np.inf]), "mean contains"),
    (lambda: SymmetricMixture(np.zeros((2, 2, 2))), "means must have shape"),
    (lambda: SymmetricMixture(np.zeros((0, 2))), "means must have shape"),
    (lambda: SymmetricMixture([[np.nan, 0.0]]), "means contains"),
    (lambda: SymmetricMixture([[1.0, 0.0]], cov=np.eye(3)), r"cov must be \(2, 2\)"),
    (lambda: SymmetricMixture([[1.0, 0.0]], cov=-np.eye(2)), "positive semi-definite"),
    (lambda: PerturbedSymmetric(np.eye(2), 0.5), "base must be an nnrecover distribution"),
    (lambda: PerturbedSymmetric(StandardGaussian(2), 1.5), r"lam must be in \[0, 1\]"),
    (lambda: PerturbedSymmetric(StandardGaussian(2), float("nan")), r"lam must be in \[0, 1\]"),
    (lambda: PerturbedSymmetric(StandardGaussian(2), "half"), "lam must be a number"),
    (lambda: PerturbedSymmetric(StandardGaussian(2), 0.5, Q=np.eye(3)), "Q must have shape"),
    (lambda: PerturbedSymmetric(StandardGaussian(2), 0.5, Q=[[np.nan, 0], [0, 1]]), "Q contains"),
    (lambda: StandardGaussian(2).sample(-1), "n must be >= 0"),
    (lambda: StandardGaussian(2).sample(3.0), "n must be an integer"),
    (lambda: StandardGaussian(2).sample(3, rng="seed"), "random_state"),
])
def test_validation_errors(make, match):
    with pytest.raises(InputError, match=match):
        make()


def test_base_class_is_abstract():
    with pytest.raises(TypeError):
        Distribution()

    class Incomplete(Distribution):
        dim = 2

        @property
        def covariance(self):
            return np.eye(2)

    with pytest.raises(TypeError):
        Incomplete()
