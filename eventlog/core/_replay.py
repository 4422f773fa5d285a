"""Replay: the state at any offset, from the nearest snapshot at or below it and the events after it.

A snapshot is found along the run's lineage (docs/architecture.md, "A `state_at`"); only a
snapshot of the same reducer name and version is used, except at a pruned base, where a
reducer's `upgrade` may carry an older version's state forward.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any, NamedTuple

import msgspec

from .. import _limits
from ..errors import CorruptRecordError, PrunedError, ReducerError, RunReplacedError, UnknownKindError
from ..record._keys import check_int, check_offset
from ..record._records import RunRecord, SnapshotRecord
from ..record.codec import Codec, refuse_ext
from ..record.tables import EVENTS, SNAPSHOTS
from ..store._base import Store, Txn
from ._reader import Reader, event_place
from ._runs import Runs
from .fold import Reducer, reducer_named, reducer_tag


class PrunedBase(NamedTuple):
    """The nearest pruned run of a run's lineage: the run itself, or one it forks from."""

    run_id: str
    """The run that was pruned."""
    offset: int
    """Its base: the state there is kept as a snapshot, the events up to it are gone."""
    tags: tuple[str, ...]
    """The reducers (`name@version`) of the snapshots kept at the base."""

    def read_by(self, reducer: Reducer[Any]) -> bool:
        """Whether `reducer` can start at the base: a snapshot is kept by it, or by another
        version of it that its `upgrade(state, from_version)` reads."""
        if reducer_tag(reducer).decode() in self.tags:
            return True
        return hasattr(reducer, "upgrade") and any(t.rpartition("@")[0] == reducer.name for t in self.tags)

    def kept(self, run_id: str) -> str:
        """Where the state at the base is kept, in words true of `run_id` (this run or a fork of it)."""
        where = "the run" if run_id == self.run_id else f"run {self.run_id!r}, which it forks from,"
        if not self.tags:
            return f"the state at offset {self.offset}, where {where} was pruned, has no snapshot by any reducer"
        named = _limits.base_reducers_named_max
        by = ", ".join(repr(t) for t in self.tags[:named])
        if len(self.tags) > named:
            by += f" and {len(self.tags) - named} more"
        reducers = "reducer" if len(self.tags) == 1 else "reducers"
        return f"the state at offset {self.offset}, where {where} was pruned, is kept only by {reducers} {by}"


def reducer_reading(
    reducers: Sequence[Reducer[Any]], made: tuple[str, int] | None, pruned: PrunedBase | None
) -> Reducer[Any]:
    """Of `reducers` (the default first), the one to read a run with: the one that made its latest
    checkpoint (`made`: its name and version), else the default; but when that one cannot start at
    the run's pruned base (`pruned`: its own, or that of the pruned run a fork reads from, which has
    no checkpoint of its own), the first that can (none can: that one, whose fold says who keeps it)."""
    chosen = (reducer_named(reducers, *made) if made is not None else None) or reducers[0]
    if pruned is None or pruned.read_by(chosen):
        return chosen
    return next((r for r in reducers if pruned.read_by(r)), chosen)


