"""Bakshi, Jayaram, Woodruff (COLT 2019): learning two-layer rectified networks ``A = U* f(V* X)`` exactly.

nnrecover's form (the convention of :class:`nnrecover.network.TwoLayerNetwork`): ``hidden_weights = V*``
(k, d), ``output_weights = U*`` (m, k), zero biases, samples as rows (``X`` is (n, d); the paper's ``X`` is d x n and ``A = Y^T``).
The canonical form has unit rows of ``V*`` (ReLU and other homogeneous activations).

=================================================  =====================================================
paper                                              here
=================================================  =====================================================
Lemma 1 (candidate sign patterns)                  :func:`enumerate_sign_patterns`
Algorithm 1 (IterativeLP), Remark 1                :func:`iterative_lp`
Algorithm 2 / Theorem 1 (worst-case X, rank k)     :func:`algorithm2` (HiGHS LPs; refuses rank(A) < k)
Theorem 2, Props 1-2 (NP-hardness)                 :func:`sat_to_relu_separability`,
                                                   :func:`separability_to_network` (+ checkers)
Algorithm 3 / Theorem 4 (ICA, orthonormal V*)      :func:`algorithm3`, :func:`ica_unmixing`
Algorithm 3 steps 4-8 / Cor 5 (from approx. U)     :func:`refine_from_output_weights`, :func:`refine_from_unmixing`
Theorem 5, Algorithm 4 steps 1-4 (tensor step)     :func:`approximate_hidden_weights` (Options A/B/C,
                                                   order from the Hermite coefficients), population form
Algorithm 4 / Theorem 7 (Gaussian, exact)          :func:`gaussian_pipeline`, :func:`algorithm4` (order 3)
Algorithm 5 / Theorem 6 (exact V*, signs)          :func:`algorithm5` (threshold and margin forms)
Algorithm 5 step 3, Algorithm 3 step 5 (Lemma 10)  :func:`row_from_zero_set` (null-space certificates)
Lemma 16 (n = Ω(κ) lower bound)                    :func:`lemma16_instances`
Lemmas 7, 8, 19, 21 (pattern facts)                :func:`sign_pattern_statistics`
Algorithm 6, Lemma 20, Theorem 10 (noise)          :func:`algorithm6`, :func:`regression_output_weights`,
                                                   :func:`noisy_pipeline`, :class:`NoisyReLULearner`
Algorithm 7 / Theorem 11 (FPT, m < k)              :func:`algorithm7` (corrected non-collinearity)
Algorithm 8 / Theorems 12-13 (arbitrary noise)     :func:`algorithm8`; step 1 :func:`gaussian_sketch`, step 2
                                                   :func:`grid_candidates`, step 3 :func:`pv_halfspace`
Theorem 14 / Corollary 8 (sparse noise)            :func:`principal_component_pursuit`, :func:`sparse_noise_pipeline`
Definition 13, Lemma 24 (incoherence)              :func:`incoherence`
Remark 3 (N(0, Σ))                                 ``whiten=True``
Appendix 9.1 (rectified f = φ on t > 0)            ``activation="relu_power(p)"`` / ``"exp_minus_one"``
estimator (Gaussian pipeline)                      :class:`ExactReLULearner`
certificate of a returned network (not in paper)   :func:`unit_error_bound` (Gauss-Newton confidence
                                                   region; ``max_unit_error`` of both learners)
=================================================  =====================================================

Errata of the paper, implemented in corrected form (also on the docs' errata page), each with a test in
``tests/test_bakshi2019_*.py``:

* Algorithm 4 uses the order-3 score tensor, whose expectation is ``c_3(f) sum_j <θ, U*_j> V*_j^{⊗3}`` and
  ``c_3(relu) = 0``: it cannot work for ReLU; the order is chosen from the first non-zero Hermite
  coefficient (2 with m >= 2 outputs, else 4 for ReLU) and ``order=3`` with ReLU raises AssumptionError.
* ``M_2(θ)`` is indefinite, so JSA15's PSD whitening is invalid: the slices are jointly diagonalised.
* Algorithm 5 / Algorithm 3 step 4's threshold ``τ`` puts true small positives in the zero set; the
  margin form with sample splitting and certificates is the default (``form="margin"``).
* ``w ∈ R^k`` must multiply a k-row basis of rowspan(Ā), not the m x ℓ matrix Ā.
* Algorithm 6 writes ``A`` for ``Ā`` in ``a^+``; Lemma 20 reads ``√ℓ ε``, not ``√(ℓ ε)``.
* Algorithm 7 allows columns ``[u, -u]``, which break it; the condition is no two collinear columns.
* Algorithm 1's projection is ``Q^T (Q Q^T)^{-1} Q``; its variables are ``w ∈ R^d``, ``z ∈ R^k``.
* Algorithm 8's grid lacks negative entries and is infeasible beyond toy sizes (candidate generators).
* PCP needs the weight ``λ = 1/√max(m, n)``.
"""

