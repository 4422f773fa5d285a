"""The store contract, part one: appends and reads, fencing and ids, reopening, run ids."""

from __future__ import annotations

from typing import Any

import pytest

from .._limits import read_chunk_entries
from ..agent.state import AgentState
from ..errors import ConflictError, OffsetOutOfRangeError, UnknownRunError
from ..events import UserMessage
from ..log import EventLog
from ._helpers import OpenLog, feed_keys, offsets_of, step


class AppendContract:
    """Appends get offsets 1 to the head without gaps; reads and the feed return them in order."""

    def test_append_returns_offsets_one_to_head_without_gaps(self, log: EventLog[Any]) -> None:
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
        self, log: EventLog[Any], after: int, upto: int | None, expected: list[int]
    ) -> None:
        log.append_many("r", [step(i) for i in range(1, 7)])
        got = list(log.read("r", after=after, upto=upto))
        assert [e.offset for e in got] == expected
        assert [e.event.superstep for e in got] == expected  # type: ignore[attr-defined]
        assert all(e.run_id == "r" for e in got)

    def test_read_spans_more_than_one_chunk(self, log: EventLog[Any]) -> None:
        n = read_chunk_entries * 2 + 7
        log.append_many("r", [step(i) for i in range(1, n + 1)])
        assert offsets_of(log, "r") == list(range(1, n + 1))
        assert offsets_of(log, "r", after=1000, upto=1030) == list(range(1001, 1031))

    def test_entry_carries_offset_position_id_time_meta(self, open_log: OpenLog) -> None:
        clock = iter(range(1_000, 10_000, 10))
        log = open_log(clock=lambda: next(clock))
        log.append("r", step(1), event_id="first", meta={"who": "me"})
        log.append("r", step(2))
        e = log.entry("r", 1)
        first = 1 if log.store.dense else e.position
        assert (e.run_id, e.offset, e.position, e.event_id, e.meta, e.event) == (
            "r",
            1,
            first,
            "first",
            {"who": "me"},
            step(1),
        )
        assert e.time_ns == 1_000
        e2 = log.entry("r", 2)
        assert (e2.offset, e2.meta, e2.time_ns) == (2, None, 1_010)
        assert e2.position == 2 if log.store.dense else e2.position > e.position
        assert e2.event_id and e2.event_id != "first"
        assert list(log.read("r", 0, 1)) == [e]

    def test_events_in_one_batch_share_meta_and_time(self, open_log: OpenLog) -> None:
        log = open_log(clock=lambda: 42)
        log.append_many("r", [step(1), step(2)], meta={"batch": 1})
        assert [(e.meta, e.time_ns) for e in log.read("r")] == [({"batch": 1}, 42), ({"batch": 1}, 42)]

    def test_feed_order_is_commit_order_across_runs(self, log: EventLog[Any]) -> None:
        commits = []
        for i, run in enumerate(["b", "a", "c", "a", "b", "b", "a"]):
            off = log.append(run, step(i))
            commits.append((run, off))
        commits += [("c", o) for o in log.append_many("c", [step(100), step(101)])]
        got = list(log.feed())
        assert [(e.run_id, e.offset) for e in got] == commits
        positions = [e.position for e in got]
        if log.store.dense:
            assert positions == list(range(1, len(commits) + 1))
        assert positions == sorted(set(positions)) and positions[0] >= 1  # PostgreSQL: increasing, not consecutive
        assert [(e.run_id, e.offset) for e in log.feed(after=positions[3])] == commits[4:]
        assert [(e.run_id, e.offset) for e in log.feed(after=positions[1], limit=3)] == commits[2:5]
        assert list(log.feed(after=positions[-1])) == []
        for e in got:
            assert log.entry(e.run_id, e.offset) == e

    def test_feed_order_is_kept_across_reopen(self, open_log: OpenLog) -> None:
        log = open_log()
        log.append("a", step(1))
        log.append("b", step(2))
        log.close()
        log = open_log()
        log.append("a", step(3))
        got = list(log.feed())
        assert [(e.run_id, e.offset) for e in got] == [("a", 1), ("b", 1), ("a", 2)]
        assert [e.position for e in got] == ([1, 2, 3] if log.store.dense else sorted({e.position for e in got}))


