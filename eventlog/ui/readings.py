"""The ways to read a window of a run's events: timeline rows, a chat, supersteps with their nodes.

Each takes the entries of a window (and, for the timeline, the run's checkpoints and forks)
and returns plain records the templates draw; nothing here reads the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from eventlog import Checkpoint, Entry, Event, RunInfo
from eventlog import events as ev

from .model import kind_of, pretty, short

__all__ = [
    "Bubble",
    "NodeRun",
    "Row",
    "Superstep",
    "duration",
    "message_bubble",
    "summarize",
    "supersteps",
    "timeline",
    "transcript",
    "view_transcript",
]


# -- the timeline ------------------------------------------------------------------------------


def _args(arguments: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={short(v, 40) if not isinstance(v, str) else short(msgspec.json.encode(v).decode(), 40)}"
        for k, v in arguments.items()
    )


def _calls(tool_calls: Iterable[Any]) -> str:
    return ", ".join(f"{c.name}({_args(c.arguments)})" for c in tool_calls)


def summarize(event: Event) -> str:
    """One line telling what an event says."""
    match event:
        case ev.RunStarted(input=values, next_nodes=nodes, graph=graph):
            parts = (f"graph {graph}" if graph else "", f"input {short(values, 80)}" if values else "")
            return " · ".join(p for p in (*parts, f"next: {', '.join(nodes)}" if nodes else "") if p)
        case ev.RunCompleted(output=output):
            return "" if output is None else f"output {short(output)}"
        case ev.RunFailed(error=error, node=node) | ev.StepFailed(error=error, node=node):
            return (f"{node}: " if node else "") + error
        case ev.TurnStarted(turn=turn) | ev.TurnCompleted(turn=turn):
            return f"turn {turn}"
        case ev.TurnFailed(turn=turn, error=error):
            return f"turn {turn}: {error}"
        case ev.UserMessage(content=content):
            return short(content)
        case ev.AssistantMessage(content=content, tool_calls=calls):
            return " · ".join(p for p in (short(content), f"calls {_calls(calls)}" if calls else "") if p)
        case ev.LLMCallStarted(model=model, context_messages=n, messages=extra):
            return f"{model} · {n} messages" + (f" + {len(extra)} more" if extra else "")
        case ev.LLMCallCompleted(model=model, output=output):
            return f"{model} → " + (
                f"calls {_calls(output.tool_calls)}" if output.tool_calls else short(output.content)
            )
        case ev.LLMCallFailed(model=name, error=error) | ev.ToolCallFailed(tool=name, error=error):
            return f"{name}: {error}"
        case ev.ToolCallStarted(tool=tool, arguments=arguments):
            return f"{tool}({_args(arguments)})"
        case ev.ToolCallCompleted(tool=tool, output=output):
            return f"{tool} → {short(output)}"
        case ev.StepStarted(node=node, superstep=superstep):
            return f"{node} · superstep {superstep}"
        case ev.StepCompleted(node=node, update=update):
            return f"{node} → {short(update)}"
        case ev.SuperstepCompleted(superstep=superstep, next_nodes=nodes):
            return f"superstep {superstep} → " + (", ".join(nodes) if nodes else "end")
        case ev.StateUpdated(values=values, as_node=node):
            return (f"as {node}: " if node else "") + short(values)
        case ev.Interrupted(nodes=nodes, reason=reason, payload=payload):
            return " · ".join(p for p in (reason, ", ".join(nodes), short(payload, 80) if payload else "") if p)
        case ev.Resumed(value=value):
            return f"value {short(value)}"
    return _integration_summary(event)


def _compact(value: Any, depth: int = 0) -> Any:
    """`value` as plain data for one line: bytes as their size, structs as their set fields."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value):,} bytes>"
    if depth > 3:
        return "…"
    if isinstance(value, msgspec.Struct):
        value = {f: getattr(value, f) for f in type(value).__struct_fields__}
    if isinstance(value, dict):
        return {str(k): _compact(v, depth + 1) for k, v in value.items() if v not in (None, "", [], {})}
    if isinstance(value, (list, tuple)):
        return [_compact(v, depth + 1) for v in value[:20]]
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def _clip_id(text: str) -> str:
    return text if len(text) <= 13 else text[:12] + "…"