from ...refine.certificate import unit_error_bound
from ..registry import register
from ._common import ExactResult
from .arbitrary_noise import algorithm8, gaussian_sketch, grid_candidates, pv_halfspace
from .diagnostics import sign_pattern_statistics
from .estimator import CERTIFICATE_MEANING, ExactReLULearner, NoisyReLULearner
from .exact import (
                       MARGIN_QUANTILES,
                       algorithm5,
                       refine_from_output_weights,
                       refine_from_unmixing,
                       row_from_zero_set,
)
from .fpt import algorithm7, parallel_classes
from .hardness import (
                       assignment_to_separator,
                       brute_force_sat,
                       brute_force_separability,
                       check_network_instance,
                       close_under_reversal,
                       is_relu_separated,
                       is_satisfied,
                       lemma16_equal_outputs,
                       lemma16_instances,
                       sat_to_relu_separability,
                       separability_to_network,
                       separability_to_network_variable_alpha,
                       separator_to_assignment,
)
from .noisy import (
                       OutputRegressionStatistic,
                       algorithm6,
                       noisy_pipeline,
                       regression_output_weights,
)
from .pipeline import (
                       algorithm3,
                       algorithm4,
                       default_n_refine,
                       gaussian_pipeline,
                       ica_unmixing,
                       split_refinement,
)
from .sparse import (
                       incoherence,
                       polish_low_rank,
                       principal_component_pursuit,
                       sparse_noise_pipeline,
)
from .tensor_step import (
                       ApproximateResult,
                       approximate_hidden_weights,
                       approximate_hidden_weights_population,
                       choose_order,
)
from .worst_case import (
                       algorithm2,
                       enumerate_sign_patterns,
                       iterative_lp,
                       numerical_rank,
)

__all__ = [
    "ExactReLULearner", "NoisyReLULearner", "ExactResult", "ApproximateResult",
    "gaussian_pipeline", "algorithm3", "algorithm4", "algorithm5", "algorithm6", "algorithm7", "algorithm8",
    "algorithm2", "iterative_lp", "enumerate_sign_patterns", "numerical_rank", "row_from_zero_set",
    "refine_from_output_weights", "refine_from_unmixing", "ica_unmixing", "approximate_hidden_weights",
    "approximate_hidden_weights_population", "choose_order", "noisy_pipeline", "regression_output_weights",
    "OutputRegressionStatistic", "parallel_classes", "pv_halfspace", "gaussian_sketch", "grid_candidates",
    "principal_component_pursuit", "polish_low_rank", "incoherence", "sparse_noise_pipeline",
    "sat_to_relu_separability", "close_under_reversal", "is_satisfied", "brute_force_sat", "is_relu_separated",
    "assignment_to_separator", "separator_to_assignment", "separability_to_network",
    "separability_to_network_variable_alpha", "check_network_instance", "brute_force_separability",
    "lemma16_instances", "lemma16_equal_outputs", "MARGIN_QUANTILES", "split_refinement", "default_n_refine",
    "sign_pattern_statistics", "unit_error_bound", "CERTIFICATE_MEANING",
]

_PAPER = "bakshi2019"
_GAUSS = "x ~ N(0, I) (N(0, Σ) with whiten=True)"
_RANKS = "U* (m x k) and V* (k x d) of rank k"
_RECT = "rectified activation f = φ > 0 on t > 0 (relu, relu_power, exp_minus_one)"
register("exact-relu", paper=_PAPER, algorithm="Algorithms 4-5 (Theorem 7)", target=ExactReLULearner,
         assumptions=(_GAUSS, _RANKS, _RECT, "noiseless"), is_learner=True,
         description="tensor step (order from Hermite coefficients) + exact sparsity-pattern systems, certified")
