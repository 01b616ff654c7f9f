"""Expand-and-Cluster (experiments.training.expand_and_cluster): it finds a small teacher's width, its
random choices come from random_state, bad arguments raise, and the compare study runs it."""

from __future__ import annotations

import numpy as np
import pytest

from nnrecover import metrics
from nnrecover.distributions import StandardGaussian
from nnrecover.errors import InputError
from nnrecover.experiments.compare import compare_experiment
from nnrecover.experiments.training import expand_and_cluster
from nnrecover.network import random_network
from nnrecover.sampling import sample

pytest.importorskip("torch")

# small enough for seconds: 3 students of 8 units (4x the teacher's 2), few iterations
FAST = dict(n_students=3, student_iter=80, finetune_iter=100, threads=1)


@pytest.fixture(scope="module")
def small_teacher():
    net = random_network(4, 2, 2, rng=np.random.default_rng(3), bias_range=(-0.5, 0.5))
    X, Y = sample(net, StandardGaussian(4), 1500, rng=4)
    return net, X, Y


@pytest.fixture(scope="module")
def small_fit(small_teacher):
    _, X, Y = small_teacher
    return expand_and_cluster(X, Y, student_width=8, random_state=0, **FAST)


def test_finds_the_width_and_the_units_of_a_small_noiseless_teacher(small_teacher, small_fit):
    truth, _, _ = small_teacher
    net, info = small_fit
    assert info["width"] == net.n_hidden == 2
    assert info["big_clusters"] == 2 and info["unaligned_removed"] == 0
    # noiseless data and a fine-tuning with no loss tolerance: the units come out near round-off (5e-9
    # measured after 100 L-BFGS iterations); 1e-6 is the compare study's success threshold
    assert metrics.parameter_error(net, truth)["max_unit_error"] < 1e-6
    assert info["loss"] < 1e-12


def test_same_seed_same_bits(small_teacher, small_fit):
    _, X, Y = small_teacher
    again, info = expand_and_cluster(X, Y, student_width=8, random_state=0, **FAST)
    net, first = small_fit
    for a, b in ((net.hidden_weights, again.hidden_weights), (net.hidden_bias, again.hidden_bias),
                 (net.output_weights, again.output_weights), (net.output_bias, again.output_bias)):
        assert np.array_equal(a, b)
    assert info["student_losses"] == first["student_losses"]


@pytest.mark.parametrize("kwargs, match", [
    (dict(student_width=0), "student_width"),
    (dict(student_width=2.5), "student_width"),
    (dict(n_students=1), "n_students"),
    (dict(min_fraction=0.0), "min_fraction"),
    (dict(min_fraction=1.5), "min_fraction"),
    (dict(max_angle=0.0), "max_angle"),
    (dict(max_angle=4.0), "max_angle"),
    (dict(student_iter=0), "student_iter"),
    (dict(student_samples=0), "student_samples"),
    (dict(finetune_iter=-1), "finetune_iter"),
    (dict(random_state=-1), "random_state"),
])
def test_bad_arguments_raise(small_teacher, kwargs, match):
    _, X, Y = small_teacher
    args = dict(student_width=8, random_state=0, **FAST)
    args.update(kwargs)
    with pytest.raises(InputError, match=match):
        expand_and_cluster(X, Y, **args)


def test_bad_data_raise(small_teacher):
    _, X, Y = small_teacher
    with pytest.raises(InputError):
        expand_and_cluster(X, Y[:-1], student_width=8, random_state=0)
    with pytest.raises(InputError):
        expand_and_cluster(np.full_like(X, np.nan), Y, student_width=8, random_state=0)


def test_compare_study_runs_it_beside_auto_width_learners():
    df, _ = compare_experiment(rng=0, dims=(4,), widths=(2,), biases=(True,), outputs=("vector",),
                               inputs=("gaussian",), noises=(0.0,), n_samples=(1500,), seeds=1,
                               learners=["exact-relu"], baselines=["expand-and-cluster"], learner_width="auto",
                               with_unrefined=False, eval_samples=2000,
                               eac_options=dict(n_students=3, student_iter=80, finetune_iter=100))
    assert set(df["method"]) == {"exact-relu", "expand-and-cluster"}
    eac = df[df["method"] == "expand-and-cluster"].iloc[0]
    assert eac["width"] == 2 and eac["success"]
    # success needs the teacher's width and every unit within 1e-6
    assert (df["success"] == ((df["width"] == df["k"]) & (df["max_unit_error"] < 1e-6))).all()


def test_compare_study_refuses_options_it_sets():
    with pytest.raises(InputError, match="eac_options"):
        compare_experiment(rng=0, dims=(4,), widths=(2,), baselines=["expand-and-cluster"],
                           eac_options={"random_state": 1})
    with pytest.raises(InputError, match="unknown baseline"):
        compare_experiment(rng=0, dims=(4,), widths=(2,), baselines=["expand-and-clusters"])
