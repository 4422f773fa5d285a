"""Single-append CPU: one event per `append`, durability none, beside floor (c).

No fsync on either side, so what is measured is the CPU an append costs. eventlog's
`append` with durability="none" (check, encode, compress, frame, checksum, id, feed, run
record, one LMDB commit) beside floor (c): msgspec encode + zstd compress + one LMDB put
and one commit per event, LMDB opened with sync=False. For reference, floor (c) with
eventlog's key space: the same, plus three small puts in three more tables per event (a
feed position, an event id, the run's record), as eventlog's append writes them. All write
the same agent-mix events (about 600 bytes encoded) to stores warmed past eventlog's first
dictionary; they alternate in rounds (`EVENTLOG_BENCH_CPU_APPENDS` appends each, 2,000
unless set), and the medians of the per-round rates and of the per-round ratios are
reported. Then cProfile
counts the Python function calls per append (total calls ÷ appends, eventlog and the floor)
over one more round each, and the functions that take the most time of eventlog's append
(own time, by cProfile) are listed in the metrics.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import time
from collections.abc import Callable
from typing import Any

from ._common import Context, SuiteResult, agent_events, median
from .floors import Floor

WARM = 3_000  # past the log's first dictionaries (docs/format.md, "Frames")
TOP = 12  # functions listed from the profile


def _short(func: tuple[str, int, str]) -> str:
    """A profiled function as file:line(name), without the checkout's or site-packages' directory."""
    file, line, name = func
    if file == "~" and line == 0:  # a built-in
        return name
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return f"{file.replace(root + os.sep, '').split('/site-packages/')[-1]}:{line}({name})"


def profile(fn: Callable[[], Any], calls: int) -> tuple[float, list[dict[str, Any]]]:
    """Python function calls per call of the measured unit, and the functions with the most own
    time: (calls per unit, [{function, share of own time, calls per unit}])."""
    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    stats = pstats.Stats(prof)
    total_time = sum(v[2] for v in stats.stats.values()) or 1.0  # type: ignore[attr-defined]
    top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:TOP]  # type: ignore[attr-defined]
    rows = [
        {
            "function": _short(func),
            "own_time_share": round(v[2] / total_time, 4),
            "calls_per_unit": round(v[1] / calls, 2),
        }
        for func, v in top
    ]
    rest = [v for func, v in stats.stats.items() if func not in dict(top)]  # type: ignore[attr-defined]
    rows.append(
        {
            "function": f"the other {len(rest)} functions",
            "own_time_share": round(sum(v[2] for v in rest) / total_time, 4),
            "calls_per_unit": round(sum(v[1] for v in rest) / calls, 2),
        }
    )
    return stats.total_calls / calls, rows  # type: ignore[attr-defined]


def run(ctx: Context) -> SuiteResult:
    import eventlog

    res = SuiteResult("append_cpu", __doc__.strip().splitlines()[0])
    m = ctx.size("EVENTLOG_BENCH_CPU_APPENDS", 2_000, 300)
    rounds = ctx.n(15, 3)
    events = agent_events(max(m, WARM))[:m]
    floor = Floor(ctx.path("floor"), sync=False)
    indexed = Floor(ctx.path("indexed"), sync=False)
    log = eventlog.open(ctx.path("log"), durability="none")
    floor_rates: list[float] = []
    log_rates: list[float] = []
    indexed_rates: list[float] = []
    ratios: list[float] = []
    indexed_ratios: list[float] = []
    try:
        warm = agent_events(WARM, seed=9)
        for i, e in enumerate(warm, 1):  # the dictionaries, the maps and both files warm up
            log.append("warm", e)
            floor.append_one(10_000, i, e)
            indexed.append_one_indexed(10_000, i, i, e)
        log.close()  # waits for the dictionary trained in the background
        log = eventlog.open(ctx.path("log"), durability="none")

        def floor_round(r: int) -> None:
            append_one = floor.append_one
            for i, e in enumerate(events, 1):
                append_one(r + 1, i, e)

        def indexed_round(r: int) -> None:
            append_one_indexed = indexed.append_one_indexed
            for i, e in enumerate(events, 1):
                append_one_indexed(r + 1, i, WARM + r * m + i, e)

        def log_round(r: int) -> None:
            append = log.append
            run_id = f"cpu-{r}"
            for e in events:
                append(run_id, e)

        for r in range(rounds):
            sides = [("floor", floor_round), ("indexed", indexed_round), ("log", log_round)]
            rates = {}
            for name, fn in sides[r % 3 :] + sides[: r % 3]:  # who goes first turns round too
                t0 = time.perf_counter()
                fn(r)
                rates[name] = m / (time.perf_counter() - t0)
            floor_rates.append(rates["floor"])
            log_rates.append(rates["log"])
            indexed_rates.append(rates["indexed"])
            ratios.append(rates["log"] / rates["floor"])
            indexed_ratios.append(rates["indexed"] / rates["floor"])
        log_calls, log_top = profile(lambda: log_round(rounds), m)
        floor_calls, _ = profile(lambda: floor_round(rounds), m)
    finally:
        log.close()
        floor.close()
        indexed.close()

    indexed_rate, indexed_ratio = median(indexed_rates), median(indexed_ratios)
    floor_rate, log_rate, ratio = median(floor_rates), median(log_rates), median(ratios)
    res.row(
        "floor (c)", "encode+zstd+put+commit, none", floor_rate, "appends/s", note=f"median of {rounds} rounds of {m}"
    )
    res.row(
        "floor (c)",
        "the same + feed, id and run puts (4 tables)",
        indexed_rate,
        "appends/s",
        ratio=indexed_ratio,
        note="eventlog's key space, for reference",
    )
    res.row("eventlog", "append, none", log_rate, "appends/s", ratio=ratio, note="ratio: median of per-round ratios")
    res.row("floor (c)", "CPU per append", 1e6 / floor_rate, "µs")
    res.row("eventlog", "CPU per append", 1e6 / log_rate, "µs")
    res.row("floor (c)", "Python function calls per append", floor_calls, "calls", note="cProfile, one round")
    res.row("eventlog", "Python function calls per append", log_calls, "calls", note="cProfile, one round")
    res.metrics.update(
        rounds=rounds,
        appends_per_round=m,
        floor_appends_per_s=floor_rate,
        eventlog_appends_per_s=log_rate,
        ratio_to_floor=ratio,
        floor_rates=floor_rates,
        eventlog_rates=log_rates,
        four_tables_appends_per_s=indexed_rate,
        four_tables_ratio_to_floor=indexed_ratio,
        eventlog_calls_per_append=log_calls,
        floor_calls_per_append=floor_calls,
        profile=log_top,
    )
    res.target("single append, none ÷ floor (c)", ratio, 0.7, ">=")
    return res
