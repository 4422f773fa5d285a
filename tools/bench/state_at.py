"""Time travel: `state_at` at random offsets of a 100,000-event run with a checkpoint every 100 events.

The run is the workflow mix (graph steps of about 600 bytes that overwrite a bounded set of
keys), written in batches of 100 with `checkpoints.save` after each batch. Then
`state_at(run, k)` for uniformly random k in 0..head (seeded): each call loads the nearest
checkpoint at or below k and folds the (at most 99) events after it. Median and p99 latency.
"""

from __future__ import annotations

import random
import time

from ._common import Context, SuiteResult, chunks, disk_bytes, median, percentile, workflow_events

EVERY = 100


def run(ctx: Context) -> SuiteResult:
    import eventlog

    res = SuiteResult("state_at", __doc__.strip().splitlines()[0])
    n = ctx.n(100_000, 5_000)
    queries = ctx.n(1_000, 100)
    events = workflow_events(n)
    path = ctx.path("log")
    log = eventlog.open(path, durability="none")
    t0 = time.perf_counter()
    for batch in chunks(events, EVERY):
        log.append_many("tt", batch)
        log.checkpoints.save("tt")
    build_s = time.perf_counter() - t0
    log.close()

    log = eventlog.open(path, durability="sync")
    rng = random.Random(42)
    offsets = [rng.randint(0, n) for _ in range(queries)]
    try:
        for k in offsets[:10]:  # warm the map and the decoders
            log.state_at("tt", k)
        times = []
        for k in offsets:
            t0 = time.perf_counter()
            log.state_at("tt", k)
            times.append((time.perf_counter() - t0) * 1000.0)
        checkpoints = len(log.checkpoints.list("tt"))
    finally:
        log.close()
    med, p99, worst = median(times), percentile(times, 99), max(times)
    size = disk_bytes(path)
    res.row("eventlog", "state_at median", med, "ms")
    res.row("eventlog", "state_at p99", p99, "ms")
    res.row("eventlog", "state_at max", worst, "ms")
    res.row("eventlog", f"build: append x{EVERY} + checkpoint", n / build_s, "events/s", note="durability none")
    res.row("eventlog", "disk, events + checkpoints", size / 1e6, "MB", note=f"{checkpoints} checkpoints")
    res.metrics.update(
        events=n,
        queries=queries,
        checkpoints=checkpoints,
        median_ms=med,
        p99_ms=p99,
        max_ms=worst,
        disk_bytes=size,
        build_events_per_s=n / build_s,
    )
    res.target("state_at median", med, 1.0, "<=", "ms")
    res.target("state_at p99", p99, 5.0, "<=", "ms")
    return res
