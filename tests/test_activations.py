"""Tests of the activation registry (src/nnrecover/activations.py).

The Hermite coefficients c_k(b) = E[act(z + b) He_k(z)], z ~ N(0, 1), are checked against two
independent references:

* ``_quad_reference``: scipy.integrate.quad of act(z + b) He_k(z) phi(z) on [-40, 40] with a breakpoint
  at the kink, He_k from scipy.special.eval_hermitenorm (not the library's recurrence). The tails beyond
  |z| = 40 carry less than phi(40) ~ 1e-348.
* ``_exact_reference``: 100-digit decimal arithmetic for relu, step, relu_power(integer) and
  exp_minus_one, through the truncated Gaussian moments M_j(b) = int_{-b}^inf z^j phi(z) dz
  (M_0 = Phi(b), M_1 = phi(b), M_j = (-b)^(j-1) phi(b) + (j-1) M_{j-2}) and the integer monomial
  coefficients of He_k. This route shares nothing with the closed forms (Lemma 3.5 of Awasthi et al.,
  Awasthi et al. Lemma 3.5; Goel-Panigrahy Section 2) except the definition.

Tolerance (the same rule everywhere, stated once). For each entry

    |c_k - ref_k| <= rtol |ref_k| + floor * L1_k,   L1_k = E|act(z + b) He_k(z)|,

and, row-wise, max_k |c_k - ref_k| <= rtol max_k |ref_k|. Justification: c_k is an integral of an
integrand that changes sign k times; evaluating it in double precision, by any method, carries an
absolute rounding error of a few ulps of the integral of |integrand| (L1_k). So per-entry relative
accuracy is demanded only where the integral does not cancel (then L1_k ~ |c_k| and the first term
rules); where it cancels (e.g. c_4(relu) at b = +-1, c_5 at b = +-sqrt(3), which vanish) the error is
measured against L1_k. rtol = 1e-12 is the issue's target. floor = 1e-14 ~ 45 eps for comparisons with
the quad reference (QUADPACK's own round-off is of that order: 21-point rules, sums over up to hundreds
of subintervals) and 1e-15 against the 100-digit reference, where only the library's rounding counts.
"""

from __future__ import annotations

import functools
import math
import warnings
from decimal import Decimal, getcontext

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.polynomial import hermite_e as npherm
from scipy import integrate
from scipy.special import eval_hermitenorm

from nnrecover.activations import Activation, available_activations, get_activation, norm_cdf, norm_pdf
from nnrecover.errors import InputError
from nnrecover.hermite.polynomials import hermite_1d_all, hermite_table

K_MAX = 8
BIASES = (0.0, 1.0, -1.0, math.sqrt(3.0), -math.sqrt(3.0), 4.0, -4.0, 0.3, -2.5)
# the 100-digit reference also reaches deep into the tails, where relu's c_0 = b Phi(b) + phi(b) cancels
EXACT_BIASES = BIASES + (6.0, -6.0, -8.0, -12.0)

_SQRT_2PI = math.sqrt(2 * math.pi)

# scalar (math-module) versions of the activations, written independently of the library
_SCALAR = {
    "relu": (lambda t: t if t > 0 else 0.0, 0.0),
    "step": (lambda t: 1.0 if t >= 0 else 0.0, 0.0),
    "leaky_relu(0.2)": (lambda t: t if t > 0 else 0.2 * t, 0.0),
    "abs": (abs, 0.0),
    "exp": (math.exp, None),
    "identity": (lambda t: t, None),
    "sigmoid": (lambda t: 1.0 / (1.0 + math.exp(-t)), None),
    "tanh": (math.tanh, None),
    "relu_power(0.5)": (lambda t: t ** 0.5 if t > 0 else 0.0, 0.0),
    "relu_power(2.5)": (lambda t: t ** 2.5 if t > 0 else 0.0, 0.0),
    "relu_power(3)": (lambda t: t ** 3 if t > 0 else 0.0, 0.0),
    "exp_minus_one": (lambda t: math.expm1(t) if t > 0 else 0.0, 0.0),
}


