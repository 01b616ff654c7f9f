"""Dense least-squares solvers: damped Gauss-Newton on the normal equations, L-BFGS, and MINPACK's Levenberg-Marquardt."""

from __future__ import annotations

import time

import numpy as np
from scipy import optimize

from .model import _ROUNDOFF_LOSS, Model, _gradient_pass, _loss_pass, _normal_equations

_GN_LAMBDA0 = 1e-6  # initial Marquardt parameter of "gn" (Nielsen's tau for a good start; rejections are cheap)


_GN_LAMBDA_MIN = 1e-8  # its floor (see _gauss_newton)


#: a chord step (the last factorization, a fresh gradient) is taken again only while it divides the loss by
#: at least this: the contraction of the chord iteration is then <= 1/4 per step, well inside the
#: quadratic regime of Gauss-Newton; a weaker decrease calls for a fresh normal-equation pass
_CHORD_MIN_DECREASE = 16.0


_DEADLINE_MESSAGE = "The deadline passed (time budget spent)."


class _DeadlinePassed(Exception):
    """Raised inside L-BFGS-B's objective to stop it at the deadline (its callback cannot stop it in every SciPy)."""


def _gauss_newton(model: Model, theta0: np.ndarray, X: np.ndarray, Y: np.ndarray, *, max_iter: int, tol: float,
                  chunk_rows: int, loss_rows: int, lam0: float = _GN_LAMBDA0, deadline: float | None = None,
                  ftol: float | None = None) -> dict:
    """Levenberg-Marquardt on the normal equations accumulated over all rows (method ``"gn"``).

    Minimises ``F(theta) = ||r||^2 / 2`` (``r`` = residuals / sqrt(n), so ``F`` is half the mean squared
    loss). Each accepted iterate accumulates ``J^T J`` and ``g = J^T r`` over row chunks
    (:func:`_normal_equations`; the full Jacobian is never formed) and solves, by Cholesky,

        (J^T J + lambda D) h = -g,        D = diag(J^T J), running maximum over iterates (More 1978),

    the Levenberg (1944) - Marquardt (1963) step with Marquardt's diagonal scaling. The trial point is
    accepted when the gain ratio ``rho = (F(theta) - F(theta + h)) / (h^T (lambda D h - g) / 2)`` is
    positive, and lambda follows Nielsen's rule (Nielsen 1999; Madsen, Nielsen & Tingleff 2004, Alg. 3.16):
    ``lambda *= max(1/3, 1 - (2 rho - 1)^3)`` on acceptance, ``lambda *= nu, nu *= 2`` on rejection. A
    Cholesky failure (``J^T J + lambda D`` numerically not positive definite) is treated as a rejection.
    ``lambda`` never drops below ``_GN_LAMBDA_MIN``: ``J^T J`` of a ReLU network is singular (the positive
    rescaling of a unit leaves ``f`` unchanged), and the floor bounds the step along those null directions
    that round-off in ``g`` would otherwise excite.

    Chord steps (Shamanskii's variant of Newton's method): after an accepted step the next step first
    reuses the last factorization with a fresh gradient, ``(J_0^T J_0 + lambda D) h = -g`` (one
    ``O(n d k)`` gradient pass and an ``O(P^2)`` solve instead of an ``O(n P^2)`` normal-equation pass
    and an ``O(P^3)`` factorization). It is kept while it divides ``F`` by at least
    ``_CHORD_MIN_DECREASE``. In exact arithmetic its contraction is of the order of the distance between
    the factorization's point and the solution; for ReLU networks the change of ``J^T J`` along the
    rescaling null directions (held only by the damping floor) is amplified, so a second chord step from
    the same factor often fails (d = 200, k = 20: the loss 1.4e-9 -> 1e-10 by one chord step, the next one
    rejected), and in practice a chord step replaces about one normal-equation pass per fit. A chord step
    that decreases ``F`` less is accepted as a point and the next step takes a fresh normal-equation
    pass; one that does not decrease ``F`` is discarded. Every step, chord or not, counts as a trial step.

    The actual reduction is evaluated as ``sum_n (R_n - R'_n)(R_n + R'_n) / (2 n)`` from the stored
    residuals of both points rather than as a difference of two losses: its rounding error is
    proportional to the size of the step, so the gain ratio stays meaningful down to steps far below
    ``eps * F`` (a difference of two losses of ``n`` rows is only good to about ``eps log(n) F``).

    Stops (scipy's status codes) with: ``1`` the residuals at round-off (mean squared residual at most
    ``(64 eps)^2`` times the mean square of ``Y``, checked before each normal-equation pass), or the
    gradient test ``max_j |g_j| / (||J_j|| ||r||) <= tol``
    (the cosine between ``r`` and each column of ``J``, MINPACK's ``gtol``; also an exact fit ``F = 0``),
    ``2`` the relative reduction test ``|actual| <= tol F`` and ``predicted <= tol F`` (MINPACK's ``ftol``),
    ``3`` the step test ``||h|| <= tol (||theta|| + tol)``, ``0`` ``max_iter`` trial steps, ``-1`` a
    non-finite loss or normal matrix at an accepted point (the last finite iterate is returned), ``-2``
    the ``deadline`` (a ``time.perf_counter()`` value) passed; it is checked before every normal-equation
    pass and every trial step, so the overrun is at most one pass over the rows.

    Memory: one Jacobian chunk (``chunk_rows p P`` doubles), ``J^T J`` (``P^2``) and a few arrays of the
    size of ``Y`` (the residuals of the current and the trial point, and temporaries of the reduction).
    """
    from scipy.linalg import (  # deferred: SciPy's submodules are slow to import
        LinAlgError,
        cho_factor,
        cho_solve,
    )

    n = X.shape[0]
    ftol = tol if ftol is None else max(float(ftol), tol)
    theta = np.array(theta0, dtype=np.float64)
    R = _loss_pass(model, theta, X, Y, np.empty((n, model.p)), loss_rows)
    R_new = np.empty_like(R)
    F = 0.5 * float(np.sum(R * R)) / n
    lam, nu, D = float(lam0), 2.0, None
    n_iter = n_jac = n_chord = 0
    factor = None  # Cholesky factor of the last accepted step's matrix, reused by chord steps
    status, message = 0, "The maximum number of trial steps is exceeded."
    if not np.isfinite(F):
        return {"theta": theta, "n_iter": 0, "n_jacobian": 0, "n_chord": 0, "status": -1, "success": False,
                "message": "The loss is not finite at the start."}
    # below this F the residuals are round-off of the model's own evaluation: a further normal-equation
    # pass (O(n (k d)^2)) could only move the fit within round-off
    roundoff = 0.5 * _ROUNDOFF_LOSS * float(np.mean(Y * Y))
    while True:
        if deadline is not None and time.perf_counter() >= deadline:
            status, message = -2, _DEADLINE_MESSAGE
            break
        # at round-off a chord step that still divides F is taken (cheap; a chord stop just below the
        # round-off level of these rows would leave other rows above theirs)
        if F <= roundoff and factor is None:
            status, message = 1, "The residuals are at round-off."
            break
        if factor is not None:
            if n_iter >= max_iter:
                break
            at_roundoff = F <= roundoff
            g = _gradient_pass(model, theta, X, Y, chunk_rows)
            live = diag > 0
            if not at_roundoff and np.any(live) and \
                    float(np.max(np.abs(g[live]) / np.sqrt(diag[live]))) / np.sqrt(2 * F) <= tol:
                status, message = 1, "`gtol` termination condition is satisfied."
                break
            n_iter += 1
            n_chord += 1
            h = -cho_solve(factor, g, check_finite=False)
            if not np.all(np.isfinite(h)):
                factor = None
                continue
            if np.linalg.norm(h) <= tol * (np.linalg.norm(theta) + tol):
                if at_roundoff:
                    factor = None
                    continue
                status, message = 3, "`xtol` termination condition is satisfied."
                break
            theta_new = theta + h
            _loss_pass(model, theta_new, X, Y, R_new, loss_rows)
            actual = 0.5 * float(np.sum((R - R_new) * (R + R_new))) / n
            predicted = 0.5 * float(h @ (lam_factor * D_factor * h - g))
            small = abs(actual) <= ftol * F and predicted <= ftol * F
            if actual > 0 and np.isfinite(actual) and predicted > 0:
                F_new = 0.5 * float(np.sum(R_new * R_new)) / n
                strong = F_new * _CHORD_MIN_DECREASE <= F
                theta, R, R_new, F = theta_new, R_new, R, F_new
                if not strong:
                    factor = None
            else:
                factor = None
            if small and not at_roundoff:
                status, message = 2, "`ftol` termination condition is satisfied."
                break
            continue
        # the last factor is not needed any more: release it before the new P x P matrices are made
        factor = trial_factor = None
        JtJ, g = _normal_equations(model, theta, X, Y, R, chunk_rows)
        n_jac += 1
        if not (np.all(np.isfinite(JtJ)) and np.all(np.isfinite(g))):
            status, message = -1, "The normal equations are not finite at an accepted iterate."
            break
        diag = np.diag(JtJ).copy()
        D = diag if D is None else np.maximum(D, diag)
        D = np.where(D > 0, D, 1.0)  # MINPACK: a column that was never nonzero gets scale 1
        if F == 0.0:
            status, message = 1, "The residuals are exactly zero."
            break
        live = diag > 0
        cosine = float(np.max(np.abs(g[live]) / np.sqrt(diag[live]))) / np.sqrt(2 * F) if np.any(live) else 0.0
        if cosine <= tol:
            status, message = 1, "`gtol` termination condition is satisfied."
            break
        accepted = done = False
        while not accepted and not done:
            if n_iter >= max_iter:
                done = True
                break
            if deadline is not None and time.perf_counter() >= deadline:
                status, message, done = -2, _DEADLINE_MESSAGE, True
                break
            n_iter += 1
            try:
                trial_factor = None  # a rejected trial's factor goes before the next one is made
                # the damped matrix is one P x P temporary, factored in place
                damped = JtJ.copy()
                damped[np.diag_indices_from(damped)] += lam * D
                trial_factor = cho_factor(damped, overwrite_a=True, check_finite=False)
                del damped
                h = -cho_solve(trial_factor, g, check_finite=False)
                solved = bool(np.all(np.isfinite(h)))
            except LinAlgError:
                solved = False
            if not solved:
                lam, nu = lam * nu, 2 * nu
                continue
            if np.linalg.norm(h) <= tol * (np.linalg.norm(theta) + tol):
                status, message, done = 3, "`xtol` termination condition is satisfied.", True
                break
            theta_new = theta + h
            _loss_pass(model, theta_new, X, Y, R_new, loss_rows)
            actual = 0.5 * float(np.sum((R - R_new) * (R + R_new))) / n
            predicted = 0.5 * float(h @ (lam * D * h - g))
            rho = actual / predicted if predicted > 0 and np.isfinite(actual) else -np.inf
            small = abs(actual) <= ftol * F and predicted <= ftol * F
            if rho > 0:
                theta, R, R_new = theta_new, R_new, R
                F = 0.5 * float(np.sum(R * R)) / n
                factor, lam_factor, D_factor = trial_factor, lam, D.copy()
                lam = max(lam * max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3), _GN_LAMBDA_MIN)
                nu = 2.0
                accepted = True
            else:
                lam, nu = lam * nu, 2 * nu
            if small:
                status, message, done = 2, "`ftol` termination condition is satisfied.", True
        if done:
            break
    return {"theta": theta, "n_iter": n_iter, "n_jacobian": n_jac, "n_chord": n_chord, "status": status,
            "success": status > 0, "message": message}


