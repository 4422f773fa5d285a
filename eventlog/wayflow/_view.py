"""How `eventlog history` and `eventlog state` show a WayFlow conversation (see eventlog.views)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

from ..log import EventLog
from ._checkpointer import EventLogCheckpointer
from ._events import WayflowReducer, WayflowState
from ._messages import text_of
from ._native import NATIVE

__all__ = ["VIEW"]


class _View:
    """How `eventlog history` and `eventlog state` show a WayFlow conversation (see eventlog.views)."""

    name = "wayflow"
    kind_prefix = "wayflow."
    fold = WayflowReducer()
    """The reducer a conversation's runs fold with."""

    def history(self, log: EventLog[Any], run_id: str, limit: int | None) -> tuple[Sequence[str], list[dict[str, Any]]]:
        columns = ("checkpoint", "offset", "saved", "reason", "turn", "messages", "status")
        rows = []
        for cp in EventLogCheckpointer(log).list_checkpoints(run_id, limit):
            md = cp.metadata
            rows.append(
                {
                    "checkpoint": cp.checkpoint_id,
                    "offset": cp.offset,
                    "saved": _dt.datetime.fromtimestamp(cp.created_at, tz=_dt.UTC).isoformat(),
                    "reason": md.get("save_reason", ""),
                    "turn": md.get("turn"),
                    "messages": md.get("message_count"),
                    "status": md.get("status_type", ""),
                }
            )
        return columns, rows

    def state(self, log: EventLog[Any], run_id: str, offset: int) -> Any:
        s: WayflowState = log.state_at(run_id, offset, reducer=self.fold)
        return {
            "component_id": s.component_id,
            "component_type": s.component_type,
            "checkpoint_id": s.checkpoint_id,
            "status": s.status,
            "turn": s.turn,
            "llm_calls": s.llm_calls,
            "tool_calls": s.tool_calls,
            "input_tokens": s.input_tokens,
            "output_tokens": s.output_tokens,
            "last_error": s.last_error,
            "messages": _display_messages(
                s.conversation.get("conversation") if s.shape.get("format") == NATIVE else s.conversation
            ),
            "branches": list(s.rewinds),
        }


def _display_messages(conversation: Any) -> list[dict[str, Any]]:
    """The root message list of a serialized conversation, as role and text."""
    if not isinstance(conversation, dict):
        return []
    ref = (conversation.get("message_list") or {}).get("$ref")
    listed = conversation.get("_referenced_objects", {}).get(ref, {})
    out = []
    for m in listed.get("messages", []) if isinstance(listed, dict) else []:
        text = "".join(c.get("content", "") for c in m.get("contents", []) if isinstance(c.get("content"), str))
        if m.get("tool_result"):
            out.append({"role": "tool", "content": text_of(m["tool_result"].get("content"))})
            continue
        entry: dict[str, Any] = {"role": m.get("role"), "content": text}
        calls = [r.get("name") for r in m.get("tool_requests") or []]
        if calls:
            entry["tool_calls"] = calls
        out.append(entry)
    return out


VIEW = _View()
"""The run view registered under the `eventlog.views` entry point group."""
