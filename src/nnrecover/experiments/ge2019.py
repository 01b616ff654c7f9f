"""Experiments of Ge, Kuditipudi, Li, Wang (ICLR 2019), Section 4: Figures 2, 3 and 4.

Common protocol (paper Section 4): ``A`` and ``W`` are random orthonormal
``k x k`` / ``k x d`` matrices (Haar, :func:`scipy.stats.ortho_group`) with ``d = k`` and ``k`` outputs,
no biases; every point averages 5 trials, each with a fresh teacher and fresh i.i.d. samples (not
antithetic). Two stages of :class:`nnrecover.learners.PureNeuronLearner` are reported per trial:

``provable``  the paper's algorithm alone (Algorithm 3's noise-corrected detector, SimDiag with
              retries, SignFix, Algorithm 1; ``refine=False``);
``refined``   the same estimate polished by the shared refinement of both layers (L-BFGS on the
              squared loss, :func:`nnrecover.refine.refine_network`).

(The paper's own curves come from its Section 4 variant, CP-ALS plus a gradient fit of ``W``; that
variant is :func:`nnrecover.learners.ge2019.section4_variant`, available on the 10 x 10 panel of
``ge2019-fig2`` as stage ``section4`` with the option ``section4=True``.)

Metrics (Section 4.1): ``err_W``, ``err_A`` = squared distance after normalising the rows of ``W`` /
columns of ``A`` and matching units (:func:`nnrecover.learners.ge2019.paper_error`); ``mse`` = mean
over output units of the squared error on fresh test inputs, against the clean outputs
``A relu(W x)`` (``mse_clean``) and, with label noise, against noisy labels (``mse_noisy``).

The figures:

``ge2019-fig2``  sample efficiency: errors against ``n`` for ``d = k = 10`` and ``d = k = 32``, and
               ``sqrt(err / k)`` at ``n = 10^4`` for ``k = 10 .. 32`` (Gaussian input, no noise).
``ge2019-fig3``  label noise ``xi ~ N(0, s^2 I)``: errors and MSE against ``s`` at ``n = 10^4``, ``d = k = 10``,
               Gaussian input and the symmetric mixture ``N(+-1, I)``.
``ge2019-fig4``  conditioning: ``kappa(W)`` (left) or ``kappa(A)`` (right) from 1 to 100, ``U Sigma V^T`` with
               ``Sigma_ii = lambda^{-i}``, ``lambda = kappa^{1/(k-1)}``; mixture input, ``n = 2 x 10^4``.
"""

from __future__ import annotations

import functools
import inspect
import time
import warnings
from contextlib import nullcontext
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .._validation import check_positive_int, check_random_state
from ..distributions import Distribution, StandardGaussian, SymmetricMixture
from ..errors import CertificateWarning, NNRecoverError
from ..learners.ge2019 import PureNeuronLearner, paper_error, section4_variant
from ..network import TwoLayerNetwork
from ..sampling import sample
from .registry import experiment

if TYPE_CHECKING:  # pragma: no cover
    import pandas

__all__ = ["orthonormal_teacher", "conditioned_matrix", "evaluate_trial", "fig2", "fig3", "fig4"]

#: BLAS threads used while an experiment runs. Its matrices are small (k <= 32 columns), and on a shared
#: 2-core machine multi-threaded OpenBLAS spins on such products: the refinement of a 10 x 10 network
#: measured 58 s with the default threads under load and 4.6 s with one thread.
BLAS_THREADS = 1


def _blas_limit(threads: int | None):
    """Context manager limiting the BLAS thread pool (``None``: leave it as it is)."""

    if threads is None:
        return nullcontext()
    # deferred: threadpoolctl inspects the BLAS libraries when imported
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=check_positive_int(threads, "blas_threads"), user_api="blas")


def _blas_threads_option(func):
    """Add the option ``blas_threads`` (default :data:`BLAS_THREADS`) to an experiment function."""

    @functools.wraps(func)
    def wrapper(*args, blas_threads: int | None = BLAS_THREADS, **kwargs):
        with _blas_limit(blas_threads):
            return func(*args, **kwargs)

    sig = inspect.signature(func)
    extra = inspect.Parameter("blas_threads", inspect.Parameter.KEYWORD_ONLY, default=BLAS_THREADS)
    wrapper.__signature__ = sig.replace(parameters=[*sig.parameters.values(), extra])
    return wrapper


