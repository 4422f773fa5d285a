"""Moving LangGraph threads between savers: `copy_threads` and `eventlog langgraph-copy`.

A real graph (messages under `add_messages`, a stateful subgraph that waits on an interrupt, a
fork made by time travel) runs on `SqliteSaver` over a file; its threads are copied to
`EventLogSaver` on LMDB and on PostgreSQL, to `PostgresSaver`, and back from eventlog to a new
`SqliteSaver` file. Each copy must list exactly what the source lists (ids, parents, times,
versions, metadata, values, pending writes, every namespace), give the same
`get_state_history`, and run one more step as the source does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite", reason="pip install 'eventlog[test]'")

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Interrupt, interrupt
from typing_extensions import TypedDict

import eventlog
from eventlog.langgraph import EventLogSaver, LangGraphThreadError, SafeSerializer, copy_threads

PG_DSN = os.environ.get("EVENTLOG_TEST_PG_DSN")
ROOT = Path(__file__).resolve().parent.parent


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def chat(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage(f"heard {len(state['messages'])}")]}


def think(state: State) -> dict[str, Any]:
    return {"messages": [AIMessage("thinking")]}


def ask(state: State) -> dict[str, Any]:
    answer = interrupt("ok?")
    return {"messages": [HumanMessage(f"answer: {answer}")]}


def build(saver: BaseCheckpointSaver[Any]) -> Any:
    sub = StateGraph(State)
    sub.add_node("think", think)
    sub.add_node("ask", ask)
    sub.add_edge(START, "think")
    sub.add_edge("think", "ask")
    parent = StateGraph(State)
    parent.add_node("chat", chat)
    parent.add_node("sub", sub.compile())
    parent.add_edge(START, "chat")
    parent.add_edge("chat", "sub")
    return parent.compile(checkpointer=saver)


def cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def story(graph: Any, thread: str) -> None:
    """Two turns with a resume, a third left waiting, then a fork of the first turn left waiting."""
    graph.invoke({"messages": [HumanMessage("hi")]}, cfg(thread))
    graph.invoke(Command(resume="yes"), cfg(thread))
    graph.invoke({"messages": [HumanMessage("again")]}, cfg(thread))
    first = [s for s in graph.get_state_history(cfg(thread)) if s.next == ("sub",)][-1]
    fork = graph.update_state(first.config, {"messages": [HumanMessage("edited")]})
    graph.invoke(None, fork)


def listing(saver: BaseCheckpointSaver[Any], thread: str) -> list[Any]:
    """Every checkpoint of the thread as the saver lists it, in every namespace, by id."""
    out = []
    for t in saver.list(cfg(thread)):
        conf = t.config["configurable"]
        parent = t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        cp = {k: v for k, v in t.checkpoint.items() if k != "channel_values"}
        values = dict(t.checkpoint["channel_values"])
        out.append((conf["checkpoint_ns"], conf["checkpoint_id"], parent, cp, values, t.metadata, t.pending_writes))
    return sorted(out, key=lambda row: (row[0], row[1]))


def plain(value: Any) -> Any:
    if isinstance(value, BaseMessage):
        return (type(value).__name__, value.content)
    if isinstance(value, Interrupt):
        return ("interrupt", value.value)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def history(graph: Any, thread: str) -> list[Any]:
    """`get_state_history` of the thread, with each task's subgraph state."""
    out = []
    for s in graph.get_state_history(cfg(thread)):
        tasks = [(t.name, plain(t.interrupts), t.error) for t in s.tasks]
        out.append((plain(s.values), s.next, s.metadata, s.created_at, tasks))
    return out


def same(a: BaseCheckpointSaver[Any], b: BaseCheckpointSaver[Any], thread: str) -> None:
    assert listing(b, thread) == listing(a, thread)
    assert history(build(b), thread) == history(build(a), thread)


def one_more_step(a: BaseCheckpointSaver[Any], b: BaseCheckpointSaver[Any], thread: str) -> None:
    """Resume the waiting fork on both: the same values, next nodes and steps come out."""
    for saver in (a, b):
        build(saver).invoke(Command(resume="later"), cfg(thread))
    newest = [build(s).get_state(cfg(thread)) for s in (a, b)]
    assert plain(newest[1].values) == plain(newest[0].values)
    assert "answer: later" in str(plain(newest[1].values))
    assert [(s.next, s.metadata["step"]) for s in newest[1:]] == [(newest[0].next, newest[0].metadata["step"])]


@pytest.fixture
def sqlite_source(tmp_path: Path) -> Iterator[SqliteSaver]:
    with SqliteSaver.from_conn_string(str(tmp_path / "threads.sqlite")) as saver:
        graph = build(saver)
        story(graph, "t1")
        story(graph, "t2|odd\\id")
        assert graph.get_state(cfg("t1")).interrupts  # an interrupt is pending
        assert any(ns for ns, *_ in listing(saver, "t1"))  # the subgraph has checkpoints of its own
        yield saver


