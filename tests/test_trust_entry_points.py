"""Trust through the entry points above the core: nothing read runs code, and one read is of one
life of a run, whatever saver, service or datastore it goes through.

Each test plants what a hostile or unlucky user could (a saver file holding a value that names a
callable; a run deleted and made again between two reads of one call, by wrapping the log's
method that the later read goes through for one call, as tests/test_lives_reads.py does) and
reads through the real framework package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conflicts import once_before

import eventlog

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "ran"
    yield path
    assert not path.exists(), "stored code ran"


# -- copy_threads reads its target as it reads its source ------------------------------------------


def _plant_sqlite_thread(path: Path, thread_id: str, marker: Path) -> None:
    """A SqliteSaver file holding a checkpoint of `thread_id` whose values name callables (every
    msgpack extension LangGraph writes), as another program could have left it."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver
    from test_safe_decode import hostile_values

    with SqliteSaver.from_conn_string(str(path)) as planter:
        cp: Any = empty_checkpoint()
        cp["channel_values"] = hostile_values(marker)
        cp["channel_versions"] = dict.fromkeys(cp["channel_values"], planter.get_next_version(None, None))
        conf: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        planter.put(conf, cp, {"source": "input", "step": -1}, dict(cp["channel_versions"]))


def _eventlog_thread(where: Path, thread_id: str) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    from eventlog.langgraph import EventLogSaver

    with EventLogSaver.from_path(where) as saver:
        cp: Any = empty_checkpoint()
        cp["channel_values"] = {"said": "hello"}
        cp["channel_versions"] = {"said": 1}
        conf: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        saver.put(conf, cp, {"source": "input", "step": -1}, {"said": 1})


