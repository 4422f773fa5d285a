"""`EventLog`: runs, append, read, feed, state_at, checkpoints, fork, prune, verify.

The log lays its keys out in the store's tables (see docs/format.md) and keeps every rule
of DESIGN.md: offsets without gaps, append-only entries, fencing, idempotent event ids,
forks that share their parent's events, and checks on every record read.
"""

from __future__ import annotations

import datetime as _dt
import gc
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import msgspec

from . import _limits
from ._keys import check_id, check_run_id, run_key
from ._records import CheckpointRecord, RunRecord, SnapshotRecord
from .checkpoints import Checkpoints
from .codec import Codec, EntryRecord, train_dictionary
from .errors import (
    CheckpointNotFoundError,
    ConflictError,
    CorruptRecordError,
    EventLogError,
    ForkDependencyError,
    FormatVersionError,
    NotALogError,
    OffsetOutOfRangeError,
    PrunedError,
    RunExistsError,
    UnknownRunError,
)
from .events import Event
from .fold import AgentReducer, CheckpointPolicy, Reducer, reducer_tag
from .recorder import Recorder
from .store._base import Store, Txn, from_u64, u64

__all__ = ["Entry", "EventLog", "Problem", "RunInfo", "VerifyReport"]

_META_FORMAT = b"format"
_META_POSITION = b"position"
_META_RUN_NUMBER = b"run_number"
_META_DICT_CURRENT = b"dict.current"
_META_DICT_NEXT_TRY = b"dict.next_try"
_META_DICT = b"dict:"


def _default_clock() -> int:
    return time.time_ns()


class _Ids:
    """Default id source: 64 random bits drawn once per log object, then a counter.

    Unique without a system call per id, and shorter to store than a UUID."""

    def __init__(self) -> None:
        self._prefix = os.urandom(8).hex()
        self._count = itertools.count(1)

    def __call__(self) -> str:
        return f"{self._prefix}{next(self._count):x}"


