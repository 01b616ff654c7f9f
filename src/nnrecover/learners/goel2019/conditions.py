"""The conditions under which :class:`HighThresholdLearner` refuses data, in the user's terms.

One source for the learner and for :func:`nnrecover.check` (its ``goel2019`` verdict).
"""

from __future__ import annotations

__all__ = ["data_refusal"]


def data_refusal(n_hidden: int | None, n_inputs: int | None, n_outputs: int | None) -> str | None:
    """Why :class:`HighThresholdLearner` refuses data of this shape, in the user's terms, or None.

    Goel-Panigrahy's model ``f(x) = P(u_t(W* x))`` has one output and at most as many (unit-norm) hidden
    units as inputs (Section 1; Step 1 reads them off a d x d matrix, Claim 1). The learner and
    :func:`nnrecover.check` both decide with this function.
    """
    if n_outputs is not None and n_outputs != 1:
        return (f"HighThresholdLearner learns one output (Goel-Panigrahy's model f(x) = P(u_t(W x)), Section 1); "
                f"the data have {n_outputs} outputs: fit one output at a time.")
    if n_hidden is not None and n_inputs is not None and int(n_hidden) > int(n_inputs):
        return (f"HighThresholdLearner needs at least as many inputs as hidden units (k <= d, Claim 1); got "
                f"{n_hidden} hidden units and {n_inputs} inputs.")
    return None
