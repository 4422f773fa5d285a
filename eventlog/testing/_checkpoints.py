"""The store contract, part two: checkpoints, forks, prune, delete and verify."""

from __future__ import annotations

from typing import Any

import pytest

from ..agent.policy import CheckpointPolicy
from ..errors import (
    CheckpointNotFoundError,
    ClosedError,
    ConflictError,
    ForkDependencyError,
    OffsetOutOfRangeError,
    PrunedError,
    RunExistsError,
    UnknownRunError,
)
from ..events import Interrupted, RunCompleted, RunStarted, SuperstepCompleted
from ..log import EventLog
from ._helpers import OpenLog, feed_keys, fold, step


class CheckpointContract:
    """Checkpoints saved, loaded, listed, read a chunk at a time, updated and deleted."""

    def test_checkpoints_save_load_list_delete(self, log: EventLog[Any]) -> None:
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
        assert loaded.summary == {
            "superstep": 0,
            "completed_nodes": ["n1", "n2"],
            "paused_nodes": [],
            "status": "pending",
        }
        assert loaded.state.values == {"i": 2}
        assert log.run_info("r").checkpoints == 3

        log.checkpoints.delete("r", "c3")
        latest = log.checkpoints.load_latest("r")
        assert latest is not None and latest.checkpoint_id == "c2"
        log.checkpoints.delete("r", "c2")
        latest = log.checkpoints.load_latest("r")
        assert latest is not None and latest.checkpoint_id == "c1"
        with pytest.raises(CheckpointNotFoundError, match="c2"):
            log.checkpoints.load("r", "c2")
        with pytest.raises(CheckpointNotFoundError):
            log.checkpoints.delete("r", "c2")
        log.checkpoints.delete("r", "c1")
        assert log.checkpoints.load_latest("r") is None
        assert log.checkpoints.list("r") == []
        # the state at every offset is still right without any checkpoint
        assert [log.state_at("r", k).values.get("i") for k in range(7)] == [None, 1, 2, 3, 4, 5, 6]

    def test_checkpoints_iter_reads_every_checkpoint_a_chunk_at_a_time(
        self, log: EventLog[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr("eventlog._limits.read_chunk_entries", 2)
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
        with pytest.raises(ConflictError):
            list(it)
        with pytest.raises(UnknownRunError):
            list(log.checkpoints.iter("missing"))

    def test_checkpoint_without_id_gets_a_new_one(self, log: EventLog[Any]) -> None:
        log.append("r", step(1))
        a = log.checkpoints.save("r")
        b = log.checkpoints.save("r")
        assert a.checkpoint_id != b.checkpoint_id
        assert [c.checkpoint_id for c in log.checkpoints.list("r")] == [a.checkpoint_id, b.checkpoint_id]

    def test_checkpoint_upsert_updates_metadata_and_is_not_latest(self, log: EventLog[Any]) -> None:
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

    def test_checkpoint_at_offset_out_of_range(self, log: EventLog[Any]) -> None:
        log.append("r", step(1))
        with pytest.raises(OffsetOutOfRangeError):
            log.checkpoints.save("r", 2)
        with pytest.raises(OffsetOutOfRangeError):
            log.checkpoints.save("r", -1)
        assert log.checkpoints.list("r") == []


class ForkContract:
    """Forks share their parent's events by reference, and forks of forks."""

    def test_fork_shares_events_and_keeps_the_original_future(self, log: EventLog[Any]) -> None:
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

    def test_forks_of_forks(self, log: EventLog[Any]) -> None:
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
                fold([e.event for e in log.read("f2", upto=k)])
            )
        with pytest.raises(ForkDependencyError):
            log.delete_run("f1")
        with pytest.raises(ForkDependencyError):
            log.delete_run("f2")
        log.delete_run("f3")
        log.delete_run("f2")
        log.delete_run("f1")
        log.delete_run("r")
        assert log.runs() == []
        assert list(log.feed()) == []

    def test_fork_refusals(self, log: EventLog[Any]) -> None:
        log.append_many("r", [step(1), step(2)])
        log.append("other", step(1))
        with pytest.raises(RunExistsError):
            log.fork("r", 1, "other")
        with pytest.raises(OffsetOutOfRangeError):
            log.fork("r", 3, "x")
        with pytest.raises(OffsetOutOfRangeError):
            log.fork("r", -1, "x")
        assert log.runs() == ["other", "r"]
        assert log.run_info("r").forks == 0


class RemovalContract:
    """Prune and delete remove only what they name, refuse while forks depend on it; verify and close."""

    def test_prune(self, log: EventLog[Any]) -> None:
        log.append_many("r", [RunStarted(input={"x": 0})] + [step(i) for i in range(1, 10)])
        log.checkpoints.save("r", 3, checkpoint_id="c3")
        log.checkpoints.save("r", 6, checkpoint_id="c6")
        log.checkpoints.save("r", 8, checkpoint_id="c8")
        expected = {k: log.codec.encode_state(log.state_at("r", k)) for k in range(11)}
        assert log.prune("r", before=7) == 6
        info = log.run_info("r")
        assert info.base == 6 and info.head == 10
        for k in range(6):
            with pytest.raises(PrunedError) as exc:
                log.state_at("r", k)
            assert exc.value.run_id == "r" and exc.value.base == 6
        for k in range(6, 11):
            assert log.codec.encode_state(log.state_at("r", k)) == expected[k]
        assert [c.checkpoint_id for c in log.checkpoints.list("r")] == ["c6", "c8"]
        assert [e.offset for e in log.read("r", after=6)] == [7, 8, 9, 10]
        with pytest.raises(PrunedError):
            list(log.read("r"))
        assert [e.offset for e in log.feed()] == [7, 8, 9, 10]
        assert log.append("r", step(11)) == 11
        assert log.verify().ok
        with pytest.raises(CheckpointNotFoundError):
            log.prune("r", before=2)  # nothing at or below 2 is kept any more

    def test_a_fork_of_a_pruned_run_has_its_base(self, log: EventLog[Any]) -> None:
        log.append_many("r", [step(i) for i in range(1, 7)])
        log.checkpoints.save("r", 4)
        log.prune("r", before=4)
        log.fork("r", 5, "child")
        log.fork("child", 5, "grandchild")
        log.append("child", step(7))
        for run_id in ("child", "grandchild"):
            info = log.run_info(run_id)
            assert info.base == 4  # its events up to there are gone with its parent's
            assert [e.offset for e in log.read(run_id, after=info.base)] == list(range(5, info.head + 1))
            with pytest.raises(PrunedError) as exc:
                list(log.read(run_id, after=info.base - 1))
            assert exc.value.base == 4
            assert log.state_at(run_id, info.base).values == {"i": 4}
        assert log.run_info("r").base == 4 and log.run_info("child").head == 6

    def test_prune_refused_while_forks_exist(self, log: EventLog[Any]) -> None:
        log.append_many("r", [step(i) for i in range(1, 6)])
        log.checkpoints.save("r", 4)
        log.fork("r", 2, "child")
        feed = feed_keys(log)
        with pytest.raises(ForkDependencyError, match="'r'"):
            log.prune("r", before=4)
        assert log.run_info("r").base == 0
        assert feed_keys(log) == feed
        assert log.state_at("child").values == {"i": 2}
        log.delete_run("child")
        assert log.prune("r", before=4) == 4
        assert log.run_info("r").forks == 0

    def test_prune_keeps_the_latest_checkpoint_of_a_paused_run(self, log: EventLog[Any]) -> None:
        rec = log.writer("paused", policy=CheckpointPolicy.every(2))
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
        with pytest.raises(PrunedError):
            log.state_at("paused", 4)

    def test_delete_run_refused_while_forks_exist(self, log: EventLog[Any]) -> None:
        log.append_many("r", [step(i) for i in range(1, 4)])
        log.fork("r", 2, "child")
        with pytest.raises(ForkDependencyError):
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

    def test_delete_run_removes_only_that_run(self, log: EventLog[Any]) -> None:
        log.append("keep", step(1), event_id="k")
        log.append("gone", step(1), event_id="k")
        log.checkpoints.save("gone", 1)
        log.append("keep", step(2))
        log.delete_run("gone")
        assert [(e.run_id, e.offset) for e in log.feed()] == [("keep", 1), ("keep", 2)]
        assert log.append("keep", step(3), event_id="k") == 1
        assert log.append("gone", step(3), event_id="k") == 1
        assert log.verify().ok

    def test_verify_a_healthy_log(self, log: EventLog[Any]) -> None:
        log.append_many(
            "r", [RunStarted(input={"a": 1}), step(1), SuperstepCompleted(superstep=1), RunCompleted(output=1)]
        )
        log.checkpoints.save("r", 2)
        log.checkpoints.save("r")
        log.fork("r", 3, "f")
        log.append("f", step(9))
        log.checkpoints.save("f")
        report = log.verify()
        assert report.ok, report.problems
        assert report.runs == 2 and report.checkpoints == 3

    def test_closed_log_refuses(self, open_log: OpenLog) -> None:
        log = open_log()
        log.append("r", step(1))
        log.close()
        with pytest.raises(ClosedError):
            log.append("r", step(2))
        with pytest.raises(ClosedError):
            log.head("r")

    def test_a_pruned_fork_refuses_offsets_below_its_base(self, log: EventLog[Any]) -> None:
        log.append_many("p", [step(i) for i in range(1, 6)])
        log.checkpoints.save("p", 2)
        log.fork("p", 3, "c")
        log.append_many("c", [step(i) for i in range(40, 45)])
        log.checkpoints.save("c", 6)
        assert log.prune("c", before=6) == 6
        for k in range(6):  # the parent still holds offsets 1..3, but they are below the fork's base
            with pytest.raises(PrunedError):
                log.state_at("c", k)
        with pytest.raises(PrunedError):
            list(log.read("c", 0, 2))
        assert [e.offset for e in log.read("c", after=6)] == [7, 8]
        assert log.state_at("c", 8).values == {"i": 44}
        assert log.state_at("p", 3).values == {"i": 3}  # the parent is untouched
        with pytest.raises(PrunedError):
            log.fork("c", 2, "cc")
        assert log.verify().ok
