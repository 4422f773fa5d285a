"""eventlog.adk's session service, judged by ADK's own InMemorySessionService: the same calls on
both give the same answers, on every store. Offline: the agent's model is scripted (tests/adk_app.py).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="the adk extra is not installed")

from adk_app import build_agent, user
from conflicts import Jostling
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events import Event, EventActions
from google.adk.platform import time as platform_time
from google.adk.platform import uuid as platform_uuid
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.tools.tool_confirmation import ToolConfirmation
from google.genai import types
from hypothesis import given, settings
from hypothesis import strategies as st
from lives_support import right_after

import eventlog
from eventlog.adk import (
    VIEW,
    AdkEvent,
    EventLogSessionService,
    InvocationNotFoundError,
    SessionForked,
    app_run,
    session_run,
)
from eventlog.adk._events import SessionReducer

APP, USER = "app", "ann"


@pytest.fixture(autouse=True)
def _clock_and_ids() -> Iterator[None]:
    """ADK's time and id sources, counted: the same calls on two services give the same values."""
    reset_sources()
    yield
    platform_time.reset_time_provider()
    platform_uuid.reset_id_provider()


def reset_sources() -> None:
    ticks, ids = itertools.count(1_000), itertools.count(1)
    platform_time.set_time_provider(lambda: float(next(ticks)))
    platform_uuid.set_id_provider(lambda: f"id-{next(ids)}")


def said(who: str, words: str, ts: float, eid: str, inv: str = "inv-1", **delta: Any) -> Event:
    role = "user" if who == "user" else "model"
    return Event(
        id=eid,
        author=who,
        invocation_id=inv,
        timestamp=ts,
        content=types.Content(role=role, parts=[types.Part(text=words)]),
        actions=EventActions(state_delta=dict(delta)),
    )


def shown(result: Any) -> Any:
    """A call's result as plain data, to compare between services."""
    if isinstance(result, Session):
        return result.model_dump(mode="json")
    if isinstance(result, list):
        return [shown(r) for r in result]
    if hasattr(result, "model_dump"):
        return result.model_dump(mode="json")
    return result


async def scenario(svc: BaseSessionService) -> list[Any]:
    """Every method of BaseSessionService, with the cases ADK's contract names."""
    out: list[Any] = []

    async def do(name: str, fn: Callable[[], Awaitable[Any]]) -> Any:
        try:
            result = await fn()
        except Exception as exc:
            out.append((name, type(exc).__name__))
            return None
        out.append((name, shown(result)))
        return result

    s1 = await do(
        "create",
        lambda: svc.create_session(
            app_name=APP,
            user_id=USER,
            session_id="s1",
            state={"app:tier": "gold", "user:lang": "de", "n": 0, "temp:x": 1},
        ),
    )
    await do("create again", lambda: svc.create_session(app_name=APP, user_id=USER, session_id="s1"))
    s2 = await do(
        "create spaced", lambda: svc.create_session(app_name=APP, user_id=USER, session_id=" s2 ", state={"m": [1, 2]})
    )
    await do("create generated id", lambda: svc.create_session(app_name=APP, user_id="bob", state={"user:lang": "fr"}))
    await do("create other app", lambda: svc.create_session(app_name="other", user_id=USER, session_id="s1"))
    events = [
        said("user", "hello", 2000.0, "e1", n=1, **{"temp:t": 5}),
        said("helper", "hi", 2001.0, "e2", **{"app:tier": "platinum", "user:lang": "en", "n": 2}),
        said("user", "bye", 2001.0, "e3", inv="inv-2", gone=None),
        said("helper", "ciao", 1999.5, "e4", inv="inv-2", nested={"a": {"b": [1, "ü", 2.5]}}),
        said("user", "again", 2005.0, "e5", inv="inv-3"),
    ]
    for i, e in enumerate(events):
        await do(f"append {i}", lambda e=e: svc.append_event(s1, e))
    out.append(("caller's session", shown(s1)))
    await do("append again", lambda: svc.append_event(s1, events[1]))
    same_id = said("helper", "other words", 2006.0, "e2")
    await do("append same id, other event", lambda: svc.append_event(s1, same_id))
    partial = said("helper", "par", 2007.0, "p1")
    partial.partial = True
    await do("append partial", lambda: svc.append_event(s1, partial))
    stale = await do("get", lambda: svc.get_session(app_name=APP, user_id=USER, session_id="s1"))
    await do("append on s2", lambda: svc.append_event(s2, said("user", "two", 2008.0, "e6", **{"user:lang": "it"})))
    await do("append on stale copy", lambda: svc.append_event(stale, said("user", "late", 2009.0, "e7", n=3)))
    ghost = Session(id="nope", app_name=APP, user_id=USER)
    await do("append to missing", lambda: svc.append_event(ghost, said("user", "x", 2010.0, "e8")))
    configs: list[GetSessionConfig | None] = [
        None,
        GetSessionConfig(num_recent_events=0),
        GetSessionConfig(num_recent_events=1),
        GetSessionConfig(num_recent_events=3),
        GetSessionConfig(num_recent_events=100),
        GetSessionConfig(after_timestamp=2001.0),
        GetSessionConfig(after_timestamp=2000.5),
        GetSessionConfig(after_timestamp=0.0),
        GetSessionConfig(after_timestamp=9999.0),
        GetSessionConfig(num_recent_events=4, after_timestamp=2001.0),
    ]
    for c in configs:
        await do(f"get {c}", lambda c=c: svc.get_session(app_name=APP, user_id=USER, session_id=" s1", config=c))
    await do("get missing", lambda: svc.get_session(app_name=APP, user_id=USER, session_id="zz"))
    await do("get other user", lambda: svc.get_session(app_name=APP, user_id="bob", session_id="s1"))
    await do("list app", lambda: svc.list_sessions(app_name=APP))
    await do("list user", lambda: svc.list_sessions(app_name=APP, user_id=USER))
    await do("list no user", lambda: svc.list_sessions(app_name=APP, user_id="nobody"))
    await do("list no app", lambda: svc.list_sessions(app_name="none"))
    await do("user state", lambda: svc.get_user_state(app_name=APP, user_id=USER))
    await do("user state none", lambda: svc.get_user_state(app_name=APP, user_id="nobody"))
    await do("delete", lambda: svc.delete_session(app_name=APP, user_id=USER, session_id="s2"))
    await do("delete missing", lambda: svc.delete_session(app_name=APP, user_id=USER, session_id="s2"))
    await do("get deleted", lambda: svc.get_session(app_name=APP, user_id=USER, session_id="s2"))
    await do("append to deleted", lambda: svc.append_event(s2, said("user", "x", 2011.0, "e9")))
    await do("create deleted again", lambda: svc.create_session(app_name=APP, user_id=USER, session_id="s2"))
    await do("get made again", lambda: svc.get_session(app_name=APP, user_id=USER, session_id="s2"))
    await do("list at end", lambda: svc.list_sessions(app_name=APP))
    return out


