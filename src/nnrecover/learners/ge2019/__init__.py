"""Ge, Kuditipudi, Li, Wang (ICLR 2019): learning two-layer ReLU networks with symmetric inputs.

The model is ``y = A relu(W x) + xi`` with no biases, ``x`` from any **symmetric** distribution
(``x`` and ``-x`` equal in law), ``k <= d`` hidden units and ``l >= k`` outputs. In nnrecover's form
(the convention of :class:`nnrecover.network.TwoLayerNetwork`): ``hidden_weights = W`` (k, d), ``output_weights = A`` (l, k), zero biases.

Paper symbol -> name here:

========================================  ================================================================
Algorithm 1 (one ReLU unit)               :func:`algorithm1`
Eq. 10 / Eq. 11 detector ``T``            :func:`build_detector_matrix` (BuildT; ``noise_correction``)
NullSpan, SimDiag, SignFix                :func:`null_span`, :func:`sim_diag`, :func:`sign_fix`
Algorithm 2 (noiseless)                   :func:`algorithm2`
Algorithm 3 (noise-robust, sample split)  :func:`algorithm3`
Algorithm 4 (``A`` is ``l x k``, l > k)   :func:`algorithm4`
Section 4 practical variant               :func:`section4_variant` (CP-ALS on ``10 k`` slices, best of
                                          10 restarts, then gradient fit of ``W`` with ``A`` fixed)
Definition 1 / Lemma 19 ``N``, ``M``      :func:`distinguishing_matrix`, :func:`gaussian_distinguishing_matrix`
Appendix B.1.1 ``T = M B C F``            :func:`population_detector_matrix`
Eq. 18 smoothed ``W + rho E``             :func:`perturb_weights` (``D_{Q,lambda}``:
                                          :class:`nnrecover.distributions.PerturbedSymmetric`)
Section 4.1 error metric                  :func:`paper_error`
span reduction (Lemma 1 + Section 2's     :func:`span_basis` (``Q`` from ``E[y x^T] Sigma^{-1} = A W / 2``);
symmetric-input model; not in the paper)  ``PureNeuronLearner(span="auto")``; ``PureNeuronStatistic(
                                          input_projection=Q, halves=True)``
estimator                                 :class:`PureNeuronLearner` (certificate ``max_unit_error`` of
                                          the returned network: :func:`nnrecover.learners.bakshi2019.
                                          unit_error_bound`; Lemma 14's gap is a stage check)
========================================  ================================================================

Span reduction
--------------
The paper's detector statistics are moments of ``x`` up to order four in all ``d`` dimensions
(``O(k^2 d^2)`` memory, ``O(n k^2 d^2)`` flops; BuildT). Its model (Section 2: ``y = A relu(W x) + xi``,
``x`` symmetric, no biases, ``k <= d``, rank ``A = k``) lets the same algorithm run in ``k``
dimensions instead:

1. For a symmetric input ``E[relu(w.x) x] = Sigma w / 2`` (Lemma 1, from Lemma 6), so
   ``E[y x^T] Sigma^{-1} = A W / 2``. When ``A`` and ``W`` have rank ``k`` (Theorems 4-6 assume it) its
   row space is the row space of ``W``; ``Q`` (``d x k``, orthonormal) is its top-``k`` right singular
   space, from the first pass over the data (``Sigma`` and ``E[y x^T]``, ``O(d^2)`` memory).
2. Then ``W = W Q Q^T``, so ``y = A relu((W Q) z) + xi`` with ``z = Q^T x``: the same model in ``k``
   dimensions with hidden weights ``W Q``. ``z`` is symmetric (a linear image of a symmetric law),
   ``E[z z^T] = Q^T Sigma Q`` is full rank and the noise is still independent of ``z``, so Section 2's
   assumptions hold for ``(z, y)`` and Algorithms 2-4 apply unchanged: BuildT, NullSpan, SimDiag and
   SignFix run on the moments of ``z``, accumulated in a second pass that streams ``z = X Q`` chunk by
   chunk (``O(n (d k + k^4))`` flops, ``O(k^4)`` memory).
3. The pure-neuron directions ``z_i`` live in the output space, so they are the same for ``x`` and
   ``z``; Algorithm 1 then reads ``v_i = 2 Sigma^{-1} E[(z_i^T y) x]`` from the first pass's moments of
   ``x``. Without a sample split this equals mapping the ``z``-space readout back, ``v_i = v_i^z Q^T``.

The detector of ``z`` is the detector of ``x`` restricted to the ``Q (x) Q`` block of its rows:
``f_z(u) = (Q^T (x) Q^T) f_x(u)`` identically whenever the rows of ``B = E[y x^T] Sigma^{-1}`` lie in
``span Q`` (then ``B x = B_z z`` and ``B_z Sigma_z B_z^T = B Sigma B^T``; always so in the population,
and for ``l = k`` also on a sample, since ``Q`` then spans the rows of the same ``B``), so its null
space contains ``span{vec*(z_i z_i^T)}`` and Lemma 10 needs the augmented distinguishing matrix of
``z`` to have full column rank, ``k_2 + 1 <= k (k + 1) / 2`` columns, which holds for ``d = k`` as in
the paper's own experiments (Section 4). For ``x ~ N(0, I)`` the rows outside that block vanish for
Eq. 11's detector (by Lemma 19 ``N_ij - m_ij vec(I)`` lives in the ``Q (x) Q`` block), so ``T_z`` and
``T_x`` have the same singular values, and the noiseless detector gains only the rows
``m_ij (I - Q Q^T)``; exactness therefore needs no margin of extra directions, and none is used. (On a
finite sample, adding the directions in which the two half-sample estimates of ``B`` disagree most can
lower the error of the unrefined estimate, but not consistently, at ``(1 + r / k)^2`` times the cost of
the detector pass, and the refinement removes the difference.) With exact or exactly symmetric (antithetic) data
``E^[y x^T] = A W E^[x x^T] / 2`` holds exactly, so the reduction keeps the exact-recovery guarantees;
from an i.i.d. sample ``Q`` carries a sampling error of order ``||E^ - E|| / s_k`` (Wedin), estimated
from two halves of the sample and reported in ``diagnostics_["span"]``. Rank ``A W < k`` (e.g. two
equal columns of ``A``) can lose a hidden direction: ``span=True`` refuses it (AssumptionError),
``span="auto"`` warns (AssumptionWarning) and runs the full-dimension statistics.

Errata of the paper text (also on the docs' errata page), implemented in their corrected form:

- Theorem 2 (informal) bounds ``||A s(W x) - A^ s(W^ x)||`` (the text has ``A s(W^ x)``); our
  ``diagnostics_`` and the experiments measure the output error against the true ``A s(W x)``.
- Appendix A.2 writes the noisy model as ``y = s(W x) + xi``; it is ``y = A s(W x) + xi``.
- Algorithm 3 step 3 is garbled; the detector is Eq. 11 (``noise_correction=True``).
- Lemma 3's display is truncated; the identity is ``sum_{i<j} c_i c_j N_ij`` with ``c = A^T u``.
- Section 2.2's Kronecker index formula is garbled; the standard Kronecker product is used
  (``x (x) x = vec(x x^T)``), and Lemma 12's ``X = S zeta`` means ``X = mat*(S zeta)``.

Each has a test in ``tests/learners/ge2019/test_pure_neuron_learner.py`` showing why the corrected form is the right one.

Modules
-------
- :mod:`.symmetric`       ``vec``/``mat``, ``vec*``/``mat*``, the duplication matrix ``F`` and the isometric
  packing of the ``d^2`` rows of ``T`` into ``d(d+1)/2`` rows;
- :mod:`.moments`         the streaming statistic behind BuildT, Algorithm 1 and SignFix, the exact Gaussian
  population moments, and the symmetry test;
- :mod:`.distinguishing`  distinguishing matrices (Definition 1; Monte Carlo and Lemma 19 closed form), the
  population factorisation ``T = M B C F`` (Lemma 14) and the smoothed perturbations (Appendix C);
- :mod:`.core`            Algorithm 1, BuildT, NullSpan, SimDiag, SignFix, the CP-ALS slice decomposition and
  the gradient fit of ``W`` with ``A`` fixed (Section 4);
- :mod:`.algorithms`      Algorithms 2-4 and the Section 4 variant chained from those stages, the data
  symmetrisation and the paper's error metric;
- :mod:`.estimator`       :class:`PureNeuronLearner` (validates, calls, stores).
"""

