"""Streaming moment statistics (update / merge / finalize) and their exact population forms."""

from .base import Statistic, accumulate

__all__ = ["Statistic", "accumulate"]
