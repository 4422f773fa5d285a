"""An ADK session, an OpenAI Agents SDK session and a checkpointed Agents SDK run as a waterfall:
their turns, model calls and tool calls as the spans `spans.Waterfall` holds, so the page, its
totals and its costs are those of any run.

These frameworks store no span of their own: what a span's times are is read off the events.

- An ADK session (`adk.event`, the ADK event as data): a turn is one invocation, from its first
  event to its last; a model response (an event of an agent's with the model's content, or its
  usage or error) runs from the event before it in its invocation to itself, with the tokens of
  its `usage_metadata`; a tool call runs from the event of its `function_call` to the one of its
  `function_response`, paired by call id.
- An Agents SDK session (`openai_agents.item`, one item each): a turn begins at a user message;
  the items of the model's one response (messages, function calls, reasoning) are one model
  span, from the item stored before them to themselves; a tool call runs from its
  `function_call` item to its `function_call_output`, paired by `call_id`. Items carry no tokens.
- A checkpointed run (`openai_agents.run_started` ...): each attempt from its start to
  `run_finished` or `run_failed` (or the checkpoint that waits for approvals); a model call from
  the event before its `model_response` (the checkpoint taken just before the call) to it, with
  its tokens; a tool call from the response that asked for it to its `tool_output`.

A time is the entry's: when the log appended the event. A call whose end is not on the page
runs to its last event (`open`); one that waits for a human's approval is `waiting`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from eventlog import Entry, EventLog, RunInfo
from eventlog.adk import upcast_data

from .model import kind_of, short
from .spans import Prices, Span, Totals, Waterfall, llm_totals, placed, run_totals_events_max

__all__ = ["session_totals", "session_waterfall"]

_ADK = "adk.event"
_ITEM = "openai_agents.item"
_RUN = "openai_agents."
_RUN_KINDS = ("run_started", "run_state", "model_response", "tool_output", "run_finished", "run_failed")
_CALLS = ("function_call", "custom_tool_call", "computer_call", "local_shell_call", "shell_call", "apply_patch_call")
"""Items of a call the SDK runs (its output comes as an item of the same type with `_output`)."""

_TIMED_BY = {
    "adk": "when the session service stored each ADK event: a model's bar runs from the event "
    "before it in its invocation, a tool's from its call to its response",
    "items": "when the session stored each item: the SDK stores a model's response with the "
    "outputs of the tools it called, so a model's bar holds those tools' time and a tool's is "
    "0 ms; items carry no tokens",
    "run": "when the checkpointer recorded each model response and tool output: a model's bar "
    "runs from the checkpoint taken before the call",
}


def session_waterfall(entries: Sequence[Entry], first_page: bool = False, prices: Prices | None = None) -> Waterfall:
    """A window of an ADK session, an Agents SDK session or a checkpointed run as spans on its
    time axis; a model call's cost at `prices`, when given. `first_page`: the window starts at
    the run's start, so a call's output without its call on the page did not begin on an
    earlier one."""
    kinds = {kind_of(e.event) for e in entries}
    if _ADK in kinds:
        return placed(_adk(entries, first_page, prices), entries, timed_by=_TIMED_BY["adk"])
    if _ITEM in kinds:
        return placed(_items(entries, first_page), entries, timed_by=_TIMED_BY["items"], tokens=False)
    return placed(_run(entries, first_page, prices), entries, timed_by=_TIMED_BY["run"])


def session_totals(log: EventLog[Any], run_id: str, info: RunInfo, prices: Prices | None = None) -> Totals | None:
    """The calls of the whole session or run added up (one read of it), or None for one of more
    than `spans.run_totals_events_max` events."""
    if info.head - info.base > run_totals_events_max:
        return None
    entries = list(log.read(run_id, info.base, info.head, run_number=info.number))
    return session_waterfall(entries, first_page=True, prices=prices).totals


def _tool(name: str, arguments: Any, entry: Entry) -> Span:
    """A tool call's span begun at `entry`, open until its output."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    text = text[1:-1] if text.startswith("{") and text.endswith("}") else text
    return Span(
        "tool", f"{name}({short(text, 60)})", entry.offset, entry.time_ns, entry.time_ns, totals=Totals(tool_calls=1)
    )


