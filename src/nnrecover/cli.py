"""The ``nnrecover`` command line: ``demo | methods | simulate | fit | evaluate | experiment | check | extract``.

Every subcommand has ``--help``. A user mistake (bad flag, missing or malformed file, unknown
learner, unknown learner option, violated assumption) prints exactly one line
``nnrecover: error: <what is wrong and how to fix it>`` on stderr and exits with status 2; no Python
traceback. A learner that fails to converge exits with status 1. An unexpected exception (a bug)
prints one ``internal error`` line and exits with status 1; ``--debug`` shows its traceback (and
that of a user error, before its line, with the same exit status).
Warnings are shown as one ``nnrecover: warning: ...`` line each.

Outputs: every output path is checked for writability (and, for ``simulate``, the folder's free
space against the size of the samples) before the command starts its work; an output that names an
input file or another output, or a path that is not a regular file (a device, a pipe), is refused
(:func:`nnrecover.io.check_distinct`). Every file is written to a temporary file in the same folder
that is renamed into place only when complete (:func:`nnrecover.io.atomic_output`), and the files of
one result (``fit``'s model and diagnostics, ``extract``'s network and diagnostics, the files of
``demo`` and ``experiment``) are renamed together once all are complete
(:func:`nnrecover.io.atomic_outputs`). An error, Ctrl-C (exit 130) or SIGTERM (exit 143) leaves every
output as it was; a ``fit`` whose model predicts non-finite values on its training data writes
nothing (exit 1).

Entry point: :func:`main` (``nnrecover = nnrecover.cli:main`` in pyproject.toml; also
``python -m nnrecover``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .errors import ConvergenceError, InputError, NNRecoverError

__all__ = ["main", "build_parser", "parse_option"]

PROG = "nnrecover"
_HIDDEN_WEIGHTS_FORMAT = "nnrecover.HiddenWeights/1"
_DISTRIBUTIONS = ("gaussian", "mixture", "rademacher")


class _UsageError(Exception):
    """A command-line syntax error (raised instead of argparse's print-usage-and-exit)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D401 - argparse hook
        raise _UsageError(f"{message} (see '{self.prog} --help')")


def _say(text: str = "") -> None:
    print(text, flush=True)


# ------------------------------------------------------------------------------------------ parsing helpers
def parse_option(text: str) -> tuple[str, Any]:
    """Parse one ``--option key=value``.

    The value is read as JSON when it is valid JSON (``3``, ``1e-6``, ``true``, ``null``,
    ``[1, 2]``, ``"text"``), else kept as a string (``relu``). Dashes in the key become underscores.
    """
    key, sep, value = text.partition("=")
    key = key.strip().replace("-", "_")
    if not sep or not key.isidentifier():
        raise InputError(f"--option expects key=value with a Python-style name, got {text!r}.")
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        parsed = value
    return key, parsed


def _options(items: Sequence[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items or ():
        key, value = parse_option(item)
        if key in out:
            raise InputError(f"option {key!r} is given twice.")
        out[key] = value
    return out


def _int_at_least(minimum: int):
    """An argparse type: integers (also written like 1e5 or 100_000) that are ``>= minimum``."""
    what = {0: "a non-negative integer", 1: "a positive integer"}.get(minimum, f"an integer >= {minimum}")

    def parse(text: str) -> int:
        try:
            value = _int_like(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value
    parse.__name__ = what  # argparse names the type in its messages
    return parse


_nonneg_int = _int_at_least(0)
_pos_int = _int_at_least(1)


def _width(text: str) -> int | str:
    """``--hidden``: a positive integer or ``auto`` (the width read from the data)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return _pos_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or 'auto', got {text!r}") from None


def _int_like(text: str) -> int:
    """Integers, also written like 1e5 or 100_000."""
    with contextlib.suppress(ValueError):  # exact for integers beyond 2**53
        return int(text.replace("_", ""))
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}")
    return int(value)


def _nonneg_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (np.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not np.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _fmt(value: Any, spec: str = ".2e") -> str:
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    try:
        v = float(value)
    except (TypeError, ValueError):
        return str(value)
    return "-" if not np.isfinite(v) else format(v, spec)


def _table(rows: Sequence[dict], columns: Sequence[str], formats: dict[str, Callable[[Any], str]] | None = None) -> str:
    """Plain-text table: text columns left-aligned, numeric columns right-aligned."""
    formats = formats or {}
    cells = [[formats.get(c, str)(r[c]) for c in columns] for r in rows]
    numeric = [all(isinstance(r[c], (int, float, np.integer, np.floating)) and not isinstance(r[c], bool)
                   for r in rows) for c in columns]
    widths = [max([len(c)] + [len(row[j]) for row in cells]) for j, c in enumerate(columns)]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(list(columns))] + [line(row) for row in cells])


def _json_text(data: dict) -> str:
    from .experiments.runner import to_jsonable

    return json.dumps(to_jsonable(data), indent=1) + "\n"


def _write_json(path: Path, data: dict) -> None:
    """Write ``data`` as JSON, completely or not at all (:func:`nnrecover.io.write_text_atomic`)."""
    from .io import write_text_atomic

    write_text_atomic(path, _json_text(data))


def _out_file(path: str, flag: str = "--out") -> Path:
    """An output file that can be written, checked before the command does its work.

    The folder is created if missing and probed with a temporary file (:func:`nnrecover.io.check_writable`),
    so that an unwritable path is a one-line error before any computation, not after it.
    """
    from .io import check_writable

    return check_writable(path, flag)


def _out_dir(path: str, names: Sequence[str] = (), flag: str = "--out") -> Path:
    """An output folder (created if missing) in which each of ``names`` can be written."""
    from .io import prepare_output_dir

    return prepare_output_dir(path, names, f"{flag} directory")


def _chunked_errors(net, X, Y, chunk: int = 1 << 16) -> dict[str, Any]:
    """MSE, RMSE and relative L2 error ``||f(X) - Y|| / ||Y||`` computed chunk by chunk.

    Residuals and targets are scaled by ``2^-e`` (``2^e`` about max |Y|; exact) before they are squared,
    so the relative error and RMSE are exact for data at any scale (``1e300`` squared would overflow);
    the MSE is ``inf`` only when it exceeds the float64 range. ``finite_predictions`` is False when the
    model's outputs overflow on the data (the other numbers are then NaN).
    """
    n = X.shape[0]
    Y2 = Y if Y.ndim == 2 else Y[:, None]
    if Y2.shape[1] != net.n_outputs:
        raise InputError(f"the data have {Y2.shape[1]} target column(s) but the model has {net.n_outputs} "
                         "output(s); select the target columns with --target-column.")
    if X.shape[1] != net.n_inputs:
        raise InputError(f"the data have {X.shape[1]} input column(s) but the model has {net.n_inputs} inputs.")
    ymax = max((float(np.max(np.abs(Y2[s:s + chunk]))) for s in range(0, n, chunk)), default=0.0)
    e = int(np.frexp(ymax)[1]) if 0 < ymax < np.inf else 0
    sse = ssy = 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        for start in range(0, n, chunk):
            xb = np.asarray(X[start:start + chunk], dtype=np.float64)
            yb = np.ldexp(np.asarray(Y2[start:start + chunk], dtype=np.float64), -e)
            pred = net.predict(xb).reshape(yb.shape)
            if not np.all(np.isfinite(pred)):
                nan = float("nan")
                return {"n_samples": n, "mse": nan, "rmse": nan, "relative_l2_error": nan,
                        "finite_predictions": False}
            sse += float(np.sum((np.ldexp(pred, -e) - yb) ** 2))
            ssy += float(np.sum(yb ** 2))
        mean = sse / (n * Y2.shape[1])
        mse = float(np.ldexp(mean, 2 * e))  # inf, without a warning, beyond 1.8e308 (|Y| ~ 1e154 and more)
    return {"n_samples": n, "mse": mse, "rmse": float(np.ldexp(np.sqrt(mean), e)),
            "relative_l2_error": float(np.sqrt(sse / ssy)) if ssy > 0 else float("nan"),
            "finite_predictions": True}


# ------------------------------------------------------------------------------------------ distributions
def _distribution_from_spec(spec: dict | None, d: int):
    from . import distributions as D

    if not spec:
        return D.StandardGaussian(d)
    name = spec.get("name")
    if name == "gaussian":
        return D.StandardGaussian(d)
    if name == "rademacher":
        return D.Rademacher(d)
    if name == "mixture":
        return D.SymmetricMixture(spec["means"], spec.get("cov"))
    raise InputError(f"unknown distribution {name!r} in the teacher file; known: {', '.join(_DISTRIBUTIONS)}.")


def _make_distribution(args, d: int, gen) -> tuple[Any, dict]:
    from . import distributions as D

    if args.distribution != "mixture" and (args.mixture_components is not None or args.mixture_scale is not None):
        raise InputError("--mixture-components and --mixture-scale shape the mixture input law; add "
                         f"--distribution mixture (the law is {args.distribution!r}).")
    if args.distribution == "gaussian":
        return D.StandardGaussian(d), {"name": "gaussian", "dim": d}
    if args.distribution == "rademacher":
        return D.Rademacher(d), {"name": "rademacher", "dim": d}
    means = gen.standard_normal((args.mixture_components or 2, d))
    means *= (1.0 if args.mixture_scale is None else args.mixture_scale) / np.linalg.norm(means, axis=1, keepdims=True)
    return D.SymmetricMixture(means), {"name": "mixture", "means": means.tolist(), "cov": None}


# ------------------------------------------------------------------------------------------ commands
_DEMO_FILES = ("demo.png", "recovery.png", "results.csv", "teacher.json", "metadata.json")


def _demo_verdicts(teacher, dist, n: int, args) -> None:
    """One line per learner: does it apply to these data, and why (``nr.check`` on the first rows)."""
    from .assumptions import check
    from .sampling import sample

    rows = min(n, 20_000)
    X, Y = sample(teacher, dist, rows, noise=args.noise, rng=np.random.default_rng([args.seed, 1]))
    report = check(X, Y)
    # the verdicts are about fitting every output; the comparison fits the one-output learners on output 1
    _say(f"which learners apply (nnrecover check on {rows} rows of the same teacher"
         + ("; the comparison fits the one-output learners on output 1 alone" if report.n_outputs > 1 else "")
         + "):")
    width = max(len(v.learner) for v in report.verdicts)
    for v in report.verdicts:
        _say(f"  {v.learner:<{width}}  {v.applies:<6}  {'; '.join(v.reasons)}")
    _say()


def _cmd_demo(args) -> int:
    from .experiments.baseline import (DEMO_DEFAULTS, DEMO_MAX_OUTPUTS, FAILED_FUNCTION_ERROR, FAILED_UNIT_ERROR,
                                       compare_learners, comparison_figure, demo_options, demo_teacher,
                                       recovery_figure, select_learners)
    from .experiments.runner import environment_info
    from .io import atomic_outputs

    select_learners(args.learner)  # an unknown name is a one-line error before any output
    out = _out_dir(args.out, _DEMO_FILES)
    n = args.n_samples or DEMO_DEFAULTS["quick_n_samples" if args.quick else "n_samples"]
    gen = np.random.default_rng(args.seed)
    teacher, dist = demo_teacher(gen, n_inputs=args.inputs, n_hidden=args.hidden, n_outputs=args.outputs,
                                 bias=args.bias)
    _say(f"nnrecover demo: teacher with d={teacher.n_inputs} inputs, k={teacher.n_hidden} ReLU units, "
         f"p={teacher.n_outputs} outputs, biases in [-{args.bias:g}, {args.bias:g}]; x ~ N(0, I); "
         f"{n} samples streamed in chunks, {'label noise ' + format(args.noise, 'g') if args.noise else 'noiseless'} "
         f"(seed {args.seed}).")
    per_learner, common = demo_options(args.quick)
    _demo_verdicts(teacher, dist, n, args)
    networks: dict = {}
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    df = compare_learners(teacher, dist, n, rng=gen, learners=args.learner, noise=args.noise,
                          learner_defaults=per_learner, common_defaults=common,
                          max_outputs=DEMO_MAX_OUTPUTS, with_unrefined=not args.refined_only,
                          chunk_size=DEMO_DEFAULTS["chunk_size"],
                          eval_samples=10_000 if args.quick else DEMO_DEFAULTS["eval_samples"],
                          time_budget=args.time_budget, log=_say, networks=networks)
    wall = time.perf_counter() - t0
    table = df.assign(status=[s if s == "ok" else ("n/a" if s.startswith("not applicable") else "failed")
                              for s in df["status"]])
    _say()
    _say(_table(table.to_dict("records"), ["learner", "paper", "algorithm", "refine", "max_unit_error",
                                           "function_error", "fit_time_s", "n_samples", "outputs", "certificates",
                                           "status"],
                {"max_unit_error": _fmt, "function_error": _fmt, "fit_time_s": lambda v: _fmt(v, ".2f")}))
    for name, refine, status in zip(df["learner"], df["refine"], df["status"]):
        if status != "ok":
            _say(f"  {name}{' (refine=no)' if refine == 'no' else ''}: {status}")
    _say("status: failed when the fit raised, a certificate failed, function_error > "
         f"{FAILED_FUNCTION_ERROR:g} or max_unit_error > {FAILED_UNIT_ERROR:g}; "
         "max_unit_error: after matching units, max over units of |w - w'| + |b - b'| + |a - a'| "
         "(canonical form); function_error: relative L2 error under N(0, I); refine=no: the paper's "
         "algorithm alone, yes: followed by the shared local refinement; n_samples: rows the fit used; "
         "certificates: the learner's checks of the network it returned, each stating what it bounds "
         "(docs/certificates.md; failed: that network may be wrong; -: none).")
    fig = comparison_figure(df, title=f"nnrecover demo: d={teacher.n_inputs}, k={teacher.n_hidden}, "
                                      f"p={teacher.n_outputs}, n={n}, seed={args.seed}")
    meta = {"command": "nnrecover demo " + " ".join(args.argv), "seed": args.seed, "n_samples": n,
            "quick": args.quick, "noise": args.noise, "learner_options": per_learner, "common_options": common,
            "started_at_utc": started, "wall_time_s": round(wall, 3), **environment_info()}
    # the files of one run as one: all of them, or (error, Ctrl-C) none replaced
    names = ["demo.png", "results.csv", "teacher.json", "metadata.json"] + (["recovery.png"] if networks else [])
    with atomic_outputs([out / name for name in names]) as temps:
        fig.savefig(temps[0], dpi=120, format="png")
        df.to_csv(temps[1], index=False)
        teacher.save(temps[2])
        temps[3].write_text(_json_text(meta), encoding="utf-8")
        if networks:
            fig = recovery_figure(networks, title="recovered against true parameters (canonical form, units matched)")
            fig.savefig(temps[4], dpi=110, format="png")
    _say(f"wrote {out / 'demo.png'}, {out / 'recovery.png' if networks else '(no recovery.png: no fit returned a network)'}, "
         f"{out / 'results.csv'}, {out / 'teacher.json'}, {out / 'metadata.json'} "
         f"({wall:.1f} s in total)")
    return 0


def _cmd_methods(args) -> int:
    from .learners import available
    from .learners.registry import PAPERS

    records = available(args.paper, learners_only=args.learners_only)  # an unknown paper is an InputError
    rows = [{"name": r.name, "paper": r.paper, "algorithm": r.algorithm,
             "target": getattr(r.target, "__name__", repr(r.target)),
             "fit": "yes" if r.is_learner else "no", "assumptions": "; ".join(r.assumptions)} for r in records]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    if not rows:
        _say("no algorithms are registered" + (f" for paper {args.paper}" if args.paper else "") + ".")
        return 0
    _say(_table(rows, ["name", "paper", "algorithm", "target", "fit", "assumptions"]))
    _say()
    _say("fit = usable as 'nnrecover fit DATA --learner NAME'. Papers:")
    for key in sorted({r.paper for r in records}):
        _say(f"  {key}: {PAPERS[key]}")
    return 0


_TEACHER_FLAGS = {"inputs": "-d/--inputs", "hidden": "-k/--hidden", "outputs": "-p/--outputs",
                  "activation": "--activation", "bias_range": "--bias-range", "rows": "--rows"}
_TEACHER_DEFAULTS = {"inputs": 10, "hidden": 4, "outputs": 1, "activation": "relu", "bias_range": (0.0, 0.0),
                     "rows": "unit"}


def _cmd_simulate(args) -> int:
    from .experiments.runner import resolve_seed
    from .io import SAMPLE_FORMATS, check_free_space, sample_file_bytes, save_sample_stream
    from .network import TwoLayerNetwork, random_network
    from .sampling import sample_stream

    if args.use_teacher is not None:
        given = [flag for key, flag in _TEACHER_FLAGS.items() if getattr(args, key) is not None]
        if given:
            raise InputError(f"{', '.join(given)} describe a new teacher; with --use-teacher they come from "
                             f"{args.use_teacher}.")
    else:
        for key, value in _TEACHER_DEFAULTS.items():
            if getattr(args, key) is None:
                setattr(args, key, value)
    teacher_out = args.teacher if args.teacher is not None else (None if args.use_teacher else "teacher.json")
    if Path(args.out).suffix.lower() not in SAMPLE_FORMATS:
        raise InputError(f"--out must end in one of {', '.join(SAMPLE_FORMATS)}, got {Path(args.out).name!r}.")
    if teacher_out is not None and Path(teacher_out).suffix.lower() != ".json":
        raise InputError(f"--teacher must name a .json file, got {Path(teacher_out).name!r}.")
    from .io import check_distinct

    check_distinct({"--use-teacher": args.use_teacher}, {"--out": args.out, "--teacher": teacher_out})
    out = _out_file(args.out, "--out")
    teacher_path = _out_file(teacher_out, "--teacher") if teacher_out is not None else None
    seed = resolve_seed(args.seed)
    gen = np.random.default_rng(seed)
    if args.use_teacher is not None:
        teacher = TwoLayerNetwork.load(args.use_teacher)
    else:
        lo, hi = args.bias_range
        if lo > hi:
            raise InputError(f"--bias-range needs LOW <= HIGH, got {lo:g} {hi:g}.")
        teacher = random_network(args.inputs, args.hidden, args.outputs, activation=args.activation, rng=gen,
                                 bias_range=(lo, hi), rows=args.rows)
    suffix = out.suffix.lower()
    check_free_space(out, sample_file_bytes(args.n, teacher.n_inputs + teacher.n_outputs, suffix),
                     f"--n {args.n} samples of {teacher.n_inputs} inputs and {teacher.n_outputs} output(s)",
                     in_memory=suffix == ".npz", fix="lower --n or write to another folder")
    dist, dist_spec = _make_distribution(args, teacher.n_inputs, gen)
    stream = sample_stream(teacher, dist, args.n, noise=args.noise, rng=gen, antithetic=args.antithetic)
    # samples first (the long part: interrupted, it changes nothing), then the teacher (instant; its
    # folder was probed above, so only a full disk can stop it)
    _, rows = save_sample_stream(out, stream)
    if teacher_path is not None:
        data = teacher.to_dict()
        data["simulation"] = {"distribution": dist_spec, "noise": args.noise, "n_samples": rows, "seed": seed,
                              "samples_file": str(out), "antithetic": args.antithetic}
        _write_json(teacher_path, data)
        where = f" and the teacher ({teacher.n_hidden} {teacher.activation.spec} units) to {teacher_out}"
    else:
        where = f" from the teacher in {args.use_teacher}"
    _say(f"wrote {rows} samples (X: {rows} x {teacher.n_inputs}, Y: {teacher.n_outputs} column(s)) to {out}"
         f"{where}; seed {seed}.")
    return 0


def _load_data(args):
    from .io import load_samples

    columns = [c.strip() for item in (args.target_column or ()) for c in item.split(",") if c.strip()]
    npz = Path(args.data).suffix.lower() == ".npz"
    targets_npz = args.targets is not None and Path(args.targets).suffix.lower() == ".npz"
    # an option that the files' formats ignore is refused, not dropped in silence (a --target-column with
    # a .npy/.npz --targets file is refused by load_samples)
    if columns and args.targets is None and npz:
        raise InputError("--target-column selects columns of .npy/.csv/.parquet files; a .npz file names its "
                         "target array: use --y-key (and --x-key).")
    if args.x_key is not None and not npz:
        raise InputError(f"--x-key names an array of a .npz file; {Path(args.data).name} is not one.")
    # --y-key names the targets array of the file that holds the targets: --targets if given, else DATA
    y_file = args.targets if args.targets is not None else args.data
    if args.y_key is not None and not (targets_npz if args.targets is not None else npz):
        raise InputError(f"--y-key names an array of a .npz file; the targets come from {Path(y_file).name}, "
                         "which is not one (use --target-column for .npy/.csv/.parquet files).")
    return load_samples(args.data, targets=args.targets, target_columns=columns or None,
                        x_key=args.x_key or "X", y_key=args.y_key or "Y")


def _cmd_fit(args) -> int:
    from .learners import make_learner
    from .network import TwoLayerNetwork

    options = _options(args.option)
    if args.seed is not None and "random_state" in options:
        raise InputError("give the seed either as --seed or as --option random_state=..., not both.")
    if Path(args.out).suffix.lower() not in (".json", ".npz"):
        raise InputError(f"--out must name a .json or .npz file, got {str(args.out)!r}.")
    est = make_learner(args.learner, args.hidden, options, random_state=args.seed)
    from .io import atomic_outputs, check_distinct

    check_distinct({"DATA": args.data, "--targets": args.targets},
                   {"--out": args.out, "--diagnostics": args.diagnostics})
    out = _out_file(args.out, "--out")
    diagnostics_out = _out_file(args.diagnostics, "--diagnostics") if args.diagnostics else None
    X, Y = _load_data(args)
    t0 = time.perf_counter()
    est.fit(X, Y)
    fit_time = time.perf_counter() - t0
    width = getattr(est, "n_hidden_", args.hidden)
    fit_info = {"learner": args.learner, "n_hidden": width, "options": options, "seed": args.seed,
                "data": str(args.data), "n_samples": int(X.shape[0]), "fit_time_s": round(fit_time, 4),
                "diagnostics": getattr(est, "diagnostics_", {})}
    net = getattr(est, "network_", None)
    # everything is computed and checked before the first file is written: an error leaves no output
    if isinstance(net, TwoLayerNetwork):
        errs = _chunked_errors(net, X, Y)
        if not errs["finite_predictions"] or np.isinf(errs["relative_l2_error"]):
            raise ConvergenceError(f"learner {args.learner!r} returned a model whose training error is not finite "
                                   "(its predictions on the training data overflow float64); no model was written. "
                                   "Rescale the data to values of order 1, or try another learner.")
        fit_info["training"] = errs
        model_doc = {**net.to_dict(), "fit": fit_info}
        # the MSE of data near 1e300 overflows float64 although the fit is exact; the RMSE does not
        error = (f"MSE {errs['mse']:.3e}" if np.isfinite(errs["mse"]) else
                 f"RMSE {errs['rmse']:.3e} (MSE beyond the float64 range)")
        summary = f"training {error} (relative L2 error {errs['relative_l2_error']:.3e})"
    else:
        W = getattr(est, "hidden_weights_", None)
        if W is None:
            raise InputError(f"learner {args.learner!r} produced neither network_ nor hidden_weights_.")
        if out.suffix.lower() != ".json":
            raise InputError(f"learner {args.learner!r} recovers the hidden weights only; save them to a .json file.")
        if not np.all(np.isfinite(W)):
            raise ConvergenceError(f"learner {args.learner!r} returned non-finite hidden weights; no model was "
                                   "written. Rescale the data to values of order 1.")
        model_doc = {"format": _HIDDEN_WEIGHTS_FORMAT, "hidden_weights": np.asarray(W).tolist(), "fit": fit_info}
        summary = "hidden weights only (this learner does not recover the output layer)"
    # the model and its diagnostics as one: both files or neither
    with atomic_outputs([out] + ([diagnostics_out] if diagnostics_out is not None else [])) as temps:
        if out.suffix.lower() == ".json":
            temps[0].write_text(_json_text(model_doc), encoding="utf-8")
        else:
            net.save(temps[0])
        if diagnostics_out is not None:
            temps[1].write_text(_json_text(fit_info["diagnostics"]), encoding="utf-8")
    # a learner may return another number of units than asked (folded or dropped units): say so
    returned = f"; the model has {net.n_hidden} unit(s)" if isinstance(net, TwoLayerNetwork) and \
        net.n_hidden != width else ""
    _say(f"fitted {args.learner} (k={width}{' chosen from the data' if args.hidden == 'auto' else ''}{returned}) on {X.shape[0]} samples (d={X.shape[1]}) in {fit_time:.2f} s; "
         f"{summary}; wrote {out}.")
    return 0


def _read_model(path: str):
    """A TwoLayerNetwork, or a (k, d) array for a hidden-weights-only file."""
    from .network import TwoLayerNetwork

    p = Path(path)
    if p.suffix.lower() == ".json" and p.exists():
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise InputError(f"{p.name} is not valid JSON: {_one_line(str(exc))[:200]}") from None
        if isinstance(data, dict) and data.get("format") == _HIDDEN_WEIGHTS_FORMAT:
            from ._validation import as_float_array, check_finite

            W = as_float_array(data.get("hidden_weights"), f"hidden_weights in {p.name}")
            if W.ndim != 2 or 0 in W.shape:
                raise InputError(f"{p.name}: hidden_weights must be a non-empty (k, d) matrix, got shape {W.shape}.")
            check_finite(W, f"hidden_weights in {p.name}")
            return W
    return TwoLayerNetwork.load(path)


def _cmd_check(args) -> int:
    from .assumptions import check
    from .experiments.runner import to_jsonable

    X, Y = _load_data(args)
    report = check(X, Y, max_rows=args.max_rows, random_state=args.seed)
    if args.json:
        doc = {"n_samples": report.n_samples, "n_inputs": report.n_inputs, "n_outputs": report.n_outputs,
               "input_law": report.input_law, "symmetric": report.symmetric, "heavy_tailed": report.heavy_tailed,
               "width": report.width, "label_noise": report.label_noise, "evidence": report.evidence,
               "verdicts": [vars(v) for v in report.verdicts], "recommended": report.recommended}
        _say(json.dumps(to_jsonable(doc), indent=1))
    else:
        _say(str(report).replace("nnrecover fit DATA", f"nnrecover fit {args.data}"))
    return 0


def _cmd_evaluate(args) -> int:
    from . import metrics
    from .experiments.runner import to_jsonable
    from .network import TwoLayerNetwork

    if args.teacher is None and args.data is None:
        raise InputError("evaluate needs --teacher T.json (compare parameters) and/or --data FILE "
                         "(prediction error on held-out samples).")
    model = _read_model(args.model)
    report: dict[str, Any] = {"model": str(args.model)}
    if args.teacher is not None:
        teacher = TwoLayerNetwork.load(args.teacher)
        W = model if isinstance(model, np.ndarray) else model.hidden_weights
        if W.shape[1] != teacher.n_inputs:
            raise InputError(f"the model has {W.shape[1]} inputs but the teacher has {teacher.n_inputs}.")
        report["weight_error"] = metrics.weight_error(W, teacher.hidden_weights)
        if isinstance(model, TwoLayerNetwork):
            if model.n_outputs != teacher.n_outputs:
                raise InputError(f"the model has {model.n_outputs} outputs but the teacher has {teacher.n_outputs}.")
            spec = json.loads(Path(args.teacher).read_text()).get("simulation", {}).get("distribution") \
                if Path(args.teacher).suffix.lower() == ".json" else None
            dist = _distribution_from_spec(spec, teacher.n_inputs)
            report["parameter_error"] = metrics.parameter_error(model, teacher)
            report["function_error"] = float(metrics.function_error(model, teacher, dist, n=args.n_eval,
                                                                    rng=args.seed))
            report["function_error_distribution"] = (spec or {}).get("name", "gaussian")
    if args.data is not None:
        if isinstance(model, np.ndarray):
            raise InputError("a hidden-weights-only model cannot predict; evaluate it with --teacher.")
        X, Y = _load_data(args)
        report["data"] = {"file": str(args.data), **_chunked_errors(model, X, Y)}
    if args.json:
        print(json.dumps(to_jsonable(report), indent=1))
        return 0
    for section in ("parameter_error", "weight_error"):
        for key, value in (report.get(section) or {}).items():
            if np.ndim(value) == 0:
                _say(f"{section}.{key}: {_fmt(value, '.6g')}")
    if "function_error" in report:
        _say(f"function_error (relative L2, {report['function_error_distribution']}, n={args.n_eval}): "
             f"{report['function_error']:.6g}")
    for key, value in (report.get("data") or {}).items():
        _say(f"data.{key}: {value if isinstance(value, str) else _fmt(value, '.6g')}")
    return 0


def _cmd_experiment(args) -> int:
    from .experiments import available_experiments
    from .experiments.runner import run_experiment

    if args.list:
        recs = available_experiments()
        if not recs:
            _say("no experiments are registered.")
        width = max((len(r.name) for r in recs), default=0)
        pwidth = max((len(r.paper) for r in recs), default=0) + 2
        for r in recs:
            _say(f"{r.name:<{width}}  {'[' + r.paper + ']':<{pwidth}}  {r.description}")
        return 0
    if args.name is None:
        raise InputError("give an experiment NAME (see 'nnrecover experiment --list').")
    out = args.out or os.path.join("results", args.name)
    t0 = time.perf_counter()
    df = run_experiment(args.name, out, quick=args.quick, rng=args.seed, **_options(args.option))
    with_pd_options = df.to_string(index=False, max_rows=40, float_format=lambda v: f"{v:.4g}")
    _say(with_pd_options)
    meta = json.loads((Path(out) / "metadata.json").read_text())
    _say(f"wrote {Path(out) / 'results.csv'}, {Path(out) / 'figure.png'}, {Path(out) / 'metadata.json'} "
         f"(seed {meta['seed']}, {time.perf_counter() - t0:.1f} s).")
    return 0


# ------------------------------------------------------------------------------------------ parser
def _data_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--targets", metavar="FILE",
                   help="separate file with the targets (the data file then holds the inputs only)")
    p.add_argument("--target-column", action="append", metavar="COL",
                   help="target column(s): names (.csv/.parquet) or positions (.npy, e.g. -1), comma-separated "
                        "or repeated. Default: 'y', else 'y0, y1, ...', else the last column")
    p.add_argument("--x-key", default=None, help="array name of the inputs in a .npz file (default: X)")
    p.add_argument("--y-key", default=None, help="array name of the targets in a .npz file (default: Y)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``nnrecover`` (errors raise instead of exiting)."""
    from . import __version__

    parser = _Parser(prog=PROG, description="Provable recovery of two-layer neural networks "
                     "f(x) = A act(W x + b) + c from input-output samples.",
                     epilog="Run 'nnrecover demo' for a two-minute tour; 'nnrecover COMMAND --help' for details.")
    parser.add_argument("--version", action="version", version=f"nnrecover {__version__}")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks (for bug reports)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    p = sub.add_parser("demo", help="fit every applicable learner on a built-in teacher and compare them",
                       description="Build a random ReLU teacher, stream samples from it, fit every registered "
                       "learner that applies, print a comparison table (errors, fit time, samples) and "
                       "save demo.png (errors and times), recovery.png (recovered against true weights, one "
                       "panel per fit), results.csv, teacher.json and metadata.json into --out.")
    p.add_argument("--n-samples", type=_pos_int, default=None, metavar="N",
                   help="samples to draw (default 100000; 20000 with --quick)")
    p.add_argument("--seed", type=_nonneg_int, default=0, help="random seed (default 0)")
    p.add_argument("--out", default="nnrecover-demo", metavar="DIR", help="output directory (default ./nnrecover-demo)")
    p.add_argument("--quick", action="store_true",
                   help="20000 samples and least-squares fits on 5000 rows (a fast smoke test)")
    p.add_argument("--learner", action="append", metavar="NAME", help="run only this learner (repeatable)")
    p.add_argument("--refined-only", action="store_true",
                   help="skip the refine=False runs (the papers' algorithms without local refinement)")
    p.add_argument("--time-budget", type=_nonneg_float, default=20.0, metavar="SECONDS",
                   help="seconds per learner for the learners that run random restarts (gradient-descent): no "
                        "new restart starts after it and the running one stops at its optimiser's next pass over "
                        "the rows; the log says when one stopped early (default 20). "
                        "The provable learners run a fixed number of steps and do not take it")
    p.add_argument("--noise", type=_nonneg_float, default=0.0, help="label-noise standard deviation (default 0)")
    p.add_argument("--inputs", "-d", type=_pos_int, default=10, help="input dimension d (default 10)")
    p.add_argument("--hidden", "-k", type=_pos_int, default=4, help="hidden units k (default 4)")
    p.add_argument("--outputs", "-p", type=_pos_int, default=4, help="outputs p (default 4)")
    p.add_argument("--bias", type=_nonneg_float, default=0.1, help="hidden biases uniform in [-BIAS, BIAS] (default 0.1)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("methods", help="list the implemented algorithms (paper, algorithm, assumptions)",
                       description="List every registered algorithm: its name, paper, the paper's algorithm "
                       "label, the implementing class or function, whether 'fit --learner NAME' runs it (fit = "
                       "yes: the learners; the others are Python functions), and its assumptions.")
    p.add_argument("--paper", help="only this paper (awasthi2021, ge2019, bakshi2019, goel2019, baseline)")
    p.add_argument("--learners-only", action="store_true", help="only estimators usable by 'nnrecover fit'")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_cmd_methods)

    p = sub.add_parser("simulate", help="draw a random teacher and write samples (.npz/.npy/.csv/.parquet)",
                       description="Draw a random teacher network and n labelled samples; write the samples "
                       "(format by --out suffix; .npy/.csv/.parquet are written chunk by chunk) and the teacher "
                       "as JSON (with the input distribution, noise and seed).")
    p.add_argument("--inputs", "-d", type=_pos_int, default=None, help="input dimension d (default 10)")
    p.add_argument("--hidden", "-k", type=_pos_int, default=None, help="hidden units k (default 4)")
    p.add_argument("--outputs", "-p", type=_pos_int, default=None, help="outputs p (default 1)")
    p.add_argument("--activation", default=None, help="activation name, e.g. relu, step, sigmoid, "
                   "'leaky_relu(0.1)' (default relu)")
    p.add_argument("--bias-range", type=_finite_float, nargs=2, default=None, metavar=("LOW", "HIGH"),
                   help="hidden biases uniform in [LOW, HIGH] (default 0 0)")
    p.add_argument("--rows", choices=("unit", "orthonormal", "gaussian"), default=None,
                   help="hidden weight rows: random unit vectors (default), orthonormal (k <= d) or N(0, 1/d) entries")
    p.add_argument("--use-teacher", metavar="T.json",
                   help="draw samples from this teacher instead of a new random one (e.g. held-out data)")
    p.add_argument("--n", type=_pos_int, default=10_000, help="number of samples (default 10000)")
    p.add_argument("--noise", type=_nonneg_float, default=0.0, help="label-noise standard deviation (default 0)")
    p.add_argument("--distribution", choices=_DISTRIBUTIONS, default="gaussian",
                   help="input law: N(0, I), symmetric Gaussian mixture, or uniform on {-1, 1}^d")
    p.add_argument("--mixture-components", type=_pos_int, default=None, metavar="J",
                   help="mixture: pairs of components N(+mu_j, I), N(-mu_j, I) (default 2)")
    p.add_argument("--mixture-scale", type=_nonneg_float, default=None, help="mixture: |mu_j| (default 1)")
    p.add_argument("--antithetic", action="store_true", help="emit samples in pairs (x, -x) (n even)")
    p.add_argument("--seed", type=_nonneg_int, default=None, help="random seed (default: fresh, printed)")
    p.add_argument("--out", default="samples.npz", help="samples file (default samples.npz)")
    p.add_argument("--teacher", default=None, metavar="T.json",
                   help="write the teacher here (default teacher.json; not written with --use-teacher unless given)")
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("fit", help="fit a learner to samples and write the model",
                       description="Fit a learner (see 'nnrecover methods') to samples in a .npz/.npy/.csv/"
                       ".parquet file and write the recovered network (.json with the fit's diagnostics, or .npz).")
    p.add_argument("data", metavar="DATA", help="samples file")
    p.add_argument("--learner", required=True, metavar="NAME", help="learner name from 'nnrecover methods'")
    p.add_argument("--hidden", "-k", type=_width, required=True,
                   help="number of hidden units k, or 'auto' (read from the data; evidence in the diagnostics)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE",
                   help="learner option (repeatable); VALUE is read as JSON when possible (3, 1e-6, true, "
                        "[1,2]) else as text. Unknown options are errors")
    p.add_argument("--seed", type=_nonneg_int, default=None, help="random_state of the learner")
    p.add_argument("--out", default="model.json", help="model file, .json or .npz (default model.json)")
    p.add_argument("--diagnostics", metavar="FILE", help="also write the learner's diagnostics_ as JSON")
    _data_arguments(p)
    p.set_defaults(func=_cmd_fit)

    p = sub.add_parser("check", help="which learners' assumptions the data meet, with the evidence",
                       description="Measure the input law (Gaussian? standard? symmetric? heavy-tailed?), the "
                       "width and the label noise of a samples file, and say for every learner whether its "
                       "assumptions hold, with the measured evidence and a recommended command.")
    p.add_argument("data", metavar="DATA", help="samples file (.npz/.npy/.csv/.parquet)")
    p.add_argument("--max-rows", type=_pos_int, default=200_000, metavar="N",
                   help="rows read at most, the first ones (default 200000)")
    p.add_argument("--seed", type=_nonneg_int, default=0, help="seed of the random projections (default 0)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _data_arguments(p)
    p.set_defaults(func=_cmd_check)

    from .extraction.cli import add_parser as _add_extract_parser

    _add_extract_parser(sub)

    p = sub.add_parser("evaluate", help="compare a model with its teacher and/or held-out samples",
                       description="With --teacher: parameter_error (max_unit_error...), weight_error "
                       "(max_angle) and function_error (relative L2 under the teacher file's input "
                       "distribution, N(0, I) by default). With --data: MSE and relative L2 error of the "
                       "predictions.")
    p.add_argument("model", metavar="MODEL", help="model file written by 'nnrecover fit'")
    p.add_argument("--teacher", metavar="T.json", help="teacher network (.json or .npz)")
    p.add_argument("--data", metavar="FILE", help="held-out samples (.npz/.npy/.csv/.parquet)")
    p.add_argument("--n-eval", type=_pos_int, default=100_000, metavar="N",
                   help="Monte-Carlo samples for function_error (default 100000)")
    p.add_argument("--seed", type=_nonneg_int, default=0, help="seed of the Monte-Carlo samples (default 0)")
    p.add_argument("--json", action="store_true", help="print JSON")
    _data_arguments(p)
    p.set_defaults(func=_cmd_evaluate)

    p = sub.add_parser("experiment", help="run a named experiment (results.csv, metadata.json, figure.png)",
                       description="Run a registered experiment and write results.csv, metadata.json "
                       "(versions, seed, options, wall time) and figure.png into --out.")
    p.add_argument("name", nargs="?", metavar="NAME", help="experiment name (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments")
    p.add_argument("--quick", action="store_true", help="scaled-down run (seconds)")
    p.add_argument("--out", metavar="DIR", help="output directory (default results/NAME)")
    p.add_argument("--seed", type=_nonneg_int, default=None, help="random seed (default: fresh, recorded)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="experiment option (repeatable)")
    p.set_defaults(func=_cmd_experiment)
    return parser


# ------------------------------------------------------------------------------------------ main
def _one_line(text: str) -> str:
    return " ".join(str(text).split()) or "(no message)"


def _error(message: str) -> None:
    print(f"{PROG}: error: {_one_line(message)}", file=sys.stderr, flush=True)


def _os_error(exc: OSError) -> str:
    name = exc.filename if exc.filename is not None else ""
    what = exc.strerror or type(exc).__name__
    return f"{what}: {name!s}" if name else _one_line(str(exc))


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so that partly written outputs are removed on the way out."""


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Terminated()


@contextlib.contextmanager
def _sigterm_unwinds():
    """While the command runs, SIGTERM unwinds the stack (temporary files are removed) like Ctrl-C."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():  # handlers live in the main thread only
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status.

    0 ok, 1 failure (non-convergence, a bug), 2 user error (one ``nnrecover: error:`` line), 130
    interrupted (Ctrl-C), 143 terminated (SIGTERM). An interrupted or terminated command leaves every
    output file as it was before (outputs are written to temporary files renamed into place when
    complete).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    with warnings.catch_warnings(), _sigterm_unwinds():
        def _show(message, category, filename, lineno, file=None, line=None):
            print(f"{PROG}: warning: {_one_line(str(message))} [{category.__name__}]", file=sys.stderr, flush=True)

        warnings.showwarning = _show
        try:
            parser = build_parser()
            args = parser.parse_args(argv)
            if args.command is None:
                parser.print_help()
                return 2
            args.argv = argv[argv.index(args.command) + 1:]
            from ._threads import blas_threads

            # every command's work is chunk-sized products and small solves: one BLAS thread (see
            # nnrecover._threads); the learners' chunk passes still use the cores through workers
            with blas_threads(1):
                return int(args.func(args) or 0)
        except SystemExit as exc:  # --help / --version
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        except _UsageError as exc:
            _error(str(exc))
            return 2
        except ConvergenceError as exc:
            if debug:  # the traceback, and the same exit status as without --debug
                traceback.print_exc()
            _error(f"{exc} [ConvergenceError]")
            return 1
        except NNRecoverError as exc:
            if debug:  # the traceback, and the same exit status as without --debug
                traceback.print_exc()
            _error(str(exc))
            return 2
        except BrokenPipeError:  # e.g. 'nnrecover methods | head': stop quietly
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        except (OSError, json.JSONDecodeError) as exc:
            if debug:  # the traceback, and the same exit status as without --debug
                traceback.print_exc()
            _error(_os_error(exc) if isinstance(exc, OSError) else f"invalid JSON: {exc}")
            return 2
        except KeyboardInterrupt:
            _error("interrupted; output files were left as they were")
            return 130
        except _Terminated:
            _error("terminated; output files were left as they were")
            return 143
        except MemoryError as exc:
            if debug:  # the traceback, and the same exit status as without --debug
                traceback.print_exc()
            _error(f"out of memory ({_one_line(str(exc)) or 'MemoryError'}); reduce the problem size "
                   "(samples, hidden units, learner options such as max_samples)")
            return 2
        except Exception as exc:  # a bug: one line, traceback on --debug
            if debug:
                raise
            _error(f"internal error ({type(exc).__name__}: {_one_line(str(exc))}); rerun with --debug for "
                   "the traceback and please report it")
            return 1


if __name__ == "__main__":  # python -m nnrecover.cli
    sys.exit(main())