# --------------------------------------------------------------------------- references

@functools.lru_cache(maxsize=None)
def _quad_reference(spec: str, b: float) -> tuple[np.ndarray, np.ndarray]:
    """(c_0..c_K, L1_0..L1_K) by adaptive quadrature with a breakpoint at the kink."""
    f, kink = _SCALAR[spec]
    edges = [-40.0, 40.0] if kink is None else [-40.0, min(max(kink - b, -40.0), 40.0), 40.0]
    vals, l1 = np.zeros(K_MAX + 1), np.zeros(K_MAX + 1)
    for k in range(K_MAX + 1):
        def g(z, k=k):
            return f(z + b) * eval_hermitenorm(k, z) * math.exp(-0.5 * z * z) / _SQRT_2PI

        for lo, hi in zip(edges[:-1], edges[1:]):
            if hi <= lo:
                continue
            with warnings.catch_warnings():  # round-off warnings on cancelling integrals: see docstring
                warnings.simplefilter("ignore", integrate.IntegrationWarning)
                vals[k] += integrate.quad(g, lo, hi, epsabs=0.0, epsrel=1.2e-14, limit=500)[0]
                l1[k] += integrate.quad(lambda z: abs(g(z)), lo, hi, epsabs=0.0, epsrel=1e-6, limit=500)[0]
    return vals, l1


getcontext().prec = 100
_PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899862803")


def _d_erf(x: Decimal) -> Decimal:
    """erf by its Taylor series (terms peak near e^(x^2) ~ 1e31 at |x| = 8.5: 100 digits suffice)."""
    total, term, n, x2 = Decimal(0), x, 0, x * x
    while True:
        piece = term / (2 * n + 1)
        total += piece
        if n > 5 and abs(piece) < Decimal(10) ** -90:
            return 2 / _PI.sqrt() * total
        n += 1
        term = -term * x2 / n


def _d_moments(j_max: int, b: float) -> list[Decimal]:
    """M_j(b) = int_{-b}^inf z^j phi(z) dz, j = 0..j_max, in 100-digit arithmetic."""
    bd = Decimal(b)  # exact binary value of b
    pdf = (-(bd * bd) / 2).exp() / (2 * _PI).sqrt()
    m = [(1 + _d_erf(bd / Decimal(2).sqrt())) / 2, pdf]
    for j in range(2, j_max + 1):
        m.append((-bd) ** (j - 1) * pdf + (j - 1) * m[j - 2])
    return m[: j_max + 1]


def _he_integer_coefficients(k_max: int) -> list[list[int]]:
    """Monomial coefficients of He_0..He_k_max as exact integers."""
    out = [[1], [0, 1]]
    for k in range(1, k_max):
        nxt = [0] + out[k]
        for i, c in enumerate(out[k - 1]):
            nxt[i] -= k * c
        out.append(nxt)
    return out[: k_max + 1]


@functools.lru_cache(maxsize=None)
def _exact_reference(spec: str, b: float) -> np.ndarray:
    he = _he_integer_coefficients(K_MAX)
    bd = Decimal(b)
    if spec == "step":
        m = _d_moments(K_MAX, b)
        vals = [sum(c * m[j] for j, c in enumerate(he[k])) for k in range(K_MAX + 1)]
    elif spec.startswith("relu"):  # relu and relu_power(p), p integer: (z + b)^p by the binomial theorem
        p = 1 if spec == "relu" else int(spec[len("relu_power("):-1])
        m = _d_moments(K_MAX + p, b)
        power = [bd ** e if e else Decimal(1) for e in range(p + 1)]  # Decimal 0 ** 0 is an error
        tilt = [sum(math.comb(p, i) * power[p - i] * m[i + j] for i in range(p + 1)) for j in range(K_MAX + 1)]
        vals = [sum(c * tilt[j] for j, c in enumerate(he[k])) for k in range(K_MAX + 1)]
    elif spec == "exp_minus_one":
        # int_{-b}^inf e^(z+b) z^j phi(z) dz = e^(b+1/2) int_{-b-1}^inf (u+1)^j phi(u) du
        m, m1 = _d_moments(K_MAX, b), _d_moments(K_MAX, b + 1.0)
        scale = (bd + Decimal("0.5")).exp()
        ex = [scale * sum(math.comb(j, i) * m1[i] for i in range(j + 1)) - m[j] for j in range(K_MAX + 1)]
        vals = [sum(c * ex[j] for j, c in enumerate(he[k])) for k in range(K_MAX + 1)]
    else:  # pragma: no cover - test bug
        raise AssertionError(spec)
    return np.array([float(v) for v in vals])


