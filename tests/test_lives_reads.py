"""A read above the core that spans calls of the log never joins two lives of one run: the
LangGraph saver's `get_tuple` and `list`, the ADK session service's `get_session` and
`list_sessions`.

Each test deletes the run and makes it again (with other content, the same checkpoint ids or
the same number of events) exactly between two of the reads a call makes, by wrapping the log's
method that the second read goes through for one call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from conflicts import once_before

import eventlog

CFG = {"configurable": {"thread_id": "T", "checkpoint_ns": ""}}
IDS = [f"1f000000-0000-6000-8000-00000000000{i}" for i in range(1, 4)]


def put_thread(saver: Any, life: int, ids: list[str]) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    parent = None
    for n, cid in enumerate(ids):
        cp = empty_checkpoint()
        cp["id"] = cid
        cp["channel_values"] = {"who": f"life{life}-{n}"}
        cp["channel_versions"] = {"who": n + 1}
        conf = {**CFG["configurable"], **({"checkpoint_id": parent} if parent else {})}
        saver.put({"configurable": conf}, cp, {"source": "loop", "step": n, "life": life}, {"who": n + 1})
        parent = cid


def lives_of(tuples: list[Any]) -> list[tuple[str, Any]]:
    return [(t.checkpoint["channel_values"]["who"].split("-")[0], t.metadata.get("life")) for t in tuples]


def test_get_tuple_never_gives_one_life_values_with_the_next_ones_metadata(log: eventlog.EventLog) -> None:
    pytest.importorskip("langgraph")
    from eventlog.langgraph import EventLogSaver

    writer, reader = EventLogSaver(log), EventLogSaver(log)
    put_thread(writer, 1, IDS[:1])

    def remake() -> None:
        writer.delete_thread("T")
        put_thread(writer, 2, IDS[:1])  # the same checkpoint id, other values and metadata

    once_before(log.checkpoints, "load_latest", remake)  # after the reader's writer read life 1
    got = reader.get_tuple(CFG)
    assert got is not None and lives_of([got]) == [("life2", 2)]


def test_list_gives_each_run_checkpoints_of_one_life(log: eventlog.EventLog) -> None:
    """`list` chooses checkpoints, then folds their values: the thread is made again between the
    two (and read by another thread of the same saver, so its cache moves to the new life)."""
    pytest.importorskip("langgraph")
    from eventlog.langgraph import EventLogSaver
    from eventlog.langgraph._serde import SafeSerializer

    arm: list[Callable[[], None]] = []

    class Between(SafeSerializer):  # the listing's filter decodes each chosen checkpoint's metadata here
        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            if arm:
                arm.pop()()
            return super().loads_typed(data)

    writer, reader = EventLogSaver(log), EventLogSaver(log, serde=Between())
    put_thread(writer, 1, IDS)
    assert lives_of(list(reader.list(CFG))) == [("life1", 1)] * 3  # cached, of life 1

    def remake() -> None:
        writer.delete_thread("T")
        put_thread(writer, 2, IDS)
        other = threading.Thread(target=lambda: reader.get_tuple(CFG))
        other.start()
        other.join()

    arm.append(remake)
    got = list(reader.list(CFG, filter={"source": "loop"}))
    assert not arm and lives_of(got) == [("life2", 2)] * 3


def _adk_make(service: Any, life: int, events: int) -> None:
    from google.adk.events import Event, EventActions

    async def make() -> None:
        s = await service.create_session(app_name="app", user_id="u", session_id="s", state={"life": life})
        for i in range(events):
            delta = {"step": f"{life}-{i}"}
            await service.append_event(
                s, Event(author="user", invocation_id=f"i{i}", actions=EventActions(state_delta=delta))
            )

    asyncio.run(make())


def _adk_remake(service: Any, events: int) -> Callable[[], None]:
    def remake() -> None:  # in a thread of its own: the caller is inside an event loop
        def run() -> None:
            asyncio.run(service.delete_session(app_name="app", user_id="u", session_id="s"))
            _adk_make(service, 2, events)

        t = threading.Thread(target=run)
        t.start()
        t.join()

    return remake


@pytest.mark.parametrize("events", [3, 6])
def test_an_adk_session_read_is_of_one_life(log: eventlog.EventLog, events: int) -> None:
    """`get_session` with no recent events, and `list_sessions`: the state is the new life's, at
    its own head, and the session returned is known as of that life (an append with it lands)."""
    pytest.importorskip("google.adk")
    from google.adk.events import Event, EventActions
    from google.adk.sessions.base_session_service import GetSessionConfig

    from eventlog.adk import EventLogSessionService

    other, service = EventLogSessionService(log, offload=False), EventLogSessionService(log, offload=False)
    _adk_make(other, 1, 3)
    once_before(log, "state_at", _adk_remake(other, events))  # after the service read the run's life
    got = asyncio.run(
        service.get_session(app_name="app", user_id="u", session_id="s", config=GetSessionConfig(num_recent_events=0))
    )
    assert got is not None and got.state == {"life": 2, "step": f"2-{events - 1}"}
    asyncio.run(
        service.append_event(got, Event(author="user", invocation_id="x", actions=EventActions(state_delta={"k": 1})))
    )
    lister = EventLogSessionService(log, offload=False)  # one that holds no writer of the session: it folds
    once_before(log, "state_at", _adk_remake(other, events))
    listed = asyncio.run(lister.list_sessions(app_name="app", user_id="u")).sessions
    assert [s.state for s in listed] == [{"life": 2, "step": f"2-{events - 1}"}]


def test_the_runs_table_names_the_view_of_the_life_it_shows(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`eventlog runs` reads each run's info and then its view: a run another process made
    again between the two is shown whole from one life, or not at all, never one life's head
    beside the next one's view."""
    import contextlib
    import io
    import subprocess
    import sys

    from eventlog.cli import main
    from eventlog.events import StepCompleted

    where = str(tmp_path / "log")
    with eventlog.open(where) as log:
        log.append_many("r", [StepCompleted(node=f"n{i}", superstep=i) for i in (1, 2, 3)])
    again = (
        "import asyncio, eventlog\n"
        "from eventlog.openai_agents import EventLogSession\n"
        f"with eventlog.open({where!r}) as log:\n"
        "    log.delete_run('r')\n"
        "    asyncio.run(EventLogSession('r', log).add_items([{'role': 'user', 'content': 'hi'}]))\n"
    )
    real = eventlog.EventLog.run_info

    def run_info(self: Any, run_id: str, **kwargs: Any) -> Any:
        info = real(self, run_id, **kwargs)
        if run_id == "r" and info.head == 3:  # life 1 read: another process makes the run again
            subprocess.run([sys.executable, "-c", again], check=True)
        return info

    monkeypatch.setattr(eventlog.EventLog, "run_info", run_info)
    monkeypatch.setenv("COLUMNS", "200")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["runs", "--log", where]) == 0
    rows = [line for line in out.getvalue().splitlines() if "openai-agents" in line]
    assert all(" 3 " not in row for row in rows), out.getvalue()
    with eventlog.open(where) as log:
        assert log.head("r") == 1  # the other process's life is there: the interleaving happened