def _ended(span: Span, entry: Entry, status: str = "completed") -> None:
    span.end_ns, span.end_offset, span.status = max(span.end_ns, entry.time_ns), entry.offset, status


def _unmatched(label: str, entry: Entry, first_page: bool) -> Span:
    """A tool call's output whose call is not on the page: an instant at it, begun on an earlier
    page unless the page is the run's first."""
    span = Span("tool", label, entry.offset, entry.time_ns, entry.time_ns, totals=Totals(tool_calls=1))
    span.begun_before = not first_page
    _ended(span, entry)
    return span


# -- an ADK session ------------------------------------------------------------------------------


def _adk_data(event: Any) -> dict[str, Any]:
    data = getattr(event, "data", None)
    data = data if isinstance(data, dict) else {}
    try:
        return upcast_data(data, int(getattr(event, "layout", 1)))
    except ValueError:  # a layout newer than this version reads: its fields as they are
        return data


def _parts(data: dict[str, Any]) -> list[dict[str, Any]]:
    content = data.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p for p in parts or [] if isinstance(p, dict)]


def _tokens(data: dict[str, Any]) -> tuple[int, int]:
    """(input, output) tokens of an ADK event's `usage_metadata`: the prompt's and the tool-use
    prompt's in, the candidates' and the thoughts' out (their sum is its `total_token_count`)."""
    usage = data.get("usage_metadata")
    if not isinstance(usage, dict):
        return 0, 0

    def n(key: str) -> int:
        value = usage.get(key)
        return value if type(value) is int and value > 0 else 0

    return n("prompt_token_count") + n("tool_use_prompt_token_count"), n("candidates_token_count") + n(
        "thoughts_token_count"
    )


def _is_response(author: str, data: dict[str, Any]) -> bool:
    """An agent's event with the model's content, usage or error: a model's response."""
    if author == "user" or data.get("partial"):
        return False
    content = data.get("content")
    role = content.get("role") if isinstance(content, dict) else None
    return role == "model" or "usage_metadata" in data or "error_code" in data


