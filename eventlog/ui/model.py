"""What the UI shows, read through eventlog's public API only.

A run's summary for the runs list, a window of its events (a page of the timeline) and
which ways to read it suit the run (readings.py draws them), the state at an offset and
the diff of two, the prompt of an LLM call. States come from `state_at` (or from the run's
view, for a run an integration wrote) and are shown as plain data.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import msgspec

from eventlog import Checkpoint, Entry, EventLog, EventLogError, RunInfo
from eventlog import events as ev
from eventlog.agent.readers import reducer_of
from eventlog.diff import diff_offsets
from eventlog.errors import UnknownRunError
from eventlog.views import RunView, view_for_run, view_of, waiting

__all__ = [
    "RunPage",
    "RunSummary",
    "Window",
    "diff_doc",
    "fields_shown",
    "kind_of",
    "prompt_of",
    "state_doc",
    "window",
]

page_events = 200
"""Events on one page of a run's timeline."""
first_screen_events = 40
"""Events of a page drawn in the first answer of a run's page, around the selected one: a
screen's worth. The page asks for the rest of its page once it is painted."""
runs_page_max = 200
"""Runs on one page of the runs list."""
history_rows_max = 50
"""Checkpoints of an integration's run listed in a page of its Checkpoints tab, newest first."""
history_pages_max = 2_000
"""The deepest page of that tab: a page is read with every newer one (`RunView.history` gives the newest)."""
short_chars_max = 160
"""Longest one-line rendering of a value in a row."""
diff_items_shown_max = 100
"""Keys and messages of a diff listed in the page (the JSON has them all)."""
json_inline_bytes_max = 512 * 1024
"""A state or diff longer than this as JSON is not put in the page: the raw JSON link has it."""

_CONVERSATION_KINDS = ("turn.", "message.", "llm.", "tool.")
_GRAPH_KINDS = ("step.", "superstep.")
_SPAN_KINDS = ("run.", "turn.", "step.", "llm.", "tool.")
_SESSION_SPAN_KINDS = {"adk.event", "openai_agents.item", "openai_agents.model_response", "openai_agents.tool_output"}
"""Events of an ADK session, an Agents SDK session or a checkpointed run that ui/session_spans.py draws."""
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


def _json_bytes_capped(value: Any, cap: int) -> int:
    """About the length of `value` as JSON, counted item by item and stopped once over `cap`:
    a state of 50,000 messages is never encoded whole to learn that it is too long to show."""
    if isinstance(value, dict):
        total = 1 + max(len(value), 1)  # the braces, the commas between items
        for k, v in value.items():
            total += len(msgspec.json.encode(str(k))) + 1 + _json_bytes_capped(v, cap - total)
            if total > cap:
                break
        return total
    if isinstance(value, list):
        total = 1 + max(len(value), 1)  # the brackets, the commas between items
        for v in value:
            total += _json_bytes_capped(v, cap - total)
            if total > cap:
                break
        return total
    return len(msgspec.json.encode(value))


def pretty_or_none(value: Any) -> tuple[str | None, int]:
    """(`pretty(value)`, or None when its JSON is over `json_inline_bytes_max`; its size in bytes,
    or `json_inline_bytes_max + 1` for one over: what is too long to show is not encoded whole)."""
    if _json_bytes_capped(value, json_inline_bytes_max) > json_inline_bytes_max:
        return None, json_inline_bytes_max + 1
    raw = msgspec.json.encode(value)
    if len(raw) > json_inline_bytes_max:
        return None, json_inline_bytes_max + 1
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
    """The run's last activity: the commit time of its last event, or its creation when later
    (a run with no events, a fork with none of its own yet)."""
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
    return kind_of(log.entry(info.run_id, info.base + 1, run_number=info.number).event)


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


status_lookback_events = 8
"""Events read back from a run's head for its status, past values edited by hand."""


def summary_of(log: EventLog[Any], info: RunInfo) -> RunSummary:
    """The runs-list row of one run: three reads, however long the run."""
    first = _first_kind(log, info)
    view = view_of(first) if first is not None else view_for_run(log, info.run_id, run_number=info.number)
    if info.head <= info.base:
        return RunSummary(info, run_kind(first, view), "empty", info.created_ns, view)
    lo = max(info.base, info.head - status_lookback_events)  # the life `info` names
    recent = list(log.read(info.run_id, lo, info.head, run_number=info.number))
    status = "" if view is not None else last_status(recent)
    return RunSummary(info, run_kind(first, view), status, max(recent[-1].time_ns, info.created_ns), view)


