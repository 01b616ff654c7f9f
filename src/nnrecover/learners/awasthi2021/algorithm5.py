"""Algorithm 5 of Awasthi, Tang, Vijayaraghavan (2021): a network of low L2 error with at most ``m + 2``
units (Lemma D.12), from the Hermite tensors of one half of the samples (Algorithm 4) and a regression
on the other half (Claim D.14)."""

from __future__ import annotations

from typing import Any

from ..._validation import check_random_state
from ...data import as_data_source
from ...data.views import EveryOtherRow
from ...errors import AssumptionError, InputError
from .coefficients import estimate_coefficients
from .conditions import check_order
from .decompose import HermiteRecovery, _make_thresholds, algorithm4
from .regression import RegressionResult, algorithm5_regression

__all__ = ["algorithm5"]


def algorithm5(data: Any, n_hidden: int, *, order: int | str = "auto", thresholds: Any = "adaptive",
               feature_map: str = "reduced", solver: str = "exact", epsilon: float = 1e-2, rng=None,
               control_variate: bool = True, **options) -> tuple[RegressionResult, HermiteRecovery]:
    """Algorithm 5 as printed: tensors from the first half of the samples (even rows of every chunk),
    Algorithm 4, then regression on the second half and consolidation (Claim D.14).

    Returns the regression result (its ``network`` has at most ``|S| + 2 <= m + 2`` units) and the
    Algorithm 4 output ``S``. ``control_variate`` goes to
    :func:`~nnrecover.learners.awasthi2021.coefficients.estimate_coefficients` (False: the paper's plain
    estimator); ``options`` go to :func:`algorithm4`.
    """

    gen = check_random_state(rng)
    source = as_data_source(data)
    if not source.info.reiterable:
        raise InputError("Algorithm 5 reads the data twice (tensors, then regression); pass a re-iterable source.")
    d = source.n_inputs
    if d is None:
        raise InputError("Algorithm 5 needs a source with a known number of inputs (arrays or a SampleStream).")
    order = check_order(order, int(n_hidden), int(d))
    first_half = EveryOtherRow(source, 0)
    coeffs = estimate_coefficients(first_half, order, n_hidden, rng=gen, control_variate=control_variate)
    th = _make_thresholds(thresholds, coeffs, order, n_hidden, epsilon, options.pop("bound", None))
    rec = algorithm4(coeffs, order, n_hidden, thresholds=th, rng=gen, **options)
    if rec.n_units == 0:
        raise AssumptionError("Algorithm 4 recovered no unit above the noise: more samples are needed.")
    reg = algorithm5_regression(source, (rec.a, rec.b, rec.W), feature_map=feature_map, rows="second_half",
                                epsilon=epsilon, n_hidden=n_hidden, solver=solver)
    return reg, rec