#: refinement settings used by the experiments (L-BFGS; bounded rows and iterations keep the full
#: figures within minutes)
REFINE_OPTIONS = {"method": "lbfgs", "max_samples": 20_000, "max_iter": 400}


# ------------------------------------------------------------------------------------------ teachers
def _haar(k: int, gen: np.random.Generator) -> np.ndarray:
    # deferred: SciPy's submodules are slow to import
    from scipy.stats import ortho_group

    return ortho_group.rvs(k, random_state=gen) if k > 1 else np.ones((1, 1))


def conditioned_matrix(k: int, kappa: float, gen: np.random.Generator) -> np.ndarray:
    """``U Sigma V^T`` with Haar ``U``, ``V`` and ``Sigma_ii = lambda^{-i}``, ``lambda = kappa^{1/(k-1)}``.

    The condition number is ``lambda^{k-1} = kappa`` (paper Section 4.3). Note ``sigma_1 = 1/lambda``,
    so the scale shrinks as ``kappa`` grows (Section 4, Figure 4).
    """
    kappa = float(kappa)
    lam = kappa ** (1.0 / (k - 1)) if k > 1 else 1.0
    sv = lam ** -np.arange(1, k + 1, dtype=np.float64)
    return (_haar(k, gen) * sv) @ _haar(k, gen).T


def orthonormal_teacher(k: int, gen: np.random.Generator, *, kappa_W: float | None = None,
                        kappa_A: float | None = None) -> TwoLayerNetwork:
    """Teacher ``A relu(W x)`` with ``d = k``: Haar orthonormal ``A`` and ``W``, or conditioned ones."""
    W = _haar(k, gen) if kappa_W is None else conditioned_matrix(k, kappa_W, gen)
    A = _haar(k, gen) if kappa_A is None else conditioned_matrix(k, kappa_A, gen)
    return TwoLayerNetwork(W, None, A)


# ------------------------------------------------------------------------------------------ one trial
def _mse(net: TwoLayerNetwork, X: np.ndarray, Y: np.ndarray) -> float:
    P = net.predict(X).reshape(Y.shape)
    return float(np.mean((P - Y) ** 2))


def evaluate_trial(teacher: TwoLayerNetwork, distribution: Distribution, n: int, *, noise: float = 0.0,
                   gen: np.random.Generator, n_test: int = 20_000, refine: bool = True,
                   section4: bool = False) -> list[dict]:
    """Fit one trial and report every stage (``provable``, ``refined``, optionally ``section4``).

    A stage that fails with an nnrecover error (e.g. a singular recovered ``Z`` at tiny ``n``) is
    reported with NaN errors and the error's message in ``failure``.
    """

    k = teacher.n_hidden
    X, Y = sample(teacher, distribution, n, noise=noise, rng=gen)
    Xt, Yt_noisy = sample(teacher, distribution, n_test, noise=noise, rng=gen)
    Yt = teacher.predict(Xt)
    rows: list[dict] = []

    def record(stage: str, net: TwoLayerNetwork | None, seconds: float, failure: str = "", extra=None):
        row = dict(stage=stage, n=int(n), k=k, noise=float(noise), time_s=seconds, failure=failure,
                   err_W=np.nan, err_A=np.nan, norm_err_W=np.nan, norm_err_A=np.nan, mse_clean=np.nan,
                   mse_noisy=np.nan, output_power=float(np.mean(Yt ** 2)))
        if net is not None:
            e = paper_error(net, teacher)
            row.update(err_W=e["err_W"], err_A=e["err_A"], norm_err_W=e["normalized_W"],
                       norm_err_A=e["normalized_A"], mse_clean=_mse(net, Xt, Yt), mse_noisy=_mse(net, Xt, Yt_noisy))
        row.update(extra or {})
        rows.append(row)

    seed = int(gen.integers(0, 2**63 - 1))
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CertificateWarning)
        try:
            learner = PureNeuronLearner(k, refine=refine, refine_options=REFINE_OPTIONS, random_state=seed)
            learner.fit(X, Y)
        except NNRecoverError as exc:
            record("provable", None, time.perf_counter() - t0, str(exc).split("\n")[0])
            if refine:
                record("refined", None, 0.0, "provable stage failed")
            learner = None
        if learner is not None:
            d = learner.diagnostics_
            extra = dict(gap_ratio=d["null_gap_ratio"], simdiag_residual=d.get("simdiag_residual", np.nan))
            t_ref = d["refinement"].get("time", 0.0) if d["refinement"].get("ran") else 0.0
            record("provable", learner.result_.network(), d["fit_time"] - t_ref, extra=extra)
            if refine:
                record("refined", learner.network_, d["fit_time"], extra=extra)
        if section4:
            t1 = time.perf_counter()
            try:
                res = section4_variant(X, Y, k, rng=seed)
                record("section4", res.network(), time.perf_counter() - t1)
            except NNRecoverError as exc:
                record("section4", None, time.perf_counter() - t1, str(exc).split("\n")[0])
    return rows


