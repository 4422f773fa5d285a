"""Batched append: 1,000 events per `append_many` transaction, sync durability.

Events are the agent mix (LLM calls with tool calls, tool results, user messages, graph
steps; about 600 bytes each encoded). eventlog (msgspec, zstd with the log's trained
dictionary, framing, checksum, feed, run record, fsync at every commit) beside floor (a):
msgspec encode + zstd compress + LMDB put of each event, one transaction per batch, fsync
at commit. A first pass of 5,000 events warms both stores (eventlog trains its first zstd
dictionaries on the way: docs/format.md, "Frames"); then the two alternate in rounds of 5
batches, and the medians of the per-round rates and of the per-round ratios are reported,
so that a burst of disk traffic from elsewhere hits both sides alike.
"""

from __future__ import annotations

import time

from ._common import Context, SuiteResult, agent_events, chunks, disk_bytes, median
from .floors import Floor

BATCH = 1000
ROUND = 5  # batches per round


def run(ctx: Context) -> SuiteResult:
    import eventlog

    res = SuiteResult("append_batch", __doc__.strip().splitlines()[0])
    rounds = ctx.n(20, 3)
    events = agent_events(BATCH * ROUND)
    batches = list(chunks(events, BATCH))

    floor = Floor(ctx.path("floor"), sync=True)
    log = eventlog.open(ctx.path("log"), durability="sync")
    floor_rates: list[float] = []
    log_rates: list[float] = []
    ratios: list[float] = []
    try:
        for i, b in enumerate(batches):  # warm-up pass (not timed)
            floor.append_batch(10_000, 1 + i * BATCH, b)
            log.append_many("warm", b)
        for r in range(rounds):
            t0 = time.perf_counter()
            for i, b in enumerate(batches):
                floor.append_batch(r + 1, 1 + i * BATCH, b)
            fr = len(events) / (time.perf_counter() - t0)
            t0 = time.perf_counter()
            for b in batches:
                log.append_many(f"batch-{r}", b)
            lr = len(events) / (time.perf_counter() - t0)
            floor_rates.append(fr)
            log_rates.append(lr)
            ratios.append(lr / fr)
    finally:
        log.close()
        floor.close()

    n_total = len(events) * (rounds + 1)
    floor_rate, log_rate, ratio = median(floor_rates), median(log_rates), median(ratios)
    log_bytes = disk_bytes(ctx.path("log")) / n_total
    floor_bytes = disk_bytes(ctx.path("floor")) / n_total
    res.row("floor (a)", f"append_many x{BATCH}, sync", floor_rate, "events/s", note=f"median of {rounds} rounds")
    res.row(
        "eventlog",
        f"append_many x{BATCH}, sync",
        log_rate,
        "events/s",
        ratio=ratio,
        note="ratio: median of per-round ratios",
    )
    res.row("floor (a)", "disk per event", floor_bytes, "bytes", note="zstd without dictionary")
    res.row(
        "eventlog",
        "disk per event",
        log_bytes,
        "bytes",
        ratio=log_bytes / floor_bytes,
        note="incl. feed, ids, trained dictionary",
    )
    res.metrics.update(
        events_per_round=len(events),
        rounds=rounds,
        batch=BATCH,
        floor_events_per_s=floor_rate,
        eventlog_events_per_s=log_rate,
        ratio_to_floor=ratio,
        floor_rates=floor_rates,
        eventlog_rates=log_rates,
        floor_disk_bytes_per_event=floor_bytes,
        eventlog_disk_bytes_per_event=log_bytes,
    )
    res.target("batched append rate (sync, zstd)", log_rate, 100_000, ">=", "events/s")
    res.target("batched append ÷ floor (a)", ratio, 0.8, ">=")
    return res
