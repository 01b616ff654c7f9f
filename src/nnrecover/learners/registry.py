"""Registry of every algorithm nnrecover implements (listed by ``nnrecover.learners.available()``).

Each learner module registers its algorithms at import time with :func:`register`; the package face
:mod:`nnrecover.learners` imports every module, so that its ``available()`` sees them all.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AlgorithmRecord", "register", "registered", "PAPERS"]

PAPERS = {
    "awasthi2021": "Awasthi, Tang, Vijayaraghavan. Efficient Algorithms for Learning Depth-2 Neural "
                   "Networks with General ReLU Activations. NeurIPS 2021.",
    "ge2019": "Ge, Kuditipudi, Li, Wang. Learning Two-Layer Neural Networks with Symmetric Inputs. ICLR 2019.",
    "bakshi2019": "Bakshi, Jayaram, Woodruff. Learning Two Layer Rectified Neural Networks in Polynomial "
                  "Time. COLT 2019.",
    "goel2019": "Goel, Panigrahy. Recovering the Lowest Layer of Deep Networks with High Threshold "
                "Activations. 2019.",
    "baseline": "Baselines (not from a paper).",
}


@dataclass(frozen=True)
class AlgorithmRecord:
    """One registered algorithm.

    Attributes
    ----------
    name : str            unique short name (``"hermite-tensor"``, ``"awasthi2021-algorithm2"``...)
    paper : str           key of :data:`PAPERS`
    algorithm : str       the paper's own label, e.g. ``"Algorithm 5"``, ``"Theorem 6"``, ``"Section 8"``
    assumptions : tuple   human-readable assumptions, e.g. ``("x ~ N(0, I)", "m <= d")``
    target : object       the class or function that implements it
    description : str     one line
    is_learner : bool     True for estimators usable by ``nnrecover fit`` (``fit(X, Y) -> network_``)
    """

    name: str
    paper: str
    algorithm: str
    assumptions: tuple = ()
    target: object = field(default=None, compare=False)
    description: str = ""
    is_learner: bool = False


_RECORDS: dict[str, AlgorithmRecord] = {}


def register(name: str, *, paper: str, algorithm: str, target, assumptions=(), description: str = "",
             is_learner: bool = False) -> AlgorithmRecord:
    """Add an algorithm to the registry (called at import time by each learner module).

    Raises
    ------
    ValueError
        ``paper`` is not a key of :data:`PAPERS`, or ``name`` is taken by another target (programming
        errors in a module of the package, not user errors).
    """
    if paper not in PAPERS:
        raise ValueError(f"unknown paper key {paper!r}; use one of {sorted(PAPERS)}")
    rec = AlgorithmRecord(name, paper, algorithm, tuple(assumptions), target, description, is_learner)
    old = _RECORDS.get(name)
    if old is not None and old.target is not target:
        raise ValueError(f"algorithm name {name!r} registered twice")
    _RECORDS[name] = rec
    return rec


def registered() -> list[AlgorithmRecord]:
    """The records registered so far, in registration order (the modules imported so far)."""
    return list(_RECORDS.values())
