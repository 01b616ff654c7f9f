"""nr.check says "yes" only where the learner then fits: every verdict comes from the learner's own refusal
conditions, and every learner name a message suggests is one `nnrecover fit --learner` accepts.

Sizes: d = 10 inputs, 4 hidden units, 40,000 rows (60,000 for the one-output teacher, whose width is read
from the Hermite matrices T_2; 120 for the few-rows case). The provable learners fit these noiseless
in-model data to round-off, so a "yes" is checked by a relative error below 1e-6 (1e-2 with label noise
0.01, the noise-to-signal ratio of the labels); gradient-descent (no guarantee) and the 120-row fits are
checked to run without refusing.
"""

from __future__ import annotations

import ast
import functools
import importlib
import pathlib
import re
import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.errors import AssumptionError, InputError, NNRecoverError
from nnrecover.learners import make_learner

G = nr.distributions.StandardGaussian
N = 40_000
#: fast options for the baseline: it is checked to accept the data, not for accuracy
FAST = {"gradient-descent": {"n_restarts": 1, "max_iter": 20, "max_samples": 4000}}


def _one_output():
    t = nr.random_network(10, 4, 1, rng=0)
    return nr.sample(t, G(10), 60_000, rng=1)


def _vector_output(noise=0.0):
    t = nr.random_network(10, 4, 6, rng=0)
    return nr.sample(t, G(10), N, rng=1, noise=noise)


def _constant_column(value):
    t = nr.random_network(10, 4, 6, rng=0)
    X, _ = nr.sample(t, G(10), N, rng=1)
    X[:, 3] = value
    return X, t.predict(X)


def _wider_than_inputs():
    t = nr.random_network(5, 8, 10, rng=0)
    return nr.sample(t, G(5), N, rng=1)


def _non_symmetric():
    t = nr.random_network(10, 4, 6, rng=0)
    X = np.random.default_rng(2).exponential(size=(N, 10)) - 1.0  # mean 0, variance 1, skewed
    return X, t.predict(X)


def _uniform():
    t = nr.random_network(10, 4, 6, rng=0)
    X = np.random.default_rng(3).uniform(-np.sqrt(3), np.sqrt(3), (N, 10))  # symmetric, not Gaussian
    return X, t.predict(X)


def _few_rows():
    t = nr.random_network(10, 4, 6, rng=0)
    return nr.sample(t, G(10), 120, rng=1)


def _fewer_outputs_than_units():
    t = nr.random_network(10, 4, 2, rng=0)
    return nr.sample(t, G(10), N, rng=1)


CASES = {"one-output": _one_output, "vector-output": _vector_output,
         "vector-output-noisy": functools.partial(_vector_output, noise=0.01),
         "constant-column-1": functools.partial(_constant_column, 1.0),
         "constant-column-0": functools.partial(_constant_column, 0.0),
         "k-greater-than-d": _wider_than_inputs, "non-symmetric": _non_symmetric, "uniform": _uniform,
         "fewer-outputs-than-units": _fewer_outputs_than_units, "few-rows": _few_rows}
#: the largest relative error a "yes" may end with (None: fitting without a refusal is the claim; 120 rows
#: are enough for the learners to run, not for round-off)
TOLERANCE = {"vector-output-noisy": 1e-2, "few-rows": None}


