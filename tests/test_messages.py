"""What an error or a verify report says is true: a run pruned by a reducer verify was not given
(a LangGraph thread its saver pruned, a fork of it, sealed or not) is named with the reducer that
keeps its base, and its records are still checked; a conflict met after a writer's retries names
the heads expected and found, and the attempts.
"""

from __future__ import annotations

import operator
import re
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph.checkpoint.conformance", reason="pip install 'eventlog[test]' (langgraph extras)")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

import eventlog
from eventlog import cli
from eventlog.events import StepCompleted, UserMessage
from eventlog.langgraph import EventLogSaver, SafeSerializer, ThreadReducer
from eventlog.langgraph._write import CONFLICT_RETRIES
from eventlog.record.tables import EVENTS

KEY = bytes(range(32))
CONFIG: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


class Notes(TypedDict, total=False):
    notes: Annotated[list, operator.add]


def two_steps(saver: EventLogSaver) -> Any:
    g = StateGraph(Notes)
    g.add_node("a", lambda s: {"notes": ["a"]})
    g.add_node("b", lambda s: {"notes": ["b"]})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g.compile(checkpointer=saver)


class Counting:
    """A reducer the command line does not know."""

    name, version, state_type = "counting", 1, int

    def initial(self) -> int:
        return 0

    def apply(self, state: int, event: eventlog.Event) -> int:
        return state + 1


def offsets_named(message: str) -> list[str]:
    return re.findall(r"offset (\d+)", message)


# -- verify of a pruned run ------------------------------------------------------------------------


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_verify_of_a_thread_the_saver_pruned_names_the_reducer_that_keeps_its_base(
    tmp_path: Path, sealed: bool
) -> None:
    with eventlog.open(tmp_path / "log", key=KEY if sealed else None) as log:
        saver = EventLogSaver(log)
        graph = two_steps(saver)
        graph.invoke({"notes": []}, CONFIG)
        graph.invoke({"notes": []}, CONFIG)
        saver.prune(["t"])
        base = log.run_info("t").base
        assert base > 0
        log.fork("t", at=base, new_run_id="t-fork")  # no checkpoint of its own: it folds from t's base
        reducer = ThreadReducer()
        tag = f"{reducer.name}@{reducer.version}"

        report = log.verify()  # by the log's reducer, which keeps no state at the base
        assert report.ok, report.problems
        assert report.runs == 2
        assert [(n.run_id, n.offset, n.kind) for n in report.notes] == [
            ("t", base, "reducer"),
            ("t-fork", base, "reducer"),
        ]
        for note in report.notes:
            assert f"the state at offset {base}, where " in note.message
            assert f"is kept only by reducer {tag!r}, which verify was not given" in note.message
            assert offsets_named(note.message) == [str(base)]  # one offset, named once
        assert "where the run was pruned" in report.notes[0].message
        assert "where run 't', which it forks from, was pruned" in report.notes[1].message

        whole = log.verify(reducers=[reducer])  # as the guide and the command line pass it: the fork too
        assert whole.ok and whole.notes == [] and whole.runs == 2, (whole.problems, whole.notes)

        with pytest.raises(eventlog.errors.PrunedError) as exc:  # a fold by the log's reducer says why not
            log.state_at("t-fork")
        said = str(exc.value)
        assert f"is kept only by reducer {tag!r}, not by {log.reducer.name}@{log.reducer.version}" in said
        assert f"the state at offset {base}, where run 't', which it forks from, was pruned, is kept" in said


def test_a_run_pruned_by_a_reducer_verify_lacks_is_checked_not_folded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log"
    with eventlog.open(path) as log:
        log.append_many("r", [UserMessage(content=str(i)) for i in range(6)])
        log.checkpoints.save("r", 3, reducer=Counting())
        assert log.prune("r", before=3, reducer=Counting()) == 3
        report = log.verify()
        assert report.ok and report.events == 3, report.problems
        assert [(n.run_id, n.offset, n.kind) for n in report.notes] == [("r", 3, "reducer")]
        assert offsets_named(report.notes[0].message) == ["3"]
        assert log.verify(reducers=[Counting()]).notes == []

    monkeypatch.delenv("EVENTLOG_KINDS", raising=False)
    monkeypatch.setenv("COLUMNS", "400")
    capsys.readouterr()
    assert cli.main(["--log", str(path), "verify"]) == 0  # a note is not a problem
    out = capsys.readouterr().out
    assert "not checked" in out and "'counting@1'" in out and "1 note(s)" in out
    assert cli.main(["--log", str(path), "verify", "--json"]) == 0
    assert '"kind":"reducer"' in capsys.readouterr().out.replace(" ", "")

    with eventlog.open(path) as log:  # a damaged entry after the base is found though the run is not folded
        key = EVENTS.key(log.run_info("r").number, 5)
        value = bytearray(log.store.read(lambda txn: txn.get(EVENTS, key)))
        value[len(value) // 2] ^= 0xFF
        log.store.write(lambda txn: txn.put(EVENTS, key, bytes(value)))
        report = log.verify()
        assert [(p.run_id, p.offset, p.kind) for p in report.problems] == [("r", 5, "corrupt")]


def test_a_run_pruned_while_verify_reads_it_is_read_again(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        log.append_many("r", [StepCompleted(node="n", superstep=i) for i in range(1, 10_001)])
        log.checkpoints.save("r", 9_000)
        pruned: list[int] = []

        def progress(n: int) -> None:  # after verify's first chunk of the run, another caller prunes it
            if not pruned:
                pruned.append(log.prune("r", before=9_000))

        report = log.verify(progress=progress)
        assert pruned == [9_000]
        assert report.ok, report.problems
        assert report.notes == []
        assert report.events == 1_000 and report.runs == 1  # the run as it is now, checked once


# -- a conflict after retries ----------------------------------------------------------------------


class Jostled(SafeSerializer):
    """A serializer that lets another writer append to the thread each time it writes "jostle",
    between the saver's read of the thread and its commit: every attempt meets a conflict."""

    def __init__(self) -> None:
        super().__init__()
        self.log: eventlog.EventLog[Any] | None = None

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if obj == "jostle" and self.log is not None:
            self.log.append("t", StepCompleted(node="other writer", superstep=1))
        return super().dumps_typed(obj)


def test_a_conflict_after_the_savers_retries_names_the_heads_expected_and_found(tmp_path: Path) -> None:
    """A `put` writes its checkpoint's values at each attempt (a `put_writes` writes its values
    once, when called, and takes the same retries: `ConflictError.last_of`)."""
    serde = Jostled()
    with eventlog.open(tmp_path / "log") as log:
        saver = EventLogSaver(log, serde=serde)
        first = empty_checkpoint()
        first["channel_values"], first["channel_versions"] = {"v": "calm"}, {"v": 1}
        config = saver.put(CONFIG, first, {"step": 0}, {"v": 1})
        head = log.head("t")
        serde.log = log
        with pytest.raises(eventlog.ConflictError) as exc:
            second = empty_checkpoint()
            second["channel_values"], second["channel_versions"] = {"v": "jostle"}, {"v": 2}
            saver.put(config, second, {"step": 1}, {"v": 2})
        error, last = exc.value, head + CONFLICT_RETRIES
        # each attempt read the head the one before found; the last expected the head before the last append
        assert (
            f"run 't': expected head {last - 1} but head is {last} at the last of {CONFLICT_RETRIES} attempts"
            in str(error)
        )
        assert (error.expected, error.head, error.attempts) == (last - 1, last, CONFLICT_RETRIES)
        assert log.head("t") == last
