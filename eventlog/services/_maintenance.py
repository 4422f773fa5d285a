"""Fork, prune, delete and repair: the operations that add a run by reference or remove entries.

Each re-checks inside its write transaction what it planned from a read (the run's number,
base and forks), so a concurrent delete, prune or re-creation of the run is seen and never
written over (docs/architecture.md, "Where each rule lives").
"""

from __future__ import annotations

from functools import partial
from typing import Any

from .. import _limits
from ..core._replay import Replay
from ..core._runs import Runs
from ..core.fold import Reducer, reducer_tag
from ..errors import (
    CheckpointNotFoundError,
    ConflictError,
    CorruptRecordError,
    ForkDependencyError,
    PrunedError,
    RunExistsError,
)
from ..record._keys import (
    META_RUN_NUMBER,
    check_int,
    check_offset,
    check_run_id,
    from_u64,
    read_removal_mark,
    removal_key,
    removal_mark,
    run_range,
    u64,
)
from ..record._records import RunRecord
from ..record.codec import Codec
from ..record.tables import CHECKPOINT_IDS, CHECKPOINTS, EVENT_IDS, EVENTS, FEED, META, RUN_NUMBERS, RUNS, SNAPSHOTS
from ..store._base import Store, Txn, scan_chunks
from ._links import strays
from .checkpoints import Checkpoints

_PRUNE_ATTEMPTS = 8
_ALL = (1 << 64) - 1  # the offset up to which a deleted run's records are removed
_SCAN = 64  # entries read at a time while removing (their values are read: each may be large)


