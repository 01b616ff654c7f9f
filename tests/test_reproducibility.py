"""Same seed, same bits: every learner, with and without refinement, in one process and across processes.

Each case fits a registered learner with ``random_state=0`` on fixed data. Across processes, two fresh
interpreters (``sys.executable`` running this file as a script) fit every case and save the network with
``TwoLayerNetwork.save(.npz)``; the saved arrays must agree bit for bit. The two children differ in
everything a user does not control and a correct program must not depend on:

* ``PYTHONHASHSEED`` (set and dict iteration order of str-keyed objects, and with it the heap layout);
* ``MALLOC_PERTURB_`` in one child: glibc then fills every ``malloc`` block with a byte pattern, so a
  read of uninitialised or out-of-bounds heap memory shows up as a different result (this is how the
  out-of-bounds read of SciPy's MINPACK ``qrfac`` behind the Hermite polish was found; docs/design.md,
  "Reproducibility"); other C libraries ignore the variable;
* no ``OMP_NUM_THREADS`` / ``OPENBLAS_NUM_THREADS`` / ``MKL_NUM_THREADS``: the machine's default BLAS
  threads, as a user gets them (the Makefile sets them to 1 for the rest of the suite).

The command line (``nnrecover fit DATA --seed 0`` twice) must write the same model, timings aside.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import numpy as np

import nnrecover as nr
from nnrecover.distributions import StandardGaussian

HERE = Path(__file__).resolve()
SRC = HERE.parents[1] / "src"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
PARAMS = ("hidden_weights", "hidden_bias", "output_weights", "output_bias")


# ------------------------------------------------------------------------------------------------ the cases

def _orthonormal_teacher(d: int, seed: int) -> nr.TwoLayerNetwork:
    """``A relu(W x)`` with orthonormal ``W`` (d x d) and ``A``: the pure-neuron learner's model (k = d)."""
    from scipy.stats import ortho_group

    g = np.random.default_rng(seed)
    return nr.TwoLayerNetwork(ortho_group.rvs(d, random_state=g), None, ortho_group.rvs(d, random_state=g))


def _data(key: str) -> tuple[np.ndarray, np.ndarray]:
    """Fixed samples for each data set (label noise, so that every refinement has work to do)."""
    if key == "hermite":  # d = 10, m = 4 with biases: the setting in which the polish went astray
        t = nr.random_network(10, 4, rng=1, bias_range=(-1, 1))
        return nr.sample(t, StandardGaussian(10), 100_000, rng=2, noise=0.1)
    if key == "bakshi":  # m = 4 outputs, k = 3 units
        t = nr.random_network(8, 3, 4, rng=1).canonical()
        return nr.sample(t, StandardGaussian(8), 20_000, rng=2, noise=0.05)
    if key == "bakshi-exact":
        t = nr.random_network(8, 3, 4, rng=1).canonical()
        return nr.sample(t, StandardGaussian(8), 2_000, rng=2)
    if key == "baseline":
        t = nr.random_network(5, 3, rng=7, bias_range=(-0.5, 0.5))
        return nr.sample(t, StandardGaussian(5), 5_000, rng=8, noise=0.05)
    if key == "ge":
        return nr.sample(_orthonormal_teacher(4, 0), StandardGaussian(4), 4_000, rng=9, antithetic=True,
                         noise=0.05)
    if key == "goel":  # high threshold t = 1.5, step units, linear upper part (noiseless, Goel-Panigrahy)
        from nnrecover.learners.goel2019.model import HighThresholdNetwork, random_unit_weights

        f = HighThresholdNetwork(random_unit_weights(2, 5, rng=1), 1.5, "step")
        X = StandardGaussian(5).sample(30_000, np.random.default_rng(2))
        return X, f.predict(X)
    raise KeyError(key)


# case name -> (registry name, n_hidden, options, data key); every learner with and without refinement
CASES: dict[str, tuple[str, int, dict, str]] = {
    "hermite-tensor/refine": ("hermite-tensor", 4, {"refine": True}, "hermite"),
    "hermite-tensor/plain": ("hermite-tensor", 4, {"refine": False}, "hermite"),
    "bakshi2019-noisy/refine": ("bakshi2019-noisy", 3, {"refine": True}, "bakshi"),
    "bakshi2019-noisy/plain": ("bakshi2019-noisy", 3, {"refine": False}, "bakshi"),
    "exact-relu/refine": ("exact-relu", 3, {"refine": True}, "bakshi-exact"),
    "exact-relu/plain": ("exact-relu", 3, {"refine": False}, "bakshi-exact"),
    "gradient-descent/auto": ("gradient-descent", 3, {"n_restarts": 2}, "baseline"),
    "gradient-descent/lbfgs": ("gradient-descent", 3, {"n_restarts": 2, "method": "lbfgs", "max_iter": 300},
                               "baseline"),
    "gradient-descent/lm": ("gradient-descent", 3, {"n_restarts": 2, "method": "lm", "max_iter": 100}, "baseline"),
    "pure-neuron/refine": ("pure-neuron", 4, {"refine": True}, "ge"),
    "pure-neuron/plain": ("pure-neuron", 4, {"refine": False}, "ge"),
    "goel2019/refine": ("goel2019", 2, {"threshold": 1.5, "refine": True}, "goel"),
    "goel2019/plain": ("goel2019", 2, {"threshold": 1.5, "refine": False}, "goel"),
}


