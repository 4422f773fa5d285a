"""What the store contract's tests share: the events they append and how they look at a log."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..agent.state import AgentReducer, AgentState
from ..events import Event, StepCompleted
from ..log import EventLog

OpenLog = Callable[..., EventLog[Any]]
"""`open_log(**kw)`: an `EventLog` on the store under test, opened again each call (a reopen)."""


def step(i: int, node: str | None = None) -> StepCompleted:
    return StepCompleted(node=node or f"n{i}", superstep=i, update={"i": i})


def offsets_of(log: EventLog[Any], run_id: str, after: int = 0, upto: int | None = None) -> list[int]:
    return [e.offset for e in log.read(run_id, after=after, upto=upto)]


def feed_keys(log: EventLog[Any]) -> list[tuple[str, int, int]]:
    return [(e.run_id, e.offset, e.position) for e in log.feed()]


def fold(events: list[Event]) -> AgentState:
    """The state after `events`, folded here rather than by the log."""
    reducer = AgentReducer()
    state = reducer.initial()
    for e in events:
        state = reducer.apply(state, e)
    return state
