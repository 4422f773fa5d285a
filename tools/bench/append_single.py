"""Single durable appends: one event per `append`, one commit and one fsync each.

eventlog with durability="sync" beside raw LMDB doing one put and one commit with sync
(floor (a) with a batch of one: encode, compress, put, commit, fsync). Both write the
same agent-mix events, alternating in rounds of 100 appends; the medians of the per-round
rates and of the per-round ratios are reported. The rate is bounded by the disk's fsync
latency (and moves with other traffic on the disk), so the ratio is what matters.
"""

from __future__ import annotations

import time

from ._common import Context, SuiteResult, agent_events, median
from .floors import Floor

ROUND = 100


def run(ctx: Context) -> SuiteResult:
    import eventlog

    res = SuiteResult("append_single", __doc__.strip().splitlines()[0])
    rounds = ctx.n(15, 3)
    m = ctx.n(ROUND, 30)
    events = agent_events(m)
    floor = Floor(ctx.path("floor"), sync=True)
    log = eventlog.open(ctx.path("log"), durability="sync")
    floor_rates: list[float] = []
    log_rates: list[float] = []
    ratios: list[float] = []
    try:
        for i, e in enumerate(events, 1):  # warm-up: grow both files a little
            log.append("warm", e)
            floor.append_one(10_000, i, e)
        for r in range(rounds):
            t0 = time.perf_counter()
            for i, e in enumerate(events, 1):
                floor.append_one(r + 1, i, e)
            fr = m / (time.perf_counter() - t0)
            append = log.append
            run_id = f"single-{r}"
            t0 = time.perf_counter()
            for e in events:
                append(run_id, e)
            lr = m / (time.perf_counter() - t0)
            floor_rates.append(fr)
            log_rates.append(lr)
            ratios.append(lr / fr)
    finally:
        log.close()
        floor.close()
    floor_rate, log_rate, ratio = median(floor_rates), median(log_rates), median(ratios)
    res.row("raw LMDB", "put + commit, sync", floor_rate, "appends/s", note=f"median of {rounds} rounds of {m}")
    res.row("eventlog", "append, sync", log_rate, "appends/s", ratio=ratio, note="ratio: median of per-round ratios")
    res.row("eventlog", "append latency, sync", 1000.0 / log_rate, "ms")
    res.metrics.update(
        rounds=rounds,
        appends_per_round=m,
        floor_appends_per_s=floor_rate,
        eventlog_appends_per_s=log_rate,
        ratio_to_floor=ratio,
        floor_rates=floor_rates,
        eventlog_rates=log_rates,
    )
    res.target("single durable append ÷ LMDB one-fsync commit", ratio, 0.8, ">=")
    return res
