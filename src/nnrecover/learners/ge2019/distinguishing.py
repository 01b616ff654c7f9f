"""Distinguishing matrices, the population detector ``T = M B C F`` and smoothed perturbations.

Paper symbol -> name here (Ge, Kuditipudi, Li, Wang 2019):

- Definition 1, ``N_ij = E[(w_i.x)(w_j.x)(x (x) x) 1{(w_i.x)(w_j.x) <= 0}]``, ``i < j`` -> columns of
  :func:`distinguishing_matrix` (``d^2 x k_2``, pairs in ``triu_indices(k, 1)`` order); the augmented
  ``M = [N, E[x (x) x]]`` with ``augmented=True``; the scalars ``m_ij`` with ``return_scalars=True``.
- Lemma 19 (closed form for ``N(0, I)``) and the proof of Theorem 10 (``N(0, Q Q^T)``:
  ``M^{D_Q} = (Q (x) Q) M^{W Q}``) -> :func:`gaussian_distinguishing_matrix`; a ``(Q, lambda)``
  perturbation is a mixture, so its matrix is the mixture of the matrices (Appendix C.2).
- Appendix B.1.1, ``T = M B C F`` with ``F`` the duplication matrix, ``C`` the ``i < j`` rows of
  ``A^T (x) A^T`` and ``B = [I; -m^T]`` -> :func:`population_detector_matrix`; Lemma 14:
  ``sigma_{k_2}(T) >= sigma_min(M) sigma_min(A)^2``.
- Eq. 18, ``W~ = W + rho E`` -> :func:`perturb_weights`; Definition 2 (leave-one-out distance) ->
  :func:`leave_one_out_distance`.
"""

from __future__ import annotations

import numpy as np

from ..._validation import as_2d_float, check_random_state
from ...distributions import (
    Distribution,
    Gaussian,
    PerturbedSymmetric,
    StandardGaussian,
)
from ...errors import InputError
from .symmetric import duplication_matrix

__all__ = ["distinguishing_matrix", "gaussian_distinguishing_matrix", "population_detector_matrix",
           "perturb_weights", "leave_one_out_distance"]


def _check_W(W) -> np.ndarray:
    W = as_2d_float(W, "hidden_weights")
    if np.any(np.linalg.norm(W, axis=1) == 0):
        raise InputError("hidden_weights has a zero row; every hidden unit needs a non-zero weight vector.")
    return W


def gaussian_distinguishing_matrix(hidden_weights, cov=None, *, augmented: bool = False,
                                   return_scalars: bool = False):
    """Closed-form distinguishing matrix for ``x ~ N(0, cov)`` (Lemma 19; Theorem 10's ``Q``-form).

    Parameters
    ----------
    hidden_weights : (k, d) array ``W`` (rows need not have unit norm)
    cov : (d, d) array, optional
        Covariance ``Q Q^T`` of the input (identity by default).
    augmented : bool
        Append the column ``E[x (x) x] = vec(cov)`` (the matrix ``M``).
    return_scalars : bool
        Also return ``m_ij = E[(w_i.x)(w_j.x) 1{. <= 0}]`` (shape ``(k_2,)``).

    Returns
    -------
    N or M : array (d*d, k_2) or (d*d, k_2 + 1); optionally ``m``.

    Notes
    -----
    For unit-free weights with angle ``phi`` between ``w_i`` and ``w_j`` (Lemma 19):
    ``mat(N_ij) = (phi cos phi - sin phi)|w_i||w_j| I / pi + phi (w_i w_j^T + w_j w_i^T) / pi
    - sin phi (|w_i|/|w_j| w_j w_j^T + |w_j|/|w_i| w_i w_i^T) / pi`` and
    ``m_ij = (phi cos phi - sin phi)|w_i||w_j| / pi``. For ``N(0, Q Q^T)`` apply it to ``W Q`` and map
    back: ``mat(N_ij) = Q mat(N_ij^{WQ}) Q^T``.
    """
    W = _check_W(hidden_weights)
    k, d = W.shape
    if cov is None:
        Q = None
        Wq = W
    else:
        cov = np.asarray(cov, dtype=np.float64)
        if cov.shape != (d, d):
            raise InputError(f"cov must have shape ({d}, {d}), got {cov.shape}.")
        vals, vecs = np.linalg.eigh((cov + cov.T) / 2)
        if vals.min() < -1e-12 * max(1.0, vals.max()):
            raise InputError("cov must be positive semi-definite.")
        Q = vecs * np.sqrt(np.clip(vals, 0, None))
        Wq = W @ Q
    norms = np.linalg.norm(Wq, axis=1)
    ip, jp = np.triu_indices(k, 1)
    cos = np.clip(np.sum(Wq[ip] * Wq[jp], axis=1) / (norms[ip] * norms[jp]), -1.0, 1.0)
    phi = np.arccos(cos)
    sin = np.sin(phi)
    ni, nj = norms[ip], norms[jp]
    m = (phi * cos - sin) * ni * nj / np.pi
    wi, wj = Wq[ip], Wq[jp]  # (k2, d)
    mats = (m[:, None, None] * np.eye(d)[None]
            + (phi / np.pi)[:, None, None] * (wi[:, :, None] * wj[:, None, :] + wj[:, :, None] * wi[:, None, :])
            - (sin / np.pi)[:, None, None] * ((ni / nj)[:, None, None] * wj[:, :, None] * wj[:, None, :]
                                              + (nj / ni)[:, None, None] * wi[:, :, None] * wi[:, None, :]))
    if Q is not None:
        mats = Q @ mats @ Q.T
    N = mats.reshape(len(ip), d * d).T  # symmetric matrices: row- and column-major vec agree
    if augmented:
        second = np.eye(d) if Q is None else Q @ Q.T
        N = np.hstack([N, second.reshape(-1, 1)])
    return (N, m) if return_scalars else N


