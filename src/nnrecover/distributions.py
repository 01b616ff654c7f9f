"""Input distributions.

Every distribution has ``.dim``, ``.sample(n, rng=None, *, antithetic=False)``, the exact ``.mean`` and
``.covariance`` (second central moment), and ``.is_symmetric`` (x and -x have the same law: the
assumption of Ge et al. 2019 and of the Bakshi et al. symmetric-noise analysis).

``antithetic=True`` returns rows in pairs ``(x, -x)``: the empirical law is then exactly symmetric, so
every odd empirical moment vanishes (the exactness tests of Ge et al. rely on this).

Symbol map: Ge et al.'s D_{Q,lambda} (Section 5, "smoothed" input) is :class:`PerturbedSymmetric`.
"""

from __future__ import annotations

import numpy as np

from ._validation import check_positive_int, check_random_state, check_finite
from .errors import InputError

__all__ = ["Distribution", "StandardGaussian", "Gaussian", "SymmetricMixture", "Rademacher",
           "PerturbedSymmetric"]


class Distribution:
    """Base class. Subclasses implement ``_draw(n, gen)``."""

    dim: int

    @property
    def mean(self) -> np.ndarray:
        return np.zeros(self.dim)

    @property
    def covariance(self) -> np.ndarray:  # pragma: no cover - every subclass overrides
        raise NotImplementedError

    @property
    def second_moment(self) -> np.ndarray:
        """E[x x^T]."""
        mu = self.mean
        return self.covariance + np.outer(mu, mu)

    @property
    def is_symmetric(self) -> bool:
        return True

    @property
    def is_standard_gaussian(self) -> bool:
        return False

    def sample(self, n: int, rng=None, *, antithetic: bool = False) -> np.ndarray:
        """Draw ``n`` rows, shape (n, dim). With ``antithetic=True`` rows come in pairs (x, -x); n must be even."""
        n = check_positive_int(n, "n", minimum=0)
        gen = check_random_state(rng)
        if not antithetic:
            return self._draw(n, gen)
        if n % 2:
            raise InputError(f"antithetic sampling emits pairs (x, -x): n must be even, got {n}.")
        half = self._draw(n // 2, gen)
        out = np.empty((n, self.dim))
        out[0::2] = half
        out[1::2] = -half
        return out

    def _draw(self, n: int, gen: np.random.Generator) -> np.ndarray:  # pragma: no cover
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim})"


class StandardGaussian(Distribution):
    """N(0, I_d)."""

    def __init__(self, d: int):
        self.dim = check_positive_int(d, "d")

    @property
    def covariance(self) -> np.ndarray:
        return np.eye(self.dim)

    @property
    def is_standard_gaussian(self) -> bool:
        return True

    def _draw(self, n, gen):
        return gen.standard_normal((n, self.dim))


def _psd_factor(cov: np.ndarray, name: str) -> np.ndarray:
    """A factor L with L L^T = cov (Cholesky, or eigen-factor for singular PSD matrices)."""
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1] or cov.shape[0] < 1:
        raise InputError(f"{name} must be a square (d, d) matrix, got shape {cov.shape}.")
    check_finite(cov, name)
    if not np.allclose(cov, cov.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(cov).max())):
        raise InputError(f"{name} must be symmetric.")
    try:
        return np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        vals, vecs = np.linalg.eigh((cov + cov.T) / 2)
        if vals.min() < -1e-10 * max(1.0, vals.max()):
            raise InputError(f"{name} must be positive semi-definite (smallest eigenvalue {vals.min():.3g}).")
        return vecs * np.sqrt(np.clip(vals, 0, None))


class Gaussian(Distribution):
    """N(mean, cov)."""

    def __init__(self, cov, mean=None):
        self.cov = np.array(cov, dtype=np.float64)
        self._factor = _psd_factor(self.cov, "cov")
        self.dim = self.cov.shape[0]
        self._mean = np.zeros(self.dim) if mean is None else np.array(mean, dtype=np.float64).reshape(-1)
        if self._mean.shape != (self.dim,):
            raise InputError(f"mean must have shape ({self.dim},), got {np.shape(mean)}.")
        check_finite(self._mean, "mean")

    @property
    def mean(self):
        return self._mean.copy()

    @property
    def covariance(self):
        return self.cov.copy()

    @property
    def is_symmetric(self):
        return not np.any(self._mean)

    @property
    def is_standard_gaussian(self):
        return self.is_symmetric and np.array_equal(self.cov, np.eye(self.dim))

    def _draw(self, n, gen):
        return gen.standard_normal((n, self.dim)) @ self._factor.T + self._mean


