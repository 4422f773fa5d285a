"""Export runs to a JSON Lines file and import them into another log, losslessly.

An export file is UTF-8 JSON, one object a line, each tagged by its `type`::

    {"type":"header","format":"eventlog-export","version":1}
    {"type":"run","run_id":"run-1","parent":null,"fork_offset":0,"head":3,"created_ns":...}
    {"type":"entry","run_id":"run-1","offset":1,"event_id":"...","time_ns":...,"meta":null,
     "event":{"kind":"run.started","input":{"topic":"tides"}}}
    {"type":"checkpoint","run_id":"run-1","checkpoint_id":"...","offset":3,...}
    {"type":"end","runs":1,"entries":3,"checkpoints":1}

A run comes after its parent, with its own entries (offsets after its fork offset, in
order) and then its checkpoints, oldest first. Events are JSON with their kind tag and are
decoded with the registered kinds. Where JSON cannot carry a value exactly (bytes, NaN,
integer map keys), the entry or checkpoint also holds `msgpack`: the exact msgpack of
`[meta, event]` (or of the metadata), base64-encoded, and import reads that instead. The
`end` line counts what came before it, so a cut file is refused.

Import reads the file twice: once to check all of it (and that none of its runs exist),
then to write. Entry ids, times, metadata and event bytes come out identical, and so does
`state_at` at every offset of every run; forks are forks again, sharing their parent's
events. A fork's creation time and a checkpoint's save time are those of the import, and
every imported event id is indexed as a caller's id (appending it again is a no-op).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Union

import msgspec

from . import events
from ._keys import check_id, check_run_id, check_time_ns
from .errors import EventLogError, PrunedError, RunExistsError
from .fold import Reducer
from .log import EventLog

__all__ = ["ExportFileError", "NotExportableError", "TransferSummary", "export_runs", "import_runs"]

FORMAT = "eventlog-export"
"""The `format` field of an export file's header."""
VERSION = 1
"""The export format version this module writes and reads."""

_IMPORT_BATCH_EVENTS_MAX = 1000
"""Most entries one import transaction carries (entries of one time and metadata are batched)."""

Progress = Callable[[int, int], None]
"""`progress(n, total)`: n entries done since the last call, of `total` in all."""


class ExportFileError(EventLogError):
    """The file is not an eventlog export, is cut short, or holds a line that does not decode."""


class NotExportableError(PrunedError):
    """A run that was pruned cannot be exported losslessly: its first events are gone."""

    def __init__(self, run_id: str, base: int) -> None:
        self.run_id, self.offset, self.base = run_id, 1, base
        EventLogError.__init__(
            self,
            f"run {run_id!r} was pruned below offset {base}; its events up to offset {base} are gone, "
            "so it (and any fork of it) cannot be exported losslessly",
        )


class TransferSummary(msgspec.Struct):
    """What an export wrote or an import read and wrote."""

    runs: int = 0
    entries: int = 0
    checkpoints: int = 0
    skipped_checkpoints: int = 0
    """Checkpoints made by a reducer the import was not given (they are not saved)."""


# -- lines ---------------------------------------------------------------------------------


class _Header(msgspec.Struct, tag="header", tag_field="type"):
    format: str
    version: int


class _Run(msgspec.Struct, tag="run", tag_field="type"):
    run_id: str
    parent: str | None
    fork_offset: int
    head: int
    created_ns: int


class _Entry(msgspec.Struct, tag="entry", tag_field="type", omit_defaults=True):
    run_id: str
    offset: int
    event_id: str
    time_ns: int
    meta: msgspec.Raw = msgspec.Raw(b"null")
    event: msgspec.Raw = msgspec.Raw(b"null")
    msgpack: str | None = None
    """base64 msgpack of [meta, event] when JSON cannot carry them exactly."""


class _Checkpoint(msgspec.Struct, tag="checkpoint", tag_field="type", omit_defaults=True):
    run_id: str
    checkpoint_id: str
    offset: int
    created_ns: int
    reducer: str
    reducer_version: int
    metadata: msgspec.Raw = msgspec.Raw(b"{}")
    msgpack: str | None = None
    """base64 msgpack of the metadata when JSON cannot carry it exactly."""


