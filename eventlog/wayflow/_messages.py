"""wayflowcore's messages as the standard event kinds hold them."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..events import AssistantMessage, Event, ToolCall, ToolCallCompleted, UserMessage
from ..events import Message as LogMessage

__all__ = ["log_message", "message_event", "plain", "text_of", "tool_names"]


def plain(value: Any) -> Any:
    """A value the log can store: plain data as is, anything else as its text."""
    try:
        return msgspec.to_builtins(value, str_keys=True)
    except (TypeError, ValueError, OverflowError):
        return str(value)


def _text(message: Any) -> str:
    try:
        return str(message.content or "")
    except Exception:  # noqa: BLE001 - a message whose content cannot be read shows as empty
        return ""


def log_message(message: Any) -> LogMessage:
    """A wayflowcore message as the standard kinds hold one."""
    if message.tool_result is not None:
        return LogMessage(
            role="tool", content=text_of(message.tool_result.content), tool_call_id=message.tool_result.tool_request_id
        )
    calls = [
        ToolCall(id=r.tool_request_id, name=r.name, arguments=plain(dict(r.args or {})))
        for r in message.tool_requests or []
    ]
    role = message.role if message.role in ("user", "assistant", "system") else "assistant"
    return LogMessage(role=role, content=_text(message), tool_calls=calls)


def text_of(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(plain(value))


def tool_names(messages: Sequence[Any]) -> dict[str, str]:
    return {r.tool_request_id: r.name for m in messages for r in (m.tool_requests or [])}


def message_event(message: Any, tool_names: Mapping[str, str]) -> Event | None:
    """The event that shows a message added outside an LLM call or a tool execution."""
    result = message.tool_result
    if result is not None:
        name = tool_names.get(result.tool_request_id, "")
        return ToolCallCompleted(call_id=result.tool_request_id, tool=name, output=plain(result.content))
    if message.role == "user":
        return UserMessage(content=_text(message))
    if message.role == "assistant":
        out = log_message(message)
        return AssistantMessage(content=out.content, tool_calls=list(out.tool_calls))
    return None
