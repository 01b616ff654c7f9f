"""The model of Goel & Panigrahy (2019): a high-threshold first layer under an arbitrary upper part.

``f(x) = P(u_t(w_1 . x), ..., u_t(w_d . x))`` with unit-norm rows ``w_i`` (Section 1.1), a shared known
threshold ``t``, ``u_t(a) = u(a - t)`` for ``u`` in {step (the paper's "sgn", Heaviside 0/1), relu,
sigmoid}, and an upper part ``P``: a polynomial given by sparse monomial coefficients
``{exponents: c}`` (:class:`UpperPolynomial`, Assumption 1 / Appendix B.7) or any callable
(:class:`CallableUpper`, "the upper network", Appendix E).

Paper symbols -> names here
---------------------------
=====================  =====================================================================
``W*`` rows ``w_i*``   ``HighThresholdNetwork.hidden_weights`` (d, n), unit rows
``t``                  ``threshold``
``u``                  ``activation`` ("step" | "relu" | "sigmoid")
``P``, ``c_r``         ``upper`` (:class:`UpperPolynomial`), ``upper.coefficients[r]``
``c_0``, ``c_i``       ``upper.constant``, ``upper.linear_coefficients``
``X_i``                ``hidden_outputs(X)[:, i]``
``u_hat_k``            :func:`threshold_hermite_coefficients` (normalised, ``h_k = He_k/sqrt(k!)``)
``rho(t, sigma)``      :func:`tail_bound` (Lemmas 10-12)
``f_lin``              ``linear_part()``
=====================  =====================================================================

Population formulas: :func:`population_hermite_moment` returns ``E[f(x) He_k(x)]`` exactly when ``P`` is
linear (Lemma 9 / Corollary 2: ``E[u_t(w.x) He_k(x)] = sqrt(k!) u_hat_k w^{(x)k}``) or when ``W`` has
orthonormal rows (product-Hermite expansion: the units are independent standard normals, so the
expectation factorises over units, ``E[prod_i u_t(g_i)^{r_i} He_{m_i}(g_i)]``).
"""

from __future__ import annotations

import itertools
import json
import math
import numbers
import os
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
from scipy import integrate, special

from ..._validation import (
    as_2d_float,
    as_float_array,
    check_finite,
    check_positive_int,
    check_random_state,
)
from ...errors import AssumptionError, InputError
from ...hermite.polynomials import hermite_table

__all__ = [
    "ACTIVATIONS", "UpperPolynomial", "CallableUpper", "HighThresholdNetwork",
    "threshold_activation", "threshold_hermite_coefficients", "tail_bound",
    "random_unit_weights", "random_upper_polynomial", "violating_upper_polynomial",
    "population_hermite_moment",
]

ACTIVATIONS = ("step", "relu", "sigmoid")
_FORMAT = "nnrecover-high-threshold-1"
_SQRT2PI = math.sqrt(2.0 * math.pi)


# ============================================================================ activations

def _check_activation(activation: Any) -> str:
    if not isinstance(activation, str) or activation.strip().lower() not in ACTIVATIONS:
        raise InputError(f"activation must be one of {', '.join(ACTIVATIONS)} (the high-threshold activations "
                         f"of Goel-Panigrahy Section 1 and Appendix B.6), got {activation!r}.")
    return activation.strip().lower()


def _check_threshold(threshold: Any) -> float:
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, numbers.Real) \
            or not np.isfinite(threshold):
        raise InputError(f"threshold must be a finite real number, got {threshold!r}.")
    return float(threshold)


def threshold_activation(activation: str, threshold: float) -> Callable[[np.ndarray], np.ndarray]:
    """The shifted activation ``u_t(a) = u(a - t)`` as a vectorised function.

    Parameters
    ----------
    activation : {"step", "relu", "sigmoid"}
        ``step`` is the paper's "sgn": ``1[a >= t]`` (Heaviside 0/1, see the proof of Lemma 8).
    threshold : float
        ``t``.
    """
    act = _check_activation(activation)
    t = _check_threshold(threshold)
    if act == "step":
        return lambda a: (np.asarray(a, dtype=np.float64) >= t).astype(np.float64)
    if act == "relu":
        return lambda a: np.maximum(np.asarray(a, dtype=np.float64) - t, 0.0)
    return lambda a: special.expit(np.asarray(a, dtype=np.float64) - t)


