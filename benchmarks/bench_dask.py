"""One fit on a Dask LocalCluster over data stored as .npy chunks, against the same fit in process.

The samples of a random ReLU teacher are written block by block to a directory of ``.npy`` files
(``dask.array.from_npy_stack`` layout), never held in memory at once. Then:

* in process: ``ExactReLULearner`` on the same files read as one memory map per file (a list of
  ``(X, Y)`` memory-mapped chunks, so only one chunk is in memory at a time);
* on the cluster: ``LocalCluster(n_workers=2, threads_per_worker=1)`` and the same learner on
  ``dask.array.from_npy_stack``: the statistics are computed on the workers, the client receives them
  and a bounded sample of rows (the refinement sample and the certificate's rows).

It prints both times, the largest difference between the two fitted networks, the error against the
teacher and the client's traced peak memory, and with ``--write-readme`` replaces the ``bench_dask``
section of ``benchmarks/README.md``.

Usage: ``.venv/bin/python benchmarks/bench_dask.py [--n 2000000] [--d 100] [--k 10] [--tmpdir DIR]``
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
import tracemalloc
import warnings
from pathlib import Path

import numpy as np


def write_stack(net, n: int, block: int, folder: Path) -> None:
    """Samples of ``net`` as ``folder/X`` and ``folder/Y`` npy stacks (``block`` rows per file)."""
    import pickle

    import nnrecover as nr

    blocks = [block] * (n // block) + ([n % block] if n % block else [])
    for name, width in (("X", net.n_inputs), ("Y", net.n_outputs)):
        (folder / name).mkdir(parents=True)
        with open(folder / name / "info", "wb") as fh:  # the layout dask.array.from_npy_stack reads
            pickle.dump({"chunks": (tuple(blocks), (width,)), "dtype": np.dtype("float64"), "axis": 0}, fh)
    stream = nr.sample_stream(net, nr.distributions.StandardGaussian(net.n_inputs), n, chunk_size=block, rng=1)
    for i, (X, Y) in enumerate(stream):
        np.save(folder / "X" / f"{i}.npy", X)
        np.save(folder / "Y" / f"{i}.npy", Y)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2_000_000)
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--block", type=int, default=250_000)
    parser.add_argument("--tmpdir", default=None)
    parser.add_argument("--write-readme", action="store_true")
    args = parser.parse_args()

    import dask.array as da
    import distributed

    import nnrecover as nr

    warnings.simplefilter("ignore")
    net = nr.random_network(args.d, args.k, n_outputs=args.k, rng=0)
    folder = Path(tempfile.mkdtemp(prefix="nnrecover-dask-", dir=args.tmpdir))
    try:
        t0 = time.perf_counter()
        write_stack(net, args.n, args.block, folder)
        t_write = time.perf_counter() - t0
        files = sorted((folder / "X").glob("*.npy"), key=lambda p: int(p.stem))
        chunks = [(np.load(p, mmap_mode="r"), np.load(folder / "Y" / p.name, mmap_mode="r")) for p in files]
        t0 = time.perf_counter()
        ref = nr.learners.ExactReLULearner(args.k, random_state=0).fit(chunks)
        t_local = time.perf_counter() - t0
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                           dashboard_address=None)
        client = distributed.Client(cluster)
        try:
            Xd, Yd = da.from_npy_stack(str(folder / "X")), da.from_npy_stack(str(folder / "Y"))
            tracemalloc.start()
            t0 = time.perf_counter()
            got = nr.learners.ExactReLULearner(args.k, random_state=0).fit(Xd, Yd)
            t_cluster = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        finally:
            client.close()
            cluster.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    diff = max(float(np.max(np.abs(getattr(ref.network_, f) - getattr(got.network_, f))))
               for f in ("hidden_weights", "hidden_bias", "output_weights", "output_bias"))
    err = nr.metrics.parameter_error(got.network_, net)["max_unit_error"]
    gb = args.n * (args.d + args.k) * 8 / 1e9
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    lines = [
        "<!-- bench_dask: start -->",
        "## A fit on a Dask cluster (`bench_dask.py`)",
        "",
        f"`ExactReLULearner({args.k})` on N = {args.n:.0e} noiseless samples of a random ReLU teacher "
        f"(d = {args.d}, k = {args.k}, {args.k} outputs; {gb:.2f} GB as float64) stored as "
        f"{len(files)} `.npy` files of {args.block} rows (`dask.array.from_npy_stack` layout), written "
        f"in {t_write:.1f} s, never held in memory at once.",
        "",
        "| run | time (s) | max unit error vs teacher |",
        "|---|---|---|",
        f"| in process, one memory map per file (a list of chunks) | {t_local:.2f} | "
        f"{nr.metrics.parameter_error(ref.network_, net)['max_unit_error']:.1e} |",
        f"| `LocalCluster(n_workers=2, threads_per_worker=1)`, `from_npy_stack` | {t_cluster:.2f} | {err:.1e} |",
        "",
        f"- The two fitted networks differ by at most **{diff:.1e}** in any parameter (the cluster merges "
        "block statistics in a tree, the process in chunk order).",
        f"- Client memory (traced peak of the fit on the cluster): **{peak / 1e6:.1f} MB** for {gb:.2f} GB "
        "of data: the statistics are computed on the workers; the client receives them and the rows of "
        "the refinement sample and the certificate.",
        f"- Machine: {cpu}, {os.cpu_count()} logical cores, Python {platform.python_version()}; the two "
        "workers share the same 2 cores as the client, so the cluster run measures overhead, not speed-up.",
        "",
        f"Reproduce: `.venv/bin/python benchmarks/bench_dask.py --n {args.n} --d {args.d} --k {args.k}`.",
        "<!-- bench_dask: end -->",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write_readme:
        readme = Path(__file__).with_name("README.md")
        old = readme.read_text()
        start, end = old.find("<!-- bench_dask: start -->"), old.find("<!-- bench_dask: end -->")
        new = (old[:start] + text + old[end + len("<!-- bench_dask: end -->"):] if start >= 0 and end > start
               else old.rstrip() + "\n\n" + text + "\n")
        readme.write_text(new)


if __name__ == "__main__":
    main()