def _lbfgs(model: Model, theta0: np.ndarray, X: np.ndarray, Y: np.ndarray, *, tol: float, max_iter: int,
           deadline: float | None) -> tuple[np.ndarray, int, int, str, bool]:
    """L-BFGS-B on the mean squared loss; past ``deadline`` the best point evaluated so far is returned.

    The objective itself checks the clock (every evaluation is one pass over the rows) and raises
    :class:`_DeadlinePassed`; the point with the smallest loss seen is kept, so an interrupted run returns
    a point no worse than the start. Returns ``(theta, n_iter, status, message, success)``; after a
    deadline stop ``n_iter`` counts loss evaluations (SciPy's iteration count is not available then).
    """
    best = {"loss": np.inf, "theta": np.array(theta0, dtype=np.float64), "n_eval": 0}

    def fun(th):
        if deadline is not None and best["n_eval"] > 0 and time.perf_counter() >= deadline:
            raise _DeadlinePassed
        loss, grad = model.loss_and_grad(th, X, Y)
        best["n_eval"] += 1
        if loss < best["loss"]:
            best["loss"], best["theta"] = loss, np.array(th, dtype=np.float64)
        return loss, grad

    try:
        res = optimize.minimize(fun, theta0, args=(), jac=True, method="L-BFGS-B",
                                options={"maxiter": max_iter, "ftol": tol, "gtol": tol, "maxcor": 20,
                                         "maxfun": 2 * max_iter})
    except _DeadlinePassed:
        return best["theta"], best["n_eval"], -2, _DEADLINE_MESSAGE, False
    message = res.message if isinstance(res.message, str) else str(res.message)
    return res.x, int(res.nit), int(res.status), message, bool(res.success)


