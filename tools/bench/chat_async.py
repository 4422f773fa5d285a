"""Async chat: one process plays the fleet's chat with `await graph.ainvoke`, one thread of its own.

The fleet suite's one-node chat and texts (`EVENTLOG_BENCH_ASYNC_TURNS` turns, 40; LangGraph's
default durability `"async"`), played on one event loop, side by side in one run:
`EventLogSaver` on an LMDB directory (durability `sync`) beside `AsyncSqliteSaver` (one SQLite
file, WAL), and, with `EVENTLOG_BENCH_PG_DSN` set, `EventLogSaver` on a PostgreSQL schema beside
`AsyncPostgresSaver` on another. `EVENTLOG_BENCH_ASYNC_ROUNDS` (3) rounds, the two sides taking
turns to go first; each figure is the median of its rounds, each ratio the median of the rounds'
ratios. Beside eventlog's rate: its log commits per turn (LangGraph makes five saver calls a turn
of this graph: three `aput`s and two `aput_writes`).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

from . import _langgraph as lg
from ._common import Context, SuiteResult
from .fleet import texts

TURNS_ENV = "EVENTLOG_BENCH_ASYNC_TURNS"
ROUNDS_ENV = "EVENTLOG_BENCH_ASYNC_ROUNDS"
_LABELS = {
    "eventlog-lmdb": "EventLogSaver, LMDB (sync)",
    "langgraph-sqlite": "AsyncSqliteSaver (WAL, one file)",
    "eventlog-pg": "EventLogSaver, PostgreSQL",
    "langgraph-postgres": "AsyncPostgresSaver",
}


async def _play(system: str, where: str, turns: int) -> tuple[float, float]:
    """Turns per second of one thread, and eventlog's log commits per turn (0 for LangGraph's)."""
    import contextlib

    from langchain_core.messages import HumanMessage

    users, replies = texts(turns)
    async with contextlib.AsyncExitStack() as stack:
        log: Any = None
        if system.startswith("eventlog"):
            import eventlog
            from eventlog.langgraph import EventLogSaver

            if system == "eventlog-lmdb":
                log = stack.enter_context(eventlog.open(where, durability="sync"))
            else:
                dsn, schema = where.split("#")
                log = stack.enter_context(eventlog.open(f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}"))
            saver: Any = EventLogSaver(log)
            stack.callback(saver.close)
        elif system == "langgraph-sqlite":
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            saver = await stack.enter_async_context(
                AsyncSqliteSaver.from_conn_string(os.path.join(where, "checkpoints.sqlite"))
            )
        else:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            dsn, schema = where.split("#")
            options = f"options=-csearch_path%3D{schema}"
            saver = await stack.enter_async_context(
                AsyncPostgresSaver.from_conn_string(f"{dsn}{'&' if '?' in dsn else '?'}{options}")
            )
            await saver.setup()
        graph = lg._build(saver, False, replies)
        await graph.ainvoke(
            {"messages": [HumanMessage(content="hello", id="w1")]}, {"configurable": {"thread_id": "warm"}}
        )
        commits = log.engine.commit.commits if log is not None else 0
        config = {"configurable": {"thread_id": "chat"}}
        t0 = time.monotonic()
        for i, text in enumerate(users):
            await graph.ainvoke({"messages": [HumanMessage(content=text, id=f"u{i + 1}")]}, config)
        rate = turns / (time.monotonic() - t0)
        per_turn = (log.engine.commit.commits - commits) / turns if log is not None else 0.0
        n = len((await graph.aget_state(config)).values["messages"])
        if n != 2 * turns:
            raise AssertionError(f"{system}: the thread holds {n} messages, not {2 * turns}")
        return rate, per_turn


def _one(ctx: Context, dsn: str | None, system: str, turns: int, r: int) -> tuple[float, float]:
    if system in ("eventlog-pg", "langgraph-postgres"):
        import psycopg

        assert dsn is not None
        schema = f"bench_async_{system.replace('-', '_')}_{os.getpid()}_{r}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        try:
            return asyncio.run(_play(system, f"{dsn}#{schema}", turns))
        finally:
            lg._pg_drop(dsn, schema)
    where = ctx.path(f"async-{system}-{r}")
    os.makedirs(where, exist_ok=True)
    return asyncio.run(_play(system, where, turns))


def run(ctx: Context) -> SuiteResult:
    res = SuiteResult("chat_async", __doc__.strip().splitlines()[0])
    why = lg.sqlite_missing()
    if why:
        res.skipped = why
        return res
    turns = ctx.size(TURNS_ENV, 40, 5)
    rounds = max(1, int(os.environ.get(ROUNDS_ENV, "3")))
    dsn = lg.pg_dsn()
    pairs = [("eventlog-lmdb", "langgraph-sqlite")]
    why_not_pg = lg.pg_missing()
    if why_not_pg:
        res.metrics["skipped"] = why_not_pg
    else:
        pairs.append(("eventlog-pg", "langgraph-postgres"))
    for ours, theirs in pairs:
        seen: dict[str, list[tuple[float, float]]] = {ours: [], theirs: []}
        for r in range(rounds):
            for system in (ours, theirs) if r % 2 == 0 else (theirs, ours):
                print(f"  chat_async: {system}, {turns} turns, round {r + 1} ...", flush=True)
                seen[system].append(_one(ctx, dsn, system, turns, r))
        a, b = (statistics.median(f[0] for f in seen[s]) for s in (ours, theirs))
        ratio = statistics.median(x[0] / y[0] for x, y in zip(seen[ours], seen[theirs], strict=True))
        commits = statistics.median(f[1] for f in seen[ours])
        res.row(_LABELS[ours], "turns/s", a, "turns/s", ratio=ratio, note=f"{commits:.2f} log commits per turn")
        res.row(_LABELS[theirs], "turns/s", b, "turns/s")
        res.metrics[ours] = {"turns_per_s": a, "ratio": ratio, "commits_per_turn": commits, "theirs": b}
    res.metrics["turns"], res.metrics["rounds"] = turns, rounds
    return res
