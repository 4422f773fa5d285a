"""A small graph executor that checkpoints through the log: nodes, edges, supersteps, interrupts.

    from eventlog.agent.graph import END, Graph

    graph = Graph("three-step")
    graph.add_node("step1", lambda values: {"value": 10})
    graph.add_node("step2", lambda values: {"value": values["value"] + 10})
    graph.add_edge("step1", "step2")
    graph.set_entry("step1")
    graph.add_edge("step2", END)

    runner = graph.compile(log)                 # a checkpoint after every superstep
    state = runner.run("run-1", {"value": 0})   # AgentState: status, values, superstep, ...

How a run goes. A superstep runs every active node, one after the other in node-name order;
each node gets a copy of the values as they were when the superstep began (plus any edit made
by hand since), so siblings do not see each other's updates, and their updates merge in
node-name order (the later name wins on a shared key). Then the edges of every node of the
superstep pick the next active nodes; none left means the run completed. Every step start,
completion and failure, every superstep, interrupt, resume and hand edit is an event appended
through a `RunWriter`, which checkpoints by the runner's `CheckpointPolicy`.

What a resume relies on: only the log. `resume(run_id)` folds the run up to its head (the
last committed event, not the last checkpoint), skips the nodes of the superstep in progress
whose `StepCompleted` is already there, and goes on. A process killed in the middle of a
superstep loses at most the node that was running.

Human in the loop: a node raises (or returns) `Interrupt(reason, payload)`; the run pauses,
the node is recorded as paused and a checkpoint is taken. `resume(run_id, value=...)` runs the
node again; a node that takes a second argument gets a `Context` whose `resume_value` is the
value and whose `interrupt(reason, payload)` returns it instead of raising.
"""

from __future__ import annotations

import copy
import inspect
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..errors import (
    EventLogError,
    InvalidEventError,
    RecordTooLargeError,
    RunExistsError,
    RunReplacedError,
    UnknownRunError,
)
from ..log import EventLog, made_by_fork
from ..record.kinds import Event
from ..services.checkpoints import Checkpoint
from ..services.runwriter import RunWriter
from ._graph_resume import Context, Interrupt, Superstep, graph_name, superstep_from_log
from .events import (
    Interrupted,
    Resumed,
    RunCompleted,
    RunFailed,
    RunStarted,
    StateUpdated,
    StepCompleted,
    StepFailed,
    StepStarted,
    SuperstepCompleted,
)
from .policy import CheckpointPolicy
from .state import AgentReducer, AgentState

__all__ = [
    "END",
    "START",
    "CompiledGraph",
    "Context",
    "Graph",
    "GraphError",
    "IncompatibleGraphError",
    "Interrupt",
    "NodeFailedError",
    "RunNotPausedError",
    "RunPausedError",
]

START = "__start__"
"""The virtual node before the entry: `add_edge(START, "first")` is `set_entry("first")`."""
END = "__end__"
"""The virtual node after the last: an edge to END ends that branch."""

_MISSING: Any = object()
_RESERVED = (START, END)


class GraphError(EventLogError):
    """A graph that cannot run as built, or a run that cannot do what was asked."""


class NodeFailedError(GraphError):
    """A node (or a router) raised; the run is failed and `resume` retries from the log's head."""

    def __init__(self, run_id: str, node: str, superstep: int, offset: int, error: BaseException) -> None:
        self.run_id, self.node, self.superstep, self.offset, self.error = run_id, node, superstep, offset, error
        super().__init__(
            f"run {run_id!r}: node {node!r} failed in superstep {superstep} (offset {offset}): "
            f"{type(error).__name__}: {error}; fix the cause and call resume({run_id!r})"
        )


class IncompatibleGraphError(GraphError):
    """A run resumed with a graph that is not the one that started it, or lacks a node the run needs."""


class RunPausedError(GraphError):
    """The run waits for a human: resume it with a value."""