def test_same_answers_as_in_memory(log: eventlog.EventLog) -> None:
    expected = asyncio.run(scenario(InMemorySessionService()))
    reset_sources()
    got = asyncio.run(scenario(EventLogSessionService(log)))
    assert [name for name, _ in got] == [name for name, _ in expected]
    for (name, want), (_, have) in zip(expected, got, strict=True):
        assert have == want, name


def test_same_answers_after_reopen(tmp_path: Path) -> None:
    """A service on a reopened log (nothing in memory) answers as the one that wrote."""
    with eventlog.open(tmp_path / "log") as log:
        first = asyncio.run(scenario(EventLogSessionService(log)))
    with eventlog.open(tmp_path / "log") as log:
        svc = EventLogSessionService(log)
        again = asyncio.run(svc.get_session(app_name=APP, user_id=USER, session_id="s1"))
        listed = asyncio.run(svc.list_sessions(app_name=APP))
    assert shown(again) == dict(first)["get None"]
    assert shown(listed) == dict(first)["list at end"]


def test_adk_event_fields_round_trip(log: eventlog.EventLog) -> None:
    """Bytes, grounding metadata, long-running tool ids, actions: read back equal (ADK's own cases)."""
    svc = EventLogSessionService(log, offload=False)

    async def go() -> None:
        s = await svc.create_session(app_name=APP, user_id=USER)
        e = Event(
            invocation_id="inv",
            author="user",
            content=types.Content(
                role="user", parts=[types.Part.from_bytes(data=b"\x00\xffpng", mime_type="image/png")]
            ),
            grounding_metadata=types.GroundingMetadata(search_entry_point=types.SearchEntryPoint(sdk_blob=b"blob")),
            turn_complete=True,
            actions=EventActions(artifact_delta={"file": 0}, transfer_to_agent="agent", escalate=True),
            long_running_tool_ids={"tool2", "tool1"},
            error_code="error_code",
            error_message="error_message",
            interrupted=True,
        )
        await svc.append_event(s, e)
        got = await svc.get_session(app_name=APP, user_id=USER, session_id=s.id)
        assert got == s
        assert got is not None and got.events[0].content == e.content

    asyncio.run(go())


async def contract_cases(svc: BaseSessionService) -> dict[str, Any]:
    """The cases ADK's shared session-service contract adds to `scenario`: replaced (not merged)
    map values in each scope, null and boolean values, `temp:` keys the caller's session sees
    but no store keeps, an id padded with a newline, every field of an event (tool confirmations,
    usage, transcriptions), instants of a repeated local hour, one event delivered three times."""
    out: dict[str, Any] = {}
    s = await svc.create_session(
        app_name=APP,
        user_id="u1",
        session_id="s1",
        state={"profile": {"name": "ada", "role": "admin"}, "flag": False, "app:cfg": {"a": 1, "b": 2}, "user:p": "x"},
    )
    delta = {"profile": {"name": "bob"}, "new": True, "app:cfg": {"a": 9}, "user:p": None, "temp:t": "scratch"}
    await svc.append_event(s, Event(invocation_id="i1", author="user", actions=EventActions(state_delta=delta)))
    out["caller's state"] = dict(s.state)
    out["caller's delta"] = s.events[-1].actions.state_delta
    out["read back"] = shown(await svc.get_session(app_name=APP, user_id="u1", session_id="s1"))
    out["another session"] = shown(await svc.create_session(app_name=APP, user_id="u1", session_id="s1b"))
    out["another user"] = shown(await svc.create_session(app_name=APP, user_id="u2", session_id="s2"))
    padded = "order-42\n"
    out["padded"] = shown(await svc.create_session(app_name=APP, user_id="u1", session_id=padded))
    out["padded get"] = shown(await svc.get_session(app_name=APP, user_id="u1", session_id=padded))
    await svc.delete_session(app_name=APP, user_id="u1", session_id=padded)
    out["padded deleted"] = shown(await svc.get_session(app_name=APP, user_id="u1", session_id="order-42"))
    full = await svc.create_session(app_name=APP, user_id="u3", session_id="full")
    await svc.append_event(
        full,
        Event(
            invocation_id="inv",
            author="user",
            content=types.Content(role="user", parts=[types.Part(text="t")]),
            turn_complete=True,
            partial=False,
            actions=EventActions(
                artifact_delta={"file": 0},
                transfer_to_agent="agent",
                escalate=True,
                requested_tool_confirmations={
                    "call-1": ToolConfirmation(hint="sure?", confirmed=False, payload={"album": "a1"})
                },
            ),
            long_running_tool_ids={"tool1"},
            grounding_metadata=types.GroundingMetadata(web_search_queries=["q"]),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=1, candidates_token_count=1, total_token_count=2
            ),
            citation_metadata=types.CitationMetadata(),
            custom_metadata={"k": "v"},
            timestamp=1700000000.123,
            input_transcription=types.Transcription(text="in", finished=True),
            output_transcription=types.Transcription(text="out", finished=True),
        ),
    )
    got = await svc.get_session(app_name=APP, user_id="u3", session_id="full")
    out["every field"] = (got == full, shown(got))
    hour = await svc.create_session(app_name=APP, user_id="u4", session_id="dst")
    for instant in (1730613600.0, 1730615400.0):  # 01:00 and 01:30 US Eastern, the second time that day
        await svc.append_event(hour, Event(author="user", timestamp=instant))
    got = await svc.get_session(app_name=APP, user_id="u4", session_id="dst")
    out["repeated hour"] = None if got is None else [e.timestamp for e in got.events]
    dup = await svc.create_session(app_name=APP, user_id="u5", session_id="dup")
    once = Event(invocation_id="inv", author="user", actions=EventActions(state_delta={"count": 1}))
    for delivered in (once, once, once.model_copy(deep=True)):
        await svc.append_event(dup, delivered)
    out["delivered thrice"] = shown(await svc.get_session(app_name=APP, user_id="u5", session_id="dup"))
    out["listing"] = shown(await svc.list_sessions(app_name=APP))
    return out


