"""The read path: a run's entries by offset range, one entry, and the feed in commit order.

Long reads go in chunks, each in its own read transaction and all of one life of the run
(docs/architecture.md, "Reads that span transactions"), so a reader never pins the map for
long. Every record is checked as it is decoded; a damaged one is named by run, offset and
(in the feed) position.
"""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from typing import Any, NamedTuple

import msgspec

from .. import _limits
from ..errors import ClosedError, CorruptRecordError, UnknownKindError
from ..record._keys import check_int, check_offset
from ..record._records import RunRecord
from ..record.codec import Codec, Place
from ..record.kinds import Event
from ..record.tables import EVENTS, FEED
from ..store._base import Store, Txn
from ._runs import Runs


class Entry(msgspec.Struct, frozen=True):
    """An event as stored: the event plus its offset, position, event_id, time and meta."""

    run_id: str
    """The run the entry was read from."""
    offset: int
    """Place in the run, from 1."""
    position: int
    """Place in the whole log's commit order, from 1."""
    event_id: str
    """Unique id of the event in its run (the caller's, or one the log made)."""
    time_ns: int
    """Commit time in nanoseconds since the Unix epoch."""
    meta: dict[str, Any] | None
    """The caller's metadata."""
    event: Event
    """The event."""
    run_number: int = 0
    """The run number of the life of `run_id` the entry was read from (`RunInfo.number`): a run
    deleted and made again under the same id gets a new one, so a follower of the feed tells
    the entries of two lives of one run id apart by it."""

    @property
    def time(self) -> _dt.datetime:
        """Commit time as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.time_ns / 1e9, tz=_dt.UTC)


def check_range(run_id: str, rec: RunRecord, after: int, upto: int | None) -> int:
    """`upto` (the head when None) once both bounds are offsets of the run."""
    check_offset(run_id, "after", after, rec.head)
    return rec.head if upto is None else check_offset(run_id, "upto", upto, rec.head)


def event_place(number: int, first: int, i: int) -> Place:
    """Where the `i`-th of a run's values read from offset `first` is stored."""
    return (EVENTS, EVENTS.key(number, first + i))


class Piece(NamedTuple):
    """Stored values of consecutive offsets, read in one transaction."""

    owner: str
    """The run that stores them: the run read, or a run it was forked from."""
    number: int
    """The owner's run number (their keys are made of it)."""
    first: int
    """Offset of the first value."""
    values: list[bytes]
    life: int
    """The run number of the run read, the same for every piece of one read."""


