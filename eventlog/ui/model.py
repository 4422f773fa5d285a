"""What the UI shows, read through eventlog's public API only.

A run's summary for the runs list, a window of its events (a page of the timeline) and
the readings of that window: rows of a timeline, a chat transcript, supersteps with their
nodes. States come from `state_at` (or from the run's view, for a run an
integration wrote) and are shown as plain data.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from eventlog import (
    Checkpoint,
    CorruptRecordError,
    Entry,
    Event,
    EventLog,
    RunInfo,
    UnknownKindError,
    UnknownRunError,
)
from eventlog import events as ev
from eventlog.cli import diff_states
from eventlog.views import RunView, view_for_run, view_of

__all__ = [
    "RunPage",
    "RunSummary",
    "Window",
    "diff_doc",
    "fields_shown",
    "kind_of",
    "prompt_of",
    "run_summaries",
    "state_doc",
    "summarize",
    "supersteps",
    "timeline",
    "transcript",
    "window",
]

page_events = 200
"""Events on one page of a run's timeline."""
runs_page_max = 500
"""Runs on one page of the runs list."""
short_chars_max = 160
"""Longest one-line rendering of a value in a row."""
diff_items_shown_max = 100
"""Keys and messages of a diff listed in the page (the JSON has them all)."""
json_inline_bytes_max = 512 * 1024
"""A state or diff longer than this as JSON is not put in the page: the raw JSON link has it."""

_CONVERSATION_KINDS = ("turn.", "message.", "llm.", "tool.")
_GRAPH_KINDS = ("step.", "superstep.")
_STATUS_AFTER = {
    "run.started": "running",
    "run.completed": "completed",
    "run.failed": "failed",
    "turn.failed": "failed",
    "turn.completed": "idle",
    "interrupted": "paused",
}


# -- plain data ------------------------------------------------------------------------------


def kind_of(event: Any) -> str:
    """The kind tag of an event (`llm.completed`)."""
    return str(type(event).__struct_config__.tag)


def fields_of(event: Any) -> dict[str, Any]:
    """An event's fields as plain data, defaults included."""
    return {f: msgspec.to_builtins(getattr(event, f)) for f in type(event).__struct_fields__}


def fields_shown(state: Any) -> Any:
    """A state's fields as a map, every field, defaults included, values as they are.

    Encoded as JSON it is the state `eventlog state --json` prints; nothing is converted
    until it is shown, so a state of 50,000 messages costs only the few the page lists."""
    if isinstance(state, msgspec.Struct):
        return {f: getattr(state, f) for f in type(state).__struct_fields__}
    return state


def short(value: Any, limit: int = short_chars_max) -> str:
    """One line of JSON (a string as it is), cut at `limit` characters."""
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    text = " ".join(text.split()) if "\n" in text else text
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty(value: Any) -> str:
    """JSON indented by two spaces, keys in their order."""
    return msgspec.json.format(msgspec.json.encode(value), indent=2).decode()


def pretty_or_none(value: Any) -> tuple[str | None, int]:
    """(`pretty(value)`, or None when its JSON is over `json_inline_bytes_max`; its size in bytes)."""
    raw = msgspec.json.encode(value)
    if len(raw) > json_inline_bytes_max:
        return None, len(raw)
    return msgspec.json.format(raw, indent=2).decode(), len(raw)


def when(ns: int) -> str:
    """A time in nanoseconds as ISO 8601 UTC, to the millisecond."""
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- runs -------------------------------------------------------------------------------------


class RunSummary(msgspec.Struct):
    """One row of the runs list."""

    info: RunInfo
    kind: str
    """`conversation`, `graph`, `events`, or the name of the integration's view."""
    status: str
    """Read from the last event: `running`, `completed`, `failed`, `paused`, `idle`, `empty` (or
    `unreadable`)."""
    last_ns: int
    """Commit time of the last event (the creation time of a run with none)."""
    view: RunView | None = None
    """The view of an integration's run (None: a run of the standard kinds)."""
    problem: str = ""
    """Why the run's events could not be read (a kind not registered, a damaged record)."""
    depth: int = 0
    """Depth in the fork tree shown (0: a run that is not a fork of a run on the page)."""
    children: list[str] = []


def _first_kind(log: EventLog[Any], info: RunInfo) -> str | None:
    if info.head <= info.base:
        return None
    return kind_of(log.entry(info.run_id, info.base + 1).event)


def run_kind(first_kind: str | None, view: RunView | None) -> str:
    if view is not None:
        return view.name
    if first_kind is None:
        return "events"
    if first_kind.startswith(_CONVERSATION_KINDS):
        return "conversation"
    if first_kind == "run.started" or first_kind.startswith(_GRAPH_KINDS):
        return "graph"
    return "events"


def summary_of(log: EventLog[Any], info: RunInfo) -> RunSummary:
    """The runs-list row of one run: three reads, however long the run."""
    first = _first_kind(log, info)
    view = view_of(first) if first is not None else view_for_run(log, info.run_id)
    if info.head <= info.base:
        return RunSummary(info, run_kind(first, view), "empty", info.created_ns, view)
    last = log.entry(info.run_id, info.head)
    status = "" if view is not None else status_after(last.event)
    return RunSummary(info, run_kind(first, view), status, last.time_ns, view)


