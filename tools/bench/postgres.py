"""PostgreSQL: eventlog's PostgreSQL store beside psycopg 3 writing the same events, on one server.

Runs when `EVENTLOG_BENCH_PG_DSN` names a database (for example
postgresql://postgres@127.0.0.1:5432/test); each log and each floor gets a schema of its
own, dropped at the end. The floor is the least code that stores the same event: a table
like the store's `events` (`events (run bigint, off bigint, value bytea, PRIMARY KEY (run, off))`)
and, per event, its msgspec encoding compressed with zstd under its run number and offset.

- Single appends: eventlog's `append` (one transaction per event) beside the floor's one
  `INSERT` + `COMMIT` per event, alternating in rounds of `EVENTLOG_BENCH_PG_APPENDS`
  (200 unless set); medians of the per-round rates and ratios.
- Batches: `append_many` of 1,000 events beside the floor's `executemany` of 1,000 rows in
  one transaction (what the store itself sends); `COPY ... FROM STDIN (FORMAT BINARY)` of the
  same rows is shown for reference. Rounds of 5 batches; medians.
- Writer processes: N = 1, 2, 4 and 8 processes (1 and 2 with --quick; executors on several
  machines share one server), each appending `EVENTLOG_BENCH_PG_APPENDS` single events to a
  run of its own, released together; the rate is all appends ÷ the time from the release to
  the last one's end. The floor's processes do the same. Each N is reported beside the floor at
  the same N, and eventlog's scaling (N ÷ 1) over the floor's own scaling. While eventlog's
  processes run, the parent samples every 5 ms how many sessions wait on a lock (a run's row
  lock, or anything else: writers of distinct runs should wait on none).

Commits are durable as the server is configured (`synchronous_commit`, printed in the
metrics). Agent-mix events of about 600 bytes encoded.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ._common import Context, SuiteResult, agent_events, chunks, median

DSN_ENV = "EVENTLOG_BENCH_PG_DSN"
BATCH = 1000
ROUND_BATCHES = 5
PROCESSES = (1, 2, 4, 8)
QUICK_PROCESSES = (1, 2)


def with_schema(dsn: str, schema: str) -> str:
    """The DSN with `schema=NAME` in its query (eventlog's way to name the log's schema)."""
    parts = urlsplit(dsn)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "schema"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("schema", schema)])))


class PgFloor:
    """psycopg 3 storing encoded, compressed events in a table like the store's `events`."""

    def __init__(self, dsn: str, schema: str) -> None:
        import msgspec
        import psycopg
        import zstandard

        self.conn = psycopg.connect(dsn, autocommit=False)
        self.schema = schema
        self.conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        self.conn.execute(
            f'CREATE TABLE IF NOT EXISTS "{schema}".events '
            "(run bigint NOT NULL, off bigint NOT NULL, value bytea NOT NULL, PRIMARY KEY (run, off))"
        )
        self.conn.commit()
        self._insert = f'INSERT INTO "{schema}".events (run, off, value) VALUES (%s, %s, %s)'
        self._copy = f'COPY "{schema}".events (run, off, value) FROM STDIN (FORMAT BINARY)'
        self._encode = msgspec.msgpack.Encoder().encode
        self._compress = zstandard.ZstdCompressor(level=3, write_checksum=False).compress

    def close(self) -> None:
        self.conn.close()

    def _row(self, run: int, offset: int, event: Any) -> tuple[int, int, bytes]:
        return (run, offset, self._compress(self._encode(event)))

    def append_one(self, run: int, offset: int, event: Any) -> None:
        self.conn.execute(self._insert, self._row(run, offset, event))
        self.conn.commit()

    def append_batch(self, run: int, first: int, events: list[Any]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(self._insert, [self._row(run, i, e) for i, e in enumerate(events, first)])
        self.conn.commit()

    def copy_batch(self, run: int, first: int, events: list[Any]) -> None:
        with self.conn.cursor() as cur, cur.copy(self._copy) as copy:
            copy.set_types(["int8", "int8", "bytea"])
            for i, e in enumerate(events, first):
                copy.write_row(self._row(run, i, e))
        self.conn.commit()


def drop_schemas(dsn: str, schemas: list[str]) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        for schema in schemas:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _alternate(rounds: int, sides: dict[str, Any], units: int) -> dict[str, list[float]]:
    """Per-round rates of each side (who goes first turns round), `units` per call; under
    `NAME cpu`, the client's CPU per unit in µs (`time.process_time`: less moved by other work
    on the machine than the rates)."""
    rates: dict[str, list[float]] = {key: [] for name in sides for key in (name, f"{name} cpu")}
    names = list(sides)
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0, c0 = time.perf_counter(), time.process_time()
            sides[name](r)
            rates[name].append(units / (time.perf_counter() - t0))
            rates[f"{name} cpu"].append((time.process_time() - c0) / units * 1e6)
    return rates


def _process_writer(kind: str, target: str, run: int, n: int, barrier: Any, results: Any) -> None:
    """One writer process: open, warm up with one append, wait for the others, append `n` events."""
    import eventlog

    events = agent_events(n + 1, seed=run)
    if kind == "eventlog":
        log = eventlog.open(target)
        append = log.append
        run_id = f"proc-{run}"
        append(run_id, events[0])
        barrier.wait()
        t0 = time.perf_counter()
        for e in events[1:]:
            append(run_id, e)
        t1 = time.perf_counter()
        log.close()
    else:
        dsn, schema = target.split("\x00")
        floor = PgFloor(dsn, schema)
        floor.append_one(run, 0, events[0])
        barrier.wait()
        t0 = time.perf_counter()
        for i, e in enumerate(events[1:], 1):
            floor.append_one(run, i, e)
        t1 = time.perf_counter()
        floor.close()
    results.put((t0, t1))


def _lock_waiters(dsn: str, stop: threading.Event, samples: list[int]) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        while not stop.is_set():
            row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'").fetchone()
            samples.append(int(row[0]) if row else 0)
            time.sleep(0.005)


def _processes(kind: str, target: str, n_procs: int, n: int, first_run: int) -> float:
    """All appends of `n_procs` writer processes ÷ the time from their release to the last one's end."""
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter each, as on another machine
    barrier = ctx.Barrier(n_procs)
    results = ctx.Queue()
    procs = [
        ctx.Process(target=_process_writer, args=(kind, target, first_run + k, n, barrier, results))
        for k in range(n_procs)
    ]
    for p in procs:
        p.start()
    spans = [results.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise RuntimeError(f"a {kind} writer process exited with {p.exitcode}")
    start: float = min(s for s, _ in spans)
    end: float = max(e for _, e in spans)
    return n_procs * n / (end - start)


def _one_process(
    dsn: str, log_schema: str, floor_schema: str, m: int, rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]], str | None]:
    """Per-round rates of single appends and of batches, eventlog and the floors; the server's synchronous_commit."""
    import eventlog

    events = agent_events(max(m, BATCH * ROUND_BATCHES))
    singles, batches = events[:m], list(chunks(events[: BATCH * ROUND_BATCHES], BATCH))
    log = eventlog.open(with_schema(dsn, log_schema))
    floor = PgFloor(dsn, floor_schema)
    try:
        row = floor.conn.execute("SHOW synchronous_commit").fetchone()
        floor.conn.commit()
        for i, b in enumerate(batches):  # warm-up: the first dictionaries, both tables' first pages
            log.append_many("warm", b)
            floor.append_batch(10_000, 1 + i * BATCH, b)

        def log_single(r: int) -> None:
            append = log.append
            for e in singles:
                append(f"single-{r}", e)

        def floor_single(r: int) -> None:
            for i, e in enumerate(singles, 1):
                floor.append_one(r + 1, i, e)

        def log_batch(r: int) -> None:
            for b in batches:
                log.append_many(f"batch-{r}", b)

        def floor_batch(r: int) -> None:
            for i, b in enumerate(batches):
                floor.append_batch(1_000 + r, 1 + i * BATCH, b)

        def floor_copy(r: int) -> None:
            for i, b in enumerate(batches):
                floor.copy_batch(2_000 + r, 1 + i * BATCH, b)

        single = _alternate(rounds, {"floor": floor_single, "eventlog": log_single}, m)
        sides = {"floor": floor_batch, "copy": floor_copy, "eventlog": log_batch}
        batch = _alternate(rounds, sides, BATCH * ROUND_BATCHES)
    finally:
        log.close()
        floor.close()
    return single, batch, None if row is None else str(row[0])


