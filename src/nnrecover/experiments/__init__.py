"""Named experiments (each returns a pandas DataFrame and a matplotlib figure) and their runner.

Each paper's experiments live in their own module, listed in ``_MODULES``; a module that does not
exist yet is simply not loaded.
"""

from __future__ import annotations

import importlib.util
from importlib import import_module

from .registry import ExperimentRecord, available_experiments, experiment, get_experiment

_MODULES = ("baseline", "compare", "awasthi2021", "ge2019", "bakshi2019", "goel2019", "goel2019_rest", "extract", "certificates")

__all__ = ["ExperimentRecord", "available_experiments", "experiment", "get_experiment"]


def _load_all() -> None:
    for mod in _MODULES:
        if importlib.util.find_spec(f"{__name__}.{mod}") is not None:
            import_module(f".{mod}", __name__)
