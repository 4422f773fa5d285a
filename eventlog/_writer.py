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

from . import _limits
from ._keys import (
    IdSource,
    check_id,
    check_int,
    check_run_id,
    check_time_ns,
    event_key,
    id_key,
    u64,
)
from ._records import RunRecord
from ._runs import Runs
from .codec import Codec
from .errors import ConflictError, CorruptRecordError, EventLogError, InvalidArgumentError, RunReplacedError
from .store._base import KeyExistsError, Store, Txn

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
        "ids",
        "lead",
        "meta",
        "number",
        "offsets",
        "run_id",
        "time_ns",
        "writing",
        "written",
    )  # fmt: skip

    def __init__(self, run_id: str, event_bytes: list[bytes], meta: bytes, ids: list[str | None],
                 time_ns: int, expected_offset: int | None, expected_number: int | None,
                 checkpoint: CheckpointHook | None) -> None:  # fmt: skip
        self.run_id, self.event_bytes, self.meta = run_id, event_bytes, meta
        self.ids = ids
        self.time_ns, self.expected_offset, self.expected_number = time_ns, expected_offset, expected_number
        self.checkpoint = checkpoint
        self.offsets: list[int] = []
        self.drawn: list[str] = []  # ids drawn for it, drawn again in order when its commit is made again
        self.number: int | None = None  # the run's number, once committed
        self.written = 0
        self.error: BaseException | None = None
        self.lead = False
        self.writing = False
        self.committed = False
        self.done: threading.Event | None = None  # made for a request that waits for a leader


