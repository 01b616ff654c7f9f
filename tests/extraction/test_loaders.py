"""Loaders (skops, safetensors, ONNX, module:function) and the ``extract`` subcommand's run()."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.cli.extract import add_parser, run
from nnrecover.errors import InputError, QueryBudgetError
from nnrecover.extraction import extract
from nnrecover.extraction.loaders import load_model


def _parse(argv):
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["extract", *argv])


def _rel(f, g, X):
    y = np.asarray(f(X)).reshape(len(X), -1)
    z = np.asarray(g(X)).reshape(len(X), -1)
    return float(np.linalg.norm(y - z) / np.linalg.norm(y))


@pytest.fixture(scope="module")
def diabetes_mlp(tmp_path_factory):
    """An MLPRegressor trained on scikit-learn's bundled diabetes data (standardised), saved with skops."""
    import skops.io as sio
    from sklearn.datasets import load_diabetes
    from sklearn.neural_network import MLPRegressor

    X, y = load_diabetes(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    y = (y - y.mean()) / y.std()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # ConvergenceWarning of the short training
        mlp = MLPRegressor(hidden_layer_sizes=(12,), max_iter=200, random_state=0).fit(X, y)
    path = tmp_path_factory.mktemp("skops") / "diabetes.skops"
    sio.dump(mlp, path)
    return mlp, path, X


def test_cli_extracts_skops_regressor_without_knowing_width(diabetes_mlp, tmp_path, capsys):
    mlp, path, X = diabetes_mlp
    out = tmp_path / "net.json"
    assert run(_parse([str(path), "--out", str(out), "--no-progress"])) == 0
    text = capsys.readouterr().out
    assert "queries used:" in text and "time:" in text and "passed" in text
    net = nr.TwoLayerNetwork.load(out)
    assert net.n_hidden == 12                                      # width found, not given
    Z = np.random.default_rng(0).standard_normal((3000, X.shape[1]))
    assert _rel(mlp.predict, net.predict, Z) < 1e-9
    assert _rel(mlp.predict, net.predict, X) < 1e-9                # and on the real data
    diag = json.loads((tmp_path / "net.json.diagnostics.json").read_text())
    assert diag["complete"] is True and diag["queries"] > 0 and diag["width"]["n_hidden"] == 12


def test_cli_budget_error_writes_partial_diagnostics(diabetes_mlp, tmp_path):
    _, path, _ = diabetes_mlp
    out = tmp_path / "net.json"
    earlier = tmp_path / "net.json.diagnostics.json"    # of an earlier complete run: left as it was
    earlier.write_text('{"complete": true}')
    with pytest.raises(QueryBudgetError, match="Recovered so far") as info:
        run(_parse([str(path), "--out", str(out), "--max-queries", "1000", "--no-progress"]))
    assert "net.json.diagnostics.partial.json" in str(info.value) and "attribute" not in str(info.value)
    assert not out.exists() and earlier.read_text() == '{"complete": true}'
    diag = json.loads((tmp_path / "net.json.diagnostics.partial.json").read_text())
    assert diag["complete"] is False and diag["queries"] <= 1000
    assert not [p.name for p in tmp_path.iterdir() if ".part-" in p.name or p.name.endswith(".tmp")]


def test_skops_classifier_logits(tmp_path):
    import skops.io as sio
    from sklearn.datasets import load_iris
    from sklearn.neural_network import MLPClassifier

    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = MLPClassifier(hidden_layer_sizes=(5,), max_iter=300, random_state=0).fit(X, y)
    sio.dump(clf, tmp_path / "iris.skops")
    model = load_model(tmp_path / "iris.skops")
    assert model.n_inputs == 4
    res = extract(model, 4, rng=0)
    # log-ratios to the first class = logit differences: a 2-output ReLU network of the same 5 units
    assert res.network_.n_outputs == 2 and res.network_.n_hidden == 5
    Z = np.random.default_rng(1).standard_normal((2000, 4))
    assert _rel(model, res.predict, Z) < 1e-9
    ratios = np.column_stack([np.zeros(len(X)), res.predict(X)])
    assert np.array_equal(clf.classes_[np.argmax(ratios, axis=1)], clf.predict(X))


def test_skops_refuses_other_estimators(tmp_path):
    import skops.io as sio
    from sklearn.linear_model import LinearRegression

    sio.dump(LinearRegression().fit(np.eye(3), np.arange(3.0)), tmp_path / "lin.skops")
    with pytest.raises(InputError, match="MLPRegressor or MLPClassifier"):
        load_model(tmp_path / "lin.skops")


def _torch_state_dict(net, dtype):
    """Arrays under PyTorch's nn.Sequential(Linear, ReLU, Linear) state_dict names."""
    return {"0.weight": net.hidden_weights.astype(dtype), "0.bias": net.hidden_bias.astype(dtype),
            "2.weight": net.output_weights.astype(dtype), "2.bias": net.output_bias.astype(dtype)}


def test_safetensors_float64_and_float32(tmp_path):
    from safetensors.numpy import save_file

    net = nr.random_network(5, 7, 2, rng=4, bias_range=(-1, 1))
    save_file(_torch_state_dict(net, np.float64), str(tmp_path / "m64.safetensors"))
    save_file(_torch_state_dict(net, np.float32), str(tmp_path / "m32.safetensors"))
    Z = np.random.default_rng(2).standard_normal((2000, 5))
    m64 = load_model(tmp_path / "m64.safetensors")
    assert m64.n_inputs == 5 and m64.hidden_sizes == (7,) and m64.n_hidden == 7
    res = extract(m64, 5, rng=0)
    assert res.network_.n_hidden == 7 and _rel(net.predict, res.predict, Z) < 1e-9
    # float32 weights: the recovered network agrees with the float32 box to its round-off (~1e-7
    # per operation, grown by the d + k sums; 1e-5 leaves margin) and finds no false units
    m32 = load_model(tmp_path / "m32.safetensors")
    res32 = extract(m32, 5, rng=0)
    assert res32.network_.n_hidden == 7
    assert _rel(m32, res32.predict, Z) < 1e-5
    assert res32.diagnostics_["noise"]["relative_noise"] > 1e-9


def _forward(layers, X):
    """The ReLU chain of ``[(W, b), ...]`` in the arrays' dtype, as the loaders evaluate it."""
    H = X
    for W, b in layers[:-1]:
        H = np.maximum(H @ W.T + b, 0)
    return H @ layers[-1][0].T + layers[-1][1]


def _random_layers(sizes, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((k, n)).astype(dtype), rng.standard_normal(k).astype(dtype))
            for n, k in itertools.pairwise(sizes)]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_safetensors_networks_of_any_depth(tmp_path, dtype):
    from safetensors.numpy import save_file

    layers = _random_layers([5, 8, 6, 4, 2], seed=1, dtype=dtype)
    save_file({f"{key}.{2 * i}.{name}": a for i, (W, b) in enumerate(layers) for key, name, a in
               (("net", "weight", W), ("net", "bias", b))}, str(tmp_path / "deep.safetensors"))
    model = load_model(tmp_path / "deep.safetensors")
    assert model.n_inputs == 5 and model.hidden_sizes == (8, 6, 4) and model.n_hidden is None
    assert "hidden_sizes=(8, 6, 4)" in repr(model) and str(np.dtype(dtype)) in model.kind
    X = np.random.default_rng(2).standard_normal((300, 5))
    assert np.array_equal(model(X), _forward(layers, X.astype(dtype)))


