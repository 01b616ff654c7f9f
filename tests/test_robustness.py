"""Robustness: malformed input is one nnrecover error (never a traceback, never a silent bad result),
and ``import nnrecover`` stays light.

The property tests feed random malformed arrays and model files to ``nnrecover fit`` / ``nnrecover
evaluate`` (in-process, through :func:`nnrecover.cli.main`) and to :meth:`TwoLayerNetwork.load`, and
assert that each either succeeds with a valid result or fails with exactly one ``nnrecover: error:``
line (CLI) / an :class:`nnrecover.errors.NNRecoverError` (library). Runs are bounded and reproducible
(``derandomize=True``, at most 60 examples each).
"""

from __future__ import annotations

import contextlib
import io as _stdio
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nnrecover as nr
from nnrecover.cli import main
from nnrecover.errors import NNRecoverError
from nnrecover.io import save_samples

PROPERTY = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ------------------------------------------------------------------------------------------ import time
def test_import_does_not_load_heavy_dependencies():
    # scikit-learn (0.5 s), dask and scipy.optimize are imported when a learner or the moment engine is
    # used, never by `import nnrecover`; membership in sys.modules cannot flake like a timing can
    code = ("import sys, time; t = time.perf_counter(); import nnrecover; dt = time.perf_counter() - t; "
            "heavy = [m for m in ('sklearn', 'dask', 'scipy.optimize', 'pandas', 'matplotlib') if m in sys.modules]; "
            "print(repr(heavy)); print(dt)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "[]", out
    assert float(out[1]) < 2.0  # generous (shared 2-core machine); a sklearn import alone took 0.5-2.5 s


def test_not_fitted_error_is_sklearns_and_built_once():
    from sklearn.exceptions import NotFittedError as SkNotFitted

    from nnrecover import errors

    cls = errors.NotFittedError
    assert issubclass(cls, SkNotFitted) and issubclass(cls, errors.NNRecoverError)
    assert errors.NotFittedError is cls and cls.__module__ == "nnrecover.errors"
    from nnrecover.learners import GradientDescentLearner

    try:
        GradientDescentLearner(2).predict(np.zeros((1, 2)))
    except SkNotFitted as exc:
        assert isinstance(exc, cls)
    else:
        raise AssertionError("predict before fit did not raise")


# ------------------------------------------------------------------------------------------ helpers
def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = _stdio.StringIO(), _stdio.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _assert_clean(rc: int, out: str, err: str) -> None:
    """Success, or exactly one `nnrecover: error:` line that is not an internal error."""
    assert "Traceback" not in err and "internal error" not in err, err
    errors = [line for line in err.splitlines() if not line.startswith("nnrecover: warning: ")]
    if rc == 0:
        assert errors == [], err
    else:
        assert rc in (1, 2), (rc, err)
        assert len(errors) == 1 and errors[0].startswith("nnrecover: error: "), err


_FLOATS = st.sampled_from([0.0, 1.0, -2.5, 1e-300, 1e300, 5e-324, 1.7e308, np.nan, np.inf, -np.inf, 3.0])


@st.composite
def _arrays(draw):
    """Arrays of odd shapes, dtypes and values (including NaN, inf, subnormal and huge entries)."""
    ndim = draw(st.sampled_from([0, 1, 2, 2, 2, 3]))
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=ndim, max_size=ndim)))
    kind = draw(st.sampled_from(["float", "int", "bool", "complex", "str", "normal", "normal"]))
    size = int(np.prod(shape)) if shape else 1
    if kind == "normal":
        arr = np.random.default_rng(draw(st.integers(0, 99))).standard_normal(shape)
        scale = draw(st.sampled_from([1.0, 1e-300, 1e300, 1e150, 1e-150]))
        return arr * scale
    if kind == "str":
        return np.array(draw(st.lists(st.text(max_size=3), min_size=size, max_size=size)) or [""]).reshape(shape) \
            if size else np.zeros(shape, dtype="<U1")
    vals = draw(st.lists(_FLOATS, min_size=size, max_size=size))
    arr = np.array(vals, dtype=float).reshape(shape)
    if kind == "int":
        return np.nan_to_num(arr, nan=0, posinf=7, neginf=-7).clip(-1e6, 1e6).astype(np.int64)
    if kind == "bool":
        return arr != 0
    if kind == "complex":
        return arr + 1j
    return arr


