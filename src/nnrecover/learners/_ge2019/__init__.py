"""Building blocks of the Ge-Kuditipudi-Li-Wang 2019 learner (internal subpackage).

The public face is :mod:`nnrecover.learners.ge2019`; these modules hold the pieces:

- :mod:`.symmetric`    ``vec``/``mat``, ``vec*``/``mat*``, the duplication matrix ``F`` and the
                       isometric packing of the ``d^2`` rows of ``T`` into ``d(d+1)/2`` rows;
- :mod:`.moments`      the streaming statistic behind BuildT, Algorithm 1 and SignFix, the exact
                       Gaussian population moments, and the symmetry test;
- :mod:`.distinguishing`  distinguishing matrices (Definition 1; Monte Carlo and Lemma 19 closed form),
                       the population factorisation ``T = M B C F`` (Lemma 14) and the smoothed
                       perturbations (Appendix C);
- :mod:`.core`         Algorithm 1, BuildT, NullSpan, SimDiag, SignFix, the CP-ALS slice decomposition
                       and the gradient fit of ``W`` with ``A`` fixed (Section 4).
"""
