"""Base class of every nnrecover learner (scikit-learn conventions).

A learner is a thin estimator around an algorithm function (one algorithm, one function; one estimator
wraps it, as scikit-learn's ``fastica`` and ``FastICA``). :class:`BaseLearner` supplies what they share:

* scikit-learn API: ``__init__`` only stores its keyword arguments (``get_params``/``set_params``/
  ``clone`` come from :class:`sklearn.base.BaseEstimator`; an unknown keyword is a ``TypeError`` at
  construction and a ``ValueError`` in ``set_params``), fitted attributes end with ``_``,
  ``random_state`` is turned into a Generator by :func:`nnrecover._validation.check_random_state`
  inside ``fit``, ``predict`` before ``fit`` raises :class:`nnrecover.errors.NotFittedError` (a subclass
  of scikit-learn's), ``score`` is R^2 (:class:`sklearn.base.RegressorMixin`).
* data: ``fit(X, Y)`` accepts arrays (numpy, memory maps, dask) and ``fit(data)`` any data source of
  :func:`nnrecover.data.as_data_source` (an iterable of ``(X, Y)`` chunks such as
  :class:`nnrecover.SampleStream`, a one-pass iterator, ``.npy`` paths); the subclass receives a
  validated :class:`~nnrecover.data.DataSource`.
* population mode: ``fit_population(truth)`` runs the same algorithm on exact population moments
  (subclasses that support it set ``_supports_population = True`` and implement ``_fit_population``).
* refinement convention: learners built on a provable algorithm take ``refine=True|False`` (and
  optionally ``refine_options``, keyword arguments of :func:`nnrecover.refine.refine_network`);
  :meth:`BaseLearner._maybe_refine` polishes the provable estimate, keeps the better of the two on
  held-out data, and records what ran in ``diagnostics_["refinement"]``.
* certificates: :meth:`BaseLearner._certify` records a self-check in ``diagnostics_["certificates"]``;
  a failed check raises :class:`~nnrecover.errors.ConvergenceError` when the learner's ``strict`` is
  True, else warns with :class:`~nnrecover.errors.CertificateWarning`.

Subclass contract
-----------------
``__init__(self, n_hidden, *, ..., random_state=None)`` storing every argument unchanged;
a ``_parameter_constraints`` table declaring what each hyper-parameter accepts (checked in one place,
numpy scalars included); ``_check_params(self)`` only for rules that relate several parameters (call
``super()._check_params()`` first); ``_fit(self, source, rng, diagnostics)`` returning
the learned :class:`~nnrecover.TwoLayerNetwork` (and filling the ``diagnostics`` dict); optionally
``_fit_population(self, truth, rng, diagnostics, **kwargs)``.
"""

from __future__ import annotations

import numbers
import time
import warnings
from contextlib import nullcontext
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin

from .._threads import blas_threads
from .._validation import (
    Interval,
    Options,
    as_2d_float,
    check_random_state,
    validate_params,
)
from ..data import as_data_source, known_finite
from ..data.checks import check_magnitude, coerce_array, is_single_array
from ..errors import CertificateWarning, ConvergenceError, InputError, NotFittedError
from ..network import TwoLayerNetwork
from ..refine import refine_network
from .width import choose_width, is_auto, search_width

__all__ = ["BaseLearner", "REFINE_OPTIONS"]

REFINE_OPTIONS = ("method", "max_samples", "holdout_fraction", "max_iter", "tol", "train", "jacobian_memory", "span",
                  "full_samples")
"""Keys accepted in a learner's ``refine_options`` (keyword arguments of ``refine_network``)."""