def threshold_hermite_coefficients(activation: str, threshold: float, k_max: int = 4, *,
                                   power: int = 1) -> np.ndarray:
    """Normalised Hermite coefficients ``u_hat_k = E[u_t(g)^power h_k(g)]``, ``g ~ N(0, 1)``, k = 0..k_max.

    Closed forms (derived from Stein's identity, checked against quadrature in the tests):
    step ``u_hat_0 = Phi^c(t)``, ``u_hat_k = phi(t) He_{k-1}(t)/sqrt(k!)`` (k >= 1);
    relu ``u_hat_0 = phi(t) - t Phi^c(t)``, ``u_hat_1 = Phi^c(t)``, ``u_hat_k = phi(t) He_{k-2}(t)/sqrt(k!)``
    (k >= 2). Powers of relu and sigmoid (needed by the product-Hermite formula for non-multilinear
    ``P``, Appendix B.7) are integrated numerically (adaptive quadrature on ``[t, inf)`` for relu,
    Gauss-Hermite with 200 nodes for the smooth sigmoid).

    Parameters
    ----------
    activation : {"step", "relu", "sigmoid"}
    threshold : float
    k_max : int, default 4
    power : int, default 1
        Exponent ``r >= 1`` of ``u_t``.

    Returns
    -------
    ndarray of shape (k_max + 1,)
    """
    act = _check_activation(activation)
    t = _check_threshold(threshold)
    k_max = check_positive_int(k_max, "k_max", minimum=0)
    power = check_positive_int(power, "power")
    norms = np.sqrt(special.factorial(np.arange(k_max + 1)))
    phi = math.exp(-0.5 * t * t) / _SQRT2PI
    he = hermite_table(k_max + 1, t)
    if act == "step" or (act == "relu" and power == 1):
        out = np.empty(k_max + 1)
        if act == "step":
            out[0] = special.ndtr(-t)
            out[1:] = phi * he[:k_max]
        else:
            out[0] = phi - t * special.ndtr(-t)
            if k_max >= 1:
                out[1] = special.ndtr(-t)
            if k_max >= 2:
                out[2:] = phi * he[:k_max - 1]
        return out / norms
    out = np.empty(k_max + 1)
    if act == "relu":
        for k in range(k_max + 1):
            def integrand(g, k=k):
                return (g - t) ** power * hermite_table(k, g)[k] * math.exp(-0.5 * g * g) / _SQRT2PI
            out[k] = integrate.quad(integrand, t, np.inf, epsabs=1e-15, epsrel=1e-12, limit=200)[0]
        return out / norms
    nodes, weights = np.polynomial.hermite_e.hermegauss(200)
    weights = weights / _SQRT2PI
    vals = special.expit(nodes - t) ** power
    he_nodes = hermite_table(k_max, nodes)
    return (weights * vals) @ he_nodes / norms


def tail_bound(activation: str, threshold: float, sigma: float = 1.0) -> float:
    """The tail function ``rho(t, sigma) >= E[u_t(g)]``, ``g ~ N(0, sigma^2)`` (Lemmas 10, 11, 12).

    step and relu: ``exp(-t^2/(2 sigma^2))`` (relu: times ``sigma/sqrt(2 pi)``); sigmoid:
    ``exp(-t + sigma^2/2)``.
    """
    act = _check_activation(activation)
    t = _check_threshold(threshold)
    if not (isinstance(sigma, numbers.Real) and np.isfinite(sigma) and sigma > 0):
        raise InputError(f"sigma must be a finite number > 0, got {sigma!r}.")
    if act == "step":
        return math.exp(-t * t / (2 * sigma * sigma))
    if act == "relu":
        return sigma / _SQRT2PI * math.exp(-t * t / (2 * sigma * sigma))
    return math.exp(-t + sigma * sigma / 2)


# ============================================================================ the upper part P

def _check_exponents(key: Any, n_vars: int | None) -> tuple:
    if isinstance(key, (list, np.ndarray)):
        key = tuple(np.asarray(key).tolist())
    if not isinstance(key, tuple) or not key or not all(
            isinstance(e, numbers.Integral) and not isinstance(e, (bool, np.bool_)) and int(e) >= 0 for e in key):
        raise InputError(f"every key of the upper polynomial's coefficients must be a non-empty tuple of "
                         f"non-negative integer exponents (one per hidden unit), got {key!r}.")
    if n_vars is not None and len(key) != n_vars:
        raise InputError(f"exponent tuple {key!r} has {len(key)} entries, but the polynomial has {n_vars} "
                         "variables; every key must have one exponent per hidden unit.")
    return tuple(int(e) for e in key)


