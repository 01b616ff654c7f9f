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
    name: str
    func: Callable = field(compare=False)
    paper: str = "baseline"
    description: str = ""


_EXPERIMENTS: dict[str, ExperimentRecord] = {}


def experiment(name: str, *, paper: str = "baseline", description: str = ""):
    """Decorator registering an experiment function under ``name``."""
    def deco(func):
        if name in _EXPERIMENTS and _EXPERIMENTS[name].func is not func:
            raise ValueError(f"experiment {name!r} registered twice")
        _EXPERIMENTS[name] = ExperimentRecord(name, func, paper, description or (func.__doc__ or "").strip().split("\n")[0])
        return func
    return deco


def available_experiments() -> list[ExperimentRecord]:
    from . import _load_all

    _load_all()
    return sorted(_EXPERIMENTS.values(), key=lambda r: r.name)


def get_experiment(name: str) -> ExperimentRecord:
    from ..errors import InputError

    for rec in available_experiments():
        if rec.name == name:
            return rec
    raise InputError(f"unknown experiment {name!r}; available: "
                     f"{', '.join(r.name for r in available_experiments()) or '(none)'}.")
