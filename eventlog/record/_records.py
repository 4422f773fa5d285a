"""The records the log keeps beside events: runs, checkpoints, snapshots. Fields are stored as arrays."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

U64 = Annotated[int, msgspec.Meta(ge=0)]
"""A count, offset or number that keys are made of: decoding refuses a negative one (msgpack holds no more than a u64)."""


class RunRecord(msgspec.Struct, array_like=True):
    """A run as stored under its id in the `runs` table."""

    number: U64
    """Fixed number of the run inside the log; prefixes its keys."""
    head: U64 = 0
    """Offset of the last event."""
    base: U64 = 0
    """Offsets at or below this were pruned; the state at `base` lives in a snapshot."""
    parent: str | None = None
    """Run this one was forked from."""
    fork_offset: U64 = 0
    """Offsets up to this are the parent's events, shared."""
    created_ns: U64 = 0
    """When the run was created."""
    checkpoint_seq: U64 = 0
    """Sequence number of the last checkpoint saved (never reused)."""
    forks: U64 = 0
    """Number of runs forked from this one that still exist."""


class CheckpointRecord(msgspec.Struct, array_like=True):
    """A checkpoint as stored; its state is folded (or loaded from a snapshot) when asked for."""

    checkpoint_id: str
    offset: U64
    created_ns: U64
    reducer: str
    reducer_version: int
    metadata: dict[str, Any]
    legacy_superstep: int | None = None
    """Format 1 stored three facts of `AgentState` here; read into `summary`, never written."""
    legacy_completed_nodes: list[str] = []
    legacy_paused_nodes: list[str] = []
    summary: dict[str, Any] = {}
    """What the reducer's `summarize(state)` said of the state (empty when it has no such method)."""

    def summary_of(self) -> dict[str, Any]:
        """The summary, with the facts a format-1 record kept in its own fields."""
        if self.summary or (
            self.legacy_superstep is None and not self.legacy_completed_nodes and not self.legacy_paused_nodes
        ):
            return self.summary
        return {
            "superstep": self.legacy_superstep,
            "completed_nodes": self.legacy_completed_nodes,
            "paused_nodes": self.legacy_paused_nodes,
        }


class SnapshotRecord(msgspec.Struct, array_like=True):
    """A materialized state at an offset, as canonical msgpack bytes."""

    reducer: str
    reducer_version: int
    offset: U64
    state: msgspec.Raw
