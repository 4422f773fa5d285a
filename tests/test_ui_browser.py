"""`eventlog ui` in a real browser: Debian's chromium driven by Playwright, over a log the demo wrote.

The runs list shows every run, and filters by framework (a LangGraph thread, a WayFlow
conversation); clicking through a run shows the state at offset k equal to
`state_at(run, k)`; the diff of two offsets equals `eventlog diff --json`; an event another
process appends shows within 2 seconds; a run id holding `<script>` is text; the fork button
exists only with `allow_writes`. The tests skip without chromium, except in CI (`CI` set),
where they fail. They also take the screenshots of docs/guides/ui.md: set
EVENTLOG_UI_SCREENSHOTS=1 to write them into docs/img/.
"""

from __future__ import annotations

import concurrent.futures
import io
import json
import os
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

from rich.console import Console
from ui_support import (
    serving,
    shoot,
    wait_for_run_page,
    write_langgraph_thread,
    write_wayflow_conversation,
)

import eventlog
from eventlog.demo import run_demo
from eventlog.events import StepCompleted, UserMessage
from eventlog.ui.render import visible
from eventlog.views import view_for_run

ROOT = Path(__file__).resolve().parent.parent
HOSTILE_ID = "<script>window.__pwned=1</script><img src=x onerror=window.__pwned=2>\x1b[31m"

DIALOGS_FAIL = True  # any dialog fails a test of this module (conftest `page`)


def make_demo(path: Path) -> str:
    run_demo(str(path), console=Console(file=io.StringIO()))
    return str(path)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> str:
    return make_demo(tmp_path_factory.mktemp("ui") / "demo")


@pytest.fixture(scope="module")
def demo_log(demo: str) -> Iterator[eventlog.EventLog]:
    with eventlog.open(demo, readonly=True) as log:
        yield log


@pytest.fixture(scope="module")
def demo_url(demo_log: eventlog.EventLog) -> Iterator[str]:
    with serving(demo_log, name="demo.lmdb") as url:
        yield url


def run_url(base: str, run_id: str, **params: Any) -> str:
    return f"{base}/run?" + urllib.parse.urlencode({"id": run_id, **params})


def state_shown(page: Any, at: int) -> Any:
    """The state the inspector shows for offset `at` (through its JSON view)."""
    page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{at}"]')
    page.click('#inspector [data-show="json"]')
    return msgspec.json.decode(page.inner_text("#state-json"))


def test_the_runs_list_shows_every_run_and_filters(page: Any, demo_url: str, demo_log: eventlog.EventLog) -> None:
    page.goto(demo_url + "/")
    shown = page.eval_on_selector_all("tr.run-row", "rows => rows.map(r => r.dataset.run)")
    assert sorted(shown) == sorted(demo_log.runs()) and len(shown) == 5
    for run_id in demo_log.runs():
        row = page.locator(f'tr.run-row[data-run="{run_id}"]')
        assert row.locator("td.run-id a").inner_text() == run_id
        assert row.locator("td.num").first.inner_text() == str(demo_log.head(run_id))
    page.fill("#run-search", "rewind")  # the server searches; test_ui_find.py has more
    page.wait_for_function(
        "() => [...document.querySelectorAll('tr.run-row')].map(r => r.dataset.run).join() === 'chat-demo-rewind'"
    )
    page.fill("#run-search", "")
    page.wait_for_function("() => document.querySelectorAll('tr.run-row').length === 5")
    page.click('tr.run-row[data-run="workflow-demo-replay"] td.run-id a')
    page.wait_for_selector("#inspector .insp")
    assert page.inner_text("h1.run-title") == "workflow-demo-replay"


