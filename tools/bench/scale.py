"""Scale: a big log (`EVENTLOG_BENCH_SCALE_EVENTS`, 200,000 events unless set) against a 100,000-event one.

The big log holds several runs of workflow-mix events (graph steps of about 600 bytes that
overwrite a bounded set of keys): runs of min(1,000,000, events ÷ 4) events each, written
in turn a slice of 10,000 events at a time, each slice in batches of 100 with
`checkpoints.save` after every batch (a checkpoint every 100 events), durability none so
that the disk's fsync rate does not enter. A 100,000-event log is built the same way. It
measures:

- the append rate over the big log's first and last window of min(1,000,000, events ÷ 5)
  events (the time in `append_many` alone; with the checkpoints too, beside; the build's
  timings are kept per min(100,000, events ÷ 20) events, in the metrics);
- `state_at` at seeded random (run, offset) of each log, the two logs' queries
  interleaved: median and p99 (ms), and page faults per query (minor: a page of the page
  cache mapped into the process; major: a page read from the disk); then the same queries
  again, when the pages of the memory map they touch are mapped already;
- in a fresh process, peak private memory (`RssAnon`, sampled every 2 ms) and time of
  `iter_runs()` and of `runs()` over a log of `EVENTLOG_BENCH_SCALE_RUNS` runs (100,000
  unless set) of one event each;
- in a fresh process each, peak private memory and time of `verify(run)`, `export` of the
  run to a file (`eventlog.transfer.export_runs`), `prune(run, before=head)` and
  `delete_run(run)` on a run of the big log (each on a run of its own but verify and
  export) and, beside, on a run of the 100,000-event log: memory that does not grow with
  the run is bounded.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from typing import Any

from ._common import Context, SuiteResult, chunks, measure_child, median, percentile, workflow_events

EVERY = 100  # events between checkpoints
SLICE = 10_000  # events of one run written before the next run's turn
MIB = 1024 * 1024

_OPEN = """
import eventlog
log = eventlog.open(sys.argv[1])
run = sys.argv[2]
head = log.head(run)
"""
_OPS = {
    "verify": "report = log.verify(run)\nresult = {'ok': report.ok, 'events': report.events}",
    "export": (
        "from eventlog.transfer import export_runs\n"
        "summary = export_runs(log, sys.argv[3], [run])\n"
        "result = {'entries': summary.entries, 'checkpoints': summary.checkpoints}"
    ),
    "prune": "result = {'base': log.prune(run, before=head)}",
    "delete_run": "log.delete_run(run)\nresult = {'head_after': log.head(run)}",
}
_RUNS_OPEN = """
import eventlog
log = eventlog.open(sys.argv[1])
"""
_RUNS = {
    "iter_runs": "result = {'runs': sum(1 for _ in log.iter_runs())}",
    "runs": "result = {'runs': len(log.runs())}",
}


def build(path: str, n: int) -> dict[str, Any]:
    """Write the log (see the module's docstring); returns its runs and the build's timings per step
    (min(100,000, events ÷ 20) events, a whole number of batches)."""
    import eventlog

    step = step_events(n)
    run_events = max(EVERY, min(1_000_000, n // 4))
    runs = [f"run-{i}" for i in range(-(-n // run_events))]
    sizes = [min(run_events, n - i * run_events) for i in range(len(runs))]
    steps: list[dict[str, float]] = []
    done = 0
    append_s = checkpoint_s = 0.0
    log = eventlog.open(path, durability="none")
    try:
        for s in range(0, run_events, SLICE):
            for i, run_id in enumerate(runs):
                k = min(SLICE, sizes[i] - s)
                if k <= 0:
                    continue
                for batch in chunks(workflow_events(k, seed=i * 1_000_003 + s), EVERY):
                    t0 = time.perf_counter()
                    log.append_many(run_id, batch)
                    t1 = time.perf_counter()
                    log.checkpoints.save(run_id)
                    t2 = time.perf_counter()
                    append_s += t1 - t0
                    checkpoint_s += t2 - t1
                    done += len(batch)
                    if done % step == 0 or done == n:
                        steps.append({"events": done, "append_s": append_s, "checkpoint_s": checkpoint_s})
                        append_s = checkpoint_s = 0.0
        heads = {r: log.head(r) for r in runs}
    finally:
        log.close()
    assert list(heads.values()) == sizes, (heads, sizes)
    return {"runs": runs, "heads": heads, "steps": steps, "run_events": run_events}


def step_events(n: int) -> int:
    return max(EVERY, min(100_000, n // 20) // EVERY * EVERY)


def window(steps: list[dict[str, float]], first: bool, events: int) -> dict[str, float]:
    """Rates over the first (or last) `events` events of the build, from its per-step timings."""
    sizes = [int(st["events"]) - (int(steps[i - 1]["events"]) if i else 0) for i, st in enumerate(steps)]
    order = range(len(steps)) if first else range(len(steps) - 1, -1, -1)
    counted, append_s, checkpoint_s = 0, 0.0, 0.0
    for i in order:
        counted += sizes[i]
        append_s += steps[i]["append_s"]
        checkpoint_s += steps[i]["checkpoint_s"]
        if counted >= events:
            break
    return {
        "events": counted,
        "append_events_per_s": counted / append_s,
        "with_checkpoints_events_per_s": counted / (append_s + checkpoint_s),
    }


def state_at_latencies(
    big: str, small: str, big_heads: dict[str, int], small_heads: dict[str, int], queries: int
) -> tuple[dict[str, list[float]], dict[str, dict[str, float]]]:
    """Milliseconds of `state_at` at seeded random (run, offset) of each log, the two logs' queries
    interleaved; then the same queries again on each log ("big again", "small again"), when the
    pages they touch are mapped into the process already. Also the page faults per query
    (minor: a page of the page cache mapped; major: a page read from the disk)."""
    import resource

    import eventlog

    rng = random.Random(42)
    logs = {"big": eventlog.open(big, durability="none"), "small": eventlog.open(small, durability="none")}
    heads = {"big": list(big_heads.items()), "small": list(small_heads.items())}
    asked: dict[str, list[tuple[str, int]]] = {"big": [], "small": []}
    for name in asked:
        for _ in range(queries + 20):  # the first 20 of each warm the decoders
            run_id, head = rng.choice(heads[name])
            asked[name].append((run_id, rng.randint(0, head)))
    out: dict[str, list[float]] = {"big": [], "small": [], "big again": [], "small again": []}
    faults = {key: {"minor": 0.0, "major": 0.0} for key in out}
    try:
        for again in ("", " again"):
            for q in range(queries + 20):
                for name in ("big", "small") if q % 2 == 0 else ("small", "big"):
                    run_id, k = asked[name][q]
                    r0 = resource.getrusage(resource.RUSAGE_SELF)
                    t0 = time.perf_counter()
                    logs[name].state_at(run_id, k)
                    t1 = time.perf_counter()
                    r1 = resource.getrusage(resource.RUSAGE_SELF)
                    if q >= 20:
                        out[name + again].append((t1 - t0) * 1000.0)
                        faults[name + again]["minor"] += (r1.ru_minflt - r0.ru_minflt) / queries
                        faults[name + again]["major"] += (r1.ru_majflt - r0.ru_majflt) / queries
    finally:
        for log in logs.values():
            log.close()
    return out, faults


def run(ctx: Context) -> SuiteResult:
    import eventlog

    res = SuiteResult("scale", __doc__.strip().splitlines()[0])
    n = ctx.size("EVENTLOG_BENCH_SCALE_EVENTS", 200_000, 20_000)
    n_small = ctx.n(100_000, 5_000)
    n_runs = ctx.size("EVENTLOG_BENCH_SCALE_RUNS", 100_000, 2_000)
    queries = ctx.n(2_000, 200)
    big_path, small_path, runs_path = ctx.path("big"), ctx.path("small"), ctx.path("runs")

    t0 = time.perf_counter()
    big = build(big_path, n)
    build_s = time.perf_counter() - t0
    small = build(small_path, n_small)
    w = min(1_000_000, max(step_events(n), n // 5))
    first, last = window(big["steps"], True, w), window(big["steps"], False, w)
    ratio = last["append_events_per_s"] / first["append_events_per_s"]
    ratio_cp = last["with_checkpoints_events_per_s"] / first["with_checkpoints_events_per_s"]
    res.row("eventlog", f"build: {n:,} events in {len(big['runs'])} runs", n / build_s, "events/s",
            note=f"append x{EVERY} + checkpoint, none; {build_s:.0f} s")  # fmt: skip
    res.row("eventlog", f"append rate, first {first['events']:,} events", first["append_events_per_s"], "events/s")
    res.row("eventlog", f"append rate, last {last['events']:,} events", last["append_events_per_s"], "events/s",
            note=f"{ratio:.2f}x the first")  # fmt: skip
    res.row("eventlog", "  with the checkpoints, first", first["with_checkpoints_events_per_s"], "events/s")
    res.row("eventlog", "  with the checkpoints, last", last["with_checkpoints_events_per_s"], "events/s",
            note=f"{ratio_cp:.2f}x the first")  # fmt: skip

    lat, faults = state_at_latencies(big_path, small_path, big["heads"], small["heads"], queries)
    sa = {name: {"median_ms": median(v), "p99_ms": percentile(v, 99), **faults[name]} for name, v in lat.items()}
    for name, label in (("small", f"{n_small:,}-event log"), ("big", f"{n:,}-event log")):
        first, again = sa[name], sa[f"{name} again"]
        res.row("eventlog", f"state_at median, {label}", first["median_ms"], "ms", note=f"{queries:,} queries")
        res.row("eventlog", f"state_at p99, {label}", first["p99_ms"], "ms",
                note=f"page faults per query: {first['minor']:.1f} minor, {first['major']:.2f} major")  # fmt: skip
        res.row("eventlog", f"  the same queries again, {label}: median", again["median_ms"], "ms",
                note=f"p99 {again['p99_ms']:.3f} ms; page faults per query: {again['minor']:.1f} minor, "
                f"{again['major']:.2f} major")  # fmt: skip
    res.metrics.update(
        events=n,
        runs=big["runs"],
        run_events=big["run_events"],
        build_seconds=build_s,
        build_steps=big["steps"],
        first_window=first,
        last_window=last,
        last_over_first=ratio,
        last_over_first_with_checkpoints=ratio_cp,
        state_at={"queries": queries, "small_events": n_small, **sa},
    )

    with eventlog.open(runs_path, durability="none") as log:
        event = workflow_events(1)[0]
        for i in range(n_runs):
            log.append(f"r{i:07d}", event)
    runs_mem: dict[str, Any] = {}
    for name, body in _RUNS.items():
        child = measure_child(_RUNS_OPEN, body, [runs_path])
        assert child["result"]["runs"] == n_runs, child["result"]
        grown = (child["peak_anon_bytes"] - child["before"]["RssAnon"]) / MIB
        runs_mem[name] = {
            "seconds": child["seconds"],
            "peak_anon_mib": child["peak_anon_bytes"] / MIB,
            "grown_mib": grown,
        }
        res.row("eventlog", f"{name}() over {n_runs:,} runs: private memory grown", grown, "MiB",
                note=f"peak {child['peak_anon_bytes'] / MIB:.1f} MiB; {child['seconds']:.2f} s")  # fmt: skip
    shutil.rmtree(runs_path, ignore_errors=True)
    res.metrics["runs_listing"] = {"runs": n_runs, **runs_mem}

    ops: dict[str, dict[str, Any]] = {}
    export_file = ctx.path("export.jsonl")
    for label, path, built in (("small", small_path, small), ("big", big_path, big)):
        targets = {"verify": 0, "export": 0, "prune": 1, "delete_run": 2}
        for op, body in _OPS.items():
            run_id = built["runs"][targets[op] % len(built["runs"])]
            child = measure_child(_OPEN, body, [path, run_id, export_file])
            if os.path.exists(export_file):
                os.remove(export_file)
            ops.setdefault(op, {})[label] = {
                "run_events": built["heads"][run_id],
                "seconds": child["seconds"],
                "peak_anon_mib": child["peak_anon_bytes"] / MIB,
                "before_mib": child["before"]["RssAnon"] / MIB,
                "grown_mib": (child["peak_anon_bytes"] - child["before"]["RssAnon"]) / MIB,
                "result": child["result"],
            }
        if label == "small":
            shutil.rmtree(small_path, ignore_errors=True)
    for op, by in ops.items():
        b, s = by["big"], by["small"]
        res.row("eventlog", f"{op}, run of {b['run_events']:,}: peak private", b["peak_anon_mib"], "MiB",
                note=f"grew {b['grown_mib']:.1f} MiB in {b['seconds']:.1f} s; run of {s['run_events']:,}: "
                f"grew {s['grown_mib']:.1f} MiB in {s['seconds']:.2f} s")  # fmt: skip
    res.metrics["operations"] = ops

    res.target(f"append rate, last ÷ first {w:,} events (within 1.25x)", ratio, 0.8, ">=", "x")
    res.target(f"state_at median, {n:,} ÷ {n_small:,} events", sa["big"]["median_ms"] / sa["small"]["median_ms"],
               1.25, "<=", "x")  # fmt: skip
    res.target(
        f"state_at p99, {n:,} ÷ {n_small:,} events", sa["big"]["p99_ms"] / sa["small"]["p99_ms"], 1.25, "<=", "x"
    )
    warm = sa["big again"]["median_ms"] / sa["small again"]["median_ms"]
    res.target(f"state_at median after warm-up, {n:,} ÷ {n_small:,} events", warm, 1.5, "<=", "x")
    res.target("state_at median, big log", sa["big"]["median_ms"], 1.0, "<=", "ms")
    res.target("state_at p99, big log", sa["big"]["p99_ms"], 5.0, "<=", "ms")
    res.target(f"iter_runs() over {n_runs:,} runs: private memory grown", runs_mem["iter_runs"]["grown_mib"], 4.0,
               "<=", "MiB")  # fmt: skip
    for op, by in ops.items():
        res.target(f"{op}, run of {by['big']['run_events']:,}: private memory grown", by["big"]["grown_mib"], 32.0,
                   "<=", "MiB")  # fmt: skip
    return res
