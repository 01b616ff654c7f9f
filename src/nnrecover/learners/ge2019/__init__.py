"""Ge, Kuditipudi, Li, Wang (ICLR 2019): learning two-layer ReLU networks with symmetric inputs.

The model is ``y = A relu(W x) + xi`` with no biases, ``x`` from any **symmetric** distribution
(``x`` and ``-x`` equal in law), ``k <= d`` hidden units and ``l >= k`` outputs. In nnrecover's form
(ARCHITECTURE section 1): ``hidden_weights = W`` (k, d), ``output_weights = A`` (l, k), zero biases.

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
estimator                                 :class:`PureNeuronLearner` (certificate ``max_unit_error`` of
                                          the returned network: :func:`nnrecover.learners.bakshi2019.
                                          unit_error_bound`; Lemma 14's gap is a stage check)
========================================  ================================================================

Errata of the paper text (also on the docs' errata page), implemented in their corrected form:

- Theorem 2 (informal) bounds ``||A s(W x) - A^ s(W^ x)||`` (the text has ``A s(W^ x)``); our
  ``diagnostics_`` and the experiments measure the output error against the true ``A s(W x)``.
- Appendix A.2 writes the noisy model as ``y = s(W x) + xi``; it is ``y = A s(W x) + xi``.
- Algorithm 3 step 3 is garbled; the detector is Eq. 11 (``noise_correction=True``).
- Lemma 3's display is truncated; the identity is ``sum_{i<j} c_i c_j N_ij`` with ``c = A^T u``.
- Section 2.2's Kronecker index formula is garbled; the standard Kronecker product is used
  (``x (x) x = vec(x x^T)``), and Lemma 12's ``X = S zeta`` means ``X = mat*(S zeta)``.

Each has a test in ``tests/test_ge2019.py`` showing why the corrected form is the right one.

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

from .estimator import *  # noqa: F401,F403  (the public API of the paper)
from .estimator import __all__  # noqa: F401
from .estimator import PureNeuronLearner
# stage helpers the package has always exposed by name
from ..bakshi2019.certificate import certificate_rows, certify_max_unit_error, check_certificate_params  # noqa: F401
from .algorithms import GAP_WARNING  # noqa: F401
from .core import check_second_moment, output_projection, readout  # noqa: F401
from .moments import PureNeuronMoments, PureNeuronStatistic  # noqa: F401

# the estimator is documented and reported under the package, the name users import it by
PureNeuronLearner.__module__ = __name__
