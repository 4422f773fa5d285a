"""`eventlog ui` in a real browser: a long run's page is drawn a screen first, then whole.

The first answer holds the events of one screen around the selected one; once it is painted
the page asks for the rest of its page and puts it in place without moving what is on the
screen, and j/k then go through the whole page, past the first screen's events.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

from ui_support import serving

import eventlog
from eventlog.events import StepCompleted, UserMessage
from eventlog.ui import model

DIALOGS_FAIL = True


def whole_page(page: Any) -> None:
    page.wait_for_function(
        f"() => document.querySelectorAll('#panel tr.ev[data-offset]').length === {model.page_events}"
        " && !document.querySelector('#panel .panel-bar[data-rest]')"
    )


def test_the_rest_of_the_page_comes_after_the_first_screen(page: Any, tmp_path: Path) -> None:
    n = model.page_events * 2 + 13
    with eventlog.open(tmp_path / "log", durability="none") as log:
        log.append_many("long", [StepCompleted(node="n", superstep=i, update={"i": i}) for i in range(1, n + 1)])
        with serving(log) as base:
            page.goto(f"{base}/run?id=long&view=timeline")
            whole_page(page)
            assert page.get_attribute("#panel .sel-a", "data-offset") == str(n)
            page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{n}"]')
            head_row = page.locator(f'#panel tr.ev[data-offset="{n}"]').bounding_box()
            panel = page.locator("#panel").bounding_box()
            assert (
                panel["y"] <= head_row["y"] and head_row["y"] + head_row["height"] <= panel["y"] + panel["height"] + 1
            )

            page.locator(f'#panel tr.ev[data-offset="{n}"]').click()
            back = model.first_screen_events + 5  # past the first screen's events, on the same page
            for _ in range(back):
                page.keyboard.press("k")
            page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{n - back}"]')
            assert page.get_attribute("#panel .sel-a", "data-offset") == str(n - back)
            assert "offsets" in page.inner_text("#panel .panel-bar .range")


def test_an_offset_in_the_middle_opens_around_it(page: Any, tmp_path: Path) -> None:
    n = model.page_events * 3
    at = model.page_events + 7
    with eventlog.open(tmp_path / "log", durability="none") as log:
        log.append_many("chat", [UserMessage(content=f"message {i}") for i in range(1, n + 1)])
        with serving(log) as base:
            page.goto(f"{base}/run?id=chat&view=timeline&at={at}")
            whole_page(page)
            assert page.get_attribute("#panel .sel-a", "data-offset") == str(at)
            page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{at}"]')
            page.goto(f"{base}/run?id=chat&at={at}")  # the conversation: bubbles, drawn the same way
            page.wait_for_function("() => !document.querySelector('#panel .panel-bar[data-rest]')")
            assert page.locator("#panel .msg[data-offset]").count() == model.page_events
            assert page.get_attribute("#panel .sel-a", "data-offset") == str(at)
