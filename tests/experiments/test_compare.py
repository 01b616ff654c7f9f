"""The compare study runs end to end (quick variant) and its rows mean what they say."""

from __future__ import annotations

import numpy as np
import pytest

from nnrecover.errors import InputError
from nnrecover.experiments.compare import compare_experiment
from nnrecover.experiments.training import sklearn_baseline


@pytest.fixture(scope="module")
def quick():
    return compare_experiment(rng=0, quick=True)


def test_quick_grid_runs_every_method(quick):
    df, fig = quick
    methods = set(df["method"])
    assert {"exact-relu", "bakshi2019-noisy", "pure-neuron", "hermite-tensor", "gradient-descent",
            "sklearn-lbfgs", "sklearn-adam"} <= methods
    assert set(df.loc[df["method"] == "exact-relu", "refine"]) == {"yes", "no"}
    assert len(fig.axes) == 3
    for col in ("d", "k", "bias", "outputs", "inputs", "noise", "n_samples", "seed", "max_unit_error",
                "function_error", "time_s", "success"):
        assert col in df.columns


def test_exact_learner_with_refinement_recovers_the_teacher(quick):
    # noiseless Gaussian teacher with biases: Bakshi et al.'s exact pipeline finds the bias-free part,
    # the shared refinement fits the biases; on noiseless data both LM forms reach round-off
    df, _ = quick
    row = df[(df["method"] == "exact-relu") & (df["refine"] == "yes")].iloc[0]
    assert row["success"] and row["max_unit_error"] < 1e-9
    # success is exactly "max unit error below 1e-6"
    assert (df["success"] == (df["max_unit_error"] < 1e-6)).all()