class Replay:
    """Plans and runs folds."""

    def __init__(self, store: Store, codec: Codec, runs: Runs, reader: Reader) -> None:
        self._store, self._codec, self._runs, self._reader = store, codec, runs, reader

    # -- snapshots ---------------------------------------------------------------------------

    def find_snapshot(
        self, txn: Txn, run_id: str, rec: RunRecord, offset: int, tag: bytes
    ) -> tuple[int, bytes, bytes] | None:
        """The nearest snapshot at or below `offset` made by the reducer `tag`: (offset, key, stored value)."""
        for link in self._runs.lineage(txn, run_id, rec):
            offset = min(offset, link.hi)
            lo = max(link.lo, link.rec.base)
            if offset < lo:
                continue
            first, stop = SNAPSHOTS.key(link.rec.number, lo, b""), SNAPSHOTS.key(link.rec.number, offset + 1, b"")
            while True:
                found = txn.scan(SNAPSHOTS, first, stop, reverse=True, limit=16)
                for key, value in found:
                    _, at, found_tag = SNAPSHOTS.parse(key)
                    if found_tag == tag:
                        return at, bytes(key), value
                if len(found) < 16:
                    break
                stop = found[-1][0]  # exclusive: go on below the last key seen
        return None

    def pruned_base(self, txn: Txn, run_id: str, rec: RunRecord) -> PrunedBase | None:
        """The nearest pruned run along the run's lineage, its base and the reducers that keep the
        state there (None: no run of the lineage was pruned)."""
        link = self._runs.pruned(txn, run_id, rec)
        if link is None:
            return None
        number, base = link.rec.number, link.rec.base
        first, stop = SNAPSHOTS.key(number, base, b""), SNAPSHOTS.key(number, base + 1, b"")
        tags: list[str] = []
        while keys := txn.keys(SNAPSHOTS, first, stop, 64):
            tags.extend(bytes(SNAPSHOTS.parse(key)[2]).decode("utf-8", "replace") for key in keys)
            first = keys[-1] + b"\x00"
        return PrunedBase(link.run_id, base, tuple(tags))

    def load_snapshot(self, run_id: str, key: bytes, value: bytes, reducer: Reducer[Any]) -> tuple[int, bytes, Any]:
        """(offset, canonical state bytes, state) of the snapshot stored under `key`."""
        try:
            snap = self._codec.decode_value(value, SnapshotRecord, (SNAPSHOTS, key))
            state = msgspec.msgpack.decode(snap.state, type=reducer.state_type, ext_hook=refuse_ext)
        except CorruptRecordError as exc:
            raise exc.at(run_id, None) from None
        except (msgspec.DecodeError, ValueError, TypeError, RecursionError) as exc:
            raise CorruptRecordError(f"undecodable snapshot state: {exc}", run_id) from None
        return snap.offset, bytes(snap.state), state

    def snapshot_value(self, state: Any, offset: int, reducer: Reducer[Any]) -> bytes:
        """A snapshot record, framed, of a state that reads back equal (else UnencodableValueError)."""
        raw = self._codec.encode_checked(f"the state of reducer {reducer.name!r}", state, reducer.state_type)
        record = SnapshotRecord(reducer.name, reducer.version, offset, msgspec.Raw(raw))
        return self._codec.encode_value(record, None, level=_limits.snapshot_compression_level)

    def snapshot_due(self, run_id: str, offset: int, reducer: Reducer[Any]) -> bool:
        """Whether a checkpoint of the run at `offset` materializes its state (`snapshot_due`)."""
        tag = reducer_tag(reducer)

        def due(txn: Txn) -> bool:
            rec = self._runs.require(txn, run_id)
            found = self.find_snapshot(txn, run_id, rec, offset, tag)
            if found is None:
                return True
            snap_offset, _, value = found
            if snap_offset == offset:
                return False
            cap = len(value) * _limits.snapshot_event_bytes_ratio
            return snapshot_due(len(value), self.bytes_since(txn, run_id, rec, snap_offset, offset, cap))

        return self._store.read(due)

    def bytes_since(self, txn: Txn, run_id: str, rec: RunRecord, after: int, upto: int, cap: int | None) -> int:
        """Stored bytes of the events (after, upto], counted up to `cap`."""
        total = 0
        for link in self._runs.segments(txn, run_id, rec, after, upto):
            first, stop = EVENTS.key(link.rec.number, link.lo + 1), EVENTS.key(link.rec.number, link.hi + 1)
            for _, value in txn.scan(EVENTS, first, stop):
                total += len(value)
                if cap is not None and total >= cap:
                    return total
        return total

    # -- fold --------------------------------------------------------------------------------

    def start(
        self, run_id: str, offset: int | None, reducer: Reducer[Any], number: int | None = None
    ) -> tuple[int, int, int, Any]:
        """(run number, offset to fold to, offset of the starting state, starting state)."""
        tag = reducer_tag(reducer)
        if offset is not None:
            check_int("offset", offset, -(1 << 64), 1 << 64)

        def plan(txn: Txn) -> tuple[int, int, tuple[int, bytes, bytes] | None, tuple[int, bytes, bytes] | None]:
            rec = self._runs.require(txn, run_id, number)
            target = rec.head if offset is None else check_offset(run_id, "offset", offset, rec.head)
            if target < rec.base:
                raise PrunedError(run_id, target, rec.base)
            found = self.find_snapshot(txn, run_id, rec, target, tag)
            older = None
            if found is None:
                pruned = self.pruned_base(txn, run_id, rec)
                if pruned is not None:
                    older = self._older_base(txn, run_id, rec, pruned.offset, reducer)
                    if older is None:
                        detail = f"{pruned.kept(run_id)}, not by {reducer.name}@{reducer.version}"
                        raise PrunedError(run_id, target, pruned.offset, detail=detail)
            return rec.number, target, found, older

        number, target, found, older = self._store.read(plan)
        if older is not None:
            return number, target, older[0], self._upgrade(run_id, older, reducer)
        if found is None:
            return number, target, 0, reducer.initial()
        try:
            snap_offset, _, state = self.load_snapshot(run_id, found[1], found[2], reducer)
        except CorruptRecordError as exc:
            raise exc.at(run_id, found[0]) from None  # name the snapshot's offset
        return number, target, snap_offset, state

    def _older_base(
        self, txn: Txn, run_id: str, rec: RunRecord, base: int, reducer: Reducer[Any]
    ) -> tuple[int, bytes, bytes] | None:
        """(base, key, stored value) of a snapshot at the pruned base by another version of the reducer."""
        for link in self._runs.lineage(txn, run_id, rec):
            if link.rec.base != base:
                continue
            prefix = SNAPSHOTS.key(link.rec.number, base, reducer.name.encode() + b"@")
            for key, value in txn.scan(SNAPSHOTS, prefix, prefix + b"\xff"):
                return base, bytes(key), value
        return None

    def _upgrade(self, run_id: str, older: tuple[int, bytes, bytes], reducer: Reducer[Any]) -> Any:
        base, key, value = older
        tag = SNAPSHOTS.parse(key)[2]
        upgrade = getattr(reducer, "upgrade", None)
        if upgrade is None:
            raise PrunedError(
                run_id,
                base,
                base,
                detail=f"the state at its pruned base was saved by reducer {tag.decode()!r}; "
                f"{reducer.name}@{reducer.version} has no upgrade(state, from_version) to read it",
            )
        try:
            snap = self._codec.decode_value(value, SnapshotRecord, (SNAPSHOTS, key))
            old_state = msgspec.msgpack.decode(snap.state, ext_hook=refuse_ext)
        except CorruptRecordError as exc:
            raise exc.at(run_id, base) from None
        except (msgspec.DecodeError, ValueError, TypeError, RecursionError) as exc:
            raise CorruptRecordError(f"undecodable snapshot state: {exc}", run_id, base) from None
        try:
            return upgrade(old_state, snap.reducer_version)
        except Exception as exc:
            raise ReducerError(
                f"run {run_id!r}: {reducer.name}.upgrade from version {snap.reducer_version} raised {exc!r}"
            ) from exc

    def fold(self, run_id: str, state: Any, after: int, upto: int, reducer: Reducer[Any], number: int) -> Any:
        """The state after folding the events (after, upto] of run number `number` into `state`.

        Values are checked and decoded `fold_decode_entries` at a time in one pass each
        (`Codec.decode_records`), then folded while their events are still in the CPU's
        cache; a group with a value that fails a check, or with an event of an old tag, is gone
        through value by value, so that the damaged one is named and events before it are folded."""
        apply = reducer.apply
        decode = self._codec.decode_entry_event
        decode_records = partial(self._codec.decode_records, events_only=True)
        step = _limits.fold_decode_entries
        for owner, owner_number, chunk_first, chunk, _ in self._reader.chunks(
            run_id, after, upto, _limits.fold_chunk_entries, number
        ):
            for at in range(0, len(chunk), step):
                first = chunk_first + at
                values = chunk[at : at + step]
                records = decode_records(values, partial(event_place, owner_number, first))
                offset = first
                try:
                    if records is not None:
                        for offset, record in enumerate(records, first):  # noqa: B007 (named on error)
                            state = apply(state, record.event)
                    else:
                        for offset, value in enumerate(values, first):
                            state = apply(state, decode(value, EVENTS.key(owner_number, offset)))
                except (CorruptRecordError, UnknownKindError) as exc:
                    raise exc.at(owner, offset) from None
                except Exception as exc:
                    raise ReducerError(
                        f"run {run_id!r} offset {offset}: reducer {reducer.name}@{reducer.version} raised {exc!r}"
                    ) from exc
        return state

    def state_at(self, run_id: str, offset: int | None, reducer: Reducer[Any], number: int | None = None) -> Any:
        """The run's state after its first `offset` events (the head when None).

        The snapshot and every event folded are of one life of the run: of run number `number`
        (else RunReplacedError), or, when None, of the run as it is when the fold starts; a run
        deleted and made again meanwhile is folded again from the start, a few times at most."""
        for attempt in range(_limits.replaced_retries_max + 1):
            pinned, target, start, state = self.start(run_id, offset, reducer, number)
            try:
                return self.fold(run_id, state, start, target, reducer, pinned) if target > start else state
            except RunReplacedError:
                if number is not None or attempt == _limits.replaced_retries_max:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover


def snapshot_due(snapshot_bytes: int, bytes_since: int, bytes_min: int = 0) -> bool:
    """The snapshot schedule, in one place: a checkpoint materializes its state when there is no
    snapshot below it (`snapshot_bytes` 0) or when the events since the nearest one take
    `snapshot_event_bytes_ratio` times its bytes, so snapshot bytes stay linear in event bytes,
    and at least `bytes_min` (a run writer's `snapshot_bytes_min`)."""
    return snapshot_bytes == 0 or bytes_since >= max(snapshot_bytes * _limits.snapshot_event_bytes_ratio, bytes_min)
