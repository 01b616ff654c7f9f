"""A zoo of real models for extraction: networks trained here on data bundled with scikit-learn
(diabetes, digits, breast cancer, iris, wine, linnerud) and a PyTorch model exported to ONNX.

Each is extracted to round-off with every live unit in the right orientation (compared with the
weights read from the model: max unit error, no sign flips), or refused with a message. Training is
kept short (small widths, few iterations): the point is the shapes real training leaves (constant
inputs, L2-shrunk weights, dead units, zero output weights, saturating classifiers), not accuracy.
"""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.cli.extract import add_parser, run
from nnrecover.errors import CertificateWarning, InputError, QueryBudgetError
from nnrecover.extraction import extract
from nnrecover.extraction.loaders import load_model
from nnrecover.metrics import parameter_error

pytest.importorskip("skops")

#: max unit error (||w - w'|| + |b - b'| + ||a - a'||, canonical rows) accepted as "round-off": the
#: float64 boxes below give 1e-14 to 1e-12
EXACT = 1e-8


def _parse(argv):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["extract", *argv])


def _fit(est, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # ConvergenceWarning of the short training
        return est.fit(X, y)


def _standardise(X):
    sd = X.std(0)
    return (X - X.mean(0)) / np.where(sd > 0, sd, 1.0)


def _dump(model, path):
    import skops.io as sio

    sio.dump(model, path)
    return path


def _logit_network(model) -> nr.TwoLayerNetwork:
    """The network of the outputs extraction sees: predict (regressor), log-odds (binary, per label),
    log-ratios to the first class (softmax)."""
    W, b = model.coefs_[0].T, model.intercepts_[0]
    A, c = model.coefs_[1].T, model.intercepts_[1]
    if getattr(model, "out_activation_", "identity") == "softmax":
        A, c = A[1:] - A[:1], c[1:] - c[:1]
    return nr.TwoLayerNetwork(W, b, A, c)


def _live(net: nr.TwoLayerNetwork, X: np.ndarray) -> np.ndarray:
    """Units with a non-zero output column that are active on some row of ``X``."""
    active = np.any(X @ net.hidden_weights.T + net.hidden_bias > 0, axis=0)
    return active & np.any(net.output_weights != 0, axis=0)


def _check_exact(est: nr.TwoLayerNetwork, truth: nr.TwoLayerNetwork, live: np.ndarray) -> dict:
    ref = nr.TwoLayerNetwork(truth.hidden_weights[live], truth.hidden_bias[live],
                             truth.output_weights[:, live], truth.output_bias)
    assert est.n_hidden == ref.n_hidden
    err = parameter_error(est, ref)               # no sign flips allowed: orientation must be right
    assert err["max_unit_error"] < EXACT, err["max_unit_error"]
    return err


def _no_warnings(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error", CertificateWarning)
        return fn(*args, **kwargs)


# ------------------------------------------------------------------------ synthetic: unused inputs
@pytest.mark.parametrize("zero", [0.0, 1e-30])
def test_unused_input_column_keeps_orientation(zero):
    # the box of the issue: d = 20, k = 8, a column of W that no unit uses (exactly 0, or what an L2
    # penalty leaves); with the column, every unit was flipped into a linear-part pair
    net = nr.random_network(20, 8, rng=5, bias_range=(-1, 1))
    W = net.hidden_weights.copy()
    W[:, 0] = zero
    box = nr.TwoLayerNetwork(W, net.hidden_bias, net.output_weights, net.output_bias)
    res = _no_warnings(extract, box.predict, 20, rng=0)
    assert res.diagnostics_["linear_units"] == 0
    _check_exact(res.network_, box, np.ones(8, bool))


def test_unused_inputs_with_more_units_than_inputs():
    # k > d with one output: the orientation is a 0/1 subset sum (lattice); two unused inputs leave
    # two all-zero equations, which carry no information and must not veto the solution
    net = nr.random_network(10, 30, rng=6, bias_range=(-1, 1))
    W = net.hidden_weights.copy()
    W[:, [0, 3]] = 0.0
    box = nr.TwoLayerNetwork(W, net.hidden_bias, net.output_weights, net.output_bias)
    res = _no_warnings(extract, box.predict, 10, rng=0)
    _check_exact(res.network_, box, np.ones(30, bool))


# ------------------------------------------------------------------------------------ regressors
def test_digits_regressor_with_constant_pixels_through_the_cli(tmp_path, capsys):
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPRegressor

    X, y = load_digits(return_X_y=True)
    assert np.sum(X.std(0) == 0) >= 3              # pixels that are 0 in every image
    mlp = _fit(MLPRegressor(hidden_layer_sizes=(24,), max_iter=200, random_state=0), X, y)
    path = _dump(mlp, tmp_path / "digits.skops")
    out = tmp_path / "net.json"
    assert run(_parse([str(path), "--out", str(out), "--no-progress"])) == 0
    truth = nr.TwoLayerNetwork.from_sklearn(mlp)
    _check_exact(nr.TwoLayerNetwork.load(out), truth, _live(truth, np.concatenate([X, np.zeros((1, 64))])))
    diag = json.loads((tmp_path / "net.json.diagnostics.json").read_text())
    assert diag["linear_units"] == 0 and diag["certificate"]["passed"]


def test_diabetes_regressor_with_l2_dead_and_zero_weight_units(tmp_path):
    from sklearn.datasets import load_diabetes
    from sklearn.neural_network import MLPRegressor

    X, y = load_diabetes(return_X_y=True)
    X, y = _standardise(X), (y - y.mean()) / y.std()
    mlp = _fit(MLPRegressor(hidden_layer_sizes=(10,), alpha=10.0, max_iter=150, random_state=1), X, y)
    # the states training leaves: a unit that is never active (its bias far below every input) and
    # one whose output weight is exactly zero; neither changes the function
    mlp.intercepts_[0][2] = -1e3
    mlp.coefs_[1][5] = 0.0
    path = _dump(mlp, tmp_path / "diabetes.skops")
    model = load_model(path)
    res = _no_warnings(extract, model, 10, rng=0)
    truth = nr.TwoLayerNetwork.from_sklearn(mlp)
    live = _live(truth, 4 * np.random.default_rng(0).standard_normal((20000, 10)))
    assert live.sum() == 8
    _check_exact(res.network_, truth, live)
    assert res.diagnostics_["declared_n_hidden"] == 10 and res.diagnostics_["unidentifiable_units"] == 2
    assert "zero output column" in res.diagnostics_["unidentifiable"]
    Z = np.random.default_rng(1).standard_normal((3000, 10))
    assert np.max(np.abs(res.predict(Z) - mlp.predict(Z))) < 1e-10    # the function stays exact


def test_diabetes_regressor_with_three_hidden_layers_linear_or_dead_in_the_last():
    # real training leaves the last hidden layer of this MLPRegressor((16, 8, 8)) with neurons active on
    # all, or none, of the standardised data: on the region that layer is linear, so the box is a
    # network of fewer layers there, which is what the certificate can vouch for; the function is exact
    from sklearn.datasets import load_diabetes
    from sklearn.neural_network import MLPRegressor

    X, y = load_diabetes(return_X_y=True)
    X = _standardise(X)
    mlp = _fit(MLPRegressor(hidden_layer_sizes=(16, 8, 8), alpha=1e-3, max_iter=3000, random_state=0), X, y)
    truth = nr.DeepNetwork.from_sklearn(mlp)
    Z = np.random.default_rng(2).standard_normal((20_000, 10))
    H = Z
    for W, b in zip(truth.weights[:-2], truth.biases[:-2]):
        H = np.maximum(H @ W.T + b, 0.0)
    active = (H @ truth.weights[-2].T + truth.biases[-2] > 0).mean(axis=0)
    assert np.all((active == 0) | (active == 1))
    res = _no_warnings(extract, mlp.predict, 10, rng=0)
    assert res.diagnostics_["certificate"]["passed"] and len(res.network_.hidden_sizes) < 3
    Zt = np.random.default_rng(1).standard_normal((20_000, 10))
    Y = mlp.predict(Zt)
    assert np.max(np.abs(res.predict(Zt).ravel() - Y)) < 1e-9 * np.std(Y)


def test_linnerud_multi_output_regressor():
    from sklearn.datasets import load_linnerud
    from sklearn.neural_network import MLPRegressor

    X, Y = load_linnerud(return_X_y=True)
    X, Y = _standardise(X), _standardise(Y)
    mlp = _fit(MLPRegressor(hidden_layer_sizes=(6,), alpha=1.0, max_iter=300, random_state=0), X, Y)
    res = _no_warnings(extract, mlp.predict, 3, rng=0)
    truth = nr.TwoLayerNetwork.from_sklearn(mlp)
    _check_exact(res.network_, truth, _live(truth, 4 * np.random.default_rng(0).standard_normal((20000, 3))))


# ----------------------------------------------------------------------------------- classifiers
@pytest.fixture(scope="module")
def cancer_classifier(tmp_path_factory):
    from sklearn.datasets import load_breast_cancer
    from sklearn.neural_network import MLPClassifier

    X, y = load_breast_cancer(return_X_y=True)
    X = _standardise(X)
    clf = _fit(MLPClassifier(hidden_layer_sizes=(12,), max_iter=200, random_state=0), X, y)
    return clf, _dump(clf, tmp_path_factory.mktemp("cancer") / "cancer.skops"), X


def test_binary_classifier_extracted_without_options(cancer_classifier, tmp_path, capsys):
    clf, path, X = cancer_classifier
    assert np.max(np.abs(_logit_network(clf).predict(X))) > 10     # saturated sigmoid on the data
    out = tmp_path / "c.json"
    assert run(_parse([str(path), "--out", str(out), "--no-progress"])) == 0
    assert "input scale:" in capsys.readouterr().out
    diag = json.loads((tmp_path / "c.json.diagnostics.json").read_text())
    assert diag["queries"] < 1_000_000
    truth = _logit_network(clf)
    _check_exact(nr.TwoLayerNetwork.load(out), truth, np.ones(12, bool))
    assert diag["query_region"]["input_scale"] < 1.0


def test_binary_classifier_scale_given_that_saturates_names_the_scale(cancer_classifier):
    _, path, _ = cancer_classifier
    model = load_model(path)
    with pytest.raises(InputError, match=r"use input_scale=\S+ \(--input-scale"):
        extract(model, 30, input_scale=1.0, rng=0)
    # a scale inside the range is used as given
    res = extract(model, 30, input_scale=0.05, rng=0)
    assert res.diagnostics_["query_region"]["input_scale"] == 0.05 and res.network_.n_hidden == 12


def test_classifier_sure_at_the_origin_is_refused_with_the_reason(cancer_classifier, tmp_path):
    import copy

    clf, _, _ = cancer_classifier
    sure = copy.deepcopy(clf)
    sure.intercepts_[1] = sure.intercepts_[1] + 60.0      # p1 rounds to 1 near the origin
    model = load_model(_dump(sure, tmp_path / "sure.skops"))
    with pytest.raises(InputError, match="saturates at the origin itself"):
        extract(model, 30, rng=0)


def test_multi_label_classifier_through_log_odds(tmp_path):
    from sklearn.datasets import load_linnerud
    from sklearn.neural_network import MLPClassifier

    X, Y = load_linnerud(return_X_y=True)
    X = _standardise(X)
    labels = (Y > np.median(Y, axis=0)).astype(int)
    clf = _fit(MLPClassifier(hidden_layer_sizes=(6,), max_iter=500, random_state=0), X, labels)
    model = load_model(_dump(clf, tmp_path / "labels.skops"))
    res = _no_warnings(extract, model, 3, rng=0)
    assert res.network_.n_outputs == 3
    truth = _logit_network(clf)
    _check_exact(res.network_, truth, _live(truth, 4 * np.random.default_rng(0).standard_normal((20000, 3))))


@pytest.mark.parametrize("dataset, width", [("iris", 5), ("wine", 8)])
def test_softmax_classifiers_through_log_ratios(dataset, width, tmp_path):
    from sklearn import datasets
    from sklearn.neural_network import MLPClassifier

    X, y = getattr(datasets, f"load_{dataset}")(return_X_y=True)
    X = _standardise(X)
    clf = _fit(MLPClassifier(hidden_layer_sizes=(width,), alpha=0.1, max_iter=300, random_state=0), X, y)
    model = load_model(_dump(clf, tmp_path / f"{dataset}.skops"))
    res = _no_warnings(extract, model, X.shape[1], rng=0)
    truth = _logit_network(clf)
    assert res.network_.n_outputs == len(clf.classes_) - 1
    _check_exact(res.network_, truth, _live(truth, 4 * np.random.default_rng(0).standard_normal((20000, X.shape[1]))))
    ratios = np.column_stack([np.zeros(len(X)), res.predict(X)])
    assert np.array_equal(clf.classes_[np.argmax(ratios, axis=1)], clf.predict(X))


# ---------------------------------------------------------------------------- refused and budget
def test_skops_networks_of_any_depth_are_loaded_with_their_widths(tmp_path):
    from sklearn.datasets import load_diabetes, load_iris
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    X, y = load_diabetes(return_X_y=True)
    X = _standardise(X)
    mlp = _fit(MLPRegressor(hidden_layer_sizes=(4, 4), max_iter=20, random_state=0), X, y)
    model = load_model(_dump(mlp, tmp_path / "deep.skops"))
    assert model.n_inputs == 10 and model.hidden_sizes == (4, 4) and model.n_hidden is None
    assert np.array_equal(model(X), mlp.predict(X))
    Xi, yi = load_iris(return_X_y=True)
    Xi = _standardise(Xi)
    clf = _fit(MLPClassifier(hidden_layer_sizes=(6, 5, 3), max_iter=300, random_state=0), Xi, yi)
    model = load_model(_dump(clf, tmp_path / "deep_iris.skops"))
    assert model.hidden_sizes == (6, 5, 3) and model.output_range is not None
    logp = np.log(clf.predict_proba(Xi))
    assert np.array_equal(model(Xi), logp[:, 1:] - logp[:, :1])      # the same log-ratios as one layer's
    # another hidden activation is still refused, naming every layer
    tanh = _fit(MLPRegressor(hidden_layer_sizes=(4, 3), activation="tanh", max_iter=20, random_state=0), X, y)
    with pytest.raises(InputError, match=r"activation='tanh' \(layers: 10->4 tanh, 4->3 tanh, 3->1 identity\); "
                                         "extraction recovers ReLU networks only"):
        load_model(_dump(tanh, tmp_path / "tanh.skops"))


def test_failed_certificate_never_replaces_the_output(tmp_path, capsys):
    from safetensors.numpy import save_file

    net = nr.random_network(8, 12, rng=3, bias_range=(-1, 1))
    save_file({"0.weight": net.hidden_weights, "0.bias": net.hidden_bias, "2.weight": net.output_weights,
               "2.bias": net.output_bias}, str(tmp_path / "box.safetensors"))
    out = tmp_path / "net.json"
    assert run(_parse([str(tmp_path / "box.safetensors"), "--out", str(out), "--no-progress"])) == 0
    good = out.read_text()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert run(_parse([str(tmp_path / "box.safetensors"), "--out", str(out), "--hidden", "5",
                           "--no-progress"])) == 1
    messages = " ".join(str(w.message) for w in caught)
    assert "n_hidden=5 stopped the search" in messages and "not a one-hidden-layer" not in messages
    assert out.read_text() == good
    assert "net.failed.json" in capsys.readouterr().out
    assert nr.TwoLayerNetwork.load(tmp_path / "net.failed.json").n_hidden > 5


def test_default_budget_stops_a_search_with_a_clear_message(monkeypatch):
    import nnrecover.extraction.dispatch as ex

    monkeypatch.setattr(ex, "default_budget", lambda d: 3000)
    net = nr.random_network(6, 10, rng=2, bias_range=(-1, 1))
    with pytest.raises(QueryBudgetError, match="default budget .* not converging"):
        extract(net.predict, 6, rng=0)
    with pytest.raises(InputError, match="max_queries must be 'auto', None"):
        extract(net.predict, 6, max_queries="lots")


# ------------------------------------------------------------------------------ PyTorch -> ONNX
def _torch_mlp(sizes, seed):
    torch = pytest.importorskip("torch")
    torch.manual_seed(seed)
    layers = []
    for i in range(len(sizes) - 1):
        layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).double()


def _export(module, path, d, dynamic):
    torch = pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    kwargs = {"input_names": ["x"], "output_names": ["y"]}
    if dynamic:
        kwargs["dynamic_axes"] = {"x": {0: "n"}, "y": {0: "n"}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, torch.zeros(1, d, dtype=torch.float64), str(path), dynamo=False, **kwargs)
    return path


def test_pytorch_model_exported_to_onnx_with_fixed_batch(tmp_path):
    torch = pytest.importorskip("torch")
    module = _torch_mlp([7, 9, 2], seed=0)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):        # a short training, so that the weights are not just the initialisation
        Xt = torch.randn(64, 7, dtype=torch.float64, generator=gen)
        opt.zero_grad()
        ((module(Xt) - Xt[:, :2] ** 2) ** 2).mean().backward()
        opt.step()
    path = _export(module, tmp_path / "fixed.onnx", 7, dynamic=False)     # accepts batches of 1 row only
    model = load_model(path)
    assert "batch size 1" in model.kind
    res = _no_warnings(extract, model, 7, rng=0)
    W1, b1 = module[0].weight.detach().numpy(), module[0].bias.detach().numpy()
    W2, b2 = module[2].weight.detach().numpy(), module[2].bias.detach().numpy()
    truth = nr.TwoLayerNetwork(W1, b1, W2, b2)
    _check_exact(res.network_, truth, _live(truth, 4 * np.random.default_rng(0).standard_normal((20000, 7))))


