"""Hardness and lower bounds as builders with checkers (Section 3: Theorem 2, Props 1-2; Lemma 16).

NP-hardness chain (Theorem 2, Propositions 1-2): reversible 6-SAT (Definition 4, Prop 1) -> ReLU-separability
(Definition 5, Prop 2) -> "is there V with α f(V X) = A" (Theorem 2, k = 2, α fixed or variable).
Every map here is constructive and comes with a checker, so tests can verify on tiny formulas that a
satisfying assignment gives an exact network and, by brute force over ``{±1}^n``, that the equivalence
holds both ways.

Formulas are lists of clauses, each a tuple of non-zero ints (DIMACS style: ``+i`` is ``u_i``, ``-i`` is
``ū_i``, variables 1..n_vars). Definition 4 uses exactly 6 literals per clause.

Reduction (Prop 2; d = n_vars + 2):

* ``Q`` gets ``e_i`` and ``-e_i`` for every variable (forces ``{x_i, y_i} = {1, -1}``), ``e_{n+1}``,
  ``e_{n+2}``, ``-2 e_{n+1}``, ``-2 e_{n+2}`` (forces ``(x_j, y_j) ∈ {(1, -1/2), (-1/2, 1)}``) and
  ``e_{n+1} + e_{n+2}`` (forces ``x_{n+1} + x_{n+2} = 1/2 = y_{n+1} + y_{n+2}``);
* every clause ``l_1 ∨ ... ∨ l_6`` (``sum of ±x ≥ -5``) gives ``p ∈ P`` with ``-sign(l)`` on its variables
  and ``-10`` at coordinates n+1, n+2: ``p·x = -(sum) - 5 <= 0``. The same ``p`` applied to ``y = -x``
  encodes the reversed clause, so the instance encodes ``ψ ∧ ψ̄``; formulas are taken closed under
  reversal (the paper's WLOG; :func:`close_under_reversal`).

Theorem 2: ``α = [1, 1]``, ``X = [p_1..p_r, q_1..q_s]`` (d x (r+s)), ``A = [0 (r times), 1 (s times)]``,
``V = [x, y]^T`` (2 x d; the paper writes R^{(r+s) x 2}, erratum 4). Variable ``α``: ``X' = [[X, 0, 0],
[0, 1, -1]]``, ``A' = [A, 1, 1]`` (r+s+2 columns; the paper writes r+s+4), ``V' = [[x, 1], [y, -1]]``.

Lemma 16 (sample lower bound n = Ω(κ(V*))): ``U^i = (√(1+(a^i)^2)/2) [1, 1]``,
``V^i = [[1, a^i], [1, -a^i]] / √(1+(a^i)^2)`` with ``a^i = i a`` (the paper's second instance has ``a``
instead of ``2a`` in its first row, erratum 4); ``U^i f(V^i x) = (f(x_1 + a^i x_2) + f(x_1 - a^i x_2))/2``
equals ``x_1`` or 0 when ``|x_1| > 2a|x_2|``, for both instances.
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence

import numpy as np

from ..._validation import check_positive_int
from ...errors import InputError
from ...network import TwoLayerNetwork

__all__ = ["check_formula", "close_under_reversal", "is_satisfied", "brute_force_sat",
           "sat_to_relu_separability", "is_relu_separated", "assignment_to_separator", "separator_to_assignment",
           "separability_to_network", "separability_to_network_variable_alpha", "check_network_instance",
           "brute_force_separability", "lemma16_instances", "lemma16_equal_outputs"]


def check_formula(clauses: Any, n_vars: int, *, width: int | None = 6) -> list[tuple[int, ...]]:
    """Validate a CNF: clauses of non-zero ints in ``[-n_vars, n_vars]`` (exactly ``width`` literals)."""
    n = check_positive_int(n_vars, "n_vars")
    out = []
    for c in clauses:
        lits = tuple(int(l) for l in c)
        if width is not None and len(lits) != width:
            raise InputError(f"clause {lits} has {len(lits)} literals; Definition 4 uses exactly {width}.")
        if any(l == 0 or abs(l) > n for l in lits):
            raise InputError(f"clause {lits} has a literal outside ±1..±{n} (DIMACS style, no 0).")
        out.append(lits)
    if not out:
        raise InputError("the formula has no clause.")
    return out


def close_under_reversal(clauses: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    """``ψ ∧ ψ̄``: add every clause with all literals negated (so that ψ is reversible, Definition 4)."""
    seen, out = set(), []
    for c in clauses:
        for cl in (tuple(c), tuple(-l for l in c)):
            key = tuple(sorted(cl))
            if key not in seen:
                seen.add(key)
                out.append(cl)
    return out


def is_satisfied(clauses: Sequence[Sequence[int]], assignment: Sequence[bool]) -> bool:
    """Whether the boolean ``assignment`` (index i-1 for variable i) satisfies every clause."""
    a = [bool(v) for v in assignment]
    return all(any(a[abs(l) - 1] == (l > 0) for l in c) for c in clauses)


def brute_force_sat(clauses: Sequence[Sequence[int]], n_vars: int) -> list[tuple[bool, ...]]:
    """All satisfying assignments (2^n_vars enumeration; tiny formulas only)."""
    return [a for a in itertools.product((False, True), repeat=n_vars) if is_satisfied(clauses, a)]


def sat_to_relu_separability(clauses: Any, n_vars: int) -> tuple[np.ndarray, np.ndarray]:
    """Prop 2: the point sets ``P`` (r, d) and ``Q`` (s, d), d = n_vars + 2, of the ReLU-separability
    instance equivalent to the reversible 6-CNF ``clauses`` (module docstring)."""
    cl = check_formula(clauses, n_vars)
    n = n_vars
    d = n + 2
    Q = []
    for i in range(n):
        e = np.zeros(d)
        e[i] = 1.0
        Q += [e, -e]
    a, b = np.zeros(d), np.zeros(d)
    a[n], b[n + 1] = 1.0, 1.0
    Q += [a, b, -2 * a, -2 * b, a + b]
    P = []
    for c in cl:
        p = np.zeros(d)
        for l in c:
            p[abs(l) - 1] -= np.sign(l)
        p[n] = p[n + 1] = -10.0
        P.append(p)
    return np.array(P), np.array(Q)


def is_relu_separated(P: np.ndarray, Q: np.ndarray, x: np.ndarray, y: np.ndarray, *, tol: float = 1e-12) -> bool:
    """Definition 5: ``p·x <= 0``, ``p·y <= 0`` for p in P and ``f(q·x) + f(q·y) = 1`` for q in Q."""
    relu = lambda t: np.maximum(t, 0.0)  # noqa: E731
    return bool(np.all(P @ x <= tol) and np.all(P @ y <= tol)
                and np.all(np.abs(relu(Q @ x) + relu(Q @ y) - 1.0) <= tol))


def assignment_to_separator(assignment: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """The ``(x, y)`` of a boolean assignment: ``x_i = ±1`` (true = +1), ``y = -x`` on the variables,
    ``(x_{n+1}, x_{n+2}) = (1, -1/2)``, ``(y_{n+1}, y_{n+2}) = (-1/2, 1)``."""
    v = np.where(np.asarray(assignment, dtype=bool), 1.0, -1.0)
    x = np.concatenate([v, [1.0, -0.5]])
    y = np.concatenate([-v, [-0.5, 1.0]])
    return x, y


def separator_to_assignment(x: np.ndarray, n_vars: int) -> tuple[bool, ...]:
    """Read the assignment off a separator: variable i is true iff ``x_i > 0`` (``x_i ∈ {±1}``)."""
    return tuple(bool(v > 0) for v in np.asarray(x)[:n_vars])


def separability_to_network(P: np.ndarray, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Theorem 2 (α fixed): ``α = [1, 1]``, ``X = [P; Q]^T`` as samples (rows here), ``A = [0..0, 1..1]``.

    Returns ``alpha`` (1, 2), ``X`` (r+s, d) (rows are samples), ``A`` (r+s,). A ``V = [x, y]^T`` gives
    ``α f(V X) = A`` iff ``(x, y)`` ReLU-separates ``(P, Q)``.
    """
    X = np.vstack([P, Q])
    A = np.concatenate([np.zeros(P.shape[0]), np.ones(Q.shape[0])])
    return np.array([[1.0, 1.0]]), X, A


