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

from .estimator import *  # noqa: F401,F403  (the public API of the paper)
from .estimator import __all__  # noqa: F401
from .estimator import ExactReLULearner, NoisyReLULearner
# stage helpers the estimator module has always exposed by name
from .certificate import MEANING, certificate_rows, check_certificate_params, held_assumption_warnings  # noqa: F401

# the estimator is documented and reported under the package, the name users import it by
ExactReLULearner.__module__ = __name__
NoisyReLULearner.__module__ = __name__