def _assert_coefficients(c, ref, l1, *, rtol, floor, label):
    err = np.abs(np.asarray(c) - ref)
    bound = rtol * np.abs(ref) + floor * l1
    worst = int(np.argmax(err - bound))
    assert np.all(err <= bound), (f"{label}: k={worst} got {c[worst]!r}, reference {ref[worst]!r}, "
                                  f"error {err[worst]:.3g} > bound {bound[worst]:.3g}")
    assert err.max() <= rtol * np.abs(ref).max(), f"{label}: row error {err.max():.3g}"


# --------------------------------------------------------------------------- Hermite polynomials

def test_hermite_table_matches_numpy(rng):
    t = np.concatenate([rng.uniform(-6, 6, 50), [0.0, 1.0, -math.sqrt(3.0)]])
    H = hermite_table(12, t)
    assert H.shape == (t.size, 13)
    for k in range(13):
        coef = np.zeros(k + 1)
        coef[k] = 1.0
        ref = npherm.hermeval(t, coef)
        # scale of the rounding error: the polynomial with all coefficients made positive, at |t|
        scale = np.polynomial.polynomial.polyval(np.abs(t), np.abs(npherm.herme2poly(coef)))
        assert np.all(np.abs(H[:, k] - ref) <= 1e-14 * scale), k


def test_hermite_polynomials_reject_a_bad_order_and_keep_infinities_in_the_unchecked_table():
    with pytest.raises(InputError, match="k_max"):
        hermite_1d_all(-1, 0.0)
    with pytest.raises(InputError, match="k_max"):
        hermite_1d_all(2.5, 0.0)
    with pytest.raises(InputError, match="t"):
        hermite_1d_all(2, np.inf)
    np.testing.assert_array_equal(hermite_table(3, np.array([np.inf, -np.inf])),
                                  [[1.0, np.inf, np.inf, np.nan], [1.0, -np.inf, np.inf, np.nan]])
    np.testing.assert_array_equal(hermite_table(4, np.linspace(-3, 3, 7)), hermite_1d_all(4, np.linspace(-3, 3, 7)))


def test_normal_helpers():
    t = np.array([-3.0, 0.0, 1.5])
    assert np.allclose(norm_pdf(t), np.exp(-t ** 2 / 2) / math.sqrt(2 * math.pi), rtol=1e-15, atol=0)
    assert norm_cdf(0.0) == 0.5
    assert abs(norm_cdf(1.0) + norm_cdf(-1.0) - 1.0) < 1e-16


# --------------------------------------------------------------------------- closed forms

@pytest.mark.parametrize("spec", ["relu", "step", "exp_minus_one"])
@pytest.mark.parametrize("b", EXACT_BIASES)
def test_closed_form_vs_100_digit_reference(spec, b):
    c = get_activation(spec).hermite_coefficients(K_MAX, b)
    ref = _exact_reference(spec, b)
    if abs(b) <= 4:
        l1 = _quad_reference(spec, b)[1]
    else:  # far tails: L1 only sets the floor for vanishing entries; none vanish here, use |ref|
        l1 = np.abs(ref)
    _assert_coefficients(c, ref, l1, rtol=1e-13, floor=1e-15, label=f"{spec} b={b}")


