"""The argument parser of ``nnrecover``: :func:`build_parser` and the argparse value types.

Every subcommand's arguments and ``--help`` text are here; each subcommand's function is set as the
``func`` default (:mod:`nnrecover.cli.commands`, and :mod:`nnrecover.cli.extract` for ``extract``,
which builds its own subparser). Syntax errors raise :class:`UsageError` instead of argparse's
print-usage-and-exit, so that :func:`nnrecover.cli.main` prints them as one line.
"""

from __future__ import annotations

import argparse
import contextlib

import numpy as np

from .. import __version__
from . import commands, extract

__all__ = ["build_parser", "UsageError", "Parser", "PROG"]

PROG = "nnrecover"


class UsageError(Exception):
    """A command-line syntax error (raised instead of argparse's print-usage-and-exit)."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # noqa: D401 - argparse hook
        raise UsageError(f"{message} (see '{self.prog} --help')")


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
    parser = Parser(prog=PROG, description="Provable recovery of two-layer neural networks "
                    "f(x) = A act(W x + b) + c from input-output samples.",
                    epilog="Run 'nnrecover demo' for a two-minute tour; 'nnrecover COMMAND --help' for details.")
    parser.add_argument("--version", action="version", version=f"nnrecover {__version__}")
    parser.add_argument("--debug", action="store_true", help="show Python tracebacks (for bug reports)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)

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
    p.set_defaults(func=commands.cmd_demo)

    p = sub.add_parser("methods", help="list the implemented algorithms (paper, algorithm, assumptions)",
                       description="List every registered algorithm: its name, paper, the paper's algorithm "
                       "label, the implementing class or function, whether 'fit --learner NAME' runs it (fit = "
                       "yes: the learners; the others are Python functions), and its assumptions.")
    p.add_argument("--paper", help="only this paper (awasthi2021, ge2019, bakshi2019, goel2019, baseline)")
    p.add_argument("--learners-only", action="store_true", help="only estimators usable by 'nnrecover fit'")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=commands.cmd_methods)

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
    p.add_argument("--distribution", choices=commands.DISTRIBUTIONS, default="gaussian",
                   help="input law: N(0, I), symmetric Gaussian mixture, or uniform on {-1, 1}^d")
    p.add_argument("--mixture-components", type=_pos_int, default=None, metavar="J",
                   help="mixture: pairs of components N(+mu_j, I), N(-mu_j, I) (default 2)")
    p.add_argument("--mixture-scale", type=_nonneg_float, default=None, help="mixture: |mu_j| (default 1)")
    p.add_argument("--antithetic", action="store_true", help="emit samples in pairs (x, -x) (n even)")
    p.add_argument("--seed", type=_nonneg_int, default=None, help="random seed (default: fresh, printed)")
    p.add_argument("--out", default="samples.npz", help="samples file (default samples.npz)")
    p.add_argument("--teacher", default=None, metavar="T.json",
                   help="write the teacher here (default teacher.json; not written with --use-teacher unless given)")
    p.set_defaults(func=commands.cmd_simulate)

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
    p.set_defaults(func=commands.cmd_fit)

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
    p.set_defaults(func=commands.cmd_check)

    extract.add_parser(sub)

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
    p.set_defaults(func=commands.cmd_evaluate)

    p = sub.add_parser("experiment", help="run a named experiment (results.csv, metadata.json, figure.png)",
                       description="Run a registered experiment and write results.csv, metadata.json "
                       "(versions, seed, options, wall time) and figure.png into --out.")
    p.add_argument("name", nargs="?", metavar="NAME", help="experiment name (see --list)")
    p.add_argument("--list", action="store_true", help="list the experiments")
    p.add_argument("--quick", action="store_true", help="scaled-down run (seconds)")
    p.add_argument("--out", metavar="DIR", help="output directory (default results/NAME)")
    p.add_argument("--seed", type=_nonneg_int, default=None, help="random seed (default: fresh, recorded)")
    p.add_argument("--option", action="append", metavar="KEY=VALUE", help="experiment option (repeatable)")
    p.set_defaults(func=commands.cmd_experiment)
    return parser
