"""The ``extract-deep`` experiment (nnrecover.experiments.extract_deep)."""

from __future__ import annotations

import pytest

from nnrecover.errors import InputError
from nnrecover.experiments import get_experiment
from nnrecover.experiments.extract_deep import parse_shape


def test_quick_mode_extracts_every_shape_exactly():
    df, fig = get_experiment("extract-deep").func(rng=0, quick=True)
    assert list(df["shape"]) == ["6-10-6-1", "8-12-6-2"]
    assert (df["status"] == "ok").all()
    assert df["complete"].all()
    assert (df["widths_found"] == df["widths_true"]).all()
    # exact up to the box's round-off
    assert (df["max_error_over_std"] < 1e-9).all()
    assert (df["queries"] > 0).all()
    assert len(fig.axes) == 2


@pytest.mark.parametrize("shape", ["10", "10-0-1", "a-b-c", "10-5"])
def test_bad_shapes_are_refused(shape):
    with pytest.raises(InputError, match="shape"):
        parse_shape(shape)
