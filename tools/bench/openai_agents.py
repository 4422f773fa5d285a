"""OpenAI Agents SDK: a 200-turn conversation in eventlog's session beside the SDK's SQLiteSession, and a long run's checkpoints.

Sessions: the same conversation runs through `Runner.run` twice, a turn of each in turn,
with the SDK's `SQLiteSession` on a file (its own setup: WAL, synchronous=FULL, so an fsync
per commit) and with `EventLogSession` on an LMDB log (durability="sync": each commit
synced). The model is scripted (offline, deterministic):
each turn is a 200-character user message and an 800-character answer (the chat suite's
seeded text), and every third turn the model first calls a tool. Figures: bytes on disk
after close, and per turn the time of the session's own calls (the `get_items` and
`add_items` a turn makes, timed around the session object) and of the whole `Runner.run`.
`EVENTLOG_BENCH_AGENT_TURNS` sets the turns (200; 20 with --quick).

Checkpoints: one run of `EVENTLOG_BENCH_AGENT_STEPS` tool calls (50; 10 with --quick),
checkpointed before each model call. eventlog's `RunCheckpointer` stores each checkpoint as
the change since the previous one, and each model response and tool output between them; beside it, the whole `RunState.to_json()` at each of the
same points, as JSON rows in a SQLite file (what checkpointing the SDK's state after each
step takes without a log).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from typing import Any

from ._common import Context, SuiteResult, Text, disk_bytes, lmdb_live_bytes, median, percentile


def _model(script: list[Any]) -> Any:
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import Response, ResponseCompletedEvent

    class ScriptedModel(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            return ModelResponse(output=script.pop(0), usage=Usage(requests=1), response_id=None)

        async def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            answer = await self.get_response()
            response = Response(
                id="r",
                created_at=0,
                model="scripted",
                object="response",
                output=answer.output,
                tool_choice="auto",
                tools=[],
                parallel_tool_calls=False,
            )
            yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)

    return ScriptedModel()


def _agent(script: list[Any]) -> Any:
    from agents import Agent, function_tool

    @function_tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny, 24 degrees in {city}"

    return Agent(name="planner", instructions="You plan trips.", model=_model(script), tools=[weather])


def _say(text: str) -> list[Any]:
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText

    part = ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])
    return [ResponseOutputMessage(id="m", type="message", role="assistant", status="completed", content=[part])]


def _use(n: int) -> list[Any]:
    from openai.types.responses import ResponseFunctionToolCall

    args = json.dumps({"city": f"city {n}"})
    return [ResponseFunctionToolCall(id=f"w{n}", call_id=f"w{n}", type="function_call", name="weather", arguments=args)]


def _conversation(turns: int) -> tuple[list[str], list[Any]]:
    t = Text(2024)
    users, script = [], []
    for n in range(turns):
        users.append(t.words(200))
        if n % 3 == 0:
            script.append(_use(n))
        script.append(_say(t.words(800)))
    return users, script


class _Timed:
    """A session whose calls are timed (the time the SDK waits on its session)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.session_id = inner.session_id
        self.session_settings = inner.session_settings
        self.seconds = 0.0

    async def _timed(self, call: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await call
        finally:
            self.seconds += time.perf_counter() - t0

    async def get_items(self, limit: int | None = None) -> Any:
        return await self._timed(self.inner.get_items(limit))

    async def add_items(self, items: list[Any]) -> None:
        await self._timed(self.inner.add_items(items))

    async def pop_item(self) -> Any:
        return await self._timed(self.inner.pop_item())

    async def clear_session(self) -> None:
        await self._timed(self.inner.clear_session())


async def _converse(sessions: dict[str, Any], turns: int) -> dict[str, dict[str, Any]]:
    """The same conversation in each session, a turn of each in turn (a loaded machine slows both alike)."""
    from agents import Runner

    runs = {}
    for name, session in sessions.items():
        users, script = _conversation(turns)
        runs[name] = (users, _agent(script), _Timed(session))
    out: dict[str, dict[str, Any]] = {name: {"session_ms": [], "turn_ms": []} for name in sessions}
    for n in range(turns):
        for name, (users, agent, timed) in runs.items():
            before = timed.seconds
            t0 = time.perf_counter()
            await Runner.run(agent, users[n], session=timed)
            out[name]["turn_ms"].append((time.perf_counter() - t0) * 1000.0)
            out[name]["session_ms"].append((timed.seconds - before) * 1000.0)
    for name, session in sessions.items():
        out[name]["items"] = len(await session.get_items())
    return out


def sessions(sqlite_path: str, path: str, turns: int) -> dict[str, dict[str, Any]]:
    from agents import SQLiteSession

    import eventlog
    from eventlog.openai_agents import EventLogSession

    reference = SQLiteSession("trip", sqlite_path)
    try:
        with eventlog.open(path, durability="sync") as log:
            out = asyncio.run(_converse({"sqlite": reference, "eventlog": EventLogSession("trip", log)}, turns))
    finally:
        reference.close()
    out["sqlite"]["bytes"] = sum(disk_bytes(sqlite_path + s) for s in ("", "-wal", "-shm") if _exists(sqlite_path + s))
    el = out["eventlog"]
    el["bytes"] = disk_bytes(path)
    el["live_bytes"] = lmdb_live_bytes(path)
    with eventlog.open(path) as log:
        t0 = time.perf_counter()
        items = EventLogSession("trip", log).get_items_sync()
        el["reopen_ms"] = (time.perf_counter() - t0) * 1000.0
        assert len(items) == el["items"]
    return out


def _exists(path: str) -> bool:
    import os

    return os.path.exists(path)


def checkpoints(path: str, sqlite_path: str, steps: int) -> dict[str, Any]:
    import msgspec

    import eventlog
    from eventlog.openai_agents import ModelResponded, RunCheckpointer, RunStateSaved, ToolReturned

    t = Text(77)
    script = [_use(n) for n in range(steps)] + [_say(t.words(800))]
    with eventlog.open(path, durability="sync") as log:
        t0 = time.perf_counter()
        asyncio.run(RunCheckpointer(log).run("job", _agent(script), t.words(200), max_turns=steps + 5))
        seconds = time.perf_counter() - t0
        saved = [e.event for e in log.read("job") if isinstance(e.event, RunStateSaved)]
        records = [e.event for e in log.read("job") if isinstance(e.event, ModelResponded | ToolReturned)]
        delta_bytes = sum(len(json.dumps(s.delta)) for s in saved)
        record_bytes = sum(len(msgspec.json.encode(r)) for r in records)
        # the whole state at each of the same checkpoints, as the SDK's to_json gives it
        from eventlog.openai_agents import AgentsReducer

        offsets = [e.offset for e in log.read("job") if isinstance(e.event, RunStateSaved)]
        fulls = [json.dumps(log.state_at("job", k, reducer=AgentsReducer()).run_state) for k in offsets]
    eventlog_bytes = disk_bytes(path)
    db = sqlite3.connect(sqlite_path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("CREATE TABLE states (id INTEGER PRIMARY KEY, run_id TEXT, state TEXT)")
    for text in fulls:
        db.execute("INSERT INTO states (run_id, state) VALUES (?, ?)", ("job", text))
        db.commit()
    db.close()
    sqlite_bytes = sum(disk_bytes(sqlite_path + s) for s in ("", "-wal", "-shm") if _exists(sqlite_path + s))
    return {
        "checkpoints": len(saved),
        "delta_json_bytes": delta_bytes,
        "record_json_bytes": record_bytes,
        "full_json_bytes": sum(len(f) for f in fulls),
        "last_state_json_bytes": len(fulls[-1]),
        "eventlog_bytes": eventlog_bytes,
        "sqlite_full_bytes": sqlite_bytes,
        "seconds": seconds,
    }


def run(ctx: Context) -> SuiteResult:
    res = SuiteResult("openai_agents", __doc__.strip().splitlines()[0])
    try:
        import agents
    except ImportError as exc:
        res.skipped = f"openai-agents is not installed (the openai-agents extra): {exc}"
        return res
    agents.set_tracing_disabled(True)
    turns = ctx.size("EVENTLOG_BENCH_AGENT_TURNS", 200, 20)
    steps = ctx.size("EVENTLOG_BENCH_AGENT_STEPS", 50, 10)
    both = sessions(ctx.path("sqlite.db"), ctx.path("eventlog"), turns)
    sq, el = both["sqlite"], both["eventlog"]
    assert sq["items"] == el["items"], (sq["items"], el["items"])
    for name, r in (("SQLiteSession", sq), ("eventlog", el)):
        res.row(
            name,
            f"{turns}-turn conversation, bytes on disk after close",
            r["bytes"],
            "bytes",
            note=f"{r['items']} items",
        )
        res.row(name, "session calls per turn, median", median(r["session_ms"]), "ms")
        res.row(name, "session calls per turn, p95", percentile(r["session_ms"], 95), "ms")
        res.row(name, "Runner.run per turn, median", median(r["turn_ms"]), "ms")
    res.row("eventlog", f"{turns}-turn conversation, live LMDB pages", el["live_bytes"], "bytes")
    res.row("eventlog", "reopen: get_items of the whole session, new log object", el["reopen_ms"], "ms")
    cp = checkpoints(ctx.path("run"), ctx.path("states.db"), steps)
    stored = cp["delta_json_bytes"] + cp["record_json_bytes"]
    res.row(
        "eventlog",
        f"{steps}-step run, checkpoint changes + recorded calls (JSON bytes)",
        stored,
        "bytes",
        note=f"changes {cp['delta_json_bytes']:,}, model responses and tool outputs {cp['record_json_bytes']:,}",
    )
    res.row(
        "whole RunState", f"{steps}-step run, to_json() at each checkpoint (JSON bytes)", cp["full_json_bytes"], "bytes"
    )
    res.row(
        "eventlog",
        f"{steps}-step run, bytes on disk",
        cp["eventlog_bytes"],
        "bytes",
        note=f"{cp['checkpoints']} checkpoints",
    )
    res.row("SQLite", f"{steps}-step run, whole states on disk", cp["sqlite_full_bytes"], "bytes")
    res.row("eventlog", f"{steps}-step run, wall time (sync durability)", cp["seconds"], "s")
    res.metrics.update(
        turns=turns,
        items=el["items"],
        sqlite_bytes=sq["bytes"],
        eventlog_bytes=el["bytes"],
        sqlite_session_ms_median=median(sq["session_ms"]),
        eventlog_session_ms_median=median(el["session_ms"]),
        sqlite_session_ms_p95=percentile(sq["session_ms"], 95),
        eventlog_session_ms_p95=percentile(el["session_ms"], 95),
        sqlite_turn_ms_median=median(sq["turn_ms"]),
        eventlog_turn_ms_median=median(el["turn_ms"]),
        checkpoints=cp,
    )
    res.target(
        f"whole RunState per checkpoint ÷ eventlog's changes and records, {steps} steps",
        cp["full_json_bytes"] / stored,
        5.0 if steps >= 50 else 2.0,
        ">=",
        "x",
    )
    return res
