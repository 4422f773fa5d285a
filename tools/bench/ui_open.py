"""`eventlog ui`: how long a 100,000-event run takes to open, over HTTP and in a real browser.

Two runs of 100,000 events in one LMDB log, written in batches of 100 with a checkpoint
every 1,000 events: the workflow mix (graph steps; bounded values) and the agent mix (LLM
calls, tool results and user messages; the state keeps every message, about 50,000 at the
head). The UI is served by uvicorn on a free port, read-only, as `eventlog ui` serves it.
Each figure is the median of repeated requests: the run's page (its header and the last page
of 200 events), the state after the head and after random offsets (what the inspector
fetches next), the diff of two offsets 1,000 apart, and the runs list. When /usr/bin/chromium
and Playwright are there, opening the run is also timed in the browser: from navigation to
its events shown (the target: under a second), and to the inspector showing the state after
the head (the page's second request, as long as `state_at` takes).
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


def _browser_open_ms(url: str) -> tuple[float, float] | None:
    """Median (ms to the events shown, ms to the state shown) of opening `url` in chromium."""
    import os

    if not os.path.exists("/usr/bin/chromium"):
        return None
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return None
    import tempfile

    shown, state = [], []
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
            if i:  # the first visit warms the browser's cache of the script and stylesheet
                shown.append((t1 - t0) * 1000.0)
                state.append((t2 - t0) * 1000.0)
        context.close()
    return median(shown), median(state)


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
    runs = {"workflow": workflow_events(n), "agent": agent_events(n)}
    with eventlog.open(path, durability="none") as log:
        for run_id, events in runs.items():
            for i, batch in enumerate(chunks(events, EVERY), 1):
                log.append_many(run_id, batch)
                if i * EVERY % CHECKPOINT_EVERY == 0:
                    log.checkpoints.save(run_id)
    rng = random.Random(7)
    with eventlog.open(path, readonly=True) as log, _serve(log) as base:
        for run_id in runs:
            run = f"id={urllib.parse.quote(run_id)}"
            page = _median_ms(lambda _, run=run: f"{base}/run?{run}")
            head = _median_ms(lambda _, run=run: f"{base}/run/state?{run}&at={n}")
            anywhere = _median_ms(lambda _, run=run: f"{base}/run/state?{run}&at={rng.randint(0, n)}")
            starts = [rng.randint(0, n - 1000) for _ in range(REPEATS + 1)]
            diff = _median_ms(lambda i, run=run, a=starts: f"{base}/run/diff?{run}&a={a[i]}&b={a[i] + 1000}")
            note = f"{n:,} events, {n // CHECKPOINT_EVERY} checkpoints"
            res.row("eventlog ui", f"{run_id}: run page (last 200 events)", page, "ms", note=note)
            res.row("eventlog ui", f"{run_id}: state after the head", head, "ms")
            res.row("eventlog ui", f"{run_id}: state at a random offset", anywhere, "ms")
            res.row("eventlog ui", f"{run_id}: diff of offsets 1,000 apart", diff, "ms")
            res.metrics[f"{run_id}_page_ms"] = page
            res.metrics[f"{run_id}_state_head_ms"] = head
            res.metrics[f"{run_id}_state_random_ms"] = anywhere
            res.metrics[f"{run_id}_diff_ms"] = diff
            res.target(f"{run_id}: a {n:,}-event run's page is served", page, 1000.0, "<=", "ms")
            browser = _browser_open_ms(f"{base}/run?{run}")
            if browser is not None:
                shown, state = browser
                res.row("eventlog ui", f"{run_id}: open in chromium, to the events shown", shown, "ms")
                res.row("eventlog ui", f"{run_id}: open in chromium, to the state shown", state, "ms")
                res.target(f"{run_id}: a {n:,}-event run opens in chromium", shown, 1000.0, "<=", "ms")
                res.metrics[f"{run_id}_browser_events_shown_ms"] = shown
                res.metrics[f"{run_id}_browser_state_shown_ms"] = state
        runs_list = _median_ms(lambda _: f"{base}/")
        res.row("eventlog ui", "runs list", runs_list, "ms")
    res.metrics.update(events=n, runs_list_ms=runs_list)
    return res
