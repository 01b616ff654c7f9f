"""Tests of the network model (src/nnrecover/network.py): TwoLayerNetwork and random_network."""

from __future__ import annotations

import json
import math
import os
import tempfile
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nnrecover as nr
from nnrecover.errors import InputError
from nnrecover.network import TwoLayerNetwork, random_network

EPS = np.finfo(float).eps


def _manual_forward(net, X):
    """f(x) = A act(W x + b) + c, written out with explicit loops over units."""
    out = np.tile(net.output_bias, (X.shape[0], 1))
    for i in range(net.n_hidden):
        h = net.activation(X @ net.hidden_weights[i] + net.hidden_bias[i])
        out += np.outer(h, net.output_weights[:, i])
    return out


# --------------------------------------------------------------------------- construction

def test_defaults_shapes_and_prediction(rng):
    W = rng.standard_normal((3, 5))
    net = TwoLayerNetwork(W)
    assert (net.n_inputs, net.n_hidden, net.n_outputs, net.n_parameters) == (5, 3, 1, 15 + 3 + 3 + 1)
    assert np.array_equal(net.hidden_bias, np.zeros(3)) and np.array_equal(net.output_weights, np.ones((1, 3)))
    assert np.array_equal(net.output_bias, np.zeros(1)) and net.activation == nr.get_activation("relu")
    X = rng.standard_normal((20, 5))
    y = net.predict(X)
    assert y.shape == (20,)
    assert np.allclose(y, np.maximum(X @ W.T, 0).sum(axis=1), rtol=1e-14, atol=1e-14)
    assert np.array_equal(net(X), y)
    assert "n_hidden=3" in repr(net)
    W[0, 0] = 99.0  # the network holds its own copy
    assert net.hidden_weights[0, 0] != 99.0


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid", "step", "leaky_relu(0.3)", "relu_power(2)",
                                        "abs", "exp", "identity", "exp_minus_one"])
def test_predict_multi_output_matches_formula(activation, rng):
    net = TwoLayerNetwork(rng.standard_normal((4, 3)), rng.standard_normal(4), rng.standard_normal((2, 4)),
                          rng.standard_normal(2), activation)
    X = rng.standard_normal((30, 3))
    Y = net.predict(X)
    assert Y.shape == (30, 2)
    ref = _manual_forward(net, X)
    assert np.allclose(Y, ref, rtol=1e-13, atol=1e-13 * np.abs(ref).max())
    assert np.array_equal(net.hidden_activations(X), net.activation(X @ net.hidden_weights.T + net.hidden_bias))


def test_one_dimensional_output_weights_mean_one_output():
    net = TwoLayerNetwork([[1.0, 0.0], [0.0, 1.0]], output_weights=[2.0, -1.0], output_bias=[0.5])
    assert net.output_weights.shape == (1, 2)
    assert net.predict(np.array([[1.0, 3.0]])).tolist() == [2.0 - 3.0 + 0.5]


@pytest.mark.parametrize("kwargs, match", [
    (dict(hidden_weights=[1.0, 2.0]), "hidden_weights must have shape"),
    (dict(hidden_weights=np.zeros((0, 3))), "hidden_weights must have shape"),
    (dict(hidden_weights=[[1.0, np.nan]]), "hidden_weights contains"),
    (dict(hidden_weights=[["a", "b"]]), "hidden_weights must be an array of real numbers"),
    (dict(hidden_weights=[[1j, 0]]), "hidden_weights must be real"),
    (dict(hidden_weights=np.eye(2), hidden_bias=[1.0]), "hidden_bias must have shape"),
    (dict(hidden_weights=np.eye(2), hidden_bias=[1.0, np.inf]), "hidden_bias contains"),
    (dict(hidden_weights=np.eye(2), output_weights=np.ones((1, 3))), "output_weights must have shape"),
    (dict(hidden_weights=np.eye(2), output_weights=np.ones((1, 1, 2))), "output_weights must have shape"),
    (dict(hidden_weights=np.eye(2), output_weights=[[1.0, np.nan]]), "output_weights contains"),
    (dict(hidden_weights=np.eye(2), output_bias=[0.0, 1.0]), "output_bias must have shape"),
    (dict(hidden_weights=np.eye(2), output_bias="x"), "output_bias must be an array"),
    (dict(hidden_weights=np.eye(2), activation="softplus"), "unknown activation"),
])
def test_constructor_validation(kwargs, match):
    with pytest.raises(InputError, match=match):
        TwoLayerNetwork(**kwargs)