fork_names_tried_max = 100
"""Default names a fork form tries (`RUN-fork-AT`, then `-2`, `-3`, …) before it leaves the choice to the user."""


def free_fork_name(log: EventLog[Any], run_id: str, at: int) -> str:
    """The fork form's default name: `RUN-fork-AT`, or the first of `RUN-fork-AT-2`, `-3`, …
    that no run holds yet (so that forking twice at one offset is not refused)."""
    first = f"{run_id}-fork-{at}"
    for n in range(1, fork_names_tried_max + 1):
        name = first if n == 1 else f"{first}-{n}"
        try:
            log.run_info(name)
        except UnknownRunError:
            return name
        except EventLogError:  # a name too long to be a run id: the user picks one
            return first
    return first


def forks_of(log: EventLog[Any], run_id: str, *, run_number: int | None = None) -> list[RunInfo]:
    """The runs forked from `run_id` (a scan of every run's info); with `run_number`, of that life
    of it (RunReplacedError when the run was made again meanwhile: a number is never given twice,
    so the same life before and after the scan is the same life throughout)."""
    out = []
    for other in log.runs():
        try:
            info = log.run_info(other)
        except UnknownRunError:
            continue
        if info.parent == run_id:
            out.append(info)
    if run_number is not None:
        log.run_info(run_id, run_number=run_number)
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
    info = log.run_info(run_id)
    forks = forks_of(log, run_id, run_number=info.number)
    return RunPage(summary_of(log, info), forks, log.checkpoints.list(run_id, run_number=info.number))


class Window(msgspec.Struct):
    """The events of a run with offsets in (after, upto]."""

    run_id: str
    base: int
    head: int
    after: int
    upto: int
    entries: list[Entry]
    filtered: bool = False
    """The entries are those of (after, upto] that a filter matched, not all of them."""

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


