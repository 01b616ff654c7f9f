"""Shared local refinement: polish any network estimate by nonlinear least squares on samples.

Every learner built on a provable algorithm can finish with this step (``refine=True``), and the
gradient-descent baseline is nothing but random starts followed by it. The provable algorithms give a
start inside the basin of the true parameters; local optimisation then removes the estimation error
that the moment-based method leaves (for noiseless data, down to round-off). This is the "optional
refinement" of the learners' provable estimates and the local-convergence regime of Awasthi et al.
Appendix B (Prop. B.1: the population squared loss is a sum of tensor-decomposition objectives), applied
on the empirical loss.

Objective. For the network ``f(x) = A act(W x + b) + c`` and samples ``(x_n, y_n)``, n = 1..N,

    L(theta) = (1/N) sum_n ||f(x_n) - y_n||^2          (mean over rows, sum over outputs)

over the trainable blocks ``theta`` (any subset of ``hidden_weights W``, ``hidden_bias b``,
``output_weights A``, ``output_bias c``). Analytic Jacobian, with ``z = W x + b``:

    d f_r / d W_ij = A_ri act'(z_i) x_j,   d f_r / d b_i = A_ri act'(z_i),
    d f_r / d A_ri = act(z_i),             d f_r / d c_r = 1.

``act'`` is :meth:`nnrecover.Activation.derivative`; at a kink (ReLU at 0) it is one of the one-sided
derivatives. The loss is piecewise smooth, the kink sets ``{x : w_i.x + b_i = 0}`` have measure zero,
so the Jacobian is correct almost surely and Gauss-Newton converges locally (quadratically on
noiseless data: the residual vanishes at the truth).

Methods.

* ``"lm"``: Levenberg-Marquardt, :func:`scipy.optimize.least_squares` (MINPACK ``lmder``) with the
  analytic Jacobian. The tool for round-off convergence (``tol`` ~ 1e-15). Needs the dense Jacobian,
  ``(N p) x P`` doubles (``P`` trainable parameters): only the FIRST ``rows_fit = jacobian_memory //
  (8 p P)`` rows are used (about 5.5e5 rows for ``P = 61``, ``p = 1`` at the default 256 MiB; MINPACK
  keeps one more copy), and it needs at least as many residuals as parameters. With label noise the
  rows beyond ``rows_fit`` are wasted: the statistical error stays that of ``rows_fit`` samples.
* ``"trf"``: trust-region reflective least squares with the same dense Jacobian and the same row cap;
  also works with fewer residuals than parameters.
* ``"gn"``: damped Gauss-Newton, i.e. Levenberg-Marquardt (Levenberg 1944; Marquardt 1963, with
  Marquardt's scaling ``D = diag(J^T J)``; damping update of Nielsen 1999) on the NORMAL EQUATIONS
  ``(J^T J + lambda D) h = -J^T r``, with ``J^T J`` (``P x P``) and ``J^T r`` accumulated over ALL rows
  in chunks of rows within ``min(jacobian_memory, 8 MiB)``; the Jacobian is never formed: its structure
  (the output sum of :func:`_normal_equations`) gives ``J^T J`` from the ``k (d + 1)`` hidden columns of
  one output, so memory is ``O(chunk k d + P^2 + N p)`` and time per iteration ``O(N (k d)^2 + N p k^2)``
  for any number ``p`` of outputs. Forming
  ``J^T J`` squares the condition number, which costs little here: the step is recomputed at every
  iterate, so its relative error ``cond(J)^2 eps`` only slows the (linear) convergence while
  ``cond(J)^2 eps < 1``, and on noiseless data ``"gn"`` reaches the truth to round-off like ``"lm"``
  (see :func:`_gauss_newton` for the acceptance and stopping rules).
* ``"lbfgs"``: :func:`scipy.optimize.minimize` (``L-BFGS-B``) with the analytic gradient
  ``J^T r``, computed without forming ``J``: memory ``O(N k)``. For large networks; converges slowly.
* ``"lm+gn"``: ``"lm"`` on the first ``rows_fit`` rows (round-off accurate on noiseless data), FOLLOWED
  by ``"gn"`` on all ``N`` rows from the ``"lm"`` solution, with ``n_samples_used = N`` (the two stages
  are recorded in ``stages``); just ``"lm"`` when every row fits.
* ``"auto"`` (default): with fewer than ``4 P`` residuals (``N p < 4 P``), ``"lbfgs"``, unless the
  matrix-free solver is chosen (below) and there are at least ``2 P`` (``_MATRIX_FREE_MIN_RESIDUALS``; d =
  1000, k = 20, one output, 64000 noiseless rows: 6e-15 in 10 s, where L-BFGS ran 5000 iterations in 755 s
  on 53633 rows); for a ReLU
  network with every block trained and ``k < d``, when ``J^T J`` (``8 P^2`` bytes) does not fit
  ``jacobian_memory`` or ``P >= _MATRIX_FREE_MIN_PARAMS``, ``"gn"`` with the normal equations solved matrix
  free (recorded as ``"gn-matrix-free"``, see "Matrix free" below); otherwise, when ``J^T J`` does not fit,
  ``"lbfgs"`` on all rows; else ``"gn"`` on all ``N`` rows, so the statistical error
  keeps falling with ``N`` beyond ``rows_fit``. Measured (d = 10, k = 5 ReLU, start 1e-2 from the truth,
  one BLAS thread): noiseless, 4e4 training rows: ``"gn"`` 4.9e-16 max unit error in 0.08 s (5
  iterations), ``"lm"`` 3.5e-16 in 1.8 s; sigma = 0.1, 2.4e5 rows: both 6.3e-3, ``"gn"`` 4.0 s,
  ``"lm"`` 29.5 s; 8e5 / 2.4e6 rows: 3.8e-3 / 1.6e-3 with ``"gn"`` (7 / 30 s) or ``"lm+gn"``
  (83-96 s: the ``"lm"`` stage on 5.5e5 rows took 63-73 s) against 3.3e-3 / 2.7e-3 with ``"lm"``
  (5.5e5 rows both times). (Until this measurement ``"auto"`` chose ``"lm"`` whenever the rows fit.)

Span first (:func:`refine_network`, ``span=True``, with ``"auto"``/``"gn"`` and ``k < d``). A pass of
``"gn"`` costs ``O(N (k d)^2)``, i.e. ``k^2`` passes of ``X^T X``. The hidden rows of a good start nearly
span the true rows, so the polish runs first in that span: ``W = V Q^T`` with ``Q`` (d x k) an
orthonormal basis of the start's rows, the rows projected once (``z = Q^T x``, ``O(N d k)``), then
``k^2 + k + p (k + 1)`` parameters at ``O(N k^4)`` per pass. The part of the true rows outside that
span is removed by a full-space ``"gn"`` on at most ``full_samples`` evenly strided rows (at least ``5 P / p``
when there are as many, so that ``"auto"`` runs Gauss-Newton there), preceded, when
those hold at least three times ``m_c = max(5 P / p, 20 d)`` rows, by the same ``"gn"`` on an evenly strided
``m_c`` of them (at most 10 trial steps, which does the passes far from the answer at a third of the cost or
less and, on noiseless data, already reaches round-off), and otherwise, unless the stage runs matrix free
(its preconditioner holds the span block), by a span polish on the subsample;
then steps with that subsample's ``J^T J`` and the gradient of ALL rows (``O(N d k)`` each; their fixed
point is the least-squares fit of all rows, :func:`_fixed_hessian_steps`), and a last span polish in the
span of the corrected rows (:func:`_span_then_full`); these two all-rows stages stop when a step gains
less than ``_ALL_ROWS_FTOL = 1e-9`` of the loss, far below its statistical resolution ``loss P / N``.
Before the all-rows stages the training rows are read only to check that a fit is at round-off on every
row (one ``O(N d k)`` loss pass per check).
Noiseless data: round-off as with ``span=False``. Label noise (measured, d = 40, k = 4, sigma = 0.1, 1.6e5
training rows, ``full_samples = 20000``): max unit error
6.6e-3 in 2.5 s against 6.3e-3 in 5.6 s with ``span=False``, one ``"gn"`` run on all rows.

Matrix free (:mod:`nnrecover._matrix_free`). The same Levenberg-Marquardt iteration with the normal equations
solved by preconditioned conjugate gradients: a product with ``J^T J`` is two ``O(m d k)`` products with the
rows, nothing ``P x P`` is formed, and the preconditioner is the population normal matrix of Gaussian inputs
(the exact sample normal matrix of the ``k^2 + k + p k + p`` span coordinates ``(dW Q, b, A, c)`` and ``C (x)
(I - Q Q^T)``, ``C = (A^T A) * (G^T G / m)``, on the complement of the span of the hidden rows), so the
conjugate gradients need a number of steps set by the ratio of rows to parameters, not by ``d``. It replaces
L-BFGS where ``J^T J`` does not fit ``jacobian_memory`` (L-BFGS stops near 1e-8 relative error; this reaches
round-off on noiseless data: d = 30, k = 4, p = 3 under a 100 kB budget, max unit error 7e-15 against 6e-9; d
= 300, k = 20, p = 20 (P = 6420, J^T J 330 MB), NoisyReLULearner's complete fit 3.6 s and max unit error
7.3e-15, against 10.6 s and 4.7e-9 with L-BFGS), and runs by default from ``_MATRIX_FREE_MIN_PARAMS = 1000``
parameters. Measured (one BLAS thread, CPU seconds; dense / matrix free). The coarse stage alone
(``fit_least_squares`` on ``max(5 P / p, 20 d)`` noiseless rows from 2e-2 off the teacher, at most 10 trial
steps, ``p = k``): d = 10, k = 5 (P = 85) 0.002 / 0.007 s; d = 40, k = 5 (P = 235) 0.007 / 0.010; d = 30, k =
10 (P = 420) 0.014 / 0.015; d = 50, k = 10 (P = 620) 0.032 / 0.020; d = 100, k = 10 (P = 1120) 0.13 / 0.034; d
= 200, k = 10 (P = 2120) 0.72 / 0.086; d = 100, k = 20 (P = 2440) 0.75 / 0.15; d = 150, k = 20 (P = 3440) 2.0
/ 0.24; d = 200, k = 20 (P = 4440) 4.1 / 0.29 (the dense runs of the three largest stop at the 10-step cap
near 1e-10, the matrix-free ones reach round-off in 6-7 steps). The whole refinement with label noise (sigma =
0.05, 2e5 rows, ``refine_network`` defaults): d = 50, k = 10 1.33 / 1.05 s; d = 100, k = 10 4.0 / 2.0 s; d =
200, k = 20 42 / 9.6 s, the same statistical error (max unit error 1.73e-3 / 1.71e-3 and 2.35e-3 / 2.30e-3).
Complete noiseless fits at d = 100, k = 10 (N = 1e6, ``benchmarks/bench_complete_fit.py``'s data):
NoisyReLULearner 0.99-1.04 / 0.89-0.90 s, PureNeuronLearner 1.23-1.26 / 1.15-1.21 s; at d = 200, k = 20: 7.1 /
2.5 s and 8.3 / 4.4 s, peak memory 591 MB / 128 and 88 MB. The crossover is near P = 500; the threshold leaves
a factor 2 of margin, where the dense stages cost hundredths of a second.

Non-smooth losses. The empirical loss of a ReLU network has kinks where a row crosses
``w_i.x + b_i = 0``; with label noise, optimisers from different starts can stop at different local
minima close to each other (measured: ``"lm"`` and ``"gn"`` from the same start on 5000 rows, d = 10,
k = 5, sigma = 0.1: 3.6e-3 apart in max unit error, against a statistical error of 1.9e-2 for both).
On a smooth activation (``tanh``) they find the same minimiser to their tolerance.

Data. ``data`` is anything :func:`nnrecover.data.as_data_source` accepts: ``(X, Y)`` arrays
(numpy, memory maps, dask), an iterable of ``(X, Y)`` chunks (:class:`nnrecover.SampleStream`), a
one-pass iterator. :func:`gather_samples` reads it once in chunks and keeps a uniformly random subset of
at most ``max_samples`` rows (priority sampling: every row gets a uniform key from ``rng``, the rows with
the smallest keys are kept), so memory is ``O((max_samples + chunk) (d + p))`` for any ``N``. The keys
are drawn row by row in data order, so the subset does not depend on how the data are chunked. From a
:class:`~nnrecover.SampleStream`, whose rows are independent draws, the first ``max_samples`` rows are
taken instead, and only they are generated.

Keeping the better. The gathered rows are split into a training part and a held-out part
(``holdout_fraction``, or explicit ``validation_data``). The optimiser sees only the training part; the
result keeps whichever of ``{start, refined}`` has the smaller held-out loss (``kept``), so refinement
never makes an estimate worse on fresh data, e.g. when a few noisy samples let it overfit. Everything
it did is recorded in :class:`RefineResult` (``as_dict()`` for ``diagnostics_``).

API: :func:`refine_network` (the pipeline), :func:`gather_samples`, :func:`fit_least_squares` (the
optimiser on in-memory arrays, no split), :func:`mean_squared_loss`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
from scipy import optimize

from . import _matrix_free
from ._threads import blas_threads
from ._validation import as_2d_float, as_targets, check_positive_int, check_random_state
from .errors import InputError
from .network import TwoLayerNetwork

__all__ = ["refine_network", "RefineResult", "gather_samples", "fit_least_squares", "mean_squared_loss",
           "BLOCKS", "METHODS"]

BLOCKS = ("hidden_weights", "hidden_bias", "output_weights", "output_bias")
"""Names of the parameter blocks, in the order they are stacked into the parameter vector."""

METHODS = ("auto", "lm", "trf", "lbfgs", "gn", "lm+gn")

_DEFAULT_MAX_ITER = {"lm": 200, "trf": 200, "lbfgs": 5000, "gn": 100}
_GN_LAMBDA0 = 1e-6  # initial Marquardt parameter of "gn" (Nielsen's tau for a good start; rejections are cheap)
_GN_LAMBDA_MIN = 1e-8  # its floor (see _gauss_newton)
#: a chord step (the last factorization, a fresh gradient) is taken again only while it divides the loss by
#: at least this: the contraction of the chord iteration is then <= 1/4 per step, well inside the
#: quadratic regime of Gauss-Newton; a weaker decrease calls for a fresh normal-equation pass
_CHORD_MIN_DECREASE = 16.0
_GN_CHUNK_BYTES = 1 << 23  # largest Jacobian chunk of "gn" (8 MiB; see _chunk_rows)
_JACOBIAN_MEMORY = 1 << 28  # 256 MiB
_SPAN_FIRST_STEPS = 10  # trial steps of the first span stage (see _span_then_full)
_FULL_GRADIENT_STEPS = 50  # steps of _fixed_hessian_steps (linear rate ~ sqrt(P / m) per step)
#: residuals per parameter of the coarse full-space stage (see _span_then_full), and rows per input: with
#: 5 P residuals the Jacobian's extreme singular values are within a factor (1 + 5^-1/2) / (1 - 5^-1/2) = 2.6
#: of each other for generic features (Marchenko-Pastur), and with 20 d rows each unit is active on about
#: 10 d of them, so the noiseless least-squares minimiser is the truth and Gauss-Newton well conditioned
_COARSE_RESIDUALS_PER_PARAMETER = 5
_COARSE_ROWS_PER_INPUT = 20
#: relative-reduction test of the full-space stage on the subsample (see _span_then_full)
_SUBSAMPLE_FTOL = 1e-9
#: relative-reduction test of the stages on all N training rows (the fixed-Hessian steps and the last span
#: stage), which run only when no fit is at round-off on every row (label noise): the statistical error of N
#: rows moves the loss by about loss * P / N (3e-3 at P = 4420, N = 1.6e6 residuals), and a step that gains
#: less than 1e-9 of the loss changes the parameters by at most sqrt(1e-9 N) of their statistical error
#: (1.3% at N = 1.6e5 rows). With tol (1e-15) alone these stages creep on through the ReLU kinks: d = 200,
#: k = 20, sigma = 0.05, 1.6e5 rows, 47-62 trial steps of the last span stage (12-21 s) against 6-9 with this
#: test, for held-out losses that differ by less than 3e-8 of themselves
_ALL_ROWS_FTOL = _SUBSAMPLE_FTOL
#: trial steps of the coarse stage: Gauss-Newton's quadratic phase from a provable start reaches round-off
#: on noiseless data in about five; with label noise (kinks, a nonzero residual) its steps slow down, and
#: the stage on all the subsample's rows takes over
_COARSE_STEPS = 10
#: rows :func:`refine_network` gathers by default
DEFAULT_MAX_SAMPLES = 200_000
#: ``refine_network``'s default held-out fraction of the rows it reads
_DEFAULT_HOLDOUT = 0.2
#: bytes of gathered rows :func:`refine_network` holds by default when they are copies (a source read in chunks)
GATHER_MEMORY = 1 << 29
#: parameters from which ``"auto"`` solves the full-space normal equations matrix free
#: (:func:`_matrix_free_choice`) even when ``J^T J`` fits ``jacobian_memory``: the two solvers cost the same
#: near P = 500 (below, the dense one's P^3 is smaller than the conjugate gradients' per-step overhead), and
#: 1000 leaves a factor 2 of margin; see the module docstring, "Matrix free", for the measurements
_MATRIX_FREE_MIN_PARAMS = 1000


# =========================================================================== results

@dataclass
class RefineResult:
    """What :func:`refine_network` did.

    Attributes
    ----------
    network : TwoLayerNetwork
        The kept network (``start`` or ``refined``).
    start, refined : TwoLayerNetwork
        The input network and the optimiser's output.
    kept : {"start", "refined"}
        Which of the two had the smaller held-out loss (ties keep ``refined``).
    improved : bool
        ``kept == "refined"`` and the held-out loss strictly decreased.
    train_loss_start, train_loss_refined : float
        Mean squared loss on the rows the optimiser used.
    holdout_loss_start, holdout_loss_refined : float
        Mean squared loss on the held-out rows (NaN when there are none; the comparison then uses the
        training loss).
    n_iter : int
        Function evaluations (``lm``, ``trf``), trial steps (``gn``; each one pass over all rows), or
        iterations (L-BFGS); for ``lm+gn`` the sum over the two stages.
    n_samples_seen, n_samples_used, n_holdout : int
        Rows read from the data, rows the optimiser used, held-out rows.
    method : str
        The optimiser that ran (``"lm"``, ``"trf"``, ``"gn"``, ``"gn-matrix-free"`` (``"gn"`` with the normal
        equations solved by conjugate gradients, chosen by ``"auto"``), ``"lbfgs"``, or ``"lm+gn"``: ``"lm"``
        on the first rows that fit its Jacobian budget, then ``"gn"`` on all rows; the two stages are in
        ``extra["stages"]``); ``requested_method`` is the argument.
    success : bool
        The optimiser's own convergence flag; ``status``/``message`` are its report.
    trained : tuple of str
        The parameter blocks that were optimised.
    time : float
        Wall-clock seconds of the whole call.
    extra : dict
        More records, merged into :meth:`as_dict`: ``stages`` (one record per stage of ``"lm+gn"``, or of
        the span path: ``stage`` is ``"full"`` (the coarse subsample, then the whole subsample) or
        ``"span"``, ``"full"`` (no coarse subsample), then ``"full-gradient"``, ``"span"``),
        ``n_jacobian`` (passes that accumulated the normal equations, ``"gn"``).
    """

    network: TwoLayerNetwork
    start: TwoLayerNetwork
    refined: TwoLayerNetwork
    kept: str
    improved: bool
    train_loss_start: float
    train_loss_refined: float
    holdout_loss_start: float
    holdout_loss_refined: float
    n_iter: int
    n_samples_seen: int
    n_samples_used: int
    n_holdout: int
    method: str
    requested_method: str
    success: bool
    status: int
    message: str
    trained: tuple
    time: float
    extra: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """The record without the networks (plain Python types; for ``diagnostics_``)."""
        out = {k: getattr(self, k) for k in (
            "kept", "improved", "train_loss_start", "train_loss_refined", "holdout_loss_start",
            "holdout_loss_refined", "n_iter", "n_samples_seen", "n_samples_used", "n_holdout", "method",
            "requested_method", "success", "status", "message", "time")}
        out["trained"] = list(self.trained)
        out["ran"] = True
        out.update(self.extra)
        return out


# =========================================================================== data

def gather_samples(data: Any, max_samples: int = 200_000, *, rng=None, chunk_size: int | None = None
                   ) -> tuple[np.ndarray, np.ndarray, int]:
    """A uniformly random subset of at most ``max_samples`` rows of a data source, in bounded memory.

    Priority sampling: each row gets a key ``U(0, 1)`` drawn from ``rng`` in data order; the rows with
    the ``max_samples`` smallest keys are kept (a uniform sample without replacement), returned in
    their original order. One pass; memory ``O((max_samples + chunk) (d + p))``. From a
    :class:`~nnrecover.sampling.SampleStream`, whose rows are independent draws, the first ``max_samples``
    rows (as uniform a sample, and only they are generated).

    Parameters
    ----------
    data : data source
        ``(X, Y)`` arrays (numpy, memmap, dask), an iterable of ``(X, Y)`` chunks, a one-pass
        iterator, or a :class:`nnrecover.data.DataSource`. Targets are required.
    max_samples : int, default 200_000
    rng : int, Generator or None
    chunk_size : int, optional
        Rows per chunk when reading arrays.

    Returns
    -------
    X : (m, d) array
    Y : (m, p) array (2-D)
    n_seen : int
        Rows in the data.
    """
    from .data import as_data_source

    max_samples = check_positive_int(max_samples, "max_samples")
    gen = check_random_state(rng)
    source = as_data_source(data)
    source.require_targets("refinement")
    if source.supports_take_rows and source.n_samples is not None:
        return _gather_rows_by_keys(source, max_samples, gen)
    if source.n_samples is not None and source.info.reiterable:
        return _gather_chosen_rows(source, max_samples, gen, chunk_size)
    # chunks are collected and pruned to the max_samples smallest keys only when twice that many are
    # held: O(N) copying in all (concatenating at every chunk would copy O(N^2 / chunk) rows)
    parts: list = []
    held = 0
    threshold = np.inf  # largest kept key after a pruning: rows with larger keys can never enter
    n_cols = None
    seen = 0

    def prune(parts):
        Xr, Yr, kk, ii = (np.concatenate([part[j] for part in parts]) for j in range(4))
        if kk.size > max_samples:
            sel = np.argpartition(kk, max_samples - 1)[:max_samples]
            Xr, Yr, kk, ii = Xr[sel], Yr[sel], kk[sel], ii[sel]
        return [(Xr, Yr, kk, ii)]

    for X, Y in source.chunks(chunk_size=chunk_size, progress=False):
        if Y.shape[1] == 0:
            raise InputError("refinement needs targets Y; the data have none.")
        m = X.shape[0]
        keys = gen.random(m)
        idx = np.arange(seen, seen + m, dtype=np.int64)
        seen += m
        if n_cols is None:
            n_cols = (X.shape[1], Y.shape[1])
        elif (X.shape[1], Y.shape[1]) != n_cols:
            raise InputError("every chunk must have the same numbers of input and target columns.")
        if np.isfinite(threshold):
            sel = keys < threshold
            if not np.any(sel):
                continue
            X, Y, keys, idx = X[sel], Y[sel], keys[sel], idx[sel]
        parts.append((np.array(X), np.array(Y), keys, idx))
        held += keys.size
        if held > 2 * max_samples:
            parts = prune(parts)
            held = parts[0][2].size
            threshold = parts[0][2].max()
    if not parts:
        raise InputError("the data are empty: refinement needs samples (X, Y).")
    Xr, Yr, keep_key, keep_idx = prune(parts)[0]
    if Xr.shape[0] == 0:
        raise InputError("the data are empty: refinement needs samples (X, Y).")
    order = np.argsort(keep_idx, kind="stable")
    return Xr[order], Yr[order], seen


def _gather_rows_by_keys(source, max_samples: int, gen: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`gather_samples` for sources that read given rows (numpy arrays, memory maps, dask arrays):
    the same keys, drawn in row order from ``gen`` (so the same rows as the chunk pass), chosen in
    blocks of at most 2^20 keys (:func:`_chosen_rows`); then only the chosen rows are read (on a dask
    cluster: gathered on the workers and sent to the client). Memory: the output and ``O(max_samples)``
    keys, instead of the chunk pass's up to ``2 max_samples`` held rows and their concatenation."""
    rows, n = _chosen_rows(source, max_samples, gen)
    X, Y = source.take_rows(rows)
    return X, Y, n


