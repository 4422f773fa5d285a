"""The savers' checkpoint writes alone: a recorded chat's `put` calls replayed into each saver.

    python -m tools.bench.saver_replay [--turns 40] [--rounds 4]

Records the `put` calls LangGraph makes of its checkpointer while it plays the fleet suite's
chat (`tools/bench/fleet.py`: short messages, one `invoke` a turn, LangGraph's default
durability) on an `InMemorySaver`, then replays them, in one thread and in their order, into a fresh
`EventLogSaver` on LMDB (durability `sync`) beside `SqliteSaver`, and, with
`EVENTLOG_BENCH_PG_DSN` set, into `EventLogSaver` on PostgreSQL beside `PostgresSaver`. Prints
the CPU time of the replaying process per turn, the least of `--rounds` rounds, the systems
alternating: the saver's own cost of a turn's checkpoints, without the graph, LangGraph's
threads or the other processes of the fleet. (A task's `put_writes`, which LangGraph calls
from another thread and eventlog commits with the next `put`, is left out: replayed in one
thread it would wait for that put and commit alone.)
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time
from typing import Any


def record(turns: int) -> list[tuple[Any, ...]]:
    """The arguments of the `put` calls (deep-copied) of a `turns`-turn chat."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from ._langgraph import _build
    from .fleet import texts

    calls: list[tuple[Any, ...]] = []

    class Recording(InMemorySaver):
        def put(self, *args: Any) -> Any:
            calls.append(copy.deepcopy(args))
            return super().put(*args)

    users, replies = texts(turns)
    graph = _build(Recording(), False, replies)
    config = {"configurable": {"thread_id": "replayed"}}
    for i, text in enumerate(users):
        graph.invoke({"messages": [HumanMessage(content=text, id=f"u{i + 1}")]}, config)
    return calls


def replay(system: str, calls: list[tuple[Any, ...]], dsn: str | None) -> float:
    """CPU seconds of this process to replay `calls` into a fresh saver of `system`."""
    from . import _langgraph as lg
    from .fleet import _open, _pg_where, _prepare

    where = _pg_where(dsn, system, 1) if dsn else tempfile.mkdtemp(prefix="eventlog-replay-")
    _prepare(system, where)
    work = copy.deepcopy(calls)
    try:
        saver, closers = _open(system, where)
        try:
            start = time.process_time()
            for args in work:
                saver.put(*args)
            return time.process_time() - start
        finally:
            for close in closers:
                close()
    finally:
        if dsn:
            lg._pg_drop(dsn, where.split("#")[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.saver_replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)

    from . import _langgraph as lg

    calls = record(args.turns)
    dsn = lg.pg_dsn()
    pairs = [("eventlog-lmdb", "langgraph-sqlite", None)]
    if lg.pg_missing() is None:
        pairs.append(("eventlog-pg", "langgraph-postgres", dsn))
    print(f"{len(calls)} puts for {args.turns} turns; CPU ms per turn, least of {args.rounds} rounds")
    for ours, theirs, where in pairs:
        best = {ours: float("inf"), theirs: float("inf")}
        for _ in range(args.rounds):
            for system in (ours, theirs):
                best[system] = min(best[system], replay(system, calls, where) / args.turns * 1000)
        print(
            f"  {ours:14s} {best[ours]:6.2f}   {theirs:18s} {best[theirs]:6.2f}   ratio {best[theirs] / best[ours]:.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