def first_screen(entries: list[Entry], at: int, size: int = first_screen_events) -> list[Entry]:
    """The `size` entries of a page drawn first: those around offset `at` (the selected event,
    which the page scrolls to), or all of them when there are no more."""
    if len(entries) <= size:
        return entries
    i = next((k for k, e in enumerate(entries) if e.offset >= at), len(entries) - 1)
    lo = max(0, min(i - size // 2, len(entries) - size))
    return entries[lo : lo + size]


def ways_to_read(page: RunPage, entries: Sequence[Entry], view_chat: bool = False) -> list[str]:
    """The ways to read the run: `conversation`, `steps`, `waterfall`, `timeline`, `checkpoints`, best first.

    `view_chat`: the view's state of an integration's run holds messages."""
    kinds = {kind_of(e.event) for e in entries}
    out = []
    if page.view is None:
        if page.summary.kind == "conversation" or any(k.startswith(_CONVERSATION_KINDS) for k in kinds):
            out.append("conversation")
        if page.summary.kind == "graph" or any(k.startswith(_GRAPH_KINDS) for k in kinds):
            out.append("steps")
        if any(k.startswith(_SPAN_KINDS) for k in kinds):  # what ui/spans.py draws
            out.append("waterfall")
        out.append("timeline")
        out.append("checkpoints")
    else:
        out += ["conversation"] if view_chat else []
        thread = any(k in ("langgraph.checkpoint", "langgraph.writes") for k in kinds)
        out += ["steps", "waterfall"] if thread else []
        out += ["waterfall"] if kinds & _SESSION_SPAN_KINDS else []
        out += ["checkpoints", "timeline"]
    return out


# -- states and diffs --------------------------------------------------------------------------


def state_of(log: EventLog[Any], run_id: str, offset: int, view: RunView | None) -> Any:
    """The run's state after its first `offset` events (plain data from the view, for an integration's run)."""
    if view is not None:
        return view.state(log, run_id, offset)
    return log.state_at(run_id, offset, reducer=reducer_of(log, run_id))


waiting_value_shown_max = 2_000
"""The most characters of a waiting question's value shown in the page (the state has it all)."""


class Waiting(msgspec.Struct, frozen=True):
    """A question the run waits for a human to answer (a LangGraph `interrupt()` not resumed)."""

    node: str | None
    value: str
    """The value asked with, as indented JSON, cut at `waiting_value_shown_max` characters."""
    resumable: bool = False
    """The UI can answer it: a run of the standard kinds (`Resumed`, as `Graph.resume(value=)`
    writes), or a LangGraph thread that waits on one interrupt (`EventLogSaver.answer`)."""
    framework: str = ""
    """`langgraph` for a LangGraph thread's question (see ui/answers.py)."""
    answer: str | None = None
    """An answer stored that the run has not taken yet, as indented JSON (`eventlog.views.answered`)."""


def _asked(state: Any, entry: Entry | None) -> list[dict[str, Any]]:
    """What a run of the standard kinds waits for: its state's pending interrupt (when the state
    is at hand), else the event at the offset when it is the interrupt."""
    if isinstance(state, dict) and "status" in state:
        if state.get("status") != "paused":
            return []
        asked = state.get("interrupt") or {}
        nodes = state.get("paused_nodes") or []
        return [{"node": ", ".join(nodes) or None, "value": asked, "nodes": list(nodes)}]
    if entry is not None and isinstance(entry.event, ev.Interrupted):
        e = entry.event
        value = {"reason": e.reason, "payload": e.payload}
        return [{"node": ", ".join(e.nodes) or None, "value": value, "nodes": list(e.nodes)}]
    return []


def waiting_at(log: EventLog[Any], run_id: str, offset: int, view: RunView | None, state: Any = None) -> list[Waiting]:
    """What the run waits for from a human after its first `offset` events: an integration's
    through its view (eventlog.views.waiting); a run of the standard kinds, the interrupt its
    state (`state`, the `state_doc` state at `offset`, when at hand) or its event at `offset`
    holds."""
    out: list[Waiting] = []
    if view is None:
        entry = None
        if state is None and offset > 0:
            info = log.run_info(run_id)
            entry = log.entry(run_id, offset, run_number=info.number) if info.base < offset <= info.head else None
        asked = _asked(state, entry)
    else:
        asked = waiting(view, log, run_id, offset)
    for one in asked:
        text = pretty(fields_shown(one.get("value")))
        if len(text) > waiting_value_shown_max:
            text = text[:waiting_value_shown_max] + "…"
        node = one.get("node")
        out.append(Waiting(node if isinstance(node, str) else None, text, view is None))
    return out


edit_bytes_max = 128 * 1024
"""The longest values (as JSON) the fork form offers to edit."""


def editable_values(state: Any, view: RunView | None) -> str | None:
    """The values of a state of the standard kinds (`AgentState.values`) as indented JSON, for
    the fork form to edit; None for an integration's run, a state without values, or values
    over `edit_bytes_max` as JSON."""
    if view is not None or not isinstance(state, dict) or not isinstance(state.get("values"), dict):
        return None
    raw = msgspec.json.encode(state["values"])
    return msgspec.json.format(raw, indent=2).decode() if len(raw) <= edit_bytes_max else None


def state_doc(log: EventLog[Any], run_id: str, offset: int, view: RunView | None) -> dict[str, Any]:
    """What `eventlog state RUN --at OFFSET --json` prints (once encoded)."""
    state = fields_shown(state_of(log, run_id, offset, view))
    return {"run_id": run_id, "offset": offset, "checkpoint_id": None, "state": state}


def diff_doc(log: EventLog[Any], run_id: str, a: int, b: int, view: RunView | None) -> dict[str, Any]:
    """What `eventlog diff RUN A B --json` prints for two offsets; for an integration's run, its
    view's messages are diffed message by message (`messages_apart`)."""
    changes = diff_offsets(log, run_id, a, b, view, None if view is not None else reducer_of(log, run_id))
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
    """The status a run has after `event`, as the runs list shows it; "" for an event that leaves
    it as it was (values edited by hand: a paused run edited, or forked with an edit, still waits)."""
    kind = kind_of(event)
    return "" if kind == "state.updated" else _STATUS_AFTER.get(kind, "running")


def last_status(entries: list[Entry], default: str = "running") -> str:
    """The status after the last of `entries` that sets one (`default` when none does)."""
    return next((s for e in reversed(entries) if (s := status_after(e.event))), default)
