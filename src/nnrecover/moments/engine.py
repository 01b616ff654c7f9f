"""The data sources and the pass driver of :mod:`nnrecover.data`, kept importable for scripts that use it."""

from ..data import *  # noqa: F401,F403
from ..data import __all__  # noqa: F401
from ..data import accumulate_dask, build_dask_reduction, feed_statistics  # noqa: F401
