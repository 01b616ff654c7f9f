"""Restarts of the joint decomposition in Awasthi et al.'s Algorithm 4 (``decompose._joint_runs``): runs
that do not converge within a short probe are abandoned for new pencil draws, and the best of them is
replayed from its own draws with the full sweep limit only when none converged."""

from __future__ import annotations

import numpy as np

from nnrecover.learners.awasthi2021 import decompose
from nnrecover.tensor.joint_diag import joint_diagonalize


def _slices(n=8, r=4, K=12, noise=0.0, seed=0):
    g = np.random.default_rng(seed)
    A = g.standard_normal((n, r))
    S = np.einsum("ai,ki,bi->kab", A, g.standard_normal((K, r)), A)
    E = g.standard_normal(S.shape)
    return S + noise * np.linalg.norm(S) / np.linalg.norm(E) * 0.5 * (E + E.transpose(0, 2, 1))


def test_exact_slices_converge_on_the_first_run_as_a_single_call():
    # exact slices: the first run converges within the probe, so the result is that of one direct call with the
    # same generator, bit for bit, and it is exact
    S, r = _slices(), 4
    res, attempts = decompose._joint_runs(S, r, np.random.default_rng(3), 5)
    ref = joint_diagonalize(S, r, rng=np.random.default_rng(3), n_draws=5, symmetric=True, rank_tol=0.0)
    assert attempts == 1 and res.diagnostics["converged"]
    assert res.diagnostics["residual"] < 1e-12
    np.testing.assert_array_equal(res.factors[0], ref.factors[0])
    np.testing.assert_array_equal(res.weights, ref.weights)


def test_unconverged_runs_replay_the_best_from_its_own_draws(monkeypatch):
    # a one-sweep probe cannot reach the relative decrease 1e-10 on noisy slices, so every run counts as
    # not converged; the result must then be the full-limit run from the draws of the run with the smallest
    # probe residual (the same pencil start), and the caller's generator must have advanced past all runs
    monkeypatch.setattr(decompose, "JOINT_PROBE_SWEEPS", 1)
    S, r = _slices(noise=0.05), 4
    rng = np.random.default_rng(7)
    res, attempts = decompose._joint_runs(S, r, rng, 5)
    assert attempts == decompose.JOINT_RESTARTS
    g = np.random.default_rng(7)
    states, probes = [], []
    for _ in range(decompose.JOINT_RESTARTS):
        states.append(g.bit_generator.state)
        probes.append(joint_diagonalize(S, r, rng=g, n_draws=5, symmetric=True, rank_tol=0.0,
                                        max_iter=1).diagnostics["residual"])
    assert rng.bit_generator.state == g.bit_generator.state
    replay = np.random.default_rng()
    replay.bit_generator.state = states[int(np.argmin(probes))]
    full = joint_diagonalize(S, r, rng=replay, n_draws=5, symmetric=True, rank_tol=0.0,
                             max_iter=decompose.JOINT_MAX_SWEEPS)
    assert full.diagnostics["residual"] < min(probes)
    np.testing.assert_array_equal(res.factors[0], full.factors[0])
