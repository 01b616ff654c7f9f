"""Goel & Panigrahy (2019), "Recovering the Lowest Layer of Deep Networks with High Threshold Activations".

The model is ``f(x) = P(u_t(w_1 . x), ..., u_t(w_d . x))``: unit-norm first-layer rows, a shared known
threshold ``t``, activation step (the paper's "sgn", Heaviside 0/1), relu or sigmoid, and any upper
part ``P`` (a polynomial, or any callable upper network). The learner recovers the lowest layer ``W*``.

Modules
-------
- ``model``: :class:`HighThresholdNetwork`, the upper part ``P`` (:class:`UpperPolynomial`,
  :class:`CallableUpper`), generators meeting / violating the assumptions, the Hermite coefficients of
  the activations and the exact population moments.
- ``statistics``: streaming storage of the active rows and the normalised H_1/H_2/H_4 moments (samples
  and exact population), the Lemma 1 / Lemma 2 / Appendix E diagnostics and the check of the inputs
  against N(0, I).
- ``step1``: Step 1, three routes: whitening + tensor power iteration (default), the landscape ``G`` of
  Section 2.1 one unit at a time, the simultaneous landscape of Appendix B.4; the split-half angles and
  the ``unit_angles`` certificate.
- ``step2``: Step 2, EstimateTanAlpha and RefineEstimate (Algorithm 1, Section 2.2), and
  :func:`~.step2.refine_units`, Step 2 on every unit checked on held-out rows.
- ``halfspaces``: the intersection-of-halfspaces learner (Theorem 6).
- ``conditions``: ``data_refusal``, the shapes the learner refuses (also :func:`nnrecover.check`'s verdict).
- ``estimator``: :class:`HighThresholdLearner` (validates, calls, stores).
- further modules (Section 3, Appendices B.6, B.7 and D) with their own algorithms; every module is
  imported with the package, so all of them appear in ``nnrecover.learners.available("goel2019")``.

Paper symbols -> names
----------------------
===========================  ======================================================================
paper                        here
===========================  ======================================================================
``n``, ``d``                 ``n_inputs``, ``n_hidden``
``W*``, ``w_i*``             ``hidden_weights`` (d, n), its rows
``t``, ``u``, ``u_t``        ``threshold``, ``activation``, :func:`threshold_activation`
``P``, ``c_0``, ``c_i``      ``upper``, ``upper.constant``, ``upper.linear_coefficients``
``u_hat_k``                  :func:`threshold_hermite_coefficients` (normalised ``h_k = He_k/sqrt(k!)``)
``rho(t, sigma)``            :func:`tail_bound` (Lemmas 10-12)
``M = sum c_i w_i w_i^T``    ``moments.second()`` (``E[y~ (x x^T - I)]/(sqrt 2 u_hat_2)``)
``m_2(z)``, ``m_4(z)``       ``moments.m2(z)``, ``moments.m4(z)`` (``G`` divided by ``|u_hat_4|``)
``lambda``                   ``lam`` = ``lambda u_hat_2^2 / |u_hat_4|`` (normalised, Theta(1))
``gamma`` (Theorem 11)       ``gamma``
``psi(v, w, x)``             ``moments.t4_pairs`` (corrected kernel, Appendix B.4)
``(TW*)^{-1}``               ``Step1Result.duals``
``Delta = f - f_lin``        ``diagnostics_["lemmas"]["lemma2"]["mean_abs_residual"]``
===========================  ======================================================================
"""

from ..registry import register

# the modules of Step 2, Theorem 6, Section 3 and Appendices B.6-B.7 and D register their own algorithms
from . import (  # noqa: F401
                    correlation,
                    halfspaces,
                    higher_degree,
                    orthonormal,
                    sigmoid,
                    step2,
                    structured,
)
from .conditions import data_refusal
from .estimator import HighThresholdLearner
from .model import (
                    ACTIVATIONS,
                    CallableUpper,
                    HighThresholdNetwork,
                    UpperPolynomial,
                    population_hermite_moment,
                    random_unit_weights,
                    random_upper_polynomial,
                    tail_bound,
                    threshold_activation,
                    threshold_hermite_coefficients,
                    violating_upper_polynomial,
)
from .statistics import ActiveRows, PopulationMoments, SampleMoments, lemma_diagnostics
from .step1 import (
                    STEP1_METHODS,
                    Step1Result,
                    extra_directions,
                    landscape_objective,
                    landscape_route,
                    resolve_signs,
                    simultaneous_objective,
                    simultaneous_route,
                    step1,
                    tensor_power_route,
                    whitening_basis,
)

__all__ = [
    "HighThresholdLearner", "data_refusal", "HighThresholdNetwork", "UpperPolynomial", "CallableUpper", "ACTIVATIONS",
    "threshold_activation", "threshold_hermite_coefficients", "tail_bound", "random_unit_weights",
    "random_upper_polynomial", "violating_upper_polynomial", "population_hermite_moment",
    "ActiveRows", "SampleMoments", "PopulationMoments",
    "STEP1_METHODS", "Step1Result", "step1", "tensor_power_route", "landscape_route", "simultaneous_route",
    "landscape_objective", "simultaneous_objective", "whitening_basis", "resolve_signs", "lemma_diagnostics",
    "extra_directions",
]

_PAPER = "goel2019"
_GAUSS = "x ~ N(0, I)"
_A1 = "P: positive linear part, bounded products (Assumption 1)"
_A3 = "t high enough (Assumption 3)"
register("goel2019", paper=_PAPER, algorithm="Theorems 1, 2, 5, 12 (Step 1 + Algorithm 1)", target=HighThresholdLearner,
         assumptions=(_GAUSS, "unit rows, known shared t", _A1, _A3, "Step 2: step/relu, monotone P", "noiseless"),
         is_learner=True, description="lowest layer of P(u_t(Wx)): H_2/H_4 landscape Step 1 + RefineEstimate Step 2")
register("goel2019-step1-power", paper=_PAPER, algorithm="Claim 1 proof (Appendix B.3)", target=tensor_power_route,
         assumptions=(_GAUSS, _A1, _A3), description="whitening by M + tensor power iteration with deflation")
register("goel2019-step1-landscape", paper=_PAPER, algorithm="Section 2.1, Claims 1-2, Theorem 4",
         target=landscape_route, assumptions=(_GAUSS, _A1, _A3, "lambda' > 1/c_min (Lemma 15)"),
         description="local minima of G one by one: perturbed GD, saddle escape, deflation in the M geometry")
register("goel2019-step1-simultaneous", paper=_PAPER, algorithm="Appendix B.4, Theorems 11-12",
         target=simultaneous_route, assumptions=(_GAUSS, _A1, _A3, "gamma <= 0.01"),
         description="simultaneous landscape with the corrected psi kernel")
register("goel2019-population-moments", paper=_PAPER, algorithm="Lemma 9, Corollary 2 (product-Hermite)",
         target=population_hermite_moment, assumptions=("P linear, or W* orthonormal",),
         description="exact E[f He_k(x)] for the tests and fit_population")
register("goel2019-lemma-diagnostics", paper=_PAPER, algorithm="Lemmas 1-2, Appendix E (diagnostics)",
         target=lemma_diagnostics, assumptions=(_GAUSS,),
         description="the Lemma 1 product-moment ratio, the Lemma 2 bound and the Appendix E ratio of a fit")
register("goel2019-tail-bound", paper=_PAPER, algorithm="Lemmas 10-12", target=tail_bound, assumptions=(),
         description="rho(t, sigma), the tail mass of the step, relu and sigmoid units at threshold t")
