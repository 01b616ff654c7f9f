"""Awasthi, Tang, Vijayaraghavan (NeurIPS 2021): learning ``f(x) = sum_i a_i relu(w_i^T x + b_i)``,
``x ~ N(0, I_d)``, from the Hermite coefficient tensors ``f^_k = E[f(x) He_k(x)]``.

Every algorithm of the paper is a plain function of a stage module of this package, importable from the
package itself, and :class:`HermiteTensorLearner` (``estimator``) validates, calls them and stores the
result, scikit-learn style. The paper's errata, implemented in corrected form, are on the docs' errata page.

==================================  =====================================  ==============================
paper                               function                               notes
==================================  =====================================  ==============================
Lemma 3.5 / eq. (6)                 :func:`hermite_coefficients`           exact or streamed estimates,
                                                                           projected on range(T_2) (l=1)
Algorithm 1 (order l, exact)        :func:`algorithm1`                     Thms 4.1 / 4.2
Algorithm 2 RECOVERSCALARS          :func:`recover_scalars`                corrected l > 1 form (E1)
Algorithm 3 FIXSIGNS                :func:`fix_signs`
Algorithm 4 (robust, order l)       :func:`algorithm4`                     adaptive or paper thresholds
Algorithm 5 (low L2 error)          :func:`algorithm5`,                    <= m + 2 units (Claim D.14)
                                    :func:`algorithm5_regression`
Claim D.14                          :func:`consolidate`                    v_lin = 0 handled (E10)
Algorithm 6 (robust full rank)      :func:`algorithm6`                     Thm 3.1
Thm 4.2, SQ regression              :func:`population_regression`
closed-form linear part             :func:`linear_correction`              signs known
Theorem 3.4 (sign-flip sets)        :func:`sign_flip_sets`                 corrected eq. (2) (E3)
Theorem 3.4 + Lemma D.13 + D.14     :func:`reduce_network`                 ``<= m`` units when identifiable
Algorithms 4-6 output, Claim D.14   :func:`output_network`                 parameters / linear part /
                                                                           Algorithm 5 regression
Proposition B.1 (``refine=True``)   :func:`polish_units`                   truncated Hermite loss in
                                                                           moment space + completion
Lemma D.13, Theorem 3.4             :func:`reduce_to_width`                ``<= m`` units, sign flips
Lemma 3.5 (certificate)             :func:`hermite_fit`                    ``g^_k`` vs ``T_k``, 3 sigma
Claim 4.8                           :func:`claim48_instance`
Appendix E (smoothed instances)     :func:`smoothed_instance`,             ``s_m(W^{(.)l})``
                                    :func:`khatri_rao_smin`
Lemma 4.3                           :func:`hermite_separation`             corrected constant (E2)
Theorem 3.2 (how many samples)      :func:`sample_requirement`             rows needed, from the pass's
                                                                           noise-whitened flattenings
==================================  =====================================  ==============================

Symbols -> names: the paper's columns ``w_i`` are our rows ``hidden_weights[i]``; ``a = output_weights[0]``,
``b = hidden_bias``; ``T_k`` (estimate) and ``f^_k`` (exact) are both :class:`HermiteCoefficients`
(``exact`` tells which); ``l`` is ``order``.
"""

from ..registry import register
from .algorithm5 import algorithm5
from .certificates import (
                        HERMITE_FIT_MEANING,
                        RESIDUAL_FIT_MEANING,
                        hermite_fit,
                        residual_lack_of_fit,
)
from .coefficients import HermiteCoefficients, min_samples
from .conditions import check_order, order_limit
from .decompose import (
                        HermiteRecovery,
                        Thresholds,
                        adaptive_thresholds,
                        algorithm1,
                        algorithm4,
                        algorithm6,
                        hermite_coefficients,
                        paper_thresholds,
)
from .estimator import HermiteTensorLearner
from .identifiability import (
                        adversarial_weights,
                        claim48_instance,
                        flip_units,
                        hermite_separation,
                        khatri_rao_smin,
                        sign_flip_sets,
                        smoothed_instance,
)
from .output import output_network, polish_units, reduce_to_width
from .polish import hermite_loss_polish
from .reduce import UnitReduction, nonlinear_part, reduce_network
from .regression import (
                        RegressionResult,
                        algorithm5_regression,
                        consolidate,
                        linear_correction,
                        population_regression,
                        relu_features,
)
from .requirement import sample_requirement
from .scalars import RecoveredScalars, SignFix, fix_signs, gram_lstsq, recover_scalars

__all__ = ["HermiteTensorLearner", "hermite_coefficients", "HermiteCoefficients", "algorithm1", "algorithm4",
           "algorithm5", "algorithm6", "recover_scalars", "fix_signs", "gram_lstsq", "RecoveredScalars", "SignFix",
           "HermiteRecovery", "Thresholds", "adaptive_thresholds", "paper_thresholds", "algorithm5_regression",
           "population_regression", "consolidate", "linear_correction", "relu_features",
           "RegressionResult", "sign_flip_sets", "flip_units", "claim48_instance", "smoothed_instance",
           "khatri_rao_smin", "adversarial_weights", "hermite_separation", "order_limit", "check_order", "min_samples",
           "hermite_loss_polish", "reduce_network", "UnitReduction", "nonlinear_part", "hermite_fit",
           "HERMITE_FIT_MEANING", "residual_lack_of_fit", "RESIDUAL_FIT_MEANING",
           "output_network", "polish_units", "reduce_to_width", "sample_requirement"]