@contextlib.contextmanager
def postgres_schema() -> Iterator[str]:
    """A DSN whose tables go in a fresh schema, dropped after."""
    if not PG_DSN:
        pytest.skip("set EVENTLOG_TEST_PG_DSN to run the PostgreSQL copies")
    import psycopg

    schema = f"mv_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def schema_dsn(schema: str) -> str:
    assert PG_DSN
    return PG_DSN + ("&" if "?" in PG_DSN else "?") + f"options=-csearch_path%3D{schema}"


def test_sqlite_to_eventlog_on_lmdb_and_back(sqlite_source: SqliteSaver, tmp_path: Path) -> None:
    with EventLogSaver.from_path(tmp_path / "log") as saver:
        report = copy_threads(sqlite_source, saver)
        assert report.threads == ("t1", "t2|odd\\id")
        assert report.checkpoints == len(listing(sqlite_source, "t1")) + len(listing(sqlite_source, "t2|odd\\id"))
        assert report.writes > 0
        for thread in report.threads:
            same(sqlite_source, saver, thread)
        with SqliteSaver.from_conn_string(str(tmp_path / "back.sqlite")) as back:
            copy_threads(saver, back, ["t1"])
            same(saver, back, "t1")
            assert listing(back, "t2|odd\\id") == []
        one_more_step(sqlite_source, saver, "t1")


def test_sqlite_to_eventlog_on_postgresql(sqlite_source: SqliteSaver) -> None:
    with postgres_schema() as schema:
        from eventlog.store.postgres import PostgresStore

        with eventlog.open(PostgresStore(PG_DSN or "", schema=schema)) as log:
            saver = EventLogSaver(log)
            copy_threads(sqlite_source, saver, ["t1"])
            same(sqlite_source, saver, "t1")
            one_more_step(sqlite_source, saver, "t1")
            saver.close()


def test_sqlite_to_postgres_saver_and_on_to_eventlog(sqlite_source: SqliteSaver, tmp_path: Path) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    with postgres_schema() as schema, PostgresSaver.from_conn_string(schema_dsn(schema)) as pg:
        pg.setup()
        copy_threads(sqlite_source, pg, ["t1"])
        same(sqlite_source, pg, "t1")
        with EventLogSaver.from_path(tmp_path / "log") as saver:
            copy_threads(pg, saver)
            same(pg, saver, "t1")
        one_more_step(sqlite_source, pg, "t1")


def test_a_thread_the_target_holds_is_refused_by_name_unless_replaced(
    sqlite_source: SqliteSaver, tmp_path: Path
) -> None:
    with EventLogSaver.from_path(tmp_path / "log") as saver:
        build(saver).invoke({"messages": [HumanMessage("mine")]}, cfg("t2|odd\\id"))
        before = listing(saver, "t2|odd\\id")
        with pytest.raises(LangGraphThreadError, match=r"t2\|odd"):
            copy_threads(sqlite_source, saver)
        assert listing(saver, "t1") == []  # checked before the first write
        assert listing(saver, "t2|odd\\id") == before
        with pytest.raises(LangGraphThreadError, match="nope"):
            copy_threads(sqlite_source, saver, ["t1", "nope"])
        assert listing(saver, "t1") == []
        seen: list[tuple[int, int]] = []
        copy_threads(sqlite_source, saver, replace=True, progress=lambda d, t: seen.append((d, t)))
        same(sqlite_source, saver, "t2|odd\\id")
        assert seen[-1][0] == seen[-1][1] == len(seen)


@dataclasses.dataclass
class Secret:
    """A type no reader allows: building it would run its code."""

    text: str
    built = 0

    def __post_init__(self) -> None:
        type(self).built += 1