class FenceContract:
    """Fencing (`expected_offset`) and idempotent event ids write nothing twice; a reopen keeps everything."""

    def test_expected_offset_fences_and_writes_nothing(self, log: EventLog[Any]) -> None:
        assert log.append("r", step(1), expected_offset=0) == 1
        assert log.append_many("r", [step(2), step(3)], expected_offset=1) == [2, 3]
        before = feed_keys(log)
        with pytest.raises(ConflictError) as info:
            log.append_many("r", [step(9), step(10)], expected_offset=1)
        assert info.value.run_id == "r" and info.value.expected == 1 and info.value.head == 3
        assert "'r'" in str(info.value) and "3" in str(info.value)
        with pytest.raises(ConflictError):
            log.append("r", step(9), expected_offset=4)
        assert log.head("r") == 3
        assert feed_keys(log) == before
        assert log.append("r", step(4), expected_offset=3) == 4

    def test_expected_offset_on_a_new_run(self, log: EventLog[Any]) -> None:
        with pytest.raises(ConflictError):
            log.append("new", step(1), expected_offset=2)
        assert log.head("new") == 0
        assert "new" not in log.runs()
        assert list(log.feed()) == []

    def test_event_id_is_idempotent(self, log: EventLog[Any]) -> None:
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

    def test_event_id_survives_reopen(self, open_log: OpenLog) -> None:
        log = open_log()
        log.append_many("r", [step(1), step(2)], event_ids=["e1", "e2"])
        log.close()
        log = open_log()
        assert log.append("r", step(9), event_id="e2") == 2
        assert log.append("r", step(9), event_id="e1") == 1
        assert log.head("r") == 2
        assert [e.event for e in log.read("r")] == [step(1), step(2)]

    def test_reopen_keeps_everything(self, open_log: OpenLog) -> None:
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


class RunIdContract:
    """Unknown and empty runs, and run ids that are prefixes of each other, Unicode or long."""

    def test_unknown_run(self, log: EventLog[Any]) -> None:
        log.append("known", step(1))
        assert log.head("nope") == 0
        with pytest.raises(UnknownRunError, match="nope"):
            list(log.read("nope"))
        with pytest.raises(UnknownRunError, match="nope"):
            log.run_info("nope")
        with pytest.raises(UnknownRunError, match="nope"):
            log.state_at("nope")
        with pytest.raises(UnknownRunError, match="nope"):
            log.state_at("nope", 0)
        with pytest.raises(UnknownRunError):
            log.entry("nope", 1)
        with pytest.raises(UnknownRunError):
            log.fork("nope", 0, "x")
        with pytest.raises(UnknownRunError):
            log.delete_run("nope")
        with pytest.raises(UnknownRunError):
            log.checkpoints.save("nope")
        with pytest.raises(UnknownRunError):
            log.checkpoints.list("nope")
        assert log.runs() == ["known"]
        assert "x" not in log.runs()

    def test_empty_run(self, log: EventLog[Any]) -> None:
        # A fork at 0 of a run is a run with no events of its own and no shared ones.
        log.append("r", step(1))
        log.fork("r", 0, "empty")
        assert log.head("empty") == 0
        assert list(log.read("empty")) == []
        assert log.run_info("empty").head == 0
        assert log.codec.encode_state(log.state_at("empty")) == log.codec.encode_state(AgentState())
        assert log.codec.encode_state(log.state_at("empty", 0)) == log.codec.encode_state(AgentState())
        with pytest.raises(OffsetOutOfRangeError):
            log.entry("empty", 1)
        assert log.append("empty", step(7)) == 1
        assert [e.event for e in log.read("empty")] == [step(7)]
        assert [e.event for e in log.read("r")] == [step(1)]

    def test_empty_log(self, log: EventLog[Any]) -> None:
        assert log.runs() == []
        assert list(log.feed()) == []
        assert log.verify().ok

    def test_runs_whose_ids_are_prefixes_of_each_other(self, log: EventLog[Any]) -> None:
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
    def test_unicode_and_1_kib_run_ids(self, open_log: OpenLog, run_id: str) -> None:
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

    def test_long_run_ids_sharing_a_long_prefix_stay_apart(self, open_log: OpenLog) -> None:
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
