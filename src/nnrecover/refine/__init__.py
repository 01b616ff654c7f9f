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
  keeps falling with ``N`` beyond ``rows_fit``. (Measurements behind the choice: benchmarks/README.md, "Refinement".)

Non-smooth losses. The empirical loss of a ReLU network has kinks where a row crosses
``w_i.x + b_i = 0``; with label noise, optimisers from different starts can stop at different local
minima close to each other (measured: ``"lm"`` and ``"gn"`` from the same start on 5000 rows, d = 10,
k = 5, sigma = 0.1: 3.6e-3 apart in max unit error, against a statistical error of 1.9e-2 for both).
On a smooth activation (``tanh``) they find the same minimiser to their tolerance.

Modules (one per job; :func:`refine_network` and :func:`fit_least_squares` are the two entry points):

=============================  ===========================================================================
:mod:`~.model`                 the parameter vector, residuals, Jacobian and normal equations by chunks
:mod:`~.rows`                  :func:`gather_samples` and the training rows in memory
:mod:`~.dense`                 ``"gn"`` on the formed normal equations, ``"lbfgs"``, ``"lm"`` / ``"trf"``
:mod:`~.matrix_free`           ``"gn-matrix-free"``: the normal equations by preconditioned conjugate gradients
:mod:`~.least_squares`         :func:`fit_least_squares`: one fit on rows in memory, the method chosen
:mod:`~.staged`                :func:`refine_network`: span first, subsample, all rows; keeping the better
:mod:`~.result`                :class:`RefineResult`
:mod:`~.certificate`           the max-unit-error certificate of a fitted network (Gauss-Newton confidence region)
=============================  ===========================================================================
"""

from __future__ import annotations

from .certificate import certify_max_unit_error, unit_error_bound
from .least_squares import METHODS, fit_least_squares
from .model import BLOCKS, Model, mean_squared_loss
from .result import RefineResult
from .rows import DEFAULT_MAX_SAMPLES, GATHER_MEMORY, gather_samples
from .staged import default_gauss_newton_fits, refine_network

__all__ = ["refine_network", "RefineResult", "gather_samples", "fit_least_squares", "mean_squared_loss", "Model",
           "BLOCKS", "METHODS", "DEFAULT_MAX_SAMPLES", "GATHER_MEMORY", "default_gauss_newton_fits",
           "certify_max_unit_error", "unit_error_bound"]
