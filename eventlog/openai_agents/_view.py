"""How the command line and the UI show an OpenAI Agents SDK session or checkpointed agent run (see eventlog.views)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence
from typing import Any

from ..log import EventLog
from ._events import AgentsReducer, AgentsState, ItemAdded, ItemPopped, RunStateSaved, SessionCleared

__all__ = ["VIEW", "messages_of"]


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the text of its parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", p.get("refusal", ""))) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def message_of(item: Any) -> dict[str, Any]:
    """One Responses input item as a message of a chat: `role`, `content`, `tool_calls` or a tool's `name`."""
    if not isinstance(item, dict):
        return {"role": "event", "content": str(item)}
    kind = item.get("type")
    if "role" in item and kind in (None, "message"):
        return {"role": item["role"], "content": _text(item.get("content"))}
    if kind == "function_call":
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": item.get("name"), "args": item.get("arguments")}],
        }
    if kind == "function_call_output":
        return {"role": "tool", "name": item.get("call_id", ""), "content": _text(item.get("output"))}
    return {"role": "event", "content": str(kind or "item")}


def messages_of(items: Iterable[Any]) -> list[dict[str, Any]]:
    """Responses items as the messages of a chat."""
    return [message_of(item) for item in items]


def _run_items(run_state: Any) -> list[Any]:
    """A `RunState.to_json()`'s input and generated items, as Responses items."""
    if not isinstance(run_state, dict):
        return []
    original = run_state.get("original_input")
    items: list[Any] = [{"role": "user", "content": original}] if isinstance(original, str) else list(original or [])
    for generated in run_state.get("generated_items") or []:
        if isinstance(generated, dict):
            items.append(generated.get("raw_item", generated))
    return items


class _View:
    """How `eventlog history`, `eventlog state` and the UI show a session or an agent run."""

    name = "openai-agents"
    kind_prefix = "openai_agents."
    fold = AgentsReducer()
    """The reducer sessions and agent runs fold with."""

    def history(self, log: EventLog[Any], run_id: str, limit: int | None) -> tuple[Sequence[str], list[dict[str, Any]]]:
        columns = ("offset", "time", "event", "turn", "model calls", "items", "status")
        rows: list[dict[str, Any]] = []
        info = log.run_info(run_id)
        for entry in log.read(run_id, info.base, run_number=info.number):
            event = entry.event
            row: dict[str, Any] = dict.fromkeys(columns) | {
                "offset": entry.offset,
                "time": _dt.datetime.fromtimestamp(entry.time_ns / 1e9, tz=_dt.UTC).isoformat(),
                "event": str(type(event).__struct_config__.tag).removeprefix("openai_agents."),
            }
            if isinstance(event, RunStateSaved):
                row |= {"turn": event.turn, "model calls": event.model_calls, "items": event.items}
                row["status"] = "interrupted" if event.interruptions else "running"
            elif isinstance(event, ItemAdded):
                row["items"] = message_of(event.item)["role"]
            elif isinstance(event, ItemPopped):
                row["items"] = f"removes offset {event.offset}"
            elif isinstance(event, SessionCleared):
                row["items"] = f"removes {event.items}"
            rows.append(row)
        if limit is not None:
            rows = rows[-limit:] if limit > 0 else []
        return columns, rows

    def state(self, log: EventLog[Any], run_id: str, offset: int) -> Any:
        s: AgentsState = log.state_at(run_id, offset, reducer=self.fold)
        if not s.status:
            return {"session": run_id, "items": len(s.items), "removed": s.removed, "messages": messages_of(s.items)}
        return {
            "agent": s.agent,
            "session": s.session_id,
            "status": s.status,
            "turn": s.turn,
            "model_calls": s.model_calls,
            "interruptions": s.interruptions,
            "decisions": s.decisions,
            "output": s.output,
            "error": s.error,
            "messages": messages_of(_run_items(s.run_state)),
        }


VIEW = _View()
"""The run view registered under the `eventlog.views` entry point group."""