class _End(msgspec.Struct, tag="end", tag_field="type"):
    runs: int
    entries: int
    checkpoints: int


_Line = Union[_Header, _Run, _Entry, _Checkpoint, _End]  # noqa: UP007

_json = msgspec.json.Encoder()
_mp = msgspec.msgpack.Encoder()
_line_decoder = msgspec.json.Decoder(_Line)
_meta_json = msgspec.json.Decoder(Union[dict[str, Any], None])  # noqa: UP007
_meta_mp = msgspec.msgpack.Decoder(Union[dict[str, Any], None])  # noqa: UP007
_metadata_json = msgspec.json.Decoder(dict[str, Any])
_metadata_mp = msgspec.msgpack.Decoder(dict[str, Any])


class _Kinds:
    """JSON and msgpack decoders for the registered event kinds, rebuilt when a kind is registered."""

    def __init__(self) -> None:
        self._generation = -1
        self._json: msgspec.json.Decoder[Any] | None = None
        self._mp: msgspec.msgpack.Decoder[Any] | None = None

    def decoders(self) -> tuple[msgspec.json.Decoder[Any], msgspec.msgpack.Decoder[Any]]:
        generation = events.generation()
        if self._json is None or self._mp is None or generation != self._generation:
            union = Union[tuple(events.kinds().values())]  # type: ignore[valid-type]  # noqa: UP007
            self._json = msgspec.json.Decoder(union)
            self._mp = msgspec.msgpack.Decoder(tuple[Union[dict[str, Any], None], union])  # type: ignore[valid-type]  # noqa: UP007
            self._generation = generation
        return self._json, self._mp


_kinds = _Kinds()


# -- export --------------------------------------------------------------------------------


def _order(log: EventLog, run_ids: Iterable[str] | None) -> list[str]:
    """The runs to export with every ancestor they fork from, parents before their forks."""
    wanted = log.runs() if run_ids is None else list(run_ids)
    done: set[str] = set()
    order: list[str] = []
    for run_id in wanted:
        chain: list[str] = []
        current: str | None = run_id
        while current is not None and current not in done and current not in chain:
            chain.append(current)
            current = log.run_info(current).parent
        for rid in reversed(chain):
            done.add(rid)
            order.append(rid)
    return order


def _entry_line(entry: Any) -> bytes:
    line = _Entry(
        entry.run_id,
        entry.offset,
        entry.event_id,
        entry.time_ns,
        msgspec.Raw(_json.encode(entry.meta)),
        msgspec.Raw(_json.encode(entry.event)),
    )
    exact = _mp.encode([entry.meta, entry.event])
    decode_event = _kinds.decoders()[0]
    try:
        back = [_meta_json.decode(line.meta), decode_event.decode(line.event)]
        same = _mp.encode(back) == exact
    except (msgspec.DecodeError, msgspec.ValidationError):
        same = False
    if not same:
        line.msgpack = base64.b64encode(exact).decode()
    return _json.encode(line)


def _checkpoint_line(cp: Any) -> bytes:
    metadata = cp.metadata or {}
    line = _Checkpoint(
        cp.run_id,
        cp.checkpoint_id,
        cp.offset,
        cp.created_ns,
        cp.reducer,
        cp.reducer_version,
        msgspec.Raw(_json.encode(metadata)),
    )
    exact = _mp.encode(metadata)
    try:
        same = _mp.encode(_metadata_json.decode(line.metadata)) == exact
    except (msgspec.DecodeError, msgspec.ValidationError):
        same = False
    if not same:
        line.msgpack = base64.b64encode(exact).decode()
    return _json.encode(line)