register("bakshi2019-noisy", paper=_PAPER, algorithm="Algorithm 6, Lemma 20 (Theorem 10)", target=NoisyReLULearner,
         assumptions=(_GAUSS, _RANKS, _RECT, "i.i.d. mean-zero sub-Gaussian noise"), is_learner=True,
         description="tensor step + projection signs + least-squares U (+ optional refinement)")
register("bakshi2019-lemma1", paper=_PAPER, algorithm="Lemma 1", target=enumerate_sign_patterns,
         assumptions=("rank(A) = k",), description="candidate sign patterns from k tight constraints")
register("bakshi2019-algorithm1", paper=_PAPER, algorithm="Algorithm 1 (Remark 1)", target=iterative_lp,
         assumptions=("ReLU",), description="IterativeLP: a new independent row of f(VX) in rowspan(A) (HiGHS)")
register("bakshi2019-algorithm2", paper=_PAPER, algorithm="Algorithm 2 (Theorem 1)", target=algorithm2,
         assumptions=("any X", "rank(A) = k", "ReLU", "small n"),
         description="worst-case exact factorisation A = U f(VX); refuses rank(A) < k (Theorem 2)")
register("bakshi2019-algorithm3", paper=_PAPER, algorithm="Algorithm 3 (Theorem 4)", target=algorithm3,
         assumptions=("x ~ N(0, I)", "V* orthonormal rows", "U* rank k", _RECT),
         description="ICA (FastICA, skewness signs) + exact steps 4-8")
register("bakshi2019-algorithm3-ica", paper=_PAPER, algorithm="Algorithm 3 steps 1-3 (Lemma 6, Theorem 3)",
         target=ica_unmixing, assumptions=("x ~ N(0, I)", "V* orthonormal rows", "U* rank k"),
         description="sketch T A, FastICA, column signs by positive skewness: unmixing M ≈ D Π (TU*)^-1 T")
register("bakshi2019-algorithm3-steps4-8", paper=_PAPER, algorithm="Algorithm 3 steps 4-8", target=refine_from_unmixing,
         assumptions=(_RANKS, "M Ā ≈ D f(V* X̄), D > 0"),
         description="exact V*, U* from an approximate unmixing matrix (threshold or margin form)")
register("bakshi2019-algorithm3-refine", paper=_PAPER, algorithm="Corollary 5 (Algorithm 3 steps 4-8 from Û)",
         target=refine_from_output_weights, assumptions=(_RANKS, "Û ≈ U* Π D, D > 0"),
         description="exact V*, U* from approximate output weights")
register("bakshi2019-row-from-zero-set", paper=_PAPER, algorithm="Algorithm 5 step 3 / Algorithm 3 step 5 (Lemma 10)",
         target=row_from_zero_set, assumptions=("B a k-row basis of rowspan(Ā)",),
         description="the row-span vector vanishing on a zero set, with null-space certificates (R0)")
register("bakshi2019-tensor-step", paper=_PAPER, algorithm="Algorithm 4 steps 1-4 (Theorem 5)",
         target=approximate_hidden_weights, assumptions=(_GAUSS, _RANKS, "c_r(f) != 0"),
         description="approximate ±V* from order-2/3/4 Hermite moments (Options A-C)")
register("bakshi2019-algorithm4", paper=_PAPER, algorithm="Algorithm 4 (Theorem 7)", target=algorithm4,
         assumptions=(_GAUSS, _RANKS, "c_3(f) != 0 (not ReLU)"),
         description="the paper's order-3 pipeline; AssumptionError for ReLU (c_3 = 0)")
register("bakshi2019-gaussian-pipeline", paper=_PAPER, algorithm="Algorithms 4-5 (Theorem 7)",
         target=gaussian_pipeline, assumptions=(_GAUSS, _RANKS, _RECT, "noiseless"),
         description="tensor step + Algorithm 5 + A = U f(VX), certified")
register("bakshi2019-algorithm5", paper=_PAPER, algorithm="Algorithm 5 (Theorem 6)", target=algorithm5,
         assumptions=(_RANKS, "||v_i - ±V*_i|| <= ε", "noiseless"),
         description="exact V* and signs by sparsity-pattern systems (threshold / margin form)")
