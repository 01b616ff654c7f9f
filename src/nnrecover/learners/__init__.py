"""Learners: one package per paper (plus the baseline); each algorithm is also a plain function.

Every estimator follows scikit-learn conventions (no logic in ``__init__``, fitted attributes with a
trailing underscore, ``random_state``); :func:`available` lists every registered algorithm.

=================================  ===================  ==================================================
estimator                          package              paper
=================================  ===================  ==================================================
:class:`HermiteTensorLearner`      :mod:`.awasthi2021`  Awasthi, Tang, Vijayaraghavan 2021
:class:`PureNeuronLearner`         :mod:`.ge2019`       Ge, Kuditipudi, Li, Wang 2019
:class:`ExactReLULearner`,         :mod:`.bakshi2019`   Bakshi, Jayaram, Woodruff 2019
:class:`NoisyReLULearner`
:class:`HighThresholdLearner`      :mod:`.goel2019`     Goel, Panigrahy 2019
:class:`GradientDescentLearner`    :mod:`.baseline`     none: random starts and the shared refinement
=================================  ===================  ==================================================

:func:`available` and :func:`get_learner` (:mod:`.lookup`) find a learner by its registry name
(:mod:`.registry`); :mod:`.width` chooses ``n_hidden="auto"``.
"""

from __future__ import annotations

from .awasthi2021 import HermiteTensorLearner
from .bakshi2019 import ExactReLULearner, NoisyReLULearner
from .base import BaseLearner
from .baseline import GradientDescentLearner
from .ge2019 import PureNeuronLearner
from .goel2019 import HighThresholdLearner
from .lookup import available, get_learner, learner_parameters, make_learner
from .registry import PAPERS, AlgorithmRecord, register

__all__ = ["available", "register", "AlgorithmRecord", "get_learner", "make_learner", "learner_parameters",
           "PAPERS", "BaseLearner",
           "GradientDescentLearner", "HermiteTensorLearner", "PureNeuronLearner", "ExactReLULearner",
           "NoisyReLULearner", "HighThresholdLearner"]
