"""Scale: the refinement of every learner reaches round-off on noiseless teachers at a cost close to a few
passes over the data (normal equations summed over the outputs, polish in the span of the hidden rows), and
the fallback regressions of the Bakshi learners never end in a numpy traceback."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import nnrecover as nr
from nnrecover.distributions import StandardGaussian
from nnrecover.metrics import parameter_error


@pytest.fixture(scope="module")
def noiseless_multi_output():
    """A ReLU teacher with as many outputs as hidden units (both Bakshi and Ge need ``l >= k``), no biases,
    noiseless labels, plain (not antithetic) Gaussian rows: the moment stage leaves a sampling error."""
    truth = nr.random_network(8, 4, 4, rng=3)
    X, Y = nr.sample(truth, StandardGaussian(8), 20_000, rng=4)
    return truth, X, Y


@pytest.mark.parametrize("learner_cls", [nr.learners.PureNeuronLearner, nr.learners.NoisyReLULearner])
def test_refinement_of_moment_learners_reaches_round_off(noiseless_multi_output, learner_cls):
    # noiseless labels: the least-squares minimiser is the teacher, and Levenberg-Marquardt on the normal
    # equations converges to it quadratically, i.e. to round-off (units of norm ~1: error ~1e-15; 1e-10
    # leaves five orders of margin). The memory budget is the one under which the dense-Jacobian rule
    # sent four outputs to L-BFGS (36 rows of the (4 x 56)-column Jacobian < 4 P), which stalls near 1e-7;
    # the 56 x 56 normal matrix fits it.
    truth, X, Y = noiseless_multi_output
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", nr.errors.CertificateWarning)
        learner = learner_cls(4, random_state=0, refine_options={"jacobian_memory": 1 << 16}).fit(X, Y)
    record = learner.diagnostics_["refinement"]
    assert record["method"] == "gn" and record["kept"] == "refined"
    assert parameter_error(learner.network_, truth)["max_unit_error"] < 1e-10


def test_output_regression_with_dependent_units_is_min_norm_least_squares():
    # Lemma 20 needs f(V X) of rank k. A duplicated row of V (a failed tensor component) or a unit that is
    # never active makes H^T H singular: the regression must return the minimum-norm least-squares U, not
    # raise. The labels are an exact combination of the independent units, so H U^T reproduces them to
    # round-off (relative 1e-10 on labels of size ~1, H^T H of condition ~10 on the independent columns);
    # the minimum-norm solution splits a duplicated unit's weight equally and gives a dead unit zero.
    from nnrecover.learners.bakshi2019 import regression_output_weights

    gen = np.random.default_rng(0)
    X = gen.standard_normal((3000, 6))
    V = gen.standard_normal((3, 6))
    Y = np.maximum(X @ V.T, 0.0) @ gen.standard_normal((3, 2))
    for Vbad in (np.vstack([V, V[0]]), np.vstack([V, np.zeros(6)])):
        U, info = regression_output_weights(Vbad, X, Y)
        assert info["rank"] == 3 and np.all(np.isfinite(U))
        fit = np.maximum(X @ Vbad.T, 0.0) @ U.T
        assert np.max(np.abs(fit - Y)) < 1e-10 * np.max(np.abs(Y))
    U_dup, _ = regression_output_weights(np.vstack([V, V[0]]), X, Y)
    assert np.allclose(U_dup[:, 0], U_dup[:, 3], rtol=1e-8, atol=1e-12)
    U_dead, _ = regression_output_weights(np.vstack([V, np.zeros(6)]), X, Y)
    assert np.all(U_dead[:, 3] == 0.0)
