"""Activation registry.

Each activation knows its function, derivative, positive-homogeneity degree (or ``None``), its inverse on
the positive part where it exists (used by the rectified-activation route of Bakshi et al., Appendix 9.1),
and its Hermite coefficients

    c_k(b) = E_{z ~ N(0,1)}[ act(z + b) He_k(z) ],      He_k the probabilists' Hermite polynomial,

unnormalised, as in Awasthi-Tang-Vijayaraghavan (Appendix A). Closed forms:

* relu (Lemma 3.5 of Awasthi et al.):
  c_0 = b Phi(b) + phi(b), c_1 = Phi(b), c_k = (-1)^k He_{k-2}(b) phi(b) for k >= 2;
* step 1[t >= 0] (Goel-Panigrahy's "sgn" of Section 2, shifted to our sign convention):
  c_0 = Phi(b), c_k = (-1)^(k-1) He_{k-1}(b) phi(b) for k >= 1 (Stein: c_k(relu) = c_{k-1}(step));
* leaky_relu(t) = relu(t) - alpha relu(-t) and abs(t) = relu(t) + relu(-t), from relu by the parity
  He_k(-z) = (-1)^k He_k(z);
* exp: c_k = exp(b + 1/2) (the generating function E[e^{z} He_k(z)] = e^{1/2});
* exp_minus_one (e^t - 1 on t > 0, Bakshi et al.'s rectified example): from
  e^{z} phi(z) = e^{1/2} phi(z - 1) and the Appell identity He_k(u + 1) = sum_j C(k, j) He_j(u),
  c_k(b) = e^{b + 1/2} sum_j C(k, j) c_j^step(b + 1) - c_k^step(b);
* identity: c_0 = b, c_1 = 1, else 0.

Everything else is integrated numerically: Gauss-Hermite quadrature (256 nodes) for smooth activations
(sigmoid, tanh), adaptive Gauss-Kronrod quadrature (QUADPACK via :func:`scipy.integrate.quad`) split at
the kink for piecewise-smooth ones (relu_power). Against independent references (quadrature
and, where possible, 60-digit arithmetic; see tests/test_activations.py) every coefficient agrees to
``1e-12 |c_k| + 1e-14 E|act(z+b) He_k(z)|`` for k <= 8, ``|b| <= 4``: full relative accuracy unless the
integral itself cancels, in which case no double-precision quadrature can do better than a few ulps of
the absolute integrand.

Numerical care in the closed forms: ``c_0(b) = b Phi(b) + phi(b)`` of relu cancels for ``b << 0`` (the
result is ~ phi(b)/b^2); there it is evaluated as ``phi(b) S/(|b| + S)`` with ``S`` the tail of Laplace's
continued fraction for the Mills ratio, which has no cancellation.

Activations are named by strings ``"relu"``, ``"leaky_relu(0.1)"``, ``"relu_power(2)"``...; ``spec`` gives
back a string that :func:`get_activation` parses to an equal activation (used by save/load).
"""

from __future__ import annotations

import math
import numbers
import re
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .errors import InputError
from .hermite.polynomials import hermite_table

__all__ = ["Activation", "get_activation", "available_activations", "norm_pdf", "norm_cdf"]

_SQRT2PI = math.sqrt(2.0 * math.pi)


def norm_pdf(t) -> np.ndarray:
    """Standard normal density ``phi(t) = exp(-t^2/2) / sqrt(2 pi)``, elementwise."""
    return np.exp(-0.5 * np.square(t)) / _SQRT2PI


def norm_cdf(t) -> np.ndarray:
    """Standard normal distribution function ``Phi(t)`` (:func:`scipy.special.ndtr`), elementwise."""
    from scipy import special  # deferred: scipy is imported on first use, `import nnrecover` stays fast

    return special.ndtr(t)


# --------------------------------------------------------------------------- closed-form coefficients

_CF_FROM = 3.0   # below this |b| the direct form of relu's c_0 loses at most a factor ~10 to cancellation
_CF_TERMS = 120  # Laplace's continued fraction at x >= 3: 120 terms reach ~1e-16 relative


