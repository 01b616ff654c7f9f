"""Short name of :mod:`nnrecover.experiments.ge2019`, kept importable for scripts that use it."""

from .ge2019 import *  # noqa: F401,F403
from .ge2019 import __all__  # noqa: F401