def export_runs(
    log: EventLog,
    dest: str | os.PathLike[str] | IO[bytes],
    run_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
) -> TransferSummary:
    """Write runs (default: every run) and the runs they fork from to a JSON Lines file.

    `dest` is a path (written to a temporary file beside it, readable by its owner only,
    then renamed into place) or a binary file object. Each run is exported up to its head when the export reaches it.
    Raises UnknownRunError for a run that does not exist and NotExportableError for a
    pruned run.
    """
    order = _order(log, run_ids)
    infos = [log.run_info(rid) for rid in order]
    for info in infos:
        if info.base:
            raise NotExportableError(info.run_id, info.base)
    total = sum(info.head - info.fork_offset for info in infos)
    if isinstance(dest, (str, os.PathLike)):
        path = Path(dest)
        tmp = path.with_name(path.name + ".part")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            os.fchmod(fd, 0o600)  # an export holds every prompt and output: its owner alone reads it
            with os.fdopen(fd, "wb") as f:
                summary = _export(log, f, infos, total, progress)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return summary
    return _export(log, dest, infos, total, progress)


def _export(log: EventLog, f: IO[bytes], infos: list[Any], total: int, progress: Progress | None) -> TransferSummary:
    summary = TransferSummary()
    f.write(_json.encode(_Header(FORMAT, VERSION)) + b"\n")
    for info in infos:
        f.write(_json.encode(_Run(info.run_id, info.parent, info.fork_offset, info.head, info.created_ns)) + b"\n")
        summary.runs += 1
        pending = 0
        for entry in log.read(info.run_id, after=info.fork_offset, upto=info.head):
            f.write(_entry_line(entry) + b"\n")
            summary.entries += 1
            pending += 1
            if progress is not None and pending >= 256:
                progress(pending, total)
                pending = 0
        if progress is not None and pending:
            progress(pending, total)
        for cp in log.checkpoints.list(info.run_id):
            if cp.offset <= info.head:
                f.write(_checkpoint_line(cp) + b"\n")
                summary.checkpoints += 1
    f.write(_json.encode(_End(summary.runs, summary.entries, summary.checkpoints)) + b"\n")
    return summary


# -- import --------------------------------------------------------------------------------


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, decoded line) of an export file; the header is checked here."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                line = _line_decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise ExportFileError(f"{path} line {number}: not an export line ({exc})") from None
            if number == 1:
                if not isinstance(line, _Header) or line.format != FORMAT:
                    raise ExportFileError(f"{path} is not an eventlog export (no header line)")
                if line.version > VERSION:
                    raise ExportFileError(
                        f"{path} is export version {line.version}; this eventlog reads up to {VERSION}"
                    )
            elif isinstance(line, _Header):
                raise ExportFileError(f"{path} line {number}: a second header")
            yield number, line


def _decode_entry(path: Path, number: int, line: _Entry) -> tuple[dict[str, Any] | None, events.Event]:
    decode_event, decode_mp = _kinds.decoders()
    try:
        if line.msgpack is not None:
            meta, event = decode_mp.decode(base64.b64decode(line.msgpack, validate=True))
            return meta, event
        return _meta_json.decode(line.meta), decode_event.decode(line.event)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise ExportFileError(
            f"{path} line {number}: run {line.run_id!r} offset {line.offset}: the event does not decode ({exc}); "
            "is its kind registered? (eventlog --kinds MODULE)"
        ) from None


def _decode_metadata(path: Path, number: int, line: _Checkpoint) -> dict[str, Any]:
    try:
        if line.msgpack is not None:
            return _metadata_mp.decode(base64.b64decode(line.msgpack, validate=True))
        return _metadata_json.decode(line.metadata)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise ExportFileError(f"{path} line {number}: checkpoint metadata does not decode ({exc})") from None


