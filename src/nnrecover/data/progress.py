"""Progress bars of passes over data: on a terminal only, after a short delay, counting rows."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from ..moments.base import Statistic


PROGRESS_DELAY = 0.5
"""Seconds a pass must run before an automatic (``progress=None``) progress bar appears."""


def progress_enabled(progress: bool | None, stream: Any = None) -> bool:
    if progress is not None:
        return bool(progress)
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced stream
        return False


def progress_bar(total: int | None, progress: bool | None, desc: str | None):
    """A tqdm bar counting rows on stderr, or None. ``progress=None``: only on a terminal, after a delay."""
    if not progress_enabled(progress):
        return None
    from tqdm.auto import tqdm  # deferred: tqdm is needed only to draw a progress bar

    return tqdm(total=total, unit="rows", unit_scale=True, desc=desc, file=sys.stderr, leave=False,
                delay=PROGRESS_DELAY if progress is None else 0.0, dynamic_ncols=True)


def describe_statistics(statistics: Sequence[Statistic] | None) -> str | None:
    if not statistics:
        return None
    return "+".join(type(s).__name__ for s in statistics)
