"""BLAS threads and chunk workers: how nnrecover uses the cores without environment variables.

Two facts decide the design:

* The work of every learner is many small or medium dense products (one per chunk of ``m`` rows,
  ``d`` x ``d`` Gram updates, ``d`` x ``k`` solves, Jacobian blocks of the refinement). Multi-threaded
  OpenBLAS splits each of them over its threads and pays a synchronisation per call, and on a shared
  machine its threads wait for each other while a core is taken: with two threads per call the whole
  demo and even a single large ``X.T @ X`` ran several times slower than with one
  (``benchmarks/bench_threads.py``; the numbers are in ``benchmarks/README.md``).
* Results must not depend on the machine's thread count (the same seed gives the same bits on a
  laptop and on CI). A BLAS routine may split a reduction differently for different thread counts.

Hence every public heavy entry point (``BaseLearner.fit`` and ``fit_population``; the chunk passes
of :func:`nnrecover.data.accumulate`) runs its BLAS calls on **one** thread through
:func:`blas_threads`, which restores the caller's setting on exit (also when an exception leaves
the block). The cores are used instead one level up, by running the chunk updates of a pass in
worker threads (:func:`nnrecover.data.iterate_chunks` feeds them; numpy releases the GIL
inside BLAS and most array loops). How many workers is :func:`effective_n_jobs`' answer; the
arithmetic of every statistic is the same for any number of workers, so the result is bit-identical.

No module-level setting is mutated: the caller chooses the parallelism with the ``n_jobs`` argument
of ``accumulate``, or for a whole fit by limiting BLAS before calling it, e.g.
``with threadpoolctl.threadpool_limits(1): learner.fit(X, y)`` runs every pass of that fit in the
calling thread (``n_jobs=None`` follows the caller's BLAS thread count).

Limitation: BLAS thread counts are process-wide (OpenBLAS has one setting per library), so two user
threads that fit at the same time share one setting; each restores what it found on entry.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
from typing import Any, Callable, Iterator, TypeVar

from .errors import InputError

__all__ = ["blas_threads", "effective_n_jobs", "caller_blas_threads", "threads_info"]

F = TypeVar("F", bound=Callable[..., Any])

# (limit in force, the caller's BLAS thread count at the outermost blas_threads) of the current
# context; None outside any blas_threads block. A ContextVar, not a global: each thread and each
# asyncio task sees its own nesting.
_STATE: contextvars.ContextVar[tuple[int, int] | None] = contextvars.ContextVar("nnrecover_blas_threads",
                                                                                default=None)


def _controller():
    # deferred: scipy.linalg brings its own OpenBLAS, imported before the controller so the limit reaches it
    import scipy.linalg  # noqa: F401
    # deferred: threadpoolctl inspects the BLAS libraries when imported
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def _blas_count(controller) -> int:
    counts = [lib.num_threads for lib in controller.lib_controllers if lib.user_api == "blas"]
    return max(counts) if counts else 1


def caller_blas_threads() -> int:
    """BLAS threads the caller allows: its setting at the outermost :func:`blas_threads` block.

    Outside any block, the current setting (the largest over the loaded BLAS libraries; 1 when none
    reports one). ``OMP_NUM_THREADS=1``/``OPENBLAS_NUM_THREADS=1`` or ``threadpool_limits(1)`` around
    a call make it 1.
    """
    state = _STATE.get()
    if state is not None:
        return state[1]
    return _blas_count(_controller())


def _check_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InputError(f"limit must be a positive integer (BLAS threads), got {limit!r}.")
    return int(limit)


@contextlib.contextmanager
def _limited(limit: int) -> Iterator[None]:
    state = _STATE.get()
    if state is not None and state[0] == limit:  # nested at the same limit: nothing to change
        yield
        return
    controller = _controller()
    caller = state[1] if state is not None else _blas_count(controller)
    token = _STATE.set((limit, caller))
    try:
        # BLAS and OpenMP (scikit-learn's libgomp): user_api=None limits every loaded thread pool
        with controller.limit(limits=limit):
            yield
    finally:
        _STATE.reset(token)


class blas_threads:
    """Limit BLAS (and OpenMP) thread pools to ``limit`` threads; restore the caller's on exit.

    A context manager and a decorator. The caller's settings (per library, as threadpoolctl reads
    them) come back when the block ends, also when it ends by an exception. Blocks nest; an inner
    block at the limit already in force costs nothing.

    Parameters
    ----------
    limit : int, default 1
        Threads per BLAS/OpenMP library inside the block.

    Examples
    --------
    >>> import numpy as np
    >>> from nnrecover._threads import blas_threads
    >>> with blas_threads(1):
    ...     G = np.ones((3, 2)).T @ np.ones((3, 2))
    >>> G.tolist()
    [[3.0, 3.0], [3.0, 3.0]]
    """

    def __init__(self, limit: int = 1) -> None:
        self.limit = _check_limit(limit)
        self._stack: list[contextlib.AbstractContextManager] = []

    def __enter__(self) -> "blas_threads":
        cm = _limited(self.limit)
        cm.__enter__()
        self._stack.append(cm)
        return self

    def __exit__(self, *exc: Any) -> bool:
        return bool(self._stack.pop().__exit__(*exc))

    def __call__(self, func: F) -> F:
        @functools.wraps(func)
        def inner(*args: Any, **kwargs: Any) -> Any:
            with blas_threads(self.limit):  # a fresh object per call (recursion, threads)
                return func(*args, **kwargs)

        return inner  # type: ignore[return-value]


def effective_n_jobs(n_jobs: int | None = None) -> int:
    """Number of chunk workers for ``n_jobs`` (scikit-learn / joblib meaning of negative values).

    Parameters
    ----------
    n_jobs : int or None
        ``None``: as many workers as BLAS threads the caller allows (:func:`caller_blas_threads`:
        every core by default, one under ``OMP_NUM_THREADS=1`` or ``threadpool_limits(1)``), at most
        ``os.cpu_count()``. A positive int: that many. ``-1``: every core; ``-k``: ``cpu_count + 1 - k``
        (at least 1).

    Returns
    -------
    int
        At least 1.
    """
    cpus = os.cpu_count() or 1
    if n_jobs is None:
        return max(1, min(cpus, caller_blas_threads()))
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs == 0:
        raise InputError(f"n_jobs must be None, a positive integer or a negative integer (-1: every core), "
                         f"got {n_jobs!r}.")
    return int(n_jobs) if n_jobs > 0 else max(1, cpus + 1 + int(n_jobs))


def threads_info() -> list[dict]:
    """threadpoolctl's description of the loaded BLAS/OpenMP libraries (for benchmark reports)."""
    return _controller().info()
