"""The `eventlog` command: look into runs, travel in time and keep a log healthy.

A thin layer over the public API. Tables for people, `--json` for scripts; errors are one
line on stderr, and the exit code tells them apart (see docs/cli.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from ..diff import diff_states
from ..errors import (
    CheckpointNotFoundError,
    ConflictError,
    CorruptRecordError,
    EventLogError,
    ForkDependencyError,
    InvalidArgumentError,
    InvalidEventError,
    InvalidRunIdError,
    NoLogError,
    NotALogError,
    OffsetOutOfRangeError,
    PrunedError,
    RunExistsError,
    UnknownKindError,
    UnknownRunError,
)
from ._commands import _HANDLERS
from ._common import (
    _ENV_KINDS,
    EXIT_CONFLICT,
    EXIT_CORRUPT,
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    _Fail,
    _load_kinds,
    _safe,
    _Usage,
)
from ._parser import _COMMANDS, build_parser, commands

__all__ = [
    "EXIT_CONFLICT",
    "EXIT_CORRUPT",
    "EXIT_ERROR",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_USAGE",
    "build_parser",
    "commands",
    "diff_states",
    "main",
]

# tools/gen_cli_docs.py and the tests read the command table and the handlers from here.
__all__ += ["_COMMANDS", "_HANDLERS"]


# -- main --------------------------------------------------------------------------------------


def _exit_code(exc: EventLogError) -> int:
    if isinstance(exc, (UnknownRunError, CheckpointNotFoundError, OffsetOutOfRangeError, PrunedError, NoLogError)):
        return EXIT_NOT_FOUND
    if isinstance(exc, (ConflictError, RunExistsError, ForkDependencyError)):
        return EXIT_CONFLICT
    if isinstance(exc, (InvalidRunIdError, InvalidEventError, InvalidArgumentError, UnknownKindError)):
        return EXIT_USAGE
    from ..transfer import ExportFileError

    if isinstance(exc, (CorruptRecordError, NotALogError, ExportFileError)):
        return EXIT_CORRUPT
    return EXIT_ERROR


def _serve_on_the_c_allocator() -> None:
    """Start this command again, the same process, with `PYTHONMALLOC=malloc` and (unless set)
    `MALLOC_ARENA_MAX=2`, on Linux, unless PYTHONMALLOC is set: the viewer's server then gives
    back what it freed after a long run's state, which Python's own allocator keeps in blocks
    that a few objects outliving the request pin, and which glibc would spread over an arena per
    thread."""
    if os.environ.get("PYTHONMALLOC") or not sys.platform.startswith("linux"):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    env = {"MALLOC_ARENA_MAX": "2", **os.environ, "PYTHONMALLOC": "malloc"}
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


def _fail(message: str, code: int) -> int:
    sys.stderr.write("eventlog: error: " + _safe(" ".join(str(message).split())) + "\n")
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `eventlog` command with `argv` (default: sys.argv[1:]); return its exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _Usage as exc:
        return _fail(str(exc), EXIT_USAGE)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if argv is None and args.command == "ui":
        _serve_on_the_c_allocator()
    try:
        kinds = list(getattr(args, "kinds", None) or [])
        kinds += [m.strip() for m in os.environ.get(_ENV_KINDS, "").split(",") if m.strip()]
        _load_kinds(kinds)
        return _HANDLERS[args.command](args)
    except _Fail as exc:
        return _fail(str(exc), exc.code)
    except CorruptRecordError as exc:
        hint = " (if the log holds event kinds of your own, pass --kinds MODULE)" if "undecodable" in exc.what else ""
        return _fail(str(exc) + hint, EXIT_CORRUPT)
    except EventLogError as exc:
        return _fail(str(exc), _exit_code(exc))
    except FileNotFoundError as exc:
        return _fail(f"{exc.strerror}: {exc.filename}", EXIT_NOT_FOUND)
    except BrokenPipeError:
        return EXIT_OK
    except OSError as exc:
        return _fail(f"{exc.strerror or exc}: {exc.filename or ''}", EXIT_ERROR)
    except KeyboardInterrupt:
        return _fail("interrupted", 130)
    except Exception as exc:
        if os.environ.get("EVENTLOG_DEBUG"):
            raise
        return _fail(f"{type(exc).__name__}: {exc} (set EVENTLOG_DEBUG=1 to see the traceback)", EXIT_ERROR)
