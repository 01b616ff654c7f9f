"""Tests of the experiment runner, the learner helpers and the learner comparison behind the demo."""

from __future__ import annotations

import json
import shlex
import platform
import warnings

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

import nnrecover as nr
from nnrecover.errors import AssumptionError, CertificateWarning, ConvergenceError, InputError
from nnrecover.experiments import registry
from nnrecover.experiments.compare import _learner_seed, compare_learners, comparison_figure, demo_teacher
from nnrecover.experiments.runner import RESULT_FILES, resolve_seed, run_experiment
from nnrecover.learners import learner_parameters, make_learner
from nnrecover.learners import registry as learner_registry

# ------------------------------------------------------------------------------------------ runner
TOY = "test-toy-experiment"


def _toy(*, rng, quick=False, n=5, scale=1.0):
    """Toy experiment: n normal draws times scale."""
    values = scale * rng.standard_normal(n if not quick else 2)
    df = pd.DataFrame({"i": np.arange(values.size), "value": values})
    fig = Figure()
    fig.subplots().plot(df["i"], df["value"])
    return df, fig


@pytest.fixture
def toy(monkeypatch):
    rec = registry.ExperimentRecord(TOY, _toy, "baseline", "toy experiment for the tests")
    monkeypatch.setitem(registry._EXPERIMENTS, TOY, rec)
    return rec