def _adk(entries: Sequence[Entry], first_page: bool, prices: Prices | None) -> list[Span]:
    spans: list[Span] = []
    turns: dict[str, Span] = {}
    """Each invocation's turn, by invocation id."""
    last_ns: dict[tuple[str, str], int] = {}
    """The time of the latest event of each invocation, and of each branch of one (a parallel agent's)."""
    calls: dict[str, tuple[Span, str]] = {}
    """Open tool calls and their invocation, by call id (or name, for a call without one)."""
    waiting: set[str] = set()
    """Ids of long-running calls: their response comes from outside (a human, a client)."""
    answered: dict[str, bool] = {}
    """Each invocation's last event is the model's answer (a response with no call in it)."""
    for entry in entries:
        if kind_of(entry.event) != _ADK:
            continue
        data, author = _adk_data(entry.event), str(getattr(entry.event, "author", ""))
        invocation, branch = str(getattr(entry.event, "invocation_id", "")), str(data.get("branch") or "")
        turn = turns.get(invocation)
        if turn is None:
            said = "".join(str(p["text"]) for p in _parts(data) if isinstance(p.get("text"), str))
            label = f"{short(said, 60)} · {invocation[:10]}" if author == "user" and said else invocation[:12]
            begun = not first_page and not turns and author != "user"
            turn = turns[invocation] = Span(
                "turn", label, entry.offset, entry.time_ns, entry.time_ns, begun_before=begun
            )
            spans.append(turn)
        _ended(turn, entry, "failed" if data.get("error_code") else "completed")
        called = False
        if _is_response(author, data):
            model = str(data.get("model_version") or "")
            start = last_ns.get((invocation, branch), last_ns.get((invocation, ""), entry.time_ns))
            llm = Span("llm", f"{author} · {model}" if model else author, entry.offset, start, entry.time_ns)
            _ended(llm, entry, "failed" if data.get("error_code") else "completed")
            llm.totals = llm_totals(model, *_tokens(data), prices)
            llm.totals.failed = int(llm.status == "failed")
            spans.append(llm)
        waiting.update(str(i) for i in data.get("long_running_tool_ids") or [])
        for part in _parts(data):
            if isinstance(call := part.get("function_call"), dict):
                span = _tool(str(call.get("name", "")), call.get("args") or {}, entry)
                calls[str(call.get("id") or call.get("name", ""))] = span, invocation
                spans.append(span)
            if isinstance(response := part.get("function_response"), dict):
                found = calls.pop(str(response.get("id") or response.get("name", "")), None)
                if found is None:
                    spans.append(_unmatched(str(response.get("name", "")), entry, first_page))
                else:
                    _ended(found[0], entry)
            called = called or "function_call" in part or "function_response" in part
        answered[invocation] = _is_response(author, data) and not called and not data.get("error_code")
        last_ns[(invocation, branch)] = last_ns[(invocation, "")] = entry.time_ns
    for key, (span, invocation) in calls.items():  # open: its response is not on the page
        span.status = "waiting" if key in waiting else "running"
        if span.status == "waiting" and turns[invocation].status == "completed":
            turns[invocation].status = "waiting"
    last = next(reversed(turns), None)
    if last is not None and turns[last].status == "completed" and not answered[last]:
        turns[last].end_offset, turns[last].status = None, "running"  # the page's last turn, not answered yet
    return spans


# -- an Agents SDK session -------------------------------------------------------------------------


def _item(event: Any) -> dict[str, Any]:
    item = getattr(event, "item", None)
    return item if isinstance(item, dict) else {}


def _role(item: dict[str, Any]) -> str:
    """`user` (the input: a user's, system's or developer's message), `model` (what the model
    answered: a message, a call, reasoning), or `output` (a call's output)."""
    kind = item.get("type")
    if kind in (None, "message") and "role" in item:
        return "model" if item["role"] == "assistant" else "user"
    if isinstance(kind, str) and kind.endswith("_output"):
        return "output"
    return "model"