def test_relu_c0_has_no_cancellation_in_the_left_tail():
    """c_0 = b Phi(b) + phi(b) ~ phi(b)/b^2 for b << 0; the direct formula loses ~b^2 ulps."""
    relu = get_activation("relu")
    for b in (-3.0, -5.0, -8.0, -12.0):
        c0 = relu.hermite_coefficients(0, b)[0]
        assert abs(c0 - _exact_reference("relu", b)[0]) <= 4e-16 * abs(c0), b
    # continuity where the evaluation switches formula (|b| = 3): no jump beyond rounding
    b = np.array([np.nextafter(-3.0, 0.0), -3.0])
    c0 = relu.hermite_coefficients(0, b)[:, 0]
    assert abs(c0[0] - c0[1]) <= 1e-14 * c0[1]
    # tails: c_0 underflows gracefully, c_0 -> b for b >> 0
    assert relu.hermite_coefficients(0, -40.0)[0] == 0.0
    assert relu.hermite_coefficients(1, 1e6).tolist() == [1e6, 1.0]


@pytest.mark.parametrize("spec", ["relu", "step", "leaky_relu(0.2)", "abs", "exp", "identity", "exp_minus_one"])
@pytest.mark.parametrize("b", BIASES)
def test_closed_form_vs_quad(spec, b):
    ref, l1 = _quad_reference(spec, b)
    c = get_activation(spec).hermite_coefficients(K_MAX, b)
    _assert_coefficients(c, ref, l1, rtol=1e-12, floor=1e-14, label=f"{spec} b={b}")


def test_exp_closed_form():
    """E[e^(z+b) He_k(z)] = e^(b+1/2) for every k (generating function of He_k)."""
    b = np.array([-3.0, 0.0, 0.7, 5.0])
    c = get_activation("exp").hermite_coefficients(6, b)
    assert np.array_equal(c, np.repeat(np.exp(b + 0.5)[:, None], 7, axis=1))
    gh = get_activation("exp").hermite_coefficients(6, b, method="quadrature")
    assert np.all(np.abs(gh - c) <= 1e-13 * c)


def test_exp_minus_one_closed_form_in_the_tails():
    emo = get_activation("exp_minus_one")
    # b >> 0: e^t - 1 ~ e^t on the bulk, so c_k -> e^(b + 1/2) (minus the constant's Phi(b) in c_0)
    c = emo.hermite_coefficients(3, 700.0)
    assert np.all(np.isfinite(c)) and np.allclose(c, math.exp(700.5), rtol=1e-13, atol=0)
    # the Stein relation c_k = c_{k-1} + c_{k-1}(step) holds in closed form too, deep in the left tail
    b = np.array([-30.0, -20.0, -12.0])
    e = emo.hermite_coefficients(5, b)
    s = get_activation("step").hermite_coefficients(4, b)
    assert np.all(np.abs(e[:, 1:] - (e[:, :-1] + s)) <= 1e-12 * np.abs(e[:, 1:]))
    assert np.all(e > 0) and np.all(e < 1e-28)


def test_identity_closed_form_is_exact():
    c = get_activation("identity").hermite_coefficients(4, [-2.0, 0.5])
    assert np.array_equal(c, [[-2.0, 1, 0, 0, 0], [0.5, 1, 0, 0, 0]])


# --------------------------------------------------------------------------- numerical paths

@pytest.mark.parametrize("spec", ["sigmoid", "tanh", "relu_power(0.5)", "relu_power(2.5)", "relu_power(3)",
                                  "exp_minus_one", "relu", "step", "leaky_relu(0.2)", "abs"])
