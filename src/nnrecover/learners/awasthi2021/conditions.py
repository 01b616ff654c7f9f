"""The conditions under which :class:`HermiteTensorLearner` refuses a width, in the user's terms.

One source for the learner and for :func:`nnrecover.check` (its ``hermite-tensor`` verdict): the tensor
order ``l`` sets how many units Awasthi et al.'s algorithms can tell apart with ``d`` inputs
(Theorem 3.1 for ``l = 1``, Theorem 3.2 and Corollary 3.3 for ``l = 2``).
"""

from __future__ import annotations

import math
from typing import Any

from ...errors import AssumptionError, InputError

__all__ = ["order_limit", "check_order"]


def order_limit(d: int, order: int) -> int:
    """Largest ``m`` the learner accepts at order ``l``: ``d`` for ``l = 1`` (full rank, Theorem 3.1);
    ``floor(0.9 C(d + 1, 2))`` for ``l = 2`` (``{w_i^{(x)2}}`` must be robustly independent, which needs
    ``m <= C(d + 1, 2)``; Corollary 3.3 needs ``m <= (1 - delta) C(d + l - 1, l)``)."""
    if order == 1:
        return int(d)
    return int(math.floor(0.9 * math.comb(d + order - 1, order)))


def check_order(order: Any, m: int, d: int) -> int:
    """The tensor order ``l`` for ``m`` hidden units and ``d`` inputs (``"auto"``: 1 when ``m <= d``, else 2),
    or the refusal when ``m`` exceeds what that order supports (:func:`order_limit`)."""
    if order == "auto":
        order = 1 if m <= d else 2
    if order not in (1, 2):
        raise InputError(f"order must be 'auto', 1 or 2, got {order!r}.")
    limit = order_limit(d, order)
    if m > limit:
        if order == 1:
            raise AssumptionError(
                f"order 1 is the full-rank setting of Awasthi et al. 2021 (Theorem 3.1: s_m(W) > 0 needs "
                f"m <= d), but n_hidden = {m} > d = {d}; use order=2 (overcomplete, m up to {order_limit(d, 2)}).")
        raise AssumptionError(
            f"order 2 needs {{w_i (x) w_i}} linearly independent, robustly (Theorem 3.2 / Corollary 3.3: "
            f"m <= (1 - delta) C(d+1, 2)); supported up to 0.9 C(d+1, 2) = {limit} for d = {d}, got "
            f"n_hidden = {m}.")
    return int(order)
