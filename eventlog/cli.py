"""The `eventlog` command: look into runs, travel in time and keep a log healthy.

A thin layer over the public API. Tables for people, `--json` for scripts; errors are one
line on stderr, and the exit code tells them apart (see docs/cli.md).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

import msgspec

from . import __version__
from .errors import (
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

__all__ = ["EXIT_CONFLICT", "EXIT_CORRUPT", "EXIT_ERROR", "EXIT_NOT_FOUND", "EXIT_USAGE", "build_parser", "main"]

EXIT_OK = 0
EXIT_ERROR = 1
"""Any other error (a declined `delete`, a full disk, a log of a newer format)."""
EXIT_USAGE = 2
"""Bad arguments or options, no log given, or an event kind this process does not know (pass --kinds)."""
EXIT_NOT_FOUND = 3
"""No log at the path, no such run, checkpoint or file, an offset out of range or pruned."""
EXIT_CONFLICT = 4
"""The run exists already, another writer moved the head, or forks depend on the run."""
EXIT_CORRUPT = 5
"""A damaged record, `verify` found problems, or an import file that does not decode."""

_HELP_WIDTH = 88
_ENV_LOG = "EVENTLOG_PATH"
_ENV_KINDS = "EVENTLOG_KINDS"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Help of a fixed width (the same in every terminal), `-o, --output FILE` style."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_HELP_WIDTH, max_help_position=30)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        return (
            ", ".join(action.option_strings)
            + " "
            + self._format_args(action, self._get_default_metavar_for_optional(action))
        )


class _Usage(Exception):
    """A usage error found by the parser."""


class _Parser(argparse.ArgumentParser):
    """Raises on a usage error instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise _Usage(f"{self.prog}: {message} (see {self.prog} --help)")


class _Fail(Exception):
    """An error with its exit code, printed as one line."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


# -- output ----------------------------------------------------------------------------------


def _console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    wide = None if stream.isatty() or "COLUMNS" in os.environ else 160  # piped: do not fold at 80
    # markup=False: run ids, metadata and events are printed as they are, never read as markup.
    return Console(file=stream, highlight=False, soft_wrap=False, width=wide, markup=False)


def _emit_json(value: Any) -> None:
    sys.stdout.write(msgspec.json.encode(value).decode() + "\n")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def _safe(text: object) -> str:
    """Text from the log as it may reach a terminal: control characters (ANSI escapes, bidi
    overrides) shown as escapes, never interpreted."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), str(text))


def _say(text: str, **style: Any) -> None:
    _console().print(_safe(text), **style)


