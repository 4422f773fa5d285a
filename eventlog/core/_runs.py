"""Run records and a run's lineage: the chain of runs a fork reads its first events from.

A fork shares its parent's first `fork_offset` events by reference, and the parent may be
a fork too. `lineage` walks that chain once, from the run up, and says which run holds
which offsets; reading a range, finding a snapshot and finding the pruned base all use it
(docs/architecture.md, "Lineage").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from msgspec.structs import replace

from ..errors import CorruptRecordError, PrunedError, RunReplacedError, UnknownRunError
from ..record import _keys
from ..record._keys import check_run_id, u64
from ..record._records import RunRecord
from ..record.codec import RAW, Codec, frame, unframe
from ..record.tables import (
    CHECKPOINT_IDS,
    CHECKPOINTS,
    EVENT_IDS,
    EVENTS,
    FEED,
    META,
    RUN_NUMBERS,
    RUNS,
    SNAPSHOTS,
)
from ..store._base import Txn

_COUNTERS_HELD = 256
_counters: dict[bytes, int] = {}
"""Counter frames read lately -> their value: a frame checked once (checksum included) maps to
one value, whatever its key, so the dictionary id and position read at every commit are not
unframed again."""


Held = tuple[bytes, RunRecord, int]
"""A run record a writer wrote: (its value as stored, the record, the `Txn.generation` of the
commit that wrote it, 0 where the store has none)."""


_NUMBERED = (RUN_NUMBERS, EVENTS, CHECKPOINTS, SNAPSHOTS, EVENT_IDS, CHECKPOINT_IDS)
"""The tables whose keys begin with a run number."""


class After(NamedTuple):
    """What a writer's last commit left, when the store numbers its commits (`Txn.generation`)."""

    generation: int
    """The number of that commit."""
    position: int
    """The last feed position given."""
    dict_id: int
    """The dictionary new records use."""
    since: int
    """The first of the writer's run of commits that followed one another with nothing between:
    every record the writer holds from a commit of that run or later is the stored one."""


class Link(NamedTuple):
    """Offsets (lo, hi] of the run being read live under `rec.number`, the run `run_id`."""

    run_id: str
    rec: RunRecord
    lo: int
    hi: int


