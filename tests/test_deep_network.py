"""Tests of the deep network model (src/nnrecover/deep_network.py): DeepNetwork."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.deep_network import DeepNetwork
from nnrecover.errors import InputError
from nnrecover.network import TwoLayerNetwork, random_network


def _deep(sizes=(5, 4, 3, 2), seed=0, activation="relu"):
    gen = np.random.default_rng(seed)
    weights = [gen.standard_normal((sizes[i + 1], sizes[i])) for i in range(len(sizes) - 1)]
    biases = [gen.uniform(-1.0, 1.0, sizes[i + 1]) for i in range(len(sizes) - 1)]
    return DeepNetwork(weights, biases, activation)


def _manual_forward(weights, biases, act, X):
    """The forward pass unit by unit: h_{l+1}[:, i] = act(sum_j h_l[:, j] W_l[i, j] + b_l[i]), last layer linear."""
    h = np.asarray(X, dtype=float)
    for l, (W, b) in enumerate(zip(weights, biases)):
        z = np.empty((h.shape[0], W.shape[0]))
        for i in range(W.shape[0]):
            z[:, i] = b[i] + sum(h[:, j] * W[i, j] for j in range(W.shape[1]))
        h = z if l == len(weights) - 1 else act(z)
    return h


def _close(ours, theirs):
    """Equal to 1e-12 relative (to the largest output): the same arithmetic in another summation order."""
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-12 * max(np.abs(theirs).max(), 1.0))


def _fit_quietly(model, X, y):
    from sklearn.exceptions import ConvergenceWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return model.fit(X, y)


# --------------------------------------------------------------------------- construction and evaluation

def test_shapes_properties_and_copies(rng):
    weights = [rng.standard_normal((4, 5)), rng.standard_normal((3, 4)), rng.standard_normal((2, 3))]
    biases = [rng.standard_normal(4), rng.standard_normal(3), rng.standard_normal(2)]
    net = DeepNetwork(weights, biases)
    assert net.layer_sizes == (5, 4, 3, 2) and net.hidden_sizes == (4, 3) and net.depth == 2
    assert (net.n_inputs, net.n_outputs, net.n_parameters) == (5, 2, 4 * 6 + 3 * 5 + 2 * 4)
    assert isinstance(net.weights, tuple) and isinstance(net.biases, tuple)
    assert all(a.dtype == np.float64 for a in net.weights + net.biases)
    assert net.activation == nr.get_activation("relu")
    assert repr(net) == "DeepNetwork(layer_sizes=(5, 4, 3, 2), activation='relu')"
    weights[0][0, 0] = 99.0  # the network holds its own copies
    assert net.weights[0][0, 0] != 99.0
    other = net.copy()
    assert other == net and other is not net and other.weights[0] is not net.weights[0]
    other.weights[1][0, 0] += 1.0
    assert other != net
    assert DeepNetwork(net.weights, net.biases, "tanh") != net
    assert net != "a network" and nr.DeepNetwork is DeepNetwork
    with pytest.raises(TypeError):
        hash(net)


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid", "leaky_relu(0.3)", "relu_power(2)", "abs"])
@pytest.mark.parametrize("sizes", [(3, 4, 1), (3, 4, 5, 2), (2, 3, 3, 4, 1)])
def test_predict_matches_a_hand_written_forward_pass(activation, sizes, rng):
    net = _deep(sizes, seed=1, activation=activation)
    X = rng.standard_normal((30, sizes[0]))
    ref = _manual_forward(net.weights, net.biases, net.activation, X)
    Y = net.predict(X)
    # one output gives a 1-D prediction, as TwoLayerNetwork.predict
    _close(Y, ref[:, 0] if sizes[-1] == 1 else ref)
    assert np.array_equal(net(X), Y)
    pre = net.preactivations(X)
    assert [z.shape for z in pre] == [(30, n) for n in sizes[1:-1]]
    # the pre-activations of layer l are the hand-written pass stopped before layer l's activation
    for l, z in enumerate(pre):
        _close(z, _manual_forward(net.weights[:l + 1], net.biases[:l + 1], net.activation, X))


def test_predict_validates_input(rng):
    net = _deep((3, 4, 2, 1))
    with pytest.raises(InputError, match="X has 4 columns but 3"):
        net.predict(rng.standard_normal((5, 4)))
    with pytest.raises(InputError, match="X must be 2-D"):
        net.predict(np.ones(3))
    with pytest.raises(InputError, match="X contains 1 NaN"):
        net.preactivations(np.array([[0.0, np.nan, 1.0]]))


@pytest.mark.parametrize("weights, biases, activation, match", [
    ([np.ones((2, 3)), np.ones((1, 3))], [np.ones(2), np.ones(1)], "relu", r"weights\[1\] has 3 columns"),
    ([np.ones((2, 3)), np.ones((1, 2))], [np.ones(2), np.ones(2)], "relu", r"biases\[1\] must have shape \(1,\)"),
    ([np.ones((2, 3)), np.ones((1, 2))], [[1.0, np.nan], np.ones(1)], "relu", r"biases\[0\] contains 1 NaN"),
    ([np.ones((2, 3)), [[1.0, np.inf]]], [np.ones(2), np.ones(1)], "relu", r"weights\[1\] contains 1 NaN"),
    ([np.ones((2, 3)), np.ones(2)], [np.ones(2), np.ones(1)], "relu", r"weights\[1\] must be a 2-D array"),
    ([np.ones((2, 3)), np.ones((1, 2))], [np.ones(2), np.ones(1)], "softplus", "activation"),
    ([np.ones((2, 3))], [np.ones(2)], "relu", "weights must hold at least two matrices"),
    ([np.ones((2, 3)), np.ones((1, 2))], [np.ones(2)], "relu", "biases must hold one vector per weight matrix"),
    ("abc", [np.ones(2)], "relu", "weights must be a list"),
    ([np.ones((2, 3)), [["a", "b"]]], [np.ones(2), np.ones(1)], "relu", r"weights\[1\] must be an array of real"),
    ([np.ones((2, 3)), np.ones((1, 2)) * 1j], [np.ones(2), np.ones(1)], "relu", r"weights\[1\] must be real"),
])
def test_constructor_refuses_bad_parameters_naming_them(weights, biases, activation, match):
    with pytest.raises(InputError, match=match):
        DeepNetwork(weights, biases, activation)


# --------------------------------------------------------------------------- scikit-learn

def test_from_sklearn_regressor_on_diabetes_matches_predict():
    from sklearn.datasets import load_diabetes
    from sklearn.neural_network import MLPRegressor

    X, y = load_diabetes(return_X_y=True)
    mlp = _fit_quietly(MLPRegressor(hidden_layer_sizes=(8, 6), max_iter=300, random_state=0), X, y)
    net = DeepNetwork.from_sklearn(mlp)
    assert net.layer_sizes == (10, 8, 6, 1) and net.activation == nr.get_activation("relu")
    _close(net.predict(X), mlp.predict(X))
    _close(net.predict(X), _manual_forward([c.T for c in mlp.coefs_], mlp.intercepts_, net.activation, X)[:, 0])


@pytest.mark.parametrize("dataset", ["iris", "breast_cancer"])
def test_from_sklearn_classifier_gives_the_logits(dataset):
    from scipy.special import expit, softmax
    from sklearn import datasets
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    X, y = getattr(datasets, f"load_{dataset}")(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    mlp = _fit_quietly(MLPClassifier(hidden_layer_sizes=(8, 6), max_iter=300, random_state=0), X, y)
    net = DeepNetwork.from_sklearn(mlp)
    logits = net.predict(X)
    # the last layer's pre-activation, computed from coefs_ by hand
    ref = _manual_forward([c.T for c in mlp.coefs_], mlp.intercepts_, net.activation, X)
    proba = mlp.predict_proba(X)
    if dataset == "iris":  # three classes: softmax output, one logit per class
        assert net.layer_sizes == (4, 8, 6, 3)
        _close(logits, ref)
        np.testing.assert_allclose(softmax(logits, axis=1), proba, rtol=1e-12, atol=1e-12)
        assert np.array_equal(mlp.classes_[np.argmax(logits, axis=1)], mlp.predict(X))
    else:  # binary: logistic output, one logit
        assert net.layer_sizes == (30, 8, 6, 1)
        _close(logits, ref[:, 0])
        np.testing.assert_allclose(expit(logits), proba[:, 1], rtol=1e-12, atol=1e-12)
        assert np.array_equal(mlp.classes_[(logits > 0).astype(int)], mlp.predict(X))


def test_from_sklearn_other_activations_and_depths(rng):
    from sklearn.neural_network import MLPRegressor

    X = rng.standard_normal((60, 3))
    y = np.sin(X @ rng.standard_normal((3, 2)))
    for activation, sizes in (("tanh", (4,)), ("logistic", (3, 5, 4)), ("identity", (2, 2))):
        mlp = _fit_quietly(MLPRegressor(hidden_layer_sizes=sizes, activation=activation, max_iter=20,
                                        random_state=0), X, y)
        net = DeepNetwork.from_sklearn(mlp)
        assert net.layer_sizes == (3, *sizes, 2)
        assert net.activation == nr.get_activation("sigmoid" if activation == "logistic" else activation)
        _close(net.predict(X), mlp.predict(X))


def test_from_sklearn_refuses_unfitted_and_unsupported_models(rng):
    from sklearn.neural_network import MLPRegressor

    with pytest.raises(InputError, match="call fit first"):
        DeepNetwork.from_sklearn(MLPRegressor())
    with pytest.raises(InputError, match="MLPRegressor or MLPClassifier, got object"):
        DeepNetwork.from_sklearn(object())
    X = rng.standard_normal((30, 2))
    mlp = _fit_quietly(MLPRegressor(hidden_layer_sizes=(3, 3), max_iter=5, random_state=0), X, X[:, 0])
    mlp.activation = "softplus"
    with pytest.raises(InputError, match="activation 'softplus' is not supported"):
        DeepNetwork.from_sklearn(mlp)
    mlp.activation, mlp.out_activation_ = "relu", "tanh"
    with pytest.raises(InputError, match="output activation 'tanh' is not supported"):
        DeepNetwork.from_sklearn(mlp)


# --------------------------------------------------------------------------- canonical form

@pytest.mark.parametrize("activation", ["relu", "leaky_relu(0.2)", "relu_power(2)"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_canonical_keeps_predictions_and_gives_unit_rows(activation, seed, rng):
    net = _deep((4, 6, 5, 3, 2), seed=seed, activation=activation)
    # units of very different scales
    gen = np.random.default_rng(seed + 100)
    scaled = [W * gen.uniform(0.01, 100.0, W.shape[0])[:, None] for W in net.weights]
    net = DeepNetwork(scaled, net.biases, activation)
    canon = net.canonical()
    assert canon.layer_sizes == net.layer_sizes and canon.activation == net.activation
    for W in canon.weights[:-1]:
        np.testing.assert_allclose(np.linalg.norm(W, axis=1), 1.0, rtol=0, atol=4e-16)
    X = rng.standard_normal((50, 4))
    _close(canon.predict(X), net.predict(X))
    # a canonical network is its own canonical form up to round-off: the norm of hidden layer l is
    # s_l = 1 + delta_l with delta_1 ~ eps and delta_l ~ eps + q delta_(l-1) (its rows were rescaled by
    # s_(l-1)**q), so the output weights move by q delta_3 = (q + q^2 + q^3) eps = 14 eps for q = 2
    again = canon.canonical()
    assert all(np.allclose(a, b, rtol=0, atol=16 * np.finfo(float).eps * max(1.0, np.abs(b).max()))
               for a, b in zip(again.weights + again.biases, canon.weights + canon.biases))
    # deterministic: equal networks have equal canonical forms
    assert net.copy().canonical() == canon


def test_canonical_zero_rows_and_depth_one_equals_two_layer_canonical(rng):
    weights = [rng.standard_normal((3, 4)), rng.standard_normal((2, 3)), rng.standard_normal((1, 2))]
    weights[0][1] = 0.0  # a dead unit: its row stays zero, its output constant relu(b)
    net = DeepNetwork(weights, [rng.standard_normal(3), rng.standard_normal(2), rng.standard_normal(1)])
    canon = net.canonical()
    assert np.array_equal(canon.weights[0][1], np.zeros(4)) and canon.biases[0][1] == net.biases[0][1]
    X = rng.standard_normal((20, 4))
    _close(canon.predict(X), net.predict(X))
    # one hidden layer: the same bits as TwoLayerNetwork.canonical (the same scaling rule)
    two = random_network(4, 3, 2, rng=3, bias_range=(-1, 1), rows="gaussian")
    assert DeepNetwork.from_two_layer(two).canonical() == DeepNetwork.from_two_layer(two.canonical())


def test_canonical_leaves_non_homogeneous_activations_alone_and_names_an_overflowing_layer():
    net = _deep((3, 4, 2, 1), activation="tanh")
    canon = net.canonical()
    assert canon == net and canon is not net
    huge = _deep((2, 2, 2, 1), seed=4)
    weights = list(huge.weights)
    weights[1] = weights[1].copy()
    weights[1][0] = [1e300, 1e300]  # normalising this row multiplies its outgoing weight 1e10 by 1.4e300
    weights[2] = np.array([[1e10, 1.0]])
    with pytest.raises(InputError, match="hidden layer 2: hidden unit 0 cannot be put in canonical form"):
        DeepNetwork(weights, huge.biases).canonical()


# --------------------------------------------------------------------------- files

@pytest.mark.parametrize("suffix", [".json", ".npz", ".NPZ"])
def test_save_load_round_trip_is_bit_exact(suffix, tmp_path):
    net = _deep((5, 4, 3, 2), seed=7, activation="leaky_relu(0.1)")
    net = DeepNetwork([W * 1e-7 + np.pi for W in net.weights], net.biases, net.activation)
    path = tmp_path / f"net{suffix}"
    net.save(path)
    assert path.exists() and sorted(p.name for p in tmp_path.iterdir()) == [path.name]
    back = DeepNetwork.load(path)
    assert back == net and back.activation == net.activation
    assert all(np.array_equal(a, b) for a, b in zip(back.weights + back.biases, net.weights + net.biases))
    assert DeepNetwork.from_dict(json.loads(json.dumps(net.to_dict()))) == net


def test_json_file_is_plain_text_and_npz_members_are_named(tmp_path):
    net = _deep((2, 3, 1))
    net.save(tmp_path / "net.json")
    doc = json.loads((tmp_path / "net.json").read_text())
    assert doc["format"] == "nnrecover.DeepNetwork/1" and doc["activation"] == "relu"
    assert len(doc["weights"]) == len(doc["biases"]) == 2
    net.save(tmp_path / "net.npz")
    with np.load(tmp_path / "net.npz", allow_pickle=False) as archive:
        assert sorted(archive.files) == ["activation", "biases_0", "biases_1", "format", "weights_0", "weights_1"]


@pytest.mark.parametrize("suffix", [".json", ".npz"])
def test_load_reads_two_layer_files(suffix, tmp_path):
    two = random_network(4, 3, 2, rng=5, bias_range=(-1, 1), output_bias_range=(-1, 1))
    two.save(tmp_path / f"two{suffix}")
    deep = DeepNetwork.load(tmp_path / f"two{suffix}")
    assert deep.depth == 1 and deep.layer_sizes == (4, 3, 2)
    assert deep == DeepNetwork.from_two_layer(two) and deep.to_two_layer() == two


def test_load_errors(tmp_path):
    net = _deep((3, 2, 1))
    with pytest.raises(InputError, match="use a .json or .npz"):
        net.save(tmp_path / "net.pkl")
    with pytest.raises(InputError, match="does not exist"):
        DeepNetwork.load(tmp_path / "missing.json")
    doc = net.to_dict()
    cases = {
        "format.json": (dict(doc, format="nnrecover.DeepNetwork/9"), "unknown network format"),
        "no_biases.json": ({k: v for k, v in doc.items() if k != "biases"}, r"lacks \['biases'\]"),
        "no_act.json": ({k: v for k, v in doc.items() if k != "activation"}, r"lacks \['activation'\]"),
        "act.json": (dict(doc, activation=3), "must be a string"),
        "chain.json": (dict(doc, weights=[doc["weights"][0], [[1.0, 2.0, 3.0]]]), r"weights\[1\] has 3 columns"),
        "samples.json": ({"X": [[1.0]], "Y": [1.0]}, "a samples file"),
    }
    for name, (content, match) in cases.items():
        (tmp_path / name).write_text(json.dumps(content))
        with pytest.raises(InputError, match=match):
            DeepNetwork.load(tmp_path / name)
    np.savez(tmp_path / "gap.npz", weights_0=np.ones((2, 3)), weights_2=np.ones((1, 2)), biases_0=np.ones(2),
             biases_1=np.ones(1), activation=np.array("relu"))
    with pytest.raises(InputError, match=r"gap.npz: network description lacks \['weights_1'\]"):
        DeepNetwork.load(tmp_path / "gap.npz")
    (tmp_path / "text.npz").write_text("not a zip")
    with pytest.raises(InputError, match="write it with DeepNetwork.save"):
        DeepNetwork.load(tmp_path / "text.npz")
    with pytest.raises(InputError, match="must be a dict"):
        DeepNetwork.from_dict([1, 2])


def test_save_is_atomic(tmp_path, monkeypatch):
    net = _deep((3, 2, 2, 1), seed=0)
    for name in ("net.json", "net.npz"):
        path = tmp_path / name
        net.save(path)
        before = path.read_bytes()

        def broken(*args, **kwargs):
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C in the middle of the write

        monkeypatch.setattr(np, "savez", broken)
        monkeypatch.setattr("nnrecover.network.json.dumps", broken)
        with pytest.raises(KeyboardInterrupt):
            _deep((3, 2, 2, 1), seed=1).save(path)
        monkeypatch.undo()
        assert path.read_bytes() == before and DeepNetwork.load(path) == net
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp left


# --------------------------------------------------------------------------- conversion

def test_from_two_layer_and_to_two_layer_round_trip(rng):
    two = random_network(5, 4, 3, activation="leaky_relu(0.1)", rng=2, output_bias_range=(-1, 1))
    deep = DeepNetwork.from_two_layer(two)
    assert deep.layer_sizes == (5, 4, 3) and deep.activation == two.activation
    assert deep.to_two_layer() == two
    assert DeepNetwork.from_two_layer(deep.to_two_layer()) == deep
    X = rng.standard_normal((40, 5))
    _close(deep.predict(X), two.predict(X))
    with pytest.raises(InputError, match="network must be a TwoLayerNetwork"):
        DeepNetwork.from_two_layer(deep)
    with pytest.raises(InputError, match=r"to_two_layer needs a network with one hidden layer.*depth 2"):
        _deep((3, 2, 2, 1)).to_two_layer()
    assert isinstance(deep.to_two_layer(), TwoLayerNetwork)
