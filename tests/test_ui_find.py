"""`eventlog ui` in a real browser, finding things and saying what went wrong (issue 25, items 3,
5, 6, 7 and 9): the runs list searched, filtered and sorted by the server; inside a run, an
offset reached, events filtered by kind and text, the next error; long ids that do not widen
the page; a server gone said, and found again; a bad offset said on a styled page; j/k
across page edges and Tab to a row; a fork's default name that is free.

One chromium for the module, one page per test (as test_ui_browser.py). Set
EVENTLOG_UI_SCREENSHOTS=1 to write the screenshots of docs/guides/ui.md into docs/img/.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

from ui_support import keep, serving, shoot, wait_for_run_page

import eventlog
from eventlog.events import RunFailed, RunStarted, StepCompleted, StepFailed, UserMessage
from eventlog.ui import find, model

LONG_RUN_EVENTS = 450
ERRORS = (50, 320)
NEEDLES = (77, 410)
DAY_NS = 86_400 * 1_000_000_000


def write_long_run(log: eventlog.EventLog, run_id: str = "long-run") -> None:
    events: list[Any] = []
    for i in range(1, LONG_RUN_EVENTS + 1):
        if i in ERRORS:
            events.append(StepFailed(node=f"n{i}", superstep=i, error="boom"))
        else:
            events.append(
                StepCompleted(node=f"n{i}", superstep=i, update={"i": i, "note": "needle" if i in NEEDLES else ""})
            )
    log.append_many(run_id, events)


@pytest.fixture(scope="module")
def finds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[eventlog.EventLog]:
    """Four runs of known kinds, statuses and ages; `beta-chat` the newest, `old-graph` two days old."""
    path = tmp_path_factory.mktemp("ui-find") / "log"
    with eventlog.open(path, durability="none") as log:
        old = time.time_ns() - 2 * DAY_NS
        log.append("old-graph", RunStarted(graph="g"), time_ns=old)
        log.append("old-graph", StepCompleted(node="a", superstep=1), time_ns=old + 1)
        log.append("beta-chat", UserMessage(content="hello"))
        log.append_many(
            "failing-run", [RunStarted(), StepFailed(node="a", superstep=1, error="x"), RunFailed(error="x")]
        )
        write_long_run(log)
        log.append("beta-chat", UserMessage(content="again"))
    with eventlog.open(path, readonly=True) as log:
        yield log


@pytest.fixture(scope="module")
def url(finds: eventlog.EventLog) -> Iterator[str]:
    with serving(finds, name="find.lmdb") as base:
        yield base


def run_url(base: str, run_id: str, **params: Any) -> str:
    return f"{base}/run?" + urllib.parse.urlencode({"id": run_id, **params})


def shown_runs(page: Any) -> list[str]:
    return list(page.eval_on_selector_all("tr.run-row", "rows => rows.map(r => r.dataset.run)"))


def wait_runs(page: Any, expected: list[str]) -> None:
    page.wait_for_function(
        "want => JSON.stringify([...document.querySelectorAll('tr.run-row')].map(r => r.dataset.run)) === want",
        arg=json.dumps(expected, separators=(",", ":")),
    )


def state_at(page: Any, at: int) -> None:
    page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{at}"]')


def offsets_shown(page: Any) -> list[int]:
    return list(page.eval_on_selector_all("#panel tr.ev[data-offset]", "els => els.map(e => +e.dataset.offset)"))


def test_the_runs_list_is_searched_filtered_and_sorted_by_the_server(
    page: Any, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model, "runs_page_max", 2)  # old-graph is not on the first page
    page.goto(url + "/")
    assert shown_runs(page) == ["beta-chat", "long-run"]  # newest activity first
    assert "4 runs, newest activity first" in page.inner_text("#run-matched")
    page.locator("#run-search").press_sequentially("old")  # no Enter: the server searches as one types
    wait_runs(page, ["old-graph"])
    assert "q=old" in page.url and "1 of 4 runs match" in page.inner_text("#run-matched")
    page.fill("#run-search", "zzz")
    page.wait_for_selector("tr.empty")
    message = page.inner_text("tr.empty")
    assert "No run matches an id holding “zzz”" in message and "searched all 4 runs" in message
    page.click("#clear-filters")
    page.wait_for_selector("tr.run-row")
    page.fill("#run-search", "")
    page.select_option("#run-status-filter", "failed")
    wait_runs(page, ["failing-run"])
    page.select_option("#run-status-filter", "")
    page.select_option("#run-kind-filter", "conversation")
    wait_runs(page, ["beta-chat"])
    page.select_option("#run-kind-filter", "")
    page.select_option("#run-since-filter", "24h")
    page.select_option("#run-sort", "id")
    wait_runs(page, ["beta-chat", "failing-run"])  # old-graph is two days old; page one of two, by id
    assert "since=24h" in page.url and "sort=id" in page.url
    page.reload()  # the address keeps the question
    assert shown_runs(page) == ["beta-chat", "failing-run"]


def test_select_runs_filters_and_sorts_every_run() -> None:
    def row(run_id: str, last: int, status: str, kind: str, head: int) -> model.RunSummary:
        info = eventlog.RunInfo(run_id, head, 0, None, 0, last - 5, 0, 0, 1)
        return model.RunSummary(info, kind, status, last)

    now = 100 * DAY_NS
    rows = [
        row(f"r{i}", now - i * DAY_NS // 2, ("failed", "completed")[i % 2], ("graph", "langgraph")[i % 3 == 0], i)
        for i in range(10)
    ]
    found, total = find.select_runs(rows, find.RunFilter(), 0, 100, now)
    assert [r.info.run_id for r in found] == [f"r{i}" for i in range(10)] and total == 10
    found, total = find.select_runs(rows, find.RunFilter(status="failed", since="24h"), 0, 100, now)
    assert [r.info.run_id for r in found] == ["r0", "r2"] and total == 2
    found, total = find.select_runs(rows, find.RunFilter(kind="langgraph", sort="events"), 1, 2, now)
    assert [r.info.run_id for r in found] == ["r3", "r0"] and total == 4


def test_inside_a_run_an_offset_a_kind_a_text_and_the_next_error_are_found(
    page: Any, url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(find, "scan_events_max", 60)  # "next error" asks again, and says how far it got
    page.goto(run_url(url, "long-run", view="timeline", at=1))
    state_at(page, 1)
    page.click("#next-error")
    state_at(page, 50)
    assert page.inner_text("#find-status") == "error at offset 50"
    page.click("#next-error")  # offset 320 is on another page: the page goes there
    state_at(page, 320)
    page.click("#next-error")
    page.wait_for_selector("#find-status:text('No error after offset 320.')")
    page.click("#prev-error")
    state_at(page, 50)
    monkeypatch.undo()

    page.fill("#jump-at", "400")
    page.press("#jump-at", "Enter")
    state_at(page, 400)
    page.fill("#jump-at", "9999")
    page.press("#jump-at", "Enter")
    assert "No offset 9999: this run's offsets go from 0 to 450." in page.inner_text("#find-status")

    page.select_option("#kind-filter", "failed")
    page.wait_for_url("**kind=failed**")
    assert offsets_shown(page) == list(ERRORS)
    assert page.inner_text("#matches").startswith("2 matches of kind errors")
    page.select_option("#kind-filter", "")
    page.wait_for_url("**kind=&**")
    page.fill("#event-search", "NEEDLE")
    page.press("#event-search", "Enter")
    page.wait_for_url("**q=NEEDLE**")
    assert offsets_shown(page) == list(NEEDLES)


def test_j_and_k_cross_page_edges_and_tab_reaches_the_rows(page: Any, url: str) -> None:
    page.goto(run_url(url, "long-run", view="timeline", after=0, at=model.page_events))
    state_at(page, model.page_events)
    assert offsets_shown(page)[-1] == model.page_events
    page.keyboard.press("j")
    state_at(page, model.page_events + 1)
    assert offsets_shown(page)[0] == model.page_events + 1  # the next page, loaded
    page.keyboard.press("k")
    state_at(page, model.page_events)
    assert offsets_shown(page)[0] == 0

    page.goto(run_url(url, "long-run", view="timeline", after=0, at=5))
    state_at(page, 5)
    for _ in range(40):
        page.keyboard.press("Tab")
        if page.evaluate("!!document.activeElement.closest('#panel [data-offset]')"):
            break
    assert page.evaluate("document.activeElement.dataset.offset") == "5"  # the selected row is the stop
    page.keyboard.press("j")
    state_at(page, 6)
    assert page.evaluate("document.activeElement.dataset.offset") == "6"
    page.keyboard.press("Shift+Tab")
    page.keyboard.press("Tab")
    page.keyboard.press("ArrowDown")
    state_at(page, 7)
    page.evaluate("document.querySelector('#panel tr[data-offset=\"9\"]').focus()")
    page.keyboard.press("Enter")
    state_at(page, 9)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_server_gone_is_said_and_found_again(page: Any, finds: eventlog.EventLog) -> None:
    port = _free_port()
    with serving(finds, port=port) as base:
        page.goto(run_url(base, "beta-chat", view="timeline"))
        page.wait_for_selector("#live[data-state='on']")
        state_at(page, 2)
        assert page.locator("#conn").is_hidden()
    page.wait_for_selector("#conn:not([hidden])")
    assert "connection to the server is lost" in page.inner_text("#conn") and "Retrying" in page.inner_text("#conn")
    assert page.get_attribute("#live", "data-state") == "off" and page.inner_text("#live") == "offline"
    page.click('#panel tr[data-offset="1"] td.time')
    page.wait_for_selector("#inspector .error-box")
    assert "the server did not answer" in page.inner_text("#inspector .error-box")
    with serving(finds, port=port):
        page.wait_for_selector("#conn", state="hidden", timeout=15_000)
        page.wait_for_selector("#live[data-state='on']")
        page.click('#panel tr[data-offset="1"] td.time')
        state_at(page, 1)


def test_a_bad_offset_in_a_fragment_url_gets_a_styled_page_that_says_why(page: Any, url: str) -> None:
    response = page.goto(url + "/run/state?id=beta-chat&at=99999")
    assert response.status == 404
    assert page.inner_text("h1") == "Not found"
    assert "offset 99999 is out of range 0..2" in page.inner_text(".error-box")
    assert page.eval_on_selector(".error-box", "e => getComputedStyle(e).backgroundColor") != "rgba(0, 0, 0, 0)"
    assert page.get_attribute(".error-links a.clip", "href") == "/run?id=beta-chat"
    response = page.goto(url + "/run/diff?id=beta-chat&a=1&b=x")
    assert response.status == 400 and page.inner_text("h1") == "Bad request"
    assert "b must be a whole number" in page.inner_text(".error-box")


LONG_ID = "run-" + "x" * 996
LONG_FORK = "fork-" + "y" * 995


@pytest.fixture(scope="module")
def long_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    path = tmp_path_factory.mktemp("ui-long") / "log"
    with eventlog.open(path, durability="none") as log:
        log.append_many(
            LONG_ID,
            [
                RunStarted(graph="g" * 300, next_nodes=["node-" + "z" * 300]),
                StepCompleted(node="node-" + "z" * 300, superstep=123_456_789_012_345, update={"k": "v" * 2000}),
                StepCompleted(node="n", superstep=123_456_789_012_346),
            ],
        )
        log.fork(LONG_ID, at=2, new_run_id=LONG_FORK)
        log.append(LONG_FORK, UserMessage(content="w" * 3000))
        with serving(log) as base:
            yield base


def page_fits(page: Any) -> None:
    """Neither the page nor the panel of events is wider than what shows of it."""
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], (page.url[:80], width)
    for box in ("#panel", "#inspector"):
        if page.locator(box).count():
            width = page.eval_on_selector(box, "p => [p.scrollWidth, p.clientWidth]")
            assert width[0] <= width[1], (page.url[:80], box, width)


@pytest.mark.parametrize("viewport", [1400, 900])
def test_long_ids_labels_and_numbers_do_not_widen_the_page(page: Any, long_url: str, viewport: int) -> None:
    page.set_viewport_size({"width": viewport, "height": 800})
    page.goto(long_url + "/")
    page_fits(page)
    link = page.locator(f'tr.run-row[data-run="{LONG_ID}"] td.run-id a')
    assert link.get_attribute("title") == LONG_ID
    assert link.evaluate("e => e.scrollWidth > e.clientWidth")  # cut with an ellipsis
    for reading in ("timeline", "steps"):
        page.goto(run_url(long_url, LONG_ID, view=reading, at=2))
        state_at(page, 2)
        page_fits(page)
    badge = page.locator(".ss-num").first
    assert badge.evaluate("e => e.scrollWidth <= e.clientWidth") and badge.inner_text() == "123,456,789,012,345"
    page.goto(run_url(long_url, LONG_ID, view="timeline", at=2))
    state_at(page, 2)
    assert page.locator(f'.fork-mark[title*="{LONG_FORK}"]').count() == 1
    page_fits(page)
    for reading in ("timeline", "conversation"):
        page.goto(run_url(long_url, LONG_FORK, view=reading))
        state_at(page, 3)
        page_fits(page)
    page.goto(long_url + f"/run/state?id={LONG_FORK}&at=9")
    page_fits(page)


def test_the_fork_form_sits_above_the_state_and_its_default_name_is_free(page: Any, tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:  # no fsync to wait for on a busy machine
        log.append_many("w", [UserMessage(content="a"), UserMessage(content="b")])
        with serving(log, allow_writes=True) as base:
            for expected in ("w-fork-1", "w-fork-1-2"):
                page.goto(run_url(base, "w", view="timeline", at=1))
                state_at(page, 1)
                form, tree = page.locator("#fork-form").bounding_box(), page.locator(".state-tree").bounding_box()
                assert form["y"] + form["height"] <= tree["y"]
                assert page.input_value('#fork-form input[name="new"]') == expected
                page.click("#fork-button")
                wait_for_run_page(page, expected)
                assert log.run_info(expected).parent == "w"
            page.goto(base + "/")
            assert page.inner_text('tr.run-row[data-run="w-fork-1-2"] td:last-child') == "just now"
            assert shown_runs(page) == ["w", "w-fork-1-2", "w-fork-1"]  # a tree where its newest run is


def test_screenshots_of_finding_things(page: Any, url: str, finds: eventlog.EventLog, tmp_path: Path) -> None:
    """The pictures of docs/guides/ui.md's "Finding things" and "When something goes wrong"."""
    shoot(page, url + "/?since=24h&sort=events", None, tmp_path / "ui-find-runs.png")
    shoot(page, run_url(url, "long-run", kind="failed", at=50), '.insp[data-at="50"]', tmp_path / "ui-find-run.png")
    port = _free_port()
    with serving(finds, port=port) as base:
        page.goto(run_url(base, "long-run", view="timeline", at=320))
        state_at(page, 320)
        page.wait_for_selector("#live[data-state='on']")
    page.wait_for_selector("#conn:not([hidden])")
    page.click('#panel tr[data-offset="319"] td.time')
    page.wait_for_selector("#inspector .error-box")
    page.mouse.move(0, 0)
    page.screenshot(path=str(tmp_path / "ui-connection-lost.png"))
    keep(tmp_path / "ui-connection-lost.png")