def _registered_cases() -> list[str]:
    """The cases of the learners in the registry (``nnrecover fit --learner`` names)."""
    names = {record.name for record in nr.learners.available(learners_only=True)}
    return [case for case, spec in CASES.items() if spec[0] in names]


def _fit(case: str, data: dict) -> nr.TwoLayerNetwork:
    name, k, options, key = CASES[case]
    if key not in data:
        data[key] = _data(key)
    X, Y = data[key]
    with warnings.catch_warnings():
        # certificates may fail on these small samples; the bits must not depend on it either way
        warnings.simplefilter("ignore", nr.errors.CertificateWarning)
        return nr.learners.get_learner(name)(k, **options, random_state=0).fit(X, Y).network_


def _saved_arrays(path: Path) -> dict[str, bytes]:
    """The raw bytes of every array in a saved ``.npz`` (the ``.npy`` members: header and data)."""
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in sorted(zf.namelist())}


def _child(out_dir: str, cases: list[str]) -> None:
    """Run in a fresh interpreter: fit every case and save its network to ``out_dir/<i>.npz``."""
    data: dict = {}
    for i, case in enumerate(cases):
        _fit(case, data).save(Path(out_dir) / f"{i}.npz")


def _child_env(hash_seed: int, perturb: int | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS and k != "MALLOC_PERTURB_"}
    env["PYTHONHASHSEED"] = str(hash_seed)
    if perturb is not None:
        env["MALLOC_PERTURB_"] = str(perturb)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _run_children(tmp_path: Path, cases: list[str]) -> list[Path]:
    """Two concurrent fresh interpreters fit ``cases``; returns their output folders."""
    runs = []
    for j, (hash_seed, perturb) in enumerate([(1, None), (2024, 85)]):
        out = tmp_path / f"run{j}"
        out.mkdir()
        proc = subprocess.Popen([sys.executable, str(HERE), "--child", str(out), json.dumps(cases)],
                                env=_child_env(hash_seed, perturb), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        runs.append((out, proc))
    for out, proc in runs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
    return [out for out, _ in runs]


# ------------------------------------------------------------------------------------------------ tests

def test_every_registered_learner_has_cases():
    # a new learner must be added to CASES (with and without refinement when it takes `refine`)
    import inspect

    for record in nr.learners.available(learners_only=True):
        cases = [c for c, spec in CASES.items() if spec[0] == record.name]
        assert cases, f"no reproducibility case for learner {record.name!r}: add it to CASES"
        if "refine" in inspect.signature(record.target).parameters:
            assert {CASES[c][2].get("refine") for c in cases} == {True, False}, record.name


def test_same_bits_across_processes(tmp_path):
    cases = _registered_cases()
    first, second = _run_children(tmp_path, cases)
    differ = []
    for i, case in enumerate(cases):
        a, b = first / f"{i}.npz", second / f"{i}.npz"
        with np.load(a) as za, np.load(b) as zb:
            assert all(np.all(np.isfinite(za[p])) for p in PARAMS), case
            same_arrays = all(np.array_equal(za[p], zb[p]) and za[p].tobytes() == zb[p].tobytes() for p in PARAMS)
        if not (same_arrays and _saved_arrays(a) == _saved_arrays(b)):
            differ.append(case)
    assert not differ, f"different networks in two processes for {differ}"


def test_same_bits_five_fits_in_one_process():
    data: dict = {}
    for case in _registered_cases():
        nets = [_fit(case, data) for _ in range(5)]
        for net in nets[1:]:
            for p in PARAMS:
                assert getattr(net, p).tobytes() == getattr(nets[0], p).tobytes(), (case, p)


def _strip_timings(doc):
    """``doc`` without wall-clock entries (keys such as ``fit_time_s``, ``time``, ``timings``)."""
    if isinstance(doc, dict):
        return {k: _strip_timings(v) for k, v in doc.items() if "time" not in k and "timing" not in k}
    if isinstance(doc, list):
        return [_strip_timings(v) for v in doc]
    return doc


def test_cli_fit_same_seed_same_model_file(tmp_path):
    X, Y = _data("hermite")
    data = tmp_path / "samples.npz"
    np.savez(data, X=X, Y=Y)
    procs = []
    for j, (hash_seed, perturb) in enumerate([(3, None), (77, 170)]):
        out = tmp_path / f"model{j}.json"
        cmd = [sys.executable, "-m", "nnrecover", "fit", str(data), "--learner", "hermite-tensor", "--hidden", "4",
               "--seed", "0", "--out", str(out)]
        procs.append((out, subprocess.Popen(cmd, env=_child_env(hash_seed, perturb), stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True)))
    docs = []
    for out, proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        docs.append(json.loads(out.read_text()))
    for p in PARAMS:  # floats are written by repr: equal text is equal bits
        assert docs[0][p] == docs[1][p], p
    assert _strip_timings(docs[0]) == _strip_timings(docs[1])  # diagnostics too, timings aside
    assert docs[0]["fit"]["diagnostics"]["hermite_polish"]["ran"]  # the refinement path was exercised


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--child":
    _child(sys.argv[2], json.loads(sys.argv[3]))