@functools.lru_cache(maxsize=None)
def data_and_report(case: str):
    X, Y = CASES[case]()
    return X, Y, nr.check(X, Y, random_state=0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_yes_fits(case):
    X, Y, report = data_and_report(case)
    yes = [v.learner for v in report.verdicts if v.applies == "yes"]
    assert "gradient-descent" in yes
    k = report.width["estimate"]
    tol = TOLERANCE.get(case, 1e-6)
    rows = slice(0, 5000)  # scored on rows of the fit: the claim is about the data check judged
    for name in yes:
        est = make_learner(name, k, FAST.get(name, {}), random_state=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                est.fit(X, Y)
            except NNRecoverError as exc:  # a refusal where check said yes is the defect under test
                pytest.fail(f"{case}: check said {name} applies, but its fit raised {type(exc).__name__}: {exc}")
        P = np.asarray(est.predict(X[rows]))
        assert np.all(np.isfinite(P))
        if name == "gradient-descent" or tol is None:
            continue
        P = P.reshape(len(P), -1)
        T = Y[rows].reshape(len(P), -1)
        rel = np.linalg.norm(P - T) / np.linalg.norm(T - T.mean(axis=0))
        assert rel < tol, (case, name, rel)


def test_the_datasets_cover_each_provable_learner_saying_yes():
    said_yes = {v.learner for case in CASES for v in data_and_report(case)[2].verdicts if v.applies == "yes"}
    assert {"hermite-tensor", "exact-relu", "bakshi2019-noisy", "pure-neuron"} <= said_yes


def test_one_output_teacher_rules_out_both_bakshi_learners_as_they_refuse():
    X, Y, report = data_and_report("one-output")
    assert report.width["estimate"] == 4 and report.width["sure"]
    assert report.verdict("hermite-tensor").applies == "yes"
    for name in ("exact-relu", "bakshi2019-noisy"):
        verdict = report.verdict(name)
        assert verdict.applies == "no"
        assert any("at least as many outputs as hidden units" in r and "1 output" in r for r in verdict.reasons)
        with pytest.raises(AssumptionError, match="at least as many outputs as hidden units .* 1 output"):
            make_learner(name, 4, random_state=0).fit(X, Y)


def test_too_few_rows_for_bakshi_is_a_no_with_the_learners_own_count():
    t = nr.random_network(10, 4, 6, rng=0)
    X, Y = nr.sample(t, G(10), 140, rng=1)
    report = nr.check(X, Y, random_state=0)
    verdict = report.verdict("exact-relu")
    assert report.width["estimate"] == 4 and verdict.applies == "no"
    assert any("needs at least 144 rows" in r for r in verdict.reasons), verdict.reasons
    assert report.verdict("bakshi2019-noisy").applies != "no"  # its sign step holds out fewer rows
    with pytest.raises(InputError, match="needs at least 144 rows with 10 inputs and 4 hidden units"):
        make_learner("exact-relu", 4, random_state=0).fit(X, Y)


def test_fewer_outputs_than_units_rules_out_bakshi_and_ge():
    _, _, report = data_and_report("fewer-outputs-than-units")
    for name in ("exact-relu", "bakshi2019-noisy", "pure-neuron", "hermite-tensor"):
        assert report.verdict(name).applies == "no", name


def test_a_constant_non_zero_column_is_reported_and_rules_out_the_symmetric_and_gaussian_learners():
    X, Y, report = data_and_report("constant-column-1")
    assert report.evidence["constant_columns"] == [3] and report.evidence["constant_values"] == [1.0]
    assert "x_3 = 1" in str(report) and not report.symmetric
    for name in ("pure-neuron", "exact-relu", "bakshi2019-noisy", "hermite-tensor", "goel2019"):
        assert report.verdict(name).applies == "no", name
    assert any("x_3" in r and "constant" in r for r in report.verdict("pure-neuron").reasons)
    assert any("drop the constant" in r for r in report.verdict("hermite-tensor").reasons)
    # the learner refuses too, by its own symmetry test: x and -x differ in law (a fit would be far off)
    with pytest.raises(AssumptionError, match="x_3 .* constant and non-zero"):
        nr.learners.PureNeuronLearner(4, random_state=0).fit(X, Y)


def test_a_zero_column_rules_out_the_symmetric_learner_by_its_singular_second_moment():
    X, Y, report = data_and_report("constant-column-0")
    assert report.evidence["constant_columns"] == [3] and report.symmetric
    verdict = report.verdict("pure-neuron")
    assert verdict.applies == "no" and any("singular" in r for r in verdict.reasons)
    with pytest.raises(InputError, match="singular"):
        nr.learners.PureNeuronLearner(4, random_state=0).fit(X, Y)


def test_the_symmetry_test_refuses_a_constant_column_that_is_not_exact_in_binary():
    # 0.3 is not a binary fraction: the column's variance from sums is a few ulps, not 0
    from nnrecover.learners.ge2019 import symmetry_test

    X = np.random.default_rng(0).standard_normal((5000, 4))
    X[:, 1] = 0.3
    test = symmetry_test(X)
    assert test.p_value == 0.0 and test.constant_inputs == (1,)
    X[:, 1] = np.random.default_rng(1).standard_normal(5000)
    assert symmetry_test(X).p_value > 1e-3


def test_wider_than_inputs_rules_out_the_order_one_learners():
    _, _, report = data_and_report("k-greater-than-d")
    assert report.width["estimate"] == 8
    for name in ("exact-relu", "bakshi2019-noisy", "pure-neuron"):
        verdict = report.verdict(name)
        assert verdict.applies == "no" and any("as many inputs as hidden units" in r for r in verdict.reasons)


# ------------------------------------------------------------------------------- suggested learner names
_VERB = re.compile(r"\b(?:use|try|fit|--learner|learner)\s+(?:the\s+)?`?([A-Za-z_][\w.\-]*\w)")
_TOKEN = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9.]+)+")