class RunNotPausedError(GraphError):
    """A resume value was given to a run that is not paused."""


Node = Callable[..., Any]
Router = Callable[[dict[str, Any]], "str | Sequence[str]"]
Listener = Callable[[Event, int, "Checkpoint[Any] | None"], None]


class _Edge:
    __slots__ = ("mapping", "router", "target")

    def __init__(self, target: str | None, router: Router | None, mapping: Mapping[Any, str] | None) -> None:
        self.target, self.router, self.mapping = target, router, mapping


def _wants_context(fn: Node) -> bool:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params)


class Graph:
    """A graph of named nodes with static and conditional edges, an entry and END."""

    def __init__(self, name: str = "graph") -> None:
        self.name = name
        self._nodes: dict[str, tuple[Node, bool]] = {}
        self._edges: dict[str, list[_Edge]] = {}
        self._entry: list[str] = []

    def add_node(self, name: str, fn: Node) -> Graph:
        """Add a node: `fn(values) -> update dict | None | Interrupt`, or `fn(values, context)`."""
        if not isinstance(name, str) or not name or name in _RESERVED:
            raise GraphError(f"graph {self.name!r}: {name!r} is not a valid node name")
        if name in self._nodes:
            raise GraphError(f"graph {self.name!r}: node {name!r} exists already")
        if not callable(fn):
            raise GraphError(f"graph {self.name!r}: node {name!r} is not callable")
        self._nodes[name] = (fn, _wants_context(fn))
        return self

    def set_entry(self, *names: str) -> Graph:
        """The node (or nodes) that run in the first superstep."""
        self._entry = list(names)
        return self

    def add_edge(self, source: str, target: str) -> Graph:
        """After `source` completes, `target` runs in the next superstep (END: nothing does)."""
        if source == START:
            self._entry.append(target)
        else:
            self._edges.setdefault(source, []).append(_Edge(target, None, None))
        return self

    def add_conditional_edges(self, source: str, router: Router, mapping: Mapping[Any, str] | None = None) -> Graph:
        """After `source` completes, `router(values)` names the next node(s), or END.

        The router sees the values merged at the end of the superstep. It returns a node
        name, a list of names, or a key of `mapping`. Its choice is recorded in the log
        (`SuperstepCompleted.next_nodes`), so a resume does not call it again.
        """
        if not callable(router):
            raise GraphError(f"graph {self.name!r}: the router of {source!r} is not callable")
        self._edges.setdefault(source, []).append(_Edge(None, router, dict(mapping) if mapping else None))
        return self

    def _check(self) -> None:
        if not self._entry:
            raise GraphError(f"graph {self.name!r} has no entry: call set_entry(name) or add_edge(START, name)")
        known = set(self._nodes) | {END}
        for name in self._entry:
            if name not in self._nodes:
                raise GraphError(f"graph {self.name!r}: entry {name!r} is not a node")
        for source, edges in self._edges.items():
            if source not in self._nodes:
                raise GraphError(f"graph {self.name!r}: edge from unknown node {source!r}")
            for edge in edges:
                targets = [edge.target] if edge.target is not None else list((edge.mapping or {}).values())
                for t in targets:
                    if t not in known:
                        raise GraphError(f"graph {self.name!r}: edge {source!r} -> {t!r} goes to no node")

    def compile(
        self,
        log: EventLog[Any],
        *,
        policy: CheckpointPolicy | None = None,
        listener: Listener | None = None,
        max_supersteps: int = 100,
    ) -> CompiledGraph:
        """A runner of this graph on `log`, checkpointing by `policy` (default: every superstep).

        `listener(event, offset, checkpoint)` is called after each event is appended, with the
        checkpoint that event's append took (or None).
        """
        self._check()
        return CompiledGraph(self, log, policy or CheckpointPolicy.every_supersteps(1), listener, max_supersteps)


def _copy(state: AgentState) -> AgentState:
    return copy.deepcopy(state)