from ...distributions import PerturbedSymmetric
from ...moments.symmetry import symmetry_test
from ..registry import register
from .algorithms import (
                         SPAN_GAP_MIN,
                         SYMMETRY_ALPHA,
                         PureNeuronResult,
                         SpanBasis,
                         algorithm2,
                         algorithm3,
                         algorithm4,
                         paper_error,
                         pure_neuron_moments,
                         section4_variant,
                         span_basis,
                         symmetrize,
)
from .core import (
                         algorithm1,
                         build_detector_matrix,
                         cp_slices,
                         detector_value,
                         fit_hidden_given_output,
                         null_span,
                         purity_score,
                         sign_fix,
                         sim_diag,
)
from .distinguishing import (
                         distinguishing_matrix,
                         gaussian_distinguishing_matrix,
                         leave_one_out_distance,
                         perturb_weights,
                         population_detector_matrix,
)
from .estimator import PureNeuronLearner
from .moments import gaussian_population_moments
from .symmetric import duplication_matrix, mat_star, vec_star

__all__ = ["PureNeuronLearner", "PureNeuronResult", "algorithm1", "algorithm2", "algorithm3", "algorithm4",
           "section4_variant", "pure_neuron_moments", "build_detector_matrix", "null_span", "sim_diag",
           "sign_fix", "cp_slices", "fit_hidden_given_output", "detector_value", "purity_score",
           "distinguishing_matrix", "gaussian_distinguishing_matrix", "population_detector_matrix",
           "perturb_weights", "leave_one_out_distance", "symmetry_test", "gaussian_population_moments",
           "paper_error", "symmetrize", "vec_star", "mat_star", "duplication_matrix", "SYMMETRY_ALPHA",
           "span_basis", "SpanBasis", "SPAN_GAP_MIN"]

