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
    "NotFittedError",
    "AssumptionWarning",
    "CertificateWarning",
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


try:  # scikit-learn's NotFittedError so that sklearn utilities recognise ours
    from sklearn.exceptions import NotFittedError as _SkNotFitted
except Exception:  # pragma: no cover - sklearn is a hard dependency
    _SkNotFitted = ValueError  # type: ignore[assignment,misc]


class NotFittedError(NNRecoverError, _SkNotFitted):  # type: ignore[misc,valid-type]
    """A learner was used before ``fit``."""


class AssumptionWarning(UserWarning):
    """An assumption looks doubtful (e.g. the input is not N(0, I)) but the algorithm still ran."""


class CertificateWarning(UserWarning):
    """A self-check of an exact algorithm failed; the result should not be trusted."""
