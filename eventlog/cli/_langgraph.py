"""`eventlog langgraph-copy`: LangGraph threads from one saver to another, through
`eventlog.langgraph.copy_threads` (this module only opens the savers and reports).

A saver is named `sqlite:PATH` (`SqliteSaver`), `postgres:DSN` (`PostgresSaver`), or is an
eventlog log (a directory or a `postgresql://` URL, as --log takes), read by `EventLogSaver`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
from collections.abc import Iterator
from typing import Any

from ._common import EXIT_CONFLICT, EXIT_ERROR, EXIT_NOT_FOUND, EXIT_OK, _emit_json, _Fail, _key, _progress, _say

__all__ = ["cmd_langgraph_copy"]


def _missing(exc: ImportError, what: str, install: str) -> _Fail:
    """The one-line error for an optional package that is not installed."""
    return _Fail(f"{what} needs {exc.name or 'a package that is not installed'}: {install}", EXIT_ERROR)


def _integration(what: str) -> Any:
    """`eventlog.langgraph`, or the error naming its extra."""
    try:
        from .. import langgraph
    except ImportError as exc:
        raise _missing(exc, what, "pip install 'eventlog[langgraph]'") from None
    return langgraph


@contextlib.contextmanager
def _saver(spec: str, args: argparse.Namespace, *, target: bool) -> Iterator[Any]:
    """The saver `spec` names, open for the copy (a target is made if missing; a source must exist)."""
    side = "--to" if target else "--from"
    if spec.startswith("sqlite:"):
        path = spec.removeprefix("sqlite:")
        if not target and not os.path.isfile(path):
            raise _Fail(f"no SQLite file at {path} ({side})", EXIT_NOT_FOUND)
        try:
            from langgraph.checkpoint.sqlite import SqliteSaver
        except ImportError as exc:
            raise _missing(exc, f"{side} sqlite:", "pip install langgraph-checkpoint-sqlite") from None
        with SqliteSaver.from_conn_string(path) as sqlite:
            yield sqlite
    elif spec.startswith("postgres:"):
        try:
            from langgraph.checkpoint.postgres import PostgresSaver
        except ImportError as exc:
            raise _missing(exc, f"{side} postgres:", "pip install langgraph-checkpoint-postgres") from None
        with PostgresSaver.from_conn_string(spec.removeprefix("postgres:")) as postgres:
            if target:
                postgres.setup()
            yield postgres
    else:
        import eventlog

        lg = _integration(f"{side} LOG")
        local = "://" not in spec and spec != ":memory:"
        options: dict[str, Any] = {"durability": "none"} if local and target else {}  # one sync, at close
        made = local and target and not os.path.exists(spec)
        try:
            with eventlog.open(spec, readonly=not target, create=target, key=_key(args), **options) as log:
                saver = lg.EventLogSaver(log)
                try:
                    yield saver
                finally:
                    saver.close()
        except BaseException:
            if made:  # a failed copy leaves no log behind where there was none
                shutil.rmtree(spec, ignore_errors=True)
            raise


def cmd_langgraph_copy(args: argparse.Namespace) -> int:
    lg = _integration("langgraph-copy")
    threads = args.thread or None
    with (
        _saver(args.source, args, target=False) as source,
        _saver(args.target, args, target=True) as target,
        _progress("copying checkpoints", None) as advance,
    ):
        try:
            report = lg.copy_threads(
                source, target, threads, replace=args.replace, progress=lambda done, total: advance(1, total=total)
            )
        except lg.ThreadExistsError as exc:
            raise _Fail(f"{exc}", EXIT_CONFLICT) from None
        except lg.ThreadNotFoundError as exc:
            raise _Fail(f"{exc}", EXIT_NOT_FOUND) from None
    if args.json:
        _emit_json({"threads": list(report.threads), "checkpoints": report.checkpoints, "writes": report.writes})
    else:
        _say(f"copied {len(report.threads)} thread(s): {report.checkpoints} checkpoints, {report.writes} writes")
        for thread_id in report.threads:
            _say(f"  {thread_id}")
    return EXIT_OK
