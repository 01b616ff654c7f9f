r"""Hermite polynomials, multivariate Hermite tensors and their implicit contractions.

Conventions (Awasthi-Tang-Vijayaraghavan 2021, "ATV21"; their Appendix A, Definition A.2)
-----------------------------------------------------------------------------------------
Paper symbol -> name here:

* ``He_k`` (probabilists', leading coefficient 1) -> :func:`hermite_1d`, :func:`hermite_1d_all`;
  ``h_k = He_k / sqrt(k!)`` -> the same with ``normalized=True``.
* ``He_k(x)`` in ``(R^d)^{(x)k}`` (Def. A.2) -> :func:`hermite_tensor` (dense, small d).
* ``He_k(x)[u_1, ..., u_k]`` -> :func:`hermite_contract` (matching sum, no d^k array);
  ``He_k(x)[u, ..., u] = |u|^k He_k(u.x/|u|)`` -> :func:`hermite_rank_one`.
* ``He_3(x)[., ., g]``, ``He_4(x)[., ., G]`` and their higher-order analogues ->
  :func:`hermite_vector_slice`, :func:`hermite_matrix_slice`.
* ``c_k(b)`` of Lemma 3.5 -> :func:`nnrecover.hermite.expansions.activation_hermite_coefficients` (any
  activation, any row norm).
* ``f_hat_k = E[f(x) He_k(x)] = sum_i a_i c_k(b_i) w_i^{(x)k}`` (Lemma 3.5) ->
  :class:`nnrecover.hermite.expansions.HermiteExpansion`, :func:`~nnrecover.hermite.expansions.network_hermite_expansion`.
* ``T_k = (1/N) sum_n y_n He_k(x_n)`` (eq. (6)) -> the statistics of :mod:`nnrecover.hermite.statistics`
  (raw moments assembled by :func:`assemble_hermite_tensor`).

Everything is unnormalised (``E[He_j(z) He_k(z)] = k! delta_jk``), exactly as in the paper; the
expansion is ``f(x) = sum_k <f_hat_k, He_k(x)> / k!`` (ATV21 Appendix A). Do not mix with the
orthonormal ``h_k`` convention, whose coefficients are ``f_hat_k / sqrt(k!)``.

Formulas used (ATV21 Definition A.2 and eq. (12); every one is cross-checked in tests/hermite/test_hermite_algebra.py)
----------------------------------------------------------------------------------------------------------------------
* 1-D recurrences ``He_{k+1} = t He_k - k He_{k-1}`` and
  ``h_{k+1} = (t h_k - sqrt(k) h_{k-1}) / sqrt(k+1)``; never the monomial form.
* Scaled recurrence for non-unit contraction vectors: with ``t = u.x`` and ``s2 = |u|^2``,
  ``H_k := |u|^k He_k(t/|u|)`` obeys ``H_{k+1} = t H_k - k s2 H_{k-1}`` (no division by ``|u|``,
  so ``u = 0`` is fine: ``H_0 = 1`` and ``H_k = 0`` for k >= 1).
* Tensor recursion ``He_{k+1}(x)_{i_0..i_k} = x_{i_0} He_k(x)_{i_1..i_k}
  - sum_r delta_{i_0 i_r} He_{k-1}(x)_{i_1..^i_r..i_k}`` (used by :func:`hermite_tensor`).
* Gaussian (Wick) form ``He_k(x) = E_g[(x + i g)^{(x)k}]``, g ~ N(0, I): expanding,
  ``He_k(x) = sum_j (-1)^j sum_{|P| = 2j} E[g^{(x)2j}]_P (x) x^{(x)(k-2j)}_{P^c}``, the inner sum over
  the C(k, 2j) position sets P and ``E[g^{(x)2j}]`` the Isserlis tensor (sum over perfect matchings of
  identity factors). Averaging over samples replaces ``x^{(x)r}`` by the raw moments
  ``S_r = mean(y x^{(x)r})``: :func:`assemble_hermite_tensor`. Projections: contracting every slot with
  the columns of a ``d x m`` matrix P replaces x by ``P^T x`` and I by ``P^T P``; for an orthonormal
  basis this is the identity ``He_k(x)[P, ..., P] = He_k(P^T x)`` (Hermite tensor in m dimensions).
* Full contraction: ``He_k(x)[u_1..u_k] = sum_{partial matchings M} (-1)^|M|
  prod_{(a,b) in M} <u_a, u_b> prod_{c not in M} <x, u_c>``, evaluated by the subset recursion
  ``F(S) = <x, u_s> F(S - s) - sum_{t in S - s} <u_s, u_t> F(S - s - t)`` (s = min S), memoised.
* Slices with f free slots (from the recursion contracted with the last slots):
  ``He_{f+1}(x)[.^f, g] = (g.x) He_f(x) - sum_r g@r (x) He_{f-1}(x)``,
  ``He_{f+2}(x)[.^f, G] = (x'Gx - tr G) He_f(x) - 2 sum_r (Gx)@r (x) He_{f-1}(x)
  + sum_{r != s} G@(r,s) (x) He_{f-2}(x)`` (G symmetrised), where ``v@r (x) T`` puts v in slot r and
  T in the other slots. For f = 2 these are the contractions of ATV21 eq. (12). The sample
  statistics use ``E[y (Gx)@r (x) He_{f-1}] = (G x_r T_f) + sum_{t != r} G@(r,t) (x) T_{f-2}``
  (``x_r``: product with G in mode r), which needs only raw moments, because
  ``x (x) He_{f-1}(x) = He_f(x) + sum_t I@(0,t) (x) He_{f-2}(x)``.
* General partial contraction with f free slots and c vectors: summing the matching form by the
  role of each contracted slot (paired with a free slot: set A, injection pi; paired with another
  contracted slot: perfect matching M of B; single: set R),
  ``He_{f+c}(x)[.^f, v_1..v_c] = sum (-1)^{|A|+|M|} prod_M <v_a, v_b>
  sum_pi (v_a @ pi(a))_{a in A} (x) [prod_{r in R} (v_r.x)] He_{f-|A|}(x)``; the bracket times y is
  averaged from raw moments weighted by ``y prod_R (v_r.x)``.
* Lemma 3.5 for a unit ``act(w.x + b)`` with ``w = s u``, ``|u| = 1``:
  ``E[act(w.x + b) He_k(x)] = c_k(b; s) u^{(x)k}``, ``c_k(b; s) = E_z[act(s z + b) He_k(z)]``.
  Positively homogeneous activations of degree q (relu, leaky_relu, step, relu_power, identity):
  ``c_k(b; s) = s^q c_k(b/s; 1)`` (the canonical form of ``TwoLayerNetwork.canonical``). Other
  activations: ``exp`` has the closed form ``s^k exp(b + s^2/2)``; the rest are integrated
  numerically for the scaled activation ``t -> act(s t)`` at bias ``b/s`` (kinks rescaled by 1/s).
  ``s = 0`` gives the constant ``act(b)``: ``c_0 = act(b)``, ``c_k = 0`` for k >= 1.

Design (moments interface)
--------------------------
This module is pure math on arrays: per-sample tensors and contractions, the raw-moment assembly, and
the population expansion :class:`HermiteExpansion` (``f_hat_k = sum_i beta_{k,i} u_i^{(x)k}``, a
symmetric CP form, so every contraction is a few small matrix products). The streaming layer lives in
:mod:`nnrecover.hermite.statistics`:

* one :class:`~nnrecover.moments.Statistic` per estimate (dense/projected tensor, rank-one
  contractions, full contractions, vector slices, matrix slices). Each accumulates **weighted raw
  moments** (``sum_n w_n x_n^{(x)r}``, one GEMM per order over the distinct monomials of the rows)
  or per-sample contractions, so ``update``/``merge`` are plain additions; ``finalize`` assembles the
  Hermite quantity. Each statistic also has ``exact(network)``, the same quantity from Lemma 3.5 with the
  same shape, so one object describes "what to compute" in both modes.
* ``HermiteMoments`` (abstract) with ``SampleHermiteMoments(data)`` (one pass over the data per call,
  via :func:`~nnrecover.moments.accumulate`; ``compute`` runs several statistics in one pass) and
  ``PopulationHermiteMoments(network)`` (exact). Same methods, same shapes.

Shapes: statistics always return a leading output axis of length p; ``HermiteMoments`` drops it when
there is a single output (like ``TwoLayerNetwork.predict``) or an ``output`` was selected.

Modules
-------
================================  ========================================================================
:mod:`~.polynomials`              ``He_k``, ``h_k`` and ``|u|^k He_k(t/|u|)`` in one variable (the one He_k)
:mod:`~.tensors`                  ``He_k(x)`` tensors, contractions, slices, the Wick assembly of raw moments
:mod:`~.expansions`               ``c_k(b)`` of an activation and the expansion ``f_hat_k`` of a network
:mod:`~.statistics`               the streamed estimates ``T_k`` and their contractions (eq. (6))
================================  ========================================================================

This package face holds the polynomial and tensor algebra only. :mod:`nnrecover.activations` computes
``c_k(b)`` with :func:`hermite_1d_all`, and the expansions and statistics build on the activations, the
networks and the data passes: they are imported by their own paths
(``nnrecover.hermite.expansions``, ``nnrecover.hermite.statistics``), so that the activations can import
this package without a circle (docs/design.md, "Layout").
"""

from __future__ import annotations

from .polynomials import hermite_1d, hermite_1d_all, scaled_hermite_all
from .tensors import (
    MAX_CONTRACTION_ORDER,
    MAX_DENSE_ELEMENTS,
    assemble_hermite_tensor,
    gaussian_moment_tensor,
    hermite_contract,
    hermite_matrix_slice,
    hermite_rank_one,
    hermite_tensor,
    hermite_vector_slice,
    khatri_rao_power,
    n_matchings,
    placement_sum,
)

__all__ = ["MAX_DENSE_ELEMENTS", "MAX_CONTRACTION_ORDER", "hermite_1d", "hermite_1d_all", "scaled_hermite_all",
           "hermite_tensor", "gaussian_moment_tensor", "assemble_hermite_tensor", "hermite_contract",
           "hermite_rank_one", "hermite_vector_slice", "hermite_matrix_slice", "khatri_rao_power", "placement_sum",
           "n_matchings"]
