"""Error metrics: parameter recovery, direction recovery, and function-space (L2) error.

The public metrics (``nr.metrics``):

* :func:`parameter_error` -- match estimated to true hidden units (Hungarian algorithm,
  :func:`scipy.optimize.linear_sum_assignment`) after putting both networks in canonical form, and report
  ``max_unit_error = max_i ||w_i - w'_pi(i)|| + |b_i - b'_pi(i)| + ||a_i - a'_pi(i)||`` (``a_i`` = column
  ``i`` of ``output_weights``). This is the parameter error of Awasthi et al.'s Theorem 3.1 (units matched by the Hungarian algorithm); with
  ``allow_sign_flip=True`` each match may also flip ``(b, w) -> (-b, -w)`` (the sign ambiguity of
  Awasthi et al. for ``l > 1``, Theorem 3.4). For two :class:`~nnrecover.DeepNetwork` of the same layer
  sizes the units of each hidden layer are matched in turn, from the input (:func:`parameter_error`).
* :func:`weight_error` -- angles between matched rows of two weight matrices.
* :func:`function_error` -- relative L2 error ``sqrt(E||f - g||^2 / E||g||^2)`` under an input distribution,
  by chunked Monte Carlo, or exactly for ReLU-family networks under Gaussian (mixture) inputs.

Exact Gaussian L2 geometry of ReLU networks (Appendix B / Prop. B.1 of Awasthi et
al.). For ``z1 = u.x + b`` and ``z2 = v.x + c`` with unit ``u, v``, ``rho = u.v``, ``s = sqrt(1 - rho^2)``
and ``x ~ N(0, I)`` the pair kernel is

    kappa(b, c, rho) = E[relu(z1) relu(z2)]
                     = (rho + b c) Phi2(b, c; rho) + b phi(c) Phi((b - rho c)/s) + c phi(b) Phi((c - rho b)/s)
                       + s^2 phi2(b, c; rho),

    rho = +1:  kappa = (1 + b c) Phi(t) + (b + c - t) phi(t),  t = min(b, c),
    rho = -1:  kappa = (b c - 1)(Phi(b) + Phi(c) - 1) + c phi(b) + b phi(c)  if b + c > 0, else 0.

``Phi2`` is the bivariate standard normal CDF (:func:`bivariate_normal_cdf`, closed form through Owen's T
function), ``phi2`` its density; we use ``s^2 phi2 = s phi(c) phi((b - rho c)/s)``, which is free of the
cancellation in ``b^2 - 2 rho b c + c^2``. Then for ``f = sum_i a_i relu(u_i.x + b_i) + c``

    E[f^2] = sum_{ij} a_i a_j kappa(b_i, b_j, u_i.u_j) + 2 c sum_i a_i c_0(b_i) + c^2,
    c_0(b) = E relu(z + b) = b Phi(b) + phi(b)                                  (Lemma 3.5, k = 0),

and the squared L2 distance of two networks is ``E[f^2]`` of the network stacking the units of both with
output weights ``(A_1, -A_2)`` (:func:`relu_l2_distance`). Leaky ReLU, ``abs`` and ``identity`` units are
sums of two ReLU units (``t = relu(t) - relu(-t)``), so they are covered too; rows of any norm are first
put in canonical form.

Accuracy. ``Phi2`` is accurate to about 1e-16 absolute (``scipy.special.owens_t``). Near ``|rho| = 1``
the differences ``b - rho c`` in the formulas are evaluated as ``(b - c) + (1 - rho) c`` (resp.
``(b + c) - (1 + rho) c``), where ``1 -+ rho`` is exact; this removes the ``eps / s`` cancellation of the
textbook form, and the kernel is accurate to a few 1e-16 (times ``max(1, |b c|)``) for every ``rho``
including ``1 - rho = 1e-16`` (checked against quadrature of ``d kappa / d rho = Phi2(b, c; rho)``,
Price's theorem). The squared distance is a difference of Gram sums, so its absolute error is about
``1e-16 (E f^2 + E g^2)`` times the number of units: distances below ~1e-7 relative are at round-off
(use :func:`function_error` or :func:`parameter_error` there).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import special
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist

from ._validation import check_finite, check_positive_int, check_random_state
from .activations import norm_cdf, norm_pdf
from .deep_network import DeepNetwork
from .distributions import Distribution, Gaussian, StandardGaussian, SymmetricMixture
from .errors import InputError
from .network import TwoLayerNetwork

__all__ = [
    "parameter_error",
    "weight_error",
    "function_error",
    "relu_l2_distance",
    "relu_inner_product",
    "relu_second_moment",
    "relu_kernel",
    "bivariate_normal_cdf",
]

_RELU_FAMILY = ("relu", "leaky_relu", "abs", "identity")


# =========================================================================== helpers

def _as_network(obj: Any, name: str) -> TwoLayerNetwork:
    """A TwoLayerNetwork, or the ``network_`` of a fitted learner."""
    if isinstance(obj, TwoLayerNetwork):
        return obj
    net = getattr(obj, "network_", None)
    if isinstance(net, TwoLayerNetwork):
        return net
    raise InputError(
        f"{name} must be a TwoLayerNetwork (or a fitted learner with network_), got {type(obj).__name__}.")


def _is_deep(obj: Any) -> bool:
    """Whether ``obj`` is a DeepNetwork, or a fitted model whose ``network_`` is one."""
    return isinstance(obj, DeepNetwork) or isinstance(getattr(obj, "network_", None), DeepNetwork)


def _as_deep_network(obj: Any, name: str) -> DeepNetwork:
    """A DeepNetwork: ``obj`` itself, its ``network_``, or a TwoLayerNetwork as one hidden layer."""
    if isinstance(obj, DeepNetwork):
        return obj
    net = getattr(obj, "network_", None)
    if isinstance(net, DeepNetwork):
        return net
    return DeepNetwork.from_two_layer(_as_network(obj, name))


def _as_two_layer(obj: Any, name: str, what: str) -> TwoLayerNetwork:
    """``_as_network`` that also takes a one-hidden-layer DeepNetwork; deeper ones are refused for ``what``."""
    if _is_deep(obj):
        deep = _as_deep_network(obj, name)
        if deep.depth != 1:
            raise InputError(f"{what} has a closed form for networks with one hidden layer; {name} is a "
                             f"DeepNetwork with layer sizes {deep.layer_sizes}: use method='monte_carlo'.")
        return deep.to_two_layer()
    return _as_network(obj, name)


def _check_same_shape(est: TwoLayerNetwork, truth: TwoLayerNetwork) -> None:
    if est.n_inputs != truth.n_inputs:
        raise InputError(f"estimated network has {est.n_inputs} inputs but the truth has {truth.n_inputs}.")
    if est.n_outputs != truth.n_outputs:
        raise InputError(f"estimated network has {est.n_outputs} outputs but the truth has {truth.n_outputs}.")


def _unit_angles(U: np.ndarray, V: np.ndarray) -> np.ndarray:
    """Angles between matching rows of two arrays of unit (or zero) vectors, accurate near 0 and pi:
    ``2 atan2(||u - v||, ||u + v||)``."""
    return 2.0 * np.arctan2(np.linalg.norm(U - V, axis=-1), np.linalg.norm(U + V, axis=-1))


# =========================================================================== parameter_error

def parameter_error(estimated: Any, truth: Any, *, allow_sign_flip: bool = False,
                    canonical: bool = True) -> dict:
    """Unit-wise parameter error after matching hidden units (Hungarian matching; Awasthi et al. Theorem 3.1).

    Both networks are put in canonical form (unit-norm hidden rows, scale moved into ``b`` and ``A``;
    only for positively homogeneous activations, and only if ``canonical``). Units are matched by the
    Hungarian algorithm on the cost::

        C_ij = ||w_i - w'_j|| + |b_i - b'_j| + ||a_i - a'_j||,

    ``i`` over true units, ``j`` over estimated units, ``a`` = column of ``output_weights``. With
    ``allow_sign_flip`` the cost of a pair is the smaller of the costs of ``(w'_j, b'_j)`` and
    ``(-w'_j, -b'_j)`` (output weights are not flipped), and ``sign_flips`` records which was used.

    The assignment minimises the *sum* of the costs; the reported ``max_unit_error`` is the largest
    matched cost. A true unit left unmatched (the estimate has fewer units) is matched to the zero unit
    (``w' = 0, b' = 0, a' = 0``), so it counts with ``||w_i|| + |b_i| + ||a_i||``. Extra estimated units are
    listed, with their output-weight norms, and enter only ``max_unit_error_with_extra`` (matched to the
    zero unit): an extra unit with zero output weight does not change the function.

    Deep networks. When either network is a :class:`~nnrecover.DeepNetwork` (a TwoLayerNetwork then
    counts as one hidden layer), both must have the same ``layer_sizes``. After the canonical forms
    (:meth:`DeepNetwork.canonical`), the units of hidden layer ``l = 1, ..., L`` are matched by the
    Hungarian algorithm on ``||w_i - w'_j|| + |b_i - b'_j|`` (incoming rows and biases), the estimate's
    columns first permuted by the matching of layer ``l - 1``; in the last hidden layer, whose outgoing
    columns meet the unpermuted outputs, the cost also has ``||a_i - a'_j||``, as for two layers. A unit's
    error is ``||w_i - w'_pi(i)|| + |b_i - b'_pi(i)| + ||a_i - a'_pi(i)||`` with ``a`` its outgoing column
    (rows in the next layer's matched order), the meaning of the two-layer ``max_unit_error``, which a
    one-hidden-layer DeepNetwork reproduces.

    Parameters
    ----------
    estimated, truth : TwoLayerNetwork or DeepNetwork (or fitted learner with ``network_``)
        Same ``n_inputs`` and ``n_outputs``; the numbers of hidden units may differ (two layers only).
    allow_sign_flip : bool, default False
        Allow ``(b, w) -> (-b, -w)`` per unit (Awasthi et al., order ``l > 1``); two-layer networks only.
    canonical : bool, default True
        Compare canonical forms (recommended: units of homogeneous activations are defined up to a
        positive scale).

    Returns
    -------
    dict with keys
        ``max_unit_error`` (float), ``mean_unit_error`` (float), ``per_unit`` ((k_true,) array),
        ``weight_errors``, ``bias_errors``, ``output_weight_errors`` ((k_true,) arrays),
        ``matching`` ((k_true,) int array: estimated unit matched to each true unit, -1 if none),
        ``sign_flips`` ((k_true,) bool array), ``n_sign_flips`` (int),
        ``missing_units`` (list of true-unit indices left unmatched), ``extra_units`` (list of
        estimated-unit indices left unmatched), ``extra_output_weight_norms`` (array),
        ``max_unit_error_with_extra`` (float), ``output_bias_error`` (``||c - c'||``),
        ``canonical`` (bool: canonical forms were compared), ``same_activation`` (bool).

        For deep networks: ``max_unit_error`` (float, over every hidden unit), ``mean_unit_error``,
        ``per_layer`` (list of L floats, the largest unit error of each hidden layer), ``output_error``
        (float: largest absolute difference of the output layer's weights and biases, columns matched),
        ``per_unit``, ``weight_errors``, ``bias_errors``, ``outgoing_errors`` (lists of L arrays of shape
        (n_l,)), ``matchings`` (list of L int arrays: the estimated unit matched to each true unit),
        ``canonical``, ``same_activation``.
    """
    if _is_deep(estimated) or _is_deep(truth):
        return _deep_parameter_error(_as_deep_network(estimated, "estimated"), _as_deep_network(truth, "truth"),
                                     allow_sign_flip=allow_sign_flip, canonical=canonical)
    est = _as_network(estimated, "estimated")
    tru = _as_network(truth, "truth")
    _check_same_shape(est, tru)
    homogeneous = est.activation.degree is not None and tru.activation.degree is not None
    use_canonical = bool(canonical) and homogeneous
    if use_canonical:
        est, tru = est.canonical(), tru.canonical()

    Wt, bt, At = tru.hidden_weights, tru.hidden_bias, tru.output_weights.T  # At: (k_true, p)
    We, be, Ae = est.hidden_weights, est.hidden_bias, est.output_weights.T
    kt, ke = Wt.shape[0], We.shape[0]

    # pairwise distances without a (k_true, k_est, d) intermediate
    dw = cdist(Wt, We)
    db = np.abs(bt[:, None] - be[None, :])
    da = cdist(At, Ae)
    cost = dw + db + da
    flip = np.zeros((kt, ke), dtype=bool)
    if allow_sign_flip:
        dw_f = cdist(Wt, -We)
        db_f = np.abs(bt[:, None] + be[None, :])
        cost_f = dw_f + db_f + da
        flip = cost_f < cost
        dw = np.where(flip, dw_f, dw)
        db = np.where(flip, db_f, db)
        cost = np.where(flip, cost_f, cost)

    # parameters near 1e308 overflow the distances to inf (or nan): match such pairs last instead of
    # failing (scipy calls a cost matrix with inf entries infeasible); their errors stay inf below
    rows, cols = linear_sum_assignment(np.where(np.isfinite(cost), cost, np.finfo(float).max))
    matching = np.full(kt, -1, dtype=np.intp)
    matching[rows] = cols
    zero_w = np.linalg.norm(Wt, axis=1)
    zero_b = np.abs(bt)
    zero_a = np.linalg.norm(At, axis=1)
    weight_errors, bias_errors, out_errors = zero_w.copy(), zero_b.copy(), zero_a.copy()
    weight_errors[rows] = dw[rows, cols]
    bias_errors[rows] = db[rows, cols]
    out_errors[rows] = da[rows, cols]
    sign_flips = np.zeros(kt, dtype=bool)
    sign_flips[rows] = flip[rows, cols]
    per_unit = weight_errors + bias_errors + out_errors

    extra = sorted(set(range(ke)) - set(cols.tolist()))
    extra_cost = (np.linalg.norm(We[extra], axis=1) + np.abs(be[extra]) + np.linalg.norm(Ae[extra], axis=1))
    max_unit = float(per_unit.max())
    return {
        "max_unit_error": max_unit,
        "mean_unit_error": float(per_unit.mean()),
        "per_unit": per_unit,
        "weight_errors": weight_errors,
        "bias_errors": bias_errors,
        "output_weight_errors": out_errors,
        "matching": matching,
        "sign_flips": sign_flips,
        "n_sign_flips": int(sign_flips.sum()),
        "missing_units": [int(i) for i in np.flatnonzero(matching < 0)],
        "extra_units": [int(j) for j in extra],
        "extra_output_weight_norms": np.linalg.norm(Ae[extra], axis=1),
        "max_unit_error_with_extra": float(max(max_unit, extra_cost.max(initial=0.0))),
        "output_bias_error": float(np.linalg.norm(tru.output_bias - est.output_bias)),
        "canonical": use_canonical,
        "same_activation": est.activation == tru.activation,
    }


def _deep_parameter_error(est: DeepNetwork, tru: DeepNetwork, *, allow_sign_flip: bool, canonical: bool) -> dict:
    """:func:`parameter_error` of two DeepNetwork (see there)."""
    if allow_sign_flip:
        raise InputError("allow_sign_flip is the sign ambiguity of two-layer networks (Awasthi et al.); "
                         "compare DeepNetwork without it (allow_sign_flip=False).")
    if est.layer_sizes != tru.layer_sizes:
        raise InputError(f"estimated network has layer_sizes {est.layer_sizes} but the truth has "
                         f"{tru.layer_sizes}; parameter_error matches the units of deep networks of the same "
                         "layer sizes.")
    homogeneous = est.activation.degree is not None and tru.activation.degree is not None
    use_canonical = bool(canonical) and homogeneous
    if use_canonical:
        est, tru = est.canonical(), tru.canonical()
    L = tru.depth
    big = np.finfo(float).max
    dws, dbs, perms = [], [], []
    da_last = None
    prev = np.arange(tru.n_inputs)
    for l in range(L):
        We = est.weights[l][:, prev]  # the estimate's incoming columns in the truth's order of layer l
        dw = cdist(tru.weights[l], We)
        db = np.abs(tru.biases[l][:, None] - est.biases[l][None, :])
        cost = dw + db
        if l == L - 1:
            # the outputs are not permuted, so the last outgoing columns are comparable already
            da_last = cdist(tru.weights[L].T, est.weights[L].T)
            cost = cost + da_last
        # as for two layers: overflowed distances are matched last instead of making scipy fail
        _, cols = linear_sum_assignment(np.where(np.isfinite(cost), cost, big))
        dws.append(dw)
        dbs.append(db)
        perms.append(cols)
        prev = cols
    units = [np.arange(n) for n in tru.hidden_sizes]
    weight_errors = [dw[i, p] for dw, i, p in zip(dws, units, perms)]
    bias_errors = [db[i, p] for db, i, p in zip(dbs, units, perms)]
    outgoing = []
    for l in range(L - 1):
        # outgoing columns of layer l + 1 with their rows in the matched order of layer l + 2
        aligned = est.weights[l + 1][perms[l + 1]][:, perms[l]]
        outgoing.append(np.linalg.norm(tru.weights[l + 1] - aligned, axis=0))
    outgoing.append(da_last[units[-1], perms[-1]])
    per_unit = [w + b + a for w, b, a in zip(weight_errors, bias_errors, outgoing)]
    out_w = np.abs(tru.weights[L] - est.weights[L][:, perms[-1]])
    out_b = np.abs(tru.biases[L] - est.biases[L])
    per_layer = [float(e.max()) for e in per_unit]
    return {
        "max_unit_error": max(per_layer),
        "mean_unit_error": float(np.concatenate(per_unit).mean()),
        "per_layer": per_layer,
        "output_error": float(max(out_w.max(), out_b.max())),
        "per_unit": per_unit,
        "weight_errors": weight_errors,
        "bias_errors": bias_errors,
        "outgoing_errors": outgoing,
        "matchings": [p.astype(np.intp) for p in perms],
        "canonical": use_canonical,
        "same_activation": est.activation == tru.activation,
    }


# =========================================================================== weight_error

def _as_weight_matrix(W: Any, name: str) -> np.ndarray:
    if isinstance(W, TwoLayerNetwork):
        return W.hidden_weights
    try:
        arr = np.array(W, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name} must be a numeric (k, d) array: {exc}") from exc
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise InputError(f"{name} must have shape (n_hidden, n_inputs), got {arr.shape}.")
    check_finite(arr, name)
    return arr


def weight_error(estimated_W: Any, true_W: Any, *, allow_sign_flip: bool = False) -> dict:
    """Angles between matched hidden directions (rows of ``W``), in radians.

    Rows are normalised, matched by the Hungarian algorithm on the angle, and compared by
    ``angle(u, v) = 2 atan2(||u - v||, ||u + v||)`` (accurate for tiny angles, unlike ``arccos``).
    The sign of a row counts (``w`` and ``-w`` are at angle ``pi``) unless ``allow_sign_flip``.

    Parameters
    ----------
    estimated_W, true_W : array of shape (k_est, d) and (k_true, d), or TwoLayerNetwork
        Rows are hidden units; the row counts may differ. True rows must be nonzero.
    allow_sign_flip : bool, default False
        Compare directions up to sign (``max_angle`` then equals ``max_angle_up_to_sign``).

    Returns
    -------
    dict with keys
        ``max_angle``, ``mean_angle`` (float, radians), ``angles`` ((k_true,) array), ``matching``
        ((k_true,) int array, -1 if unmatched), ``max_angle_up_to_sign`` (max over the same matching of
        ``min(angle, pi - angle)``), ``max_abs_cos_error`` (``max_i 1 - |cos angle_i|``), ``sign_flips``
        ((k_true,) bool: the matched estimate points away, ``cos < 0``), ``max_norm_ratio_error``
        (``max_i | ||w'_pi(i)|| / ||w_i|| - 1 |``: scale recovery), ``missing_rows``, ``extra_rows``.
        An unmatched true row gets angle ``pi/2`` (the convention of an all-zero estimate).
    """
    We = _as_weight_matrix(estimated_W, "estimated_W")
    Wt = _as_weight_matrix(true_W, "true_W")
    if We.shape[1] != Wt.shape[1]:
        raise InputError(f"estimated_W has {We.shape[1]} columns but true_W has {Wt.shape[1]}.")
    nt = np.linalg.norm(Wt, axis=1)
    if np.any(nt == 0):
        raise InputError(f"true_W has zero row(s) {np.flatnonzero(nt == 0).tolist()}: their direction is undefined.")
    ne = np.linalg.norm(We, axis=1)
    Ut = Wt / nt[:, None]
    Ue = np.divide(We, ne[:, None], out=np.zeros_like(We), where=ne[:, None] > 0)
    cos = np.clip(Ut @ Ue.T, -1.0, 1.0)
    cost = np.arccos(np.abs(cos)) if allow_sign_flip else np.arccos(cos)
    rows, cols = linear_sum_assignment(cost)
    kt = Wt.shape[0]
    matching = np.full(kt, -1, dtype=np.intp)
    matching[rows] = cols
    angles = np.full(kt, np.pi / 2)
    angles[rows] = _unit_angles(Ut[rows], Ue[cols])
    sign_flips = np.zeros(kt, dtype=bool)
    sign_flips[rows] = cos[rows, cols] < 0
    up_to_sign = np.minimum(angles, np.pi - angles)
    ratio = np.full(kt, np.inf)
    ratio[rows] = np.abs(ne[cols] / nt[rows] - 1.0)
    reported = up_to_sign if allow_sign_flip else angles
    return {
        "max_angle": float(reported.max()),
        "mean_angle": float(reported.mean()),
        "angles": reported,
        "matching": matching,
        "max_angle_up_to_sign": float(up_to_sign.max()),
        # 1 - |cos t| = 2 sin^2(t'/2), t' the angle up to sign: no cancellation for tiny angles
        "max_abs_cos_error": float((2.0 * np.sin(up_to_sign / 2.0) ** 2).max()),
        "sign_flips": sign_flips,
        "max_norm_ratio_error": float(ratio.max()),
        "missing_rows": [int(i) for i in np.flatnonzero(matching < 0)],
        "extra_rows": sorted(set(range(We.shape[0])) - set(cols.tolist())),
    }


# =========================================================================== Gaussian kernels

def _minus_rho_times(x, y, rho):
    """``x - rho y`` without cancellation near ``|rho| = 1``: ``(x - y) + (1 - rho) y`` for ``rho >= 0``,
    ``(x + y) - (1 + rho) y`` otherwise (``1 -+ rho`` is exact in floating point there, by Sterbenz)."""
    return np.where(rho >= 0, (x - y) + (1.0 - rho) * y, (x + y) - (1.0 + rho) * y)


def bivariate_normal_cdf(h, k, rho) -> np.ndarray:
    """``Phi2(h, k; rho) = P(Z1 <= h, Z2 <= k)`` for standard normals with correlation ``rho``.

    Closed form through Owen's T function (Owen 1956),

        Phi2 = (Phi(h) + Phi(k))/2 - T(h, a_h) - T(k, a_k) - beta,
        a_h = (k - rho h)/(h s),  a_k = (h - rho k)/(k s),  s = sqrt(1 - rho^2),
        beta = 1/2 if h k < 0 or (h k = 0 and h + k < 0), else 0,

    with the limits ``Phi2(0, 0; rho) = 1/4 + asin(rho)/(2 pi)``, ``Phi2(h, k; 1) = Phi(min(h, k))`` and
    ``Phi2(h, k; -1) = max(0, Phi(h) + Phi(k) - 1)``. Vectorised (broadcasting); about 1e-16 absolute error.

    Parameters
    ----------
    h, k : float or array
    rho : float or array in [-1, 1]

    Returns
    -------
    ndarray of the broadcast shape
    """
    h, k, rho = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (h, k, rho)))
    if np.any(np.isnan(h)) or np.any(np.isnan(k)) or np.any(np.isnan(rho)):
        raise InputError("bivariate_normal_cdf got NaN arguments.")
    if np.any(np.abs(rho) > 1.0):
        raise InputError("rho must lie in [-1, 1].")
    s = np.sqrt((1.0 - rho) * (1.0 + rho))
    out = np.empty(h.shape)
    edge_hi, edge_lo = rho == 1.0, rho == -1.0
    both0 = (h == 0.0) & (k == 0.0) & ~edge_hi & ~edge_lo
    gen = ~(edge_hi | edge_lo | both0)
    if np.any(gen):
        hg, kg, rg, sg = h[gen], k[gen], rho[gen], s[gen]
        with np.errstate(divide="ignore", invalid="ignore"):
            ah = _minus_rho_times(kg, hg, rg) / (hg * sg)
            ak = _minus_rho_times(hg, kg, rg) / (kg * sg)
        # h = 0 (k != 0): a_h = sign(k) inf, T(0, +-inf) = +-1/4; owens_t handles infinite a
        ah = np.where(hg == 0.0, np.copysign(np.inf, kg), ah)
        ak = np.where(kg == 0.0, np.copysign(np.inf, hg), ak)
        beta = np.where((hg * kg < 0) | ((hg * kg == 0) & (hg + kg < 0)), 0.5, 0.0)
        val = 0.5 * (norm_cdf(hg) + norm_cdf(kg)) - special.owens_t(hg, ah) - special.owens_t(kg, ak) - beta
        out[gen] = np.clip(val, 0.0, 1.0)
    if np.any(both0):
        out[both0] = 0.25 + np.arcsin(rho[both0]) / (2.0 * np.pi)
    if np.any(edge_hi):
        out[edge_hi] = norm_cdf(np.minimum(h[edge_hi], k[edge_hi]))
    if np.any(edge_lo):
        out[edge_lo] = np.maximum(0.0, norm_cdf(h[edge_lo]) - norm_cdf(-k[edge_lo]))
    return out


def _kappa_plus_one(b, c):
    t = np.minimum(b, c)
    return (1.0 + b * c) * norm_cdf(t) + (b + c - t) * norm_pdf(t)


def _kappa_minus_one(b, c):
    val = (b * c - 1.0) * (norm_cdf(b) - norm_cdf(-c)) + c * norm_pdf(b) + b * norm_pdf(c)
    return np.where(b + c > 0, val, 0.0)


def relu_kernel(b, c, rho) -> np.ndarray:
    """Pair kernel ``kappa(b, c, rho) = E[relu(u.x + b) relu(v.x + c)]``, ``x ~ N(0, I)``, unit ``u, v``,
    ``rho = u.v`` (Awasthi et al. Appendix B).

    Vectorised with broadcasting; the closed forms at ``rho = +-1`` are used there. Absolute error a few
    1e-16 times ``max(1, |b c|)`` for every ``rho`` (see the module docstring).

    Parameters
    ----------
    b, c : float or array
        Biases of the two units.
    rho : float or array in [-1, 1]
        Cosine between the two unit directions (values within 1e-12 outside [-1, 1] are clipped:
        inner products of unit vectors carry round-off).

    Returns
    -------
    ndarray of the broadcast shape
    """
    b, c, rho = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (b, c, rho)))
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(c)) and np.all(np.isfinite(rho))):
        raise InputError("relu_kernel arguments must be finite.")
    if np.any(np.abs(rho) > 1.0 + 1e-12):
        raise InputError("rho must lie in [-1, 1] (it is the cosine between two unit directions).")
    rho = np.clip(rho, -1.0, 1.0)
    out = np.empty(b.shape)
    near_hi = rho == 1.0
    near_lo = rho == -1.0
    gen = ~(near_hi | near_lo)
    if np.any(gen):
        bg, cg, rg = b[gen], c[gen], rho[gen]
        s = np.sqrt((1.0 - rg) * (1.0 + rg))
        t1 = _minus_rho_times(bg, cg, rg) / s
        t2 = _minus_rho_times(cg, bg, rg) / s
        out[gen] = ((rg + bg * cg) * bivariate_normal_cdf(bg, cg, rg)
                    + bg * norm_pdf(cg) * norm_cdf(t1) + cg * norm_pdf(bg) * norm_cdf(t2)
                    + s * norm_pdf(cg) * norm_pdf(t1))
    if np.any(near_hi):
        out[near_hi] = _kappa_plus_one(b[near_hi], c[near_hi])
    if np.any(near_lo):
        out[near_lo] = _kappa_minus_one(b[near_lo], c[near_lo])
    return out


def _relu_units(net: TwoLayerNetwork, name: str):
    """Write ``net`` as ``sum_i C[:, i] relu(U_i . x + B_i) + const`` with unit rows U.

    Returns ``(U (m, d), B (m,), C (p, m), const (p,))``.
    """
    act = net.activation
    if act.name not in _RELU_FAMILY:
        raise InputError(
            f"{name} has activation {act.spec!r}; the exact Gaussian L2 formulas cover "
            f"{', '.join(_RELU_FAMILY)} only (use function_error with method='monte_carlo').")
    W, b, A, c = net.hidden_weights, net.hidden_bias, net.output_weights, net.output_bias.copy()
    norms = np.linalg.norm(W, axis=1)
    zero = norms == 0
    if np.any(zero):  # a zero row is the constant act(b_i)
        c += A[:, zero] @ act(b[zero])
    keep = ~zero
    U = W[keep] / norms[keep, None]
    B = b[keep] / norms[keep]
    C = A[:, keep] * norms[keep]  # degree-1 homogeneity
    if act.name == "relu":
        return U, B, C, c
    if act.name == "leaky_relu":  # relu(t) - alpha relu(-t)
        alpha = float(act.param)
        return np.vstack([U, -U]), np.concatenate([B, -B]), np.hstack([C, -alpha * C]), c
    if act.name == "abs":  # relu(t) + relu(-t)
        return np.vstack([U, -U]), np.concatenate([B, -B]), np.hstack([C, C]), c
    # identity: relu(t) - relu(-t)
    return np.vstack([U, -U]), np.concatenate([B, -B]), np.hstack([C, -C]), c


def _mean_relu(B: np.ndarray) -> np.ndarray:
    """``c_0(b) = E relu(z + b) = b Phi(b) + phi(b)`` (Lemma 3.5 of Awasthi et al., k = 0)."""
    return B * norm_cdf(B) + norm_pdf(B)


def _inner(units1, units2) -> np.ndarray:
    U1, B1, C1, c1 = units1
    U2, B2, C2, c2 = units2
    K = relu_kernel(B1[:, None], B2[None, :], np.clip(U1 @ U2.T, -1.0, 1.0))
    m1, m2 = _mean_relu(B1), _mean_relu(B2)
    return C1 @ K @ C2.T + np.outer(C1 @ m1, c2) + np.outer(c1, C2 @ m2) + np.outer(c1, c2)


def relu_inner_product(net1: TwoLayerNetwork, net2: TwoLayerNetwork) -> np.ndarray:
    """Exact ``E[f(x) g(x)^T]`` under ``x ~ N(0, I)`` for ReLU-family networks (any row norms).

    Parameters
    ----------
    net1, net2 : TwoLayerNetwork
        Activations relu, leaky_relu, abs or identity; same ``n_inputs``.

    Returns
    -------
    ndarray of shape (p1, p2)
    """
    n1, n2 = _as_network(net1, "net1"), _as_network(net2, "net2")
    if n1.n_inputs != n2.n_inputs:
        raise InputError(f"net1 has {n1.n_inputs} inputs but net2 has {n2.n_inputs}.")
    return _inner(_relu_units(n1, "net1"), _relu_units(n2, "net2"))


def relu_second_moment(net: TwoLayerNetwork) -> float:
    """Exact ``E ||f(x)||^2`` under ``x ~ N(0, I)`` (summed over outputs) for a ReLU-family network."""
    n = _as_network(net, "net")
    units = _relu_units(n, "net")
    return float(max(np.trace(_inner(units, units)), 0.0))


def relu_l2_distance(net1: TwoLayerNetwork, net2: TwoLayerNetwork, *, squared: bool = False) -> float:
    """Exact L2 distance ``sqrt(E ||f(x) - g(x)||^2)`` under ``x ~ N(0, I)`` (Awasthi et al. Proposition B.1).

    The units of both networks are stacked with output weights ``(A_1, -A_2)`` and output bias
    ``c_1 - c_2``; the result is ``sum_ij C_i . C_j kappa(B_i, B_j, U_i.U_j) + 2 c.(C m) + ||c||^2``
    (:func:`relu_kernel`). Round-off: absolute error of the squared distance ~1e-16 (E f^2 + E g^2) per
    unit pair (a negative round-off result is clipped to 0).

    Parameters
    ----------
    net1, net2 : TwoLayerNetwork
        ReLU-family activations (relu, leaky_relu, abs, identity); same ``n_inputs`` and ``n_outputs``.
    squared : bool, default False
        Return ``E ||f - g||^2`` instead of its square root.

    Returns
    -------
    float
    """
    n1, n2 = _as_network(net1, "net1"), _as_network(net2, "net2")
    _check_same_shape(n1, n2)
    U1, B1, C1, c1 = _relu_units(n1, "net1")
    U2, B2, C2, c2 = _relu_units(n2, "net2")
    units = (np.vstack([U1, U2]), np.concatenate([B1, B2]), np.hstack([C1, -C2]), c1 - c2)
    sq = float(max(np.trace(_inner(units, units)), 0.0))
    return sq if squared else float(np.sqrt(sq))


# =========================================================================== function_error

def _gaussian_components(distribution: Distribution):
    """``[(weight, mean, factor L with L L^T = cov)]`` for Gaussian and Gaussian-mixture inputs, else None."""
    if isinstance(distribution, StandardGaussian):
        return [(1.0, np.zeros(distribution.dim), np.eye(distribution.dim))]
    if isinstance(distribution, (Gaussian, SymmetricMixture)):
        vals, vecs = np.linalg.eigh((distribution.cov + distribution.cov.T) / 2)
        L = vecs * np.sqrt(np.clip(vals, 0.0, None))
        if isinstance(distribution, Gaussian):
            return [(1.0, distribution.mean, L)]
        J = distribution.means.shape[0]
        return [(0.5 / J, sgn * mu, L) for mu in distribution.means for sgn in (1.0, -1.0)]
    return None


def _affine_pullback(net: TwoLayerNetwork, mean: np.ndarray, L: np.ndarray) -> TwoLayerNetwork:
    """The network ``z -> net(mean + L z)``."""
    return TwoLayerNetwork(net.hidden_weights @ L, net.hidden_bias + net.hidden_weights @ mean,
                           net.output_weights, net.output_bias, net.activation)


def _predict_2d(model: Any, X: np.ndarray) -> np.ndarray:
    out = np.asarray(model.predict(X), dtype=np.float64)
    return out[:, None] if out.ndim == 1 else out


def function_error(estimated: Any, truth: Any, distribution: Distribution, n: int = 100_000, rng=None, *,
                   method: str = "monte_carlo", relative: bool = True, chunk_size: int = 65_536) -> float:
    """Relative L2 error ``sqrt(E ||f(x) - g(x)||^2 / E ||g(x)||^2)``, ``x ~ distribution``.

    ``f`` is the estimate and ``g`` the truth; the norm sums over outputs.

    Parameters
    ----------
    estimated : TwoLayerNetwork, DeepNetwork or fitted learner (anything with ``predict``)
    truth : TwoLayerNetwork, DeepNetwork (or fitted learner)
    distribution : nnrecover distribution
        Input law; ``dim`` must equal the networks' ``n_inputs``.
    n : int, default 100_000
        Monte Carlo sample size (``method="monte_carlo"``), drawn in chunks of ``chunk_size`` rows:
        memory O(chunk_size d). The relative standard error of the squared ratio is about
        ``sd((f-g)^2) / (sqrt(n) E (f-g)^2)``.
    rng : int, Generator or None
        Same seed, same result (bit-identical).
    method : {"monte_carlo", "exact"}, default "monte_carlo"
        ``"exact"`` uses the closed-form pair kernel (:func:`relu_l2_distance`); it needs ReLU-family
        networks and a Gaussian (``StandardGaussian``, ``Gaussian``) or ``SymmetricMixture`` input, whose
        components are handled by the substitution ``x = mean + L z``, ``z ~ N(0, I)``. A DeepNetwork
        with one hidden layer is taken as its TwoLayerNetwork; deeper ones are refused (no closed form).
    relative : bool, default True
        Divide by ``sqrt(E ||g||^2)``; ``False`` returns the absolute RMS error ``sqrt(E ||f - g||^2)``.
    chunk_size : int, default 65536

    Returns
    -------
    float
    """
    if not isinstance(distribution, Distribution):
        raise InputError(f"distribution must be an nnrecover distribution, got {type(distribution).__name__}.")
    if method not in ("monte_carlo", "exact"):
        raise InputError(f"method must be 'monte_carlo' or 'exact', got {method!r}.")
    if method == "exact":
        est = _as_two_layer(estimated, "estimated", "method='exact'")
        tru = _as_two_layer(truth, "truth", "method='exact'")
        _check_same_shape(est, tru)
        if distribution.dim != tru.n_inputs:
            raise InputError(f"distribution has dim {distribution.dim} but the networks have {tru.n_inputs} inputs.")
        comps = _gaussian_components(distribution)
        if comps is None:
            raise InputError(f"method='exact' needs Gaussian or SymmetricMixture inputs, got "
                             f"{type(distribution).__name__}; use method='monte_carlo'.")
        num = den = 0.0
        for weight, mean, L in comps:
            e_c, t_c = _affine_pullback(est, mean, L), _affine_pullback(tru, mean, L)
            num += weight * relu_l2_distance(e_c, t_c, squared=True)
            den += weight * relu_second_moment(t_c)
        return _ratio(num, den, relative)

    n = check_positive_int(n, "n")
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    for model, name in ((estimated, "estimated"), (truth, "truth")):
        if not callable(getattr(model, "predict", None)):
            raise InputError(f"{name} must be a TwoLayerNetwork or a fitted learner with predict().")
    for model, name in ((estimated, "estimated"), (truth, "truth")):
        net = model if isinstance(model, (TwoLayerNetwork, DeepNetwork)) else getattr(model, "network_", None)
        if isinstance(net, (TwoLayerNetwork, DeepNetwork)) and net.n_inputs != distribution.dim:
            raise InputError(f"{name} has {net.n_inputs} inputs but the distribution has dim {distribution.dim}.")
    gen = check_random_state(rng)
    num = den = 0.0
    done = 0
    while done < n:
        rows = min(chunk_size, n - done)
        X = distribution.sample(rows, gen)
        F, G = _predict_2d(estimated, X), _predict_2d(truth, X)
        if F.shape != G.shape:
            raise InputError(f"estimated gives outputs of shape {F.shape[1:]} but the truth {G.shape[1:]}.")
        num += float(np.sum((F - G) ** 2))
        den += float(np.sum(G ** 2))
        done += rows
    return _ratio(num / n, den / n, relative)


def _ratio(num: float, den: float, relative: bool) -> float:
    if not relative:
        return float(np.sqrt(num))
    if den <= 0.0:
        if num <= 0.0:
            return 0.0
        raise InputError("the true network is identically zero, so the relative error is undefined; "
                         "pass relative=False for the absolute RMS error.")
    return float(np.sqrt(num / den))