def test_deeper_pytorch_onnx_export_loaded_with_its_widths(tmp_path):
    torch = pytest.importorskip("torch")
    module = _torch_mlp([6, 10, 5, 1], seed=1)
    model = load_model(_export(module, tmp_path / "deep.onnx", 6, dynamic=True))
    assert model.n_inputs == 6 and model.hidden_sizes == (10, 5) and model.n_hidden is None
    X = np.random.default_rng(0).standard_normal((500, 6))
    with torch.no_grad():
        expected = module(torch.from_numpy(X)).numpy()[:, 0]
    assert np.allclose(model(X), expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("activation", ["Tanh", "LeakyReLU", "Sigmoid"])
def test_pytorch_onnx_export_with_another_hidden_activation_is_refused(tmp_path, activation):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4),
                                 getattr(torch.nn, activation)(), torch.nn.Linear(4, 1)).double()
    op = {"LeakyReLU": "LeakyRelu"}.get(activation, activation)
    with pytest.raises(InputError, match=rf"hidden activation other than ReLU: node \S+ \({op}\) \(weight "
                                         r"layers: .*8x6.*4x8.*1x4\)"):
        load_model(_export(module, tmp_path / "act.onnx", 6, dynamic=True))


def test_three_hidden_layer_iris_classifier_not_extracted_says_so():
    # a trained (6, 5, 3) classifier: the walks of its third layer may see no feature change at all (a zero
    # signature); what cannot be finished is returned with a failing certificate and its warning
    from sklearn.datasets import load_iris
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    X, y = load_iris(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    clf = _fit(MLPClassifier(hidden_layer_sizes=(6, 5, 3), max_iter=2000, random_state=0), X, y)
    net = nr.DeepNetwork.from_sklearn(clf)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = extract(net.predict, 4, rng=0)
    cert = res.diagnostics_["certificate"]
    Xt = np.random.default_rng(1).standard_normal((5000, 4))
    err = np.linalg.norm(res.network_.predict(Xt) - net.predict(Xt)) / np.linalg.norm(net.predict(Xt))
    # the certificate's verdict agrees with the function error on other fresh inputs
    assert cert["passed"] == (err < 1e-9)
    if not cert["passed"]:
        assert any(issubclass(w.category, CertificateWarning) and "certificate failed" in str(w.message)
                   for w in caught)