def _writer_processes(
    dsn: str, log_schema: str, floor_schema: str, m: int, rounds: int, counts: tuple[int, ...]
) -> tuple[dict[str, dict[int, list[float]]], list[int]]:
    """Per-round rates of N writer processes, eventlog and the floor; the lock waiters sampled."""
    import eventlog

    eventlog.open(with_schema(dsn, log_schema)).close()  # the schema exists before the writers race to it
    PgFloor(dsn, floor_schema).close()
    procs: dict[str, dict[int, list[float]]] = {kind: {n: [] for n in counts} for kind in ("eventlog", "floor")}
    waiting: list[int] = []
    run_no = 0
    for r in range(rounds):
        for n_procs in counts if r % 2 == 0 else counts[::-1]:
            for kind, target in (("eventlog", with_schema(dsn, log_schema)), ("floor", f"{dsn}\x00{floor_schema}")):
                stop = threading.Event()
                sampler = None
                if kind == "eventlog" and n_procs > 1:
                    sampler = threading.Thread(target=_lock_waiters, args=(dsn, stop, waiting), daemon=True)
                    sampler.start()
                try:
                    procs[kind][n_procs].append(_processes(kind, target, n_procs, m, run_no))
                finally:
                    stop.set()
                    if sampler is not None:
                        sampler.join()
                run_no += n_procs
    return procs, waiting


