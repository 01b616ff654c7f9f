"""The declarative hyper-parameter tables: one check for every learner, numpy scalars accepted."""

import numpy as np
import pytest

import nnrecover as nr
from nnrecover._validation import Interval, Options, validate_params
from nnrecover.errors import InputError

LEARNERS = [nr.learners.HermiteTensorLearner, nr.learners.PureNeuronLearner, nr.learners.ExactReLULearner,
            nr.learners.NoisyReLULearner, nr.learners.HighThresholdLearner, nr.learners.GradientDescentLearner]


def _make(cls, **params):
    params = {"n_hidden": 3, **params}
    if cls is nr.learners.HighThresholdLearner:
        params.setdefault("threshold", 2.0)
    return cls(**params)


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
def test_every_parameter_is_declared(cls):
    """Every constructor argument has a row in the table, so no parameter goes unchecked."""
    assert set(_make(cls).get_params()) <= set(cls._all_parameter_constraints())
    _make(cls)._check_params()


@pytest.mark.parametrize("cls", LEARNERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("value, ok", [(np.int64(4), True), (np.int32(2), True), (np.float32(1.5), False),
                                       (True, False), (0, False), ("auto", True), ("Auto", False)])
def test_n_hidden_accepts_numpy_integers_only(cls, value, ok):
    learner = _make(cls, n_hidden=value)
    if ok:
        learner._check_params()
    else:
        with pytest.raises(InputError, match="n_hidden must be"):
            learner._check_params()


def test_numpy_floats_are_real_numbers():
    nr.learners.HermiteTensorLearner(np.int64(5), snr_threshold=np.float32(1.5), n_draws=np.int64(3))._check_params()
    nr.learners.GradientDescentLearner(2, tol=np.float64(1e-12), time_budget=np.float32(3))._check_params()
    nr.learners.PureNeuronLearner(2, symmetry_alpha=np.float32(0.01))._check_params()


@pytest.mark.parametrize("cls, params, name", [
    (nr.learners.HermiteTensorLearner, {"order": 3}, "order"),
    (nr.learners.HermiteTensorLearner, {"epsilon": -1.0}, "epsilon"),
    (nr.learners.PureNeuronLearner, {"symmetry_alpha": 1.0}, "symmetry_alpha"),
    (nr.learners.ExactReLULearner, {"certificate_tol": 0}, "certificate_tol"),
    (nr.learners.NoisyReLULearner, {"regression": "x"}, "regression"),
    (nr.learners.GradientDescentLearner, {"tol": 1e-17}, "tol"),
    (nr.learners.GradientDescentLearner, {"bias_scale": float("nan")}, "bias_scale"),
    (nr.learners.HighThresholdLearner, {"min_coefficient_ratio": 1.0}, "min_coefficient_ratio"),
    (nr.learners.ExactReLULearner, {"refine": 1}, "refine"),
    (nr.learners.NoisyReLULearner, {"random_state": -3}, "random_state"),
])
def test_bad_values_name_the_parameter(cls, params, name):
    with pytest.raises(InputError, match=f"{cls.__name__}: {name} must be"):
        _make(cls, **params).fit(np.zeros((10, 3)), np.zeros(10))


def test_cross_parameter_rule_still_checked():
    with pytest.raises(InputError, match="approximate='ica' needs identity input covariance"):
        nr.learners.ExactReLULearner(2, approximate="ica", whiten=True)._check_params()


def test_validate_params_alternatives():
    table = {"a": [None, Interval(int, 0, 1, closed="left")], "b": [Options("x", 2)], "c": ["boolean"]}
    validate_params({"a": None, "b": 2.0, "c": np.bool_(True)}, table, "T")
    validate_params({"a": 0, "b": "x", "c": False}, table, "T")
    for bad in ({"a": 1}, {"b": "y"}, {"c": 1}, {"b": np.array([2, 2])}):
        with pytest.raises(InputError, match="T: "):
            validate_params(bad, table, "T")
