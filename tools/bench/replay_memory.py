"""Peak memory of replaying 1,000,000 events, measured in a fresh subprocess.

A run of 1,000,000 workflow-mix events (about 600 bytes each; node updates overwrite a
bounded set of keys, so the folded state stays small) is written with durability="none".
A new Python process then opens the log and folds the whole run with `state_at(run, head)`.
It reports `ru_maxrss` (peak resident set: the interpreter, eventlog, and every LMDB page
the replay touched through the memory map, which the kernel counts as resident file
pages) and the peak of private anonymous memory (`RssAnon`, sampled every 2 ms), which
is the memory the replay itself holds. The target is judged on the private peak.
"""

from __future__ import annotations

import time

from ._common import Context, SuiteResult, chunks, disk_bytes, measure_child, workflow_events

_SETUP = """
import eventlog
log = eventlog.open(sys.argv[1])
head = log.head(sys.argv[2])
"""
_BODY = """
state = log.state_at(sys.argv[2], head)
result = {"events": head, "values_keys": len(state.values)}
"""


def run(ctx: Context) -> SuiteResult:
    import eventlog

    res = SuiteResult("replay_memory", __doc__.strip().splitlines()[0])
    n = ctx.n(1_000_000, 20_000)
    path = ctx.path("log")
    log = eventlog.open(path, durability="none")
    t0 = time.perf_counter()
    step = 100_000
    for start in range(0, n, step):  # generate in slices: the writer's memory stays small too
        for batch in chunks(workflow_events(min(step, n - start), seed=start), 10_000):
            log.append_many("big", batch)
    build_s = time.perf_counter() - t0
    assert log.head("big") == n
    log.close()

    child = measure_child(_SETUP, _BODY, [path, "big"], timeout=900)
    child["events"] = child["result"]["events"]
    mb = 1 / (1024 * 1024)
    size = disk_bytes(path)
    res.row("eventlog", f"replay {n:,} events: peak private (RssAnon)", child["peak_anon_bytes"] * mb, "MiB")
    res.row("eventlog", "  RssAnon before replay (interpreter + imports)", child["before"]["RssAnon"] * mb, "MiB")
    res.row("eventlog", "  ru_maxrss (incl. mapped LMDB pages)", child["maxrss_bytes"] * mb, "MiB")
    res.row("eventlog", "  replay rate", child["events"] / child["seconds"], "events/s")
    res.row("eventlog", "  log size on disk", size * mb, "MiB", note=f"built at {n / build_s:,.0f} events/s")
    res.metrics.update(
        events=n,
        peak_anon_bytes=child["peak_anon_bytes"],
        maxrss_bytes=child["maxrss_bytes"],
        before=child["before"],
        after=child["after"],
        replay_seconds=child["seconds"],
        disk_bytes=size,
        build_seconds=build_s,
    )
    res.target(f"replay {n:,} events: peak private memory", child["peak_anon_bytes"] * mb, 200, "<=", "MiB")
    return res