def _table(title: str | None, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    from rich.table import Table

    table = Table(title=None if title is None else _safe(title), header_style="bold", show_lines=False)
    for i, name in enumerate(columns):
        last = i == len(columns) - 1
        table.add_column(_safe(name), overflow="fold", no_wrap=not last)
    for row in rows:
        table.add_row(*("" if v is None else _safe(v) for v in row))
    _console().print(table)


def _when(ns: int) -> str:
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _short(value: Any, limit: int = 80) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cell(value: Any) -> str:
    """A summary value in a table cell: lists as comma-separated items."""
    text = "" if value is None else ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    return text if len(text) <= 40 else text[:39] + "…"


def _kind(event: Any) -> str:
    return str(type(event).__struct_config__.tag)


def _fields(event: Any) -> dict[str, Any]:
    return {f: getattr(event, f) for f in type(event).__struct_fields__}


@contextlib.contextmanager
def _progress(description: str, total: int | None) -> Iterator[Callable[..., None]]:
    """A progress bar on stderr (only on a terminal); yields `advance(n, total=None)`.

    Without a total the bar pulses: the work is one step whose length is not known.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = _console(stderr=True)
    columns = [SpinnerColumn(), TextColumn("{task.description}", markup=False), BarColumn()]
    if total is not None:
        columns.append(MofNCompleteColumn())
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(_safe(description), total=total)

        def advance(n: int, total: int | None = None) -> None:
            if total is not None:
                bar.update(task, total=total)
            bar.advance(task, n)

        yield advance


# -- opening the log ---------------------------------------------------------------------------


def _log_path(args: argparse.Namespace) -> str:
    path = getattr(args, "log", None) or os.environ.get(_ENV_LOG)
    if not path:
        raise _Fail(f"no log given: pass --log PATH or set {_ENV_LOG}", EXIT_USAGE)
    return str(path)


def _open(args: argparse.Namespace, *, write: bool = False, create: bool = False, durability: str = "sync") -> Any:
    """The log named by --log (a directory or a PostgreSQL URL); NoLogError unless it exists or `create`."""
    import eventlog

    path = _log_path(args)
    local = "://" not in path and path != ":memory:"
    return eventlog.open(path, readonly=not write, create=create, durability=durability if local else None)


def _load_kinds(modules: Sequence[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - any failure of a user's module (SystemExit too) is reported
            raise _Fail(f"cannot import {name!r} (--kinds): {type(exc).__name__}: {exc}", EXIT_USAGE) from None


# -- commands ----------------------------------------------------------------------------------


def _view(log: Any, run_id: str) -> Any:
    """The run view of an integration's run (see eventlog/views.py), or None."""
    from .views import view_for_run

    return view_for_run(log, run_id)


def _cmd_runs(args: argparse.Namespace) -> int:
    with _open(args) as log:
        infos = [log.run_info(rid) for rid in log.runs()]
        views = {} if args.json else {i.run_id: v for i in infos if (v := _view(log, i.run_id)) is not None}
    if args.json:
        _emit_json(infos)
        return EXIT_OK
    rows = [
        (
            i.run_id,
            i.head,
            i.base or "",
            i.parent or "",
            i.fork_offset if i.parent else "",
            i.checkpoints,
            i.forks,
            _when(i.created_ns),
        )
        for i in infos
    ]
    columns = ["run", "head", "base", "parent", "fork at", "checkpoints", "forks", "created (UTC)"]
    if views:  # runs an integration wrote: name its view
        columns.append("view")
        rows = [(*row, getattr(views.get(i.run_id), "name", "")) for row, i in zip(rows, infos, strict=True)]
    _table(None, columns, rows)
    return EXIT_OK


def _cmd_events(args: argparse.Namespace) -> int:
    after = max(args.from_ - 1, 0) if args.from_ is not None else 0
    kind = args.kind

    def wanted(entry: Any) -> bool:
        tag = _kind(entry.event)
        return kind is None or tag == kind or tag.startswith(kind + ".")

    with _open(args) as log:
        entries = (e for e in log.read(args.run, after=after, upto=args.to) if wanted(e))
        if args.json:
            out = sys.stdout
            out.write("[")
            for i, entry in enumerate(entries):
                out.write(("," if i else "") + msgspec.json.encode(entry).decode())
            out.write("]\n")
            return EXIT_OK
        rows = [
            (e.offset, _when(e.time_ns), _kind(e.event), _short({k: v for k, v in _fields(e.event).items()}))
            for e in entries
        ]
    _table(f"run {args.run}", ["offset", "time (UTC)", "kind", "event"], rows)
    return EXIT_OK


def _checkpoint_dict(cp: Any) -> dict[str, Any]:
    return {
        "checkpoint_id": cp.checkpoint_id,
        "run_id": cp.run_id,
        "offset": cp.offset,
        "created_ns": cp.created_ns,
        "reducer": cp.reducer,
        "reducer_version": cp.reducer_version,
        "summary": cp.summary,
        "metadata": cp.metadata,
    }


def _cmd_history(args: argparse.Namespace) -> int:
    with _open(args) as log:
        view = _view(log, args.run)
        if view is not None:
            columns, found = view.history(log, args.run, args.limit)
            if args.json:
                _emit_json(found)
            else:
                rows = [[row.get(c) for c in columns] for row in found]
                _table(f"{view.name} checkpoints of run {args.run}, oldest first", columns, rows)
            return EXIT_OK
        cps = log.checkpoints.list(args.run, limit=args.limit)
    if args.json:
        _emit_json([_checkpoint_dict(cp) for cp in cps])
        return EXIT_OK
    keys: list[str] = []  # the summary facts the reducer keeps, as columns, in order of first appearance
    for cp in cps:
        keys += [k for k in cp.summary if k not in keys]
    rows = [
        (
            cp.checkpoint_id,
            cp.offset,
            *(_cell(cp.summary.get(k)) for k in keys),
            _when(cp.created_ns),
            _short(cp.metadata, 40),
        )
        for cp in cps
    ]
    _table(
        f"checkpoints of run {args.run}, oldest first",
        ["checkpoint", "offset", *[k.replace("_", " ") for k in keys], "created (UTC)", "metadata"],
        rows,
    )
    return EXIT_OK


def _resolve(log: Any, run_id: str, point: str) -> tuple[int, str | None]:
    """(offset, checkpoint id) of `head`, an offset, or a checkpoint id."""
    if point == "head":
        log.run_info(run_id)  # UnknownRunError for a missing run
        return log.head(run_id), None
    if point.isascii() and point.isdigit():
        return int(point), None
    return log.checkpoints.load(run_id, point).offset, point


def _cmd_state(args: argparse.Namespace) -> int:
    with _open(args) as log:
        checkpoint_id = args.checkpoint
        if checkpoint_id is not None:
            offset = log.checkpoints.load(args.run, checkpoint_id).offset
        else:
            offset = log.run_info(args.run).head if args.at is None else args.at
        view = _view(log, args.run)
        state = log.state_at(args.run, offset) if view is None else view.state(log, args.run, offset)
    doc = {"run_id": args.run, "offset": offset, "checkpoint_id": checkpoint_id, "state": _builtins(state)}
    if args.json:
        _emit_json(doc)
        return EXIT_OK
    console = _console()
    where = f"checkpoint {checkpoint_id}, offset {offset}" if checkpoint_id else f"offset {offset}"
    console.print(_safe(f"run {args.run} at {where}"), style="bold")
    console.print_json(msgspec.json.encode(doc["state"]).decode())
    return EXIT_OK


def _builtins(state: Any) -> Any:
    """A state as plain data with every field, defaults included."""
    if isinstance(state, msgspec.Struct):
        return {f: msgspec.to_builtins(getattr(state, f)) for f in type(state).__struct_fields__}
    return msgspec.to_builtins(state)


def diff_states(a: Any, b: Any) -> dict[str, Any]:
    """What changed from state `a` to state `b`.

    `values` (the graph state): keys `added`, `removed` and `changed` (from, to);
    `messages`: those `messages_appended` after the common start, and `messages_removed`;
    every other field that differs in `fields` (from, to).
    """
    da, db = _builtins(a), _builtins(b)
    if not isinstance(da, dict) or not isinstance(db, dict):
        da, db = {"state": da}, {"state": db}
    va, vb = da.get("values", {}), db.get("values", {})
    out: dict[str, Any] = {
        "added": {k: vb[k] for k in vb if k not in va},
        "removed": {k: va[k] for k in va if k not in vb},
        "changed": {k: {"from": va[k], "to": vb[k]} for k in vb if k in va and va[k] != vb[k]},
    }
    ma, mb = da.get("messages", []), db.get("messages", [])
    common = 0
    while common < min(len(ma), len(mb)) and ma[common] == mb[common]:
        common += 1
    out["messages_appended"] = mb[common:]
    out["messages_removed"] = ma[common:]
    out["fields"] = {
        k: {"from": da.get(k), "to": db.get(k)}
        for k in sorted(set(da) | set(db))
        if k not in ("values", "messages") and da.get(k) != db.get(k)
    }
    return out


def _cmd_diff(args: argparse.Namespace) -> int:
    with _open(args) as log:
        off_a, cp_a = _resolve(log, args.run, args.a)
        off_b, cp_b = _resolve(log, args.run, args.b)
        changes = diff_states(log.state_at(args.run, off_a), log.state_at(args.run, off_b))
    doc = {
        "run_id": args.run,
        "a": {"offset": off_a, "checkpoint_id": cp_a},
        "b": {"offset": off_b, "checkpoint_id": cp_b},
        **changes,
    }
    if args.json:
        _emit_json(doc)
        return EXIT_OK
    rows: list[tuple[str, str, str, str]] = []
    rows += [("added", k, "", _short(v)) for k, v in changes["added"].items()]
    rows += [("removed", k, _short(v), "") for k, v in changes["removed"].items()]
    rows += [("changed", k, _short(v["from"], 40), _short(v["to"], 40)) for k, v in changes["changed"].items()]
    rows += [("field", k, _short(v["from"], 40), _short(v["to"], 40)) for k, v in changes["fields"].items()]
    rows += [
        ("message +", m.get("role", ""), "", _short(m.get("content", m), 60)) for m in changes["messages_appended"]
    ]
    rows += [("message -", m.get("role", ""), _short(m.get("content", m), 60), "") for m in changes["messages_removed"]]
    _table(f"run {args.run}: offset {off_a} → offset {off_b}", ["change", "key", "from", "to"], rows)
    return EXIT_OK


def _cmd_fork(args: argparse.Namespace) -> int:
    with _open(args, write=True) as log:
        new = log.fork(args.run, at=args.at, new_run_id=args.new)
        info = log.run_info(new)
    if args.json:
        _emit_json(info)
    else:
        _say(f"forked run {args.run} at offset {args.at} as {new}")
    return EXIT_OK


def _cmd_verify(args: argparse.Namespace) -> int:
    repaired: list[str] = []
    with _open(args, write=args.repair) as log:
        if args.repair:
            with _progress("repairing", None):
                repaired = log.repair()
        total: int | None = 0
        try:
            for rid in [args.run] if args.run else log.runs():
                info = log.run_info(rid)
                total = (total or 0) + info.head - info.base
        except EventLogError:
            total = None  # verify names what cannot be read
        with _progress("verifying", total) as advance:
            report = log.verify(args.run, progress=advance)
    doc: dict[str, Any] = {"repaired": repaired} if args.repair else {}
    doc |= {
        "ok": report.ok,
        "runs": report.runs,
        "events": report.events,
        "checkpoints": report.checkpoints,
        "problems": report.problems,
    }
    if args.json:
        _emit_json(doc)
    else:
        console = _console()
        for line in repaired:
            _say(f"repaired: {line}")
        if report.problems:
            _table(
                "problems",
                ["run", "offset", "kind", "message"],
                [(p.run_id, p.offset, p.kind, p.message) for p in report.problems],
            )
        verdict = "ok" if report.ok else f"{len(report.problems)} problem(s)"
        console.print(
            f"{verdict}: checked {report.runs} run(s), {report.events} event(s), {report.checkpoints} checkpoint(s)"
        )
    return EXIT_OK if report.ok else EXIT_CORRUPT


def _cmd_prune(args: argparse.Namespace) -> int:
    with _open(args, write=True) as log, _progress(f"pruning run {args.run}", None):
        base = log.prune(args.run, before=args.before)
    if args.json:
        _emit_json({"run_id": args.run, "base": base})
    else:
        _say(
            f"run {args.run}: events and checkpoints below offset {base} removed; its states from offset {base} on stay readable"
        )
    return EXIT_OK


def _cmd_delete(args: argparse.Namespace) -> int:
    with _open(args, write=True) as log:
        info = log.run_info(args.run)
        if not args.yes:
            sys.stderr.write(f"delete run {args.run!r} ({info.head} events, {info.checkpoints} checkpoints)? [y/N] ")
            sys.stderr.flush()
            answer = sys.stdin.readline().strip().lower()
            if answer not in ("y", "yes"):
                raise _Fail(f"run {args.run!r} was not deleted", EXIT_ERROR)
        with _progress(f"deleting run {args.run}", None):
            log.delete_run(args.run)
    if args.json:
        _emit_json({"run_id": args.run, "deleted": True})
    else:
        _say(f"deleted run {args.run}")
    return EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    from .transfer import export_runs

    with _open(args) as log, _progress("exporting", None) as advance:
        summary = export_runs(log, args.output, args.runs or None, progress=advance)
    doc = {"path": str(args.output), **msgspec.structs.asdict(summary)}
    if args.json:
        _emit_json(doc)
    else:
        _say(
            f"exported {summary.runs} run(s), {summary.entries} entries, {summary.checkpoints} checkpoint(s) to {args.output}"
        )
    return EXIT_OK


def _reducers(log: Any) -> list[Any]:
    """Every reducer whose checkpoints an import can save again: the log's, the conversation
    loop's and those of the installed integrations' views."""
    from .conversation import ConversationReducer

    from .views import view_reducers

    return [log.reducer, ConversationReducer(), *view_reducers()]


def _cmd_import(args: argparse.Namespace) -> int:
    from .transfer import import_runs

    if not Path(args.file).is_file():
        raise _Fail(f"no file {args.file}", EXIT_NOT_FOUND)
    target = _log_path(args)
    made = "://" not in target and target != ":memory:" and not os.path.exists(target)
    try:
        with _open(args, write=True, create=True, durability="none") as log, _progress("importing", None) as advance:
            summary = import_runs(log, args.file, progress=advance, reducers=_reducers(log))
    except BaseException:
        if made:  # a failed import leaves no log behind where there was none
            shutil.rmtree(target, ignore_errors=True)
        raise
    doc = {"path": str(args.file), **msgspec.structs.asdict(summary)}
    if args.json:
        _emit_json(doc)
    else:
        _say(
            f"imported {summary.runs} run(s), {summary.entries} entries, {summary.checkpoints} checkpoint(s) from {args.file}"
        )
        if summary.skipped_checkpoints:
            _say(f"skipped {summary.skipped_checkpoints} checkpoint(s) made by another reducer")
    return EXIT_OK


def _cmd_stats(args: argparse.Namespace) -> int:
    with _open(args) as log:
        stats = log.stats(scan=True)
    doc = {"log": _log_path(args), **stats}
    if args.json:
        _emit_json(doc)
        return EXIT_OK
    rows = [
        ("runs", stats["runs"]),
        ("events stored", stats["events"]),
        ("checkpoints", stats["checkpoints"]),
        ("snapshots", stats["snapshots"]),
        ("bytes on disk", f"{_size(stats['bytes_on_disk'])} ({stats['bytes_on_disk']})"),
        ("event bytes, encoded", _size(stats["event_bytes_raw"])),
        ("event bytes, stored", _size(stats["event_bytes_stored"])),
        ("compression ratio", f"{stats['compression_ratio']:.2f}"),
        ("map size", f"{_size(stats['map_size_bytes'])} ({stats['map_size_bytes']})"),
    ]
    _table(f"log {doc['log']}", ["what", "value"], rows)
    return EXIT_OK


def _cmd_demo(args: argparse.Namespace) -> int:
    try:
        from .demo import run_demo
    except ImportError as exc:
        raise _Fail(f"the demo is not available: {exc}", EXIT_ERROR) from None
    from rich.console import Console

    return int(run_demo(args.path, console=Console(highlight=False)) or 0)


# -- the parser --------------------------------------------------------------------------------

_DESCRIPTION = """\
Inspect, debug and administer an eventlog log: list runs and their events, read the state
at any offset or checkpoint, diff two points of a run, fork, verify, prune, delete,
export and import runs, and see the log's sizes.

The log is --log PATH or the environment variable EVENTLOG_PATH. Reading commands take
--json for scripts. Exit codes: 0 ok, 1 other error, 2 usage error, 3 not found,
4 conflict, 5 corruption (or verify found problems).
"""

_COMMANDS: list[tuple[str, str, str, str]] = [
    (
        "runs",
        "list the log's runs",
        "List every run: its head (number of events), pruned base, the run it was forked\nfrom and where, its checkpoints and forks, and when it was created.",
        "eventlog --log runs.lmdb runs\nEVENTLOG_PATH=runs.lmdb eventlog runs --json",
    ),
    (
        "events",
        "list a run's events",
        "List a run's events in order, with their offset, commit time and kind. --from and\n--to bound the offsets (both included); --kind keeps one kind, or a family of kinds\n(`llm` keeps llm.started, llm.completed and llm.failed).",
        "eventlog events run-1\neventlog events run-1 --from 10 --to 20\neventlog events run-1 --kind llm --json",
    ),
    (
        "history",
        "list a run's checkpoints",
        "List a run's checkpoints, oldest first: id, offset, superstep, paused nodes,\ncreation time and metadata. A run an integration wrote (a LangGraph thread) is\nlisted by its view: for LangGraph, each checkpoint's step, source and next nodes.",
        "eventlog history run-1\neventlog history run-1 --limit 5 --json",
    ),
    (
        "state",
        "show a run's state at an offset or checkpoint",
        "Show the state of a run after its first OFFSET events (default: its head), or at a\ncheckpoint. Any offset works, not only those of checkpoints: the log folds the events\nafter the nearest snapshot. A LangGraph thread shows its channel values, decoded\nthrough LangGraph's serializer.",
        "eventlog state run-1\neventlog state run-1 --at 3\neventlog state run-1 --checkpoint 5f2c... --json",
    ),
    (
        "diff",
        "show what changed between two points of a run",
        "Show what changed in a run's state from A to B. A and B are offsets, checkpoint ids\nor `head`. Reports the values (graph state) keys added, removed and changed, the\nmessages appended (or removed), and every other field that changed.",
        "eventlog diff run-1 2 5\neventlog diff run-1 0 head --json\neventlog diff run-1 5f2c... 7a91...",
    ),
    (
        "fork",
        "branch a run at an offset into a new run",
        "Make a new run whose first OFFSET events are the run's own, shared, not copied.\nThe run keeps its future; the new run continues from the state at OFFSET.",
        "eventlog fork run-1 --at 2 --as run-1-retry",
    ),
    (
        "verify",
        "check every record, offset and snapshot",
        "Check every record's checksum, that offsets have no gaps, the feed and the event id\nindex against the entries, and that every stored snapshot equals a fresh fold from the\nrun's start. Exits 5 when it finds a problem, and lists each with its run and offset.\nWith --repair, first remove index records that point at nothing (entries themselves\nare never changed: restore a damaged run from a copy).",
        "eventlog verify\neventlog verify run-1 --json\neventlog verify --repair",
    ),
    (
        "prune",
        "drop a run's events below a checkpoint",
        "Drop a run's events and checkpoints below the latest checkpoint at or below OFFSET.\nThat checkpoint becomes the run's base: states from it on stay readable, states\nbelow it are gone. Refused (exit 4) while forks of the run exist.",
        "eventlog prune run-1 --before 1000",
    ),
    (
        "delete",
        "remove a run",
        "Remove a run: its events, checkpoints and snapshots. Asks first unless --yes.\nRefused (exit 4) while forks of the run exist.",
        "eventlog delete run-1\neventlog delete run-1 --yes",
    ),
    (
        "export",
        "write runs to a JSON Lines file",
        "Write runs (default: all) to a JSON Lines file: each run after the run it forks from\n(which is exported too), its entries with their ids, times, metadata and events (JSON\nwith their kind tag), and its checkpoints. `eventlog import` reads it back exactly.\nA pruned run cannot be exported.",
        "eventlog export -o all.jsonl\neventlog export run-1 run-1-retry -o two.jsonl",
    ),
    (
        "import",
        "read runs from an export file",
        "Read an export file into the log (created if missing). The whole file is checked\nfirst; nothing is written if it is damaged or cut, or if one of its runs exists\nalready (exit 4). Entries keep their ids, times, metadata and events; forks are forks\nagain. Writes without a sync per commit and syncs once at the end.",
        "eventlog --log copy.lmdb import all.jsonl",
    ),
    (
        "stats",
        "show the log's sizes",
        "Show the number of runs, stored events, checkpoints and snapshots, the bytes on\ndisk, the events' compression ratio (encoded bytes / stored bytes) and the map size.",
        "eventlog stats\neventlog stats --json",
    ),
    (
        "demo",
        "run the demo on a fresh log",
        "Run the demo: a small graph and a conversation recorded in a log, then a tour of\nresume, history, time travel and a fork. The log goes to a temporary directory unless\n--path is given.",
        "eventlog demo\neventlog demo --path demo.lmdb",
    ),
]

_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "runs": _cmd_runs,
    "events": _cmd_events,
    "history": _cmd_history,
    "state": _cmd_state,
    "diff": _cmd_diff,
    "fork": _cmd_fork,
    "verify": _cmd_verify,
    "prune": _cmd_prune,
    "delete": _cmd_delete,
    "export": _cmd_export,
    "import": _cmd_import,
    "stats": _cmd_stats,
    "demo": _cmd_demo,
}


