"""A LangGraph thread read as what it is: supersteps (a checkpoint and the tasks that ran on it,
with the channels each wrote), the same as spans on a time axis (its waterfall), and its
checkpoints as a tree of branches (time travel makes a checkpoint whose parent is not the newest
one).

The events are read by their fields (`langgraph.checkpoint`: `checkpoint_id`, `parent_id`,
`fork`, `chunks`, `tails`; `langgraph.writes`: `checkpoint_id`, `task_path`, `writes`), never by
their values: a value's bytes are decoded only by the thread's view, in the state panel.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from eventlog import Entry, EventLog, RunInfo

from .model import kind_of
from .readings import NodeRun, Row, Superstep, family, summarize, task_node
from .spans import Span, Waterfall, placed

__all__ = ["Branch", "branches", "is_thread", "thread_supersteps", "thread_waterfall"]

_CHECKPOINT, _WRITES = "langgraph.checkpoint", "langgraph.writes"

branch_scan_events_max = 20_000
"""The longest thread whose checkpoints the branch tree reads whole (a longer one: its last ones)."""


def is_thread(kinds: Iterable[str]) -> bool:
    return any(k in (_CHECKPOINT, _WRITES) for k in kinds)


def _node_status(channels: list[str]) -> str:
    """`failed`, `waiting` (an interrupt(): waiting for a human), `answered` or `completed`."""
    if "__error__" in channels:
        return "failed"
    if "__interrupt__" in channels:
        return "waiting"
    if "__resume__" in channels:
        return "answered"
    return "completed"


def _task(writes: Any) -> tuple[str, str, list[str]]:
    """(node, `_node_status`, channels written) of a `langgraph.writes` event, by its fields; the
    node is "" for writes of no task (a resume's)."""
    channels = [str(getattr(w, "channel", "")) for w in getattr(writes, "writes", [])]
    return task_node(str(getattr(writes, "task_path", ""))), _node_status(channels), channels


def thread_supersteps(entries: Sequence[Entry]) -> list[Superstep]:
    """A window of a thread as supersteps: each checkpoint, then the tasks that wrote on it (the
    nodes of the superstep that follows it), with the channels they wrote; `number` is the
    checkpoint's place on the page (1, 2, ...), `next_nodes` the nodes that wrote."""
    out: list[Superstep] = []
    by_checkpoint: dict[str, Superstep] = {}
    for entry in entries:
        e, kind = entry.event, kind_of(entry.event)
        if kind == _CHECKPOINT:
            checkpoint = str(getattr(e, "checkpoint_id", ""))
            step = by_checkpoint.get(checkpoint)
            if step is None or any(r.kind == _CHECKPOINT for r in step.events):
                step = Superstep(len(out) + 1, entry.offset, nodes=[], events=[])
                out.append(step)
                by_checkpoint[checkpoint] = step
            # else: its tasks' writes came first (LangGraph's `async` durability saves a
            # checkpoint in the background while the next superstep runs): one superstep still
            step.events.insert(0, Row(entry.offset, entry.time_ns, kind, family(kind), summarize(e)))
            step.end = max(step.end, entry.offset)
        elif kind == _WRITES:
            checkpoint = str(getattr(e, "checkpoint_id", ""))
            found = by_checkpoint.get(checkpoint)
            if found is None:  # its checkpoint is on an earlier page, or not saved yet
                found = Superstep(len(out) + 1, entry.offset, nodes=[], events=[])
                out.append(found)
                by_checkpoint[checkpoint] = found
            step = found
            node, status, channels = _task(e)
            node = node or "a task"
            run = NodeRun(node, entry.offset, status, update="writes " + (", ".join(channels) or "nothing"))
            if status == "failed":
                run.error = "wrote __error__: see the state at this offset"
            step.nodes.append(run)
            step.next_nodes = [n.node for n in step.nodes]
        else:
            if not out or out[-1].number != 0:
                out.append(Superstep(0, entry.offset, nodes=[], events=[]))
            out[-1].events.append(Row(entry.offset, entry.time_ns, kind, family(kind), summarize(e)))
    return out


def thread_waterfall(entries: Sequence[Entry], first_page: bool = False) -> Waterfall:
    """A window of a thread as spans on its time axis: each superstep from the checkpoint it starts
    on to the next one, and in it each task (a node) from that checkpoint's save to its writes'
    (`failed` when it wrote `__error__`, `waiting` when it called `interrupt()`). Times are when
    LangGraph saved them. `first_page`: writes whose checkpoint is not on the page begin there."""
    spans: list[Span] = []
    by_checkpoint: dict[str, Span] = {}
    superstep: Span | None = None
    number = 0
    for entry in entries:
        e, kind = entry.event, kind_of(entry.event)
        if kind == _CHECKPOINT:
            checkpoint = str(getattr(e, "checkpoint_id", ""))
            if superstep is not None:
                superstep.end_ns, superstep.end_offset = entry.time_ns, entry.offset
            number += 1
            superstep = Span("superstep", f"superstep {number} · {checkpoint[:13]}", entry.offset,
                             entry.time_ns, entry.time_ns, end_offset=entry.offset, status="completed")  # fmt: skip
            spans.append(superstep)
            by_checkpoint[checkpoint] = superstep
        elif kind == _WRITES:
            holder = by_checkpoint.get(str(getattr(e, "checkpoint_id", "")))
            node, status, _ = _task(e)
            node = node or ("the answer" if status == "answered" else "a task")
            start = entry.time_ns if holder is None else holder.start_ns
            spans.append(Span("task", node, entry.offset, start, entry.time_ns, end_offset=entry.offset,
                              status="completed" if status == "answered" else status,
                              begun_before=holder is None and not first_page))  # fmt: skip
            if holder is not None:
                holder.end_ns = max(holder.end_ns, entry.time_ns)
                holder.end_offset = max(holder.end_offset or 0, entry.offset)
                if status in ("failed", "waiting") and holder.status == "completed":
                    holder.status = status
    return placed(spans, entries, thread=True)


class Branch(msgspec.Struct):
    """A line of checkpoints, each the parent of the next, and the branches that leave its last."""

    first: int
    """Offset of its first checkpoint."""
    last: int
    """Offset of its last checkpoint."""
    count: int
    last_id: str
    forked_from: str | None = None
    """The checkpoint (offset) it branches from, when it is a branch made by time travel."""
    children: list[Branch] = []


def branches(log: EventLog[Any], run_id: str, info: RunInfo) -> tuple[list[Branch], int]:
    """The thread's checkpoints as a tree of branches, and the offset its read started after (the
    run's base, or the last `branch_scan_events_max` events of a longer thread)."""
    after = max(info.base, info.head - branch_scan_events_max)
    points: list[tuple[int, str, str | None]] = []
    for entry in log.read(run_id, after, info.head, run_number=info.number):
        if kind_of(entry.event) == _CHECKPOINT:
            e = entry.event
            parent = getattr(e, "parent_id", None)
            points.append((entry.offset, str(getattr(e, "checkpoint_id", "")), None if parent is None else str(parent)))
    known = {cid for _, cid, _ in points}
    offset_of = {cid: off for off, cid, _ in points}
    children: dict[str | None, list[tuple[int, str]]] = {}
    for off, cid, parent in points:
        children.setdefault(parent if parent in known else None, []).append((off, cid))

    def line(start: tuple[int, str], forked_from: str | None) -> Branch:
        off, cid = start
        branch = Branch(off, off, 1, cid, forked_from)
        while True:
            kids = children.get(cid, [])
            if len(kids) != 1:
                break
            off, cid = kids[0]
            branch.last, branch.count, branch.last_id = off, branch.count + 1, cid
        kids = sorted(children.get(cid, []))
        branch.children = [line(k, f"{cid[:12]}… (offset {offset_of[cid]:,})") for k in kids]
        return branch

    return [line(root, None) for root in sorted(children.get(None, []))], after
