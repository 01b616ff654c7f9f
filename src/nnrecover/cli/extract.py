"""The ``nnrecover extract`` subcommand: :func:`add_parser` builds it, :func:`run` executes it.

``nnrecover extract MODEL --inputs d [--hidden k|k1,k2,..|auto] [--depth L|auto] [--max-queries Q] --out
model.json`` loads the
black box (:func:`nnrecover.extraction.loaders.load_model`), extracts it with a progress bar on
stderr, prints the queries used, the time and the certified error on fresh queries, and writes the
network (``--out``, ``.json`` or ``.npz``: a ``TwoLayerNetwork`` file for one hidden layer, a
``DeepNetwork`` file for more, with the widths found per layer printed) and its diagnostics (``--diagnostics``, default
``<out>.diagnostics.json``) together: both files or neither (:func:`nnrecover.files.atomic_outputs`), and
never over the model file. When the budget runs out the diagnostics of the partial result are written
beside them as ``<diagnostics stem>.partial.json`` (the files of an earlier complete run are left as they
were) and the error (one line) says what was recovered. A result whose certificate failed never
replaces the requested files: it is written beside them as ``<out stem>.failed<suffix>`` and
``<diagnostics stem>.failed.json`` (the command says so and exits 1), so that a good ``net.json``
survives a failed rerun.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError, QueryBudgetError
from ..extraction import extract, load_model
from ..files import atomic_outputs, check_distinct, check_writable, write_text_atomic

__all__ = ["add_parser", "run"]


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from exc
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}")
    return n


def _budget(value: str) -> "int | str | None":
    if value in ("auto", "none"):
        return None if value == "none" else value
    try:
        return _positive_int(value)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"--max-queries must be a positive int, 'auto' or 'none', got {value!r}") \
            from exc


def _hidden(value: str) -> "int | str | tuple":
    if value == "auto":
        return value
    try:
        if "," in value:
            return tuple(_positive_int(v) for v in value.split(","))
        return _positive_int(value)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"--hidden must be a positive int, comma-separated widths (one per hidden "
                                         f"layer, e.g. 20,20) or 'auto', got {value!r}") from exc


def _depth(value: str) -> "int | str":
    if value == "auto":
        return value
    try:
        return _positive_int(value)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"--depth must be a positive int or 'auto', got {value!r}") from exc


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``extract`` subcommand to an ``argparse`` subparsers object; returns its parser."""
    p = subparsers.add_parser(
        "extract", help="extract a ReLU network (any number of hidden layers) from a black box by queries",
        description="Recover f(x) = A relu(W x + b) + c from queries of MODEL: a .skops file (scikit-learn "
                    "MLPRegressor/MLPClassifier), a .safetensors PyTorch state_dict of "
                    "Sequential(Linear, ReLU, Linear), an .onnx file, or module:function.")
    p.add_argument("model", help="model file (.skops, .safetensors, .onnx) or module:function")
    p.add_argument("--inputs", type=_positive_int, default=None,
                   help="number of inputs d (default: read from the model file when it records it)")
    p.add_argument("--hidden", type=_hidden, default="auto",
                   help="number of hidden units, comma-separated widths per hidden layer, or 'auto' (default)")
    p.add_argument("--depth", type=_depth, default="auto",
                   help="number of hidden layers, or 'auto' (default: one hidden layer is tried first, then "
                        "layer by layer)")
    p.add_argument("--method", choices=("auto", "critical-points", "moments"), default="auto",
                   help="critical-points (chosen queries, exact to the model's round-off; what 'auto', the "
                        "default, runs) or moments (Gaussian queries only, to a moment learner's precision)")
    p.add_argument("--max-queries", type=_budget, default="auto",
                   help="hard budget on the rows queried: a number, 'auto' (default: max(2^24, 2^14 d), far above "
                        "what a one-hidden-layer network needs; it stops a search that does not converge) or "
                        "'none'")
    p.add_argument("--input-scale", type=float, default=None,
                   help="standard deviation of the Gaussian query points (the region of interest; default 1, or "
                        "for a classifier the largest 2^-j at which its probabilities do not saturate)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the query points (default 0)")
    p.add_argument("--out", required=True, help="output network file (.json or .npz)")
    p.add_argument("--diagnostics", default=None, help="diagnostics JSON (default: <out>.diagnostics.json)")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bar (there is none anyway when stderr is not a terminal)")
    p.set_defaults(func=run)
    return p


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return str(obj)
    return obj


def _write_json(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(_jsonable(data), indent=1))