def test_predict_validates_input(rng):
    net = random_network(3, 2, rng=rng)
    with pytest.raises(InputError, match="columns"):
        net.predict(np.zeros((4, 2)))
    with pytest.raises(InputError, match="NaN"):
        net.predict(np.array([[0.0, np.nan, 1.0]]))
    with pytest.raises(InputError, match="2-D"):
        net.predict(np.zeros(3))


def test_copy_permuted_and_equality(rng):
    net = random_network(4, 3, 2, rng=rng, bias_range=(-1, 1), output_bias_range=(-1, 1))
    twin = net.copy()
    assert twin == net and twin is not net and twin.hidden_weights is not net.hidden_weights
    twin.hidden_bias[0] += 1.0
    assert twin != net
    perm = net.permuted([2, 0, 1])
    assert np.array_equal(perm.hidden_weights, net.hidden_weights[[2, 0, 1]])
    X = rng.standard_normal((10, 4))
    assert np.allclose(perm.predict(X), net.predict(X), rtol=1e-14, atol=1e-14)
    with pytest.raises(InputError, match="permutation"):
        net.permuted([0, 0, 1])
    assert (net == "net") is False
    with pytest.raises(TypeError):
        hash(net)


# --------------------------------------------------------------------------- canonical form

_HOMOGENEOUS = ["relu", "leaky_relu(0.2)", "relu_power(2)", "relu_power(1.5)", "abs", "identity"]


@st.composite
def _networks(draw, activations=tuple(_HOMOGENEOUS)):
    k = draw(st.integers(1, 4))
    d = draw(st.integers(1, 4))
    p = draw(st.integers(1, 3))
    # magnitudes 0 or >= 1e-100: rows far smaller than their bias have no float64 canonical form
    # (b / ||w|| overflows; that refusal is tested separately)
    fl = st.floats(-10, 10, allow_subnormal=False).filter(lambda x: x == 0 or abs(x) >= 1e-100)
    W = draw(hnp.arrays(np.float64, (k, d), elements=fl))
    b = draw(hnp.arrays(np.float64, (k,), elements=fl))
    A = draw(hnp.arrays(np.float64, (p, k), elements=fl))
    c = draw(hnp.arrays(np.float64, (p,), elements=fl))
    return TwoLayerNetwork(W, b, A, c, draw(st.sampled_from(activations)))


@given(_networks(), st.integers(0, 2**32 - 1))
def test_canonical_keeps_predictions_and_gives_unit_rows(net, seed):
    canon = net.canonical()
    zero = ~np.any(net.hidden_weights, axis=1)
    cnorms = np.linalg.norm(canon.hidden_weights, axis=1)
    assert np.all(np.abs(cnorms[~zero] - 1.0) <= 4 * EPS)  # also for rows like 1e-200 (no underflow)
    assert np.array_equal(canon.hidden_weights[zero], net.hidden_weights[zero])
    X = np.random.default_rng(seed).standard_normal((16, net.n_inputs)) * 3
    q = net.activation.degree
    # rounding bound: each unit's pre-activation is computed in a different but equivalent way; its
    # rounding error, <= 8 eps (|w| |x| + |b|), is amplified at most by q (|w||x| + |b|)^(q-1) and |a|;
    # adding the output bias c then rounds each side once more, by at most eps |c| (plus the sum)
    pre = np.abs(X) @ np.abs(net.hidden_weights.T) + np.abs(net.hidden_bias)
    scale = (np.maximum(pre, 1e-300) ** q) @ np.abs(net.output_weights.T)
    diff = np.abs(canon.predict(X).reshape(16, -1) - net.predict(X).reshape(16, -1))
    assert np.all(diff <= 16 * max(q, 1.0) * EPS * scale + 2 * EPS * (np.abs(net.output_bias) + scale) + 1e-300)
    again = canon.canonical()  # idempotent up to rounding
    assert np.allclose(again.hidden_weights, canon.hidden_weights, rtol=0, atol=4 * EPS)


