"""The write path: appends checked before anything is written, then group-committed.

An append becomes a `Request`: every event is encoded and read back, its meta too, every
id and the time checked, the size bounded — all before the request queues, so bad input
never reaches a transaction. While one thread commits, the requests of other threads
queue; the next leader commits them all in one transaction, one fsync for many appends
(docs/architecture.md, "An append").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from msgspec.structs import replace

from .. import _limits
from ..errors import ConflictError, EventLogError, InvalidArgumentError, RunReplacedError
from ..record._keys import (
    IdSource,
    check_id,
    check_int,
    check_run_id,
    check_time_ns,
)
from ..record._records import RunRecord
from ..record.codec import Codec
from ..record.tables import EVENT_IDS, EVENTS, FEED
from ..store._base import KeyExistsError, Store, Txn, at_checkpoint
from ._event_ids import EventIds
from ._runs import Runs

_event_key = EVENTS.key  # `struct` calls, without a Python call of their own (the append path)
_feed_key = FEED.key

CheckpointHook = Callable[[Txn, RunRecord, int], bool]
"""`hook(txn, run record, bytes written)`, called in the transaction after a request's events
are written (the record's head is the last offset); returns True when it wrote a checkpoint."""


class Request:
    """One append, checked, waiting for (or in) a group commit."""

    __slots__ = (
        "checkpoint",
        "committed",
        "done",
        "drawn",
        "error",
        "event_bytes",
        "expected_number",
        "expected_offset",
        "given",
        "ids",
        "lead",
        "meta",
        "number",
        "offsets",
        "run_id",
        "stored",
        "time_ns",
        "writing",
        "written",
    )  # fmt: skip

    def __init__(self, run_id: str, event_bytes: list[bytes], meta: bytes, ids: list[str | None],
                 time_ns: int, expected_offset: int | None, expected_number: int | None,
                 checkpoint: CheckpointHook | None) -> None:  # fmt: skip
        self.run_id, self.event_bytes, self.meta = run_id, event_bytes, meta
        self.ids = ids
        self.given = ids.count(None) != len(ids)  # some ids are the caller's
        self.time_ns, self.expected_offset, self.expected_number = time_ns, expected_offset, expected_number
        self.checkpoint = checkpoint
        self.offsets: list[int] = []
        self.drawn: list[str] = []  # ids drawn for it, drawn again in order when its commit is made again
        self.number: int | None = None  # the run's number, once committed
        self.written = 0
        self.stored: tuple[bytes, RunRecord] | None = None  # the run's record as its commit wrote it
        self.error: BaseException | None = None
        self.lead = False
        self.writing = False
        self.committed = False
        self.done: threading.Event | None = None  # made for a request that waits for a leader


class GroupCommit:
    """Checks appends, then commits them in groups."""

    def __init__(self, store: Store, codec: Codec, runs: Runs, ids: IdSource, clock: Callable[[], int],
                 on_commit: Callable[[int], None]) -> None:  # fmt: skip
        self._store, self._codec, self._runs, self._ids, self._clock = store, codec, runs, ids, clock
        self._event_ids = EventIds(codec, runs, ids)
        self._on_commit = on_commit  # called with the last position after each commit that wrote events
        self._queue_lock = threading.Lock()
        self._queue: list[Request] = []
        self._leading = False
        self._last_batch = 0
        self._known_lock = threading.Lock()
        self._known: dict[str, tuple[bytes, RunRecord]] = {}
        """Run id -> (value, record) of the run records this writer wrote last, oldest first: a run's
        record is read at every commit, but decoded only when it is not the one written here
        (`Runs.commit_start`). Changed after each commit, under its lock; a stale one costs a decode."""
        self.commits = 0
        """Transactions committed with at least one event (for benchmarks and tests)."""

    def now(self) -> int:
        """The log's clock, checked."""
        try:
            value = self._clock()
        except Exception as exc:
            raise InvalidArgumentError(f"the log's clock raised {exc!r}") from exc
        if type(value) is int and 0 <= value <= _limits.time_ns_max:
            return value
        return check_time_ns("the log's clock", value)

    def request(
        self,
        run_id: str,
        events: Iterable[Any],
        *,
        event_ids: Sequence[str | None] | None = None,
        meta: dict[str, Any] | None = None,
        time_ns: int | None = None,
        expected_offset: int | None = None,
        expected_number: int | None = None,
        checkpoint: CheckpointHook | None = None,
    ) -> Request:
        """A checked request: raises (a subclass of EventLogError) before anything is written."""
        check_run_id(run_id)
        if type(events) is not list:
            if isinstance(events, (str, bytes)) or not isinstance(events, Iterable):
                raise InvalidArgumentError(f"events must be a list of events, not {type(events).__name__}")
            events = list(events)
        if not events:
            raise InvalidArgumentError("append_many needs at least one event")
        if len(events) > _limits.batch_events_max:
            raise InvalidArgumentError(
                f"{len(events)} events in one batch is over the limit of {_limits.batch_events_max}"
            )
        if expected_offset is not None:
            check_int("expected_offset", expected_offset)
        if event_ids is None:
            ids: list[str | None] = [None] * len(events)
        else:
            if isinstance(event_ids, (str, bytes)) or not isinstance(event_ids, Sequence):
                raise InvalidArgumentError(f"event_ids must be a list, not {type(event_ids).__name__}")
            ids = list(event_ids)
            if len(ids) != len(events):
                raise InvalidArgumentError(f"{len(ids)} event ids for {len(events)} events")
            for given in ids:
                if given is not None:
                    check_id("event_id", given)
        codec = self._codec
        meta_bytes = codec.encode_meta(meta)
        encode = codec.encode_event
        event_bytes = [encode(e) for e in events]
        # An entry is its event and meta plus at most 5 bytes of array header and nil
        # placeholders before its position, time and id are known (checked again then).
        room = codec.record_size_bytes_max - 5 - len(meta_bytes)
        for event, data in zip(events, event_bytes, strict=True):
            if len(data) > room:
                codec.check_entry_size(type(event).__name__, meta_bytes, data)
        stamp = self.now() if time_ns is None else check_time_ns("time_ns", time_ns)
        return Request(run_id, event_bytes, meta_bytes, ids, stamp, expected_offset, expected_number,
                       checkpoint)  # fmt: skip

    # -- group commit ----------------------------------------------------------------------

    def queued(self) -> int:
        """Requests waiting for the next group commit."""
        with self._queue_lock:
            return len(self._queue)

    def commit(self, request: Request) -> Request:
        """Commit a request (with whatever other threads queued meanwhile); raises its error."""
        with self._queue_lock:
            lead = not self._leading
            if lead:
                self._leading = True
                alone = not self._queue and self._last_batch <= 1
            else:
                request.done = threading.Event()
            if not lead or not alone:
                self._queue.append(request)
        if request.done is not None:
            request.done.wait()
            lead, alone = request.lead, False
        if lead:
            self._lead(request if alone else None)
        if request.error is not None:
            raise request.error
        return request

    def _lead(self, alone: Request | None = None) -> None:
        """Commit every queued request in one transaction, then hand leadership to the next waiter.

        `alone`: a request no other thread was appending beside (it was not queued): committed
        by itself, without waiting for others or taking the queue's lock again first."""
        batch: list[Request] = []
        try:
            if alone is not None:
                batch = [alone]
            else:
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
                    if successor.done is not None:
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

    def commit_batch(self, batch: list[Request]) -> None:
        """Commit requests in one transaction (each alone when the transaction fails); each request's
        `error` or `committed` says how it went. The async face's commit thread calls this."""
        self._commit_batch(batch)

    def _commit_batch(self, batch: list[Request], checked: bool = False) -> None:
        """`checked`: look drawn ids up before writing them, instead of letting the index refuse
        one the run holds (KeyExistsError), which has this commit made again, checked."""

        known = self._known

        def write(txn: Txn) -> tuple[int, bool]:
            checkpointed = False
            start, dict_id, records = self._runs.commit_start(txn, [r.run_id for r in batch], known)
            position = start
            for request in batch:
                request.error = None
                request.writing = False
                request.stored = None
                try:
                    position, wrote = self._write(txn, request, dict_id, position, checked, records)
                    checkpointed |= wrote
                except EventLogError as exc:
                    if request.writing:
                        raise  # some of it was written: abort the transaction
                    request.error = exc  # wrote nothing: every check runs before the first put
            return (position if position > start else 0), checkpointed

        try:
            position, checkpointed = self._store.write(write)
        except BaseException as exc:  # noqa: BLE001 - handed to the request that failed (KeyboardInterrupt too)
            if isinstance(exc, KeyExistsError) and not checked:
                self._commit_batch(batch, checked=True)
                return
            if len(batch) == 1:
                batch[0].error = exc
                return
            for request in batch:  # one failed the whole transaction: commit each alone
                self._commit_batch([request], checked)
            return
        with self._known_lock:  # the async face's commit thread may finish a commit meanwhile
            for request in batch:
                request.committed = request.error is None
                if request.stored is not None:  # the run's record as this commit left it (the last one wins)
                    known.pop(request.run_id, None)
                    known[request.run_id] = request.stored
            while len(known) > _limits.writer_records_held:
                del known[next(iter(known))]  # the run written longest ago
        if checkpointed:
            at_checkpoint(self._store)
        if position:
            self.commits += 1
            self._on_commit(position)

    def _write(
        self, txn: Txn, r: Request, dict_id: int, position: int, checked: bool, records: dict[str, RunRecord | None]
    ) -> tuple[int, bool]:
        """Apply one request inside a write transaction; every check runs before the first put
        (but for ids from an injected source, unless `checked`: see `EventIds.draw`). `records`: the
        records of the batch's runs, as this transaction leaves them.

        Returns the last position given and whether a checkpoint was written."""
        run_id = r.run_id
        rec = records[run_id]
        if r.expected_number is not None and (rec is None or rec.number != r.expected_number):
            raise RunReplacedError(run_id, r.expected_number, None if rec is None else rec.number, "a writer used it")
        head, number = (0, 0) if rec is None else (rec.head, rec.number)
        ids = list(r.ids)
        offsets: dict[int, int] = {}  # index -> offset of events already in the run (or earlier in the batch)
        given = [i for i in ids if i is not None] if r.given else []
        if given and rec is not None:
            known = self.find_ids(txn, run_id, rec, given)
            offsets = {n: known[i] for n, i in enumerate(ids) if i is not None and i in known}
            if len(offsets) == len(ids):
                r.offsets, r.written, r.number = [offsets[i] for i in range(len(ids))], 0, number
                return position, False
        if r.expected_offset is not None and head != r.expected_offset:
            raise ConflictError(run_id, r.expected_offset, head)
        if rec is None:  # the number the run is given below: ids and sealed values name it
            number = self._runs.new_number(txn)
        first_of: dict[str, int] = {}  # id -> index of its first event in this batch
        if given:
            self._event_ids.refuse_own_form(txn, run_id, number, [i for n, i in enumerate(ids) if n not in offsets])
            fresh: list[int] = []
            for i, event_id in enumerate(ids):
                if i in offsets:
                    continue
                if event_id is not None:
                    if event_id in first_of:
                        continue  # the same caller id twice in one batch: written once
                    first_of[event_id] = i
                fresh.append(i)
        else:
            fresh = list(range(len(ids)))
        if self._ids.derives and not given:  # `EventIds.draw` for the log's own source, inline
            start = f"{self._ids.prefix}{number:x}-"
            for n in range(len(ids)):
                ids[n] = f"{start}{head + 1 + n:x}"
            indexed: set[int] = set()
        else:
            indexed = self._event_ids.draw(txn, run_id, rec, number, head, ids, fresh, first_of, checked, r.drawn)
        encode, time_ns, meta, event_bytes = self._codec.encode_entry, r.time_ns, r.meta, r.event_bytes
        filled = cast(list[str], ids)  # every id was given or drawn above
        writes = []
        offset = head
        for i in fresh:
            offset += 1
            key = _event_key(number, offset)
            value = encode(position + offset - head, time_ns, filled[i], meta, event_bytes[i], dict_id, (EVENTS, key))
            writes.append((i, key, value))
        r.writing = True
        if rec is None:
            rec = self._runs.create(txn, run_id, time_ns, number=number)
        assert rec.number == number and rec.head == head
        put = txn.put
        written = 0
        for i, key, value in writes:
            position += 1
            written += len(value)
            put(EVENTS, key, value)
            put(FEED, _feed_key(position), key)
            if indexed and i in indexed:
                txn.insert(EVENT_IDS, EVENT_IDS.key(number, filled[i]), EVENTS.tail(key))
        rec.head = offset
        if first_of or offsets:
            offsets.update((i, head + n) for n, i in enumerate(fresh, 1))
            for i, event_id in enumerate(ids):
                if i not in offsets:
                    offsets[i] = offsets[first_of[event_id]]  # type: ignore[index]
            r.offsets = [offsets[i] for i in range(len(ids))]
        else:
            r.offsets = list(range(head + 1, offset + 1))
        r.written, r.number = written, number
        wrote = r.checkpoint(txn, rec, written) if r.checkpoint is not None else False
        r.stored = (self._runs.put(txn, run_id, rec), replace(rec))
        records[run_id] = rec
        return position, wrote

    def find_ids(self, txn: Txn, run_id: str, rec: RunRecord, event_ids: list[str]) -> dict[str, int]:
        """{id: offset} of those of `event_ids` the run holds (`EventIds.find`)."""
        return self._event_ids.find(txn, run_id, rec, event_ids)