@pytest.mark.parametrize(
    ("run_id", "reading", "offsets"),
    [
        ("workflow-demo", "timeline", [0, 1, 3, 6, 7, 11]),
        ("workflow-retry", "steps", [3, 6, 7, 10, 14]),
        ("chat-demo-rewind", "conversation", [2, 13, 20, 24, 32, 33, 37]),
    ],
)
def test_clicking_an_event_shows_the_state_at_its_offset(
    page: Any, demo_url: str, demo_log: eventlog.EventLog, run_id: str, reading: str, offsets: list[int]
) -> None:
    page.goto(run_url(demo_url, run_id, view=reading))
    head = demo_log.head(run_id)
    assert msgspec.convert(state_shown(page, head), eventlog.AgentState) == demo_log.state_at(run_id, head)
    for k in offsets:
        page.locator(f'#panel [data-offset="{k}"]').first.click(position={"x": 4, "y": 4})  # not on a link inside
        state = state_shown(page, k)
        assert msgspec.convert(state, eventlog.AgentState) == demo_log.state_at(run_id, k), k
        assert f"at={k}" in page.url
    page.keyboard.press("ArrowUp")
    previous = max(
        o
        for o in page.eval_on_selector_all("#panel [data-offset]", "els => els.map(e => +e.dataset.offset)")
        if o < offsets[-1]
    )
    assert msgspec.convert(state_shown(page, previous), eventlog.AgentState) == demo_log.state_at(run_id, previous)


