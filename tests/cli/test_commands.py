"""Tests of the command line (nnrecover.cli): every subcommand, --help, and one-line user errors."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import nnrecover as nr
from nnrecover._validation import check_random_state
from nnrecover.cli import main
from nnrecover.cli.commands import parse_option
from nnrecover.errors import AssumptionError, AssumptionWarning, InputError
from nnrecover.experiments.runner import to_jsonable
from nnrecover.learners import registry

SUBCOMMANDS = ("demo", "methods", "simulate", "fit", "evaluate", "experiment")
FAKE = "test-random-features"


class RandomFeaturesLearner:
    """Test double: ``n_hidden`` random unit directions, output layer by least squares.

    Takes arrays or an iterable of (X, Y) chunks (normal equations accumulated chunk by chunk), like
    the real learners; ``behaviour`` makes it warn, refuse (AssumptionError) or crash (a bug).
    """

    def __init__(self, n_hidden, *, ridge=1e-9, random_state=None, activation="relu", behaviour="ok"):
        self.n_hidden = n_hidden
        self.ridge = ridge
        self.random_state = random_state
        self.activation = activation
        self.behaviour = behaviour

    def fit(self, X, Y=None):
        if self.behaviour == "refuse":
            raise AssumptionError("test double refuses: assumption 'x ~ N(0, I)' (test) is violated.")
        if self.behaviour == "crash":
            raise RuntimeError("deliberate bug in the test double")
        if self.behaviour == "warn":
            warnings.warn("test double warns\nover two lines", AssumptionWarning, stacklevel=2)
        chunks = X if Y is None else [(X, Y)]
        gen = check_random_state(self.random_state)
        G = R = W = None
        n = 0
        for xb, yb in chunks:
            xb = np.asarray(xb, dtype=float)
            yb = np.asarray(yb, dtype=float).reshape(xb.shape[0], -1)
            if W is None:
                W = gen.standard_normal((self.n_hidden, xb.shape[1]))
                W /= np.linalg.norm(W, axis=1, keepdims=True)
                G = np.zeros((self.n_hidden + 1,) * 2)
                R = np.zeros((self.n_hidden + 1, yb.shape[1]))
            F = np.column_stack([np.maximum(xb @ W.T, 0), np.ones(xb.shape[0])])
            G += F.T @ F
            R += F.T @ yb
            n += xb.shape[0]
        coef = np.linalg.solve(G + self.ridge * np.eye(G.shape[0]), R)
        self.network_ = nr.TwoLayerNetwork(W, None, coef[:-1].T, coef[-1], self.activation)
        self.hidden_weights_ = W
        self.diagnostics_ = {"n_samples": n, "gram_condition": float(np.linalg.cond(G))}
        return self


@pytest.fixture
def fake(monkeypatch):
    rec = registry.AlgorithmRecord(FAKE, "baseline", "test double", ("none",), RandomFeaturesLearner,
                                    "random features + least squares (tests only)", True)
    monkeypatch.setitem(registry._RECORDS, FAKE, rec)
    return rec


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(capsys, argv, match, code=2):
    rc, out, err = run(capsys, *argv)
    assert rc == code, (rc, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("nnrecover: error: ")
    assert "Traceback" not in err and "Traceback" not in out
    assert match in lines[0], lines[0]
    return lines[0]


# ------------------------------------------------------------------------------------------ help
@pytest.mark.parametrize("cmd", SUBCOMMANDS)
def test_every_subcommand_has_help(capsys, cmd):
    rc, out, err = run(capsys, cmd, "--help")
    assert rc == 0 and err == ""
    assert out.startswith(f"usage: nnrecover {cmd}")


def test_top_level_help_and_version(capsys):
    rc, out, _ = run(capsys, "--help")
    assert rc == 0
    for cmd in SUBCOMMANDS:
        assert cmd in out
    rc, out, _ = run(capsys, "--version")
    assert rc == 0 and out.strip() == f"nnrecover {nr.__version__}"
    rc, out, _ = run(capsys)  # no command: the help, and a non-zero status
    assert rc == 2 and out.startswith("usage: nnrecover")


# ------------------------------------------------------------------------------------------ option parsing
def test_parse_option_values():
    assert parse_option("max_iter=300") == ("max_iter", 300)
    assert parse_option("tol=1e-8") == ("tol", 1e-8)
    assert parse_option("refine=false") == ("refine", False)
    assert parse_option("method=cp-als") == ("method", "cp-als")
    assert parse_option("init=null") == ("init", None)
    assert parse_option("orders=[1, 2]") == ("orders", [1, 2])
    assert parse_option("max-iter=3") == ("max_iter", 3)
    assert parse_option('name="3"') == ("name", "3")
    with pytest.raises(InputError, match="key=value"):
        parse_option("novalue")
    with pytest.raises(InputError, match="key=value"):
        parse_option("1x=3")


def test_integer_arguments_accept_scientific_and_underscored_forms():
    import argparse

    from nnrecover.cli.parser import _int_like

    assert _int_like("1e5") == _int_like("100_000") == 100_000
    assert _int_like("12345678901234567891") == 12345678901234567891  # exact beyond 2**53
    for bad in ("1.5", "x", "1e-3"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected an integer"):
            _int_like(bad)


# ------------------------------------------------------------------------------------------ methods
def test_methods_lists_registered_learner(capsys, fake):
    rc, out, _ = run(capsys, "methods")
    assert rc == 0
    header = out.splitlines()[0].split()
    assert header[:5] == ["name", "paper", "algorithm", "target", "fit"]
    assert FAKE in out and "RandomFeaturesLearner" in out and "Baselines" in out
    rc, out, _ = run(capsys, "methods", "--json", "--learners-only")
    rows = json.loads(out)
    mine = [r for r in rows if r["name"] == FAKE]
    assert mine == [{"name": FAKE, "paper": "baseline", "algorithm": "test double",
                     "target": "RandomFeaturesLearner", "fit": "yes", "assumptions": "none"}]
    assert all(r["fit"] == "yes" for r in rows)


def test_methods_unknown_paper(capsys):
    assert_user_error(capsys, ["methods", "--paper", "smith2020"], "unknown paper 'smith2020'")


# ------------------------------------------------------------------------------------------ simulate
@pytest.mark.parametrize("ext", [".npz", ".npy", ".csv", ".parquet"])
def test_simulate_writes_samples_and_teacher(capsys, tmp_path, ext):
    out, teacher = tmp_path / f"data/s{ext}", tmp_path / "data/t.json"
    rc, text, _ = run(capsys, "simulate", "-d", "5", "-k", "3", "-p", "2", "--n", "300", "--seed", "4",
                      "--bias-range", "-0.5", "0.5", "--out", str(out), "--teacher", str(teacher))
    assert rc == 0 and "wrote 300 samples" in text
    net = nr.TwoLayerNetwork.load(teacher)
    assert (net.n_inputs, net.n_hidden, net.n_outputs) == (5, 3, 2)
    assert np.all(np.abs(net.hidden_bias) <= 0.5)
    X, Y = nr.io.load_samples(out, **({"target_columns": [-2, -1]} if ext == ".npy" else {}))
    assert X.shape == (300, 5) and Y.shape == (300, 2)
    # noiseless labels are the teacher's outputs (same float64 arithmetic on the same rows)
    assert np.array_equal(np.asarray(Y), net.predict(np.asarray(X)))
    meta = json.loads(teacher.read_text())["simulation"]
    assert meta["seed"] == 4 and meta["n_samples"] == 300 and meta["distribution"] == {"name": "gaussian", "dim": 5}


def test_simulate_is_reproducible_and_mixture(capsys, tmp_path):
    paths = []
    for i in range(2):
        out = tmp_path / f"s{i}.npz"
        rc, _, _ = run(capsys, "simulate", "--n", "64", "--seed", "9", "--distribution", "mixture",
                       "--mixture-components", "3", "--noise", "0.1", "--antithetic",
                       "--out", str(out), "--teacher", str(tmp_path / f"t{i}.json"))
        assert rc == 0
        paths.append(out)
    a, b = (np.load(p) for p in paths)
    assert np.array_equal(a["X"], b["X"]) and np.array_equal(a["Y"], b["Y"])
    assert np.array_equal(a["X"][0::2], -a["X"][1::2])  # antithetic pairs
    spec = json.loads((tmp_path / "t0.json").read_text())["simulation"]["distribution"]
    assert spec["name"] == "mixture" and np.allclose(np.linalg.norm(spec["means"], axis=1), 1.0)


def test_simulate_from_an_existing_teacher(capsys, tmp_path):
    rc, _, _ = run(capsys, "simulate", "-d", "3", "-k", "2", "-p", "3", "--n", "50", "--seed", "1",
                   "--out", str(tmp_path / "train.npy"), "--teacher", str(tmp_path / "t.json"))
    assert rc == 0
    rc, out, _ = run(capsys, "simulate", "--use-teacher", str(tmp_path / "t.json"), "--n", "40", "--seed", "2",
                     "--out", str(tmp_path / "held.npy"))
    assert rc == 0 and "from the teacher in" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["held.npy", "t.json", "train.npy"]
    net = nr.TwoLayerNetwork.load(tmp_path / "t.json")
    # comma-separated target positions, as on the command line
    X, Y = nr.io.load_samples(tmp_path / "held.npy", target_columns="-3,-2,-1".split(","))
    assert X.shape == (40, 3) and np.array_equal(np.asarray(Y), net.predict(np.asarray(X)))
    Xt, _ = nr.io.load_samples(tmp_path / "train.npy", target_columns=[-3, -2, -1])
    assert not np.array_equal(np.asarray(Xt[:40]), np.asarray(X))  # fresh inputs
    assert_user_error(capsys, ["simulate", "--use-teacher", str(tmp_path / "t.json"), "-k", "3",
                               "--out", str(tmp_path / "x.npz")], "-k/--hidden describe a new teacher")


def test_simulate_user_errors(capsys, tmp_path):
    assert_user_error(capsys, ["simulate", "--out", str(tmp_path / "s.txt")], "--out must end in one of")
    assert_user_error(capsys, ["simulate", "--n", "abc"], "argument --n: expected a positive integer")
    assert_user_error(capsys, ["simulate", "--n", "0"], "expected a positive integer")
    assert_user_error(capsys, ["simulate", "--activation", "swishy", "--out", str(tmp_path / "s.npz"),
                               "--teacher", str(tmp_path / "t.json")], "swishy")
    assert_user_error(capsys, ["simulate", "--bias-range", "1", "0", "--out", str(tmp_path / "s.npz"),
                               "--teacher", str(tmp_path / "t.json")], "LOW <= HIGH")
    assert_user_error(capsys, ["simulate", "--distribution", "cauchy"], "invalid choice: 'cauchy'")
    assert not (tmp_path / "s.npz").exists()


# ------------------------------------------------------------------------------------------ fit / evaluate
@pytest.fixture
def simulated(capsys, tmp_path):
    rc, _, _ = run(capsys, "simulate", "-d", "4", "-k", "2", "--n", "2000", "--seed", "1",
                   "--out", str(tmp_path / "s.npz"), "--teacher", str(tmp_path / "t.json"))
    assert rc == 0
    rc, _, _ = run(capsys, "simulate", "-d", "4", "-k", "2", "--n", "500", "--seed", "1",
                   "--out", str(tmp_path / "held.csv"), "--teacher", str(tmp_path / "t2.json"))
    assert rc == 0
    return tmp_path


def test_fit_writes_model_with_fit_record(capsys, fake, simulated):
    model = simulated / "m.json"
    rc, out, err = run(capsys, "fit", str(simulated / "s.npz"), "--learner", FAKE, "-k", "2", "--seed", "3",
                       "--option", "ridge=1e-6", "--out", str(model), "--diagnostics", str(simulated / "d.json"))
    assert rc == 0, err
    assert f"fitted {FAKE} (k=2) on 2000 samples (d=4)" in out
    net = nr.TwoLayerNetwork.load(model)
    assert (net.n_inputs, net.n_hidden, net.n_outputs) == (4, 2, 1)
    rec = json.loads(model.read_text())["fit"]
    assert rec["options"] == {"ridge": 1e-6} and rec["seed"] == 3 and rec["n_samples"] == 2000
    assert rec["diagnostics"]["n_samples"] == 2000
    assert json.loads((simulated / "d.json").read_text())["n_samples"] == 2000
    # the recorded training MSE is the MSE of the saved model on the data
    X, Y = nr.io.load_samples(simulated / "s.npz")
    assert rec["training"]["mse"] == pytest.approx(np.mean((net.predict(X) - Y) ** 2), rel=1e-12)
    # same seed, same model (bit-identical)
    rc, _, _ = run(capsys, "fit", str(simulated / "s.npz"), "--learner", FAKE, "-k", "2", "--seed", "3",
                   "--option", "ridge=1e-6", "--out", str(simulated / "m2.npz"))
    assert rc == 0 and nr.TwoLayerNetwork.load(simulated / "m2.npz") == net


def test_fit_npy_and_csv_inputs(capsys, fake, simulated):
    X, Y = nr.io.load_samples(simulated / "s.npz")
    np.save(simulated / "x.npy", X)
    np.save(simulated / "y.npy", Y)
    rc, _, err = run(capsys, "fit", str(simulated / "x.npy"), "--targets", str(simulated / "y.npy"),
                     "--learner", FAKE, "-k", "2", "--seed", "0", "--out", str(simulated / "a.json"))
    assert rc == 0, err
    np.save(simulated / "xy.npy", np.column_stack([X[:, :2], Y, X[:, 2:]]))
    rc, _, err = run(capsys, "fit", str(simulated / "xy.npy"), "--target-column", "2",
                     "--learner", FAKE, "-k", "2", "--seed", "0", "--out", str(simulated / "c.json"))
    assert rc == 0, err
    # same rows; the column split leaves X non-contiguous, so BLAS may sum in another order: round-off only
    a, c = nr.TwoLayerNetwork.load(simulated / "a.json"), nr.TwoLayerNetwork.load(simulated / "c.json")
    assert np.allclose(a.output_weights, c.output_weights, rtol=1e-10, atol=0)
    assert np.array_equal(a.hidden_weights, c.hidden_weights)
    pd.DataFrame(np.column_stack([Y, X]), columns=["target", "a", "b", "c", "d"]).to_csv(
        simulated / "t.csv", index=False, float_format="%.17g")
    rc, _, err = run(capsys, "fit", str(simulated / "t.csv"), "--target-column", "target",
                     "--learner", FAKE, "-k", "2", "--seed", "0", "--out", str(simulated / "b.json"))
    assert rc == 0, err
    assert nr.TwoLayerNetwork.load(simulated / "a.json") == nr.TwoLayerNetwork.load(simulated / "b.json")


def test_fit_user_errors(capsys, fake, simulated):
    data = str(simulated / "s.npz")
    line = assert_user_error(capsys, ["fit", data, "--learner", "no-such-learner", "-k", "2"],
                             "unknown learner 'no-such-learner'")
    assert FAKE in line  # the message lists what is available
    line = assert_user_error(capsys, ["fit", data, "--learner", FAKE, "-k", "2", "--option", "lr=0.1"],
                             "unknown option(s) lr for learner")
    assert "ridge" in line and "random_state" in line
    assert_user_error(capsys, ["fit", data, "--learner", FAKE, "-k", "2", "--option", "ridge"], "key=value")
    assert_user_error(capsys, ["fit", data, "--learner", FAKE, "-k", "2", "--option", "ridge=1",
                               "--option", "ridge=2"], "given twice")
    assert_user_error(capsys, ["fit", data, "--learner", FAKE, "-k", "2", "--seed", "1",
                               "--option", "random_state=2"], "not both")
    assert_user_error(capsys, ["fit", str(simulated / "missing.npz"), "--learner", FAKE, "-k", "2"],
                      "does not exist")
    assert_user_error(capsys, ["fit", data, "--learner", FAKE], "required: --hidden/-k")
    assert_user_error(capsys, ["fit", data, "--learner", FAKE, "-k", "2", "--out", str(simulated / "m.txt")],
                      ".json or .npz")
    assert_user_error(capsys, ["fit", data, "--learner", FAKE, "-k", "2", "--option", "behaviour=refuse",
                               "--out", str(simulated / "m.json")], "assumption 'x ~ N(0, I)'")
    assert not (simulated / "m.json").exists()


class HiddenOnlyLearner:
    """Test double recovering only the hidden weights (like Goel-Panigrahy's first-layer learner):
    returns the true rows, read from a class attribute."""

    rows = None

    def __init__(self, n_hidden, *, random_state=None):
        self.n_hidden, self.random_state = n_hidden, random_state

    def fit(self, X, Y=None):
        self.hidden_weights_ = np.array(self.rows)
        self.diagnostics_ = {}
        return self


def test_hidden_weights_only_model(capsys, monkeypatch, simulated):
    HiddenOnlyLearner.rows = nr.TwoLayerNetwork.load(simulated / "t.json").hidden_weights[::-1]
    monkeypatch.setitem(registry._RECORDS, "test-hidden-only",
                        registry.AlgorithmRecord("test-hidden-only", "baseline", "t", (), HiddenOnlyLearner, "", True))
    model = simulated / "h.json"
    rc, out, err = run(capsys, "fit", str(simulated / "s.npz"), "--learner", "test-hidden-only", "-k", "2",
                       "--out", str(model))
    assert rc == 0, err
    assert "hidden weights only" in out
    rc, out, _ = run(capsys, "evaluate", str(model), "--teacher", str(simulated / "t.json"))
    assert rc == 0 and "weight_error.max_angle: 0\n" in out and "parameter_error" not in out
    assert_user_error(capsys, ["evaluate", str(model), "--data", str(simulated / "s.npz")], "cannot predict")
    assert_user_error(capsys, ["fit", str(simulated / "s.npz"), "--learner", "test-hidden-only", "-k", "2",
                               "--out", str(simulated / "h.npz")], "save them to a .json file")


def test_bug_gives_one_line_and_status_1_and_debug_traceback(capsys, fake, simulated):
    argv = ["fit", str(simulated / "s.npz"), "--learner", FAKE, "-k", "2", "--option", "behaviour=crash",
            "--out", str(simulated / "m.json")]
    line = assert_user_error(capsys, argv, "internal error (RuntimeError: deliberate bug", code=1)
    assert "--debug" in line
    with pytest.raises(RuntimeError, match="deliberate bug"):
        main(["--debug", *argv])
    # a user error keeps its exit status under --debug, which adds the traceback
    capsys.readouterr()
    assert main(["--debug", "evaluate", str(simulated / "missing.json"), "--teacher", str(simulated / "t.json")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("nnrecover: error: ")


def test_warnings_are_one_line(capsys, fake, simulated):
    rc, out, err = run(capsys, "fit", str(simulated / "s.npz"), "--learner", FAKE, "-k", "2",
                       "--option", "behaviour=warn", "--out", str(simulated / "m.json"))
    assert rc == 0
    assert err.strip().splitlines() == ["nnrecover: warning: test double warns over two lines [AssumptionWarning]"]


def test_evaluate_against_teacher_and_data(capsys, fake, simulated):
    # the teacher evaluated against itself: every error is exactly 0
    rc, out, _ = run(capsys, "evaluate", str(simulated / "t.json"), "--teacher", str(simulated / "t.json"),
                     "--data", str(simulated / "s.npz"), "--n-eval", "2000")
    assert rc == 0
    assert "parameter_error.max_unit_error: 0\n" in out and "weight_error.max_angle: 0\n" in out
    assert "function_error (relative L2, gaussian, n=2000): 0\n" in out and "data.mse: 0\n" in out
    run(capsys, "fit", str(simulated / "s.npz"), "--learner", FAKE, "-k", "2", "--seed", "0",
        "--out", str(simulated / "m.json"))
    rc, out, _ = run(capsys, "evaluate", str(simulated / "m.json"), "--teacher", str(simulated / "t.json"),
                     "--data", str(simulated / "held.csv"), "--json")
    assert rc == 0
    rep = json.loads(out)
    model, teacher = nr.TwoLayerNetwork.load(simulated / "m.json"), nr.TwoLayerNetwork.load(simulated / "t.json")
    assert rep["parameter_error"]["max_unit_error"] == nr.metrics.parameter_error(model, teacher)["max_unit_error"]
    X, Y = nr.io.load_samples(simulated / "held.csv")
    assert rep["data"]["n_samples"] == 500
    assert rep["data"]["mse"] == pytest.approx(np.mean((model.predict(X) - Y) ** 2), rel=1e-12)
    assert rep["data"]["relative_l2_error"] == pytest.approx(np.linalg.norm(model.predict(X) - Y) / np.linalg.norm(Y), rel=1e-12)
    assert rep["function_error"] > 0


def test_evaluate_user_errors(capsys, simulated, tmp_path):
    model = str(simulated / "t.json")
    assert_user_error(capsys, ["evaluate", model], "needs --teacher")
    assert_user_error(capsys, ["evaluate", str(tmp_path / "none.json"), "--teacher", model], "does not exist")
    (tmp_path / "broken.json").write_text("{not json")
    assert_user_error(capsys, ["evaluate", str(tmp_path / "broken.json"), "--teacher", model], "not valid JSON")
    other = nr.random_network(3, 2, rng=0)
    other.save(tmp_path / "other.json")
    assert_user_error(capsys, ["evaluate", str(tmp_path / "other.json"), "--teacher", model],
                      "3 inputs but the teacher has 4")
    assert_user_error(capsys, ["evaluate", str(tmp_path / "other.json"), "--data", str(simulated / "s.npz")],
                      "4 input column(s) but the model has 3")


# ------------------------------------------------------------------------------------------ experiment
def test_experiment_list_and_errors(capsys, tmp_path):
    rc, out, _ = run(capsys, "experiment", "--list")
    assert rc == 0 and "baseline-gd" in out and "compare-learners" in out
    assert_user_error(capsys, ["experiment"], "give an experiment NAME")
    assert_user_error(capsys, ["experiment", "no-such", "--out", str(tmp_path)], "unknown experiment 'no-such'")
    assert_user_error(capsys, ["experiment", "compare-learners", "--option", "speed=3", "--out", str(tmp_path)],
                      "unknown option(s) speed for experiment 'compare-learners'")


def test_experiment_runs_and_writes_files(capsys, fake, tmp_path):
    out = tmp_path / "exp"
    rc, text, err = run(capsys, "experiment", "compare-learners", "--quick", "--seed", "5", "--out", str(out),
                        "--option", f'learners=["{FAKE}"]', "--option", "n_samples=3000")
    assert rc == 0, err
    assert FAKE in text and "seed 5" in text
    for name in ("results.csv", "metadata.json", "figure.png"):
        assert (out / name).is_file()
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["seed"] == 5 and meta["options"] == {"learners": [FAKE], "n_samples": 3000}
    # the recorded command replays the run: same table (fit times aside)
    argv = __import__("shlex").split(meta["command"])
    assert argv[:2] == ["nnrecover", "experiment"]
    rc, _, err = run(capsys, *argv[1:], "--out", str(tmp_path / "replay"))
    assert rc == 0, err
    a, b = (pd.read_csv(p / "results.csv").drop(columns="fit_time_s") for p in (out, tmp_path / "replay"))
    pd.testing.assert_frame_equal(a, b)


# ------------------------------------------------------------------------------------------ demo
def test_demo_quick_with_one_learner(capsys, fake, tmp_path):
    out = tmp_path / "demo"
    rc, text, err = run(capsys, "demo", "--quick", "--learner", FAKE, "--out", str(out), "--seed", "2")
    assert rc == 0, err
    lines = text.splitlines()
    header = next(l for l in lines if l.split()[:2] == ["learner", "paper"])
    assert header.split() == ["learner", "paper", "algorithm", "refine", "max_unit_error", "function_error",
                              "fit_time_s", "n_samples", "outputs", "certificates", "status"]
    row = next(l for l in lines if l.startswith(FAKE))
    df = pd.read_csv(out / "results.csv")
    # random directions do not recover the teacher's units: the status must say so (max_unit_error > 1)
    assert df["max_unit_error"][0] > 1.0
    assert row.split()[-4:] == ["20000", "4", "-", "failed"]
    assert f"  {FAKE}: failed: " in text and "max_unit_error" in text.split(f"  {FAKE}: failed: ")[1].splitlines()[0]
    for name in ("demo.png", "results.csv", "teacher.json", "metadata.json"):
        assert (out / name).is_file()
    assert list(df["learner"]) == [FAKE] and df["n_samples"][0] == 20000
    # the table's errors are the metrics of a fit we can redo: same seed, same teacher, same numbers
    assert np.isfinite(df["max_unit_error"][0]) and 0 < df["function_error"][0] < 1.5
    rc2, text2, _ = run(capsys, "demo", "--quick", "--learner", FAKE, "--out", str(tmp_path / "again"), "--seed", "2")
    df2 = pd.read_csv(tmp_path / "again" / "results.csv")
    assert rc2 == 0 and df2["max_unit_error"][0] == df["max_unit_error"][0]
    assert df2["function_error"][0] == df["function_error"][0]
    assert nr.TwoLayerNetwork.load(out / "teacher.json") == nr.TwoLayerNetwork.load(tmp_path / "again" / "teacher.json")


def test_demo_with_the_gradient_descent_baseline(capsys, tmp_path):
    # a tiny noiseless teacher: the baseline's best restart reaches zero training loss, so the table's
    # function error is at round-off. A mismatch between the streamed X and Y (or the output columns)
    # would leave an O(1) error: this checks the plumbing from the stream to the learner and metrics.
    rc, text, err = run(capsys, "demo", "--quick", "--n-samples", "3000", "--learner", "gradient-descent",
                        "-d", "4", "-k", "2", "-p", "2", "--seed", "0", "--out", str(tmp_path))
    assert rc == 0, err
    df = pd.read_csv(tmp_path / "results.csv")
    row = df.iloc[0]
    assert row["learner"] == "gradient-descent" and row["status"] == "ok"
    assert row["n_samples"] == 3000 and row["outputs"] == 2
    assert row["function_error"] < 1e-8 and row["max_unit_error"] < 1e-6
    # one verdict line per registered learner before the fits, and the recovered-vs-true figure
    verdicts = text[text.index("which learners apply"):text.index("[1/1]")].strip().splitlines()[1:]
    names = {line.split()[0] for line in verdicts}
    assert names == {r.name for r in nr.learners.available(learners_only=True)}
    assert all(line.split()[1] in ("yes", "no", "unsure") for line in verdicts)
    assert (tmp_path / "recovery.png").stat().st_size > 10_000


def test_recovery_figure_one_panel_per_network():
    from nnrecover.experiments.compare import recovery_figure

    teacher = nr.random_network(5, 3, 2, rng=0)
    off = nr.TwoLayerNetwork(teacher.hidden_weights + 0.1, teacher.hidden_bias, teacher.output_weights)
    fig = recovery_figure({"exact": (teacher, teacher), "off": (off, teacher)})
    visible = [ax for ax in fig.axes if ax.get_visible()]
    assert len(visible) == 2
    assert "max unit error 0.0e+00" in visible[0].get_title()
    assert "max unit error 0.0e+00" not in visible[1].get_title()
    with pytest.raises(nr.errors.InputError):
        recovery_figure({})


def test_fit_and_evaluate_with_the_gradient_descent_baseline(capsys, simulated):
    model = simulated / "gd.json"
    rc, out, err = run(capsys, "fit", str(simulated / "s.npz"), "--learner", "gradient-descent", "-k", "2",
                       "--seed", "0", "--option", "n_restarts=2", "--option", "max_samples=1000",
                       "--out", str(model))
    assert rc == 0, err
    rec = json.loads(model.read_text())["fit"]
    assert rec["diagnostics"]["n_samples_used"] == 1000 and rec["diagnostics"]["n_samples_seen"] == 2000
    rc, out, _ = run(capsys, "evaluate", str(model), "--teacher", str(simulated / "t.json"), "--json")
    rep = json.loads(out)
    net, teacher = nr.TwoLayerNetwork.load(model), nr.TwoLayerNetwork.load(simulated / "t.json")
    assert rep["parameter_error"] == to_jsonable(nr.metrics.parameter_error(net, teacher))
    # the learner validates option values when it fits: still one line and status 2
    assert_user_error(capsys, ["fit", str(simulated / "s.npz"), "--learner", "gradient-descent", "-k", "2",
                               "--option", "method=newton"], "method must be one of")


def test_demo_reports_refusing_learner(capsys, fake, monkeypatch, tmp_path):
    monkeypatch.setattr(RandomFeaturesLearner, "__init__",
                        lambda self, n_hidden, *, behaviour="refuse", random_state=None:
                        self.__dict__.update(n_hidden=n_hidden, behaviour=behaviour, random_state=random_state))
    rc, text, err = run(capsys, "demo", "--quick", "--n-samples", "1000", "--learner", FAKE, "--out", str(tmp_path))
    assert rc == 0, err
    assert f"  {FAKE}: not applicable: test double refuses" in text
    assert_user_error(capsys, ["demo", "--quick", "--learner", "nope", "--out", str(tmp_path)], "unknown learner(s) nope")
    # the name is checked before anything is printed or written
    rc, text, _ = run(capsys, "demo", "--quick", "--learner", "nope", "--out", str(tmp_path / "never"))
    assert rc == 2 and text == "" and not (tmp_path / "never").exists()


def test_output_dir_is_a_file(capsys, tmp_path):
    (tmp_path / "f").write_text("")
    assert_user_error(capsys, ["demo", "--quick", "--out", str(tmp_path / "f")], "is an existing file")


# ------------------------------------------------------------------------------------------ installed entry points
def test_console_script_and_module(tmp_path):
    script = Path(sys.executable).with_name("nnrecover")
    assert script.is_file(), "the console script is installed next to the interpreter (pip install -e .)"
    for cmd in ([str(script)], [sys.executable, "-m", "nnrecover"]):
        res = subprocess.run([*cmd, "methods"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        assert res.stdout.split()[:1] in (["name"], ["no"])
        res = subprocess.run([*cmd, "fit", "missing.npz", "--learner", "x", "-k", "2"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert res.returncode == 2
        assert res.stderr.count("\n") == 1 and res.stderr.startswith("nnrecover: error: ")
        assert "Traceback" not in res.stderr


# ------------------------------------------------------------------------------------------ no silent wrong answer,
# nothing half-written, one line per mistake
def _scaled_copy(src: Path, dst: Path, scale: float) -> Path:
    with np.load(src) as d:
        np.savez(dst, X=d["X"] * scale, Y=d["Y"])
    return dst


@pytest.mark.parametrize("scale", [1e300, 1e-300, 1e150])
def test_gradient_descent_fits_data_at_any_scale_exactly(capsys, simulated, scale):
    # the learner fits power-of-two rescaled copies and undoes the scaling exactly in W (module
    # docstring of learners.baseline): the noiseless fit reaches round-off at every scale
    data = _scaled_copy(simulated / "s.npz", simulated / "scaled.npz", scale)
    rc, out, err = run(capsys, "fit", str(data), "--learner", "gradient-descent", "-k", "2", "--seed", "0",
                       "--out", str(simulated / "m.json"))
    assert rc == 0, err
    net = nr.TwoLayerNetwork.load(simulated / "m.json")
    X, Y = nr.io.load_samples(data)
    rel = np.linalg.norm(net.predict(X) - Y) / np.linalg.norm(Y)
    assert rel < 1e-8, rel
    fit = json.loads((simulated / "m.json").read_text())["fit"]
    assert abs(fit["training"]["relative_l2_error"] - rel) <= 1e-12


@pytest.mark.parametrize("scale, shown", [(1e300, "e+300"), (1e-300, "e-300"), (1e150, "e+150")])
def test_moment_learners_refuse_data_far_from_unit_scale(capsys, simulated, scale, shown):
    data = _scaled_copy(simulated / "s.npz", simulated / "scaled.npz", scale)
    line = assert_user_error(capsys, ["fit", str(data), "--learner", "pure-neuron", "-k", "2",
                                      "--out", str(simulated / "m.json")], "largest |X| entry")
    assert shown in line and "rescale X" in line and "NaN" not in line
    assert not (simulated / "m.json").exists()


def test_fit_checks_every_output_path_before_fitting(capsys, simulated):
    blocker = simulated / "a_file"
    blocker.write_text("")
    model = simulated / "m.json"
    line = assert_user_error(capsys, ["fit", str(simulated / "s.npz"), "--learner", "gradient-descent", "-k", "2",
                                      "--out", str(model), "--diagnostics", str(blocker / "d.json")], "--diagnostics")
    assert "is a file, not a folder" in line
    assert not model.exists()  # nothing written when any output is unwritable
    assert_user_error(capsys, ["fit", str(simulated / "s.npz"), "--learner", "gradient-descent", "-k", "2",
                               "--out", str(blocker / "m.json")], "--out")
    # the check is before the data are even read: a missing data file is reported after it
    assert_user_error(capsys, ["fit", str(simulated / "missing.npz"), "--learner", "gradient-descent", "-k", "2",
                               "--out", str(blocker / "m.json")], "--out")


def test_fit_never_writes_over_its_data_and_writes_model_and_diagnostics_together(capsys, simulated):
    data = simulated / "s.npz"
    before = data.read_bytes()
    line = assert_user_error(capsys, ["fit", str(data), "--learner", "gradient-descent", "-k", "2",
                                      "--out", str(simulated / "." / "s.npz")], "--out")
    assert "same file as DATA" in line and data.read_bytes() == before
    assert_user_error(capsys, ["fit", str(data), "--learner", "gradient-descent", "-k", "2",
                               "--out", str(simulated / "m.json"), "--diagnostics", str(data)], "--diagnostics")
    assert data.read_bytes() == before and not (simulated / "m.json").exists()
    # a failure between the two files leaves both as they were (they are renamed together at the end)
    model, diag = simulated / "m.json", simulated / "d.json"
    model.write_text("old model")
    diag.write_text("old diagnostics")
    from unittest import mock

    import nnrecover.cli.commands as cli

    real = cli._json_text
    calls = []

    def model_then_interrupt(doc):  # the model's text is written, the diagnostics' never is
        calls.append(doc)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real(doc)

    with mock.patch.object(cli, "_json_text", side_effect=model_then_interrupt):
        rc, _, _ = run(capsys, "fit", str(data), "--learner", "gradient-descent", "-k", "2", "--seed", "0",
                       "--out", str(model), "--diagnostics", str(diag))
    assert len(calls) == 2
    assert rc == 130 and model.read_text() == "old model" and diag.read_text() == "old diagnostics"
    assert sorted(p.name for p in simulated.iterdir() if p.name.startswith(".")) == []


def test_options_the_data_format_would_ignore_are_refused(capsys, simulated):
    # each of these used to be dropped in silence (rc 0)
    held = simulated / "held.csv"
    base = ["fit", str(held), "--learner", "gradient-descent", "-k", "2", "--out", str(simulated / "m.json")]
    assert "names an array of a .npz file" in assert_user_error(capsys, base + ["--y-key", "bar"], "--y-key")
    X, Y = nr.io.load_samples(held)
    np.save(simulated / "x.npy", X)
    np.save(simulated / "y.npy", Y)
    assert_user_error(capsys, ["fit", str(simulated / "x.npy"), "--targets", str(simulated / "y.npy"),
                               "--target-column", "0", "--learner", "gradient-descent", "-k", "2",
                               "--out", str(simulated / "m.json")], "select columns of a .csv/.parquet targets file")
    # ... while a .csv targets file has columns to choose from
    pd = pytest.importorskip("pandas")
    pd.DataFrame({"y0": Y[:, 0], "y1": Y[:, 1]} if Y.ndim == 2 else {"y0": Y, "y1": -Y}).to_csv(
        simulated / "t.csv", index=False)
    rc, _, err = run(capsys, "fit", str(simulated / "x.npy"), "--targets", str(simulated / "t.csv"),
                     "--target-column", "y0", "--learner", "gradient-descent", "-k", "2", "--out",
                     str(simulated / "m2.json"))
    assert rc == 0, err
    # an input teacher is never overwritten by simulate
    teacher = simulated / "t.json"
    before = teacher.read_bytes()
    assert_user_error(capsys, ["simulate", "--n", "100", "--use-teacher", str(teacher), "--out", str(simulated / "s2.npz"),
                               "--teacher", str(teacher)], "same file as --use-teacher")
    assert teacher.read_bytes() == before
    assert_user_error(capsys, ["simulate", "--n", "100", "--mixture-components", "5",
                               "--out", str(simulated / "mix.npz")], "--distribution mixture")
    assert not (simulated / "m.json").exists() and not (simulated / "mix.npz").exists()


def test_simulate_checks_the_teacher_path_before_writing_samples(capsys, tmp_path):
    (tmp_path / "a_file").write_text("")
    assert_user_error(capsys, ["simulate", "--n", "100", "--out", str(tmp_path / "s.npz"),
                               "--teacher", str(tmp_path / "a_file" / "t.json")], "--teacher")
    assert not (tmp_path / "s.npz").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # no temporary files either


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".csv"])
def test_simulate_refuses_sizes_beyond_the_disk_before_sampling(capsys, tmp_path, suffix):
    line = assert_user_error(capsys, ["simulate", "--n", "1e15", "--out", str(tmp_path / f"s{suffix}")], "--n")
    assert "PiB" in line and "free" in line  # 1e15 rows x 11 columns: no disk holds that
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_gradient_descent_refuses_a_huge_width_before_allocating(capsys, simulated):
    line = assert_user_error(capsys, ["fit", str(simulated / "s.npz"), "--learner", "gradient-descent",
                                      "-k", "1000000", "--out", str(simulated / "m.json")], "n_hidden=1000000")
    assert "MiB" in line and "jacobian_memory" in line


def test_malformed_model_and_data_files_are_one_line(capsys, simulated):
    doc = json.loads((simulated / "t.json").read_text())
    ragged = dict(doc, hidden_weights=[[1.0, 2.0], [3.0]])
    (simulated / "ragged.json").write_text(json.dumps(ragged))
    assert_user_error(capsys, ["evaluate", str(simulated / "ragged.json"), "--teacher", str(simulated / "t.json")],
                      "hidden_weights must be an array of real numbers")
    no_a = {k: v for k, v in doc.items() if k != "output_weights"}
    (simulated / "no_a.json").write_text(json.dumps(no_a))
    assert_user_error(capsys, ["evaluate", str(simulated / "no_a.json"), "--teacher", str(simulated / "t.json")],
                      "lacks output_weights")
    hw = {"format": "nnrecover.HiddenWeights/1", "hidden_weights": [[1.0], [2.0, 3.0]]}
    (simulated / "hw.json").write_text(json.dumps(hw))
    assert_user_error(capsys, ["evaluate", str(simulated / "hw.json"), "--teacher", str(simulated / "t.json")],
                      "hidden_weights in hw.json")
    # a .npz member whose header promises 10^12 doubles: reported, not allocated (was a MemoryError)
    import io as _stdio
    import zipfile

    header = _stdio.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)})
    net = nr.TwoLayerNetwork.load(simulated / "t.json")
    net.save(simulated / "m.npz")
    with zipfile.ZipFile(simulated / "m.npz") as zin, zipfile.ZipFile(simulated / "big.npz", "w") as zout:
        for info in zin.infolist():
            body = zin.read(info)
            zout.writestr(info.filename, header.getvalue() + b"\0" * 64 if info.filename == "hidden_weights.npy" else body)
    line = assert_user_error(capsys, ["evaluate", str(simulated / "big.npz"), "--teacher", str(simulated / "t.json")],
                             "truncated or corrupt")
    assert "(1000000, 1000000)" in line and "TiB" in line
    # a truncated .npy data file is truncated, not "needs pickle"
    X, Y = nr.io.load_samples(simulated / "s.npz")
    nr.io.save_samples(simulated / "full.npy", X, Y)
    raw = (simulated / "full.npy").read_bytes()
    (simulated / "cut.npy").write_bytes(raw[: len(raw) // 2])
    line = assert_user_error(capsys, ["fit", str(simulated / "cut.npy"), "--learner", "gradient-descent", "-k", "2",
                                      "--out", str(simulated / "m2.json")], "truncated or corrupt")
    assert "pickle" not in line


def test_time_budget_stops_gradient_descent_and_says_so(capsys, simulated):
    diag = simulated / "diag.json"
    rc, out, err = run(capsys, "fit", str(simulated / "s.npz"), "--learner", "gradient-descent", "-k", "2",
                       "--option", "n_restarts=4", "--option", "time_budget=0", "--seed", "0",
                       "--out", str(simulated / "m.json"), "--diagnostics", str(diag))
    assert rc == 0, err
    warning = [line for line in err.splitlines() if "time_budget" in line]
    assert len(warning) == 1 and warning[0].startswith("nnrecover: warning: ")
    assert "after 1 of 4 restarts" in warning[0] and "TimeBudgetWarning" in warning[0]
    budget = json.loads(diag.read_text())["time_budget"]
    assert budget == {"seconds": 0.0, "restarts_run": 1, "restarts_requested": 4, "exhausted": True,
                      "interrupted": True}


def test_demo_time_budget_reaches_gradient_descent(capsys, tmp_path):
    rc, out, err = run(capsys, "demo", "--quick", "--n-samples", "2000", "--learner", "gradient-descent", "-d", "3",
                       "-k", "2", "-p", "1", "--time-budget", "0", "--out", str(tmp_path))
    assert rc == 0, err
    assert "stopped at the time budget of 0 s after 1 of" in out
    assert "TimeBudgetWarning" in err


def _wait_for(predicate, timeout=60.0):
    import time

    t0 = time.monotonic()
    while not predicate():
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out")
        time.sleep(0.005)


@pytest.mark.parametrize("signal_name, suffix", [("SIGKILL", ".npy"), ("SIGTERM", ".csv")])
def test_a_killed_simulate_leaves_the_previous_file(tmp_path, signal_name, suffix):
    # the samples go to a hidden temporary file renamed into place only when complete, so a kill at
    # any moment leaves the previous file byte for byte (a partly written .npy used to read as complete,
    # its unwritten rows zeros); SIGTERM also removes the temporary file
    import signal

    out = tmp_path / f"s{suffix}"
    old = b"previous content"
    out.write_bytes(old)
    proc = subprocess.Popen([sys.executable, "-m", "nnrecover", "simulate", "--n", "3000000", "-d", "20",
                             "--seed", "0", "--out", str(out), "--teacher", str(tmp_path / "t.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    def writing():  # the temporary file has data in it: the kill lands in the middle of the write
        for p in tmp_path.iterdir():
            if p.name.startswith(f".{out.name}.part-"):
                try:
                    return p.stat().st_size > 0
                except FileNotFoundError:  # renamed into place meanwhile
                    return False
        return False

    _wait_for(lambda: writing() or proc.poll() is not None)
    proc.send_signal(getattr(signal, signal_name))
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:  # finished before the signal arrived: then the file is complete
        X, _ = nr.io.load_samples(out)
        assert X.shape == (3_000_000, 20)
        return
    assert out.read_bytes() == old
    assert not (tmp_path / "t.json").exists()
    if signal_name == "SIGTERM":
        assert proc.returncode == 143 and err.decode().strip().splitlines() == [
            "nnrecover: error: terminated; output files were left as they were"]
        assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


def test_extract_error_in_a_log_file_is_one_clean_line(tmp_path):
    """stderr redirected to a file (a log, CI): no progress-bar frames, so the error line stands alone."""
    (tmp_path / "box_for_log.py").write_text(
        "import nnrecover as nr\nnet = nr.random_network(6, 4, rng=0, bias_range=(-1, 1))\n"
        "def f(X):\n    return net.predict(X)\n")
    log = tmp_path / "stderr.log"
    with open(log, "w") as err:
        res = subprocess.run([sys.executable, "-m", "nnrecover", "extract", "box_for_log:f", "--inputs", "6",
                              "--max-queries", "300", "--out", str(tmp_path / "net.json")],
                             stdout=subprocess.PIPE, stderr=err, text=True, timeout=300, cwd=tmp_path,
                             env={**__import__("os").environ, "PYTHONPATH": str(tmp_path)})
    assert res.returncode == 2
    text = log.read_text()
    assert "\r" not in text
    lines = text.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nnrecover: error:"), text