def test_safetensors_refuses_layers_that_do_not_chain(tmp_path):
    from safetensors.numpy import save_file

    layers = _random_layers([5, 3, 4], seed=1)
    save_file({"0.weight": layers[0][0], "0.bias": layers[0][1], "2.weight": np.ones((2, 4)), "2.bias": np.ones(2)},
              str(tmp_path / "broken.safetensors"))
    with pytest.raises(InputError, match=r"layer 1 breaks the chain; layers 0: weight \(3, 5\), bias \(3,\), "
                                         r"1: weight \(2, 4\)"):
        load_model(tmp_path / "broken.safetensors")
    save_file({"0.weight": layers[0][0], "0.bias": np.ones(4)}, str(tmp_path / "bias.safetensors"))
    with pytest.raises(InputError, match=r"1 linear layer\(s\) \(0: weight \(3, 5\), bias \(4,\)\)"):
        load_model(tmp_path / "bias.safetensors")
    save_file({"0.weight": np.ones((3, 5)), "0.bias": np.ones(4), "1.weight": np.ones((2, 3))},
              str(tmp_path / "bias2.safetensors"))
    with pytest.raises(InputError, match=r"layer 0 breaks the chain"):
        load_model(tmp_path / "bias2.safetensors")


def _onnx_chain(path, layers, acts, dtype=np.float32):
    """An ONNX graph ``x -> MatMul -> Add -> act -> ... -> MatMul -> Add`` (``acts[i]`` after layer ``i``,
    None for none; one more entry than hidden layers applies to the output)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits, nodes, h = [], [], "x"
    for i, (W, b) in enumerate(layers):
        inits += [numpy_helper.from_array(W.T.astype(dtype), f"W{i}"), numpy_helper.from_array(b.astype(dtype), f"b{i}")]
        nodes += [helper.make_node("MatMul", [h, f"W{i}"], [f"m{i}"], name=f"matmul{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"z{i}"], name=f"add{i}")]
        h = f"z{i}"
        if i < len(acts) and acts[i] is not None:
            nodes.append(helper.make_node(acts[i], [h], [f"a{i}"], name=f"act{i}"))
            h = f"a{i}"
    nodes.append(helper.make_node("Identity", [h], ["y"]))
    kind = TensorProto.FLOAT if dtype == np.float32 else TensorProto.DOUBLE
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", kind, [None, layers[0][0].shape[1]])],
                              [helper.make_tensor_value_info("y", kind, [None, layers[-1][0].shape[0]])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_onnx_networks_of_any_depth_and_their_activations(tmp_path):
    pytest.importorskip("onnxruntime")
    layers = _random_layers([4, 6, 3, 5, 1], seed=3)
    model = load_model(_onnx_chain(tmp_path / "deep.onnx", layers, ["Relu", "Relu", "Relu"], np.float64))
    assert model.n_inputs == 4 and model.hidden_sizes == (6, 3, 5) and model.n_hidden is None
    X = np.random.default_rng(4).standard_normal((200, 4))
    assert np.allclose(model(X), _forward(layers, X)[:, 0], rtol=1e-13, atol=1e-13)
    # an output activation is the box's business (the certificate shows it); a hidden one is refused
    assert load_model(_onnx_chain(tmp_path / "out.onnx", layers, ["Relu", "Relu", "Relu", "Sigmoid"])).hidden_sizes \
        == (6, 3, 5)
    for act in ("Sigmoid", "Tanh", "LeakyRelu", "Elu", "Softplus"):
        with pytest.raises(InputError, match=rf"hidden activation other than ReLU: node act1 \({act}\) \(weight "
                                             r"layers: matmul0 4x6, matmul1 6x3, matmul2 3x5, matmul3 5x1\)"):
            load_model(_onnx_chain(tmp_path / f"{act}.onnx", layers, ["Relu", act, "Relu"]))


def test_onnx_model(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    net = nr.random_network(4, 6, rng=8, bias_range=(-1, 1))
    inits = [numpy_helper.from_array(net.hidden_weights.T.astype(np.float32), "W1"),
             numpy_helper.from_array(net.hidden_bias.astype(np.float32), "b1"),
             numpy_helper.from_array(net.output_weights.T.astype(np.float32), "W2"),
             numpy_helper.from_array(net.output_bias.astype(np.float32), "b2")]
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h0"]), helper.make_node("Add", ["h0", "b1"], ["h1"]),
             helper.make_node("Relu", ["h1"], ["h"]), helper.make_node("MatMul", ["h", "W2"], ["y0"]),
             helper.make_node("Add", ["y0", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])], inits)
    model_proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model_proto, str(tmp_path / "mlp.onnx"))
    model = load_model(tmp_path / "mlp.onnx")
    assert model.n_inputs == 4 and model.hidden_sizes == (6,) and model.n_hidden == 6
    res = extract(model, 4, rng=0)
    assert res.network_.n_hidden == 6
    Z = np.random.default_rng(3).standard_normal((2000, 4))
    assert _rel(model, res.predict, Z) < 1e-5          # a float32 box: agreement to its round-off


def test_module_function_and_errors(tmp_path, monkeypatch):
    net = nr.random_network(3, 4, rng=9, bias_range=(-1, 1))
    np.savez(tmp_path / "w.npz", W=net.hidden_weights, b=net.hidden_bias, A=net.output_weights, c=net.output_bias)
    (tmp_path / "my_box.py").write_text(
        "import numpy as np\n"
        f"_z = np.load({str(tmp_path / 'w.npz')!r})\n"
        "def f(X):\n"
        "    return (np.maximum(X @ _z['W'].T + _z['b'], 0) @ _z['A'].T + _z['c'])[:, 0]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_box", raising=False)
    with pytest.raises(InputError, match="give --inputs d"):
        run(_parse(["my_box:f", "--out", str(tmp_path / "o.json"), "--no-progress"]))
    assert run(_parse(["my_box:f", "--inputs", "3", "--out", str(tmp_path / "o.npz"), "--no-progress"])) == 0
    got = nr.TwoLayerNetwork.load(tmp_path / "o.npz")
    Z = np.random.default_rng(4).standard_normal((1000, 3))
    assert _rel(net.predict, got.predict, Z) < 1e-9
    assert load_model("my_box:f").hidden_sizes is None and load_model("my_box:f").n_hidden is None
    with pytest.raises(InputError, match="has no attribute"):
        load_model("my_box:g")
    with pytest.raises(InputError, match="cannot import"):
        load_model("no_such_module_xyz:f")
    with pytest.raises(InputError, match="does not exist"):
        load_model(tmp_path / "missing.onnx")
    with pytest.raises(InputError, match="cannot read a model"):
        load_model(tmp_path / "w.npz")
    with pytest.raises(InputError, match="--out must name"):
        run(_parse(["my_box:f", "--inputs", "3", "--out", str(tmp_path / "o.txt")]))
    with pytest.raises(SystemExit):
        _parse(["my_box:f", "--hidden", "zero", "--out", "x.json"])


def test_main_extract_end_to_end(diabetes_mlp, tmp_path, capsys):
    # through the real entry point: the subcommand is wired into `nnrecover`, and a budget that is too
    # small is one error line with exit status 2 (partial diagnostics written, no model)
    from nnrecover.cli import main

    mlp, path, X = diabetes_mlp
    out = tmp_path / "net.json"
    assert main(["extract", str(path), "--out", str(out), "--no-progress"]) == 0
    Z = np.random.default_rng(1).standard_normal((2000, X.shape[1]))
    assert _rel(mlp.predict, nr.TwoLayerNetwork.load(out).predict, Z) < 1e-9
    out2 = tmp_path / "small.json"
    capsys.readouterr()
    assert main(["extract", str(path), "--out", str(out2), "--max-queries", "500", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nnrecover: error:") and not out2.exists()
