"""Running named experiments and recording what was run.

:func:`run_experiment` looks an experiment up in the registry (:mod:`nnrecover.experiments.registry`),
runs it with one seeded random stream, and writes three files into ``out_dir``:

``results.csv``    the experiment's table (one row per configuration/trial), written by pandas;
``figure.png``     its figure;
``metadata.json``  what is needed to reproduce and judge the run: experiment name, paper,
                   ``quick``, the options, the seed (also when it was drawn fresh), package versions
                   (python, nnrecover, numpy, scipy, scikit-learn, tensorly, dask, pandas, matplotlib),
                   platform, CPU count, UTC start/end time and wall time. No host name or user name.

The folder is checked for writability before the experiment runs, and the three files are written
together through :func:`nnrecover.files.atomic_outputs` (all of them complete, or none replaced).

It also provides the two helpers every driver of learners needs (the CLI, the demo and the
experiments): :func:`learner_parameters` (the options a learner class accepts) and
:func:`make_learner` (build a learner by registry name, rejecting unknown options).
"""

from __future__ import annotations

import datetime as _dt
import inspect
import json
import math
import os
import platform
import shlex
import time
from importlib import metadata as _metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from ..errors import InputError
from ..files import atomic_outputs, prepare_output_dir
from . import get_experiment

if TYPE_CHECKING:
    import pandas

__all__ = ["run_experiment", "environment_info", "resolve_seed",
           "RESULT_FILES", "to_jsonable"]

#: names of the files :func:`run_experiment` writes
RESULT_FILES = ("results.csv", "metadata.json", "figure.png")

_PACKAGES = ("numpy", "scipy", "scikit-learn", "tensorly", "dask", "distributed", "pandas", "matplotlib")


# ------------------------------------------------------------------------------------------ seeds
def resolve_seed(rng: Any) -> int:
    """The integer seed a run uses, so that it can be written down and replayed.

    ``None`` draws fresh OS entropy (a 128-bit integer, recorded in the metadata); an int is used as
    is; a ``numpy.random.Generator`` contributes one 63-bit draw (the caller's stream advances).
    """
    if rng is None:
        return int(np.random.SeedSequence().entropy)
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(0, 2**63 - 1))
    if isinstance(rng, bool) or not isinstance(rng, (int, np.integer)):
        raise InputError(f"seed/rng must be None, a non-negative int or a numpy.random.Generator, got {rng!r}.")
    if int(rng) < 0:
        raise InputError(f"seed must be a non-negative integer, got {rng}.")
    return int(rng)


# ------------------------------------------------------------------------------------------ metadata
def environment_info() -> dict:
    """Versions of python, nnrecover and its numerical dependencies, platform and CPU count.

    Host and user names are deliberately not recorded.
    """
    versions: dict[str, str | None] = {}
    for pkg in ("nnrecover", *_PACKAGES):
        try:
            versions[pkg] = _metadata.version(pkg)
        except _metadata.PackageNotFoundError:
            versions[pkg] = None
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": f"{platform.system()}-{platform.release()}-{platform.machine()}",
        "cpu_count": os.cpu_count(),
        "versions": versions,
    }


def to_jsonable(value: Any) -> Any:
    """Convert numpy scalars/arrays, paths, tuples and non-finite floats into JSON-safe values."""
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_jsonable(value.tolist())
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, Path):
        return str(value)
    return repr(value)


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------------------------------------ runner
def _check_options(func, options: dict, name: str) -> None:
    params = inspect.signature(func).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    known = {n for n, p in params.items()
             if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)}
    known -= {"rng", "quick"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise InputError(f"unknown option(s) {', '.join(unknown)} for experiment {name!r}; "
                         f"known options: {', '.join(sorted(known)) or '(none)'}.")


def run_experiment(name: str, out_dir: "str | os.PathLike[str]", *, quick: bool = False, rng: Any = None,
                   **options: Any) -> pandas.DataFrame:
    """Run the registered experiment ``name`` and write its results into ``out_dir``.

    Parameters
    ----------
    name : str
        A name listed by :func:`nnrecover.experiments.available_experiments` (``nnrecover experiment
        --list``).
    out_dir : path-like
        Directory for ``results.csv``, ``metadata.json`` and ``figure.png`` (created if missing;
        existing files of those names are replaced).
    quick : bool, default False
        Run the scaled-down version (seconds; used by the tests).
    rng : None, int or numpy.random.Generator
        Seed of the run. ``None`` draws fresh entropy; the seed actually used is recorded in
        ``metadata.json`` so the run can be replayed with ``rng=<that seed>``.
    **options
        Passed to the experiment function; unknown names raise :class:`InputError`.

    Returns
    -------
    pandas.DataFrame
        The experiment's results table (also in ``results.csv``).

    Raises
    ------
    InputError
        Unknown experiment or option, ``out_dir`` is an existing file, or it (or a result file in it)
        cannot be written; all checked before the experiment runs.
    """
    import pandas as pd  # deferred: pandas is slow to import

    record = get_experiment(name)
    _check_options(record.func, options, name)
    out = prepare_output_dir(out_dir, RESULT_FILES)  # before the run, not after it
    seed = resolve_seed(rng)
    started = _utc_now()
    t0 = time.perf_counter()
    result = record.func(rng=np.random.default_rng(seed), quick=bool(quick), **options)
    wall = time.perf_counter() - t0
    if not (isinstance(result, tuple) and len(result) == 2):
        raise TypeError(f"experiment {name!r} must return (pandas.DataFrame, matplotlib Figure), "
                        f"got {type(result).__name__}.")
    df, fig = result
    if not isinstance(df, pd.DataFrame) or not hasattr(fig, "savefig"):
        raise TypeError(f"experiment {name!r} must return (pandas.DataFrame, matplotlib Figure), got "
                        f"({type(df).__name__}, {type(fig).__name__}).")
    meta = {
        "experiment": record.name,
        "paper": record.paper,
        "description": record.description,
        "quick": bool(quick),
        "seed": seed,
        "options": to_jsonable(options),
        "started_at_utc": started,
        "finished_at_utc": _utc_now(),
        "wall_time_s": round(wall, 3),
        "n_rows": int(len(df)),
        "columns": [str(c) for c in df.columns],
        "files": list(RESULT_FILES),
        "command": _command(record.name, quick, seed, options, out),
        **environment_info(),
    }
    # the three files of one run as one: all of them, or (error, Ctrl-C) none replaced
    with atomic_outputs([out / "results.csv", out / "figure.png", out / "metadata.json"]) as (csv, png, js):
        df.to_csv(csv, index=False)
        fig.savefig(png, dpi=120, format="png")
        js.write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    _close(fig)
    return df


def _command(name: str, quick: bool, seed: int, options: Mapping[str, Any], out=None) -> str:
    """The ``nnrecover experiment`` command line that replays this run (options as JSON values; ``--out``
    the folder it wrote)."""

    parts = ["nnrecover", "experiment", name, *(["--quick"] if quick else []), "--seed", str(seed)]
    if out is not None:
        parts += ["--out", str(out)]
    for key, value in options.items():
        parts += ["--option", f"{key}={json.dumps(to_jsonable(value))}"]
    return shlex.join(parts)


def _close(fig) -> None:
    """Release a figure created through pyplot (a bare ``Figure`` needs nothing)."""
    if getattr(getattr(fig, "canvas", None), "manager", None) is not None:
        import matplotlib.pyplot as plt  # deferred: matplotlib is slow to import

        plt.close(fig)
