"""`eventlog ui` in a real browser: the state panel stays in view while a long timeline scrolls,
and the views the guide shows for errors and for long content, photographed (issue 25, items 5,
7 and 8). Set EVENTLOG_UI_SCREENSHOTS=1 to write the screenshots of docs/guides/ui.md into docs/img/.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

from ui_support import keep, serving, shoot

import eventlog
from eventlog.events import RunStarted, StepCompleted, UserMessage

DIALOGS_FAIL = True  # any dialog fails a test of this module (conftest `page`)


def run_url(base: str, run_id: str, **params: Any) -> str:
    return f"{base}/run?" + urllib.parse.urlencode({"id": run_id, **params})


def test_the_state_panel_stays_in_view_while_the_timeline_scrolls(page: Any, tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        log.append_many("long", [UserMessage(content=f"message {i}") for i in range(200)])
        with serving(log) as url:
            page.set_viewport_size({"width": 1400, "height": 700})
            page.goto(run_url(url, "long", view="timeline", at=1))
            page.wait_for_selector('#inspector .insp[data-kind="state"][data-at="1"]')
            before = page.locator("#inspector").bounding_box()
            # the events scroll in their own panel, and the page itself as far as it is longer
            page.eval_on_selector("#panel", "p => { p.scrollTop = p.scrollHeight; }")
            page.evaluate("() => window.scrollTo(0, document.documentElement.scrollHeight)")
            page.wait_for_timeout(100)
            scrolled = page.eval_on_selector("#panel", "p => p.scrollTop")
            assert scrolled > 1000  # the timeline is far longer than its panel: it scrolled
            box = page.locator("#inspector").bounding_box()
            assert before is not None and box is not None
            assert 0 <= box["y"] < 700 and box["y"] + min(box["height"], 200) <= 700, box  # still in view
            last = page.locator("#panel [data-offset]").last.bounding_box()
            first = page.locator("#panel [data-offset]").first.bounding_box()
            assert last is not None and first is not None and 0 <= last["y"] < 700 and first["y"] < 0


def test_the_guide_shows_an_error_page_and_long_content(page: Any, tmp_path: Path) -> None:
    long_id = "run-" + "x" * 996
    with eventlog.open(tmp_path / "log", durability="none") as log:
        log.append_many(
            long_id,
            [
                RunStarted(graph="g" * 300, next_nodes=["node-" + "z" * 300]),
                StepCompleted(node="node-" + "z" * 300, superstep=123_456_789_012_345, update={"k": "v" * 2000}),
            ],
        )
        log.append_many("short", [UserMessage(content="hello")])
        with serving(log) as url:
            page.set_viewport_size({"width": 1400, "height": 700})
            response = page.goto(url + "/run/state?id=short&at=99")
            assert response.status == 404 and "out of range" in page.inner_text(".error-box")
            page.screenshot(path=str(tmp_path / "ui-error-page.png"))
            keep(tmp_path / "ui-error-page.png")
            shoot(page, run_url(url, long_id, view="steps", at=1), ".insp", tmp_path / "ui-long-content.png", 640)
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
