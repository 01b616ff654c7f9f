"""Physical memory: what the platform says is available, and byte counts written for people.

Commands and streams refuse work that cannot fit before they start it (:func:`nnrecover.files.check_free_space`,
:meth:`nnrecover.sampling.SampleStream.materialize`); both ask this module.
"""

from __future__ import annotations

import os

__all__ = ["free_memory", "format_bytes"]


def free_memory() -> int | None:
    """Available physical memory in bytes (None where the platform does not say)."""
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def format_bytes(n: float) -> str:
    """``n`` bytes in binary units with one decimal (``"1.5 GiB"``; whole bytes below 1 KiB)."""
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover
