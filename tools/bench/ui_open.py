"""`eventlog ui`: how long a 100,000-event run takes to open, over HTTP and in a real browser.

Two runs of 100,000 events in one LMDB log, written in batches of 100 with a checkpoint
every 1,000 events: the workflow mix (graph steps; bounded values) and the agent mix (LLM
calls, tool results and user messages; the state keeps every message, about 50,000 at the
head). The UI is served read-only by `eventlog ui --log LOG --port 0` in a process of its own,
as a user starts it. Each figure is the median of repeated requests: the run's page (its header
and the last page of 200 events), the state after the head and after random offsets (what the
inspector fetches next), the diff of two offsets 1,000 apart, and the runs list; beside each,
the library call the route wraps, timed the same way in this process. When /usr/bin/chromium
and Playwright are there, opening the run is also timed in the browser: to its first paint
(the target: 300 ms), to its events shown, and to the inspector showing the state after the
head. Then the server's memory from /proc: resident, its heap (anonymous), what is file-backed
and of that the pages of the LMDB map it holds mapped, after browsing (the target: 150 MB), 2 s
later and at its peak.
"""

from __future__ import annotations

import random
import socket
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ._common import Context, SuiteResult, agent_events, chunks, median, workflow_events

EVERY = 100
CHECKPOINT_EVERY = 1000
REPEATS = 7


@contextmanager
def _serve(log: Any) -> Iterator[str]:
    import uvicorn

    from eventlog.ui import create_app

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    app = create_app(log)
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        app.stop_streams()
        server.should_exit = True
        thread.join(10)
        sock.close()


def _ms(url: str) -> float:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=120) as response:
        response.read()
        assert response.status == 200, url
    return (time.perf_counter() - t0) * 1000.0


def _median_ms(make_url: Callable[[int], str], repeats: int = REPEATS) -> float:
    _ms(make_url(0))  # warm: first decoders, page cache
    return median([_ms(make_url(i)) for i in range(repeats)])


def _rss(pid: int) -> tuple[float, float, float, float]:
    """(resident, peak resident, anonymous resident, file-backed resident) memory of process
    `pid` in MB, from /proc: the anonymous part is the server's own heap, the file-backed part
    mostly the pages of the LMDB map it has read (the kernel's cache, dropped under pressure)."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            fields[name] = value.strip()

    def mb(name: str) -> float:
        return int(fields.get(name, "0 kB").split()[0]) / 1024

    return mb("VmRSS"), mb("VmHWM"), mb("RssAnon"), mb("RssFile") + mb("RssShmem")


def _map_mb(pid: int, directory: str) -> float:
    """Resident MB of process `pid`'s mappings of files in `directory` (the LMDB map), from /proc/PID/smaps."""
    import os

    prefix, total, inside = os.path.realpath(directory) + "/", 0, False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if parts and "-" in parts[0] and not parts[0].endswith(":"):
                inside = len(parts) > 5 and parts[5].startswith(prefix)
            elif inside and parts[0] == "Rss:":
                total += int(parts[1])
    return total / 1024