def _gather_chosen_rows(source, max_samples: int, gen: np.random.Generator, chunk_size: int | None
                        ) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`gather_samples` for a re-iterable source of known size read in chunks (a stream): the rows
    are chosen first (:func:`_chosen_rows`: the same keys, hence the same rows, as the chunk pass) and
    copied from one pass into the output, which is all the memory it takes (the chunk pass holds up to
    ``2 max_samples`` rows and their concatenation: 8.7 GB at d = 1000 for 200000 rows)."""
    rows, n = _chosen_rows(source, max_samples, gen)
    (X, Y), = _read_sorted_rows(source, [rows], n, chunk_size)
    return X, Y, n


def _read_sorted_rows(source, row_sets: list[np.ndarray], n: int, chunk_size: int | None = None
                      ) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(X, Y)`` of each sorted array of row indices in ``row_sets``, from one pass over ``source`` (which
    must give ``n`` rows). A stream of nnrecover's own (:func:`nnrecover.data._iid_stream`, which gives the
    rows it announces by construction) is read only up to the last row asked for."""
    from .data import _iid_stream

    out: list = [None] * len(row_sets)
    pos = [0] * len(row_sets)
    seen = 0
    stop_early = _iid_stream(source)
    it = iter(source.chunks(chunk_size=chunk_size, progress=False))
    try:
        for Xc, Yc in it:
            if Yc.shape[1] == 0:
                raise InputError("refinement needs targets Y; the data have none.")
            m = Xc.shape[0]
            for i, rows in enumerate(row_sets):
                if out[i] is None:
                    out[i] = (np.empty((rows.size, Xc.shape[1])), np.empty((rows.size, Yc.shape[1])))
                end = int(np.searchsorted(rows, seen + m))
                if end > pos[i]:
                    at = rows[pos[i]:end] - seen
                    out[i][0][pos[i]:end], out[i][1][pos[i]:end] = Xc[at], Yc[at]
                pos[i] = end
            seen += m
            if stop_early and all(done == wanted.size for done, wanted in zip(pos, row_sets)):
                return out
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()
    if seen != n:
        raise InputError(f"the data source announced {n} rows but gave {seen}; it must give the same rows on "
                         "every pass.")
    return out