class UpperPolynomial:
    """The upper part ``P(X) = sum_r c_r prod_j X_j^{r_j}`` as sparse monomial coefficients (Assumption 1, B.7).

    Parameters
    ----------
    coefficients : mapping {tuple of int: float}
        ``{exponents: c}``; one exponent per variable (hidden unit). Zero coefficients are dropped.
    n_vars : int, optional
        Number of variables; required when ``coefficients`` is empty, else taken from the keys.

    Attributes
    ----------
    coefficients : dict
        A copy of the non-zero coefficients.
    n_vars : int
    """

    def __init__(self, coefficients: Mapping, n_vars: int | None = None):
        if isinstance(coefficients, UpperPolynomial):
            coefficients = coefficients.coefficients
        if not isinstance(coefficients, Mapping):
            raise InputError(f"coefficients must be a dict {{exponent tuple: coefficient}}, got "
                             f"{type(coefficients).__name__}.")
        if n_vars is not None:
            n_vars = check_positive_int(n_vars, "n_vars")
        coefs: dict[tuple, float] = {}
        for key, value in coefficients.items():
            key = _check_exponents(key, n_vars)
            n_vars = len(key)
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not np.isfinite(value):
                raise InputError(f"coefficient of monomial {key} must be a finite real number, got {value!r}.")
            if value != 0:
                coefs[key] = coefs.get(key, 0.0) + float(value)
        if n_vars is None:
            raise InputError("an empty upper polynomial needs n_vars (the number of hidden units).")
        self.n_vars = int(n_vars)
        self.coefficients = {k: v for k, v in coefs.items() if v != 0}
        self._keys = np.array(list(self.coefficients), dtype=np.int64).reshape(-1, self.n_vars)
        self._vals = np.array(list(self.coefficients.values()), dtype=np.float64)

    # ------------------------------------------------------------------ constructors
    @classmethod
    def linear(cls, linear_coefficients, constant: float = 0.0) -> "UpperPolynomial":
        """``P(X) = c_0 + sum_i c_i X_i``."""
        c = as_float_array(linear_coefficients, "linear_coefficients").reshape(-1)
        check_finite(c, "linear_coefficients")
        d = c.size
        coefs = {tuple(int(j == i) for j in range(d)): float(c[i]) for i in range(d)}
        coefs[(0,) * d] = float(constant)
        return cls(coefs, n_vars=d)

    @classmethod
    def or_polynomial(cls, n_vars: int) -> "UpperPolynomial":
        """``1 - prod_i (1 - X_i)``: the OR of the units (the union of halfspaces of Section 2.3)."""
        d = check_positive_int(n_vars, "n_vars")
        coefs = {}
        for mask in itertools.product((0, 1), repeat=d):
            s = sum(mask)
            if s:
                coefs[mask] = float((-1) ** (s + 1))
        return cls(coefs, n_vars=d)

    # ------------------------------------------------------------------ evaluation
    def __call__(self, H) -> np.ndarray:
        """``P`` at every row of ``H`` (shape (m, n_vars)); returns shape (m,)."""
        H = as_2d_float(H, "H", n_features=self.n_vars, min_rows=0)
        out = np.zeros(H.shape[0])
        for r, c in zip(self._keys, self._vals):
            nz = np.flatnonzero(r)
            if nz.size == 0:
                out += c
                continue
            term = np.full(H.shape[0], c)
            for j in nz:
                term *= H[:, j] if r[j] == 1 else H[:, j] ** r[j]
            out += term
        return out

    # ------------------------------------------------------------------ structure
    @property
    def constant(self) -> float:
        """``c_0 = P(0)``."""
        return self.coefficients.get((0,) * self.n_vars, 0.0)

    @property
    def linear_coefficients(self) -> np.ndarray:
        """``(c_1, ..., c_d)``, the coefficients of the monomials ``X_i`` (Assumption 1)."""
        out = np.zeros(self.n_vars)
        for r, c in zip(self._keys, self._vals):
            if r.sum() == 1:
                out[int(np.argmax(r))] = c
        return out

    @property
    def degree(self) -> int:
        """Total degree (0 for a constant)."""
        return int(self._keys.sum(axis=1).max()) if self._keys.size else 0

    def is_linear(self) -> bool:
        """Whether ``P = c_0 + sum c_i X_i`` (then ``f = f_lin`` and Step 1 is exact in population)."""
        return bool(np.all(self._keys.sum(axis=1) <= 1)) if self._keys.size else True

    def is_multilinear(self) -> bool:
        """Degree at most one in each variable (Assumption 1)."""
        return bool(np.all(self._keys <= 1)) if self._keys.size else True

    def multilinearized(self) -> "UpperPolynomial":
        """The polynomial equal to this one on ``{0, 1}^d`` (``X^r = X`` for binary ``X``, step units)."""
        coefs: dict[tuple, float] = {}
        for r, c in zip(self._keys, self._vals):
            key = tuple(int(min(e, 1)) for e in r)
            coefs[key] = coefs.get(key, 0.0) + c
        return UpperPolynomial(coefs, n_vars=self.n_vars)

    def linear_part(self) -> "UpperPolynomial":
        """``c_0 + sum_i c_i X_i`` (what ``f_lin`` uses, Section 2)."""
        return UpperPolynomial.linear(self.linear_coefficients, self.constant)

    def max_product_coefficient(self) -> float:
        """``max |c_r|`` over monomials with more than one variable (Assumption 1 wants O(1))."""
        multi = np.count_nonzero(self._keys, axis=1) > 1 if self._keys.size else np.zeros(0, bool)
        return float(np.max(np.abs(self._vals[multi]))) if np.any(multi) else 0.0

    def is_monotone(self, domain: str = "nonnegative") -> bool:
        """The monotonicity condition of Step 2 / Theorem 6: for ``X >= 0``, ``P(X) > P(0)`` iff ``X != 0``.

        Parameters
        ----------
        domain : {"nonnegative", "binary"}
            Where the hidden outputs live: ``[0, inf)^d`` (relu) or ``{0, 1}^d`` (step).
            On ``[0, inf)^d`` the test is exact for multilinear ``P`` (every non-constant coefficient
            ``>= 0`` and every linear coefficient ``> 0``: a negative ``c_S`` makes ``P`` fall below
            ``c_0`` along ``X = s 1_S`` for large ``s``) and sufficient otherwise. On ``{0, 1}^d`` it
            enumerates the cube (at most 2^20 points) and additionally requires ``P`` to be
            non-decreasing along every coordinate flip 0 -> 1, so the OR polynomial of Section 2.3
            qualifies.
        """
        if domain not in ("nonnegative", "binary"):
            raise InputError(f"domain must be 'nonnegative' or 'binary', got {domain!r}.")
        lin = self.linear_coefficients
        if np.any(lin <= 0):
            return False
        nonconst = self._keys.sum(axis=1) > 0 if self._keys.size else np.zeros(0, bool)
        if np.all(self._vals[nonconst] >= 0):
            return True
        if domain == "nonnegative":
            return False
        if self.n_vars > 20:
            raise InputError(f"is_monotone(domain='binary') enumerates {{0,1}}^d; d = {self.n_vars} > 20 is "
                             "too large and P has negative coefficients, so no cheap sufficient test applies.")
        cube = np.array(list(itertools.product((0.0, 1.0), repeat=self.n_vars)))
        vals = self(cube) - self.constant
        if np.any(vals[1:] <= 0):
            return False
        index = (cube @ (2 ** np.arange(self.n_vars - 1, -1, -1))).astype(np.int64)
        order = np.empty_like(index)
        order[index] = np.arange(index.size)
        for j in range(self.n_vars):
            bit = 2 ** (self.n_vars - 1 - j)
            low = index[cube[:, j] == 0]
            if np.any(vals[order[low + bit]] < vals[order[low]]):
                return False
        return True

    # ------------------------------------------------------------------ io
    def to_dict(self) -> dict:
        """JSON-serialisable ``{"n_vars": d, "terms": [[exponents, c], ...]}``."""
        return {"n_vars": self.n_vars, "terms": [[list(k), v] for k, v in self.coefficients.items()]}

    @classmethod
    def from_dict(cls, data: Mapping) -> "UpperPolynomial":
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, Mapping) or "terms" not in data or "n_vars" not in data:
            raise InputError("an upper polynomial description needs the keys 'n_vars' and 'terms'.")
        try:
            coefs = {tuple(int(e) for e in r): float(c) for r, c in data["terms"]}
        except (TypeError, ValueError) as exc:
            raise InputError(f"malformed polynomial terms: {exc}") from exc
        return cls(coefs, n_vars=int(data["n_vars"]))

    def __repr__(self) -> str:
        return f"UpperPolynomial(n_vars={self.n_vars}, n_terms={len(self.coefficients)}, degree={self.degree})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, UpperPolynomial) and other.n_vars == self.n_vars \
            and other.coefficients == self.coefficients