_SYM = "symmetric input law (x and -x equal in distribution)"
_RANK = "A, W, E[xx^T] full rank"
register("pure-neuron", paper="ge2019", algorithm="Algorithms 2-4", target=PureNeuronLearner, is_learner=True,
         assumptions=(_SYM, "k <= d", "outputs >= k", "ReLU, no biases", _RANK, "M full column rank"),
         description="Pure-neuron detector: moments up to order 4, null space, SimDiag, Algorithm 1")
register("ge2019-algorithm1", paper="ge2019", algorithm="Algorithm 1", target=algorithm1,
         assumptions=(_SYM, "E[xx^T] full rank"), description="One ReLU unit: w = 2 E[xx^T]^-1 E[yx]")
register("ge2019-algorithm2", paper="ge2019", algorithm="Algorithm 2", target=algorithm2,
         assumptions=(_SYM, "no label noise", "A square", _RANK, "N full column rank"),
         description="Noiseless two-layer learner (Corollary 1 detector, SimDiag, SignFix, Algorithm 1)")
register("ge2019-algorithm3", paper="ge2019", algorithm="Algorithm 3", target=algorithm3,
         assumptions=(_SYM, "zero-mean label noise independent of x", "A square", _RANK, "M full column rank"),
         description="Noise-robust learner (Eq. 11 detector, sample split in +-x pairs)")
register("ge2019-algorithm4", paper="ge2019", algorithm="Algorithm 4", target=algorithm4,
         assumptions=(_SYM, "outputs l >= k", "rank A = k", "M full column rank"),
         description="Non-square A: project outputs on the top-k left singular space of E[yx^T]")
register("ge2019-section4", paper="ge2019", algorithm="Section 4", target=section4_variant,
         assumptions=(_SYM, "outputs >= k", _RANK),
         description="Practical variant: CP-ALS on 10k null-space slices, then W fitted with A fixed")
register("ge2019-build-t", paper="ge2019", algorithm="Eq. 10-11 (BuildT)", target=build_detector_matrix,
         assumptions=(_SYM,), description="Pure-neuron detector matrix T (noiseless or noise-corrected)")
register("ge2019-simdiag", paper="ge2019", algorithm="Algorithm 2 steps 7-8 (SimDiag)", target=sim_diag,
         assumptions=("null space spanned by vec*(z_i z_i^T)",),
         description="Eigenvectors of X Y^-1 for random X, Y in the null space, best of several draws")
