"""Short name of :mod:`nnrecover.experiments.bakshi2019`, kept importable for scripts that use it."""

from .bakshi2019 import *  # noqa: F401,F403
from .bakshi2019 import __all__  # noqa: F401
from .bakshi2019 import bakshi2019_instance as bjw19_instance  # noqa: F401