def cli_diff(demo: str, run_id: str, a: int, b: int) -> Any:
    p = subprocess.run(
        [sys.executable, "-m", "eventlog", "--log", demo, "diff", run_id, str(a), str(b), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=True,
    )
    return json.loads(p.stdout)


def test_the_diff_of_two_offsets_is_the_cli_diff(page: Any, demo_url: str, demo: str) -> None:
    page.goto(run_url(demo_url, "chat-demo", view="timeline"))
    page.click('#panel tr[data-offset="9"] td.time')
    state_shown(page, 9)
    page.click('#panel tr[data-offset="18"] td.time', modifiers=["Shift"])
    page.wait_for_selector('#inspector .insp[data-kind="diff"][data-a="9"][data-b="18"]')
    assert "at=9&b=18" in page.url
    assert page.locator("#inspector .mini-chat.c-add .mini").count() == 4  # user, call, tool, answer
    page.click('#inspector [data-show="json"]')
    assert json.loads(page.inner_text("#diff-json")) == cli_diff(demo, "chat-demo", 9, 18)

    page.goto(run_url(demo_url, "workflow-demo", view="timeline", at=2))
    state_shown(page, 2)
    page.hover('#panel tr[data-offset="9"]')
    page.click('#panel tr[data-offset="9"] button.cmp')
    page.wait_for_selector('#inspector .insp[data-kind="diff"][data-a="2"][data-b="9"]')
    page.click('#inspector [data-show="json"]')
    assert json.loads(page.inner_text("#diff-json")) == cli_diff(demo, "workflow-demo", 2, 9)
    page.click("#inspector [data-swap]")
    page.wait_for_selector('#inspector .insp[data-kind="diff"][data-a="9"][data-b="2"]')
    page.click('#inspector [data-show="json"]')
    assert json.loads(page.inner_text("#diff-json")) == cli_diff(demo, "workflow-demo", 9, 2)


_WRITER = """
import sys, time, eventlog
from eventlog.events import UserMessage, StepCompleted
with eventlog.open(sys.argv[1]) as log:
    for line in sys.stdin:
        run_id, text = line.rstrip("\\n").split(" ", 1)
        log.append(run_id, UserMessage(content=text))
        print(time.time(), flush=True)
"""


def test_an_event_another_process_appends_shows_within_two_seconds(page: Any, tmp_path: Path) -> None:
    path = make_demo(tmp_path / "demo")
    writer = subprocess.Popen(
        [sys.executable, "-c", _WRITER, path],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert writer.stdin is not None and writer.stdout is not None
    try:
        with eventlog.open(path, readonly=True) as log, serving(log) as url:
            head = log.head("chat-demo")
            page.goto(run_url(url, "chat-demo"))
            page.wait_for_selector("#live[data-state='on']")
            lags = []
            for i in range(1, 4):
                writer.stdin.write(f"chat-demo hello from another process, {i}\n")
                writer.stdin.flush()
                committed = float(writer.stdout.readline())
                page.wait_for_selector(f'#panel .msg[data-offset="{head + i}"]', timeout=10_000)
                lags.append(time.time() - committed)
                assert f"hello from another process, {i}" in page.inner_text(f'#panel .msg[data-offset="{head + i}"]')
            assert page.inner_text("#run-head") == str(head + 3)
            assert max(lags) < 2.0, lags

            page.goto(url + "/")
            page.wait_for_selector("#live[data-state='on']")
            writer.stdin.write("brand-new-run first words\n")
            writer.stdin.flush()
            committed = float(writer.stdout.readline())
            page.wait_for_selector('tr.run-row[data-run="brand-new-run"]', timeout=10_000)
            assert time.time() - committed < 2.0
    finally:
        writer.stdin.close()
        writer.wait(timeout=30)


def test_a_run_id_holding_a_script_is_shown_as_text(page: Any, tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        log.append(HOSTILE_ID, UserMessage(content="<b>bold?</b> \x1b[1mansi\x1b[0m"))
        log.append(
            HOSTILE_ID, StepCompleted(node="<i>n</i>", superstep=1, update={"<k>": "</pre><script>x()</script>"})
        )
        with serving(log) as url:
            page.goto(url + "/")
            link = page.locator("tr.run-row td.run-id a")
            assert link.inner_text() == visible(HOSTILE_ID)  # the escape character shows as ␛
            assert page.evaluate("window.__pwned") is None
            assert page.evaluate("document.querySelectorAll('script').length") == 1
            assert page.locator("img").count() == 0
            link.click()
            page.wait_for_selector('#inspector .insp[data-kind="state"]')
            assert page.inner_text("h1.run-title") == visible(HOSTILE_ID)
            for reading in ("timeline", "conversation", "steps"):
                page.goto(run_url(url, HOSTILE_ID, view=reading, at=1))
                state = state_shown(page, 1)
                assert state["messages"] == [{"role": "user", "content": "<b>bold?</b> \x1b[1mansi\x1b[0m"}]
                assert page.locator("b, i, img").count() == 0
                assert page.evaluate("window.__pwned") is None
                assert page.evaluate("document.querySelectorAll('script').length") == 1
            page.click('#panel [data-offset="2"]')
            page.wait_for_selector('#inspector .insp[data-at="2"]')
            assert '"</pre><script>x()</script>"' in page.inner_text("#inspector .state-tree")


def test_the_fork_button_is_there_only_with_allow_writes(page: Any, demo_url: str, tmp_path: Path) -> None:
    page.goto(run_url(demo_url, "workflow-demo", view="timeline", at=4))
    state_shown(page, 4)
    assert page.locator("#fork-button, #fork-form").count() == 0
    assert page.locator('meta[name="eventlog-write"]').count() == 0

    path = make_demo(tmp_path / "demo")
    with eventlog.open(path) as log, serving(log, allow_writes=True) as url:
        page.goto(run_url(url, "workflow-demo", view="timeline", at=4))
        state_shown(page, 4)
        assert page.locator("#fork-button").count() == 1
        page.fill('#fork-form input[name="new"]', "workflow-demo-from-4")
        page.click("#fork-button")
        wait_for_run_page(page, "workflow-demo-from-4")
        assert page.inner_text("h1.run-title") == "workflow-demo-from-4"
        info = log.run_info("workflow-demo-from-4")
        assert (info.parent, info.fork_offset, info.head) == ("workflow-demo", 4, 4)
        page.goto(run_url(url, "workflow-demo", view="timeline", at=4))
        state_shown(page, 4)
        page.fill('#fork-form input[name="new"]', "workflow-demo-from-4")
        page.click("#fork-button")
        page.wait_for_selector("#fork-form .error-box")
        assert "workflow-demo-from-4" in page.inner_text("#fork-form .error-box")


@pytest.fixture(scope="module")
def integrations(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[eventlog.EventLog, list[str]]]:
    """A log holding a LangGraph thread and a WayFlow conversation (those whose extra is installed)."""
    path = tmp_path_factory.mktemp("ui") / "integrations"

    def write() -> list[str]:  # in a thread of its own: Playwright's event loop runs in this one
        with eventlog.open(path) as log:
            return [r for r in (write_langgraph_thread(log), write_wayflow_conversation(log)) if r is not None]

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        written = pool.submit(write).result()
    if not written:
        pytest.skip("neither the langgraph nor the wayflow extra is installed")
    with eventlog.open(path, readonly=True) as log:
        yield log, written


def test_langgraph_and_wayflow_runs_read_through_their_views(page: Any, integrations: Any) -> None:
    log, written = integrations
    with serving(log) as url:
        page.goto(url + "/")
        for run_id in written:
            view = view_for_run(log, run_id)
            assert view is not None
            assert page.inner_text(f'tr.run-row[data-run="{run_id}"] .chip') == view.name
        for run_id in written:
            view = view_for_run(log, run_id)
            assert view is not None
            page.goto(run_url(url, run_id))
            shown = page.eval_on_selector_all("#panel .msg .text, #panel .msg pre", "els => els.map(e => e.innerText)")
            messages = view.state(log, run_id, log.head(run_id))
            messages = messages.get("messages") or messages["values"]["messages"]
            assert all(any(m["content"] in text for text in shown) for m in messages if m.get("content"))
            page.click('nav.tabs a:text("Checkpoints")')
            _, rows = view.history(log, run_id, None)
            assert page.locator("#panel tr[data-offset]").count() == len(rows)
            for row in rows:
                page.click(f'#panel tr[data-offset="{row["offset"]}"] td >> nth=0')
                state = state_shown(page, row["offset"])
                assert state == json.loads(msgspec.json.encode(view.state(log, run_id, row["offset"])))


def test_the_runs_list_filters_by_framework(page: Any, integrations: Any) -> None:
    log, written = integrations
    frameworks = {}
    for run_id in written:
        view = view_for_run(log, run_id)
        assert view is not None
        frameworks[view.name] = run_id
    assert len(frameworks) == len(written)  # each run is of a framework of its own
    with serving(log) as url:
        page.goto(url + "/")
        page.wait_for_selector("tr.run-row")
        options = page.eval_on_selector_all("#run-kind-filter option", "os => os.map(o => o.textContent)")
        assert set(frameworks) <= set(options), options
        for kind, run_id in frameworks.items():
            page.select_option("#run-kind-filter", kind)
            page.wait_for_function(
                "([id]) => [...document.querySelectorAll('tr.run-row')].map(r => r.dataset.run).join() === id",
                arg=[run_id],
            )
            assert f"kind={kind}" in page.url
            assert page.inner_text(f'tr.run-row[data-run="{run_id}"] .chip') == kind
        page.select_option("#run-kind-filter", "")
        page.wait_for_function("(n) => document.querySelectorAll('tr.run-row').length === n", arg=len(written))
        assert sorted(page.eval_on_selector_all("tr.run-row", "rs => rs.map(r => r.dataset.run)")) == sorted(written)
        assert "kind=" not in page.url


def test_screenshots_of_the_real_pages(page: Any, demo_url: str, tmp_path: Path) -> None:
    """The pictures of docs/guides/ui.md, taken from the pages the demo's log makes."""
    shoot(page, demo_url + "/", None, tmp_path / "ui-runs.png")
    shoot(page, run_url(demo_url, "chat-demo-rewind", at=32), '.insp[data-at="32"]', tmp_path / "ui-conversation.png")
    shoot(page, run_url(demo_url, "workflow-retry", at=7), '.insp[data-at="7"]', tmp_path / "ui-graph.png")
    url = run_url(demo_url, "chat-demo", view="timeline", at=9, b=18)
    shoot(page, url, '.insp[data-kind="diff"]', tmp_path / "ui-diff.png")


def test_screenshot_of_a_langgraph_thread(page: Any, integrations: Any, tmp_path: Path) -> None:
    log, written = integrations
    if "lg-thread" not in written:
        pytest.skip("the langgraph extra is not installed")
    with serving(log, name="threads.lmdb") as url:
        page_url = run_url(url, "lg-thread", view="checkpoints", at=6)
        shoot(page, page_url, '.insp[data-at="6"]', tmp_path / "ui-langgraph.png")
