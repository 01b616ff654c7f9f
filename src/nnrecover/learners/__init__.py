"""Learners: one module per paper (plus baselines); each algorithm is also a plain function.

Every estimator follows scikit-learn conventions (no logic in ``__init__``, fitted attributes with a
trailing underscore, ``random_state``); ``available()`` lists every registered algorithm.
"""

from __future__ import annotations

from importlib import import_module

from ._registry import AlgorithmRecord, available, register, resolve_name

# module name -> public names it provides (modules are imported lazily, on first use)
_MODULES = {
    "base": ("BaseLearner",),
    "baseline": ("GradientDescentLearner",),
    "awasthi2021": ("HermiteTensorLearner",),
    "ge2019": ("PureNeuronLearner",),
    "bakshi2019": ("ExactReLULearner", "NoisyReLULearner"),
    "goel2019": ("HighThresholdLearner",),
}
_PROVIDES = {name: mod for mod, names in _MODULES.items() for name in names}


def _present(mod: str) -> bool:
    """Whether the learner module ``mod`` exists in this version (later papers' modules may not)."""
    import importlib.util

    return importlib.util.find_spec(f"{__name__}.{mod}") is not None


__all__ = ["available", "register", "resolve_name", "AlgorithmRecord", "get_learner",
           *[name for name, mod in _PROVIDES.items() if _present(mod)]]


def _load_all() -> None:
    for mod in _MODULES:
        if _present(mod):
            import_module(f".{mod}", __name__)


def __getattr__(name):
    mod = _PROVIDES.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if not _present(mod):  # an AttributeError (not ModuleNotFoundError), so hasattr() and * work
        raise AttributeError(f"{name} is not available in this version of nnrecover (its module "
                             f"{__name__}.{mod} is not installed); see nnrecover.learners.available().")
    value = getattr(import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def get_learner(name: str) -> type:
    """The estimator class registered under ``name`` (as listed by ``nnrecover methods``)."""
    from ..errors import InputError

    name = resolve_name(name)
    for rec in available(learners_only=True):
        if rec.name == name or getattr(rec.target, "__name__", None) == name:
            return rec.target
    names = ", ".join(r.name for r in available(learners_only=True))
    other = next((r for r in available() if name in (r.name, getattr(r.target, "__name__", None))), None)
    if other is not None:
        # a registered algorithm that is a step or a function, not an estimator: say where it lives
        target = getattr(other.target, "__name__", repr(other.target))
        home = f"{__name__}.{other.paper}"
        if getattr(import_module(home), target, None) is not other.target:
            home = other.target.__module__
        raise InputError(f"{name!r} is {other.paper}'s {other.algorithm}, the Python function {home}.{target}, "
                         "not a learner that fit can run (nnrecover methods marks those fit = yes); "
                         f"learners: {names}.")
    raise InputError(f"unknown learner {name!r}; available learners: {names}.")