class CallableUpper:
    """An arbitrary upper network ``P`` given as a callable ``(m, d) -> (m,)`` (Introduction, Appendix E).

    Only its values are used by the learner (every statistic is a correlation with ``f``).
    ``linear_coefficients`` are the first-order Taylor coefficients at 0, by central differences of
    step ``h`` (the paper's reading of an analytic upper network).

    Parameters
    ----------
    func : callable
    n_vars : int
    h : float, default 1e-5
    """

    def __init__(self, func: Callable, n_vars: int, *, h: float = 1e-5):
        if not callable(func):
            raise InputError(f"upper must be an UpperPolynomial, a dict of coefficients or a callable, got "
                             f"{type(func).__name__}.")
        self.func = func
        self.n_vars = check_positive_int(n_vars, "n_vars")
        if not (isinstance(h, numbers.Real) and h > 0):
            raise InputError(f"h must be a number > 0, got {h!r}.")
        self.h = float(h)

    def __call__(self, H) -> np.ndarray:
        H = as_2d_float(H, "H", n_features=self.n_vars, min_rows=0)
        out = np.asarray(self.func(H), dtype=np.float64).reshape(-1)
        if out.shape != (H.shape[0],):
            raise InputError(f"the upper callable must return one value per row: got shape {out.shape} for "
                             f"{H.shape[0]} rows.")
        return out

    @property
    def constant(self) -> float:
        return float(self(np.zeros((1, self.n_vars)))[0])

    @property
    def linear_coefficients(self) -> np.ndarray:
        E = np.eye(self.n_vars) * self.h
        return (self(E) - self(-E)) / (2 * self.h)

    def is_linear(self) -> bool:
        return False

    def is_monotone(self, domain: str = "nonnegative") -> bool:
        """Unknown for a callable: always ``False`` (Step 2 then refuses, naming the assumption)."""
        return False

    def __repr__(self) -> str:
        return f"CallableUpper({getattr(self.func, '__name__', type(self.func).__name__)}, n_vars={self.n_vars})"