def run(args: argparse.Namespace) -> int:
    """Execute ``nnrecover extract``; returns the exit status (0 when the certificate passed, else 1).

    Raises
    ------
    InputError, QueryBudgetError
        User mistakes and an exhausted budget; the caller prints them as one line.
    """
    out = Path(args.out)
    if out.suffix.lower() not in (".json", ".npz"):
        raise InputError(f"--out must name a .json or .npz file, got {args.out!r}.")
    diag_path = Path(args.diagnostics) if args.diagnostics else out.with_name(out.name + ".diagnostics.json")
    partial_path = diag_path.with_name(diag_path.stem + ".partial.json")
    failed_out = out.with_name(out.stem + ".failed" + out.suffix)
    failed_diag = diag_path.with_name(diag_path.stem + ".failed.json")
    model_file = args.model if Path(args.model).exists() else None  # else module:function
    check_distinct({"MODEL": model_file}, {"--out": out, "--diagnostics": diag_path,
                                           "the partial diagnostics (<diagnostics stem>.partial.json)": partial_path,
                                           "the failed result (<out stem>.failed<suffix>)": failed_out,
                                           "its diagnostics (<diagnostics stem>.failed.json)": failed_diag})
    for path, flag in ((out, "--out"), (diag_path, "--diagnostics")):
        check_writable(path, flag)
    model = load_model(args.model)
    d = args.inputs if args.inputs is not None else model.n_inputs
    if d is None:
        raise InputError(f"the number of inputs of {args.model!r} is not recorded in it; give --inputs d.")
    if model.n_inputs is not None and args.inputs is not None and args.inputs != model.n_inputs:
        raise InputError(f"--inputs {args.inputs} disagrees with the model, which takes {model.n_inputs} inputs.")
    try:
        res = extract(model, d, n_hidden=args.hidden, depth=args.depth, method=args.method,
                      max_queries=args.max_queries,
                      rng=args.seed, input_scale=args.input_scale,
                      # a bar only on a terminal: in a file its carriage-return frames stay as text,
                      # and an error message would share their line
                      progress=not args.no_progress and _is_terminal(sys.stderr))
    except QueryBudgetError as exc:
        if exc.partial is not None:
            _write_json(partial_path, {"model": args.model, **exc.partial.diagnostics_})
            # at the command line the partial result is a file, not the exception's attribute
            where = f"the diagnostics of the partial result are in {partial_path}"
            api = "the partial result is in the exception's 'partial' attribute"
            msg = str(exc).replace(api, where) if api in str(exc) else f"{exc} ({where})"
            raise QueryBudgetError(msg, partial=exc.partial, n_queries=exc.n_queries) from None
        raise
    diag = {"model": args.model, "model_kind": model.kind, **res.diagnostics_}
    cert = res.diagnostics_["certificate"]
    net_path, diag_out = (out, diag_path) if cert["passed"] else (failed_out, failed_diag)
    with atomic_outputs([net_path, diag_out]) as (net_tmp, diag_tmp):
        res.network_.save(net_tmp)
        diag_tmp.write_text(json.dumps(_jsonable(diag), indent=1), encoding="utf-8")
    net = res.network_
    if hasattr(net, "hidden_sizes"):
        print(f"extracted {net.depth} hidden layers of widths {', '.join(map(str, net.hidden_sizes))} from "
              f"{model.kind} ({d} inputs, {net.n_outputs} output(s))")
    else:
        print(f"extracted {net.n_hidden} hidden units from {model.kind} ({d} inputs, {net.n_outputs} output(s))")
    per_layer = res.diagnostics_.get("unidentifiable_per_layer")
    if per_layer and any(per_layer) and hasattr(net, "hidden_sizes"):
        print(f"the model file declares widths {res.diagnostics_['declared_hidden_sizes']}: "
              f"{', '.join(map(str, per_layer))} neuron(s) per layer left no critical point on the queried region "
              "(dead downstream, or never crossed) and do not change the function there; see 'unidentifiable' "
              "in the diagnostics")
    region = res.diagnostics_.get("query_region")
    if region is not None and region["input_scale"] != region["requested_input_scale"]:
        lo, hi = region["output_range"]
        print(f"input scale: {region['input_scale']:.3g} (outputs within [{lo:g}, {hi:g}], where the model's "
              "probabilities do not saturate)")
    lost = res.diagnostics_.get("unidentifiable_units")
    if lost and res.diagnostics_.get("declared_n_hidden") is not None:
        print(f"the model file declares {res.diagnostics_['declared_n_hidden']} hidden units: {lost} left no "
              "critical point on the queried region (never active there, or zero output weight) and do not "
              "change the function there; see 'unidentifiable' in the diagnostics")
    print(f"queries used: {res.n_queries_}")
    print(f"time: {res.diagnostics_['seconds']:.2f} s")
    print(f"certified on {cert['queries']} fresh queries: max error {cert['max_abs_error']:.3g}, relative "
          f"error {cert['relative_error']:.3g} ({'passed' if cert['passed'] else 'FAILED'})")
    if cert["passed"]:
        print(f"wrote {out} and {diag_path}")
    else:
        kept = f"{out} was left as it was" if out.exists() else f"{out} was not written"
        print(f"certificate FAILED: wrote the result to {failed_out} and {failed_diag}; {kept}")
    sys.stdout.flush()
    return 0 if cert["passed"] else 1


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced stream
        return False