def test_canonical_hand_example_and_degree_zero(rng):
    net = TwoLayerNetwork([[3.0, 4.0], [0.0, -2.0]], [5.0, 1.0], [[2.0, 1.0]], [0.5])
    canon = net.canonical()
    assert np.allclose(canon.hidden_weights, [[0.6, 0.8], [0.0, -1.0]], rtol=0, atol=1e-16)
    assert np.allclose(canon.hidden_bias, [1.0, 0.5], rtol=0, atol=1e-16)
    assert np.allclose(canon.output_weights, [[10.0, 2.0]], rtol=0, atol=1e-15)
    assert np.array_equal(canon.output_bias, [0.5])
    # step is homogeneous of degree 0: A is unchanged, predictions identical off the boundary
    step = TwoLayerNetwork(rng.standard_normal((3, 4)) * 5, rng.standard_normal(3), rng.standard_normal((1, 3)),
                           activation="step")
    cstep = step.canonical()
    assert np.array_equal(cstep.output_weights, step.output_weights)
    X = rng.standard_normal((200, 4))
    assert np.array_equal(cstep.predict(X), step.predict(X))
    # rows whose squared norm would underflow or overflow are still scaled exactly
    extreme = TwoLayerNetwork([[3e-200, 4e-200], [3e200, -4e200]], [1e-200, 1e200], [[1.0, 1.0]]).canonical()
    assert np.allclose(extreme.hidden_weights, [[0.6, 0.8], [0.6, -0.8]], rtol=1e-15, atol=0)
    assert np.allclose(extreme.hidden_bias, [0.2, 0.2], rtol=1e-15, atol=0)
    assert np.allclose(extreme.output_weights, [[5e-200, 5e200]], rtol=1e-15, atol=0)
    with pytest.raises(InputError, match="hidden unit 1 cannot be put in canonical form"):
        TwoLayerNetwork([[1.0], [1e-300]], [0.0, 1e10]).canonical()
    # relu_power(3): column scaled by ||w||^3
    cube = TwoLayerNetwork([[0.0, 2.0]], activation="relu_power(3)").canonical()
    assert np.array_equal(cube.output_weights, [[8.0]])


@pytest.mark.parametrize("activation", ["sigmoid", "tanh", "exp", "exp_minus_one"])
def test_canonical_leaves_non_homogeneous_alone(activation, rng):
    net = TwoLayerNetwork(rng.standard_normal((3, 2)) * 4, rng.standard_normal(3), activation=activation)
    canon = net.canonical()
    assert canon == net and canon is not net


# --------------------------------------------------------------------------- save / load

def _bits(net):
    return [a.tobytes() for a in net._arrays()] + [net.activation.spec]


_ANY_FLOAT = st.floats(allow_nan=False, allow_infinity=False)  # includes -0.0, subnormals, 1e308


@st.composite
def _any_networks(draw):
    k, d, p = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 2))
    arrays = [draw(hnp.arrays(np.float64, shape, elements=_ANY_FLOAT)) for shape in ((k, d), (k,), (p, k), (p,))]
    act = draw(st.sampled_from(["relu", "step", "sigmoid", "relu_power(2.5)", "leaky_relu(0.1)", "exp_minus_one"]))
    return TwoLayerNetwork(*arrays, act)


@given(_any_networks(), st.sampled_from([".json", ".npz", ".JSON", ".Npz"]))
def test_save_load_is_bit_exact(net, suffix):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "net" + suffix)
        net.save(path)
        assert sorted(os.listdir(tmp)) == ["net" + suffix]  # exactly that file name
        back = TwoLayerNetwork.load(path)
    assert _bits(back) == _bits(net)
    assert back == net


def test_json_file_is_plain_text_without_pickle(tmp_path):
    net = random_network(2, 2, rng=0)
    net.save(tmp_path / "n.json")
    data = json.loads((tmp_path / "n.json").read_text())
    assert data["format"] == "nnrecover.TwoLayerNetwork/1" and data["activation"] == "relu"
    assert TwoLayerNetwork.from_dict(data) == net
    net.save(tmp_path / "n.npz")
    with np.load(tmp_path / "n.npz", allow_pickle=False) as f:  # readable without pickle
        assert set(f.files) == {"hidden_weights", "hidden_bias", "output_weights", "output_bias",
                                "activation", "format"}


