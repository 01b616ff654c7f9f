"""Tests of the orientation solve (nnrecover.extraction.signs) and of lattice reduction
(nnrecover.extraction.lattice)."""

from __future__ import annotations

import platform
import sys
import warnings

import numpy as np
import pytest
from extraction_boxes import CountingModel, angles, rel_error

import nnrecover as nr
from nnrecover.errors import CertificateWarning, InputError
from nnrecover.extraction import extract
from nnrecover.extraction.signs import resolve_signs, sign_failure_reason


def _subset_sum(m, k, noise, seed):
    """An orientation system ``M t = rhs`` like the extractor's: unit rows times output weights, the
    right-hand side off by ``noise`` relative to each equation's coefficient scale."""
    rng = np.random.default_rng(seed)
    W = rng.standard_normal((k, m))
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    alpha = rng.uniform(0.5, 1.5, k) * rng.choice([-1, 1], k)
    M = -(alpha[:, None] * W).T
    t = rng.integers(0, 2, k)
    scale = np.abs(M).sum(axis=1)
    return M, M @ t + noise * scale * rng.standard_normal(m), t, scale, W, alpha


def test_resolve_signs_recovers_orientations_when_k_exceeds_d():
    rng = np.random.default_rng(1)
    d, k = 4, 10
    W = rng.standard_normal((k, d))
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    alpha = rng.uniform(0.5, 1.5, (k, 1)) * rng.choice([-1, 1], (k, 1))
    t = rng.integers(0, 2, k)
    U = -(t[:, None] * alpha * W).sum(axis=0)[None, :]
    found, info = resolve_signs(W, alpha, U, rel_tol=1e-11)
    assert np.array_equal(found, t) and info["max_relative_residual"] < 1e-11
    assert info["method"].startswith("0/1")
    # k <= d: a plain least-squares solve
    found, info = resolve_signs(W[:3], alpha[:3], -(t[:3, None] * alpha[:3] * W[:3]).sum(0)[None], rel_tol=1e-11)
    assert np.array_equal(found, t[:3]) and info["method"] == "least squares"


def test_resolve_signs_projects_out_the_units_a_partial_fit_leaves_free():
    # a deeper layer's neuron i whose critical points all lie on one side of unit j's boundary cannot
    # tell relu(z_j) from z_j: its skip part carries c_ij w_j with c_ij unknown, and alpha[j, i] = 0
    rng = np.random.default_rng(4)
    d, k, p = 10, 8, 6
    W = rng.standard_normal((k, d))
    alpha = rng.standard_normal((k, p))
    t = rng.integers(0, 2, k)
    U = -np.einsum("j,ji,jl->il", t, alpha, W)
    free = [rng.choice(k, size=rng.integers(0, 3), replace=False) for _ in range(p)]
    for i, units in enumerate(free):
        for j in units:
            U[i] += rng.standard_normal() * W[j]
            alpha[j, i] = 0.0
    found, info = resolve_signs(W, alpha, U, rel_tol=1e-11, free=free)
    assert np.array_equal(found, t) and info["max_relative_residual"] < 1e-12
    assert info["free_units"] == sum(len(u) for u in free) > 0
    # read as exact equations the same system has no 0/1 solution
    assert resolve_signs(W, alpha, U, rel_tol=1e-11)[0] is None


def test_sign_failure_reason_tells_the_time_limit_from_the_model():
    # k > d: the 0/1 solve; with no time at all neither solver runs, which says nothing about the model
    _, rhs, _, _, W, alpha = _subset_sum(4, 10, 0.0, seed=2)
    found, info = resolve_signs(W, alpha[:, None], rhs[None, :], rel_tol=1e-11, time_limit=0.0)
    assert found is None
    reason = sign_failure_reason(info)
    assert "not found within the time limit of 0 s (sign_time_limit)" in reason and "not made of" not in reason
    assert "HiGHS MILP not run" in reason
    # a least-squares solve whose rounding leaves a residual: the residual and the tolerance are named
    U = -(alpha[:3, None] * W[:3]).sum(0)[None] * 0.5          # t = 1/2: no 0/1 vector
    found, info = resolve_signs(W[:3], alpha[:3, None], U, rel_tol=1e-11)
    assert found is None and info["method"] == "least squares"
    reason = sign_failure_reason(info)
    assert reason.startswith("least-squares sign solve (3 unknowns, 4 equations): the rounded 0/1 vector leaves "
                             "relative residual") and "above the tolerance 1e-11" in reason
    assert "0.5 away from the nearest integers" in reason and "time" not in reason


