"""verify: every record's checks, offsets without gaps, the indexes against the entries, and
every stored snapshot against a fresh fold (docs/concepts.md, "Verify").

The unchecksummed tables are cross-checked both ways: each entry's feed position must point
back at it and be above the one before it in the run, and its event id must be indexed to its
offset; each feed position must name a run that has that number, an offset of the run's own,
and an entry that holds that position; each run's number must be indexed to it, and each
indexed number must be its run's. So a re-pointed, swapped, duplicated or extra reference is
found too, and so is a feed that would deliver a run out of order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from .. import _limits
from ..core._reader import Reader
from ..core._replay import Replay
from ..core._runs import Runs
from ..core.fold import Reducer, reducer_named, reducer_tag
from ..errors import (
    CorruptRecordError,
    EventLogError,
    PrunedError,
    ReducerError,
    RunReplacedError,
    UnknownKindError,
    UnknownRunError,
)
from ..record._keys import (
    META_RUN_NUMBER,
    from_u64,
    own_prefix,
    own_slot,
    run_range,
)
from ..record._records import RunRecord
from ..record.codec import Codec
from ..record.tables import CHECKPOINT_IDS, CHECKPOINTS, EVENT_IDS, EVENTS, FEED, RUN_NUMBERS, SNAPSHOTS
from ..store._base import Store, Txn, scan_chunks
from .checkpoints import Checkpoints

__all__ = ["Problem", "VerifyReport"]

_CHUNK = 4096
Ordered = tuple[int, int]  # a feed position and the offset of the entry that holds it


class Problem(msgspec.Struct, frozen=True):
    """One thing `verify` found wrong."""

    run_id: str | None
    offset: int | None
    kind: str
    """`corrupt`, `gap`, `unknown_kind`, `nondeterministic`, `checkpoint`, `feed`, `index` or `meta`."""
    message: str
    position: int | None = None
    """The feed position concerned, when there is one."""


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
        reducers: Sequence[Reducer[Any]] = (),
    ) -> VerifyReport:
        """`reducers`: others a run may have been checkpointed by; each run is folded by the one
        its latest checkpoint names (`_reducer_of`), `reducer` when it names none of them."""
        report = VerifyReport(problems=[])
        try:
            run_ids = [run_id] if run_id is not None else self._all_runs()
        except CorruptRecordError as exc:
            report.problems.append(Problem(exc.run_id, exc.offset, "corrupt", str(exc)))
            return report
        for rid in run_ids:
            for attempt in range(_limits.replaced_retries_max + 1):
                kept = len(report.problems), report.events
                try:
                    self._run(rid, self._reducer_of(rid, reducer, reducers), report, progress, ids_indexed)
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
            report.problems.extend(self._store.read(lambda txn: _index_problems(self._runs, txn)))
            self._feed(report, dict(removing))
        return report

    def _reducer_of(self, run_id: str, default: Reducer[Any], reducers: Sequence[Reducer[Any]]) -> Reducer[Any]:
        """The reducer of `reducers` that made the run's latest checkpoint, else `default`."""
        if not reducers:
            return default
        try:
            latest = self._checkpoints.list(run_id, limit=1, newest_first=True)
        except CorruptRecordError:
            return default  # `_run` names the damage
        found = reducer_named(reducers, latest[0].reducer, latest[0].reducer_version) if latest else None
        return default if found is None else found

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
    ) -> None:
        """Check one run."""
        problems = report.problems
        try:
            rec = self._store.read(lambda txn: self._runs.require(txn, run_id))
        except CorruptRecordError as exc:
            problems.append(Problem(run_id, None, "corrupt", str(exc)))
            return
        problems.extend(self._store.read(lambda txn: _number_problems(self._runs, txn, run_id, rec)))
        checkpoints, snapshots, seen, found = self._store.read(
            lambda txn: _stored(self._checkpoints, txn, run_id, rec, reducer)
        )
        report.checkpoints += seen
        problems.extend(found)
        self._indexes(run_id, rec, report, ids_indexed)
        start = rec.base
        try:
            start = self._store.read(lambda txn: self._runs.chain_base(txn, run_id, rec))
            _, _, start, state = self._replay.start(run_id, start, reducer, rec.number)
        except (CorruptRecordError, PrunedError, ReducerError) as exc:
            problems.append(Problem(run_id, start, "corrupt", f"base snapshot: {exc}"))
            return
        self._compare(run_id, rec, start, state, snapshots, checkpoints, reducer, report, skip_snapshot=bool(rec.base))
        pending = 0
        try:
            for owner, number, first, values, _ in self._reader.chunks(run_id, start, rec.head, _CHUNK, rec.number):
                for i, value in enumerate(values):
                    offset = first + i
                    try:
                        event = self._codec.decode_entry_event(value, EVENTS.key(number, offset))
                    except CorruptRecordError as exc:
                        problems.append(Problem(owner, offset, "corrupt", str(exc.at(owner, offset))))
                        return
                    except UnknownKindError as exc:
                        problems.append(Problem(owner, offset, "unknown_kind", str(exc.at(owner, offset))))
                        return
                    try:
                        state = reducer.apply(state, event)
                    except Exception as exc:  # noqa: BLE001 - a reducer failing is reported, not raised
                        problems.append(Problem(run_id, offset, "corrupt", f"the reducer raised {exc!r}"))
                        return
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

    def _snapshot(
        self, run_id: str, rec: RunRecord, offset: int, reducer: Reducer[Any], report: VerifyReport
    ) -> bytes | None:
        """The canonical bytes of the run's snapshot at `offset` by `reducer`; a damaged one is reported."""
        key = SNAPSHOTS.key(rec.number, offset, reducer_tag(reducer))
        value = self._store.read(lambda txn: txn.get(SNAPSHOTS, key))
        if value is None:
            return None
        try:
            return self._replay.load_snapshot(run_id, key, value, reducer)[1]
        except CorruptRecordError as exc:
            report.problems.append(Problem(run_id, offset, "corrupt", f"snapshot at offset {offset}: {exc.what}"))
            return None

    def _indexes(self, run_id: str, rec: RunRecord, report: VerifyReport, ids_indexed: bool) -> None:
        """Cross-check the run's own entries with its head, the feed and the event id index (an
        id the log made from the entry's run number and offset is not indexed: docs/format.md,
        "Event ids")."""
        problems = report.problems
        number = rec.number
        prefix = own_prefix(self._codec.log_id)
        own = unread = 0  # entries whose id the log made (not indexed); entries whose id is unreadable
        previous: Ordered = (-1, -1)  # the position and offset of the entry before: positions grow with offsets
        first = max(rec.base, rec.fork_offset) + 1
        count = 0
        start = EVENTS.key(number, first)
        stop = run_range(number)[1]
        while True:

            def check(
                txn: Txn, start: bytes = start, before: Ordered = previous
            ) -> tuple[int, bytes | None, list[Problem], int, int, Ordered]:
                found: list[Problem] = []
                own = unread = seen = 0
                last = None
                for key, value in txn.scan(EVENTS, start, stop, limit=_CHUNK):
                    seen += 1
                    last = key
                    offset = EVENTS.second(key)
                    if offset > rec.head:
                        found.append(Problem(run_id, offset, "index", f"an entry lies past the run's head {rec.head}"))
                    try:  # position and id only: the fold decodes the event
                        position, event_id = self._codec.decode_entry_id(value, key)
                    except CorruptRecordError:
                        unread += 1
                        continue  # named by the fold
                    if txn.get(FEED, FEED.key(position)) != key:
                        message = f"feed position {position} does not point at it"
                        found.append(Problem(run_id, offset, "feed", message, position))
                    if position <= before[0]:
                        message = (
                            f"feed position {position} is not above {before[0]}, the position of offset {before[1]}"
                        )
                        found.append(Problem(run_id, offset, "feed", message, position))
                    before = (position, offset)
                    if own_slot(prefix, event_id) == (number, offset):
                        own += 1
                    elif ids_indexed and txn.get(EVENT_IDS, EVENT_IDS.key(number, event_id)) != EVENTS.tail(key):
                        found.append(Problem(run_id, offset, "index", f"event id {event_id!r} is not indexed to it"))
                return seen, last, found, own, unread, before

            seen, last, found, own_here, unread_here, previous = self._store.read(check)
            problems.extend(found)
            own += own_here
            unread += unread_here
            count += seen
            if last is None or seen < _CHUNK:
                break
            start = last + b"\x00"
        if ids_indexed:
            indexed = self._store.read(lambda txn: self._count_ids_above(txn, number, rec.base))
            if not count - own - unread <= indexed <= count - own:
                problems.append(
                    Problem(run_id, None, "index", f"{indexed} event ids index the run's {count - own} entries")
                )

    @staticmethod
    def _count_ids_above(txn: Txn, number: int, base: int) -> int:
        start, stop = run_range(number)
        return sum(1 for _, v in scan_chunks(txn, EVENT_IDS, start, stop) if len(v) != 8 or from_u64(v) > base)

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
        records = self._store.read(lambda txn: [(key, txn.get(CHECKPOINTS, key)) for key in keys]) if keys else []
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

    def _feed(self, report: VerifyReport, removing: dict[int, int]) -> None:
        """Every feed position must name a run that has that number, an offset of the run's own
        (above its base and its fork point, at most its head), and an entry that holds that
        position; but the positions an unfinished removal has yet to remove are skipped."""
        start = b""
        while True:

            def check(txn: Txn, start: bytes = start) -> tuple[int, bytes, list[Problem]]:
                pairs = txn.scan(FEED, start, None, limit=_CHUNK)
                cache: dict[int, tuple[str, RunRecord | None]] = {}
                found = [
                    problem
                    for key, ref in pairs
                    if (problem := _position_problem(self._runs, self._codec, txn, from_u64(key), ref, removing, cache))
                    is not None
                ]
                return len(pairs), (pairs[-1][0] + b"\x00" if pairs else start), found

            seen, start, found = self._store.read(check)
            report.problems.extend(found)
            if seen < _CHUNK:
                return


