"""What a graph run resumes from: the human's answers a node reads (`Context`), the pause a node
asks for (`Interrupt`), and the superstep in progress rebuilt from the log alone.

`eventlog.agent.graph` exports `Context` and `Interrupt`; `CompiledGraph` calls the rest.
"""

from __future__ import annotations

import copy
from typing import Any

from ..errors import RunReplacedError
from ..log import EventLog
from .events import Resumed, RunStarted, StateUpdated, StepCompleted, SuperstepCompleted
from .state import AgentReducer, AgentState

__all__ = ["Context", "Interrupt", "Superstep", "graph_name", "superstep_from_log"]


class Interrupt(Exception):
    """Raise (or return) it from a node to pause the run for a human."""

    def __init__(self, reason: str = "", payload: Any = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.payload = payload


class Context:
    """What a node that takes a second argument receives: where it runs and what a human said."""

    __slots__ = ("_answers", "_asked", "node", "run_id", "superstep")

    def __init__(self, run_id: str, node: str, superstep: int, answers: list[Any]) -> None:
        self.run_id = run_id
        self.node = node
        self.superstep = superstep
        self._answers = answers
        self._asked = 0

    @property
    def resumed(self) -> bool:
        """True when a human answered an interrupt of this node in this superstep."""
        return bool(self._answers)

    @property
    def resume_value(self) -> Any:
        """The latest value a human resumed this node with in this superstep (None if none)."""
        return self._answers[-1] if self._answers else None

    def interrupt(self, reason: str = "", payload: Any = None) -> Any:
        """Pause for a human, or return their answer once the run was resumed with one.

        The n-th call in a node returns the n-th answer given to that node in this superstep,
        so a node may ask several questions one after the other.
        """
        self._asked += 1
        if self._asked <= len(self._answers):
            return self._answers[self._asked - 1]
        raise Interrupt(reason, payload)


class Superstep:
    """What a drive needs to know about the superstep in progress (rebuilt from the log on resume)."""

    __slots__ = ("answers", "base")

    def __init__(self, base: dict[str, Any], answers: dict[str, list[Any]]) -> None:
        self.base = base
        """The values as they were when the superstep began, plus hand edits made since."""
        self.answers = answers
        """The values humans resumed each node with, in order, while it has not completed."""


def graph_name(log: EventLog[Any], run_id: str) -> str | None:
    """The name of the graph that started the run (its RunStarted), or None when unknown (pruned)."""
    info = log.run_info(run_id)
    if info.base > 0 or info.head == 0:
        return None
    first = log.entry(run_id, 1, run_number=info.number).event
    return first.graph if isinstance(first, RunStarted) else None


def superstep_from_log(
    log: EventLog[Any], reducer: AgentReducer, run_id: str, state: AgentState, number: int
) -> Superstep:
    """The values at the start of the superstep in progress plus hand edits, and the answers given,
    for a run whose state at its head is `state`, in its life `number` (else RunReplacedError:
    no node runs on the state of another life of the run)."""
    with log.pinned(run_id) as info:
        if info.number != number:
            raise RunReplacedError(run_id, number, info.number, "it was resumed")
        return _superstep(log, reducer, run_id, state)


def _superstep(log: EventLog[Any], reducer: AgentReducer, run_id: str, state: AgentState) -> Superstep:
    start = _scan_start(log, reducer, run_id, state.superstep)
    begin = start
    answers: dict[str, list[Any]] = {}
    edits: dict[str, Any] = {}
    for entry in log.read(run_id, after=start):
        e = entry.event
        if isinstance(e, SuperstepCompleted | RunStarted):
            begin, answers, edits = entry.offset, {}, {}
        elif isinstance(e, StateUpdated):
            edits.update(e.values)
        elif isinstance(e, Resumed):
            for node in e.nodes:
                answers.setdefault(node, []).append(e.value)
        elif isinstance(e, StepCompleted):
            answers.pop(e.node, None)
    base = copy.deepcopy(log.state_at(run_id, begin, reducer=reducer).values)
    base.update(copy.deepcopy(edits))
    return Superstep(base, answers)


def _scan_start(log: EventLog[Any], reducer: AgentReducer, run_id: str, superstep: int) -> int:
    """An offset at or before the last superstep boundary: a checkpoint of an earlier superstep."""
    info = log.run_info(run_id)
    floor = info.base
    for cp in log.checkpoints.list(run_id, newest_first=True, reducer=reducer, run_number=info.number):
        if cp.summary.get("superstep") is not None and cp.summary["superstep"] < superstep and cp.offset >= floor:
            return cp.offset
    return floor
