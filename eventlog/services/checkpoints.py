"""`log.checkpoints`: a run's state at an offset, saved with metadata, listed, loaded, deleted.

A checkpoint always restores its exact state. Its state is materialized as a snapshot only
when the events since the nearest snapshot take `snapshot_event_bytes_ratio` times that
snapshot's bytes; otherwise it is folded from that snapshot when loaded, so storage stays
linear when a checkpoint is taken at every step (docs/concepts.md, "How snapshots stay linear").
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

import msgspec

from .. import _limits
from ..core._replay import PrunedBase, Replay, reducer_reading
from ..core._runs import Runs
from ..core.fold import Reducer, reducer_or, reducer_tag
from ..errors import (
    CheckpointNotFoundError,
    CorruptRecordError,
    DuplicateIdError,
    PrunedError,
    ReducerError,
)
from ..record._keys import (
    IdSource,
    check_id,
    check_int,
    check_limit,
    check_offset,
    check_run_number,
    from_u64,
    run_range,
    u64,
)
from ..record._records import CheckpointRecord, RunRecord
from ..record.codec import Codec
from ..record.tables import CHECKPOINT_IDS, CHECKPOINTS, SNAPSHOTS
from ..store._base import Store, Txn, at_checkpoint

__all__ = ["Checkpoint", "Checkpoints"]

S = TypeVar("S")


class Checkpoint(Generic[S]):
    """A run's state at an offset, saved with its metadata.

    `state` is loaded when first read: from the snapshot stored at this offset, or by
    folding from the nearest one below it, always of the life of the run the checkpoint
    belongs to (`run_number`): RunReplacedError once the run was deleted, or deleted and made
    again, since the checkpoint was read.
    """

    __slots__ = (
        "_load",
        "_state",
        "checkpoint_id",
        "created_ns",
        "metadata",
        "offset",
        "reducer",
        "reducer_version",
        "run_id",
        "run_number",
        "summary",
    )

    def __init__(
        self, run_id: str, rec: CheckpointRecord, load: Callable[[], S], state: S | None = None, run_number: int = 0
    ) -> None:
        self._load = load
        self._state = state
        self.run_id = run_id
        """The run the checkpoint belongs to."""
        self.run_number = run_number
        """The run number of that run's life (`RunInfo.number`) when the checkpoint was read."""
        self.checkpoint_id = rec.checkpoint_id
        """Unique id of the checkpoint in its run."""
        self.offset = rec.offset
        """The run's state after its first `offset` events is what the checkpoint holds."""
        self.created_ns = rec.created_ns
        """When the checkpoint was saved, in nanoseconds since the Unix epoch."""
        self.reducer = rec.reducer
        """Name of the reducer that made the state."""
        self.reducer_version = rec.reducer_version
        """Version of that reducer."""
        self.metadata: dict[str, Any] = rec.metadata
        """The caller's metadata."""
        self.summary: dict[str, Any] = rec.summary_of()
        """What the reducer's `summarize(state)` kept of the state (for AgentReducer: superstep,
        completed and paused nodes, status); empty when the reducer has no `summarize`."""

    @property
    def created_at(self) -> _dt.datetime:
        """When the checkpoint was saved, as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.created_ns / 1e9, tz=_dt.UTC)

    @property
    def state(self) -> S:
        """The run's state at `offset`, folded by the reducer the checkpoint was loaded with."""
        if self._state is None:
            self._state = self._load()
        return self._state

    def __repr__(self) -> str:
        return (
            f"Checkpoint(run_id={self.run_id!r}, checkpoint_id={self.checkpoint_id!r}, offset={self.offset}, "
            f"created_at={self.created_at.isoformat()})"
        )


class Pending(msgspec.Struct):
    """A checkpoint ready to write: its record and, when materialized, its snapshot (both framed)."""

    record: CheckpointRecord
    snapshot: bytes | None
    tag: bytes