def _relu_mean(b: np.ndarray) -> np.ndarray:
    """``E[relu(z + b)] = b Phi(b) + phi(b)`` without cancellation for ``b << 0``.

    For ``x = -b >= 3`` write ``Phi(-x) = phi(x) R(x)`` with Laplace's continued fraction for the Mills
    ratio ``R(x) = 1/(x + S)``, ``S = 1/(x + 2/(x + 3/(x + ...)))``. Then
    ``phi(x) - x Phi(-x) = phi(x) (1 - x R(x)) = phi(x) S / (x + S)``: a quotient of positive numbers.
    """
    b = np.asarray(b, dtype=np.float64)
    out = np.asarray(b * norm_cdf(b) + norm_pdf(b))
    far = b <= -_CF_FROM
    if np.any(far):
        x = -b[far]
        tail = np.zeros_like(x)
        for n in range(_CF_TERMS, 1, -1):
            tail = n / (x + tail)
        S = 1.0 / (x + tail)
        out[far] = norm_pdf(x) * S / (x + S)
    return out


def _relu_coeffs(k_max: int, b: np.ndarray) -> np.ndarray:
    """Lemma 3.5 of Awasthi et al."""
    out = np.zeros(b.shape + (k_max + 1,))
    pdf = norm_pdf(b)
    out[..., 0] = _relu_mean(b)
    if k_max >= 1:
        out[..., 1] = norm_cdf(b)
    if k_max >= 2:
        he = hermite_table(k_max - 2, b)
        signs = (-1.0) ** np.arange(2, k_max + 1)
        out[..., 2:] = signs * he * pdf[..., None]
    return out


def _step_coeffs(k_max: int, b: np.ndarray) -> np.ndarray:
    """``E[1[z + b >= 0] He_k(z)] = int_{-b}^inf He_k phi = He_{k-1}(-b) phi(b)`` (Goel-Panigrahy Section 2, the step unit)."""
    out = np.zeros(b.shape + (k_max + 1,))
    out[..., 0] = norm_cdf(b)
    if k_max >= 1:
        he = hermite_table(k_max - 1, b)
        signs = (-1.0) ** np.arange(0, k_max)
        out[..., 1:] = signs * he * norm_pdf(b)[..., None]
    return out


def _exp_minus_one_coeffs(k_max: int, b: np.ndarray) -> np.ndarray:
    """``E[(e^{z+b} - 1) 1[z + b > 0] He_k(z)]`` through the shift e^z phi(z) = e^{1/2} phi(z - 1).

    The difference cancels for ``b << 0`` (both terms ~ Phi(b), the result ~ phi(b)/b^2), costing a
    factor ~|b| in relative accuracy: 1e-13 at b = -12 (tests/test_activations.py).
    """
    binom = np.array([[math.comb(k, j) for j in range(k_max + 1)] for k in range(k_max + 1)], dtype=np.float64)
    shifted = _step_coeffs(k_max, b + 1.0) @ binom.T
    return np.exp(b + 0.5)[..., None] * shifted - _step_coeffs(k_max, b)


def _mirror(coeff_fn, k_max, b):
    """Coefficients of t -> g(-t) from those of g: E[g(-(z+b)) He_k(z)] = (-1)^k c_k^g(-b)."""
    return ((-1.0) ** np.arange(k_max + 1)) * coeff_fn(k_max, -b)


# --------------------------------------------------------------------------- the Activation type