register("bakshi2019-algorithm6", paper=_PAPER, algorithm="Algorithm 6 (Theorem 9)", target=algorithm6,
         assumptions=(_RANKS, "||v_i - ±V*_i|| <= ε"), description="signs by projection residuals")
register("bakshi2019-lemma20", paper=_PAPER, algorithm="Lemma 20", target=regression_output_weights,
         description="least-squares U for given V (streamed normal equations)")
register("bakshi2019-noisy-pipeline", paper=_PAPER, algorithm="Theorem 10", target=noisy_pipeline,
         assumptions=(_GAUSS, _RANKS, "i.i.d. sub-Gaussian noise"), description="tensor step + Algorithm 6 + Lemma 20")
register("bakshi2019-algorithm7", paper=_PAPER, algorithm="Algorithm 7 (Theorem 11)", target=algorithm7,
         assumptions=("x ~ N(0, I)", "rank V* = k", "no two columns of U* collinear (corrected)", "noiseless"),
         description="FPT exact recovery from 1-sparse columns; any m >= 2, m < k allowed")
register("bakshi2019-algorithm8", paper=_PAPER, algorithm="Algorithm 8 (Theorem 13)", target=algorithm8,
         assumptions=("x ~ N(0, I)", "E independent of X"),
         description="sketch, candidate (SU*)^-1, noisy-halfspace PV estimator, selection by residual")
register("bakshi2019-algorithm8-sketch", paper=_PAPER, algorithm="Algorithm 8 step 1 (Proposition 4)",
         target=gaussian_sketch, description="Gaussian subspace-embedding sketch S with N(0, 1/k) entries")
register("bakshi2019-algorithm8-grid", paper=_PAPER, algorithm="Algorithm 8 step 2 (Proposition 5)",
         target=grid_candidates, assumptions=("toy sizes only",),
         description="the exhaustive guess grid for (SU*)^-1, with signs; infeasible beyond toy sizes")
register("bakshi2019-pv-halfspace", paper=_PAPER, algorithm="Algorithm 8 step 3 (eqs. 5-6, Theorem 12)",
         target=pv_halfspace, assumptions=("x ~ N(0, I)", "label noise independent of X"),
         description="Plan-Vershynin noisy-halfspace estimator in closed form X^T y / ||X^T y||")
register("bakshi2019-pcp", paper=_PAPER, algorithm="Theorem 14, Corollary 8", target=sparse_noise_pipeline,
         assumptions=("x ~ N(0, I)", "U* orthonormal incoherent columns", "sparse E"),
         description="principal component pursuit (ADMM) + polish + exact pipeline")
register("bakshi2019-principal-component-pursuit", paper=_PAPER, algorithm="Theorem 14 (principal component pursuit)",
         target=principal_component_pursuit, assumptions=("M incoherent, E sparse with random support",),
         description="min ||M||_* + λ ||E||_1 s.t. M + E = A by ADMM, λ = 1/sqrt(max(n, m))")
register("bakshi2019-incoherence", paper=_PAPER, algorithm="Definition 13, Lemma 24", target=incoherence,
         description="left, right and joint incoherence parameters of a rank-k matrix")
register("bakshi2019-hardness", paper=_PAPER, algorithm="Proposition 2 (Definitions 4-5)", target=sat_to_relu_separability,
         description="reversible 6-SAT -> ReLU-separability point sets (checker: is_relu_separated)")
register("bakshi2019-theorem2", paper=_PAPER, algorithm="Theorem 2 (α fixed)", target=separability_to_network,
         description="ReLU-separability -> 'is there V with α f(VX) = A' (k = 2; checker: check_network_instance)")
register("bakshi2019-theorem2-variable-alpha", paper=_PAPER, algorithm="Theorem 2 (α a variable)",
         target=separability_to_network_variable_alpha,
         description="the same reduction with α a variable (two extra columns force α > 0)")
register("bakshi2019-pattern-statistics", paper=_PAPER, algorithm="Lemmas 7, 8, 19, 21", target=sign_pattern_statistics,
         description="split frequencies θ/2π, κ vs θ_min, σ_min(f(VX)), 1-sparse column counts")
register("bakshi2019-lemma16", paper=_PAPER, algorithm="Lemma 16", target=lemma16_instances,
         description="two instances with equal outputs for n << 1/a (n = Ω(κ) lower bound)")