def separability_to_network_variable_alpha(P: np.ndarray, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Theorem 2 with α a variable: ``X'`` (r+s+2, d+1) rows ``[x_j, 0]`` plus ``[0, 1]`` and ``[0, -1]``,
    ``A' = [A, 1, 1]`` (the paper's r+s+4 is a typo). ``V' = [[x, 1], [y, -1]]`` with ``α = [1, 1]``."""
    _, X, A = separability_to_network(P, Q)
    d = X.shape[1]
    Xp = np.vstack([np.hstack([X, np.zeros((X.shape[0], 1))]),
                    np.concatenate([np.zeros(d), [1.0]]), np.concatenate([np.zeros(d), [-1.0]])])
    return Xp, np.concatenate([A, [1.0, 1.0]])


def check_network_instance(alpha: np.ndarray, X: np.ndarray, A: np.ndarray, V: np.ndarray, *,
                           tol: float = 1e-12) -> bool:
    """Whether ``α f(V X) = A`` holds (samples are rows of ``X``): the network-fitting certificate."""
    net = TwoLayerNetwork(V, None, np.atleast_2d(alpha))
    return bool(np.max(np.abs(net.predict(X) - np.asarray(A))) <= tol)


def brute_force_separability(P: np.ndarray, Q: np.ndarray, n_vars: int) -> list[tuple[bool, ...]]:
    """Assignments whose separator (:func:`assignment_to_separator`, and its tail-swapped variant)
    ReLU-separates ``(P, Q)`` (2^n_vars enumeration)."""
    out = []
    for a in itertools.product((False, True), repeat=n_vars):
        x, y = assignment_to_separator(a)
        if is_relu_separated(P, Q, x, y) or is_relu_separated(P, Q, y, x):
            out.append(a)
    return out


def lemma16_instances(a: float) -> tuple[TwoLayerNetwork, TwoLayerNetwork]:
    """Lemma 16: two networks (k = 2, m = 1, d = 2) with ``a^1 = a``, ``a^2 = 2a`` and κ(V^1) = 1/a."""
    a = float(a)
    if not (0 < a <= 1):
        raise InputError(f"a must be in (0, 1], got {a!r}.")
    nets = []
    for i in (1, 2):
        ai = i * a
        s = np.sqrt(1 + ai * ai)
        nets.append(TwoLayerNetwork(np.array([[1.0, ai], [1.0, -ai]]) / s, None, np.array([[s / 2, s / 2]])))
    return nets[0], nets[1]


def lemma16_equal_outputs(X: Any, a: float, *, tol: float = 1e-12) -> bool:
    """Whether the two Lemma 16 instances give the same outputs on every sample of ``X`` (n, 2)."""
    X = np.asarray(X, dtype=np.float64)
    n1, n2 = lemma16_instances(a)
    return bool(np.max(np.abs(n1.predict(X) - n2.predict(X))) <= tol)
