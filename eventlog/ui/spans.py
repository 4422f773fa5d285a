"""A window of a run as a waterfall: its run, turns, steps, LLM calls and tool calls as spans on
a time axis, with their durations and token counts, and the totals of each span's children.

A span runs from its `.started` event to the event that ends it (`.completed`, `.failed`). The
time of an event is its commit time; an LLM or tool call that says its latency (`latency_ms`)
lasts that long, so calls committed in one batch still show their real lengths. A span whose
end is not on the page runs to the page's last event (`open`); one whose start is not on it
begins where its latency says, else at its end (and, on a page after the run's first, holds
what is on the page before it). Only `run_totals` reads the log: the run, to add up its calls.

Costs come from `Prices`, which the viewer is given (`eventlog ui --prices FILE`): events carry
tokens and a model's name, not what a call cost, and prices change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from eventlog import Entry, EventLog, RunInfo
from eventlog import events as ev

from .model import kind_of, short

__all__ = ["Prices", "Span", "Totals", "Waterfall", "llm_totals", "placed", "read_prices", "run_totals", "waterfall"]

_ORDER = {"run": 0, "turn": 1, "superstep": 1, "step": 2, "task": 2, "llm": 3, "tool": 4}
"""Which of two spans that start together holds the other (`superstep` and `task`: a LangGraph
thread's, `threads.thread_waterfall`)."""


Prices = dict[str, tuple[float, float]]
"""A model's name -> (USD per million input tokens, USD per million output tokens)."""


def read_prices(path: str | Path) -> Prices:
    """The prices in a JSON file: `{"MODEL": {"input": USD, "output": USD}, ...}`, each per
    million tokens. Raises ValueError naming what is wrong with it."""
    try:
        data = msgspec.json.decode(Path(path).read_bytes())
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    except msgspec.DecodeError as exc:
        raise ValueError(f"{path} is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f'{path}: give an object of models, {{"MODEL": {{"input": USD, "output": USD}}}}')
    prices: Prices = {}
    for model, price in data.items():
        if not isinstance(price, dict) or set(price) != {"input", "output"}:
            raise ValueError(f'{path}: model {model!r} needs exactly "input" and "output", USD per million tokens')
        pair = price["input"], price["output"]
        if not all(type(v) in (int, float) and math.isfinite(v) and v >= 0 for v in pair):
            raise ValueError(f"{path}: the prices of model {model!r} must be numbers of at least 0")
        prices[model] = (float(pair[0]), float(pair[1]))
    return prices


class Totals(msgspec.Struct):
    """What the LLM and tool calls under a span (or on a page) add up to."""

    llm_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    failed: int = 0
    cost_usd: float = 0.0
    """What the calls with a price cost (see `Prices`)."""
    unpriced: int = 0
    """LLM calls that used tokens of a model without a price."""

    def add(self, other: Totals) -> None:
        self.llm_calls += other.llm_calls
        self.tool_calls += other.tool_calls
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.failed += other.failed
        self.cost_usd += other.cost_usd
        self.unpriced += other.unpriced


def llm_totals(model: str, input_tokens: int, output_tokens: int, prices: Prices | None) -> Totals:
    """One LLM call's totals: its tokens and, at `prices`, its cost (unpriced: it used tokens of
    a model `prices` does not name, or of no model named)."""
    out = Totals(llm_calls=1, input_tokens=input_tokens, output_tokens=output_tokens)
    if prices is not None and (input_tokens or output_tokens):
        price = prices.get(model) if model else None
        if price is None:
            out.unpriced = 1
        else:
            out.cost_usd = (input_tokens * price[0] + output_tokens * price[1]) / 1e6
    return out


def _call(event: ev.LLMCallCompleted, prices: Prices | None) -> Totals:
    """One completed LLM call's totals: its tokens and, at `prices`, its cost."""
    return llm_totals(event.model, event.input_tokens, event.output_tokens, prices)


class Span(msgspec.Struct):
    """One bar of the waterfall."""

    kind: str
    """`run`, `turn`, `step`, `llm` or `tool`; a LangGraph thread's `superstep` and `task`."""
    label: str
    offset: int
    """The offset of the event that starts it (else of the one that ends it)."""
    start_ns: int
    end_ns: int
    end_offset: int | None = None
    """The offset of the event that ends it (None: not on the page)."""
    status: str = "running"
    """`completed`, `failed` or `running` (its end is not on the page); a task's `waiting` (it
    called `interrupt()`)."""
    depth: int = 0
    """How many spans on the page hold it."""
    totals: Totals = msgspec.field(default_factory=Totals)
    """Its own call (an LLM or tool span) and every call it holds."""
    left: float = 0.0
    """Where it starts on the page's axis, 0 to 1000."""
    width: float = 0.0
    """How long it is on the page's axis (at least 2, so that an instant shows)."""
    begun_before: bool = False
    """Its start is on an earlier page."""

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    @property
    def open(self) -> bool:
        return self.end_offset is None


class Waterfall(msgspec.Struct):
    spans: list[Span]
    start_ns: int
    end_ns: int
    totals: Totals
    """Every call on the page."""
    thread: bool = False
    """A LangGraph thread's supersteps and tasks (no calls of its own: its messages carry them)."""
    timed_by: str = ""
    """What its times say, for spans no event starts or ends (an ADK or Agents SDK session's)."""
    tokens: bool = True
    """Whether its events carry tokens (an Agents SDK session's items do not: no count, no cost)."""

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def _key(event: Any) -> tuple[str, Any, str] | None:
    """(span kind, what pairs its start and end, its label) of a span's start or end event, else None."""
    match event:
        case ev.RunStarted() | ev.RunCompleted() | ev.RunFailed():
            return "run", None, "run"
        case ev.TurnStarted(turn=n) | ev.TurnCompleted(turn=n) | ev.TurnFailed(turn=n):
            return "turn", n, f"turn {n}"
        case ev.StepStarted(node=node, superstep=n) | ev.StepCompleted(node=node, superstep=n):
            return "step", (node, n), f"{node} · superstep {n}"
        case ev.StepFailed(node=node, superstep=n):
            return "step", (node, n), f"{node} · superstep {n}"
        case ev.LLMCallStarted(call_id=call, model=model) | ev.LLMCallCompleted(call_id=call, model=model):
            return "llm", call, model
        case ev.LLMCallFailed(call_id=call, model=model):
            return "llm", call, model
        case ev.ToolCallStarted(call_id=call, tool=tool, arguments=arguments):
            return "tool", call, f"{tool}({short(arguments, 60)[1:-1]})"
        case ev.ToolCallCompleted(call_id=call, tool=tool) | ev.ToolCallFailed(call_id=call, tool=tool):
            return "tool", call, tool
    return None


def waterfall(entries: Sequence[Entry], first_page: bool = False, prices: Prices | None = None) -> Waterfall:
    """The spans of a window, each placed on the window's time axis and nested under those that hold
    it; an LLM call's cost at `prices`, when given.

    `first_page`: the window starts at the run's start, so an end without its start on the page
    (a resumed run's completion, say) is a span of its own, not one begun on an earlier page."""
    spans: list[Span] = []
    started: dict[tuple[str, Any], Span] = {}
    for entry in entries:
        key = _key(entry.event)
        if key is None:
            continue
        kind, pair, label = key
        name = kind_of(entry.event)
        if name.endswith(".started"):
            span = Span(kind, label, entry.offset, entry.time_ns, entry.time_ns)
            started[(kind, pair)] = span
            spans.append(span)
            continue
        span_or_none = started.pop((kind, pair), None)
        latency_ns = int(getattr(entry.event, "latency_ms", 0.0) * 1e6)
        if span_or_none is None:  # its start is on an earlier page
            before = not first_page
            span = Span(kind, label, entry.offset, entry.time_ns - latency_ns, entry.time_ns, begun_before=before)
            spans.append(span)
        else:
            span = span_or_none
        span.end_offset = entry.offset
        span.end_ns = max(entry.time_ns, span.start_ns + latency_ns)
        span.status = "failed" if name.endswith(".failed") else "completed"
        event = entry.event
        if kind == "llm":
            span.totals = _call(event, prices) if isinstance(event, ev.LLMCallCompleted) else Totals(llm_calls=1)
        elif kind == "tool":
            span.totals.tool_calls = 1
        span.totals.failed = int(span.status == "failed" and kind in ("llm", "tool"))
    return placed(spans, entries)


def placed(
    spans: list[Span], entries: Sequence[Entry], thread: bool = False, timed_by: str = "", tokens: bool = True
) -> Waterfall:
    """The page's spans nested, added up and placed on the time axis of its events."""
    if not entries:
        return Waterfall([], 0, 0, Totals(), thread, timed_by, tokens)
    last_ns = max(e.time_ns for e in entries)
    for span in spans:
        if span.open:
            span.end_ns = max(span.end_ns, last_ns)
    start = min([entries[0].time_ns, *(s.start_ns for s in spans)])
    end = max([last_ns, *(s.end_ns for s in spans)])
    _nest(spans)
    whole = Totals()
    for span in spans:
        if span.kind in ("llm", "tool"):
            whole.add(span.totals)
    length = max(end - start, 1)
    for span in spans:
        span.left = 1000.0 * (span.start_ns - start) / length
        span.width = max(2.0, 1000.0 * (span.end_ns - span.start_ns) / length)
        span.left = min(span.left, 1000.0 - span.width)
    return Waterfall(spans, start, end, whole, thread, timed_by, tokens)


def _nest(spans: list[Span]) -> None:
    """Order the spans (a holder before what it holds), set their depths, stretch each holder
    over what it holds, and add each call's totals to every span that holds it.

    A span holds another whose events are between its own (offsets, not times: the events of
    one batch share a commit time); a span begun on an earlier page holds from the page's start."""

    def lo(s: Span) -> int:
        return -1 if s.begun_before else s.offset

    def hi(s: Span) -> float:
        return float("inf") if s.end_offset is None else s.end_offset

    spans.sort(key=lambda s: (lo(s), _ORDER[s.kind], -hi(s)))
    holders: list[Span] = []
    for span in spans:
        while holders and not (hi(holders[-1]) >= hi(span) and _ORDER[holders[-1].kind] < _ORDER[span.kind]):
            holders.pop()
        span.depth = len(holders)
        for holder in holders:
            holder.start_ns = min(holder.start_ns, span.start_ns)
            holder.end_ns = max(holder.end_ns, span.end_ns)
            if span.kind in ("llm", "tool"):
                holder.totals.add(span.totals)
        holders.append(span)


run_totals_events_max = 20_000
"""The longest run whose calls the waterfall adds up whole (a longer one: its page's only)."""


def run_totals(log: EventLog[Any], run_id: str, info: RunInfo, prices: Prices | None = None) -> Totals | None:
    """Every LLM and tool call of the run added up (one read of the run; their cost at `prices`),
    or None for a run of more than `run_totals_events_max` events."""
    if info.head - info.base > run_totals_events_max:
        return None
    out = Totals()
    for entry in log.read(run_id, info.base, info.head, run_number=info.number):
        match entry.event:
            case ev.LLMCallCompleted():
                out.add(_call(entry.event, prices))
            case ev.LLMCallFailed():
                out.add(Totals(llm_calls=1, failed=1))
            case ev.ToolCallCompleted():
                out.add(Totals(tool_calls=1))
            case ev.ToolCallFailed():
                out.add(Totals(tool_calls=1, failed=1))
    return out