class Foreign:
    """A serializer that is not LangGraph's: what it reads, a copy cannot read safely."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return "foreign", repr(obj).encode()

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        raise AssertionError("never read")


def test_a_copy_looks_at_its_target_without_running_what_the_target_holds(tmp_path: Path, marker: Path) -> None:
    """`copy_threads` (and `eventlog langgraph-copy --to sqlite:FILE`) asks the target whether it
    holds each thread already: the target's checkpoints are read through the copy's safe reader,
    never through the target saver's own serializer (LangGraph's default builds any type a value
    names). The thread is found there (ThreadExistsError, exit 4) and replaced when asked; the
    file's values are never built."""
    pytest.importorskip("langgraph.checkpoint.sqlite")
    from langgraph.checkpoint.sqlite import SqliteSaver

    from eventlog.langgraph import EventLogSaver, LangGraphThreadError, ThreadExistsError, copy_threads

    target_file, log_dir = tmp_path / "target.sqlite", tmp_path / "log"
    _plant_sqlite_thread(target_file, "t1", marker)
    _eventlog_thread(log_dir, "t1")
    with EventLogSaver.from_path(log_dir) as source, SqliteSaver.from_conn_string(str(target_file)) as target:
        with pytest.raises(ThreadExistsError, match="'t1'"):
            copy_threads(source, target)
        assert not marker.exists(), "the copy ran what the target holds"
        report = copy_threads(source, target, replace=True)
        assert report.threads == ("t1",) and not marker.exists()
        from langgraph.checkpoint.memory import InMemorySaver

        with pytest.raises(LangGraphThreadError, match="the target saver's serializer is a Foreign"):
            copy_threads(source, InMemorySaver(serde=Foreign()))  # its values could not be read safely
    _plant_sqlite_thread(tmp_path / "again.sqlite", "t1", marker)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "eventlog", "langgraph-copy", "--from", str(log_dir), "--to"]
        + [f"sqlite:{tmp_path / 'again.sqlite'}", "--thread", "t1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 4 and "'t1'" in done.stderr, done.stderr
    assert not marker.exists(), "eventlog langgraph-copy ran what the target holds"


# -- WayFlow's Responses service: a listing of one life -----------------------------------------


def before_call(owner: Any, name: str, n: int, action: Callable[[], None]) -> None:
    """Wrap `owner.name` so that `action` runs once, before its `n`th call from now."""
    real, calls = getattr(owner, name), [0]

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == n:
            setattr(owner, name, real)
            action()
        return real(*args, **kwargs)

    setattr(owner, name, wrapped)


def _server_row(turn: str, n: int) -> dict[str, Any]:
    import yaml  # type: ignore[import-untyped]

    return {
        "agent_id": "trip",
        "conversation_id": "c",
        "turn_id": turn,
        "created_at": n,
        "conversation_turn_state": yaml.safe_dump({"n": n}),
        "is_last_turn": 1,
        "extra_metadata": "",
    }


@pytest.mark.parametrize(
    ("between", "call"),
    [("run_info", 1), ("state_at", 2)],
    ids=["rows-and-their-base", "rows-and-their-states"],
)
def test_a_wayflow_server_listing_is_of_one_life_of_its_conversation(
    log: eventlog.EventLog, between: str, call: int
) -> None:
    """`EventLogDatastore.list` reads a conversation's rows, then its pruned base, then each
    row's state: the conversation deleted and made again between two of these reads is listed
    whole from one life (here the new one), never one life's responses with the other's
    conversations; a delete decided on a listing lands only in the life it listed."""
    pytest.importorskip("wayflowcore")
    import yaml

    from eventlog.wayflow.server import EventLogDatastore

    store, other = EventLogDatastore(log), EventLogDatastore(log)
    for i in range(3):
        store.create("conversations", _server_row(f"old-{i}", i))
    run = next(r for r in log.runs() if r.endswith("/c"))

    def remake() -> None:
        log.delete_run(run)
        for i in range(3):
            other.create("conversations", _server_row(f"new-{i}", 100 + i))

    before_call(log, between, call, remake)
    rows = store.list("conversations", {"conversation_id": "c"})
    got = [(r["turn_id"], yaml.safe_load(r["conversation_turn_state"])["n"]) for r in rows]
    assert got == [(f"new-{i}", 100 + i) for i in range(3)]

    def made_again() -> None:
        log.delete_run(run)
        other.create("conversations", _server_row("newest-0", 200))

    before_call(log, "append", 1, made_again)  # after the delete listed the rows to delete
    store.delete("conversations", {"conversation_id": "c"})
    assert [type(e.event).__name__ for e in log.read(run)] == ["ServerTurn", "ServerTurnDeleted"]
    assert store.list("conversations", {"conversation_id": "c"}) == []


# -- a prune decided on one life never prunes the next --------------------------------------------


def _put_checkpoints(saver: Any, thread_id: str, life: int, count: int) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    parent = None
    for n in range(count):
        cp: Any = empty_checkpoint()
        cp["id"] = f"1f000000-0000-6000-8000-{life:04d}{n:08d}"
        cp["channel_values"] = {"who": f"life{life}-{n}"}
        cp["channel_versions"] = {"who": n + 1}
        conf: Any = {"thread_id": thread_id, "checkpoint_ns": "", **({"checkpoint_id": parent} if parent else {})}
        saver.put({"configurable": conf}, cp, {"source": "loop", "step": n}, {"who": n + 1})
        parent = cp["id"]


def test_a_prune_is_of_the_life_it_was_read_on(log: eventlog.EventLog) -> None:
    """`log.prune(run_number=)` (and its async twin) prunes only that life of the run; the
    LangGraph saver's `prune(keep_latest)` reads a thread's checkpoints, then prunes below the
    latest: the thread deleted and made again by another saver between the two is read again
    and pruned to its own latest checkpoint, never below an offset read on the life that went
    (which kept four of the new life's five checkpoints, the offset of the old one's latest)."""
    pytest.importorskip("langgraph")
    from eventlog.aio import AsyncEventLog
    from eventlog.langgraph import EventLogSaver

    pruner, other = EventLogSaver(log), EventLogSaver(log)
    _put_checkpoints(pruner, "T", 1, 2)
    run = next(r for r in log.runs())
    old = log.life(run)[0]

    def remake() -> None:
        other.delete_thread("T")
        _put_checkpoints(other, "T", 2, 5)

    once_before(log, "prune", remake)  # after the saver read the thread's latest checkpoint
    pruner.prune(["T"])
    cfg: Any = {"configurable": {"thread_id": "T", "checkpoint_ns": ""}}
    assert [t.checkpoint["channel_values"]["who"] for t in other.list(cfg)] == ["life2-4"]
    assert log.verify(reducer=pruner.reducer).ok  # type: ignore[attr-defined]

    import asyncio

    with pytest.raises(eventlog.errors.RunReplacedError):
        log.prune(run, before=log.head(run), reducer=pruner.reducer, run_number=old)  # type: ignore[attr-defined]
    with pytest.raises(eventlog.errors.RunReplacedError):
        asyncio.run(AsyncEventLog(log).prune(run, before=log.head(run), reducer=pruner.reducer, run_number=old))  # type: ignore[attr-defined]