class Checkpoints(Generic[S]):
    """`log.checkpoints`: save, load, load_latest, list and delete a run's checkpoints."""

    def __init__(self, store: Store, codec: Codec, runs: Runs, replay: Replay, reducer: Reducer[S],
                 now: Callable[[], int], ids: IdSource) -> None:  # fmt: skip
        self._store, self._codec, self._runs, self._replay = store, codec, runs, replay
        self._reducer, self._now, self._ids = reducer, now, ids

    # -- building and writing ------------------------------------------------------------------

    def pending(
        self,
        offset: int,
        state: Any,
        reducer: Reducer[Any],
        *,
        metadata: dict[str, Any] | None,
        checkpoint_id: str | None,
        materialize: bool,
    ) -> Pending:
        """A checkpoint of `state` at `offset`, checked and encoded: raises before anything is written.
        `metadata`: as `check_metadata` returns it."""
        meta = {} if metadata is None else metadata
        summary: dict[str, Any] = {}
        summarize = getattr(reducer, "summarize", None)
        if summarize is not None:
            try:
                summary = summarize(state)
            except Exception as exc:
                raise ReducerError(f"{reducer.name}.summarize raised {exc!r}") from exc
            self._codec.encode_checked(f"{reducer.name}.summarize(state)", summary, dict[str, Any])
        record = CheckpointRecord(
            checkpoint_id=checkpoint_id or "",
            offset=offset,
            created_ns=self._now(),
            reducer=reducer.name,
            reducer_version=reducer.version,
            metadata=meta,
            summary=summary,
        )
        snapshot = self._replay.snapshot_value(state, offset, reducer) if materialize else None
        return Pending(record, snapshot, reducer_tag(reducer))

    def check_metadata(self, metadata: object) -> dict[str, Any]:
        """Checkpoint metadata as a dict that reads back equal; else UnencodableValueError."""
        meta: Any = {} if metadata is None else metadata
        self._codec.encode_checked("checkpoint metadata", meta, dict[str, Any], bounded=True)
        return dict(meta)

    def put(self, txn: Txn, rec: RunRecord, pending: Pending, *, look_up: bool = True) -> None:
        """Write a pending checkpoint in the caller's transaction (the caller puts `rec` after).

        A checkpoint id the run holds already is refused (a caller's id) or drawn again (the
        log's own id source); raises before anything is written. Without `look_up`, an id of
        the log's own source (unique for the open log) is not looked up: a caller's id of its
        form is refused by the index (KeyExistsError, here or at the commit), and the commit is
        made again with `look_up` (`GroupCommit.commit_batch`)."""
        record = pending.record
        if not record.checkpoint_id:
            record.checkpoint_id = _free_id(self._ids, txn, rec.number, look_up or self._ids.injected)
        elif txn.get(CHECKPOINT_IDS, CHECKPOINT_IDS.key(rec.number, record.checkpoint_id)) is not None:
            raise DuplicateIdError(f"checkpoint {record.checkpoint_id!r} exists already")
        rec.checkpoint_seq += 1
        key = u64(rec.number) + u64(rec.checkpoint_seq)
        txn.put(CHECKPOINTS, key, self._codec.encode_value(record, (CHECKPOINTS, key)))
        txn.insert(CHECKPOINT_IDS, CHECKPOINT_IDS.key(rec.number, record.checkpoint_id), u64(rec.checkpoint_seq))
        if pending.snapshot is not None:
            key = SNAPSHOTS.key(rec.number, record.offset, pending.tag)
            txn.put(SNAPSHOTS, key, self._codec.place_frame(pending.snapshot, (SNAPSHOTS, key)))

    def record(self, run_id: str, key: bytes, value: bytes) -> CheckpointRecord:
        """A checkpoint record stored under `key`, decoded; damage names the run."""
        try:
            rec: CheckpointRecord = self._codec.decode_value(value, CheckpointRecord, (CHECKPOINTS, key))
        except CorruptRecordError as exc:
            raise exc.at(run_id, None) from None
        return rec

    def _wrap(
        self, run_id: str, number: int, rec: CheckpointRecord, reducer: Reducer[Any], state: Any = None
    ) -> Checkpoint[Any]:
        """A checkpoint of run number `number`, whose lazy state is folded from that life of the run only."""
        return Checkpoint(
            run_id, rec, lambda: self._replay.state_at(run_id, rec.offset, reducer, number), state, number
        )

    # -- the public face -------------------------------------------------------------------------

    def save(
        self,
        run_id: str,
        offset: int | None = None,
        *,
        metadata: dict[str, Any] | None = None,
        checkpoint_id: str | None = None,
        reducer: Reducer[Any] | None = None,
        run_number: int | None = None,
    ) -> Checkpoint[S]:
        """Save a checkpoint of the run at `offset` (default: the head).

        Saving an id that exists again updates its metadata only; it does not become latest.
        With `run_number`, only into that life of the run (else RunReplacedError).
        """
        reducer = self._reducer_or_default(reducer)
        if checkpoint_id is not None:
            check_id("checkpoint_id", checkpoint_id)
        if offset is not None:
            check_int("offset", offset, -(1 << 64), 1 << 64)
        meta = self.check_metadata(metadata)
        run_number = check_run_number(run_number)
        if checkpoint_id is not None:
            updated = self._update_metadata(run_id, checkpoint_id, meta, reducer, run_number)
            if updated is not None:
                return updated
        number, target = self._store.read(lambda txn: self._plan(txn, run_id, offset, run_number))
        state = self._replay.state_at(run_id, target, reducer, number)
        pending = self.pending(
            target,
            state,
            reducer,
            metadata=meta,
            checkpoint_id=checkpoint_id,
            materialize=self._replay.snapshot_due(run_id, target, reducer),
        )

        def write(txn: Txn) -> None:
            rec = self._runs.require(txn, run_id, number, "a checkpoint of it was saved")
            if target < rec.base:
                raise PrunedError(run_id, target, rec.base)
            self.put(txn, rec, pending)
            self._runs.put(txn, run_id, rec)

        self._store.write(write)
        at_checkpoint(self._store)
        return self._wrap(run_id, number, pending.record, reducer, state)

    def _plan(self, txn: Txn, run_id: str, offset: int | None, number: int | None) -> tuple[int, int]:
        rec = self._runs.require(txn, run_id, number, "a checkpoint of it was saved")
        target = rec.head if offset is None else check_offset(run_id, "offset", offset, rec.head)
        return rec.number, target

    def _update_metadata(
        self, run_id: str, checkpoint_id: str, metadata: dict[str, Any], reducer: Reducer[Any], number: int | None
    ) -> Checkpoint[S] | None:
        def write(txn: Txn) -> tuple[int, bytes, CheckpointRecord] | None:
            found = self._by_id(txn, run_id, checkpoint_id, number, "a checkpoint of it was saved")
            if found is None:
                return None
            life, key, record = found
            record.metadata = metadata
            txn.put(CHECKPOINTS, key, self._codec.encode_value(record, (CHECKPOINTS, key)))
            return life, key, record

        found = self._store.write(write)
        return None if found is None else self._wrap(run_id, found[0], found[2], reducer)

    def load(
        self,
        run_id: str,
        checkpoint_id: str,
        *,
        reducer: Reducer[Any] | None = None,
        run_number: int | None = None,
    ) -> Checkpoint[S]:
        """The checkpoint with this id; CheckpointNotFoundError if there is none.

        With `run_number`, of that life of the run only (else RunReplacedError)."""
        reducer = self._reducer_or_default(reducer)
        check_id("checkpoint_id", checkpoint_id)
        run_number = check_run_number(run_number)

        found = self._store.read(lambda txn: self._by_id(txn, run_id, checkpoint_id, run_number))
        if found is None:
            raise CheckpointNotFoundError(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
        return self._wrap(run_id, found[0], found[2], reducer)

    def _by_id(
        self, txn: Txn, run_id: str, checkpoint_id: str, number: int | None, doing: str = "it was read"
    ) -> tuple[int, bytes, CheckpointRecord] | None:
        """(run number, key, record) of the run's checkpoint with this id, found by the id index (None:
        there is none); CorruptRecordError when the index points at a missing record or at another
        checkpoint. With `number`, of that life of the run only (else RunReplacedError)."""
        rec = self._runs.require(txn, run_id, number, doing)
        seq = txn.get(CHECKPOINT_IDS, CHECKPOINT_IDS.key(rec.number, checkpoint_id))
        if seq is None:
            return None
        key = CHECKPOINTS.key(rec.number, from_u64(seq))
        value = txn.get(CHECKPOINTS, key)
        if value is None:
            raise CorruptRecordError(f"checkpoint {checkpoint_id!r} is indexed but missing", run_id)
        record = self.record(run_id, key, value)
        if record.checkpoint_id != checkpoint_id:
            raise _misindexed(run_id, checkpoint_id, record.checkpoint_id)
        return rec.number, key, record

    def load_latest(
        self, run_id: str, *, reducer: Reducer[Any] | None = None, run_number: int | None = None
    ) -> Checkpoint[S] | None:
        """The checkpoint saved last (after a delete, the one before it), or None."""
        found = self.list(run_id, limit=1, newest_first=True, reducer=reducer, run_number=run_number)
        return found[0] if found else None

    def list(
        self,
        run_id: str,
        limit: int | None = None,
        *,
        newest_first: bool = False,
        reducer: Reducer[Any] | None = None,
        run_number: int | None = None,
    ) -> list[Checkpoint[S]]:
        """The run's checkpoints, oldest first (or newest first), at most `limit` of them.

        With a limit and oldest first, these are the newest `limit`, still oldest first.
        With `run_number`, of that life of the run only (else RunReplacedError).
        """
        reducer = self._reducer_or_default(reducer)
        limit = check_limit(limit)
        run_number = check_run_number(run_number)

        def scan(txn: Txn) -> tuple[int, list[tuple[bytes, bytes]]]:
            rec = self._runs.require(txn, run_id, run_number)
            start, stop = run_range(rec.number)
            return rec.number, txn.scan(CHECKPOINTS, start, stop, reverse=True, limit=limit)

        number, pairs = self._store.read(scan)
        out = [self._wrap(run_id, number, self.record(run_id, k, v), reducer) for k, v in pairs]
        if not newest_first:
            out.reverse()
        return out

    def reducer_of(self, run_id: str, reducers: Sequence[Reducer[Any]] = (), *, reducer: Reducer[Any] | None = None,
                   run_number: int | None = None) -> Reducer[Any]:  # fmt: skip
        """Of `reducer` (the log's when None) and `reducers`, the one to read the run with, as `verify`
        folds it (`_replay.reducer_reading`); with `run_number`, of that life only (else RunReplacedError)."""
        made, pruned = self._store.read(partial(_made_and_base, self, run_id, check_run_number(run_number)))
        return reducer_reading([self._reducer_or_default(reducer), *reducers], made, pruned)

    def kept_by(self, run_id: str, reducer: Reducer[Any], *, run_number: int | None = None) -> bool:
        """Whether the run's checkpoints say it is `reducer`'s (for a run with no event after its
        base): its latest one was made by it (by name), or, having none of its own (a fork of a
        pruned run), the state at its pruned base is kept by it; with `run_number`, of that life."""
        made, pruned = self._store.read(partial(_made_and_base, self, run_id, check_run_number(run_number)))
        return made[0] == reducer.name if made is not None else pruned is not None and pruned.read_by(reducer)

    def iter(
        self, run_id: str, *, reducer: Reducer[Any] | None = None, run_number: int | None = None
    ) -> Iterator[Checkpoint[S]]:
        """Every checkpoint of the run, oldest first, read a chunk at a time: a run with many
        checkpoints is never one list. Every chunk is of the run number the first one read (or
        `run_number`): RunReplacedError when the run is deleted (and made again) meanwhile."""
        reducer = self._reducer_or_default(reducer)
        after: bytes | None = None
        number = check_run_number(run_number)

        def chunk(txn: Txn) -> tuple[int, list[tuple[bytes, bytes]]]:
            rec = self._runs.require(txn, run_id, number)
            start, stop = run_range(rec.number)
            return rec.number, txn.scan(CHECKPOINTS, after or start, stop, limit=_limits.read_chunk_entries)

        while True:
            number, pairs = self._store.read(chunk)
            for key, value in pairs:
                yield self._wrap(run_id, number, self.record(run_id, key, value), reducer)
            if len(pairs) < _limits.read_chunk_entries:
                return
            after = pairs[-1][0] + b"\x00"

    def delete(self, run_id: str, checkpoint_id: str, *, run_number: int | None = None) -> None:
        """Delete a checkpoint (its snapshot stays while a later checkpoint may build on it); with
        `run_number`, of that life of the run only (RunReplacedError otherwise)."""
        check_id("checkpoint_id", checkpoint_id)
        number = check_run_number(run_number)

        def write(txn: Txn) -> None:
            rec = self._runs.require(txn, run_id, number)
            key = CHECKPOINT_IDS.key(rec.number, checkpoint_id)
            seq = txn.get(CHECKPOINT_IDS, key)
            if seq is None:
                raise CheckpointNotFoundError(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
            where = CHECKPOINTS.key(rec.number, from_u64(seq))
            value = txn.get(CHECKPOINTS, where)
            found = checkpoint_id
            if value is not None:
                with contextlib.suppress(CorruptRecordError):  # a damaged record is deleted all the same
                    found = self.record(run_id, where, value).checkpoint_id
            if found != checkpoint_id:
                raise _misindexed(run_id, checkpoint_id, found)  # the index names another: it is not deleted
            txn.delete(CHECKPOINT_IDS, key)
            txn.delete(CHECKPOINTS, where)

        self._store.write(write)

    def count(self, txn: Txn, rec: RunRecord) -> int:
        """Checkpoints a run keeps."""
        start, stop = run_range(rec.number)
        return len(txn.scan(CHECKPOINTS, start, stop))

    def _reducer_or_default(self, reducer: Reducer[Any] | None) -> Reducer[Any]:
        return reducer_or(reducer, self._reducer)


def _free_id(ids: IdSource, txn: Txn, number: int, look_up: bool) -> str:
    for _ in range(_limits.id_draws_max):
        candidate = ids.draw("checkpoint_id")
        if not look_up or txn.get(CHECKPOINT_IDS, CHECKPOINT_IDS.key(number, candidate)) is None:
            return candidate
        ids.taken(candidate, "a checkpoint id")
    raise ids.exhausted()


def _made_and_base(
    checkpoints: Checkpoints[Any], run_id: str, number: int | None, txn: Txn
) -> tuple[tuple[str, int] | None, PrunedBase | None]:
    """(name and version of the reducer that made the run's latest checkpoint, or None; its pruned base)."""
    rec = checkpoints._runs.require(txn, run_id, number)
    latest = txn.scan(CHECKPOINTS, *run_range(rec.number), reverse=True, limit=1)
    made = [checkpoints.record(run_id, k, v) for k, v in latest]
    return (made[0].reducer, made[0].reducer_version) if made else None, checkpoints._replay.pruned_base(
        txn, run_id, rec
    )


def _misindexed(run_id: str, checkpoint_id: str, found: str) -> CorruptRecordError:
    return CorruptRecordError(f"the checkpoint id index points {checkpoint_id!r} at checkpoint {found!r}", run_id)
