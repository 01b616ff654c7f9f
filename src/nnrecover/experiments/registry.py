"""Registry of named experiments.

An experiment is a function ``run(*, rng, quick, **options) -> (pandas.DataFrame, matplotlib.figure.Figure)``
registered with :func:`experiment`. ``quick=True`` is a scaled-down version that finishes in seconds
(used by tests); the default reproduces the full experiment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

__all__ = ["ExperimentRecord", "experiment", "available_experiments", "get_experiment"]


@dataclass(frozen=True)
class ExperimentRecord:
    """One registered experiment.

    Attributes
    ----------
    name : str            unique name (``nnrecover experiment NAME``)
    func : callable       ``func(*, rng, quick, **options) -> (DataFrame, Figure)``
    paper : str           key of :data:`nnrecover.learners._registry.PAPERS`
    description : str     one line (default: the first line of ``func``'s docstring)
    aliases : tuple       other names it answers to (the short paper prefixes of
                          :data:`nnrecover.learners._registry.PAPER_PREFIXES`), never listed
    """

    name: str
    func: Callable = field(compare=False)
    paper: str = "baseline"
    description: str = ""
    aliases: tuple = field(default=(), compare=False)


_EXPERIMENTS: dict[str, ExperimentRecord] = {}


def experiment(name: str, *, paper: str = "baseline", description: str = "") -> Callable[[Callable], Callable]:
    """Decorator registering an experiment function under ``name`` (called at import by each module).

    Raises
    ------
    ValueError
        ``paper`` is not a known paper key, or ``name`` is already taken by another function (both
        are programming errors in a module of the package, not user errors).
    """
    from ..learners._registry import PAPERS, legacy_aliases

    if paper not in PAPERS:
        raise ValueError(f"unknown paper key {paper!r} for experiment {name!r}; use one of {sorted(PAPERS)}")

    def deco(func: Callable) -> Callable:
        if name in _EXPERIMENTS and _EXPERIMENTS[name].func is not func:
            raise ValueError(f"experiment {name!r} registered twice")
        summary = description or (func.__doc__ or "").strip().split("\n")[0]
        _EXPERIMENTS[name] = ExperimentRecord(name, func, paper, summary, legacy_aliases(name))
        return func
    return deco


def available_experiments() -> list[ExperimentRecord]:
    """Every registered experiment (the modules of ``experiments._MODULES`` are imported first), by name."""
    from . import _load_all

    _load_all()
    return sorted(_EXPERIMENTS.values(), key=lambda r: r.name)


def get_experiment(name: str) -> ExperimentRecord:
    """The experiment registered under ``name``; :class:`~nnrecover.errors.InputError` lists the names otherwise."""
    from ..errors import InputError

    for rec in available_experiments():
        if rec.name == name or name in rec.aliases:
            return rec
    raise InputError(f"unknown experiment {name!r}; available: "
                     f"{', '.join(r.name for r in available_experiments()) or '(none)'}.")