def _chosen_rows(source, max_samples: int, gen: np.random.Generator) -> tuple[np.ndarray, int]:
    """The sorted indices of the rows :func:`_gather_rows_by_keys` reads, and the number of rows."""
    from .data import _iid_stream

    n = int(source.n_samples)
    if n == 0:
        raise InputError("the data are empty: refinement needs samples (X, Y).")
    if _iid_stream(source):
        # independent draws: the first rows are a uniform sample too, and a stream is then read only as far
        # as them (NoisyReLULearner at d = 1000, k = 50: its refinement's 64000 of 10^6 rows)
        return np.arange(min(max_samples, n), dtype=np.int64), n
    best_keys = np.empty(0)
    best_idx = np.empty(0, dtype=np.int64)
    # keys in blocks of about max_samples (the same keys for any block size: one sequence of draws), so that
    # the keys held stay O(max_samples)
    block = min(1 << 20, max(1 << 16, max_samples))
    for start in range(0, n, block):
        keys = gen.random(min(block, n - start))
        best_keys = np.concatenate([best_keys, keys])
        best_idx = np.concatenate([best_idx, np.arange(start, start + keys.size, dtype=np.int64)])
        if best_keys.size > max_samples:
            sel = np.argpartition(best_keys, max_samples - 1)[:max_samples]
            best_keys, best_idx = best_keys[sel], best_idx[sel]
    return np.sort(best_idx), n


def _check_xy(X, Y, network: TwoLayerNetwork, name: str) -> tuple[np.ndarray, np.ndarray]:
    X = as_2d_float(X, f"{name} X", n_features=network.n_inputs)
    Y = as_targets(Y, f"{name} Y", n_rows=X.shape[0])
    if Y.ndim == 1:
        Y = Y[:, None]
    if Y.shape[1] != network.n_outputs:
        raise InputError(f"{name} Y has {Y.shape[1]} target column(s) but the network has "
                         f"{network.n_outputs} output(s).")
    return X, Y


# =========================================================================== model pieces

def mean_squared_loss(network: TwoLayerNetwork, X, Y) -> float:
    """``(1/N) sum_n ||network(x_n) - y_n||^2`` (sum over outputs); NaN for zero rows."""
    X = np.asarray(X, dtype=np.float64)
    if X.shape[0] == 0:
        return float("nan")
    X = as_2d_float(X, "X", n_features=network.n_inputs)  # predict's checks
    Y = np.asarray(Y, dtype=np.float64)
    Y = Y[:, None] if Y.ndim == 1 else Y
    return _checked_loss(network, X, Y)


def _checked_loss(network: TwoLayerNetwork, X: np.ndarray, Y: np.ndarray) -> float:
    """:func:`mean_squared_loss` of rows the library has already checked (finite float64 ``X`` with the
    network's columns, 2-D ``Y``), without ``predict``'s validation (a read of ``X``) and in blocks of
    ``_LOSS_CHUNK_ROWS`` rows, whose temporaries stay in cache (800000 rows, d = 100, k = p = 10, one
    thread: 0.20-0.50 s whole, 0.12 s in blocks)."""
    n = X.shape[0]
    if n == 0:
        return float("nan")
    total = 0.0
    for s in range(0, n, _LOSS_CHUNK_ROWS):
        R = network._forward(X[s:s + _LOSS_CHUNK_ROWS])
        R -= Y[s:s + _LOSS_CHUNK_ROWS]
        total += float(np.einsum("ij,ij->", R, R))
    return total / n


class _Model:
    """Flattening of the trainable blocks and the residual / Jacobian / gradient of the loss."""

    def __init__(self, network: TwoLayerNetwork, train: tuple[str, ...]):
        self.net = network
        self.act = network.activation
        self.train = train
        self.k, self.d, self.p = network.n_hidden, network.n_inputs, network.n_outputs
        sizes = {"hidden_weights": self.k * self.d, "hidden_bias": self.k,
                 "output_weights": self.p * self.k, "output_bias": self.p}
        self.slices: dict[str, slice] = {}
        start = 0
        for name in BLOCKS:
            if name in train:
                self.slices[name] = slice(start, start + sizes[name])
                start += sizes[name]
        self.n_params = start

    def pack(self, net: TwoLayerNetwork) -> np.ndarray:
        return np.concatenate([getattr(net, name).ravel() for name in BLOCKS if name in self.train])

    def unpack(self, theta: np.ndarray):
        net = self.net
        W = theta[self.slices["hidden_weights"]].reshape(self.k, self.d) if "hidden_weights" in self.slices \
            else net.hidden_weights
        b = theta[self.slices["hidden_bias"]] if "hidden_bias" in self.slices else net.hidden_bias
        A = theta[self.slices["output_weights"]].reshape(self.p, self.k) if "output_weights" in self.slices \
            else net.output_weights
        c = theta[self.slices["output_bias"]] if "output_bias" in self.slices else net.output_bias
        return W, b, A, c

    def network(self, theta: np.ndarray) -> TwoLayerNetwork:
        W, b, A, c = self.unpack(theta)
        return TwoLayerNetwork(W.copy(), b.copy(), A.copy(), c.copy(), self.act)

    def forward(self, theta, X, Y):
        W, b, A, c = self.unpack(theta)
        Z = X @ W.T + b
        H = self.act(Z)
        R = H @ A.T + c - Y
        return W, b, A, c, Z, H, R

    def residuals(self, theta, X, Y, n_total: int | None = None) -> np.ndarray:
        """``(f(x_n) - y_n) / sqrt(N)`` flattened; ``N = n_total`` (default: the rows given)."""
        return self.forward(theta, X, Y)[-1].ravel() / np.sqrt(X.shape[0] if n_total is None else n_total)

    def jacobian(self, theta, X, Y, n_total: int | None = None, *, zero_columns: int = 0) -> np.ndarray:
        """``d residuals / d theta``, shape (n p, P): row ``n p + r`` is output ``r`` of sample ``n``.

        ``n_total`` is the ``N`` of the normalisation ``1/sqrt(N)`` (default: the rows given); a chunk of
        the rows passes the total so that the chunks stack into the Jacobian of all rows.
        ``zero_columns`` appends that many all-zero columns (inert parameters, see :func:`_minpack_lm`).
        """
        W, b, A, c = self.unpack(theta)
        n = X.shape[0]
        Z = X @ W.T + b
        J = np.zeros((n, self.p, self.n_params + zero_columns))
        if "hidden_weights" in self.slices or "hidden_bias" in self.slices:
            AG = A[None, :, :] * self.act.derivative(Z)[:, None, :]  # (n, p, k): A_ri act'(z_ni)
            if "hidden_weights" in self.slices:
                block = J[:, :, self.slices["hidden_weights"]]
                block.shape = (n, self.p, self.k, self.d)  # a view (raises rather than copy)
                np.multiply(AG[:, :, :, None], X[:, None, None, :], out=block)
            if "hidden_bias" in self.slices:
                J[:, :, self.slices["hidden_bias"]] = AG
        if "output_weights" in self.slices:
            H = self.act(Z)
            s = self.slices["output_weights"].start
            for r in range(self.p):
                J[:, r, s + r * self.k: s + (r + 1) * self.k] = H
        if "output_bias" in self.slices:
            s = self.slices["output_bias"].start
            J[:, np.arange(self.p), s + np.arange(self.p)] = 1.0
        J /= np.sqrt(n if n_total is None else n_total)
        return J.reshape(n * self.p, self.n_params + zero_columns)

    def loss_and_grad(self, theta, X, Y):
        """``(1/2N) sum ||R||^2`` and its gradient ``J^T r`` without forming ``J``."""
        W, b, A, c, Z, H, R = self.forward(theta, X, Y)
        n = X.shape[0]
        grad = np.empty(self.n_params)
        if "hidden_weights" in self.slices or "hidden_bias" in self.slices:
            D = (R @ A) * self.act.derivative(Z)  # (n, k)
            if "hidden_weights" in self.slices:
                grad[self.slices["hidden_weights"]] = (D.T @ X).ravel() / n
            if "hidden_bias" in self.slices:
                grad[self.slices["hidden_bias"]] = D.sum(axis=0) / n
        if "output_weights" in self.slices:
            grad[self.slices["output_weights"]] = (R.T @ H).ravel() / n
        if "output_bias" in self.slices:
            grad[self.slices["output_bias"]] = R.sum(axis=0) / n
        return 0.5 * float(np.sum(R * R)) / n, grad


