"""The chosen-query extraction driver: :class:`CriticalPointExtractor` runs every stage in order.

Carlini, Jagielski and Mironov, "Cryptanalytic Extraction of Neural Network Models" (CRYPTO 2020),
specialised to one hidden layer ``f(x) = A relu(W x + b) + c``. Stages and their modules:

1. calibration: the box's evaluation noise (:meth:`~nnrecover.extraction.queries.QueryOracle.calibrate`);
2. search: critical points on random lines (Section 4.2, :func:`~nnrecover.extraction.lines.search_line`);
   a kink at the predicted crossing of a known unit is matched to it, a new one gets a gradient jump
   (Section 4.3, :func:`~nnrecover.extraction.lines.gradient_jumps`) and its hyperplane is refitted
   through further critical points (:func:`~nnrecover.extraction.planes.refine_hyperplanes`);
   duplicates (up to sign) are merged;
3. polish (noisy boxes): every hyperplane refitted once more from its refitted estimate;
4. output layer with a linear part (:func:`~nnrecover.extraction.output.fit_output_layer`), signs from
   it (Section 4.4, :func:`~nnrecover.extraction.signs.resolve_signs`), the output layer again without
   it: the canonical network;
5. certificate on fresh Gaussian queries (:meth:`CriticalPointExtractor.certify`).

Paper -> code: the rows ``w_j`` (unit norm) and biases ``b_j`` -> ``units.W``, ``units.b``; ``A`` ->
``alpha``; critical points ``x*`` -> ``x_star``.

What cannot be recovered: a unit whose output column is zero has no kink; a unit whose hyperplane
lies beyond the searched radius is linear (or zero) on everything searched and is reported through
the search radius; two units with the same hyperplane are one kink (their output weights add up).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .._threads import blas_threads
from ..errors import AssumptionError, CertificateWarning
from ..network import TwoLayerNetwork
from .lines import H_FRACTION, gradient_jumps, normal_from_jump, search_line
from .output import fit_output_layer
from .planes import refine_hyperplanes
from .queries import NoiseModel, QueryOracle, query_batched, unseen_below
from .signs import resolve_signs, sign_failure_reason

__all__ = ["CriticalPointExtractor", "CERTIFICATE_NOISE_FACTOR"]

#: the certificate accepts a relative error of at most this times ``sqrt(P)`` (``P`` parameters) times the
#: measured relative noise of the box (and at most 1000 times it): a network extracted from noisy
#: critical points carries their noise amplified by about ``sqrt(P)``. Measured on 1054 extractions
#: (d = 3-100, k = 2-20, float32 boxes and additive noise 1e-8 to 3e-5): complete ones reached at most
#: 3.2 sqrt(P) times the noise, while those that missed a unit with small output weights (0.01-0.3 of
#: the others) left 2.8-40 sqrt(P) and passed the former fixed 1000 times the noise (55 of 1000 fits)
CERTIFICATE_NOISE_FACTOR = 10.0


@dataclass
class _Units:
    W: np.ndarray
    b: np.ndarray
    alpha: np.ndarray
    err: np.ndarray
    n_points: list = field(default_factory=list)
    residual: list = field(default_factory=list)
    seen: list = field(default_factory=list)


class CriticalPointExtractor:
    """State of one chosen-query extraction (the units found so far survive a budget error).

    Parameters are those of :func:`nnrecover.extraction.extract` that concern this method.
    """

    def __init__(self, oracle: QueryOracle, n_inputs: int, rng: np.random.Generator, *,
                 n_hidden: int | None, input_scale: float = 1.0, radius: float | None = None,
                 patience: int | None = None, max_lines: int = 200, n_certify: int = 2000,
                 milp_time_limit: float = 120.0, output_range: tuple[float, float] | None = None,
                 log: Callable[[str], None] | None = None, give_up_off_plane: bool = False):
        self.oracle = oracle
        self.give_up_off_plane = bool(give_up_off_plane)
        self.d = int(n_inputs)
        self.rng = rng
        self.n_hidden = n_hidden
        self.scale = float(input_scale)
        self.radius = float(radius) if radius is not None else 4.0 * math.sqrt(self.d) * self.scale
        self.patience = None if patience is None else int(patience)
        self.max_lines = int(max_lines)
        self.n_certify = int(n_certify)
        self.milp_time_limit = float(milp_time_limit)
        self.output_range = output_range
        self.log = log or (lambda msg: None)
        self.noise: NoiseModel | None = None
        self.units: _Units | None = None
        self.diag: dict[str, Any] = {"method": "critical-points", "complete": False}
        self.lines: list[dict] = []
        self.stage = "calibration"

    # -------------------------------------------------------------- partial / final assembly
    def partial_network(self):
        """The units found so far, with the output weights read at their critical points (orientation
        not resolved); None before the first unit."""
        if self.units is None or self.units.W.shape[0] == 0:
            return None
        p = self.oracle.n_outputs or 1
        return TwoLayerNetwork(self.units.W, self.units.b, self.units.alpha.T.reshape(p, -1), np.zeros(p))

    # -------------------------------------------------------------- stages
    def _calibrate(self):
        self.noise, evidence = self.oracle.calibrate(self.rng, self.scale)
        self.diag["noise"] = evidence
        if self.patience is None:
            self.patience = 4 if self.noise.rel <= 1e-12 else 10
        self.diag["patience"] = self.patience
        self.log(f"noise level {self.noise.rel:.2e} (relative)")

    def _add_units(self, W, b, alpha, err, n_points, residual):
        if self.units is None:
            p = alpha.shape[1]
            self.units = _Units(np.empty((0, self.d)), np.empty(0), np.empty((0, p)), np.empty(0))
        self.units.W = np.concatenate([self.units.W, W])
        self.units.b = np.concatenate([self.units.b, b])
        self.units.alpha = np.concatenate([self.units.alpha, alpha])
        self.units.err = np.concatenate([self.units.err, err])
        self.units.n_points += list(map(int, n_points))
        self.units.residual += list(map(float, residual))
        self.units.seen += [1] * len(b)

    def _position_tol(self, R: float) -> float:
        return R * max(1e-7, 1e4 * self.noise.rel)

    def _one_line(self, R: float) -> int:
        """Search one random line; returns the number of new units accepted."""
        d = self.d
        x0 = self.scale * self.rng.standard_normal(d)
        v = self.rng.standard_normal(d)
        v /= np.linalg.norm(v)
        n_known = 0 if self.units is None else self.units.W.shape[0]
        n_grid = max(65, 4 * n_known + 1)
        lk = search_line(self.oracle, x0, v, -R, R, self.noise, n_grid=n_grid,
                         output_range=self.output_range)
        m = lk.s.size
        matched = np.zeros(m, bool)
        if n_known and m:
            Wk, bk = self.units.W, self.units.b
            wv = Wk @ v
            with np.errstate(divide="ignore", invalid="ignore"):
                s_pred = -(Wk @ x0 + bk) / wv
            tol = self._position_tol(R)
            dist = np.abs(lk.s[:, None] - s_pred[None, :])
            nearest = np.argmin(dist, axis=1)
            matched = dist[np.arange(m), nearest] <= tol
            for j in nearest[matched]:
                self.units.seen[j] += 1
        rec = {"radius": R, "kinks": int(m), "matched": int(matched.sum()), "unresolved": lk.unresolved,
               "queries": lk.queries}
        new = 0
        idx = np.flatnonzero(~matched)
        # on a box with more hidden layers every candidate is read and refitted only to be rejected: a first
        # chunk of the line's kinks tells (the search gives up after it), the rest follow in one batch
        chunks = [idx[:12], idx[12:]] if self.give_up_off_plane else [idx]
        cand_W, cand_b, cand_e = [], [], []
        rec.update(jumps=0, jump_ok=0, candidates=0, rejected=0)
        for part in chunks:
            if not part.size:
                continue
            x_star = x0 + lk.s[part, None] * v
            vv = np.broadcast_to(v, x_star.shape)
            # a long step averages the noise of a float32 model; a step that crossed a hyperplane
            # (failed linearity check) is retried 20 times shorter
            big = 20 * H_FRACTION if self.noise.rel > 1e-12 else H_FRACTION
            J, err, ok = gradient_jumps(self.oracle, x_star, vv, lk.room_left[part], lk.room_right[part],
                                        self.noise, h_fraction=big)
            if big > H_FRACTION and not np.all(ok):
                r = np.flatnonzero(~ok)
                J[r], err[r], ok[r] = gradient_jumps(self.oracle, x_star[r], vv[r], lk.room_left[part][r],
                                                     lk.room_right[part][r], self.noise)
            first_new = len(cand_W)
            cand_x = []
            with blas_threads(1):
                normals = {int(q): normal_from_jump(J[q], v) for q in np.flatnonzero(ok)}
            for q in np.flatnonzero(ok):
                w, alpha = normals[int(q)]
                na = float(np.linalg.norm(alpha))
                if not na > 0:
                    continue
                e = float(err[q] / na)
                if e > self._max_jump_error:
                    continue  # too close to other kinks to read the jump; another line will see it
                bq = -float(w @ x_star[q])
                # merge duplicates (up to sign) within this line's candidates
                dup = False
                for i2 in range(len(cand_W)):
                    dist = min(np.linalg.norm(w - cand_W[i2]) + abs(bq - cand_b[i2]),
                               np.linalg.norm(w + cand_W[i2]) + abs(bq + cand_b[i2]))
                    if dist <= 10 * (e + cand_e[i2]) + 1e-9:
                        dup = True
                        break
                if not dup:
                    cand_W.append(w), cand_b.append(bq), cand_e.append(e)
                    cand_x.append(x_star[q])
            rec["jumps"] += int(part.size)
            rec["jump_ok"] += int(ok.sum())
            if cand_x:
                rejected, added = self._refit_candidates(cand_W[first_new:], cand_b[first_new:],
                                                         cand_e[first_new:], cand_x)
                rec["candidates"] += len(cand_x)
                rec["rejected"] += rejected
                new += added
            if self.give_up_off_plane:
                self._give_up_if_off_plane(rec)
        rec["new_units"] = new
        self.lines.append(rec)
        return new

    def _refit_candidates(self, cand_W, cand_b, cand_e, cand_x) -> tuple[int, int]:
        """Refit candidate hyperplanes, add the accepted new ones; returns ``(rejected, added)``."""
        n_known = 0 if self.units is None else self.units.W.shape[0]
        ref = refine_hyperplanes(self.oracle, np.array(cand_W), np.array(cand_b),
                                 np.array(cand_e), self.noise, self.rng, scale=self.scale,
                                 centers=np.array(cand_x), n_points=self._plane_points())
        acc = ref.accepted.copy()
        # error of each refitted row (first order) and of the known ones: two rows within 10x
        # their combined errors are one unit seen twice (a kink the position matching missed)
        errs_all = 3 * np.where(np.isfinite(ref.tilt), ref.tilt, 0.0) + 1e3 * self.noise.rel + 1e-12
        if n_known:
            for j in np.flatnonzero(acc):
                dd = np.minimum(np.linalg.norm(self.units.W - ref.W[j], axis=1)
                                + np.abs(self.units.b - ref.b[j]),
                                np.linalg.norm(self.units.W + ref.W[j], axis=1)
                                + np.abs(self.units.b + ref.b[j]))
                if np.any(dd <= 10 * (self.units.err + errs_all[j])):
                    acc[j] = False
        # and two accepted candidates may coincide with each other
        keep = []
        for j in np.flatnonzero(acc):
            same = [i for i in keep if min(np.linalg.norm(ref.W[i] - ref.W[j]) + abs(ref.b[i] - ref.b[j]),
                                           np.linalg.norm(ref.W[i] + ref.W[j]) + abs(ref.b[i] + ref.b[j]))
                    <= 10 * (errs_all[i] + errs_all[j])]
            if not same:
                keep.append(j)
        keep = np.asarray(keep, int)
        if keep.size:
            self._add_units(ref.W[keep], ref.b[keep], ref.alpha[keep], errs_all[keep], ref.n_points[keep],
                            ref.residual[keep])
        return int((~ref.accepted).sum()), int(keep.size)

    def _give_up_if_off_plane(self, current: dict | None = None) -> None:
        """Raise when most refitted candidates were rejected (``give_up_off_plane``).

        On a one-hidden-layer box a refitted candidate is rejected only by noise; when most are rejected
        the kinks lie on bent boundaries (more than one hidden layer), and the search would spend its
        queries refitting them.
        """
        lines = self.lines + ([current] if current is not None else [])
        rejected = sum(rec.get("rejected", 0) for rec in lines)
        k_now = 0 if self.units is None else self.units.W.shape[0]
        if rejected >= 8 and rejected > 2 * k_now:
            if current is not None:
                current["new_units"] = k_now - sum(rec.get("new_units", 0) for rec in self.lines)
                self.lines.append(current)
            raise AssumptionError(
                f"{rejected} of the candidate units on {len(lines)} line(s) were not on a hyperplane ({k_now} were): "
                "the model has more than one hidden layer (or is not a ReLU network)")

    def _search(self):
        quiet = 0
        i = 0
        while i < self.max_lines:
            R = self.radius * (4.0 if i % 3 == 2 else 1.0)
            new = self._one_line(R)
            i += 1
            k_now = 0 if self.units is None else self.units.W.shape[0]
            self.log(f"line {i}: {self.lines[-1]['kinks']} kinks, {new} new units, {k_now} in all")
            if self.n_hidden is not None:
                if k_now >= self.n_hidden:
                    break
            quiet = 0 if new else quiet + 1
            if quiet >= self.patience:
                break
            if self.give_up_off_plane:
                self._give_up_if_off_plane()
        self.diag["lines"] = self.lines

    @property
    def _max_jump_error(self) -> float:
        """Largest relative error of a gradient-jump normal that is still refined.

        A float64 box reads most jumps far below 0.05, and a worse one is a kink too close to others,
        better seen on another line. A noisy box reads the jump of a weak unit (small output weight)
        among dense kinks only coarsely on every line (d = 100, k = 200 float32, |a| = 0.5: two
        readable jumps in 30 lines, both off by 0.06-0.1): skipping them lost the unit, while the
        local refit and its narrower retry
        (:func:`~nnrecover.extraction.planes.refine_hyperplanes`) turn them into exact rows.
        """
        return 0.25 if self.noise.rel > 1e-12 else 0.05

    def _plane_points(self) -> int:
        """Critical points located per hyperplane refit.

        The total-least-squares normal through ``m`` points spread over ``d - 1`` in-plane directions
        is off by about ``delta sqrt(d) / (sqrt(m) - sqrt(d))`` for a location error ``delta`` (the
        smallest singular value of an ``m x d`` Gaussian matrix is ``sqrt(m) - sqrt(d)``): ``m = 1.25 d``
        costs a factor of about 9, ``m = 4 d`` a factor of 1. A float64 box locates points to round-off,
        so its rows are at ~1e-14 either way and the fewer queries win; a noisier box (float32) needs
        the factor (at d = 100, k = 50: rows within 1e-4 rad with 1.25 d points, 5e-6 with 4 d).
        """
        d = self.d
        return d + max(8, d // 4) if self.noise.rel <= 1e-12 else 4 * d

    def _polish(self, rounds: int = 2) -> None:
        """Refit every known hyperplane again, from its current estimate (noisy boxes only).

        A unit enters with the error of its first refit, whose stencils were placed from a coarse
        gradient jump; among many hyperplanes (d = 100, k = 200 float32: 10% of the rows off by more
        than 1.7e-4 rad) other kinks crossed them and few points survived. Placed from the refitted
        row the stencils are narrower, so fewer points are lost. A refit replaces a row only when its
        first-order error (``tilt``) is smaller than the row's own.
        """
        if self.units is None or self.noise.rel <= 1e-12:
            return
        info = {"rounds": 0, "replaced": 0}
        for _ in range(rounds):
            u = self.units
            ref = refine_hyperplanes(self.oracle, u.W, u.b, u.err, self.noise, self.rng, scale=self.scale,
                                     n_points=self._plane_points())
            err_new = 3 * np.where(np.isfinite(ref.tilt), ref.tilt, np.inf) + 1e3 * self.noise.rel + 1e-12
            # the refit may return a row of either orientation: keep the known one
            sgn = np.where(np.sum(ref.W * u.W, axis=1) < 0, -1.0, 1.0)
            better = ref.accepted & (err_new < u.err)
            u.W[better] = sgn[better, None] * ref.W[better]
            u.b[better] = sgn[better] * ref.b[better]
            u.err[better] = err_new[better]
            info["rounds"] += 1
            info["replaced"] += int(better.sum())
            if not better.any():
                break
        self.diag["polish"] = info

    def run(self):
        """Run every stage; returns ``(network, diagnostics)``."""
        t0 = time.perf_counter()
        self._calibrate()
        self.stage = "search"
        self._search()
        self.stage = "polish"
        self._polish()
        d = self.d
        k = 0 if self.units is None else self.units.W.shape[0]
        if k == 0:
            seen = sum(rec["kinks"] for rec in self.lines)
            raise AssumptionError(
                f"no hidden unit found: {len(self.lines)} searched lines showed {seen} kink(s) and none lay "
                "on a hyperplane; the model is affine (or constant) on the searched region, or it is not a "
                "one-hidden-layer ReLU network (smooth or other activations); enlarge input_scale/radius "
                "or use method='moments'.")
        W = self.units.W if k else np.empty((0, d))
        b = self.units.b if k else np.empty(0)
        self.stage = "output layer"
        alpha, U, c, resid_lin = fit_output_layer(self.oracle, W, b, self.rng, scale=self.scale, linear=True)
        self.stage = "signs"
        rel_tol = 1e-11 + 1e4 * self.noise.rel
        # measured on float64 and float32 boxes, the true orientation leaves a residual of 4-40 times
        # the box's noise: weights from 100x the noise keep most of the equations' bits
        t, sign_info = resolve_signs(W, alpha.T, U, rel_tol=rel_tol, precision=100 * self.noise.rel,
                                     time_limit=self.milp_time_limit)
        linear_units = 0
        stopped_at_width = self.n_hidden is not None and k >= self.n_hidden
        if t is None:
            if stopped_at_width:
                why = (f"n_hidden={self.n_hidden} stopped the search at {k} units, and the linear part is not a "
                       "sum of flipped units among them: the model most likely has more hidden units (give a "
                       "larger n_hidden or 'auto')")
            else:
                why = sign_failure_reason(sign_info)
            warnings.warn(f"the orientation of the hidden units could not be resolved: {why}. The linear part "
                          "is represented by extra unit pairs relu(e.x) - relu(-e.x), flagged in "
                          "diagnostics['linear_units'].", CertificateWarning, stacklevel=3)
            Ul, sl, Vl = np.linalg.svd(U, full_matrices=False)
            r = int(np.sum(sl > 1e-12 * max(sl.max(initial=0), 1e-300)))
            W = np.concatenate([W, Vl[:r], -Vl[:r]])
            b = np.concatenate([b, np.zeros(2 * r)])
            linear_units = 2 * r
        else:
            flip = t.astype(bool)
            W = np.where(flip[:, None], -W, W)
            b = np.where(flip, -b, b)
        # final output layer without a linear part: the canonical network
        alpha2, _, c2, resid = fit_output_layer(self.oracle, W, b, self.rng, scale=self.scale, linear=False)
        net = TwoLayerNetwork(W, b, alpha2, c2).canonical()
        self.stage = "certificate"
        cert = self.certify(net)
        if not cert["passed"]:
            if stopped_at_width:
                cause = (f"n_hidden={self.n_hidden} stopped the search at {k} units, so the model most likely "
                         "has more hidden units: give a larger n_hidden (--hidden) or 'auto'")
            else:
                cause = ("the model is probably not a one-hidden-layer ReLU network (e.g. leaky-ReLU or another "
                         "activation), or units were missed")
            warnings.warn(f"extraction certificate failed: relative error {cert['relative_error']:.3g} on "
                          f"{cert['queries']} fresh queries exceeds the tolerance {cert['tolerance']:.3g}; "
                          f"{cause} (see diagnostics['certificate']).", CertificateWarning, stacklevel=3)
        seconds = time.perf_counter() - t0
        widths = {"n_hidden": int(net.n_hidden) - linear_units, "method": "distinct hyperplanes",
                  "lines_searched": len(self.lines),
                  "lines_since_last_new_unit": _quiet_tail(self.lines),
                  "critical_points_per_unit": [] if self.units is None else list(self.units.seen),
                  "search_radius": self.radius, "long_line_radius": 4 * self.radius}
        self.diag.update({
            "complete": True, "n_hidden": widths["n_hidden"], "width": widths,
            "hyperplane_fit": {"points_per_unit": [] if self.units is None else self.units.n_points,
                               "max_residual": float(max(self.units.residual)) if k else 0.0},
            "output_fit_relative_residual": resid, "linear_fit_relative_residual": resid_lin,
            "signs": sign_info, "linear_units": linear_units, "certificate": cert,
            "seconds": seconds,
            "unidentifiable": ("units with a zero output column, and units whose hyperplane does not "
                               f"cross the searched lines (|x| up to about {4 * self.radius:.3g}; a random "
                               "line through the origin of that length crosses a hyperplane at distance r "
                               f"only when aimed within arccos(r / {4 * self.radius:.3g}) of its normal, so "
                               "units far outside the input scale are found by chance if at all), leave "
                               "no critical point and cannot be recovered; the certificate checks the "
                               "function on Gaussian queries of the input scale, where such units are "
                               "inactive; two units sharing a hyperplane appear as one"),
        })
        if self.n_hidden is not None and widths["n_hidden"] < self.n_hidden:
            self.diag["unidentifiable_units"] = int(self.n_hidden - widths["n_hidden"])
            warnings.warn(f"n_hidden={self.n_hidden} was given but only {widths['n_hidden']} hidden units "
                          "left critical points on the searched lines; the missing units are unidentifiable "
                          "from the queried region (see diagnostics['unidentifiable']).", CertificateWarning,
                          stacklevel=3)
        return net, self.diag

    def certify(self, net) -> dict:
        """Compare ``net`` with the black box on fresh Gaussian queries (std ``input_scale``)."""
        X = self.scale * self.rng.standard_normal((self.n_certify, self.d))
        Y = query_batched(self.oracle, X)
        G = net.predict(X).reshape(Y.shape)
        diff = np.linalg.norm(G - Y, axis=1)
        rel = float(np.linalg.norm(diff) / max(np.linalg.norm(Y), 1e-300))
        size = self.noise.abs(np.linalg.norm(X, axis=1), np.linalg.norm(Y, axis=1))
        ratio = float(np.max(diff / size))
        n_params = net.n_hidden * (self.d + 1) + net.n_outputs * (net.n_hidden + 1)
        tol = max(min(CERTIFICATE_NOISE_FACTOR * math.sqrt(n_params), 1e3) * self.noise.rel, 1e-10)
        return {"queries": int(self.n_certify), "relative_error": rel, "max_abs_error": float(diff.max()),
                "max_error_over_noise": ratio, "tolerance": tol, "passed": bool(rel <= tol),
                "unseen_below": unseen_below(self.n_certify)}


def _quiet_tail(lines: list[dict]) -> int:
    n = 0
    for rec in reversed(lines):
        if rec.get("new_units", 0):
            break
        n += 1
    return n