def task_node(task_path: str) -> str:
    """The node a LangGraph task ran, from its path (`~__pregel_pull, review`), else the path."""
    parts = [p.strip() for p in task_path.split(",")]
    return parts[1] if len(parts) >= 2 and parts[0].endswith("__pregel_pull") and parts[1] else task_path


def _integration_summary(event: Event) -> str:
    """One line for an event of an integration's kinds: a LangGraph checkpoint or writes by what
    they change (not their serialized values), any other by its fields, bytes as their size."""
    kind = kind_of(event)
    if kind == "langgraph.checkpoint":
        cid, parent = str(getattr(event, "checkpoint_id", "")), getattr(event, "parent_id", None)
        set_ = sorted(getattr(event, "chunks", {}) or {})
        grew = sorted(getattr(event, "tails", {}) or {})
        parts = [f"checkpoint {_clip_id(cid)}" + (f" ← {_clip_id(str(parent))}" if parent else "")]
        if getattr(event, "fork", False):  # it stands alone: the first, or made from an older one
            parts.append("a branch: every channel" if parent else "every channel")
        if set_:
            parts.append("sets " + ", ".join(set_))
        if grew:
            parts.append("appends to " + ", ".join(grew))
        return " · ".join(parts)
    if kind == "langgraph.writes":
        node = task_node(str(getattr(event, "task_path", "")))
        channels = [str(getattr(w, "channel", "")) for w in getattr(event, "writes", [])]
        on = _clip_id(str(getattr(event, "checkpoint_id", "")))
        return f"{node or 'a task'} writes " + (", ".join(channels) or "nothing") + f" · on {on}"
    return short(_compact(event))


def family(kind: str) -> str:
    """The colour family of a kind: its first word (`llm`), with failures apart."""
    if kind.endswith(".failed"):
        return "failed"
    return kind.split(".", 1)[0]


class Row(msgspec.Struct):
    """One event of the timeline."""

    offset: int
    time_ns: int
    kind: str
    family: str
    summary: str
    duration_ms: float | None = None
    tokens: str = ""
    """Input → output tokens of an LLM call."""
    checkpoint: str = ""
    """Id of a checkpoint at this offset (the newest), or ''."""
    forks: list[str] = []
    """Runs forked right after this event."""


class _Durations:
    """Start times of the steps, turns and calls seen so far, to time their ends."""

    def __init__(self) -> None:
        self.started: dict[tuple[str, Any], int] = {}

    def of(self, entry: Entry) -> float | None:
        """How long the step, turn or call that `entry` ends took (None: not an end, or its start not seen)."""
        key: tuple[str, Any]
        match entry.event:
            case ev.StepStarted(node=node, superstep=n) | ev.StepCompleted(node=node, superstep=n):
                key = ("step", (node, n))
            case ev.StepFailed(node=node, superstep=n):
                key = ("step", (node, n))
            case ev.TurnStarted(turn=n) | ev.TurnCompleted(turn=n) | ev.TurnFailed(turn=n):
                key = ("turn", n)
            case (
                ev.ToolCallStarted(call_id=call) | ev.ToolCallCompleted(call_id=call) | ev.ToolCallFailed(call_id=call)
            ):
                key = ("tool", call)
            case ev.LLMCallStarted(call_id=call) | ev.LLMCallCompleted(call_id=call) | ev.LLMCallFailed(call_id=call):
                key = ("llm", call)
            case _:
                return None
        if kind_of(entry.event).endswith(".started"):
            self.started[key] = entry.time_ns
            return None
        begun = self.started.pop(key, None)
        latency: float = getattr(entry.event, "latency_ms", 0.0)
        if latency:
            return latency
        return None if begun is None else (entry.time_ns - begun) / 1e6


