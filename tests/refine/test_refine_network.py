"""Tests of the shared local refinement (nnrecover.refine)."""

from __future__ import annotations

import json
import tracemalloc
import warnings

import dask.array as da
import numpy as np
import pytest
from scipy.optimize import approx_fprime

import nnrecover as nr
from nnrecover.distributions import StandardGaussian
from nnrecover.errors import InputError
from nnrecover.metrics import parameter_error, relu_l2_distance
from nnrecover.refine import BLOCKS, RefineResult, Model, fit_least_squares, gather_samples, mean_squared_loss, refine_network
from nnrecover.refine.model import _normal_equations


def _traced_peak(call):
    """``(call(), peak bytes traced by tracemalloc during the call)``."""
    tracemalloc.start()
    try:
        return call(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _perturbed(net, radius, seed):
    """``net`` with every block moved by a random vector of norm ``radius``."""
    g = np.random.default_rng(seed)
    out = net.copy()
    for arr in (out.hidden_weights, out.hidden_bias, out.output_weights, out.output_bias):
        step = g.standard_normal(arr.shape)
        arr += radius * step / np.linalg.norm(step)
    return out


@pytest.fixture(scope="module")
def teacher():
    truth = nr.random_network(10, 5, rng=1, bias_range=(-0.5, 0.5), output_bias_range=(-0.3, 0.3))
    X, Y = nr.sample(truth, StandardGaussian(10), 20_000, rng=2)
    return truth, X, Y


# ----------------------------------------------------------------------------- exactness

def test_refine_reaches_truth_to_round_off_from_inside_basin(teacher):
    truth, X, Y = teacher
    start = _perturbed(truth, 0.05, seed=3)
    assert parameter_error(start, truth)["max_unit_error"] > 0.05
    res = refine_network(start, (X, Y), method="lm", rng=0)
    assert isinstance(res, RefineResult)
    assert res.kept == "refined" and res.improved and res.method == "lm"
    assert parameter_error(res.network, truth)["max_unit_error"] < 1e-9
    assert res.holdout_loss_refined < 1e-25 < res.holdout_loss_start
    assert res.n_samples_seen == 20_000 and res.n_holdout == 4000 and res.n_samples_used == 16_000
    json.dumps(res.as_dict())  # diagnostics are plain data


def test_refine_output_layer_only_is_linear_least_squares(teacher):
    truth, X, Y = teacher
    start = truth.copy()
    start.output_weights += 0.3
    start.output_bias -= 0.2
    res = refine_network(start, (X[:3000], Y[:3000]), train=("output_weights", "output_bias"), rng=0)
    assert res.trained == ("output_weights", "output_bias")
    np.testing.assert_array_equal(res.network.hidden_weights, truth.hidden_weights)  # frozen blocks untouched
    np.testing.assert_array_equal(res.network.hidden_bias, truth.hidden_bias)
    np.testing.assert_allclose(res.network.output_weights, truth.output_weights, atol=1e-12)
    np.testing.assert_allclose(res.network.output_bias, truth.output_bias, atol=1e-12)


def test_analytic_jacobian_and_gradient_match_finite_differences():
    net = nr.random_network(4, 3, 2, activation="tanh", rng=5, bias_range=(-1, 1), output_bias_range=(-1, 1))
    g = np.random.default_rng(6)
    X, Y = g.standard_normal((7, 4)), g.standard_normal((7, 2))
    for train in (BLOCKS, ("hidden_weights", "output_bias"), ("hidden_bias",)):
        model = Model(net, train)
        theta = model.pack(net)
        J = model.jacobian(theta, X, Y)
        # central differences of a smooth function: error O(h^2) ~ 1e-10 at h = 1e-5
        h = 1e-5
        fd = np.column_stack([(model.residuals(theta + h * e, X, Y) - model.residuals(theta - h * e, X, Y)) / (2 * h)
                              for e in np.eye(theta.size)])
        np.testing.assert_allclose(J, fd, atol=1e-9)
        loss, grad = model.loss_and_grad(theta, X, Y)
        r = model.residuals(theta, X, Y)
        assert loss == pytest.approx(0.5 * r @ r, rel=1e-14)
        np.testing.assert_allclose(grad, J.T @ r, atol=1e-14)
        np.testing.assert_allclose(grad, approx_fprime(theta, lambda t: model.loss_and_grad(t, X, Y)[0], 1e-7),
                                   atol=1e-6)


# ----------------------------------------------------------------------------- finite samples

def test_refine_noisy_data_error_matches_least_squares_theory():
    """Well-specified nonlinear least squares: n ||f_hat - f||^2 / sigma^2 -> chi^2 with P - k degrees of
    freedom (P parameters minus one positive-rescaling symmetry per ReLU unit, along which f does not
    change). Here P = 5*8 + 5 + 5 + 1 = 51, k = 5, so E||f_hat - f||^2 ~ sigma^2 46 / n_train; a chi^2_46
    lies in [mean/3, 3 mean] with probability > 1 - 1e-9."""
    truth = nr.random_network(8, 5, rng=11, bias_range=(-0.5, 0.5), rows="orthonormal")
    sigma, n = 0.1, 10_000
    X, Y = nr.sample(truth, StandardGaussian(8), n, noise=sigma, rng=12)
    res = refine_network(_perturbed(truth, 0.05, seed=13), (X, Y), method="lm", rng=14)
    expected = sigma ** 2 * (51 - 5) / res.n_samples_used
    err2 = relu_l2_distance(res.network, truth, squared=True)
    assert expected / 3 < err2 < 3 * expected
    assert res.kept == "refined"


def test_refine_keeps_start_when_refinement_worsens_holdout():
    # start = the exact truth; training labels noisy; explicit noiseless validation data: the start's
    # held-out loss is exactly 0, so any move the optimiser makes to fit the noise is rejected
    truth = nr.random_network(6, 3, rng=20, bias_range=(-0.5, 0.5))
    X, Y = nr.sample(truth, StandardGaussian(6), 400, noise=0.3, rng=21)
    Xv, Yv = nr.sample(truth, StandardGaussian(6), 500, rng=22)
    res = refine_network(truth, (X, Y), validation_data=(Xv, Yv), method="lm", rng=0)
    assert res.holdout_loss_start == 0.0 < res.holdout_loss_refined
    assert res.train_loss_refined < res.train_loss_start  # the optimiser did fit the training noise
    assert res.kept == "start" and not res.improved
    assert res.network == truth and res.network is not truth
    # the same with a random split: 15 noisy training rows for 25 parameters, so trf interpolates the noise
    # (in 40 random instances of this set-up the refined held-out loss was 1.5x to 10x the start's)
    res = refine_network(truth, (X[:30], Y[:30]), holdout_fraction=0.5, method="trf", rng=1)
    assert res.train_loss_refined < res.train_loss_start
    assert res.holdout_loss_refined > res.holdout_loss_start
    assert res.kept == "start" and res.network == truth


def test_lbfgs_and_auto_method(teacher):
    truth, X, Y = teacher
    start = _perturbed(truth, 0.05, seed=30)
    res = refine_network(start, (X[:5000], Y[:5000]), method="lbfgs", rng=0)
    assert res.method == "lbfgs" and res.kept == "refined"
    # L-BFGS is not the round-off tool, but from inside the basin it gains orders of magnitude
    assert res.holdout_loss_refined < 1e-4 * res.holdout_loss_start
    # J^T J (8 P^2 = 29768 bytes) above the budget: "auto" solves the normal equations matrix free, or, when
    # that does not apply (here: a frozen block), runs L-BFGS
    auto_small = refine_network(start, (X[:5000], Y[:5000]), jacobian_memory=20_000, rng=0)
    assert auto_small.method == "gn-matrix-free" and auto_small.requested_method == "auto"
    frozen = refine_network(start, (X[:5000], Y[:5000]), jacobian_memory=20_000, train=BLOCKS[:3], rng=0)
    assert frozen.method == "lbfgs"
    assert refine_network(start, (X[:5000], Y[:5000]), rng=0, max_iter=3).method == "gn"


# ----------------------------------------------------------------------------- data handling

class _GenericStream:
    """A re-iterable of known size that is not one of nnrecover's streams (whose rows the library knows to be
    independent draws): its rows may be ordered, so they are chosen at random."""

    def __init__(self, stream):
        self.stream = stream
        self.n_samples, self.n_inputs, self.n_outputs = stream.n_samples, stream.n_inputs, stream.n_outputs

    def __iter__(self):
        return iter(self.stream)


def test_gather_samples_is_uniform_subset_independent_of_chunking():
    truth = nr.random_network(5, 2, rng=40)
    stream_a = _GenericStream(nr.sample_stream(truth, StandardGaussian(5), 30_000, chunk_size=1000, rng=41))
    stream_b = _GenericStream(nr.sample_stream(truth, StandardGaussian(5), 30_000, chunk_size=7777, rng=41))
    X, Y = stream_a.stream.to_arrays()
    Xa, Ya, seen = gather_samples(stream_a, 2000, rng=7)
    Xb, Yb, _ = gather_samples(stream_b, 2000, rng=7)
    Xc, Yc, _ = gather_samples((X, Y), 2000, rng=7, chunk_size=4096)
    assert seen == 30_000 and Xa.shape == (2000, 5) and Ya.shape == (2000, 1)
    np.testing.assert_array_equal(Xa, Xb)
    np.testing.assert_array_equal(Xa, Xc)
    np.testing.assert_array_equal(Ya, Yc)
    # the kept rows are rows of the data, in their original order, and they are the 2000 smallest keys
    keys = np.random.default_rng(7).random(30_000)
    idx = np.sort(np.argsort(keys)[:2000])
    np.testing.assert_array_equal(Xa, X[idx])
    # fewer rows than max_samples: everything, in order
    Xs, Ys, _ = gather_samples((X[:50], Y[:50]), 100, rng=0)
    np.testing.assert_array_equal(Xs, X[:50])
    assert not np.array_equal(gather_samples(stream_a, 2000, rng=8)[0], Xa)


def test_gather_samples_memory_is_bounded():
    # 1e6 rows x 6 columns = 48 MB of data; the reservoir is 2000 rows and the stream works in blocks of
    # 65536 rows (3 MB): the peak must stay far below the size of the data
    truth = nr.random_network(5, 2, rng=50)
    stream = nr.sample_stream(truth, StandardGaussian(5), 1_000_000, chunk_size=8192, rng=51)
    (X, _, seen), peak = _traced_peak(lambda: gather_samples(stream, 2000, rng=0))
    assert seen == 1_000_000 and X.shape == (2000, 5)
    assert peak < 16e6


def test_a_stream_is_gathered_into_its_output_only():
    # a stream of known size: the rows are chosen from their keys first, then copied from one pass, so
    # the peak is the output (60000 x 31 doubles = 14.9 MB), the stream's blocks (2^16 rows x 31 = 16.3 MB
    # each: the one read and up to STREAM_WORKERS drawn ahead) and the keys (2^16-key blocks, a few MB):
    # a one-pass iterator of the same chunks holds up to twice the output and concatenates it. Same rows
    # either way
    truth = nr.random_network(30, 2, rng=52)
    stream = _GenericStream(nr.sample_stream(truth, StandardGaussian(30), 300_000, rng=53))
    (X, Y, seen), peak = _traced_peak(lambda: gather_samples(stream, 60_000, rng=1))
    assert seen == 300_000 and X.shape == (60_000, 30)
    out = X.nbytes + Y.nbytes
    assert peak < out + 60e6, f"peak {peak / 1e6:.1f} MB"
    Xi, Yi, _ = gather_samples(iter(list(stream)), 60_000, rng=1)
    np.testing.assert_array_equal(X, Xi)
    np.testing.assert_array_equal(Y, Yi)


def test_a_sample_stream_gives_its_first_rows_and_is_read_only_as_far_as_them(monkeypatch):
    # nnrecover's streams draw independent rows: the first m are a uniform sample, and only the blocks that
    # hold them are generated (a refinement from a 10^6-row stream at d = 1000 reads 6 % of it, not all)
    from nnrecover.sampling import SampleStream

    truth = nr.random_network(5, 2, rng=40)
    stream = nr.sample_stream(truth, StandardGaussian(5), 1_000_000, chunk_size=1000, rng=41)
    X, Y = stream.to_arrays()
    drawn = []
    draw = SampleStream._draw
    monkeypatch.setattr(SampleStream, "_draw", lambda self, j: drawn.append(j) or draw(self, j))
    Xg, Yg, seen = gather_samples(stream, 2500, rng=7)
    assert seen == 1_000_000
    np.testing.assert_array_equal(Xg, X[:2500])
    np.testing.assert_array_equal(Yg[:, 0], Y[:2500])
    # the stream's blocks of stream.block_rows rows: only those up to row 2500 (and the draws run ahead of
    # the reader by at most STREAM_WORKERS blocks)
    from nnrecover.sampling import STREAM_WORKERS
    assert max(drawn) < -(-2500 // stream.block_rows) + STREAM_WORKERS
    assert max(drawn) < -(-1_000_000 // stream.block_rows) - 1
    # the refinement's training and held-out rows are the first max_samples rows, split at random
    start = _perturbed(truth, 0.05, seed=56)
    drawn.clear()
    res = refine_network(start, stream, max_samples=5000, rng=3)
    assert res.n_samples_used + res.n_holdout == 5000 and res.n_samples_seen == 1_000_000
    assert max(drawn) < -(-5000 // stream.block_rows) + STREAM_WORKERS
    assert parameter_error(res.network, truth)["max_unit_error"] < 1e-10


def test_a_source_that_gives_fewer_rows_than_it_announces_is_refused():
    # rows are chosen from the announced size before the pass that copies them: a source that then gives
    # fewer rows would leave chosen rows unread
    X = np.random.default_rng(57).standard_normal((800, 3))

    class Short:
        n_samples, n_inputs, n_outputs = 1000, 3, 1

        def __iter__(self):
            return iter([(X[:400], X[:400, :1]), (X[400:], X[400:, :1])])

    with pytest.raises(InputError, match="announced 1000 rows but gave 800"):
        gather_samples(Short(), 500, rng=0)


def test_refine_network_bounds_the_rows_it_copies_from_a_stream(monkeypatch):
    import nnrecover.refine.rows as rows

    truth = nr.random_network(20, 2, rng=54)
    stream = nr.sample_stream(truth, StandardGaussian(20), 50_000, rng=55)
    start = _perturbed(truth, 0.05, seed=56)
    monkeypatch.setattr(rows, "GATHER_MEMORY", 8 * 21 * 10_000)  # 10000 rows of 20 inputs and 1 output
    res = refine_network(start, stream, rng=3)
    assert res.n_samples_used + res.n_holdout == 10_000
    # arrays are read by index, not copied whole: the default rows there, and an explicit max_samples always
    X, Y = stream.to_arrays()
    arr = refine_network(start, (X, Y), rng=3)
    assert arr.n_samples_used + arr.n_holdout == 50_000
    assert refine_network(start, stream, max_samples=30_000, rng=3).n_holdout == 6_000
    assert parameter_error(res.network, truth)["max_unit_error"] < 1e-10


def test_refine_same_result_for_arrays_stream_and_dask():
    truth = nr.random_network(4, 2, rng=60, bias_range=(-0.3, 0.3))
    stream = nr.sample_stream(truth, StandardGaussian(4), 6000, chunk_size=1500, rng=61)
    X, Y = stream.to_arrays()
    start = _perturbed(truth, 0.05, seed=62)
    kw = dict(max_samples=3000, rng=5, method="lm")
    r1 = refine_network(start, (X, Y), **kw)
    r2 = refine_network(start, _GenericStream(stream), **kw)
    r3 = refine_network(start, (da.from_array(X, chunks=(1000, 4)), da.from_array(Y, chunks=1000)), **kw)
    assert r1.network == r2.network == r3.network
    assert r1.n_samples_seen == 6000 and r1.n_samples_used + r1.n_holdout == 3000
    r4 = refine_network(start, (X, Y), **kw)
    assert r4.network == r1.network  # bit-identical for the same seed
    # nnrecover's own stream: its first 3000 rows (other rows than the random ones above), the same answer
    r5 = refine_network(start, stream, **kw)
    assert r5.n_samples_seen == 6000 and r5.n_samples_used + r5.n_holdout == 3000
    # noiseless rows: both fits are the teacher to round-off (2.5e-16 and 3.1e-16 measured)
    assert parameter_error(r5.network, truth)["max_unit_error"] < 1e-12
    assert parameter_error(r1.network, truth)["max_unit_error"] < 1e-12


# ----------------------------------------------------------------------------- validation

def test_refine_validation_errors(teacher):
    truth, X, Y = teacher
    data = (X[:500], Y[:500])
    with pytest.raises(InputError, match="method"):
        refine_network(truth, data, method="newton")
    with pytest.raises(InputError, match="train"):
        refine_network(truth, data, train=("hidden_weights", "bias"))
    with pytest.raises(InputError, match="train"):
        refine_network(truth, data, train=())
    with pytest.raises(InputError, match="holdout_fraction"):
        refine_network(truth, data, holdout_fraction=1.0)
    with pytest.raises(InputError, match="tol"):
        refine_network(truth, data, tol=1e-17)
    with pytest.raises(InputError, match="max_samples"):
        refine_network(truth, data, max_samples=0)
    with pytest.raises(InputError, match="target"):
        refine_network(truth, (X[:500], np.zeros((500, 2))))
    with pytest.raises(InputError, match="columns"):
        refine_network(truth, (X[:500, :4], Y[:500]))
    with pytest.raises(InputError, match="targets"):
        refine_network(truth, (X[:500], None))
    with pytest.raises(InputError, match="TwoLayerNetwork"):
        refine_network(truth.hidden_weights, data)
    with pytest.raises(InputError, match="NaN"):
        refine_network(truth, (np.full((10, 10), np.nan), np.zeros(10)))
    with pytest.raises(InputError, match="validation_data"):
        refine_network(truth, data, validation_data=X[:10])
    # Levenberg-Marquardt needs at least as many residuals as parameters (56 here)
    with pytest.raises(InputError, match="residuals"):
        fit_least_squares(truth, X[:40], Y[:40], method="lm")


def test_mean_squared_loss_definition(teacher):
    truth, X, Y = teacher
    net = truth.copy()
    net.output_bias += 0.5
    assert mean_squared_loss(net, X[:100], Y[:100]) == pytest.approx(0.25, rel=1e-12)
    assert np.isnan(mean_squared_loss(net, X[:0], Y[:0]))


# ----------------------------------------------------------------------------- "gn": Levenberg-Marquardt on
# the normal equations accumulated over all rows, "lm+gn" = "lm" on the rows that fit + "gn" on all rows,
# and "auto" = "gn" (or "lbfgs" with fewer than 4 P residuals or a J^T J larger than the memory budget)

@pytest.fixture(scope="module")
def smooth_noisy():
    """A tanh teacher with label noise. Its empirical loss is smooth, so every method converges to the same
    minimiser (a ReLU loss has kinks, and with noise different methods stop at different nearby local minima:
    3.6e-3 apart for lm and gn on 5000 rows, d = 10, k = 5; see the module docstring)."""
    truth = nr.random_network(6, 3, activation="tanh", rng=70, bias_range=(-0.5, 0.5),
                              output_bias_range=(-0.3, 0.3))
    X, Y = nr.sample(truth, StandardGaussian(6), 3000, noise=0.1, rng=71)
    return truth, X, Y[:, None], _perturbed(truth, 0.05, seed=72)


def _theta(net):
    return Model(net, BLOCKS).pack(net)


def _ftol_distance(net, X, Y, tol=1e-15):
    """Bound on the distance of a point where a method stopped from the minimiser, from the ftol test.

    "gn" stops after a step h whose predicted decrease pred = h^T J^T J h / 2 + lambda h^T D h <= tol F, so
    ||h|| <= sqrt(2 tol F / mu) (mu = smallest eigenvalue of J^T J; tanh has no flat directions); the step
    contracts the error by the Gauss-Newton rate (< 1/2 here: measured ~0.05), so the error left is < ||h||.
    "lm" (MINPACK) stops on xtol/ftol with the same tol, a far smaller distance (its error ~1e-11)."""
    model = Model(net, BLOCKS)
    th = model.pack(net)
    J = model.jacobian(th, X, Y)
    F = 0.5 * mean_squared_loss(net, X, Y)
    return float(np.sqrt(2 * tol * F / np.linalg.eigvalsh(J.T @ J)[0]))


def test_gn_reaches_truth_to_round_off_and_works_with_holdout(teacher):
    truth, X, Y = teacher
    start = _perturbed(truth, 0.05, seed=80)
    net, info = fit_least_squares(start, X[:5000], Y[:5000], method="gn")
    assert info["method"] == "gn" and info["success"] and info["n_samples_used"] == 5000
    assert info["n_jacobian"] <= info["n_iter"] <= 100
    # noiseless data: the residual vanishes at the truth, so Gauss-Newton converges (quadratically up to the
    # damping floor 1e-8) to the truth; the normal equations square cond(J) but each step is recomputed
    assert parameter_error(net, truth)["max_unit_error"] < 1e-9
    # through the pipeline: all training rows are used, the held-out rows decide
    res = refine_network(start, (X, Y), method="gn", rng=0)
    assert res.method == "gn" and res.requested_method == "gn" and res.kept == "refined" and res.improved
    assert res.n_samples_used == 16_000 and res.n_holdout == 4000
    assert parameter_error(res.network, truth)["max_unit_error"] < 1e-9
    assert res.holdout_loss_refined < 1e-25 < res.holdout_loss_start
    assert res.as_dict()["n_jacobian"] >= 1
    json.dumps(res.as_dict())
    # the held-out comparison rejects a "gn" fit of noisy labels when the start is the exact truth
    Xn, Yn = nr.sample(truth, StandardGaussian(10), 600, noise=0.3, rng=81)
    res = refine_network(truth, (Xn, Yn), validation_data=(X[:500], Y[:500]), method="gn", rng=0)
    assert res.holdout_loss_start == 0.0 < res.holdout_loss_refined
    assert res.train_loss_refined < res.train_loss_start and res.kept == "start" and res.network == truth


def test_gn_looser_ftol_keeps_noiseless_exactness_and_stops_near_the_noisy_minimum(teacher, smooth_noisy):
    truth, X, Y = teacher
    start = _perturbed(truth, 0.05, seed=80)
    # noiseless: every Gauss-Newton step removes most of the loss, so a relative-reduction test of 1e-9
    # cannot fire before round-off
    net, info = fit_least_squares(start, X[:5000], Y[:5000], method="gn", ftol=1e-9)
    assert info["success"] and parameter_error(net, truth)["max_unit_error"] < 1e-9
    # noisy: it stops where a step gains less than 1e-9 of the loss; what is left to gain is of that order
    # unless the convergence is very slow (rate q: 1e-9 q / (1 - q)); measured 4.7e-12 relative here, and
    # 1e-7 allows q up to 0.99
    truth_s, Xs, Ys, start_s = smooth_noisy
    tight, info_t = fit_least_squares(start_s, Xs, Ys, method="gn")
    loose, info_l = fit_least_squares(start_s, Xs, Ys, method="gn", ftol=1e-9)
    assert info_l["success"]
    assert info_l["train_loss_refined"] <= info_t["train_loss_refined"] * (1 + 1e-7)
    # a tighter ftol than tol is ignored (the test is never stricter than tol)
    assert fit_least_squares(start_s, Xs, Ys, method="gn", ftol=1e-30)[0] == tight


def test_gn_finds_the_lm_minimiser_on_noisy_data(smooth_noisy):
    truth, X, Y, start = smooth_noisy
    lm, info_lm = fit_least_squares(start, X, Y, method="lm")
    gn, info_gn = fit_least_squares(start, X, Y, method="gn")
    assert info_lm["n_samples_used"] == info_gn["n_samples_used"] == 3000 and info_gn["success"]
    # both minimise the same smooth loss: the parameters agree within the sum of the two stopping distances,
    # each below _ftol_distance (~1e-7 absolute, ~5e-8 relative to ||theta|| ~ 2.5 here)
    bound = 2 * _ftol_distance(gn, X, Y)
    assert np.linalg.norm(_theta(gn) - _theta(lm)) < bound
    assert bound / np.linalg.norm(_theta(lm)) < 1e-7
    assert info_gn["train_loss_refined"] == pytest.approx(info_lm["train_loss_refined"], rel=1e-13)
    # and both are far from the truth at the statistical scale sigma sqrt(P / (n mu)) >> bound
    assert np.linalg.norm(_theta(gn) - _theta(truth)) > 1e4 * bound


def test_lm_then_gn_when_rows_exceed_the_jacobian_budget(smooth_noisy):
    truth, X, Y, start = smooth_noisy
    P = 25  # 3 x 6 + 3 + 3 + 1
    memory = 8 * P * 400  # the dense Jacobian of 400 rows: rows_fit = 400 >= 4 P = 100, < 3000 rows
    auto, info = fit_least_squares(start, X, Y, method="lm+gn", jacobian_memory=memory)
    assert info["method"] == "lm+gn" and info["n_samples_used"] == 3000 and info["success"]
    lm_stage, gn_stage = info["stages"]
    assert (lm_stage["method"], lm_stage["n_samples_used"]) == ("lm", 400)
    assert (gn_stage["method"], gn_stage["n_samples_used"]) == ("gn", 3000)
    assert info["n_iter"] == lm_stage["n_iter"] + gn_stage["n_iter"]
    assert info["train_loss_refined"] == gn_stage["train_loss_refined"] <= gn_stage["train_loss_start"]
    # "lm" alone honours its row cap: it uses the first 400 rows, bit-identical to "lm" on those rows
    lm400, info400 = fit_least_squares(start, X, Y, method="lm", jacobian_memory=memory)
    assert info400["n_samples_used"] == 400
    assert lm400 == fit_least_squares(start, X[:400], Y[:400], method="lm")[0]
    # lm+gn minimises the loss of all 3000 rows: it is the "gn" minimiser (the bound of
    # test_gn_finds_the_lm_minimiser_on_noisy_data), not the minimiser of the first 400 rows, which is a
    # statistical distance ~ sigma sqrt(P / (400 mu)) away
    gn, _ = fit_least_squares(start, X, Y, method="gn")
    bound = 2 * _ftol_distance(gn, X, Y)
    assert np.linalg.norm(_theta(auto) - _theta(gn)) < bound
    assert np.linalg.norm(_theta(lm400) - _theta(gn)) > 1e4 * bound
    assert mean_squared_loss(auto, X, Y) < mean_squared_loss(lm400, X, Y)
    # "auto" goes straight to "gn" on all rows when they exceed the budget (the same loss minimiser)
    auto_gn, info_auto = fit_least_squares(start, X, Y, jacobian_memory=memory)
    assert info_auto["method"] == "gn" and info_auto["n_samples_used"] == 3000
    assert auto_gn == fit_least_squares(start, X, Y, method="gn", jacobian_memory=memory)[0]
    assert np.linalg.norm(_theta(auto_gn) - _theta(auto)) < bound
    # the pipeline reports it; "auto" is "gn" whatever the budget (unless J^T J itself does not fit)
    res = refine_network(start, (X, Y), method="lm+gn", jacobian_memory=memory, rng=0)
    assert res.method == "lm+gn" and res.requested_method == "lm+gn" and res.n_samples_used == 2400
    assert refine_network(start, (X, Y), jacobian_memory=memory, rng=0).method == "gn"
    assert [s["n_samples_used"] for s in res.as_dict()["stages"]] == [400, 2400]
    json.dumps(res.as_dict())
    small = refine_network(start, (X, Y), rng=0)
    assert small.method == "gn" and small.network == refine_network(start, (X, Y), method="gn", rng=0).network


def test_gn_chunking_changes_the_answer_only_by_round_off(teacher, smooth_noisy):
    truth, X, Y = teacher
    model = Model(truth, BLOCKS)
    theta = model.pack(_perturbed(truth, 0.05, seed=90))
    Xs, Ys = X[:700], Y[:700, None]
    J, r = model.jacobian(theta, Xs, Ys), model.residuals(theta, Xs, Ys)
    R = model.forward(theta, Xs, Ys)[-1]
    for rows in (1, 33, 700, 5000):
        JtJ, g = _normal_equations(model, theta, Xs, Ys, R, rows)
        # sums of 700 products: componentwise error <= 700 eps sum|terms| (worst case); we ask 1e-13 of the max
        np.testing.assert_allclose(JtJ, J.T @ J, rtol=0, atol=1e-13 * np.abs(J.T @ J).max())
        np.testing.assert_allclose(g, J.T @ r, rtol=0, atol=1e-13 * np.abs(J).max() * np.abs(r).max() * 700)
    # whole runs with chunks of 37 rows (memory 8 p P 37 bytes, P = 61) and of 8 MiB: noiseless data, both
    # reach the truth to round-off
    start = _perturbed(truth, 0.05, seed=91)
    a, info_a = fit_least_squares(start, X[:3000], Y[:3000], method="gn", jacobian_memory=8 * 61 * 37)
    b, _ = fit_least_squares(start, X[:3000], Y[:3000], method="gn")
    for net in (a, b):
        assert parameter_error(net, truth)["max_unit_error"] < 1e-9
    assert info_a["n_samples_used"] == 3000
    # noisy smooth loss: after 3 trial steps the iterates differ by the round-off of J^T J propagated through
    # the solve, <= cond(J^T J) * (n eps) * ||step|| ~ 1e3 * 7e-13 * 0.1 (worst-case summation bound);
    # at the end both are within the stopping distance of the minimiser
    _, Xt, Yt, start_s = smooth_noisy
    P = 25
    c3 = fit_least_squares(start_s, Xt, Yt, method="gn", max_iter=3, jacobian_memory=8 * P * 37)[0]
    d3 = fit_least_squares(start_s, Xt, Yt, method="gn", max_iter=3)[0]
    assert np.linalg.norm(_theta(c3) - _theta(d3)) < 1e-9
    assert np.linalg.norm(_theta(c3) - _theta(start_s)) > 1e-2  # the three steps did move
    c = fit_least_squares(start_s, Xt, Yt, method="gn", jacobian_memory=8 * P * 37)[0]
    d = fit_least_squares(start_s, Xt, Yt, method="gn")[0]
    assert np.linalg.norm(_theta(c) - _theta(d)) < 2 * _ftol_distance(d, Xt, Yt)


def test_gn_validation_and_failure_reports(teacher):
    truth, X, Y = teacher
    with pytest.raises(InputError, match="gn"):
        fit_least_squares(truth, X[:500], Y[:500], method="newton")
    with pytest.raises(InputError, match="gn"):
        refine_network(truth, (X[:500], Y[:500]), method="gauss-newton")
    # the Jacobian of one row (8 p P = 488 bytes) must fit the budget
    with pytest.raises(InputError, match="jacobian_memory"):
        fit_least_squares(truth, X[:500], Y[:500], method="gn", jacobian_memory=400)
    with pytest.raises(InputError, match="max_iter"):
        fit_least_squares(truth, X[:500], Y[:500], method="gn", max_iter=0)
    # out of iterations: reported, not hidden
    start = _perturbed(truth, 0.05, seed=100)
    net, info = fit_least_squares(start, X[:500], Y[:500], method="gn", max_iter=1)
    assert not info["success"] and info["status"] == 0 and info["n_iter"] == 1
    assert "maximum" in info["message"]
    assert info["train_loss_refined"] < info["train_loss_start"]
    # a start whose loss overflows: refused by the optimiser, the start is returned
    huge = truth.copy()
    huge.output_weights *= 1e200
    huge.hidden_weights *= 1e200
    with np.errstate(over="ignore", invalid="ignore"):
        net, info = fit_least_squares(huge, X[:500], Y[:500], method="gn")
    assert not info["success"] and info["status"] == -1 and "not finite" in info["message"]
    assert net == huge
    # "gn" is damped, so fewer residuals than parameters (40 < 61) are allowed (unlike "lm"): the fit
    # interpolates the 40 rows
    net, info = fit_least_squares(start, X[:40], Y[:40], method="gn")
    assert info["train_loss_refined"] < 1e-20 * info["train_loss_start"]


def test_lm_row_cap_is_documented():
    import nnrecover.refine as refine_module
    assert "FIRST" in refine_module.__doc__ and "lm+gn" in refine_module.__doc__
    assert "only the first" in fit_least_squares.__doc__
    assert refine_module.METHODS == ("auto", "lm", "trf", "lbfgs", "gn", "lm+gn")


def _normal_equations_against_dense(net, train, n_rows: int, seed: int, rtol: float) -> np.ndarray:
    """J^T J and J^T r of _normal_equations (chunks of 77 rows, which do not divide the rows) against the
    products of the dense Jacobian, relative to their largest entries; returns J^T J."""
    gen = np.random.default_rng(seed)
    X, Y = gen.standard_normal((n_rows, net.n_inputs)), gen.standard_normal((n_rows, net.n_outputs))
    model = Model(net, train)
    theta = model.pack(net)
    J, r = model.jacobian(theta, X, Y), model.residuals(theta, X, Y)
    JtJ, g = _normal_equations(model, theta, X, Y, model.forward(theta, X, Y)[-1], 77)
    assert JtJ.shape == (model.n_params, model.n_params)
    assert np.max(np.abs(JtJ - J.T @ J)) < rtol * max(1.0, np.max(np.abs(J.T @ J)))
    assert np.max(np.abs(g - J.T @ r)) < rtol * max(1.0, np.max(np.abs(J.T @ r)))
    return JtJ


@pytest.mark.parametrize("train", [BLOCKS, ("hidden_weights",), ("hidden_bias", "output_weights"),
                                   ("output_weights", "output_bias"), ("hidden_weights", "output_bias")])
def test_structured_normal_equations_equal_dense_jacobian_products(train):
    # J^T J and J^T r summed over the outputs in closed form (several outputs) equal the products of the
    # dense Jacobian up to the rounding of sums of 500 terms
    net = nr.random_network(6, 3, 4, rng=90, bias_range=(-0.5, 0.5), output_bias_range=(-0.3, 0.3))
    _normal_equations_against_dense(net, train, 500, 91, 1e-13)


@pytest.mark.parametrize("activation", ["relu", "tanh", "abs", "leaky_relu"])
@pytest.mark.parametrize("train", [BLOCKS, ("hidden_weights",), ("hidden_weights", "hidden_bias")])
def test_normal_equations_by_unit_pairs_equal_dense_jacobian_products(activation, train):
    # from 24 inputs the hidden block of J^T J is summed by unit pairs over the rows where both units have a
    # nonzero derivative: 0/1 derivatives (relu) by row selection, positive ones (tanh, leaky relu) by
    # rows scaled with sqrt(g_i g_j), signed ones (abs) by a one-sided scaling. Each entry is a sum of at
    # most 700 products of size <= max|x|^2 ~ 20, so both forms agree to ~700 eps 20 relative to the largest
    from nnrecover import refine as refine_module

    assert refine_module.model.UNIT_PAIR_MIN_INPUTS <= 30
    net = nr.random_network(30, 4, 3, rng=92, bias_range=(-0.5, 0.5), output_bias_range=(-0.3, 0.3),
                            activation=activation)
    JtJ = _normal_equations_against_dense(net, train, 700, 93, 1e-12)
    np.testing.assert_array_equal(JtJ, JtJ.T)


def _span_teacher(n: int = 6000):
    """d = 20 > k = 3 units, one output, biases (P = 67): the teacher, n noiseless rows and a start 1e-2
    off it, shared by the span-path tests."""
    truth = nr.random_network(20, 3, rng=95, bias_range=(-0.5, 0.5), output_bias_range=(-0.3, 0.3))
    X, Y = nr.sample(truth, StandardGaussian(20), n, rng=96)
    return truth, X, Y, _perturbed(truth, 1e-2, seed=97)


def test_span_first_reaches_round_off_and_records_its_stages():
    # noiseless, d = 20 > k = 3: the span polish cannot reach the truth (the true rows leave the start's
    # span by ~1e-2), the full-space stage on 960 rows (>> P = 67 parameters: the noiseless least-squares
    # minimiser is unique and is the truth) reaches round-off on every row, which ends the polish there.
    # (960 rows are fewer than three times the coarse stage's max(5 * 67, 20 * 20) = 400: no coarse stage)
    truth, X, Y, start = _span_teacher()
    res = refine_network(start, (X, Y), full_samples=1000, rng=0)
    assert res.method == "gn" and res.kept == "refined"
    stages = res.extra["stages"]
    assert [(st["stage"], st["n_samples_used"]) for st in stages[:2]] == [("span", 960), ("full", 960)]
    assert stages[-1].get("stopped") == "fits all rows to round-off"
    assert parameter_error(res.network, truth)["max_unit_error"] < 1e-10
    # with label noise no subsample fits every row, so the all-rows stages run; the estimation error of a
    # least-squares fit of P = 67 parameters to 4800 rows with noise 0.05 is about 0.05 sqrt(67 / 4800)
    # = 6e-3 per parameter, a few times that per unit
    Xn, Yn = nr.sample(truth, StandardGaussian(20), 6000, noise=0.05, rng=98)
    noisy = refine_network(start, (Xn, Yn), full_samples=1000, rng=0)
    assert [st["stage"] for st in noisy.extra["stages"]] == ["span", "full", "full-gradient", "span"]
    assert parameter_error(noisy.network, truth)["max_unit_error"] < 0.05
    json.dumps(res.as_dict())
    plain = refine_network(start, (X, Y), span=False, rng=0)
    assert "stages" not in plain.extra and parameter_error(plain.network, truth)["max_unit_error"] < 1e-10
    with pytest.raises(InputError, match="span"):
        refine_network(start, (X, Y), span="yes")
    with pytest.raises(InputError, match="full_samples"):
        refine_network(start, (X, Y), full_samples=0)


def test_span_first_subsample_holds_five_residuals_per_parameter_whatever_full_samples():
    # one output, P = 67: full_samples = 200 rows are fewer than 4 P residuals, where "auto" would run L-BFGS
    # on them (5000 iterations at d = 300, k = 20); the subsample is widened to every 14th of the 4800
    # training rows, 343 >= 5 P, and the full-space stage runs Gauss-Newton to round-off
    truth, X, Y, start = _span_teacher()
    res = refine_network(start, (X, Y), full_samples=200, rng=0)
    stages = res.extra["stages"]
    assert [(st["stage"], st["n_samples_used"]) for st in stages] == [("span", 343), ("full", 343)]
    assert stages[1]["method"] == "gn" and stages[-1].get("stopped") == "fits all rows to round-off"
    assert parameter_error(res.network, truth)["max_unit_error"] < 1e-10
    # fewer training rows than 5 P: all of them
    few = refine_network(start, (X[:400], Y[:400]), full_samples=200, rng=0)
    assert few.extra["stages"][0]["n_samples_used"] == few.n_samples_used == 320


def test_default_gauss_newton_fits_predicts_the_full_space_method_of_the_defaults():
    # P = 67, one output: refine_network trains on 4/5 of the rows, and "auto" runs Gauss-Newton from 4 P = 268
    # residuals: 335 rows give 268 training rows, 330 give 264 (L-BFGS)
    from nnrecover.refine import default_gauss_newton_fits
    from nnrecover.data import as_data_source

    truth, X, Y, start = _span_teacher(335)
    for n, gn in ((335, True), (330, False)):
        assert default_gauss_newton_fits(start, as_data_source((X[:n], Y[:n]))) is gn
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = refine_network(start, (X[:n], Y[:n]), rng=0)
        full = next(st for st in res.extra["stages"] if st["stage"] == "full")
        assert full["n_samples_used"] == 4 * n // 5 and full["method"] == ("gn" if gn else "lbfgs")
    # streams are gathered up to 512 MiB of rows. d = 1000, k = 20 (P = 20041): 67042 rows, whose 53634
    # training rows are fewer than 4 P. d = 300, k = 20 (P = 6041): 200000 rows, but J^T J (292 MB) exceeds the
    # budget, so it takes the matrix-free solver, which needs ReLU units
    def stream(d, activation="relu"):
        net = nr.random_network(d, 20, rng=0, activation=activation)
        return net, as_data_source(nr.sample_stream(net, StandardGaussian(d), 1_000_000, rng=1))

    assert not default_gauss_newton_fits(*stream(1000))
    assert default_gauss_newton_fits(*stream(300))
    assert not default_gauss_newton_fits(*stream(300, "tanh"))
    # a one-pass iterator of unknown length: no count to rely on
    assert not default_gauss_newton_fits(start, as_data_source(iter([(X, Y)])))


def test_span_first_leaves_an_exact_start_alone_and_never_allocates_a_normal_matrix_beyond_the_budget():
    truth, X, Y, start = _span_teacher()
    # the teacher itself fits every row to round-off: nothing runs, the start comes back unchanged
    res = refine_network(truth, (X, Y), full_samples=1500, rng=0)
    assert res.extra["stages"] == [] and res.n_iter == 0 and "round-off" in res.message
    np.testing.assert_array_equal(res.network.hidden_weights, truth.hidden_weights)
    # a budget below J^T J of the full space (P = 66 with the output bias frozen: 8 P^2 = 34848 bytes) but
    # above the span stage's (P = 15), and a frozen block (the matrix-free solver needs every block trained):
    # the full-space stage runs L-BFGS and the all-rows fixed-Hessian steps are skipped
    Xn, Yn = nr.sample(truth, StandardGaussian(20), 6000, noise=0.05, rng=98)
    start.output_bias[:] = truth.output_bias
    small = refine_network(start, (Xn, Yn), full_samples=1500, jacobian_memory=30_000, train=BLOCKS[:3], rng=0)
    stages = small.extra["stages"]
    assert [st["stage"] for st in stages] == ["span", "full", "span"]
    assert stages[1]["method"] == "lbfgs" and "jacobian_memory" in stages[1]["skipped"]
    # the estimation error of the fit, as in the test above: a few times 0.05 sqrt(67 / 4800) per unit
    assert parameter_error(small.network, truth)["max_unit_error"] < 0.05


def test_gather_samples_reads_only_the_chosen_rows_of_an_array():
    # the same keys in the same order as the chunk pass over a list of chunks, so the same rows; memory
    # is the output plus the keys, not twice the sample held and concatenated
    from nnrecover.refine import gather_samples

    rng = np.random.default_rng(0)
    X = rng.standard_normal((100_000, 40))
    Y = rng.standard_normal((100_000, 3))
    chunks = [(X[i:i + 7000], Y[i:i + 7000]) for i in range(0, X.shape[0], 7000)]
    Xc, Yc, seen_c = gather_samples(chunks, 10_000, rng=5)
    (Xa, Ya, seen_a), peak = _traced_peak(lambda: gather_samples((X, Y), 10_000, rng=5))
    np.testing.assert_array_equal(Xa, Xc)
    np.testing.assert_array_equal(Ya, Yc)
    assert seen_a == seen_c == 100_000
    out = Xa.nbytes + Ya.nbytes  # 3.4 MB; the keys of one 2^20 block are 8 MB at most (here 0.8 MB)
    assert peak < 2 * out + 8 * 2**20, peak
    with pytest.raises(InputError, match="rows gathered"):  # the chosen rows are validated like chunks
        gather_samples((np.full((50, 4), np.nan), np.zeros(50)), 10, rng=0)


def test_span_first_runs_a_coarse_full_space_stage_first_on_a_large_subsample():
    # d = 20, k = 3, one output: P = 67, so the coarse stage has max(5 * 67, 20 * 20) = 400 rows; the strided
    # subsample of 4800 training rows with full_samples = 1500 has 1200 >= 3 * 400 rows, so the coarse stage
    # runs first (no span stage before it) on every third of them. Noiseless: 400 rows (6 residuals per
    # parameter) determine the truth, so it reaches round-off on every row by itself and the polish ends
    # there; the loss it records is that of all 4800 training rows
    truth, X, Y, start = _span_teacher()
    res = refine_network(start, (X, Y), full_samples=1500, rng=0)
    stages = res.extra["stages"]
    assert [(st["stage"], st["n_samples_used"]) for st in stages] == [("full", 400)]
    assert stages[-1].get("stopped") == "fits all rows to round-off"
    assert parameter_error(res.network, truth)["max_unit_error"] < 1e-10
    # on all training rows: the start's loss (the error 1e-2 of its parameters) and the fit's at round-off
    assert res.train_loss_start > 1e-6
    assert res.train_loss_refined <= (64 * np.finfo(float).eps) ** 2 * np.mean(Y ** 2)
    # label noise: the full-space stage on all 1200 subsample rows and the all-rows stages follow the coarse
    # one; a least-squares fit of P = 67 parameters to 4800 rows with noise 0.05 has an estimation error of
    # about 0.05 sqrt(67 / 4800) = 6e-3 per parameter, a few times that per unit
    Xn, Yn = nr.sample(truth, StandardGaussian(20), 6000, noise=0.05, rng=98)
    noisy = refine_network(start, (Xn, Yn), full_samples=1500, rng=0)
    assert [(st["stage"], st["n_samples_used"]) for st in noisy.extra["stages"]] == [
        ("full", 400), ("full", 1200), ("full-gradient", 4800), ("span", 4800)]
    assert parameter_error(noisy.network, truth)["max_unit_error"] < 0.05


def test_refine_network_reads_the_same_training_and_held_out_rows_from_arrays_as_from_chunks():
    # arrays: the training and held-out rows are read from the data by index, without a gathered copy of
    # all rows; a list of chunks goes through gather_samples. The keys and the split are the same draws, so
    # the two runs see the same rows in the same order and return the same bits
    truth = nr.random_network(8, 2, rng=11)
    X, Y = nr.sample(truth, StandardGaussian(8), 5000, noise=0.05, rng=12)
    start = _perturbed(truth, 1e-2, seed=13)
    chunks = [(X[i:i + 700], Y[i:i + 700]) for i in range(0, 5000, 700)]
    a = refine_network(start, (X, Y), max_samples=3000, rng=4)
    b = refine_network(start, chunks, max_samples=3000, rng=4)
    assert (a.n_samples_used, a.n_holdout, a.n_samples_seen) == (b.n_samples_used, b.n_holdout, 5000)
    assert a.holdout_loss_start == b.holdout_loss_start and a.holdout_loss_refined == b.holdout_loss_refined
    np.testing.assert_array_equal(a.network.hidden_weights, b.network.hidden_weights)
    with pytest.raises(InputError, match="holdout_fraction"):
        refine_network(start, (X[:1], Y[:1]), holdout_fraction=0.5)


def test_span_first_on_noiseless_arrays_never_holds_all_training_rows():
    # d = 50, k = 3, one output, 1e5 rows: the 4e4 training rows take 16.3 MB; on noiseless data the subsample
    # stages reach round-off, so only the 5000-row subsample (2 MB), loss chunks of 8192 rows (3.3 MB) and,
    # after the optimisation, the 1e4 held-out rows (4.1 MB) are read: the peak is the subsample and one
    # Gauss-Newton chunk (at most 8 MiB), below the training rows alone (the previous design: 50 MB)
    truth = nr.random_network(50, 3, rng=21)
    X, Y = nr.sample(truth, StandardGaussian(50), 100_000, rng=22)
    start = _perturbed(truth, 1e-2, seed=23)
    res, peak = _traced_peak(lambda: refine_network(start, (X, Y), max_samples=50_000, full_samples=5000, rng=0))
    assert res.extra["stages"][-1].get("stopped") == "fits all rows to round-off"
    assert parameter_error(res.network, truth)["max_unit_error"] < 1e-10
    assert res.n_samples_used == 40_000 and peak < 16e6


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("full_samples, stages", [(2000, [("span", 1600), ("full", 1600)]), (4800, [("full", 600)])])
def test_span_path_with_unit_pair_normal_equations_reaches_round_off(activation, full_samples, stages):
    # d = 30 >= 24 inputs: every normal-equation pass sums J^T J's hidden block by unit pairs. k = 4 units,
    # 3 outputs, biases: P = 4 * 31 + 3 * 5 = 139, so the coarse stage has max(5 * 139 / 3, 20 * 30) = 600
    # rows. A strided subsample of 1600 of the 4800 training rows holds less than three times that: the span
    # stage, then the full-space stage on the 1600 rows; all 4800 rows hold more: the coarse stage alone.
    # Noiseless: the least-squares minimiser is the teacher, reached to round-off (every row's residual at
    # (64 eps)^2 of E[y^2])
    truth = nr.random_network(30, 4, 3, rng=94, bias_range=(-0.5, 0.5), output_bias_range=(-0.3, 0.3),
                              activation=activation)
    X, Y = nr.sample(truth, StandardGaussian(30), 6000, rng=95)
    start = _perturbed(truth, 1e-2, seed=96)
    res = refine_network(start, (X, Y), full_samples=full_samples, rng=0)
    assert [(st["stage"], st["n_samples_used"]) for st in res.extra["stages"]] == stages
    assert res.extra["stages"][-1].get("stopped") == "fits all rows to round-off"
    assert res.train_loss_refined <= (64 * np.finfo(float).eps) ** 2 * np.mean(Y ** 2)
    assert parameter_error(res.network, truth)["max_unit_error"] < 1e-10


def test_gn_chord_steps_use_the_exact_gradient_and_end_at_round_off(teacher):
    # the chord steps' gradient pass (J^T r from the model's structure, in row chunks) equals J^T r of the
    # dense Jacobian to round-off; a noiseless fit whose last steps may be chord steps still ends at the
    # truth to round-off on every row (a chord step is taken at round-off while it divides the loss)
    from nnrecover.refine import Model
    from nnrecover.refine.model import _gradient_pass

    truth, X, Y = teacher
    start = _perturbed(truth, 0.05, seed=81)
    model = Model(start, BLOCKS)
    theta = model.pack(start)
    X3, Y3 = X[:3000], Y[:3000].reshape(3000, -1)
    J, r = model.jacobian(theta, X3, Y3), model.residuals(theta, X3, Y3)
    g = _gradient_pass(model, theta, X3, Y3, chunk_rows=700)
    assert np.max(np.abs(g - J.T @ r)) <= 1e-12 * np.max(np.abs(J.T @ r))
    net, info = fit_least_squares(start, X[:5000], Y[:5000], method="gn")
    assert info["success"] and info["n_jacobian"] + info["n_chord"] <= info["n_iter"]
    assert parameter_error(net, truth)["max_unit_error"] < 1e-12
    assert mean_squared_loss(net, X, Y) < (64 * np.finfo(float).eps) ** 2 * float(np.mean(Y ** 2))


def test_gn_keeps_no_parameter_square_matrix_across_a_normal_equation_pass():
    # "gn"'s memory beyond the rows, d = 100, k = 10, one output (P = 10 * 102 + 10 + 1 = 1031, one P x P
    # matrix 8.5 MB): the normal-equation pass (the k^2 unit-pair blocks of (d + 1)^2, about P^2, and
    # J^T J), then the damped matrix factored in place and one Jacobian chunk: measured 36 MB, 4.3 P^2.
    # A factor kept across the next normal-equation pass, or a copy of the damped matrix, adds two P^2
    # (measured 53 MB) and exceeds the bound of 5 P^2
    truth = nr.random_network(100, 10, rng=11)
    X, Y = nr.sample(truth, StandardGaussian(100), 3000, rng=12)
    start = _perturbed(truth, 0.05, seed=13)
    P = 10 * 102 + 10 + 1
    fit_least_squares(start, X, Y, method="gn")  # first call: imports and caches outside the measurement
    (net, info), peak = _traced_peak(lambda: fit_least_squares(start, X, Y, method="gn"))
    assert info["success"] and parameter_error(net, truth)["max_unit_error"] < 1e-9
    assert peak < 5 * 8 * P * P
