"""The compare study runs end to end (quick variant) and its rows mean what they say."""

from __future__ import annotations

import numpy as np
import pytest

from nnrecover.errors import InputError
from nnrecover.experiments.compare import compare_experiment, sklearn_baseline


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
        compare_experiment(baselines=("torch-lbfgs",), dims=(5,), widths=(2,), seeds=1)