def _as_upper(upper: Any, d: int):
    if upper is None:
        return UpperPolynomial.linear(np.ones(d))
    if isinstance(upper, UpperPolynomial):
        if upper.n_vars != d:
            raise InputError(f"upper has {upper.n_vars} variables but the network has {d} hidden units.")
        return upper
    if isinstance(upper, CallableUpper):
        if upper.n_vars != d:
            raise InputError(f"upper has {upper.n_vars} variables but the network has {d} hidden units.")
        return upper
    if isinstance(upper, Mapping):
        return UpperPolynomial(upper, n_vars=d)
    if callable(upper):
        return CallableUpper(upper, d)
    raise InputError(f"upper must be None (P = sum X_i), a dict {{exponents: c}}, an UpperPolynomial or a "
                     f"callable, got {type(upper).__name__}.")


# ============================================================================ the network

class HighThresholdNetwork:
    """``f(x) = P(u_t(W x))``: unit-norm first layer, shared threshold, upper part ``P`` (Section 1.1).

    Parameters
    ----------
    hidden_weights : array of shape (d, n)
        ``W*``; every row must have unit Euclidean norm (the threshold is meaningful only then).
    threshold : float
        ``t``.
    activation : {"step", "relu", "sigmoid"}, default "step"
    upper : dict, UpperPolynomial, callable or None
        ``P``; ``None`` means ``P(X) = sum_i X_i``.
    """

    def __init__(self, hidden_weights, threshold: float, activation: str = "step", upper: Any = None):
        W = as_float_array(hidden_weights, "hidden_weights")
        if W.ndim != 2 or W.shape[0] < 1 or W.shape[1] < 1:
            raise InputError(f"hidden_weights must have shape (d, n), got {W.shape}.")
        check_finite(W, "hidden_weights")
        norms = np.linalg.norm(W, axis=1)
        if np.any(np.abs(norms - 1.0) > 1e-8):
            raise InputError(f"every row of hidden_weights must have unit norm (Goel-Panigrahy Section 1: the "
                             f"threshold t acts on w_i . x with ||w_i|| = 1); row norms range over "
                             f"[{norms.min():.6g}, {norms.max():.6g}]. Normalise the rows first.")
        self.hidden_weights = W
        self.threshold = _check_threshold(threshold)
        self.activation = _check_activation(activation)
        self.upper = _as_upper(upper, W.shape[0])

    # ------------------------------------------------------------------ shape
    @property
    def n_inputs(self) -> int:
        return self.hidden_weights.shape[1]

    @property
    def n_hidden(self) -> int:
        return self.hidden_weights.shape[0]

    # ------------------------------------------------------------------ evaluation
    def hidden_outputs(self, X) -> np.ndarray:
        """``X_i = u_t(w_i . x)`` for every sample: shape (m, d)."""
        X = as_2d_float(X, "X", n_features=self.n_inputs, min_rows=0)
        return threshold_activation(self.activation, self.threshold)(X @ self.hidden_weights.T)

    def predict(self, X) -> np.ndarray:
        """``f(x)`` for every row of ``X``: shape (m,)."""
        return self.upper(self.hidden_outputs(X))

    __call__ = predict

    # ------------------------------------------------------------------ structure
    @property
    def effective_upper(self):
        """``P`` as the learner sees it: multilinearised for step units (``X^r = X`` on {0, 1})."""
        if self.activation == "step" and isinstance(self.upper, UpperPolynomial):
            return self.upper.multilinearized()
        return self.upper

    @property
    def linear_coefficients(self) -> np.ndarray:
        """``c_i`` of the effective upper part (for step units, ``P(e_i) - P(0)`` on the cube)."""
        if self.activation == "step" and isinstance(self.upper, CallableUpper):
            E = np.vstack([np.zeros(self.n_hidden), np.eye(self.n_hidden)])
            v = self.upper(E)
            return v[1:] - v[0]
        return self.effective_upper.linear_coefficients

    def hermite_coefficients(self, k_max: int = 4) -> np.ndarray:
        """``u_hat_0 .. u_hat_kmax`` of ``u_t`` (normalised Hermite basis)."""
        return threshold_hermite_coefficients(self.activation, self.threshold, k_max)

    def is_monotone(self) -> bool:
        """The Step 2 / Theorem 6 monotonicity condition on the domain of the hidden outputs."""
        domain = "binary" if self.activation == "step" else "nonnegative"
        return bool(self.upper.is_monotone(domain))

    def linear_part(self) -> "HighThresholdNetwork":
        """The network of ``f_lin = c_0 + sum_i c_i u_t(w_i . x)`` (Section 2)."""
        return HighThresholdNetwork(self.hidden_weights, self.threshold, self.activation,
                                    UpperPolynomial.linear(self.linear_coefficients, self.upper.constant))

    def has_orthonormal_rows(self, tol: float = 1e-10) -> bool:
        W = self.hidden_weights
        return bool(np.max(np.abs(W @ W.T - np.eye(self.n_hidden))) <= tol)

    # ------------------------------------------------------------------ io
    def to_dict(self) -> dict:
        if not isinstance(self.upper, UpperPolynomial):
            raise InputError("a network whose upper part is a Python callable cannot be saved (no pickle); "
                             "give P as a dict of monomial coefficients to save it.")
        return {"format": _FORMAT, "hidden_weights": self.hidden_weights.tolist(), "threshold": self.threshold,
                "activation": self.activation, "upper": self.upper.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping) -> "HighThresholdNetwork":
        if not isinstance(data, Mapping) or data.get("format") != _FORMAT:
            raise InputError(f"not a high-threshold network description (format {_FORMAT!r} expected).")
        return cls(data["hidden_weights"], data["threshold"], data["activation"],
                   UpperPolynomial.from_dict(data["upper"]))

    def save(self, path: "str | os.PathLike") -> None:
        """Write the network as JSON (floats by ``repr``: read back bit-exactly; no pickle)."""
        path = Path(path)
        if path.suffix.lower() != ".json":
            raise InputError(f"cannot save a high-threshold network to {path.name!r}: use a .json file name.")
        try:
            path.write_text(json.dumps(self.to_dict()))
        except OSError as exc:
            raise InputError(f"cannot write {str(path)!r}: {exc.strerror or exc}.") from exc

    @classmethod
    def load(cls, path: "str | os.PathLike") -> "HighThresholdNetwork":
        """Read a network written by :meth:`save`."""
        path = Path(path)
        if not path.is_file():
            raise InputError(f"network file {str(path)!r} does not exist (or is not a file).")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise InputError(f"{path.name} is not a readable JSON network file: {exc}") from exc
        return cls.from_dict(data)

    def __repr__(self) -> str:
        return (f"HighThresholdNetwork(n_inputs={self.n_inputs}, n_hidden={self.n_hidden}, "
                f"threshold={self.threshold:g}, activation={self.activation!r}, upper={self.upper!r})")