def _message_strings(tree):
    """String constants (f-strings with their holes as {}) of a module, without docstrings, the registry's
    and the experiments' own definitions, and name comparisons."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))
        name = getattr(getattr(node, "func", None), "id", getattr(getattr(node, "func", None), "attr", None))
        if (isinstance(node, ast.Call) and name in ("register", "experiment")) or isinstance(node, ast.Compare):
            skip.update(id(n) for n in ast.walk(node))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
            yield node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.lineno, node.value


def _suggested_names():
    from nnrecover.learners import available

    records = available()
    names = {r.name for r in records}
    targets = {getattr(r.target, "__name__", None) for r in records} - {None}
    root = pathlib.Path(nr.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        for line, text in _message_strings(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(root)}:{line}"
            found += [(where, w) for w in _VERB.findall(text)
                      if w in names or w in targets or w.startswith("nnrecover.")]
            found += [(where, t) for t in _TOKEN.findall(text) if t in names]
    for rec in records:  # the registry's own texts
        for text in (rec.description, *rec.assumptions):
            found += [(f"registry {rec.name}", w) for w in _VERB.findall(text) if w in names or w in targets]
    return found


def test_every_learner_name_a_message_suggests_is_accepted_by_fit():
    from nnrecover.learners import get_learner

    found = _suggested_names()
    assert any(w == "hermite-tensor" for _, w in found)  # the scan sees the messages (e.g. Bakshi's refusal)
    bad = []
    for where, word in found:
        if word.startswith("nnrecover."):
            # a Python function named in full, for Python callers: it must exist
            module, _, attr = word.rpartition(".")
            if not hasattr(importlib.import_module(module), attr):
                bad.append((where, word, "no such Python function"))
            continue
        try:
            get_learner(word)
        except InputError as exc:
            bad.append((where, word, str(exc)[:80]))
    assert not bad, bad


def test_fit_refuses_a_registered_function_by_saying_where_it_lives(tmp_path, capsys):
    from nnrecover.cli import main

    X, Y = nr.sample(nr.random_network(4, 2, 3, rng=0), G(4), 200, rng=1)
    np.savez(tmp_path / "d.npz", X=X, Y=Y)
    assert main(["fit", str(tmp_path / "d.npz"), "--learner", "bakshi2019-algorithm7", "-k", "2",
                 "--out", str(tmp_path / "m.json")]) != 0
    err = capsys.readouterr().err
    assert "nnrecover.learners.bakshi2019.algorithm7" in err and "not a learner that fit can run" in err


def test_auto_width_names_the_constant_column_it_cannot_read_the_width_through():
    t = nr.random_network(10, 4, 1, rng=0)
    X, _ = nr.sample(t, G(10), 20_000, rng=1)
    X[:, 3] = 1.0
    with pytest.raises(InputError, match=r"constant input column\(s\) x_3"):
        nr.learners.HermiteTensorLearner("auto").fit(X, t.predict(X))


def test_a_target_without_hidden_units_gets_no_yes_and_no_width_zero_command():
    # labels independent of the inputs: no singular value of T_2 stands out, the width estimate is 0
    gen = np.random.default_rng(0)
    X = gen.standard_normal((20_000, 6))
    report = nr.check(X, gen.standard_normal(20_000), random_state=0)
    assert report.width["estimate"] == 0
    for v in report.verdicts:
        assert v.applies != "yes" or v.paper == "baseline", (v.learner, v.reasons)
        assert v.command is None or "-k 0" not in v.command