def _stored(
    records: Checkpoints[Any], txn: Txn, run_id: str, rec: RunRecord, reducer: Reducer[Any]
) -> tuple[dict[int, list[bytes]], set[int], int, list[Problem]]:
    """The keys of the run's checkpoints by offset, the offsets of its snapshots by `reducer`
    (a record is read again, and a snapshot read, only when the fold reaches it), how many
    checkpoints it has, and what is wrong with their records and ids."""
    found: list[Problem] = []
    start, stop = run_range(rec.number)
    tag = reducer_tag(reducer)
    checkpoints: dict[int, list[bytes]] = {}
    seen = 0
    for key, value in scan_chunks(txn, CHECKPOINTS, start, stop):
        seen += 1
        try:
            cp = records.record(run_id, key, value)
        except CorruptRecordError as exc:
            found.append(Problem(run_id, None, "corrupt", f"checkpoint record: {exc}"))
            continue
        checkpoints.setdefault(cp.offset, []).append(key)
        if txn.get(CHECKPOINT_IDS, CHECKPOINT_IDS.key(rec.number, cp.checkpoint_id)) != CHECKPOINTS.tail(key):
            found.append(
                Problem(run_id, cp.offset, "index", f"checkpoint {cp.checkpoint_id!r} is not indexed by its id")
            )
    if sum(1 for _ in scan_chunks(txn, CHECKPOINT_IDS, start, stop)) > seen:
        found.append(Problem(run_id, None, "index", "checkpoint ids index checkpoints that are gone"))
    snapshots: set[int] = set()
    while keys := txn.keys(SNAPSHOTS, start, stop, _CHUNK):
        snapshots.update(at for _, at, held in map(SNAPSHOTS.parse, keys) if held == tag)
        start = keys[-1] + b"\x00"
    return checkpoints, snapshots, seen, found


