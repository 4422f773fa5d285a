"""The store contract, written once and run against every store (memory, LMDB, PostgreSQL when configured).

Each test takes the `log` or `open_log` fixture from conftest.py; the in-memory store is the
reference and every other store must answer the same.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

import eventlog
from eventlog.events import (
    RunCompleted,
    RunStarted,
    StepCompleted,
    SuperstepCompleted,
    UserMessage,
)

OpenLog = Callable[..., eventlog.EventLog]


def step(i: int, node: str | None = None) -> StepCompleted:
    return StepCompleted(node=node or f"n{i}", superstep=i, update={"i": i})


def offsets_of(log: eventlog.EventLog, run_id: str, after: int = 0, upto: int | None = None) -> list[int]:
    return [e.offset for e in log.read(run_id, after=after, upto=upto)]


def feed_keys(log: eventlog.EventLog) -> list[tuple[str, int, int]]:
    return [(e.run_id, e.offset, e.position) for e in log.feed()]


# -- append and read -------------------------------------------------------------------


def test_append_returns_offsets_one_to_head_without_gaps(log: eventlog.EventLog) -> None:
    assert log.append("r", step(1)) == 1
    assert log.append("r", step(2)) == 2
    assert log.append_many("r", [step(3), step(4), step(5)]) == [3, 4, 5]
    assert log.head("r") == 5
    assert offsets_of(log, "r") == [1, 2, 3, 4, 5]
    assert [e.event for e in log.read("r")] == [step(i) for i in range(1, 6)]


@pytest.mark.parametrize(
    ("after", "upto", "expected"),
    [
        (0, None, [1, 2, 3, 4, 5, 6]),
        (0, 0, []),
        (0, 1, [1]),
        (2, 4, [3, 4]),
        (5, 6, [6]),
        (6, 6, []),
        (6, None, []),
        (3, 3, []),
        (4, 2, []),
    ],
)
def test_read_returns_offsets_in_after_upto(
    log: eventlog.EventLog, after: int, upto: int | None, expected: list[int]
) -> None:
    log.append_many("r", [step(i) for i in range(1, 7)])
    got = list(log.read("r", after=after, upto=upto))
    assert [e.offset for e in got] == expected
    assert [e.event.superstep for e in got] == expected  # type: ignore[attr-defined]
    assert all(e.run_id == "r" for e in got)


def test_read_spans_more_than_one_chunk(log: eventlog.EventLog) -> None:
    n = eventlog._limits.read_chunk_entries * 2 + 7
    log.append_many("r", [step(i) for i in range(1, n + 1)])
    assert offsets_of(log, "r") == list(range(1, n + 1))
    assert offsets_of(log, "r", after=1000, upto=1030) == list(range(1001, 1031))


def test_entry_carries_offset_position_id_time_meta(open_log: OpenLog) -> None:
    clock = iter(range(1_000, 10_000, 10))
    log = open_log(clock=lambda: next(clock))
    log.append("r", step(1), event_id="first", meta={"who": "me"})
    log.append("r", step(2))
    e = log.entry("r", 1)
    assert (e.run_id, e.offset, e.position, e.event_id, e.meta, e.event) == ("r", 1, 1, "first", {"who": "me"}, step(1))
    assert e.time_ns == 1_000
    e2 = log.entry("r", 2)
    assert (e2.offset, e2.position, e2.meta, e2.time_ns) == (2, 2, None, 1_010)
    assert e2.event_id and e2.event_id != "first"
    assert list(log.read("r", 0, 1)) == [e]


def test_events_in_one_batch_share_meta_and_time(open_log: OpenLog) -> None:
    log = open_log(clock=lambda: 42)
    log.append_many("r", [step(1), step(2)], meta={"batch": 1})
    assert [(e.meta, e.time_ns) for e in log.read("r")] == [({"batch": 1}, 42), ({"batch": 1}, 42)]


def test_feed_order_is_commit_order_across_runs(log: eventlog.EventLog) -> None:
    commits = []
    for i, run in enumerate(["b", "a", "c", "a", "b", "b", "a"]):
        off = log.append(run, step(i))
        commits.append((run, off))
    commits += [("c", o) for o in log.append_many("c", [step(100), step(101)])]
    got = list(log.feed())
    assert [(e.run_id, e.offset) for e in got] == commits
    assert [e.position for e in got] == list(range(1, len(commits) + 1))
    assert [(e.run_id, e.offset) for e in log.feed(after=4)] == commits[4:]
    assert [(e.run_id, e.offset) for e in log.feed(after=2, limit=3)] == commits[2:5]
    assert list(log.feed(after=len(commits))) == []
    for e in got:
        assert log.entry(e.run_id, e.offset) == e


def test_feed_order_is_kept_across_reopen(open_log: OpenLog) -> None:
    log = open_log()
    log.append("a", step(1))
    log.append("b", step(2))
    log.close()
    log = open_log()
    log.append("a", step(3))
    assert [(e.run_id, e.offset, e.position) for e in log.feed()] == [("a", 1, 1), ("b", 1, 2), ("a", 2, 3)]


# -- fencing and idempotency -------------------------------------------------------------


def test_expected_offset_fences_and_writes_nothing(log: eventlog.EventLog) -> None:
    assert log.append("r", step(1), expected_offset=0) == 1
    assert log.append_many("r", [step(2), step(3)], expected_offset=1) == [2, 3]
    before = feed_keys(log)
    with pytest.raises(eventlog.ConflictError) as info:
        log.append_many("r", [step(9), step(10)], expected_offset=1)
    assert info.value.run_id == "r" and info.value.expected == 1 and info.value.head == 3
    assert "'r'" in str(info.value) and "3" in str(info.value)
    with pytest.raises(eventlog.ConflictError):
        log.append("r", step(9), expected_offset=4)
    assert log.head("r") == 3
    assert feed_keys(log) == before
    assert log.append("r", step(4), expected_offset=3) == 4


def test_expected_offset_on_a_new_run(log: eventlog.EventLog) -> None:
    with pytest.raises(eventlog.ConflictError):
        log.append("new", step(1), expected_offset=2)
    assert log.head("new") == 0
    assert "new" not in log.runs()
    assert list(log.feed()) == []


def test_event_id_is_idempotent(log: eventlog.EventLog) -> None:
    assert log.append("r", step(1), event_id="e1") == 1
    assert log.append("r", step(2), event_id="e2") == 2
    before = feed_keys(log)
    assert log.append("r", step(99), event_id="e1") == 1
    assert log.append("r", step(99), event_id="e2", expected_offset=0) == 2
    assert log.head("r") == 2
    assert feed_keys(log) == before
    assert log.entry("r", 1).event == step(1)
    # a batch with a known id writes only the new ones
    assert log.append_many("r", [step(5), step(3)], event_ids=["e1", "e3"]) == [1, 3]
    assert log.head("r") == 3
    assert log.entry("r", 3).event_id == "e3"
    # the same event id in another run is another event
    assert log.append("other", step(1), event_id="e1") == 1


def test_event_id_survives_reopen(open_log: OpenLog) -> None:
    log = open_log()
    log.append("r", step(1), event_id="e1")
    log.close()
    log = open_log()
    assert log.append("r", step(2), event_id="e1") == 1
    assert log.head("r") == 1


# -- reopen ------------------------------------------------------------------------------


def test_reopen_keeps_everything(open_log: OpenLog) -> None:
    log = open_log()
    log.append_many("r", [step(i) for i in range(1, 6)], event_ids=[f"e{i}" for i in range(1, 6)])
    log.append("s", UserMessage(content="héllo"))
    cp = log.checkpoints.save("r", 3, metadata={"k": "v"}, checkpoint_id="cp3")
    log.fork("r", 2, "r-fork")
    entries = list(log.read("r"))
    feed = list(log.feed())
    state = log.codec.encode_state(log.state_at("r"))
    log.close()
    log = open_log()
    assert list(log.read("r")) == entries
    assert list(log.feed()) == feed
    assert log.runs() == ["r", "r-fork", "s"]
    assert log.head("r") == 5 and log.head("r-fork") == 2 and log.head("s") == 1
    assert log.codec.encode_state(log.state_at("r")) == state
    again = log.checkpoints.load("r", "cp3")
    assert (again.offset, again.metadata, again.checkpoint_id) == (3, {"k": "v"}, "cp3")
    assert log.codec.encode_state(again.state) == log.codec.encode_state(cp.state)
    info = log.run_info("r-fork")
    assert (info.parent, info.fork_offset) == ("r", 2)
    assert log.append("r", step(6)) == 6


# -- unknown and empty runs --------------------------------------------------------------


def test_unknown_run(log: eventlog.EventLog) -> None:
    log.append("known", step(1))
    assert log.head("nope") == 0
    with pytest.raises(eventlog.UnknownRunError, match="nope"):
        list(log.read("nope"))
    with pytest.raises(eventlog.UnknownRunError, match="nope"):
        log.run_info("nope")
    with pytest.raises(eventlog.UnknownRunError, match="nope"):
        log.state_at("nope")
    with pytest.raises(eventlog.UnknownRunError, match="nope"):
        log.state_at("nope", 0)
    with pytest.raises(eventlog.UnknownRunError):
        log.entry("nope", 1)
    with pytest.raises(eventlog.UnknownRunError):
        log.fork("nope", 0, "x")
    with pytest.raises(eventlog.UnknownRunError):
        log.delete_run("nope")
    with pytest.raises(eventlog.UnknownRunError):
        log.checkpoints.save("nope")
    with pytest.raises(eventlog.UnknownRunError):
        log.checkpoints.list("nope")
    assert log.runs() == ["known"]
    assert "x" not in log.runs()


def test_empty_run(log: eventlog.EventLog) -> None:
    # A fork at 0 of a run is a run with no events of its own and no shared ones.
    log.append("r", step(1))
    log.fork("r", 0, "empty")
    assert log.head("empty") == 0
    assert list(log.read("empty")) == []
    assert log.run_info("empty").head == 0
    assert log.codec.encode_state(log.state_at("empty")) == log.codec.encode_state(eventlog.AgentState())
    assert log.codec.encode_state(log.state_at("empty", 0)) == log.codec.encode_state(eventlog.AgentState())
    with pytest.raises(eventlog.OffsetOutOfRangeError):
        log.entry("empty", 1)
    assert log.append("empty", step(7)) == 1
    assert [e.event for e in log.read("empty")] == [step(7)]
    assert [e.event for e in log.read("r")] == [step(1)]


def test_empty_log(log: eventlog.EventLog) -> None:
    assert log.runs() == []
    assert list(log.feed()) == []
    assert log.verify().ok


# -- run ids -----------------------------------------------------------------------------


def test_runs_whose_ids_are_prefixes_of_each_other(log: eventlog.EventLog) -> None:
    ids = ["a", "ab", "abc", "a\x00", "b", "a" * 300, "ab" * 100]
    for round_ in range(3):
        for n, rid in enumerate(ids):
            log.append(rid, step(round_ * 100 + n), event_id=f"{round_}")
    assert log.runs() == sorted(ids, key=lambda s: s.encode())
    for n, rid in enumerate(ids):
        assert log.head(rid) == 3
        assert [e.event for e in log.read(rid)] == [step(r * 100 + n) for r in range(3)]
        assert log.append(rid, step(0), event_id="1") == 2
    cp = log.checkpoints.save("a", 2, checkpoint_id="x")
    log.checkpoints.save("ab", 1, checkpoint_id="x")
    assert [c.offset for c in log.checkpoints.list("a")] == [2]
    assert [c.offset for c in log.checkpoints.list("ab")] == [1]
    assert log.checkpoints.load("a", "x").offset == cp.offset
    log.delete_run("a")
    assert "a" not in log.runs()
    for rid in ids[1:]:
        assert log.head(rid) == 3
        assert len(list(log.read(rid))) == 3
    assert log.checkpoints.load("ab", "x").offset == 1
    assert sorted({e.run_id for e in log.feed()}) == sorted(ids[1:])
    assert log.verify().ok


@pytest.mark.parametrize(
    "run_id",
    [
        "héllo wörld",
        "日本語の実行",
        "emoji 🚀🧪",
        "x" * 1024,
        "é" * 512,  # 1,024 UTF-8 bytes
        "🚀" * 256,  # 1,024 UTF-8 bytes
        "a/b:c?d#e",
        " ",
    ],
)
def test_unicode_and_1_kib_run_ids(open_log: OpenLog, run_id: str) -> None:
    log = open_log()
    log.append(run_id, step(1))
    log.append_many(run_id, [step(2), step(3)])
    log.checkpoints.save(run_id, 2, checkpoint_id="c")
    log.fork(run_id, 1, run_id[:-1] + "F" if len(run_id.encode()) >= 1024 else run_id + "F")
    log.close()
    log = open_log()
    assert run_id in log.runs()
    assert log.head(run_id) == 3
    assert [e.run_id for e in log.read(run_id)] == [run_id] * 3
    assert [e.run_id for e in log.feed()] == [run_id] * 3
    assert log.run_info(run_id).run_id == run_id
    assert log.checkpoints.load(run_id, "c").offset == 2
    assert log.state_at(run_id).values == {"i": 3}


# -- checkpoints -------------------------------------------------------------------------


def test_checkpoints_save_load_list_delete(log: eventlog.EventLog) -> None:
    log.append_many("r", [step(i) for i in range(1, 7)])
    c1 = log.checkpoints.save("r", 2, checkpoint_id="c1", metadata={"n": 1})
    c2 = log.checkpoints.save("r", 4, checkpoint_id="c2")
    c3 = log.checkpoints.save("r", checkpoint_id="c3")  # default: the head
    assert (c1.offset, c2.offset, c3.offset) == (2, 4, 6)
    assert c3.state.values == {"i": 6}
    assert [c.checkpoint_id for c in log.checkpoints.list("r")] == ["c1", "c2", "c3"]
    assert [c.checkpoint_id for c in log.checkpoints.list("r", limit=2)] == ["c2", "c3"]
    assert [c.checkpoint_id for c in log.checkpoints.list("r", limit=1)] == ["c3"]
    assert log.checkpoints.list("r", limit=0) == []
    assert [c.checkpoint_id for c in log.checkpoints.list("r", limit=10)] == ["c1", "c2", "c3"]
    latest = log.checkpoints.load_latest("r")
    assert latest is not None and latest.checkpoint_id == "c3"
    loaded = log.checkpoints.load("r", "c1")
    assert (loaded.run_id, loaded.offset, loaded.metadata, loaded.reducer, loaded.reducer_version) == (
        "r",
        2,
        {"n": 1},
        "agent",
        1,
    )
    assert loaded.summary == {"superstep": 0, "completed_nodes": ["n1", "n2"], "paused_nodes": [], "status": "pending"}
    assert loaded.state.values == {"i": 2}
    assert log.run_info("r").checkpoints == 3

    log.checkpoints.delete("r", "c3")
    latest = log.checkpoints.load_latest("r")
    assert latest is not None and latest.checkpoint_id == "c2"
    log.checkpoints.delete("r", "c2")
    latest = log.checkpoints.load_latest("r")
    assert latest is not None and latest.checkpoint_id == "c1"
    with pytest.raises(eventlog.CheckpointNotFoundError, match="c2"):
        log.checkpoints.load("r", "c2")
    with pytest.raises(eventlog.CheckpointNotFoundError):
        log.checkpoints.delete("r", "c2")
    log.checkpoints.delete("r", "c1")
    assert log.checkpoints.load_latest("r") is None
    assert log.checkpoints.list("r") == []
    # the state at every offset is still right without any checkpoint
    assert [log.state_at("r", k).values.get("i") for k in range(7)] == [None, 1, 2, 3, 4, 5, 6]


def test_checkpoints_iter_reads_every_checkpoint_a_chunk_at_a_time(
    log: eventlog.EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(eventlog._limits, "read_chunk_entries", 2)
    log.append_many("r", [step(i) for i in range(1, 8)])
    for offset in (1, 3, 5, 7, 2):
        log.checkpoints.save("r", offset, checkpoint_id=f"c{offset}")
    log.append("other", step(1))
    log.checkpoints.save("other")
    listed = [(c.checkpoint_id, c.offset, c.state) for c in log.checkpoints.list("r")]
    assert [(c.checkpoint_id, c.offset, c.state) for c in log.checkpoints.iter("r")] == listed
    assert [c for c, _, _ in listed] == ["c1", "c3", "c5", "c7", "c2"]
    it = log.checkpoints.iter("r")
    next(it), next(it)
    log.delete_run("r")  # and made again: what the iterator read no longer holds
    log.append("r", step(1))
    log.checkpoints.save("r")
    with pytest.raises(eventlog.ConflictError):
        list(it)
    with pytest.raises(eventlog.UnknownRunError):
        list(log.checkpoints.iter("missing"))


def test_checkpoint_without_id_gets_a_new_one(log: eventlog.EventLog) -> None:
    log.append("r", step(1))
    a = log.checkpoints.save("r")
    b = log.checkpoints.save("r")
    assert a.checkpoint_id != b.checkpoint_id
    assert [c.checkpoint_id for c in log.checkpoints.list("r")] == [a.checkpoint_id, b.checkpoint_id]


def test_checkpoint_upsert_updates_metadata_and_is_not_latest(log: eventlog.EventLog) -> None:
    log.append_many("r", [step(i) for i in range(1, 5)])
    log.checkpoints.save("r", 1, checkpoint_id="c1", metadata={"v": 1})
    log.checkpoints.save("r", 3, checkpoint_id="c2")
    again = log.checkpoints.save("r", 4, checkpoint_id="c1", metadata={"v": 2})
    assert again.offset == 1  # the offset of the existing checkpoint, not the new one
    assert [(c.checkpoint_id, c.offset, c.metadata) for c in log.checkpoints.list("r")] == [
        ("c1", 1, {"v": 2}),
        ("c2", 3, {}),
    ]
    latest = log.checkpoints.load_latest("r")
    assert latest is not None and latest.checkpoint_id == "c2"
    assert log.checkpoints.load("r", "c1").metadata == {"v": 2}
    assert log.run_info("r").checkpoints == 2


def test_checkpoint_at_offset_out_of_range(log: eventlog.EventLog) -> None:
    log.append("r", step(1))
    with pytest.raises(eventlog.OffsetOutOfRangeError):
        log.checkpoints.save("r", 2)
    with pytest.raises(eventlog.OffsetOutOfRangeError):
        log.checkpoints.save("r", -1)
    assert log.checkpoints.list("r") == []


# -- fork --------------------------------------------------------------------------------


def test_fork_shares_events_and_keeps_the_original_future(log: eventlog.EventLog) -> None:
    log.append_many("r", [step(i) for i in range(1, 6)])
    events_before = len(list(log.feed()))
    assert log.fork("r", 3, "r-b") == "r-b"
    assert len(list(log.feed())) == events_before  # nothing copied
    assert log.head("r-b") == 3
    shared = list(log.read("r-b"))
    assert [e.offset for e in shared] == [1, 2, 3]
    assert [e.run_id for e in shared] == ["r-b"] * 3
    assert [(e.position, e.event_id, e.event) for e in shared] == [
        (e.position, e.event_id, e.event) for e in log.read("r", upto=3)
    ]
    assert log.append("r-b", step(40)) == 4
    assert [e.event for e in log.read("r-b", after=2)] == [step(3), step(40)]
    assert [e.event for e in log.read("r")] == [step(i) for i in range(1, 6)]
    assert log.state_at("r-b").values == {"i": 40}
    assert log.state_at("r").values == {"i": 5}
    info = log.run_info("r-b")
    assert (info.parent, info.fork_offset, info.head) == ("r", 3, 4)
    assert log.run_info("r").forks == 1
    assert log.entry("r-b", 2).event == step(2)


def test_forks_of_forks(log: eventlog.EventLog) -> None:
    log.append_many("r", [step(i) for i in range(1, 6)])
    log.checkpoints.save("r", 2)
    log.fork("r", 4, "f1")
    log.append_many("f1", [step(50), step(60)])
    log.checkpoints.save("f1", 5)
    log.fork("f1", 5, "f2")
    log.append("f2", step(700))
    log.fork("f2", 1, "f3")
    assert [e.event.superstep for e in log.read("f2")] == [1, 2, 3, 4, 50, 700]  # type: ignore[attr-defined]
    assert [e.event.superstep for e in log.read("f3")] == [1]  # type: ignore[attr-defined]
    assert [e.event.superstep for e in log.read("f1")] == [1, 2, 3, 4, 50, 60]  # type: ignore[attr-defined]
    for k in range(7):
        assert log.codec.encode_state(log.state_at("f2", k)) == log.codec.encode_state(
            _fold_events([e.event for e in log.read("f2", upto=k)])
        )
    with pytest.raises(eventlog.ForkDependencyError):
        log.delete_run("f1")
    with pytest.raises(eventlog.ForkDependencyError):
        log.delete_run("f2")
    log.delete_run("f3")
    log.delete_run("f2")
    log.delete_run("f1")
    log.delete_run("r")
    assert log.runs() == []
    assert list(log.feed()) == []


def test_fork_refusals(log: eventlog.EventLog) -> None:
    log.append_many("r", [step(1), step(2)])
    log.append("other", step(1))
    with pytest.raises(eventlog.RunExistsError):
        log.fork("r", 1, "other")
    with pytest.raises(eventlog.OffsetOutOfRangeError):
        log.fork("r", 3, "x")
    with pytest.raises(eventlog.OffsetOutOfRangeError):
        log.fork("r", -1, "x")
    assert log.runs() == ["other", "r"]
    assert log.run_info("r").forks == 0


def _fold_events(events: list[eventlog.Event]) -> eventlog.AgentState:
    reducer = eventlog.AgentReducer()
    state = reducer.initial()
    for e in events:
        state = reducer.apply(state, e)
    return state


# -- prune and delete ----------------------------------------------------------------------


def test_prune(log: eventlog.EventLog) -> None:
    log.append_many("r", [RunStarted(input={"x": 0})] + [step(i) for i in range(1, 10)])
    log.checkpoints.save("r", 3, checkpoint_id="c3")
    log.checkpoints.save("r", 6, checkpoint_id="c6")
    log.checkpoints.save("r", 8, checkpoint_id="c8")
    expected = {k: log.codec.encode_state(log.state_at("r", k)) for k in range(11)}
    assert log.prune("r", before=7) == 6
    info = log.run_info("r")
    assert info.base == 6 and info.head == 10
    for k in range(6):
        with pytest.raises(eventlog.PrunedError) as exc:
            log.state_at("r", k)
        assert exc.value.run_id == "r" and exc.value.base == 6
    for k in range(6, 11):
        assert log.codec.encode_state(log.state_at("r", k)) == expected[k]
    assert [c.checkpoint_id for c in log.checkpoints.list("r")] == ["c6", "c8"]
    assert [e.offset for e in log.read("r", after=6)] == [7, 8, 9, 10]
    with pytest.raises(eventlog.PrunedError):
        list(log.read("r"))
    assert [e.offset for e in log.feed()] == [7, 8, 9, 10]
    assert log.append("r", step(11)) == 11
    assert log.verify().ok
    with pytest.raises(eventlog.CheckpointNotFoundError):
        log.prune("r", before=2)  # nothing at or below 2 is kept any more


def test_prune_refused_while_forks_exist(log: eventlog.EventLog) -> None:
    log.append_many("r", [step(i) for i in range(1, 6)])
    log.checkpoints.save("r", 4)
    log.fork("r", 2, "child")
    feed = feed_keys(log)
    with pytest.raises(eventlog.ForkDependencyError, match="'r'"):
        log.prune("r", before=4)
    assert log.run_info("r").base == 0
    assert feed_keys(log) == feed
    assert log.state_at("child").values == {"i": 2}
    log.delete_run("child")
    assert log.prune("r", before=4) == 4
    assert log.run_info("r").forks == 0


def test_prune_keeps_the_latest_checkpoint_of_a_paused_run(log: eventlog.EventLog) -> None:
    from eventlog.events import Interrupted

    rec = log.writer("paused", policy=eventlog.CheckpointPolicy.every(2))
    for i in range(1, 5):
        rec.append(step(i))
    rec.append(Interrupted(nodes=["approve"], reason="sign off"))
    latest = log.checkpoints.save("paused")  # the pause's checkpoint, at the head
    assert latest.summary["paused_nodes"] == ["approve"]
    base = log.prune("paused", before=10**6)
    assert base == latest.offset == 5
    kept = log.checkpoints.load_latest("paused")
    assert kept is not None and kept.checkpoint_id == latest.checkpoint_id
    assert kept.state.status == "paused" and kept.state.paused_nodes == ["approve"]
    assert log.state_at("paused").values == {"i": 4}
    with pytest.raises(eventlog.PrunedError):
        log.state_at("paused", 4)


def test_delete_run_refused_while_forks_exist(log: eventlog.EventLog) -> None:
    log.append_many("r", [step(i) for i in range(1, 4)])
    log.fork("r", 2, "child")
    with pytest.raises(eventlog.ForkDependencyError):
        log.delete_run("r")
    assert log.head("r") == 3
    assert len(list(log.feed())) == 3
    log.delete_run("child")
    log.delete_run("r")
    assert log.runs() == []
    assert log.head("r") == 0
    # a deleted run id can be used again from offset 1
    assert log.append("r", step(1)) == 1
    assert log.checkpoints.list("r") == []


def test_delete_run_removes_only_that_run(log: eventlog.EventLog) -> None:
    log.append("keep", step(1), event_id="k")
    log.append("gone", step(1), event_id="k")
    log.checkpoints.save("gone", 1)
    log.append("keep", step(2))
    log.delete_run("gone")
    assert [(e.run_id, e.offset) for e in log.feed()] == [("keep", 1), ("keep", 2)]
    assert log.append("keep", step(3), event_id="k") == 1
    assert log.append("gone", step(3), event_id="k") == 1
    assert log.verify().ok


def test_verify_a_healthy_log(log: eventlog.EventLog) -> None:
    log.append_many("r", [RunStarted(input={"a": 1}), step(1), SuperstepCompleted(superstep=1), RunCompleted(output=1)])
    log.checkpoints.save("r", 2)
    log.checkpoints.save("r")
    log.fork("r", 3, "f")
    log.append("f", step(9))
    log.checkpoints.save("f")
    report = log.verify()
    assert report.ok, report.problems
    assert report.runs == 2 and report.checkpoints == 3


def test_closed_log_refuses(open_log: OpenLog) -> None:
    log = open_log()
    log.append("r", step(1))
    log.close()
    with pytest.raises(eventlog.ClosedError):
        log.append("r", step(2))
    with pytest.raises(eventlog.ClosedError):
        log.head("r")


def test_a_pruned_fork_refuses_offsets_below_its_base(log: eventlog.EventLog) -> None:
    log.append_many("p", [step(i) for i in range(1, 6)])
    log.checkpoints.save("p", 2)
    log.fork("p", 3, "c")
    log.append_many("c", [step(i) for i in range(40, 45)])
    log.checkpoints.save("c", 6)
    assert log.prune("c", before=6) == 6
    for k in range(6):  # the parent still holds offsets 1..3, but they are below the fork's base
        with pytest.raises(eventlog.PrunedError):
            log.state_at("c", k)
    with pytest.raises(eventlog.PrunedError):
        list(log.read("c", 0, 2))
    assert [e.offset for e in log.read("c", after=6)] == [7, 8]
    assert log.state_at("c", 8).values == {"i": 44}
    assert log.state_at("p", 3).values == {"i": 3}  # the parent is untouched
    with pytest.raises(eventlog.PrunedError):
        log.fork("c", 2, "cc")
    assert log.verify().ok


def test_long_run_ids_sharing_a_long_prefix_stay_apart(open_log: OpenLog) -> None:
    stem = "x" * 448
    ids = [stem + "b", stem + "a" * 500, stem + "a" * 501, stem, "x" * 449, stem + "é" * 200]
    log = open_log()
    for n, rid in enumerate(ids):
        log.append(rid, step(n))
    log.close()
    log = open_log()
    assert log.runs() == sorted(ids, key=str.encode)
    for n, rid in enumerate(ids):
        assert [e.event for e in log.read(rid)] == [step(n)]
        assert log.run_info(rid).run_id == rid
    log.delete_run(stem + "a" * 500)
    assert log.runs() == sorted([i for i in ids if i != stem + "a" * 500], key=str.encode)
    assert log.head(stem + "a" * 501) == 1
