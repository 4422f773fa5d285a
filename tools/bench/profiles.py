"""python -m tools.bench.profiles [NAME ...] [--out DIR]

Profiles, with pyinstrument, the paths whose targets the benchmark misses, and writes each
as text (the call tree, frames under 1% of the time folded away) to DIR
(docs/bench/profiles unless given):

- `append_single`: 20,000 single `append`s of the agent mix, durability none (floor (c)'s
  path, and what bounds group commit: the CPU each append costs under the GIL);
- `append_batch_fresh`: a fresh log loaded with 100,000 agent-mix events by `append_many`
  of 1,000, across the dictionary training thresholds;
- `replay_agent`: `state_at(run, head)` over 100,000 agent-mix events, twice;
- `postgres_single` and `postgres_batch` (when `EVENTLOG_BENCH_PG_DSN` is set): 1,000 single
  appends, and 20 `append_many` of 1,000, to a schema of their own;
- `saver_lmdb` and `saver_postgres` (the latter with `EVENTLOG_BENCH_PG_DSN`): the fleet suite's
  chat, 40 turns on one thread with LangGraph's default durability, `EventLogSaver` over LMDB
  (durability `sync`) or PostgreSQL; LangGraph calls the saver from threads of its own, so here
  each call is handed to one thread kept for them, which is what is profiled (the graph's
  own work is not in the tree; the hand-over is).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from ._common import agent_events, chunks

Prepared = tuple[Callable[[], None], Callable[[], None]]  # (the profiled work, the cleanup)
_IN_THREAD: dict[str, Callable[[Callable[[], None]], None]] = {}
"""Profiles whose work runs in another thread: how to run the profiler's start and stop there."""


def _lmdb(durability: str) -> Any:
    import eventlog

    return eventlog.open(tempfile.mkdtemp(prefix="eventlog-profile-"), durability=durability)


def append_single() -> Prepared:
    log = _lmdb("none")
    events = agent_events(22_000)
    for e in events[:2_000]:  # past the first dictionary
        log.append("warm", e)

    def work() -> None:
        for e in events[2_000:]:
            log.append("r", e)

    return work, log.close


def append_batch_fresh() -> Prepared:
    log = _lmdb("sync")
    events = agent_events(100_000)

    def work() -> None:
        for batch in chunks(events, 1_000):
            log.append_many("load", batch)

    return work, log.close


def replay_agent() -> Prepared:
    log = _lmdb("none")
    for batch in chunks(agent_events(100_000), 1_000):
        log.append_many("replay", batch)

    def work() -> None:
        for _ in range(2):
            log.state_at("replay", 100_000)

    return work, log.close


def _postgres(batch: bool) -> Prepared | None:
    dsn = os.environ.get("EVENTLOG_BENCH_PG_DSN")
    if not dsn:
        return None
    import eventlog
    from eventlog.store.postgres import PostgresStore

    from .postgres import with_schema

    schema = f"profile_{os.getpid()}"
    PostgresStore.drop_schema(dsn, schema)
    log = eventlog.open(with_schema(dsn, schema))
    events = agent_events(21_000)
    log.append_many("warm", events[:1_000])

    def work() -> None:
        if batch:
            for b in chunks(events[1_000:], 1_000):
                log.append_many("batch", b)
        else:
            for e in events[1_000:2_000]:
                log.append("single", e)

    def cleanup() -> None:
        log.close()
        PostgresStore.drop_schema(dsn, schema)

    return work, cleanup


def _call_in(calls: ThreadPoolExecutor, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return calls.submit(fn, *args, **kwargs).result()


def _saver(name: str, postgres: bool) -> Prepared | None:
    dsn = os.environ.get("EVENTLOG_BENCH_PG_DSN")
    if postgres and not dsn:
        return None
    from langchain_core.messages import HumanMessage

    import eventlog
    from eventlog.langgraph import EventLogSaver

    from ._langgraph import _build, _pg_drop
    from .fleet import texts

    schema = f"profile_saver_{os.getpid()}"
    if postgres:
        assert dsn is not None
        _pg_drop(dsn, schema)
        log = eventlog.open(f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}")
    else:
        log = eventlog.open(tempfile.mkdtemp(prefix="eventlog-profile-"), durability="sync")
    saver = EventLogSaver(log, workers=1)
    users, replies = texts(40)
    graph = _build(saver, False, replies)
    graph.invoke({"messages": [HumanMessage(content="hello", id="w1")]}, {"configurable": {"thread_id": "warm"}})
    calls = ThreadPoolExecutor(1, thread_name_prefix="eventlog-profiled-saver")
    _IN_THREAD[name] = lambda fn: calls.submit(fn).result()
    for method in ("get_tuple", "put", "put_writes"):
        setattr(saver, method, partial(_call_in, calls, getattr(saver, method)))
    saver.list = partial(_call_in, calls, lambda *a, _list=saver.list, **k: list(_list(*a, **k)))

    def work() -> None:
        config = {"configurable": {"thread_id": "profiled"}}
        for i, text in enumerate(users):
            graph.invoke({"messages": [HumanMessage(content=text, id=f"u{i + 1}")]}, config)

    def cleanup() -> None:
        calls.shutdown()
        saver.close()
        log.close()
        if postgres:
            assert dsn is not None
            _pg_drop(dsn, schema)

    return work, cleanup


PROFILES: dict[str, Callable[[], Prepared | None]] = {
    "saver_lmdb": lambda: _saver("saver_lmdb", postgres=False),
    "saver_postgres": lambda: _saver("saver_postgres", postgres=True),
    "append_single": append_single,
    "append_batch_fresh": append_batch_fresh,
    "replay_agent": replay_agent,
    "postgres_single": lambda: _postgres(batch=False),
    "postgres_batch": lambda: _postgres(batch=True),
}


def main(argv: list[str] | None = None) -> int:
    from pyinstrument import Profiler

    parser = argparse.ArgumentParser(prog="python -m tools.bench.profiles", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"profiles to take: {', '.join(PROFILES)} (all unless named)")
    parser.add_argument("--out", default="docs/bench/profiles", help="directory for the text reports")
    args = parser.parse_args(argv)
    unknown = set(args.names) - set(PROFILES)
    if unknown:
        parser.error(f"unknown profiles: {', '.join(sorted(unknown))}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in args.names or list(PROFILES):
        prepared = PROFILES[name]()
        if prepared is None:
            print(f"{name}: skipped (set EVENTLOG_BENCH_PG_DSN to profile the PostgreSQL store)")
            continue
        work, cleanup = prepared
        profiler = Profiler(interval=0.0005, async_mode="disabled")
        in_thread = _IN_THREAD.get(name, lambda fn: fn())
        try:
            in_thread(profiler.start)
            try:
                work()
            finally:
                in_thread(profiler.stop)
        finally:
            cleanup()
        text = profiler.output_text(unicode=True, color=False, show_all=False, timeline=False)
        (out / f"{name}.txt").write_text(f"# python -m tools.bench.profiles {name}\n{text}")
        print(f"{name}: {profiler.last_session.duration:.2f} s profiled -> {out / f'{name}.txt'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
