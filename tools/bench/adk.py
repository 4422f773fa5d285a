"""ADK sessions: a 200-turn conversation through eventlog.adk beside ADK's own DatabaseSessionService and SqliteSessionService.

Each turn does what ADK's `Runner` asks of its session service: `get_session` (the whole
session, as `Runner` reads it by default), then `append_event` of a 200-character user message
and an 800-character answer with a state change (the chat suite's seeded text); every third
turn the model first calls a tool (a function call event and a function response event). The
same events go to each service, one after the other, in one process:

- `eventlog.adk.EventLogSessionService` on an LMDB log (durability="sync");
- ADK's `DatabaseSessionService` on SQLite (`sqlite+aiosqlite`, needs sqlalchemy: the `bench` extra);
- ADK's `SqliteSessionService` (aiosqlite);
- with `EVENTLOG_BENCH_PG_DSN` set, also eventlog on PostgreSQL and `DatabaseSessionService`
  on the same server (`postgresql+psycopg`), each in a schema of its own, dropped after
  (bytes: `pg_total_relation_size` of the schema's tables).

Figures: bytes on disk after close, per-turn latency (the `get_session` and the appends), the
median of turns 1-10, 91-100 and 191-200, and at the end `get_session` of the whole session and of its last 10
events (`num_recent_events=10`), median of 20, and that last read after turns 10, 100 and 200
too (median of 5: whether it follows the session's length); for eventlog also from a new service over the
reopened log (nothing kept in memory: the state is folded from the nearest snapshot). Sizes: `EVENTLOG_BENCH_ADK_TURNS` (200).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

from ._common import Context, SuiteResult, Text, disk_bytes, median


def _turns(turns: int) -> list[list[Any]]:
    from google.adk.events import Event, EventActions
    from google.genai import types

    t = Text(2024)
    out = []
    clock = 1_800_000_000.0
    for n in range(turns):
        clock += 1.0
        inv = f"inv-{n}"
        events = [
            Event(
                author="user",
                invocation_id=inv,
                timestamp=clock,
                content=types.Content(role="user", parts=[types.Part(text=t.words(200))]),
            )
        ]
        if n % 3 == 0:
            call = types.FunctionCall(id=f"c{n}", name="weather", args={"city": f"city {n}"})
            answer = types.FunctionResponse(id=f"c{n}", name="weather", response={"sky": "clear", "city": f"city {n}"})
            events.append(
                Event(
                    author="helper",
                    invocation_id=inv,
                    timestamp=clock + 0.1,
                    content=types.Content(role="model", parts=[types.Part(function_call=call)]),
                )
            )
            events.append(
                Event(
                    author="helper",
                    invocation_id=inv,
                    timestamp=clock + 0.2,
                    content=types.Content(role="user", parts=[types.Part(function_response=answer)]),
                    actions=EventActions(state_delta={"user:last_city": f"city {n}"}),
                )
            )
        events.append(
            Event(
                author="helper",
                invocation_id=inv,
                timestamp=clock + 0.5,
                content=types.Content(role="model", parts=[types.Part(text=t.words(800))]),
                actions=EventActions(state_delta={"turn": n, "last_reply": f"reply {n}"}),
            )
        )
        out.append(events)
    return out


def _marks(turns: int) -> list[int]:
    """The turns after which figures are taken as the session grows: 10, 100, 200 and the last."""
    return sorted({i for i in (10, 100, 200) if i <= turns} | {turns})


async def _drive(service: Any, turns: list[list[Any]]) -> dict[str, Any]:
    from google.adk.sessions.base_session_service import GetSessionConfig

    async def timed(config: Any, repeat: int = 20) -> float:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            got = await service.get_session(app_name="bench", user_id="ann", session_id="chat", config=config)
            times.append((time.perf_counter() - t0) * 1000.0)
        assert got is not None
        return median(times)

    await service.create_session(app_name="bench", user_id="ann", session_id="chat")
    latency: list[float] = []
    recent_at: list[float] = []
    marks = _marks(len(turns))
    for n, events in enumerate(turns, 1):
        t0 = time.perf_counter()
        session = await service.get_session(app_name="bench", user_id="ann", session_id="chat")
        for e in events:
            await service.append_event(session, e.model_copy(deep=True))
        latency.append((time.perf_counter() - t0) * 1000.0)
        if n in marks:  # the same read as the session grows: does it follow the session's length?
            recent_at.append(await timed(GetSessionConfig(num_recent_events=10), 5))

    whole = await timed(None)
    recent = await timed(GetSessionConfig(num_recent_events=10))
    final = await service.get_session(app_name="bench", user_id="ann", session_id="chat")
    return {
        "latency": latency,
        "recent_at_ms": recent_at,
        "whole_ms": whole,
        "recent_ms": recent,
        "events": len(final.events),
        "state": final.state,
    }


def _eventlog(path: str, turns: list[list[Any]]) -> dict[str, Any]:
    from google.adk.sessions.base_session_service import GetSessionConfig

    import eventlog
    from eventlog.adk import EventLogSessionService

    with eventlog.open(path, durability="sync") as log:
        out = asyncio.run(_drive(EventLogSessionService(log), turns))
    out["bytes"] = disk_bytes(path)
    with eventlog.open(path) as log:  # a service that wrote nothing: no state kept in memory, every read folds
        cold = EventLogSessionService(log, offload=False).sessions
        times = []
        for _ in range(20):
            t0 = time.perf_counter()
            cold.get("bench", "ann", "chat", GetSessionConfig(num_recent_events=10))
            times.append((time.perf_counter() - t0) * 1000.0)
    out["recent_cold_ms"] = median(times)
    return out


def _database(path: str, turns: list[list[Any]]) -> dict[str, Any]:
    from google.adk.sessions import DatabaseSessionService

    async def go() -> dict[str, Any]:
        service = DatabaseSessionService(f"sqlite+aiosqlite:///{path}")
        try:
            return await _drive(service, turns)
        finally:
            await service.close()

    out = asyncio.run(go())
    out["bytes"] = disk_bytes(path)
    return out


def _sqlite(path: str, turns: list[list[Any]]) -> dict[str, Any]:
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    async def go() -> dict[str, Any]:
        service = SqliteSessionService(path)
        try:
            return await _drive(service, turns)
        finally:
            await service.close()

    out = asyncio.run(go())
    out["bytes"] = disk_bytes(path)
    return out


def _pg_eventlog(dsn: str, schema: str, turns: list[list[Any]]) -> dict[str, Any]:
    import eventlog
    from eventlog.adk import EventLogSessionService

    from ._langgraph import _pg_drop, _pg_schema_bytes

    _pg_drop(dsn, schema)
    try:
        with eventlog.open(f"{dsn}?schema={schema}") as log:
            out = asyncio.run(_drive(EventLogSessionService(log), turns))
        out["bytes"] = _pg_schema_bytes(dsn, schema)
    finally:
        _pg_drop(dsn, schema)
    return out


def _pg_database(dsn: str, schema: str, turns: list[list[Any]]) -> dict[str, Any]:
    import psycopg
    from google.adk.sessions import DatabaseSessionService

    from ._langgraph import _pg_drop, _pg_schema_bytes

    _pg_drop(dsn, schema)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')

    async def go() -> dict[str, Any]:
        url = "postgresql+psycopg://" + dsn.split("://", 1)[1]
        service = DatabaseSessionService(url, connect_args={"options": f"-csearch_path={schema}"})
        try:
            return await _drive(service, turns)
        finally:
            await service.close()

    try:
        out = asyncio.run(go())
        out["bytes"] = _pg_schema_bytes(dsn, schema)
    finally:
        _pg_drop(dsn, schema)
    return out


def run(ctx: Context) -> SuiteResult:
    res = SuiteResult("adk", __doc__.strip().splitlines()[0])
    try:
        import google.adk  # noqa: F401
    except ImportError as exc:
        res.skipped = f"google-adk is not installed (the adk extra): {exc}"
        return res
    n = ctx.size("EVENTLOG_BENCH_ADK_TURNS", 200, 20)
    turns = _turns(n)
    systems: list[tuple[str, Callable[[str, list[list[Any]]], dict[str, Any]], str]] = [
        ("eventlog-lmdb", _eventlog, "eventlog"),
        ("adk-database-sqlite", _database, "adk-db.sqlite"),
        ("adk-sqlite", _sqlite, "adk.sqlite"),
    ]
    dsn = os.environ.get("EVENTLOG_BENCH_PG_DSN")
    if dsn:
        systems += [
            ("eventlog-postgres", lambda _p, t: _pg_eventlog(dsn, "bench_adk_eventlog", t), ""),
            ("adk-database-postgres", lambda _p, t: _pg_database(dsn, "bench_adk_database", t), ""),
        ]
    results: dict[str, dict[str, Any]] = {}
    for name, fn, where in systems:
        try:
            results[name] = fn(ctx.path(where), turns)
        except ImportError as exc:  # DatabaseSessionService needs sqlalchemy
            res.row(name, "skipped", float("nan"), "", note=f"not installed: {exc}")
    states = {name: r["state"] for name, r in results.items()}
    events = {name: r["events"] for name, r in results.items()}
    assert len(set(events.values())) == 1, events
    assert all(s == states["eventlog-lmdb"] for s in states.values()), states
    marks = _marks(n)
    for name, r in results.items():
        lat = r["latency"]
        windows = [median(lat[max(0, i - 10) : i]) for i in marks]  # median of the 10 turns up to each mark
        res.row(name, f"bytes on disk, {n} turns ({r['events']} events)", r["bytes"], "bytes")
        res.row(
            name,
            "turn latency ms, turns " + "/".join(f"{max(1, i - 9)}-{i}" for i in marks),
            windows[-1],
            "ms",
            note=" / ".join(f"{w:.2f}" for w in windows) + "; median of 10 turns, get_session + appends",
        )
        res.row(name, f"total time, {n} turns", sum(lat) / 1000.0, "s")
        res.row(name, f"get_session, whole session ({r['events']} events)", r["whole_ms"], "ms", note="median of 20")
        res.row(name, "get_session, num_recent_events=10", r["recent_ms"], "ms", note="median of 20")
        res.row(
            name,
            "get_session, num_recent_events=10, after turns " + "/".join(map(str, marks)),
            r["recent_at_ms"][-1],
            "ms",
            note=" / ".join(f"{w:.2f}" for w in r["recent_at_ms"]) + "; median of 5, as the session grows",
        )
        if "recent_cold_ms" in r:
            res.row(
                name,
                "get_session, num_recent_events=10, new service",
                r["recent_cold_ms"],
                "ms",
                note="the log reopened: state folded from the nearest snapshot",
            )
        res.metrics[name] = {k: v for k, v in r.items() if k != "state"}
    if "adk-database-sqlite" in results:
        ours, theirs = results["eventlog-lmdb"], results["adk-database-sqlite"]
        res.metrics["bytes_ratio_to_database"] = ours["bytes"] / theirs["bytes"]
        res.metrics["recent_ms_ratio_to_database"] = ours["recent_ms"] / theirs["recent_ms"]
        res.target("eventlog bytes ÷ DatabaseSessionService bytes", ours["bytes"] / theirs["bytes"], 1.0, "<=")
    return res
