"""`log.checkpoints`: materialized snapshots of a run's state at an offset, with metadata."""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Any

from ._keys import check_id
from ._records import CheckpointRecord
from .errors import CheckpointNotFoundError, CorruptRecordError, EventLogError
from .fold import Reducer
from .store._base import Txn, from_u64, u64

if TYPE_CHECKING:
    from .log import EventLog

__all__ = ["Checkpoint", "Checkpoints"]


class Checkpoint:
    """A materialized snapshot of a run's state at an offset, with its metadata.

    `state` is loaded when first read: from the snapshot stored at this offset, or by
    folding from the nearest one below it.
    """

    __slots__ = (
        "_log",
        "_reducer",
        "_state",
        "checkpoint_id",
        "completed_nodes",
        "created_ns",
        "metadata",
        "offset",
        "paused_nodes",
        "reducer",
        "reducer_version",
        "run_id",
        "superstep",
    )

    def __init__(self, log: EventLog, run_id: str, rec: CheckpointRecord, reducer: Reducer, state: Any = None) -> None:
        self._log = log
        self._reducer = reducer
        self._state = state
        self.run_id = run_id
        self.checkpoint_id = rec.checkpoint_id
        self.offset = rec.offset
        self.created_ns = rec.created_ns
        self.reducer = rec.reducer
        self.reducer_version = rec.reducer_version
        self.metadata = rec.metadata
        self.superstep = rec.superstep
        self.completed_nodes = rec.completed_nodes
        self.paused_nodes = rec.paused_nodes

    @property
    def created_at(self) -> _dt.datetime:
        """When the checkpoint was saved, as an aware UTC datetime."""
        return _dt.datetime.fromtimestamp(self.created_ns / 1e9, tz=_dt.UTC)

    @property
    def state(self) -> Any:
        """The run's state at `offset`, folded by the reducer the checkpoint was loaded with."""
        if self._state is None:
            self._state = self._log.state_at(self.run_id, self.offset, reducer=self._reducer)
        return self._state

    def __repr__(self) -> str:
        return (
            f"Checkpoint(run_id={self.run_id!r}, checkpoint_id={self.checkpoint_id!r}, offset={self.offset}, "
            f"superstep={self.superstep}, created_at={self.created_at.isoformat()})"
        )


class Checkpoints:
    """`log.checkpoints`: save, load, load_latest, list and delete a run's checkpoints."""

    def __init__(self, log: EventLog) -> None:
        self._log = log

    def save(
        self,
        run_id: str,
        offset: int | None = None,
        *,
        metadata: dict[str, Any] | None = None,
        checkpoint_id: str | None = None,
        reducer: Reducer | None = None,
    ) -> Checkpoint:
        """Save a checkpoint of the run at `offset` (default: the head).

        Saving an id that exists again updates its metadata only; it does not become latest.
        """
        log = self._log
        reducer = reducer or log.reducer
        if checkpoint_id is not None:
            check_id("checkpoint_id", checkpoint_id)
            existing = self._find(run_id, checkpoint_id)
            if existing is not None:
                return self._update_metadata(run_id, existing[0], existing[1], metadata or {}, reducer)
        target = log.head(run_id) if offset is None else offset
        state = log.state_at(run_id, target, reducer=reducer)
        pending = log._pending(
            run_id,
            target,
            state,
            reducer,
            metadata=metadata,
            checkpoint_id=checkpoint_id,
            materialize=log._snapshot_due(run_id, target, reducer),
        )

        def write(txn: Txn) -> None:
            rec = log._require(txn, run_id)
            if txn.get("checkpoint_ids", u64(rec.number) + pending.record.checkpoint_id.encode()) is not None:
                raise EventLogError(f"run {run_id!r}: checkpoint {pending.record.checkpoint_id!r} was saved meanwhile")
            rec.checkpoint_seq += 1
            log._put_checkpoint(txn, rec, pending)
            log._put_run(txn, run_id, rec)

        log.store.write(write)
        if getattr(log.store, "durability", "sync") == "batch":
            log.store.sync()
        return Checkpoint(log, run_id, pending.record, reducer, state)

    def _find(self, run_id: str, checkpoint_id: str) -> tuple[int, CheckpointRecord] | None:
        log = self._log

        def find(txn: Txn) -> tuple[int, CheckpointRecord] | None:
            rec = log._require(txn, run_id)
            seq = txn.get("checkpoint_ids", u64(rec.number) + checkpoint_id.encode())
            if seq is None:
                return None
            value = txn.get("checkpoints", u64(rec.number) + seq)
            if value is None:
                raise CorruptRecordError(f"checkpoint {checkpoint_id!r} is indexed but missing", run_id)
            return from_u64(seq), log._checkpoint_record(run_id, value)

        return log.store.read(find)

    def _update_metadata(
        self, run_id: str, seq: int, record: CheckpointRecord, metadata: dict[str, Any], reducer: Reducer
    ) -> Checkpoint:
        log = self._log
        record.metadata = dict(metadata)

        def write(txn: Txn) -> None:
            rec = log._require(txn, run_id)
            txn.put("checkpoints", u64(rec.number) + u64(seq), log.codec.encode_value(record))

        log.store.write(write)
        return Checkpoint(log, run_id, record, reducer)

    def load(self, run_id: str, checkpoint_id: str, *, reducer: Reducer | None = None) -> Checkpoint:
        """The checkpoint with this id; CheckpointNotFoundError if there is none."""
        found = self._find(run_id, checkpoint_id)
        if found is None:
            raise CheckpointNotFoundError(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
        return Checkpoint(self._log, run_id, found[1], reducer or self._log.reducer)

    def load_latest(self, run_id: str, *, reducer: Reducer | None = None) -> Checkpoint | None:
        """The checkpoint saved last (after a delete, the one before it), or None."""
        found = self.list(run_id, limit=1, newest_first=True, reducer=reducer)
        return found[0] if found else None

    def list(
        self,
        run_id: str,
        limit: int | None = None,
        *,
        newest_first: bool = False,
        reducer: Reducer | None = None,
    ) -> list[Checkpoint]:
        """The run's checkpoints, oldest first (or newest first), at most `limit` of them.

        With a limit and oldest first, these are the newest `limit`, still oldest first.
        """
        log = self._log
        reducer = reducer or log.reducer

        def scan(txn: Txn) -> list[bytes]:
            rec = log._require(txn, run_id)
            pairs = txn.scan("checkpoints", u64(rec.number), u64(rec.number + 1), reverse=True, limit=limit)
            return [value for _, value in pairs]

        values = log.store.read(scan)
        out = [Checkpoint(log, run_id, log._checkpoint_record(run_id, v), reducer) for v in values]
        if not newest_first:
            out.reverse()
        return out

    def delete(self, run_id: str, checkpoint_id: str) -> None:
        """Delete a checkpoint (its snapshot stays while a later checkpoint may build on it)."""
        log = self._log

        def write(txn: Txn) -> None:
            rec = log._require(txn, run_id)
            key = u64(rec.number) + checkpoint_id.encode()
            seq = txn.get("checkpoint_ids", key)
            if seq is None:
                raise CheckpointNotFoundError(f"run {run_id!r} has no checkpoint {checkpoint_id!r}")
            txn.delete("checkpoint_ids", key)
            txn.delete("checkpoints", u64(rec.number) + seq)

        log.store.write(write)
