"""Learners by registry name: the listing of ``nnrecover methods`` and the constructor of ``nnrecover fit``."""

from __future__ import annotations

import inspect
from importlib import import_module
from typing import Any, Mapping

from ..errors import InputError
from . import awasthi2021, bakshi2019, baseline, ge2019, goel2019  # noqa: F401  (their registrations)
from .registry import PAPERS, AlgorithmRecord, registered

__all__ = ["available", "get_learner", "make_learner", "learner_parameters"]


def available(paper: str | None = None, *, learners_only: bool = False) -> list[AlgorithmRecord]:
    """Every registered algorithm (optionally of one paper, or only the estimators).

    Parameters
    ----------
    paper : str, optional
        A key of :data:`~nnrecover.learners.registry.PAPERS`; an unknown key raises
        :class:`~nnrecover.errors.InputError`.
    learners_only : bool, default False
        Only the estimators usable by ``nnrecover fit``.

    Returns
    -------
    list of AlgorithmRecord
        Sorted by paper, then name.
    """
    if paper is not None and paper not in PAPERS:
        raise InputError(f"unknown paper {paper!r}; known: {', '.join(sorted(PAPERS))}.")
    out = [r for r in registered() if (paper is None or r.paper == paper) and (not learners_only or r.is_learner)]
    return sorted(out, key=lambda r: (r.paper, r.name))


def get_learner(name: str) -> type:
    """The estimator class registered under ``name`` (as listed by ``nnrecover methods``)."""
    for rec in available(learners_only=True):
        if rec.name == name or getattr(rec.target, "__name__", None) == name:
            return rec.target
    names = ", ".join(r.name for r in available(learners_only=True))
    other = next((r for r in available() if name in (r.name, getattr(r.target, "__name__", None))), None)
    if other is not None:
        # a registered algorithm that is a step or a function, not an estimator: say where it lives
        target = getattr(other.target, "__name__", repr(other.target))
        home = f"{__package__}.{other.paper}"  # the paper's package face, where it exposes the function
        if getattr(import_module(home), target, None) is not other.target:
            home = other.target.__module__
        raise InputError(f"{name!r} is {other.paper}'s {other.algorithm}, the Python function {home}.{target}, "
                         "not a learner that fit can run (nnrecover methods marks those fit = yes); "
                         f"learners: {names}.")
    raise InputError(f"unknown learner {name!r}; available learners: {names}.")


def learner_parameters(cls) -> set[str]:
    """Names of the options a learner class takes besides ``n_hidden``.

    Uses scikit-learn's ``_get_param_names`` when the class derives from ``BaseEstimator``, else the
    signature of ``__init__``.
    """
    getter = getattr(cls, "_get_param_names", None)
    if callable(getter):
        try:
            names = set(getter())
        except RuntimeError:  # sklearn refuses *args in __init__; fall back to the signature
            names = None
        if names is not None:
            return names - {"n_hidden"}
    sig = inspect.signature(cls.__init__)
    return {n for n, p in sig.parameters.items()
            if n not in ("self", "n_hidden")
            and p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)}


def make_learner(learner: Any, n_hidden: int, options: Mapping[str, Any] | None = None, *,
                 random_state: Any = None, defaults: Mapping[str, Any] | None = None) -> Any:
    """Build a learner by registry name (or class) with validated options.

    Parameters
    ----------
    learner : str or class
        A name from ``nnrecover methods`` (e.g. ``"gradient-descent"``) or a learner class.
    n_hidden : int
    options : mapping, optional
        Constructor options; a name the class does not take raises :class:`InputError` listing the
        ones it does (never silently ignored).
    random_state : optional
        Passed as ``random_state`` when the class takes it and ``options`` does not set it.
    defaults : mapping, optional
        Options applied only when the class takes them and ``options`` does not set them (used by the
        demo to pass e.g. the teacher's activation); unknown names here are skipped, not errors.
    """
    cls = get_learner(learner) if isinstance(learner, str) else learner
    options = dict(options or {})
    params = learner_parameters(cls)
    unknown = sorted(set(options) - params)
    if unknown:
        label = learner if isinstance(learner, str) else getattr(cls, "__name__", repr(cls))
        raise InputError(f"unknown option(s) {', '.join(unknown)} for learner {label!r}; "
                         f"its options are: {', '.join(sorted(params)) or '(none)'}.")
    for key, value in (defaults or {}).items():
        if key in params and key not in options:
            options[key] = value
    if random_state is not None and "random_state" in params and "random_state" not in options:
        options["random_state"] = random_state
    return cls(n_hidden, **options)
