"""Experiments for Awasthi, Tang, Vijayaraghavan 2021 (the paper itself reports none: these check its theorems' claims).

``awasthi2021-samples``
    Must show 2 and 3 of issue 3. (a) Noiseless samples, d = 10, m = 5, biases U[-1.5, 1.5],
    ``|a_i|`` in [0.5, 1.5] with random signs, random unit rows, N = 10^6, 20 teachers: the
    ``max_unit_error`` of the paper's output (``refine=False``, i.e. ``provable_network_``) and of the
    refined network. (b) Label noise sigma = 0.1: error against N from 10^5 to 10^7 (streamed), with a
    least-squares log-log slope (expected -1/2 once every unit is detected).
``awasthi2021-bias``
    Error of one unit against its bias (the others fixed), including the Hermite roots 0 (He_1: the
    unit vanishes from T_3) and +-1 (He_2: vanishes from T_4), for the two-tensor algorithm and the
    single-tensor ablations (T_3 only, T_4 only), on samples and on exact coefficients; and the relative
    L2 error of the returned network (units + linear part) when large-|b| units are undetectable.
``awasthi2021-overcomplete``
    Order l = 2 (m > d): exact, noisy-population and finite-sample recovery against m/d and
    ``s_m(W^{(.)2})``, on random teachers and on smoothed degenerate instances (Appendix E).

``awasthi2021-overcomplete-samples``
    Order l = 2 (Theorem 3.2) from samples: success (the complete fit at round-off, every unit found by
    the provable stage) against N from 10^5 to 10^7 for m/d in {1.5, 2, 2.5}, d = 6, biases U[-1, 1], and
    the number of rows the learner states it needs after its pass (``diagnostics_["sample_requirement"]``).

``awasthi2021-large-bias``
    Must show 4 of issue 3: units with ``|b| >= 4`` are undetectable; relative L2 error of Algorithm 5's
    network (and of the closed-form and refined variants).

Every experiment returns ``(DataFrame, Figure)``; ``quick=True`` is a seconds-long version for tests.
"""

from __future__ import annotations

import itertools
import math
import time
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..distributions import StandardGaussian
from ..errors import InputError
from ..learners import awasthi2021 as atv
from ..learners.awasthi2021 import HermiteTensorLearner
from ..learners.awasthi2021.coefficients import HermiteCoefficients
from ..metrics import parameter_error, relu_l2_distance, relu_second_moment
from ..network import TwoLayerNetwork, random_network
from ..refine import METHODS
from ..sampling import sample, sample_stream
from .registry import experiment

__all__ = ["awasthi2021_samples", "awasthi2021_bias", "awasthi2021_overcomplete", "awasthi2021_large_bias",
           "awasthi2021_overcomplete_samples"]


def _seed(gen: np.random.Generator) -> int:
    return int(gen.integers(0, 2**63 - 1))


def _log_slope(x, y) -> float:
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


# ============================================================================ awasthi2021-samples

@experiment("awasthi2021-samples", paper="awasthi2021",
            description="HermiteTensorLearner on samples: noiseless exactness after refinement, N^-1/2 with noise")
