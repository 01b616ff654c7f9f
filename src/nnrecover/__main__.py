"""``python -m nnrecover``: the command line (see :mod:`nnrecover.cli`)."""

import sys

from .cli import main

sys.exit(main())
