"""The growth benchmark's measurement of one (size, learner) pair: the schema of what it reports.

No timing is asserted (benchmarks report times, tests do not): the row must carry the baseline passes,
both fits, their memory and an error at round-off for this noiseless teacher.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_growth  # noqa: E402


def test_measure_reports_baselines_fits_memory_and_error():
    spec = {"d": 6, "k": 2, "n": 20_000, "streamed": False, "learner": "ExactReLULearner", "threads": 1,
            "refine": [False, True], "kind": "size"}
    row = bench_growth.measure(spec, timeout=120)
    assert "error" not in row, row.get("traceback")
    assert set(row["baselines"]) == {"X.sum", "X.T @ X", "X @ Q"}
    for key in ("provable", "full"):
        assert row[key]["seconds"] > 0
    # memory is traced in a second run of the complete fit only (tracemalloc slows the timed runs)
    assert row["full"]["peak_mb"] > 0
    assert row["full"]["max_unit_error"] < 1e-9


def test_a_refusal_is_a_row_not_a_crash():
    spec = {"d": 4, "k": 6, "n": 5_000, "streamed": True, "learner": "ExactReLULearner", "threads": 1,
            "refine": [True], "kind": "size"}
    row = bench_growth.measure(spec, timeout=120)
    assert row["error"].startswith("AssumptionError") and "stream_iteration" in row["baselines"]


def test_traced_peak_sees_a_temporary_buffer():
    import numpy as np
    from _timing import traced_peak_mb

    def work():
        return float(np.ones(50_000_000 // 8).sum())  # a 50 MB temporary

    peak, out = traced_peak_mb(work)
    assert out == 50_000_000 // 8 and 50 <= peak <= 60