def _empirical(W: np.ndarray, X: np.ndarray, augmented: bool, chunk_size: int):
    k, d = W.shape
    ip, jp = np.triu_indices(k, 1)
    n = X.shape[0]
    iu = np.triu_indices(d)
    Npk = np.zeros((iu[0].size, len(ip)))
    m = np.zeros(len(ip))
    second = np.zeros((d, d))
    for start in range(0, n, chunk_size):
        Xc = X[start:start + chunk_size]
        Z = Xc @ W.T
        prod = Z[:, ip] * Z[:, jp]
        c = np.where(prod <= 0, prod, 0.0)
        Npk += (Xc[:, iu[0]] * Xc[:, iu[1]]).T @ c
        m += c.sum(axis=0)
        second += Xc.T @ Xc
    Npk /= n
    N = np.empty((d * d, len(ip)))
    N[iu[0] + d * iu[1]] = Npk
    N[iu[1] + d * iu[0]] = Npk
    if augmented:
        N = np.hstack([N, (second / n).reshape(-1, 1)])
    return N, m / n


def distinguishing_matrix(hidden_weights, source, *, augmented: bool = False, return_scalars: bool = False,
                          chunk_size: int = 8192):
    """Distinguishing matrix ``N`` (Definition 1) or augmented ``M``, exact or by Monte Carlo.

    Parameters
    ----------
    hidden_weights : (k, d) array ``W``
    source : Distribution or (n, d) array
        A zero-mean Gaussian distribution (:class:`~nnrecover.distributions.StandardGaussian`,
        :class:`~nnrecover.distributions.Gaussian`) or a ``(Q, lambda)`` perturbation of one
        (:class:`~nnrecover.distributions.PerturbedSymmetric`) gives the closed form (Lemma 19, Theorem
        10 and the mixture rule ``M^{D'} = (1 - lambda) M^D + lambda M^{D_Q}``); an array of samples gives
        the empirical average (the Monte Carlo estimate for any other distribution).
    augmented, return_scalars : bool
        See :func:`gaussian_distinguishing_matrix`.
    chunk_size : int
        Rows per block for the Monte Carlo average.

    Returns
    -------
    N or M : array (d*d, k_2) or (d*d, k_2 + 1); optionally ``m`` (k_2,).
    """
    W = _check_W(hidden_weights)
    d = W.shape[1]
    if isinstance(source, Distribution):
        if source.dim != d:
            raise InputError(f"the distribution has dim {source.dim} but hidden_weights has {d} columns.")
        if isinstance(source, StandardGaussian):
            return gaussian_distinguishing_matrix(W, None, augmented=augmented, return_scalars=return_scalars)
        if isinstance(source, Gaussian):
            if np.any(source.mean):
                raise InputError("the closed form needs a zero-mean (symmetric) Gaussian; pass samples for "
                                 "a Monte Carlo estimate instead.")
            return gaussian_distinguishing_matrix(W, source.covariance, augmented=augmented,
                                                  return_scalars=return_scalars)
        if isinstance(source, PerturbedSymmetric):
            base = distinguishing_matrix(W, source.base, augmented=augmented, return_scalars=True)
            pert = gaussian_distinguishing_matrix(W, source.Q @ source.Q.T, augmented=augmented,
                                                  return_scalars=True)
            lam = source.lam
            N = (1 - lam) * base[0] + lam * pert[0]
            m = (1 - lam) * base[1] + lam * pert[1]
            return (N, m) if return_scalars else N
        raise InputError(f"no closed-form distinguishing matrix for {type(source).__name__}; pass an array "
                         "of samples from it for a Monte Carlo estimate.")
    X = as_2d_float(source, "source", n_features=d)
    N, m = _empirical(W, X, augmented, int(chunk_size))
    return (N, m) if return_scalars else N