def _check_train(train) -> tuple[str, ...]:
    if isinstance(train, str):
        train = (train,)
    try:
        names = tuple(train)
    except TypeError:
        raise InputError(f"train must be a sequence of block names from {BLOCKS}, got {train!r}.") from None
    unknown = [t for t in names if t not in BLOCKS]
    if unknown or not names:
        raise InputError(f"train must be a non-empty subset of {BLOCKS}; got {names!r}.")
    return tuple(name for name in BLOCKS if name in names)


def _check_tol(tol) -> float:
    try:
        tol = float(tol)
    except (TypeError, ValueError):
        raise InputError(f"tol must be a number, got {tol!r}.") from None
    if not (np.isfinite(tol) and tol > np.finfo(float).eps):
        raise InputError(f"tol must be a finite number > machine epsilon (2.2e-16), got {tol}.")
    return tol


# =========================================================================== optimiser

def _loss_pass(model: _Model, theta: np.ndarray, X: np.ndarray, Y: np.ndarray, out: np.ndarray,
               chunk_rows: int) -> np.ndarray:
    """Unnormalised residuals ``f(x_n) - y_n`` of all rows into ``out`` (n, p), in row chunks."""
    for s in range(0, X.shape[0], chunk_rows):
        out[s:s + chunk_rows] = model.forward(theta, X[s:s + chunk_rows], Y[s:s + chunk_rows])[-1]
    return out


def _gradient_pass(model: _Model, theta: np.ndarray, X: np.ndarray, Y: np.ndarray, chunk_rows: int) -> np.ndarray:
    """``g = J^T r`` over all rows (the gradient of ``F``) in row chunks, without ``J^T J``: ``O(n d k)``."""
    n = X.shape[0]
    g = np.zeros(model.n_params)
    for s in range(0, n, chunk_rows):
        Xc = X[s:s + chunk_rows]
        g += Xc.shape[0] * model.loss_and_grad(theta, Xc, Y[s:s + chunk_rows])[1]
    return g / n