def _trials(grid: Sequence[dict], trials: int, gen: np.random.Generator, **kwargs) -> "pandas.DataFrame":
    """Run ``trials`` trials at every grid point; each point gets its own child seed."""
    import pandas as pd  # deferred: pandas is slow to import

    rows = []
    seeds = np.random.SeedSequence(int(gen.integers(0, 2**63 - 1))).spawn(len(grid))
    for point, ss in zip(grid, seeds):
        g = np.random.default_rng(ss)
        point = dict(point)
        make = point.pop("teacher")
        dist = point.pop("distribution")
        label = point.pop("labels", {})
        for t in range(trials):
            teacher = make(g)
            for row in evaluate_trial(teacher, dist(teacher.n_inputs), gen=g, **point, **kwargs):
                row.update(label)
                row["trial"] = t
                rows.append(row)
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------------ plotting
_STYLE = {"err_W": ("o-", "error in W"), "err_A": ("s-", "error in A"), "mse_clean": ("^-", "MSE")}
_LS = {"provable": "-", "refined": "--", "section4": ":"}


def _panel(ax, df, x: str, cols=("err_W", "err_A", "mse_clean"), logx=True, title=""):
    stages = [s for s in ("provable", "section4", "refined") if s in set(df["stage"])]
    for stage in stages:
        sub = df[df["stage"] == stage]
        g = sub.groupby(x)
        for col in cols:
            marker, label = _STYLE.get(col, ("o-", col))
            mean = g[col].mean()
            ax.plot(mean.index, mean.values.clip(1e-32), marker[0], ls=_LS.get(stage, "-"),
                    label=f"{label} ({stage})")
    failed = int(df["failure"].fillna("").ne("").sum()) if "failure" in df else 0
    if failed:
        title = f"{title}\n({failed} failed fits not plotted, see the 'failure' column)"
    ax.set_yscale("log")
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(x)
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6)


def _figure(n_panels: int, width: float = 4.2):
    from matplotlib.figure import Figure  # deferred: matplotlib is slow to import

    fig = Figure(figsize=(width * n_panels, 3.8), layout="constrained")
    return fig, fig.subplots(1, n_panels)


# ------------------------------------------------------------------------------------------ Figure 2
@experiment("ge2019-fig2", paper="ge2019",
            description="Ge et al. 2019 Figure 2: errors of W, A and MSE against samples (10x10, 32x32), "
                        "sqrt(err/k) at 10^4 samples for k = 10..32; Gaussian input, no noise")
