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
(:func:`nnrecover.files.check_distinct`). Every file is written to a temporary file in the same folder
that is renamed into place only when complete (:func:`nnrecover.files.atomic_output`), and the files of
one result (``fit``'s model and diagnostics, ``extract``'s network and diagnostics, the files of
``demo`` and ``experiment``) are renamed together once all are complete
(:func:`nnrecover.files.atomic_outputs`). An error, Ctrl-C (exit 130) or SIGTERM (exit 143) leaves every
output as it was; a ``fit`` whose model predicts non-finite values on its training data writes
nothing (exit 1).

Modules: :mod:`~nnrecover.cli.parser` (the argument parser), :mod:`~nnrecover.cli.commands` (every
command but ``extract``), :mod:`~nnrecover.cli.extract` (``extract``); here :func:`main`, which runs
a command and turns its errors into the exit statuses above.

Entry point: :func:`main` (``nnrecover = nnrecover.cli:main`` in pyproject.toml; also
``python -m nnrecover``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import traceback
import warnings
from typing import Sequence

from .._threads import blas_threads
from ..errors import ConvergenceError, NNRecoverError
from .commands import one_line
from .parser import PROG, UsageError, build_parser

__all__ = ["main"]


def _error(message: str) -> None:
    print(f"{PROG}: error: {one_line(message)}", file=sys.stderr, flush=True)


def _os_error(exc: OSError) -> str:
    name = exc.filename if exc.filename is not None else ""
    what = exc.strerror or type(exc).__name__
    return f"{what}: {name!s}" if name else one_line(str(exc))


class _Terminated(BaseException):
    """SIGTERM, turned into an exception so that partly written outputs are removed on the way out."""


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Terminated()


@contextlib.contextmanager
def _sigterm_unwinds():
    """While the command runs, SIGTERM unwinds the stack (temporary files are removed) like Ctrl-C."""
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
            print(f"{PROG}: warning: {one_line(str(message))} [{category.__name__}]", file=sys.stderr, flush=True)

        warnings.showwarning = _show
        try:
            parser = build_parser()
            args = parser.parse_args(argv)
            if args.command is None:
                parser.print_help()
                return 2
            args.argv = argv[argv.index(args.command) + 1:]
            # every command's work is chunk-sized products and small solves: one BLAS thread (see
            # nnrecover._threads); the learners' chunk passes still use the cores through workers
            with blas_threads(1):
                return int(args.func(args) or 0)
        except SystemExit as exc:  # --help / --version
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        except UsageError as exc:
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
            _error(f"out of memory ({one_line(str(exc)) or 'MemoryError'}); reduce the problem size "
                   "(samples, hidden units, learner options such as max_samples)")
            return 2
        except Exception as exc:  # a bug: one line, traceback on --debug
            if debug:
                raise
            _error(f"internal error ({type(exc).__name__}: {one_line(str(exc))}); rerun with --debug for "
                   "the traceback and please report it")
            return 1
