"""Folding: state_at equals the fold from offset 0 for any events, checkpoints and offset; policies; verify."""

from __future__ import annotations

import hashlib
import math
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eventlog
from eventlog import CheckpointPolicy
from eventlog import events as ev
from eventlog._limits import snapshot_event_bytes_ratio

# -- strategies over the standard kinds ----------------------------------------------------

names = st.sampled_from(["a", "b", "c", "plan", "act", "é"])
texts = st.text(max_size=12)
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(allow_nan=True), texts)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3), max_leaves=6
)
updates = st.dictionaries(st.sampled_from(["x", "y", "z", "msgs"]), values, max_size=3)
small = st.integers(0, 9)
tool_calls = st.lists(
    st.builds(ev.ToolCall, id=texts, name=names, arguments=st.dictionaries(texts, values, max_size=2)), max_size=2
)
messages = st.builds(
    ev.Message, role=st.sampled_from(["user", "assistant", "tool", "system"]), content=texts, tool_calls=tool_calls
)

standard_events: st.SearchStrategy[ev.Event] = st.one_of(
    st.builds(ev.RunStarted, input=updates, next_nodes=st.lists(names, max_size=3)),
    st.builds(ev.RunCompleted, output=values),
    st.builds(ev.RunFailed, error=texts, node=st.none() | names),
    st.builds(ev.TurnStarted, turn=small),
    st.builds(ev.TurnCompleted, turn=small),
    st.builds(ev.TurnFailed, turn=small, error=texts),
    st.builds(ev.UserMessage, content=texts),
    st.builds(ev.AssistantMessage, content=texts, tool_calls=tool_calls),
    st.builds(
        ev.LLMCallStarted, call_id=texts, model=names, context_messages=small, messages=st.lists(messages, max_size=2)
    ),
    st.builds(
        ev.LLMCallCompleted,
        call_id=texts,
        model=names,
        output=messages,
        input_tokens=small,
        output_tokens=small,
        latency_ms=st.floats(),
    ),
    st.builds(ev.LLMCallFailed, call_id=texts, model=names, error=texts),
    st.builds(ev.ToolCallStarted, call_id=texts, tool=names, arguments=st.dictionaries(texts, values, max_size=2)),
    st.builds(ev.ToolCallCompleted, call_id=texts, tool=names, output=values),
    st.builds(ev.ToolCallFailed, call_id=texts, tool=names, error=texts),
    st.builds(ev.StepStarted, node=names, superstep=small),
    st.builds(ev.StepCompleted, node=names, superstep=small, update=updates),
    st.builds(ev.StepFailed, node=names, superstep=small, error=texts),
    st.builds(ev.SuperstepCompleted, superstep=small, next_nodes=st.lists(names, max_size=3)),
    st.builds(ev.StateUpdated, values=updates, as_node=st.none() | names),
    st.builds(ev.Interrupted, nodes=st.lists(names, max_size=3), reason=texts, payload=values),
    st.builds(ev.Resumed, value=values, nodes=st.lists(names, max_size=2)),
)
event_lists = st.lists(standard_events, min_size=0, max_size=30)