def _said(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _response_label(items: list[dict[str, Any]]) -> str:
    said = " ".join(t for i in items if i.get("type") in (None, "message") and (t := _said(i)))
    called = [str(i.get("name") or i.get("type", "")) for i in items if i.get("type") in _CALLS]
    parts = [f"“{short(said, 50)}”"] if said else []
    parts += [f"calls {', '.join(called)}"] if called else []
    return " · ".join(parts) or ", ".join(sorted({str(i.get("type")) for i in items}))


def _items(entries: Sequence[Entry], first_page: bool) -> list[Span]:
    spans: list[Span] = []
    calls: dict[str, Span] = {}
    turns: list[Span] = []
    response: list[dict[str, Any]] = []
    """The items of the model's response being read (none: the last item was not the model's)."""
    before: Entry | None = None
    """The item stored before this one, on the page."""
    answered, llm = False, 0
    for entry in entries:
        if kind_of(entry.event) != _ITEM:
            continue
        item, previous = _item(entry.event), before
        role, before = _role(item), entry
        asking = previous is not None and _role(_item(previous.event)) == "user"
        if (role == "user" and not asking) or not turns:  # a turn's first input item, or the page's first item
            label = (short(_said(item), 60) or "input") if role == "user" else "a turn"
            begun = role != "user" and not first_page
            turns.append(Span("turn", label, entry.offset, entry.time_ns, entry.time_ns, begun_before=begun))
            spans.append(turns[-1])
        _ended(turns[-1], entry)
        answered = role == "model" and item.get("type") in (None, "message") and bool(_said(item))
        if role != "model":
            response = []
        elif response and previous is not None and previous.time_ns == entry.time_ns:
            response.append(item)  # one more item of the same response, stored with it
            _ended(spans[llm], entry)
            spans[llm].label = _response_label(response)
        else:
            response, llm = [item], len(spans)
            start = entry.time_ns if previous is None else previous.time_ns
            spans.append(
                Span("llm", _response_label(response), entry.offset, start, entry.time_ns, totals=Totals(llm_calls=1))
            )
            _ended(spans[llm], entry)
        call_id = str(item.get("call_id", ""))
        if item.get("type") in _CALLS:
            name = str(item.get("name") or str(item["type"]).removesuffix("_call"))
            calls[call_id] = _tool(name, item.get("arguments", item.get("action", "")), entry)
            spans.append(calls[call_id])
        elif role == "output":
            found = calls.pop(call_id, None)
            if found is None:
                spans.append(_unmatched(call_id, entry, first_page))
            else:
                _ended(found, entry)
    if turns and (calls or not answered):  # the page's last turn has no answer yet: open
        turns[-1].end_offset, turns[-1].status = None, "running"
    return spans


# -- a checkpointed Agents SDK run -------------------------------------------------------------------


def _run(entries: Sequence[Entry], first_page: bool, prices: Prices | None) -> list[Span]:
    spans: list[Span] = []
    calls: dict[str, Span] = {}
    attempt: Span | None = None
    before: Entry | None = None
    for entry in entries:
        event, kind = entry.event, kind_of(entry.event).removeprefix(_RUN)
        if kind not in _RUN_KINDS:
            continue  # a decision on a call (`approval`) is no span: the call waits until its output
        previous, before = before, entry
        if attempt is None or attempt.end_offset is not None:  # an attempt begins
            if kind == "run_started":
                label, begun = f"run · {getattr(event, 'agent', '')}", False
            else:
                label, begun = ("run resumed", False) if attempt is not None else ("run", not first_page)
            attempt = Span("run", label, entry.offset, entry.time_ns, entry.time_ns, begun_before=begun)
            spans.append(attempt)
        attempt.end_ns = entry.time_ns
        if kind == "model_response":
            start = entry.time_ns if previous is None else previous.time_ns
            llm = Span("llm", str(getattr(event, "agent", "")) or "model", entry.offset, start, entry.time_ns)
            _ended(llm, entry)
            tokens = int(getattr(event, "input_tokens", 0)), int(getattr(event, "output_tokens", 0))
            llm.totals = llm_totals("", *tokens, prices)  # the response names no model
            spans.append(llm)
            for item in getattr(event, "output", None) or []:
                if isinstance(item, dict) and item.get("type") in _CALLS:
                    name = str(item.get("name") or str(item["type"]).removesuffix("_call"))
                    span = calls[str(item.get("call_id", ""))] = _tool(name, item.get("arguments", ""), entry)
                    spans.append(span)
        elif kind == "tool_output":
            found = calls.pop(str(getattr(event, "call_id", "")), None)
            if found is None:
                spans.append(_unmatched(str(getattr(event, "tool", "")), entry, first_page))
            else:
                _ended(found, entry)
        elif kind == "run_state":
            asked = {
                str(i.get("call_id", "")) for i in getattr(event, "interruptions", None) or [] if isinstance(i, dict)
            }
            for call_id in list(calls):
                if call_id in asked:
                    calls[call_id].status = "waiting"
                else:  # the state moved past a call with no output recorded (a handoff): it holds its output
                    _ended(calls.pop(call_id), entry)
            if asked:
                _ended(attempt, entry, "waiting")
        elif kind in ("run_finished", "run_failed"):
            _ended(attempt, entry, "completed" if kind == "run_finished" else "failed")
    return spans