def _normal_equations(model: _Model, theta: np.ndarray, X: np.ndarray, Y: np.ndarray, R: np.ndarray,
                      chunk_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``J^T J`` and ``g = J^T r`` over all rows, accumulated from the Jacobian's structure in row chunks.

    ``J`` and ``r = R / sqrt(n)`` are those of :meth:`_Model.jacobian` / :meth:`_Model.residuals` on all
    ``n`` rows; ``R`` holds the residuals at ``theta``. The rows of ``J`` for output ``r`` are
    ``[A_ri e_n, delta_rr' h_n, delta_rr']`` with ``e_n = (act'(z_n) (x) x_n, act'(z_n))`` (the hidden
    columns, unit ``u(col)``) and ``h_n = act(z_n)``. Summing over outputs first,

        J_hid^T J_hid = (sum_n e_n e_n^T) * (A^T A)[u, u],   J_hid^T J_A = (sum_n e_n h_n^T) (x) A[:, u]^T,
        J_A^T J_A = I_p (x) sum_n h_n h_n^T,                 J_c^T J_c = n I_p,  ...

    so one pass costs ``O(n (k (d + 1))^2)`` whatever the number of outputs ``p`` (the dense Jacobian
    costs ``p`` times more), and memory is one chunk of ``e`` (``chunk_rows k (d + 1)`` doubles). From
    ``_UNIT_PAIR_MIN_INPUTS`` inputs the hidden block is summed by unit pairs instead
    (:func:`_unit_pair_sums`: half the flops, a sixth for ReLU) and ``e`` is never formed: memory is then
    chunks of ``x`` of at most 8 MiB and the ``k^2`` blocks of ``(d + 1)^2``.
    """
    sums = _normal_sums(model, theta, X, R, chunk_rows)
    n, k, p = X.shape[0], model.k, model.p
    A, u, nE = sums["A"], sums["u"], sums["u"].size
    EH, Es, HH, Hs = sums["EH"], sums["Es"], sums["HH"], sums["Hs"]
    sl = model.slices
    blocks: dict[str, np.ndarray] = {}
    Au = A[:, u]  # (p, nE): A_{r, u(col)}
    Ip = np.eye(p)
    hid = {"hid": sums["hid"],
           "output_weights": (Au.T[:, :, None] * EH[:, None, :]).reshape(nE, p * k),
           "output_bias": Es[:, None] * Au.T}
    ow = {"output_weights": np.kron(Ip, HH), "output_bias": np.kron(Ip, Hs[:, None])}
    names = [name for name in ("output_weights", "output_bias") if name in sl]
    parts = (["hid"] if nE else []) + names
    for i, a in enumerate(parts):
        for bname in parts[i:]:
            if a == "hid":
                blk = hid["hid"] if bname == "hid" else hid[bname]
            elif a == "output_weights":
                blk = ow["output_weights"] if bname == "output_weights" else ow["output_bias"]
            else:
                blk = n * Ip
            blocks[a, bname] = blk
    # laid out block by block into one array, divided by n on the way (np.block and a division would write
    # the (P, P) array twice more: 0.35 s of 1.25 s for the 5100 coordinates at k = p = 50)
    sizes = [blocks[a, a].shape[0] for a in parts]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    JtJ = np.empty((offsets[-1], offsets[-1]))
    for i, a in enumerate(parts):
        for j, bname in enumerate(parts):
            blk = blocks[a, bname] if (a, bname) in blocks else blocks[bname, a].T
            np.divide(blk, n, out=JtJ[offsets[i]:offsets[i + 1], offsets[j]:offsets[j + 1]])
    g = np.concatenate([sums["grads"][name] for name in BLOCKS if name in sl]) / n
    return JtJ, g


def _normal_sums(model: _Model, theta: np.ndarray, X: np.ndarray, R: np.ndarray, chunk_rows: int) -> dict:
    """The sums behind :func:`_normal_equations` (its docstring): ``hid`` = ``J_hid^T J_hid`` (the hidden
    columns ``e_n``, unit ``u(col)``, times ``(A^T A)[u, u]``), ``EH`` = ``sum e h^T``, ``Es`` = ``sum e``,
    ``HH`` = ``sum h h^T``, ``Hs`` = ``sum h``, the unscaled gradient blocks ``grads`` (``J^T R``), ``u``,
    ``A`` and ``n``; nothing of size ``P x P`` beyond the hidden block."""
    n, k, d, p = X.shape[0], model.k, model.d, model.p
    W, b, A, c = model.unpack(theta)
    sl = model.slices
    hw, hb = "hidden_weights" in sl, "hidden_bias" in sl
    u = np.concatenate([np.repeat(np.arange(k), d) if hw else np.empty(0, dtype=np.int64),
                        np.arange(k) if hb else np.empty(0, dtype=np.int64)]).astype(np.int64)
    nE = u.size
    EE, EH, Es = np.zeros((nE, nE)), np.zeros((nE, k)), np.zeros(nE)
    HH, Hs = np.zeros((k, k)), np.zeros(k)
    gW, gb, gA, gc = np.zeros((k, d)), np.zeros(k), np.zeros((p, k)), np.zeros(p)
    unit_pairs = hw and d >= _UNIT_PAIR_MIN_INPUTS
    if unit_pairs:
        # the hidden block by unit pairs (see _unit_pair_sums): no chunk of e_n, chunks of x only
        d1 = d + hb
        # per row: x~, Z, H, G and one unit's G_i H (no k^2 products per row, which at d1 = k = 50, the span
        # block of the matrix-free solver, would leave chunks of 388 rows and 1275 pair products on each)
        chunk_rows = max(1, _GN_CHUNK_BYTES // (8 * (d1 + 4 * k)))
        M = np.zeros((k, k, d1, d1))
        XG, XGH = np.zeros((d1, k)), np.zeros((d1, k * k))
    for s in range(0, n, chunk_rows):
        Xc, Rc = X[s:s + chunk_rows], R[s:s + chunk_rows]
        Z = Xc @ W.T + b
        H = model.act(Z)
        if unit_pairs:
            G = model.act.derivative(Z)
            Xt = np.hstack([Xc, np.ones((Xc.shape[0], 1))]) if hb else Xc
            _unit_pair_sums(M, Xt, G)
            XG += Xt.T @ G
            for i in range(k):
                XGH[:, i * k:(i + 1) * k] += Xt.T @ (H * G[:, i:i + 1])
            D = (Rc @ A) * G
            gW += D.T @ Xc
            gb += D.sum(axis=0)
        elif nE:
            G = model.act.derivative(Z)
            E = np.empty((Xc.shape[0], nE))
            if hw:
                block = E[:, :k * d]
                block.shape = (Xc.shape[0], k, d)  # a view (raises rather than copy)
                np.multiply(G[:, :, None], Xc[:, None, :], out=block)
            if hb:
                E[:, nE - k:] = G
            EE += E.T @ E
            EH += E.T @ H
            Es += E.sum(axis=0)
            D = (Rc @ A) * G
            gW += D.T @ Xc
            gb += D.sum(axis=0)
        HH += H.T @ H
        Hs += H.sum(axis=0)
        gA += Rc.T @ H
        gc += Rc.sum(axis=0)
    if unit_pairs:
        # e_n = (g_n (x) x_n, g_n): sum e e^T has block (i r, j s) = M[i, j, r, s], the bias columns are the
        # last coordinate of x~ = (x, 1); sum e h^T and sum e from the sums of x~ g^T and x~ (g (x) h)^T
        ij = np.triu_indices(k, 1)
        M[ij[1], ij[0]] = M[ij]
        # J_hid^T J_hid = EE * (A^T A)[u, u]: scaled here block by block, then laid out with one copy
        M *= (A.T @ A)[:, :, None, None]
        EE[:k * d, :k * d] = M[:, :, :d, :d].transpose(0, 2, 1, 3).reshape(k * d, k * d)
        T = XGH.reshape(d1, k, k).transpose(1, 0, 2)  # (unit i, coordinate r, unit j)
        EH[:k * d] = T[:, :d].reshape(k * d, k)
        Es[:k * d] = XG[:d].T.reshape(k * d)
        if hb:
            EE[:k * d, k * d:] = M[:, :, :d, d].transpose(0, 2, 1).reshape(k * d, k)
            EE[k * d:, :k * d] = EE[:k * d, k * d:].T
            EE[k * d:, k * d:] = M[:, :, d, d]
            EH[k * d:] = T[:, d]
            Es[k * d:] = XG[d]
        del M  # (k d1)^2 doubles: freed before J^T J is laid out
    return {"n": n, "u": u, "A": A, "hid": EE if unit_pairs else EE * (A.T @ A)[np.ix_(u, u)],
            "EH": EH, "Es": Es, "HH": HH, "Hs": Hs,
            "grads": {"hidden_weights": gW.ravel(), "hidden_bias": gb, "output_weights": gA.ravel(), "output_bias": gc}}


#: inputs from which :func:`_normal_equations` sums the hidden block by unit pairs (:func:`_unit_pair_sums`);
#: below, the ``k (k + 1) / 2`` products per chunk cost more in calls than they save in flops
_UNIT_PAIR_MIN_INPUTS = 24


def _unit_pair_sums(M: np.ndarray, Xt: np.ndarray, G: np.ndarray) -> None:
    """Add ``sum_n g_ni g_nj x~_n x~_n^T`` to ``M[i, j]`` for every pair ``i <= j`` of units.

    The hidden block of ``J^T J`` is ``sum_n (g_n (x) x~_n)(g_n (x) x~_n)^T``, whose block ``(i, j)`` is
    this symmetric ``d1 x d1`` matrix. As one product over the ``k d1`` columns it costs ``n (k d1)^2 / 2``
    multiply-adds; by pairs, ``k (k + 1) / 2`` symmetric products of ``d1`` columns cost half that, and only
    over the rows where ``g_ni g_nj != 0``: for ReLU (``g`` in {0, 1}) a unit is active on about half the
    rows, two units on about a quarter, a sixth of the flops in all (``O(n (k d)^2 / 12)``). Derivatives
    outside {0, 1} (smooth activations): the rows scaled by ``sqrt(g_i g_j)`` (by ``g_i g_j`` on one side
    when that is negative somewhere).
    """
    k = G.shape[1]
    if np.all((G == 0.0) | (G == 1.0)):
        active = G != 0.0
        for i in range(k):
            rows = np.flatnonzero(active[:, i])
            Xi, Ai = Xt[rows], active[rows]
            M[i, i] += Xi.T @ Xi
            for j in range(i + 1, k):
                Xij = Xi[Ai[:, j]]
                M[i, j] += Xij.T @ Xij
        return
    for i in range(k):
        for j in range(i, k):
            w = G[:, i] * G[:, j]
            rows = np.flatnonzero(w)
            Xr, w = Xt[rows], w[rows]
            if np.all(w > 0):
                Xw = Xr * np.sqrt(w)[:, None]
                M[i, j] += Xw.T @ Xw
            else:
                P = (Xr * w[:, None]).T @ Xr
                M[i, j] += (P + P.T) / 2


def _gn_row_bytes(model: _Model) -> int:
    """Bytes per row of a ``"gn"`` chunk: the hidden columns ``e_n`` (``k (d + 1)``) and ``act(z_n)``."""
    return 8 * (model.k * (model.d + 2) + model.p)


def _chunk_rows(jacobian_memory: int, model: _Model) -> tuple[int, int]:
    """Rows per Jacobian chunk and per loss chunk of ``"gn"``.

    A Jacobian chunk holds the hidden columns ``e_n`` of :func:`_normal_equations` (``k (d + 2) + p`` doubles
    per row) and stays within ``min(jacobian_memory, 8 MiB)``: the
    budget is a ceiling, and chunks that fit in cache accumulate ``J^T J`` faster (measured with one BLAS
    thread, d = 10, k = 5, 8e5 rows: 0.13 s per pass with 4-8 MiB chunks, 1.3 s with one 256 MiB chunk).
    A loss chunk holds ``W x + b``, its activation and the residuals (``2 k + 2 p`` doubles per row).
    """
    budget = min(jacobian_memory, _GN_CHUNK_BYTES)
    return (max(1, int(budget // _gn_row_bytes(model))),
            max(1, int(budget // (8 * (2 * model.k + 2 * model.p)))))


#: the ``method`` recorded for a ``"gn"`` stage whose normal equations were solved matrix free
_MATRIX_FREE_METHOD = "gn-matrix-free"


def _matrix_free_applies(model: _Model, jacobian_memory: int) -> bool:
    """Whether the matrix-free Gauss-Newton (:mod:`nnrecover._matrix_free`) can run: ReLU units, every block
    trained (its rescaling null space and its preconditioner's span coordinates are those of the whole
    network), fewer hidden units than inputs (else the span is everything and ``M`` is ``J^T J`` itself), and
    the preconditioner's dense span block (``8 (k^2 + k + p k + p)^2`` bytes) within ``jacobian_memory``."""
    span = _matrix_free.span_block_size(model.k, model.p)
    return (model.act.name == "relu" and model.train == BLOCKS and model.k < model.d
            and 8 * span * span <= jacobian_memory)


#: residuals per parameter from which "auto" runs the matrix-free Gauss-Newton (dense Gauss-Newton: 4): its
#: preconditioner, the population normal matrix, keeps the conjugate gradients convergent down to a few
#: residuals per parameter, where L-BFGS needs thousands of iterations at large P (d = 1000, k = 20, one
#: output, 53633 rows: 5000 iterations in 755 s)
_MATRIX_FREE_MIN_RESIDUALS = 2


def _matrix_free_choice(model: _Model, jacobian_memory: int) -> bool:
    """Whether ``"auto"`` solves the full-space normal equations matrix free: when it applies and either
    ``J^T J`` (``8 P^2`` bytes) does not fit ``jacobian_memory`` or ``P >= _MATRIX_FREE_MIN_PARAMS``."""
    P = model.n_params
    return _matrix_free_applies(model, jacobian_memory) and (
        8 * P * P > jacobian_memory or P >= _MATRIX_FREE_MIN_PARAMS)


_DEADLINE_MESSAGE = "The deadline passed (time budget spent)."


class _DeadlinePassed(Exception):
    """Raised inside L-BFGS-B's objective to stop it at the deadline (its callback cannot stop it in every SciPy)."""


def _gauss_newton(model: _Model, theta0: np.ndarray, X: np.ndarray, Y: np.ndarray, *, max_iter: int, tol: float,
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
    from scipy.linalg import LinAlgError, cho_factor, cho_solve

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


def _lbfgs(model: _Model, theta0: np.ndarray, X: np.ndarray, Y: np.ndarray, *, tol: float, max_iter: int,
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


def _minpack_lm(model: _Model, theta0: np.ndarray, X: np.ndarray, Y: np.ndarray, *, tol: float,
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


@blas_threads(1)  # a public heavy entry point: many small products, bits independent of the thread count
def fit_least_squares(network: TwoLayerNetwork, X, Y, *, method: str = "auto", max_iter: int | None = None,
                      tol: float = 1e-15, train: Sequence[str] = BLOCKS,
                      jacobian_memory: int = _JACOBIAN_MEMORY,
                      deadline: float | None = None, ftol: float | None = None) -> tuple[TwoLayerNetwork, dict]:
    """Minimise the mean squared loss over the ``train`` blocks from ``network`` on in-memory samples.

    No split and no comparison: this is the optimiser that :func:`refine_network` calls (and the
    gradient-descent baseline, once per restart). See the module docstring for the methods.

    Parameters
    ----------
    network : TwoLayerNetwork
        Start.
    X : (N, d) array
    Y : (N,) or (N, p) array
    method : {"auto", "lm", "trf", "lbfgs", "gn", "lm+gn"}
        ``"auto"`` runs ``"gn"`` on all rows (matrix free for large ``P`` or when ``J^T J`` does not fit
        ``jacobian_memory``; ``"lbfgs"`` with fewer than ``4 P`` residuals, ``2 P`` matrix free, or when
        ``J^T J`` does not fit and the matrix-free solver does not apply); see the module docstring.
    max_iter : int, optional
        Function evaluations (``lm``, ``trf``; default 200), trial steps (``gn``; default 100) or
        iterations (``lbfgs``; default 5000). For ``"lm+gn"`` it bounds each stage (defaults 200 and 100).
    tol : float, default 1e-15
        ``ftol = xtol = gtol`` of the least-squares methods (``gn``: the same three tests, see
        :func:`_gauss_newton`); ``ftol`` and ``gtol`` of L-BFGS-B.
    train : sequence of str
        Blocks to optimise (subset of :data:`BLOCKS`); the others stay fixed.
    jacobian_memory : int, default 256 MiB
        Bytes allowed for the dense Jacobian of ``lm``/``trf``: only the first ``jacobian_memory // (8 p
        P)`` rows are used by them. ``gn`` uses all rows and keeps one chunk of at most
        ``min(jacobian_memory, 8 MiB)``; ``"auto"`` runs the dense ``"gn"`` only when ``J^T J`` (``8 P^2``
        bytes) fits it, and the matrix-free one when its span block (``8 (k^2 + k + p k + p)^2`` bytes)
        does; the latter keeps a float32 copy of the rows when ``4 N d`` bytes fit it.
    deadline : float, optional
        A ``time.perf_counter()`` value. ``"gn"`` and ``"lbfgs"`` stop at their first check after it
        (before each pass over the rows) and return the best iterate so far with ``status = -2`` and
        ``success = False``; ``"lm"`` and ``"trf"`` (MINPACK / SciPy loops) cannot be interrupted and
        ignore it.
    ftol : float, optional
        ``"gn"`` only: a looser relative-reduction test than ``tol`` (never tighter). For a fit whose
        minimiser is itself only an intermediate (a subsample's, followed by stages on all rows), where
        Gauss-Newton's linear convergence on nonzero residuals would spend tens of passes on digits the
        next stage replaces. On noiseless data each step removes most of the loss, so the test does not
        fire before round-off.

    Returns
    -------
    network : TwoLayerNetwork
    info : dict
        ``method`` (the one that ran), ``n_iter``,
        ``n_samples_used``, ``success``, ``status``, ``message``, ``train_loss_start``,
        ``train_loss_refined`` (on the rows used); ``n_jacobian`` for ``"gn"`` (0 when matrix free);
        ``n_operator`` (points at which the operator was built) and ``cg_iterations`` (per trial step) for
        ``"gn-matrix-free"``; ``stages`` (the records of the ``"lm"`` and ``"gn"`` stages, each with its
        ``time``) for ``"lm+gn"``.

    Raises
    ------
    InputError
        Bad ``network``, ``method``, ``train``, ``tol``, ``max_iter`` or ``jacobian_memory``, data that do
        not match the network, the Jacobian of one row larger than ``jacobian_memory`` (``lm``, ``trf``,
        ``gn``), or fewer residuals than parameters for ``lm``.
    """
    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    if method not in METHODS:
        raise InputError(f"method must be one of {METHODS}, got {method!r}.")
    train = _check_train(train)
    tol = _check_tol(tol)
    jacobian_memory = check_positive_int(jacobian_memory, "jacobian_memory")
    X, Y = _check_xy(X, Y, network, "training")
    model = _Model(network, train)
    P, p, n = model.n_params, network.n_outputs, X.shape[0]
    rows_fit = int(jacobian_memory // (8 * p * P))
    finish = False
    if method == "lm+gn":
        # "lm" on the first rows_fit rows, then "gn" on all of them (just "lm" when every row fits)
        method, finish = "lm", n > rows_fit
    matrix_free = False
    if method == "auto":
        few = n * p < 4 * P
        if few and not (n * p >= _MATRIX_FREE_MIN_RESIDUALS * P and _matrix_free_choice(model, jacobian_memory)):
            method = "lbfgs"
        elif _matrix_free_choice(model, jacobian_memory):
            # the normal equations by conjugate gradients, nothing P x P formed (module docstring, "Matrix free")
            method, matrix_free = "gn", True
        elif 8 * P * P > jacobian_memory or _gn_row_bytes(model) > jacobian_memory:
            method = "lbfgs"
        else:  # the normal equations over all rows: as accurate as "lm", 10-20x faster (module docstring)
            method = "gn"
    if method in ("lm", "trf") and rows_fit < 1:
        raise InputError(f"the Jacobian of one sample ({p * P * 8} bytes) exceeds jacobian_memory="
                         f"{jacobian_memory}; raise it or use method='lbfgs'.")
    if method == "gn" and _gn_row_bytes(model) > jacobian_memory:
        raise InputError(f"one row of the normal-equation chunk ({_gn_row_bytes(model)} bytes) exceeds "
                         f"jacobian_memory={jacobian_memory}; raise it or use method='lbfgs'.")
    X_all, Y_all = X, Y
    if method in ("lm", "trf"):
        n_use = min(n, rows_fit)
        if method == "lm" and n_use * p < P:
            raise InputError(
                f"method='lm' needs at least as many residuals as parameters ({P}); it has {n_use * p} "
                f"(rows used: {n_use}). Pass more samples, raise jacobian_memory, or use method='trf', 'gn' "
                "or 'lbfgs'.")
        X, Y = X[:n_use], Y[:n_use]
    user_max_iter = None if max_iter is None else check_positive_int(max_iter, "max_iter")
    max_iter = _DEFAULT_MAX_ITER[method] if user_max_iter is None else user_max_iter
    theta0 = model.pack(network)
    loss0 = _checked_loss(network, X, Y)
    n_jac = None
    t0 = time.perf_counter()
    if method == "lm":
        theta, n_iter, status, message, success = _minpack_lm(model, theta0, X, Y, tol=tol, max_iter=max_iter)
    elif method == "trf":
        res = optimize.least_squares(model.residuals, theta0, jac=model.jacobian, args=(X, Y), method=method,
                                     ftol=tol, xtol=tol, gtol=tol, max_nfev=max_iter, x_scale="jac")
        theta, n_iter, status, message, success = res.x, int(res.nfev), int(res.status), str(res.message), \
            bool(res.success)
    elif matrix_free:
        out = _matrix_free.gauss_newton(theta0, X, Y, (model.k, model.d, p), max_iter=max_iter, tol=tol,
                                        ftol=tol if ftol is None else max(float(ftol), tol),
                                        roundoff=_ROUNDOFF_LOSS * float(np.mean(Y * Y)),
                                        chunk_rows=_chunk_rows(jacobian_memory, model)[0],
                                        operator_bytes=jacobian_memory, deadline=deadline)
        theta, n_iter, status, message, success = (out["theta"], out["n_iter"], out["status"], out["message"],
                                                   out["success"])
        n_jac, n_chord = 0, 0
    elif method == "gn":
        chunk_rows, loss_rows = _chunk_rows(jacobian_memory, model)
        out = _gauss_newton(model, theta0, X, Y, max_iter=max_iter, tol=tol, chunk_rows=chunk_rows,
                            loss_rows=loss_rows, deadline=deadline, ftol=ftol)
        theta, n_iter, status, message, success, n_jac = (out["theta"], out["n_iter"], out["status"],
                                                          out["message"], out["success"], out["n_jacobian"])
        n_chord = out["n_chord"]
    else:
        theta, n_iter, status, message, success = _lbfgs(model, theta0, X, Y, tol=tol, max_iter=max_iter,
                                                         deadline=deadline)
    refined = model.network(theta)
    info = {"method": _MATRIX_FREE_METHOD if matrix_free else method, "n_iter": n_iter,
            "n_samples_used": int(X.shape[0]), "success": success, "status": status, "message": message,
            "train_loss_start": loss0, "train_loss_refined": _checked_loss(refined, X, Y)}
    if n_jac is not None:
        info["n_jacobian"], info["n_chord"] = n_jac, n_chord
    if matrix_free:
        info["n_operator"], info["cg_iterations"] = out["n_operator"], out["cg_iterations"]
    if finish:
        # Levenberg-Marquardt used only the first rows_fit rows; finish on all rows from its solution
        lm_info = dict(info, time=time.perf_counter() - t0)
        t0 = time.perf_counter()
        gn_max_iter = _DEFAULT_MAX_ITER["gn"] if user_max_iter is None else user_max_iter
        chunk_rows, loss_rows = _chunk_rows(jacobian_memory, model)
        out = _gauss_newton(model, theta, X_all, Y_all, max_iter=gn_max_iter, tol=tol, chunk_rows=chunk_rows,
                            loss_rows=loss_rows, deadline=deadline)
        refined = model.network(out["theta"])
        gn_info = {"method": "gn", "n_iter": out["n_iter"], "n_jacobian": out["n_jacobian"],
                   "n_samples_used": n, "success": out["success"], "status": out["status"],
                   "message": out["message"],
                   "train_loss_start": _checked_loss(model.network(theta), X_all, Y_all),
                   "train_loss_refined": _checked_loss(refined, X_all, Y_all), "time": time.perf_counter() - t0}
        info = {"method": "lm+gn", "n_iter": lm_info["n_iter"] + gn_info["n_iter"], "n_samples_used": n,
                "success": gn_info["success"], "status": gn_info["status"],
                "message": f"lm on the first {lm_info['n_samples_used']} rows: {lm_info['message']} "
                           f"gn on all {n} rows: {gn_info['message']}",
                "train_loss_start": _checked_loss(network, X_all, Y_all),
                "train_loss_refined": gn_info["train_loss_refined"], "stages": [lm_info, gn_info]}
    return refined, info


def _span_stage(network: TwoLayerNetwork, X: np.ndarray, Y: np.ndarray, *, method: str, max_iter, tol: float,
                train: tuple[str, ...], jacobian_memory: int, ftol: float | None = None
                ) -> tuple[TwoLayerNetwork, dict]:
    """Least squares over networks whose hidden rows stay in the span of ``network``'s hidden rows.

    With ``Q`` (d x k) an orthonormal basis of that span (QR of ``W^T``), ``W = V Q^T`` and ``W x = V z``
    with ``z = Q^T x``: the rows are projected once (``O(N d k)``) and the problem is the same one in ``k``
    inputs, ``k^2 + k + p (k + 1)`` parameters instead of ``k d + ...``, so one Gauss-Newton pass costs
    ``O(N k^4)`` instead of ``O(N k^2 d^2)``.
    """
    W = network.hidden_weights
    Q = np.linalg.qr(W.T)[0]
    small = TwoLayerNetwork(W @ Q, network.hidden_bias, network.output_weights, network.output_bias,
                            network.activation)
    t0 = time.perf_counter()
    fitted, info = fit_least_squares(small, X @ Q, Y, method=method, max_iter=max_iter, tol=tol, train=train,
                                     jacobian_memory=jacobian_memory, ftol=ftol)
    out = TwoLayerNetwork(fitted.hidden_weights @ Q.T, fitted.hidden_bias, fitted.output_weights,
                          fitted.output_bias, network.activation)
    info = dict(info, stage="span", time=time.perf_counter() - t0,
                train_loss_start=_checked_loss(network, X, Y), train_loss_refined=_checked_loss(out, X, Y))
    return out, info


def _fixed_hessian_steps(model: _Model, theta: np.ndarray, X: np.ndarray, Y: np.ndarray, Xs: np.ndarray,
                         Ys: np.ndarray, *, max_steps: int, tol: float, chunk_rows: int,
                         matrix_free: bool = False, operator_bytes: int = _JACOBIAN_MEMORY,
                         ftol: float = 0.0) -> tuple[np.ndarray, dict]:
    """Newton-type steps with ``J^T J`` of the subsample ``(Xs, Ys)`` and the gradient ``J^T r`` of all rows.

    ``h = -(H_m + lambda D)^{-1} g_N``: the gradient over all ``N`` rows costs ``O(N d k)``
    (:meth:`_Model.loss_and_grad`, no Jacobian), the Gauss-Newton matrix ``H_m`` of ``m`` rows one
    ``O(m (k d)^2)`` pass, factorised once. The fixed point is a stationary point of the loss on ALL rows
    (so the statistical error is that of ``N`` rows, not ``m``), reached linearly at the rate
    ``||I - H_m^{-1} H_N|| ~ sqrt(P / m)`` (subsampled Newton). A step that does not lower the loss of all
    rows is halved (at most 4 times; past the statistical noise floor the ReLU kinks make longer searches
    useless); the loop stops when the step is below ``tol (||theta|| + tol)``, a step lowers the loss by at
    most ``max(ftol, tol)`` of it, no step lowers it, or after ``max_steps`` steps.

    ``matrix_free``: ``H_m`` is never formed; each step solves ``(H_m + lambda M) h = -g_N`` by the
    preconditioned conjugate gradients of :mod:`nnrecover._matrix_free` (``O(m d k)`` per iteration) to the
    relative tolerance ``_FIXED_HESSIAN_CG_RTOL``, well below the iteration's own contraction.
    """
    from scipy.linalg import LinAlgError, cho_factor, cho_solve

    if matrix_free:
        solve = _matrix_free.subsample_solver(theta, Xs, (model.k, model.d, model.p), damping=_GN_LAMBDA_MIN,
                                              rtol=_FIXED_HESSIAN_CG_RTOL, chunk_rows=chunk_rows,
                                              operator_bytes=operator_bytes)
    else:
        R = model.forward(theta, Xs, Ys)[-1]
        H, _ = _normal_equations(model, theta, Xs, Ys, R, chunk_rows)
        D = np.diag(H).copy()
        D = np.where(D > 0, D, 1.0)
        lam = _GN_LAMBDA_MIN
        while True:
            try:
                factor = cho_factor(H + np.diag(lam * D), check_finite=False)
                break
            except LinAlgError:
                lam *= 10.0
                if lam > 1.0:
                    return theta, {"n_iter": 0, "message": "the subsample's normal matrix is not positive definite."}
        del H

        def solve(g):
            return -cho_solve(factor, g, check_finite=False)
    F, g = model.loss_and_grad(theta, X, Y)
    steps, message = 0, "the maximum number of steps is reached."
    while steps < max_steps:
        h = solve(g)
        steps += 1
        for _ in range(4):
            F_new, g_new = model.loss_and_grad(theta + h, X, Y)
            if np.isfinite(F_new) and F_new <= F:
                break
            h = h / 2
        else:
            message = "no step lowers the loss of all rows."
            break
        theta = theta + h
        done = np.linalg.norm(h) <= tol * (np.linalg.norm(theta) + tol) or F - F_new <= max(ftol, tol) * F
        F, g = F_new, g_new
        if done:
            message = "the step or the loss decrease is below tol."
            break
    return theta, {"n_iter": steps, "message": message}


#: relative tolerance of the conjugate gradients of a matrix-free fixed-Hessian step: the iteration contracts by
#: about sqrt(P / m) per step, and a solve error of 1e-3 adds at most that to the contraction
_FIXED_HESSIAN_CG_RTOL = 1e-3
#: mean squared residual, relative to E[y^2], below which a fit is at round-off: (64 eps)^2
_ROUNDOFF_LOSS = (64 * np.finfo(float).eps) ** 2
#: rows per chunk of the losses over training rows read from the data (about 8 MB of X at d = 100)
_LOSS_CHUNK_ROWS = 1 << 13


class _TrainingRows:
    """The training rows of the span path: arrays in memory, or rows of a data source (numpy array or
    memory map) read on demand, so that on noiseless data, where the subsample stages reach round-off, only
    the subsample is ever held and the losses over all rows are chunked passes (``O(chunk d)`` memory)."""

    def __init__(self, X: np.ndarray | None = None, Y: np.ndarray | None = None, *, source=None,
                 rows: np.ndarray | None = None, network: TwoLayerNetwork | None = None):
        self.X, self.Y, self.source, self.rows, self.network = X, Y, source, rows, network
        self.n = int(X.shape[0] if X is not None else rows.size)
        self._msy: float | None = None

    def _read(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # take_rows validates every value (finite float64, Y 2-D); the columns were checked against the
        # network on the first training row (refine_network), and every row has the same columns
        return self.source.take_rows(rows)

    def _chunks(self):
        for s in range(0, self.n, _LOSS_CHUNK_ROWS):
            yield self._read(self.rows[s:s + _LOSS_CHUNK_ROWS])

    def mean_square_y(self) -> float:
        """``mean(Y * Y)`` over all rows and outputs (from the first chunked loss pass when rows are read on
        demand)."""
        if self._msy is None:
            if self.X is not None:
                self._msy = float(np.mean(self.Y * self.Y))
            else:
                self.loss(self.network)
        return self._msy

    def loss(self, network: TwoLayerNetwork) -> float:
        """:func:`mean_squared_loss` over all rows (chunk by chunk when they are read on demand)."""
        return self.losses([network])[0]

    def losses(self, networks: Sequence[TwoLayerNetwork]) -> list[float]:
        """:func:`mean_squared_loss` of several networks over all rows, from one read of the rows."""
        if self.X is not None:
            return [_checked_loss(net, self.X, self.Y) for net in networks]
        totals, yy = np.zeros(len(networks)), 0.0
        for Xc, Yc in self._chunks():
            for j, net in enumerate(networks):
                # the rows were validated by take_rows and their columns checked against the network
                F = net._forward(Xc).reshape(Yc.shape)
                totals[j] += float(np.sum((F - Yc) ** 2))
            if self._msy is None:
                yy += float(np.sum(Yc * Yc))
        if self._msy is None:
            self._msy = yy / (self.n * self.network.n_outputs)
        return [float(t) / self.n for t in totals]

    def strided(self, stride: int) -> tuple[np.ndarray, np.ndarray]:
        """Every ``stride``-th row."""
        if self.X is not None:
            return self.X[::stride], self.Y[::stride]
        return self._read(self.rows[::stride])

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """All rows in memory (read once)."""
        if self.X is None:
            self.X, self.Y = self._read(self.rows)
        return self.X, self.Y


def _span_then_full(network: TwoLayerNetwork, data: _TrainingRows, *, method: str, max_iter, tol: float,
                    train: tuple[str, ...], jacobian_memory: int, full_samples: int) -> tuple[TwoLayerNetwork, dict]:
    """Full-space polish on an evenly strided subsample of at most ``full_samples`` rows, but at least
    ``5 P / p`` when there are as many (first a coarse one on ``max(5 P / p, 20 d)`` of them when it holds
    three times that, else a span polish first unless the full-space stage runs matrix free), then
    (unless that already fits every row to round-off) steps with its normal matrix and the gradient of all
    rows, and a span polish on all rows.

    The true hidden rows leave the span of the start's rows by the start's error, which a span polish
    cannot remove: the span optimum has a nonzero residual, where Gauss-Newton converges only linearly.
    Without the coarse stage a span stage on the subsample, capped at ``_SPAN_FIRST_STEPS`` trial steps,
    comes first (it only has to bring the in-span parameters close, for fewer full-space steps on the
    whole subsample); before the coarse stage it is left out, because the coarse stage does the passes far
    from the answer at a fraction of a full stage's cost anyway (measured from the provable starts of
    three learners at d = 100, k = 10, noiseless and with label noise: the same number of coarse passes
    with or without it). The full-space stage on the subsample (``O(m (k d)^2)`` per pass) removes the
    start's error to the statistical error of ``m`` rows (to round-off on noiseless data);
    :func:`_fixed_hessian_steps` then moves to the least-squares fit of all rows, and the last span stage,
    in the span of the corrected rows, polishes the in-span parameters on all rows. Only those all-rows
    stages hold all training rows in memory (:class:`_TrainingRows`); before them the rows are read once
    per check that a fit is at round-off on every row (the start's loss comes from the same read).
    """
    n = data.n
    stages = []
    full_model = _Model(network, train)
    P = full_model.n_params
    stride = -(-n // full_samples)
    # but at least 5 P / p rows when there are as many, the coarse stage's count: with fewer than 4 P
    # residuals "auto" runs L-BFGS on the subsample (one output at d = 300, k = 20, P = 6041 > 20000 / 4:
    # 5000 iterations in 99 s, where the matrix-free Gauss-Newton on 26667 rows took 7 s)
    min_rows = -(-_COARSE_RESIDUALS_PER_PARAMETER * P // network.n_outputs)
    if -(-n // stride) < min_rows:
        stride = max(1, n // min_rows)
    Xs, Ys = data.strided(stride)
    start_loss = None
    if _checked_loss(network, Xs, Ys) <= _ROUNDOFF_LOSS * float(np.mean(Ys * Ys)):
        # possibly an exact learner on noiseless data: every stage below could only move the fit within
        # round-off, and the full-space ones cost O(m (k d)^2) per pass; one O(N d k) loss pass decides it
        start_loss = data.loss(network)
        if start_loss <= _ROUNDOFF_LOSS * data.mean_square_y():
            return network.copy(), {"method": "gn", "n_iter": 0, "n_samples_used": n, "success": True,
                                    "status": 1, "message": "the start fits every row to round-off: nothing to refine",
                                    "train_loss_start": start_loss, "train_loss_refined": start_loss, "stages": []}

    all_rows_loss = {}

    def fits_every_row(current: TwoLayerNetwork) -> bool:
        nonlocal start_loss
        if start_loss is None:
            start_loss, loss = data.losses([network, current])
        else:
            loss = data.loss(current)
        all_rows_loss["refined"] = loss
        return loss <= _ROUNDOFF_LOSS * data.mean_square_y()

    # the Gauss-Newton passes far from the answer need not be over all m rows: a coarse stage of at most
    # _COARSE_STEPS trial steps on an evenly strided part of the subsample (5 residuals per parameter, 20
    # rows per input) does them at a third of the cost or less. On noiseless data it reaches round-off by
    # itself (checked on all rows below); otherwise the stage on all m rows starts from it, near its own
    # minimiser, and needs fewer passes
    # (only for Gauss-Newton, dense or matrix free: otherwise the stage runs L-BFGS)
    matrix_free = method == "auto" and _matrix_free_choice(full_model, jacobian_memory)
    n_coarse = max(-(-_COARSE_RESIDUALS_PER_PARAMETER * P // Ys.shape[1]), _COARSE_ROWS_PER_INPUT * Xs.shape[1])
    coarse = Xs.shape[0] >= 3 * n_coarse and (8 * P * P <= jacobian_memory or matrix_free)
    current = network
    if not coarse and not matrix_free:
        # the first span stage only has to bring the in-span parameters close for the full-space stage, which
        # works on the subsample anyway: on the subsample it costs 1/stride of an all-rows stage. Not before a
        # matrix-free stage: its preconditioner holds the exact normal matrix of the span coordinates, so it
        # solves the in-span part of each step itself (NoisyReLULearner's start at d = 1000, k = 50: the same
        # 6 full-space steps without the span stage, whose 10 dense steps on 5100 span parameters took 13 s)
        first_iter = _SPAN_FIRST_STEPS if max_iter is None else min(max_iter, _SPAN_FIRST_STEPS)
        current, info = _span_stage(network, Xs, Ys, method=method, max_iter=first_iter, tol=tol, train=train,
                                    jacobian_memory=jacobian_memory)
        stages.append(info)
    fits_all = False
    if coarse:
        step = Xs.shape[0] // n_coarse         # the first n_coarse rows of the stride-step subsample
        coarse_iter = _COARSE_STEPS if max_iter is None else min(max_iter, _COARSE_STEPS)
        t0 = time.perf_counter()
        current, info = fit_least_squares(current, Xs[::step][:n_coarse], Ys[::step][:n_coarse], method=method,
                                          max_iter=coarse_iter, tol=tol, train=train,
                                          jacobian_memory=jacobian_memory)
        stages.append(dict(info, stage="full", time=time.perf_counter() - t0))
        fits_all = fits_every_row(current)
    if not fits_all:
        t0 = time.perf_counter()
        # the subsample's minimiser is off the all-rows one by its statistical error, which the stages on
        # all rows below remove: stopping when a step gains less than 1e-9 of the loss leaves it within
        # sqrt(1e-9 m) (0.5% at m = 20000 rows) of that error; with label noise Gauss-Newton converges
        # only linearly there (nonzero residuals, ReLU kinks) and the tighter tests would not fire
        current, info = fit_least_squares(current, Xs, Ys, method=method, max_iter=max_iter, tol=tol,
                                          train=train, jacobian_memory=jacobian_memory,
                                          ftol=_SUBSAMPLE_FTOL)
        stages.append(dict(info, stage="full", time=time.perf_counter() - t0))
        fits_all = fits_every_row(current)
    if fits_all:
        # the subsample's fit already fits every row to round-off (noiseless data): the all-rows
        # stages below could only move it within round-off
        stages[-1]["stopped"] = "fits all rows to round-off"
        refined_loss = all_rows_loss["refined"]
    elif Xs.shape[0] < n and 8 * P * P > jacobian_memory and not matrix_free:
        # the subsample's normal matrix (8 P^2 bytes) does not fit jacobian_memory and the matrix-free solver
        # does not apply: the full-space stage above ran L-BFGS, and the fixed-Hessian steps are skipped
        # rather than allocating P^2 doubles
        stages[-1]["skipped"] = (f"all-rows steps: J^T J of {P} parameters needs {8 * P * P / 2**30:.1f} GiB "
                                 "> jacobian_memory")
    elif Xs.shape[0] < n:  # the same least squares on all rows, with the subsample's normal matrix
        t0 = time.perf_counter()
        X, Y = data.arrays()
        model = _Model(current, train)
        theta, info = _fixed_hessian_steps(model, model.pack(current), X, Y, Xs, Ys, max_steps=_FULL_GRADIENT_STEPS,
                                           tol=tol, chunk_rows=_chunk_rows(jacobian_memory, model)[0],
                                           matrix_free=matrix_free, operator_bytes=jacobian_memory,
                                           ftol=_ALL_ROWS_FTOL)
        stage_start = _checked_loss(current, X, Y)
        current = model.network(theta)
        stages.append(dict(info, stage="full-gradient", method=_MATRIX_FREE_METHOD if matrix_free else "gn",
                           n_samples_used=n, success=True, status=1,
                           train_loss_start=stage_start, train_loss_refined=_checked_loss(current, X, Y),
                           time=time.perf_counter() - t0))
    if "stopped" not in stages[-1]:
        X, Y = data.arrays()
        current, info = _span_stage(current, X, Y, method=method, max_iter=max_iter, tol=tol, train=train,
                                    jacobian_memory=jacobian_memory, ftol=_ALL_ROWS_FTOL)
        stages.append(info)
    last = stages[-1]
    if "stopped" not in last:
        refined_loss = last["train_loss_refined"]
    full = next(st for st in stages if st["stage"] == "full")
    summary = {"method": full["method"], "n_iter": sum(st["n_iter"] for st in stages), "n_samples_used": n,
               "success": last["success"], "status": last["status"],
               "message": "; ".join(f"{st['stage']} on {st['n_samples_used']} rows: {st['message']}"
                                    for st in stages),
               "train_loss_start": start_loss, "train_loss_refined": refined_loss, "stages": stages}
    if all("n_jacobian" in st for st in stages if st["stage"] != "full-gradient"):
        summary["n_jacobian"] = sum(st.get("n_jacobian", 0) for st in stages)
    return current, summary


@blas_threads(1)  # a public heavy entry point: many small products, bits independent of the thread count
def _default_max_samples(source) -> int:
    """``refine_network``'s ``max_samples=None``: ``DEFAULT_MAX_SAMPLES``, and for a source read in chunks
    at most the rows that fit ``GATHER_MEMORY``."""
    max_samples = DEFAULT_MAX_SAMPLES
    width = (source.n_inputs or 0) + (source.n_outputs or 0)
    if not source.supports_take_rows and width:
        max_samples = max(1, min(max_samples, GATHER_MEMORY // (8 * width)))
    return max_samples


def _default_gauss_newton_fits(network: TwoLayerNetwork, source) -> bool:
    """Whether ``refine_network(network, source)`` with its defaults fits by Gauss-Newton (dense or matrix
    free) on at least ``4 P`` residuals in its full-space stages.

    Its training rows (``min(n_samples, max_samples)`` less the held-out fifth; the count must be known) must
    hold ``4 P`` residuals, and ``J^T J`` (``8 P^2`` bytes) fit the default ``jacobian_memory`` or the
    matrix-free solver apply (ReLU units, ``k < d``, any ``P``). With fewer residuals ``"auto"`` runs the
    matrix-free solver from ``2 P`` (:data:`_MATRIX_FREE_MIN_RESIDUALS`), else L-BFGS, which stops far from
    round-off at large ``P``.
    """
    model = _Model(network, BLOCKS)
    P, p = model.n_params, network.n_outputs
    n = getattr(source, "n_samples", None)
    if n is None:
        return False
    n_train = min(int(n), _default_max_samples(source))
    n_train -= int(round(_DEFAULT_HOLDOUT * n_train))
    return n_train * p >= 4 * P and (8 * P * P <= _JACOBIAN_MEMORY or _matrix_free_applies(model, _JACOBIAN_MEMORY))


def refine_network(network: TwoLayerNetwork, data: Any, *, method: str = "auto", max_samples: int | None = None,
                   holdout_fraction: float = _DEFAULT_HOLDOUT, validation_data: Any = None, max_iter: int | None = None,
                   tol: float = 1e-15, train: Sequence[str] = BLOCKS, jacobian_memory: int = _JACOBIAN_MEMORY,
                   span: bool = True, full_samples: int = 20_000, rng=None) -> RefineResult:
    """Polish a network estimate by nonlinear least squares; keep it only if it helps on held-out data.

    Parameters
    ----------
    network : TwoLayerNetwork
        The start (e.g. a provable algorithm's estimate).
    data : data source
        ``(X, Y)`` arrays (numpy, memmap, dask), an iterable of ``(X, Y)`` chunks (e.g. a
        :class:`nnrecover.SampleStream`), a one-pass iterator, or a ``DataSource``.
    method : {"auto", "lm", "trf", "lbfgs", "gn", "lm+gn"}, default "auto"
        See the module docstring. ``"auto"`` runs ``"gn"`` (Levenberg-Marquardt on the normal equations,
        all ``max_samples`` rows whatever their number, round-off accurate on noiseless data; solved matrix
        free for large networks, ``"gn-matrix-free"``); ``"lm"``
        (MINPACK on the dense Jacobian) uses at most the rows its Jacobian budget holds.
    max_samples : int, optional
        At most this many rows are gathered (uniformly at random, :func:`gather_samples`; the first ones of a
        :class:`~nnrecover.SampleStream`). Default: 200000,
        and from a source read in chunks (a stream, a list of chunks), whose gathered rows are copies, at
        most the rows that fit ``GATHER_MEMORY`` (512 MiB: 63900 rows at d = 1000, p = 50).
    holdout_fraction : float in [0, 1), default 0.2
        Share of the gathered rows held out for the start-vs-refined comparison (ignored when
        ``validation_data`` is given). With 0 the comparison uses the training loss.
    validation_data : (X, Y) arrays, optional
        Explicit held-out samples; then all gathered rows train.
    max_iter : int, optional
        Budget of the optimiser (see :func:`fit_least_squares`).
    tol : float, default 1e-15
        Convergence tolerance (see :func:`fit_least_squares`).
    train : sequence of str, default all four blocks
        Which of ``hidden_weights``, ``hidden_bias``, ``output_weights``, ``output_bias`` to optimise.
    jacobian_memory : int, default 256 MiB
        Memory budget of the dense Jacobian (``lm``/``trf``; they use only the rows that fit), of one
        chunk of ``gn`` and of its normal matrix, or of the matrix-free solver's preconditioner (see
        :func:`fit_least_squares`).
    span : bool, default True
        With ``"auto"`` or ``"gn"``, trained hidden weights and fewer hidden units than inputs, polish in
        the full space on at most ``full_samples`` evenly strided training rows (first on a coarse part of
        them when they are many, else, unless it runs matrix free, after a polish in the span of the start's
        hidden rows), then, unless that fits every training row to round-off, with that subsample's normal
        matrix and the gradient of all rows, then in the new span on all rows (module docstring, "Span
        first"; the records are in ``extra["stages"]``). False: one optimiser run on all training rows.
    full_samples : int, default 20_000
        Rows (evenly strided) whose normal matrix the full-space stage uses when ``span`` applies, but at
        least ``5 P / p`` of them when there are as many (five residuals per parameter, so that the stage
        runs Gauss-Newton); its cost per step is ``O(full_samples (k d)^2)``, or ``O(full_samples d k)``
        per conjugate-gradient step matrix free.
    rng : int, Generator or None
        Seeds the subsample and the split; same seed, same result.

    Returns
    -------
    RefineResult
    """
    t0 = time.perf_counter()
    if not isinstance(network, TwoLayerNetwork):
        raise InputError(f"network must be a TwoLayerNetwork, got {type(network).__name__}.")
    if method not in METHODS:
        raise InputError(f"method must be one of {METHODS}, got {method!r}.")
    train = _check_train(train)
    _check_tol(tol)
    try:
        frac = float(holdout_fraction)
    except (TypeError, ValueError):
        raise InputError(f"holdout_fraction must be a number in [0, 1), got {holdout_fraction!r}.") from None
    if not 0.0 <= frac < 1.0:
        raise InputError(f"holdout_fraction must be in [0, 1), got {holdout_fraction!r}.")
    gen = check_random_state(rng)
    from .data import as_data_source

    source = as_data_source(data)
    if max_samples is None:
        max_samples = _default_max_samples(source)
    max_samples = check_positive_int(max_samples, "max_samples")
    rows = None
    by_index = source.supports_take_rows
    if validation_data is None and source.n_samples is not None and (by_index or source.info.reiterable):
        # the same rows as gather_samples, but the training and held-out parts are read from the data
        # directly (by index, or in one pass of a stream): no gathered copy of all rows next to its two parts
        source.require_targets("refinement")
        rows, n_seen = _chosen_rows(source, max_samples, gen)
        n_rows = rows.size
    else:
        X, Y, n_seen = gather_samples(source, max_samples, rng=gen)
        X, Y = _check_xy(X, Y, network, "data")
        n_rows = X.shape[0]
    if validation_data is not None:
        if not (isinstance(validation_data, (tuple, list)) and len(validation_data) == 2):
            raise InputError("validation_data must be a pair (X, Y) of arrays.")
        Xv, Yv = _check_xy(validation_data[0], validation_data[1], network, "validation_data")
        Xt, Yt = X, Y
    else:
        n_hold = int(round(frac * n_rows))
        if frac > 0 and n_hold == 0:
            n_hold = 1
        if n_hold >= n_rows:
            raise InputError(f"holdout_fraction={frac} leaves no training rows out of {n_rows}; pass more "
                             "samples or a smaller holdout_fraction.")
        perm = gen.permutation(n_rows)
        hold, tr = np.sort(perm[:n_hold]), np.sort(perm[n_hold:])
        if rows is None:
            Xv, Yv, Xt, Yt = X[hold], Y[hold], X[tr], Y[tr]
        elif not by_index:
            (Xt, Yt), (Xv, Yv) = _read_sorted_rows(source, [rows[tr], rows[hold]], n_seen)
            Xt, Yt = _check_xy(Xt, Yt, network, "data")
            rows = None
        else:
            # the training rows are read when a stage needs them (the span path on noiseless data: only its
            # subsample and chunked losses), the held-out rows after the optimisation
            _check_xy(*source.take_rows(rows[tr[:1]]), network, "data")

    if not isinstance(span, (bool, np.bool_)):
        raise InputError(f"span must be True or False, got {span!r}.")
    full_samples = check_positive_int(full_samples, "full_samples")
    train_rows = (_TrainingRows(Xt, Yt) if rows is None else
                  _TrainingRows(source=source, rows=rows[tr], network=network))
    if span and method in ("auto", "gn") and "hidden_weights" in train and network.n_hidden < network.n_inputs:
        refined, info = _span_then_full(network, train_rows, method=method, max_iter=max_iter, tol=tol,
                                        train=train, jacobian_memory=jacobian_memory, full_samples=full_samples)
    else:
        refined, info = fit_least_squares(network, *train_rows.arrays(), method=method, max_iter=max_iter, tol=tol,
                                          train=train, jacobian_memory=jacobian_memory)
    if rows is not None:
        del train_rows
        Xv, Yv = source.take_rows(rows[hold])
        if n_hold:
            Xv, Yv = _check_xy(Xv, Yv, network, "data")
    # every held-out row was checked (_check_xy, take_rows)
    hold_start = _checked_loss(network, Xv, Yv)
    hold_ref = _checked_loss(refined, Xv, Yv)
    if Xv.shape[0]:
        # NaN (overflow) never wins
        keep_refined = bool(np.isfinite(hold_ref) and not hold_ref > hold_start)
        improved = keep_refined and hold_ref < hold_start
    else:
        keep_refined = bool(np.isfinite(info["train_loss_refined"])
                            and not info["train_loss_refined"] > info["train_loss_start"])
        improved = keep_refined and info["train_loss_refined"] < info["train_loss_start"]
    return RefineResult(
        network=refined if keep_refined else network.copy(), start=network, refined=refined,
        kept="refined" if keep_refined else "start", improved=bool(improved),
        train_loss_start=info["train_loss_start"], train_loss_refined=info["train_loss_refined"],
        holdout_loss_start=hold_start, holdout_loss_refined=hold_ref, n_iter=info["n_iter"],
        n_samples_seen=int(n_seen), n_samples_used=info["n_samples_used"], n_holdout=int(Xv.shape[0]),
        method=info["method"], requested_method=method, success=info["success"], status=info["status"],
        message=info["message"], trained=train, time=time.perf_counter() - t0,
        extra={key: info[key] for key in ("stages", "n_jacobian") if key in info})