def run_summaries(log: EventLog[Any], query: str = "", page: int = 0) -> tuple[list[RunSummary], int]:
    """(rows of one page of the runs list, number of runs matched).

    Runs are in id order, each fork right under the run it was forked from when both are
    on the page; `query` keeps the runs whose id holds it (case-insensitive)."""
    ids = log.runs()
    if query:
        ids = [r for r in ids if query.casefold() in r.casefold()]
    total = len(ids)
    chosen = ids[page * runs_page_max : (page + 1) * runs_page_max]
    rows: dict[str, RunSummary] = {}
    for run_id in chosen:
        try:
            info = log.run_info(run_id)
        except UnknownRunError:
            continue  # deleted since the list was read
        try:
            rows[run_id] = summary_of(log, info)
        except (UnknownKindError, CorruptRecordError) as exc:  # one run that does not read spoils no other
            rows[run_id] = RunSummary(info, "?", "unreadable", info.created_ns, problem=str(exc))
    for row in rows.values():
        parent = row.info.parent
        if parent in rows:
            rows[parent].children.append(row.info.run_id)
    ordered: list[RunSummary] = []

    def place(row: RunSummary, depth: int) -> None:
        row.depth = depth
        ordered.append(row)
        for child in row.children:
            place(rows[child], depth + 1)

    for row in rows.values():
        if row.info.parent not in rows:
            place(row, 0)
    return ordered, total


def forks_of(log: EventLog[Any], run_id: str) -> list[RunInfo]:
    """The runs forked from `run_id` (a scan of every run's info)."""
    out = []
    for other in log.runs():
        try:
            info = log.run_info(other)
        except UnknownRunError:
            continue
        if info.parent == run_id:
            out.append(info)
    return sorted(out, key=lambda i: (i.fork_offset, i.run_id))


# -- a run and a window of its events -----------------------------------------------------------


class RunPage(msgspec.Struct):
    """What the page of a run knows before it renders a window."""

    summary: RunSummary
    forks: list[RunInfo]
    checkpoints: list[Checkpoint[Any]]

    @property
    def view(self) -> RunView | None:
        return self.summary.view


def run_page(log: EventLog[Any], run_id: str) -> RunPage:
    summary = summary_of(log, log.run_info(run_id))
    return RunPage(summary, forks_of(log, run_id), log.checkpoints.list(run_id))


class Window(msgspec.Struct):
    """The events of a run with offsets in (after, upto]."""

    run_id: str
    base: int
    head: int
    after: int
    upto: int
    entries: list[Entry]

    @property
    def at_tail(self) -> bool:
        return self.upto >= self.head


def window_bounds(base: int, head: int, after: int | None, at: int | None, size: int = page_events) -> tuple[int, int]:
    """(after, upto) of the page to show: from `after` when given, else around `at`, else the last page."""
    if after is None:
        if at is None:
            after = head - size
        else:
            after = min(at - size // 2, head - size)
    after = max(base, min(after, max(head - 1, base)))
    return after, min(after + size, head)


def window(log: EventLog[Any], run_id: str, head: int, base: int, after: int | None, at: int | None) -> Window:
    lo, hi = window_bounds(base, head, after, at)
    entries = list(log.read(run_id, after=lo, upto=hi)) if hi > lo else []
    return Window(run_id, base, head, lo, hi, entries)


def readings(page: RunPage, entries: Sequence[Entry], view_chat: bool = False) -> list[str]:
    """The ways to read the run: `conversation`, `steps`, `timeline`, `checkpoints`, best first.

    `view_chat`: the view's state of an integration's run holds messages."""
    kinds = {kind_of(e.event) for e in entries}
    out = []
    if page.view is None:
        if page.summary.kind == "conversation" or any(k.startswith(_CONVERSATION_KINDS) for k in kinds):
            out.append("conversation")
        if page.summary.kind == "graph" or any(k.startswith(_GRAPH_KINDS) for k in kinds):
            out.append("steps")
        out.append("timeline")
        out.append("checkpoints")
    else:
        out += ["conversation"] if view_chat else []
        out += ["checkpoints", "timeline"]
    return out


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
    return short(fields_of(event))


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


# -- states and diffs --------------------------------------------------------------------------


def state_of(log: EventLog[Any], run_id: str, offset: int, view: RunView | None) -> Any:
    """The run's state after its first `offset` events (plain data from the view, for an integration's run)."""
    if view is not None:
        return view.state(log, run_id, offset)
    return log.state_at(run_id, offset)


def state_doc(log: EventLog[Any], run_id: str, offset: int, view: RunView | None) -> dict[str, Any]:
    """What `eventlog state RUN --at OFFSET --json` prints (once encoded)."""
    state = fields_shown(state_of(log, run_id, offset, view))
    return {"run_id": run_id, "offset": offset, "checkpoint_id": None, "state": state}


def diff_doc(log: EventLog[Any], run_id: str, a: int, b: int, view: RunView | None) -> dict[str, Any]:
    """What `eventlog diff RUN A B --json` prints for two offsets."""
    changes = diff_states(state_of(log, run_id, a, view), state_of(log, run_id, b, view))
    return {
        "run_id": run_id,
        "a": {"offset": a, "checkpoint_id": None},
        "b": {"offset": b, "checkpoint_id": None},
        **changes,
    }


def prompt_of(log: EventLog[Any], run_id: str, offset: int) -> tuple[ev.LLMCallStarted, list[Any]] | None:
    """(the LLM call, the messages it was sent) for an `llm.started` entry, else None.

    The prompt is the run's first `context_messages` messages, as the state before the call
    holds them, followed by the call's own extra messages."""
    event = log.entry(run_id, offset).event
    if not isinstance(event, ev.LLMCallStarted):
        return None
    before = log.state_at(run_id, offset - 1)
    sent = [*getattr(before, "messages", [])[: event.context_messages], *event.messages]
    return event, [msgspec.to_builtins(m) for m in sent]


def view_for(log: EventLog[Any], run_id: str) -> RunView | None:
    """The view of an integration's run, or None for a run of the standard kinds."""
    return view_for_run(log, run_id)


def status_after(event: Any) -> str:
    """The status a run has after `event`, as the runs list shows it."""
    return _STATUS_AFTER.get(kind_of(event), "running")
