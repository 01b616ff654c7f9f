"""``nnrecover demo`` and one large GEMM with the machine's default BLAS threads and with one thread.

Each configuration runs in its own process (BLAS reads its thread count when it is loaded):

* ``default``: the environment as it is, without ``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/
  ``MKL_NUM_THREADS`` (OpenBLAS then starts one thread per core);
* ``single``: ``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1``.

``OPENBLAS_CORETYPE``/``OPENBLAS_L2_SIZE`` are left as the machine sets them, in both. Timed:

* ``nnrecover demo`` in a subprocess: the wall time of the whole command (start-up included), the
  demo's own total (``metadata.json``) and every learner's ``fit_time_s`` (``results.csv``);
* ``X.T @ X`` at N = 10^6, d = 100 (one GEMM, 2 * 10^10 flops) in a subprocess, and the same product
  through the library, ``accumulate(SecondMoment(), X)`` (chunked, one BLAS thread), twice each.

Every measurement is repeated in ``--repeat`` (default 3) processes per configuration, alternating
the configurations, and the best run is kept. The load average is recorded before every run: the machine may be shared. Writes
``benchmarks/threads.json`` and the section between the ``bench_threads`` markers of
``benchmarks/README.md``.

Run: ``.venv/bin/python benchmarks/bench_threads.py`` (about 2 minutes on 2 idle cores).
"""

from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
START = "<!-- bench_threads: start -->"
END = "<!-- bench_threads: end -->"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
CONFIGS = {"default": {}, "single": {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}}

GEMM_CODE = r"""
import json, sys, time
import numpy as np
from threadpoolctl import threadpool_info
from nnrecover.moments import accumulate
from nnrecover.moments.statistics import SecondMoment
n, d, repeat = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
X = np.random.default_rng(0).standard_normal((n, d))
def best(f):
    b = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter(); f(); b = min(b, time.perf_counter() - t0)
    return b
out = {"gemm_s": best(lambda: X.T @ X), "accumulate_s": best(lambda: accumulate(SecondMoment(), X)),
       "threadpool": [{k: lib[k] for k in ("internal_api", "prefix", "num_threads", "version", "architecture")
                       if k in lib} for lib in threadpool_info()]}
print(json.dumps(out))
"""


def _env(config: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARS}
    env.update(CONFIGS[config])
    return env


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.is_file() else []
    for line in lines:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def run_demo(config: str, exe: str, workdir: Path) -> dict:
    out = workdir / f"demo-{config}-{time.monotonic_ns()}"
    load = _load()
    t0 = time.perf_counter()
    proc = subprocess.run([exe, "demo", "--out", str(out)], env=_env(config), capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"nnrecover demo ({config}) failed:\n{proc.stderr[-2000:]}")
    meta = json.loads((out / "metadata.json").read_text())
    fits = {}
    with open(out / "results.csv", newline="") as fh:
        for row in csv.DictReader(fh):
            status = "" if row["status"] == "ok" else f" ({row['status'].split(':')[0][:40]})"
            fits[f"{row['learner']} refine={row['refine']}{status}"] = float(row["fit_time_s"])
    return {"command_wall_s": wall, "demo_wall_s": float(meta["wall_time_s"]), "fit_time_s": fits, "load": load}


def run_gemm(config: str, n: int, d: int, repeat: int) -> dict:
    load = _load()
    proc = subprocess.run([sys.executable, "-c", GEMM_CODE, str(n), str(d), str(repeat)], env=_env(config),
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"GEMM benchmark ({config}) failed:\n{proc.stderr[-2000:]}")
    return {**json.loads(proc.stdout.strip().splitlines()[-1]), "load": load}


def _best(runs: list[dict]) -> dict:
    best = min(runs, key=lambda r: r["command_wall_s"])
    fits = {name: min(r["fit_time_s"].get(name, float("inf")) for r in runs) for name in runs[0]["fit_time_s"]}
    return {"command_wall_s": best["command_wall_s"], "demo_wall_s": min(r["demo_wall_s"] for r in runs),
            "fit_time_s": fits, "load_before_runs": [r["load"] for r in runs]}


def measure(args) -> dict:
    exe = str(Path(sys.executable).with_name("nnrecover"))
    demo = {c: [] for c in CONFIGS}
    with tempfile.TemporaryDirectory(prefix="nnrecover-bench-threads-") as tmp:
        for _ in range(args.repeat):
            for config in CONFIGS:
                demo[config].append(run_demo(config, exe, Path(tmp)))
    runs = {c: [] for c in CONFIGS}
    for _ in range(args.repeat):  # alternating processes, like the demo runs: the load moves
        for config in CONFIGS:
            runs[config].append(run_gemm(config, args.n, args.d, 2))
    gemm = {c: {"gemm_s": min(r["gemm_s"] for r in runs[c]), "accumulate_s": min(r["accumulate_s"] for r in runs[c]),
                "load": [r["load"] for r in runs[c]], "threadpool": runs[c][0]["threadpool"]} for c in CONFIGS}
    return {"measured_at_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([".venv/bin/python benchmarks/bench_threads.py", *sys.argv[1:]]),
            "machine": {"nproc": os.cpu_count(), "cpu": _cpu_model(), "python": platform.python_version(),
                        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
                        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
                        "threadpool": {c: gemm[c]["threadpool"] for c in CONFIGS}},
            "configs": {c: " ".join(f"{k}={v}" for k, v in CONFIGS[c].items()) or "(machine default)"
                        for c in CONFIGS},
            "repeat": args.repeat,
            "demo": {c: {**_best(demo[c]), "runs": demo[c]} for c in CONFIGS},
            "gemm": {"n": args.n, "d": args.d,
                     **{c: {k: gemm[c][k] for k in ("gemm_s", "accumulate_s", "load")} for c in CONFIGS}},
            "load_after": _load()}