class BaseLearner(RegressorMixin, BaseEstimator):
    """Base class of nnrecover's scikit-learn style learners (see the module docstring).

    Attributes (after ``fit``)
    --------------------------
    network_ : TwoLayerNetwork
        The learned network.
    hidden_weights_ : ndarray of shape (n_hidden, n_features_in_)
        Its hidden weights (every learner; some learners recover only these).
    n_features_in_ : int
        ``d``, the number of input columns seen in ``fit``.
    n_outputs_ : int
        ``p``.
    diagnostics_ : dict
        Certificates, timings (``fit_time``), which refinement ran (``refinement``), and what the
        algorithm reports.
    """

    _supports_population = False
    #: whether the certificates of ``diagnostics_["certificates"]`` fail when a unit is missing, so that
    #: ``n_hidden="auto"`` may fit every width of an unsure range and keep the first that passes
    #: (:func:`nnrecover.learners.width.search_width`)
    _width_by_certificates = False

    # ------------------------------------------------------------------ hooks for subclasses
    #: Hyper-parameter name -> list of accepted alternatives (see :func:`nnrecover._validation.validate_params`).
    #: Each subclass declares its own table; :meth:`_check_params` checks the union over the class
    #: hierarchy, so the shared parameters below are declared once.
    _parameter_constraints: dict = {
        "n_hidden": [Interval(numbers.Integral, 1, None), Options("auto")],
        "refine": ["boolean"],
        "strict": ["boolean"],
        "refine_options": [None, dict],
        "random_state": ["random_state"],
    }

    @classmethod
    def _all_parameter_constraints(cls) -> dict:
        table: dict = {}
        for klass in reversed(cls.__mro__):
            table.update(klass.__dict__.get("_parameter_constraints", {}))
        return table

    def _check_params(self) -> None:
        """Check every hyper-parameter against the constraint tables, then the relations between them.

        Subclasses whose parameters constrain each other override this, call ``super()._check_params()``
        first and add only the cross-parameter rules (a single parameter's range belongs in the table).
        """
        validate_params(self.get_params(deep=False), self._all_parameter_constraints(), type(self).__name__)
        if getattr(self, "refine_options", None) is not None:
            self._refine_kwargs()

    def _fit(self, source, rng: np.random.Generator, diagnostics: dict) -> TwoLayerNetwork:
        """Run the algorithm on a validated data source; return the learned network."""
        raise InputError(f"{type(self).__name__} does not implement fitting from samples.")

    def _fit_population(self, truth: TwoLayerNetwork, rng: np.random.Generator, diagnostics: dict,
                        **kwargs) -> TwoLayerNetwork:
        raise InputError(f"{type(self).__name__} has no population mode; fit it on samples.")

    # ------------------------------------------------------------------ public API
    def fit(self, X, Y=None) -> "BaseLearner":
        """Learn a network from samples.

        Parameters
        ----------
        X : array of shape (n, d), or a data source
            Inputs; or, with ``Y=None``, any data source of
            :func:`nnrecover.data.as_data_source`: an iterable of ``(X, Y)`` chunks (e.g.
            :func:`nnrecover.sample_stream`), a one-pass iterator, a tuple ``(X, Y)``, dask arrays.
        Y : array of shape (n,) or (n, p), optional
            Targets (required unless ``X`` carries them).

        Returns
        -------
        self

        Notes
        -----
        The fit runs its BLAS calls on one thread and its chunk passes on worker threads (as many as
        BLAS threads the caller allows; the result is the same bits for any number), and restores the
        caller's BLAS/OpenMP thread settings when it returns or raises (``nnrecover._threads``).
        """
        t0 = time.perf_counter()
        # one BLAS thread for the per-chunk products and small dense solves, the caller's setting back
        # afterwards; the chunk passes use the cores through worker threads (nnrecover._threads)
        with blas_threads(1):
            auto = is_auto(getattr(self, "n_hidden", None))
            # with n_hidden="auto" the other parameters are validated on a copy with a placeholder width
            (self._with_width(1) if auto else self)._check_params()
            rng = check_random_state(self.random_state)
            source = self._validate_fit_data(X, Y)
            self._clear_fitted()
            # arrays whose every entry the magnitude check found finite: the passes need not check again
            finite = known_finite(*source.checked_finite) if getattr(source, "checked_finite", ()) else nullcontext()
            diagnostics: dict = {}
            runner = self
            if auto:
                source.require_reiterable("n_hidden='auto'")
                k, diagnostics["width"] = choose_width(self, source)
                runner = self._with_width(k)
            with finite:
                if auto and "candidates" in diagnostics["width"]:
                    # the spectrum left a range of widths: the learner's certificates pick one (search_width)
                    runner, network, diagnostics, k = search_width(self, source, diagnostics["width"])
                else:
                    network = runner._fit(source, rng, diagnostics)
            if auto:  # attributes the algorithm set on the copy (e.g. provable_network_)
                for name, value in vars(runner).items():
                    if name.endswith("_") and not name.startswith("_"):
                        setattr(self, name, value)
                self.n_hidden_ = k
            self._set_fitted(network, diagnostics, t0)
        return self

    def _with_width(self, k: int) -> "BaseLearner":
        """A copy of this learner with ``n_hidden = k`` (the estimator itself keeps "auto")."""
        from sklearn.base import clone  # deferred: scikit-learn is slow to import

        return clone(self).set_params(n_hidden=int(k))

    def fit_population(self, truth: TwoLayerNetwork, **kwargs) -> "BaseLearner":
        """Run the same algorithm on exact population moments of ``truth``; returns self.

        Only learners whose paper gives exact moments support this (see the learner's docstring);
        with exact moments the result equals the teacher up to its symmetries, to round-off.
        """
        t0 = time.perf_counter()
        if not self._supports_population:
            raise InputError(f"{type(self).__name__} has no population mode; fit it on samples.")
        if is_auto(getattr(self, "n_hidden", None)):
            raise InputError("n_hidden='auto' reads the width from samples; population mode needs n_hidden given "
                             "(the teacher's width).")
        with blas_threads(1):  # as in fit: small dense algebra, one BLAS thread, caller's setting restored
            self._check_params()
            if not isinstance(truth, TwoLayerNetwork):
                raise InputError(f"truth must be a TwoLayerNetwork, got {type(truth).__name__}.")
            rng = check_random_state(self.random_state)
            self._clear_fitted()
            diagnostics: dict = {"population": True}
            network = self._fit_population(truth, rng, diagnostics, **kwargs)
            self._set_fitted(network, diagnostics, t0)
        return self

    def predict(self, X) -> np.ndarray:
        """Outputs of the learned network: shape (n,) for one output, else (n, p)."""
        self._check_fitted()
        X = as_2d_float(coerce_array(X, "X", is_X=True), "X")
        if X.shape[1] != self.n_features_in_:
            raise InputError(f"X has {X.shape[1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input.")
        return self.network_.predict(X)

    # ------------------------------------------------------------------ helpers
    def _validate_fit_data(self, X, Y):
        """Normalise ``fit``'s arguments to a DataSource that has targets and a known ``d``.

        In-memory arrays get scikit-learn's checks and messages (sparse, complex, object dtype, 1-D X,
        zero features or samples); memory maps and dask arrays are checked by metadata only and their
        values chunk by chunk while they are read (:mod:`nnrecover.data`). Numpy arrays and
        memory maps are also checked for a magnitude the algorithms can compute with
        (:func:`check_magnitude`), unless the learner sets ``_rescales_data = True`` (it rescales the
        data exactly itself, as :class:`~nnrecover.learners.GradientDescentLearner` does).
        """
        name = type(self).__name__
        if Y is None and isinstance(X, tuple) and len(X) == 2 and all(isinstance(a, np.ndarray) for a in X):
            X, Y = X  # a tuple of two arrays is fit(X, Y): the same checks, and the passes skip re-checking
        if Y is not None or is_single_array(X):
            X = coerce_array(X, "X", is_X=True)
            if Y is None:
                raise InputError(f"{name} requires y to be passed, but the target y is None; call fit(X, Y), "
                                 "or fit(data) with an iterable of (X, Y) chunks.")
            Y = coerce_array(Y, "Y", is_X=False)
            checked = ()
            if not getattr(self, "_rescales_data", False):
                if check_magnitude(X, "X", name) and check_magnitude(Y, "Y", name):
                    checked = (X, Y)
        source = as_data_source(X, Y)
        if Y is not None and checked:
            source.checked_finite = checked
        if source.info.n_outputs == 0:
            raise InputError(f"{name} requires y to be passed, but the target y is None; pass chunks (X, Y) "
                             "with Y not None.")
        if source.info.n_samples == 0:
            raise InputError(f"{name}.fit got no samples.")
        return source

    def _clear_fitted(self) -> None:
        for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("_")]:
            delattr(self, name)

    def _set_fitted(self, network: TwoLayerNetwork, diagnostics: dict, t0: float) -> None:
        if not isinstance(network, TwoLayerNetwork):  # pragma: no cover - a subclass bug
            raise TypeError(f"{type(self).__name__}._fit must return a TwoLayerNetwork.")
        self.network_ = network
        self.hidden_weights_ = network.hidden_weights
        self.n_features_in_ = network.n_inputs
        self.n_outputs_ = network.n_outputs
        diagnostics.setdefault("refinement", {"ran": False, "reason": "this learner has no refinement step"})
        diagnostics["fit_time"] = time.perf_counter() - t0
        self.diagnostics_ = diagnostics

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "network_")

    def _check_fitted(self) -> None:
        if not self.__sklearn_is_fitted__():
            raise NotFittedError(f"this {type(self).__name__} instance is not fitted yet; call fit(X, Y) first.")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        tags.input_tags.allow_nan = False
        return tags

    # ------------------------------------------------------------------ refinement convention
    def _refine_kwargs(self) -> dict:
        opts = getattr(self, "refine_options", None)
        if opts is None:
            return {}
        if not isinstance(opts, dict):
            raise InputError(f"refine_options must be a dict of refine_network keyword arguments or None, "
                             f"got {type(opts).__name__}.")
        unknown = sorted(set(opts) - set(REFINE_OPTIONS))
        if unknown:
            raise InputError(f"unknown refine_options {unknown}; allowed: {list(REFINE_OPTIONS)}.")
        return dict(opts)

    def _maybe_refine(self, start: TwoLayerNetwork, source, rng: np.random.Generator,
                      diagnostics: dict) -> TwoLayerNetwork:
        """Polish ``start`` with :func:`nnrecover.refine.refine_network` when ``self.refine`` is True.

        The refinement keeps the better of ``{start, refined}`` on held-out rows; what ran is recorded
        in ``diagnostics["refinement"]`` (``{"ran": False, "reason": ...}`` when it did not). A one-pass
        iterator already consumed by the algorithm cannot be read again: refinement is then skipped
        with a warning.
        """
        if not getattr(self, "refine", False):
            diagnostics["refinement"] = {"ran": False, "reason": "refine=False"}
            return start
        if source is None:
            diagnostics["refinement"] = {"ran": False, "reason": "no samples (population mode)"}
            return start
        if not source.info.reiterable:
            warnings.warn(f"{type(self).__name__}: the data came as a one-pass iterator, so the refinement "
                          "step could not read it again and was skipped; pass arrays or a re-iterable "
                          "stream to refine.", UserWarning, stacklevel=3)
            diagnostics["refinement"] = {"ran": False, "reason": "one-pass iterator"}
            return start

        result = refine_network(start, source, rng=rng, **self._refine_kwargs())
        diagnostics["refinement"] = result.as_dict()
        return result.network

    # ------------------------------------------------------------------ certificates
    def _certify(self, name: str, passed: bool, detail: Any, diagnostics: dict) -> bool:
        """Record a self-check; on failure raise (``strict=True``) or warn (:class:`CertificateWarning`)."""
        diagnostics.setdefault("certificates", {})[name] = {"passed": bool(passed), "detail": detail}
        if not passed:
            msg = f"{type(self).__name__}: certificate {name!r} failed ({detail})."
            if getattr(self, "strict", False):
                raise ConvergenceError(msg + " Set strict=False to get the estimate anyway.")
            warnings.warn(msg + " The estimate may be wrong.", CertificateWarning, stacklevel=3)
        return bool(passed)
