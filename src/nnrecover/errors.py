"""Exception and warning types raised by nnrecover.

Every public entry point validates its input and raises one of these with a message that names the
argument (or the assumption and the paper it comes from) and says how to fix it.
"""

from __future__ import annotations

__all__ = [
    "NNRecoverError",
    "InputError",
    "AssumptionError",
    "ConvergenceError",
    "QueryBudgetError",
    "NotFittedError",
    "AssumptionWarning",
    "CertificateWarning",
    "TimeBudgetWarning",
]


class NNRecoverError(Exception):
    """Base class of every error nnrecover raises on purpose."""


class InputError(NNRecoverError, ValueError):
    """A bad argument: wrong shape or dtype, NaN/inf, too few samples, X/Y length mismatch, unknown name."""


class AssumptionError(NNRecoverError, ValueError):
    """An assumption of the algorithm (rank, symmetry, m <= d, ...) is violated; the message names it
    and the paper it comes from."""


class ConvergenceError(NNRecoverError, RuntimeError):
    """An iterative method did not converge, or a certificate failed with ``strict=True``."""


def _build_not_fitted_error() -> type:
    """``NotFittedError`` derives from scikit-learn's, so that sklearn utilities recognise it.

    Importing ``sklearn.exceptions`` imports scikit-learn itself (about 0.5 s), so the class is built on
    first use (module ``__getattr__``) instead of at ``import nnrecover``.
    """
    # deferred: scikit-learn is slow to import
    from sklearn.exceptions import NotFittedError as _SkNotFitted

    class NotFittedError(NNRecoverError, _SkNotFitted):  # type: ignore[misc,valid-type]
        """A learner was used before ``fit``."""

    NotFittedError.__module__ = __name__
    NotFittedError.__qualname__ = "NotFittedError"
    return NotFittedError


def __getattr__(name: str):
    if name == "NotFittedError":
        cls = _build_not_fitted_error()
        globals()[name] = cls  # built once: every later lookup gets the same class
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class AssumptionWarning(UserWarning):
    """An assumption looks doubtful (e.g. the input is not N(0, I)) but the algorithm still ran."""


class CertificateWarning(UserWarning):
    """A self-check of an exact algorithm failed; the result should not be trusted."""


class QueryBudgetError(NNRecoverError, RuntimeError):
    """A black-box extraction (:func:`nnrecover.extraction.extract`) would exceed ``max_queries``.

    The batch that did not fit was not sent to the model. ``partial`` holds what had been recovered
    before (an ``ExtractionResult`` whose ``diagnostics_["complete"]`` is False) and ``n_queries`` the
    rows queried so far.
    """

    def __init__(self, message: str, *, partial=None, n_queries: int = 0):
        super().__init__(message)
        self.partial = partial
        self.n_queries = int(n_queries)


class TimeBudgetWarning(UserWarning):
    """A learner stopped at its ``time_budget``; it returns the best result found so far."""