def test_contract_cases_as_in_memory(log: eventlog.EventLog) -> None:
    want = asyncio.run(contract_cases(InMemorySessionService()))
    reset_sources()
    got = asyncio.run(contract_cases(EventLogSessionService(log)))
    assert list(got) == list(want)
    for case, value in want.items():
        assert got[case] == value, case
    assert got["every field"][0] and got["caller's state"]["temp:t"] == "scratch"
    assert "temp:t" not in got["read back"]["state"] and got["read back"]["state"]["user:p"] is None


def test_a_value_json_cannot_hold_is_kept_as_text(tmp_path: Path, log: eventlog.EventLog) -> None:
    """A state value that is not JSON (a function): ADK's database services keep the event and the
    value as its text, and so does the log (InMemorySessionService keeps the object itself)."""
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    async def go(svc: BaseSessionService) -> tuple[int, Any, str]:
        s = await svc.create_session(app_name=APP, user_id=USER, session_id="odd")
        delta = {"callback": lambda: 1, "ok": 2}
        await svc.append_event(s, Event(invocation_id="i", author="user", actions=EventActions(state_delta=delta)))
        got = await svc.get_session(app_name=APP, user_id=USER, session_id="odd")
        assert got is not None
        return len(got.events), got.state["ok"], type(got.state["callback"]).__name__

    want = asyncio.run(go(SqliteSessionService(str(tmp_path / "adk.db"))))
    assert asyncio.run(go(EventLogSessionService(log))) == want == (1, 2, "str")


@settings(max_examples=40)
@given(
    stamps=st.lists(st.sampled_from([1.0, 2.0, 2.5, 3.0, 7.0]), max_size=40),
    n=st.none() | st.integers(0, 45),
    after=st.none() | st.sampled_from([0.0, 1.0, 2.0, 2.7, 3.0, 8.0]),
    every=st.integers(1, 8),
)
def test_get_session_filters_as_in_memory(stamps: list[float], n: int | None, after: float | None, every: int) -> None:
    """num_recent_events and after_timestamp, on timestamps out of order, served from the run's end."""

    async def events_of(svc: BaseSessionService) -> list[str]:
        s = await svc.create_session(app_name=APP, user_id=USER, session_id="s")
        for i, ts in enumerate(stamps):
            await svc.append_event(
                s, Event(id=f"e{i}", author="user", timestamp=ts, actions=EventActions(state_delta={"i": i}))
            )
        got = await svc.get_session(
            app_name=APP,
            user_id=USER,
            session_id="s",
            config=GetSessionConfig(num_recent_events=n, after_timestamp=after),
        )
        assert got is not None
        return [e.id for e in got.events] + [str(got.state)]

    want = asyncio.run(events_of(InMemorySessionService()))
    with eventlog.open(":memory:") as log:
        assert asyncio.run(events_of(EventLogSessionService(log, checkpoint_every=every, offload=False))) == want


def _plain(session: Session) -> dict[str, Any]:
    """A session as the agent sees it, without the ids and times ADK draws."""
    return {
        "state": session.state,
        "events": [
            {
                "author": e.author,
                "content": e.content.model_dump(mode="json", exclude_none=True) if e.content else None,
                "state_delta": e.actions.state_delta,
                "rewind": e.actions.rewind_before_invocation_id is not None,
            }
            for e in session.events
        ],
    }


async def _agent_turns(svc: BaseSessionService) -> tuple[dict[str, Any], list[str]]:
    runner = Runner(agent=build_agent(), app_name=APP, session_service=svc)
    await svc.create_session(app_name=APP, user_id=USER, session_id="chat")
    invocations = []
    for words in ("Weather in Bern?", "And Basel?"):
        async for ev in runner.run_async(user_id=USER, session_id="chat", new_message=user(words)):
            if ev.invocation_id not in invocations:
                invocations.append(ev.invocation_id)
    await runner.rewind_async(user_id=USER, session_id="chat", rewind_before_invocation_id=invocations[1])
    got = await svc.get_session(app_name=APP, user_id=USER, session_id="chat")
    assert got is not None
    return _plain(got), invocations


def test_agent_run_and_rewind_as_in_memory(log: eventlog.EventLog) -> None:
    """A real ADK Runner and LlmAgent with a tool, two turns, then ADK's rewind: the same session."""
    want, _ = asyncio.run(_agent_turns(InMemorySessionService()))
    reset_sources()
    svc = EventLogSessionService(log)
    got, invocations = asyncio.run(_agent_turns(svc))
    assert got == want
    assert got["state"]["user:last_city"] == "Basel" and "temp:scratch" not in got["state"]
    assert got["state"]["lookups"] == 1 and got["state"]["last_reply"] == "Clear in Bern."
    # the rewind as a branch: a fork before the second turn holds the first turn only, and the
    # session keeps its whole history
    fork = asyncio.run(
        svc.fork_session(
            app_name=APP, user_id=USER, session_id="chat", new_session_id="chat-b", before_invocation_id=invocations[1]
        )
    )
    assert [e["author"] for e in _plain(fork)["events"]] == [e["author"] for e in got["events"][:4]]
    assert fork.state["lookups"] == 1 and fork.state["last_reply"] == "Clear in Bern."
    assert log.run_info(session_run(APP, USER, "chat-b")).parent == session_run(APP, USER, "chat")
    state = VIEW.state(log, session_run(APP, USER, "chat"), log.head(session_run(APP, USER, "chat")))
    assert state["rewinds"] == 1
    assert [m["role"] for m in state["messages"]][:4] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("how", ["run deleted", "session deleted"])