# ============================================================================ generators

def random_unit_weights(n_hidden: int, n_inputs: int | None = None, *, condition_number: float = 1.0,
                        rng=None) -> np.ndarray:
    """Random ``W*`` with unit rows and condition number ``sigma_max/sigma_min`` equal to ``condition_number``.

    ``condition_number = 1`` gives orthonormal rows (Haar). Otherwise ``U diag(s) V^T`` with geometric
    singular values ``s`` is row-normalised; the spread of ``s`` is tuned by bisection so that the
    row-normalised matrix has the requested condition number (to 1e-6 relative).
    """
    d = check_positive_int(n_hidden, "n_hidden")
    n = d if n_inputs is None else check_positive_int(n_inputs, "n_inputs")
    if n < d:
        raise InputError(f"n_inputs ({n}) must be >= n_hidden ({d}): the paper's W* has full row rank.")
    if not (isinstance(condition_number, numbers.Real) and np.isfinite(condition_number) and condition_number >= 1):
        raise InputError(f"condition_number must be a finite number >= 1, got {condition_number!r}.")
    gen = check_random_state(rng)
    # deferred: SciPy's submodules are slow to import
    from scipy.stats import ortho_group

    U = ortho_group.rvs(d, random_state=gen) if d > 1 else np.ones((1, 1))
    V = ortho_group.rvs(n, random_state=gen)[:d] if n > 1 else np.ones((1, 1))
    if condition_number == 1.0 or d == 1:
        return U @ V

    def build(spread: float) -> np.ndarray:
        s = np.geomspace(1.0, spread, d)
        W = (U * s) @ V
        return W / np.linalg.norm(W, axis=1, keepdims=True)

    def cond(spread: float) -> float:
        return float(np.linalg.cond(build(spread)))

    lo, hi = 1.0, 2.0
    while cond(hi) < condition_number:
        hi *= 2.0
        if hi > 1e8:
            raise InputError(f"condition_number {condition_number} is not reachable with unit rows.")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if cond(mid) < condition_number:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * hi:
            break
    return build(0.5 * (lo + hi))


