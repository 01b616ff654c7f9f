"""The commands of ``nnrecover``: ``demo``, ``methods``, ``simulate``, ``fit``, ``check``, ``evaluate``, ``experiment``.

Each ``cmd_<name>(args)`` takes the parsed arguments (:func:`nnrecover.cli.parser.build_parser`) and
returns the exit status; a user mistake is raised as an :class:`~nnrecover.errors.InputError` and
printed as one line by :func:`nnrecover.cli.main`. Outputs are checked for writability before the work
starts and written whole or not at all (:mod:`nnrecover.io`). ``extract`` is in
:mod:`nnrecover.cli.extract`.

The experiments subpackage (and with it the learners it fits, scikit-learn and pandas) and
:mod:`nnrecover.metrics` (SciPy's optimize and spatial modules) are imported inside the commands that
use them: at module top they would make ``nnrecover --help`` take about three times as long.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .. import distributions as D
from .._validation import as_float_array, check_finite
from ..errors import ConvergenceError, InputError
from ..io import SAMPLE_FORMATS, load_samples, sample_file_bytes, save_sample_stream
from ..files import atomic_outputs, check_distinct, check_free_space, check_writable, prepare_output_dir, write_text_atomic
from ..network import TwoLayerNetwork, random_network
from ..sampling import sample, sample_stream

__all__ = ["cmd_demo", "cmd_methods", "cmd_simulate", "cmd_fit", "cmd_check", "cmd_evaluate", "cmd_experiment",
           "parse_option", "one_line", "DISTRIBUTIONS"]

_HIDDEN_WEIGHTS_FORMAT = "nnrecover.HiddenWeights/1"
DISTRIBUTIONS = ("gaussian", "mixture", "rademacher")


def _say(text: str = "") -> None:
    print(text, flush=True)



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
    from ..experiments.runner import to_jsonable  # deferred: keeps --help fast

    return json.dumps(to_jsonable(data), indent=1) + "\n"


def _write_json(path: Path, data: dict) -> None:
    """Write ``data`` as JSON, completely or not at all (:func:`nnrecover.files.write_text_atomic`)."""
    write_text_atomic(path, _json_text(data))


def _out_file(path: str, flag: str = "--out") -> Path:
    """An output file that can be written, checked before the command does its work.

    The folder is created if missing and probed with a temporary file (:func:`nnrecover.files.check_writable`),
    so that an unwritable path is a one-line error before any computation, not after it.
    """
    return check_writable(path, flag)


def _out_dir(path: str, names: Sequence[str] = (), flag: str = "--out") -> Path:
    """An output folder (created if missing) in which each of ``names`` can be written."""
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


def _distribution_from_spec(spec: dict | None, d: int):
    if not spec:
        return D.StandardGaussian(d)
    name = spec.get("name")
    if name == "gaussian":
        return D.StandardGaussian(d)
    if name == "rademacher":
        return D.Rademacher(d)
    if name == "mixture":
        return D.SymmetricMixture(spec["means"], spec.get("cov"))
    raise InputError(f"unknown distribution {name!r} in the teacher file; known: {', '.join(DISTRIBUTIONS)}.")


def _make_distribution(args, d: int, gen) -> tuple[Any, dict]:
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


_DEMO_FILES = ("demo.png", "recovery.png", "results.csv", "teacher.json", "metadata.json")


def _demo_verdicts(teacher, dist, n: int, args) -> None:
    """One line per learner: does it apply to these data, and why (``nr.check`` on the first rows)."""
    from ..assumptions import check  # deferred: check imports every learner (scikit-learn)
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


def cmd_demo(args) -> int:
    # deferred: keeps --help fast
    from ..experiments.compare import (
        DEMO_DEFAULTS, DEMO_MAX_OUTPUTS, FAILED_FUNCTION_ERROR, FAILED_UNIT_ERROR, compare_learners, comparison_figure,
        demo_options, demo_teacher, recovery_figure, select_learners)
    from ..experiments.runner import environment_info  # deferred: keeps --help fast

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


def cmd_methods(args) -> int:
    from ..learners import PAPERS, available  # deferred: the learners import scikit-learn, which --help need not load
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


def cmd_simulate(args) -> int:
    from ..experiments.runner import resolve_seed  # deferred: keeps --help fast

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


def cmd_fit(args) -> int:

    from ..learners import make_learner  # deferred: the learners import scikit-learn, which --help need not load
    options = _options(args.option)
    if args.seed is not None and "random_state" in options:
        raise InputError("give the seed either as --seed or as --option random_state=..., not both.")
    if Path(args.out).suffix.lower() not in (".json", ".npz"):
        raise InputError(f"--out must name a .json or .npz file, got {str(args.out)!r}.")
    est = make_learner(args.learner, args.hidden, options, random_state=args.seed)
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
    p = Path(path)
    if p.suffix.lower() == ".json" and p.exists():
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            raise InputError(f"{p.name} is not valid JSON: {one_line(str(exc))[:200]}") from None
        if isinstance(data, dict) and data.get("format") == _HIDDEN_WEIGHTS_FORMAT:
            W = as_float_array(data.get("hidden_weights"), f"hidden_weights in {p.name}")
            if W.ndim != 2 or 0 in W.shape:
                raise InputError(f"{p.name}: hidden_weights must be a non-empty (k, d) matrix, got shape {W.shape}.")
            check_finite(W, f"hidden_weights in {p.name}")
            return W
    return TwoLayerNetwork.load(path)


def cmd_check(args) -> int:
    from ..assumptions import check  # deferred: check imports every learner (scikit-learn)
    from ..experiments.runner import to_jsonable  # deferred: keeps --help fast

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


def cmd_evaluate(args) -> int:
    from .. import metrics  # deferred: SciPy optimize/spatial, keeps --help fast
    from ..experiments.runner import to_jsonable  # deferred: keeps --help fast

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


def cmd_experiment(args) -> int:
    from ..experiments import available_experiments  # deferred: keeps --help fast
    from ..experiments.runner import run_experiment  # deferred: keeps --help fast

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


def one_line(text: str) -> str:
    return " ".join(str(text).split()) or "(no message)"