register("ge2019-distinguishing", paper="ge2019", algorithm="Definition 1, Lemma 19", target=distinguishing_matrix,
         assumptions=("closed form: zero-mean Gaussian input",),
         description="Distinguishing matrix N / augmented M: Gaussian closed form or Monte Carlo")
register("ge2019-nullspan", paper="ge2019", algorithm="NullSpan (Algorithm 2/3 step 5; Lemmas 4, 10)", target=null_span,
         assumptions=("N (Alg. 2) or M (Alg. 3) full column rank",),
         description="The k least right singular vectors of T and the gap ratio s_k2 / s_k2+1 (Lemma 14)")
register("ge2019-signfix", paper="ge2019", algorithm="SignFix (Algorithm 2/3 step 9; Lemma 18)", target=sign_fix,
         assumptions=(_SYM, "E[relu(w_i^T x)] > 0"),
         description="Flip z_i so that E[z_i^T y] > 0")
register("ge2019-cp-slices", paper="ge2019", algorithm="Section 4 (a): CP-ALS on null-space slices", target=cp_slices,
         assumptions=("null space spanned by vec*(z_i z_i^T)",),
         description="Rank-k CP-ALS of 10k random slices mat*(S g_t), best of restarts (TensorLy)")
register("ge2019-hidden-fit", paper="ge2019", algorithm="Section 4 (b): W fitted with A fixed",
         target=fit_hidden_given_output, assumptions=("A^ recovered",),
         description="Gradient fit of the squared loss in W with the output layer frozen (L-BFGS)")
register("ge2019-detector", paper="ge2019", algorithm="Corollary 1 / Lemma 9 (Eq. 11)", target=detector_value,
         assumptions=(_SYM,), description="The pure-neuron detector f(u), evaluated directly from samples")
register("ge2019-purity-score", paper="ge2019", algorithm="Lemma 2", target=purity_score,
         assumptions=(_SYM, "no label noise"),
         description="Scalar purity test 2 E[yx]^T E[xx^T]^-1 E[yx] - E[y^2] = sum c_i c_j m_ij")
register("ge2019-gaussian-distinguishing", paper="ge2019", algorithm="Lemma 19 (and N(0, QQ^T), Theorem 10 proof)",
         target=gaussian_distinguishing_matrix, assumptions=("zero-mean Gaussian input",),
         description="Closed-form distinguishing matrix N / augmented M and the scalars m_ij")
register("ge2019-population-t", paper="ge2019", algorithm="Appendix B.1.1 (T = M B C F; Lemma 14)",
         target=population_detector_matrix, assumptions=("M full column rank", "A full rank"),
         description="Population detector matrix from M and A, with sigma_k2(T) >= sigma_min(M) sigma_min(A)^2")
register("ge2019-perturb-weights", paper="ge2019", algorithm="Eq. 18 (smoothed W + rho E; Theorem 9, Lemma 22)",
         target=perturb_weights, assumptions=("Gaussian input, k <= d / 5 for the theorem",),
         description="Smoothed-analysis perturbation of the first-layer weights")
register("ge2019-perturbed-input", paper="ge2019", algorithm="Appendix C.2 ((Q, lambda)-perturbation; Theorem 10)",
         target=PerturbedSymmetric, assumptions=(_SYM, "k <= d / 7 for the theorem"),
         description="Smoothed input law D_{Q,lambda}: with probability lambda x = Q n, n ~ N(0, I)")
register("ge2019-leave-one-out", paper="ge2019", algorithm="Definition 2, Lemmas 20-21", target=leave_one_out_distance,
         description="Leave-one-out distance d(A), bracketing sigma_min(A)")
register("ge2019-fit-population", paper="ge2019", algorithm="Theorems 4-6 on exact moments (fit_population)",
         target=PureNeuronLearner.fit_population, assumptions=("zero-mean Gaussian input", _RANK),
         description="Algorithms 2-4 on exact population moments (Lemmas 6, 7, 19)")
register("ge2019-symmetry-test", paper="ge2019", algorithm="Section 2.1 assumption (symmetric input)",
         target=symmetry_test, description="Hotelling chi-square test of E[x] = E[x**3] = 0 (p-value)")
register("ge2019-symmetrize", paper="ge2019", algorithm="Section 1 (data symmetrisation)", target=symmetrize,
         description="Antithetic pairs: every x with -x and its label")