def random_upper_polynomial(n_vars: int, *, linear=(0.5, 1.5), constant: float = 0.0, n_pairs: int | None = None,
                            n_triples: int | None = None, coefficient_bound: float = 1.0, monotone: bool = False,
                            rng=None) -> UpperPolynomial:
    """A random multilinear ``P`` meeting Assumption 1: positive Theta(1) linear part, bounded products.

    Parameters
    ----------
    n_vars : int
    linear : (low, high), default (0.5, 1.5)
        Linear coefficients ``c_i ~ U[low, high]`` with ``0 < low <= high``.
    constant : float, default 0
        ``c_0``.
    n_pairs, n_triples : int, optional
        Number of random pairwise / triple products (default ``n_vars`` each, capped by the number of
        distinct subsets).
    coefficient_bound : float, default 1
        Product coefficients ``c_S ~ U[-bound, bound]`` (``U[0, bound]`` with ``monotone=True``).
    monotone : bool, default False
        Non-negative product coefficients, so that ``P`` meets the monotonicity condition of Step 2.
    rng : None, int or Generator
    """
    d = check_positive_int(n_vars, "n_vars")
    lo, hi = (float(v) for v in linear)
    if not (0 < lo <= hi):
        raise InputError(f"linear must be (low, high) with 0 < low <= high (Assumption 1: positive linear part), "
                         f"got {linear!r}.")
    if not (coefficient_bound >= 0):
        raise InputError(f"coefficient_bound must be >= 0, got {coefficient_bound!r}.")
    gen = check_random_state(rng)
    coefs: dict[tuple, float] = {(0,) * d: float(constant)}
    for i, c in enumerate(gen.uniform(lo, hi, d)):
        coefs[tuple(int(j == i) for j in range(d))] = float(c)
    for size, count in ((2, n_pairs), (3, n_triples)):
        if d < size:
            continue
        subsets = list(itertools.combinations(range(d), size))
        m = min(len(subsets), d if count is None else check_positive_int(count, "n_pairs/n_triples", minimum=0))
        for idx in gen.choice(len(subsets), size=m, replace=False):
            S = subsets[int(idx)]
            low = 0.0 if monotone else -coefficient_bound
            coefs[tuple(int(j in S) for j in range(d))] = float(gen.uniform(low, coefficient_bound))
    return UpperPolynomial(coefs, n_vars=d)


