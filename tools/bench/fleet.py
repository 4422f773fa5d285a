"""Fleet: N processes run the same LangGraph chat, each on its own thread, over one store.

Each process compiles the chat suite's one-node `add_messages` graph with its saver, plays one
warm-up turn on a thread of its own, waits for the others, then plays `EVENTLOG_BENCH_FLEET_TURNS`
turns (40; short messages: a 40-character question, a 120-character reply), one
`graph.invoke` each with LangGraph's default durability (`"async"`). The figure is the
fleet's turns per second: every process's turns over the wall time from the common start to the
last process's end. Side by side, in one run: `EventLogSaver` on an LMDB directory
(durability `sync`, fsync per commit) and LangGraph's `SqliteSaver` on one SQLite file (WAL,
`synchronous=FULL`), and, with `EVENTLOG_BENCH_PG_DSN` set, `EventLogSaver` on a PostgreSQL
schema and `PostgresSaver` on another schema of the same server (both dropped after), each at
N = 1, 4 and 8 (`EVENTLOG_BENCH_FLEET_N`, comma-separated). `EVENTLOG_BENCH_FLEET_ROUNDS`
(1) rounds of each pair at each N, the two sides taking turns to go first: each figure is the
median of its rounds, each ratio the median of the rounds' ratios (a machine whose speed drifts
between two runs moves both sides of a round alike). Beside the rates: each side's client CPU
and voluntary context switches per turn (every thread of a process: waits on a lock, another
thread or a socket).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sqlite3
import statistics
import time
from typing import Any

from . import _langgraph as lg
from ._common import Context, SuiteResult, Text

TURNS_ENV = "EVENTLOG_BENCH_FLEET_TURNS"
N_ENV = "EVENTLOG_BENCH_FLEET_N"
ROUNDS_ENV = "EVENTLOG_BENCH_FLEET_ROUNDS"
PAIRS = (("eventlog-lmdb", "langgraph-sqlite"), ("eventlog-pg", "langgraph-postgres"))
"""(eventlog's system, the LangGraph saver it replaces): each pair shares a table row."""
_LABELS = {
    "eventlog-lmdb": "EventLogSaver, LMDB (sync)",
    "langgraph-sqlite": "SqliteSaver (WAL, one file)",
    "eventlog-pg": "EventLogSaver, PostgreSQL",
    "langgraph-postgres": "PostgresSaver",
}


def texts(turns: int) -> tuple[list[str], list[str]]:
    t = Text(4040)
    return [t.words(40) for _ in range(turns)], [t.words(120) for _ in range(turns)]


def _open(system: str, where: str) -> tuple[Any, list[Any]]:
    """A saver of `system` over the store at `where` (a directory, or a PostgreSQL DSN and
    schema as `DSN#schema`), and what to close after."""
    if system == "eventlog-lmdb":
        import eventlog
        from eventlog.langgraph import EventLogSaver

        log = eventlog.open(where, durability="sync")
        saver = EventLogSaver(log)
        return saver, [saver.close, log.close]
    if system == "eventlog-pg":
        import eventlog
        from eventlog.langgraph import EventLogSaver

        dsn, schema = where.split("#")
        log = eventlog.open(f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}")
        saver = EventLogSaver(log)
        return saver, [saver.close, log.close]
    if system == "langgraph-sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        conn = sqlite3.connect(os.path.join(where, "checkpoints.sqlite"), check_same_thread=False, timeout=120)
        saver = SqliteSaver(conn)
        saver.setup()  # WAL (SqliteSaver's setup), sqlite3's default synchronous=FULL
        return saver, [conn.close]
    if system == "langgraph-postgres":
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        dsn, schema = where.split("#")
        pg = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        pg.execute(f'SET search_path TO "{schema}"')
        return PostgresSaver(pg), [pg.close]  # type: ignore[arg-type]
    raise ValueError(system)


def _prepare(system: str, where: str) -> None:
    """Make the store once, before the fleet starts (schemas, tables)."""
    if system == "langgraph-postgres":
        import psycopg

        dsn, schema = where.split("#")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
    saver, closers = _open(system, where)
    if system == "langgraph-postgres":
        saver.setup()
    for close in closers:
        close()


def worker(system: str, where: str, k: int, turns: int, barrier: Any, out: Any) -> None:
    """One process of the fleet: a warm-up turn, the common start, `turns` turns on thread `fleet-k`."""
    from langchain_core.messages import HumanMessage

    from ._langgraph import _build

    users, replies = texts(turns)
    saver, closers = _open(system, where)
    try:
        graph = _build(saver, False, replies)
        graph.invoke(
            {"messages": [HumanMessage(content="hello", id="w1")]}, {"configurable": {"thread_id": f"warm-{k}"}}
        )
        barrier.wait()
        t0, c0, w0 = time.monotonic(), time.process_time(), _waits()
        config = {"configurable": {"thread_id": f"fleet-{k}"}}
        for i, text in enumerate(users):
            graph.invoke({"messages": [HumanMessage(content=text, id=f"u{i + 1}")]}, config)
        t1, cpu, waits = time.monotonic(), (time.process_time() - c0) / turns * 1000, (_waits() - w0) / turns
        n = len(graph.get_state(config).values["messages"])
        if n != 2 * turns:
            raise AssertionError(f"{system}: thread fleet-{k} holds {n} messages, not {2 * turns}")
        out.put((k, t0, t1, cpu, waits, None))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises it
        out.put((k, 0.0, 0.0, 0.0, 0.0, f"{type(exc).__name__}: {exc}"))
        barrier.abort()
    finally:
        for close in closers:
            close()


def _waits() -> int:
    """The process's voluntary context switches so far, all its threads (a thread that waits on
    another, a lock or a socket), where the platform counts them."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not on this platform
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw


def fleet(system: str, where: str, n: int, turns: int) -> tuple[float, float, float]:
    """Turns per second of `n` processes of `system` over the store at `where`, the median
    process's CPU per turn in ms (all its threads, `time.process_time`; not the server's) and
    its voluntary context switches per turn."""
    _prepare(system, where)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n)
    out = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(system, where, k, turns, barrier, out)) for k in range(n)]
    for p in procs:
        p.start()
    results = [out.get(timeout=900) for _ in procs]
    for p in procs:
        p.join()
    errors = [r[5] for r in results if r[5]]
    if errors:
        raise RuntimeError(f"{system} with {n} processes: {errors[0]}")
    start, end = min(r[1] for r in results), max(r[2] for r in results)
    return n * turns / (end - start), statistics.median(r[3] for r in results), statistics.median(r[4] for r in results)


def _pg_where(dsn: str, system: str, n: int) -> str:
    return f"{dsn}#bench_fleet_{system.replace('-', '_')}_{n}_{os.getpid()}"


def run(ctx: Context) -> SuiteResult:
    res = SuiteResult("fleet", __doc__.strip().splitlines()[0])
    why = lg.sqlite_missing()
    if why:
        res.skipped = why
        return res
    turns = ctx.size(TURNS_ENV, 40, 5)
    counts = [int(x) for x in os.environ.get(N_ENV, "1,4,8").split(",") if x.strip()]
    dsn = lg.pg_dsn()
    pairs = list(PAIRS[:1])
    why_not_pg = lg.pg_missing()
    if why_not_pg:
        res.metrics["skipped"] = why_not_pg
    else:
        pairs.append(PAIRS[1])
    rounds = max(1, int(os.environ.get(ROUNDS_ENV, "1")))
    table: dict[str, dict[int, float]] = {}
    cpu: dict[str, dict[int, float]] = {}
    waits: dict[str, dict[int, float]] = {}
    ratios: dict[str, dict[int, float]] = {}
    for pair in pairs:
        for n in counts:
            seen: dict[str, list[tuple[float, float, float]]] = {}
            for r in range(rounds):
                for system in pair if r % 2 == 0 else pair[::-1]:
                    print(f"  fleet: {system}, {n} processes x {turns} turns, round {r + 1} ...", flush=True)
                    seen.setdefault(system, []).append(_one(ctx, dsn, system, n, turns, r))
            for system, figures in seen.items():
                table.setdefault(system, {})[n] = statistics.median(f[0] for f in figures)
                cpu.setdefault(system, {})[n] = statistics.median(f[1] for f in figures)
                waits.setdefault(system, {})[n] = statistics.median(f[2] for f in figures)
            ratios.setdefault(pair[0], {})[n] = statistics.median(
                a[0] / b[0] for a, b in zip(seen[pair[0]], seen[pair[1]], strict=True)
            )
        ours, theirs = pair
        for n in counts:
            a, b = table[ours][n], table[theirs][n]
            res.row(_LABELS[ours], f"{n} processes, turns/s", a, "turns/s", note=f"{_LABELS[theirs]}: {b:.1f}")
            res.row(_LABELS[theirs], f"{n} processes, turns/s", b, "turns/s")
            res.row(
                _LABELS[ours], f"  {n} processes, client CPU per turn", cpu[ours][n], "ms",
                ratio=cpu[theirs][n] / cpu[ours][n], note=f"{_LABELS[theirs]}: {cpu[theirs][n]:.2f} ms; ratio: theirs ÷ ours",
            )  # fmt: skip
            res.row(
                _LABELS[ours], f"  {n} processes, context switches per turn", waits[ours][n], "",
                note=f"{_LABELS[theirs]}: {waits[theirs][n]:.1f} (voluntary, every thread of the process)",
            )  # fmt: skip
            needs = ours == "eventlog-pg" or n in (1, 4)
            if needs:
                res.target(f"{_LABELS[ours]} ÷ {_LABELS[theirs]}, {n} processes", ratios[ours][n], 1.0, ">=", "x")
    res.metrics["turns"] = turns
    res.metrics["rounds"] = rounds
    res.metrics["ratio"] = {s: {str(n): r for n, r in by.items()} for s, by in ratios.items()}
    res.metrics["processes"] = counts
    res.metrics["turns_per_s"] = {s: {str(n): r for n, r in by.items()} for s, by in table.items()}
    res.metrics["client_cpu_ms_per_turn"] = {s: {str(n): c for n, c in by.items()} for s, by in cpu.items()}
    res.metrics["context_switches_per_turn"] = {s: {str(n): c for n, c in by.items()} for s, by in waits.items()}
    print(markdown(table, cpu, ratios, counts, pairs, turns), flush=True)
    return res


def _one(ctx: Context, dsn: str | None, system: str, n: int, turns: int, r: int) -> tuple[float, float, float]:
    """One fleet of `system` on a store of its own (`fleet`'s figures)."""
    if system.endswith("pg") or system.endswith("postgres"):
        assert dsn is not None
        where = _pg_where(dsn, system, n)
        try:
            return fleet(system, where, n, turns)
        finally:
            lg._pg_drop(dsn, where.split("#")[1])
    where = ctx.path(f"{system}-{n}-{r}")
    os.makedirs(where, exist_ok=True)
    return fleet(system, where, n, turns)


def markdown(
    table: dict[str, dict[int, float]],
    cpu: dict[str, dict[int, float]],
    ratios: dict[str, dict[int, float]],
    counts: list[int],
    pairs: list[tuple[str, str]],
    turns: int,
) -> str:
    """The fleet's figures as the Markdown table docs/benchmarks.md shows."""
    lines = [
        "| store | processes | eventlog turns/s | LangGraph's saver turns/s | ratio | eventlog CPU ms/turn | saver CPU ms/turn |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for ours, theirs in pairs:
        for n in counts:
            a, b = table[ours][n], table[theirs][n]
            lines.append(
                f"| {_LABELS[ours]} vs {_LABELS[theirs]} | {n} | {a:.1f} | {b:.1f} | {ratios[ours][n]:.2f} "
                f"| {cpu[ours][n]:.2f} | {cpu[theirs][n]:.2f} |"
            )
    return f"fleet, {turns} turns per process\n" + "\n".join(lines)