class Entry(msgspec.Struct, frozen=True):
    """An event as stored: the event plus its offset, position, event_id, time and meta."""

    run_id: str
    """The run the entry was read from."""
    offset: int
    """Place in the run, from 1."""
    position: int
    """Place in the whole log's commit order, from 1."""
    event_id: str
    """Unique id of the event (the caller's, or one the log made)."""
    time_ns: int
    """Commit time in nanoseconds since the Unix epoch."""
    meta: dict[str, Any] | None
    """The caller's metadata."""
    event: Event
    """The event."""

    @property
    def time(self) -> _dt.datetime:
        """Commit time as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.time_ns / 1e9, tz=_dt.UTC)


class RunInfo(msgspec.Struct, frozen=True):
    """What the log knows of a run without folding it."""

    run_id: str
    head: int
    """Offset of the last event (0: no events)."""
    base: int
    """Offsets at or below this were pruned."""
    parent: str | None
    """The run this one was forked from."""
    fork_offset: int
    """Offsets up to this are shared with the parent."""
    created_ns: int
    checkpoints: int
    """Number of checkpoints kept."""
    forks: int
    """Number of runs forked from this one."""


class Problem(msgspec.Struct, frozen=True):
    """One thing `verify` found wrong."""

    run_id: str | None
    offset: int | None
    kind: str
    """`corrupt`, `gap`, `nondeterministic`, `checkpoint`, `feed` or `meta`."""
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


class _Request:
    """One append waiting for (or in) a group commit."""

    __slots__ = (
        "checkpoint", "done", "error", "events", "expected_offset", "given", "ids", "lead",
        "committed", "meta", "offsets", "run_id", "time_ns", "writing", "written",
    )  # fmt: skip

    def __init__(
        self,
        run_id: str,
        events: list[Event],
        expected_offset: int | None,
        ids: list[str],
        given: list[bool],
        meta: dict[str, Any] | None,
        checkpoint: Callable[[int, int], _PendingCheckpoint | None] | None,
        time_ns: int,
    ) -> None:
        self.run_id, self.events, self.expected_offset = run_id, events, expected_offset
        self.ids, self.given, self.meta, self.checkpoint, self.time_ns = ids, given, meta, checkpoint, time_ns
        self.offsets: list[int] = []
        self.written = 0
        self.error: BaseException | None = None
        self.lead = False
        self.writing = False
        self.committed = False
        self.done: threading.Event | None = None  # made for a request that waits for a leader


class _PendingCheckpoint(msgspec.Struct):
    """A checkpoint to write in the same transaction as the events before it."""

    record: CheckpointRecord
    snapshot: bytes | None  # framed SnapshotRecord, or None when not materialized
    tag: bytes


class EventLog:
    """One log: many runs in one store. Use `eventlog.open` to make one."""

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], int] | None = None,
        ids: Callable[[], str] | None = None,
        record_size_bytes_max: int = _limits.record_size_bytes_max,
        reducer: Reducer | None = None,
    ) -> None:
        self.store = store
        self.clock = clock or _default_clock
        """Returns the time in nanoseconds since the epoch; injected for replayable tests."""
        self.ids = ids or _Ids()
        """Returns a new unique id string (event and checkpoint ids)."""
        self.reducer: Reducer = reducer or AgentReducer()
        """The reducer used when a call names none."""
        self.codec = Codec(self._load_dictionary, record_size_bytes_max)
        self.checkpoints = Checkpoints(self)
        self._queue_lock = threading.Lock()
        self._queue: list[_Request] = []
        self._leading = False
        self._last_batch = 0
        self._next_train = 0  # the event count at which to look at the dictionary schedule again
        self._open_meta()

    # -- lifecycle ---------------------------------------------------------------------

    def _open_meta(self) -> None:
        def check(txn: Txn) -> bool:
            raw = txn.get("meta", _META_FORMAT)
            if raw is None:
                if txn.scan("runs", b"", None, limit=1) or txn.scan("events", b"", None, limit=1):
                    raise NotALogError("the store holds data but no format record; it is not an eventlog log")
                return False
            try:
                version = from_u64(self.codec.payload(raw))
            except CorruptRecordError as exc:
                raise NotALogError(f"the log's format record is damaged ({exc.what})") from None
            if version > _limits.format_version:
                raise FormatVersionError(
                    f"the log was written in format version {version}; this eventlog reads up to "
                    f"{_limits.format_version}. Upgrade eventlog to open it"
                )
            return True

        if not self.store.read(check) and not self.store.readonly:

            def init(txn: Txn) -> None:
                if txn.get("meta", _META_FORMAT) is None:
                    txn.put("meta", _META_FORMAT, self.codec.compress(u64(_limits.format_version), 0))

            self.store.write(init)

    def close(self) -> None:
        """Close the log (syncs first under `batch` and `none` durability)."""
        self.store.close()

    def __enter__(self) -> EventLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- meta helpers ------------------------------------------------------------------

    def _meta_int(self, txn: Txn, key: bytes) -> int:
        raw = txn.get("meta", key)
        if raw is None:
            return 0
        try:
            return from_u64(self.codec.payload(raw))
        except CorruptRecordError as exc:
            raise exc.at(None, None) from None

    def _put_meta_int(self, txn: Txn, key: bytes, value: int) -> None:
        txn.put("meta", key, self.codec.compress(u64(value), 0))

    def _load_dictionary(self, dict_id: int) -> bytes | None:
        raw = self.store.read(lambda txn: txn.get("meta", _META_DICT + dict_id.to_bytes(4, "big")))
        return None if raw is None else bytes(self.codec.payload(raw, _limits.dictionary_size_bytes * 4))

    # -- run records -------------------------------------------------------------------

    def _run(self, txn: Txn, run_id: str) -> RunRecord | None:
        check_run_id(run_id)
        raw = txn.get("runs", run_key(run_id))
        if raw is None:
            return None
        try:
            return self.codec.decode_value(raw, RunRecord)
        except CorruptRecordError as exc:
            raise exc.at(run_id, None) from None

    def _require(self, txn: Txn, run_id: str) -> RunRecord:
        rec = self._run(txn, run_id)
        if rec is None:
            raise UnknownRunError(run_id)
        return rec

    def _put_run(self, txn: Txn, run_id: str, rec: RunRecord) -> None:
        txn.put("runs", run_key(run_id), self.codec.encode_value(rec))

    def _new_run(self, txn: Txn, run_id: str, now: int, parent: str | None = None, at: int = 0) -> RunRecord:
        number = self._meta_int(txn, _META_RUN_NUMBER) + 1
        self._put_meta_int(txn, _META_RUN_NUMBER, number)
        txn.put("run_numbers", u64(number), run_id.encode())
        return RunRecord(number=number, head=at, parent=parent, fork_offset=at, created_ns=now, base=0)

    def head(self, run_id: str) -> int:
        """Offset of the run's last event; 0 for a run with no events or no run at all."""
        rec = self.store.read(lambda txn: self._run(txn, run_id))
        return 0 if rec is None else rec.head

    def runs(self) -> list[str]:
        """Every run id in the log, in byte order."""

        def scan(txn: Txn) -> list[str]:
            out: list[bytes] = []
            for key, value in txn.scan("runs", b"", None):
                if b"\xff" in key:  # a long id, keyed by its hash: its full id is in run_numbers
                    number = self.codec.decode_value(value, RunRecord).number
                    full = txn.get("run_numbers", u64(number))
                    if full is None:
                        raise CorruptRecordError(f"run number {number} has no id in run_numbers")
                    key = full
                out.append(bytes(key))
            return [k.decode() for k in sorted(out)]

        return self.store.read(scan)

    def run_info(self, run_id: str) -> RunInfo:
        """Head, base, parent, fork offset, checkpoint and fork counts of a run."""

        def info(txn: Txn) -> RunInfo:
            rec = self._require(txn, run_id)
            n = len(txn.scan("checkpoints", u64(rec.number), u64(rec.number + 1)))
            return RunInfo(run_id, rec.head, rec.base, rec.parent, rec.fork_offset, rec.created_ns, n, rec.forks)

        return self.store.read(info)

    # -- append ------------------------------------------------------------------------

    def append(
        self,
        run_id: str,
        event: Event,
        *,
        event_id: str | None = None,
        meta: dict[str, Any] | None = None,
        expected_offset: int | None = None,
        time_ns: int | None = None,
    ) -> int:
        """Append one event; return its offset.

        With `event_id`, appending the same id to the run again returns the first offset
        and writes nothing. With `expected_offset`, raise ConflictError unless the run's
        head is that offset. `time_ns` sets the entry's time instead of the log's clock
        (an import keeps entry times exactly).
        """
        ids = None if event_id is None else [event_id]
        return self.append_many(
            run_id, [event], expected_offset=expected_offset, event_ids=ids, meta=meta, time_ns=time_ns
        )[0]

    def append_many(
        self,
        run_id: str,
        events: Iterable[Event],
        *,
        expected_offset: int | None = None,
        event_ids: Sequence[str | None] | None = None,
        meta: dict[str, Any] | None = None,
        time_ns: int | None = None,
    ) -> list[int]:
        """Append events atomically (all or none); return their offsets.

        ConflictError if `expected_offset` is given and the head differs. Events whose
        `event_ids` entry is already in the run are not written again; their first offsets
        are returned. `time_ns` sets the entries' time instead of the log's clock.
        """
        offsets, _ = self._commit(run_id, list(events), expected_offset, event_ids, meta, None, time_ns)
        return offsets

    def _prepare(
        self, run_id: str, events: list[Event], event_ids: Sequence[str | None] | None
    ) -> tuple[list[str], list[bool]]:
        check_run_id(run_id)
        if not events:
            raise EventLogError("append_many needs at least one event")
        if len(events) > _limits.batch_events_max:
            raise EventLogError(f"{len(events)} events in one batch is over the limit of {_limits.batch_events_max}")
        for e in events:
            self.codec.check_event(e)
        if event_ids is None:
            event_ids = [None] * len(events)
        if len(event_ids) != len(events):
            raise EventLogError(f"{len(event_ids)} event ids for {len(events)} events")
        for given in event_ids:
            if given is not None:
                check_id("event_id", given)
        given_flags = [i is not None for i in event_ids]
        ids = [i if i is not None else self.ids() for i in event_ids]
        return ids, given_flags

    def _commit(
        self,
        run_id: str,
        events: list[Event],
        expected_offset: int | None,
        event_ids: Sequence[str | None] | None,
        meta: dict[str, Any] | None,
        checkpoint: Callable[[int, int], _PendingCheckpoint | None] | None,
        time_ns: int | None = None,
    ) -> tuple[list[int], int]:
        """Write events (and a checkpoint after them) in one transaction; return offsets and bytes written.

        Group commit: while one thread commits, the requests of other threads queue up and
        the next leader commits them all in one transaction (one fsync for many appends).
        """
        ids, given = self._prepare(run_id, events, event_ids)
        request = _Request(run_id, events, expected_offset, ids, given, meta, checkpoint,
                           self.clock() if time_ns is None else time_ns)  # fmt: skip
        with self._queue_lock:
            lead = not self._leading
            if lead:
                self._leading = True
            else:
                request.done = threading.Event()
            self._queue.append(request)
        if request.done is not None:
            request.done.wait()
            lead = request.lead
        if lead:
            self._lead()
        if request.error is not None:
            raise request.error
        return request.offsets, request.written

    def _lead(self) -> None:
        """Commit every queued request in one transaction, then hand leadership to the next waiter."""
        batch: list[_Request] = []
        try:
            if self._last_batch > 1:
                # Other threads were appending a moment ago: give those the last commit woke up
                # a moment to queue again, so that this commit takes them along.
                time.sleep(_limits.group_commit_wait_seconds)
            with self._queue_lock:
                batch, self._queue = self._queue, []
            self._last_batch = len(batch)
            if batch:
                self._commit_batch(batch)
        finally:
            # Even when this thread is interrupted, no waiter is left behind and leadership passes on.
            with self._queue_lock:
                if self._queue:
                    successor = self._queue[0]
                    successor.lead = True
                    assert successor.done is not None
                    successor.done.set()
                else:
                    self._leading = False
            for request in batch:
                if request.error is None and not request.committed:
                    request.error = EventLogError(
                        f"run {request.run_id!r}: the commit was interrupted; nothing of this append was written"
                    )
                if request.done is not None:
                    request.done.set()

    def _commit_batch(self, batch: list[_Request]) -> None:
        def write(txn: Txn) -> bool:
            checkpointed = False
            # A dictionary trained in this transaction is used from the next one on, once committed.
            dict_id = self._meta_int(txn, _META_DICT_CURRENT)
            start = position = self._position(txn)
            for request in batch:
                request.error = None
                request.writing = False
                try:
                    position, wrote_checkpoint = self._write_request(txn, request, dict_id, position)
                    checkpointed |= wrote_checkpoint
                except EventLogError as exc:
                    if request.writing:
                        raise  # some of it was written: abort the transaction
                    request.error = exc  # wrote nothing: every check runs before the first put
            if position > start and position >= self._next_train:
                self._maybe_train(txn, position)
            return checkpointed

        try:
            checkpointed = self.store.write(write)
        except BaseException as exc:
            self._next_train = 0  # the schedule read in the failed transaction may not hold
            if len(batch) == 1:
                batch[0].error = exc
                return
            for request in batch:  # one failed the whole transaction: commit each alone
                self._commit_batch([request])
            return
        for request in batch:
            request.committed = request.error is None
        if checkpointed and getattr(self.store, "durability", "sync") == "batch":
            self.store.sync()

    def _known_event_ids(self, txn: Txn, rec: RunRecord, event_ids: Sequence[str | None]) -> dict[int, int]:
        """{index: offset} of the caller-given `event_ids` already appended to the run."""
        prefix = u64(rec.number)
        known: dict[int, int] = {}
        for i, event_id in enumerate(event_ids):
            if isinstance(event_id, str) and event_id:
                raw = txn.get("event_ids", prefix + event_id.encode())
                if raw is not None:
                    known[i] = from_u64(raw)
        return known

    def _position(self, txn: Txn) -> int:
        """The last position given: the feed's last key, or the meta record kept when the
        feed's tail was deleted (positions are never given twice)."""
        last = txn.scan("feed", b"", None, reverse=True, limit=1)
        return max(from_u64(last[0][0]) if last else 0, self._meta_int(txn, _META_POSITION))

    def _keep_position(self, txn: Txn) -> None:
        """Record the last position before feed entries are deleted."""
        self._put_meta_int(txn, _META_POSITION, self._position(txn))

    def _write_request(self, txn: Txn, r: _Request, dict_id: int, position: int) -> tuple[int, bool]:
        """Apply one append request inside a write transaction; raises before writing anything.

        Returns the last position given and whether a checkpoint was written."""
        rec = self._run(txn, r.run_id)
        head = 0 if rec is None else rec.head
        known: dict[int, int] = {}
        if rec is not None and any(r.given):
            known = self._known_event_ids(txn, rec, [i if g else None for i, g in zip(r.ids, r.given, strict=True)])
        if known and len(known) == len(r.events):
            r.offsets, r.written = [known[i] for i in range(len(r.events))], 0
            return position, False
        if r.expected_offset is not None and head != r.expected_offset:
            raise ConflictError(r.run_id, r.expected_offset, head)
        # Encode everything first: a record over the limit raises before anything is written.
        values: list[tuple[int, bytes]] = []
        first_of: dict[str, int] = {}
        offset = head
        for i, event in enumerate(r.events):
            if i in known or (r.given[i] and r.ids[i] in first_of):
                continue
            offset += 1
            position += 1
            record = EntryRecord(position, r.time_ns, r.ids[i], r.meta, event)
            values.append((i, self.codec.encode_entry(record, dict_id, checked=True)))
            if r.given[i]:
                first_of[r.ids[i]] = offset
        r.writing = True
        if rec is None:
            rec = self._new_run(txn, r.run_id, r.time_ns)
        prefix = u64(rec.number)
        position -= len(values)
        offsets: dict[int, int] = dict(known)
        written = 0
        put = txn.put
        for i, value in values:
            rec.head += 1
            position += 1
            written += len(value)
            key = prefix + rec.head.to_bytes(8, "big")
            put("events", key, value)
            put("feed", position.to_bytes(8, "big"), key)
            if r.given[i]:
                put("event_ids", prefix + r.ids[i].encode(), key[8:])
            offsets[i] = rec.head
        r.offsets = [offsets[i] if i in offsets else first_of[r.ids[i]] for i in range(len(r.events))]
        r.written = written
        checkpointed = False
        if r.checkpoint is not None:
            pending = r.checkpoint(rec.head, written)
            if pending is not None:
                rec.checkpoint_seq += 1
                self._put_checkpoint(txn, rec, pending)
                checkpointed = True
        self._put_run(txn, r.run_id, rec)
        return position, checkpointed

    def _maybe_train(self, txn: Txn, position: int) -> None:
        """Train a zstd dictionary from a bounded sample of the log's latest records, on a
        geometric schedule (256 events, then 8 times more each time)."""
        next_try = self._meta_int(txn, _META_DICT_NEXT_TRY) or _limits.dictionary_train_records_min
        self._next_train = next_try
        if position < next_try:
            return
        samples: list[bytes] = []
        size = 0
        for _, ref in txn.scan("feed", b"", None, reverse=True, limit=_limits.dictionary_sample_records_max):
            value = txn.get("events", ref)
            if value is None:
                continue
            try:
                payload = bytes(self.codec.payload(value))
            except CorruptRecordError:
                continue
            samples.append(payload)
            size += len(payload)
            if size >= _limits.dictionary_sample_size_bytes_max:
                break
        trained = train_dictionary(samples)
        if trained is None:
            self._put_meta_int(txn, _META_DICT_NEXT_TRY, position * 2)
            self._next_train = position * 2
            return
        dict_id = self._meta_int(txn, _META_DICT_CURRENT) + 1
        txn.put("meta", _META_DICT + dict_id.to_bytes(4, "big"), self.codec.compress(trained, 0))
        self._put_meta_int(txn, _META_DICT_CURRENT, dict_id)
        self._put_meta_int(txn, _META_DICT_NEXT_TRY, position * _limits.dictionary_retrain_factor)
        self._next_train = position * _limits.dictionary_retrain_factor

    # -- read --------------------------------------------------------------------------

    def _segments(
        self, txn: Txn, run_id: str, rec: RunRecord, after: int, upto: int
    ) -> list[tuple[str, int, int, int]]:
        """Where offsets (after, upto] of a run are stored: (run id, run number, lo, hi) pieces, in order."""
        pieces: list[tuple[str, int, int, int]] = []
        origin = run_id
        if after < rec.base and upto > after:  # a pruned fork's offsets below its base, even those its parent holds
            raise PrunedError(run_id, after + 1, rec.base)
        while upto > after:
            lo = max(rec.fork_offset, after)
            if upto > lo:
                if lo < rec.base:
                    raise PrunedError(origin, lo + 1, rec.base)
                pieces.append((run_id, rec.number, lo, upto))
            if rec.parent is None or after >= rec.fork_offset:
                break
            upto = min(upto, rec.fork_offset)
            run_id = rec.parent
            rec = self._require(txn, run_id)
        pieces.reverse()
        return pieces

    def _check_range(self, run_id: str, rec: RunRecord, after: int, upto: int | None) -> int:
        if upto is None:
            upto = rec.head
        if not 0 <= after <= rec.head:
            raise OffsetOutOfRangeError(run_id, after, rec.head)
        if not 0 <= upto <= rec.head:
            raise OffsetOutOfRangeError(run_id, upto, rec.head)
        return upto

    def _raw_chunks(
        self, run_id: str, after: int, upto: int | None, chunk: int
    ) -> Iterator[tuple[str, int, list[bytes]]]:
        """Stored values of offsets (after, upto] as (owner run id, first offset, values) pieces,
        each chunk read in its own read transaction (a long read never pins the map)."""
        end: int | None = upto
        while True:

            def read(txn: Txn) -> tuple[int, list[tuple[str, int, list[bytes]]]]:
                rec = self._require(txn, run_id)
                stop = self._check_range(run_id, rec, after, end)
                out: list[tuple[str, int, list[bytes]]] = []
                room = chunk
                for owner, number, lo, hi in self._segments(txn, run_id, rec, after, stop):
                    if room <= 0:
                        break
                    prefix = u64(number)
                    want = min(room, hi - lo)
                    values, last = txn.values("events", prefix + u64(lo + 1), want)
                    # Keys are unique and sorted: the right count and last key mean no gap.
                    if len(values) != want or last != prefix + u64(lo + want):
                        pairs = txn.scan("events", prefix + u64(lo + 1), prefix + u64(hi + 1), limit=room)
                        expected = lo + 1
                        for key, _ in pairs:
                            if from_u64(key[8:]) != expected:
                                break
                            expected += 1
                        raise CorruptRecordError(f"offset {expected} is missing", owner, expected)
                    out.append((owner, lo + 1, values))
                    room -= want
                return stop, out

            stop, pieces = self.store.read(read)
            end = stop
            last = after
            for owner, first, values in pieces:
                yield owner, first, values
                last = first + len(values) - 1
            if not pieces or last >= stop:
                return
            after = last

    def _raw_range(self, run_id: str, after: int, upto: int | None, chunk: int) -> Iterator[tuple[str, int, bytes]]:
        """(owner run id, offset, stored value) of offsets (after, upto], in order."""
        for owner, first, values in self._raw_chunks(run_id, after, upto, chunk):
            for i, value in enumerate(values):
                yield owner, first + i, value

    def _decode(self, run_id: str, offset: int, value: bytes) -> Any:
        try:
            return self.codec.decode_entry(value)
        except CorruptRecordError as exc:
            raise exc.at(run_id, offset) from None

    def read(self, run_id: str, after: int = 0, upto: int | None = None) -> Iterator[Entry]:
        """Entries with offsets in (after, upto] in order (upto None: the head when the read starts)."""
        for owner, offset, value in self._raw_range(run_id, after, upto, _limits.read_chunk_entries):
            r = self._decode(owner, offset, value)
            yield Entry(run_id, offset, r.position, r.event_id, r.time_ns, r.meta, r.event)

    def entry(self, run_id: str, offset: int) -> Entry:
        """The entry at one offset (1..head)."""
        if offset < 1:
            raise OffsetOutOfRangeError(run_id, offset, self.head(run_id))
        for e in self.read(run_id, offset - 1, offset):
            return e
        raise OffsetOutOfRangeError(run_id, offset, self.head(run_id))

    def feed(self, after: int = 0, limit: int | None = None) -> Iterator[Entry]:
        """Every entry of every run with position > after, in commit order."""
        if after < 0:
            raise EventLogError(f"feed position {after} is negative; after=0 reads the feed from its start")
        if after >= (1 << 64) - 1:
            return  # past every position a log can give
        count = 0
        while limit is None or count < limit:
            want = _limits.read_chunk_entries if limit is None else min(_limits.read_chunk_entries, limit - count)

            def read(txn: Txn, after: int = after, want: int = want) -> list[Entry]:
                out: list[Entry] = []
                names: dict[int, str] = {}
                for key, ref in txn.scan("feed", u64(after + 1), None, limit=want):
                    number, offset = from_u64(ref[:8]), from_u64(ref[8:16])
                    if number not in names:
                        raw = txn.get("run_numbers", ref[:8])
                        names[number] = raw.decode() if raw is not None else f"#{number}"
                    value = txn.get("events", ref)
                    if value is None:
                        raise CorruptRecordError(
                            f"feed position {from_u64(key)} points at a missing entry", names[number], offset
                        )
                    r = self._decode(names[number], offset, value)
                    out.append(Entry(names[number], offset, r.position, r.event_id, r.time_ns, r.meta, r.event))
                return out

            chunk = self.store.read(read)
            if not chunk:
                return
            yield from chunk
            count += len(chunk)
            after = chunk[-1].position

    # -- fold --------------------------------------------------------------------------

    def _find_snapshot(
        self, txn: Txn, run_id: str, rec: RunRecord, offset: int, tag: bytes
    ) -> tuple[int, bytes] | None:
        """The nearest snapshot at or below `offset` made by the reducer `tag`: (offset, stored value)."""
        while True:
            lo = max(rec.fork_offset, rec.base)
            prefix = u64(rec.number)
            if offset >= lo:
                stop = prefix + u64(offset + 1)
                while True:
                    found = txn.scan("snapshots", prefix + u64(lo), stop, reverse=True, limit=16)
                    for key, value in found:
                        if key[16:] == tag:
                            return from_u64(key[8:16]), value
                    if len(found) < 16:
                        break
                    stop = found[-1][0]  # exclusive: go on below the last key seen
            if rec.parent is None or offset <= 0:
                return None
            offset = min(offset, rec.fork_offset)
            run_id = rec.parent
            rec = self._require(txn, run_id)

    def _load_snapshot(self, run_id: str, value: bytes, reducer: Reducer) -> tuple[int, bytes, Any]:
        try:
            snap = self.codec.decode_value(value, SnapshotRecord)
            state = msgspec.msgpack.decode(snap.state, type=reducer.state_type)
        except CorruptRecordError as exc:
            raise exc.at(run_id, None) from None
        except (msgspec.DecodeError, ValueError, TypeError) as exc:
            raise CorruptRecordError(f"undecodable snapshot state: {exc}", run_id) from None
        return snap.offset, bytes(snap.state), state

    def _start(self, run_id: str, offset: int | None, reducer: Reducer) -> tuple[int, int, Any]:
        """(offset to fold to, offset of the starting state, starting state)."""
        tag = reducer_tag(reducer)

        def plan(txn: Txn) -> tuple[int, tuple[int, bytes] | None]:
            rec = self._require(txn, run_id)
            target = rec.head if offset is None else offset
            if not 0 <= target <= rec.head:
                raise OffsetOutOfRangeError(run_id, target, rec.head)
            if target < rec.base:
                raise PrunedError(run_id, target, rec.base)
            found = self._find_snapshot(txn, run_id, rec, target, tag)
            if found is None:
                base = self._chain_base(txn, rec)
                if base > 0:
                    raise PrunedError(run_id, target, base)
            return target, found

        target, found = self.store.read(plan)
        if found is None:
            return target, 0, reducer.initial()
        try:
            snap_offset, _, state = self._load_snapshot(run_id, found[1], reducer)
        except CorruptRecordError as exc:
            raise exc.at(run_id, found[0]) from None  # name the snapshot's offset
        return target, snap_offset, state

    def _chain_base(self, txn: Txn, rec: RunRecord) -> int:
        """The pruned base of the run or of the nearest pruned run it was forked from (0: none)."""
        while rec.parent is not None and not rec.base:
            rec = self._require(txn, rec.parent)
        return rec.base

    def _fold(self, run_id: str, state: Any, after: int, upto: int, reducer: Reducer) -> Any:
        apply = reducer.apply
        decode = self.codec.decode_entry_event
        for owner, first, values in self._raw_chunks(run_id, after, upto, 4096):
            # Decoding makes many short-lived objects and the state holds many long-lived
            # ones: the collector would traverse the state again and again. It is paused for
            # one chunk at a time and runs between chunks.
            paused = gc.isenabled()
            gc.disable()
            try:
                for value in values:
                    state = apply(state, decode(value))
            except CorruptRecordError as exc:
                raise exc.at(owner, first + values.index(value)) from None
            finally:
                if paused:
                    gc.enable()
        return state

    def state_at(self, run_id: str, offset: int | None = None, *, reducer: Reducer | None = None) -> Any:
        """The run's state after its first `offset` events (default: the head), 0 <= offset <= head.

        Loads the nearest snapshot at or below the offset made by the same reducer name and
        version, then folds the events after it.
        """
        reducer = reducer or self.reducer
        target, start, state = self._start(run_id, offset, reducer)
        if target > start:
            state = self._fold(run_id, state, start, target, reducer)
        return state

    def recorder(
        self, run_id: str, *, reducer: Reducer | None = None, policy: CheckpointPolicy | None = None
    ) -> Recorder:
        """A writer for one run that keeps its folded state and checkpoints by `policy`.

        It starts from the exact state at the run's head (a resume), and fences its appends
        with the offset it knows.
        """
        return Recorder(self, run_id, reducer or self.reducer, policy or CheckpointPolicy.every(1))

    # -- checkpoints (internal) ----------------------------------------------------------

    def _pending(
        self,
        run_id: str,
        offset: int,
        state: Any,
        reducer: Reducer,
        *,
        metadata: dict[str, Any] | None,
        checkpoint_id: str | None,
        materialize: bool,
        now: int | None = None,
    ) -> _PendingCheckpoint:
        record = CheckpointRecord(
            checkpoint_id=checkpoint_id or self.ids(),
            offset=offset,
            created_ns=self.clock() if now is None else now,
            reducer=reducer.name,
            reducer_version=reducer.version,
            metadata=dict(metadata or {}),
            superstep=getattr(state, "superstep", None),
            completed_nodes=list(getattr(state, "completed_nodes", [])),
            paused_nodes=list(getattr(state, "paused_nodes", [])),
        )
        snapshot = None
        if materialize:
            raw = msgspec.Raw(self.codec.encode_state(state))
            snapshot = self.codec.encode_value(
                SnapshotRecord(reducer.name, reducer.version, offset, raw), level=_limits.snapshot_compression_level
            )
        return _PendingCheckpoint(record, snapshot, reducer_tag(reducer))

    def _put_checkpoint(self, txn: Txn, rec: RunRecord, pending: _PendingCheckpoint) -> None:
        prefix = u64(rec.number)
        txn.put("checkpoints", prefix + u64(rec.checkpoint_seq), self.codec.encode_value(pending.record))
        txn.put("checkpoint_ids", prefix + pending.record.checkpoint_id.encode(), u64(rec.checkpoint_seq))
        if pending.snapshot is not None:
            txn.put("snapshots", prefix + u64(pending.record.offset) + pending.tag, pending.snapshot)

    def _snapshot_due(self, run_id: str, offset: int, reducer: Reducer) -> bool:
        """Materialize when the events since the nearest snapshot take `snapshot_event_bytes_ratio`
        times its bytes: snapshot bytes stay linear in the event bytes, and a restore folds
        at most that many times the snapshot it starts from (see `_limits`).
        """
        tag = reducer_tag(reducer)

        def due(txn: Txn) -> bool:
            rec = self._require(txn, run_id)
            found = self._find_snapshot(txn, run_id, rec, offset, tag)
            if found is None:
                return True
            snap_offset, value = found
            if snap_offset == offset:
                return False
            budget = len(value) * _limits.snapshot_event_bytes_ratio
            for _, _, event_value in self._raw_range_txn(txn, run_id, rec, snap_offset, offset):
                budget -= len(event_value)
                if budget <= 0:
                    return True
            return False

        return self.store.read(due)

    def _raw_range_txn(
        self, txn: Txn, run_id: str, rec: RunRecord, after: int, upto: int
    ) -> Iterator[tuple[str, int, bytes]]:
        for owner, number, lo, hi in self._segments(txn, run_id, rec, after, upto):
            for key, value in txn.scan("events", u64(number) + u64(lo + 1), u64(number) + u64(hi + 1)):
                yield owner, from_u64(key[8:]), value

    # -- fork, prune, delete -------------------------------------------------------------

    def fork(self, run_id: str, at: int, new_run_id: str) -> str:
        """A new run whose first `at` events are this run's, shared by reference; returns its id."""
        check_run_id(new_run_id)
        now = self.clock()

        def write(txn: Txn) -> str:
            parent = self._require(txn, run_id)
            if not 0 <= at <= parent.head:
                raise OffsetOutOfRangeError(run_id, at, parent.head)
            if at < parent.base:
                raise PrunedError(run_id, at, parent.base)
            owner = parent
            while owner.parent is not None and at <= owner.fork_offset:  # offsets shared from an ancestor
                owner = self._require(txn, owner.parent)
                if at < owner.base:
                    raise PrunedError(run_id, at, owner.base)
            if self._run(txn, new_run_id) is not None:
                raise RunExistsError(new_run_id)
            child = self._new_run(txn, new_run_id, now, parent=run_id, at=at)
            child.base = 0
            parent.forks += 1
            self._put_run(txn, run_id, parent)
            self._put_run(txn, new_run_id, child)
            return new_run_id

        return self.store.write(write)

    def prune(self, run_id: str, before: int, *, reducer: Reducer | None = None) -> int:
        """Drop the run's events and checkpoints below the latest checkpoint at or below `before`.

        That checkpoint is materialized (if it was not) and becomes the run's base: the state
        at any offset from it on stays readable; `state_at` below raises PrunedError. Refused
        while forks of the run exist. Returns the new base offset.
        """
        reducer = reducer or self.reducer
        keep = None
        for cp in self.checkpoints.list(run_id, reducer=reducer):
            if cp.offset <= before and cp.reducer == reducer.name and cp.reducer_version == reducer.version:
                if keep is None or cp.offset >= keep.offset:
                    keep = cp
        if keep is None:
            raise CheckpointNotFoundError(
                f"run {run_id!r}: no checkpoint at or below offset {before} to keep; save one first"
            )
        info = self.run_info(run_id)
        if info.forks:
            raise ForkDependencyError(f"run {run_id!r}: {info.forks} fork(s) read its events; delete them first")
        base = keep.offset
        if base <= info.base:
            return info.base
        if base <= info.fork_offset:
            raise ForkDependencyError(f"run {run_id!r}: offsets up to {info.fork_offset} belong to its parent")
        pending = self._pending(run_id, base, keep.state, reducer, metadata=None, checkpoint_id="-", materialize=True)

        def write(txn: Txn) -> int:
            rec = self._require(txn, run_id)
            if rec.forks:
                raise ForkDependencyError(f"run {run_id!r}: {rec.forks} fork(s) read its events; delete them first")
            prefix = u64(rec.number)
            assert pending.snapshot is not None
            self._keep_position(txn)
            txn.put("snapshots", prefix + u64(base) + pending.tag, pending.snapshot)
            for key, value in txn.scan("events", prefix + u64(rec.base + 1), prefix + u64(base + 1)):
                self._drop_entry(txn, run_id, key, value)
            for key, value in txn.scan("checkpoints", prefix, u64(rec.number + 1)):
                cp = self._checkpoint_record(run_id, value)
                if cp.offset < base:
                    txn.delete("checkpoints", key)
                    txn.delete("checkpoint_ids", prefix + cp.checkpoint_id.encode())
            for key, _ in txn.scan("snapshots", prefix, prefix + u64(base)):
                txn.delete("snapshots", key)
            rec.base = base
            self._put_run(txn, run_id, rec)
            return base

        return self.store.write(write)

    def _drop_entry(self, txn: Txn, run_id: str, key: bytes, value: bytes) -> None:
        txn.delete("events", key)
        try:
            r = self.codec.decode_entry(value)
        except CorruptRecordError:
            return  # a damaged entry being removed; its feed position is skipped by readers
        txn.delete("feed", u64(r.position))
        txn.delete("event_ids", key[:8] + r.event_id.encode())

    def delete_run(self, run_id: str) -> None:
        """Remove a run: its events, checkpoints and snapshots. Refused while forks of it exist."""

        def write(txn: Txn) -> None:
            rec = self._require(txn, run_id)
            if rec.forks:
                raise ForkDependencyError(f"run {run_id!r}: {rec.forks} fork(s) read its events; delete them first")
            prefix, end = u64(rec.number), u64(rec.number + 1)
            self._keep_position(txn)
            for key, value in txn.scan("events", prefix, end):
                self._drop_entry(txn, run_id, key, value)
            for table in ("event_ids", "checkpoints", "checkpoint_ids", "snapshots"):
                for key, _ in txn.scan(table, prefix, end):
                    txn.delete(table, key)
            txn.delete("run_numbers", prefix)
            txn.delete("runs", run_key(run_id))
            if rec.parent is not None:
                parent = self._run(txn, rec.parent)
                if parent is not None:
                    parent.forks = max(0, parent.forks - 1)
                    self._put_run(txn, rec.parent, parent)

        self.store.write(write)

    def _checkpoint_record(self, run_id: str, value: bytes) -> CheckpointRecord:
        try:
            return self.codec.decode_value(value, CheckpointRecord)
        except CorruptRecordError as exc:
            raise exc.at(run_id, None) from None

    # -- verify ------------------------------------------------------------------------

    def verify(
        self,
        run_id: str | None = None,
        *,
        reducer: Reducer | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> VerifyReport:
        """Check every record's checksum, offsets without gaps, the feed, and that every stored
        snapshot equals, byte for byte once encoded, a fresh fold from the run's start.

        `progress(n)` is called with the number of events checked since its last call.
        """
        reducer = reducer or self.reducer
        report = VerifyReport(problems=[])
        try:
            run_ids = [run_id] if run_id is not None else self.runs()
        except CorruptRecordError as exc:
            report.problems.append(Problem(exc.run_id, exc.offset, "corrupt", str(exc)))
            return report
        for rid in run_ids:
            report.runs += 1
            self._verify_run(rid, reducer, report, progress)
        if run_id is None:
            self._verify_feed(report)
        return report

    def _verify_run(
        self, run_id: str, reducer: Reducer, report: VerifyReport, progress: Callable[[int], None] | None
    ) -> None:
        problems = report.problems
        tag = reducer_tag(reducer)
        try:
            rec = self.store.read(lambda txn: self._require(txn, run_id))
        except CorruptRecordError as exc:
            problems.append(Problem(run_id, None, "corrupt", str(exc)))
            return
        number = rec.number

        def load(txn: Txn) -> tuple[list[tuple[bytes, bytes]], list[tuple[bytes, bytes]]]:
            prefix, end = u64(number), u64(number + 1)
            return txn.scan("checkpoints", prefix, end), txn.scan("snapshots", prefix, end)

        cps_raw, snaps_raw = self.store.read(load)
        checkpoints: dict[int, list[CheckpointRecord]] = {}
        for _, value in cps_raw:
            report.checkpoints += 1
            try:
                cp = self._checkpoint_record(run_id, value)
            except CorruptRecordError as exc:
                problems.append(Problem(run_id, None, "corrupt", f"checkpoint record: {exc}"))
                continue
            checkpoints.setdefault(cp.offset, []).append(cp)
        snapshots: dict[int, bytes] = {}
        for key, value in snaps_raw:
            offset = from_u64(key[8:16])
            if key[16:] != tag:
                continue
            try:
                _, raw, _ = self._load_snapshot(run_id, value, reducer)
            except CorruptRecordError as exc:
                problems.append(Problem(run_id, offset, "corrupt", f"snapshot at offset {offset}: {exc.what}"))
                continue
            snapshots[offset] = raw
        # Fold from the start (or the pruned base) and compare at every checkpoint and snapshot.
        start = rec.base
        try:
            if start:
                found = snapshots.get(start)
                if found is None:
                    problems.append(
                        Problem(run_id, start, "corrupt", f"the base snapshot at offset {start} is missing")
                    )
                    return
                state = msgspec.msgpack.decode(found, type=reducer.state_type)
            elif rec.parent is not None and (ancestor_base := self.store.read(lambda t: self._chain_base(t, rec))):
                # A fork of a pruned run starts at its ancestor's base snapshot.
                _, start, state = self._start(run_id, ancestor_base, reducer)
            else:
                state = reducer.initial()
        except (msgspec.DecodeError, ValueError, TypeError) as exc:
            problems.append(Problem(run_id, start, "corrupt", f"base snapshot: {exc}"))
            return
        except (CorruptRecordError, PrunedError) as exc:
            problems.append(Problem(run_id, start, "corrupt", f"base snapshot: {exc}"))
            return
        self._check_point(run_id, start, state, snapshots, checkpoints, reducer, report, skip_snapshot=bool(start))
        offset = start
        pending = 0
        try:
            for owner, off, value in self._raw_range(run_id, start, rec.head, 4096):
                offset = off
                try:
                    event = self.codec.decode_entry(value).event
                except CorruptRecordError as exc:
                    problems.append(Problem(owner, off, "corrupt", str(exc.at(owner, off))))
                    return
                state = reducer.apply(state, event)
                report.events += 1
                pending += 1
                if off in snapshots or off in checkpoints:
                    self._check_point(run_id, off, state, snapshots, checkpoints, reducer, report)
                if progress is not None and pending >= 1024:
                    progress(pending)
                    pending = 0
        except CorruptRecordError as exc:
            problems.append(
                Problem(exc.run_id or run_id, exc.offset, "gap" if "missing" in exc.what else "corrupt", str(exc))
            )
        except PrunedError as exc:
            problems.append(Problem(run_id, exc.offset, "corrupt", str(exc)))
        if progress is not None and pending:
            progress(pending)
        del offset

    def _check_point(
        self,
        run_id: str,
        offset: int,
        state: Any,
        snapshots: dict[int, bytes],
        checkpoints: dict[int, list[CheckpointRecord]],
        reducer: Reducer,
        report: VerifyReport,
        skip_snapshot: bool = False,
    ) -> None:
        stored = snapshots.get(offset)
        if stored is not None and not skip_snapshot and stored != self.codec.encode_state(state):
            report.problems.append(
                Problem(
                    run_id,
                    offset,
                    "nondeterministic",
                    f"run {run_id!r} offset {offset}: the snapshot differs from a fresh fold by "
                    f"{reducer.name}@{reducer.version}; the reducer is not deterministic or the snapshot is damaged",
                )
            )
        for cp in checkpoints.get(offset, []):
            if cp.reducer != reducer.name or cp.reducer_version != reducer.version:
                continue
            if cp.superstep != getattr(state, "superstep", None) or cp.paused_nodes != list(
                getattr(state, "paused_nodes", [])
            ):
                report.problems.append(
                    Problem(run_id, offset, "checkpoint", f"checkpoint {cp.checkpoint_id!r} disagrees with the fold")
                )

    def _verify_feed(self, report: VerifyReport) -> None:
        def check(txn: Txn) -> None:
            last = 0
            for key, ref in txn.scan("feed", b"", None):
                position = from_u64(key)
                if position <= last or len(ref) != 16:
                    report.problems.append(Problem(None, None, "feed", f"feed position {position} is malformed"))
                last = position
                if txn.get("events", ref) is None:
                    report.problems.append(
                        Problem(
                            None, from_u64(ref[8:16]), "feed", f"feed position {position} points at a missing entry"
                        )
                    )

        self.store.read(check)

    # -- stats -------------------------------------------------------------------------

    def stats(self, *, scan: bool = False) -> dict[str, Any]:
        """Runs, events, checkpoints, snapshots, bytes on disk and map size.

        With `scan`, also read every stored event record (headers only, nothing is
        decompressed): `event_bytes_stored` (framed, as kept), `event_bytes_raw` (encoded,
        before compression) and `compression_ratio` (raw / stored; 1.0 for an empty log).
        """
        raw = self.store.stats()
        out: dict[str, Any] = {
            "runs": raw["entries_runs"],
            "events": raw["entries_events"],
            "checkpoints": raw["entries_checkpoints"],
            "snapshots": raw["entries_snapshots"],
            "bytes_on_disk": raw["bytes_on_disk"],
            "map_size_bytes": raw["map_size_bytes"],
        }
        if scan:
            stored, encoded = self._event_sizes()
            out["event_bytes_stored"] = stored
            out["event_bytes_raw"] = encoded
            out["compression_ratio"] = encoded / stored if stored else 1.0
        return out

    def _event_sizes(self) -> tuple[int, int]:
        """(stored bytes, bytes before compression) of every event record, read in chunks."""
        import zstandard

        from .codec import RAW, unframe

        stored = encoded = 0
        start = b""
        while True:
            chunk = self.store.read(lambda txn, start=start: txn.scan("events", start, None, limit=4096))
            for _, value in chunk:
                stored += len(value)
                try:
                    compression, _, payload = unframe(value)
                except CorruptRecordError:
                    continue  # verify names it; a size is not worth failing over
                encoded += len(payload) if compression == RAW else max(zstandard.frame_content_size(payload), 0)
            if len(chunk) < 4096:
                return stored, encoded
            start = chunk[-1][0] + b"\x00"