@contextmanager
def _serve_process(path: str) -> Iterator[tuple[str, int]]:
    """`eventlog ui --log PATH --port 0`, read-only, as a user starts it: (its URL, its pid)."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "eventlog", "ui", "--log", path, "--port", "0"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        if " at http" not in line:
            raise RuntimeError(f"eventlog ui did not start: {line}{proc.stderr.read()}")
        yield line.split(" at ", 1)[1].strip().rstrip("/"), proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def _browser_open_ms(url: str) -> tuple[float, float, float] | None:
    """Medians (ms to the first paint, to the events shown, to the state shown) of opening `url` in chromium."""
    import os

    if not os.path.exists("/usr/bin/chromium"):
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    import tempfile

    paint, shown, state = [], [], []
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            tempfile.mkdtemp(prefix="eventlog-bench-chromium-"),
            executable_path="/usr/bin/chromium",
            headless=True,
            args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
        )
        page = context.new_page()
        for i in range(REPEATS + 1):
            t0 = time.perf_counter()
            page.goto(url, wait_until="domcontentloaded")
            page.wait_for_selector("#panel [data-offset]", timeout=60_000)
            t1 = time.perf_counter()
            page.wait_for_selector('#inspector .insp[data-kind="state"]', timeout=60_000)
            t2 = time.perf_counter()
            fcp = page.evaluate(
                "() => (performance.getEntriesByName('first-contentful-paint')[0] || {startTime: NaN}).startTime"
            )
            if i:  # the first visit warms the browser's cache of the script and stylesheet
                paint.append(float(fcp))
                shown.append((t1 - t0) * 1000.0)
                state.append((t2 - t0) * 1000.0)
        context.close()
    return median(paint), median(shown), median(state)


def _library(log: Any, run_id: str, n: int, rng: random.Random) -> dict[str, float]:
    """The library calls the routes wrap, timed the same way (medians of REPEATS after one warm call)."""
    from eventlog.diff import diff_states

    def timed(fn: Callable[[int], Any]) -> float:
        fn(0)
        out = []
        for i in range(REPEATS):
            t0 = time.perf_counter()
            fn(i)
            out.append((time.perf_counter() - t0) * 1000.0)
        return median(out)

    starts = [rng.randint(0, n - 1000) for _ in range(REPEATS + 1)]
    return {
        "page": timed(lambda _: list(log.read(run_id, after=log.run_info(run_id).head - 200))),
        "head": timed(lambda _: log.state_at(run_id, n)),
        "random": timed(lambda _: log.state_at(run_id, rng.randint(0, n))),
        "diff": timed(lambda i: diff_states(log.state_at(run_id, starts[i]), log.state_at(run_id, starts[i] + 1000))),
    }


def run(ctx: Context) -> SuiteResult:
    import eventlog

    res = SuiteResult("ui_open", " ".join(__doc__.strip().splitlines()[0].split()))
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        res.skipped = f"the ui extra is not installed: {exc}"
        return res
    n = ctx.n(100_000, 5_000)
    path = ctx.path("log")
    with eventlog.open(path, durability="none") as log:
        for run_id, make in (("workflow", workflow_events), ("agent", agent_events)):
            for i, batch in enumerate(chunks(make(n), EVERY), 1):
                log.append_many(run_id, batch)
                if i * EVERY % CHECKPOINT_EVERY == 0:
                    log.checkpoints.save(run_id)
    rng = random.Random(7)
    with _serve_process(path) as (base, pid), eventlog.open(path, readonly=True) as log:
        _ms(f"{base}/")
        started_mb, _, started_anon_mb, _ = _rss(pid)
        res.row("eventlog ui", "server memory, started (runs list served once)", started_mb, "MB")
        for run_id in ("workflow", "agent"):
            run = f"id={urllib.parse.quote(run_id)}"
            page = _median_ms(lambda _, run=run: f"{base}/run?{run}")
            head = _median_ms(lambda _, run=run: f"{base}/run/state?{run}&at={n}")
            anywhere = _median_ms(lambda _, run=run: f"{base}/run/state?{run}&at={rng.randint(0, n)}")
            starts = [rng.randint(0, n - 1000) for _ in range(REPEATS + 1)]
            diff = _median_ms(lambda i, run=run, a=starts: f"{base}/run/diff?{run}&a={a[i]}&b={a[i] + 1000}")
            lib = _library(log, run_id, n, rng)
            note = f"{n:,} events, {n // CHECKPOINT_EVERY} checkpoints"
            for what, ui_ms, lib_ms, call in (
                ("run page (last 200 events)", page, lib["page"], "run_info + read of the last 200 events"),
                ("state after the head", head, lib["head"], "state_at(head)"),
                ("state at a random offset", anywhere, lib["random"], "state_at(random offset)"),
                ("diff of offsets 1,000 apart", diff, lib["diff"], "diff_states of two state_at"),
            ):
                res.row("eventlog ui", f"{run_id}: {what}", ui_ms, "ms", ratio=ui_ms / lib_ms, note=note)
                res.row("library", f"{run_id}: {call}", lib_ms, "ms")
                note = ""
            res.metrics[f"{run_id}_page_ms"] = page
            res.metrics[f"{run_id}_state_head_ms"] = head
            res.metrics[f"{run_id}_state_random_ms"] = anywhere
            res.metrics[f"{run_id}_diff_ms"] = diff
            res.metrics.update({f"{run_id}_library_{k}_ms": v for k, v in lib.items()})
            res.target(f"{run_id}: a {n:,}-event run's page is served", page, 1000.0, "<=", "ms")
            res.target(f"{run_id}: the state after the head is served", head, 500.0, "<=", "ms")
            res.target(f"{run_id}: the state at a random offset is served", anywhere, 500.0, "<=", "ms")
            browser = _browser_open_ms(f"{base}/run?{run}")
            if browser is not None:
                paint, shown, state = browser
                res.row("eventlog ui", f"{run_id}: open in chromium, to the first paint", paint, "ms")
                res.row("eventlog ui", f"{run_id}: open in chromium, to the events shown", shown, "ms")
                res.row("eventlog ui", f"{run_id}: open in chromium, to the state after the head shown", state, "ms")
                res.target(f"{run_id}: first paint of a {n:,}-event run in chromium", paint, 300.0, "<=", "ms")
                res.target(f"{run_id}: a {n:,}-event run's events shown in chromium", shown, 1000.0, "<=", "ms")
                res.metrics[f"{run_id}_browser_first_paint_ms"] = paint
                res.metrics[f"{run_id}_browser_events_shown_ms"] = shown
                res.metrics[f"{run_id}_browser_state_shown_ms"] = state
        runs_list = _median_ms(lambda _: f"{base}/")
        res.row("eventlog ui", "runs list", runs_list, "ms")
        browsed_mb, peak_mb, anon_mb, file_mb = _rss(pid)
        map_mb = _map_mb(pid, path)
        time.sleep(2.0)
        idle_mb, _, idle_anon_mb, _ = _rss(pid)
        idle_map_mb = _map_mb(pid, path)
    res.row("eventlog ui", "server memory after browsing both runs", browsed_mb, "MB")
    res.row("eventlog ui", "  of which its heap (anonymous)", anon_mb, "MB", note=f"started: {started_anon_mb:.0f} MB")
    res.row("eventlog ui", "  of which file-backed (libraries, the LMDB map)", file_mb, "MB")
    res.row("eventlog ui", "  of which the LMDB map's pages", map_mb, "MB")
    res.row("eventlog ui", "server memory 2 s later (idle)", idle_mb, "MB", note=f"heap {idle_anon_mb:.0f} MB")
    res.row("eventlog ui", "  of which the LMDB map's pages (idle)", idle_map_mb, "MB")
    res.row("eventlog ui", "server memory, peak while browsing", peak_mb, "MB")
    res.target(f"server memory after browsing {n:,}-event runs", browsed_mb, 150.0, "<=", "MB")
    res.target(f"server heap after browsing {n:,}-event runs", anon_mb, 150.0, "<=", "MB")
    res.metrics.update(
        events=n,
        runs_list_ms=runs_list,
        server_started_mb=started_mb,
        server_browsed_mb=browsed_mb,
        server_idle_mb=idle_mb,
        server_peak_mb=peak_mb,
        server_browsed_anon_mb=anon_mb,
        server_browsed_file_mb=file_mb,
        server_browsed_map_mb=map_mb,
        server_idle_map_mb=idle_map_mb,
        server_idle_anon_mb=idle_anon_mb,
        server_started_anon_mb=started_anon_mb,
    )
    return res
