"""Async appends: 1 task against 64 tasks appending at once on one event loop, durability sync.

`eventlog.aio.AsyncEventLog` over one LMDB log (warmed past its first dictionary). Each
task appends single agent-mix events to a run of its own with `await log.append(...)`,
which returns once the event is committed and fsynced; the appends that the tasks of one
turn of the loop make go to the log's commit thread together, one transaction and one
fsync for all of them. The two task counts alternate in rounds; in a round each appends
`EVENTLOG_BENCH_ASYNC_APPENDS` events in all (1,280 unless set), split evenly between its
tasks. Reported: appends/s, transactions/s and events per transaction (committed
transactions counted by the log's writer before and after), and the ratio of 64 tasks to
1 task in the same round. Medians over the rounds.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ._common import Context, SuiteResult, agent_events, median

TASKS = (1, 64)


async def _rounds(path: str, events: list[Any], total: int, rounds: int) -> dict[int, dict[str, list[float]]]:
    import eventlog
    import eventlog.aio

    log = eventlog.aio.AsyncEventLog(eventlog.open(path, durability="sync"))
    out: dict[int, dict[str, list[float]]] = {n: {"rate": [], "tps": [], "per_txn": [], "ratio": []} for n in TASKS}
    writer = log.sync.engine.commit  # read only: its count of transactions
    try:
        for r in range(rounds):
            rates: dict[int, float] = {}
            for n in TASKS if r % 2 == 0 else TASKS[::-1]:
                each = total // n

                async def task(k: int, n: int = n, r: int = r, each: int = each) -> None:
                    run_id = f"t{n}-r{r}-{k}"
                    for e in events[:each]:
                        await log.append(run_id, e)

                before = writer.commits
                t0 = time.perf_counter()
                await asyncio.gather(*(task(k) for k in range(n)))
                elapsed = time.perf_counter() - t0
                commits = writer.commits - before
                heads = await asyncio.gather(*(log.head(f"t{n}-r{r}-{k}") for k in range(n)))
                assert heads == [each] * n, heads
                rates[n] = n * each / elapsed
                out[n]["rate"].append(rates[n])
                out[n]["tps"].append(commits / elapsed)
                out[n]["per_txn"].append(n * each / commits)
            for n in TASKS:
                out[n]["ratio"].append(rates[n] / rates[TASKS[0]])
    finally:
        await log.close()
    return out


def run(ctx: Context) -> SuiteResult:
    import eventlog

    res = SuiteResult("append_async", __doc__.strip().splitlines()[0])
    total = ctx.size("EVENTLOG_BENCH_ASYNC_APPENDS", 1_280, 256)
    rounds = ctx.n(7, 2)
    path = ctx.path("log")
    with eventlog.open(path, durability="none") as log:  # closing waits for the first dictionary
        for e in agent_events(300, seed=9):
            log.append("warm", e)
    out = asyncio.run(_rounds(path, agent_events(total), total, rounds))
    summary: dict[str, Any] = {}
    for n in TASKS:
        rate, tps, per_txn, ratio = (median(out[n][k]) for k in ("rate", "tps", "per_txn", "ratio"))
        label = f"{n} task{'s' if n > 1 else ''}"
        note = f"median of {rounds} rounds" if n == 1 else f"{ratio:.2f}x 1 task (median of per-round ratios)"
        res.row("eventlog.aio", f"await append, sync, {label}", rate, "appends/s", note=note)
        res.row("eventlog.aio", f"  transactions, sync, {label}", tps, "commits/s")
        res.row("eventlog.aio", f"  events per transaction, sync, {label}", per_txn, "events")
        summary[str(n)] = {
            "appends_per_s": rate,
            "transactions_per_s": tps,
            "events_per_transaction": per_txn,
            "ratio_to_one_task": ratio,
            "rates": out[n]["rate"],
        }
    res.metrics.update(summary, appends_per_round=total, rounds=rounds)
    res.target("64 tasks ÷ 1 task, sync (async group commit)", summary["64"]["ratio_to_one_task"], 10.0, ">=", "x")
    return res
