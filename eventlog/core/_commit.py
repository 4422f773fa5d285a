"""The write path: appends checked before anything is written, then group-committed.

An append becomes an `Append`: every event is encoded and read back, its meta too, every
id and the time checked, the size bounded — all before it queues, so bad input never
reaches a transaction; it is never changed after. Its commit has a `Slot`: while one thread
commits, the slots of other threads queue; the next leader commits them all in one
transaction, one fsync for many appends (docs/architecture.md, "An append").
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, cast

import msgspec
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
from ._runs import After, Held, Runs

_event_key = EVENTS.key  # `struct` calls, without a Python call of their own (the append path)
_feed_key = FEED.key

CheckpointHook = Callable[[Txn, RunRecord, int, bool], bool]
"""`hook(txn, run record, bytes written, checked)`, called in the transaction after an append's
events are written (the record's head is the last offset); returns True when it wrote a
checkpoint. `checked`: the commit is made again because the index refused a drawn id, so ids
the hook draws are looked up before they are written (`GroupCommit.commit_batch`)."""


class Append(msgspec.Struct, frozen=True):
    """One append, checked and encoded before it queues: what is to be written, never changed."""

    run_id: str
    event_bytes: tuple[bytes, ...]
    events: tuple[Any, ...]
    """The events as their bytes read back: the log's own copies, which a run writer folds (what
    the caller does to its objects after the append never reaches a state or a snapshot)."""
    meta: bytes
    ids: tuple[str | None, ...]
    """The caller's id of each event, None where the log gives one."""
    given: bool
    """Some ids are the caller's."""
    time_ns: int
    expected_offset: int | None
    expected_number: int | None


class Slot:
    """An append's place in a group commit: how its commit goes, set by the thread that commits it."""

    __slots__ = (
        "append",
        "checkpoint",
        "committed",
        "done",
        "drawn",
        "error",
        "lead",
        "number",
        "offsets",
        "stored",
        "writing",
        "written",
    )  # fmt: skip

    def __init__(self, append: Append, checkpoint: CheckpointHook | None = None) -> None:
        self.append, self.checkpoint = append, checkpoint
        self.offsets: list[int] = []
        self.drawn: list[str] = []  # ids drawn for it, drawn again in order when its commit is made again
        self.number: int | None = None  # the run's number, once committed
        self.written = 0
        self.stored: tuple[bytes, RunRecord] | None = None  # the run's record as its commit wrote it
        self.error: BaseException | None = None
        self.lead = False
        self.writing = False
        self.committed = False
        self.done: threading.Lock | None = None
        """Made held for a slot that waits for a leader, which releases it: the waiter's `acquire`
        returns (a lock costs a tenth of a `threading.Event`, and followers wait at every commit)."""


class Kept:
    """What a writer keeps of its own commits, so as to read less at the next one
    (`Runs.commit_start`, docs/architecture.md, "An append")."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: dict[str, Held] = {}
        """Run id -> (value, record, generation) of the run records this writer wrote last, oldest
        first: a run's record is decoded only when it is not the one written here, and not read
        at all while this writer's commits follow one another. A stale one costs a decode."""
        self._after: After | None = None  # what the last commit left, on a store that numbers its commits

    def after(self, generation: int | None) -> After | None:
        """What this writer's last commit left, when the write transaction numbered `generation`
        follows it with nothing between; None: another commit came between, or none is numbered."""
        after = self._after
        return after if generation is not None and after is not None and after.generation == generation - 1 else None

    def keep(self, slots: list[Slot], after: After | None) -> None:
        """Keep what a commit wrote. The async face's commit thread and a leader may finish
        commits at once, in either order: what a later commit (by its generation) left is never
        replaced by an earlier one's."""
        records = self.records
        generation = 0 if after is None else after.generation
        with self._lock:
            for slot in slots:
                if slot.stored is not None:  # the run's record as this commit left it (the last one wins)
                    run_id = slot.append.run_id
                    held = records.get(run_id)
                    if held is None or held[2] <= generation:
                        records.pop(run_id, None)
                        records[run_id] = (*slot.stored, generation)
            while len(records) > _limits.writer_records_held:
                del records[next(iter(records))]  # the run written longest ago
            if after is not None and (self._after is None or self._after.generation < generation):
                self._after = after


