"""Registry of every algorithm nnrecover implements (``nnrecover.learners.available()``)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AlgorithmRecord", "register", "available", "resolve_name", "PAPERS", "PAPER_PREFIXES"]

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

#: Short prefixes that scripts written for earlier releases use in registry names (``atv21-algorithm1``
#: is ``awasthi2021-algorithm1``). Every name registered under a paper's prefix answers to the short one
#: too, so those scripts keep working while the listings show one name per paper.
PAPER_PREFIXES = {"awasthi2021": "atv21", "ge2019": "ge19", "bakshi2019": "bjw19"}


def legacy_aliases(name: str, extra=()) -> tuple:
    """The other names ``name`` answers to: its short-prefix form (see :data:`PAPER_PREFIXES`) and ``extra``."""
    out = list(extra)
    for paper, short in PAPER_PREFIXES.items():
        if name.startswith(paper + "-"):
            out.append(short + name[len(paper):])
    return tuple(out)


@dataclass(frozen=True)
class AlgorithmRecord:
    """One registered algorithm.

    Attributes
    ----------
    name : str            unique short name (``"hermite-tensor"``, ``"atv21-algorithm2"``...)
    paper : str           key of :data:`PAPERS`
    algorithm : str       the paper's own label, e.g. ``"Algorithm 5"``, ``"Theorem 6"``, ``"Section 8"``
    assumptions : tuple   human-readable assumptions, e.g. ``("x ~ N(0, I)", "m <= d")``
    target : object       the class or function that implements it
    description : str     one line
    is_learner : bool     True for estimators usable by ``nnrecover fit`` (``fit(X, Y) -> network_``)
    aliases : tuple       other names the record answers to (:func:`resolve_name`), never listed
    """

    name: str
    paper: str
    algorithm: str
    assumptions: tuple = ()
    target: object = field(default=None, compare=False)
    description: str = ""
    is_learner: bool = False
    aliases: tuple = field(default=(), compare=False)


_RECORDS: dict[str, AlgorithmRecord] = {}


_ALIASES: dict[str, str] = {}


def register(name: str, *, paper: str, algorithm: str, target, assumptions=(), description: str = "",
             is_learner: bool = False, aliases=()) -> AlgorithmRecord:
    """Add an algorithm to the registry (called at import time by each learner module).

    ``aliases`` are further names the record answers to (besides the short-prefix form of
    :data:`PAPER_PREFIXES`); lookups accept them, listings show ``name`` only.
    """
    if paper not in PAPERS:
        raise ValueError(f"unknown paper key {paper!r}; use one of {sorted(PAPERS)}")
    rec = AlgorithmRecord(name, paper, algorithm, tuple(assumptions), target, description, is_learner,
                          legacy_aliases(name, aliases))
    old = _RECORDS.get(name)
    if old is not None and old.target is not target:
        raise ValueError(f"algorithm name {name!r} registered twice")
    for alias in rec.aliases:
        if _ALIASES.get(alias, name) != name or alias in _RECORDS:
            raise ValueError(f"alias {alias!r} of {name!r} is already a name")
        _ALIASES[alias] = name
    _RECORDS[name] = rec
    return rec


def resolve_name(name: str) -> str:
    """The registered name that ``name`` (a name or an alias) stands for; unknown names come back as given."""
    from . import _load_all

    _load_all()
    return _ALIASES.get(name, name)


def available(paper: str | None = None, *, learners_only: bool = False) -> list[AlgorithmRecord]:
    """Every registered algorithm (optionally of one paper, or only the estimators).

    Parameters
    ----------
    paper : str, optional
        A key of :data:`PAPERS`; an unknown key raises :class:`~nnrecover.errors.InputError`.
    learners_only : bool, default False
        Only the estimators usable by ``nnrecover fit``.

    Returns
    -------
    list of AlgorithmRecord
        Sorted by paper, then name.
    """
    from ..errors import InputError
    from . import _load_all

    if paper is not None and paper not in PAPERS:
        raise InputError(f"unknown paper {paper!r}; known: {', '.join(sorted(PAPERS))}.")

    _load_all()
    out = [r for r in _RECORDS.values() if (paper is None or r.paper == paper)
           and (not learners_only or r.is_learner)]
    return sorted(out, key=lambda r: (r.paper, r.name))