class Reader:
    """Reads entries of runs and of the feed."""

    def __init__(self, store: Store, codec: Codec, runs: Runs) -> None:
        self._store, self._codec, self._runs = store, codec, runs

    def decode(self, run_id: str, key: bytes, value: bytes, position: int | None = None) -> Any:
        """The entry stored under `events` key `key`, decoded; damage is named by run and offset."""
        offset = EVENTS.second(key)
        try:
            return self._codec.decode_entry(value, key)
        except CorruptRecordError as exc:
            raise exc.at(run_id, offset, position) from None
        except UnknownKindError as exc:
            raise exc.at(run_id, offset) from None

    def chunks(
        self, run_id: str, after: int, upto: int | None, chunk: int, number: int | None = None
    ) -> Iterator[Piece]:
        """Stored values of offsets (after, upto] in pieces by the run that stores them, each chunk
        read in its own read transaction.

        Every chunk is of the run number the first one read (or `number`): RunReplacedError when
        the run is deleted, or deleted and made again, between two chunks."""
        end: int | None = upto
        while True:

            def read(
                txn: Txn, after: int = after, end: int | None = end, number: int | None = number
            ) -> tuple[int, int, list[tuple[str, int, int, list[bytes]]]]:
                rec = self._runs.require(txn, run_id, number)
                stop = check_range(run_id, rec, after, end)
                return rec.number, stop, self.pieces(txn, run_id, rec, after, stop, chunk)

            number, stop, pieces = self._store.read(read)
            end = stop
            last = after
            for owner, owner_number, first, values in pieces:
                yield Piece(owner, owner_number, first, values, number)
                last = first + len(values) - 1
            if not pieces or last >= stop:
                return
            after = last

    def pieces(
        self, txn: Txn, run_id: str, rec: RunRecord, after: int, upto: int, room: int
    ) -> list[tuple[str, int, int, list[bytes]]]:
        """At most `room` stored values of offsets (after, upto], read in `txn`, in pieces by owner."""
        out: list[tuple[str, int, int, list[bytes]]] = []
        for link in self._runs.segments(txn, run_id, rec, after, upto):
            if room <= 0:
                break
            number, lo = link.rec.number, link.lo
            want = min(room, link.hi - lo)
            values, last = txn.values(EVENTS, EVENTS.key(number, lo + 1), want)
            # Keys are unique and sorted: the right count and last key mean no gap.
            if len(values) != want or last != EVENTS.key(number, lo + want):
                pairs = txn.scan(EVENTS, EVENTS.key(number, lo + 1), EVENTS.key(number, link.hi + 1), limit=want)
                expected = lo + 1
                for key, _ in pairs:
                    if EVENTS.second(key) != expected:
                        break
                    expected += 1
                raise CorruptRecordError(f"offset {expected} is missing", link.run_id, expected)
            out.append((link.run_id, number, lo + 1, values))
            room -= want
        return out

    def read(self, run_id: str, after: int = 0, upto: int | None = None, number: int | None = None) -> Iterator[Entry]:
        """Entries with offsets in (after, upto] in order, all of one life of the run (see `chunks`)."""
        step = _limits.fold_decode_entries
        decode_records = partial(self._codec.decode_records, events_only=False)
        for owner, owner_number, chunk_first, chunk, life in self.chunks(
            run_id, after, upto, _limits.read_chunk_entries, number
        ):
            for at in range(0, len(chunk), step):  # checked and decoded a group at a time (see Replay.fold)
                first = chunk_first + at
                values = chunk[at : at + step]
                found = decode_records(values, partial(event_place, owner_number, first))
                records: Iterable[Any] = (  # else value by value: the damaged one is named after those before it
                    found
                    if found is not None
                    else (self.decode(owner, EVENTS.key(owner_number, first + i), v) for i, v in enumerate(values))
                )
                for offset, r in enumerate(records, first):
                    yield Entry(run_id, offset, r.position, r.event_id, r.time_ns, r.meta, r.event, life)

    def feed(self, after: int = 0, limit: int | None = None) -> Iterator[Entry]:
        """Every entry of every run with position > after, in commit order.

        A damaged entry raises CorruptRecordError naming its `position`; `feed(after=position)`
        goes on past it."""
        check_int("after", after)
        if limit is not None:
            check_int("limit", limit)
        count = 0
        while limit is None or count < limit:
            want = _limits.read_chunk_entries if limit is None else min(_limits.read_chunk_entries, limit - count)
            chunk, last = self.feed_page(after, want)
            if last is None:
                return
            yield from chunk
            count += len(chunk)
            after = last

    def feed_page(self, after: int, want: int) -> tuple[list[Entry], int | None]:
        """`feed_chunk` in a read transaction of its own."""
        return self._store.read(partial(self.feed_chunk, after=after, want=want))

    def feed_chunk(self, txn: Txn, after: int, want: int) -> tuple[list[Entry], int | None]:
        """The entries of the first `want` feed positions after `after`, read in `txn`, and the
        last of those positions (None: there are none)."""
        out: list[Entry] = []
        holders: dict[int, tuple[str, int] | None] = {}
        if after >= (1 << 64) - 1:
            return out, None  # past every position a log can give
        position = None
        for key, ref in txn.scan(FEED, FEED.key(after + 1), None, limit=want):
            position = FEED.position_of(key)
            if not FEED.well_formed(ref):
                raise CorruptRecordError("malformed feed reference", None, None, position)
            number, offset = FEED.parse_ref(ref)
            if number not in holders:
                holders[number] = self._runs.holder(txn, number)
            holder = holders[number]
            if holder is None or offset <= holder[1]:
                continue  # the run was deleted, or pruned past it: removed a chunk at a time
            run_id = holder[0]
            value = txn.get(EVENTS, ref)
            if value is None:
                raise CorruptRecordError("the feed points at a missing entry", run_id, offset, position)
            r = self.decode(run_id, ref, value, position)
            if r.position != position:
                raise CorruptRecordError(
                    f"the feed points at an entry of position {r.position}", run_id, offset, position
                )
            out.append(Entry(run_id, offset, r.position, r.event_id, r.time_ns, r.meta, r.event, number))
        return out, position


class Follow:
    """The follow loop's rule, written once for the sync and the async face: the feed after the
    last entry given, a read transaction per chunk; with nothing new, wait for a commit at most
    `poll` seconds; stop when the log is closed, or `timeout` seconds after the last new entry
    (None: never). Each face waits in its own way between `chunk` and `pause`."""

    def __init__(self, reader: Reader, after: int, timeout: float | None, poll: float) -> None:
        check_int("after", after)
        self._reader, self._after, self._timeout, self._poll = reader, after, timeout, poll
        self._since = time.monotonic()

    def chunk(self) -> list[Entry] | None:
        """The next entries after the last one given; [] when there are none yet; None at close."""
        try:
            while True:
                entries, last = self._reader.feed_page(self._after, _limits.read_chunk_entries)
                if last is None:
                    return []
                self._after = last  # past positions of deleted runs too
                if entries:
                    self._since = time.monotonic()
                    return entries
        except ClosedError:
            return None

    def entries(self, wait: Callable[[float], None]) -> Iterator[Entry]:
        """The loop on this thread; `wait(seconds)` returns early when this process commits."""
        while (chunk := self.chunk()) is not None:
            if chunk:
                yield from chunk
            elif (seconds := self.pause()) is None:
                return
            else:
                wait(seconds)

    def pause(self) -> float | None:
        """Seconds to wait for a commit before the next `chunk`; None: stop, the timeout passed."""
        if self._timeout is None:
            return self._poll
        left = self._timeout - (time.monotonic() - self._since)
        return min(self._poll, left) if left > 0 else None
