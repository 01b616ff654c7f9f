"""Named experiments (each returns a pandas DataFrame and a matplotlib figure) and their runner.

One module per paper (``awasthi2021``, ``ge2019``, ``bakshi2019``, ``goel2019``), the learner
comparisons (``baseline``, ``compare``), the extraction study (``extract``) and the certificate
calibration (``certificates``); each registers its experiments with :func:`experiment`.
"""

from __future__ import annotations

from ..errors import InputError
from . import (
    awasthi2021,
    bakshi2019,
    baseline,
    certificates,
    compare,
    extract,
    extract_deep,
    ge2019,
    goel2019,
)
from .registry import ExperimentRecord, experiment, registered_experiments

__all__ = ["ExperimentRecord", "available_experiments", "experiment", "get_experiment"]

# the experiment modules, imported for their registrations
_MODULES = (awasthi2021, bakshi2019, baseline, certificates, compare, extract, extract_deep, ge2019, goel2019)


def available_experiments() -> list[ExperimentRecord]:
    """Every registered experiment, by name."""
    return registered_experiments()


def get_experiment(name: str) -> ExperimentRecord:
    """The experiment registered under ``name``; :class:`~nnrecover.errors.InputError` lists the names otherwise."""
    for rec in available_experiments():
        if rec.name == name:
            return rec
    raise InputError(f"unknown experiment {name!r}; available: "
                     f"{', '.join(r.name for r in available_experiments()) or '(none)'}.")