class Writer:
    """Checks appends, then commits them in groups."""

    def __init__(self, store: Store, codec: Codec, runs: Runs, ids: IdSource, clock: Callable[[], int],
                 on_commit: Callable[[int], None]) -> None:  # fmt: skip
        self._store, self._codec, self._runs, self._ids, self._clock = store, codec, runs, ids, clock
        self._on_commit = on_commit  # called with the last position after each commit that wrote events
        self._queue_lock = threading.Lock()
        self._queue: list[Request] = []
        self._leading = False
        self._last_batch = 0
        self.commits = 0
        """Transactions committed with at least one event (for benchmarks and tests)."""

    def now(self) -> int:
        """The log's clock, checked."""
        try:
            value = self._clock()
        except Exception as exc:
            raise InvalidArgumentError(f"the log's clock raised {exc!r}") from exc
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
        meta_bytes = self._codec.encode_meta(meta)
        event_bytes = [self._codec.encode_event(e) for e in events]
        for event, data in zip(events, event_bytes, strict=True):
            self._codec.check_entry_size(type(event).__name__, meta_bytes, data)
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
        return request

    def _lead(self) -> None:
        """Commit every queued request in one transaction, then hand leadership to the next waiter."""
        batch: list[Request] = []
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

        def write(txn: Txn) -> tuple[int, bool]:
            checkpointed = False
            start, dict_id, records = self._runs.commit_start(txn, [r.run_id for r in batch])
            position = start
            for request in batch:
                request.error = None
                request.writing = False
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
        for request in batch:
            request.committed = request.error is None
        if checkpointed and self._store.durability == "batch":
            self._store.sync()
        if position:
            self.commits += 1
            self._on_commit(position)

    def _write(
        self, txn: Txn, r: Request, dict_id: int, position: int, checked: bool, records: dict[str, RunRecord | None]
    ) -> tuple[int, bool]:
        """Apply one request inside a write transaction; every check runs before the first put
        (but for drawn ids, unless `checked`: see `_draw_ids`). `records`: the records of the
        batch's runs, as this transaction leaves them.

        Returns the last position given and whether a checkpoint was written."""
        rec = records[r.run_id]
        if r.expected_number is not None and (rec is None or rec.number != r.expected_number):
            raise RunReplacedError(r.run_id, r.expected_number, None if rec is None else rec.number, "a writer used it")
        head = 0 if rec is None else rec.head
        number = 0 if rec is None else rec.number
        offsets: dict[int, int] = {}  # index -> offset of events already in the run (or earlier in the batch)
        ids = list(r.ids)
        if rec is not None and any(i is not None for i in ids):
            known = self.find_ids(txn, r.run_id, rec, [i for i in ids if i is not None])
            offsets = {n: known[i] for n, i in enumerate(ids) if i is not None and i in known}
        if len(offsets) == len(ids):
            r.offsets, r.written, r.number = [offsets[i] for i in range(len(ids))], 0, number
            return position, False
        if r.expected_offset is not None and head != r.expected_offset:
            raise ConflictError(r.run_id, r.expected_offset, head)
        fresh: list[int] = []
        first_of: dict[str, int] = {}  # id -> index of its first event in this batch
        for i, given in enumerate(ids):
            if i in offsets:
                continue
            if given is not None:
                if given in first_of:
                    continue  # the same caller id twice in one batch: written once
                first_of[given] = i
            fresh.append(i)
        self._draw_ids(txn, r, rec, ids, first_of, checked)
        if rec is None:  # the number the run is given below: each value is sealed for its key
            number = self._runs.new_number(txn)
        values = []
        for n, i in enumerate(fresh):
            event_id = cast(str, ids[i])  # every id was given or drawn above
            key = event_key(number, head + 1 + n)
            values.append(
                self._codec.encode_entry(
                    position + 1 + n, r.time_ns, event_id, r.meta, r.event_bytes[i], dict_id, ("events", key)
                )
            )
        r.writing = True
        if rec is None:
            rec = self._runs.create(txn, r.run_id, r.time_ns, number=number)
        assert rec.number == number and rec.head == head
        put = txn.put
        written = 0
        for i, value in zip(fresh, values, strict=True):
            rec.head += 1
            position += 1
            written += len(value)
            key = event_key(number, rec.head)
            put("events", key, value)
            put("feed", u64(position), key)
            txn.insert("event_ids", id_key(number, ids[i]), key[8:])  # type: ignore[arg-type]
            offsets[i] = rec.head
        for i, given in enumerate(ids):
            if i not in offsets:
                offsets[i] = offsets[first_of[given]]  # type: ignore[index]
        r.offsets = [offsets[i] for i in range(len(ids))]
        r.written, r.number = written, number
        wrote = r.checkpoint(txn, rec, written) if r.checkpoint is not None else False
        self._runs.put(txn, r.run_id, rec)
        records[r.run_id] = rec
        return position, wrote

    def find_ids(self, txn: Txn, run_id: str, rec: RunRecord, event_ids: list[str]) -> dict[str, int]:
        """{id: offset} of those of `event_ids` the run holds (a fork's shared events included),
        looked up together: one round trip per run of the lineage (and one more when some are held)."""
        found: dict[str, int] = {}
        wanted = list(dict.fromkeys(event_ids))
        for link in self._runs.lineage(txn, run_id, rec):
            values = txn.get_many("event_ids", [id_key(link.rec.number, i) for i in wanted])
            held = {
                event_id: int.from_bytes(value, "big")
                for event_id, value in zip(wanted, values, strict=True)
                if value is not None and int.from_bytes(value, "big") <= link.hi
            }
            if held:
                self._check_indexed(txn, link.run_id, link.rec.number, held)
                found.update(held)
            wanted = [i for i in wanted if i not in found]
            if not wanted or rec.parent is None:
                break
        return found

    def _check_indexed(self, txn: Txn, run_id: str, number: int, held: dict[str, int]) -> None:
        """Raise CorruptRecordError when the (plaintext) id index points an id at an entry of
        another id: a repeated append is a no-op only for the entry that holds its id."""
        keys = [event_key(number, offset) for offset in held.values()]
        for (event_id, offset), key, value in zip(held.items(), keys, txn.get_many("events", keys), strict=True):
            if value is None:
                continue  # pruned: ids stay indexed after their entries are gone
            try:
                _, stored = self._codec.decode_entry_id(value, key)
            except CorruptRecordError as exc:
                raise exc.at(run_id, offset) from None
            if stored != event_id:
                raise CorruptRecordError(
                    f"the event id index points {event_id!r} at the entry of id {stored!r}", run_id, offset
                )

    def _draw_ids(
        self, txn: Txn, r: Request, rec: RunRecord | None, ids: list[str | None], taken: dict[str, int], checked: bool
    ) -> None:
        """Fill the empty slots of `ids` with ids from the log's id source that the run does not hold.

        A run forked from another, or a `checked` commit, looks them up first. Otherwise the run's
        own index refuses one it holds when the id is inserted (KeyExistsError): a drawn id is
        new but for a repeating injected source, so one lookup is saved on almost every append."""
        look_up = rec is not None and (checked or rec.parent is not None)
        again, r.drawn = r.drawn, []
        for _ in range(_limits.id_draws_max):
            slots = [n for n, i in enumerate(ids) if i is None]
            if not slots:
                return
            drawn = [again.pop(0) if again else self._ids.draw() for _ in slots]
            held = set(self.find_ids(txn, r.run_id, rec, drawn)) if look_up and rec is not None else set()
            for n, candidate in zip(slots, drawn, strict=True):
                if candidate in held or candidate in taken:
                    self._ids.taken(candidate, "an event id")
                    continue  # drawn again
                ids[n] = candidate
                taken[candidate] = n
                r.drawn.append(candidate)
        raise self._ids.exhausted()