def test_sklearn_baseline_keeps_the_best_start_and_converts_it_exactly():
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPRegressor

    rng = np.random.default_rng(0)
    X = rng.standard_normal((500, 4))
    y = np.maximum(X @ rng.standard_normal(4), 0)
    net, info = sklearn_baseline("sklearn-lbfgs", X, y, 3, random_state=0, restarts=2, max_iter=50)
    refs = []
    for seed in (0, 1):
        ref = MLPRegressor(hidden_layer_sizes=(3,), activation="relu", solver="lbfgs", alpha=0.0, max_iter=50,
                           max_fun=10**6, tol=0.0, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            refs.append(ref.fit(X, y))
    best = min(refs, key=lambda m: m.loss_)
    assert info["loss"] == best.loss_ and info["n_iter"] == best.n_iter_
    np.testing.assert_allclose(net.predict(X), best.predict(X), rtol=0, atol=1e-12)
    with pytest.raises(InputError, match="unknown scikit-learn baseline"):
        sklearn_baseline("sklearn-sgd", X, y, 3, random_state=0)


def test_bad_options():
    with pytest.raises(InputError, match="outputs"):
        compare_experiment(outputs=("matrix",), dims=(5,), widths=(2,), seeds=1)
    with pytest.raises(InputError, match="baseline"):
        compare_experiment(baselines=("keras-adam",), dims=(5,), widths=(2,), seeds=1)


def test_torch_baselines_fit_and_convert_exactly():
    import torch

    from nnrecover.experiments.training import torch_baseline

    rng = np.random.default_rng(1)
    X = rng.standard_normal((2000, 4))
    y = np.maximum(X @ rng.standard_normal(4) + 0.3, 0)
    for method in ("torch-lbfgs", "torch-adam"):
        net, info = torch_baseline(method, X, y, 2, random_state=3, max_iter=30, threads=1)
        again, _ = torch_baseline(method, X, y, 2, random_state=3, max_iter=30, threads=1)
        np.testing.assert_array_equal(net.hidden_weights, again.hidden_weights)  # same seed, same bits
        # the converted network computes what the PyTorch parameters compute: info["loss"] is PyTorch's
        # mean squared training error, recomputed here from the nnrecover network
        mse = float(np.mean((net.predict(X).ravel() - y) ** 2))
        assert abs(mse - info["loss"]) <= 1e-12 * max(mse, 1e-300)
        assert info["threads"] == 1 and info["starts"] == 1 and 1 <= info["n_iter"] <= 30
    assert torch.get_num_threads() >= 1  # the thread count was restored, not left at 1 for the caller
    # L-BFGS on a single ReLU unit from random starts reaches a small loss in 30 iterations (sanity, not
    # recovery: recovery is what the compare studies measure)
    net, info = torch_baseline("torch-lbfgs", X, y, 1, random_state=0, max_iter=200, threads=1)
    assert info["loss"] < 1e-6 * float(np.mean(y ** 2))
    with pytest.raises(InputError, match="unknown PyTorch baseline"):
        torch_baseline("torch-sgd", X, y, 2)
    with pytest.raises(InputError, match="needs a deadline"):
        torch_baseline("torch-adam", X, y, 2, restarts=None)


def test_baselines_honour_their_deadline():
    import time

    from nnrecover.experiments.training import TRAINING_BASELINES, train_baseline

    rng = np.random.default_rng(2)
    X = rng.standard_normal((20000, 8))
    Y = np.maximum(X @ rng.standard_normal((8, 4)), 0)
    for method in TRAINING_BASELINES:
        t0 = time.perf_counter()
        net, info = train_baseline(method, X, Y, 4, random_state=0, restarts=None, deadline=t0 + 0.5,
                                   torch_threads=1, max_iter=10**6)
        used = time.perf_counter() - t0
        # overrun: one slice (50 scikit-learn L-BFGS iterations, 10 PyTorch ones, one scikit-learn epoch,
        # 20 PyTorch batches); each is well under 2 s at this size even on a loaded machine
        assert used < 0.5 + 2.0, (method, used)
        assert info["starts"] >= 1 and net.n_hidden == 4 and net.n_outputs == 4


def test_budget_study_quick_runs_and_the_provable_learner_succeeds():
    from nnrecover.experiments.compare import compare_budget_experiment

    df, fig = compare_budget_experiment(rng=0, quick=True)
    assert set(df["method"]) == {"exact-relu (refine=True)", "gradient-descent", "torch-lbfgs"}
    prov = df[df["method"] == "exact-relu (refine=True)"]
    assert prov["success"].all() and (prov["max_unit_error"] < 1e-9).all()
    # each random-start method got the provable learner's time (factor 1) and used about that much
    for _, row in df[df["method"] != "exact-relu (refine=True)"].iterrows():
        t = prov.loc[prov["k"] == row["k"], "time_s"].iloc[0]
        assert row["budget_s"] == t and row["time_s"] < t + 2.0 and row["starts"] >= 1
    assert (df["success"] == (df["max_unit_error"] < 1e-6)).all()
    assert len(fig.axes) == 1
    scalar, _ = compare_budget_experiment(rng=0, quick=True, output="scalar", methods=("gradient-descent",))
    prov = scalar[scalar["method"] == "hermite-tensor (refine=True)"]
    assert len(prov) == 2 and (prov["max_unit_error"] < 1e-9).all()
    with pytest.raises(InputError, match="widths must be <= d"):
        compare_budget_experiment(d=3, widths=(5,))
    with pytest.raises(InputError, match="budget_factors"):
        compare_budget_experiment(d=3, widths=(2,), budget_factors=(0.0,))
    with pytest.raises(InputError, match="unknown method"):
        compare_budget_experiment(d=3, widths=(2,), methods=("keras",))


def test_a_baselines_only_grid_runs_on_the_same_teachers(quick):
    # learners=[] with only library baselines: the teachers and rows are drawn exactly as in the full
    # grid (the generator's draws do not depend on the methods), so rows can be added to an earlier run
    df, _ = compare_experiment(rng=0, quick=True, learners=[], baselines=("sklearn-lbfgs",))
    full, _ = quick
    assert list(df["method"]) == ["sklearn-lbfgs"]
    ref = full[full["method"] == "sklearn-lbfgs"].iloc[0]
    assert df.iloc[0]["function_error"] == ref["function_error"]
