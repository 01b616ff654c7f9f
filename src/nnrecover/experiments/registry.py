"""Registry of named experiments.

An experiment is a function ``run(*, rng, quick, **options) -> (pandas.DataFrame, matplotlib.figure.Figure)``
registered with :func:`experiment`. ``quick=True`` is a scaled-down version that finishes in seconds
(used by tests); the default reproduces the full experiment. The package face
:mod:`nnrecover.experiments` imports every experiment module, so that its ``available_experiments()``
lists them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..learners.registry import PAPERS

__all__ = ["ExperimentRecord", "experiment", "registered_experiments"]


@dataclass(frozen=True)
class ExperimentRecord:
    """One registered experiment.

    Attributes
    ----------
    name : str            unique name (``nnrecover experiment NAME``)
    func : callable       ``func(*, rng, quick, **options) -> (DataFrame, Figure)``
    paper : str           key of :data:`nnrecover.learners.registry.PAPERS`
    description : str     one line (default: the first line of ``func``'s docstring)
    """

    name: str
    func: Callable = field(compare=False)
    paper: str = "baseline"
    description: str = ""


_EXPERIMENTS: dict[str, ExperimentRecord] = {}


def experiment(name: str, *, paper: str = "baseline", description: str = "") -> Callable[[Callable], Callable]:
    """Decorator registering an experiment function under ``name`` (called at import by each module).

    Raises
    ------
    ValueError
        ``paper`` is not a known paper key, or ``name`` is already taken by another function (both
        are programming errors in a module of the package, not user errors).
    """
    if paper not in PAPERS:
        raise ValueError(f"unknown paper key {paper!r} for experiment {name!r}; use one of {sorted(PAPERS)}")

    def deco(func: Callable) -> Callable:
        if name in _EXPERIMENTS and _EXPERIMENTS[name].func is not func:
            raise ValueError(f"experiment {name!r} registered twice")
        summary = description or (func.__doc__ or "").strip().split("\n")[0]
        _EXPERIMENTS[name] = ExperimentRecord(name, func, paper, summary)
        return func
    return deco


def registered_experiments() -> list[ExperimentRecord]:
    """The experiments registered so far (by the modules imported so far), by name."""
    return sorted(_EXPERIMENTS.values(), key=lambda r: r.name)
