"""Short name of :mod:`nnrecover.experiments.awasthi2021`, kept importable for scripts that use it."""

from .awasthi2021 import *  # noqa: F401,F403
from .awasthi2021 import __all__  # noqa: F401
from .awasthi2021 import awasthi2021_bias as atv21_bias  # noqa: F401
from .awasthi2021 import awasthi2021_large_bias as atv21_large_bias  # noqa: F401
from .awasthi2021 import awasthi2021_overcomplete as atv21_overcomplete  # noqa: F401
from .awasthi2021 import awasthi2021_samples as atv21_samples  # noqa: F401
