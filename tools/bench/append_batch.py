"""Batched append: 1,000 events per `append_many` transaction, sync durability.

Events are the agent mix (LLM calls with tool calls, tool results, user messages, graph
steps; about 600 bytes each encoded). eventlog (msgspec, zstd, framing, checksum, feed,
run record, fsync at every commit) beside floor (a): msgspec encode + zstd compress +
LMDB put of each event in one transaction per batch, fsync at commit. Each side writes
the same events three times into fresh runs of one store, interleaved; the best pass counts.
"""

from __future__ import annotations

import time

from ._common import Context, SuiteResult, agent_events, chunks, disk_bytes
from .floors import Floor

BATCH = 1000


def run(ctx: Context) -> SuiteResult:
    import eventlog

    res = SuiteResult("append_batch", __doc__.strip().splitlines()[0])
    n = ctx.n(50_000, 4_000)
    passes = ctx.n(3, 2)
    events = agent_events(n)

    floor = Floor(ctx.path("floor"), sync=True)
    log = eventlog.open(ctx.path("log"), durability="sync")
    floor_best = log_best = float("inf")
    try:
        for p in range(passes):
            t0 = time.perf_counter()
            for i, batch in enumerate(chunks(events, BATCH)):
                floor.append_batch(p + 1, 1 + i * BATCH, batch)
            floor_best = min(floor_best, time.perf_counter() - t0)

            run_id = f"batch-{p}"
            t0 = time.perf_counter()
            for batch in chunks(events, BATCH):
                log.append_many(run_id, batch)
            log_best = min(log_best, time.perf_counter() - t0)
            assert log.head(run_id) == n
    finally:
        log.close()
        floor.close()

    floor_rate = n / floor_best
    log_rate = n / log_best
    log_bytes = disk_bytes(ctx.path("log")) / (n * passes)
    floor_bytes = disk_bytes(ctx.path("floor")) / (n * passes)
    res.row("floor (a)", f"append_many x{BATCH}, sync", floor_rate, "events/s")
    res.row("eventlog", f"append_many x{BATCH}, sync", log_rate, "events/s", ratio=log_rate / floor_rate)
    res.row("floor (a)", "disk per event", floor_bytes, "bytes")
    res.row("eventlog", "disk per event", log_bytes, "bytes", ratio=log_bytes / floor_bytes)
    res.metrics.update(
        events=n,
        batch=BATCH,
        passes=passes,
        floor_events_per_s=floor_rate,
        eventlog_events_per_s=log_rate,
        ratio_to_floor=log_rate / floor_rate,
        floor_disk_bytes_per_event=floor_bytes,
        eventlog_disk_bytes_per_event=log_bytes,
    )
    res.target("batched append rate (sync, zstd)", log_rate, 100_000, ">=", "events/s")
    res.target("batched append ÷ floor (a)", log_rate / floor_rate, 0.8, ">=")
    return res
