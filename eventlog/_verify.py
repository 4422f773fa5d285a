"""verify: every record's checks, offsets without gaps, the indexes against the entries, and
every stored snapshot against a fresh fold (docs/concepts.md, "Verify").

The unchecksummed tables are cross-checked: each entry's feed position must point back at
it and its event id must be indexed to its offset, and each table must hold no more keys
than the entries account for, so a re-pointed or extra reference is found too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from . import _limits
from ._keys import event_key, from_u64, id_key, run_range, snapshot_key, u64
from ._reader import Reader
from ._records import RunRecord
from ._replay import Replay
from ._runs import Runs
from .checkpoints import Checkpoints
from .codec import Codec
from .errors import (
    CorruptRecordError,
    EventLogError,
    PrunedError,
    ReducerError,
    RunReplacedError,
    UnknownKindError,
    UnknownRunError,
)
from .fold import Reducer, reducer_tag
from .store._base import Store, Txn, scan_chunks

__all__ = ["Problem", "VerifyReport"]

_CHUNK = 4096


class Problem(msgspec.Struct, frozen=True):
    """One thing `verify` found wrong."""

    run_id: str | None
    offset: int | None
    kind: str
    """`corrupt`, `gap`, `unknown_kind`, `nondeterministic`, `checkpoint`, `feed`, `index` or `meta`."""
    message: str


class VerifyReport(msgspec.Struct):
    """What `verify` checked and found."""

    runs: int = 0
    events: int = 0
    checkpoints: int = 0
    problems: list[Problem] = []

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems


class Verifier:
    """Runs the checks of `verify` in bounded memory: runs and tables are read in chunks."""

    def __init__(
        self, store: Store, codec: Codec, runs: Runs, reader: Reader, replay: Replay, checkpoints: Checkpoints[Any]
    ) -> None:
        self._store, self._codec, self._runs = store, codec, runs
        self._reader, self._replay, self._checkpoints = reader, replay, checkpoints

    def verify(
        self,
        run_id: str | None,
        reducer: Reducer[Any],
        progress: Callable[[int], None] | None,
        ids_indexed: bool,
    ) -> VerifyReport:
        report = VerifyReport(problems=[])
        try:
            run_ids = [run_id] if run_id is not None else self._all_runs()
        except CorruptRecordError as exc:
            report.problems.append(Problem(exc.run_id, exc.offset, "corrupt", str(exc)))
            return report
        entries = 0
        for rid in run_ids:
            for attempt in range(_limits.replaced_retries_max + 1):
                kept = len(report.problems), report.events
                try:
                    entries += self._run(rid, reducer, report, progress, ids_indexed)
                    report.runs += 1
                    break
                except (RunReplacedError, UnknownRunError) as exc:  # deleted (and made again) meanwhile
                    del report.problems[kept[0] :]  # they were of a life of the run that is gone
                    report.events = kept[1]
                    gone = isinstance(exc, UnknownRunError) or exc.now is None
                    if gone and run_id is not None:
                        raise UnknownRunError(rid) from None
                    if gone:
                        break  # listed, then deleted: nothing of it is left to check
                    if attempt == _limits.replaced_retries_max:
                        raise
        if run_id is None:
            removing = self._store.read(self._runs.removals)
            for number, _ in removing:
                message = f"a delete or prune of run number {number} has not finished; log.repair() finishes it"
                report.problems.append(Problem(None, None, "meta", message))
            self._feed(report, entries, count_check=not removing)
        return report

    def _all_runs(self) -> list[str]:
        out: list[str] = []
        while True:
            chunk = self._store.read(lambda txn: self._runs.run_ids(txn, out[-1] if out else None, _CHUNK))
            out.extend(chunk)
            if len(chunk) < _CHUNK:
                return out

    def _run(
        self,
        run_id: str,
        reducer: Reducer[Any],
        report: VerifyReport,
        progress: Callable[[int], None] | None,
        ids_indexed: bool,
    ) -> int:
        """Check one run; returns the number of entries the run itself stores."""
        problems = report.problems
        try:
            rec = self._store.read(lambda txn: self._runs.require(txn, run_id))
        except CorruptRecordError as exc:
            problems.append(Problem(run_id, None, "corrupt", str(exc)))
            return 0
        checkpoints, snapshots = self._store.read(lambda txn: self._stored(txn, run_id, rec, reducer, report))
        own = self._indexes(run_id, rec, report, ids_indexed)
        start = rec.base
        try:
            start = self._store.read(lambda txn: self._runs.chain_base(txn, run_id, rec))
            _, _, start, state = self._replay.start(run_id, start, reducer, rec.number)
        except (CorruptRecordError, PrunedError, ReducerError) as exc:
            problems.append(Problem(run_id, start, "corrupt", f"base snapshot: {exc}"))
            return own
        self._compare(run_id, rec, start, state, snapshots, checkpoints, reducer, report, skip_snapshot=bool(rec.base))
        pending = 0
        try:
            for owner, number, first, values, _ in self._reader.chunks(run_id, start, rec.head, _CHUNK, rec.number):
                for i, value in enumerate(values):
                    offset = first + i
                    try:
                        event = self._codec.decode_entry_event(value, event_key(number, offset))
                    except CorruptRecordError as exc:
                        problems.append(Problem(owner, offset, "corrupt", str(exc.at(owner, offset))))
                        return own
                    except UnknownKindError as exc:
                        problems.append(Problem(owner, offset, "unknown_kind", str(exc.at(owner, offset))))
                        return own
                    try:
                        state = reducer.apply(state, event)
                    except Exception as exc:  # noqa: BLE001 - a reducer failing is reported, not raised
                        problems.append(Problem(run_id, offset, "corrupt", f"the reducer raised {exc!r}"))
                        return own
                    report.events += 1
                    pending += 1
                    if offset in snapshots or offset in checkpoints:
                        self._compare(run_id, rec, offset, state, snapshots, checkpoints, reducer, report)
                if progress is not None and pending >= 1024:
                    progress(pending)
                    pending = 0
        except CorruptRecordError as exc:
            kind = "gap" if "missing" in exc.what else "corrupt"
            problems.append(Problem(exc.run_id or run_id, exc.offset, kind, str(exc)))
        except PrunedError as exc:
            problems.append(Problem(run_id, exc.offset, "corrupt", str(exc)))
        if progress is not None and pending:
            progress(pending)
        return own

    def _stored(
        self, txn: Txn, run_id: str, rec: RunRecord, reducer: Reducer[Any], report: VerifyReport
    ) -> tuple[dict[int, list[bytes]], set[int]]:
        """The keys of the run's checkpoints by offset, and the offsets of its snapshots by
        `reducer`: a record is read again, and a snapshot read, only when the fold reaches it."""
        start, stop = run_range(rec.number)
        tag = reducer_tag(reducer)
        checkpoints: dict[int, list[bytes]] = {}
        seen = 0
        for key, value in scan_chunks(txn, "checkpoints", start, stop):
            seen += 1
            try:
                cp = self._checkpoints.record(run_id, key, value)
            except CorruptRecordError as exc:
                report.problems.append(Problem(run_id, None, "corrupt", f"checkpoint record: {exc}"))
                continue
            checkpoints.setdefault(cp.offset, []).append(key)
            if txn.get("checkpoint_ids", id_key(rec.number, cp.checkpoint_id)) != key[8:]:
                report.problems.append(
                    Problem(run_id, cp.offset, "index", f"checkpoint {cp.checkpoint_id!r} is not indexed by its id")
                )
        report.checkpoints += seen
        if sum(1 for _ in scan_chunks(txn, "checkpoint_ids", start, stop)) > seen:
            report.problems.append(Problem(run_id, None, "index", "checkpoint ids index checkpoints that are gone"))
        snapshots: set[int] = set()
        while keys := txn.keys("snapshots", start, stop, _CHUNK):
            snapshots.update(from_u64(key[8:16]) for key in keys if key[16:] == tag)
            start = keys[-1] + b"\x00"
        return checkpoints, snapshots

    def _snapshot(
        self, run_id: str, rec: RunRecord, offset: int, reducer: Reducer[Any], report: VerifyReport
    ) -> bytes | None:
        """The canonical bytes of the run's snapshot at `offset` by `reducer`; a damaged one is reported."""
        key = snapshot_key(rec.number, offset, reducer_tag(reducer))
        value = self._store.read(lambda txn: txn.get("snapshots", key))
        if value is None:
            return None
        try:
            return self._replay.load_snapshot(run_id, key, value, reducer)[1]
        except CorruptRecordError as exc:
            report.problems.append(Problem(run_id, offset, "corrupt", f"snapshot at offset {offset}: {exc.what}"))
            return None

    def _indexes(self, run_id: str, rec: RunRecord, report: VerifyReport, ids_indexed: bool) -> int:
        """Cross-check the run's own entries with the feed and the event id index; returns their count."""
        problems = report.problems
        number = rec.number
        first = max(rec.base, rec.fork_offset) + 1
        count = 0
        start = event_key(number, first)
        stop = run_range(number)[1]
        while True:

            def check(txn: Txn, start: bytes = start) -> tuple[int, bytes | None]:
                seen = 0
                last = None
                for key, value in txn.scan("events", start, stop, limit=_CHUNK):
                    seen += 1
                    last = key
                    offset = from_u64(key[8:])
                    try:  # position and id only: the fold decodes the event
                        position, event_id = self._codec.decode_entry_id(value, key)
                    except CorruptRecordError:
                        continue  # named by the fold
                    if txn.get("feed", u64(position)) != key:
                        problems.append(
                            Problem(run_id, offset, "feed", f"feed position {position} does not point at it")
                        )
                    if ids_indexed and txn.get("event_ids", id_key(number, event_id)) != key[8:]:
                        problems.append(Problem(run_id, offset, "index", f"event id {event_id!r} is not indexed to it"))
                return seen, last

            seen, last = self._store.read(check)
            count += seen
            if last is None or seen < _CHUNK:
                break
            start = last + b"\x00"
        if ids_indexed:
            indexed = self._store.read(lambda txn: self._count_ids_above(txn, number, rec.base))
            if indexed != count:
                problems.append(Problem(run_id, None, "index", f"{indexed} event ids index the run's {count} entries"))
        return count

    @staticmethod
    def _count_ids_above(txn: Txn, number: int, base: int) -> int:
        start, stop = run_range(number)
        return sum(1 for _, v in scan_chunks(txn, "event_ids", start, stop) if len(v) != 8 or from_u64(v) > base)

    def _compare(
        self,
        run_id: str,
        rec: RunRecord,
        offset: int,
        state: Any,
        snapshots: set[int],
        checkpoints: dict[int, list[bytes]],
        reducer: Reducer[Any],
        report: VerifyReport,
        skip_snapshot: bool = False,
    ) -> None:
        stored = (
            None if skip_snapshot or offset not in snapshots else self._snapshot(run_id, rec, offset, reducer, report)
        )
        if stored is not None and stored != self._codec.encode_state(state):
            report.problems.append(
                Problem(
                    run_id,
                    offset,
                    "nondeterministic",
                    f"run {run_id!r} offset {offset}: the snapshot differs from a fresh fold by "
                    f"{reducer.name}@{reducer.version}; the reducer is not deterministic or the snapshot is damaged",
                )
            )
        summarize = getattr(reducer, "summarize", None)
        keys = checkpoints.get(offset, [])
        records = self._store.read(lambda txn: [(key, txn.get("checkpoints", key)) for key in keys]) if keys else []
        for cp in (self._checkpoints.record(run_id, key, value) for key, value in records if value is not None):
            if cp.reducer != reducer.name or cp.reducer_version != reducer.version or summarize is None:
                continue
            try:
                fresh = msgspec.msgpack.decode(self._codec.encode_state(summarize(state)))
            except (EventLogError, Exception):  # noqa: BLE001 - a reducer failing is reported, not raised
                fresh = None
            kept = cp.summary_of()
            if kept and (not isinstance(fresh, dict) or {k: fresh.get(k) for k in kept} != kept):
                report.problems.append(
                    Problem(run_id, offset, "checkpoint", f"checkpoint {cp.checkpoint_id!r} disagrees with the fold")
                )

    def _feed(self, report: VerifyReport, entries: int, count_check: bool) -> None:
        """Every feed position must point at an entry that exists, and there must be as many
        positions as entries (the entries each checked that their position points back), but
        while a removal is unfinished: the positions of what it removes are counted too."""
        count = 0
        last_key = b""
        while True:

            def check(txn: Txn, start: bytes = last_key) -> tuple[int, bytes]:
                seen = 0
                last = start
                for key, ref in txn.scan("feed", start, None, limit=_CHUNK):
                    seen += 1
                    last = key + b"\x00"
                    position = from_u64(key)
                    if len(ref) != 16:
                        report.problems.append(Problem(None, None, "feed", f"feed position {position} is malformed"))
                    elif txn.get("events", ref) is None:
                        report.problems.append(
                            Problem(
                                self._runs.name_of(txn, from_u64(ref[:8])),
                                from_u64(ref[8:16]),
                                "feed",
                                f"feed position {position} points at a missing entry",
                            )
                        )
                return seen, last

            seen, last_key = self._store.read(check)
            count += seen
            if seen < _CHUNK:
                break
        if count_check and count > entries and not any(p.kind == "feed" for p in report.problems):
            report.problems.append(
                Problem(None, None, "feed", f"the feed holds {count} positions for {entries} entries")
            )
