"""Extraction of a ReLU network from a black box that can be queried but not read.

``nr.extract(model, d)`` recovers ``f(x) = A relu(W x + b) + c`` from queries of ``model``, and with more
than one hidden layer ``f(x) = A relu(W_L ... relu(W_1 x + b_1) ... + b_L) + c`` layer by layer
(:mod:`~nnrecover.extraction.deep`, over the known layers of :mod:`~nnrecover.extraction.stack`, finished
by :mod:`~nnrecover.extraction.last_layer`; the
steps and what they cannot do are on the documentation page "Extracting networks with several hidden
layers"):

* ``method="critical-points"`` (chosen queries; the default): Carlini, Jagielski and Mironov,
  "Cryptanalytic Extraction of Neural Network Models", CRYPTO 2020, for one hidden layer. Exact up to
  the black box's round-off, any width. The paper's steps and the modules that implement them:

  =====================================================  ===============================================
  step                                                   module
  =====================================================  ===============================================
  count queries, enforce the budget, measure the noise   :mod:`~nnrecover.extraction.queries`
  query region of a model with an ``output_range``       :mod:`~nnrecover.extraction.region`
  critical points on lines (Section 4.2)                 :mod:`~nnrecover.extraction.lines`
  weights up to sign from the gradient jump (4.3)        :mod:`~nnrecover.extraction.lines`
  hyperplanes refitted through critical points           :mod:`~nnrecover.extraction.planes`
  output layer by least squares                          :mod:`~nnrecover.extraction.output`
  signs from the linear part (4.4; Canales-Martinez      :mod:`~nnrecover.extraction.signs`,
  et al., EUROCRYPT 2024)                                :mod:`~nnrecover.extraction.lattice`
  the stages in order, certificate on fresh queries      :mod:`~nnrecover.extraction.extractor`
  =====================================================  ===============================================

* ``method="moments"`` (sample-only): Gaussian queries handed to a moment learner of this library,
  followed by its refinement (:mod:`~nnrecover.extraction.moments`).

:func:`extract` (:mod:`~nnrecover.extraction.dispatch`) checks the arguments and runs the route; black
boxes are read from files by :mod:`~nnrecover.extraction.loaders` (scikit-learn ``.skops``, PyTorch
``.safetensors``, ``.onnx``, ``module:function``).

Every query goes through one counter (:class:`~nnrecover.extraction.queries.QueryOracle`);
``max_queries`` is a hard budget (by default :func:`default_budget`, far above what a one-hidden-layer
network needs, so that a search that does not converge stops) and running out raises
:class:`~nnrecover.errors.QueryBudgetError` whose ``partial`` attribute holds what was recovered so far.

What real models give: units that are never active on the searched region (sklearn's "dead" units)
and units whose output weight is exactly zero leave no critical point; they do not change the
function and are reported, not recovered (``diagnostics_["unidentifiable"]``). Inputs that no unit
uses (a zero or 1e-30 column of ``W``, e.g. a constant pixel under an L2 penalty) are recovered as
zero columns. A model that declares ``output_range`` (the loaders' classifiers: the logits their
probabilities determine are exact only while the probabilities do not saturate) is queried on a
region where its outputs stay within it (``input_scale`` chosen, or checked when given; the search
lines are cut where the outputs leave the range).
"""

from __future__ import annotations

from .dispatch import ExtractionResult, default_budget, extract
from .loaders import LoadedModel, load_model

__all__ = ["extract", "ExtractionResult", "default_budget", "load_model", "LoadedModel"]