class GroupCommit:
    """Checks appends, then commits them in groups."""

    def __init__(self, store: Store, codec: Codec, runs: Runs, ids: IdSource, clock: Callable[[], int],
                 on_commit: Callable[[int, int], None]) -> None:  # fmt: skip
        self._store, self._codec, self._runs, self._ids, self._clock = store, codec, runs, ids, clock
        self.event_ids = EventIds(codec, runs, ids)
        """The caller-given ids of runs: `find` answers which a run holds."""
        self._on_commit = on_commit  # called with the last position and the count after each commit that wrote events
        self._queue_lock = threading.Lock()
        self._queue: list[Slot] = []
        self._leading = False
        self._last_batch = 0
        self._kept = Kept()
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

    def check(
        self,
        run_id: str,
        events: Iterable[Any],
        *,
        event_ids: Sequence[str | None] | None = None,
        meta: dict[str, Any] | None = None,
        time_ns: int | None = None,
        expected_offset: int | None = None,
        expected_number: int | None = None,
    ) -> Append:
        """A checked append: raises (a subclass of EventLogError) before anything is written."""
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
            ids: tuple[str | None, ...] = (None,) * len(events)
        else:
            if isinstance(event_ids, (str, bytes)) or not isinstance(event_ids, Sequence):
                raise InvalidArgumentError(f"event_ids must be a list, not {type(event_ids).__name__}")
            ids = tuple(event_ids)
            if len(ids) != len(events):
                raise InvalidArgumentError(f"{len(ids)} event ids for {len(events)} events")
            for event_id in ids:
                if event_id is not None:
                    check_id("event_id", event_id)
        codec = self._codec
        meta_bytes = codec.encode_meta(meta)
        encode = codec.encode_event_read
        encoded = [encode(e) for e in events]
        event_bytes, copies = tuple([e[0] for e in encoded]), tuple([e[1] for e in encoded])
        # An entry is its event and meta plus at most 5 bytes of array header and nil
        # placeholders before its position, time and id are known (checked again then).
        room = codec.record_size_bytes_max - 5 - len(meta_bytes)
        for event, data in zip(events, event_bytes, strict=True):
            if len(data) > room:
                codec.check_entry_size(type(event).__name__, meta_bytes, data)
        stamp = self.now() if time_ns is None else check_time_ns("time_ns", time_ns)
        given = ids.count(None) != len(ids)  # some ids are the caller's
        return Append(run_id, event_bytes, copies, meta_bytes, ids, given, stamp, expected_offset, expected_number)

    # -- group commit ----------------------------------------------------------------------

    def queued(self) -> int:
        """Appends waiting for the next group commit."""
        with self._queue_lock:
            return len(self._queue)

    def commit(self, append: Append, checkpoint: CheckpointHook | None = None) -> Slot:
        """Commit an append (with whatever other threads queued meanwhile); raises its error.
        `checkpoint` is called in the transaction after its events are written."""
        slot = Slot(append, checkpoint)
        with self._queue_lock:
            lead = not self._leading
            if lead:
                self._leading = True
                alone = not self._queue and self._last_batch <= 1
            else:
                slot.done = threading.Lock()
                slot.done.acquire()
            if not lead or not alone:
                self._queue.append(slot)
        if slot.done is not None:
            slot.done.acquire()
            lead, alone = slot.lead, False
        if lead:
            self._lead(slot if alone else None)
        if slot.error is not None:
            raise slot.error
        return slot

    def _lead(self, alone: Slot | None = None) -> None:
        """Commit every queued slot in one transaction, then hand leadership to the next waiter.

        `alone`: an append no other thread was appending beside (it was not queued): committed
        by itself, without waiting for others or taking the queue's lock again first."""
        batch: list[Slot] = []
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
                self.commit_batch(batch)
        finally:
            # Even when this thread is interrupted, no waiter is left behind and leadership passes on.
            with self._queue_lock:
                if self._queue:
                    successor = self._queue[0]
                    successor.lead = True
                    if successor.done is not None:
                        successor.done.release()
                else:
                    self._leading = False
            for slot in batch:
                if slot.error is None and not slot.committed:
                    slot.error = EventLogError(
                        f"run {slot.append.run_id!r}: the commit was interrupted; nothing of this append was written"
                    )
                if slot.done is not None:  # held since it was made (or by its own thread, which led after it)
                    slot.done.release()

    def commit_batch(self, batch: list[Slot]) -> None:
        """Commit slots in one transaction; each slot's `error` or `committed` says how it went.
        The async face's commit thread calls this too.

        Every retry is made by this one loop: a transaction the index refused a drawn id in
        (KeyExistsError) is made again `checked`, looking drawn ids up before writing them; a
        transaction that failed otherwise is made again one slot at a time, so that only the
        slot at fault gets the error."""
        tries: list[tuple[list[Slot], bool]] = [(batch, False)]  # (slots, checked), the next one last
        while tries:
            slots, checked = tries.pop()
            try:
                position, events, checkpointed, after = self._store.write(partial(self._write_all, slots, checked))
            except BaseException as exc:  # noqa: BLE001 - handed to the slot that failed (KeyboardInterrupt too)
                if isinstance(exc, KeyExistsError) and not checked:
                    tries.append((slots, True))
                elif len(slots) == 1:
                    slots[0].error = exc
                else:
                    tries.extend(([slot], checked) for slot in reversed(slots))
                continue
            self._committed(slots, position, events, checkpointed, after)

    def _write_all(self, slots: list[Slot], checked: bool, txn: Txn) -> tuple[int, int, bool, After | None]:
        """Write the slots in `txn`: (the last position given, 0 when none; how many; whether a
        checkpoint was; what the commit leaves, when the store numbers its commits and this one
        wrote)."""
        checkpointed = False
        generation = txn.generation()
        after = self._kept.after(generation)
        run_ids = [s.append.run_id for s in slots]
        start, dict_id, records = self._runs.commit_start(txn, run_ids, self._kept.records, after)
        position = start
        for slot in slots:
            slot.error = None
            slot.writing = False
            slot.stored = None
            try:
                position, wrote = self._write(txn, slot, dict_id, position, checked, records)
                checkpointed |= wrote
            except EventLogError as exc:
                if slot.writing:
                    raise  # some of it was written: abort the transaction
                slot.error = exc  # wrote nothing: every check runs before the first put
        if position == start or generation is None:
            return (position if position > start else 0), position - start, checkpointed, None
        return (
            position,
            position - start,
            checkpointed,
            After(generation, position, dict_id, generation if after is None else after.since),
        )

    def _committed(
        self, slots: list[Slot], position: int, events: int, checkpointed: bool, after: After | None
    ) -> None:
        """After a commit: the slots marked, what it wrote kept, followers woken."""
        for slot in slots:
            slot.committed = slot.error is None
        self._kept.keep(slots, after)
        if checkpointed:
            at_checkpoint(self._store)
        if position:
            self.commits += 1
            self._on_commit(position, events)

    def _write(
        self, txn: Txn, slot: Slot, dict_id: int, position: int, checked: bool, records: dict[str, RunRecord | None]
    ) -> tuple[int, bool]:
        """Apply one append inside a write transaction; every check runs before the first put
        (but for ids from an injected source, unless `checked`: see `EventIds.draw`). `records`: the
        records of the batch's runs, as this transaction leaves them.

        Returns the last position given and whether a checkpoint was written."""
        a = slot.append
        run_id = a.run_id
        rec = records[run_id]
        if a.expected_number is not None and (rec is None or rec.number != a.expected_number):
            raise RunReplacedError(run_id, a.expected_number, None if rec is None else rec.number, "a writer used it")
        head, number = (0, 0) if rec is None else (rec.head, rec.number)
        ids = list(a.ids)
        offsets: dict[int, int] = {}  # index -> offset of events already in the run (or earlier in the batch)
        given = [i for i in ids if i is not None] if a.given else []
        if given and rec is not None:
            known = self.event_ids.find(txn, run_id, rec, given)
            offsets = {n: known[i] for n, i in enumerate(ids) if i is not None and i in known}
            if len(offsets) == len(ids):
                slot.offsets, slot.written, slot.number = [offsets[i] for i in range(len(ids))], 0, number
                return position, False
        if a.expected_offset is not None and head != a.expected_offset:
            raise ConflictError(run_id, a.expected_offset, head)
        if rec is None:  # the number the run is given below: ids and sealed values name it
            number = self._runs.new_number(txn)
        first_of: dict[str, int] = {}  # id -> index of its first event in this batch
        if given:
            self.event_ids.refuse_own_form(txn, run_id, number, [i for n, i in enumerate(ids) if n not in offsets])
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
            indexed = self.event_ids.draw(txn, run_id, rec, number, head, ids, fresh, first_of, checked, slot.drawn)
        encode, time_ns, meta, event_bytes = self._codec.encode_entry, a.time_ns, a.meta, a.event_bytes
        filled = cast(list[str], ids)  # every id was given or drawn above
        writes = []
        offset = head
        for i in fresh:
            offset += 1
            key = _event_key(number, offset)
            value = encode(position + offset - head, time_ns, filled[i], meta, event_bytes[i], dict_id, (EVENTS, key))
            writes.append((i, key, value))
        slot.writing = True
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
            slot.offsets = [offsets[i] for i in range(len(ids))]
        else:
            slot.offsets = list(range(head + 1, offset + 1))
        slot.written, slot.number = written, number
        wrote = slot.checkpoint(txn, rec, written, checked) if slot.checkpoint is not None else False
        slot.stored = (self._runs.put(txn, run_id, rec), replace(rec))
        records[run_id] = rec
        return position, wrote

    def refuse_own_form(self, run_id: str, event_ids: list[str]) -> None:
        """`EventIds.refuse_own_form` for a run not made yet: an import checks its file by it."""
        self._store.read(lambda txn: self.event_ids.refuse_own_form(txn, run_id, 0, list(event_ids)))