def awasthi2021_samples(*, rng, quick: bool = False, n_inputs: int | None = None, n_hidden: int | None = None,
                  n_samples: int | None = None, teachers: int | None = None, noise: float = 0.1,
                  noise_sizes: Sequence[int] | None = None, noise_teachers: int | None = None,
                  refine_samples: int | None = None, noise_refine_cap: int | None = None,
                  noise_refine_method: str = "auto"):
    """Noiseless recovery (provable stage and refined) and the N^-1/2 law under label noise.

    Defaults: d = 10, m = 5, N = 10^6, 20 teachers; noise 0.1 with N in (1e5, 3e5, 1e6, 3e6, 1e7) on 3
    teachers (streamed, never in memory). ``quick``: d = 6, m = 3, N = 3e4, 2 teachers, sizes
    (2e4, 8e4). The refinement gathers ``refine_samples`` rows (default 50,000: on noiseless data the
    least-squares minimiser is the teacher whatever the number of rows, so more rows only cost time);
    with label noise it gathers every row up to ``noise_refine_cap`` (default 10^7, i.e. all), all of which
    the refinement uses ("auto": Levenberg-Marquardt on normal equations accumulated over all rows;
    ``noise_refine_method`` is any method of :func:`nnrecover.refine.refine_network`).
    """
    import pandas as pd  # deferred: pandas is slow to import
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import


    gen = check_random_state(rng)
    d = check_positive_int(n_inputs if n_inputs is not None else (6 if quick else 10), "n_inputs")
    m = check_positive_int(n_hidden if n_hidden is not None else (3 if quick else 5), "n_hidden")
    N = check_positive_int(n_samples if n_samples is not None else (30_000 if quick else 1_000_000), "n_samples")
    T = check_positive_int(teachers if teachers is not None else (2 if quick else 20), "teachers")
    sizes = [check_positive_int(n, "noise_sizes") for n in (noise_sizes if noise_sizes is not None else
             ((20_000, 80_000) if quick else (100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)))]
    Tn = check_positive_int(noise_teachers if noise_teachers is not None else (1 if quick else 3), "noise_teachers")
    n_ref = check_positive_int(refine_samples if refine_samples is not None else (10_000 if quick else 50_000),
                               "refine_samples")
    noise_refine_cap = check_positive_int(noise_refine_cap if noise_refine_cap is not None else
                                          (20_000 if quick else 10_000_000), "noise_refine_cap")
    if not (np.isfinite(noise) and noise >= 0):
        raise InputError(f"noise must be a finite number >= 0, got {noise!r}.")

    if noise_refine_method not in METHODS:
        raise InputError(f"noise_refine_method must be one of {METHODS}, got {noise_refine_method!r}.")
    dist = StandardGaussian(d)
    teacher_opts = dict(bias_range=(-1.5, 1.5), output_weight_range=(0.5, 1.5), output_signs="random", rows="unit")
    rows = []
    for t in range(T):
        truth = random_network(d, m, rng=_seed(gen), **teacher_opts)
        X, Y = sample(truth, dist, N, rng=_seed(gen))
        t0 = time.perf_counter()
        learner = HermiteTensorLearner(m, random_state=_seed(gen), refine_options={"max_samples": n_ref}).fit(X, Y)
        fit_time = time.perf_counter() - t0
        diag = learner.diagnostics_
        rows.append({"part": "noiseless", "teacher": t, "n_samples": N, "noise": 0.0, "n_inputs": d, "n_hidden": m,
                     "provable_error": parameter_error(learner.provable_network_, truth)["max_unit_error"],
                     "refined_error": parameter_error(learner.network_, truth)["max_unit_error"],
                     "units_recovered": learner.units_.n_units, "output": diag["output"],
                     "refinement_kept": diag["refinement"].get("kept"), "fit_time_s": fit_time,
                     "provable_time_s": fit_time - diag["refinement"].get("time", 0.0)})
    for t in range(Tn):
        truth = random_network(d, m, rng=_seed(gen), **teacher_opts)
        for n in sizes:
            stream = sample_stream(truth, dist, n, noise=noise, rng=_seed(gen))
            t0 = time.perf_counter()
            # the refinement gathers up to noise_refine_cap rows and uses all of them ("auto": "gn", the
            # normal equations over all rows)
            ropts = {"max_samples": min(n, noise_refine_cap), "method": noise_refine_method}
            if noise_refine_method == "lbfgs":
                ropts["max_iter"] = 1000
            learner = HermiteTensorLearner(m, random_state=_seed(gen), refine_options=ropts).fit(stream)
            fit_time = time.perf_counter() - t0
            diag = learner.diagnostics_
            rows.append({"part": "label noise", "teacher": t, "n_samples": n, "noise": noise, "n_inputs": d,
                         "n_hidden": m,
                         "provable_error": parameter_error(learner.provable_network_, truth)["max_unit_error"],
                         "refined_error": parameter_error(learner.network_, truth)["max_unit_error"],
                         "units_recovered": learner.units_.n_units, "output": diag["output"],
                         "refinement_kept": diag["refinement"].get("kept"), "fit_time_s": fit_time,
                         "provable_time_s": fit_time - diag["refinement"].get("time", 0.0)})
    df = pd.DataFrame(rows)
    noisy = df[df["part"] == "label noise"]
    full = noisy[noisy["units_recovered"] == m]
    slope = _log_slope(full["n_samples"], full["provable_error"])
    med = noisy.groupby("n_samples")["refined_error"].median()
    slope_ref = _log_slope(med.index, med.values)
    df.attrs["provable_slope"] = slope
    df.attrs["refined_slope"] = slope_ref

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    clean = df[df["part"] == "noiseless"]
    ax1.semilogy(clean["teacher"], clean["provable_error"], "o", label="provable stage (refine=False)")
    ax1.semilogy(clean["teacher"], clean["refined_error"], "s", label="refined (returned network)")
    ax1.axhline(1e-8, color="k", ls="--", lw=0.8, label="1e-8")
    ok = int((clean["refined_error"] < 1e-8).sum())
    ax1.set_xlabel("teacher")
    ax1.set_ylabel("max unit error")
    ax1.set_title(f"noiseless, d={d}, m={m}, N={N:.0e}: {ok}/{len(clean)} below 1e-8", fontsize=10)
    ax1.legend(fontsize=8)
    for col, mk, label in (("provable_error", "o-", "provable stage"), ("refined_error", "s--", "refined")):
        g = noisy.groupby("n_samples")[col].median()
        ax2.loglog(g.index, g.values, mk, label=f"{label} (median)")
    if len(noisy):
        ns = np.array(med.index, float)
        ax2.loglog(ns, float(med.iloc[-1]) * np.sqrt(ns[-1] / ns), "k:", label="N^-1/2")
    ax2.set_xlabel("N")
    ax2.set_ylabel("max unit error")
    ax2.set_title(f"label noise {noise}: slopes {slope:.2f} (provable, all units found), "
                  f"{slope_ref:.2f} (refined)", fontsize=9)
    ax2.legend(fontsize=8)
    return df, fig