def violating_upper_polynomial(n_vars: int, assumption: str, *, rng=None) -> UpperPolynomial:
    """A ``P`` that violates exactly one assumption (for refusal tests and experiments).

    Parameters
    ----------
    assumption : {"linear", "bounded", "monotone"}
        ``"linear"``: the linear coefficient of unit 0 vanishes (Assumption 1, ``c_i = Theta(1) > 0``);
        ``"bounded"``: one pairwise coefficient of size ``10 d`` (Assumption 1, ``|c_S| = O(1)``);
        ``"monotone"``: a pairwise coefficient ``-2 max(c_i, c_j)``, so ``P(X) < P(0)`` at ``X = e_i + e_j``
        (the Step 2 monotonicity condition).
    """
    d = check_positive_int(n_vars, "n_vars", minimum=2)
    gen = check_random_state(rng)
    P = random_upper_polynomial(d, monotone=True, rng=gen)
    coefs = dict(P.coefficients)
    pair = tuple(int(j in (0, 1)) for j in range(d))
    if assumption == "linear":
        coefs.pop(tuple(int(j == 0) for j in range(d)), None)
    elif assumption == "bounded":
        coefs[pair] = 10.0 * d
    elif assumption == "monotone":
        c = P.linear_coefficients
        coefs[pair] = -2.0 * max(c[0], c[1]) - 1.0
    else:
        raise InputError(f"assumption must be 'linear', 'bounded' or 'monotone', got {assumption!r}.")
    return UpperPolynomial(coefs, n_vars=d)


# ============================================================================ population formulas

def _unit_moments(activation: str, t: float, order: int, max_power: int) -> np.ndarray:
    """``e[r, m] = E[u_t(g)^r He_m(g)]`` (unnormalised), r = 0..max_power, m = 0..order."""
    e = np.zeros((max_power + 1, order + 1))
    e[0, 0] = 1.0  # E[He_m(g)] = delta_{m0} (Fact 0)
    norms = np.sqrt(special.factorial(np.arange(order + 1)))
    for r in range(1, max_power + 1):
        e[r] = threshold_hermite_coefficients(activation, t, order, power=r) * norms
    return e


def population_hermite_moment(network: HighThresholdNetwork, order: int) -> np.ndarray:
    """Exact ``E[f(x) He_k(x)]`` (dense, ``k`` axes of length ``n``) for ``x ~ N(0, I_n)``.

    Available when ``P`` is linear (any ``W``; Lemma 9 / Corollary 2) or ``W`` has orthonormal rows (any
    polynomial ``P``; product-Hermite formula). ``He_k(x)`` is the multivariate Hermite tensor, so
    ``<E[f He_k(x)], z^{(x)k}> = ||z||^k sqrt(k!) E[f H_k(z.x)]``.

    Raises
    ------
    AssumptionError
        ``P`` non-linear (or a callable) and ``W`` not orthonormal: no closed form exists.
    """
    if not isinstance(network, HighThresholdNetwork):
        raise InputError(f"network must be a HighThresholdNetwork, got {type(network).__name__}.")
    k = check_positive_int(order, "order", minimum=0)
    W = network.hidden_weights
    d, n = W.shape
    if n ** k > 5e7:
        raise InputError(f"the dense order-{k} moment in {n} dimensions has {n ** k} entries; too large.")
    upper = network.effective_upper
    if not isinstance(upper, UpperPolynomial):
        raise AssumptionError("population moments need P as a polynomial; a callable upper part has none.")
    t, act = network.threshold, network.activation
    if upper.is_linear():
        e = _unit_moments(act, t, k, 1)[1, k]
        c = upper.linear_coefficients
        if k == 0:
            return np.asarray(upper.constant + e * c.sum())
        out = np.zeros((n,) * k)
        for i in range(d):
            if c[i] != 0:
                out += c[i] * e * _outer_power(W[i], k)
        return out
    if not network.has_orthonormal_rows():
        raise AssumptionError("exact population moments with product terms in P need orthonormal rows of W* "
                              "(the product-Hermite formula factorises over independent units); use samples, "
                              "or a linear P.")
    max_power = int(upper._keys.max()) if upper._keys.size else 0
    e = _unit_moments(act, t, k, max(max_power, 1))
    T = np.zeros((d,) * k)
    keys, vals = upper._keys, upper._vals
    for multiset in itertools.combinations_with_replacement(range(d), k):
        m = np.bincount(np.asarray(multiset, dtype=np.int64), minlength=d)
        # E[prod_i X_i^{r_i} He_{m_i}(g_i)] = prod_i e[r_i, m_i] (independent units)
        value = float(np.sum(vals * np.prod(e[keys, m[None, :]], axis=1)))
        for perm in set(itertools.permutations(multiset)):
            T[perm] = value
    for axis in range(k):
        T = np.tensordot(T, W, axes=([0], [0]))  # contracts the leading unit axis, appends an input axis
    return T


def _outer_power(w: np.ndarray, k: int) -> np.ndarray:
    out = np.ones(())
    for _ in range(k):
        out = np.multiply.outer(out, w)
    return out