@_blas_threads_option
def fig2(*, rng=None, quick: bool = False, trials: int | None = None, samples: Sequence[int] | None = None,
         dims: Sequence[int] | None = None, large_dim: int | None = None, refine: bool = True,
         refine_large: bool = False, section4: bool = False):
    """Figure 2 (sample efficiency).

    Parameters
    ----------
    rng : seed
    quick : bool
        Small grid (``k = 6`` and ``8``, two trials) for tests.
    trials : int, default 5 (quick: 2)
    samples : sequence of int, default ``(1000, 2000, 5000, 10^4, 2 10^4, 5 10^4, 10^5)``
    dims : sequence of int, default ``(10, 14, 18, 22, 26, 32)`` (right panel, at ``n = 10^4``)
    large_dim : int, default 32 (centre panel)
    refine : bool, default True
        Report the ``refined`` stage on the ``10 x 10`` panel.
    blas_threads : int or None, default 1
        BLAS threads during the run (``None``: unchanged); see :data:`BLAS_THREADS`.
    refine_large : bool, default False
        Also refine on the centre and right panels (about 20-30 s per ``32 x 32`` fit, so off by default
        to keep the figure within minutes).
    section4 : bool, default False
        Also run the Section 4 variant (CP-ALS, 10 restarts, then a gradient fit of ``W``) on the
        ``10 x 10`` panel (about 5 s per fit).

    Returns
    -------
    (pandas.DataFrame, matplotlib.figure.Figure)
        One row per (panel, k, n, trial, stage).
    """
    import pandas as pd  # deferred: pandas is slow to import

    gen = check_random_state(rng)
    trials = check_positive_int(trials if trials is not None else (2 if quick else 5), "trials")
    if samples is None:
        samples = (2000, 5000) if quick else (1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000)
    samples = [check_positive_int(s, "samples") for s in samples]
    small = 6 if quick else 10
    large = check_positive_int(large_dim if large_dim is not None else (8 if quick else 32), "large_dim")
    if dims is None:
        dims = (6, 7, 8) if quick else (10, 14, 18, 22, 26, 32)
    dims = [check_positive_int(k, "dims") for k in dims]
    n_right = 5000 if quick else 10_000

    def teacher(k):
        return lambda g: orthonormal_teacher(k, g)

    frames = []
    for panel, k, ref, s4 in (("left", small, refine, section4), ("centre", large, refine and refine_large, False)):
        grid = [dict(teacher=teacher(k), distribution=StandardGaussian, n=n, labels=dict(panel=panel))
                for n in samples]
        frames.append(_trials(grid, trials, gen, refine=ref, section4=s4))
    grid = [dict(teacher=teacher(k), distribution=StandardGaussian, n=n_right, labels=dict(panel="right"))
            for k in dims]
    frames.append(_trials(grid, trials, gen, refine=refine and refine_large))
    df = pd.concat(frames, ignore_index=True)
    df["sqrt_err_W_per_dim"] = np.sqrt(df["err_W"] / df["k"])
    df["sqrt_err_A_per_dim"] = np.sqrt(df["err_A"] / df["k"])

    fig, axes = _figure(3)
    _panel(axes[0], df[df["panel"] == "left"], "n", title=f"d = k = {small}, orthonormal A, W")
    _panel(axes[1], df[df["panel"] == "centre"], "n", title=f"d = k = {large}, orthonormal A, W")
    _panel(axes[2], df[df["panel"] == "right"], "k", cols=("sqrt_err_W_per_dim", "sqrt_err_A_per_dim"),
           logx=False, title=f"sqrt(err / k) at n = {n_right}")
    axes[0].set_ylabel("mean over trials")
    fig.suptitle("Ge et al. 2019, Figure 2: sample efficiency (Gaussian input, no label noise)", fontsize=10)
    return df, fig


# ------------------------------------------------------------------------------------------ Figure 3
@experiment("ge2019-fig3", paper="ge2019",
            description="Ge et al. 2019 Figure 3: errors and MSE against label noise at 10^4 samples, "
                        "Gaussian and +-1 mixture input, 10x10")
