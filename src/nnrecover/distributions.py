"""Input distributions.

Every distribution has ``.dim``, ``.sample(n, rng=None, *, antithetic=False)``, the exact ``.mean`` and
``.covariance`` (second central moment), and ``.is_symmetric`` (x and -x have the same law: the
assumption of Ge et al. 2019 and of the Bakshi et al. symmetric-noise analysis).

``antithetic=True`` returns rows in pairs ``(x, -x)``: the empirical law is then exactly symmetric, so
every odd empirical moment vanishes (the exactness tests of Ge et al. rely on this). It is allowed only
for symmetric distributions, where ``-x`` has the same law as ``x``.

Symbol map:

* Ge et al.'s perturbed input D_{Q,lambda} (Section 5 / Theorem 10 smoothed analysis, Appendix C.2
  "(Q, lambda)-perturbation"): :class:`PerturbedSymmetric`, ``lam`` = lambda, ``Q`` = Q;
* Bakshi et al.'s N(0, I_d) input and Awasthi et al.'s standard Gaussian: :class:`StandardGaussian`;
* Ge et al.'s symmetric inputs (Assumption: x and -x equally likely): :class:`SymmetricMixture`,
  :class:`Rademacher`, :class:`Gaussian` with zero mean.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from ._validation import (
    as_float_array,
    check_finite,
    check_positive_int,
    check_random_state,
)
from .errors import InputError

__all__ = ["Distribution", "StandardGaussian", "Gaussian", "SymmetricMixture", "Rademacher",
           "PerturbedSymmetric"]


class Distribution(ABC):
    """Base class of the input laws. Subclasses set ``dim`` and implement ``covariance`` and ``_draw``.

    Attributes
    ----------
    dim : int
        Dimension ``d`` of a sample.
    """

    dim: int

    @property
    def mean(self) -> np.ndarray:
        """``E[x]``, shape (d,) (zero unless overridden)."""
        return np.zeros(self.dim)

    @property
    @abstractmethod
    def covariance(self) -> np.ndarray:
        """``Cov(x) = E[(x - mu)(x - mu)^T]``, shape (d, d), exact."""

    @property
    def second_moment(self) -> np.ndarray:
        """``E[x x^T] = Cov(x) + mu mu^T``, shape (d, d), exact."""
        mu = self.mean
        return self.covariance + np.outer(mu, mu)

    @property
    def is_symmetric(self) -> bool:
        """Whether ``-x`` has the same law as ``x`` (Ge et al.'s symmetric-input assumption)."""
        return True

    @property
    def is_standard_gaussian(self) -> bool:
        """Whether the law is exactly N(0, I_d) (the input model of Awasthi et al. and Bakshi et al.)."""
        return False

    def sample(self, n: int, rng=None, *, antithetic: bool = False) -> np.ndarray:
        """Draw ``n`` independent rows.

        Parameters
        ----------
        n : int
            Number of rows, ``>= 0``.
        rng : None, int or numpy.random.Generator
            Randomness (:func:`nnrecover._validation.check_random_state`); the same seed gives the same
            rows bit for bit.
        antithetic : bool, default False
            Emit rows in adjacent pairs ``(x, -x)`` (rows ``2j`` and ``2j+1``), from ``n/2`` draws. Needs
            an even ``n`` and a symmetric distribution.

        Returns
        -------
        ndarray of shape (n, dim)
        """
        n = check_positive_int(n, "n", minimum=0)
        gen = check_random_state(rng)
        if not antithetic:
            return self._draw(n, gen)
        if not self.is_symmetric:
            raise InputError(f"antithetic sampling emits pairs (x, -x), which needs a symmetric distribution; "
                             f"{self!r} is not symmetric (non-zero mean). Use antithetic=False.")
        if n % 2:
            raise InputError(f"antithetic sampling emits pairs (x, -x): n must be even, got {n}.")
        half = self._draw(n // 2, gen)
        out = np.empty((n, self.dim))
        out[0::2] = half
        out[1::2] = -half
        return out

    @abstractmethod
    def _draw(self, n: int, gen: np.random.Generator) -> np.ndarray:
        """``n`` i.i.d. rows from ``gen`` (validated arguments), shape (n, dim)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(dim={self.dim})"


class _IdentityCovariance(Distribution):
    """A law on R^d with identity covariance, given by its dimension alone."""

    def __init__(self, d: int):
        self.dim = check_positive_int(d, "d")

    @property
    def covariance(self) -> np.ndarray:
        return np.eye(self.dim)


class StandardGaussian(_IdentityCovariance):
    """The standard Gaussian N(0, I_d).

    Parameters
    ----------
    d : int
        Dimension, ``>= 1``.
    """

    @property
    def is_standard_gaussian(self) -> bool:
        return True

    def _draw(self, n, gen):
        return gen.standard_normal((n, self.dim))


def _psd_factor(cov: np.ndarray, name: str) -> np.ndarray:
    """A factor ``L`` with ``L L^T = cov`` from the eigendecomposition ``cov = V diag(lam) V^T``.

    ``L = V diag(sqrt(lam))`` with eigenvalues below the rank tolerance ``d eps max(lam)`` (numpy's
    ``matrix_rank`` rule) set to zero, so that samples of a singular covariance lie in its range to
    rounding. (A Cholesky factor of a singular matrix that happens to succeed has pivots of order
    ``sqrt(eps)``, which leak ~1e-8 of the sample out of the range.)
    """
    if cov.ndim != 2 or cov.shape[0] != cov.shape[1] or cov.shape[0] < 1:
        raise InputError(f"{name} must be a square (d, d) matrix, got shape {cov.shape}.")
    check_finite(cov, name)
    if not np.allclose(cov, cov.T, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(cov).max())):
        raise InputError(f"{name} must be symmetric.")
    vals, vecs = np.linalg.eigh((cov + cov.T) / 2)
    top = max(vals.max(), 0.0)
    if vals.min() < -1e-10 * max(1.0, top):
        raise InputError(f"{name} must be positive semi-definite (smallest eigenvalue {vals.min():.3g}).")
    vals = np.where(vals > cov.shape[0] * np.finfo(np.float64).eps * top, vals, 0.0)
    return vecs * np.sqrt(vals)


def _sym(M: np.ndarray) -> np.ndarray:
    """``(M + M^T) / 2``: a product ``B B^T`` from BLAS need not be exactly symmetric."""
    return (M + M.T) / 2


class Gaussian(Distribution):
    """The Gaussian N(mean, cov).

    Parameters
    ----------
    cov : array of shape (d, d)
        Symmetric positive semi-definite (singular allowed: samples then lie in its range).
    mean : array of shape (d,), optional
        Zero by default. A non-zero mean makes the law non-symmetric.
    """

    def __init__(self, cov, mean=None):
        self.cov = as_float_array(cov, "cov")
        self._factor = _psd_factor(self.cov, "cov")
        self.cov = _sym(self.cov)  # validated symmetric to 1e-10; make it exactly so
        self.dim = self.cov.shape[0]
        self._mean = np.zeros(self.dim) if mean is None else as_float_array(mean, "mean").reshape(-1)
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
        mu = as_float_array(means, "means")
        if mu.ndim == 1:
            mu = mu[None, :]
        if mu.ndim != 2 or mu.shape[0] < 1 or mu.shape[1] < 1:
            raise InputError(f"means must have shape (n_components, d), got {np.shape(means)}.")
        check_finite(mu, "means")
        self.means = mu
        self.dim = mu.shape[1]
        self.cov = np.eye(self.dim) if cov is None else as_float_array(cov, "cov")
        if self.cov.shape != (self.dim, self.dim):
            raise InputError(f"cov must be ({self.dim}, {self.dim}) to match means, got {self.cov.shape}.")
        self._factor = _psd_factor(self.cov, "cov")
        self.cov = _sym(self.cov)  # validated symmetric to 1e-10; make it exactly so

    @property
    def covariance(self):
        """``cov + (1/J) sum_j mu_j mu_j^T`` (the signs of +-mu_j cancel in the mean)."""
        return _sym(self.cov + self.means.T @ self.means / self.means.shape[0])

    def _draw(self, n, gen):
        comp = gen.integers(0, self.means.shape[0], size=n)
        sign = gen.choice([-1.0, 1.0], size=n)
        return gen.standard_normal((n, self.dim)) @ self._factor.T + sign[:, None] * self.means[comp]


class Rademacher(_IdentityCovariance):
    """Uniform on {-1, +1}^d (symmetric, identity covariance, not Gaussian).

    Parameters
    ----------
    d : int
        Dimension, ``>= 1``.
    """

    def _draw(self, n, gen):
        return gen.choice([-1.0, 1.0], size=(n, self.dim))


class PerturbedSymmetric(Distribution):
    """Ge et al.'s (Q, lambda)-perturbation D_{Q,lambda} of a symmetric distribution D.

    With probability ``1 - lam`` draw x ~ D, else x = Q n with n ~ N(0, I_d); Q has i.i.d. N(0, 1)
    entries unless given (Ge et al. Appendix C.2, "(Q, lambda)-perturbation"). The result is symmetric when D is,
    within total variation ``lam`` of D, and its second moment is the mixture
    ``(1 - lam) E_D[x x^T] + lam Q Q^T``.

    Parameters
    ----------
    base : Distribution
        The law D.
    lam : float in [0, 1]
        Mixing weight lambda of the Gaussian perturbation.
    Q : array (d, d), optional
        Mixing matrix; drawn with i.i.d. N(0, 1) entries from ``rng`` when omitted.
    rng : None, int or Generator
        Seed for drawing ``Q`` (used only when ``Q`` is not given).
    """

    def __init__(self, base: Distribution, lam: float, Q=None, rng=None):
        if not isinstance(base, Distribution):
            raise InputError(f"base must be an nnrecover distribution, got {type(base).__name__}.")
        try:
            lam = float(lam)
        except (TypeError, ValueError) as exc:
            raise InputError(f"lam must be a number in [0, 1], got {lam!r}.") from exc
        if not 0.0 <= lam <= 1.0:
            raise InputError(f"lam must be in [0, 1], got {lam}.")
        self.base, self.lam, self.dim = base, lam, base.dim
        if Q is None:
            Q = check_random_state(rng).standard_normal((self.dim, self.dim))
        self.Q = as_float_array(Q, "Q")
        if self.Q.shape != (self.dim, self.dim):
            raise InputError(f"Q must have shape ({self.dim}, {self.dim}), got {self.Q.shape}.")
        check_finite(self.Q, "Q")

    @property
    def mean(self):
        return (1 - self.lam) * self.base.mean

    @property
    def second_moment(self):
        return _sym((1 - self.lam) * self.base.second_moment + self.lam * self.Q @ self.Q.T)

    @property
    def covariance(self):
        mu = self.mean
        return _sym(self.second_moment - np.outer(mu, mu))

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