def _minpack_lm(model: Model, theta0: np.ndarray, X: np.ndarray, Y: np.ndarray, *, tol: float,
                max_iter: int) -> tuple[np.ndarray, int, int, str, bool]:
    """MINPACK ``lmder`` (``least_squares(method="lm")``) on the parameters plus one inert parameter.

    SciPy's C translation of MINPACK's column-pivoted QR (``qrfac``) recomputes the norm of a column
    whose norm has collapsed (nearly dependent columns: duplicate or dead units) from one element too
    many; for the LAST column that element lies past the end of the Jacobian, so the iterates could
    depend on leftover heap contents, i.e. differ between processes (docs/design.md,
    "Reproducibility"). The appended parameter has an all-zero Jacobian column: pivoting never moves a
    zero-norm column forward, so it stays last, and a zero norm is never recomputed. It has no
    gradient, so its step is 0 and it stays 0. Returns ``(theta, nfev, status, message, success)``.
    """
    P = theta0.size

    def fun(th):
        return model.residuals(th[:P], X, Y)

    def jac(th):
        return model.jacobian(th[:P], X, Y, zero_columns=1)

    res = optimize.least_squares(fun, np.append(theta0, 0.0), jac=jac, method="lm", ftol=tol, xtol=tol,
                                 gtol=tol, max_nfev=max_iter, x_scale="jac")
    return res.x[:P].copy(), int(res.nfev), int(res.status), str(res.message), bool(res.success)