@_blas_threads_option
def fig3(*, rng=None, quick: bool = False, trials: int | None = None, noise_levels: Sequence[float] | None = None,
         n_samples: int | None = None, refine: bool = True):
    """Figure 3 (label noise ``xi ~ N(0, s^2 I_k)``).

    Parameters
    ----------
    rng : seed
    quick : bool
        ``k = 6``, two trials, three noise levels.
    trials : int, default 5 (quick: 2)
    noise_levels : sequence of float, default ``(0, 0.05, 0.1, 0.2, 0.3, 0.5)`` (not given in the paper)
    n_samples : int, default 10^4 (quick: 5000)
    refine : bool, default True
    blas_threads : int or None, default 1

    Returns
    -------
    (pandas.DataFrame, matplotlib.figure.Figure)
        Includes ``noise_var = s^2`` and ``excess = mse_noisy / s^2 - 1`` (the paper: "MSE grows in step
        with the label noise"; within 10 % means ``|excess| <= 0.1``).
    """
    import pandas as pd  # deferred: pandas is slow to import

    gen = check_random_state(rng)
    trials = check_positive_int(trials if trials is not None else (2 if quick else 5), "trials")
    if noise_levels is None:
        noise_levels = (0.0, 0.1, 0.3) if quick else (0.0, 0.05, 0.1, 0.2, 0.3, 0.5)
    noise_levels = [float(s) for s in noise_levels]
    n = check_positive_int(n_samples if n_samples is not None else (5000 if quick else 10_000), "n_samples")
    k = 6 if quick else 10
    inputs = {"gaussian": StandardGaussian, "mixture": lambda d: SymmetricMixture(np.ones(d))}
    frames = []
    for name, dist in inputs.items():
        grid = [dict(teacher=lambda g: orthonormal_teacher(k, g), distribution=dist, n=n, noise=s,
                     labels=dict(input=name)) for s in noise_levels]
        frames.append(_trials(grid, trials, gen, refine=refine, n_test=50_000))
    df = pd.concat(frames, ignore_index=True)
    df["noise_var"] = df["noise"] ** 2
    with np.errstate(divide="ignore", invalid="ignore"):
        df["excess"] = np.where(df["noise_var"] > 0, df["mse_noisy"] / df["noise_var"] - 1.0, np.nan)

    fig, axes = _figure(2)
    for ax, name in zip(axes, inputs):
        sub = df[df["input"] == name]
        _panel(ax, sub, "noise", cols=("err_W", "err_A", "mse_noisy"), logx=False,
               title=f"{name} input, d = k = {k}, n = {n}")
        s = np.array(sorted(set(noise_levels)))
        ax.plot(s[s > 0], s[s > 0] ** 2, "k-", lw=0.8, label="noise variance s^2")
        ax.legend(fontsize=6)
        ax.set_xlabel("label noise std s")
    fig.suptitle("Ge et al. 2019, Figure 3: robustness to label noise", fontsize=10)
    return df, fig


# ------------------------------------------------------------------------------------------ Figure 4
@experiment("ge2019-fig4", paper="ge2019",
            description="Ge et al. 2019 Figure 4: errors and MSE against the condition number of W (left) "
                        "or A (right), +-1 mixture input, 2x10^4 samples, 10x10")
@_blas_threads_option
def fig4(*, rng=None, quick: bool = False, trials: int | None = None, kappas: Sequence[float] | None = None,
         n_samples: int | None = None, refine: bool = True):
    """Figure 4 (conditioning of ``W`` or ``A``; the other matrix orthonormal).

    Parameters
    ----------
    rng : seed
    quick : bool
        ``k = 6``, two trials, ``kappa in (1, 10, 100)``.
    trials : int, default 5 (quick: 2)
    kappas : sequence of float, default ``(1, 2, 5, 10, 20, 50, 100)`` (not given in the paper)
    n_samples : int, default 2 x 10^4 (quick: 10^4)
    refine : bool, default True
    blas_threads : int or None, default 1

    Returns
    -------
    (pandas.DataFrame, matplotlib.figure.Figure)
        Includes ``relative_mse = mse_clean / output_power`` (the scale shrinks as ``kappa`` grows).
    """
    import pandas as pd  # deferred: pandas is slow to import

    gen = check_random_state(rng)
    trials = check_positive_int(trials if trials is not None else (2 if quick else 5), "trials")
    if kappas is None:
        kappas = (1.0, 10.0, 100.0) if quick else (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
    kappas = [float(c) for c in kappas]
    n = check_positive_int(n_samples if n_samples is not None else (10_000 if quick else 20_000), "n_samples")
    k = 6 if quick else 10
    frames = []
    for which in ("W", "A"):
        def make(c, which=which):
            return lambda g: orthonormal_teacher(k, g, **{f"kappa_{which}": c})

        grid = [dict(teacher=make(c), distribution=lambda d: SymmetricMixture(np.ones(d)), n=n,
                     labels=dict(conditioned=which, kappa=c)) for c in kappas]
        frames.append(_trials(grid, trials, gen, refine=refine))
    df = pd.concat(frames, ignore_index=True)
    df["relative_mse"] = df["mse_clean"] / df["output_power"]
    fig, axes = _figure(2)
    for ax, which in zip(axes, ("W", "A")):
        _panel(ax, df[df["conditioned"] == which], "kappa", cols=("err_W", "err_A", "relative_mse"),
               title=f"condition number of {which} (mixture input, n = {n})")
        ax.set_xlabel(f"kappa({which})")
    fig.suptitle("Ge et al. 2019, Figure 4: robustness to the condition number", fontsize=10)
    return df, fig