def test_a_session_object_of_a_life_that_is_gone_never_appends_to_the_next(log: eventlog.EventLog, how: str) -> None:
    one, two = EventLogSessionService(log), EventLogSessionService(log)

    def said(text: str) -> Event:
        return Event(author="user", content=types.Content(role="user", parts=[types.Part(text=text)]))

    async def main() -> None:
        old = await one.create_session(app_name=APP, user_id=USER, session_id="a")
        await one.append_event(old, said("old 1"))
        read = await one.get_session(app_name=APP, user_id=USER, session_id="a")
        if how == "run deleted":  # the run of the session deleted (and made again) under it
            log.delete_run(session_run(APP, USER, "a"))
        else:
            await two.delete_session(app_name=APP, user_id=USER, session_id="a")
        new = await two.create_session(app_name=APP, user_id=USER, session_id="a")
        await two.append_event(new, said("new 1"))
        for stale in (old, read):
            with pytest.raises(StaleSessionError, match="deleted and made again"):
                await one.append_event(stale, said("old 2"))
        got = await one.get_session(app_name=APP, user_id=USER, session_id="a")
        assert got is not None and [e.content.parts[0].text for e in got.events] == ["new 1"]
        await one.append_event(got, said("new 2"))  # a session read from this life appends
        back = await two.get_session(app_name=APP, user_id=USER, session_id="a")
        assert back is not None and [e.content.parts[0].text for e in back.events] == ["new 1", "new 2"]

    asyncio.run(main())


def test_fork_session(log: eventlog.EventLog) -> None:
    svc = EventLogSessionService(log, checkpoint_every=2, offload=False)

    async def go() -> None:
        s = await svc.create_session(app_name=APP, user_id=USER, session_id="a", state={"k": 0})
        for i in range(6):
            await svc.append_event(s, said("user", f"w{i}", 100.0 + i, f"e{i}", inv=f"i{i // 2}", k=i))
        f = await svc.fork_session(app_name=APP, user_id=USER, session_id="a", new_session_id="b", num_events=3)
        assert [e.id for e in f.events] == ["e0", "e1", "e2"] and f.state["k"] == 2
        await svc.append_event(f, said("user", "fork", 200.0, "f0", k=99))
        a = await svc.get_session(app_name=APP, user_id=USER, session_id="a")
        b = await svc.get_session(app_name=APP, user_id=USER, session_id="b")
        assert a is not None and b is not None
        assert [e.id for e in a.events] == [f"e{i}" for i in range(6)] and a.state["k"] == 5
        assert [e.id for e in b.events] == ["e0", "e1", "e2", "f0"] and b.state["k"] == 99
        whole = await svc.fork_session(app_name=APP, user_id=USER, session_id="a")
        assert [e.id for e in whole.events] == [e.id for e in a.events] and whole.state == a.state
        before = await svc.fork_session(
            app_name=APP, user_id=USER, session_id="a", new_session_id="c", before_invocation_id="i2"
        )
        assert [e.id for e in before.events] == ["e0", "e1", "e2", "e3"]
        with pytest.raises(InvocationNotFoundError):
            await svc.fork_session(app_name=APP, user_id=USER, session_id="a", before_invocation_id="nope")
        with pytest.raises(AlreadyExistsError):
            await svc.fork_session(app_name=APP, user_id=USER, session_id="a", new_session_id="b")
        with pytest.raises(SessionNotFoundError):
            await svc.fork_session(app_name=APP, user_id=USER, session_id="zz")
        # a session whose events forks share is deleted as an event: gone for ADK, the forks intact
        await svc.delete_session(app_name=APP, user_id=USER, session_id="a")
        assert await svc.get_session(app_name=APP, user_id=USER, session_id="a") is None
        assert {x.id for x in (await svc.list_sessions(app_name=APP)).sessions} == {"b", "c", whole.id}
        with pytest.raises(SessionNotFoundError):
            await svc.append_event(a, said("user", "x", 300.0, "x0"))
        b2 = await svc.get_session(app_name=APP, user_id=USER, session_id="b")
        assert b2 is not None and [e.id for e in b2.events] == ["e0", "e1", "e2", "f0"]
        again = await svc.create_session(app_name=APP, user_id=USER, session_id="a", state={"k": "new"})
        assert again.events == [] and again.state == {"k": "new"}
        await svc.append_event(again, said("user", "new life", 400.0, "e0"))  # an id of the old life: new here
        a2 = await svc.get_session(app_name=APP, user_id=USER, session_id="a")
        assert a2 is not None and [e.content.parts[0].text for e in a2.events] == ["new life"]

    asyncio.run(go())
    assert any(isinstance(e.event, SessionForked) for e in log.read(session_run(APP, USER, "b")))


def test_a_pruned_session_and_a_fork_of_it_read_what_is_kept(log: eventlog.EventLog) -> None:
    """A session pruned at a checkpoint (`eventlog prune`, `EventLog.prune`) keeps its state and
    the events after its base: get_session gives those, and a fork made of it reads and appends."""
    svc = EventLogSessionService(log, checkpoint_every=2, offload=False)
    run = session_run(APP, USER, "a")

    async def go() -> None:
        s = await svc.create_session(app_name=APP, user_id=USER, session_id="a", state={"k": 0})
        for i in range(5):
            await svc.append_event(s, said("user", f"w{i}", 100.0 + i, f"e{i}", inv=f"i{i}", k=i))
        base = log.prune(run, before=log.head(run) - 1, reducer=log.checkpoints.reducer_of(run, [SessionReducer()]))
        kept = [e.event.id for e in log.read(run, after=base) if hasattr(e.event, "invocation_id")]
        assert 0 < len(kept) < 5
        a = await svc.get_session(app_name=APP, user_id=USER, session_id="a")
        assert a is not None and [e.id for e in a.events] == kept and a.state["k"] == 4
        recent = await svc.get_session(
            app_name=APP, user_id=USER, session_id="a", config=GetSessionConfig(num_recent_events=9)
        )
        assert recent is not None and [e.id for e in recent.events] == kept
        f = await svc.fork_session(app_name=APP, user_id=USER, session_id="a", new_session_id="b")
        assert [e.id for e in f.events] == kept and f.state["k"] == 4
        await svc.append_event(f, said("user", "fork", 200.0, "f0", k=99))
        b = await svc.get_session(app_name=APP, user_id=USER, session_id="b")
        assert b is not None and [e.id for e in b.events] == [*kept, "f0"] and b.state["k"] == 99
        assert {x.id for x in (await svc.list_sessions(app_name=APP)).sessions} == {"a", "b"}

    asyncio.run(go())


