"""`eventlog ui`: the runs list of a log of 10,000 runs, searched, filtered and sorted by the server.

10,000 runs (EVENTLOG_BENCH_UI_RUNS) of three events each in one LMDB log: conversations,
graph runs and failed graph runs, a fork of every hundredth. The UI is served by uvicorn on
a free port, read-only, as `eventlog ui` serves it. Timed: the first runs page (every run
summarized: its first and last events read), the page again (each run's `run_info` only,
the summaries kept), a search by id as the page asks while one types, a status filter, and
the order by events; beside them the library calls they wrap (`log.runs()` and `run_info`
of every run; a summary of every run). Each figure is a median of 7 requests. The server's
resident memory is read before and after (the benchmark's own process: the server runs in
one of its threads).
"""

from __future__ import annotations

import time
from typing import Any

from ._common import Context, SuiteResult, median
from .ui_open import _ms, _serve

REPEATS = 7


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    import os

    return pages * os.sysconf("SC_PAGE_SIZE") / 1e6


def _write(log: Any, n: int) -> None:
    from eventlog.events import RunCompleted, RunFailed, RunStarted, StepCompleted, UserMessage

    for i in range(n):
        run_id = f"run-{i:06d}"
        if i % 3 == 0:
            log.append_many(
                run_id, [UserMessage(content=f"hello {i}"), UserMessage(content="again"), UserMessage(content="bye")]
            )
        elif i % 3 == 1:
            log.append_many(run_id, [RunStarted(graph="g"), StepCompleted(node="a", superstep=1), RunCompleted()])
        else:
            log.append_many(run_id, [RunStarted(graph="g"), StepCompleted(node="a", superstep=1), RunFailed(error="x")])
        if i % 100 == 1:
            log.fork(run_id, at=2, new_run_id=f"{run_id}-fork")


def run(ctx: Context) -> SuiteResult:
    import eventlog
    from eventlog.ui import model
    from eventlog.views import load_views

    res = SuiteResult("ui_runs", " ".join(__doc__.strip().splitlines()[0].split()))
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        res.skipped = f"the ui extra is not installed: {exc}"
        return res
    n = ctx.size("EVENTLOG_BENCH_UI_RUNS", 10_000, 500)
    path = ctx.path("log")
    with eventlog.open(path, durability="none") as log:
        _write(log, n)
    load_views()  # the integrations' views, as the UI loads them when it starts
    with eventlog.open(path, readonly=True) as log:
        total = len(log.runs())
        t0 = time.perf_counter()
        infos = [log.run_info(r) for r in log.runs()]
        infos_ms = (time.perf_counter() - t0) * 1000.0
        t0 = time.perf_counter()
        for info in infos:
            model.summary_of(log, info)
        summaries_ms = (time.perf_counter() - t0) * 1000.0
        before = _rss_mb()
        with _serve(log) as base:
            first = _ms(f"{base}/")
            again = median([_ms(f"{base}/") for _ in range(REPEATS)])
            search = median([_ms(f"{base}/?q=run-00{i}4&fragment=1") for i in range(REPEATS)])
            failed = median([_ms(f"{base}/?status=failed&fragment=1") for _ in range(REPEATS)])
            by_events = median([_ms(f"{base}/?sort=events&since=24h&fragment=1") for _ in range(REPEATS)])
            after = _rss_mb()
    note = f"{total:,} runs, {model.runs_page_max} a page"
    res.row("library", "log.runs() and run_info of every run", infos_ms, "ms", note=note)
    res.row("library", "a summary of every run (first and last events)", summaries_ms, "ms")
    res.row("eventlog ui", "runs page, first (every run summarized)", first, "ms")
    res.row("eventlog ui", "runs page again (summaries kept)", again, "ms")
    res.row("eventlog ui", "search by id, as one types", search, "ms")
    res.row("eventlog ui", "status filter (failed)", failed, "ms")
    res.row("eventlog ui", "last day, most events first", by_events, "ms")
    res.row("eventlog ui", "server memory growth over these requests", after - before, "MB")
    res.target(f"the runs page of {total:,} runs, after the first", again, 300.0, "<=", "ms")
    res.target(f"a search of {total:,} run ids", search, 300.0, "<=", "ms")
    res.metrics.update(
        runs=total,
        run_infos_ms=infos_ms,
        summaries_ms=summaries_ms,
        first_ms=first,
        again_ms=again,
        search_ms=search,
        failed_ms=failed,
        by_events_ms=by_events,
        memory_growth_mb=after - before,
    )
    return res
