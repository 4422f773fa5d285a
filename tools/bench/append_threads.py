"""Concurrent durable appends: 8 threads each appending single events to a run of its own.

eventlog with durability="sync" shares one open log between 8 threads; every `append`
returns only once its event is durable, so throughput above the single-thread rate comes
from group commit (several threads' events in one transaction and one fsync). Compared
with the single-thread `append` rate measured in the same suite, and with raw LMDB
doing the same from 8 threads (LMDB serializes writers: one fsync per put).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ._common import Context, SuiteResult, agent_events
from .floors import Floor

THREADS = 8
WIDE = 32
WIDE_EACH = 20


def _threads(n_threads: int, work: Callable[[int], None]) -> float:
    barrier = threading.Barrier(n_threads + 1)
    errors: list[BaseException] = []

    def body(k: int) -> None:
        barrier.wait()
        try:
            work(k)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed


def run(ctx: Context) -> SuiteResult:
    import eventlog

    from ._common import median

    res = SuiteResult("append_threads", __doc__.strip().splitlines()[0])
    rounds = ctx.n(8, 2)
    per_thread = ctx.n(50, 20)
    single_n = ctx.n(100, 30)
    events = agent_events(max(per_thread, single_n))

    log = eventlog.open(ctx.path("log"), durability="sync")
    floor = Floor(ctx.path("floor"), sync=True)
    singles: list[float] = []
    multis: list[float] = []
    ratios: list[float] = []
    wides: list[float] = []
    wide_ratios: list[float] = []
    try:
        for e in events:
            log.append("warm", e)
        for r in range(rounds):
            t0 = time.perf_counter()
            for e in events[:single_n]:
                log.append(f"single-{r}", e)
            single_rate = single_n / (time.perf_counter() - t0)

            def log_work(k: int, r: int = r) -> None:
                run_id = f"thread-{r}-{k}"
                append = log.append
                for e in events[:per_thread]:
                    append(run_id, e)

            multi_rate = THREADS * per_thread / _threads(THREADS, log_work)
            for k in range(THREADS):
                assert log.head(f"thread-{r}-{k}") == per_thread
            singles.append(single_rate)
            multis.append(multi_rate)
            ratios.append(multi_rate / single_rate)

            def wide_work(k: int, r: int = r) -> None:
                run_id = f"wide-{r}-{k}"
                append = log.append
                for e in events[:WIDE_EACH]:
                    append(run_id, e)

            wide_rate = WIDE * WIDE_EACH / _threads(WIDE, wide_work)
            wides.append(wide_rate)
            wide_ratios.append(wide_rate / single_rate)

        def floor_work(k: int) -> None:
            for i, e in enumerate(events[:per_thread], 1):
                floor.append_one(k + 1, i, e)

        floor_rate = THREADS * per_thread / _threads(THREADS, floor_work)
    finally:
        log.close()
        floor.close()

    single_rate, log_rate, speedup = median(singles), median(multis), median(ratios)
    res.row("eventlog", "append, sync, 1 thread", single_rate, "appends/s", note=f"median of {rounds} rounds")
    res.row(
        "eventlog",
        f"append, sync, {THREADS} threads",
        log_rate,
        "appends/s",
        note=f"{speedup:.1f}x 1 thread (median of per-round ratios)",
    )
    res.row(
        "eventlog",
        f"append, sync, {WIDE} threads",
        median(wides),
        "appends/s",
        note=f"{median(wide_ratios):.1f}x 1 thread (median of per-round ratios)",
    )
    res.row("raw LMDB", f"put + commit, sync, {THREADS} threads", floor_rate, "appends/s", note="one round")
    res.metrics.update(
        threads=THREADS,
        rounds=rounds,
        events_per_thread=per_thread,
        single_thread_appends_per_s=single_rate,
        threads_appends_per_s=log_rate,
        speedup=speedup,
        single_rates=singles,
        threads_rates=multis,
        raw_lmdb_threads_appends_per_s=floor_rate,
        wide_threads=WIDE,
        wide_appends_per_s=median(wides),
        wide_speedup=median(wide_ratios),
    )
    res.target(f"{THREADS} threads ÷ 1 thread (group commit)", speedup, 10.0, ">=", "x")
    return res