@dataclass(frozen=True)
class Activation:
    """An elementwise activation function with the facts the algorithms need.

    Attributes
    ----------
    name : str
        Registry name (``"relu"``, ``"step"``...).
    param : float or None
        The parameter of parametrised activations (leaky slope, power).
    degree : float or None
        Positive-homogeneity degree: ``act(c t) = c**degree act(t)`` for ``c > 0``; ``None`` if not homogeneous.
    rectified : bool
        ``act(t) > 0`` exactly when ``t > 0`` and ``act(t) = 0`` for ``t <= 0`` (Bakshi et al. Appendix 9.1).
    kinks : tuple of float
        Points where the activation is not smooth (quadrature splits there).

    Notes
    -----
    Equality and hashing use ``name``, ``param``, ``degree``, ``rectified`` and ``kinks`` only, so
    ``get_activation(a.spec) == a`` for every registered activation.
    """

    name: str
    func: Callable = field(repr=False, compare=False)
    deriv: Callable = field(repr=False, compare=False)
    param: float | None = None
    degree: float | None = None
    inverse_positive: Callable | None = field(default=None, repr=False, compare=False)
    rectified: bool = False
    kinks: tuple = ()
    closed_form: Callable | None = field(default=None, repr=False, compare=False)

    # -- evaluation
    def __call__(self, t):
        return self.func(np.asarray(t, dtype=np.float64))

    def derivative(self, t):
        """Derivative ``act'(t)``, elementwise.

        Exact away from the kinks. At a kink the value of the derivative from the left is returned
        (relu'(0) = relu_power'(0) = exp_minus_one'(0) = 0, leaky_relu'(0) = slope), except abs'(0) = 0;
        step' is 0 everywhere (its derivative is a Dirac mass at 0, not a function).
        """
        return self.deriv(np.asarray(t, dtype=np.float64))

    def inverse(self, y):
        """Inverse on the positive part: the ``t > 0`` with ``act(t) = y``.

        Defined for ``y`` in ``act((0, inf))`` (e.g. ``(1/2, 1)`` for sigmoid, ``(0, 1)`` for tanh,
        ``(1, inf)`` for exp); outside that range the formula is evaluated as is (it may return a
        non-positive number or NaN). Used by the rectified-activation route of Bakshi et al.
        (Appendix 9.1). Raises :class:`~nnrecover.errors.InputError` for activations that are not
        injective on ``t > 0`` (step).
        """
        if self.inverse_positive is None:
            raise InputError(f"activation {self.spec!r} has no inverse on its positive part.")
        return self.inverse_positive(np.asarray(y, dtype=np.float64))

    @property
    def is_homogeneous(self) -> bool:
        """Whether the activation is positively homogeneous (``degree`` is not None)."""
        return self.degree is not None

    @property
    def spec(self) -> str:
        """String that :func:`get_activation` maps back to this activation."""
        if self.param is None:
            return self.name
        p = self.param
        return f"{self.name}({int(p) if float(p).is_integer() else repr(float(p))})"

    def __reduce__(self):  # the callables are lambdas: pickle (dask, joblib, sklearn) rebuilds from the spec
        return (get_activation, (self.spec,))

    def __str__(self) -> str:
        return self.spec

    # -- Hermite coefficients
    def hermite_coefficients(self, k_max: int, bias=0.0, *, method: str = "auto") -> np.ndarray:
        """``c_k(b) = E[act(z + b) He_k(z)]`` for k = 0..k_max, z ~ N(0, 1).

        Parameters
        ----------
        k_max : int
            Highest order.
        bias : float or array
            Shift(s) ``b``; the result has shape ``np.shape(bias) + (k_max + 1,)``.
        method : {"auto", "closed", "quadrature"}
            ``"auto"`` uses a closed form where one exists; ``"quadrature"`` forces numerical
            integration (used by tests to cross-check the closed forms).

        Returns
        -------
        ndarray of shape ``np.shape(bias) + (k_max + 1,)``
            Unnormalised probabilists' coefficients (Awasthi et al. Appendix A): the orthonormal
            convention of Goel et al. divides ``c_k`` by ``sqrt(k!)``.

        Notes
        -----
        Closed forms: relu (Awasthi et al. Lemma 3.5), step (Goel-Panigrahy Section 2), leaky_relu, abs,
        exp, exp_minus_one, identity. Numerical paths: Gauss-Hermite with 256 nodes for smooth activations, adaptive
        quadrature on ``[-40, 40]`` split at the kink otherwise (the tails beyond carry
        ``< phi(40) ~ 1e-348``). See the module docstring for the verified accuracy.
        """
        if isinstance(k_max, bool) or not isinstance(k_max, numbers.Integral) or k_max < 0:
            raise InputError(f"k_max must be a non-negative integer, got {k_max!r}.")
        k_max = int(k_max)
        try:
            b = np.asarray(bias, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InputError(f"bias must be a real number or array of numbers: {exc}") from exc
        if not np.all(np.isfinite(b)):
            raise InputError("bias contains NaN or infinite values.")
        if method not in ("auto", "closed", "quadrature"):
            raise InputError(f"method must be 'auto', 'closed' or 'quadrature', got {method!r}.")
        if method != "quadrature" and self.closed_form is not None:
            return self.closed_form(k_max, b)
        if method == "closed":
            raise InputError(f"activation {self.spec!r} has no closed-form Hermite coefficients.")
        return self._quadrature_coefficients(k_max, b)

    def _quadrature_coefficients(self, k_max: int, b: np.ndarray) -> np.ndarray:
        flat = b.reshape(-1)
        out = np.empty((flat.size, k_max + 1))
        if not self.kinks:
            # smooth: Gauss-Hermite (probabilists') quadrature
            nodes, weights = _gauss_hermite_e()
            he = hermite_table(k_max, nodes)  # (q, k+1)
            vals = self.func(nodes[None, :] + flat[:, None])  # (nb, q)
            out[:] = (vals * weights) @ he
        else:
            for i, bi in enumerate(flat):
                out[i] = self._split_quad(k_max, float(bi))
        return out.reshape(b.shape + (k_max + 1,))

    def _split_quad(self, k_max: int, b: float) -> np.ndarray:
        # integrate over z with breakpoints at the kinks t0 - b; the integrand decays like phi(z)
        # |z| > 40 carries less than phi(40) ~ 1e-348 of mass: truncating avoids inf * 0 in the tails
        from scipy import integrate  # deferred: SciPy's submodules are slow to import

        cuts = sorted(min(max(t0 - b, -40.0), 40.0) for t0 in self.kinks)
        edges = [-40.0, *cuts, 40.0]
        res = np.zeros(k_max + 1)
        for k in range(k_max + 1):
            def integrand(z, k=k):
                return float(self.func(np.float64(z + b))) * float(hermite_table(k, z)[k]) * float(norm_pdf(z))
            total = 0.0
            for lo, hi in zip(edges[:-1], edges[1:]):
                # skip pieces on which the activation vanishes identically
                if hi <= lo or self._zero_piece((lo + hi) / 2 + b):
                    continue
                # QUADPACK warns "roundoff error detected" when the integral cancels (He_k changes
                # sign k times): the result is then still accurate to a few ulps of int |integrand|,
                # which is the best any double-precision quadrature can do (verified in the tests).
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", integrate.IntegrationWarning)
                    val, _ = integrate.quad(integrand, lo, hi, epsabs=1e-300, epsrel=1e-13, limit=400)
                total += val
            res[k] = total
        return res

    def _zero_piece(self, t: float) -> bool:
        return self.rectified and t < 0


_GH_CACHE: dict = {}


def _gauss_hermite_e(n: int = 256):
    if n not in _GH_CACHE:
        x, w = np.polynomial.hermite_e.hermegauss(n)
        _GH_CACHE[n] = (x, w / _SQRT2PI)
    return _GH_CACHE[n]


# --------------------------------------------------------------------------- registry

def _relu(t):
    return np.maximum(t, 0.0)


def _make(name: str, param: float | None) -> Activation:
    if name == "relu":
        return Activation("relu", _relu, lambda t: (t > 0).astype(np.float64), None, 1.0,
                          lambda y: y, True, (0.0,), _relu_coeffs)
    if name == "leaky_relu":
        a = 0.01 if param is None else float(param)
        if not (0.0 <= a < 1.0):  # also rejects NaN
            raise InputError(f"leaky_relu slope must be in [0, 1), got {a}.")
        return Activation(
            "leaky_relu", lambda t: np.where(t > 0, t, a * t), lambda t: np.where(t > 0, 1.0, a), a, 1.0,
            (lambda y: y), False, (0.0,),
            lambda k, b: _relu_coeffs(k, b) - a * _mirror(_relu_coeffs, k, b))
    if name == "step":
        return Activation("step", lambda t: (t >= 0).astype(np.float64), lambda t: np.zeros_like(t), None,
                          0.0, None, False, (0.0,), _step_coeffs)
    if name == "abs":
        return Activation("abs", np.abs, np.sign, None, 1.0, (lambda y: y), False, (0.0,),
                          lambda k, b: _relu_coeffs(k, b) + _mirror(_relu_coeffs, k, b))
    if name == "relu_power":
        p = 2.0 if param is None else float(param)
        if not (np.isfinite(p) and p > 0):
            raise InputError(f"relu_power exponent must be a finite number > 0, got {p}.")

        def _relu_power_deriv(t):
            pos = t > 0
            out = np.zeros(np.shape(t))
            out[pos] = p * np.asarray(t)[pos] ** (p - 1.0)  # never 0 ** negative: no spurious warnings
            return out
        return Activation("relu_power", lambda t: np.maximum(t, 0.0) ** p, _relu_power_deriv, p, p,
                          lambda y: np.power(y, 1.0 / p), True, (0.0,), None)
    if name == "exp_minus_one":
        return Activation("exp_minus_one", lambda t: np.expm1(np.maximum(t, 0.0)),
                          lambda t: np.where(t > 0, np.exp(np.maximum(t, 0.0)), 0.0), None, None,
                          np.log1p, True, (0.0,), _exp_minus_one_coeffs)
    if name in ("sigmoid", "logistic"):
        from scipy import special  # deferred: SciPy's submodules are slow to import

        return Activation("sigmoid", special.expit, lambda t: special.expit(t) * special.expit(-t), None,
                          None, special.logit, False, (), None)
    if name == "tanh":
        return Activation("tanh", np.tanh, lambda t: 1.0 - np.tanh(t) ** 2, None, None, np.arctanh, False,
                          (), None)
    if name == "exp":
        return Activation("exp", np.exp, np.exp, None, None, np.log, False, (),
                          lambda k, b: np.repeat(np.exp(b + 0.5)[..., None], k + 1, axis=-1))
    if name == "identity":
        def _identity_coeffs(k, b):
            out = np.zeros(b.shape + (k + 1,))
            out[..., 0] = b
            if k >= 1:
                out[..., 1] = 1.0
            return out
        return Activation("identity", lambda t: np.array(t, dtype=np.float64), np.ones_like, None, 1.0,
                          lambda y: y, False, (), _identity_coeffs)
    raise InputError(
        f"unknown activation {name!r}; choose one of {', '.join(available_activations())}."
    )


_NAMES = ("relu", "leaky_relu", "step", "sigmoid", "tanh", "relu_power", "exp_minus_one", "abs", "exp",
          "identity")
_SPEC_RE = re.compile(r"^\s*([a-z_]+)\s*(?:\(\s*([-+0-9.eE]+)\s*\))?\s*$")


def available_activations() -> list[str]:
    """Names accepted by :func:`get_activation` (``logistic`` is an alias of ``sigmoid``)."""
    return list(_NAMES)


def get_activation(activation: "str | Activation", param: float | None = None) -> Activation:
    """Look up an activation by name, or pass an :class:`Activation` through.

    Parameters
    ----------
    activation : str or Activation
        A name from :func:`available_activations`, optionally with its parameter in parentheses:
        ``"relu"``, ``"leaky_relu(0.1)"`` (slope in [0, 1), default 0.01), ``"relu_power(3)"``
        (exponent > 0, default 2). Case and surrounding blanks are ignored. ``Activation.spec`` is
        always accepted and gives back an equal activation.
    param : float, optional
        The parameter, as an alternative to writing it in the name (not both).

    Returns
    -------
    Activation

    Raises
    ------
    InputError
        Unknown name, unparsable string, or a parameter that is missing its activation or out of range.
    """
    if isinstance(activation, Activation):
        if param is not None:
            raise InputError("param cannot be combined with an Activation instance; pass a name instead.")
        return activation
    if not isinstance(activation, str):
        raise InputError(f"activation must be a string or an Activation, got {type(activation).__name__}.")
    m = _SPEC_RE.match(activation.lower())
    if m is None:
        raise InputError(f"cannot parse activation {activation!r}; use e.g. 'relu' or 'relu_power(2)'.")
    name, p = m.group(1), m.group(2)
    if p is not None:
        if param is not None:
            raise InputError("give the activation parameter either in the name or as param, not both.")
        param = float(p)
    if param is not None and name not in ("leaky_relu", "relu_power"):
        raise InputError(f"activation {name!r} takes no parameter.")
    if param is not None:
        try:
            param = float(param)
        except (TypeError, ValueError) as exc:
            raise InputError(f"the parameter of {name!r} must be a number, got {param!r}.") from exc
    return _make(name, param)
