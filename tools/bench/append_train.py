"""Batched append across the dictionary-training thresholds: a fresh load of 100,000 events in batches of 1,000, sync.

A new log is loaded with `append_many` of 1,000 agent-mix events per transaction
(durability sync), `EVENTLOG_BENCH_TRAIN_EVENTS` events in all (100,000 unless set): the
load crosses the event counts at which the log trains a zstd dictionary from its own data
(the first, then each time the count grows eightfold; docs/format.md, "Frames"), so what
training costs the appends shows here, where the steady-state `append_batch` suite does
not see it. Beside
floor (a) doing the same load into a fresh LMDB directory: msgspec encode + zstd compress
(no dictionary) + LMDB put, one transaction and one fsync per batch. Each round loads a
fresh floor and a fresh log (who goes first alternates); the load's rate is events ÷ the
time until the last `append_many` returns. Training runs on a thread of its own after the
commit that crosses a threshold, so the time `close()` then waits for it is reported
beside, as the rate of load + close. Medians of the per-round rates and ratios.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from ._common import Context, SuiteResult, agent_events, chunks, median
from .floors import Floor

BATCH = 1000


def _floor(path: str, batches: list[list[Any]]) -> float:
    floor = Floor(path, sync=True)
    try:
        t0 = time.perf_counter()
        for i, b in enumerate(batches):
            floor.append_batch(1, 1 + i * BATCH, b)
        return time.perf_counter() - t0
    finally:
        floor.close()
        shutil.rmtree(path, ignore_errors=True)


def _log(path: str, batches: list[list[Any]]) -> tuple[float, float]:
    import eventlog

    log = eventlog.open(path, durability="sync")
    try:
        t0 = time.perf_counter()
        for b in batches:
            log.append_many("load", b)
        load = time.perf_counter() - t0
        assert log.head("load") == sum(len(b) for b in batches)
    finally:
        log.close()  # waits for a dictionary still being trained
    closed = time.perf_counter() - t0
    shutil.rmtree(path, ignore_errors=True)
    return load, closed


def run(ctx: Context) -> SuiteResult:
    res = SuiteResult("append_train", __doc__.strip().splitlines()[0])
    n = ctx.size("EVENTLOG_BENCH_TRAIN_EVENTS", 100_000, 20_000)
    rounds = ctx.n(5, 2)
    batches = list(chunks(agent_events(n), BATCH))
    floor_rates: list[float] = []
    log_rates: list[float] = []
    closed_rates: list[float] = []
    ratios: list[float] = []
    closed_ratios: list[float] = []
    for r in range(rounds):
        if r % 2 == 0:
            floor_s = _floor(ctx.path(f"floor-{r}"), batches)
            load_s, closed_s = _log(ctx.path(f"log-{r}"), batches)
        else:
            load_s, closed_s = _log(ctx.path(f"log-{r}"), batches)
            floor_s = _floor(ctx.path(f"floor-{r}"), batches)
        floor_rates.append(n / floor_s)
        log_rates.append(n / load_s)
        closed_rates.append(n / closed_s)
        ratios.append(floor_s / load_s)
        closed_ratios.append(floor_s / closed_s)
    floor_rate, log_rate, closed_rate = median(floor_rates), median(log_rates), median(closed_rates)
    ratio, closed_ratio = median(ratios), median(closed_ratios)
    res.row(
        "floor (a)", f"fresh load of {n:,}, x{BATCH}, sync", floor_rate, "events/s", note=f"median of {rounds} rounds"
    )
    res.row(
        "eventlog",
        f"fresh load of {n:,}, x{BATCH}, sync",
        log_rate,
        "events/s",
        ratio=ratio,
        note="until the last append returns",
    )
    res.row(
        "eventlog",
        "  the same, load + close",
        closed_rate,
        "events/s",
        ratio=closed_ratio,
        note="close waits for training",
    )
    res.metrics.update(
        events=n,
        batch=BATCH,
        rounds=rounds,
        floor_events_per_s=floor_rate,
        eventlog_events_per_s=log_rate,
        eventlog_with_close_events_per_s=closed_rate,
        ratio_to_floor=ratio,
        ratio_with_close=closed_ratio,
        floor_rates=floor_rates,
        eventlog_rates=log_rates,
    )
    res.target(f"batched append ÷ floor (a), fresh load of {n:,} events", ratio, 0.9, ">=")
    return res