def _check(log: EventLog[Any], path: Path) -> TransferSummary:
    """Read the whole file and raise unless it imports cleanly into `log`: everything a write
    would refuse is refused here, before the first write."""
    runs: dict[str, _Run] = {}
    next_offset: dict[str, int] = {}
    event_ids: dict[str, dict[str, int]] = {}  # run -> event id -> offset, shared ones included
    checkpoint_ids: dict[str, set[str]] = {}
    summary = TransferSummary()
    existing = set(log.runs())
    ended = seen = False
    for number, line in _lines(path):
        seen = True
        where = f"{path} line {number}"
        if ended:
            raise ExportFileError(f"{where}: a line after the end line")
        try:
            _check_ids(line)
        except EventLogError as exc:
            raise ExportFileError(f"{where}: {exc}") from None
        if isinstance(line, _Run):
            if line.run_id in runs:
                raise ExportFileError(f"{where}: run {line.run_id!r} appears twice")
            if line.run_id in existing:
                raise RunExistsError(line.run_id)
            if line.parent is not None:
                parent = runs.get(line.parent)
                if parent is None:
                    raise ExportFileError(
                        f"{where}: run {line.run_id!r} forks from {line.parent!r}, not exported before it"
                    )
                if not 0 <= line.fork_offset <= parent.head:
                    raise ExportFileError(
                        f"{where}: run {line.run_id!r} forks at {line.fork_offset}, past its parent's head"
                    )
            elif line.fork_offset != 0 or line.head < 1:
                raise ExportFileError(
                    f"{where}: run {line.run_id!r} has no parent but fork offset {line.fork_offset}, head {line.head}"
                )
            if line.head < line.fork_offset:
                raise ExportFileError(f"{where}: run {line.run_id!r} has head {line.head} below its fork offset")
            runs[line.run_id] = line
            next_offset[line.run_id] = line.fork_offset + 1
            shared = {} if line.parent is None else event_ids[line.parent]
            event_ids[line.run_id] = {i: o for i, o in shared.items() if o <= line.fork_offset}
            checkpoint_ids[line.run_id] = set()
            summary.runs += 1
        elif isinstance(line, _Entry):
            run = runs.get(line.run_id)
            if run is None or next_offset[line.run_id] != line.offset or line.offset > run.head:
                raise ExportFileError(f"{where}: run {line.run_id!r} offset {line.offset} is out of order")
            meta, event = _decode_entry(path, number, line)
            try:
                log.codec.check_entry_size(
                    type(event).__name__, log.codec.encode_meta(meta), log.codec.encode_event(event)
                )
            except EventLogError as exc:
                raise ExportFileError(f"{where}: run {line.run_id!r} offset {line.offset}: {exc}") from None
            ids = event_ids[line.run_id]
            if line.event_id in ids:
                raise ExportFileError(
                    f"{where}: run {line.run_id!r} holds event id {line.event_id!r} twice; an event id is unique "
                    "in its run, so this file cannot be imported as it is"
                )
            ids[line.event_id] = line.offset
            next_offset[line.run_id] += 1
            summary.entries += 1
        elif isinstance(line, _Checkpoint):
            run = runs.get(line.run_id)
            if run is None or not 0 <= line.offset <= run.head:
                raise ExportFileError(
                    f"{where}: checkpoint {line.checkpoint_id!r} of run {line.run_id!r} is out of place"
                )
            _decode_metadata(path, number, line)
            if line.checkpoint_id in checkpoint_ids[line.run_id]:
                raise ExportFileError(f"{where}: run {line.run_id!r} holds checkpoint {line.checkpoint_id!r} twice")
            checkpoint_ids[line.run_id].add(line.checkpoint_id)
            summary.checkpoints += 1
        elif isinstance(line, _End):
            if (line.runs, line.entries, line.checkpoints) != (summary.runs, summary.entries, summary.checkpoints):
                raise ExportFileError(
                    f"{where}: the end line counts {line.runs} runs, {line.entries} entries, {line.checkpoints} "
                    f"checkpoints; the file holds {summary.runs}, {summary.entries}, {summary.checkpoints}"
                )
            ended = True
    if not seen:
        raise ExportFileError(f"{path} is empty, not an eventlog export")
    if not ended:
        raise ExportFileError(f"{path} has no end line: the export was cut short")
    for run_id, run in runs.items():
        if next_offset[run_id] != run.head + 1:
            raise ExportFileError(f"{path}: run {run_id!r} ends at offset {next_offset[run_id] - 1}, not {run.head}")
    return summary