def test_quadrature_path_vs_quad(spec):
    """The library's numerical path (Gauss-Hermite, or split adaptive quadrature) to 1e-12."""
    act = get_activation(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the library must not leak IntegrationWarnings
        c = act.hermite_coefficients(K_MAX, np.array(BIASES), method="quadrature")
    for i, b in enumerate(BIASES):
        ref, l1 = _quad_reference(spec, b)
        _assert_coefficients(c[i], ref, l1, rtol=1e-12, floor=1e-14, label=f"{spec} b={b}")


@pytest.mark.parametrize("spec", ["relu_power(3)", "exp_minus_one"])
def test_quadrature_path_vs_100_digit_reference(spec):
    act = get_activation(spec)
    c = act.hermite_coefficients(K_MAX, np.array(BIASES), method="quadrature")
    for i, b in enumerate(BIASES):
        _assert_coefficients(c[i], _exact_reference(spec, b), _quad_reference(spec, b)[1],
                             rtol=1e-12, floor=1e-14, label=f"{spec} b={b}")


def test_quadrature_coefficients_shape_and_broadcasting():
    act = get_activation("sigmoid")
    b = np.array([[0.0, 1.0, -2.0], [0.5, 3.0, -1.0]])
    c = act.hermite_coefficients(3, b)
    assert c.shape == (2, 3, 4)
    for idx in np.ndindex(b.shape):  # same numbers up to BLAS summation order
        assert np.allclose(c[idx], act.hermite_coefficients(3, b[idx]), rtol=1e-13, atol=1e-15)
    kinked = get_activation("relu_power(2)")
    ck = kinked.hermite_coefficients(2, b[:, :1])
    assert ck.shape == (2, 1, 3)
    assert np.array_equal(ck[1, 0], kinked.hermite_coefficients(2, 0.5))
    assert get_activation("relu").hermite_coefficients(0, 0.0).shape == (1,)


# --------------------------------------------------------------------------- Stein's identity
# E[f(z + b) He_k(z)] = E[f'(z + b) He_{k-1}(z)] (Gaussian integration by parts), i.e. c_k(f) = c_{k-1}(f').

def test_stein_relu_step_closed_forms():
    b = np.array(EXACT_BIASES)
    relu = get_activation("relu").hermite_coefficients(K_MAX, b)
    step = get_activation("step").hermite_coefficients(K_MAX - 1, b)
    assert np.allclose(relu[:, 1:], step, rtol=1e-15, atol=0)


def test_stein_leaky_relu_and_abs():
    # leaky' = a + (1 - a) step, abs' = 2 step - 1
    b = np.array(BIASES)
    step = get_activation("step").hermite_coefficients(K_MAX - 1, b)
    delta0 = np.eye(K_MAX)[0]
    leaky = get_activation("leaky_relu(0.2)").hermite_coefficients(K_MAX, b)
    assert np.allclose(leaky[:, 1:], 0.8 * step + 0.2 * delta0, rtol=1e-14, atol=1e-16)
    absc = get_activation("abs").hermite_coefficients(K_MAX, b)
    assert np.allclose(absc[:, 1:], 2 * step - delta0, rtol=1e-14, atol=1e-16)


def test_stein_numerical_paths():
    b = np.array([-1.5, 0.0, 0.8, 2.0])
    # relu_power(p)' = p relu_power(p - 1)
    c25 = get_activation("relu_power(2.5)").hermite_coefficients(6, b)
    c15 = get_activation("relu_power(1.5)").hermite_coefficients(5, b)
    assert np.all(np.abs(c25[:, 1:] - 2.5 * c15) <= 1e-12 * np.abs(c25).max(axis=1, keepdims=True))
    # exp_minus_one' = exp on t > 0 = exp_minus_one + step (numerical path)
    e = get_activation("exp_minus_one").hermite_coefficients(6, b, method="quadrature")
    s = get_activation("step").hermite_coefficients(5, b)
    assert np.all(np.abs(e[:, 1:] - (e[:, :-1] + s)) <= 1e-12 * np.abs(e).max(axis=1, keepdims=True))
    # sigmoid, tanh: derivative integrated by an independent Gauss-Hermite rule (200 nodes)
    x, w = npherm.hermegauss(200)
    w = w / math.sqrt(2 * math.pi)
    for spec in ("sigmoid", "tanh"):
        act = get_activation(spec)
        c = act.hermite_coefficients(6, b)
        dc = (act.derivative(x[None, :] + b[:, None]) * w) @ hermite_table(5, x)
        assert np.all(np.abs(c[:, 1:] - dc) <= 1e-12 * np.abs(c).max(axis=1, keepdims=True)), spec


# --------------------------------------------------------------------------- function facts

ALL_SPECS = ["relu", "leaky_relu(0.1)", "step", "sigmoid", "tanh", "relu_power(2)", "relu_power(0.5)",
             "relu_power(3.5)", "exp_minus_one", "abs", "exp", "identity"]


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_derivative_matches_finite_differences(spec, rng):
    act = get_activation(spec)
    t = rng.uniform(-3, 3, 200)
    t = t[np.abs(t) > 5e-2]  # away from the kink at 0
    h = 1e-5
    fd = (act(t + h) - act(t - h)) / (2 * h)
    # central difference: truncation h^2 |f'''| / 6 <= 1e-10 |f'''|, rounding ~ eps |f| / h ~ 2e-11 |f|
    # (|f'''| <= 700 on this range, the worst being relu_power(0.5) near t = 0.05)
    assert np.all(np.abs(act.derivative(t) - fd) <= 1e-7 * (1 + np.abs(act(t)))), spec


def test_derivative_at_kinks_follows_the_documented_convention():
    zero = np.array([0.0])
    expected = {"relu": 0.0, "leaky_relu(0.1)": 0.1, "step": 0.0, "relu_power(2)": 0.0,
                "relu_power(0.5)": 0.0, "exp_minus_one": 0.0, "abs": 0.0}
    for spec, value in expected.items():
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # e.g. no 0 ** negative warning from relu_power(0.5)
            assert get_activation(spec).derivative(zero)[0] == value, spec
            get_activation(spec).derivative(np.array([-2.0, 0.0, 2.0]))


def test_values_at_zero_and_rectified_flag():
    assert get_activation("step")(0.0) == 1.0  # Heaviside 1[t >= 0] (Goel-Panigrahy's "sgn")
    assert get_activation("step")(-1e-300) == 0.0
    t = np.array([-2.0, -1e-9, 0.0, 1e-9, 3.0])
    for spec in ALL_SPECS:
        act = get_activation(spec)
        y = act(t)
        if act.rectified:
            assert np.all(y[t <= 0] == 0) and np.all(y[t > 0] > 0), spec
    rectified = {spec for spec in ALL_SPECS if get_activation(spec).rectified}
    assert rectified == {"relu", "relu_power(2)", "relu_power(0.5)", "relu_power(3.5)", "exp_minus_one"}


@pytest.mark.parametrize("spec", [s for s in ALL_SPECS if s != "step"])
def test_inverse_on_positive_part(spec, rng):
    act = get_activation(spec)
    t = rng.uniform(0.01, 3.0, 100)
    y = act(t)
    # the inverses are well conditioned on this range (worst: arctanh near tanh(3), condition ~ 100)
    assert np.allclose(act.inverse(y), t, rtol=1e-12, atol=0), spec
    assert np.allclose(act(act.inverse(y)), y, rtol=1e-14, atol=0), spec


def test_step_has_no_inverse():
    with pytest.raises(InputError, match="no inverse"):
        get_activation("step").inverse(0.5)


@pytest.mark.parametrize("spec", ALL_SPECS)
def test_homogeneity_degree(spec, rng):
    act = get_activation(spec)
    t = rng.uniform(-3, 3, 100)
    c = rng.uniform(0.1, 5.0, 100)
    q = act.degree
    if q is None:
        assert not act.is_homogeneous
        # no degree q fits: act(2t)/act(t) is not constant where act(t) != 0
        ratio = act(2.0 * t[np.abs(act(t)) > 1e-3]) / act(t[np.abs(act(t)) > 1e-3])
        assert ratio.max() - ratio.min() > 1e-3
    else:
        assert act.is_homogeneous
        assert np.allclose(act(c * t), c ** q * act(t), rtol=1e-13, atol=0)


def test_degrees_of_the_registry():
    degrees = {s: get_activation(s).degree for s in ALL_SPECS}
    assert degrees == {"relu": 1.0, "leaky_relu(0.1)": 1.0, "step": 0.0, "sigmoid": None, "tanh": None,
                       "relu_power(2)": 2.0, "relu_power(0.5)": 0.5, "relu_power(3.5)": 3.5,
                       "exp_minus_one": None, "abs": 1.0, "exp": None, "identity": 1.0}


# --------------------------------------------------------------------------- names and specs

def test_every_registered_name_round_trips():
    names = available_activations()
    assert set(names) >= {"relu", "leaky_relu", "step", "sigmoid", "tanh", "relu_power", "exp_minus_one",
                          "abs", "exp"}
    for name in names + ALL_SPECS:
        act = get_activation(name)
        assert isinstance(act, Activation)
        again = get_activation(act.spec)
        assert again == act and hash(again) == hash(act) and str(act) == act.spec
        assert get_activation(act) is act


def test_aliases_case_and_blanks():
    assert get_activation("logistic") == get_activation("sigmoid")
    assert get_activation("  ReLU ") == get_activation("relu")
    assert get_activation("leaky_relu ( 0.25 )") == get_activation("leaky_relu", 0.25)
    assert get_activation("leaky_relu").param == 0.01
    assert get_activation("relu_power").spec == "relu_power(2)"
    assert get_activation("relu_power(2)") != get_activation("relu_power(3)")
    assert get_activation("relu") != get_activation("leaky_relu(0)")


@given(st.floats(min_value=0.0, max_value=1.0, exclude_max=True, allow_subnormal=True))
def test_leaky_spec_round_trip_property(slope):
    act = get_activation("leaky_relu", slope)
    assert get_activation(act.spec) == act and act.param == slope


@given(st.floats(min_value=1e-6, max_value=50.0))
def test_relu_power_spec_round_trip_property(p):
    act = get_activation("relu_power", p)
    assert get_activation(act.spec) == act and act.param == p and act.degree == p


@pytest.mark.parametrize("bad, match", [
    ("softplus", "unknown activation"),
    ("relu(", "cannot parse"),
    ("relu(1)", "takes no parameter"),
    ("leaky_relu(1)", r"\[0, 1\)"),
    ("leaky_relu(-0.1)", r"\[0, 1\)"),
    ("relu_power(0)", "> 0"),
    ("relu_power(-2)", "> 0"),
    (3, "string or an Activation"),
    (None, "string or an Activation"),
])
def test_get_activation_errors(bad, match):
    with pytest.raises(InputError, match=match):
        get_activation(bad)


def test_get_activation_parameter_errors():
    with pytest.raises(InputError, match="either in the name or as param"):
        get_activation("leaky_relu(0.1)", 0.2)
    with pytest.raises(InputError, match="finite"):
        get_activation("relu_power", float("nan"))
    with pytest.raises(InputError, match="finite"):
        get_activation("relu_power", float("inf"))
    with pytest.raises(InputError):
        get_activation("leaky_relu", float("nan"))
    with pytest.raises(InputError, match="must be a number"):
        get_activation("leaky_relu", "big")
    with pytest.raises(InputError, match="param cannot be combined"):
        get_activation(get_activation("relu"), 0.5)


def test_hermite_coefficients_argument_errors():
    relu = get_activation("relu")
    for k in (-1, 2.0, True, "3"):
        with pytest.raises(InputError, match="k_max"):
            relu.hermite_coefficients(k)
    with pytest.raises(InputError, match="NaN or infinite"):
        relu.hermite_coefficients(2, [0.0, np.nan])
    with pytest.raises(InputError, match="NaN or infinite"):
        relu.hermite_coefficients(2, np.inf)
    with pytest.raises(InputError, match="bias"):
        relu.hermite_coefficients(2, "high")
    with pytest.raises(InputError, match="method"):
        relu.hermite_coefficients(2, 0.0, method="exact")
    with pytest.raises(InputError, match="no closed-form"):
        get_activation("sigmoid").hermite_coefficients(2, 0.0, method="closed")
    assert np.array_equal(relu.hermite_coefficients(3, 0.5, method="closed"), relu.hermite_coefficients(3, 0.5))