PROPERTY = settings(
    max_examples=int(os.environ.get("EVENTLOG_FOLD_EXAMPLES", "60")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def fold(events: list[ev.Event], reducer: Any = None) -> Any:
    """The reference: fold from offset 0 with a fresh reducer state."""
    reducer = reducer or eventlog.AgentReducer()
    state = reducer.initial()
    for e in events:
        state = reducer.apply(state, e)
    return state


def enc(log: eventlog.EventLog, state: Any) -> bytes:
    return log.codec.encode_state(state)


def references(log: eventlog.EventLog, events: list[ev.Event], reducer: Any = None) -> list[bytes]:
    """Encoded reference state at every offset 0..len(events)."""
    return [enc(log, fold(events[:k], reducer)) for k in range(len(events) + 1)]


# -- state_at == fold from 0 ---------------------------------------------------------------


@PROPERTY
@given(events=event_lists, data=st.data())
def test_state_at_equals_the_fold_from_zero(events: list[ev.Event], data: st.DataObject) -> None:
    log = eventlog.open(":memory:")
    run = "r"
    if events:
        # append in random batches
        i = 0
        while i < len(events):
            n = data.draw(st.integers(1, len(events) - i))
            log.append_many(run, events[i : i + n])
            i += n
    else:
        log.append("r", ev.UserMessage(content="only"))
        events = [ev.UserMessage(content="only")]
    head = len(events)
    placements = data.draw(st.lists(st.integers(0, head), max_size=8))
    for k in placements:
        log.checkpoints.save(run, k)
    expected = references(log, events)
    for k in data.draw(st.lists(st.integers(0, head), min_size=1, max_size=10)):
        assert enc(log, log.state_at(run, k)) == expected[k], k
    assert enc(log, log.state_at(run)) == expected[head]
    assert log.verify().ok


@PROPERTY
@given(events=st.lists(standard_events, min_size=1, max_size=25), every=st.integers(1, 5), data=st.data())
def test_state_at_equals_the_fold_with_recorder_checkpoints_on_lmdb(
    events: list[ev.Event], every: int, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as d, eventlog.open(Path(d) / "log", durability="none") as log:
        rec = log.writer("r", policy=CheckpointPolicy.every(every))
        for e in events:
            rec.append(e)
        expected = references(log, events)
        assert enc(log, rec.state) == expected[-1]
        for k in range(len(events) + 1):
            assert enc(log, log.state_at("r", k)) == expected[k]
        for cp in log.checkpoints.list("r"):
            assert enc(log, cp.state) == expected[cp.offset]
        assert log.verify().ok


# -- checkpoints are lossless --------------------------------------------------------------


@PROPERTY
@given(events=st.lists(standard_events, min_size=1, max_size=20), data=st.data())
def test_checkpoint_save_and_reload_is_lossless(events: list[ev.Event], data: st.DataObject) -> None:
    meta = data.draw(st.dictionaries(texts, values.filter(lambda v: not _has_nan(v)), max_size=3))
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "log"
        with eventlog.open(path) as log:
            log.append_many("r", events)
            k = data.draw(st.integers(0, len(events)))
            saved = log.checkpoints.save("r", k, metadata=meta, checkpoint_id="cp")
            expected = enc(log, fold(events[:k]))
            assert enc(log, saved.state) == expected
        with eventlog.open(path) as log:
            loaded = log.checkpoints.load("r", "cp")
            assert enc(log, loaded.state) == expected
            assert (loaded.offset, loaded.metadata, loaded.reducer, loaded.reducer_version) == (k, meta, "agent", 1)
            state = fold(events[:k])
            assert loaded.summary == eventlog.AgentReducer.summarize(state)
            latest = log.checkpoints.load_latest("r")
            assert latest is not None and enc(log, latest.state) == expected


def _has_nan(v: Any) -> bool:
    if isinstance(v, float):
        return math.isnan(v)
    if isinstance(v, list):
        return any(_has_nan(x) for x in v)
    if isinstance(v, dict):
        return any(_has_nan(x) for x in v.values())
    return False


# -- forks ---------------------------------------------------------------------------------


@PROPERTY
@given(events=st.lists(standard_events, min_size=1, max_size=20), tail=event_lists, data=st.data())
def test_a_fork_has_its_parents_state_up_to_the_fork_offset(
    events: list[ev.Event], tail: list[ev.Event], data: st.DataObject
) -> None:
    log = eventlog.open(":memory:")
    log.append_many("p", events)
    for k in data.draw(st.lists(st.integers(0, len(events)), max_size=4)):
        log.checkpoints.save("p", k)
    at = data.draw(st.integers(0, len(events)))
    log.fork("p", at, "f")
    if tail:
        log.append_many("f", tail)
    log.append("p", ev.UserMessage(content="parent goes on"))
    for k in data.draw(st.lists(st.integers(0, len(tail)), max_size=3)):
        log.checkpoints.save("f", at + k)
    for k in range(at + 1):
        assert enc(log, log.state_at("f", k)) == enc(log, log.state_at("p", k))
    expected = references(log, events[:at] + tail)
    for k in range(at + len(tail) + 1):
        assert enc(log, log.state_at("f", k)) == expected[k]
    # and a fork of the fork
    at2 = data.draw(st.integers(0, at + len(tail)))
    log.fork("f", at2, "ff")
    for k in range(at2 + 1):
        assert enc(log, log.state_at("ff", k)) == expected[k]
    assert log.verify().ok


# -- reducers of other versions, users' reducers ---------------------------------------------


class Counting:
    """Counts events; `weight` differs between versions so a wrong snapshot would show."""

    name = "counting"
    state_type = dict

    def __init__(self, version: int) -> None:
        self.version = version
        self.applied = 0

    def initial(self) -> dict[str, Any]:
        return {"n": 0, "kinds": {}}

    def apply(self, state: dict[str, Any], event: ev.Event) -> dict[str, Any]:
        self.applied += 1
        tag = type(event).__struct_config__.tag
        state["n"] += self.version
        state["kinds"][tag] = state["kinds"].get(tag, 0) + 1
        return state


def test_a_checkpoint_of_another_reducer_version_is_ignored() -> None:
    log = eventlog.open(":memory:")
    events = [ev.StepCompleted(node="a", superstep=i) for i in range(1, 11)]
    log.append_many("r", events)
    v1, v2 = Counting(1), Counting(2)
    for k in (3, 6, 9):
        cp = log.checkpoints.save("r", k, reducer=v1)
        assert cp.reducer == "counting" and cp.reducer_version == 1
    assert log.stats()["snapshots"] >= 1
    # v1 uses its own snapshots: folding to 10 applies only the events after the nearest one
    v1.applied = 0
    assert log.state_at("r", 10, reducer=v1)["n"] == 10
    assert v1.applied <= 10 - 3
    # v2 must not use v1's snapshots: it folds from offset 0, and the result is v2's
    v2.applied = 0
    assert log.state_at("r", 10, reducer=v2) == fold(events, Counting(2))
    assert v2.applied == 10
    assert log.state_at("r", 10, reducer=v2)["n"] == 20
    # once v2 has its own checkpoint, it starts there (lower than the head, above 0)
    log.checkpoints.save("r", 5, reducer=v2)
    v2.applied = 0
    assert log.state_at("r", 10, reducer=v2) == fold(events, Counting(2))
    assert v2.applied == 5
    assert log.verify(reducer=v1).ok and log.verify(reducer=v2).ok


def test_a_users_reducer_with_dict_state_works_everywhere(tmp_path: Path) -> None:
    events: list[ev.Event] = [
        ev.UserMessage(content=str(i)) if i % 3 else ev.StepCompleted(node="s", superstep=i) for i in range(1, 21)
    ]
    with eventlog.open(tmp_path / "log", reducer=Counting(1)) as log:
        rec = log.writer("r", policy=CheckpointPolicy.every(4))
        for e in events:
            rec.append(e)
        assert rec.state == fold(events, Counting(1))
        assert [c.offset for c in log.checkpoints.list("r")] == [4, 8, 12, 16, 20]
        assert all(c.summary == {} for c in log.checkpoints.list("r"))
        for k in range(21):
            assert log.state_at("r", k) == fold(events[:k], Counting(1))
        log.fork("r", 10, "f")
        assert log.state_at("f") == fold(events[:10], Counting(1))
        assert log.verify().ok
    with eventlog.open(tmp_path / "log", reducer=Counting(1)) as log:
        rec = log.writer("r", policy=CheckpointPolicy.every(4))
        assert rec.state == fold(events, Counting(1)) and rec.offset == 20  # a resume
        assert log.checkpoints.load_latest("r").state == fold(events, Counting(1))  # type: ignore[union-attr]


# -- verify catches non-determinism ----------------------------------------------------------


class Drifting:
    """Deliberately non-deterministic: the state depends on how often apply was called before."""

    name = "drifting"
    version = 1
    state_type = dict

    def __init__(self) -> None:
        self.calls = 0

    def initial(self) -> dict[str, Any]:
        return {"n": 0}

    def apply(self, state: dict[str, Any], event: ev.Event) -> dict[str, Any]:
        self.calls += 1
        state["n"] = self.calls
        return state


class Dicey:
    """Deliberately non-deterministic: random numbers in the state."""

    name = "dicey"
    version = 1
    state_type = dict

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def initial(self) -> dict[str, Any]:
        return {"roll": 0.0}

    def apply(self, state: dict[str, Any], event: ev.Event) -> dict[str, Any]:
        state["roll"] = self.rng.random()
        return state


@pytest.mark.parametrize("make", [Drifting, lambda: Dicey(1234)], ids=["counter", "random"])
def test_verify_catches_a_non_deterministic_reducer(make: Any) -> None:
    log = eventlog.open(":memory:")
    reducer = make()
    log.append_many("good", [ev.UserMessage(content="x")] * 3)
    log.append_many("run-x", [ev.UserMessage(content=str(i)) for i in range(6)])
    cp = log.checkpoints.save("run-x", 4, reducer=reducer)
    report = log.verify(reducer=reducer)
    assert not report.ok
    bad = [p for p in report.problems if p.kind == "nondeterministic"]
    assert bad, report.problems
    assert all(p.run_id == "run-x" and p.offset == cp.offset for p in bad)
    assert "'run-x'" in bad[0].message and "offset 4" in bad[0].message
    # the deterministic default reducer finds nothing wrong in the same log
    assert log.verify().ok


def test_verify_finds_a_damaged_snapshot() -> None:
    log = eventlog.open(":memory:")
    log.append_many(
        "r",
        [
            ev.StepCompleted(node="a", superstep=1, update={"v": 1}),
            ev.StepCompleted(node="b", superstep=1, update={"v": 2}),
        ],
    )
    log.checkpoints.save("r", 1)
    other = eventlog.AgentState(values={"v": 999})

    def tamper(txn: Any) -> None:
        ((key, value),) = txn.scan("snapshots", b"", None)
        from eventlog.record._records import SnapshotRecord

        snap = log.codec.decode_value(value, SnapshotRecord, ("snapshots", key))
        fake = SnapshotRecord(
            snap.reducer, snap.reducer_version, snap.offset, msgspec.Raw(log.codec.encode_state(other))
        )
        txn.put("snapshots", key, log.codec.encode_value(fake, ("snapshots", key)))

    log.store.write(tamper)
    report = log.verify()
    assert [(p.run_id, p.offset, p.kind) for p in report.problems] == [("r", 1, "nondeterministic")]


# -- policies: exact checkpoint counts ---------------------------------------------------------


def record(log: eventlog.EventLog, policy: CheckpointPolicy, events: list[ev.Event], run: str = "r") -> list[int]:
    """Append one by one; return the offsets of the checkpoints the recorder took, checking each is
    written with the event that triggered it (the count after each append)."""
    rec = log.writer(run, policy=policy)
    seen = 0
    offsets = []
    for e in events:
        off = rec.append(e)
        n = log.run_info(run).checkpoints
        assert n - seen in (0, 1)
        if n > seen:
            offsets.append(off)
            assert log.checkpoints.load_latest(run).offset == off  # type: ignore[union-attr]
        seen = n
    assert [c.offset for c in log.checkpoints.list(run)] == offsets
    for cp in log.checkpoints.list(run):
        assert enc(log, cp.state) == enc(log, fold(events[: cp.offset]))
    return offsets


def chat_turn(turn: int, llm_answers: int, tools: int = 0) -> list[ev.Event]:
    out: list[ev.Event] = [ev.TurnStarted(turn=turn), ev.UserMessage(content=f"question {turn}")]
    for i in range(llm_answers):
        out.append(ev.LLMCallStarted(call_id=f"{turn}.{i}", model="m"))
        out.append(
            ev.LLMCallCompleted(
                call_id=f"{turn}.{i}", model="m", output=ev.Message(role="assistant", content="a"), input_tokens=3
            )
        )
        for t in range(tools if i == 0 else 0):
            out.append(ev.ToolCallStarted(call_id=f"t{turn}.{t}", tool="search"))
            out.append(ev.ToolCallCompleted(call_id=f"t{turn}.{t}", tool="search", output={"hits": t}))
    if not llm_answers:
        out.append(ev.AssistantMessage(content="canned answer"))
    out.append(ev.TurnCompleted(turn=turn))
    return out


def graph(supersteps: int, nodes: int = 2) -> list[ev.Event]:
    out: list[ev.Event] = [ev.RunStarted(input={"x": 0}, next_nodes=["n0"])]
    for s in range(1, supersteps + 1):
        for n in range(nodes):
            out.append(ev.StepStarted(node=f"n{n}", superstep=s))
            out.append(ev.StepCompleted(node=f"n{n}", superstep=s, update={"x": s}))
        out.append(ev.SuperstepCompleted(superstep=s, next_nodes=["n0"]))
    return out


def offsets_where(events: list[ev.Event], pred: Any) -> list[int]:
    return [i + 1 for i, e in enumerate(events) if pred(e)]


CHAT = chat_turn(1, 2, tools=1) + chat_turn(2, 0) + chat_turn(3, 1, tools=2)


@pytest.mark.parametrize("n", [1, 3, 7])
def test_policy_every_n_events(n: int) -> None:
    log = eventlog.open(":memory:")
    events = [ev.UserMessage(content=str(i)) for i in range(20)]
    assert record(log, CheckpointPolicy.every(n), events) == list(range(n, 21, n))


def test_policy_every_n_events_with_a_final_checkpoint() -> None:
    log = eventlog.open(":memory:")
    events: list[ev.Event] = [ev.UserMessage(content=str(i)) for i in range(7)] + [ev.RunCompleted(output=1)]
    assert record(log, CheckpointPolicy.every(3), events) == [3, 6, 8]


@pytest.mark.parametrize("n", [1, 2, 3])
def test_policy_every_n_supersteps(n: int) -> None:
    log = eventlog.open(":memory:")
    events = graph(6) + [ev.RunCompleted(output="done")]
    expected = offsets_where(events, lambda e: isinstance(e, ev.SuperstepCompleted) and e.superstep % n == 0) + [
        len(events)
    ]
    got = record(log, CheckpointPolicy.every_supersteps(n), events)
    assert got == expected
    assert len(got) == 6 // n + 1
    supersteps = [c.summary["superstep"] for c in log.checkpoints.list("r")]
    assert supersteps == [s for s in range(1, 7) if s % n == 0] + [6]


def test_policy_conversation_turns_one_per_turn_and_a_final() -> None:
    log = eventlog.open(":memory:")
    events = CHAT + [ev.RunCompleted(output="bye")]
    got = record(log, CheckpointPolicy.conversation_turns(), events)
    assert got == offsets_where(events, lambda e: isinstance(e, ev.TurnCompleted)) + [len(events)]
    assert len(got) == 3 + 1


def test_policy_llm_turns_only_after_llm_answers() -> None:
    log = eventlog.open(":memory:")
    events = CHAT + [ev.RunCompleted(output="bye")]
    got = record(log, CheckpointPolicy.llm_turns_only(), events)
    # one after each LLM answer (3 of them; turn 2 had none), none at turn ends already covered, and a final
    assert got == offsets_where(events, lambda e: isinstance(e, ev.LLMCallCompleted)) + [len(events)]
    assert len(got) == 3 + 1


def test_policy_llm_turns_at_a_turns_end_when_an_llm_answered_in_the_same_batch() -> None:
    log = eventlog.open(":memory:")
    rec = log.writer("r", policy=CheckpointPolicy.llm_turns_only())
    rec.append_many([ev.TurnStarted(turn=1), ev.UserMessage(content="q")])
    assert log.run_info("r").checkpoints == 0
    done = ev.LLMCallCompleted(call_id="c", model="m", output=ev.Message(role="assistant", content="a"))
    rec.append_many([done, ev.TurnCompleted(turn=1)])
    assert [c.offset for c in log.checkpoints.list("r")] == [4]  # one, after the batch
    rec.append_many([ev.TurnStarted(turn=2), ev.AssistantMessage(content="canned"), ev.TurnCompleted(turn=2)])
    assert log.run_info("r").checkpoints == 1  # no LLM answered in turn 2


def test_policy_all_internal_turns() -> None:
    log = eventlog.open(":memory:")
    events = CHAT + graph(2) + [ev.RunCompleted(output="bye")]
    internal = (ev.StepCompleted, ev.LLMCallCompleted, ev.ToolCallCompleted, ev.SuperstepCompleted, ev.TurnCompleted)
    got = record(log, CheckpointPolicy.all_internal_turns(), events)
    assert got == offsets_where(events, lambda e: isinstance(e, internal)) + [len(events)]
    # 3 LLM answers, 3 tool calls, 3 turns, 4 steps, 2 supersteps, and the final
    assert len(got) == 3 + 3 + 3 + 4 + 2 + 1


def test_policy_final_only_checkpoints_once_when_the_run_completes() -> None:
    log = eventlog.open(":memory:")
    events = CHAT + graph(3) + [ev.RunCompleted(output="bye")]
    assert record(log, CheckpointPolicy.final_only(), events) == [len(events)]


@pytest.mark.parametrize(
    "policy",
    [
        CheckpointPolicy.final_only(),
        CheckpointPolicy.conversation_turns(),
        CheckpointPolicy.llm_turns_only(),
        CheckpointPolicy.all_internal_turns(),
        CheckpointPolicy.every_supersteps(1),
        CheckpointPolicy.every(1),
    ],
    ids=["final_only", "turns", "llm_turns", "internal", "supersteps", "every1"],
)
def test_no_final_checkpoint_when_the_run_fails(policy: CheckpointPolicy) -> None:
    log = eventlog.open(":memory:")
    rec = log.writer("r", policy=policy)
    rec.append(ev.RunStarted(input={}))
    before = log.run_info("r").checkpoints
    rec.append(ev.RunFailed(error="boom"))
    assert log.run_info("r").checkpoints == before  # not even every(1) checkpoints a failure
    assert log.state_at("r").status == "failed"


def test_policy_never_takes_none_by_itself() -> None:
    log = eventlog.open(":memory:")
    assert record(log, CheckpointPolicy.never(), CHAT + [ev.RunCompleted()]) == []
    rec = log.writer("r", policy=CheckpointPolicy.never())
    cp = rec.checkpoint(metadata={"by": "hand"})
    assert cp.offset == len(CHAT) + 1 and log.checkpoints.load_latest("r").metadata == {"by": "hand"}  # type: ignore[union-attr]


def test_policy_batch_takes_at_most_one_checkpoint() -> None:
    log = eventlog.open(":memory:")
    rec = log.writer("r", policy=CheckpointPolicy.every(1))
    rec.append_many([ev.UserMessage(content=str(i)) for i in range(5)])
    assert [c.offset for c in log.checkpoints.list("r")] == [5]


def test_policy_constructors_refuse_zero() -> None:
    with pytest.raises(ValueError):
        CheckpointPolicy.every(0)
    with pytest.raises(ValueError):
        CheckpointPolicy.every_supersteps(0)


def test_recorder_resumes_its_policy_count_after_a_reopen(tmp_path: Path) -> None:
    events = [ev.UserMessage(content=str(i)) for i in range(10)]
    with eventlog.open(tmp_path / "log") as log:
        assert record(log, CheckpointPolicy.every(4), events[:6]) == [4]
    with eventlog.open(tmp_path / "log") as log:
        rec = log.writer("r", policy=CheckpointPolicy.every(4))
        assert rec.offset == 6 and enc(log, rec.state) == enc(log, fold(events[:6]))
        for e in events[6:]:
            rec.append(e)
        # counting restarts at the resume: 4 more events after offset 6
        assert [c.offset for c in log.checkpoints.list("r")] == [4, 10]


def test_a_second_writer_fences_the_recorder() -> None:
    log = eventlog.open(":memory:")
    rec = log.writer("r")
    rec.append(ev.UserMessage(content="1"))
    log.append("r", ev.UserMessage(content="someone else"))
    with pytest.raises(eventlog.ConflictError):
        rec.append(ev.UserMessage(content="2"))
    assert log.head("r") == 2
    rec = log.writer("r")
    assert [m.content for m in rec.state.messages] == ["1", "someone else"]


# -- snapshots stay linear -----------------------------------------------------------------


def table_bytes(log: eventlog.EventLog, table: str) -> int:
    return log.store.read(lambda txn: sum(len(v) for _, v in txn.scan(table, b"", None)))


@pytest.mark.parametrize("backend", ["memory", "lmdb"])
def test_checkpoint_at_every_step_keeps_snapshots_below_events(tmp_path: Path, backend: str) -> None:
    """A chat whose state grows with every turn, checkpointed after every event."""
    log = eventlog.open(":memory:") if backend == "memory" else eventlog.open(tmp_path / "log", durability="none")
    rec = log.writer("chat", policy=CheckpointPolicy.every(1))
    first_snapshot = None
    for turn in range(1, 151):
        rec.append(ev.UserMessage(content=f"user says something fairly long in turn {turn} " * 3))
        if first_snapshot is None:
            first_snapshot = table_bytes(log, "snapshots")
        rec.append(
            ev.LLMCallCompleted(
                call_id=str(turn), model="m", output=ev.Message(role="assistant", content=f"answer {turn} " * 8)
            )
        )
    assert log.run_info("chat").checkpoints == 300
    events, snapshots = table_bytes(log, "events"), table_bytes(log, "snapshots")
    assert snapshots <= events + (first_snapshot or 0), (snapshots, events)
    assert log.stats()["snapshots"] < 300 // 2
    # a restore folds no more event bytes than `snapshot_event_bytes_ratio` times the snapshot it starts from
    sizes = log.store.read(
        lambda txn: [(int.from_bytes(k[8:16], "big"), len(v)) for k, v in txn.scan("snapshots", b"", None)]
    )
    event_sizes = log.store.read(lambda txn: [len(v) for _, v in txn.scan("events", b"", None)])
    for k in range(1, 301):
        start, size = max((o, n) for o, n in sizes if o <= k)
        assert sum(event_sizes[start:k]) <= size * snapshot_event_bytes_ratio, k
    # every checkpoint still restores the exact state
    for cp in log.checkpoints.list("chat")[::37]:
        assert len(cp.state.messages) == cp.offset
    log.close()


def test_a_writer_with_a_snapshot_floor_keeps_one_snapshot_until_it(tmp_path: Path) -> None:
    """No snapshot after the first before `snapshot_bytes_min` bytes of events since it; a run
    writer's `checkpoint()` saves the state it holds, without folding it again."""
    floor = 64 * 1024
    log = eventlog.open(tmp_path / "log", durability="none")
    plain = log.writer("plain", policy=CheckpointPolicy.every(1))
    for turn in range(40):
        plain.append(ev.UserMessage(content=f"turn {turn} " * 20))
    assert log.stats()["snapshots"] > 2  # the log's own rule alone: a snapshot every so often
    log.delete_run("plain")
    rec = log.writer("chat", policy=CheckpointPolicy.every(1), snapshot_bytes_min=floor)
    for turn in range(40):
        rec.append(ev.UserMessage(content=f"turn {turn} " * 20))
    assert log.stats()["snapshots"] == 1 and log.run_info("chat").checkpoints == 40
    folds = []
    log._replay.fold = lambda *a, **k: folds.append(a)  # type: ignore[method-assign]
    cp = rec.checkpoint(metadata={"by": "hand"})
    assert folds == [] and cp.offset == 40 and cp.metadata == {"by": "hand"}
    del log._replay.fold
    assert len(cp.state.messages) == 40 and log.stats()["snapshots"] == 1
    for i in range(1000):  # events that do not compress, until the second snapshot
        rec.append(ev.UserMessage(content="".join(hashlib.sha256(f"{i} {j}".encode()).hexdigest() for j in range(10))))
        if log.stats()["snapshots"] == 2:
            break
    assert log.stats()["snapshots"] == 2 and table_bytes(log, "events") >= floor
    log.close()


def test_recorder_does_not_fold_an_event_whose_id_is_known() -> None:
    log = eventlog.open(":memory:")
    rec = log.writer("r", policy=CheckpointPolicy.every(1))
    assert rec.append(ev.UserMessage(content="a"), event_id="x") == 1
    assert rec.append(ev.UserMessage(content="b")) == 2
    assert rec.append(ev.UserMessage(content="a again"), event_id="x") == 1  # a retry: nothing written
    assert rec.offset == 2 and [m.content for m in rec.state.messages] == ["a", "b"]
    assert rec.append_many([ev.UserMessage(content="c"), ev.UserMessage(content="a")], event_ids=["y", "x"]) == [3, 1]
    assert rec.offset == 3 and enc(log, rec.state) == enc(log, log.state_at("r"))
    assert rec.append(ev.UserMessage(content="d")) == 4  # the recorder kept its place: no ConflictError
    assert [c.offset for c in log.checkpoints.list("r")] == [1, 2, 3, 4]
    assert log.verify().ok