def timeline(entries: Sequence[Entry], checkpoints: Sequence[Checkpoint[Any]], forks: Sequence[RunInfo]) -> list[Row]:
    """The rows of a window, with the checkpoints and forks at their offsets."""
    at_offset = {cp.offset: cp.checkpoint_id for cp in checkpoints}
    forked: dict[int, list[str]] = {}
    for info in forks:
        forked.setdefault(info.fork_offset, []).append(info.run_id)
    durations = _Durations()
    rows = []
    for entry in entries:
        e, k = entry.event, kind_of(entry.event)
        tokens = f"{e.input_tokens:,} → {e.output_tokens:,}" if isinstance(e, ev.LLMCallCompleted) else ""
        rows.append(
            Row(
                entry.offset,
                entry.time_ns,
                k,
                family(k),
                summarize(e),
                durations.of(entry),
                tokens,
                at_offset.get(entry.offset, ""),
                forked.get(entry.offset, []),
            )
        )
    return rows


# -- the transcript ----------------------------------------------------------------------------


class Bubble(msgspec.Struct):
    """One item of a chat transcript."""

    offset: int
    """The event's offset (-1: a message of a state, not an event)."""
    role: str
    """`user`, `assistant`, `system`, `tool` (a result), `tool-call`, `call` (an LLM call), `turn`, `approval`,
    `answer`, `error`, `event`."""
    text: str = ""
    calls: list[tuple[str, str]] = []
    """Tool calls asked for: (name, arguments as JSON)."""
    meta: str = ""
    """Model, tokens, latency, ... in one line."""
    payload: str = ""
    """Pretty JSON shown under the text (tool output, approval payload)."""


def duration(ms: float | None) -> str:
    """A duration in milliseconds, for people: `8.5 ms`, `120 ms`, `2.31 s`, `1.5 min` ('' for None)."""
    if ms is None:
        return ""
    if ms >= 60_000:
        return f"{ms / 60_000:.1f} min"
    if ms >= 1000:
        return f"{ms / 1000:.2f} s"
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


def _bubble(off: int, event: Event) -> Bubble | None:
    match event:
        case ev.TurnStarted(turn=turn):
            return Bubble(off, "turn", f"Turn {turn}")
        case ev.UserMessage(content=content):
            return Bubble(off, "user", content)
        case ev.AssistantMessage(content=content, tool_calls=calls):
            return Bubble(off, "assistant", content, [(c.name, pretty(c.arguments)) for c in calls])
        case ev.LLMCallStarted(model=model, context_messages=n, messages=extra):
            return Bubble(off, "call", model, meta=f"sent {n} messages" + (f" + {len(extra)} extra" if extra else ""))
        case ev.LLMCallCompleted(model=model, output=output, latency_ms=ms):
            asked = [(c.name, pretty(c.arguments)) for c in output.tool_calls]
            meta = f"{model} · {event.input_tokens:,} → {event.output_tokens:,} tokens · {duration(ms)}"
            return Bubble(off, "assistant", output.content, asked, meta)
        case ev.ToolCallStarted(tool=tool, arguments=arguments):
            return Bubble(off, "tool-call", f"{tool}({_args(arguments)})")
        case ev.ToolCallCompleted(tool=tool, output=output, latency_ms=ms):
            text = output if isinstance(output, str) and output else pretty(output)
            return Bubble(off, "tool", tool, meta=f"· {duration(ms)}", payload=text)
        case ev.Interrupted(reason=reason, payload=payload):
            return Bubble(off, "approval", reason or "paused for a human", payload=pretty(payload))
        case ev.Resumed(value=value):
            return Bubble(off, "answer", "resumed", payload=pretty(value))
        case ev.LLMCallFailed(error=error) | ev.ToolCallFailed(error=error) | ev.TurnFailed(error=error):
            return Bubble(off, "error", error, meta=kind_of(event))
        case ev.RunFailed(error=error) | ev.StepFailed(error=error):
            return Bubble(off, "error", error, meta=kind_of(event))
        case ev.TurnCompleted():
            return None  # the next turn's divider says enough
    return Bubble(off, "event", kind_of(event), meta=summarize(event))


def transcript(entries: Sequence[Entry]) -> list[Bubble]:
    """A window read as a conversation: messages, tool calls and results, approvals."""
    return [b for b in (_bubble(e.offset, e.event) for e in entries) if b is not None]


