"""Quick runs of the experiments goel2019-delta and goel2019-structures (Goel-Panigrahy 2019, Section 3 and Section 4 / Appendix B)."""

import numpy as np

from nnrecover.experiments import get_experiment


def test_gp19_delta_quick():
    df, fig = get_experiment("goel2019-delta").func(rng=0, quick=True)
    units = df[df.kind == "unit"]
    # Corollary 1 prediction within 4 standard errors of the measured C_2 at every unit
    assert np.all(np.abs(units.value - units.prediction) < 4 * units.se)
    far = df[df.kind == "far"]
    assert np.all(far.value < 0.5 * units.prediction.min())
    search = df[df.kind == "search"]
    assert np.all(search.angle <= search.resolution) and np.all(search.found == search.n)
    relu = df[df.kind == "relu"]
    assert np.all(np.abs(relu.value - relu.exact) < 4 * relu.se)
    assert len(fig.axes) == 4


def test_gp19_structures_quick():
    df, fig = get_experiment("goel2019-structures").func(rng=0, quick=True)
    t8 = df[df.result == "Theorem 8"]
    assert t8[t8.condition == "met"].recovered.all() and not t8[t8.condition == "violated"].recovered.any()
    b7 = df[df.result == "B.7"]
    assert (b7[b7.condition == "met"].value > 0).all() and (b7[b7.condition == "violated"].value < 0).any()
    t10 = df[df.result == "Theorem 10"]
    met, bad = t10[t10.condition == "met"], t10[t10.condition == "violated"]
    # maxima at the units (angle 0, pi/2) when met; at the mixed angles pi/4, 3 pi/4 when violated
    assert abs(met.x.iloc[int(np.argmax(met.value.values))] % (np.pi / 2)) < 1e-9
    assert abs(bad.x.iloc[int(np.argmax(bad.value.values))] % (np.pi / 2) - np.pi / 4) < 0.02
    assert len(fig.axes) == 6
