"""Fork, prune, delete and repair: the operations that add a run by reference or remove entries.

Each re-checks inside its write transaction what it planned from a read (the run's number,
base and forks), so a concurrent delete, prune or re-creation of the run is seen and never
written over (docs/architecture.md, "Maintenance").
"""

from __future__ import annotations

from functools import partial
from typing import Any

from ._keys import check_int, check_offset, check_run_id, event_key, from_u64, run_key, run_range, snapshot_key, u64
from ._records import RunRecord
from ._replay import Replay
from ._runs import Runs
from .checkpoints import Checkpoints
from .codec import Codec
from .errors import (
    CheckpointNotFoundError,
    CorruptRecordError,
    ForkDependencyError,
    PrunedError,
    RunExistsError,
)
from .fold import Reducer, reducer_tag
from .store._base import Store, Txn, scan_chunks

_PRUNE_ATTEMPTS = 8


class Maintenance:
    """fork, prune, delete_run and repair."""

    def __init__(self, store: Store, codec: Codec, runs: Runs, replay: Replay, checkpoints: Checkpoints[Any]) -> None:
        self._store, self._codec, self._runs = store, codec, runs
        self._replay, self._checkpoints = replay, checkpoints

    def fork(self, run_id: str, at: int, new_run_id: str, now: int) -> str:
        """A new run whose first `at` events are this run's, shared by reference; returns its id."""
        check_run_id(run_id)
        check_run_id(new_run_id)
        check_int("at", at, -(1 << 64), 1 << 64)

        def write(txn: Txn) -> str:
            parent = self._runs.require(txn, run_id)
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
            return new_run_id

        return self._store.write(write)

    # -- prune -----------------------------------------------------------------------------------

    def prune(self, run_id: str, before: int, reducer: Reducer[Any]) -> int:
        """Drop the run's events and checkpoints below the latest checkpoint at or below `before`.

        Event ids stay indexed: appending a pruned event's id again is still a no-op."""
        check_int("before", before)
        tag = reducer_tag(reducer)
        for attempt in range(_PRUNE_ATTEMPTS):
            number, old_base, base = self._store.read(
                partial(self._plan_prune, run_id=run_id, before=before, reducer=reducer, again=attempt > 0)
            )
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
                txn.put("snapshots", snapshot_key(number, base, tag), snapshot)
                damaged = self._drop_events(txn, number, max(old_base, rec.fork_offset), base)
                if damaged:
                    self._drop_feed_refs(txn, number, base)
                start, stop = run_range(number)
                for key, value in scan_chunks(txn, "checkpoints", start, stop):
                    cp = self._checkpoints.record(run_id, value)
                    if cp.offset < base:
                        txn.delete("checkpoints", key)
                        txn.delete("checkpoint_ids", u64(number) + cp.checkpoint_id.encode())
                for key, _ in scan_chunks(txn, "snapshots", start, u64(number) + u64(base)):
                    txn.delete("snapshots", key)
                rec.base = base
                self._runs.put(txn, run_id, rec)
                return base

            done = self._store.write(write)
            if done is not None:
                return done
        raise ForkDependencyError(f"run {run_id!r} kept changing while it was being pruned; try again")

    def _plan_prune(
        self, txn: Txn, run_id: str, before: int, reducer: Reducer[Any], again: bool
    ) -> tuple[int, int, int]:
        """(run number, base now, base to prune to). `again`: the run changed since the last plan."""
        rec = self._runs.require(txn, run_id)
        start, stop = run_range(rec.number)
        keep = None
        for _, value in scan_chunks(txn, "checkpoints", start, stop):
            cp = self._checkpoints.record(run_id, value)
            if cp.offset <= before and cp.reducer == reducer.name and cp.reducer_version == reducer.version:
                keep = cp.offset if keep is None else max(keep, cp.offset)
        if keep is None and again and rec.base:
            return rec.number, rec.base, rec.base  # pruned further meanwhile: never move a base back
        if keep is None:
            raise CheckpointNotFoundError(
                f"run {run_id!r}: no checkpoint at or below offset {before} to keep; save one first"
            )
        if rec.forks:
            raise ForkDependencyError(f"run {run_id!r}: {rec.forks} fork(s) read its events; delete them first")
        if rec.base < keep <= rec.fork_offset:
            raise ForkDependencyError(f"run {run_id!r}: offsets up to {rec.fork_offset} belong to its parent")
        return rec.number, rec.base, keep

    def _drop_events(self, txn: Txn, number: int, after: int, upto: int | None) -> bool:
        """Delete the run's entries (after, upto] and their feed positions; True when one was
        undecodable (its feed position is then found by `_drop_feed_refs`)."""
        damaged = False
        stop = run_range(number)[1] if upto is None else event_key(number, upto + 1)
        for key, value in scan_chunks(txn, "events", event_key(number, after + 1), stop):
            txn.delete("events", key)
            try:
                position, _ = self._codec.decode_entry_id(value)  # the event itself is not needed
            except CorruptRecordError:
                damaged = True
                continue
            if txn.get("feed", u64(position)) == key:
                txn.delete("feed", u64(position))
            else:
                damaged = True
        return damaged

    def _drop_feed_refs(self, txn: Txn, number: int, upto: int | None) -> None:
        """Delete every feed position that points at the run's entries up to `upto` (all: None)."""
        prefix = u64(number)
        for key, ref in scan_chunks(txn, "feed", b"", None):
            if ref[:8] == prefix and (upto is None or from_u64(ref[8:16]) <= upto):
                txn.delete("feed", key)

    # -- delete ----------------------------------------------------------------------------------

    def delete_run(self, run_id: str) -> None:
        """Remove a run: its events, ids, checkpoints and snapshots. Refused while forks of it exist.

        A damaged entry does not stop it: the feed positions of the run are then found by
        scanning the feed."""

        def write(txn: Txn) -> None:
            rec = self._runs.require(txn, run_id)
            if rec.forks:
                raise ForkDependencyError(f"run {run_id!r}: {rec.forks} fork(s) read its events; delete them first")
            number = rec.number
            self._runs.keep_position(txn)
            if self._drop_events(txn, number, 0, None):
                self._drop_feed_refs(txn, number, None)
            start, stop = run_range(number)
            for table in ("event_ids", "checkpoints", "checkpoint_ids", "snapshots"):
                for key, _ in scan_chunks(txn, table, start, stop):
                    txn.delete(table, key)
            txn.delete("run_numbers", u64(number))
            txn.delete("runs", run_key(run_id))
            if rec.parent is not None:
                parent = self._runs.get(txn, rec.parent)
                if parent is not None:
                    parent.forks = max(0, parent.forks - 1)
                    self._runs.put(txn, rec.parent, parent)

        self._store.write(write)

    # -- repair ----------------------------------------------------------------------------------

    def repair(self) -> list[str]:
        """Remove index records that point at nothing: feed positions of missing entries, event and
        checkpoint ids of missing records, run numbers of missing runs. Returns what it removed.

        Entries themselves are never rewritten or removed: damaged data is named by `verify`
        and restored from a copy."""

        def write(txn: Txn) -> list[str]:
            done: list[str] = []
            live: dict[int, RunRecord] = {}
            for key, value in scan_chunks(txn, "run_numbers", b"", None):
                rec = self._runs.get(txn, bytes(value).decode("utf-8", "replace"))
                if rec is None or rec.number != from_u64(key):
                    txn.delete("run_numbers", key)
                    done.append(f"run number {from_u64(key)} named a run that is gone")
                else:
                    live[rec.number] = rec
            self._runs.keep_position(txn)
            for key, ref in scan_chunks(txn, "feed", b"", None):
                if len(ref) != 16 or from_u64(ref[:8]) not in live or txn.get("events", ref) is None:
                    txn.delete("feed", key)
                    done.append(f"feed position {from_u64(key)} pointed at a missing entry")
            for key, value in scan_chunks(txn, "event_ids", b"", None):
                rec = live.get(from_u64(key[:8]))
                offset = from_u64(value) if len(value) == 8 else -1
                if rec is None or not (0 < offset <= rec.head):
                    txn.delete("event_ids", key)
                    done.append(f"event id {bytes(key[8:]).decode('utf-8', 'replace')!r} pointed at nothing")
            for key, value in scan_chunks(txn, "checkpoint_ids", b"", None):
                if from_u64(key[:8]) not in live or txn.get("checkpoints", key[:8] + value) is None:
                    txn.delete("checkpoint_ids", key)
                    done.append(f"checkpoint id {bytes(key[8:]).decode('utf-8', 'replace')!r} pointed at nothing")
            return done

        return self._store.write(write)