_PAPER = "awasthi2021"
_GAUSS = "x ~ N(0, I_d)"
_RELU = "f(x) = sum_i a_i relu(w_i^T x + b_i), a_i != 0"
register("hermite-tensor", paper=_PAPER, algorithm="Algorithms 4-6 (Theorems 3.1, 3.2)", target=HermiteTensorLearner,
         assumptions=(_GAUSS, _RELU, "order 1: m <= d, s_m(W) > 0; order 2: m <= 0.9 C(d+1, 2), s_m(W^(.)2) > 0",
                      "no two w_i parallel"),
         description="Hermite tensor decomposition (Jennrich on T_{2l+1} and T_{2l+2}) + regression/refinement",
         is_learner=True)
register("awasthi2021-algorithm1", paper=_PAPER, algorithm="Algorithm 1", target=algorithm1,
         assumptions=(_GAUSS, _RELU, "exact Hermite coefficients", "{w_i^(x)l} linearly independent"),
         description="order-l recovery from exact coefficients (Theorems 4.1, 4.2)")
register("awasthi2021-recoverscalars", paper=_PAPER, algorithm="Algorithm 2", target=recover_scalars,
         assumptions=("directions w_i up to sign", "Gram matrices G^(o j) nonsingular"),
         description="RECOVERSCALARS: a_i and xi_i b_i from T_l..T_{l+3} (corrected l > 1 formula)")
register("awasthi2021-fixsigns", paper=_PAPER, algorithm="Algorithm 3", target=fix_signs,
         assumptions=("full rank: w_i linearly independent",), description="FIXSIGNS from T_1")
register("awasthi2021-algorithm4", paper=_PAPER, algorithm="Algorithm 4", target=algorithm4,
         assumptions=(_GAUSS, _RELU, "s_m(W^(.)l) >= 1/poly"), description="robust order-l recovery (Theorem D.1)")
register("awasthi2021-algorithm5", paper=_PAPER, algorithm="Algorithm 5", target=algorithm5,
         assumptions=(_GAUSS, _RELU), description="low-L2-error ReLU network with <= m + 2 units (Lemma D.12)")
register("awasthi2021-algorithm6", paper=_PAPER, algorithm="Algorithm 6", target=algorithm6,
         assumptions=(_GAUSS, _RELU, "m <= d, s_m(W) >= 1/poly"), description="robust full-rank recovery (Theorem 3.1)")
register("awasthi2021-consolidate", paper=_PAPER, algorithm="Claim D.14", target=consolidate,
         description="regression output as a ReLU network with <= |S| + 2 units")
register("awasthi2021-population-regression", paper=_PAPER, algorithm="Theorem 4.2 (SQ regression)",
         target=population_regression, assumptions=(_GAUSS,), description="exact-moment Algorithm 5 (zero L2 error)")
register("awasthi2021-linear-correction", paper=_PAPER, algorithm="Section 1 overview (iv) / Algorithm 5 linear part",
         target=linear_correction, assumptions=(_GAUSS, "signs known"),
         description="closed-form linear part from T_0, T_1")
register("awasthi2021-sign-flip-sets", paper=_PAPER, algorithm="Theorem 3.4", target=sign_flip_sets,
         description="sign patterns giving the same function (corrected eq. (2))")
register("awasthi2021-claim-4.8", paper=_PAPER, algorithm="Claim 4.8", target=claim48_instance,
         assumptions=("w_i linearly dependent",), description="sign non-identifiability construction")
register("awasthi2021-smoothed-instance", paper=_PAPER, algorithm="Appendix E (Corollary 3.3)", target=smoothed_instance,
         description="smoothed instances and s_m(W^(.)l)")
register("awasthi2021-hermite-separation", paper=_PAPER, algorithm="Lemma 4.3", target=hermite_separation,
         description="min_x max(|He_k|, |He_{k+1}|) (corrected constant)")

register("awasthi2021-output-network", paper=_PAPER, algorithm="Algorithms 4-6 output, Claim D.14, Algorithm 5",
         target=output_network, assumptions=(_GAUSS,),
         description="the output network of recovered units: parameters, closed-form linear part or regression")
register("awasthi2021-polish-units", paper=_PAPER, algorithm="Proposition B.1 (truncated Hermite loss)",
         target=polish_units, assumptions=(_GAUSS,),
         description="moment-space polish of recovered units with completion of undetected ones (refine=True)")
register("awasthi2021-reduce-to-width", paper=_PAPER, algorithm="Lemma D.13, Theorem 3.4 (corrected eq. (2))",
         target=reduce_to_width, assumptions=(_GAUSS,),
         description="at most n_hidden units: fold linearisable units, merge, resolve sign flips")
register("awasthi2021-hermite-fit", paper=_PAPER, algorithm="Lemma 3.5 (certificate)", target=hermite_fit,
         assumptions=(_GAUSS,), description="certificate: exact Hermite coefficients of a network against T_k")