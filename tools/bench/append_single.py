"""Single durable appends: one event per `append`, one commit and one fsync each.

eventlog with durability="sync" beside raw LMDB doing one put and one commit with sync
(floor (a) with a batch of one: encode, compress, put, commit, fsync). Both write the
same agent-mix events, interleaved in passes; the best pass counts. The rate is bounded by
the disk's fsync latency, so the ratio is what matters.
"""

from __future__ import annotations

import time

from ._common import Context, SuiteResult, agent_events
from .floors import Floor


def run(ctx: Context) -> SuiteResult:
    import eventlog

    res = SuiteResult("append_single", __doc__.strip().splitlines()[0])
    n = ctx.n(1_000, 100)
    passes = 3
    events = agent_events(n)
    floor = Floor(ctx.path("floor"), sync=True)
    log = eventlog.open(ctx.path("log"), durability="sync")
    floor_best = log_best = float("inf")
    try:
        log.append("warm", events[0])
        floor.append_one(99, 1, events[0])
        for p in range(passes):
            t0 = time.perf_counter()
            for i, e in enumerate(events, 1):
                floor.append_one(p + 1, i, e)
            floor_best = min(floor_best, time.perf_counter() - t0)
            run_id = f"single-{p}"
            append = log.append
            t0 = time.perf_counter()
            for e in events:
                append(run_id, e)
            log_best = min(log_best, time.perf_counter() - t0)
    finally:
        log.close()
        floor.close()
    floor_rate = n / floor_best
    log_rate = n / log_best
    res.row("raw LMDB", "put + commit, sync", floor_rate, "appends/s")
    res.row("eventlog", "append, sync", log_rate, "appends/s", ratio=log_rate / floor_rate)
    res.row("eventlog", "append latency, sync", 1000.0 / log_rate, "ms")
    res.metrics.update(
        events=n,
        floor_appends_per_s=floor_rate,
        eventlog_appends_per_s=log_rate,
        ratio_to_floor=log_rate / floor_rate,
    )
    res.target("single durable append ÷ LMDB one-fsync commit", log_rate / floor_rate, 0.8, ">=")
    return res