_ROLES = {
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "ai": "assistant",
    "tool": "tool",
    "system": "system",
}


def _call(call: Any) -> tuple[str, str]:
    if isinstance(call, dict):
        return str(call.get("name", "")), pretty(call.get("args", call.get("arguments", {})))
    return str(call), ""


def view_transcript(state: Any) -> list[Bubble] | None:
    """The messages of a view's state (plain data) as a chat, or None when it holds none.

    The messages are the state's `messages` (a WayFlow conversation) or its values'
    `messages` (the channel of a LangGraph chat). A message is a map with a `role` (or a
    `type`: `human`, `ai`, `tool`, `system`), a `content` and, for an assistant, its
    `tool_calls`; see `message_bubble`."""
    if not isinstance(state, dict):
        return None
    messages = state.get("messages")
    if messages is None and isinstance(state.get("values"), dict):
        messages = state["values"].get("messages")
    if not isinstance(messages, list):
        return None
    return [message_bubble(m) for m in messages]


def message_bubble(message: Any, offset: int = -1) -> Bubble:
    """One message (plain data: ours, a WayFlow or a LangChain message) as a chat bubble.

    A message is a map with a `role` (or a `type`: `human`, `ai`, `tool`, `system`), a
    `content` and, for an assistant, its `tool_calls` (maps with a name and arguments, or
    names); anything else shows as it is."""
    if not isinstance(message, dict):
        return Bubble(offset, "event", short(message))
    role = _ROLES.get(str(message.get("role") or message.get("type") or ""), "event")
    content = message.get("content", "")
    text = content if isinstance(content, str) else pretty(content)
    calls = [_call(c) for c in message.get("tool_calls") or []]
    name = str(message.get("name") or "")
    if role == "tool":
        return Bubble(offset, "tool", name, payload=text)
    return Bubble(offset, role, text, calls, meta=name if role == "event" else "")


# -- supersteps --------------------------------------------------------------------------------


class NodeRun(msgspec.Struct):
    """A node's run in a superstep."""

    node: str
    offset: int
    status: str = "running"
    """`running`, `completed` or `failed`."""
    update: str = ""
    error: str = ""
    duration_ms: float | None = None


class Superstep(msgspec.Struct):
    """A superstep of a graph run, or the events around them (`number` 0)."""

    number: int
    offset: int
    nodes: list[NodeRun] = []
    events: list[Row] = []
    """Events that are not a node's (a start, an interrupt, a hand edit, the end)."""
    next_nodes: list[str] | None = None
    """Where the graph goes after the superstep (None while it runs); `end` is the event's offset."""
    end: int = 0


def supersteps(entries: Sequence[Entry]) -> list[Superstep]:
    """A window read as a graph run: supersteps with their nodes, and the events between them."""
    out: list[Superstep] = []
    durations = _Durations()
    for entry in entries:
        e, off = entry.event, entry.offset
        took = durations.of(entry)
        if not isinstance(e, (ev.StepStarted, ev.StepCompleted, ev.StepFailed, ev.SuperstepCompleted)):
            if not out or out[-1].number != 0:
                out.append(Superstep(0, off))
            k = kind_of(e)
            out[-1].events.append(Row(off, entry.time_ns, k, family(k), summarize(e), took))
            continue
        if not out or out[-1].number != e.superstep or out[-1].next_nodes is not None:
            out.append(Superstep(e.superstep, off))
        group = out[-1]
        if isinstance(e, ev.SuperstepCompleted):
            group.next_nodes, group.end = list(e.next_nodes), off
            continue
        node = next((n for n in group.nodes if n.node == e.node and n.status == "running"), None)
        if node is None:
            node = NodeRun(e.node, off)
            group.nodes.append(node)
        node.offset = off
        if isinstance(e, ev.StepCompleted):
            node.status, node.update, node.duration_ms = "completed", pretty(e.update), took
        elif isinstance(e, ev.StepFailed):
            node.status, node.error, node.duration_ms = "failed", e.error, took
    return out