@pytest.mark.parametrize("again", [False, True])
def test_a_fork_takes_the_life_of_the_run_it_made_from_the_fork(log: eventlog.EventLog, again: bool) -> None:
    """Another writer deletes the new session's run right after fork_session forked it (and, with
    `again`, makes it again as its own session, to the same head) before the service appends the
    fork's mark: the fork fails with ADK's errors (SessionNotFoundError, StaleSessionError) and
    the other writer's run holds its own events only. Before, the service read the run back by id
    and took that life for the fork's: it appended the fork's mark into the other writer's session
    and gave that session back as the fork (or, deleted, made a run of the mark alone and failed
    on an assertion)."""
    svc, two = EventLogSessionService(log, offload=False), EventLogSessionService(log, offload=False)
    run = session_run(APP, USER, "b")
    wrote: list[bool] = []

    def made_again() -> None:  # right after the fork commits
        log.delete_run(run)
        if again:  # its own session "b", at the head the fork left (2)
            theirs = two.sessions.create(APP, USER, {"owner": "two"}, "b")
            two.sessions.append(theirs, said("user", "theirs", 50.0, "t0"))
        wrote.append(True)

    async def go() -> None:
        s = await svc.create_session(app_name=APP, user_id=USER, session_id="a", state={"k": 0})
        for i in range(2):
            await svc.append_event(s, said("user", f"w{i}", 100.0 + i, f"e{i}", k=i))
        right_after(log._maintenance, "fork", made_again)
        with pytest.raises(StaleSessionError if again else SessionNotFoundError, match="as it was forked"):
            await svc.fork_session(app_name=APP, user_id=USER, session_id="a", new_session_id="b", num_events=1)
        assert wrote == [True]  # the other writer wrote
        got = await two.get_session(app_name=APP, user_id=USER, session_id="b")
        if again:
            assert got is not None and [e.id for e in got.events] == ["t0"] and got.state == {"owner": "two"}
        else:
            assert got is None

    asyncio.run(go())
    kinds = [type(e.event).__name__ for e in log.read(run)] if log.head(run) else []
    assert kinds == (["SessionCreated", "AdkEvent"] if again else [])  # no fork's mark in it


def test_list_sessions_page(log: eventlog.EventLog) -> None:
    svc = EventLogSessionService(log, offload=False)

    async def go() -> None:
        for uid in ("u1", "u2"):
            for i in range(5):
                await svc.create_session(app_name=APP, user_id=uid, session_id=f"s/{i}")
        await svc.create_session(app_name="app2", user_id="u1", session_id="x")
        seen, token = [], None
        while True:
            page, token = await svc.list_sessions_page(app_name=APP, page_size=3, page_token=token)
            seen += [(s.user_id, s.id) for s in page.sessions]
            if token is None:
                break
        assert seen == [(u, f"s/{i}") for u in ("u1", "u2") for i in range(5)]
        page, token = await svc.list_sessions_page(app_name=APP, user_id="u2", page_size=10)
        assert [s.id for s in page.sessions] == [f"s/{i}" for i in range(5)] and token is None

    asyncio.run(go())


def test_event_of_an_older_layout_is_upcast(log: eventlog.EventLog) -> None:
    """An event stored in layout 0 (one field per column, as ADK's first database schema kept it)
    reads back as today's ADK event; a field ADK no longer has is ignored, one it added defaults."""
    svc = EventLogSessionService(log, offload=False)
    asyncio.run(svc.create_session(app_name=APP, user_id=USER, session_id="old"))
    row = {
        "id": "old-1",
        "invocation_id": "inv",
        "author": "helper",
        "timestamp": "2025-01-02T03:04:05",
        "content": {"role": "model", "parts": [{"text": "from long ago"}]},
        "actions": {"state_delta": {"k": 1, "user:seen": True}},
        "long_running_tool_ids_json": '["t2", "t1"]',
        "branch": None,
        "a_field_adk_dropped": 7,
    }
    log.append(
        session_run(APP, USER, "old"),
        AdkEvent(id="old-1", invocation_id="inv", author="helper", timestamp=0.0, data=row, layout=0),
    )
    got = asyncio.run(svc.get_session(app_name=APP, user_id=USER, session_id="old"))
    assert got is not None
    (e,) = got.events
    assert e.content is not None and e.content.parts is not None and e.content.parts[0].text == "from long ago"
    assert e.long_running_tool_ids == {"t1", "t2"} and e.timestamp == 1735787045.0
    assert e.output is None and e.node_info.path == ""  # fields ADK added since
    assert got.state["k"] == 1


class _Killed(BaseException):
    """Ends a call as a crash would: nothing after it runs."""


