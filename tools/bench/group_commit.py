"""Group commit: 1, 8 and 32 threads sharing one log, each appending single events to a run of its own.

Every `append` returns once its event is committed, so with durability="sync" each thread
waits for an fsync; throughput above the one-thread rate comes from group commit (the
appends that queue while one transaction commits go together into the next, one fsync for
all). For each durability, `sync` then `none`, one log is warmed past its first dictionary,
then the thread counts alternate in rounds (their order reversed every other round); in a
round each thread count appends `EVENTLOG_BENCH_GROUP_APPENDS` agent-mix events in all
(960 unless set; 4 times that with `none`), split evenly between its threads. Reported per
thread count: appends/s, transactions/s and events per transaction (committed transactions
counted by the log's writer before and after), and the ratio to the one-thread rate of the
same round. Medians over the rounds. The bound rows divide the rate of n threads with
`none` by the one-thread rate with `sync`: with transactions as large (the events per
transaction rows), n threads with `sync` do the same work plus the fsyncs, so they cannot
append faster than n threads with `none`; this is the most their ratio to one thread can
be with the CPU an append costs now.
"""

from __future__ import annotations

from typing import Any

from ._common import Context, SuiteResult, agent_events, in_threads, median

THREADS = (1, 8, 32)


def _measure(ctx: Context, durability: str, total: int, rounds: int) -> dict[int, dict[str, list[float]]]:
    import eventlog

    path = ctx.path(f"log-{durability}")
    events = agent_events(total)
    log: Any = eventlog.open(path, durability="none")
    for e in agent_events(300, seed=9):
        log.append("warm", e)
    log.close()  # waits for the first dictionary, trained in the background
    log = eventlog.open(path, durability=durability)
    out: dict[int, dict[str, list[float]]] = {n: {"rate": [], "tps": [], "per_txn": [], "ratio": []} for n in THREADS}
    try:
        for r in range(rounds):
            rates: dict[int, float] = {}
            for n in THREADS if r % 2 == 0 else THREADS[::-1]:
                each = total // n
                mine = events[:each]

                def work(k: int, n: int = n, r: int = r, mine: list[Any] = mine) -> None:
                    append = log.append
                    run_id = f"t{n}-r{r}-{k}"
                    for e in mine:
                        append(run_id, e)

                before = log.engine.commit.commits  # read only: no public counter of transactions yet
                elapsed = in_threads(n, work)
                commits = log.engine.commit.commits - before
                for k in range(n):
                    assert log.head(f"t{n}-r{r}-{k}") == each
                appends = n * each
                rates[n] = appends / elapsed
                out[n]["rate"].append(rates[n])
                out[n]["tps"].append(commits / elapsed)
                out[n]["per_txn"].append(appends / commits)
            for n in THREADS:
                out[n]["ratio"].append(rates[n] / rates[1])
    finally:
        log.close()
    return out


def run(ctx: Context) -> SuiteResult:
    res = SuiteResult("group_commit", __doc__.strip().splitlines()[0])
    total = ctx.size("EVENTLOG_BENCH_GROUP_APPENDS", 960, 192)
    rounds = ctx.n(7, 2)
    for durability in ("sync", "none"):
        n_appends = total if durability == "sync" else 4 * total
        out = _measure(ctx, durability, n_appends, rounds)
        summary: dict[str, Any] = {}
        for n in THREADS:
            rate, tps, per_txn, ratio = (median(out[n][k]) for k in ("rate", "tps", "per_txn", "ratio"))
            label = f"{n} thread{'s' if n > 1 else ''}"
            note = f"median of {rounds} rounds" if n == 1 else f"{ratio:.2f}x 1 thread (median of per-round ratios)"
            res.row("eventlog", f"append, {durability}, {label}", rate, "appends/s", note=note)
            res.row("eventlog", f"  transactions, {durability}, {label}", tps, "commits/s")
            res.row("eventlog", f"  events per transaction, {durability}, {label}", per_txn, "events")
            summary[str(n)] = {
                "appends_per_s": rate,
                "transactions_per_s": tps,
                "events_per_transaction": per_txn,
                "ratio_to_one_thread": ratio,
                "rates": out[n]["rate"],
            }
        res.metrics[durability] = dict(summary, appends_per_round=n_appends, rounds=rounds)
    sync, none = res.metrics["sync"], res.metrics["none"]
    for n in THREADS[1:]:
        bound = none[str(n)]["appends_per_s"] / sync["1"]["appends_per_s"]
        res.row(
            "bound",
            f"ratio to 1 thread, sync, {n} threads, at most",
            bound,
            "x",
            note=f"appends/s with none, {n} threads ÷ with sync, 1 thread",
        )
        res.metrics[f"bound_ratio_sync_{n}"] = bound
    res.target("8 threads ÷ 1 thread, sync (group commit)", sync["8"]["ratio_to_one_thread"], 5.0, ">=", "x")
    res.target("32 threads ÷ 1 thread, sync (group commit)", sync["32"]["ratio_to_one_thread"], 10.0, ">=", "x")
    return res
