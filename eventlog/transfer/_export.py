"""Export: runs and the runs they fork from, to a JSON Lines file readable by its owner only."""

from __future__ import annotations

import base64
import contextlib
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

import msgspec

from ..errors import UnknownRunError, named_os_error
from ..log import EventLog, RunInfo
from ..record._keys import check_ids
from ._format import (
    FORMAT,
    VERSION,
    NotExportableError,
    Progress,
    TransferSummary,
    _Checkpoint,
    _End,
    _Entry,
    _Header,
    _json,
    _kinds,
    _meta_json,
    _metadata_json,
    _mp,
    _Run,
)

# -- export --------------------------------------------------------------------------------


def _order(log: EventLog[Any], run_ids: Iterable[str] | None) -> list[RunInfo]:
    """The info of the runs to export and of every ancestor they fork from, parents before their
    forks. Each run's info is read once: the parent it names is the parent of the life exported
    (`_export` reads that life or raises RunReplacedError), never one of a life made since."""
    wanted = log.runs() if run_ids is None else check_ids("run_ids", run_ids)
    done: set[str] = set()
    order: list[RunInfo] = []
    for run_id in wanted:
        chain: list[RunInfo] = []
        current: str | None = run_id
        while current is not None and current not in done and current not in {i.run_id for i in chain}:
            try:
                info = log.run_info(current)
            except UnknownRunError:
                if run_ids is not None or current != run_id:
                    raise
                break  # every run was asked for: this one was deleted since they were listed
            chain.append(info)
            current = info.parent
        for info in reversed(chain):
            done.add(info.run_id)
            order.append(info)
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
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
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
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        same = False
    if not same:
        line.msgpack = base64.b64encode(exact).decode()
    return _json.encode(line)


def export_runs(
    log: EventLog[Any],
    dest: str | os.PathLike[str] | IO[bytes],
    run_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
    skip_pruned: bool = False,
) -> TransferSummary:
    """Write runs (default: every run; a str is refused, not read as its characters' ids) and
    the runs they fork from to a JSON Lines file.

    `dest` is a path or a binary file object. A path is written to a new file of a unique
    name beside it, created exclusively (never through a link planted there) and readable by
    its owner only, then renamed over `dest`: a `dest` that is a symbolic link is replaced,
    never followed. Each run is exported up to its head when the export reaches it.
    Raises UnknownRunError for a run that does not exist and NotExportableError for a
    pruned run, or, with `skip_pruned`, leaves out each pruned run and each run that forks
    from one, and names them in the summary's `skipped_runs`.
    """
    infos = _order(log, run_ids)
    left_out: set[str] = set()
    for info in infos:  # parents before their forks
        if info.base or info.parent in left_out:
            if not skip_pruned:
                raise NotExportableError(info.run_id, info.base)
            left_out.add(info.run_id)
    kept = [info for info in infos if info.run_id not in left_out]
    total = sum(info.head - info.fork_offset for info in kept)
    skipped = [info.run_id for info in infos if info.run_id in left_out]
    if isinstance(dest, (str, os.PathLike)):
        return _export_to_path(Path(dest), lambda f: _export(log, f, kept, total, progress, skipped))
    return _export(log, dest, kept, total, progress, skipped)


def _export_to_path(path: Path, write: Callable[[IO[bytes]], TransferSummary]) -> TransferSummary:
    """`write` into a new file of a unique name in `path`'s directory, then that file renamed to `path`."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    except OSError as exc:
        raise named_os_error(exc, path.parent, writing=True, log=False) from None
    try:
        os.fchmod(fd, 0o600)  # an export holds every prompt and output: its owner alone reads it
        with os.fdopen(fd, "wb") as f:
            summary = write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # replaces a link at `path` itself, never what it points to
        _sync_directory(path.parent)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError):
            raise named_os_error(exc, path, writing=True, log=False) from None
        raise
    return summary


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _export(
    log: EventLog[Any], f: IO[bytes], infos: list[Any], total: int, progress: Progress | None, skipped: list[str]
) -> TransferSummary:
    summary = TransferSummary(skipped_runs=skipped)
    f.write(_json.encode(_Header(FORMAT, VERSION)) + b"\n")
    for info in infos:
        f.write(_json.encode(_Run(info.run_id, info.parent, info.fork_offset, info.head, info.created_ns)) + b"\n")
        summary.runs += 1
        pending = 0
        # The life of the run `infos` saw, or RunReplacedError: never the entries of one made since.
        for entry in log.read(info.run_id, after=info.fork_offset, upto=info.head, run_number=info.number):
            f.write(_entry_line(entry) + b"\n")
            summary.entries += 1
            pending += 1
            if progress is not None and pending >= 256:
                progress(pending, total)
                pending = 0
        if progress is not None and pending:
            progress(pending, total)
        for cp in log.checkpoints.iter(info.run_id, run_number=info.number):
            if cp.offset <= info.head:
                f.write(_checkpoint_line(cp) + b"\n")
                summary.checkpoints += 1
    f.write(_json.encode(_End(summary.runs, summary.entries, summary.checkpoints)) + b"\n")
    return summary
