"""Import: check the whole file, then write it all, or nothing."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec

from .. import _limits
from ..core.fold import Reducer
from ..errors import EventLogError, InvalidArgumentError, RunExistsError, named_os_error
from ..log import EventLog, made_by_append, made_by_fork
from ..record._keys import check_id, check_run_id, check_time_ns
from ..record.kinds import Event
from ._format import (
    _IMPORT_BATCH_EVENTS_MAX,
    FORMAT,
    VERSION,
    ExportFileError,
    Progress,
    TransferSummary,
    _Checkpoint,
    _End,
    _Entry,
    _Header,
    _kinds,
    _line_decoder,
    _meta_json,
    _metadata_json,
    _metadata_mp,
    _mp,
    _Run,
)

# -- import --------------------------------------------------------------------------------

_too_deep_text = (
    f"nested deeper than the decoder allows; the log holds values nested at most {_limits.nesting_depth_max} levels"
)


def _lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, decoded line) of an export file; the header is checked here."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise named_os_error(exc, path, writing=False, log=False) from None
    with f:
        headed = False  # the first line that is not blank is the header
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                line = _line_decoder.decode(raw)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise ExportFileError(f"{path} line {number}: not an export line ({exc})") from None
            except RecursionError:
                raise ExportFileError(f"{path} line {number}: {_too_deep_text}") from None
            if not headed:
                headed = True
                if not isinstance(line, _Header) or line.format != FORMAT:
                    raise ExportFileError(f"{path} is not an eventlog export (no header line)")
                if not 1 <= line.version <= VERSION:
                    raise ExportFileError(
                        f"{path} is export version {line.version}; this eventlog reads versions 1 to {VERSION}"
                    )
            elif isinstance(line, _Header):
                raise ExportFileError(f"{path} line {number}: a second header")
            yield number, line


def _decode_entry(path: Path, number: int, line: _Entry) -> tuple[dict[str, Any] | None, Event]:
    decode_event, decode_mp = _kinds.decoders()
    try:
        if line.msgpack is not None:
            meta, event = decode_mp.decode(base64.b64decode(line.msgpack, validate=True))
            return meta, event
        return _meta_json.decode(line.meta), decode_event.decode(line.event)
    except RecursionError:
        raise ExportFileError(
            f"{path} line {number}: run {line.run_id!r} offset {line.offset}: {_too_deep_text}"
        ) from None
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
    except RecursionError:
        raise ExportFileError(f"{path} line {number}: checkpoint metadata: {_too_deep_text}") from None
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as exc:
        raise ExportFileError(f"{path} line {number}: checkpoint metadata does not decode ({exc})") from None


def _check(log: EventLog[Any], path: Path) -> TransferSummary:
    """Read the whole file and raise unless it imports cleanly into `log`: everything a write
    would refuse is refused here, before the first write."""
    runs: dict[str, _Run] = {}
    next_offset: dict[str, int] = {}
    event_ids: dict[str, dict[str, int]] = {}  # run -> event id -> offset, shared ones included
    checkpoint_ids: dict[str, set[str]] = {}
    own_ids: dict[str, list[str]] = {}  # run -> the ids of the entries it appends (not those it shares)
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
                if not 0 <= line.fork_offset < next_offset[line.parent]:  # the parent's entries come first
                    raise ExportFileError(
                        f"{where}: run {line.run_id!r} forks at {line.fork_offset}, past its parent's entries before it"
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
            own_ids.setdefault(line.run_id, []).append(line.event_id)
            next_offset[line.run_id] += 1
            summary.entries += 1
        elif isinstance(line, _Checkpoint):
            run = runs.get(line.run_id)
            if run is None or not 0 <= line.offset < next_offset[line.run_id]:  # after the entries it covers
                raise ExportFileError(
                    f"{where}: checkpoint {line.checkpoint_id!r} of run {line.run_id!r} is out of place"
                )
            try:
                log.checkpoints.check_metadata(_decode_metadata(path, number, line))
            except EventLogError as exc:
                raise ExportFileError(f"{where}: checkpoint {line.checkpoint_id!r}: {exc}") from None
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
        try:  # an id of the form the log draws for a run it has not made (a file from a copy of this log)
            log._commit.refuse_own_form(run_id, own_ids.get(run_id, []))
        except InvalidArgumentError as exc:
            raise ExportFileError(f"{path}: {exc}") from None
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
    created: dict[str, int] = {}  # each run the import made, and the number of the life it made
    try:
        _write(log, path, planned, by_tag, summary, created, progress)
    except BaseException:
        for run_id, number in reversed(created.items()):  # forks come after their parents: delete them first
            try:  # the life it made, never one another writer made since
                log.delete_run(run_id, run_number=number)
            except EventLogError:
                pass  # the log itself is failing, or the run is another writer's now; the error below says why
        raise
    return summary


def _write(
    log: EventLog[Any],
    path: Path,
    planned: TransferSummary,
    by_tag: dict[tuple[str, int], Reducer[Any]],
    summary: TransferSummary,
    created: dict[str, int],
    progress: Progress | None,
) -> None:
    batch: list[tuple[_Entry, dict[str, Any] | None, Event]] = []

    def flush() -> None:
        if not batch:
            return
        first, meta, _ = batch[0]
        events, ids = [event for _, _, event in batch], [line.event_id for line, _, _ in batch]
        number = created.get(first.run_id)
        if number is None and first.offset == 1:  # the append that makes the run tells its life
            offsets, created[first.run_id] = made_by_append(
                log, first.run_id, events, event_ids=ids, meta=meta, time_ns=first.time_ns
            )
        else:  # every later write to a run the import made goes to that life or nowhere
            offsets = log.append_many(first.run_id, events, expected_offset=first.offset - 1, event_ids=ids,
                                      meta=meta, time_ns=first.time_ns, run_number=number)  # fmt: skip
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
                created[line.run_id] = made_by_fork(
                    log, line.parent, line.fork_offset, line.run_id, run_number=created.get(line.parent)
                )
            summary.runs += 1
        elif isinstance(line, _Checkpoint):
            reducer = by_tag.get((line.reducer, line.reducer_version))
            if reducer is None:
                summary.skipped_checkpoints += 1
                continue
            metadata = _decode_metadata(path, number, line)
            log.checkpoints.save(
                line.run_id,
                line.offset,
                metadata=metadata,
                checkpoint_id=line.checkpoint_id,
                reducer=reducer,
                run_number=created.get(line.run_id),
            )
            summary.checkpoints += 1
    flush()
    if (summary.runs, summary.entries) != (planned.runs, planned.entries):
        raise ExportFileError(
            f"{path}: imported {summary.runs} runs and {summary.entries} entries of {planned.runs} and {planned.entries}"
        )