class CompiledGraph:
    """Runs a graph on a log: `run`, `resume`, `update_state`, `get_state`."""

    def __init__(
        self, graph: Graph, log: EventLog[Any], policy: CheckpointPolicy, listener: Listener | None, max_supersteps: int
    ) -> None:
        self.graph = graph
        self.log = log
        self.policy = policy
        self.listener = listener
        self.max_supersteps = max_supersteps
        self.reducer = AgentReducer()
        self._metadata: weakref.WeakKeyDictionary[RunWriter[AgentState], dict[str, Any]] = weakref.WeakKeyDictionary()
        """Metadata a `run` or `resume` call asked for, by the recorder of that call."""

    # -- public ------------------------------------------------------------------------

    def run(
        self, run_id: str, input: Mapping[str, Any] | None = None, *, metadata: Mapping[str, Any] | None = None
    ) -> AgentState:
        """Start a new run with `input` as its first values and drive it until it ends or pauses.

        `metadata` goes on every checkpoint the run takes by itself during this call (beside `graph`).
        """
        rec = self._recorder(run_id, metadata)
        if rec.offset:
            raise RunExistsError(run_id)
        entry = sorted(set(self.graph._entry))
        self._append(rec, [RunStarted(input=dict(input or {}), next_nodes=entry, graph=self.graph.name)])
        return self._drive(rec, Superstep(copy.deepcopy(rec.state.values), {}))

    def resume(
        self,
        run_id: str,
        value: Any = _MISSING,
        *,
        from_checkpoint: str | None = None,
        new_run_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> AgentState:
        """Continue a run from the exact state at the head of its log.

        With `value`, answer the interrupt the run is paused at. With `from_checkpoint`, fork
        the run at that checkpoint's offset into `new_run_id` (default `<run_id>@<offset>`)
        and continue the fork (that life of it only: the fork deleted, or made again by another
        writer, before this call is done raises RunReplacedError); the original run is left as
        it is. A run of another graph, or one paused at (or about to run) a node this graph
        lacks, is refused with IncompatibleGraphError before anything is written. `metadata`
        goes on every checkpoint the run takes by itself during this call.
        """
        made: int | None = None  # the run number of the fork this call makes
        if from_checkpoint is not None:
            cp = self.log.checkpoints.load(run_id, from_checkpoint, reducer=self.reducer)
            self._check_compatible(run_id, cp.state, cp.offset)
            new_run_id = new_run_id or f"{run_id}@{cp.offset}"
            # of the checkpoint's life; the fork tells the life it made, the only one this call writes
            made = made_by_fork(self.log, run_id, cp.offset, new_run_id, run_number=cp.run_number)
            run_id = new_run_id
        elif new_run_id is not None:
            raise GraphError(f"run {run_id!r}: new_run_id needs from_checkpoint (the checkpoint to fork at)")
        rec = self._recorder(run_id, metadata, run_number=made)
        state: AgentState = rec.state
        if rec.offset == 0:
            raise UnknownRunError(run_id)
        self._check_compatible(run_id, state, rec.offset)
        if state.status == "pending":
            raise GraphError(f"run {run_id!r} has events but no RunStarted at offset {rec.offset}: call run()")
        if state.status == "completed":
            if value is not _MISSING:
                raise RunNotPausedError(f"run {run_id!r} completed at offset {rec.offset}; there is nothing to resume")
            return copy.deepcopy(state)
        if state.status == "paused":
            if value is _MISSING:
                raise RunPausedError(
                    f"run {run_id!r} is paused at offset {rec.offset} waiting for {', '.join(state.paused_nodes)}"
                    f" ({(state.interrupt or {}).get('reason', '')!r}); resume it with value=..."
                )
            self._append(rec, [Resumed(value=value, nodes=list(state.paused_nodes))])
        elif value is not _MISSING:
            raise RunNotPausedError(f"run {run_id!r} is {state.status} at offset {rec.offset}, not paused; drop value=")
        assert rec.run_number is not None  # the run has events
        return self._drive(rec, superstep_from_log(self.log, self.reducer, run_id, rec.state, rec.run_number))

    def update_state(self, run_id: str, values: Mapping[str, Any], as_node: str | None = None) -> int:
        """Edit the run's values by hand (a StateUpdated event); return its offset.

        Nodes that run afterwards in the superstep in progress see the edit. `as_node` names
        the node the edit is attributed to.
        """
        if as_node is not None and as_node not in self.graph._nodes:
            raise GraphError(f"run {run_id!r}: as_node {as_node!r} is not a node of graph {self.graph.name!r}")
        rec = self._recorder(run_id)
        if rec.offset == 0:
            raise UnknownRunError(run_id)
        return self._append(rec, [StateUpdated(values=dict(values), as_node=as_node)])

    def get_state(self, run_id: str, offset: int | None = None) -> AgentState:
        """The run's state at `offset` (default: its head)."""
        state: AgentState = self.log.state_at(run_id, offset, reducer=self.reducer)
        return state

    # -- driving -----------------------------------------------------------------------

    def _recorder(
        self, run_id: str, metadata: Mapping[str, Any] | None = None, *, run_number: int | None = None
    ) -> RunWriter[AgentState]:
        """The run's writer; with `run_number` (the life a write of this call made), of that life
        only (`RunWriter.expect_life`)."""
        rec = self.log.writer(run_id, reducer=self.reducer, policy=self.policy)
        if run_number is not None:
            rec.expect_life(run_number, "it was resumed")
        if metadata:
            self._metadata[rec] = dict(metadata)
        return rec

    def _checkpoint_metadata(self, rec: RunWriter[AgentState], **ours: Any) -> dict[str, Any]:
        return {**self._metadata.get(rec, {}), "graph": self.graph.name, **ours}

    def _check_compatible(self, run_id: str, state: AgentState, offset: int) -> None:
        """Refuse, before anything is written, a run that this graph cannot continue."""
        started = graph_name(self.log, run_id)
        if started is not None and started != self.graph.name:
            raise IncompatibleGraphError(
                f"run {run_id!r} was started by graph {started!r}, not {self.graph.name!r}; resume it with that graph"
            )
        needed = {*state.paused_nodes, *state.next_nodes, *state.superstep_nodes}
        missing = sorted(needed - set(self.graph._nodes))
        if missing:
            raise IncompatibleGraphError(
                f"run {run_id!r} at offset {offset} needs node(s) {', '.join(map(repr, missing))}, which graph "
                f"{self.graph.name!r} does not have; resume it with the graph that started it"
            )

    def _append(self, rec: RunWriter[AgentState], events: list[Event]) -> int:
        before = self._latest_id(rec.run_id) if self.listener else None
        offsets = rec.append_many(events, checkpoint_metadata=self._checkpoint_metadata(rec))
        if self.listener is not None:
            try:  # of the life appended to: a run made again since has no checkpoint this append took
                cp = self.log.checkpoints.load_latest(rec.run_id, reducer=self.reducer, run_number=rec.run_number)
            except RunReplacedError:
                cp = None
            taken = cp if cp is not None and cp.checkpoint_id != before and cp.offset == offsets[-1] else None
            for i, (event, offset) in enumerate(zip(events, offsets, strict=True)):
                self.listener(event, offset, taken if i == len(events) - 1 else None)
        return offsets[-1]

    def _latest_id(self, run_id: str) -> str | None:
        if self.log.head(run_id) == 0:
            return None
        cp = self.log.checkpoints.load_latest(run_id, reducer=self.reducer)
        return None if cp is None else cp.checkpoint_id

    def _drive(self, rec: RunWriter[AgentState], step: Superstep) -> AgentState:
        run_id = rec.run_id
        while True:
            state: AgentState = rec.state
            nodes = list(state.next_nodes)
            if not nodes:
                self._append(rec, [RunCompleted()])
                return _copy(rec.state)
            superstep = state.superstep + 1
            if superstep > self.max_supersteps:
                error = f"run {run_id!r} reached the limit of {self.max_supersteps} supersteps at offset {rec.offset}"
                self._append(rec, [RunFailed(error=error)])
                raise GraphError(error)
            done = set(state.superstep_nodes)
            for node in sorted(set(nodes)):
                if node in done:
                    continue
                paused = self._run_node(rec, node, superstep, step)
                if paused:
                    return _copy(rec.state)
            following = self._route(rec, sorted(set(nodes)), superstep)
            if not following:  # the end: one append, so one checkpoint covers the superstep and the run
                self._append(rec, [SuperstepCompleted(superstep=superstep), RunCompleted()])
                return _copy(rec.state)
            self._append(rec, [SuperstepCompleted(superstep=superstep, next_nodes=following)])
            step = Superstep(copy.deepcopy(rec.state.values), {})

    def _run_node(self, rec: RunWriter[AgentState], node: str, superstep: int, step: Superstep) -> bool:
        """Run one node and append what happened; True when it paused the run."""
        fn, wants_context = self.graph._nodes[node]
        self._append(rec, [StepStarted(node=node, superstep=superstep)])
        values = copy.deepcopy(step.base)
        try:
            if wants_context:
                result = fn(values, Context(rec.run_id, node, superstep, list(step.answers.get(node, []))))
            else:
                result = fn(values)
            if isinstance(result, Interrupt):
                raise result
            if result is not None and not isinstance(result, Mapping):
                raise TypeError(f"node {node!r} returned {type(result).__name__}; return a dict of updates or None")
        except Interrupt as signal:
            event = Interrupted(nodes=[node], reason=signal.reason, payload=signal.payload)
            rec.append(event)
            cp = rec.checkpoint(metadata=self._checkpoint_metadata(rec, source="interrupt"))
            if self.listener is not None:
                self.listener(event, rec.offset, cp)
            return True
        except Exception as exc:  # noqa: BLE001 - any error of a node fails the run
            self._fail(rec, node, superstep, exc, step_failed=True)
        try:
            self._append(rec, [StepCompleted(node=node, superstep=superstep, update=dict(result or {}))])
        except (InvalidEventError, RecordTooLargeError) as exc:  # nothing was written: the update cannot be stored
            self._fail(rec, node, superstep, exc, step_failed=True)
        return False

    def _fail(
        self, rec: RunWriter[AgentState], node: str, superstep: int, exc: Exception, *, step_failed: bool
    ) -> None:
        error = f"{type(exc).__name__}: {exc}"
        events: list[Event] = [RunFailed(error=error, node=node)]
        if step_failed:
            events.insert(0, StepFailed(node=node, superstep=superstep, error=error))
        offset = self._append(rec, events)
        raise NodeFailedError(rec.run_id, node, superstep, offset, exc) from exc

    def _route(self, rec: RunWriter[AgentState], nodes: Iterable[str], superstep: int) -> list[str]:
        """The nodes of the next superstep, from the edges of every node of this one."""
        following: set[str] = set()
        for node in nodes:
            edges = self.graph._edges.get(node, [])
            for edge in edges:
                if edge.target is not None:
                    following.add(edge.target)
                    continue
                assert edge.router is not None
                try:
                    chosen = edge.router(copy.deepcopy(rec.state.values))
                    names = [chosen] if isinstance(chosen, str) or not isinstance(chosen, Iterable) else list(chosen)
                    if edge.mapping is not None:
                        names = [edge.mapping[n] for n in names]
                    for name in names:
                        if name != END and name not in self.graph._nodes:
                            raise GraphError(f"the router of {node!r} chose {name!r}, which is not a node")
                except Exception as exc:  # noqa: BLE001 - any error of a router fails the run
                    self._fail(rec, node, superstep, exc, step_failed=False)
                following.update(names)
        following.discard(END)
        return sorted(following)