class SymmetricMixture(Distribution):
    """Equal-weight mixture of N(+mu_j, cov) and N(-mu_j, cov), j = 1..J.

    Parameters
    ----------
    means : array of shape (J, d) (or (d,) for J = 1)
    cov : array of shape (d, d), optional (identity by default)
    """

    def __init__(self, means, cov=None):
        mu = np.array(means, dtype=np.float64)
        if mu.ndim == 1:
            mu = mu[None, :]
        if mu.ndim != 2 or mu.shape[0] < 1 or mu.shape[1] < 1:
            raise InputError(f"means must have shape (n_components, d), got {np.shape(means)}.")
        check_finite(mu, "means")
        self.means = mu
        self.dim = mu.shape[1]
        self.cov = np.eye(self.dim) if cov is None else np.array(cov, dtype=np.float64)
        self._factor = _psd_factor(self.cov, "cov")
        if self.cov.shape[0] != self.dim:
            raise InputError(f"cov must be ({self.dim}, {self.dim}) to match means, got {self.cov.shape}.")

    @property
    def covariance(self):
        return self.cov + self.means.T @ self.means / self.means.shape[0]

    def _draw(self, n, gen):
        comp = gen.integers(0, self.means.shape[0], size=n)
        sign = gen.choice([-1.0, 1.0], size=n)
        return gen.standard_normal((n, self.dim)) @ self._factor.T + sign[:, None] * self.means[comp]


class Rademacher(Distribution):
    """Uniform on {-1, +1}^d (symmetric, identity covariance, not Gaussian)."""

    def __init__(self, d: int):
        self.dim = check_positive_int(d, "d")

    @property
    def covariance(self):
        return np.eye(self.dim)

    def _draw(self, n, gen):
        return gen.choice([-1.0, 1.0], size=(n, self.dim))


class PerturbedSymmetric(Distribution):
    """Ge et al.'s (Q, lambda)-perturbation D_{Q,lambda} of a symmetric distribution D.

    With probability ``1 - lam`` draw x ~ D, else x = Q n with n ~ N(0, I_d); Q has i.i.d. N(0, 1)
    entries unless given. The result is symmetric and within total variation ``lam`` of D.

    Parameters
    ----------
    base : Distribution
    lam : float in [0, 1]
    Q : array (d, d), optional
    rng : seed for drawing Q when it is not given
    """

    def __init__(self, base: Distribution, lam: float, Q=None, rng=None):
        if not isinstance(base, Distribution):
            raise InputError("base must be an nnrecover distribution.")
        lam = float(lam)
        if not 0.0 <= lam <= 1.0:
            raise InputError(f"lam must be in [0, 1], got {lam}.")
        self.base, self.lam, self.dim = base, lam, base.dim
        if Q is None:
            Q = check_random_state(rng).standard_normal((self.dim, self.dim))
        self.Q = np.array(Q, dtype=np.float64)
        if self.Q.shape != (self.dim, self.dim):
            raise InputError(f"Q must have shape ({self.dim}, {self.dim}), got {self.Q.shape}.")
        check_finite(self.Q, "Q")

    @property
    def mean(self):
        return (1 - self.lam) * self.base.mean

    @property
    def second_moment(self):
        return (1 - self.lam) * self.base.second_moment + self.lam * self.Q @ self.Q.T

    @property
    def covariance(self):
        mu = self.mean
        return self.second_moment - np.outer(mu, mu)

    @property
    def is_symmetric(self):
        return self.base.is_symmetric

    def _draw(self, n, gen):
        pick = gen.random(n) < self.lam
        x = self.base._draw(n, gen)
        m = int(pick.sum())
        if m:
            x[pick] = gen.standard_normal((m, self.dim)) @ self.Q.T
        return x