def _add_arguments(name: str, p: argparse.ArgumentParser) -> None:
    if name == "events":
        p.add_argument("run", help="run id")
        p.add_argument("--from", dest="from_", type=int, metavar="N", help="first offset to list (default 1)")
        p.add_argument("--to", type=int, metavar="M", help="last offset to list (default: the head)")
        p.add_argument("--kind", metavar="K", help="only events of kind K, or of the family K (llm, tool, step, ...)")
    elif name == "history":
        p.add_argument("run", help="run id")
        p.add_argument("--limit", type=int, metavar="N", help="only the newest N checkpoints")
    elif name == "state":
        p.add_argument("run", help="run id")
        at = p.add_mutually_exclusive_group()
        at.add_argument("--at", type=int, metavar="OFFSET", help="the state after the first OFFSET events")
        at.add_argument("--checkpoint", metavar="ID", help="the state at this checkpoint")
    elif name == "diff":
        p.add_argument("run", help="run id")
        p.add_argument("a", metavar="A", help="offset, checkpoint id or `head`")
        p.add_argument("b", metavar="B", help="offset, checkpoint id or `head`")
    elif name == "fork":
        p.add_argument("run", help="run id to fork from")
        p.add_argument("--at", type=int, metavar="OFFSET", required=True, help="events of the run the fork starts with")
        p.add_argument("--as", dest="new", metavar="NEW", required=True, help="id of the new run")
    elif name == "verify":
        p.add_argument("run", nargs="?", help="check only this run (default: the whole log)")
        p.add_argument(
            "--repair",
            action="store_true",
            help="first remove index records that point at nothing (a deleted damaged run's feed positions)",
        )
    elif name == "prune":
        p.add_argument("run", help="run id")
        p.add_argument(
            "--before",
            type=int,
            metavar="OFFSET",
            required=True,
            help="keep states from the latest checkpoint at or below OFFSET",
        )
    elif name == "delete":
        p.add_argument("run", help="run id")
        p.add_argument("--yes", "-y", action="store_true", help="do not ask")
    elif name == "export":
        p.add_argument("runs", nargs="*", metavar="RUN", help="runs to export (default: every run)")
        p.add_argument("-o", "--output", required=True, metavar="FILE", help="the JSON Lines file to write")
    elif name == "import":
        p.add_argument("file", metavar="FILE", help="an export file (JSON Lines)")
    elif name == "demo":
        p.add_argument("--path", metavar="DIR", help="keep the demo's log in DIR (default: a temporary directory)")
    elif name != "runs" and name != "stats":
        raise AssertionError(name)
    if name != "demo":
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def build_parser() -> argparse.ArgumentParser:
    """The `eventlog` argument parser (also what docs/cli.md is generated from)."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--log", metavar="PATH", default=argparse.SUPPRESS, help=f"the log directory (default: ${_ENV_LOG})"
    )
    common.add_argument(
        "--kinds",
        metavar="MODULE",
        action="append",
        default=argparse.SUPPRESS,
        help=f"import MODULE first, to register its event kinds (repeatable; also ${_ENV_KINDS}, comma-separated)",
    )
    parser = _Parser(
        prog="eventlog",
        description=_DESCRIPTION,
        epilog="examples:\n  eventlog demo --path demo.lmdb\n  eventlog --log demo.lmdb runs\n  eventlog --log demo.lmdb state RUN --at 3\n  eventlog COMMAND --help",
        formatter_class=_Formatter,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"eventlog {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands", parser_class=_Parser)
    for name, summary, description, examples in _COMMANDS:
        p = sub.add_parser(
            name,
            help=summary,
            description=description,
            epilog="examples:\n" + "\n".join("  " + line for line in examples.splitlines()),
            formatter_class=_Formatter,
            parents=[common],
        )
        _add_arguments(name, p)
    return parser


def commands() -> list[str]:
    """Every subcommand's name, in the order of the help."""
    return [name for name, *_ in _COMMANDS]


# -- main --------------------------------------------------------------------------------------


def _exit_code(exc: EventLogError) -> int:
    if isinstance(exc, (UnknownRunError, CheckpointNotFoundError, OffsetOutOfRangeError, PrunedError, NoLogError)):
        return EXIT_NOT_FOUND
    if isinstance(exc, (ConflictError, RunExistsError, ForkDependencyError)):
        return EXIT_CONFLICT
    if isinstance(exc, (InvalidRunIdError, InvalidEventError, InvalidArgumentError, UnknownKindError)):
        return EXIT_USAGE
    from .transfer import ExportFileError

    if isinstance(exc, (CorruptRecordError, NotALogError, ExportFileError)):
        return EXIT_CORRUPT
    return EXIT_ERROR


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
