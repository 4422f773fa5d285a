"""One function a subcommand: each calls the public API and prints a table, or JSON with --json."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ..agent.readers import known_reducers, reducer_of
from ..diff import builtins as _builtins
from ..diff import diff_offsets
from ..errors import (
    EventLogError,
    RunReplacedError,
    UnknownRunError,
)
from ._common import (
    EXIT_CORRUPT,
    EXIT_ERROR,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
    _cell,
    _console,
    _emit_json,
    _Fail,
    _fields,
    _json_text,
    _key,
    _kind,
    _log_path,
    _open,
    _pretty_json,
    _progress,
    _safe,
    _say,
    _short,
    _size,
    _table,
    _when,
)
from ._langgraph import cmd_langgraph_copy

# -- commands ----------------------------------------------------------------------------------


def _view(log: Any, run_id: str, run_number: int | None = None) -> Any:
    """The run view of an integration's run (see eventlog/views.py), or None."""
    from ..views import view_for_run

    return view_for_run(log, run_id, run_number=run_number)


def _cmd_runs(args: argparse.Namespace) -> int:
    with _open(args) as log:
        infos, views = [], {}
        for rid in log.runs():
            try:
                info = log.run_info(rid)
                view = None if args.json else _view(log, rid, run_number=info.number)
            except (UnknownRunError, RunReplacedError):
                continue  # deleted (and made again) since the runs were listed
            infos.append(info)
            if view is not None:
                views[rid] = view
    if args.json:
        _emit_json(infos)
        return EXIT_OK
    rows: list[tuple[Any, ...]] = [
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
                out.write(("," if i else "") + _json_text(msgspec.json.encode(entry)))
            out.write("]\n")
            return EXIT_OK
        rows = [(e.offset, _when(e.time_ns), _kind(e.event), _short(_fields(e.event))) for e in entries]
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
    with _open(args) as log, log.pinned(args.run):  # every read of one life of the run
        view = _view(log, args.run)
        if view is not None:
            columns, found = view.history(log, args.run, args.limit)
        else:
            cps = log.checkpoints.list(args.run, limit=args.limit)
    if view is not None:
        if args.json:
            _emit_json(found)
        else:
            cells = [[row.get(c) for c in columns] for row in found]
            _table(f"{view.name} checkpoints of run {args.run}, oldest first", columns, cells)
        return EXIT_OK
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
    with _open(args) as log, log.pinned(args.run) as info:  # every read of one life of the run
        checkpoint_id = args.checkpoint
        if checkpoint_id is not None:
            offset = log.checkpoints.load(args.run, checkpoint_id).offset
        else:
            offset = info.head if args.at is None else args.at
        view = _view(log, args.run)
        if view is None:
            state = log.state_at(args.run, offset, reducer=reducer_of(log, args.run))
        else:
            state = view.state(log, args.run, offset)
    doc = {"run_id": args.run, "offset": offset, "checkpoint_id": checkpoint_id, "state": _builtins(state)}
    if args.json:
        _emit_json(doc)
        return EXIT_OK
    console = _console()
    where = f"checkpoint {checkpoint_id}, offset {offset}" if checkpoint_id else f"offset {offset}"
    console.print(_safe(f"run {args.run} at {where}"), style="bold")
    console.print(_pretty_json(doc["state"]))
    return EXIT_OK


def _cmd_diff(args: argparse.Namespace) -> int:
    with _open(args) as log, log.pinned(args.run):  # every read of one life of the run
        off_a, cp_a = _resolve(log, args.run, args.a)
        off_b, cp_b = _resolve(log, args.run, args.b)
        view = _view(log, args.run)
        changes = diff_offsets(log, args.run, off_a, off_b, view, None if view else reducer_of(log, args.run))
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
    rows += [("message +", _who(m), "", _short(_said(m), 60)) for m in changes["messages_appended"]]
    rows += [("message -", _who(m), _short(_said(m), 60), "") for m in changes["messages_removed"]]
    _table(f"run {args.run}: offset {off_a} → offset {off_b}", ["change", "key", "from", "to"], rows)
    return EXIT_OK


def _who(message: Any) -> str:
    """Who says a message of a diff: its role (the standard kinds, the Agents SDK) or its type (LangChain's)."""
    return str(message.get("role") or message.get("type") or "") if isinstance(message, dict) else ""


def _said(message: Any) -> Any:
    return message.get("content", message) if isinstance(message, dict) else message


def _cmd_fork(args: argparse.Namespace) -> int:
    with _open(args, write=True) as log:
        new = log.fork(args.run, at=args.at, new_run_id=args.new, run_number=None)  # the run as it is now
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
            report = log.verify(args.run, reducers=known_reducers(log), progress=advance)
    doc: dict[str, Any] = {"repaired": repaired} if args.repair else {}
    doc |= {
        "ok": report.ok,
        "runs": report.runs,
        "events": report.events,
        "checkpoints": report.checkpoints,
        "problems": report.problems,
        "notes": report.notes,
    }
    if args.json:
        _emit_json(doc)
    else:
        console = _console()
        for line in repaired:
            _say(f"repaired: {line}")
        for title, rows in (("problems", report.problems), ("not checked", report.notes)):
            if rows:
                _table(
                    title, ["run", "offset", "kind", "message"], [(p.run_id, p.offset, p.kind, p.message) for p in rows]
                )
        verdict = "ok" if report.ok else f"{len(report.problems)} problem(s)"
        noted = f"; {len(report.notes)} note(s) of what was not checked" if report.notes else ""
        console.print(
            f"{verdict}: checked {report.runs} run(s), {report.events} event(s), {report.checkpoints} checkpoint(s)"
            f"{noted}"
        )
    return EXIT_OK if report.ok else EXIT_CORRUPT


def _cmd_prune(args: argparse.Namespace) -> int:
    with _open(args, write=True) as log, log.pinned(args.run) as info, _progress(f"pruning run {args.run}", None):
        reducer = reducer_of(log, args.run)  # the reducer of the life pruned, and only that life
        base = log.prune(args.run, before=args.before, reducer=reducer, run_number=info.number)
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
            log.delete_run(args.run, run_number=info.number)  # the life the user was asked about
    if args.json:
        _emit_json({"run_id": args.run, "deleted": True})
    else:
        _say(f"deleted run {args.run}")
    return EXIT_OK


def _cmd_export(args: argparse.Namespace) -> int:
    from ..transfer import NotExportableError, export_runs

    with _open(args) as log, _progress("exporting", None) as advance:
        try:
            summary = export_runs(log, args.output, args.runs or None, progress=advance, skip_pruned=args.skip_pruned)
        except NotExportableError as exc:
            raise _Fail(f"{exc} (--skip-pruned exports the other runs)", EXIT_NOT_FOUND) from None
    doc = {"path": str(args.output), **msgspec.structs.asdict(summary)}
    if args.json:
        _emit_json(doc)
    else:
        _say(
            f"exported {summary.runs} run(s), {summary.entries} entries, {summary.checkpoints} checkpoint(s) to {args.output}"
        )
        if summary.skipped_runs:
            _say(
                f"left out {len(summary.skipped_runs)} pruned run(s) or forks of them: {', '.join(summary.skipped_runs)}"
            )
    return EXIT_OK


def _cmd_import(args: argparse.Namespace) -> int:
    from ..transfer import import_runs

    if not Path(args.file).is_file():
        raise _Fail(f"no file {args.file}", EXIT_NOT_FOUND)
    target = _log_path(args)
    made = "://" not in target and target != ":memory:" and not os.path.exists(target)
    try:
        with _open(args, write=True, create=True, durability="none") as log, _progress("importing", None) as advance:
            summary = import_runs(log, args.file, progress=advance, reducers=known_reducers(log))
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
        from ..demo import run_demo
    except ImportError as exc:
        raise _Fail(f"the demo is not available: {exc}", EXIT_ERROR) from None
    from rich.console import Console

    return int(run_demo(args.path, console=Console(highlight=False)) or 0)


def _cmd_ui(args: argparse.Namespace) -> int:
    try:
        from ..ui import RemoteBindError, default_port, read_prices, serve
    except ImportError as exc:
        raise _Fail(f"the UI needs its extra: pip install 'eventlog[ui]' ({exc})", EXIT_ERROR) from None
    try:
        prices = None if args.prices is None else read_prices(args.prices)
    except ValueError as exc:
        raise _Fail(f"--prices: {exc}", EXIT_USAGE) from None

    def ready(url: str) -> None:
        mode = "read-write" if args.allow_writes else "read-only"
        sys.stderr.write(f"eventlog ui: the log, {mode}, at {url}\n  press Ctrl-C to stop\n")
        sys.stderr.flush()

    port = default_port if args.port is None else args.port
    try:
        serve(
            _log_path(args),
            host=args.host,
            port=port,
            allow_writes=args.allow_writes,
            allow_remote=args.allow_remote,
            token=args.token or os.environ.get("EVENTLOG_UI_TOKEN") or None,
            open_browser=args.open,
            ready=ready,
            key=_key(args),
            prices=prices,
        )
    except KeyboardInterrupt:
        pass  # Ctrl-C is how the server is stopped
    except RemoteBindError as exc:
        raise _Fail(str(exc), EXIT_USAGE) from None
    except OSError as exc:
        raise _Fail(f"cannot listen on {args.host}:{port}: {exc.strerror or exc} (try --port 0)", EXIT_ERROR) from None
    return EXIT_OK


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
    "langgraph-copy": cmd_langgraph_copy,
    "demo": _cmd_demo,
    "ui": _cmd_ui,
}
