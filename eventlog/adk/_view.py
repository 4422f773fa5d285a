"""How `eventlog history`, `eventlog state` and the UI show an ADK session (see eventlog.views).

Reading needs no google-adk: the events are JSON data, shown as role and text."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Sequence
from typing import Any

from ..log import EventLog
from ._events import AdkEvent, SessionReducer, SessionState, state_delta_of, upcast_data

__all__ = ["VIEW", "messages_of"]

_TEXT_CHARS_MAX = 120


def _parts(data: dict[str, Any]) -> list[dict[str, Any]]:
    content = data.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p for p in parts or [] if isinstance(p, dict)]


def messages_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """An ADK event's data as messages: its text (user or assistant), its function calls (an
    assistant's `tool_calls`) and its function responses (tool messages)."""
    author = str(data.get("author", ""))
    role = "user" if author == "user" else "assistant"
    text, calls, out = [], [], []
    for part in _parts(data):
        if isinstance(part.get("text"), str) and not part.get("thought"):
            text.append(part["text"])
        if isinstance(call := part.get("function_call"), dict):
            calls.append({"name": call.get("name", ""), "args": call.get("args", {})})
        if isinstance(resp := part.get("function_response"), dict):
            out.append({"role": "tool", "name": resp.get("name", ""), "content": resp.get("response")})
    if text or calls:
        message: dict[str, Any] = {"role": role, "content": "".join(text)}
        if role == "assistant":
            message["name"] = author
        if calls:
            message["tool_calls"] = calls
        out.insert(0, message)
    return out


def _short(message: dict[str, Any]) -> str:
    """A message in a few words: its text, the tools it calls, or the tool it answers for."""
    if message["role"] == "tool":
        return f"[{message.get('name', '')} answered]"
    calls = ", ".join(str(c.get("name", "")) for c in message.get("tool_calls", []))
    text = message["content"] if isinstance(message["content"], str) else ""
    return " ".join(x for x in (text, f"[calls {calls}]" if calls else "") if x)


class _View:
    """How the command line and the UI show an ADK session (see eventlog.views)."""

    name = "adk"
    kind_prefix = "adk.session"
    fold = SessionReducer()
    """The reducer a session's runs fold with."""

    def history(self, log: EventLog[Any], run_id: str, limit: int | None) -> tuple[Sequence[str], list[dict[str, Any]]]:
        columns = ("offset", "time", "author", "invocation", "text", "state")
        rows = []
        for entry in log.read(run_id):
            ev = entry.event
            if not isinstance(ev, AdkEvent):
                continue
            data = upcast_data(ev.data, ev.layout)
            text = " ".join(_short(m) for m in messages_of(data))
            rows.append(
                {
                    "offset": entry.offset,
                    "time": _dt.datetime.fromtimestamp(ev.timestamp, tz=_dt.UTC).isoformat(),
                    "author": ev.author,
                    "invocation": ev.invocation_id,
                    "text": text[:_TEXT_CHARS_MAX],
                    "state": ", ".join(sorted(state_delta_of(data))),
                }
            )
        return columns, rows if limit is None else rows[-limit:] if limit > 0 else []

    def state(self, log: EventLog[Any], run_id: str, offset: int) -> Any:
        s: SessionState = log.state_at(run_id, offset, reducer=self.fold)
        messages: list[dict[str, Any]] = []
        for entry in log.read(run_id, s.start, offset):
            if isinstance(entry.event, AdkEvent):
                messages.extend(messages_of(upcast_data(entry.event.data, entry.event.layout)))
        return {
            "app_name": s.app_name,
            "user_id": s.user_id,
            "session_id": s.session_id,
            "exists": s.exists,
            "last_update_time": s.last_update_time,
            "events": s.events,
            "state": s.state,
            "forked_from": s.forked_from,
            "rewinds": s.rewinds,
            "messages": messages,
        }


VIEW = _View()
"""The run view registered under the `eventlog.views` entry point group."""
