"""Shared pytest fixtures (keep this file small: every test module sees it)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import settings

# The machine is shared (2 cores, several test processes): wall-clock deadlines would make property
# tests flaky without testing anything about the library, so they are switched off.
# derandomize: the same examples on every run and machine, so a green suite stays green (CI runs once)
settings.register_profile("nnrecover", deadline=None, derandomize=True)
settings.load_profile("nnrecover")


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh, fixed-seed Generator for each test (tests stay independent and reproducible)."""
    return np.random.default_rng(20240531)
