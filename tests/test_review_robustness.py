"""Review cases of issue 9 (no silent wrong answer, one-line errors) not covered elsewhere."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

from nnrecover.io import save_samples


def _run(*args: str, cwd) -> subprocess.CompletedProcess:
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
    res = _run("fit", "s.npz", "--learner", "gradient-descent", "-k", "1", "--seed", "0", "--out", "m.json",
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
    res = _run("fit", "s.npz", "--learner", "gradient-descent", "-k", "1", "--out", ".", cwd=tmp_path)
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
    res = _run("fit", "c.npz", "--learner", "hermite-tensor", "-k", "2", "--seed", "0", "--out", "m.json",
               cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    units = len(json.loads((tmp_path / "m.json").read_text())["hidden_weights"])
    assert (f"the model has {units} unit(s)" in res.stdout) == (units != 2), res.stdout


def test_atomic_output_through_a_symbolic_link_replaces_its_target(tmp_path):
    # `--out link.json` where link.json -> real/m.json: the link must stay a link and the file it
    # points to get the new content (os.replace on the link itself would turn it into a regular file)
    from nnrecover.io import write_text_atomic

    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "m.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text_atomic(link, "new")
    assert link.is_symlink() and target.read_text() == "new" and link.read_text() == "new"
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["m.json"]  # no temporary left
