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

import json
import os
import subprocess
import sys
import time

from ._common import Context, SuiteResult, chunks, disk_bytes, workflow_events

_CHILD = r"""
import json, resource, sys, threading, time

def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[k] = int(v.split()[0]) * 1024
    return out

peak = {"RssAnon": 0}
done = threading.Event()

def sample():
    while not done.is_set():
        a = status().get("RssAnon", 0)
        if a > peak["RssAnon"]:
            peak["RssAnon"] = a
        time.sleep(0.002)

import eventlog
path, run_id = sys.argv[1], sys.argv[2]
log = eventlog.open(path)
head = log.head(run_id)
before = status()
th = threading.Thread(target=sample, daemon=True)
th.start()
t0 = time.perf_counter()
state = log.state_at(run_id, head)
elapsed = time.perf_counter() - t0
done.set()
th.join()
after = status()
peak["RssAnon"] = max(peak["RssAnon"], after.get("RssAnon", 0))
log.close()
print(json.dumps({
    "events": head,
    "seconds": elapsed,
    "maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "before": before,
    "after": after,
    "peak_anon_bytes": peak["RssAnon"],
    "values_keys": len(state.values),
}))
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

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, path, "big"],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=900,
    )
    if out.returncode != 0:
        raise RuntimeError(f"replay subprocess failed: {out.stderr[-2000:]}")
    child = json.loads(out.stdout.strip().splitlines()[-1])
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
