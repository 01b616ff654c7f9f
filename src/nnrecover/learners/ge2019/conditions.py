"""The conditions under which :class:`PureNeuronLearner` refuses data, in the user's terms.

One source for the learner (:mod:`.algorithms` raises with these messages) and for
:func:`nnrecover.check` (its ``pure-neuron`` verdict says no exactly when one of them fails on the data).
"""

from __future__ import annotations

import numpy as np

from ...errors import InputError
from .core import check_second_moment

__all__ = ["width_refusal", "symmetry_refusal", "second_moment_refusal"]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def width_refusal(n_hidden: int, n_inputs: int | None, n_outputs: int) -> str | None:
    """Why Ge et al.'s learner refuses ``n_hidden`` units on data with ``n_inputs`` inputs and ``n_outputs``
    outputs, or None. Theorems 4-7 need the hidden weights ``W`` (units x inputs) and the output weights
    ``A`` (outputs x units) of full rank ``k``: at most as many units as inputs, at least as many outputs."""
    k, d, m = int(n_hidden), n_inputs, int(n_outputs)
    if d is not None and k > d:
        return (f"Ge et al. 2019 need at least as many inputs as hidden units (k <= d, Theorems 4-7); got "
                f"{_plural(k, 'hidden unit')} and {_plural(d, 'input')}: ask for fewer units, or fit "
                "gradient-descent (any width) or, with Gaussian inputs, hermite-tensor.")
    if m < k:
        return (f"Ge et al. 2019 need at least as many outputs as hidden units (l >= k, Section 2.1, Appendix "
                f"A.3); got {_plural(k, 'hidden unit')} and {_plural(m, 'output')}: fit gradient-descent, or, with "
                "Gaussian inputs, hermite-tensor (one output at a time).")
    return None


def symmetry_refusal(test, alpha: float) -> str | None:
    """Why the symmetry test ``test`` (:class:`.moments.SymmetryTest`) rules the learner out at level
    ``alpha``, or None. Ge et al. assume ``x`` and ``-x`` equal in law (Section 2.1); a constant non-zero
    input column (a "bias column" such as ``x_j = 1``) breaks it for certain."""
    if test is None or not test.p_value < alpha:
        return None
    if test.constant_inputs:
        cols = ", ".join(f"x_{j}" for j in test.constant_inputs)
        return (f"input column(s) {cols} (counted from 0) are constant and non-zero, so x and -x differ in law: "
                "Ge et al. 2019 assume a symmetric input law (Section 2.1). A constant input acts as a hidden bias, "
                "which their model does not have: drop the column(s) and fit without them, or fit gradient-descent "
                "(or hermite-tensor on Gaussian inputs, which learns hidden biases).")
    return (f"the distribution of the inputs does not look symmetric (x and -x equal in law), the assumption of "
            f"Ge et al. 2019 (Section 2.1): the odd moments E[x], E[x**3] are non-zero (Hotelling statistic = "
            f"{test.statistic:.4g} on {test.df} degrees of freedom, p-value {test.p_value:.3g} < {alpha:g}). Symmetrise "
            "the data (add -x with its label) or pass check_symmetry=False.")


def second_moment_refusal(second_moment: np.ndarray) -> str | None:
    """Why the second moment ``E[x x^T]`` rules the learner out (singular: Algorithm 1 and the detector
    solve with it, Theorems 4-7 assume it full rank), or None. The test of :func:`.core.check_second_moment`."""

    try:
        check_second_moment(np.asarray(second_moment, dtype=np.float64))
    except InputError as exc:
        return str(exc)
    return None