def _number_problems(runs: Runs, txn: Txn, run_id: str, rec: RunRecord) -> list[Problem]:
    """The run's number must be one the log gave, and be indexed to the run: feed positions
    name runs by number, so a run whose number is wrong has its entries shown as another's."""
    out = []
    given = runs.meta_int(txn, META_RUN_NUMBER)
    if rec.number < 1 or (txn.dense and rec.number > given):  # PostgreSQL: numbers from a sequence
        out.append(Problem(run_id, None, "index", f"run number {rec.number} is not one the log gave (1..{given})"))
    named = txn.get(RUN_NUMBERS, RUN_NUMBERS.key(rec.number))
    if named != run_id.encode():
        whose = "no run" if named is None else repr(bytes(named).decode("utf-8", "replace"))
        out.append(Problem(run_id, None, "index", f"the run's number {rec.number} is indexed to {whose}"))
    return out


def _index_problems(runs: Runs, txn: Txn) -> list[Problem]:
    """Each indexed run number must be the number of the run it names."""
    out = []
    for key, value in scan_chunks(txn, RUN_NUMBERS, b"", None):
        number, run_id = from_u64(key), bytes(value).decode("utf-8", "replace")
        try:
            rec = runs.get(txn, run_id)
        except EventLogError:
            continue  # a damaged record is named by its run's check, an invalid id is not a run
        if rec is None or rec.number != number:
            has = "is gone" if rec is None else f"has number {rec.number}"
            out.append(Problem(run_id, None, "index", f"run number {number} is indexed to run {run_id!r}, which {has}"))
    return out


