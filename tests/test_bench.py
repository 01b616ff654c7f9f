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
        # resident memory above its level before the fit: zero when the fit reuses freed pages
        assert row[key]["seconds"] > 0 and 0 <= row[key]["peak_mb"] < 1e4
    assert row["full"]["max_unit_error"] < 1e-9


def test_a_refusal_is_a_row_not_a_crash():
    spec = {"d": 4, "k": 6, "n": 5_000, "streamed": True, "learner": "ExactReLULearner", "threads": 1,
            "refine": [True], "kind": "size"}
    row = bench_growth.measure(spec, timeout=120)
    assert row["error"].startswith("AssumptionError") and "stream_iteration" in row["baselines"]


def test_peak_memory_sees_a_temporary_buffer():
    import numpy as np
    from _timing import PeakMemory

    with PeakMemory(interval=0.001) as watch:
        buf = np.ones(50_000_000 // 8)  # 50 MB, touched
        buf.sum()
        import time
        time.sleep(0.02)  # several samples while it is resident
        del buf
    assert 40 <= watch.peak_mb <= 200
