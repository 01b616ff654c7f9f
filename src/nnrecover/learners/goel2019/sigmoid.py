"""Sigmoid units with f-biased sampling (Appendix B.6, Theorem 13).

Goel & Panigrahy (2019), Appendix B.6. The sigmoid ``u_t(a) = 1/(1 + e^{-(a - t)})`` satisfies
Assumption 2 with ``rho(t, sigma) = e^{-t + sigma^2/2}`` (Lemma 12), so Assumption 3 needs
``t = Omega(log d)``; the region where units respond is then rare, and unlike step/relu units a sigmoid
is never exactly 0, so no sample can be discarded. The paper therefore assumes ``f >= 0`` and an
**oracle that returns a sample (x, f(x)) with probability proportional to f(x)**. Under the biased
law ``E_bias[h(x)] = E[f h] / E[f]``, so every Step 1 correlation is available up to the common factor
``1/E[f]``. That factor scales ``M`` and ``T4`` alike: it rescales ``|z|`` (and the coefficient
estimates) but not the directions. Theorem 13: for ``t = Omega(log d)`` the columns of ``(T W*)^{-1}``
are recovered within ``1/poly(d)`` in polynomial time. Step 2 does not apply (``u_t > 0`` everywhere,
so the event ``f != c_0`` carries no information).

Here:

* :class:`RejectionOracle` simulates the biased oracle by rejection: draw ``x ~ N(0, I)`` and keep it
  with probability ``f(x)/f_max``. The acceptance rate estimates ``E[f]/f_max``.
* :func:`biased_moments` turns biased rows into the Step 1 moments of
  :class:`~nnrecover.learners.goel2019.statistics.SampleMoments` (every row has weight ``scale``;
  ``scale = E[f]`` gives the unbiased moments, any positive value the right directions).
* :func:`biased_population_moments` is the exact population counterpart (``E[f H_k]/E[f]``).
* :func:`sigmoid_biased_step1` runs a Step 1 route on biased rows (Theorem 13).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable

import numpy as np

from ..._validation import as_2d_float, check_positive_int, check_random_state
from ...errors import AssumptionError, InputError
from ..registry import register
from .model import HighThresholdNetwork, UpperPolynomial, population_hermite_moment
from .statistics import PopulationMoments, SampleMoments
from .step1 import Step1Result, step1

__all__ = ["RejectionOracle", "biased_moments", "biased_population_moments", "sigmoid_biased_step1"]


class RejectionOracle:
    """The f-biased sample oracle of Appendix B.6, simulated by rejection from ``N(0, I)``.

    Parameters
    ----------
    target : HighThresholdNetwork or callable
        ``f`` (a callable maps an ``(m, n)`` array to ``(m,)`` values).
    n_inputs : int, optional
        Required when ``target`` is a callable.
    f_max : float, optional
        An upper bound on ``f``. Default for a network with a polynomial ``P`` on sigmoid (or step)
        units, whose outputs lie in ``[0, 1]``: ``c_0 + sum of the positive coefficients``.

    Raises
    ------
    AssumptionError
        While sampling: a value ``f(x) < 0`` (the oracle needs ``f >= 0``) or ``f(x) > f_max``.
    """

    def __init__(self, target: Any, n_inputs: int | None = None, f_max: float | None = None):
        if isinstance(target, HighThresholdNetwork):
            self.func: Callable = target.predict
            self.n_inputs = target.n_inputs
            if f_max is None:
                if target.activation not in ("sigmoid", "step") or not isinstance(target.upper, UpperPolynomial):
                    raise InputError("pass f_max: the default bound needs hidden outputs in [0, 1] (sigmoid or "
                                     "step units) and a polynomial P.")
                vals = np.array(list(target.upper.coefficients.values()))
                keys = list(target.upper.coefficients.keys())
                const = sum(v for k, v in zip(keys, vals) if not any(k))
                f_max = const + float(sum(v for k, v in zip(keys, vals) if any(k) and v > 0))
        elif callable(target):
            self.func = target
            self.n_inputs = check_positive_int(n_inputs, "n_inputs")
            if f_max is None:
                raise InputError("pass f_max (an upper bound on f) with a callable target.")
        else:
            raise InputError(f"target must be a HighThresholdNetwork or a callable, got {type(target).__name__}.")
        if isinstance(f_max, bool) or not isinstance(f_max, numbers.Real) or not math.isfinite(f_max) or f_max <= 0:
            raise InputError(f"f_max must be a finite number > 0, got {f_max!r}.")
        self.f_max = float(f_max)

    def sample(self, n_samples: int, *, rng=None, chunk: int = 100_000, max_draws: int = 100_000_000):
        """Draw ``n_samples`` rows from the biased law ``f(x) phi(x) / E[f]``.

        Returns
        -------
        X : ndarray (n_samples, n)
        info : dict
            ``draws`` (Gaussian rows drawn), ``acceptance`` (rate), ``mean_f`` (``f_max * acceptance``,
            an unbiased estimate of ``E[f]`` over the draws).
        """
        n_samples = check_positive_int(n_samples, "n_samples")
        chunk = check_positive_int(chunk, "chunk")
        gen = check_random_state(rng)
        kept, total, draws, fsum = [], 0, 0, 0.0
        while total < n_samples:
            if draws >= max_draws:
                raise AssumptionError(f"the rejection oracle accepted {total} of {draws} draws (E[f]/f_max is "
                                      "tiny); raise max_draws or give a tighter f_max.")
            X = gen.standard_normal((chunk, self.n_inputs))
            f = np.asarray(self.func(X), dtype=np.float64).reshape(-1)
            if np.any(f < 0):
                raise AssumptionError("the f-biased oracle of Appendix B.6 needs f >= 0; f took the value "
                                      f"{f.min():.3g}. Shift the labels or use the unbiased Step 1.")
            if np.any(f > self.f_max * (1 + 1e-12)):
                raise AssumptionError(f"f({f.max():.6g}) exceeds f_max = {self.f_max:.6g}: rejection sampling "
                                      "needs f <= f_max everywhere; pass a larger f_max.")
            acc = gen.random(chunk) * self.f_max < f
            kept.append(X[acc])
            total += int(acc.sum())
            draws += chunk
            fsum += float(f.sum())
        X = np.vstack(kept)[:n_samples]
        rate = total / draws
        return X, {"draws": draws, "acceptance": rate, "mean_f": self.f_max * rate, "mean_f_draws": fsum / draws}


def biased_moments(X_biased, activation: str, threshold: float, *, scale: float = 1.0) -> SampleMoments:
    """Step 1 moments from f-biased rows: ``scale * E_bias[H_k(x)] / u_hat_k`` (= ``E[f H_k]/u_hat_k`` at ``scale = E[f]``)."""
    X = as_2d_float(X_biased, "X_biased")
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale) or scale <= 0:
        raise InputError(f"scale must be a finite number > 0, got {scale!r}.")
    return SampleMoments(X, np.full(X.shape[0], float(scale)), X.shape[0], activation, threshold)


def biased_population_moments(network: HighThresholdNetwork) -> PopulationMoments:
    """Exact moments under the biased law: ``E[f H_k]/E[f]`` (each normalised by ``u_hat_k``)."""
    pop = PopulationMoments(network)
    mean_f = float(population_hermite_moment(network, 0))
    if not mean_f > 0:
        raise AssumptionError(f"E[f] = {mean_f:.3g} <= 0: the f-biased law of Appendix B.6 needs f >= 0, E[f] > 0.")
    return PopulationMoments(tensors=(pop.T1 / mean_f, pop.T2 / mean_f, pop.T4 / mean_f),
                             activation=network.activation, threshold=network.threshold)


def sigmoid_biased_step1(X_biased, n_hidden: int, threshold: float, *, activation: str = "sigmoid",
                         scale: float = 1.0, method: str = "power", rng=None, **options) -> Step1Result:
    """Theorem 13: Step 1 on f-biased samples (directions exact up to the sampling error).

    Parameters
    ----------
    X_biased : array (m, n)
        Rows from the biased oracle (e.g. :meth:`RejectionOracle.sample`).
    n_hidden : int
    threshold : float
        ``t`` (Theorem 13: ``t = Omega(log d)``).
    activation : str, default "sigmoid"
    scale : float, default 1
        ``E[f]`` if known (then ``coefficients`` estimate the ``c_i``); otherwise the coefficients are
        ``c_i scale / E[f]``.
    method : {"power", "landscape", "simultaneous"}
    rng : None, int or Generator
    **options
        Passed to the Step 1 route.
    """
    return step1(biased_moments(X_biased, activation, threshold, scale=scale), n_hidden, method=method, rng=rng,
                 **options)


register("goel2019-theorem13", paper="goel2019", algorithm="Appendix B.6, Theorem 13", target=sigmoid_biased_step1,
         assumptions=("x ~ N(0, I)", "u = sigmoid, t = Omega(log d)", "f >= 0", "oracle: samples kept w.p. ~ f(x)",
                      "P: positive linear part (Assumption 1)"),
         description="Step 1 on f-biased samples (E_bias[h] = E[f h]/E[f]); RejectionOracle simulates the oracle")