def _position_problem(
    runs: Runs,
    codec: Codec,
    txn: Txn,
    position: int,
    ref: bytes,
    removing: dict[int, int],
    cache: dict[int, tuple[str, RunRecord | None]],
) -> Problem | None:
    """What is wrong with one feed position (None: nothing). `cache` holds the run of each number."""
    if not FEED.well_formed(ref):
        return Problem(None, None, "feed", f"feed position {position} is malformed", position)
    number, offset = FEED.parse_ref(ref)
    if offset <= removing.get(number, -1):
        return None  # a delete or prune has yet to remove it
    if number not in cache:
        raw = txn.get(RUN_NUMBERS, RUN_NUMBERS.key(number))
        run_id = f"#{number}" if raw is None else bytes(raw).decode("utf-8", "replace")
        try:
            cache[number] = run_id, None if raw is None else runs.get(txn, run_id)
        except EventLogError:
            return None  # a damaged record is named by its run's check
    run_id, rec = cache[number]
    where = f"feed position {position} points at run number {number} offset {offset}"
    if rec is None or rec.number != number:
        has = "a number no run has" if rec is None else f"indexed to run {run_id!r}, whose number is {rec.number}"
        return Problem(run_id, offset, "feed", f"{where}, {has}", position)
    if not max(rec.base, rec.fork_offset) < offset <= rec.head:
        lo = max(rec.base, rec.fork_offset) + 1
        return Problem(run_id, offset, "feed", f"{where}, outside the run's own offsets {lo}..{rec.head}", position)
    value = txn.get(EVENTS, ref)
    if value is None:
        return Problem(run_id, offset, "feed", f"feed position {position} points at a missing entry", position)
    try:
        held, _ = codec.decode_entry_id(value, ref)
    except CorruptRecordError:
        return None  # named by the fold
    if held != position:
        return Problem(run_id, offset, "feed", f"{where}, whose entry has position {held}", position)
    return None
