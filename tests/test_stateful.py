"""A stateful test: random sequences of log operations on a real LMDB directory, each answer
checked against a plain in-memory model of what the log should hold.

Size: EVENTLOG_STATEFUL_EXAMPLES (default 25 sequences) and EVENTLOG_STATEFUL_STEPS (default 30
steps each). Hypothesis prints the failing sequence of steps and a blob to replay it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import eventlog
from eventlog import events as ev

RUN_IDS = ["a", "ab", "b", "run-é", "a" * 600]
EVENT_IDS = ["e1", "e2", "e3", "e4"]

texts = st.text(alphabet="abcxyz é🚀", max_size=6)
events = st.one_of(
    st.builds(
        ev.StepCompleted,
        node=st.sampled_from(["n1", "n2", "n3"]),
        superstep=st.integers(0, 5),
        update=st.dictionaries(st.sampled_from("xyz"), st.integers(-(2**63), 2**63) | texts, max_size=2),
    ),
    st.builds(
        ev.SuperstepCompleted,
        superstep=st.integers(0, 5),
        next_nodes=st.lists(st.sampled_from(["n1", "n2"]), max_size=2),
    ),
    st.builds(ev.UserMessage, content=texts),
    st.builds(
        ev.LLMCallCompleted,
        call_id=texts,
        model=st.just("m"),
        output=st.builds(ev.Message, role=st.just("assistant"), content=texts),
        input_tokens=st.integers(0, 9),
    ),
    st.builds(
        ev.Interrupted, nodes=st.lists(st.sampled_from(["n1", "n2"]), max_size=2), payload=st.integers(-(2**63), 2**63)
    ),
    st.builds(ev.Resumed, value=texts),
    st.builds(
        ev.StateUpdated, values=st.dictionaries(st.sampled_from("xyz"), st.integers(-(2**63), 2**63), max_size=2)
    ),
)


@dataclass
class Run:
    events: list[ev.Event] = field(default_factory=list)  # offsets 1..head, shared ones included
    base: int = 0
    parent: str | None = None
    fork_offset: int = 0
    forks: int = 0
    checkpoints: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)  # oldest first
    event_ids: dict[str, int] = field(default_factory=dict)  # shared ones included: an id is unique in a run

    @property
    def head(self) -> int:
        return len(self.events)


def fold(evs: list[ev.Event]) -> eventlog.AgentState:
    reducer = eventlog.AgentReducer()
    state = reducer.initial()
    for e in evs:
        state = reducer.apply(state, e)
    return state


class LogMachine(RuleBasedStateMachine):
    """The LMDB log against a model: dictionaries and lists, nothing else."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="eventlog-stateful-"))
        self.path = self.dir / "log"
        self.log = eventlog.open(self.path, durability="none")
        self.runs: dict[str, Run] = {}
        self.feed: list[tuple[str, int, ev.Event]] = []  # commit order

    def teardown(self) -> None:
        try:
            self.log.close()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    @initialize(run_id=st.sampled_from(RUN_IDS), evs=st.lists(events, min_size=1, max_size=4))
    def start(self, run_id: str, evs: list[ev.Event]) -> None:
        self.append_many(run_id, evs, None, None)

    # -- model helpers ---------------------------------------------------------------------

    def base_of(self, run_id: str) -> int:
        """Offsets below this cannot be folded or read (the run's own base, or its ancestors')."""
        run = self.runs[run_id]
        parent = self.base_of(run.parent) if run.parent is not None else 0
        return max(run.base, parent)

    def enc(self, state: Any) -> bytes:
        return self.log.codec.encode_state(state)

    # -- rules -----------------------------------------------------------------------------

    @rule(
        run_id=st.sampled_from(RUN_IDS),
        event=events,
        fence=st.sampled_from(["none", "right", "wrong"]),
        event_id=st.none() | st.sampled_from(EVENT_IDS),
    )
    def append(self, run_id: str, event: ev.Event, fence: str, event_id: str | None) -> None:
        self.append_many(run_id, [event], fence, [event_id])

    @rule(
        run_id=st.sampled_from(RUN_IDS),
        evs=st.lists(events, min_size=1, max_size=5),
        fence=st.sampled_from(["none", "right", "wrong"]),
        data=st.data(),
    )
    def append_batch(self, run_id: str, evs: list[ev.Event], fence: str, data: st.DataObject) -> None:
        ids = data.draw(
            st.none()
            | st.lists(st.none() | st.sampled_from(EVENT_IDS), min_size=len(evs), max_size=len(evs)).filter(
                lambda xs: len([x for x in xs if x]) == len({x for x in xs if x})
            )
        )
        self.append_many(run_id, evs, fence, ids)

    def append_many(self, run_id: str, evs: list[ev.Event], fence: str | None, ids: list[str | None] | None) -> None:
        run = self.runs.get(run_id, Run())
        head = run.head
        expected = {None: None, "none": None, "right": head, "wrong": head + 1}[fence]
        given = ids or [None] * len(evs)
        known = [run.event_ids.get(i) if i is not None else None for i in given]
        if all(k is not None for k in known):
            assert self.log.append_many(run_id, evs, expected_offset=expected, event_ids=ids) == known
            return
        if expected is not None and expected != head:
            feed_before = len(list(self.log.feed()))
            with pytest.raises(eventlog.ConflictError):
                self.log.append_many(run_id, evs, expected_offset=expected, event_ids=ids)
            assert self.log.head(run_id) == head
            assert len(list(self.log.feed())) == feed_before
            return
        got = self.log.append_many(run_id, evs, expected_offset=expected, event_ids=ids)
        self.runs[run_id] = run
        want = []
        for e, i, k in zip(evs, given, known, strict=True):
            if k is not None:
                want.append(k)
                continue
            run.events.append(e)
            self.feed.append((run_id, run.head, e))
            if i is not None:
                run.event_ids[i] = run.head
            want.append(run.head)
        assert got == want

    @precondition(lambda self: self.runs)
    @rule(data=st.data(), metadata=st.dictionaries(st.sampled_from("kv"), st.integers(-(2**63), 2**63), max_size=2))
    def save_checkpoint(self, data: st.DataObject, metadata: dict[str, Any]) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.runs)))
        run = self.runs[run_id]
        offset = data.draw(st.integers(0, run.head))
        if offset < self.base_of(run_id):
            with pytest.raises(eventlog.errors.PrunedError):
                self.log.checkpoints.save(run_id, offset, metadata=metadata)
            return
        cp = self.log.checkpoints.save(run_id, offset, metadata=metadata)
        assert cp.offset == offset
        assert self.enc(cp.state) == self.enc(fold(run.events[:offset]))
        run.checkpoints.append((cp.checkpoint_id, offset, metadata))

    @precondition(lambda self: any(r.checkpoints for r in self.runs.values()))
    @rule(data=st.data(), metadata=st.dictionaries(st.sampled_from("kv"), st.integers(-(2**63), 2**63), max_size=2))
    def upsert_checkpoint(self, data: st.DataObject, metadata: dict[str, Any]) -> None:
        run_id = data.draw(st.sampled_from(sorted(r for r in self.runs if self.runs[r].checkpoints)))
        run = self.runs[run_id]
        i = data.draw(st.integers(0, len(run.checkpoints) - 1))
        cid, offset, _ = run.checkpoints[i]
        cp = self.log.checkpoints.save(run_id, run.head, checkpoint_id=cid, metadata=metadata)
        assert cp.offset == offset
        run.checkpoints[i] = (cid, offset, metadata)

    @precondition(lambda self: any(r.checkpoints for r in self.runs.values()))
    @rule(data=st.data())
    def delete_checkpoint(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(r for r in self.runs if self.runs[r].checkpoints)))
        run = self.runs[run_id]
        cid, _, _ = run.checkpoints.pop(data.draw(st.integers(0, len(run.checkpoints) - 1)))
        self.log.checkpoints.delete(run_id, cid)
        with pytest.raises(eventlog.errors.CheckpointNotFoundError):
            self.log.checkpoints.load(run_id, cid)

    @precondition(lambda self: self.runs)
    @rule(data=st.data(), new_run_id=st.sampled_from(RUN_IDS))
    def fork(self, data: st.DataObject, new_run_id: str) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.runs)))
        run = self.runs[run_id]
        at = data.draw(st.integers(0, run.head))
        refusals: list[type[Exception]] = []
        if new_run_id in self.runs:
            refusals.append(eventlog.errors.RunExistsError)
        if at < self.base_of(run_id):
            refusals.append(eventlog.errors.PrunedError)
        if refusals:  # either reason may be named first
            with pytest.raises(tuple(refusals)):
                self.log.fork(run_id, at, new_run_id)
            return
        assert self.log.fork(run_id, at, new_run_id) == new_run_id
        shared = {i: off for i, off in run.event_ids.items() if off <= at}
        self.runs[new_run_id] = Run(events=list(run.events[:at]), parent=run_id, fork_offset=at, event_ids=shared)
        run.forks += 1

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def prune(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.runs)))
        run = self.runs[run_id]
        before = data.draw(st.integers(0, run.head))
        kept = [off for _, off, _ in run.checkpoints if off <= before]
        if not kept:
            pruned = self.base_of(run_id)
            if 0 < pruned <= before:  # pruned before (or forked from a pruned run): its base is kept already
                assert self.log.prune(run_id, before=before) == pruned
                return
            with pytest.raises(eventlog.errors.CheckpointNotFoundError):
                self.log.prune(run_id, before=before)
            return
        if run.forks:
            with pytest.raises(eventlog.errors.ForkDependencyError):
                self.log.prune(run_id, before=before)
            return
        base = max(kept)
        if base <= run.base:
            assert self.log.prune(run_id, before=before) == run.base
            return
        if base <= run.fork_offset:
            with pytest.raises(eventlog.errors.ForkDependencyError):
                self.log.prune(run_id, before=before)
            return
        assert self.log.prune(run_id, before=before) == base
        run.base = base
        run.checkpoints = [c for c in run.checkpoints if c[1] >= base]
        # event ids stay known after a prune: appending a pruned event's id again is still a no-op
        self.feed = [f for f in self.feed if not (f[0] == run_id and f[1] <= base)]

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def delete_run(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.runs)))
        run = self.runs[run_id]
        if run.forks:
            with pytest.raises(eventlog.errors.ForkDependencyError):
                self.log.delete_run(run_id)
            return
        self.log.delete_run(run_id)
        del self.runs[run_id]
        if run.parent is not None:
            self.runs[run.parent].forks -= 1
        self.feed = [f for f in self.feed if f[0] != run_id]

    @rule()
    def reopen(self) -> None:
        self.log.close()
        self.log = eventlog.open(self.path, durability="none")

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def state_at(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.runs)))
        run = self.runs[run_id]
        k = data.draw(st.integers(0, run.head))
        if k < self.base_of(run_id):
            with pytest.raises(eventlog.errors.PrunedError):
                self.log.state_at(run_id, k)
            return
        assert self.enc(self.log.state_at(run_id, k)) == self.enc(fold(run.events[:k]))

    @precondition(lambda self: self.runs)
    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        run_id = data.draw(st.sampled_from(sorted(self.runs)))
        run = self.runs[run_id]
        after = data.draw(st.integers(0, run.head))
        upto = data.draw(st.integers(after, run.head))
        if after < self.base_of(run_id) and upto > after:
            with pytest.raises(eventlog.errors.PrunedError):
                list(self.log.read(run_id, after, upto))
            return
        got = list(self.log.read(run_id, after, upto))
        assert [e.offset for e in got] == list(range(after + 1, upto + 1))
        assert [e.event for e in got] == run.events[after:upto]

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def runs_and_heads_agree(self) -> None:
        assert self.log.runs() == sorted(self.runs, key=str.encode)
        for run_id, run in self.runs.items():
            info = self.log.run_info(run_id)
            assert (info.head, info.base, info.parent, info.fork_offset, info.forks) == (
                run.head,
                self.base_of(run_id),  # a fork of a pruned run: that run's base
                run.parent,
                run.fork_offset,
                run.forks,
            ), run_id

    @invariant()
    def checkpoints_agree(self) -> None:
        for run_id, run in self.runs.items():
            listed = self.log.checkpoints.list(run_id)
            assert [(c.checkpoint_id, c.offset, c.metadata) for c in listed] == run.checkpoints
            latest = self.log.checkpoints.load_latest(run_id)
            assert (latest.checkpoint_id if latest else None) == (run.checkpoints[-1][0] if run.checkpoints else None)

    @invariant()
    def feed_is_commit_order(self) -> None:
        got = list(self.log.feed())
        assert [(e.run_id, e.offset, e.event) for e in got] == self.feed
        positions = [e.position for e in got]
        assert positions == sorted(positions) and len(set(positions)) == len(positions)


LogMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("EVENTLOG_STATEFUL_EXAMPLES", "25")),
    stateful_step_count=int(os.environ.get("EVENTLOG_STATEFUL_STEPS", "30")),
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLogMachine = LogMachine.TestCase