def test_a_crash_between_an_event_and_its_app_and_user_state(log: eventlog.EventLog) -> None:
    """A process dies after the event is committed, before its app and user state changes are:
    the next process to append to the session (or read it) writes the changes, except a key that
    a later change of its scope set (it stands, as after one transaction)."""
    dying = EventLogSessionService(log, offload=False)

    def killed(*args: Any) -> None:
        raise _Killed

    async def crash() -> None:
        s = await dying.create_session(app_name=APP, user_id=USER, session_id="c")
        await dying.append_event(s, said("user", "hi", 1.0, "c1", **{"app:a": 1, "app:b": 1, "user:u": 1, "n": 1}))
        dying.sessions.append_scoped = killed  # type: ignore[method-assign]
        with pytest.raises(_Killed):
            await dying.append_event(s, said("user", "lost", 2.0, "c2", **{"app:a": 2, "app:b": 2, "user:u": 2}))

    asyncio.run(crash())
    other = EventLogSessionService(log, offload=False)

    async def after() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        s2 = await other.create_session(app_name=APP, user_id="bob", session_id="d")
        await other.append_event(s2, said("user", "later", 3.0, "d1", **{"app:b": 3}))  # committed after c2
        again = EventLogSessionService(log, offload=False)
        got = await again.get_session(app_name=APP, user_id=USER, session_id="c")
        assert got is not None and [e.id for e in got.events] == ["c1", "c2"]
        fresh = await EventLogSessionService(log, offload=False).get_session(
            app_name=APP, user_id="bob", session_id="d"
        )
        assert fresh is not None
        return got.state, fresh.state, await again.get_user_state(app_name=APP, user_id=USER)

    state, bobs, users = asyncio.run(after())
    assert (state["app:a"], state["app:b"], state["user:u"], state["n"]) == (2, 3, 2, 1)
    assert (bobs["app:a"], bobs["app:b"]) == (2, 3) and users == {"u": 2}
    writes = [e.event.delta for e in log.read(app_run(APP))]
    assert writes == [{"a": 1, "b": 1}, {"b": 3}, {"a": 2}]  # the change written once, after the crash
    asyncio.run(EventLogSessionService(log, offload=False).get_session(app_name=APP, user_id=USER, session_id="c"))
    assert len(list(log.read(app_run(APP)))) == 3  # and not again by the next reader


_DIES_BETWEEN = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    import eventlog
    from google.adk.events import Event, EventActions
    from eventlog.adk import EventLogSessionService

    async def main(path):
        with eventlog.open(path) as log:
            svc = EventLogSessionService(log, offload=False)
            s = await svc.create_session(app_name="app", user_id="ann", session_id="k")
            svc.sessions.append_scoped = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
            delta = {"app:tier": "gold", "user:lang": "de", "n": 1}
            await svc.append_event(s, Event(id="k1", author="user", actions=EventActions(state_delta=delta)))

    asyncio.run(main(sys.argv[1]))
    """
)


def test_a_process_killed_between_an_event_and_its_scoped_state(shared_log: str) -> None:
    """SIGKILL after the event's commit, before its app and user state: another process reads the
    session with the event's whole change."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), *sys.path])}
    done = subprocess.run([sys.executable, "-c", _DIES_BETWEEN, shared_log], env=env, timeout=120, capture_output=True)
    assert done.returncode == -9, done.stderr.decode()[-2000:]
    with eventlog.open(shared_log, readonly=True) as log:  # read as it is, without writing
        got = asyncio.run(EventLogSessionService(log).get_session(app_name=APP, user_id=USER, session_id="k"))
        assert got is not None and got.state == {"n": 1}
    with eventlog.open(shared_log) as log:
        assert log.head(app_run(APP)) == 0  # the app change did not reach its run
        svc = EventLogSessionService(log)
        got = asyncio.run(svc.get_session(app_name=APP, user_id=USER, session_id="k"))
        assert got is not None and [e.id for e in got.events] == ["k1"]
        assert got.state == {"app:tier": "gold", "user:lang": "de", "n": 1}
        assert asyncio.run(svc.get_user_state(app_name=APP, user_id=USER)) == {"lang": "de"}


_WRITER = textwrap.dedent(
    """
    import asyncio, sys
    import eventlog
    from google.adk.events import Event, EventActions
    from eventlog.adk import EventLogSessionService

    async def main(path, name, n):
        with eventlog.open(path) as log:
            svc = EventLogSessionService(log)
            session = await svc.get_session(app_name="app", user_id="ann", session_id="shared")
            print("ready", flush=True)
            sys.stdin.readline()
            for i in range(n):
                await svc.append_event(session, Event(id=f"{name}-{i}", author=name, invocation_id=name,
                                       actions=EventActions(state_delta={name: i, "last": name})))

    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
    """
)


def test_two_processes_append_to_one_session(shared_log: str) -> None:
    """Each process holds the session as it was before the other wrote: both append every event,
    ordered by the log's fencing, where ADK's database services raise StaleSessionError."""
    n = int(os.environ.get("ADK_CONCURRENT_EVENTS", "20"))
    path = shared_log
    with eventlog.open(path) as log:
        asyncio.run(EventLogSessionService(log).create_session(app_name=APP, user_id=USER, session_id="shared"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), *sys.path])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(path), name, str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for name in ("p1", "p2")
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in procs:
        assert p.wait(120) == 0
    with eventlog.open(path) as log:
        got = asyncio.run(EventLogSessionService(log).get_session(app_name=APP, user_id=USER, session_id="shared"))
        assert got is not None and len(got.events) == 2 * n
        for name in ("p1", "p2"):
            assert [e.id for e in got.events if e.author == name] == [f"{name}-{i}" for i in range(n)]
            assert got.state[name] == n - 1
        assert got.state["last"] == got.events[-1].author
        assert log.verify().ok


def test_an_append_that_meets_another_writer_at_every_attempt_names_the_heads_and_the_attempts(
    open_log: Callable[..., eventlog.EventLog],
) -> None:
    """Another process appends to the session at each attempt of `append_event`: after
    `conflict_attempts_max` attempts the last ConflictError is raised, naming the heads that
    attempt expected and found and the number of attempts."""
    attempts = eventlog._limits.conflict_attempts_max
    clock = Jostling(limit=4 * attempts)
    log = open_log(clock=clock)
    svc = EventLogSessionService(log)
    s = asyncio.run(svc.create_session(app_name=APP, user_id=USER, session_id="busy"))
    run_id = session_run(APP, USER, "busy")
    theirs = said("helper", "theirs", 1.0, "other")
    head = log.head(run_id)
    data = theirs.model_dump(mode="json", exclude_none=True)
    clock.aim(log, run_id, AdkEvent(id="other", invocation_id="inv-9", author="helper", timestamp=1.0, data=data))
    with pytest.raises(eventlog.ConflictError) as exc:
        asyncio.run(svc.append_event(s, said("user", "mine", 2.0, "mine")))
    error, last = exc.value, head + attempts
    assert clock.times == attempts  # one conflict an attempt, and no attempt more
    assert (error.run_id, error.expected, error.head, error.attempts) == (run_id, last - 1, last, attempts)
    assert f"expected head {last - 1} but head is {last} at the last of {attempts} attempts" in str(error)
    assert log.head(run_id) == last  # the event was not appended