# ------------------------------------------------------------------------------------------ fit (CLI)
@st.composite
def _targets_for(draw, X):
    """Targets: unrelated junk, or one value per row of X (then only values and scale are odd)."""
    if draw(st.booleans()) or X.ndim == 0:
        return draw(_arrays())
    n = X.shape[0]
    scale = draw(st.sampled_from([1.0, 1e-300, 1e300, 0.0]))
    return np.random.default_rng(draw(st.integers(0, 99))).standard_normal(n) * scale


@PROPERTY
@given(data=st.data(), suffix=st.sampled_from([".npz", ".npy"]))
def test_fit_on_malformed_arrays_is_one_line_or_a_valid_model(data, suffix):
    X = data.draw(_arrays(), label="X")
    Y = data.draw(_targets_for(X), label="Y")
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / f"d{suffix}"
        if suffix == ".npz":
            np.savez(data, X=X, Y=Y)
        else:
            np.save(data, X)  # a .npy holds [X | Y]: the last column is the target
        model = Path(tmp) / "m.json"
        rc, out, err = _cli("fit", str(data), "--learner", "gradient-descent", "-k", "2", "--seed", "0",
                            "--option", "n_restarts=1", "--option", "max_iter=5", "--out", str(model))
        _assert_clean(rc, out, err)
        if rc == 0:
            net = nr.TwoLayerNetwork.load(model)  # a written model is complete and valid
            assert all(np.all(np.isfinite(a)) for a in net._arrays())
        else:
            assert not model.exists()  # an error writes nothing


# ------------------------------------------------------------------------------------------ model files
def _valid_doc() -> dict:
    return nr.random_network(3, 2, 2, rng=1).to_dict()


_JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**30, 10**30), st.text(max_size=5),
                  st.sampled_from([[], [[]], [[1.0, 2.0], [3.0]], [[1.0, "a"]], [[1e309]], {"a": 1}, [[[1.0]]],
                                   [1.0, 2.0, 3.0], [[0.0] * 3] * 2, "relu", "relu_power(1e308)", "leaky_relu(-1)"]))


@st.composite
def _model_docs(draw):
    """A valid network description with keys removed, replaced by junk, or added."""
    doc = _valid_doc()
    for key in list(doc):
        action = draw(st.sampled_from(["keep", "keep", "drop", "junk"]))
        if action == "drop":
            del doc[key]
        elif action == "junk":
            doc[key] = draw(_JUNK)
    return doc


@PROPERTY
@given(doc=_model_docs())
def test_load_and_evaluate_malformed_json_models(doc):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.json"
        path.write_text(json.dumps(doc))
        try:
            net = nr.TwoLayerNetwork.load(path)
        except NNRecoverError:
            net = None
        if net is not None:
            assert net.hidden_weights.ndim == 2 and all(np.all(np.isfinite(a)) for a in net._arrays())
        teacher = Path(tmp) / "t.json"
        nr.random_network(3, 2, 2, rng=2).save(teacher)
        rc, out, err = _cli("evaluate", str(path), "--teacher", str(teacher), "--n-eval", "200")
        _assert_clean(rc, out, err)