class Maintenance:
    """fork, prune, delete_run and repair."""

    def __init__(self, store: Store, codec: Codec, runs: Runs, replay: Replay, checkpoints: Checkpoints[Any]) -> None:
        self._store, self._codec, self._runs = store, codec, runs
        self._replay, self._checkpoints = replay, checkpoints

    def fork(self, run_id: str, at: int, new_run_id: str, now: int, number: int | None = None) -> tuple[str, int]:
        """A new run whose first `at` events are this run's, shared by reference; returns its id and
        run number (the life made). With `number`, of that life of the run only (else
        RunReplacedError, before anything is written)."""
        check_run_id(run_id)
        check_run_id(new_run_id)
        check_int("at", at, -(1 << 64), 1 << 64)

        def write(txn: Txn) -> tuple[str, int]:
            parent = self._runs.require(txn, run_id, number, "it was forked")
            check_offset(run_id, "at", at, parent.head)
            if at < parent.base:
                raise PrunedError(run_id, at, parent.base)
            for link in self._runs.lineage(txn, run_id, parent):
                if at > link.lo or link.lo == 0:  # the run that holds offset `at`
                    if at < link.rec.base:
                        raise PrunedError(run_id, at, link.rec.base)
                    break
            if self._runs.get(txn, new_run_id) is not None:
                raise RunExistsError(new_run_id)
            child = self._runs.create(txn, new_run_id, now, parent=run_id, at=at)
            parent.forks += 1
            self._runs.put(txn, run_id, parent)
            self._runs.put(txn, new_run_id, child)
            return new_run_id, child.number

        return self._store.write(write)

    # -- prune -----------------------------------------------------------------------------------

    def prune(self, run_id: str, before: int, reducer: Reducer[Any], life: int | None = None) -> int:
        """Drop the run's events and checkpoints below the latest checkpoint at or below `before`; with
        `life` (a run number), of that life only (else RunReplacedError, before anything is written).
        Event ids stay indexed: appending a pruned event's id again is still a no-op."""
        check_int("before", before)
        tag = reducer_tag(reducer)
        for attempt in range(_PRUNE_ATTEMPTS):
            plan = partial(self._plan_prune, run_id=run_id, before=before, reducer=reducer, again=attempt > 0)
            number, old_base, base = self._store.read(partial(plan, life=life))
            if base <= old_base:
                return old_base
            state = self._replay.state_at(run_id, base, reducer)
            snapshot = self._replay.snapshot_value(state, base, reducer)

            def write(
                txn: Txn, number: int = number, old_base: int = old_base, base: int = base, snapshot: bytes = snapshot
            ) -> int | None:
                rec = self._runs.require(txn, run_id)
                if rec.forks:
                    raise ForkDependencyError(f"run {run_id!r}: {rec.forks} fork(s) read its events; delete them first")
                if rec.number != number or rec.base != old_base or base > rec.head:
                    return None  # the run changed since the plan: plan again
                self._runs.keep_position(txn)
                key = SNAPSHOTS.key(number, base, tag)
                txn.put(SNAPSHOTS, key, self._codec.place_frame(snapshot, (SNAPSHOTS, key)))
                start, stop = run_range(number)
                for key, value in scan_chunks(txn, CHECKPOINTS, start, stop):
                    cp = self._checkpoints.record(run_id, key, value)
                    if cp.offset < base:
                        txn.delete(CHECKPOINTS, key)
                        txn.delete(CHECKPOINT_IDS, CHECKPOINT_IDS.key(number, cp.checkpoint_id))
                rec.base = base  # from here on nothing below the base is read: the rest goes in chunks
                self._runs.put(txn, run_id, rec)
                self._mark_removal(txn, number, base)
                return base

            done = self._store.write(write)
            if done is not None:
                self._remove(number, done)
                return done
        raise ForkDependencyError(f"run {run_id!r} kept changing while it was being pruned; try again")

    def _plan_prune(
        self, txn: Txn, run_id: str, before: int, reducer: Reducer[Any], again: bool, life: int | None
    ) -> tuple[int, int, int]:
        """(run number, base now, base to prune to). `again`: the run changed since the last plan."""
        rec = self._runs.require(txn, run_id, life, "it was pruned")
        start, stop = run_range(rec.number)
        keep = None
        others: set[str] = set()  # reducers of the checkpoints at or below `before` that are not `reducer`
        for key, value in scan_chunks(txn, CHECKPOINTS, start, stop):
            cp = self._checkpoints.record(run_id, key, value)
            if cp.offset <= before and cp.reducer == reducer.name and cp.reducer_version == reducer.version:
                keep = cp.offset if keep is None else max(keep, cp.offset)
            elif cp.offset <= before:
                others.add(f"{cp.reducer}@{cp.reducer_version}")
        if keep is None and again and rec.base:
            return rec.number, rec.base, rec.base  # pruned further meanwhile: never move a base back
        pruned = self._replay.pruned_base(txn, run_id, rec) if keep is None else None
        if pruned is not None and pruned.offset <= before:  # a fork of a pruned run, say: none of its own below
            if not pruned.read_by(reducer):
                raise CheckpointNotFoundError(
                    f"run {run_id!r}: no checkpoint at or below offset {before} by {reducer.name}@{reducer.version}; "
                    f"{pruned.kept(run_id)}: prune with that reducer"
                )
            return rec.number, pruned.offset, pruned.offset  # nothing below that base is kept: nothing to drop
        if keep is None and others:
            raise CheckpointNotFoundError(
                f"run {run_id!r}: its checkpoints at or below offset {before} were made by "
                f"{', '.join(sorted(others))}, not {reducer.name}@{reducer.version}; prune with the reducer that made them"
            )
        if keep is None:
            raise CheckpointNotFoundError(
                f"run {run_id!r}: no checkpoint at or below offset {before} to keep; save one first"
            )
        if rec.forks:
            raise ForkDependencyError(f"run {run_id!r}: {rec.forks} fork(s) read its events; delete them first")
        if rec.base < keep <= rec.fork_offset:
            raise ForkDependencyError(f"run {run_id!r}: offsets up to {rec.fork_offset} belong to its parent")
        return rec.number, rec.base, keep

    # -- delete ----------------------------------------------------------------------------------

    def delete_run(self, run_id: str, number: int | None = None, expected_offset: int | None = None) -> None:
        """Remove a run: its events, ids, checkpoints and snapshots. Refused while forks of it exist.

        One transaction removes the run's record, so the run is gone at once; its records then
        go a chunk per transaction (`_remove`). A damaged entry does not stop it: the feed
        positions of the run are then found by scanning the feed."""

        def detach(txn: Txn) -> int:
            rec = self._runs.require(txn, run_id, number, "a delete of it waited")
            if expected_offset is not None and rec.head != expected_offset:
                raise ConflictError(run_id, expected_offset, rec.head)
            if rec.forks:
                raise ForkDependencyError(f"run {run_id!r}: {rec.forks} fork(s) read its events; delete them first")
            self._runs.keep_position(txn)
            self._mark_removal(txn, rec.number, _ALL)
            txn.delete(RUN_NUMBERS, RUN_NUMBERS.key(rec.number))
            txn.delete(RUNS, RUNS.key(run_id))
            if rec.parent is not None:
                parent = self._runs.get(txn, rec.parent)
                if parent is not None:
                    parent.forks = max(0, parent.forks - 1)
                    self._runs.put(txn, rec.parent, parent)
            return rec.number

        self._remove(self._store.write(detach), _ALL)

    # -- removal in chunks -----------------------------------------------------------------------

    @staticmethod
    def _mark_removal(txn: Txn, number: int, upto: int) -> None:
        """Note in meta that the records of run number `number` up to offset `upto` (a deleted
        run: all) are to be removed, so that `finish_removals` ends a removal a crash cut short.
        Readers skip them meanwhile: they are below the run's base, or the run is gone."""
        old = txn.get(META, removal_key(number))
        txn.put(META, removal_key(number), removal_mark(upto, old is not None and read_removal_mark(old)[1]))

    def _remove(self, number: int, upto: int) -> None:
        """Remove what `_mark_removal` marked, a bounded chunk per transaction: the entries with
        their feed positions, the feed positions of damaged ones, then the snapshots below `upto`
        (a deleted run: all its ids, checkpoints and snapshots too); the mark goes last."""
        mark = removal_key(number)
        first, last = run_range(number)
        stop = last if upto == _ALL else EVENTS.key(number, upto + 1)
        tables = (SNAPSHOTS, EVENT_IDS, CHECKPOINTS, CHECKPOINT_IDS) if upto == _ALL else (SNAPSHOTS,)
        end = last if upto == _ALL else SNAPSHOTS.key(number, upto, b"")  # snapshots: those below the base
        if not self._store.write(partial(self._drop_set, number=number, upto=upto, stop=stop, tables=tables, end=end)):
            while self._store.write(partial(self._drop_entries, number=number, stop=stop)):
                pass
            if self._store.read(lambda txn: (raw := txn.get(META, mark)) is not None and read_removal_mark(raw)[1]):
                start: bytes | None = b""
                while start is not None:
                    start = self._store.write(partial(self._drop_feed_refs, number=number, upto=upto, start=start))
            for table in tables:
                while self._store.write(partial(self._drop_range, table=table, start=first, stop=end)):
                    pass

        def unmark(txn: Txn) -> None:
            raw = txn.get(META, mark)
            if raw is not None and read_removal_mark(raw)[0] == upto:  # a later prune may have marked more
                txn.delete(META, mark)

        self._store.write(unmark)

    @staticmethod
    def _drop_set(txn: Txn, number: int, upto: int, stop: bytes, tables: tuple[str, ...], end: bytes) -> bool:
        """Where the store finds a run's feed positions itself (PostgreSQL), remove everything in
        one transaction of set-based deletes (`DELETE ... WHERE run = $1 AND off <= $2`); False
        where it does not (memory, LMDB: the entries are read a chunk at a time for their positions)."""
        if txn.delete_feed_of(number, upto) is None:
            return False
        first = run_range(number)[0]
        txn.delete_range(EVENTS, first, stop)
        for table in tables:
            txn.delete_range(table, first, end)
        return True

    def _drop_entries(self, txn: Txn, number: int, stop: bytes) -> bool:
        """Delete a chunk of the run number's entries below `stop` (at most `remove_chunk_keys`
        of them, or about `remove_chunk_bytes`) and their feed positions; an undecodable one flags
        the mark (its position is then found by a feed scan). True: more are left."""
        damaged, more = False, True
        count = size = 0
        while more and count < _limits.remove_chunk_keys and size < _limits.remove_chunk_bytes:
            pairs = txn.scan(EVENTS, EVENTS.key(number, 0), stop, limit=_SCAN)  # deleted keys are gone: from the start
            for key, value in pairs:
                txn.delete(EVENTS, key)
                size += len(value)
                try:
                    position, _ = self._codec.decode_entry_id(value, key)  # the event itself is not needed
                except CorruptRecordError:
                    damaged = True
                    continue
                if txn.get(FEED, FEED.key(position)) == key:
                    txn.delete(FEED, FEED.key(position))
                else:
                    damaged = True
            count += len(pairs)
            more = len(pairs) == _SCAN
        mark = txn.get(META, removal_key(number))
        if damaged and mark is not None:
            txn.put(META, removal_key(number), removal_mark(read_removal_mark(mark)[0], True))
        return more

    @staticmethod
    def _drop_feed_refs(txn: Txn, number: int, upto: int, start: bytes) -> bytes | None:
        """Delete the feed positions, a chunk of them from `start` on, that point at the run
        number's entries up to `upto`; returns where the next chunk starts (None: done)."""
        pairs = txn.scan(FEED, start, None, limit=_limits.remove_chunk_keys)
        for key, ref in pairs:
            if not FEED.well_formed(ref):
                continue  # repair deletes it
            held, offset = FEED.parse_ref(ref)
            if held == number and offset <= upto:
                txn.delete(FEED, key)
        return pairs[-1][0] + b"\x00" if len(pairs) == _limits.remove_chunk_keys else None

    @staticmethod
    def _drop_range(txn: Txn, table: str, start: bytes, stop: bytes) -> bool:
        """Delete a chunk of the keys in [start, stop) of `table` (their values are not read). True: more left."""
        return txn.delete_range(table, start, stop, _limits.remove_chunk_keys) == _limits.remove_chunk_keys

    def finish_removals(self) -> list[str]:
        """End every removal that a crash (or a killed process) cut short; says what it ended."""
        done = []
        for number, upto in self._store.read(self._runs.removals):
            self._remove(number, upto)
            what = "deleting" if upto == _ALL else f"pruning up to offset {upto} of"
            done.append(f"{what} run number {number}, cut short, was finished")
        return done

    # -- repair ----------------------------------------------------------------------------------

    def repair(self) -> list[str]:
        """Remove index records that point at nothing: feed positions of missing entries, event and
        checkpoint ids of missing records, run numbers of missing runs; and the rows of run
        numbers no run has (what is left of a run that is gone), raising the run number counter
        to the highest number a run has. Returns what it did.

        It first ends every delete or prune that a crash cut short. Entries of a run are
        never rewritten otherwise: damaged data is named by `verify` and restored from a copy."""
        finished = self.finish_removals()

        def write(txn: Txn) -> list[str]:
            done: list[str] = list(finished)
            done += _remove_strays(self._runs, txn)
            live: dict[int, RunRecord] = {}
            for key, value in scan_chunks(txn, RUN_NUMBERS, b"", None):
                rec = self._runs.get(txn, bytes(value).decode("utf-8", "replace"))
                if rec is None or rec.number != from_u64(key):
                    txn.delete(RUN_NUMBERS, key)
                    done.append(f"run number {from_u64(key)} named a run that is gone")
                else:
                    live[rec.number] = rec
            self._runs.keep_position(txn)
            for key, ref in scan_chunks(txn, FEED, b"", None):
                position = FEED.position_of(key)
                entry = None
                if FEED.well_formed(ref) and FEED.parse_ref(ref)[0] in live:
                    entry = txn.get(EVENTS, ref)
                if entry is None:
                    txn.delete(FEED, key)
                    done.append(f"feed position {position} pointed at a missing entry")
                elif (held := _position_held(self._codec, entry, ref)) not in (None, position):
                    txn.delete(FEED, key)  # the entry's sealed position is its own: this one is a stray
                    done.append(f"feed position {position} pointed at the entry of position {held}")
            for key, value in scan_chunks(txn, EVENT_IDS, b"", None):
                rec = live.get(EVENT_IDS.number_of(key))
                offset = from_u64(value) if len(value) == 8 else -1
                if rec is None or not (0 < offset <= rec.head):
                    txn.delete(EVENT_IDS, key)
                    done.append(f"event id {EVENT_IDS.id_of(key)!r} pointed at nothing")
            for key, value in scan_chunks(txn, CHECKPOINT_IDS, b"", None):
                number = CHECKPOINT_IDS.number_of(key)
                held = len(value) == 8 and txn.get(CHECKPOINTS, CHECKPOINTS.key(number, from_u64(value))) is not None
                if number not in live or not held:
                    txn.delete(CHECKPOINT_IDS, key)
                    done.append(f"checkpoint id {CHECKPOINT_IDS.id_of(key)!r} pointed at nothing")
            return done

        return self._store.write(write)


def _position_held(codec: Codec, value: bytes, ref: bytes) -> int | None:
    """The feed position sealed in an entry; None when it does not decode (`verify` names it)."""
    try:
        return codec.decode_entry_id(value, ref)[0]
    except CorruptRecordError:
        return None


def _remove_strays(runs: Runs, txn: Txn) -> list[str]:
    """Remove the rows of run numbers no run has and raise the counter to the highest a run has."""
    found = strays(runs, txn)  # None: a run record does not decode, and its number could be any
    if found is None:
        return []
    done = []
    for table, number in found[0]:
        stop = u64(number + 1) if number < _ALL else b"\xff" * 32
        removed = txn.delete_range(table, u64(number), stop)
        done.append(f"{removed} rows of {table} held run number {number}, which no run has")
    if txn.dense and runs.meta_int(txn, META_RUN_NUMBER) < found[1]:
        runs.put_meta_int(txn, META_RUN_NUMBER, found[1])
        done.append(f"the run number counter was raised to {found[1]}, the highest number a run has")
    return done