def test_adk_sqlite_service_fails_the_same_as_stale(tmp_path: Path) -> None:
    """What the test above fixes: ADK's own SQLite service refuses the second writer's append."""
    from google.adk.errors._stale_session_error import StaleSessionError
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    async def go(svc: BaseSessionService) -> None:
        await svc.create_session(app_name=APP, user_id=USER, session_id="shared")
        one = await svc.get_session(app_name=APP, user_id=USER, session_id="shared")
        two = await svc.get_session(app_name=APP, user_id=USER, session_id="shared")
        assert one is not None and two is not None
        await svc.append_event(one, Event(author="p1", invocation_id="p1", timestamp=5000.0))
        await svc.append_event(two, Event(author="p2", invocation_id="p2", timestamp=5001.0))

    with pytest.raises(StaleSessionError):
        asyncio.run(go(SqliteSessionService(str(tmp_path / "adk.db"))))
    with eventlog.open(tmp_path / "log") as log:
        asyncio.run(go(EventLogSessionService(log)))


def test_view_shows_a_session_as_a_conversation(log: eventlog.EventLog) -> None:
    svc = EventLogSessionService(log, offload=False)

    async def go() -> None:
        s = await svc.create_session(app_name=APP, user_id=USER, session_id="v")
        await svc.append_event(s, said("user", "hello", 1.0, "v1", k=1))
        call = Event(
            id="v2",
            author="helper",
            content=types.Content(
                role="model",
                parts=[types.Part(function_call=types.FunctionCall(name="weather", args={"city": "Bern"}))],
            ),
        )
        answer = Event(
            id="v3",
            author="helper",
            content=types.Content(
                role="user",
                parts=[types.Part(function_response=types.FunctionResponse(name="weather", response={"sky": "clear"}))],
            ),
        )
        await svc.append_event(s, call)
        await svc.append_event(s, answer)
        await svc.append_event(s, said("helper", "Clear.", 4.0, "v4"))

    asyncio.run(go())
    run = session_run(APP, USER, "v")
    from eventlog.views import view_of

    assert view_of("adk.session") is VIEW or VIEW not in _installed_views()
    state = VIEW.state(log, run, log.head(run))
    assert state["messages"] == [
        {"role": "user", "content": "hello"},
        {
            "role": "assistant",
            "content": "",
            "name": "helper",
            "tool_calls": [{"name": "weather", "args": {"city": "Bern"}}],
        },
        {"role": "tool", "name": "weather", "content": {"sky": "clear"}},
        {"role": "assistant", "content": "Clear.", "name": "helper"},
    ]
    assert state["state"] == {"k": 1} and state["session_id"] == "v"
    columns, rows = VIEW.history(log, run, 2)
    assert list(columns)[:3] == ["offset", "time", "author"] and [r["text"] for r in rows] == [
        "[weather answered]",
        "Clear.",
    ]


def _installed_views() -> list[Any]:
    from eventlog.views import load_views

    return load_views()


def _view_on_path(tmp_path: Path) -> Path:
    """A dist-info directory that registers the view under `eventlog.views`, as `pip install`
    of this package does (the test's interpreter may have metadata older than the view)."""
    site = tmp_path / "site"
    info = site / "eventlog_adk_view-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: eventlog-adk-view\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[eventlog.views]\nadk = eventlog.adk:VIEW\n")
    return site


def test_cli_and_ui_show_sessions_as_conversations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvicorn", reason="the ui extra is not installed")
    from ui_support import get, serving

    import eventlog.views

    with eventlog.open(tmp_path / "log") as log:
        svc = EventLogSessionService(log)
        runner = Runner(agent=build_agent(), app_name=APP, session_service=svc)
        asyncio.run(svc.create_session(app_name=APP, user_id=USER, session_id="chat"))

        async def turn() -> None:
            async for _ in runner.run_async(user_id=USER, session_id="chat", new_message=user("Weather in Bern?")):
                pass

        asyncio.run(turn())
    site = _view_on_path(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent), str(site)])}
    run = session_run(APP, USER, "chat")
    cli = [sys.executable, "-m", "eventlog"]
    where = ["--log", str(tmp_path / "log")]
    listed = subprocess.run(
        [*cli, "runs", *where], env={**env, "COLUMNS": "250"}, capture_output=True, text=True, check=True
    )
    assert "│ adk " in listed.stdout  # the view column of the session's run
    history = subprocess.run(
        [*cli, "history", *where, run, "--json"], env=env, capture_output=True, text=True, check=True
    )
    assert "Clear in Bern." in history.stdout and "[calls weather]" in history.stdout
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(eventlog.views, "_loaded", None)
    with eventlog.open(tmp_path / "log") as log, serving(log) as url:
        status, body, _ = get(f"{url}/run?id={run}&view=conversation")
        assert status == 200
        assert body.count('<div class="msg r-user"') == 1 and body.count('<div class="msg r-assistant"') == 2
        assert "Clear in Bern." in body


_KEYS = st.sampled_from(["a", "b", "app:x", "user:y", "temp:z"])
_VALUES = st.none() | st.integers(-3, 3) | st.text(max_size=3) | st.lists(st.integers(0, 2), max_size=2)
_SIDS = st.sampled_from(["s1", " s1", "s2"])
_UIDS = st.sampled_from(["ann", "ann", "bob"])
_APPEND = st.tuples(
    st.just("append"),
    _UIDS,
    _SIDS,
    st.dictionaries(_KEYS, _VALUES, max_size=3),
    st.sampled_from([1.0, 2.0, 3.0]),
    st.integers(0, 5),
)
_OPS = st.one_of(
    st.tuples(st.just("create"), _UIDS, _SIDS, st.dictionaries(_KEYS, _VALUES, max_size=3)),
    _APPEND,
    _APPEND,  # twice: appends are most of what a session sees
    st.tuples(
        st.just("get"), _UIDS, _SIDS, st.none() | st.integers(0, 4), st.none() | st.sampled_from([1.5, 2.0, 3.0])
    ),
    st.tuples(st.just("list"), st.none() | _UIDS),
    st.tuples(st.just("delete"), _UIDS, _SIDS),
    st.tuples(st.just("user"), _UIDS),
)