def test_lattice_reduction_and_wide_binary_solve():
    from nnrecover.extraction.lattice import _gram_schmidt, binary_solution, lll_reduce

    rng = np.random.default_rng(3)
    B = rng.integers(-50, 50, (8, 8)).astype(float)
    R, finished = lll_reduce(B)
    assert finished
    # same lattice: R = U B with U integral and unimodular
    U = R @ np.linalg.inv(B)
    assert np.allclose(U, np.rint(U), atol=1e-8) and abs(abs(np.linalg.det(np.rint(U))) - 1) < 1e-8
    # LLL-reduced (delta = 0.99): size-reduced and the Lovasz condition on consecutive vectors
    mu, Bn = _gram_schmidt(R)
    assert np.all(np.abs(np.tril(mu, -1)) <= 0.5 + 1e-9)
    assert np.all(Bn[1:] >= (0.99 - np.diag(mu, -1) ** 2) * Bn[:-1] * (1 - 1e-9))
    # k = 40 binary unknowns, m = 5 equations known to 1e-13: a low-density subset sum; the solution
    # is unique with overwhelming probability (2^40 sums spread over a 5-dimensional box of side ~10
    # resolved to 1e-11), so the lattice must return exactly t
    m, k = 5, 40
    M = rng.standard_normal((m, k))
    t = rng.integers(0, 2, k)
    rhs = M @ t + 1e-13 * rng.standard_normal(m)
    tol = 1e-11 * (np.abs(M).sum(axis=1) + np.abs(rhs))
    assert np.array_equal(binary_solution(M, rhs, tol), t)


@pytest.mark.parametrize("backend", ["numpy", "auto"])
def test_lattice_backends_solve_the_same_subset_sum(backend):
    from nnrecover.extraction.lattice import binary_solution, have_fpylll

    if backend == "auto" and sys.platform == "linux" and platform.machine() == "x86_64":
        assert have_fpylll(), "fpylll is a dependency of the test extra on Linux x86_64"
    # m = 6 equations known to 1e-15 weighted at 1e-14, k = 40 unknowns: density 40 / (6 * 46) = 0.14,
    # far below the 0.94 at which the solution is the lattice's shortest vector; the solution is unique
    # with overwhelming probability (2^40 sums in a 6-dimensional box resolved to 1e-14), so both
    # backends must return exactly t
    M, rhs, t, scale, _, _ = _subset_sum(6, 40, 1e-15, seed=5)
    info = {}
    found = binary_solution(M, rhs, 1e-14 * scale, time_limit=60, backend=backend, info=info)
    assert np.array_equal(found, t)
    assert info["reduction"].endswith("(fplll)" if backend == "auto" and have_fpylll() else "(numpy)")
    with pytest.raises(InputError, match="backend"):
        binary_solution(M, rhs, scale, backend="magic")


def test_lattice_falls_back_to_numpy_when_fplll_aborts(monkeypatch):
    from nnrecover.extraction import lattice as _lattice

    def abort(*args, **kwargs):
        raise RuntimeError("Aborted")     # what cysignals raises for fplll's "infinite loop in babai"

    monkeypatch.setattr(_lattice, "_solve_fpylll", abort)
    monkeypatch.setattr(_lattice, "have_fpylll", lambda: True)
    M, rhs, t, scale, _, _ = _subset_sum(6, 40, 1e-15, seed=5)
    info = {}
    assert np.array_equal(_lattice.binary_solution(M, rhs, 1e-14 * scale, info=info), t)
    assert info["fplll_error"] == "Aborted" and info["reduction"] == "LLL (numpy)"
    with pytest.raises(RuntimeError, match="Aborted"):
        _lattice.binary_solution(M, rhs, 1e-14 * scale, backend="fpylll")


def test_resolve_signs_weights_the_lattice_by_precision():
    # d = 10 equations, k = 100 units: the extractor's case of a scalar output with k = 10 d. Weighted
    # by the acceptance tolerance (1e-11) the subset sum has density 100 / (10 * 36) = 0.28, weighted by
    # the coefficients' precision (1e-14) 0.22: the weight ladder must reach the solution, which meets
    # the equations to the noise (1e-15) and therefore within rel_tol
    _, _, t, _, W, alpha = _subset_sum(10, 100, 0.0, seed=7)
    U = -(t[:, None] * alpha[:, None] * W).sum(axis=0)[None, :]
    U = U * (1 + 1e-15 * np.random.default_rng(8).standard_normal(U.shape))
    found, info = resolve_signs(W, alpha[:, None], U, rel_tol=1e-11, precision=1e-14, time_limit=120)
    assert np.array_equal(found, t)
    assert info["max_relative_residual"] <= 1e-11
    assert info["lattice_weights_tried"][0] == 1e-14


def test_wide_scalar_box_k_10d_is_oriented():
    # d = 10, k = 100, scalar output: 10 equations for 100 orientations; solved by the lattice at the
    # precision of a float64 box (max angle ~1e-14 and function ~1e-14 measured)
    d, k = 10, 100
    net = nr.random_network(d, k, rng=0, bias_range=(-1, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CertificateWarning)
        res = extract(CountingModel(net), d, rng=0, sign_time_limit=60)
    assert res.network_.n_hidden == k and res.diagnostics_["linear_units"] == 0
    assert angles(res.network_, net).max() < 1e-8
    assert rel_error(res.network_, net, d) < 1e-9
    assert res.diagnostics_["signs"]["method"].startswith("0/1 solve by lattice")
