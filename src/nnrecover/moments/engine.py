"""The data sources and the pass driver, :mod:`nnrecover.data`, under the import path scripts already use."""

from ..data import *  # noqa: F401,F403
from ..data import __all__  # noqa: F401
from ..data import accumulate_dask, build_dask_reduction, feed_statistics  # noqa: F401