def _check_ids(line: Any) -> None:
    """Raise what a write would raise for the ids and times of one line."""
    if isinstance(line, (_Run, _Entry, _Checkpoint)):
        check_run_id(line.run_id)
    if isinstance(line, _Run):
        if line.parent is not None:
            check_run_id(line.parent)
        check_time_ns("created_ns", line.created_ns)
    elif isinstance(line, _Entry):
        check_id("event_id", line.event_id)
        check_time_ns("time_ns", line.time_ns)
    elif isinstance(line, _Checkpoint):
        check_id("checkpoint_id", line.checkpoint_id)


def import_runs(
    log: EventLog[Any],
    source: str | os.PathLike[str],
    *,
    reducers: Sequence[Reducer[Any]] | None = None,
    progress: Progress | None = None,
) -> TransferSummary:
    """Import an export file into `log`: runs, forks, entries and checkpoints, all or nothing.

    The whole file is checked first; nothing is written unless it is a complete export
    whose events decode with the registered kinds, whose ids and times a write accepts and
    whose runs are all new to `log` (else ExportFileError or RunExistsError). Checkpoints
    are saved again with the reducer of the same name and version among `reducers`
    (default: the log's reducer); the others are counted in `skipped_checkpoints`. Should a
    write still fail (a full disk, say), the runs imported so far are deleted again before
    the error is raised.
    """
    path = Path(source)
    planned = _check(log, path)
    by_tag = {(r.name, r.version): r for r in (reducers or [log.reducer])}
    summary = TransferSummary()
    created: list[str] = []
    try:
        _write(log, path, planned, by_tag, summary, created, progress)
    except BaseException:
        for run_id in reversed(created):  # forks come after their parents: delete them first
            try:
                log.delete_run(run_id)
            except EventLogError:
                pass  # the log itself is failing; the error below says why
        raise
    return summary


def _write(
    log: EventLog[Any],
    path: Path,
    planned: TransferSummary,
    by_tag: dict[tuple[str, int], Reducer[Any]],
    summary: TransferSummary,
    created: list[str],
    progress: Progress | None,
) -> None:
    batch: list[tuple[_Entry, dict[str, Any] | None, events.Event]] = []

    def flush() -> None:
        if not batch:
            return
        first, meta, _ = batch[0]
        if first.offset == 1:
            created.append(first.run_id)
        offsets = log.append_many(
            first.run_id,
            [event for _, _, event in batch],
            expected_offset=first.offset - 1,
            event_ids=[line.event_id for line, _, _ in batch],
            meta=meta,
            time_ns=first.time_ns,
        )
        if offsets != list(range(first.offset, first.offset + len(batch))):
            raise ExportFileError(f"{path}: run {first.run_id!r} offsets {offsets} were not written as new entries")
        summary.entries += len(batch)
        if progress is not None:
            progress(len(batch), planned.entries)
        batch.clear()

    for number, line in _lines(path):
        if isinstance(line, _Entry):
            meta, event = _decode_entry(path, number, line)
            if batch:
                first, first_meta, _ = batch[0]
                if (
                    len(batch) >= _IMPORT_BATCH_EVENTS_MAX
                    or line.run_id != first.run_id
                    or line.time_ns != first.time_ns
                    or _mp.encode(meta) != _mp.encode(first_meta)
                ):
                    flush()
            batch.append((line, meta, event))
            continue
        flush()
        if isinstance(line, _Run):
            if line.parent is not None:
                log.fork(line.parent, at=line.fork_offset, new_run_id=line.run_id)
                created.append(line.run_id)
            summary.runs += 1
        elif isinstance(line, _Checkpoint):
            reducer = by_tag.get((line.reducer, line.reducer_version))
            if reducer is None:
                summary.skipped_checkpoints += 1
                continue
            metadata = _decode_metadata(path, number, line)
            log.checkpoints.save(
                line.run_id, line.offset, metadata=metadata, checkpoint_id=line.checkpoint_id, reducer=reducer
            )
            summary.checkpoints += 1
    flush()
    if (summary.runs, summary.entries) != (planned.runs, planned.entries):
        raise ExportFileError(
            f"{path}: imported {summary.runs} runs and {summary.entries} entries of {planned.runs} and {planned.entries}"
        )
