"""The query region of a model whose outputs are exact only within a declared ``output_range``.

A classifier's logits, as the loaders recover them from its probabilities, are exact only while the
probabilities do not saturate; such a model declares ``output_range = (lo, hi)``.
:func:`choose_scale` picks the largest ``input_scale / 2^j`` whose Gaussian query points keep the
outputs within it (the region on which the lines start, the output layer is fitted and the certificate
is taken). This step is not in Carlini et al. (CRYPTO 2020), whose black boxes return exact logits.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import InputError
from .queries import QueryOracle

__all__ = ["model_output_range", "choose_scale", "MAX_HALVINGS"]

#: halvings of input_scale tried when the model's outputs leave its output_range on the region
MAX_HALVINGS = 40


def model_output_range(model: Any) -> tuple[float, float] | None:
    """The ``output_range`` a model declares: ``(lo, hi)`` within which its outputs are exact."""
    rng_ = getattr(model, "output_range", None)
    if rng_ is None:
        return None
    try:
        lo, hi = (float(v) for v in rng_)
    except (TypeError, ValueError) as exc:
        raise InputError(f"the model's output_range must be a pair (lo, hi), got {rng_!r}.") from exc
    if not lo < hi:
        raise InputError(f"the model's output_range must have lo < hi, got {rng_!r}.")
    return lo, hi


def choose_scale(oracle: QueryOracle, d: int, gen: np.random.Generator, scale: float,
                  out_range: tuple[float, float], explicit: bool, n_probe: int = 256) -> tuple[float, dict]:
    """Largest ``scale / 2^j`` whose Gaussian query points keep the model's outputs in ``out_range``.

    The Gaussian points are where lines start, the output layer is fitted and the certificate is
    taken; the search lines reach further and are cut where the outputs leave the range
    (:func:`~nnrecover.extraction.lines.search_line`). With an ``explicit`` scale whose
    points leave the range, the error names the scale that keeps it.
    """
    lo, hi = out_range
    info: dict[str, Any] = {"output_range": [lo, hi], "requested_input_scale": scale, "probe_queries": 0}
    s = scale
    span = [math.nan, math.nan]
    for halvings in range(MAX_HALVINGS + 1):
        Y = oracle(s * gen.standard_normal((n_probe, d)), allow_nonfinite=True)
        info["probe_queries"] += Y.shape[0]
        finite = bool(np.all(np.isfinite(Y)))
        span = [float(Y.min()), float(Y.max())] if finite else [-math.inf, math.inf]
        if halvings == 0:
            info["outputs_at_requested_scale"] = span
        if finite and lo <= span[0] and span[1] <= hi:
            break
        s /= 2
    else:
        raise InputError(f"the model's outputs leave its exact range [{lo:g}, {hi:g}] even at input_scale={s * 2:.3g} "
                         f"({MAX_HALVINGS} halvings of {scale:g}; outputs {span[0]:.3g} to {span[1]:.3g}): it "
                         "saturates at the origin itself (e.g. a classifier sure of one class there), so no "
                         "Gaussian region around the origin gives exact logits.")
    info["input_scale"] = s
    info["outputs_on_region"] = span
    if explicit and s != scale:
        a, b = info["outputs_at_requested_scale"]
        raise InputError(
            f"at input_scale={scale:g} the model's outputs span {a:.3g} to {b:.3g} on Gaussian query points, "
            f"beyond [{lo:g}, {hi:g}], where they are no longer exact (a classifier's probabilities "
            f"saturate); use input_scale={s:.3g} (--input-scale {s:.3g}), or leave it unset to have it chosen.")
    return s, info

