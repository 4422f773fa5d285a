"""How `eventlog history` and `eventlog state` show a LangGraph thread (see eventlog.views)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..log import EventLog
from ._answer import INTERRUPT, NULL_TASK, RESUME, asked
from ._events import Blob, ThreadReducer, ThreadState, Write, pending_writes
from ._serde import SafeSerializer
from ._threads import lineage_checkpoints, mark_of, thread_of

__all__ = ["VIEW"]


def _plain(value: Any) -> Any:
    def hook(obj: Any) -> Any:
        dump = getattr(obj, "model_dump", None)
        if callable(dump):
            return dump()
        if hasattr(obj, "__dict__"):
            return {"type": type(obj).__name__, **vars(obj)}
        return repr(obj)

    try:
        return msgspec.to_builtins(value, enc_hook=hook, str_keys=True)
    except (TypeError, ValueError, msgspec.EncodeError):
        return repr(value)


def _next_nodes(state: ThreadState) -> list[str]:
    """Nodes the checkpoint's trigger channels say run next (`branch:to:X`, `__start__`)."""
    out: list[str] = []
    for ch, version in state.versions.items():
        if ch.startswith("branch:to:"):
            node = ch[len("branch:to:") :]
        elif ch == "__start__":
            node = ch
        else:
            continue
        seen = state.seen.get(node, {}).get(ch)
        try:
            newer = seen is None or version > seen  # type: ignore[operator]
        except TypeError:
            newer = str(version) > str(seen)
        if newer and ch in state.values:
            out.append(node)
    return sorted(out)


class _View:
    """How `eventlog history` and `eventlog state` show a LangGraph thread."""

    name = "langgraph"
    kind_prefix = "langgraph."

    def __init__(self) -> None:
        self.serde = SafeSerializer(tag_unknown=True)
        """Constructs only allowed types; any other shows as `{"unknown_type": ..., "data": ...}`."""
        self.fold = ThreadReducer()
        """The reducer a thread's runs fold with."""

    def _load(self, blob: Blob) -> Any:
        try:
            return self.serde.loads_typed((blob.type, blob.data))
        except Exception:  # noqa: BLE001 - an encrypted, refused or foreign value is shown, not decoded
            return f"<{blob.type}, {len(blob.data)} bytes>"

    def history(self, log: EventLog[Any], run_id: str, limit: int | None) -> tuple[Sequence[str], list[dict[str, Any]]]:
        cps = lineage_checkpoints(log, self.fold, run_id, None)  # a fork's: those it shares too
        marks = [(cp, m) for cp in cps if (m := mark_of(cp.offset, cp.metadata))]
        if limit is not None:
            marks = marks[-limit:] if limit > 0 else []
        rows: list[dict[str, Any]] = []
        if not marks:
            return self.columns, rows
        offsets = [cp.offset for cp, _ in marks]
        head = log.head(run_id)
        late = log.state_at(run_id, head, reducer=self.fold).late  # writes saved after the run moved on
        for i, (cp, mark) in enumerate(marks):
            end = offsets[i + 1] - 1 if i + 1 < len(offsets) else head
            next_nodes = _next_nodes(log.state_at(run_id, cp.offset, reducer=self.fold))
            state: ThreadState = log.state_at(run_id, end, reducer=self.fold)
            md = self._load(mark.metadata)
            md = md if isinstance(md, dict) else {}
            rows.append(
                {
                    "checkpoint": mark.checkpoint_id,
                    "offset": cp.offset,
                    "step": md.get("step"),
                    "source": md.get("source"),
                    "next": ", ".join(next_nodes),
                    "writes": len(pending_writes(state.writes, late.get(mark.checkpoint_id))),
                    "parent": state.parent_id,
                    "created (UTC)": cp.created_at.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                }
            )
        return self.columns, rows

    columns = ("checkpoint", "offset", "step", "source", "next", "writes", "parent", "created (UTC)")

    def state(self, log: EventLog[Any], run_id: str, offset: int) -> Any:
        state: ThreadState = log.state_at(run_id, offset, reducer=self.fold)
        thread_id, ns = thread_of(run_id)
        values: dict[str, Any] = {}
        for ch, chunks in sorted(state.values.items()):
            loaded = [self._load(b) for b in chunks]
            value = loaded[0] if len(loaded) == 1 else [x for part in loaded for x in part]
            values[ch] = _plain(value)
        return {
            "thread_id": thread_id,
            "checkpoint_ns": ns,
            "checkpoint_id": state.checkpoint_id,
            "parent_id": state.parent_id,
            "values": values,
            "next": _next_nodes(state),
            "channel_versions": _plain(state.versions),
            "pending_writes": [
                {"task_id": w.task_id, "channel": w.channel, "value": _plain(self._load(w.value))} for w in state.writes
            ],
        }

    def waiting(self, log: EventLog[Any], run_id: str, offset: int) -> list[dict[str, Any]]:
        """The `interrupt()`s pending after the run's first `offset` events: a task's
        `__interrupt__` write with no `__resume__` after it (for the task, or thread-wide)."""
        state: ThreadState = log.state_at(run_id, offset, reducer=self.fold)
        resumed = {w.task_id for w in state.writes if w.channel == RESUME}
        out: list[dict[str, Any]] = []
        for w in state.writes:
            if w.channel != INTERRUPT or w.task_id in resumed or NULL_TASK in resumed:
                continue
            for interrupt_id, value in self._interrupts(w):
                out.append({"node": _node_of(w.task_path), "task_id": w.task_id, "id": interrupt_id, "value": value})
        return out

    def _interrupts(self, write: Write) -> list[tuple[Any, Any]]:
        """(id, value asked) of each interrupt an `__interrupt__` write holds, as plain data."""
        loaded = _plain(self._load(write.value))
        out: list[tuple[Any, Any]] = []
        for one in loaded if isinstance(loaded, list) else [loaded]:
            value = one.get("value") if isinstance(one, dict) and "value" in one else one
            out.append((one.get("id") if isinstance(one, dict) else None, value))
        return out

    def answered(self, log: EventLog[Any], run_id: str, offset: int) -> list[dict[str, Any]]:
        """The answer stored after the run's first `offset` events and not taken yet: the null
        task's `__resume__` write while a task's `interrupt()` has not finished (`_answer.asked`);
        the graph reads it at its next `invoke(None, config)`."""
        state: ThreadState = log.state_at(run_id, offset, reducer=self.fold)
        questions, stored = asked(state.writes)
        if stored is None:
            return []
        answer = _plain(self._load(stored.value))
        out: list[dict[str, Any]] = []
        for w in questions:
            for interrupt_id, value in self._interrupts(w):
                out.append({"node": _node_of(w.task_path), "id": interrupt_id, "value": value, "answer": answer})
        return out


def _node_of(task_path: str) -> str | None:
    """The node a task ran, from its path (`~__pregel_pull, review`), else None."""
    parts = [p.strip() for p in task_path.split(",")]
    return parts[1] if len(parts) >= 2 and parts[0].endswith("__pregel_pull") and parts[1] else None


VIEW = _View()
"""The run view registered under the `eventlog.views` entry point group."""