def test_a_type_not_allowed_is_copied_as_its_bytes_and_never_built(tmp_path: Path) -> None:
    writer = SqliteSaver.from_conn_string(str(tmp_path / "s.sqlite"))
    with writer as source:
        conf = {"configurable": {"thread_id": "x", "checkpoint_ns": ""}}
        checkpoint = {
            "v": 4,
            "id": "1f000000-0000-6000-8000-000000000001",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {"secret": Secret("s1")},
            "channel_versions": {"secret": "00000000000000000000000000000001.0000000000000000"},
            "versions_seen": {},
            "updated_channels": ["secret"],
        }
        saved = source.put(conf, checkpoint, {"source": "input", "step": -1}, checkpoint["channel_versions"])  # type: ignore[arg-type]
        source.put_writes(saved, [("secret", Secret("w1"))], "task-1")
        Secret.built = 0
        with EventLogSaver.from_path(tmp_path / "log") as saver:
            copy_threads(source, saver)
            assert Secret.built == 0  # the copy built none
            allowed = EventLogSaver(saver.log, serde=SafeSerializer(allowed_modules=[Secret]))
            tup = allowed.get_tuple(cfg("x"))
            assert tup is not None
            assert tup.checkpoint["channel_values"]["secret"] == Secret("s1")
            assert tup.pending_writes == [("task-1", "secret", Secret("w1"))]
            allowed.close()


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "eventlog", *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_cli_copies_to_a_log_and_back(sqlite_source: SqliteSaver, tmp_path: Path) -> None:
    src = tmp_path / "threads.sqlite"
    log = tmp_path / "cli.lmdb"
    done = run_cli("langgraph-copy", "--from", f"sqlite:{src}", "--to", str(log), "--thread", "t1", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["threads"] == ["t1"] and report["checkpoints"] == len(listing(sqlite_source, "t1"))
    with EventLogSaver.from_path(log) as saver:
        same(sqlite_source, saver, "t1")
    again = run_cli("langgraph-copy", "--from", f"sqlite:{src}", "--to", str(log), "--thread", "t1")
    assert again.returncode == 4 and "'t1'" in again.stderr and "--replace" in again.stderr
    back = tmp_path / "back.sqlite"
    done = run_cli("langgraph-copy", "--from", str(log), "--to", f"sqlite:{back}")
    assert done.returncode == 0, done.stderr
    assert "t1" in done.stdout
    with SqliteSaver.from_conn_string(str(back)) as copy:
        same(sqlite_source, copy, "t1")
    fresh = tmp_path / "fresh.lmdb"
    missing = run_cli("langgraph-copy", "--from", f"sqlite:{src}", "--to", str(fresh), "--thread", "nope")
    assert missing.returncode == 3 and "'nope'" in missing.stderr, missing.stderr
    assert not fresh.exists()  # a failed copy leaves no log where there was none


def test_pending_writes_keep_the_order_of_their_task_paths(tmp_path: Path) -> None:
    """Task paths sort the tasks of a checkpoint otherwise than their ids: the copy keeps that order."""
    with SqliteSaver.from_conn_string(str(tmp_path / "s.sqlite")) as source:
        conf = {"configurable": {"thread_id": "w", "checkpoint_ns": ""}}
        checkpoint = {
            "v": 4,
            "id": "1f000000-0000-6000-8000-000000000002",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {},
            "channel_versions": {},
            "versions_seen": {},
            "updated_channels": None,
        }
        saved = source.put(conf, checkpoint, {"source": "loop", "step": 0}, {})  # type: ignore[arg-type]
        source.put_writes(saved, [("x", "from z"), ("x", "z again")], "z-task", "~__pregel_pull, a")
        source.put_writes(saved, [("x", "from a"), ("__interrupt__", "stop")], "a-task", "~__pregel_pull, b")
        expected = source.get_tuple(saved)
        assert expected is not None and [w[0] for w in expected.pending_writes or ()][:2] == ["z-task"] * 2
        with EventLogSaver.from_path(tmp_path / "log") as saver:
            copy_threads(source, saver)
            copied = saver.get_tuple(cfg("w"))
            assert copied is not None and copied.pending_writes == expected.pending_writes


def test_cli_copies_to_postgres_saver(sqlite_source: SqliteSaver, tmp_path: Path) -> None:
    from langgraph.checkpoint.postgres import PostgresSaver

    with postgres_schema() as schema:
        dsn = schema_dsn(schema)
        done = run_cli("langgraph-copy", "--from", f"sqlite:{tmp_path / 'threads.sqlite'}", "--to", f"postgres:{dsn}")
        assert done.returncode == 0, done.stderr
        with PostgresSaver.from_conn_string(dsn) as pg:
            for thread in ("t1", "t2|odd\\id"):
                same(sqlite_source, pg, thread)


class Pickled:
    """A value LangGraph's serializer can only pickle."""


def test_a_pickled_value_is_refused_by_thread_before_any_write(tmp_path: Path) -> None:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from eventlog.langgraph import RefusedValueError

    with SqliteSaver.from_conn_string(str(tmp_path / "p.sqlite")) as source:
        source.serde = JsonPlusSerializer(pickle_fallback=True)
        build(source).invoke({"messages": [HumanMessage("hi")]}, cfg("fine"))
        conf = {"configurable": {"thread_id": "pickled", "checkpoint_ns": ""}}
        checkpoint = {
            "v": 4,
            "id": "1f000000-0000-6000-8000-000000000003",
            "ts": "2026-01-01T00:00:00+00:00",
            "channel_values": {"x": Pickled()},
            "channel_versions": {"x": 1},
            "versions_seen": {},
            "updated_channels": ["x"],
        }
        source.put(conf, checkpoint, {"source": "input", "step": -1}, {"x": 1})  # type: ignore[arg-type]
        with EventLogSaver.from_path(tmp_path / "log") as saver:
            with pytest.raises(RefusedValueError, match="the source: a 'pickle' value"):
                copy_threads(source, saver)
            with pytest.raises(RefusedValueError, match="thread 'pickled': a 'pickle' value"):
                copy_threads(source, saver, ["fine", "pickled"])
            assert listing(saver, "fine") == []
