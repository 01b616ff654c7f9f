"""``P`` of higher degree in each variable (Appendix B.7, Assumption 4, Lemmas 17-18).

Goel & Panigrahy (2019), Appendix B.7. With ``P(X) = sum_r c_r prod_i X_i^{r_i}`` (any degree per
variable) the role of ``f_lin`` is played by the univariate part

    ``f_uni(x) = sum_i q_i(u_t(w_i.x))``, ``q_i(x) = P(0, .., x (slot i), .., 0) - c_0``,

and the per-unit Hermite coefficients ``a_i^(k) = E[q_i(u_t(g)) h_k(g)] = sum_r c_{r e_i} E[u_t(g)^r h_k(g)]``
replace ``c_i u_hat_k``: ``E[f_uni H_k(z.x)] = sum_i a_i^(k) (z.w_i)^k`` (Lemma 9 applied to the
activation ``q_i o u_t``). Lemma 17: products of distinct units are small,
``E[prod_i u_t(w_i.x)^{r_i}] <= rho(t, 1) O(rho(t, |W*|))^{|r|_0 - 1}`` (the exponent counts distinct
units, not the degree); Lemma 18: ``E|f - f_uni| <= d^{O(1)} rho(t, 1) rho(t, |W*|)``.

Assumption 4 makes ``a_i^(2)`` and ``a_i^(4)`` of size ``t^{Theta(1)} rho(t, 1)`` with one sign per ``k``.
The Step 1 routes then work unchanged with ``T = diag(sqrt(a_i^(2)/u_hat_2))`` in place of
``diag(sqrt(c_i))``: the normalised ``M = sum_i (a_i^(2)/u_hat_2) w_i w_i^T`` and the whitened quartic
``sum_i (a_i^(4)/u_hat_4)(u_hat_2/a_i^(2))^2 y_i^4``, which has the ``y_i`` as its maxima only when every
``a_i^(4)/u_hat_4 > 0``. :func:`higher_degree_step1` checks this sign on the directions it returns (the
whitened quartic value ``m_4`` at each dual vector has the sign of ``a_i^(4)/u_hat_4``) and refuses when
it fails.
"""

from __future__ import annotations

import numpy as np

from ..._validation import check_positive_int
from ...errors import AssumptionError, InputError
from ..registry import register
from .model import HighThresholdNetwork, UpperPolynomial, threshold_hermite_coefficients
from .step1 import Step1Result, step1

__all__ = ["univariate_parts", "univariate_hermite_coefficients", "assumption4_check", "higher_degree_step1"]


def univariate_parts(upper: UpperPolynomial) -> list[dict]:
    """``q_i`` as ``{power: coefficient}`` per unit (monomials of ``P`` in ``X_i`` alone, constant dropped)."""
    if not isinstance(upper, UpperPolynomial):
        raise InputError(f"upper must be an UpperPolynomial, got {type(upper).__name__}.")
    parts: list[dict] = [dict() for _ in range(upper.n_vars)]
    for key, c in upper.coefficients.items():
        nz = [i for i, e in enumerate(key) if e]
        if len(nz) == 1:
            i = nz[0]
            parts[i][key[i]] = parts[i].get(key[i], 0.0) + c
    return parts


def univariate_hermite_coefficients(network: HighThresholdNetwork, k_max: int = 4) -> np.ndarray:
    """``a_i^(k) = E[q_i(u_t(g)) h_k(g)]`` for k = 0..k_max (rows: units). Appendix B.7."""
    if not isinstance(network, HighThresholdNetwork):
        raise InputError(f"network must be a HighThresholdNetwork, got {type(network).__name__}.")
    if not isinstance(network.upper, UpperPolynomial):
        raise InputError("the univariate parts need P as a polynomial (a callable upper part has none).")
    k_max = check_positive_int(k_max, "k_max", minimum=0)
    parts = univariate_parts(network.upper)
    cache: dict[int, np.ndarray] = {}
    out = np.zeros((network.n_hidden, k_max + 1))
    for i, q in enumerate(parts):
        for r, c in q.items():
            if r not in cache:
                cache[r] = threshold_hermite_coefficients(network.activation, network.threshold, k_max, power=r)
            out[i] += c * cache[r]
    return out


def assumption4_check(network: HighThresholdNetwork) -> dict:
    """Assumption 4's sign conditions on the per-unit coefficients (for a known network; diagnostics).

    Returns
    -------
    dict
        ``a2``, ``a4`` (per unit), ``scaled2 = a2/u_hat_2`` (the ``T^2`` of Step 1), ``scaled4 = a4/u_hat_4``,
        ``met``: every ``scaled2 > 0`` and every ``scaled4 > 0``.
    """
    a = univariate_hermite_coefficients(network, 4)
    u = threshold_hermite_coefficients(network.activation, network.threshold, 4)
    s2, s4 = a[:, 2] / u[2], a[:, 4] / u[4]
    return {"a2": a[:, 2], "a4": a[:, 4], "scaled2": s2, "scaled4": s4,
            "met": bool(np.all(s2 > 0) and np.all(s4 > 0))}


def higher_degree_step1(moments, n_hidden: int, *, method: str = "power", rng=None, **options) -> Step1Result:
    """Step 1 for ``P`` of higher degree per variable (Appendix B.7), with Assumption 4's sign check.

    Parameters
    ----------
    moments : SampleMoments or PopulationMoments
        The normalised moments of the labels (:mod:`.statistics`).
    n_hidden : int
    method : {"power", "landscape", "simultaneous"}
    rng : None, int or Generator
    **options
        Passed to the Step 1 route.

    Returns
    -------
    Step1Result
        ``coefficients`` estimate ``a_i^(2)/u_hat_2`` (not ``c_i``); ``info["quartic_signs"]`` holds the
        ``m_4`` value at each dual vector (population: ``(a_i^(4)/u_hat_4)(u_hat_2/a_i^(2))^2``).

    Raises
    ------
    AssumptionError
        Some ``m_4`` at a returned dual vector is ``<= 0`` (Assumption 4: ``a_i^(4)`` must have the
        sign of ``u_hat_4`` for every unit), or ``M`` is not positive definite (``a_i^(2)/u_hat_2 <= 0``).
    """
    res = step1(moments, n_hidden, method=method, rng=rng, **options)
    m4 = np.array([moments.m4(res.duals[:, i]) for i in range(res.duals.shape[1])])
    res.info["quartic_values"] = m4
    if np.any(m4 <= 0):
        raise AssumptionError(
            f"the whitened quartic is not positive at every recovered direction (values {np.round(m4, 6)}): "
            "Appendix B.7 / Assumption 4 needs a_i^(4) = E[q_i(u_t(g)) h_4(g)] of the sign of u_hat_4 for every "
            "unit; the directions returned for the other units are not its maxima.")
    return res


register("goel2019-appendixB7", paper="goel2019", algorithm="Appendix B.7, Assumption 4, Lemmas 17-18",
         target=higher_degree_step1,
         assumptions=("x ~ N(0, I)", "P of any degree per variable", "Assumption 4: a_i^(2), a_i^(4) of one sign",
                      "rho(t, norm(W*)) <= d^-C (Lemma 18)"),
         description="Step 1 with T = diag(sqrt(a_i^(2)/u_hat_2)) from the univariate parts q_i; sign check")