# ============================================================================ awasthi2021-bias

def _unit_error(rec_net, truth, unit: int) -> tuple[float, bool]:
    """Error of ``truth``'s unit ``unit`` against its best match in ``rec_net`` (nan if none)."""
    if rec_net is None:
        return float("nan"), False

    pe = parameter_error(rec_net, truth)
    j = int(pe["matching"][unit])
    if j < 0:
        return float("nan"), False
    return float(pe["per_unit"][unit]), True


@experiment("awasthi2021-bias", paper="awasthi2021",
            description="error of one unit against its bias, near Hermite roots, with the single-tensor ablation")
def awasthi2021_bias(*, rng, quick: bool = False, n_inputs: int | None = None, n_hidden: int | None = None,
               n_samples: int | None = None, biases: Sequence[float] | None = None, noise: float = 0.0):
    """Sweep the bias ``b`` of unit 0 (other units fixed, orthonormal rows, ``|b| <= 0.8``).

    For each ``b``: Algorithm 6 with both tensors and with one tensor only (``single_tensor="odd"``:
    T_3; ``"even"``: T_4), on the same estimated coefficients (N samples) and on the exact ones; the
    error of unit 0 (nan when it is not recovered), which tensor supplied it and its SNR, and the
    relative L2 error of the learner's returned network (``refine=False``: units + closed-form linear
    part) -- small even when large-|b| units are not recovered.

    Defaults: d = 8, m = 4, N = 10^6, b on a grid of [-4, 4] plus points around 0 and +-1.
    ``quick``: d = 5, m = 3, N = 20,000, b in (-1, 0, 0.5, 1, 3).
    """
    import pandas as pd  # deferred: pandas is slow to import
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import


    gen = check_random_state(rng)
    d = check_positive_int(n_inputs if n_inputs is not None else (5 if quick else 8), "n_inputs")
    m = check_positive_int(n_hidden if n_hidden is not None else (3 if quick else 4), "n_hidden")
    N = check_positive_int(n_samples if n_samples is not None else (20_000 if quick else 1_000_000), "n_samples")
    if biases is None:
        biases = ((-1.0, 0.0, 0.5, 1.0, 3.0) if quick else
                  sorted(set(np.round(np.linspace(-4, 4, 33), 10).tolist()
                             + [-1.1, -0.9, -0.1, -0.05, 0.05, 0.1, 0.9, 1.1, -math.sqrt(3), math.sqrt(3)])))
    base = random_network(d, m, rng=_seed(gen), bias_range=(-0.8, 0.8), output_weight_range=(0.7, 1.3),
                          rows="orthonormal")
    dist = StandardGaussian(d)
    rows = []
    for b0 in biases:
        bias = base.hidden_bias.copy()
        bias[0] = float(b0)
        truth = TwoLayerNetwork(base.hidden_weights, bias, base.output_weights)
        X, Y = sample(truth, dist, N, noise=noise, rng=_seed(gen))
        seed = _seed(gen)
        est = atv.hermite_coefficients((X, Y), 1, m, rng=seed)
        exact = atv.hermite_coefficients(truth, 1, m)
        for mode, coeffs in (("samples", est), ("exact", exact)):
            for variant, single in (("both tensors", None), ("T3 only", "odd"), ("T4 only", "even")):
                opts = {"scalar_snr": 0.0} if mode == "exact" else {"max_bias": 4.0}
                rec = atv.algorithm6(coeffs, m, rng=seed, single_tensor=single, **opts)
                net = rec.network() if rec.n_units else None
                err, found = _unit_error(net, truth, 0)
                src, snr = "", float("nan")
                if found and net is not None:
                    j = int(np.argmax(np.abs(rec.W @ truth.hidden_weights[0])))
                    src, snr = rec.source[j], float(rec.snr[j])
                rows.append({"bias": float(b0), "mode": mode, "variant": variant, "unit_error": err,
                             "recovered": found, "source": src, "snr": snr, "units_recovered": rec.n_units,
                             "n_samples": N if mode == "samples" else 0})
        learner = atv.HermiteTensorLearner(m, refine=False, random_state=seed).fit(X, Y)
        rel = relu_l2_distance(learner.network_, truth) / math.sqrt(relu_second_moment(truth))
        rows.append({"bias": float(b0), "mode": "samples", "variant": "returned network", "unit_error": float("nan"),
                     "recovered": learner.units_.n_units == m, "source": learner.diagnostics_["output"],
                     "snr": float("nan"), "units_recovered": learner.units_.n_units, "n_samples": N,
                     "relative_l2_error": rel})
    df = pd.DataFrame(rows)

    fig = Figure(figsize=(12, 4.2), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    for ax, mode in ((ax1, "samples"), (ax2, "exact")):
        for variant, mk in (("both tensors", "o-"), ("T3 only", "x--"), ("T4 only", "+:")):
            sel = df[(df["mode"] == mode) & (df["variant"] == variant)]
            ax.semilogy(sel["bias"], np.maximum(sel["unit_error"].to_numpy(float), 1e-17), mk, label=variant)
            miss = sel[~sel["recovered"].astype(bool)]
            ax.semilogy(miss["bias"], np.full(len(miss), 3.0), mk[0], color=ax.lines[-1].get_color(), alpha=0.5)
        for r in (-1.0, 0.0, 1.0):
            ax.axvline(r, color="grey", lw=0.6, ls=":")
        ax.set_xlabel("bias b of unit 0")
        ax.set_ylabel("error of unit 0 (markers at 3: not recovered)")
        ax.set_title(f"{mode} ({'N=%.0e' % N if mode == 'samples' else 'Lemma 3.5'}), d={d}, m={m}", fontsize=10)
        ax.legend(fontsize=8)
    sel = df[df["variant"] == "returned network"]
    ax3.semilogy(sel["bias"], sel["relative_l2_error"], "o-")
    ax3.set_xlabel("bias b of unit 0")
    ax3.set_ylabel("relative L2 error of the returned network")
    ax3.set_title("units + linear part (refine=False)", fontsize=10)
    return df, fig


# ============================================================================ awasthi2021-overcomplete

@experiment("awasthi2021-overcomplete", paper="awasthi2021",
            description="order 2 (m > d): error against m/d and s_m(W^(.)2), exact, noisy population and samples")
def awasthi2021_overcomplete(*, rng, quick: bool = False, n_inputs: int | None = None,
                       ratios: Sequence[float] | None = None, teachers: int | None = None, eta: float = 1e-6,
                       taus: Sequence[float] | None = None, n_samples: int | None = None):
    """Order-2 recovery (Algorithm 4 with l = 2, then Algorithm 5) for m = ratio * d.

    For each m: random unit-row teachers and smoothed degenerate instances (all rows in a plane,
    perturbed by ``tau``, Appendix E), each with ``s_m(W^{(.)2})``; biases U[-1.5, 1.5]. Reported:
    the sign-agnostic parameter error on exact coefficients (Theorem 4.2, round-off), on exact
    coefficients plus symmetric noise of Frobenius norm ``eta`` (error / eta, expected to grow as
    ``s_m`` falls), and from ``n_samples`` samples (units recovered and relative L2 error of the
    returned Algorithm 5 network).

    Defaults: d = 6, m/d in (1, 1.5, 2, 2.5, 3) (m <= 0.9 C(7, 2) = 18), 3 random teachers, tau in
    (0.03, 0.3), N = 10^6. ``quick``: d = 4, m/d in (1.5, 2), 1 teacher, tau (0.3,), N = 20,000.
    """

    import pandas as pd  # deferred: pandas is slow to import
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import


    gen = check_random_state(rng)
    d = check_positive_int(n_inputs if n_inputs is not None else (4 if quick else 6), "n_inputs")
    ratios = list(ratios) if ratios is not None else ([1.5, 2.0] if quick else [1.0, 1.5, 2.0, 2.5, 3.0])
    T = check_positive_int(teachers if teachers is not None else (1 if quick else 3), "teachers")
    taus = list(taus) if taus is not None else ([0.3] if quick else [0.03, 0.3])
    N = int(n_samples) if n_samples is not None else (20_000 if quick else 1_000_000)
    if not (np.isfinite(eta) and eta > 0):
        raise InputError(f"eta must be a positive number, got {eta!r}.")
    limit = atv.order_limit(d, 2)
    dist = StandardGaussian(d)
    rows = []
    for ratio in ratios:
        m = int(round(ratio * d))
        if m > limit or m < 1:
            raise InputError(f"m = {m} (ratio {ratio}) is outside 1..{limit} = 0.9 C(d+1, 2) for d = {d}.")
        instances = [("random", None, random_network(d, m, rng=_seed(gen), bias_range=(-1.5, 1.5)))
                     for _ in range(T)]
        for tau in taus:
            W = atv.adversarial_weights("subspace", d, m, rng=_seed(gen))
            base = random_network(d, m, rng=_seed(gen), bias_range=(-1.5, 1.5))
            net, _ = atv.smoothed_instance(W, base.output_weights[0], base.hidden_bias, tau, 2, rng=_seed(gen))
            instances.append(("smoothed", tau, net))
        for kind, tau, truth in instances:
            s_m = atv.khatri_rao_smin(truth.hidden_weights, 2)
            seed = _seed(gen)
            exact = atv.hermite_coefficients(truth, 2, m)
            rec = atv.algorithm1(exact, 2, m, rng=seed)
            err_exact = (parameter_error(rec.network(), truth, allow_sign_flip=True)["max_unit_error"]
                         if rec.n_units else float("nan"))
            noise_gen = np.random.default_rng(seed)
            tensors = {}
            for k, Tk in exact.tensors.items():
                E = noise_gen.standard_normal(Tk.shape)
                E = sum(np.transpose(E, p) for p in itertools.permutations(range(k)))
                tensors[k] = Tk + eta * E / np.linalg.norm(E)
            t1 = exact.t1 + eta * noise_gen.standard_normal(d) / math.sqrt(d)
            noisy = HermiteCoefficients(basis=None, tensors=tensors, t0=exact.t0, t1=t1, exact=False,
                                        noise={k: eta for k in exact.noise})
            rec_n = atv.algorithm4(noisy, 2, m, rng=seed, scalar_snr=0.0)
            err_noisy = (parameter_error(rec_n.network(), truth, allow_sign_flip=True)["max_unit_error"]
                         if rec_n.n_units else float("nan"))
            row = {"n_inputs": d, "n_hidden": m, "ratio": m / d, "instance": kind, "tau": tau, "s_m": s_m,
                   "exact_error": err_exact, "exact_units": rec.n_units, "noisy_error": err_noisy,
                   "noisy_error_over_eta": err_noisy / eta, "noisy_units": rec_n.n_units, "eta": eta}
            if N > 0:
                X, Y = sample(truth, dist, N, rng=_seed(gen))
                learner = atv.HermiteTensorLearner(m, order=2, refine=False, random_state=seed).fit(X, Y)
                row.update({"n_samples": N, "sample_units": learner.units_.n_units,
                            "sample_error": (parameter_error(learner.units_.network(), truth,
                                                             allow_sign_flip=True)["max_unit_error"]
                                             if learner.units_.n_units else float("nan")),
                            "sample_relative_l2": relu_l2_distance(learner.network_, truth)
                            / math.sqrt(relu_second_moment(truth))})
            rows.append(row)
    df = pd.DataFrame(rows)

    fig = Figure(figsize=(12, 4.2), layout="constrained")
    ax1, ax2, ax3 = fig.subplots(1, 3)
    sc = ax1.scatter(df["s_m"], df["noisy_error_over_eta"], c=df["ratio"], cmap="viridis")
    ax1.set_xscale("log")
    ax1.set_yscale("log")
    ax1.set_xlabel("s_m(W^(.)2)")
    ax1.set_ylabel(f"noisy-population error / eta (eta={eta:g})")
    fig.colorbar(sc, ax=ax1, label="m/d")
    rnd = df[df["instance"] == "random"]
    g = rnd.groupby("ratio")
    ax2.semilogy(g["exact_error"].max().index, np.maximum(g["exact_error"].max().values, 1e-17), "o-",
                 label="random W, exact coefficients (max)")
    ax2.semilogy(g["noisy_error"].median().index, g["noisy_error"].median().values, "s-",
                 label=f"random W, noise eta={eta:g} (median)")
    sm = df[df["instance"] == "smoothed"]
    if len(sm):
        ax2.semilogy(sm["ratio"], np.maximum(sm["exact_error"].to_numpy(float), 1e-17), "o", mfc="none",
                     label="smoothed plane, exact")
        ax2.semilogy(sm["ratio"], sm["noisy_error"], "s", mfc="none", label="smoothed plane, noisy")
    ax2.set_xlabel("m / d")
    ax2.set_ylabel("max unit error (up to signs)")
    ax2.set_title(f"d = {d}, order 2", fontsize=10)
    ax2.legend(fontsize=7)
    if "sample_relative_l2" in df:
        ax3.semilogy(df["ratio"], df["sample_relative_l2"], "o", label="relative L2 (Algorithm 5 network)")
        ax3.semilogy(df["ratio"], df["sample_error"], "x", label="max unit error (up to signs)")
        ax3.set_xlabel("m / d")
        ax3.set_title(f"samples, N = {N:.0e}", fontsize=10)
        ax3.legend(fontsize=8)
    return df, fig


# ============================================================================ awasthi2021-large-bias

@experiment("awasthi2021-large-bias", paper="awasthi2021",
            description="units with |b| >= 4 (undetectable): relative L2 error of Algorithm 5's network")
def awasthi2021_large_bias(*, rng, quick: bool = False, n_inputs: int | None = None, n_hidden: int | None = None,
                     n_samples: int | None = None, teachers: int | None = None,
                     large_biases: Sequence[float] = (4.5, -4.2), refine_samples: int = 50_000):
    """Must show 4 of issue 3: teachers with some ``|b_i| >= 4`` (their Hermite coefficients of order
    >= 2 are ~1e-5: the theory cannot recover them, Section 4.2), the others as in ``awasthi2021-samples``.

    For each teacher: the relative L2 error ``||g - f|| / ||f||`` (exact, closed-form kernel) of
    Algorithm 5's network (``linear_part="regression"``), of the closed-form linear part variant, and
    of the refined network (``refine=True``), and the number of units in each.
    Defaults: d = 10, m = 5, biases (4.5, -4.2) for two units, N = 10^6, 5 teachers. ``quick``: d = 6,
    m = 3, one large bias, N = 30,000, 1 teacher.
    """
    import pandas as pd  # deferred: pandas is slow to import
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import


    gen = check_random_state(rng)
    d = check_positive_int(n_inputs if n_inputs is not None else (6 if quick else 10), "n_inputs")
    m = check_positive_int(n_hidden if n_hidden is not None else (3 if quick else 5), "n_hidden")
    N = check_positive_int(n_samples if n_samples is not None else (30_000 if quick else 1_000_000), "n_samples")
    T = check_positive_int(teachers if teachers is not None else (1 if quick else 5), "teachers")
    big = [float(b) for b in (large_biases[:1] if quick else large_biases)]
    if len(big) >= m:
        raise InputError(f"large_biases has {len(big)} entries; at most n_hidden - 1 = {m - 1} are allowed.")
    rows = []
    for t in range(T):
        base = random_network(d, m, rng=_seed(gen), bias_range=(-1.5, 1.5))
        b = base.hidden_bias.copy()
        b[:len(big)] = big
        truth = TwoLayerNetwork(base.hidden_weights, b, base.output_weights)
        X, Y = sample(truth, StandardGaussian(d), N, rng=_seed(gen))
        norm = math.sqrt(relu_second_moment(truth))
        seed = _seed(gen)
        for variant, opts in (("Algorithm 5 (regression)", {"refine": False, "linear_part": "regression"}),
                              ("closed-form linear part", {"refine": False, "linear_part": "closed_form"}),
                              ("Algorithm 5 + refinement", {"refine": True, "linear_part": "regression",
                                                            "refine_options": {"max_samples": refine_samples}})):
            learner = HermiteTensorLearner(m, random_state=seed, **opts).fit(X, Y)
            rows.append({"teacher": t, "variant": variant, "n_samples": N, "large_biases": str(big),
                         "relative_l2": relu_l2_distance(learner.network_, truth) / norm,
                         "units_recovered": learner.units_.n_units, "network_units": learner.network_.n_hidden})
    df = pd.DataFrame(rows)
    fig = Figure(figsize=(6.5, 4), layout="constrained")
    ax = fig.subplots()
    for variant, mk in (("Algorithm 5 (regression)", "o"), ("closed-form linear part", "x"),
                        ("Algorithm 5 + refinement", "s")):
        sel = df[df["variant"] == variant]
        ax.semilogy(sel["teacher"], sel["relative_l2"], mk, label=variant)
    ax.axhline(1e-2, color="k", ls="--", lw=0.8, label="1e-2")
    ax.set_xlabel("teacher")
    ax.set_ylabel("relative L2 error")
    ax.set_title(f"d={d}, m={m}, biases {big} + U[-1.5, 1.5], N={N:.0e}", fontsize=10)
    ax.legend(fontsize=8)
    return df, fig


# ============================================================================ awasthi2021-overcomplete-samples

#: a complete fit counts as a success when its max unit error (up to the signs of Theorem 3.4) is below this
OVERCOMPLETE_SUCCESS = 1e-6


def overcomplete_sample_row(truth: TwoLayerNetwork, n_samples: int, seed: int, *, refine: bool = True) -> dict:
    """One fit of the ``awasthi2021-overcomplete-samples`` sweep: ``n_samples`` rows of ``truth`` streamed
    from :func:`nnrecover.sample_stream` (seed ``seed``), ``HermiteTensorLearner(m, order=2)``; the
    provable stage's units and error, the complete fit's error and relative L2 error, and the learner's
    stated row requirement (:func:`~nnrecover.learners.awasthi2021.requirement.sample_requirement`)."""
    d, m = truth.n_inputs, truth.n_hidden
    data = sample_stream(truth, StandardGaussian(d), int(n_samples), rng=seed)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        learner = HermiteTensorLearner(m, order=2, refine=refine, random_state=seed).fit(data)
    seconds = time.perf_counter() - t0
    units = learner.units_
    req = learner.diagnostics_.get("sample_requirement") or {}
    sv = req.get("joint_singular_values") or []
    prov_err = (parameter_error(units.network(), truth, allow_sign_flip=True)["max_unit_error"]
                if units.n_units else float("nan"))
    net_err = parameter_error(learner.network_, truth, allow_sign_flip=True)["max_unit_error"]
    norm = math.sqrt(relu_second_moment(truth))
    return {"n_inputs": d, "n_hidden": m, "ratio": m / d, "n_samples": int(n_samples), "seed": int(seed),
            "s_m": atv.khatri_rao_smin(truth.hidden_weights, 2), "provable_units": int(units.n_units),
            "provable_error": prov_err, "error": net_err,
            "relative_l2": relu_l2_distance(learner.network_, truth) / norm,
            "success": bool(net_err < OVERCOMPLETE_SUCCESS), "all_units": bool(units.n_units == m),
            "n_needed": req.get("n_needed"), "lower_bound": req.get("lower_bound"), "joint_snr": req.get("joint_snr"),
            "sv_m": sv[m - 1] if len(sv) >= m else float("nan"), "sv_m1": sv[m] if len(sv) > m else float("nan"),
            "requirement_warning": any("rows for order" in str(w.message) for w in caught),
            "seconds": seconds}


def plot_overcomplete_samples(df):
    """Figure of the ``awasthi2021-overcomplete-samples`` sweep: success rate against ``N`` per m/d, and the
    stated requirement against ``N`` (filled: the complete fit was exact; triangles: lower bounds)."""
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    ratios = sorted(df["ratio"].unique())
    for j, ratio in enumerate(ratios):
        g = df[df["ratio"] == ratio]
        rate = g.groupby("n_samples")["success"].mean()
        units = g.groupby("n_samples")["all_units"].mean()
        line, = ax1.semilogx(rate.index, rate.values, "o-", label=f"m/d = {ratio:g}: complete fit exact")
        ax1.semilogx(units.index, units.values, "x--", color=line.get_color(), alpha=0.7,
                     label=f"m/d = {ratio:g}: provable stage finds all m")
        shift = 1.12 ** (j - (len(ratios) - 1) / 2)  # side by side, not on top of each other
        for lower, marker in ((False, "o"), (True, "^")):
            for ok in (True, False):
                h = g[(g["lower_bound"].astype(bool) == lower) & (g["success"].astype(bool) == ok)]
                if len(h):
                    ax2.loglog(h["n_samples"] * shift, h["n_needed"], marker, color=line.get_color(), ms=6,
                               mfc=line.get_color() if ok else "none", ls="none",
                               label=f"m/d = {ratio:g}" if (lower, ok) == (True, False) else None)
    lim = [df["n_samples"].min() / 2, df["n_samples"].max() * 2]
    ax2.loglog(lim, lim, "k:", lw=0.8, label="stated = N (below: enough)")
    ax1.set_xlabel("N (rows)")
    ax1.set_ylabel("fraction of teachers")
    d = int(df["n_inputs"].iloc[0])
    ax1.set_title(f"order 2, d = {d}, biases U[-1, 1], {df.groupby('ratio')['seed'].nunique().min()} teachers "
                  "per m/d", fontsize=10)
    ax1.legend(fontsize=7)
    ax2.set_xlabel("N (rows)")
    ax2.set_ylabel("rows the learner says it needs")
    ax2.set_title("stated requirement: filled = complete fit exact, triangle = lower bound", fontsize=9)
    ax2.legend(fontsize=7)
    return fig


@experiment("awasthi2021-overcomplete-samples", paper="awasthi2021",
            description="order 2 (Theorem 3.2) from samples: success against N for m/d in {1.5, 2, 2.5}, stated N")
def awasthi2021_overcomplete_samples(*, rng, quick: bool = False, n_inputs: int | None = None,
                                     ratios: Sequence[float] | None = None, teachers: int | None = None,
                                     n_samples: Sequence[int] | None = None, csv_path: str | None = None):
    """Issue 34, item 3: overcomplete networks (Theorem 3.2) from samples, success against ``N``.

    For each m = ratio * d: ``teachers`` random teachers (unit rows, biases U[-1, 1], output weights as
    :func:`~nnrecover.network.random_network`), each fitted (:func:`overcomplete_sample_row`) from every
    ``N`` of the grid. Reported per fit: whether the complete fit is exact (max unit error up to signs
    below :data:`OVERCOMPLETE_SUCCESS`), whether the provable stage found all m units, and the row count the
    learner states after its pass. ``csv_path``: append each row to this CSV as it is computed (long sweeps).

    Defaults: d = 6, m/d in (1.5, 2, 2.5), 3 teachers, N in (1e5, 3e5, 1e6, 3e6, 1e7). ``quick``: d = 4,
    m/d = 1.5, 1 teacher, N in (2e4, 6e4).
    """
    import pandas as pd  # deferred: pandas is slow to import

    gen = check_random_state(rng)
    d = check_positive_int(n_inputs if n_inputs is not None else (4 if quick else 6), "n_inputs")
    ratios = list(ratios) if ratios is not None else ([1.5] if quick else [1.5, 2.0, 2.5])
    T = check_positive_int(teachers if teachers is not None else (1 if quick else 3), "teachers")
    grid = [int(n) for n in (n_samples if n_samples is not None else
                             ((20_000, 60_000) if quick else (100_000, 300_000, 1_000_000, 3_000_000, 10_000_000)))]
    limit = atv.order_limit(d, 2)
    rows = []
    for ratio in ratios:
        m = int(round(ratio * d))
        if m > limit or m <= d:
            raise InputError(f"m = {m} (ratio {ratio}) is outside d + 1 .. {limit} (order 2, 0.9 C(d+1, 2)) for d = {d}.")
        for t in range(T):
            truth = random_network(d, m, rng=_seed(gen), bias_range=(-1.0, 1.0))
            seed = _seed(gen)
            for N in grid:
                row = overcomplete_sample_row(truth, N, seed)
                row["teacher"] = t
                rows.append(row)
                if csv_path:
                    pd.DataFrame([row]).to_csv(csv_path, mode="a", index=False,
                                               header=not Path(csv_path).exists())
    df = pd.DataFrame(rows)
    return df, plot_overcomplete_samples(df)
