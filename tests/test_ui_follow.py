"""`eventlog ui` in a real browser, following a live run and showing a paused LangGraph thread
(issue 25, items 8 and 1): with the newest event selected, new events move the selection and
the state to the new head and say so; with an older event selected, the selection stays and
"N new events" offers the jump; the follow toggle off, nothing moves.

One chromium for the module, one page per test (as test_ui_find.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

from ui_support import browser_context, serving

import eventlog
from eventlog.events import UserMessage


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with browser_context() as context:
        yield context


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    page = browser.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    yield page
    page.close()
    assert not errors, errors


def selected(page: Any) -> int:
    return int(page.get_attribute("#panel .sel-a", "data-offset"))


def state_at(page: Any, at: int) -> None:
    page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{at}"]')


def live(page: Any) -> None:
    page.wait_for_selector('#live[data-state="on"]')


def test_live_mode_follows_the_tail_and_does_not_steal_an_older_selection(page: Any, tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        log.append_many("chat", [UserMessage(content="a"), UserMessage(content="b")])
        with serving(log) as base:
            page.goto(f"{base}/run?id=chat&view=timeline")
            state_at(page, 2)
            live(page)
            assert page.is_checked("#follow")
            assert page.is_hidden("#jump-new")

            # The head selected: a new event moves the selection and the state, and says so.
            log.append("chat", UserMessage(content="c"))
            state_at(page, 3)
            page.wait_for_selector('#panel .sel-a[data-offset="3"]')
            assert "offset 3 is the newest event" in page.inner_text("#find-status")
            assert "at=3" in page.url
            assert page.is_hidden("#jump-new")

            # An older event selected: it stays; "N new events" counts what came, and jumps there.
            page.click('#panel tr.ev[data-offset="1"] td.time')
            state_at(page, 1)
            log.append("chat", UserMessage(content="d"))
            page.wait_for_selector("#jump-new:visible")
            log.append("chat", UserMessage(content="e"))
            page.wait_for_function("document.getElementById('jump-new').textContent.startsWith('2 new events')")
            page.wait_for_selector('#panel tr.ev[data-offset="5"]')
            assert selected(page) == 1
            assert page.get_attribute("#inspector .insp", "data-at") == "1"
            page.click("#jump-new")
            state_at(page, 5)
            assert selected(page) == 5
            assert page.is_hidden("#jump-new")

            # The toggle off (kept over a reload): the head selected stays where it is.
            page.uncheck("#follow")
            page.reload()
            state_at(page, 5)
            live(page)
            assert not page.is_checked("#follow")
            log.append("chat", UserMessage(content="f"))
            page.wait_for_function("document.getElementById('jump-new').textContent.startsWith('1 new event ')")
            assert selected(page) == 5
            assert page.get_attribute("#inspector .insp", "data-at") == "5"
            page.check("#follow")
