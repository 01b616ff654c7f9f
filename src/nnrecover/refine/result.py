"""The result of a refinement (:class:`RefineResult`): what ran, on which rows, and which estimate was kept."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..network import TwoLayerNetwork


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