@st.composite
def _npz_archives(draw):
    """The bytes of a network .npz archive with members dropped, replaced, truncated or given lying headers."""
    net = nr.random_network(3, 2, 1, rng=3)
    buf = _stdio.BytesIO()
    np.savez(buf, hidden_weights=net.hidden_weights, hidden_bias=net.hidden_bias,
             output_weights=net.output_weights, output_bias=net.output_bias, activation=np.array("relu"),
             format=np.array("nnrecover.TwoLayerNetwork/1"))
    out = _stdio.BytesIO()
    with zipfile.ZipFile(buf) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            content = zin.read(info)
            action = draw(st.sampled_from(["keep", "keep", "drop", "truncate", "header", "array"]))
            if action == "drop":
                continue
            if action == "truncate":
                content = content[:draw(st.integers(0, len(content)))]
            elif action == "header":  # a header that promises far more data than follows
                h = _stdio.BytesIO()
                np.lib.format.write_array_header_1_0(h, {"descr": "<f8", "fortran_order": False,
                                                         "shape": (10**6, 10**6)})
                content = h.getvalue() + content[-16:]
            elif action == "array":
                a = _stdio.BytesIO()
                np.save(a, draw(_arrays()))
                content = a.getvalue()
            zout.writestr(info.filename, content)
    raw = out.getvalue()
    cut = draw(st.sampled_from([None, None, None, 0, 10, len(raw) // 2]))
    return raw if cut is None else raw[:cut]


@PROPERTY
@given(raw=_npz_archives())
def test_load_malformed_npz_models(raw):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "m.npz"
        path.write_bytes(raw)
        try:
            net = nr.TwoLayerNetwork.load(path)
        except NNRecoverError:
            net = None
        if net is not None:
            assert all(np.all(np.isfinite(a)) for a in net._arrays())
            assert net.predict(np.zeros((2, net.n_inputs))).shape[0] == 2
        rc, out, err = _cli("evaluate", str(path), "--data", str(path))  # also a malformed data file
        _assert_clean(rc, out, err)


# ------------------------------------------------------------------------------------------ scale
def _teacher_data(n=600, d=4, k=2, seed=5):
    truth = nr.random_network(d, k, 1, rng=seed, bias_range=(-0.2, 0.2))
    X, Y = nr.sample(truth, nr.distributions.StandardGaussian(d), n, rng=seed)
    return truth, X, Y


def test_gradient_descent_rescaling_is_exactly_undone():
    # scaling by a power of two is exact, so the fit on (X 2^s, Y 2^t) is the fit on (X, Y) with W scaled
    # by 2^-s and (A, c) by 2^t, bit for bit, whatever the magnitude (learners.baseline docstring)
    from nnrecover.learners import GradientDescentLearner

    _, X, Y = _teacher_data()
    base = GradientDescentLearner(2, n_restarts=2, random_state=3).fit(X, Y)
    for s, t in ((997, 0), (-997, 0), (0, 997), (0, -990), (500, -500), (40, 12)):
        est = GradientDescentLearner(2, n_restarts=2, random_state=3).fit(np.ldexp(X, s), np.ldexp(Y, t))
        assert est.diagnostics_["data_scaling"] == {"x_exponent": s if abs(s) > 10 else 0,
                                                    "y_exponent": t if abs(t) > 10 else 0}
        ref = base.network_
        if abs(s) <= 10 and abs(t) <= 10:  # ordinary scales are fitted as given: a different problem
            continue
        net = est.network_  # both canonical: unit rows, so the hidden layer is unchanged and b, A carry the scale
        assert np.array_equal(net.hidden_weights, ref.hidden_weights)
        assert np.array_equal(net.hidden_bias, np.ldexp(ref.hidden_bias, s))
        assert np.array_equal(net.output_weights, np.ldexp(ref.output_weights, t - s))
        assert np.array_equal(net.output_bias, np.ldexp(ref.output_bias, t))


def test_moment_learners_refuse_magnitudes_that_overflow_their_moments():
    from nnrecover.learners import PureNeuronLearner
    from nnrecover.data.checks import MAGNITUDE_RANGE

    _, X, Y = _teacher_data()
    lo, hi = MAGNITUDE_RANGE
    assert (lo, hi) == (2.0 ** -64, 2.0 ** 64)
    for Xs, Ys, name in ((X * 1e300, Y, "X"), (X * 1e-300, Y, "X"), (X * 1e150, Y, "X"), (X, Y * 1e30, "Y"),
                         (np.zeros_like(X), Y, "X")):
        try:
            PureNeuronLearner(2, random_state=0).fit(Xs, Ys)
        except nr.errors.InputError as exc:
            assert (f"largest |{name}| entry" in str(exc)) or "all zeros" in str(exc), exc
        else:
            raise AssertionError(f"no error for max|{name}| = {np.max(np.abs(Xs if name == 'X' else Ys)):.3g}")


def test_gradient_descent_with_non_finite_restarts_or_huge_width_fails_clearly():
    from nnrecover.learners import GradientDescentLearner

    _, X, Y = _teacher_data(n=50)
    try:
        GradientDescentLearner(10**6, n_restarts=1).fit(X, Y)
    except nr.errors.InputError as exc:
        assert "n_hidden=1000000" in str(exc) and "jacobian_memory" in str(exc)
    else:
        raise AssertionError("a 50 x 1e6 feature matrix above the budget was not refused")


def test_time_budget_stops_between_restarts():
    import warnings

    from nnrecover.errors import TimeBudgetWarning
    from nnrecover.learners import GradientDescentLearner

    _, X, Y = _teacher_data(n=200)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = GradientDescentLearner(2, n_restarts=5, time_budget=0.0, random_state=0).fit(X, Y)
    assert [w.category for w in caught] == [TimeBudgetWarning]
    assert est.diagnostics_["time_budget"] == {"seconds": 0.0, "restarts_run": 1, "restarts_requested": 5,
                                               "exhausted": True, "interrupted": True}
    assert len(est.diagnostics_["restarts"]) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning without a budget
        est = GradientDescentLearner(2, n_restarts=2, random_state=0).fit(X, Y)
    assert est.diagnostics_["time_budget"]["exhausted"] is False and len(est.diagnostics_["restarts"]) == 2
    assert est.diagnostics_["time_budget"]["interrupted"] is False


def test_time_budget_interrupts_a_running_restart():
    import time
    import warnings

    from nnrecover.errors import TimeBudgetWarning
    from nnrecover.learners import GradientDescentLearner
    from nnrecover.network import random_network
    from nnrecover.sampling import sample
    from nnrecover.distributions import StandardGaussian

    # one L-BFGS restart with an unreachable tolerance and 10^6 iterations on 2e4 rows, k = 8: minutes
    # without a budget; with 0.5 s it must stop at its next loss evaluation (one pass, milliseconds)
    teacher = random_network(12, 8, 1, rng=3)
    X, Y = sample(teacher, StandardGaussian(12), 20_000, rng=4)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = GradientDescentLearner(8, n_restarts=3, method="lbfgs", max_iter=10**6, tol=1e-15, time_budget=0.5,
                                     random_state=0).fit(X, Y)
    elapsed = time.perf_counter() - t0
    assert elapsed < 0.5 + 5.0, elapsed  # slack for sampling the rows and a loaded machine, not for the optimiser
    budget = est.diagnostics_["time_budget"]
    assert budget["interrupted"] is True and budget["exhausted"] is True and budget["restarts_run"] == 1
    assert "stopped at the budget" in str([w.message for w in caught if w.category is TimeBudgetWarning][0])
    record = est.diagnostics_["restarts"][0]
    assert record["status"] == -2 and record["train_loss_refined"] <= record["train_loss_start"]


def test_fit_least_squares_deadline_returns_the_start_when_already_passed():
    import time

    from nnrecover.network import random_network
    from nnrecover.refine import fit_least_squares

    _, X, Y = _teacher_data(n=500)
    start = random_network(X.shape[1], 2, Y.shape[1] if Y.ndim == 2 else 1, rng=9)
    for method in ("gn", "lbfgs"):
        net, info = fit_least_squares(start, X, Y, method=method, deadline=time.perf_counter())
        assert info["status"] == -2 and info["success"] is False and "deadline" in info["message"]
        np.testing.assert_array_equal(net.hidden_weights, start.hidden_weights)
        assert info["train_loss_refined"] == info["train_loss_start"]


def test_fit_of_an_empty_list_names_the_empty_array():
    from nnrecover.learners import GradientDescentLearner

    for args in (([],), ([], [])):
        try:
            GradientDescentLearner(2).fit(*args)
        except nr.errors.InputError as exc:
            assert "X is empty" in str(exc) and "1D" not in str(exc)
        else:
            raise AssertionError("fit([]) did not raise")


# ------------------------------------------------------------------------------------------ demo status
def test_comparison_status_fails_on_certificates_and_large_errors():
    from nnrecover.experiments.compare import FAILED_FUNCTION_ERROR, FAILED_UNIT_ERROR, _judge

    ok = {"certificates": "passed", "function_error": 1e-3, "max_unit_error": 1e-2}
    assert _judge(ok, has_network=True) == "ok"
    assert _judge({**ok, "certificates": "failed"}, has_network=True) == "failed: a certificate failed"
    assert _judge({**ok, "function_error": FAILED_FUNCTION_ERROR * 1.01}, has_network=True).startswith(
        "failed: function_error")
    assert _judge({**ok, "max_unit_error": 20.0}, has_network=True) == f"failed: max_unit_error 20 > {FAILED_UNIT_ERROR:g}"
    assert _judge({**ok, "function_error": float("nan")}, has_network=True) == "failed: function_error is nan"
    # hidden-weights-only learners have no function error: judged on what they have
    assert _judge({**ok, "function_error": float("nan"), "max_unit_error": float("nan")}, has_network=False) == "ok"


@settings(max_examples=50, deadline=None, derandomize=True)
@given(raw=st.binary(max_size=300), suffix=st.sampled_from([".json", ".npz", ".npy"]),
       prefix=st.sampled_from([b"", b"PK\x03\x04", b"\x93NUMPY\x01\x00", b'{"hidden_weights": [[']))
def test_random_bytes_as_model_or_data_file(raw, suffix, prefix):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"f{suffix}"
        path.write_bytes(prefix + raw)
        if suffix != ".npy":
            try:
                net = nr.TwoLayerNetwork.load(path)
            except NNRecoverError as exc:
                assert "\n" not in str(exc).strip() and str(exc)
            else:
                assert all(np.all(np.isfinite(a)) for a in net._arrays())
        nr.random_network(3, 2, 1, rng=0).save(Path(tmp) / "m.json")
        _assert_clean(*_cli("evaluate", str(Path(tmp) / "m.json"), "--data", str(path)))
        _assert_clean(*_cli("fit", str(path), "--learner", "gradient-descent", "-k", "1", "--out",
                            str(Path(tmp) / "out.json"), "--option", "n_restarts=1"))


def test_data_source_mistakes_get_input_errors_that_point_at_them():
    import re

    import pandas as pd

    t = nr.random_network(8, 3, 4, rng=1).canonical()
    X, Y = nr.sample(t, nr.distributions.StandardGaussian(8), 20_000, rng=2)
    # a NaN is reported in a row range that holds it (the tensor step's rows after the reserved ones
    # were labelled from 0)
    Xn = X.copy()
    Xn[19_997, 1] = np.nan
    with pytest.raises(nr.errors.InputError, match="NaN") as info:
        nr.learners.ExactReLULearner(3, refine=False, random_state=0).fit(Xn, Y)
    lo, hi = map(int, re.search(r"rows (\d+):(\d+)", str(info.value)).groups())
    assert lo <= 19_997 < hi
    # a ragged chunk, a pandas column with missing values
    ragged = [(X[:4], Y[:4]), ([[0.0] * 8, [0.0] * 7], Y[:2])]
    with pytest.raises(nr.errors.InputError, match="ragged"):
        nr.learners.GradientDescentLearner(3, random_state=0).fit(ragged)
    frame = pd.DataFrame(X[:1000]).astype("Float64")
    frame.iloc[3, 2] = pd.NA
    with pytest.raises(nr.errors.InputError, match="missing values"):
        nr.learners.ExactReLULearner(3).fit(frame, Y[:1000])
    # an exhausted generator is empty, whatever the learner
    with pytest.raises(nr.errors.InputError, match="empty"):
        nr.learners.HighThresholdLearner(2, threshold=2.0).fit(iter(()))


def test_pure_neuron_on_a_one_pass_iterator_says_it_skipped_the_span_route():
    t = nr.random_network(8, 3, 4, rng=1)
    X, Y = nr.sample(t, nr.distributions.StandardGaussian(8), 20_000, rng=2)
    gen = ((X[i:i + 5000], Y[i:i + 5000]) for i in range(0, 20_000, 5000))
    with pytest.warns(UserWarning, match="one-pass iterator"):
        learner = nr.learners.PureNeuronLearner(3, refine=False, random_state=0).fit(gen)
    assert not learner.diagnostics_["span"]["used"] and "one-pass" in learner.diagnostics_["span"]["reason"]


# ------------------------------------------------------------------------------------------ the command line in a subprocess
def _run_module(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-m", "nnrecover", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def test_fit_of_targets_near_1e300_reports_a_finite_rmse_without_an_overflow_warning(tmp_path):
    # Y ~ 1e300: the exactly rescaled gradient-descent fit is right to round-off, but its MSE (residuals
    # ~ 1e284, squared 1e568) exceeds float64. The summary must print the (finite) RMSE, and computing
    # the MSE must not leak an "overflow encountered in ldexp" warning (-W error turns it into a crash).
    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 3))
    Y = np.maximum(X @ np.array([1.0, -0.5, 0.25]), 0.0) * 1e300
    save_samples(tmp_path / "s.npz", X, Y)
    res = _run_module("fit", "s.npz", "--learner", "gradient-descent", "-k", "1", "--seed", "0", "--out", "m.json",
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr, res.stderr
    assert "MSE inf" not in res.stdout and "RMSE" in res.stdout, res.stdout
    rmse = float(res.stdout.split("RMSE ")[1].split()[0])
    assert np.isfinite(rmse) and rmse < 1e-10 * np.max(np.abs(Y))  # relative error 1e-10 on a fit exact to round-off


def test_version_and_help_do_not_import_scikit_learn():
    # Deliver 7 of issue 9: `nnrecover --version` as fast as `import nnrecover`. Importing
    # nnrecover.errors.NotFittedError (a subclass of scikit-learn's) loads all of scikit-learn, so no
    # module imported when the command-line parser is built may name it at import time.
    code = ("import sys\nfrom nnrecover.cli import main\n"
            "for argv in (['--version'], ['--help'], ['fit', '--help'], ['extract', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "print('SKLEARN', 'sklearn' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "SKLEARN False" in res.stdout, res.stdout[-500:]


def test_fit_to_a_folder_names_the_folder(tmp_path):
    # `--out .` used to say "got ''" (the name of '.' is empty): the message must show what was given
    rng = np.random.default_rng(1)
    X = rng.standard_normal((50, 2))
    save_samples(tmp_path / "s.npz", X, X[:, 0])
    res = _run_module("fit", "s.npz", "--learner", "gradient-descent", "-k", "1", "--out", ".", cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith("nnrecover: error:") and "got '.'" in res.stderr, res.stderr


def test_evaluate_of_a_model_with_output_weights_near_1e308_against_its_teacher(tmp_path):
    # ||a - a*|| overflows to inf; the unit matching used to fail ("cost matrix is infeasible",
    # an internal error). The report must say the error is infinite, in one command without a traceback.
    import nnrecover as nr
    from nnrecover.metrics import parameter_error

    teacher = nr.random_network(4, 3, rng=0)
    huge = nr.TwoLayerNetwork(teacher.hidden_weights, teacher.hidden_bias, np.full((1, 3), 1e308),
                              teacher.output_bias)
    res = parameter_error(huge, teacher)
    assert res["max_unit_error"] == np.inf and sorted(res["matching"]) == [0, 1, 2]
    teacher.save(tmp_path / "t.json")
    huge.save(tmp_path / "m.json")
    out = subprocess.run([sys.executable, "-m", "nnrecover", "evaluate", "m.json", "--teacher", "t.json",
                          "--n-eval", "1000"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "internal error" not in out.stderr, out.stderr
    assert "function_error (relative L2, gaussian, n=1000): inf" in out.stdout, out.stdout[-800:]


def test_fit_summary_says_when_the_model_has_fewer_units_than_asked(tmp_path):
    # constant targets: HermiteTensorLearner folds every unit into the output bias but one (measured:
    # 1 unit for k = 2); the summary line must not claim k = 2 for a model that has another width
    import json

    rng = np.random.default_rng(0)
    save_samples(tmp_path / "c.npz", rng.standard_normal((5000, 5)), np.ones(5000))
    res = _run_module("fit", "c.npz", "--learner", "hermite-tensor", "-k", "2", "--seed", "0", "--out", "m.json",
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    units = len(json.loads((tmp_path / "m.json").read_text())["hidden_weights"])
    assert (f"the model has {units} unit(s)" in res.stdout) == (units != 2), res.stdout


def test_atomic_output_through_a_symbolic_link_replaces_its_target(tmp_path):
    # `--out link.json` where link.json -> real/m.json: the link must stay a link and the file it
    # points to get the new content (os.replace on the link itself would turn it into a regular file)
    from nnrecover.files import write_text_atomic

    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "m.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new" and link.read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["m.json"]  # no temporary left