def table(res: dict) -> str:
    dd, ds = res["demo"]["default"], res["demo"]["single"]
    g = res["gemm"]
    threads = {c: max(lib["num_threads"] for lib in res["machine"]["threadpool"][c]) for c in CONFIGS}
    rows = [("`nnrecover demo`, whole command (s)", dd["command_wall_s"], ds["command_wall_s"]),
            ("demo total without start-up (s)", dd["demo_wall_s"], ds["demo_wall_s"])]
    rows += [(f"fit: {name} (s)", dd["fit_time_s"][name], ds["fit_time_s"].get(name, float("nan")))
             for name in dd["fit_time_s"]]
    rows += [(f"`X.T @ X`, N = {g['n']:.0e}, d = {g['d']} (s)", g["default"]["gemm_s"], g["single"]["gemm_s"]),
             ("`accumulate(SecondMoment(), X)`, same X (s)", g["default"]["accumulate_s"],
              g["single"]["accumulate_s"])]
    lines = [f"| | default ({threads['default']} BLAS threads) | single (1 BLAS thread) | default / single |",
             "|---|---|---|---|"]
    for name, a, b in rows:
        lines.append(f"| {name} | {a:.3f} | {b:.3f} | {a / b:.2f} |")
    return "\n".join(lines)


def section(res: dict) -> str:
    m = res["machine"]
    libs = "; ".join(f"{lib['internal_api']} {lib.get('version', '?')} ({lib['prefix']}, "
                     f"{lib.get('architecture', '-')})" for lib in m["threadpool"]["default"])
    loads = {c: res["demo"][c]["load_before_runs"] for c in CONFIGS}
    return f"""{START}
## Threads (`bench_threads.py`)

`nnrecover demo` and one large GEMM, each configuration in its own process: **default** is the
machine's BLAS threads (no thread variable set; OpenBLAS starts one thread per core), **single** is
`OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1`. Best of {res['repeat']} runs (the configurations
alternate). The library chooses its own threads (`nnrecover._threads`, `docs/design.md` "Threads"): a
fit runs its BLAS calls on one thread and the chunk passes feed the statistics from worker threads,
so the default should be as fast as the single-thread run: inside the library both configurations
run the same BLAS calls on one thread, and they differ only in the chunk workers (two by default,
where a pass has something to overlap, e.g. the generation of the demo's sample stream) and in the
code outside `fit` (sampling of the evaluation data, metrics), which keeps the caller's threads.

{table(res)}

A single large product is the one case where more BLAS threads could pay, given idle cores. On a
shared machine they wait for each other whenever a core is taken (here default /
single = {res['gemm']['default']['gemm_s'] / res['gemm']['single']['gemm_s']:.1f} for `X.T @ X`), which is
why the library never runs BLAS on more than one thread; `accumulate` on an array takes the same path
(one thread, no workers for a single statistic) in both configurations, so its ratio is the noise of
this machine.

Measured {res['measured_at_utc'][:10]} on {m['nproc']} logical cores ({m['cpu']}), Python {m['python']};
loaded thread pools (threadpoolctl): {libs}; `OPENBLAS_CORETYPE={m['OPENBLAS_CORETYPE']}`,
`OPENBLAS_L2_SIZE={m['OPENBLAS_L2_SIZE']}` as the machine sets them. Load average (1/5/15 min) before
the demo runs: default {loads['default']}, single {loads['single']}; after the script
{res['load_after']}. The machine is shared, so single runs vary by tens of percent.

Reproduce: `{res['command']}` (about 2 minutes on an idle machine, 7 with `--repeat 5` on this\nshared one; writes `benchmarks/threads.json`).
{END}"""


def write_readme(res: dict, path: Path) -> None:
    text = path.read_text()
    block = section(res)
    if START in text and END in text:
        head, rest = text.split(START, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per configuration (best kept)")
    ap.add_argument("--n", type=int, default=1_000_000, help="rows of the GEMM benchmark")
    ap.add_argument("--d", type=int, default=100, help="columns of the GEMM benchmark")
    ap.add_argument("--no-readme", action="store_true", help="do not rewrite benchmarks/README.md")
    ap.add_argument("--json", default=str(HERE / "threads.json"), help="where to write the results")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.n < 1 or args.d < 1:
        ap.error("--repeat, --n and --d must be positive")
    res = measure(args)
    print(table(res))
    print(f"load average before the demo runs: default {res['demo']['default']['load_before_runs']}, "
          f"single {res['demo']['single']['load_before_runs']}; after: {res['load_after']}")
    Path(args.json).write_text(json.dumps(res, indent=1) + "\n")
    print("wrote", args.json)
    if not args.no_readme:
        write_readme(res, HERE / "README.md")
        print("wrote", HERE / "README.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
