"""LangGraph's values as the saver stores them, and back: `Blob`s made and read with the saver's
serializer (`serde.dumps_typed` / `loads_typed`; `SafeSerializer` unless the user gave another),
and the `CheckpointTuple` of a folded state.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import CheckpointTuple, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol

from ._events import Blob, ThreadState, Write, pending_writes
from ._serde import RefusedValueError
from ._threads import Run

__all__ = ["Values"]


class Values:
    """Values through one serializer (the saver's `serde`; nothing is pickled)."""

    def __init__(self, serde: SerializerProtocol) -> None:
        self.serde = serde

    def blob(self, value: Any) -> Blob:
        """`value` as the serializer writes it."""
        kind, data = self.serde.dumps_typed(value)
        return Blob(kind, bytes(data))

    def load(self, blob: Blob) -> Any:
        """The value a blob holds."""
        return self.serde.loads_typed((blob.type, blob.data))

    def mapping(self, blob: Blob, what: str) -> dict[str, Any]:
        """A blob that must hold a dict (a checkpoint's metadata, its extra keys); RefusedValueError if not."""
        value = self.load(blob)
        if not isinstance(value, dict):
            raise RefusedValueError(f"the {what} stored is a {type(value).__name__}, not a mapping")
        return value

    def value(self, chunks: list[Blob]) -> Any:
        """A channel value decoded anew from its stored blobs (a list's pieces are concatenated):
        no object of it is shared with another value read, of this checkpoint or another."""
        first = self.load(chunks[0])
        if len(chunks) == 1:
            return first
        out = list(first)
        for blob in chunks[1:]:
            out.extend(self.load(blob))
        return out

    def checkpoint_tuple(
        self,
        run: Run,
        state: ThreadState,
        metadata: Blob,
        late: list[Write] | None,
    ) -> CheckpointTuple:
        """The tuple LangGraph reads of a checkpoint: `state` folded up to it, its metadata and the
        writes pending on it, every value decoded anew (the caller may change it: nothing it gets
        is the saver's, nor shared with another tuple of a listing). A value the serializer
        refuses is named with its thread, namespace and checkpoint."""
        try:
            return self._tuple(run, state, metadata, late)
        except RefusedValueError as exc:
            raise RefusedValueError(
                f"thread {run.thread_id!r}, namespace {run.ns!r}, checkpoint {state.checkpoint_id!r}: {exc}"
            ) from None

    def _tuple(
        self,
        run: Run,
        state: ThreadState,
        metadata: Blob,
        late: list[Write] | None,
    ) -> CheckpointTuple:
        values = {ch: self.value(chunks) for ch, chunks in state.values.items()}
        checkpoint: dict[str, Any] = {
            "v": state.v,
            "id": state.checkpoint_id,
            "ts": state.ts,
            "channel_values": values,
            "channel_versions": dict(state.versions),
            "versions_seen": {node: dict(seen) for node, seen in state.seen.items()},
            "updated_channels": None if state.updated is None else list(state.updated),
        }
        if state.extra is not None:
            checkpoint.update(self.mapping(state.extra, "checkpoint's extra keys"))
        writes = pending_writes(state.writes, late)  # a list of its own
        writes.sort(key=lambda w: writes_sort_key(w.task_path, w.task_id, w.idx))
        conf = {"thread_id": run.thread_id, "checkpoint_ns": run.ns}
        return CheckpointTuple(
            config={"configurable": {**conf, "checkpoint_id": state.checkpoint_id}},
            checkpoint=checkpoint,  # type: ignore[arg-type]
            metadata=self.mapping(metadata, "checkpoint metadata"),  # type: ignore[arg-type]
            parent_config=(
                {"configurable": {**conf, "checkpoint_id": state.parent_id}} if state.parent_id is not None else None
            ),
            pending_writes=[(w.task_id, w.channel, self.load(w.value)) for w in writes],
        )
