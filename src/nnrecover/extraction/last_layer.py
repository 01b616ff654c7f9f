"""The output layer and the finishing of the last hidden layer of a layer-by-layer extraction.

:class:`LastLayerFinishing` holds the steps of :class:`~nnrecover.extraction.deep.DeepExtractor` that
work on the layers once they are found: the least-squares fit of the output layer on the features of
the known layers (with the orientation of the last layer by fit and the always-active neurons that
carry a linear part, CJM Section 4.4), then, in :meth:`LastLayerFinishing._finish`, the signs of the
last hidden layer from the output's skip coefficients (Canales-Martinez et al., EUROCRYPT 2024), the
joint refinement of the last two layers on queries next to their boundaries (the precision improvement
of CJM Section 6 for the layer whose neurons had only partial signatures), the simplification of the
last layer (copies merged, neurons the function does not need dropped, unseen coefficients completed
from the linear part) and the certificate on fresh queries.

It is a base class of ``DeepExtractor`` and uses the extractor's state: ``oracle``, ``noise``,
``known`` (:class:`~nnrecover.extraction.stack.KnownLayers`), the critical points ``_points`` of each
layer, ``rng``, ``d``, ``scale``, ``radius``, ``n_certify``, ``sign_time_limit``, ``stage`` and the
diagnostics ``diag``. It calls nothing of ``DeepExtractor`` itself, so the imports run one way:
``deep`` imports this module.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import least_squares

from .._threads import blas_threads
from .output import scaled_least_squares
from .queries import query_batched, unseen_below
from .signs import resolve_signs

__all__ = ["LastLayerFinishing", "hyperplane_through", "prune_silent", "relu_features"]

#: certificate and joint-fit queries next to each hidden neuron's boundary, per side, chosen from a local
#: Gaussian pool of _BOUNDARY_POOL inputs (LastLayerFinishing._boundary_queries)
_BOUNDARY_PER_SIDE, _BOUNDARY_POOL = 8, 65536
#: pool points queried inside the rare side (under 5% of the pool) of a neuron (LastLayerFinishing._boundary_queries)
_RARE_SIDE = 128
#: 1 - |cosine| below which two last-layer hyperplanes are taken as one for the joint fit's first start
_NEAR_COPY = 0.05
#: evaluations per Levenberg-Marquardt fit of the joint refinement (a fit that reaches the box takes 70-200
#: on 40-20-10-10-1; one that stalls would otherwise take 100 per parameter)
_REFINE_MAX_EVALUATIONS = 1000
#: fits of the joint refinement, each on the queries of the last plus inputs next to its boundaries
_REFINE_ROUNDS = 4
#: largest Jacobian (bytes) of the joint fit of the last two layers (LastLayerFinishing._refine_last_layer)
_REFINE_MAX_BYTES = 1 << 29


def relu_features(weights, biases, X: np.ndarray) -> np.ndarray:
    """``relu(... relu(X W_1^T + b_1) ...)`` through the layers given (``X`` itself for none)."""
    H = X
    for W, b in zip(weights, biases):
        H = np.maximum(H @ W.T + b, 0.0)
    return H


def prune_silent(weights: list[np.ndarray], biases: list[np.ndarray]) -> tuple[list, list, list[int]]:
    """Hidden neurons whose outgoing weights are zero to round-off (relative to the layer's largest), removed.

    Such a neuron does not change the function. A walk that leaves neurons uncrossed can return a copy
    of a rarely active neuron in the other orientation (active where the neuron is not, with the
    difference in the skip part), and the output fit then gives it weight zero (measured: 4e-15 against
    1.1 for the neuron itself). Returns the pruned lists and the number removed per hidden layer.
    """
    weights, biases = list(weights), list(biases)
    pruned = []
    for layer in range(len(weights) - 1):
        out = np.linalg.norm(weights[layer + 1], axis=0)
        keep = out > 1e-10 * max(float(out.max(initial=0.0)), 1e-300)
        pruned.append(int((~keep).sum()))
        if not keep.all() and keep.any():
            weights[layer], biases[layer] = weights[layer][keep], biases[layer][keep]
            weights[layer + 1] = weights[layer + 1][:, keep]
    return weights, biases, pruned


def hyperplane_through(H: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The total-least-squares hyperplane ``[H, 1] . coef = 0`` through the rows of ``H`` (columns scaled
    to unit norm first; a column zero at every row gets coefficient zero). Returns ``(coef, singular
    values, number of live columns)``."""
    D = np.concatenate([H, np.ones((H.shape[0], 1))], axis=1)
    norms = np.linalg.norm(D, axis=0)
    live = norms > 1e-12 * max(norms.max(), 1e-300)
    with blas_threads(1):
        _, sv, Vt = np.linalg.svd(D[:, live] / norms[live], full_matrices=False)
    coef = np.zeros(D.shape[1])
    coef[live] = Vt[-1] / norms[live]
    return coef, sv, int(live.sum())



class LastLayerFinishing:
    """Output-layer fit, signs, joint refinement, simplification and certificate of the last hidden layer
    (see the module docstring for the state it uses)."""

    # ------------------------------------------------------------------ tolerances
    @property
    def _float64(self) -> bool:
        return self.noise.rel <= 1e-12

    def _tls_tol(self) -> float:
        """Largest relative singular value of the feature matrix of a neuron's critical points.

        Points located to the box's round-off leave about ``1e-14`` (measured: 1e-15-1e-13 on float64
        boxes); a deeper neuron's points, placed by a wrong prediction, leave 1e-4 or more.
        """
        return max(1e-9, 1e4 * self.noise.rel)

    def _output_rows(self) -> np.ndarray:
        """Gaussian query rows plus, for each neuron of the last layer, rows on both sides of its boundary."""
        K = self.known
        n_cols = K.n_features + 1
        # as many rows as the certificate: a neuron active on a small part of the region (0.1% in a
        # trained MLPRegressor((4, 4))) must show in the fit that decides whether the network is complete
        X = self.scale * self.rng.standard_normal((max(2 * n_cols + 64, self.n_certify), self.d))
        extra = []
        for pts in self._points[-1]:
            sel = pts[self.rng.choice(pts.shape[0], size=min(2, pts.shape[0]), replace=False)]
            r = self.rng.standard_normal(sel.shape)
            r /= np.linalg.norm(r, axis=1, keepdims=True)
            extra += [sel + 0.1 * self.scale * r, sel - 0.1 * self.scale * r]
        return np.concatenate([X] + extra) if extra else X

    def _fit_output(self, X: np.ndarray, Y: np.ndarray, skip: bool):
        K = self.known
        Z = K.preactivations(X)
        H = np.maximum(Z[-1], 0.0)
        cols = [H]
        if skip:
            cols.append(X if K.depth == 1 else np.maximum(Z[-2], 0.0))
        cols.append(np.ones((X.shape[0], 1)))
        coef, resid = scaled_least_squares(np.concatenate(cols, axis=1), Y)
        k = H.shape[1]
        A = coef[:k].T
        S = coef[k:-1].T if skip else None
        return A, S, coef[-1], resid

    @staticmethod
    def _flips_by_fit(Z: np.ndarray, Y: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flips ``t`` of the neurons with preactivations ``Z`` (one column each) improved one at a time
        while the output fit on ``[relu(+-Z), 1]`` alone improves (at most 4 passes); returns ``t`` and
        that fit's coefficients (one row per neuron, then the constant)."""
        ones = np.ones((Z.shape[0], 1))
        Y = Y.reshape(Z.shape[0], -1)

        def fit(tt):
            D = np.concatenate([np.maximum(np.where(tt.astype(bool), -Z, Z), 0.0), ones], axis=1)
            with blas_threads(1):
                coef, *_ = np.linalg.lstsq(D, Y, rcond=None)
            return float(np.linalg.norm(D @ coef - Y) / max(np.linalg.norm(Y), 1e-300)), coef

        t = t.copy()
        best, coef = fit(t)
        for _ in range(4):
            improved = False
            for j in range(t.size):
                t[j] ^= 1
                r, cf = fit(t)
                if r < best * (1 - 1e-9):
                    best, coef, improved = r, cf, True
                else:
                    t[j] ^= 1
            if not improved:
                break
        return t, coef

    def _orientation_by_fit(self, X: np.ndarray, Y: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, dict]:
        """Flips ``t`` of the last layer that lower the residual of the output fit on ``relu(+-zeta_L)`` alone.

        ``relu(-z) = relu(z) - z``: a wrongly oriented neuron leaves a linear term that a fit without skip
        features cannot carry, so each wrong flip adds its own part of the residual; passes over the
        neurons flip one at a time while the residual falls (at most ``4 k`` fits of ``k + 1`` columns).
        """
        Z = self.known.preactivations(X)[-1]
        ones = np.ones((X.shape[0], 1))

        def residual(tt):
            D = np.concatenate([np.maximum(np.where(tt.astype(bool), -Z, Z), 0.0), ones], axis=1)
            with blas_threads(1):
                coef, *_ = np.linalg.lstsq(D, Y, rcond=None)
            return float(np.linalg.norm(D @ coef - Y) / max(np.linalg.norm(Y), 1e-300))

        t = t.copy()
        start = best = residual(t)
        changed = 0
        for _ in range(4):
            improved = False
            for j in range(t.size):
                t[j] ^= 1
                r = residual(t)
                if r < best * (1 - 1e-9):
                    best, improved = r, True
                    changed += 1
                else:
                    t[j] ^= 1
            if not improved:
                break
        return t, {"relative_residual_before": start, "relative_residual": best, "flips_changed": changed}

    def _linear_neurons(self, X: np.ndarray, S: np.ndarray, A: np.ndarray, c: np.ndarray):
        """Always-active neurons that carry the output's linear part ``S h`` on the searched region, or None.

        ``S h = sum_k s_k (e_k . h)`` (its singular value decomposition); each term becomes a neuron
        ``relu(e_k . h + m_k)`` with ``m_k`` beyond the largest ``-e_k . h`` seen on the query rows (times
        four), and the output bias takes ``-s_k m_k`` back: exact wherever the neuron stays active, as
        the model's own neurons whose boundary lies outside the region are.
        """
        K = self.known
        Z = K.preactivations(X)
        Hprev = X if K.depth == 1 else np.maximum(Z[-2], 0.0)
        size = np.linalg.norm(Hprev @ S.T) / max(np.linalg.norm(Hprev @ np.abs(S).T) + 1e-300, 1e-300)
        Hl = np.maximum(Z[-1], 0.0)
        ref = np.linalg.norm(Hl @ A.T) + 1e-300
        if np.linalg.norm(Hprev @ S.T) <= self._output_tolerance(A.size) * ref or size == 0:
            return None
        Uo, sv, Vt = np.linalg.svd(S, full_matrices=False)
        r = int(np.sum(sv > 1e-12 * sv[0]))
        E = Vt[:r]
        proj = Hprev @ E.T
        m = 4 * np.maximum(-proj.min(axis=0), 0.0) + np.abs(proj).max(axis=0) + 1.0
        A_new = np.concatenate([A, Uo[:, :r] * sv[:r]], axis=1)
        c_new = c - (Uo[:, :r] * sv[:r]) @ m
        return E, m, A_new, c_new

    def _output_tolerance(self, n_params: int) -> float:
        return max(min(10.0 * math.sqrt(n_params), 1e3) * self.noise.rel, 1e-10)

    def _finish(self, out: tuple) -> tuple:
        """Signs, output layer and certificate on the known layers, the last two fitted jointly when the
        certificate fails; ``out`` is the output fit of the last known layer. Returns
        ``(weights, biases, certificate, sign_info, output_fit_relative_residual)``; what it tried goes
        into ``self.diag``."""
        X, Y, A, S, c, resid_skip = out
        self.stage = "signs"
        K = self.known
        rel_tol = 1e-11 + 1e4 * self.noise.rel
        t, sign_info = resolve_signs(K.weights[-1], A.T, S, rel_tol=rel_tol, precision=100 * self.noise.rel,
                                     time_limit=self.sign_time_limit)
        unseen = self._unseen_features()
        oriented_without_unseen = False
        if t is None and unseen is not None and unseen.any(axis=1).sum() >= 2:
            merged = self._merge_partial_copies(X, Y)
            if merged:
                sign_info["partial_copies_merged"] = merged
                A, S, c, resid_skip = self._fit_output(X, Y, skip=True)
                unseen = self._unseen_features()
        if t is None and unseen is not None and unseen.any() and not unseen.any(axis=0).all():
            # a neuron of the last layer whose critical points all had a feature of the layer before off
            # (a neuron active on 99.7% of the region, its boundary where that feature is off) has an
            # unknown coefficient there, and where it is active the output's linear part carries that
            # coefficient's term: the sign equations of the other features still hold
            t, without = resolve_signs(K.weights[-1][:, ~unseen.any(axis=0)], A.T, S[:, ~unseen.any(axis=0)],
                                       rel_tol=rel_tol, precision=100 * self.noise.rel,
                                       time_limit=self.sign_time_limit)
            sign_info["without_unseen_features"] = {"features": np.flatnonzero(unseen.any(axis=0)).tolist(),
                                                    **without}
            oriented_without_unseen = t is not None
        if t is None:
            # the output's linear part is not made of flipped neurons: neurons of the last layer that are
            # active on all of the searched region (their boundary lies beyond it) add a linear function
            # of the layer before. The orientation is then the nearest 0/1 vector, and what is left of
            # the linear part is carried by always-active neurons below
            M = -(A.T[:, :, None] * K.weights[-1][:, None, :]).reshape(K.widths[-1], -1).T
            with blas_threads(1):
                t_real, *_ = np.linalg.lstsq(M, S.ravel(), rcond=None)
            t = np.clip(np.rint(t_real), 0, 1).astype(int)
            sign_info["rounded_least_squares"] = True
            if K.depth >= 3:
                # below two known hidden layers the skip features are ReLUs and a neuron active on almost all
                # of the region makes relu(z) and its linear part nearly the same column: the skip fit, and
                # the t read from it, are then noise (measured on 40-20-10-10-1: least-squares t from -2.9 to
                # 15.2). The orientation is then the one whose fit without skip features is best, found by
                # flipping one neuron at a time
                t, sign_info["fit_search"] = self._orientation_by_fit(X, Y, t)
        flip = t.astype(bool)
        K.weights[-1] = np.where(flip[:, None], -K.weights[-1], K.weights[-1])
        K.biases[-1] = np.where(flip, -K.biases[-1], K.biases[-1])
        sign_info["flipped"] = int(flip.sum())
        A, S, c, resid = self._fit_output(X, Y, skip=True)
        if oriented_without_unseen:
            # oriented, the linear part on a feature that only neuron j leaves unseen is A_j delta_j, with
            # delta_j its missing coefficient there: exactly when that feature is off wherever j is inactive
            # (a neuron active on almost all of the region); else it is a start the joint fit improves
            completed = []
            owners = unseen.sum(axis=0)
            for j in np.flatnonzero(unseen.any(axis=1)):
                cols = np.flatnonzero(unseen[j] & (owners == 1))
                if cols.size and np.any(A[:, j] != 0):
                    with blas_threads(1):
                        delta, *_ = np.linalg.lstsq(A[:, j:j + 1], S[:, cols], rcond=None)
                    K.weights[-1][j, cols] += delta[0]
                    norm = np.linalg.norm(K.weights[-1][j])
                    K.weights[-1][j] /= norm
                    K.biases[-1][j] /= norm
                    completed.append(int(j))
            if completed:
                sign_info["without_unseen_features"]["completed_neurons"] = completed
                A, S, c, resid = self._fit_output(X, Y, skip=True)
        linear = self._linear_neurons(X, S, A, c)
        if linear is None:
            A, _, c, resid = self._fit_output(X, Y, skip=False)
            n_linear = 0
        else:
            K.weights[-1] = np.concatenate([K.weights[-1], linear[0]])
            K.biases[-1] = np.concatenate([K.biases[-1], linear[1]])
            A, c, n_linear = linear[2], linear[3], linear[0].shape[0]
        self.diag["linear_neurons"] = n_linear
        weights, biases, pruned = prune_silent(list(K.weights) + [A], list(K.biases) + [np.atleast_1d(c)])
        self.diag["pruned_neurons"] = pruned
        self.stage = "certificate"
        cert = self.certify(weights, biases)
        if not cert["passed"] and len(weights) >= 3:
            # first without the always-active neurons: they stand in for coefficients that the partial
            # neurons' walks did not see, which the joint fit determines where those neurons are active
            tries = []
            if n_linear and weights[-2].shape[0] > n_linear:
                w_drop = list(weights[:-2]) + [weights[-2][:-n_linear], weights[-1][:, :-n_linear]]
                b_drop = list(biases[:-2]) + [biases[-2][:-n_linear], biases[-1]]
                # the fit's start: each always-active neuron folded into the neuron it is most like on the
                # region (where both are active the output is A_j z_j + A_l z_l = A_j (z_j + (A_l / A_j) z_l))
                Hf = relu_features(weights[:-2], biases[:-2], self.scale * self.rng.standard_normal((2000, self.d)))
                Zf = Hf @ weights[-2].T + biases[-2]
                Zn = Zf / np.maximum(np.linalg.norm(Zf, axis=0), 1e-300)
                kept = weights[-2].shape[0] - n_linear
                W_f, b_f = weights[-2][:kept].copy(), biases[-2][:kept].copy()
                A_all = weights[-1]
                for lin in range(kept, weights[-2].shape[0]):
                    j = int(np.argmax(np.abs(Zn[:, :kept].T @ Zn[:, lin])))
                    ratio = float(A_all[:, lin] @ A_all[:, j]) / max(float(A_all[:, j] @ A_all[:, j]), 1e-300)
                    W_f[j] += ratio * weights[-2][lin]
                    b_f[j] += ratio * biases[-2][lin]
                tries.append((list(weights[:-2]) + [W_f, A_all[:, :kept]], list(biases[:-2]) + [b_f, biases[-1]],
                              n_linear, None))
                tries.append((w_drop, b_drop, n_linear, None))
                # an always-active neuron also stands in for a neuron active on almost all (or almost none)
                # of the region whose orientation the rounded sign solve got wrong (relu(-z) = relu(z) - z,
                # the -z carried by it): such neurons are flipped, one at a time, before the fit
                H = relu_features(w_drop[:-2], b_drop[:-2], self.scale * self.rng.standard_normal((2000, self.d)))
                frac = ((H @ w_drop[-2].T + b_drop[-2]) > 0).mean(axis=0)
                for j in np.argsort(-np.abs(frac - 0.5))[:4]:
                    if abs(frac[j] - 0.5) >= 0.4:
                        tries.append((w_drop, b_drop, n_linear, int(j)))
            tries.append((weights, biases, 0, None))
            # near-copies (one neuron fitted twice, in either orientation) merged and the always-active
            # neurons' linear part carried by flips, as the first start: a joint fit from several neurons
            # sharing one boundary stalls (measured on 40-20-10-10-1 under Prescott kernels: residual 6e-7)
            merged = self._simplify_last_layer(weights, biases, near=_NEAR_COPY, exact=False)
            if merged is not None:
                tries.insert(0, (merged[0], merged[1], n_linear, None))
            cert_before = cert
            for w_try, b_try, dropped, flip_j in tries:
                if flip_j is not None:
                    w_try, b_try = list(w_try), list(b_try)
                    sign = np.ones(w_try[-2].shape[0])
                    sign[flip_j] = -1.0
                    w_try[-2], b_try[-2] = w_try[-2] * sign[:, None], b_try[-2] * sign
                refined = self._refine_last_layer(w_try, b_try)
                if refined is None:
                    continue
                cert_r = self.certify(*refined[:2])
                better = cert_r["relative_error"] < cert["relative_error"]
                self.diag.setdefault("last_layer_refinement", []).append(
                    {**refined[2], "always_active_dropped": dropped, "flipped_neuron": flip_j, "certificate": cert_r,
                     "kept": bool(better)})
                if better:
                    weights, biases, cert = refined[0], refined[1], cert_r
                    self.diag["linear_neurons"] = n_linear - dropped
                if cert["passed"]:
                    break
            if self.diag.get("last_layer_refinement") and not cert["passed"]:
                weights, biases, cert = self._drop_search(weights, biases, cert)
            if self.diag.get("last_layer_refinement"):
                self.diag["certificate_before_refinement"] = cert_before
                # the fit may leave a neuron with no outgoing weight (a partial copy of another)
                weights, biases, pruned_after = prune_silent(weights, biases)
                self.diag["pruned_neurons"] = [a + b for a, b in zip(self.diag["pruned_neurons"], pruned_after)]
                if cert["passed"]:
                    weights, biases, cert = self._simplify_and_refit(weights, biases, cert)
        elif n_linear and len(weights) >= 3:
            # exact with always-active neurons: they may be carried by flips instead (a neuron fitted with
            # a feature left out makes the sign equations fail, and its linear part went to one of them)
            weights, biases, cert = self._simplify_and_refit(weights, biases, cert)
        if self.diag.get("last_layer_simplification"):
            # the refit of the simplified layer may leave a neuron with no outgoing weight
            weights, biases, pruned_after = prune_silent(weights, biases)
            self.diag["pruned_neurons"] = [a + b for a, b in zip(self.diag["pruned_neurons"], pruned_after)]
        return weights, biases, cert, sign_info, resid

    def _merge_partial_copies(self, X: np.ndarray, Y: np.ndarray) -> int:
        """Pairs of partial neurons of the last known layer that are one neuron, merged; returns how many.

        Two walks along the boundary of a neuron active on almost all of the region can each leave
        different features of the layer before unseen (measured on 40-20-10-10-1 under Sandybridge kernels:
        1,080 and 465 critical points of one neuron active on 99.7% of it), and neither fit's zeros show
        critical points elsewhere. The pair is one neuron when the union of their points lies on one
        hyperplane in ``[relu(zeta_{L-1}), 1]`` and the output fit with skip features (``X``, ``Y``) stays
        as good with that hyperplane in place of both (exact, or as inexact as before when another partial
        neuron leaves it so); the points of two different neurons fail the first.
        """
        K = self.known
        points = list(self._points[-1])
        tol = self._output_tolerance(sum(W.size + b.size for W, b in zip(K.weights, K.biases)))
        before = self._fit_output(X, Y, skip=True)[3]

        def fit_rows(pts):
            coef, sv, n_live = hyperplane_through(np.maximum(K.preactivations(pts)[-2], 0.0))
            # the constant alone (every feature off at every point) is no hyperplane of a neuron
            if n_live < 2 or n_live + 1 > pts.shape[0] or not max(sv[-1] / sv[0], sv[-1] / sv[-2]) <= self._tls_tol():
                return None
            scale = np.linalg.norm(coef[:-1])
            return (coef[:-1] / scale, coef[-1] / scale) if scale > 0 else None

        merged = 0
        j = 0
        while j < K.widths[-1]:
            l = j + 1
            partial = self._unseen_features().any(axis=1)
            while partial[j] and l < K.widths[-1]:
                union = fit_rows(np.concatenate([points[j], points[l]])) if partial[l] else None
                if union is not None:
                    W, b = K.weights[-1], K.biases[-1]
                    sign = 1.0 if float(union[0] @ W[j]) >= 0 else -1.0
                    row, bias = sign * union[0], sign * union[1]
                    K.weights[-1] = np.delete(np.where(np.arange(W.shape[0])[:, None] == j, row, W), l, axis=0)
                    K.biases[-1] = np.delete(np.where(np.arange(W.shape[0]) == j, bias, b), l)
                    if self._fit_output(X, Y, skip=True)[3] <= max(tol, (1.0 + 1e-3) * before):
                        points[j] = np.concatenate([points[j], points[l]])
                        del points[l]
                        self._points[-1] = points
                        merged += 1
                        partial = self._unseen_features().any(axis=1)
                        continue
                    K.weights[-1], K.biases[-1] = W, b
                l += 1
            j += 1
        return merged

    def _unseen_features(self) -> np.ndarray | None:
        """``(k, p)`` booleans: feature ``q`` of the layer before is off at every critical point of neuron
        ``j`` of the last known layer (its coefficient there is not seen), or None when the critical points
        are not at hand (one known layer, or rows added since)."""
        K = self.known
        if K.depth < 2 or len(self._points) != K.depth or len(self._points[-1]) != K.widths[-1]:
            return None
        return np.array([~(K.preactivations(pts)[-2] > 0).any(axis=0) for pts in self._points[-1]])

    def _refine_last_layer(self, weights: list, biases: list):
        """The last hidden layer and the output layer fitted jointly to the box (Gauss-Newton), or None.

        A neuron of the last layer whose critical points all had some features of the layer before in one
        state (its walks left them uncrossed: a neuron inactive on a small part of the region has its
        boundary where many of them never switch) is exact only there, and an always-active neuron stands
        for the linear part left; the layers below are exact. On fresh Gaussian queries the output is then
        ``A relu(W h + b) + c`` with ``h`` known, a zero-residual least-squares problem in ``(W, b, A, c)``
        started next to its solution, which Levenberg-Marquardt solves to the box's round-off (measured on
        40-20-10-10-1: certificate error 5e-5 before).
        """
        W, b, A, c = weights[-2], biases[-2], weights[-1], biases[-1]
        k, p = W.shape
        m = A.shape[0]
        n_params = k * (p + 1) + m * (k + 1)
        n = max(20 * n_params, 4 * self.n_certify)
        if 8 * n * m * n_params > _REFINE_MAX_BYTES:
            # the dense Jacobian grows as 20 m P^2: 37 GB for the last two layers of 784-64-64-10
            return None
        # with inputs next to each boundary: a neuron active on almost all of the region is pinned where it
        # is not, which the Gaussian queries hardly see (see _boundary_queries)
        X = np.concatenate([self.scale * self.rng.standard_normal((n, self.d)), self._boundary_queries(weights, biases)])
        if 8 * X.shape[0] * m * n_params > _REFINE_MAX_BYTES:
            return None
        Y = query_batched(self.oracle, X).reshape(X.shape[0], m)

        def features(X):
            return np.concatenate([relu_features(weights[:-2], biases[:-2], X), np.ones((X.shape[0], 1))], axis=1)

        data = {"H": features(X), "Y": Y}

        def split(theta):
            Wb = theta[:k * (p + 1)].reshape(k, p + 1)
            Ac = theta[k * (p + 1):].reshape(m, k + 1)
            return Wb, Ac

        def resid(theta):
            Wb, Ac = split(theta)
            H = np.maximum(data["H"] @ Wb.T, 0.0)
            return (H @ Ac[:, :k].T + Ac[:, k] - data["Y"]).ravel()

        def jac(theta):
            Wb, Ac = split(theta)
            Hp1 = data["H"]
            n = Hp1.shape[0]
            Z = Hp1 @ Wb.T
            act = (Z > 0).astype(float)
            H = Z * act
            J = np.zeros((n, m, n_params))
            for o in range(m):
                # d out_o / d Wb[j, q] = A[o, j] 1[z_j > 0] h1_q ; d out_o / d A[o, j] = relu(z_j), d / d c_o = 1
                J[:, o, :k * (p + 1)] = ((act * Ac[o, :k])[:, :, None] * Hp1[:, None, :]).reshape(n, -1)
                J[:, o, k * (p + 1) + o * (k + 1):k * (p + 1) + o * (k + 1) + k] = H
                J[:, o, k * (p + 1) + o * (k + 1) + k] = 1.0
            return J.reshape(n * m, n_params)

        def network(theta):
            Wb, Ac = split(theta)
            norms = np.linalg.norm(Wb[:, :p], axis=1)
            norms[norms == 0] = 1.0
            return (list(weights[:-2]) + [Wb[:, :p] / norms[:, None], Ac[:, :k] * norms[None, :]],
                    list(biases[:-2]) + [Wb[:, p] / norms, Ac[:, k].copy()])

        theta = theta0 = np.concatenate([np.concatenate([W, b[:, None]], axis=1).ravel(),
                                         np.concatenate([A, np.reshape(c, (m, 1))], axis=1).ravel()])
        before = float(np.linalg.norm(resid(theta0)) / max(np.linalg.norm(Y), 1e-300))
        nfev, rounds = 0, 0
        tol = self._output_tolerance(n_params)
        for rounds in range(1, _REFINE_ROUNDS + 1):
            with blas_threads(1):
                sol = least_squares(resid, theta, jac=jac, method="lm", xtol=1e-15, ftol=1e-15, gtol=1e-15,
                                    max_nfev=min(100 * (n_params + 1), _REFINE_MAX_EVALUATIONS))
            theta, nfev = sol.x, nfev + int(sol.nfev)
            fit = float(np.linalg.norm(sol.fun) / max(np.linalg.norm(data["Y"]), 1e-300))
            if fit > tol or rounds == _REFINE_ROUNDS:
                break
            # the fit moved the boundaries: the inputs next to the new ones, and a new fit if they disagree
            Xb = self._boundary_queries(*network(theta))
            if 8 * (data["H"].shape[0] + Xb.shape[0]) * m * n_params > _REFINE_MAX_BYTES:
                break
            Yb = query_batched(self.oracle, Xb).reshape(Xb.shape[0], m)
            data = {"H": np.concatenate([data["H"], features(Xb)]), "Y": np.concatenate([data["Y"], Yb])}
            if np.linalg.norm(resid(theta)) <= tol * np.linalg.norm(data["Y"]):
                break
        W_out, b_out = network(theta)
        info = {"queries": int(data["H"].shape[0]), "parameters": int(n_params), "evaluations": nfev,
                "rounds": rounds, "relative_residual_before": before,
                "relative_residual": float(np.linalg.norm(resid(theta)) / max(np.linalg.norm(data["Y"]), 1e-300))}
        return W_out, b_out, info

    def _drop_search(self, weights: list, biases: list, cert: dict, rounds: int = 2):
        """Each neuron of the last hidden layer dropped in turn and the rest fitted jointly
        (:meth:`_refine_last_layer`); the best kept while the certificate improves, ``rounds`` times.

        A neuron that is no neuron of the box (a partial fit of a deeper one that the checks let through)
        holds the joint fit away from the box (measured on 40-20-10-10-1 under Prescott kernels: 4e-6
        with it, 6.6e-14 without). Returns ``(weights, biases, certificate)``.
        """
        for _ in range(rounds):
            if cert["passed"] or weights[-2].shape[0] < 2:
                break
            best = None
            for j in self._least_needed_first(weights, biases):
                w_try = list(weights[:-2]) + [np.delete(weights[-2], j, axis=0), np.delete(weights[-1], j, axis=1)]
                b_try = list(biases[:-2]) + [np.delete(biases[-2], j), biases[-1]]
                refined = self._refine_last_layer(w_try, b_try)
                if refined is None:
                    break
                cert_r = self.certify(*refined[:2])
                self.diag.setdefault("last_layer_refinement", []).append(
                    {**refined[2], "dropped_neuron": j, "certificate": cert_r,
                     "kept": bool(cert_r["relative_error"] < cert["relative_error"])})
                if cert_r["relative_error"] < (cert if best is None else best[2])["relative_error"]:
                    best = (refined[0], refined[1], cert_r, j)
                if cert_r["passed"]:
                    break
            if best is None:
                break
            weights, biases, cert = best[:3]
            n_linear = self.diag.get("linear_neurons", 0)
            if best[3] >= weights[-2].shape[0] + 1 - n_linear:
                self.diag["linear_neurons"] = n_linear - 1
        return weights, biases, cert

    def _least_needed_first(self, weights: list, biases: list) -> np.ndarray:
        """The last hidden layer's neurons, those the output fit with skip features needs least first:
        by the residual of that fit without each (on fresh Gaussian queries). A neuron that is no neuron of
        the box adds a column the others and the skip features span: measured on 40-20-10-10-1 under
        Prescott kernels, the residual without it 1.00001 times the residual with it, without each true
        neuron 1.4-25 times."""
        X = self.scale * self.rng.standard_normal((max(4 * (weights[-2].size + weights[-1].size), 2000), self.d))
        Y = query_batched(self.oracle, X).reshape(X.shape[0], -1)
        H = relu_features(weights[:-2], biases[:-2], X)
        R = np.maximum(H @ weights[-2].T + biases[-2], 0.0)
        ones = np.ones((X.shape[0], 1))
        resid = []
        for j in range(R.shape[1]):
            D = np.concatenate([np.delete(R, j, axis=1), H, ones], axis=1)
            norms = np.linalg.norm(D, axis=0)
            norms[norms == 0] = 1.0
            with blas_threads(1):
                coef, *_ = np.linalg.lstsq(D / norms, Y, rcond=None)
            resid.append(float(np.linalg.norm((D / norms) @ coef - Y)))
        return np.argsort(resid, kind="stable")

    def _simplify_and_refit(self, weights: list, biases: list, cert: dict):
        """One neuron per hyperplane and no always-active ones (:meth:`_simplify_last_layer`), kept when
        the certificate passes: exactly when the flips carry the linear part, else from the rounded
        flips, refitted jointly (a neuron left inexact, whose error the linear part made up for, is then
        fitted again; measured on 40-20-10-10-1 under Haswell kernels). Returns
        ``(weights, biases, certificate)``."""
        for exact in (True, False):
            simple = self._simplify_last_layer(weights, biases, near=1e-6, exact=exact)
            if simple is not None and not exact:
                refined = self._refine_last_layer(*simple[:2])
                simple = None if refined is None else (refined[0], refined[1], {**simple[2], **refined[2]})
            if simple is None:
                continue
            cert_s = self.certify(*simple[:2])
            self.diag.setdefault("last_layer_simplification", []).append(
                {**simple[2], "exact": exact, "certificate": cert_s, "kept": cert_s["passed"]})
            if cert_s["passed"]:
                self.diag["linear_neurons"] = 0
                return simple[0], simple[1], cert_s
        return weights, biases, cert

    def _simplify_last_layer(self, weights: list, biases: list, near: float = 1e-10, exact: bool = True):
        """The last hidden layer with copies merged and always-active neurons removed, or None.

        A joint fit that is exact can still spend several neurons on one: two neurons on one hyperplane
        (``relu(-a z) = a relu(z) - a z``) and neurons active on all of the region, which are linear there.
        Merging gives one neuron per hyperplane plus a linear part ``L h + l`` (neurons active nowhere on
        a local Gaussian pool are dropped: they add nothing on the region); the linear part is then
        carried by flipping neurons (``A_j relu(z_j) = A_j relu(-z_j) + A_j z_j``: the equations of
        :func:`~nnrecover.extraction.signs.resolve_signs`), which leaves a ReLU network exact beyond the
        region too. None when nothing merges or no flip set carries the linear part.

        ``near``: hyperplanes whose cosine is within ``near`` of +-1 count as one. With ``exact=False``
        (a start for the joint fit, :meth:`_refine_last_layer`) the flips are the rounded least-squares
        solution, not required to carry the linear part exactly.
        """
        W, b, A, c = weights[-2], biases[-2], weights[-1], np.array(biases[-1], dtype=float)
        k = W.shape[0]
        H = relu_features(weights[:-2], biases[:-2], self.scale * self.rng.standard_normal((8192, self.d)))
        Zp = H @ W.T + b
        always = (Zp > 0).all(axis=0)
        # a neuron active on none of the pool adds nothing on the region: dropped like a merged copy
        never = (Zp <= 0).all(axis=0)
        V = np.concatenate([W, b[:, None]], axis=1)
        norms = np.maximum(np.linalg.norm(V, axis=1), 1e-300)
        cos = (V / norms[:, None]) @ (V / norms[:, None]).T
        L = np.zeros((A.shape[0], W.shape[1]))
        A_new = A.copy()
        rep = np.full(k, -1)
        for j in range(k):
            if never[j]:
                continue
            if always[j]:
                L += np.outer(A[:, j], W[j])
                c += A[:, j] * b[j]
                continue
            r = next((i for i in range(j) if rep[i] == i and abs(cos[i, j]) > 1.0 - near), j)
            rep[j] = r
            if r == j:
                continue
            alpha = norms[j] / norms[r]
            A_new[:, r] += alpha * A[:, j]
            if cos[r, j] < 0:
                L -= alpha * np.outer(A[:, j], W[r])
                c -= alpha * A[:, j] * b[r]
        keep = np.flatnonzero(rep == np.arange(k))
        if keep.size in (0, k):  # nothing to merge, or nothing left
            return None
        W2, b2, A2 = W[keep].copy(), b[keep].copy(), A_new[:, keep]
        info = {"merged": int(k - keep.size - always.sum() - never.sum()), "always_active_removed": int(always.sum()),
                "never_active_removed": int(never.sum())}
        if not exact:
            M = -(A2.T[:, :, None] * W2[:, None, :]).reshape(W2.shape[0], -1).T
            with blas_threads(1):
                t_real, *_ = np.linalg.lstsq(M, L.ravel(), rcond=None)
            t = np.clip(np.rint(t_real), 0, 1).astype(int)
            # the linear part also makes up for inexact neurons, so the rounded flips are only a start: they
            # are improved one at a time on the output fit without a linear part, on fresh queries (next to
            # the boundaries too), and the output layer is that fit's
            X = np.concatenate([self.scale * self.rng.standard_normal((self.n_certify, self.d)),
                                self._boundary_queries(weights, biases)])
            Y = query_batched(self.oracle, X).reshape(X.shape[0], -1)
            t, fit = self._flips_by_fit(relu_features(weights[:-2], biases[:-2], X) @ W2.T + b2, Y, t)
            flip = t.astype(bool)
            W2[flip], b2[flip] = -W2[flip], -b2[flip]
            A2, c = fit[:-1].T.copy(), fit[-1].copy()
            info["flipped"] = int(flip.sum())
        elif np.linalg.norm(L) > 1e-12 * max(np.linalg.norm(A2 * np.linalg.norm(W2, axis=1)), 1e-300):
            def flips():
                return resolve_signs(W2, A2.T, L, rel_tol=1e-11 + 1e4 * self.noise.rel,
                                     precision=100 * self.noise.rel, time_limit=self.sign_time_limit)[0]

            t = flips()
            if t is None:
                # the flips do not carry the linear part: its terms on features one neuron owns are that
                # neuron's coefficients (the flips are tried first: a flipped neuron's linear part is on
                # such features too), the flips carry what is left
                completed = self._complete_from_linear_part(H, W2, b2, A2, L)
                if not completed:
                    return None
                info["completed"] = completed
                small = np.linalg.norm(L) <= 1e-12 * max(np.linalg.norm(A2 * np.linalg.norm(W2, axis=1)), 1e-300)
                t = np.zeros(W2.shape[0], dtype=int) if small else flips()
                if t is None:
                    return None
            flip = t.astype(bool)
            c = c + A2[:, flip] @ b2[flip]
            W2[flip], b2[flip] = -W2[flip], -b2[flip]
            info["flipped"] = int(flip.sum())
        return list(weights[:-2]) + [W2, A2], list(biases[:-2]) + [b2, c], info

    @staticmethod
    def _complete_from_linear_part(H: np.ndarray, W: np.ndarray, b: np.ndarray, A: np.ndarray, L: np.ndarray) -> int:
        """The linear part's term on a feature ``q`` of the layer before, moved into the one neuron active
        wherever ``h_q`` is on; ``W``, ``b``, ``A`` and ``L`` are changed in place. Returns how many terms
        moved.

        Where ``h_q > 0`` only where neuron ``j`` is active, ``A_j relu(z_j + delta h_q) = A_j relu(z_j) +
        A_j delta h_q`` on the region: ``j``'s coefficient on ``q`` and an always-active neuron's
        ``L[:, q] h_q`` are one degree of freedom, so a joint fit can leave ``j`` off by ``delta`` and the
        difference in an always-active neuron, exact on the region (40-20-10-10-1 has such a pair: its
        third-layer neuron active on 99.7% of the region, and a second-layer feature on 18% of it, only
        there). Moving the term back gives the network without that neuron. With two such neurons the split is not determined by the
        function on the region and the term is left to the flips. ``H``: the layer before on a pool of
        the region; a changed row is scaled to unit norm (its scale goes into ``A``).
        """
        on = H > 0
        Z = H @ W.T + b
        moved = 0
        for q in np.flatnonzero(np.linalg.norm(L, axis=0) > 0):
            if not on[:, q].any():
                continue
            owners = np.flatnonzero(~(on[:, [q]] & (Z <= 0)).any(axis=0))
            if owners.size != 1 or not np.any(A[:, owners[0]] != 0):
                continue
            j = int(owners[0])
            with blas_threads(1):
                delta, *_ = np.linalg.lstsq(A[:, j:j + 1], L[:, q], rcond=None)
            delta = float(delta[0])
            rest = L[:, q] - A[:, j] * delta
            # a vector output whose term is not along A_j, or a change that turns j off where h_q is on,
            # is not this degree of freedom
            if np.linalg.norm(rest) > 1e-9 * np.linalg.norm(L[:, q]) or (Z[on[:, q], j] + delta * H[on[:, q], q] <= 0).any():
                continue
            W[j, q] += delta
            L[:, q] = rest
            Z[:, j] += delta * H[:, q]
            norm = np.linalg.norm(W[j])
            W[j] /= norm
            b[j] /= norm
            A[:, j] *= norm
            Z[:, j] /= norm
            moved += 1
        return moved

    def _boundary_queries(self, weights, biases) -> np.ndarray:
        """Inputs on both sides of every hidden neuron's boundary, next to it, spread along it: for each
        neuron, ``_BOUNDARY_PER_SIDE`` points of a local Gaussian pool (std ``input_scale``, no query spent
        to choose them) nearest its boundary and twice as many drawn at random (eight times as many for a
        neuron active on under 5% or over 95% of the pool) are moved onto the boundary by
        Newton steps on the neuron's preactivation (piecewise linear: a step is exact unless it crosses
        another boundary; points that do not reach it are dropped), then ``1e-3 input_scale`` to either
        side along its gradient. A random point's projection is the Gaussian restricted to the
        boundary (where the boundary is flat): the points cover it as the region weights it. For a
        neuron with a side under 5% of the pool, also up to ``_RARE_SIDE`` pool points on that side.

        An inexact neuron is wrong in the sliver between its boundary and the true one; for a neuron
        active on 99.7% of the region that sliver held 0.01-0.02% of Gaussian inputs (measured on
        40-20-10-10-1 under OpenBLAS's Haswell kernels: max error 0.06-0.08 of the output's std there
        while the 2,000 Gaussian queries of the certificate passed at 3e-14; so did the pool points
        nearest the boundary alone, all on the part of it where the true neuron is active). Points on
        the boundary meet such a sliver however rarely the neuron is inactive.
        """
        k = _BOUNDARY_PER_SIDE
        hidden = list(zip(weights[:-1], biases[:-1]))
        widths = [W.shape[0] for W, _ in hidden]

        def forward(X):
            """Preactivations of every layer, as a list of (n, width) arrays."""
            Z, H = [], X
            for W, b in hidden:
                Z.append(H @ W.T + b)
                H = np.maximum(Z[-1], 0.0)
            return Z

        # the k pool points nearest each neuron's boundary, in units of its row norm
        near_val = [np.full((k, w), np.inf) for w in widths]
        near_x = [np.zeros((k, w, self.d)) for w in widths]
        active = [np.zeros(w) for w in widths]
        rare: dict[tuple[int, int], list[np.ndarray]] = {}  # (layer, neuron) -> pool points on its rare side
        for start in range(0, _BOUNDARY_POOL, 4096):
            X = self.scale * self.rng.standard_normal((min(4096, _BOUNDARY_POOL - start), self.d))
            for l, Z in enumerate(forward(X)):
                on = Z > 0
                if start == 0:  # the rare sides, from the first chunk
                    share = on.mean(axis=0)
                    for j in np.flatnonzero(np.minimum(share, 1.0 - share) < 0.05):
                        rare[(l, int(j))] = [np.zeros((0, self.d)), share[j] > 0.5]
                for (ll, j), (pts, mostly_on) in list(rare.items()):
                    if ll == l and pts.shape[0] < _RARE_SIDE:
                        rows = X[on[:, j] != mostly_on]
                        rare[(l, j)][0] = np.concatenate([pts, rows[:_RARE_SIDE - pts.shape[0]]])
                active[l] += on.sum(axis=0)
                V = np.abs(Z) / np.maximum(np.linalg.norm(hidden[l][0], axis=1), 1e-300)
                cols = np.arange(widths[l])
                idx = np.argsort(V, axis=0, kind="stable")[:k]               # (k, width) rows of this chunk
                vals = np.concatenate([near_val[l], V[idx, cols]])
                xs = np.concatenate([near_x[l], X[idx]])                     # (2k, width, d)
                top = np.argsort(vals, axis=0, kind="stable")[:k]
                near_val[l], near_x[l] = vals[top, cols], xs[top, cols]
        out = []
        for l, (W, b) in enumerate(hidden):
            for j in range(W.shape[0]):
                # a neuron with a rare side gets more: the fit's Gaussian queries hardly see that side
                share = active[l][j] / _BOUNDARY_POOL
                n_random = 8 * k if min(share, 1.0 - share) < 0.05 else 2 * k
                Xj = np.concatenate([near_x[l][:, j], self.scale * self.rng.standard_normal((n_random, self.d))])
                for _ in range(6):  # Newton steps onto z = 0
                    z, g = self._preactivation_and_gradient(hidden[:l + 1], Xj, j)
                    gg = np.maximum(np.einsum("nd,nd->n", g, g), 1e-300)
                    Xj = Xj - (z / gg)[:, None] * g
                z, g = self._preactivation_and_gradient(hidden[:l + 1], Xj, j)
                gn = np.linalg.norm(g, axis=1)
                on = (np.abs(z) <= 1e-9 * np.maximum(gn, 1e-300) * self.scale) & (gn > 0) \
                    & (np.linalg.norm(Xj, axis=1) <= self.radius)
                u = g[on] / gn[on, None]
                out += [Xj[on] + 1e-3 * self.scale * u, Xj[on] - 1e-3 * self.scale * u]
        # and points inside each rare side (the fit's Gaussian queries hardly see it, and what makes up
        # for an inexact neuron elsewhere can be wrong in a corner of it)
        out += [pts for pts, _ in rare.values()]
        return np.concatenate(out) if out else np.zeros((0, self.d))

    @staticmethod
    def _preactivation_and_gradient(hidden, X, j):
        """Neuron ``j`` of the last of ``hidden``'s layers at the rows of ``X``: its preactivation and
        its gradient in the input (its row times the layers' local linear maps, taken from the output
        side: one row per input, never a layer's whole Jacobian)."""
        acts, H = [], X
        for W, b in hidden[:-1]:
            Z = H @ W.T + b
            acts.append(Z > 0)
            H = np.maximum(Z, 0.0)
        W, b = hidden[-1]
        g = np.broadcast_to(W[j], (X.shape[0], W.shape[1]))
        for (Wi, _), act in zip(reversed(hidden[:-1]), reversed(acts)):
            g = (g * act) @ Wi
        return H @ W[j] + b[j], np.array(g)

    def certify(self, weights, biases) -> dict:
        """Compare the network with the black box on fresh Gaussian queries (std ``input_scale``) and on
        inputs next to every hidden neuron's boundary (:meth:`_boundary_queries`)."""
        X = self.scale * self.rng.standard_normal((self.n_certify, self.d))
        X_boundary = self._boundary_queries(weights, biases)
        X = np.concatenate([X, X_boundary])
        Y = query_batched(self.oracle, X)
        G = relu_features(weights[:-1], biases[:-1], X) @ weights[-1].T + biases[-1]
        diff = np.linalg.norm(G - Y, axis=1)
        rel = float(np.linalg.norm(diff) / max(np.linalg.norm(Y), 1e-300))
        n_params = sum(W.size + b.size for W, b in zip(weights, biases))
        tol = self._output_tolerance(n_params)
        return {"queries": int(X.shape[0]), "boundary_queries": int(X_boundary.shape[0]),
                "relative_error": rel, "max_abs_error": float(diff.max()),
                "tolerance": tol, "passed": bool(rel <= tol),
                "unseen_below": unseen_below(self.n_certify)}