def population_detector_matrix(output_weights, M, m, *, noise_correction: bool = True) -> np.ndarray:
    """The detector matrix ``T`` assembled from its factorisation ``T = M B C F`` (Appendix B.1.1).

    Parameters
    ----------
    output_weights : (k, k) array ``A``
    M : (d*d, k_2 + 1) array
        Augmented distinguishing matrix (pairs in ``triu_indices(k, 1)`` order, ``E[x (x) x]`` last).
    m : (k_2,) array
        The scalars ``m_ij``.
    noise_correction : bool
        True: Eq. 11's detector, ``T = M B C F``. False: the noiseless detector, ``T = N C F``.

    Returns
    -------
    T : (d*d, k(k+1)/2) array with ``T vec*(U) = sum_{i<j} (A^T U A)_ij (N_ij - m_ij E[x (x) x])``.
    """
    A = np.asarray(output_weights, dtype=np.float64)
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise InputError(f"output_weights must be square (k, k) here, got {A.shape}.")
    k = A.shape[0]
    k2 = k * (k - 1) // 2
    M = np.asarray(M, dtype=np.float64)
    m = np.asarray(m, dtype=np.float64).reshape(-1)
    if M.ndim != 2 or M.shape[1] != k2 + 1 or m.shape != (k2,):
        raise InputError(f"M must have k_2 + 1 = {k2 + 1} columns and m length {k2}; got {M.shape}, {m.shape}.")
    ip, jp = np.triu_indices(k, 1)
    C = np.kron(A.T, A.T)[ip + k * jp]  # row (i, j) of A^T (x) A^T: vec position i + k j (column-major)
    F = duplication_matrix(k)
    if not noise_correction:
        return M[:, :k2] @ C @ F
    B = np.vstack([np.eye(k2), -m[None, :]])
    return M @ B @ C @ F


def perturb_weights(hidden_weights, rho: float, rng=None) -> np.ndarray:
    """Smoothed-analysis perturbation ``W~ = W + rho E``, ``E_ij ~ N(0, 1)`` i.i.d. (Eq. 18).

    Parameters
    ----------
    hidden_weights : (k, d) array
    rho : float >= 0
    rng : int, Generator or None

    Returns
    -------
    (k, d) array
    """
    W = as_2d_float(hidden_weights, "hidden_weights")
    rho = float(rho)
    if not (np.isfinite(rho) and rho >= 0):
        raise InputError(f"rho must be a finite number >= 0, got {rho}.")
    return W + rho * check_random_state(rng).standard_normal(W.shape)


def leave_one_out_distance(matrix, *, special_column: int | None = None) -> float:
    """Leave-one-out distance ``d(A) = min_i ||(I - Proj_{S_-i}) A_i||`` (Definition 2).

    Lemma 20: ``d(A) >= sigma_min(A) >= d(A) / sqrt(n)`` for ``A`` with ``n`` columns. With
    ``special_column`` the minimum runs over the other columns only (``d'(A)`` of Lemma 21).
    """
    A = as_2d_float(matrix, "matrix")
    n = A.shape[1]
    cols = [i for i in range(n) if i != special_column]
    best = np.inf
    for i in cols:
        others = np.delete(A, i, axis=1)
        if others.shape[1]:
            coef = np.linalg.lstsq(others, A[:, i], rcond=None)[0]
            r = A[:, i] - others @ coef
        else:
            r = A[:, i]
        best = min(best, float(np.linalg.norm(r)))
    return best