async def _play(svc: BaseSessionService, ops: list[tuple[Any, ...]]) -> list[Any]:
    """Each op on `svc`; an append goes to the session as `get_session` returns it just before."""
    out: list[Any] = []
    for op in ops:
        try:
            if op[0] == "create":
                r: Any = await svc.create_session(app_name=APP, user_id=op[1], session_id=op[2], state=op[3])
            elif op[0] == "append":
                s = await svc.get_session(app_name=APP, user_id=op[1], session_id=op[2].strip())
                s = s or Session(id=op[2].strip(), app_name=APP, user_id=op[1])
                e = Event(id=f"e{op[5]}", author="user", timestamp=op[4], actions=EventActions(state_delta=op[3]))
                r = await svc.append_event(s, e)
            elif op[0] == "get":
                config = GetSessionConfig(num_recent_events=op[3], after_timestamp=op[4])
                r = await svc.get_session(app_name=APP, user_id=op[1], session_id=op[2], config=config)
            elif op[0] == "list":
                r = await svc.list_sessions(app_name=APP, user_id=op[1])
            elif op[0] == "delete":
                r = await svc.delete_session(app_name=APP, user_id=op[1], session_id=op[2])
            else:
                r = await svc.get_user_state(app_name=APP, user_id=op[1])
        except Exception as exc:
            r = type(exc).__name__
        out.append(shown(r))
    return out


@settings(max_examples=int(os.environ.get("ADK_PROPERTY_EXAMPLES", "30")))
@given(ops=st.lists(_OPS, max_size=25))
def test_any_sequence_of_calls_answers_as_in_memory(ops: list[tuple[Any, ...]]) -> None:
    """Random calls of every method (scopes, temp keys, re-used event ids, deletions and
    re-creations, filters): the same answers as ADK's InMemorySessionService, call by call."""
    reset_sources()
    want = asyncio.run(_play(InMemorySessionService(), ops))
    reset_sources()
    with eventlog.open(":memory:") as log:
        got = asyncio.run(_play(EventLogSessionService(log, checkpoint_every=3, offload=False), ops))
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        assert g == w, (i, ops[i])


def test_reading_sessions_needs_no_google_adk() -> None:
    """The view, the kinds and the folds import without google-adk (the command line loads them)."""
    code = "import sys, eventlog.adk as a; a.VIEW, a.SessionReducer; assert 'google.adk' not in sys.modules, 'imported'"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_tasks_and_threads_of_one_process_append_at_once(log: eventlog.EventLog) -> None:
    """Tasks on one event loop append to one session at once (each call runs in a worker thread):
    every event is kept once, and the state is the last writer's for each key."""
    svc = EventLogSessionService(log)

    async def go() -> Session | None:
        s = await svc.create_session(app_name=APP, user_id=USER, session_id="busy")
        await asyncio.gather(
            *(
                svc.append_event(
                    s,
                    Event(
                        id=f"t{i}",
                        author="user",
                        timestamp=float(i),
                        actions=EventActions(state_delta={f"k{i % 3}": i, "user:n": i}),
                    ),
                )
                for i in range(30)
            )
        )
        return await svc.get_session(app_name=APP, user_id=USER, session_id="busy")

    got = asyncio.run(go())
    assert got is not None and sorted(e.id for e in got.events) == sorted(f"t{i}" for i in range(30))
    order = [int(e.id[1:]) for e in got.events]  # the order the log committed them in
    last = {f"k{i % 3}": i for i in order}
    assert {k: got.state[k] for k in last} == last
    assert got.state["user:n"] == order[-1]


def test_bench_suite_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python -m tools.bench adk --quick`: every service gives its figures (figures not judged)."""
    from tools.bench._common import Context
    from tools.bench.adk import run

    for name in ("EVENTLOG_BENCH_PG_DSN", "EVENTLOG_BENCH_ADK_TURNS"):
        monkeypatch.delenv(name, raising=False)  # the quick size, no server
    res = run(Context(quick=True, workdir=str(tmp_path)))
    assert res.skipped is None
    systems = {row.system for row in res.rows}
    assert {"eventlog-lmdb", "adk-sqlite"} <= systems
    assert res.metrics["eventlog-lmdb"]["events"] == res.metrics["adk-sqlite"]["events"] > 0


class _DeletedBeforeTheHeldEventIsRead:
    """The sessions' log, where another writer deletes session `s` (and, with `again`, makes it
    again) right before the service reads the event an id it was given already holds, once."""

    def __init__(self, log: eventlog.EventLog, again: bool) -> None:
        self._log, self._again, self._done = log, again, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._log, name)

    def entry(self, run_id: str, offset: int, **kwargs: Any) -> Any:
        if not self._done and run_id.endswith("/s"):
            self._done = True
            self._log.delete_run(run_id)
            if self._again:
                EventLogSessionService(self._log).sessions.create("a", "u", None, "s")
        return self._log.entry(run_id, offset, **kwargs)


@pytest.mark.parametrize("again", [False, True])
def test_an_event_given_again_to_a_session_deleted_meanwhile_is_refused_as_adk_refuses(
    log: eventlog.EventLog, again: bool
) -> None:
    """An event appended again (its id held) while another writer deletes the session, or deletes
    it and makes it again, before the service reads the held event: the service says the session
    is not found, or that it was made again (ADK's errors), not the log's UnknownRunError."""
    svc = EventLogSessionService(log, offload=False)
    session = asyncio.run(svc.create_session(app_name="a", user_id="u", session_id="s"))
    event = said("user", "hi", 1.0, "e1")
    asyncio.run(svc.append_event(session, event))
    svc.sessions.log = _DeletedBeforeTheHeldEventIsRead(log, again)  # type: ignore[assignment]
    with pytest.raises(StaleSessionError if again else SessionNotFoundError):
        asyncio.run(svc.append_event(session, said("user", "hi", 1.0, "e1")))
    assert svc.sessions.log._done  # type: ignore[attr-defined]