def test_load_errors(tmp_path):
    net = random_network(2, 2, rng=0)
    with pytest.raises(InputError, match="does not exist"):
        TwoLayerNetwork.load(tmp_path / "missing.json")
    with pytest.raises(InputError, match="does not exist"):
        (tmp_path / "folder.json").mkdir()
        TwoLayerNetwork.load(tmp_path / "folder.json")  # a directory
    with pytest.raises(InputError, match=r"\.json or \.npz"):
        net.save(tmp_path / "net.pkl")
    (tmp_path / "net.txt").write_text("{}")
    with pytest.raises(InputError, match=r"\.json or \.npz"):
        TwoLayerNetwork.load(tmp_path / "net.txt")
    with pytest.raises(InputError, match="cannot write"):
        net.save(tmp_path / "no" / "such" / "dir.json")
    cases = {
        "garbage.json": b"{not json",
        "binary.json": bytes(range(256)),
        "list.json": b"[1, 2, 3]",
        "nokeys.json": b'{"hidden_bias": [1.0]}',
        "format.json": b'{"format": "other/2", "hidden_weights": [[1.0]], "activation": "relu"}',
        "act.json": b'{"hidden_weights": [[1.0]], "activation": 3}',
        "strings.json": b'{"hidden_weights": [["a"]], "activation": "relu"}',
        "badact.json": b'{"hidden_weights": [[1.0]], "activation": "softplus"}',
        "garbage.npz": b"PK\x03\x04 definitely not a zip archive",
        "empty.npz": b"",
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(InputError):
            TwoLayerNetwork.load(tmp_path / name)
    np.save(tmp_path / "single.npy", np.zeros(2))
    os.replace(tmp_path / "single.npy", tmp_path / "single.npz")
    with pytest.raises(InputError, match="single array"):
        TwoLayerNetwork.load(tmp_path / "single.npz")
    with open(tmp_path / "obj.npz", "wb") as fh:
        np.savez(fh, hidden_weights=np.array([None], dtype=object), activation=np.array("relu"))
    with pytest.raises(InputError, match="without pickle"):
        TwoLayerNetwork.load(tmp_path / "obj.npz")
    with open(tmp_path / "act.npz", "wb") as fh:
        np.savez(fh, hidden_weights=np.eye(2), activation=np.array([1.0, 2.0]))
    with pytest.raises(InputError, match="must be a string"):
        TwoLayerNetwork.load(tmp_path / "act.npz")
    with pytest.raises(InputError, match="must be a dict"):
        TwoLayerNetwork.from_dict([1, 2])


# --------------------------------------------------------------------------- scikit-learn

@pytest.mark.parametrize("activation", ["relu", "identity", "tanh", "logistic"])
@pytest.mark.parametrize("n_outputs", [1, 2])
def test_from_sklearn_reproduces_predictions(activation, n_outputs, rng):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPRegressor

    X = rng.standard_normal((60, 3))
    y = np.sin(X @ rng.standard_normal((3, n_outputs)))
    y = y[:, 0] if n_outputs == 1 else y
    mlp = MLPRegressor(hidden_layer_sizes=(5,), activation=activation, max_iter=15, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        mlp.fit(X, y)
    net = TwoLayerNetwork.from_sklearn(mlp)
    assert (net.n_inputs, net.n_hidden, net.n_outputs) == (3, 5, n_outputs)
    expected = "sigmoid" if activation == "logistic" else activation
    assert net.activation == nr.get_activation(expected)
    Xt = rng.standard_normal((40, 3)) * 2
    ours, theirs = net.predict(Xt), mlp.predict(Xt)
    assert ours.shape == theirs.shape
    # same arithmetic up to BLAS summation order: a few ulps of O(1) numbers
    assert np.allclose(ours, theirs, rtol=1e-12, atol=1e-12)


def test_from_sklearn_errors(rng):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    with pytest.raises(InputError, match="call fit first"):
        TwoLayerNetwork.from_sklearn(MLPRegressor())
    with pytest.raises(InputError, match="MLPRegressor"):
        TwoLayerNetwork.from_sklearn(object())
    X = rng.standard_normal((30, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        deep = MLPRegressor(hidden_layer_sizes=(3, 3), max_iter=5, random_state=0).fit(X, X[:, 0])
        clf = MLPClassifier(hidden_layer_sizes=(3,), max_iter=5, random_state=0).fit(X, X[:, 0] > 0)
    with pytest.raises(InputError, match="one hidden layer"):
        TwoLayerNetwork.from_sklearn(deep)
    with pytest.raises(InputError, match="identity output"):
        TwoLayerNetwork.from_sklearn(clf)


# --------------------------------------------------------------------------- random_network

def test_random_network_defaults(rng):
    net = random_network(6, 4, rng=rng)
    assert (net.n_inputs, net.n_hidden, net.n_outputs) == (6, 4, 1)
    assert np.allclose(np.linalg.norm(net.hidden_weights, axis=1), 1.0, rtol=0, atol=4 * EPS)
    assert np.array_equal(net.hidden_bias, np.zeros(4)) and np.array_equal(net.output_bias, [0.0])
    assert np.all((np.abs(net.output_weights) >= 0.5) & (np.abs(net.output_weights) <= 1.5))
    assert net.activation == nr.get_activation("relu")


@pytest.mark.parametrize("kappa", [1.0, 2.0, 10.0, 1e3, 1e6])
def test_random_network_condition_number_is_exact(kappa):
    net = random_network(8, 5, rng=3, condition_number=kappa)
    s = np.linalg.svd(net.hidden_weights, compute_uv=False)
    # the spectrum is prescribed: geometric from 1 down to 1/kappa; SVD recovers it to ~eps ||W||
    assert np.allclose(s, np.geomspace(1.0, 1.0 / kappa, 5), rtol=0, atol=1e-14)
    # cond = s_max / s_min with s_min known to ~eps s_max: relative error ~ eps kappa (1e-12 up to
    # kappa ~ 1e3; beyond, the measurement, not the construction, limits the check)
    assert abs(np.linalg.cond(net.hidden_weights) / kappa - 1.0) <= 1e-13 + 16 * EPS * kappa


def test_random_network_orthonormal_and_gaussian_rows(rng):
    net = random_network(7, 4, rng=rng, rows="orthonormal")
    W = net.hidden_weights
    assert np.allclose(W @ W.T, np.eye(4), rtol=0, atol=1e-14)
    square = random_network(5, 5, rng=rng, rows="orthonormal").hidden_weights
    assert np.allclose(square.T @ square, np.eye(5), rtol=0, atol=1e-14)
    gauss = random_network(50, 40, rng=rng, rows="gaussian").hidden_weights
    # entries N(0, 1/d): mean of the 2000 squared entries has mean 1/d and sd sqrt(2/2000)/d
    z = (np.mean(gauss ** 2) - 1 / 50) / (math.sqrt(2 / 2000) / 50)
    assert abs(z) < 6
    assert not np.allclose(np.linalg.norm(gauss, axis=1), 1.0)


def test_random_network_ranges_and_signs(rng):
    net = random_network(3, 50, 4, rng=rng, bias_range=(-2, 1), output_weight_range=(0.2, 0.3),
                         output_bias_range=(5, 6))
    assert np.all((net.hidden_bias >= -2) & (net.hidden_bias <= 1))
    assert np.all((np.abs(net.output_weights) >= 0.2) & (np.abs(net.output_weights) <= 0.3))
    assert np.all((net.output_bias >= 5) & (net.output_bias <= 6))
    # random signs: 200 fair coins, both signs show up except with probability 2^-199
    assert np.any(net.output_weights > 0) and np.any(net.output_weights < 0)
    assert np.all(random_network(3, 6, 2, rng=rng, output_signs="positive").output_weights > 0)
    assert np.all(random_network(3, 6, 2, rng=rng, output_signs="negative").output_weights < 0)
    const = random_network(3, 6, rng=rng, bias_range=0.7, output_weight_range=2.0, output_signs="positive")
    assert np.array_equal(const.hidden_bias, np.full(6, 0.7))
    assert np.array_equal(const.output_weights, np.full((1, 6), 2.0))
    assert random_network(3, 2, activation="tanh", rng=rng).activation == nr.get_activation("tanh")


def test_random_network_reproducibility():
    opts = dict(bias_range=(-1, 1), output_bias_range=(0, 1))
    a = random_network(5, 3, 2, rng=11, **opts)
    b = random_network(5, 3, 2, rng=11, **opts)
    assert _bits(a) == _bits(b)
    assert random_network(5, 3, 2, rng=12, **opts) != a
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    assert _bits(random_network(4, 2, rng=g1, condition_number=3.0)) == \
        _bits(random_network(4, 2, rng=g2, condition_number=3.0))
    # a shared Generator advances: two draws differ
    assert random_network(4, 2, rng=g1) != random_network(4, 2, rng=g1)


@pytest.mark.parametrize("args, kwargs, match", [
    ((3, 2), dict(bias=1.0), "unknown random_network option"),
    ((3, 2), dict(rows="sparse"), "rows must be"),
    ((3, 4), dict(rows="orthonormal"), "orthonormal rows need"),
    ((3, 2), dict(condition_number=0.5), ">= 1"),
    ((3, 2), dict(condition_number=np.inf), "finite"),
    ((3, 2), dict(condition_number="big"), "condition_number"),
    ((3, 4), dict(condition_number=2.0), "n_hidden <= n_inputs"),
    ((3, 1), dict(condition_number=2.0), "single hidden unit"),
    ((3, 2), dict(condition_number=2.0, rows="unit"), "either rows or condition_number"),
    ((3, 2), dict(output_weight_range=(-1, 1)), "magnitudes"),
    ((3, 2), dict(bias_range=(1, -1)), "low <= high"),
    ((3, 2), dict(bias_range=(0, np.nan)), "low <= high"),
    ((3, 2), dict(bias_range="wide"), "bias_range"),
    ((3, 2), dict(bias_range=(1, 2, 3)), "bias_range"),
    ((3, 2), dict(output_signs="mixed"), "output_signs"),
    ((0, 2), dict(), "n_inputs"),
    ((3, 2.0), dict(), "n_hidden"),
    ((3, 2, 0), dict(), "n_outputs"),
    ((3, 2), dict(activation="softplus"), "unknown activation"),
    ((3, 2), dict(rng=-1), "random_state"),
    ((3, 2), dict(rng="seed"), "random_state"),
])
def test_random_network_errors(args, kwargs, match):
    with pytest.raises(InputError, match=match):
        random_network(*args, **kwargs)


def test_random_network_condition_number_one_unit_is_allowed():
    net = random_network(3, 1, rng=0, condition_number=1.0)
    assert np.allclose(np.linalg.norm(net.hidden_weights), 1.0, rtol=0, atol=4 * EPS)


# --------------------------------------------------------------------------- shared validation helpers
# (nnrecover._validation and nnrecover.errors: the building blocks of every error message above)

def test_check_random_state():
    from nnrecover._validation import check_random_state

    gen = np.random.default_rng(0)
    assert check_random_state(gen) is gen
    assert check_random_state(5).random() == np.random.default_rng(5).random()
    assert check_random_state(np.int64(5)).random() == np.random.default_rng(5).random()
    ss = np.random.SeedSequence(7)
    assert check_random_state(ss).random() == np.random.default_rng(np.random.SeedSequence(7)).random()
    assert isinstance(check_random_state(None), np.random.Generator)
    legacy = np.random.RandomState(3)
    assert isinstance(check_random_state(legacy), np.random.Generator)
    for bad in (-1, True, 1.5, "7", [1, 2]):
        with pytest.raises(InputError, match="random_state/rng"):
            check_random_state(bad)


def test_array_validators():
    from nnrecover._validation import as_2d_float, as_targets, check_positive_int, check_xy

    X = as_2d_float([[1, 2], [3, 4]])
    assert X.dtype == np.float64 and X.shape == (2, 2)
    same = np.zeros((3, 2))
    assert as_2d_float(same) is same  # no copy when already float64
    assert as_2d_float(np.arange(3.0), allow_1d_as_column=True).shape == (3, 1)
    for bad, match in [(np.arange(3.0), "2-D"), ([[1.0, np.inf]], "NaN or infinite"), ([["a"]], "numeric"),
                       (np.ones((2, 2), complex), "real"), ([[1.0], [1.0, 2.0]], "could not be converted")]:
        with pytest.raises(InputError, match=match):
            as_2d_float(bad, "X")
    with pytest.raises(InputError, match="3 columns but 2"):
        as_2d_float(np.ones((2, 3)), n_features=2)
    with pytest.raises(InputError, match="at least 5"):
        as_2d_float(np.ones((2, 3)), min_rows=5)
    assert as_targets([1, 2, 3]).shape == (3,)
    with pytest.raises(InputError, match="different numbers of samples"):
        as_targets([1.0, 2.0], n_rows=3)
    with pytest.raises(InputError, match=r"shape \(n,\) or \(n, p\)"):
        as_targets(np.ones((2, 2, 2)))
    Xv, Yv = check_xy(np.ones((4, 2)), np.ones(4))
    assert Yv.shape == (4, 1)
    with pytest.raises(InputError, match="at least 10"):
        check_xy(np.ones((4, 2)), np.ones(4), min_samples=10)
    # any-shape helpers: as_real_array (finite, no copy when possible), as_float_array (always a copy)
    from nnrecover._validation import as_float_array, as_real_array

    cube = np.zeros((2, 2, 2))
    assert as_real_array(cube, "T") is cube and as_real_array(3, "s").shape == ()
    for bad, match in [([[np.nan]], "T contains 1 NaN"), (["a"], "T must be numeric"), ([1j], "T must be real")]:
        with pytest.raises(InputError, match=match):
            as_real_array(bad, "T")
    copied = as_float_array(cube, "A")
    assert copied is not cube and copied.dtype == np.float64 and np.isnan(as_float_array([np.nan], "A")[0])
    for bad, match in [(["a"], "A must be an array of real numbers"), ([1j], "A must be real")]:
        with pytest.raises(InputError, match=match):
            as_float_array(bad, "A")
    assert check_positive_int(np.int32(3), "k") == 3
    for bad in (0, 2.0, True, "3"):
        with pytest.raises(InputError, match="k must be"):
            check_positive_int(bad, "k")


def test_error_hierarchy():
    from sklearn.exceptions import NotFittedError as SkNotFitted

    from nnrecover import errors

    # issubclass(C, (A, B)) would accept either base: check each base separately
    for cls, builtin in ((errors.InputError, ValueError), (errors.AssumptionError, ValueError),
                         (errors.ConvergenceError, RuntimeError), (errors.NotFittedError, SkNotFitted)):
        assert issubclass(cls, errors.NNRecoverError) and issubclass(cls, builtin), cls
    assert not issubclass(errors.ConvergenceError, ValueError)  # not an input problem
    for cls in (errors.InputError, errors.AssumptionError, errors.ConvergenceError):
        with pytest.raises(errors.NNRecoverError, match="message"):
            raise cls("message")
    for cls in (errors.AssumptionWarning, errors.CertificateWarning, errors.TimeBudgetWarning):
        assert issubclass(cls, UserWarning)
    assert set(errors.__all__) == {"NNRecoverError", "InputError", "AssumptionError", "ConvergenceError", "QueryBudgetError",
                                   "NotFittedError", "AssumptionWarning", "CertificateWarning", "TimeBudgetWarning"}


def test_lazy_subpackages_and_unknown_attributes():
    import importlib

    import nnrecover

    for name in ("learners", "metrics", "moments", "hermite", "tensor", "refine", "experiments", "io"):
        assert getattr(nnrecover, name) is importlib.import_module(f"nnrecover.{name}")
    for name in ("diagnostics", "nope"):  # an attribute that does not exist is an AttributeError, nothing else
        assert not hasattr(nnrecover, name)


def test_save_is_atomic(tmp_path, monkeypatch):
    net = random_network(3, 2, 2, rng=0)
    for name in ("net.json", "net.npz"):
        path = tmp_path / name
        net.save(path)
        before = path.read_bytes()
        other = random_network(3, 2, 2, rng=1)

        def broken_dumps(*args, **kwargs):
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C in the middle of the write

        monkeypatch.setattr(np, "savez", broken_dumps)
        monkeypatch.setattr("nnrecover.network.json.dumps", broken_dumps)
        with pytest.raises(KeyboardInterrupt):
            other.save(path)
        monkeypatch.undo()
        assert path.read_bytes() == before and TwoLayerNetwork.load(path) == net
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp left


def test_load_refuses_malformed_descriptions_in_one_error(tmp_path):
    doc = random_network(3, 2, 2, rng=0).to_dict()
    cases = {
        "ragged.json": (dict(doc, hidden_weights=[[1.0, 2.0, 3.0], [4.0]]), "hidden_weights must be an array of real"),
        "no_a.json": ({k: v for k, v in doc.items() if k != "output_weights"}, "lacks output_weights"),
        "text.json": (dict(doc, hidden_bias="abc"), "hidden_bias must be an array of real"),
        "null.json": (dict(doc, output_bias=[None, None]), "output_bias contains 2 NaN"),
    }
    for name, (content, match) in cases.items():
        (tmp_path / name).write_text(json.dumps(content))
        with pytest.raises(InputError, match=match):
            TwoLayerNetwork.load(tmp_path / name)
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(InputError, match="not valid JSON"):
        TwoLayerNetwork.load(tmp_path / "deep.json")