def test_runner_writes_three_files_with_metadata(toy, tmp_path):
    df = run_experiment(TOY, tmp_path / "a" / "b", rng=11, n=4, scale=2.0)
    out = tmp_path / "a" / "b"
    assert sorted(p.name for p in out.iterdir()) == sorted(RESULT_FILES)
    assert (out / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv"), df)
    # the values are the experiment's draws from default_rng(seed): nothing else consumed the stream
    assert np.array_equal(df["value"].to_numpy(), 2.0 * np.random.default_rng(11).standard_normal(4))
    meta = json.loads((out / "metadata.json").read_text())
    for key in ("experiment", "paper", "description", "quick", "seed", "options", "started_at_utc",
                "finished_at_utc", "wall_time_s", "n_rows", "columns", "files", "command", "python",
                "platform", "cpu_count", "versions"):
        assert key in meta, key
    assert meta["experiment"] == TOY and meta["seed"] == 11 and meta["quick"] is False
    assert meta["options"] == {"n": 4, "scale": 2.0} and meta["n_rows"] == 4 and meta["columns"] == ["i", "value"]
    assert meta["wall_time_s"] >= 0 and meta["started_at_utc"] <= meta["finished_at_utc"]
    # the command replays the run, into the same folder
    assert meta["command"] == (f"nnrecover experiment {TOY} --seed 11 --out {shlex.quote(str(out))} --option n=4 "
                               "--option scale=2.0")
    for pkg in ("numpy", "scipy", "scikit-learn", "tensorly", "dask", "pandas", "matplotlib", "nnrecover"):
        assert meta["versions"][pkg], pkg
    assert meta["versions"]["numpy"] == np.__version__
    text = (out / "metadata.json").read_text()
    assert platform.node() not in text and "host" not in text


def test_runner_seed_is_recorded_and_replays(toy, tmp_path):
    df1 = run_experiment(TOY, tmp_path / "1", quick=True)  # fresh entropy
    seed = json.loads((tmp_path / "1" / "metadata.json").read_text())["seed"]
    assert isinstance(seed, int) and seed >= 0
    df2 = run_experiment(TOY, tmp_path / "2", quick=True, rng=seed)
    pd.testing.assert_frame_equal(df1, df2)
    # a Generator contributes one draw, recorded as the seed
    gen = np.random.default_rng(3)
    df3 = run_experiment(TOY, tmp_path / "3", rng=gen)
    seed3 = json.loads((tmp_path / "3" / "metadata.json").read_text())["seed"]
    assert seed3 == int(np.random.default_rng(3).integers(0, 2**63 - 1))
    pd.testing.assert_frame_equal(df3, run_experiment(TOY, tmp_path / "4", rng=seed3))


def test_runner_errors(toy, tmp_path, monkeypatch):
    with pytest.raises(InputError, match="unknown option\\(s\\) speed for experiment"):
        run_experiment(TOY, tmp_path, speed=2)
    with pytest.raises(InputError, match="unknown experiment 'nope'"):
        run_experiment("nope", tmp_path)
    (tmp_path / "file").write_text("")
    with pytest.raises(InputError, match="existing file"):
        run_experiment(TOY, tmp_path / "file")
    with pytest.raises(InputError, match="non-negative"):
        run_experiment(TOY, tmp_path, rng=-1)
    bad = registry.ExperimentRecord("test-bad", lambda *, rng, quick: pd.DataFrame(), "baseline", "bad")
    monkeypatch.setitem(registry._EXPERIMENTS, "test-bad", bad)
    with pytest.raises(TypeError, match="must return"):
        run_experiment("test-bad", tmp_path / "bad")


def test_resolve_seed():
    assert resolve_seed(5) == 5 and resolve_seed(np.int64(5)) == 5
    assert resolve_seed(None) != resolve_seed(None)  # fresh 128-bit entropy
    for bad in (-1, 1.5, "3", True):
        with pytest.raises(InputError):
            resolve_seed(bad)


def test_registered_experiments_are_listed():
    names = {r.name for r in nr.experiments.available_experiments()}
    assert {"baseline-gd", "compare-learners"} <= names
    rec = nr.experiments.get_experiment("baseline-gd")
    assert rec.paper == "baseline" and rec.description.startswith("gradient-descent baseline")
    with pytest.raises(ValueError, match="unknown paper key 'nope'"):
        registry.experiment("test-x", paper="nope")
    with pytest.raises(ValueError, match="registered twice"):
        registry.experiment("baseline-gd")(lambda *, rng, quick: None)


# ------------------------------------------------------------------------------------------ learner helpers
class _Plain:
    def __init__(self, n_hidden, alpha=1.0, *, random_state=None, activation="relu"):
        self.n_hidden, self.alpha, self.random_state, self.activation = n_hidden, alpha, random_state, activation


def test_learner_parameters_and_make_learner():
    from sklearn.base import BaseEstimator

    class Sk(BaseEstimator):
        def __init__(self, n_hidden=2, tol=1e-6, random_state=None):
            self.n_hidden, self.tol, self.random_state = n_hidden, tol, random_state

    assert learner_parameters(_Plain) == {"alpha", "random_state", "activation"}
    assert learner_parameters(Sk) == {"tol", "random_state"}
    est = make_learner(_Plain, 3, {"alpha": 2.0}, random_state=7, defaults={"activation": "step", "budget": 1})
    assert (est.n_hidden, est.alpha, est.random_state, est.activation) == (3, 2.0, 7, "step")
    est = make_learner(_Plain, 3, {"random_state": 1, "activation": "relu"}, random_state=7,
                       defaults={"activation": "step"})
    assert (est.random_state, est.activation) == (1, "relu")  # explicit options win
    with pytest.raises(InputError, match="unknown option\\(s\\) beta for learner '_Plain'; its options are: "
                                         "activation, alpha, random_state"):
        make_learner(_Plain, 3, {"beta": 1})
    with pytest.raises(InputError, match="unknown learner 'no-such'"):
        make_learner("no-such", 3)


# ------------------------------------------------------------------------------------------ comparison
class _Oracle:
    """Returns the teacher with output weights scaled by (1 + eps): known errors.

    With c = 0 the function error is ||(1+eps) f - f|| / ||f|| = eps, and after canonicalisation (rows
    already unit norm) the only parameter difference is eps * a_i, so max_unit_error = eps * max_i ||a_i||.
    """

    teacher = None
    seen: list = []

    def __init__(self, n_hidden, *, eps=0.0, random_state=None, mode="ok"):
        self.n_hidden, self.eps, self.random_state, self.mode = n_hidden, eps, random_state, mode

    applies_to = None

    def fit(self, X, Y=None):
        if self.mode == "assume":
            raise AssumptionError("oracle: needs p >= k outputs (test assumption).")
        if self.mode == "diverge":
            raise ConvergenceError("oracle: did not converge in 0 iterations.")
        n = sum(x.shape[0] for x, _ in X)  # a re-iterable stream of chunks
        type(self).seen.append((self.random_state, n))
        t = self.teacher
        self.network_ = nr.TwoLayerNetwork(t.hidden_weights, t.hidden_bias, (1 + self.eps) * t.output_weights,
                                           t.output_bias, t.activation)
        self.hidden_weights_ = t.hidden_weights
        self.diagnostics_ = {"n_samples": n}
        return self


class _NotForMe(_Oracle):
    @staticmethod
    def applies_to(network, distribution):
        return False, "needs step activation"


@pytest.fixture
def oracles(monkeypatch):
    _Oracle.seen = []
    for name, cls in (("test-oracle", _Oracle), ("test-oracle-2", _Oracle), ("test-not-for-me", _NotForMe)):
        monkeypatch.setitem(learner_registry._RECORDS, name,
                            learner_registry.AlgorithmRecord(name, "baseline", "oracle", (), cls, "", True))


def test_compare_learners_reports_exact_errors(oracles):
    teacher, dist = demo_teacher(0, n_inputs=6, n_hidden=3, n_outputs=2, bias=0.2)
    _Oracle.teacher = teacher
    eps = 0.01
    df = compare_learners(teacher, dist, 5000, rng=1, learners=["test-oracle", "test-not-for-me"],
                          learner_options={"test-oracle": {"eps": eps}}, chunk_size=999, eval_samples=2000)
    assert list(df.columns) == ["learner", "paper", "algorithm", "refine", "status", "max_unit_error",
                                "max_angle", "function_error", "fit_time_s", "n_samples", "outputs",
                                "certificates", "width"]
    assert list(df["certificates"]) == ["-", "-"]  # the oracle checks nothing; the other did not run
    assert df["width"].iloc[0] == 3 and np.isnan(df["width"].iloc[1])  # the units returned; none when not run
    ok = df.iloc[0]
    assert ok["status"] == "ok" and ok["n_samples"] == 5000 and _Oracle.seen[0][1] == 5000
    a_norm = np.linalg.norm(teacher.output_weights, axis=0).max()
    assert ok["max_unit_error"] == pytest.approx(eps * a_norm, rel=1e-9)
    assert ok["function_error"] == pytest.approx(eps, rel=1e-9)
    assert ok["max_angle"] == pytest.approx(0.0, abs=1e-7)  # arccos of 1 - O(1e-16)
    skipped = df.iloc[1]
    assert skipped["status"] == "not applicable: needs step activation" and np.isnan(skipped["fit_time_s"])
    assert np.isnan(skipped["max_unit_error"])
    fig = comparison_figure(df, title="t")
    assert isinstance(fig, Figure)
    # the not-applicable learner is the last row and has no bar: its slot, label and note stay inside
    # the axes (they fell under the x tick labels)
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    assert lo < -0.4 and hi > len(df) - 0.6
    assert [t.get_text() for t in ax.get_yticklabels()][-1] == "test-not-for-me"


def test_single_output_learner_gets_the_first_output(oracles, monkeypatch):
    # a learner declaring max_outputs = 1 sees Y[:, 0] and is compared with the teacher restricted to
    # output 0; the oracle returns exactly that restricted teacher, so both errors are exactly zero
    teacher, dist = demo_teacher(2, n_inputs=5, n_hidden=2, n_outputs=3)

    class Single(_Oracle):
        max_outputs = 1

        def fit(self, X, Y=None):
            shapes = {np.shape(y)[1:] for _, y in X}
            assert shapes == {()}, shapes  # one output: 1-D target chunks
            super().fit(X)
            t = self.teacher
            self.network_ = nr.TwoLayerNetwork(t.hidden_weights, t.hidden_bias, t.output_weights[:1],
                                               t.output_bias[:1], t.activation)
            return self

    Single.teacher = _Oracle.teacher = teacher
    monkeypatch.setitem(learner_registry._RECORDS, "test-single",
                        learner_registry.AlgorithmRecord("test-single", "baseline", "oracle", (), Single, "", True))
    df = compare_learners(teacher, dist, 300, rng=0, learners=["test-single", "test-oracle"])
    assert list(df["outputs"]) == [1, 3] and list(df["status"]) == ["ok", "ok"]
    assert df["max_unit_error"][0] == 0.0 and df["function_error"][0] == 0.0
    assert df["max_unit_error"][1] == 0.0 and df["function_error"][1] == 0.0
    # the same through the max_outputs argument, for a class that does not declare it
    monkeypatch.delattr(Single, "max_outputs")
    df = compare_learners(teacher, dist, 300, rng=0, learners=["test-single"], max_outputs={"test-single": 1})
    assert list(df["outputs"]) == [1] and df["function_error"][0] == 0.0


class _Refining(_Oracle):
    """Oracle whose unrefined estimate is off by eps in the output weights and refined one is exact."""

    def __init__(self, n_hidden, *, refine=True, random_state=None):
        super().__init__(n_hidden, eps=0.0 if refine else 0.02, random_state=random_state)
        self.refine = refine


def test_with_unrefined_adds_a_refine_false_row(oracles, monkeypatch):
    teacher, dist = demo_teacher(1, n_inputs=5, n_hidden=2, n_outputs=1)
    _Oracle.teacher = teacher
    monkeypatch.setitem(learner_registry._RECORDS, "test-refining",
                        learner_registry.AlgorithmRecord("test-refining", "baseline", "oracle", (), _Refining, "", True))
    df = compare_learners(teacher, dist, 200, rng=0, learners=["test-refining", "test-oracle"], with_unrefined=True)
    assert list(zip(df["learner"], df["refine"])) == [("test-refining", "no"), ("test-refining", "yes"),
                                                     ("test-oracle", "-")]
    assert df["function_error"][0] == pytest.approx(0.02, rel=1e-9) and df["function_error"][1] == 0.0
    assert _Oracle.seen[0][0] == _Oracle.seen[1][0]  # both variants start from the same random_state
    # an explicit refine option is respected: one row
    df = compare_learners(teacher, dist, 200, rng=0, learners=["test-refining"], with_unrefined=True,
                          learner_options={"test-refining": {"refine": False}})
    assert list(df["refine"]) == ["no"]


def test_baseline_gd_quick(tmp_path):
    df = run_experiment("baseline-gd", tmp_path, quick=True, rng=0)
    assert list(df["n_samples"]) == [500, 2000] and set(df["trial"]) == {0}
    assert {"max_unit_error", "function_error", "fit_time_s"} <= set(df.columns)
    # label noise 0.05: the fit cannot be exact, and it cannot be worse than predicting zero by much
    assert (df["function_error"] > 0).all() and (df["function_error"] < 1).all()
    meta = json.loads((tmp_path / "metadata.json").read_text())
    assert meta["experiment"] == "baseline-gd" and meta["quick"] is True


def test_compare_learners_refusals_and_failures(oracles):
    teacher, dist = demo_teacher(0, n_inputs=4, n_hidden=2, n_outputs=1)
    _Oracle.teacher = teacher
    df = compare_learners(teacher, dist, 100, rng=0, learners=["test-oracle", "test-oracle-2"],
                          learner_options={"test-oracle": {"mode": "assume"}, "test-oracle-2": {"mode": "diverge"}})
    assert df["status"][0] == "not applicable: oracle: needs p >= k outputs (test assumption)."
    assert df["status"][1] == "failed (ConvergenceError): oracle: did not converge in 0 iterations."
    assert df[["max_unit_error", "function_error"]].isna().all().all()
    with pytest.raises(InputError, match="unknown learner\\(s\\) nope"):
        compare_learners(teacher, dist, 100, learners=["nope"])
    with pytest.raises(InputError, match="not being run"):
        compare_learners(teacher, dist, 100, learners=["test-oracle"], learner_options={"test-oracle-2": {}})
    with pytest.raises(InputError, match="unknown option\\(s\\) lr"):
        compare_learners(teacher, dist, 100, learners=["test-oracle"], learner_options={"test-oracle": {"lr": 1}})


class _Certifying(_Oracle):
    """Oracle that records a certificate (mode "pass" / "fail") or warns that one failed ("warn")."""

    def fit(self, X, Y=None):
        super().fit(X)
        if self.mode == "warn":
            warnings.warn("oracle: residual check failed", CertificateWarning)
        else:
            self.diagnostics_["certificates"] = {"residual": {"passed": self.mode == "pass", "detail": "r"}}
        return self


def test_certificate_outcomes_are_reported(oracles, monkeypatch):
    teacher, dist = demo_teacher(0, n_inputs=4, n_hidden=2, n_outputs=1)
    _Oracle.teacher = teacher
    monkeypatch.setitem(learner_registry._RECORDS, "test-certifying",
                        learner_registry.AlgorithmRecord("test-certifying", "baseline", "oracle", (), _Certifying, "", True))

    def outcome(mode):
        return compare_learners(teacher, dist, 100, rng=0, learners=["test-certifying"],
                                learner_options={"test-certifying": {"mode": mode}})["certificates"][0]

    assert outcome("pass") == "passed"
    assert outcome("fail") == "failed"
    # a CertificateWarning marks the row and is still passed on to the caller (the CLI prints it)
    with pytest.warns(CertificateWarning, match="residual check failed"):
        assert outcome("warn") == "failed"


def test_learner_seeds_do_not_depend_on_other_learners(oracles):
    teacher, dist = demo_teacher(0, n_inputs=4, n_hidden=2, n_outputs=1)
    _Oracle.teacher = teacher
    compare_learners(teacher, dist, 100, rng=4, learners=["test-oracle"])
    compare_learners(teacher, dist, 100, rng=4, learners=["test-oracle-2", "test-oracle"])
    (s1, _), (s2, _), (s3, _) = _Oracle.seen
    assert s1 == s3 != s2
    assert _learner_seed(5, "a") == _learner_seed(5, "a") != _learner_seed(5, "b")


def test_demo_teacher():
    net, dist = demo_teacher(3)
    assert (net.n_inputs, net.n_hidden, net.n_outputs) == (10, 4, 4) and dist.dim == 10
    assert np.allclose(np.linalg.norm(net.hidden_weights, axis=1), 1.0, atol=1e-15)
    assert np.all(np.abs(net.hidden_bias) <= 0.1) and not np.any(net.output_bias)
    assert net == demo_teacher(3)[0]
    with pytest.raises(InputError, match="bias"):
        demo_teacher(0, bias=-1)