def run(ctx: Context) -> SuiteResult:
    res = SuiteResult("postgres", __doc__.strip().splitlines()[0])
    dsn = os.environ.get(DSN_ENV)
    if not dsn:
        res.skipped = f"set {DSN_ENV} (for example postgresql://postgres@127.0.0.1:5432/test) to run it"
        return res
    try:
        import psycopg  # noqa: F401
    except ImportError:
        res.skipped = "psycopg 3 is not installed: pip install 'eventlog[postgres]'"
        return res

    m = ctx.size("EVENTLOG_BENCH_PG_APPENDS", 200, 30)
    rounds = ctx.n(9, 2)
    proc_rounds = ctx.n(3, 1)
    tag = f"{os.getpid()}"
    schemas = [f"bench_pg_log_{tag}", f"bench_pg_floor_{tag}", f"bench_pg_procs_{tag}", f"bench_pg_pfloor_{tag}"]
    drop_schemas(dsn, schemas)
    try:
        single, batch, setting = _one_process(dsn, schemas[0], schemas[1], m, rounds)
        counts = QUICK_PROCESSES if ctx.quick else PROCESSES
        procs, waiting = _writer_processes(dsn, schemas[2], schemas[3], m, proc_rounds, counts)
    finally:
        drop_schemas(dsn, schemas)

    def ratios(a: list[float], b: list[float]) -> float:
        return median([x / y for x, y in zip(a, b, strict=True)])

    s_floor, s_log = median(single["floor"]), median(single["eventlog"])
    s_ratio = ratios(single["eventlog"], single["floor"])
    b_floor, b_copy, b_log = median(batch["floor"]), median(batch["copy"]), median(batch["eventlog"])
    b_ratio = ratios(batch["eventlog"], batch["floor"])
    b_copy_ratio = ratios(batch["eventlog"], batch["copy"])
    p = {kind: {n: median(v) for n, v in d.items()} for kind, d in procs.items()}
    scaling = {
        kind: {n: ratios(procs[kind][n], procs[kind][1]) for n in counts if n > 1} for kind in ("eventlog", "floor")
    }
    mean_waiting = sum(waiting) / len(waiting) if waiting else float("nan")
    note = f"median of {rounds} rounds"
    res.row("floor (pg)", "INSERT + COMMIT per event", s_floor, "appends/s", note=f"{note} of {m}")
    res.row("eventlog", "append", s_log, "appends/s", ratio=s_ratio, note="ratio: median of per-round ratios")
    s_cpu_floor, s_cpu_log = median(single["floor cpu"]), median(single["eventlog cpu"])
    s_cpu_ratio = ratios(single["floor cpu"], single["eventlog cpu"])
    res.row("floor (pg)", "  client CPU per append", s_cpu_floor, "µs", note="time.process_time, median of rounds")
    res.row(
        "eventlog",
        "  client CPU per append",
        s_cpu_log,
        "µs",
        ratio=s_cpu_ratio,
        note="ratio: the floor's ÷ eventlog's",
    )
    res.row("floor (pg)", f"executemany x{BATCH} + COMMIT", b_floor, "events/s", note=note)
    res.row("floor (pg)", f"COPY BINARY x{BATCH} + COMMIT", b_copy, "events/s", note="reference")
    res.row("eventlog", f"append_many x{BATCH}", b_log, "events/s", ratio=b_ratio, note=f"÷ COPY: {b_copy_ratio:.2f}")
    for n_procs in counts:
        label = f"append, {n_procs} writer process{'es' if n_procs > 1 else ''}"
        f_note = f"{scaling['floor'][n_procs]:.2f}x 1 process" if n_procs > 1 else f"median of {proc_rounds} rounds"
        res.row("floor (pg)", label, p["floor"][n_procs], "appends/s", note=f_note)
        e_note = ""
        if n_procs > 1:
            over = scaling["eventlog"][n_procs] / scaling["floor"][n_procs]
            e_note = f"{scaling['eventlog'][n_procs]:.2f}x 1 process; scaling ÷ the floor's: {over:.2f}"
        ratio = p["eventlog"][n_procs] / p["floor"][n_procs]
        res.row("eventlog", label, p["eventlog"][n_procs], "appends/s", ratio=ratio, note=e_note)
    res.row(
        "eventlog",
        f"  sessions waiting on a lock, {max(counts)} processes or fewer",
        mean_waiting,
        "sessions",
        note="mean of samples every 5 ms",
    )
    res.metrics.update(
        synchronous_commit=setting,
        appends_per_round=m,
        rounds=rounds,
        single={
            "floor_appends_per_s": s_floor,
            "eventlog_appends_per_s": s_log,
            "ratio_to_floor": s_ratio,
            "floor_cpu_us_per_append": s_cpu_floor,
            "eventlog_cpu_us_per_append": s_cpu_log,
            "cpu_ratio_to_floor": s_cpu_ratio,
        },
        batch={
            "floor_executemany_events_per_s": b_floor,
            "floor_copy_events_per_s": b_copy,
            "eventlog_events_per_s": b_log,
            "ratio_to_floor": b_ratio,
            "ratio_to_copy": b_copy_ratio,
        },
        processes={
            "rounds": proc_rounds,
            "appends_per_process": m,
            "eventlog_appends_per_s": {str(k): v for k, v in p["eventlog"].items()},
            "floor_appends_per_s": {str(k): v for k, v in p["floor"].items()},
            "eventlog_scaling": {str(k): v for k, v in scaling["eventlog"].items()},
            "floor_scaling": {str(k): v for k, v in scaling["floor"].items()},
            "mean_sessions_waiting_on_a_lock": mean_waiting,
        },
    )
    res.target("PostgreSQL single append ÷ its floor", s_ratio, 0.7, ">=")
    res.target(f"PostgreSQL append_many x{BATCH} ÷ its floor (executemany)", b_ratio, 0.8, ">=")
    for n_procs in counts[1:]:
        over = scaling["eventlog"][n_procs] / scaling["floor"][n_procs]
        res.target(f"PostgreSQL {n_procs} writer processes: scaling ÷ the floor's", over, 0.9, ">=", "x")
    return res