class Runs:
    """Reads and writes run records, and walks a run's lineage, inside a caller's transaction."""

    def __init__(self, codec: Codec) -> None:
        self._codec = codec

    def get(self, txn: Txn, run_id: str) -> RunRecord | None:
        """The run's record, or None when there is no such run."""
        check_run_id(run_id)
        return self._decode(run_id, txn.get(RUNS, RUNS.key(run_id)))

    def _decode(self, run_id: str, raw: bytes | None) -> RunRecord | None:
        if raw is None:
            return None
        try:
            rec: RunRecord = self._codec.decode_value(raw, RunRecord, (RUNS, RUNS.key(run_id)))
        except CorruptRecordError as exc:
            raise exc.at(run_id, None) from None
        return rec

    def require(self, txn: Txn, run_id: str, number: int | None = None, doing: str = "it was read") -> RunRecord:
        """The run's record; UnknownRunError when there is none.

        With `number` (the run number an earlier transaction saw), RunReplacedError when the
        run was deleted, or deleted and made again, since: a read that spans transactions
        pins the run's life this way (docs/architecture.md, "Reads that span transactions")."""
        rec = self.get(txn, run_id)
        if number is not None and (rec is None or rec.number != number):
            raise RunReplacedError(run_id, number, None if rec is None else rec.number, doing)
        if rec is None:
            raise UnknownRunError(run_id)
        return rec

    def put(self, txn: Txn, run_id: str, rec: RunRecord) -> bytes:
        """Write the run's record; returns the value as stored (the writer keeps it, see `commit_start`)."""
        key = RUNS.key(run_id)
        value = self._codec.encode_small(rec, (RUNS, key))
        txn.put(RUNS, key, value)
        return value

    def create(
        self, txn: Txn, run_id: str, now: int, parent: str | None = None, at: int = 0, number: int | None = None
    ) -> RunRecord:
        """A new run record with the next run number, or `number` when `new_number` gave it
        already (the caller puts the record)."""
        if number is None:
            number = self.new_number(txn)
        txn.put(RUN_NUMBERS, RUN_NUMBERS.key(number), run_id.encode())
        return RunRecord(number=number, head=at, parent=parent, fork_offset=at, created_ns=now)

    def new_number(self, txn: Txn) -> int:
        """The next run number: the log's counter raised in a dense store, the store's sequence
        on PostgreSQL (whose writers never wait on one counter)."""
        last = self.meta_int(txn, _keys.META_RUN_NUMBER) if txn.dense else 0
        number = txn.run_number(last)
        if txn.dense:
            self.put_meta_int(txn, _keys.META_RUN_NUMBER, number)
        # Never a number some run's keys hold (what is left of a deleted run, too): values are
        # bound to their number and would read as the new run's (docs/format.md, "Encryption").
        # A dense store's numbers also grow above every one held, so a fork never takes a parent
        # made again for the one it was made of; PostgreSQL's writers take theirs side by side.
        if txn.dense:
            _, lasts = txn.fetch([], list(_NUMBERED))
            held = max((int.from_bytes(k[:8], "big") for k in lasts if k is not None), default=0)
            taken = number <= held
        else:
            start, stop = _keys.run_range(number)
            taken = txn.get(RUN_NUMBERS, start) is not None or any(
                txn.scan(t, start, stop, limit=1) for t in _NUMBERED[1:]
            )
        if taken:
            raise CorruptRecordError(
                f"run number {number} is held by keys already (of a run that is gone, or the log's run number "
                "counter was set back: `eventlog verify --repair` removes the first and raises the counter)"
            )
        return number

    def run_ids(self, txn: Txn, after: str | None = None, limit: int | None = None) -> list[str]:
        """Run ids in byte order of their keys, after `after`, at most `limit`."""
        start = b"" if after is None else RUNS.key(after) + b"\x00"
        out: list[str] = []
        for key, value in txn.scan(RUNS, start, None, limit=limit):
            if not key:  # no run has the empty id (LMDB cannot hold an empty key; a PostgreSQL row can)
                raise CorruptRecordError("a run record is kept under the empty key, which no run id has")
            if b"\xff" in key:  # a long id, keyed by its hash: its full id is in run_numbers
                try:
                    number = self._codec.decode_value(value, RunRecord, (RUNS, key)).number
                except CorruptRecordError as exc:
                    raise exc.at(bytes(key[:64]).decode("utf-8", "replace") + "…", None) from None
                full = txn.get(RUN_NUMBERS, RUN_NUMBERS.key(number))
                if full is None:
                    raise CorruptRecordError(f"run number {number} has no id in run_numbers")
                if RUNS.key(bytes(full).decode("utf-8", "replace")) != key:
                    raise CorruptRecordError(
                        f"the id of run number {number} in run_numbers is not the one its record is kept under"
                    )
                key = full
            out.append(bytes(key).decode("utf-8", "replace"))
        return out

    def holder(self, txn: Txn, number: int) -> tuple[str, int] | None:
        """(id, pruned base) of the run numbered `number`; None when that run was deleted (a
        delete removes the number's row with the run's record). A number that names a run whose
        sealed record holds another number was pointed elsewhere: CorruptRecordError."""
        raw = txn.get(RUN_NUMBERS, RUN_NUMBERS.key(number))
        if raw is None:
            return None
        run_id = bytes(raw).decode("utf-8", "replace")
        rec = self.get(txn, run_id)
        if rec is None:
            return None
        if rec.number != number:
            raise CorruptRecordError(f"run number {number} names a run whose record is number {rec.number}", run_id)
        return run_id, rec.base

    def name_of(self, txn: Txn, number: int) -> str:
        """The id of the run numbered `number` (`#number` when it is gone)."""
        raw = txn.get(RUN_NUMBERS, RUN_NUMBERS.key(number))
        return raw.decode("utf-8", "replace") if raw is not None else f"#{number}"

    # -- meta counters ---------------------------------------------------------------------

    def meta_int(self, txn: Txn, key: bytes) -> int:
        """A counter of the `meta` table (0 when absent); counters are never sealed."""
        return self._counter(key, txn.get(META, key))

    def put_meta_int(self, txn: Txn, key: bytes, value: int) -> None:
        txn.put(META, key, frame(u64(value), RAW, 0))

    def last_position(self, txn: Txn) -> int:
        """The last feed position given: the feed's last key, or the meta record kept when the
        feed's tail was deleted (positions are never given twice). On PostgreSQL, in a read, the
        last settled one: every smaller position is committed or known aborted."""
        (kept,), (last,) = txn.fetch([(META, _keys.META_POSITION)], [FEED])
        return max(0 if last is None else _keys.from_u64(last), self._counter(_keys.META_POSITION, kept))

    def commit_start(
        self,
        txn: Txn,
        run_ids: list[str] | None = None,
        known: dict[str, Held] | None = None,
        after: After | None = None,
    ) -> tuple[int, int, dict[str, RunRecord | None]]:
        """(the base of this transaction's feed positions, id of the dictionary new records use,
        the records of `run_ids`), read in one round trip. A dense store gives positions after
        the last one given; PostgreSQL from its transaction id (`Txn.position_base`), and locks
        the records read.

        `known`: run id -> (value, record, generation) of records the caller wrote and still
        holds. A stored value equal to the one held is the held record (a copy), not decoded
        again: a get and a byte compare, where a decode would cost more than the rest of an
        append's reads. A value that differs (another process wrote, or a fork, prune or
        delete changed the run) is decoded.

        `after`: the caller's own last commit was the store's last one (`Txn.generation`), so
        the last position and dictionary are as that commit left them, and a held record
        written since `After.since` is the stored one: none of these is read
        (docs/architecture.md, "An append")."""
        ids = run_ids or []
        if len(ids) > 1:
            ids = list(dict.fromkeys(ids))
        records: dict[str, RunRecord | None] = {}
        if after is not None and known is not None:
            unread = []
            for run_id in ids:
                held = known.get(run_id)
                if held is not None and held[2] >= after.since:
                    records[run_id] = replace(held[1])
                else:
                    unread.append(run_id)
            if unread:
                values = txn.get_many(RUNS, [RUNS.key(run_id) for run_id in unread])
                self._held_or_decoded(records, unread, values, known)
            return after.position, after.dict_id, records
        # A dense store also reads the last position given; PostgreSQL draws positions from the
        # transaction id. (A new run's number is drawn when it is made: `new_number`.)
        dense = txn.dense
        gets: list[tuple[str, bytes]] = [(META, _keys.META_DICT_CURRENT)]
        if dense:
            gets.append((META, _keys.META_POSITION))
        first = len(gets)
        for run_id in ids:
            gets.append((RUNS, RUNS.key(run_id)))
        values, lasts = txn.fetch(gets, [FEED] if dense else [])
        position = 0
        if dense:
            last = lasts[0]
            position = 0 if last is None else int.from_bytes(last, "big")
            if values[1] is not None:  # kept when a prune or delete removed the feed's tail
                position = max(position, self._counter(_keys.META_POSITION, values[1]))
        raw = values[0]
        dict_id = 0 if raw is None else _counters.get(raw)
        if dict_id is None:
            dict_id = self._counter(_keys.META_DICT_CURRENT, raw)
        self._held_or_decoded(records, ids, values[first:], known)
        return txn.position_base(position), dict_id, records

    def _held_or_decoded(
        self,
        records: dict[str, RunRecord | None],
        ids: list[str],
        values: list[bytes | None],
        known: dict[str, Held] | None,
    ) -> None:
        for run_id, raw in zip(ids, values, strict=True):
            held = None if known is None or raw is None else known.get(run_id)
            records[run_id] = replace(held[1]) if held is not None and held[0] == raw else self._decode(run_id, raw)

    @staticmethod
    def _counter(key: bytes, raw: bytes | None) -> int:
        if raw is None:
            return 0
        found = _counters.get(raw)
        if found is not None:
            return found
        compression, _, payload = unframe(raw)
        if compression != RAW or len(payload) != 8:
            raise CorruptRecordError(f"meta record {key!r} is not a counter")
        value = _keys.from_u64(payload)
        if len(_counters) >= _COUNTERS_HELD:
            _counters.clear()
        _counters[raw] = value
        return value

    @staticmethod
    def removals(txn: Txn) -> list[tuple[int, int]]:
        """(run number, offset up to which its records go) of every delete or prune not finished."""
        marks = txn.scan(META, _keys.META_REMOVING, _keys.META_REMOVING + b"\xff" * 9)
        return [(_keys.removal_number(key), _keys.read_removal_mark(value)[0]) for key, value in marks]

    def keep_position(self, txn: Txn) -> None:
        """Record the last position before feed entries are deleted (a dense store only: PostgreSQL
        derives positions from transaction ids, which are never given twice)."""
        if txn.dense:
            self.put_meta_int(txn, _keys.META_POSITION, self.last_position(txn))

    # -- lineage -----------------------------------------------------------------------------

    def lineage(self, txn: Txn, run_id: str, rec: RunRecord) -> Iterator[Link]:
        """Where each offset of the run lives: the run itself, then each run it was forked from."""
        hi = rec.head
        while True:
            lo = min(rec.fork_offset, hi)
            yield Link(run_id, rec, lo, hi)
            if rec.parent is None or lo == 0:
                return
            hi, child = lo, run_id
            run_id = rec.parent
            found = self.get(txn, run_id)
            if found is None:
                raise CorruptRecordError(f"run {child!r} forks from {run_id!r}, which is missing", child)
            if found.number > rec.number or not found.forks:  # made after its fork, or holds none
                raise CorruptRecordError(
                    f"run {child!r} forks from {run_id!r}, which was deleted and made again after the fork", child
                )
            rec = found

    def segments(self, txn: Txn, run_id: str, rec: RunRecord, after: int, upto: int) -> list[Link]:
        """Offsets (after, upto] as pieces in order, each with the run that stores it.

        PrunedError when a piece lies at or below the base of the run that stores it."""
        if after < rec.base and upto > after:  # below the run's own base, even where a parent holds it
            raise PrunedError(run_id, after + 1, rec.base)
        pieces: list[Link] = []
        for link in self.lineage(txn, run_id, rec):
            lo, hi = max(link.lo, after), min(link.hi, upto)
            if hi > lo:
                if lo < link.rec.base:
                    raise PrunedError(run_id, lo + 1, link.rec.base)
                pieces.append(Link(link.run_id, link.rec, lo, hi))
            if link.lo <= after:
                break
        pieces.reverse()
        return pieces

    def base(self, txn: Txn, run_id: str, rec: RunRecord) -> int:
        """The offset at or below which the run's events are gone: its own base, or in a fork of
        a pruned run (forks are made at or above a base) that run's (`RunInfo.base`)."""
        link = self.pruned(txn, run_id, rec)
        return 0 if link is None else min(link.rec.base, link.hi)

    def pruned(self, txn: Txn, run_id: str, rec: RunRecord) -> Link | None:
        """The link of the nearest pruned run of the lineage: the run itself, or one it forks from
        (its state at `link.rec.base` is where a fold of the run starts); None when none was pruned."""
        for link in self.lineage(txn, run_id, rec):
            if link.rec.base:
                return link
        return None
