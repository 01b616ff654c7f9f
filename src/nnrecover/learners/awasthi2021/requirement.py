"""How many samples a teacher needs, from the statistics of one pass (internal).

Algorithm 4 reads the units from ``flatten(T_{2l+1}, l, l+1)`` and ``flatten(T_{2l+2}, l, l+2)``: unit ``i``
is a rank-one term of the first with coefficient ``alpha'_i = -xi_i a_i He_{2l-1}(b_i) phi(b_i)`` and of
the second with ``alpha''_i = a_i He_{2l}(b_i) phi(b_i)`` (Lemma 3.5). A unit whose bias is a root of one
Hermite polynomial vanishes from that tensor, but never from both (Lemma 4.3), so neither flattening
alone need have rank ``m``. Their concatenation does, once each is divided by its own spectral noise
``sigma^_K`` (the split-sample estimate of Algorithm 4's thresholds):

    M = [flatten(T_{2l+1}) / sigma^_{2l+1},  flatten(T_{2l+2}) / sigma^_{2l+2}]     (n^l rows)

``M = A diag(.) B^T + E`` with ``A = W^{(.)l}`` (its columns independent: the assumption of Theorem 3.2)
and ``||E|| = nu``, measured the same way from the two halves. Its ``m``-th singular value ``s_m`` carries
the weakest unit's strength in noise units, the joint signal-to-noise ratio that the rank selection, the
Jennrich pencil and the scalar filter all depend on. It is read through the spiked random-matrix model
(Benaych-Georges and Nadakuditi 2012): for a ``p x q`` matrix ``theta u v^T + E``, ``E`` with i.i.d. entries of
scale ``sigma`` (``||E|| = sigma (1 + sqrt(c))``, ``c = p / q``), a signal ``theta > c^(1/4) sigma`` gives the
outlier ``s^2 = sigma^2 (1 + t^2)(c + t^2) / t^2`` (``t = theta / sigma``), and a weaker one none. Inverting it
with ``sigma = nu / (1 + sqrt(c))`` gives ``theta_m``; every ``sigma^_K`` falls like ``1 / sqrt(N)``, so with
``N`` rows

    N_needed = N (snr sigma / theta_m)^2

is the number of rows at which ``theta_m / sigma`` reaches ``snr``. When ``s_m`` is not above the noise edge
``nu`` (the weakest unit is not seen), only a lower bound is known: ``theta_m`` is then at most the signal
whose outlier would sit at ``1.05 nu``. The default ``snr`` is calibrated on the sweep of the experiment
``awasthi2021-overcomplete-samples`` (:data:`REQUIRED_SNR`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import linalg

from ...errors import InputError
from ...tensor import flatten

__all__ = ["REQUIRED_SNR", "rows_needed", "sample_requirement", "spike_strength"]

EDGE_MARGIN = 1.05
"""An ``m``-th singular value below ``1.05 nu`` counts as not seen (the edge of the noise fluctuates)."""

REQUIRED_SNR = 1.0
"""Joint signal-to-noise ratio ``theta_m / sigma`` (see the module docstring) at which Algorithm 4 recovers
every unit: calibrated on ``benchmarks/bench_awasthi_overcomplete.py`` (docs/papers/awasthi2021.rst)."""


def spike_strength(s: float, c: float) -> float:
    """Signal ``t = theta / sigma`` of a rank-one spike whose outlier singular value is ``s`` (in units of
    ``sigma``) in a ``p x q`` noise matrix, ``c = p / q <= 1``: the root of
    ``s^2 t^2 = (1 + t^2)(c + t^2)`` above ``c^(1/4)``; ``c^(1/4)`` at or below the edge ``1 + sqrt(c)``."""
    u = s * s - 1.0 - c
    disc = u * u - 4.0 * c
    if u <= 0 or disc <= 0:
        return c ** 0.25
    return math.sqrt(0.5 * (u + math.sqrt(disc)))


def rows_needed(s_m: float, aspect: float, n_samples: int, snr: float = REQUIRED_SNR) -> tuple[int, bool, float]:
    """``(N_needed, lower_bound, theta_m / sigma)`` from the ``m``-th singular value ``s_m`` of the joint matrix
    in units of its noise norm ``nu`` (see the module docstring), its aspect ratio ``c = p / q`` and the rows
    ``N`` it was estimated from."""
    sigma = 1.0 / (1.0 + math.sqrt(aspect))  # in units of nu
    lower = not s_m > EDGE_MARGIN
    theta = spike_strength(max(s_m, EDGE_MARGIN) / sigma, aspect)
    need = int(math.ceil(n_samples * (snr / theta) ** 2))
    if lower:  # the weakest unit is not seen with N rows: more are needed, however strong it may be
        need = max(need, int(n_samples) + 1)
    return need, bool(lower), float(theta)


def _joint(tensors: dict, order: int, noise: dict) -> np.ndarray:
    blocks = []
    for K in (2 * order + 1, 2 * order + 2):
        sig = float(noise[K])
        F = flatten(tensors[K], order, K - order)
        blocks.append(F / sig)
    return np.hstack(blocks)


def sample_requirement(coeffs, order: int, n_hidden: int, *, snr: float = REQUIRED_SNR) -> dict:
    """Rows this teacher needs for Algorithm 4 to see all ``n_hidden`` units, from one pass's estimates.

    Parameters
    ----------
    coeffs : HermiteCoefficients
        Estimated coefficients with split halves (``coeffs.halves``) and noise levels.
    order : int
        ``l``.
    n_hidden : int
        ``m``.
    snr : float
        Joint signal-to-noise ratio required (default :data:`REQUIRED_SNR`).

    Returns
    -------
    dict
        ``n_samples`` (``N``), ``n_needed`` (rows at which ``theta_m / sigma = snr``; when ``lower_bound``
        a lower bound, and more than ``N``), ``enough`` (``N >= n_needed``), ``joint_snr``
        (``theta_m / sigma`` at ``N``), ``joint_aspect`` (``c``), ``joint_singular_values`` (the top
        ``m + 1`` of ``M`` over ``nu``), ``noise_norm`` (``nu``), ``required_snr``, ``lower_bound``,
        ``meaning``. Exact coefficients or missing halves: ``None``.
    """
    if not (np.isfinite(snr) and snr > 0):
        raise InputError(f"snr must be a positive number, got {snr!r}.")
    if coeffs.exact or not coeffs.halves or not coeffs.n_samples:
        return None
    Ks = (2 * order + 1, 2 * order + 2)
    if any(K not in coeffs.tensors or not coeffs.noise.get(K, 0) > 0 for K in Ks):
        return None
    m = int(n_hidden)
    N = int(coeffs.n_samples)
    M = _joint(coeffs.tensors, order, coeffs.noise)
    sv = linalg.svdvals(M)
    nA, nB = (sum(n for _, n in coeffs.groups[0::2]), sum(n for _, n in coeffs.groups[1::2])) \
        if coeffs.groups else (N / 2, N / 2)
    scale = math.sqrt(nA * nB) / (nA + nB)
    D = _joint({K: coeffs.halves[0][K] - coeffs.halves[1][K] for K in Ks}, order, coeffs.noise)
    nu = float(scale * linalg.svdvals(D)[0])
    c = min(M.shape) / max(M.shape)
    s_m = float(sv[m - 1]) / nu if m <= sv.size else 0.0
    need, lower, theta = rows_needed(s_m, c, N, snr)
    return {"n_samples": N, "n_needed": need, "enough": bool(N >= need and not lower),
            "joint_snr": theta, "joint_aspect": c, "joint_singular_values": (sv[: m + 1] / nu).tolist(), "noise_norm": nu,
            "required_snr": float(snr), "lower_bound": bool(lower),
            "meaning": ("rows at which the m-th singular value of [flatten(T_{2l+1}) / sigma_{2l+1}, "
                        "flatten(T_{2l+2}) / sigma_{2l+2}] (each flattening over its split-sample spectral noise; "
                        "read through the spiked random-matrix model) reaches required_snr times the noise scale of "
                        "that matrix, which falls as 1/sqrt(N); a lower bound when the m-th singular value is within "
                        "the noise")}
