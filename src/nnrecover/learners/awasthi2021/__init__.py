"""Awasthi, Tang, Vijayaraghavan (NeurIPS 2021): learning ``f(x) = sum_i a_i relu(w_i^T x + b_i)``,
``x ~ N(0, I_d)``, from the Hermite coefficient tensors ``f^_k = E[f(x) He_k(x)]``.

Every algorithm of the paper is a plain function here (re-exported from the private package
:mod:`nnrecover.learners.awasthi2021`) and :class:`HermiteTensorLearner` wraps them into a
scikit-learn style estimator. The paper's errata, implemented in corrected form, are on the docs' errata page.

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
==================================  =====================================  ==============================

Symbols -> names: the paper's columns ``w_i`` are our rows ``hidden_weights[i]``; ``a = output_weights[0]``,
``b = hidden_bias``; ``T_k`` (estimate) and ``f^_k`` (exact) are both :class:`HermiteCoefficients`
(``exact`` tells which); ``l`` is ``order``.
"""

from .estimator import *  # noqa: F401,F403  (the public API of the paper)
from .estimator import __all__  # noqa: F401
from .estimator import HermiteTensorLearner
# stage helpers the estimator module has always exposed by name
from .coefficients import estimate_coefficients, exact_coefficients  # noqa: F401
from .decompose import complete_units  # noqa: F401
from .polish import truncated_hermite_loss  # noqa: F401

# the estimator is documented and reported under the package, the name users import it by
HermiteTensorLearner.__module__ = __name__
