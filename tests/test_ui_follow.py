"""`eventlog ui` in a real browser, following a live run and showing a paused LangGraph thread
(issue 25, items 8 and 1): with the newest event selected, new events move the selection and
the state to the new head and say so, a line that goes once another event is selected or the
toggle is off; with an older event selected, the selection stays and "N new events" offers
the jump; the follow toggle off, nothing moves.

One chromium for the module, one page per test (as test_ui_find.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

from ui_support import draft_then_review, keep, serving, shoot

import eventlog
from eventlog.events import AssistantMessage, ToolCallCompleted, ToolCallStarted, UserMessage


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
            page.wait_for_function("() => document.getElementById('jump-new').textContent.startsWith('2 new events')")
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
            page.wait_for_function("() => document.getElementById('jump-new').textContent.startsWith('1 new event ')")
            assert selected(page) == 5
            assert page.get_attribute("#inspector .insp", "data-at") == "5"
            page.check("#follow")


def status(page: Any) -> str:
    return str(page.inner_text("#find-status"))


def came(page: Any, offset: int, unseen: int) -> None:
    """Wait until event `offset` shows in the panel and the jump button counts `unseen` new events."""
    page.wait_for_selector(f'#panel tr.ev[data-offset="{offset}"]')
    label = f"{unseen} new event{'' if unseen == 1 else 's'} "
    page.wait_for_function("(label) => document.getElementById('jump-new').textContent.startsWith(label)", arg=label)


def test_the_following_line_shows_only_while_the_selection_follows_the_tail(page: Any, tmp_path: Path) -> None:
    following = "following the tail: offset {} is the newest event"
    with eventlog.open(tmp_path / "log", durability="none") as log:
        log.append_many("chat", [UserMessage(content="a"), UserMessage(content="b")])
        with serving(log) as base:
            page.goto(f"{base}/run?id=chat&view=timeline")
            state_at(page, 2)
            live(page)
            assert status(page) == ""

            # Each new head moves the selection, and the line says the new one.
            for at in (3, 4):
                log.append("chat", UserMessage(content=f"to {at}"))
                state_at(page, at)
                page.wait_for_function(
                    "(line) => document.getElementById('find-status').textContent === line", arg=following.format(at)
                )
            page.click('#panel tr.ev[data-offset="4"] td.time')  # the newest again: still following
            state_at(page, 4)
            assert status(page) == following.format(4)

            # k selects the event before: the line goes, and new events do not bring it back.
            page.keyboard.press("k")
            state_at(page, 3)
            assert status(page) == ""
            log.append("chat", UserMessage(content="e"))
            came(page, 5, 1)
            assert (selected(page), status(page)) == (3, "")

            # Back at the newest, the next event follows again; a click on an older row ends it.
            page.click("#jump-new")
            state_at(page, 5)
            log.append("chat", UserMessage(content="f"))
            state_at(page, 6)
            assert status(page) == following.format(6)
            page.click('#panel tr.ev[data-offset="2"] td.time')
            state_at(page, 2)
            assert status(page) == ""
            log.append("chat", UserMessage(content="g"))
            came(page, 7, 1)
            assert (selected(page), status(page)) == (2, "")

            # Following, then the toggle unticked: the line goes, and stays away as events come.
            page.click("#jump-new")
            state_at(page, 7)
            log.append("chat", UserMessage(content="h"))
            state_at(page, 8)
            assert status(page) == following.format(8)
            page.uncheck("#follow")
            assert status(page) == ""
            log.append("chat", UserMessage(content="i"))
            came(page, 9, 1)
            assert (selected(page), status(page)) == (8, "")
            page.check("#follow")


def test_a_selection_made_while_the_tail_is_being_read_is_kept(page: Any, tmp_path: Path) -> None:
    """New events came with the newest event selected, and the user picks an older one while the
    panel is still being read again: the pick wins, the page does not jump to the new head."""
    with eventlog.open(tmp_path / "log", durability="none") as log:
        log.append_many("chat", [UserMessage(content=c) for c in "abc"])
        with serving(log) as base:
            page.goto(f"{base}/run?id=chat&view=timeline")
            state_at(page, 3)
            live(page)
            held: list[Any] = []

            def hold(route: Any) -> None:  # the panel's reloads wait until they are let go
                if held and held[0] is None:
                    route.continue_()
                else:
                    held.append(route)

            page.route("**/run?*fragment=1*", hold)
            log.append("chat", UserMessage(content="d"))
            page.wait_for_function("() => document.getElementById('run-head').textContent === '4'")
            while not held:
                page.wait_for_timeout(20)
            page.click('#panel tr.ev[data-offset="1"] td.time')
            state_at(page, 1)
            waiting, held[:] = held[:], [None]
            for route in waiting:
                route.continue_()
            page.wait_for_selector('#panel tr.ev[data-offset="4"]')
            page.wait_for_timeout(300)  # a jump to the head would have come by now
            assert selected(page) == 1
            assert page.get_attribute("#inspector .insp", "data-at") == "1"
            assert status(page) == ""


def turn(i: int) -> list[Any]:
    """One turn of a chat about the weather: the user asks, a tool answers, the assistant replies."""
    city = ("Bern", "Oslo", "Lima", "Pune")[i % 4]
    return [
        UserMessage(content=f"Weather in {city}, day {i}?"),
        ToolCallStarted(call_id=f"w{i}", tool="weather", arguments={"city": city, "day": i}),
        ToolCallCompleted(call_id=f"w{i}", tool="weather", output=f"clear, {12 + i % 9} °C", latency_ms=40 + i % 7),
        AssistantMessage(content=f"Clear in {city} on day {i}, {12 + i % 9} °C.", tool_calls=[]),
    ]


def test_screenshots_of_following_the_tail_and_of_new_events_on_an_older_page(page: Any, tmp_path: Path) -> None:
    """The pictures of docs/guides/ui.md's "Live"."""
    with eventlog.open(tmp_path / "log", durability="none") as log:
        log.append_many("weather-chat", [e for i in range(60) for e in turn(i)])  # 240 events: two pages
        with serving(log) as base:
            page.goto(f"{base}/run?id=weather-chat&view=timeline")
            state_at(page, 240)
            live(page)
            log.append_many("weather-chat", turn(60))
            state_at(page, 244)
            assert selected(page) == 244
            assert status(page) == "following the tail: offset 244 is the newest event"
            page.mouse.move(0, 0)
            page.screenshot(path=str(tmp_path / "ui-follow-tail.png"))
            keep(tmp_path / "ui-follow-tail.png")

            # An event of the first page selected: the page of events does not move, and says what came.
            page.goto(f"{base}/run?id=weather-chat&view=timeline&at=30")
            state_at(page, 30)
            live(page)
            assert page.is_hidden("#new-events")
            log.append_many("weather-chat", turn(61))
            page.wait_for_selector("#new-events:visible")
            page.wait_for_function("() => document.getElementById('jump-new').textContent.startsWith('4 new events')")
            assert (selected(page), status(page)) == (30, "")
            assert page.locator('#panel tr.ev[data-offset="248"]').count() == 0
            assert page.inner_text("#panel .range").endswith("of 248")  # the page's bar counts what came
            page.mouse.move(0, 0)
            page.screenshot(path=str(tmp_path / "ui-new-events.png"))
            keep(tmp_path / "ui-new-events.png")


def paused_thread(log: eventlog.EventLog, thread_id: str) -> Any:
    """A LangGraph thread paused by `interrupt()` in its `review` node; returns a resume function."""
    pytest.importorskip("langgraph")
    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.types import Command, interrupt

    from eventlog.langgraph import EventLogSaver

    def draft(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(content="<b>draft</b> answer")]}

    def review(state: Any) -> dict[str, Any]:
        verdict = interrupt({"question": "Send this?", "draft": state["messages"][-1].content})
        return {"messages": [AIMessage(content=str(verdict))]}

    graph = draft_then_review(draft, review, EventLogSaver(log))
    config = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"messages": [HumanMessage(content="hi")]}, config)
    return lambda value: graph.invoke(Command(resume=value), config)


def test_a_pending_interrupt_shows_as_waiting_for_a_human_at_the_top(page: Any, tmp_path: Path) -> None:
    from eventlog.views import view_for_run, waiting

    with eventlog.open(tmp_path / "log", durability="none") as log:
        resume = paused_thread(log, "t")
        head = log.run_info("t").head
        asked = waiting(view_for_run(log, "t"), log, "t", head)
        assert [(w["node"], w["value"]["question"]) for w in asked] == [("review", "Send this?")]
        assert waiting(None, log, "t", head) == []
        with serving(log) as base:
            page.goto(f"{base}/run?id=t&view=timeline")
            box = page.locator(".run-head #waiting .waiting")
            assert "Waiting for a human" in box.inner_text()
            assert page.inner_text(".run-head .waiting-head .mono") == "review"
            assert "Send this?" in box.inner_text()
            assert "<b>draft</b> answer" in box.inner_text()  # the value's text, escaped
            assert page.locator(".waiting-value b").count() == 0
            state_at(page, head)
            assert "Waiting for a human" in page.inner_text("#inspector .waiting")
            page.click('#panel tr.ev[data-offset="1"] td.time')
            state_at(page, 1)
            assert page.locator("#inspector .waiting").count() == 0  # not yet asked at offset 1
            live(page)
            # The picture of docs/guides/ui.md's "Runs that an integration wrote"
            shot = page.context.new_page()
            shoot(shot, f"{base}/run?id=t&view=timeline", ".waiting", tmp_path / "ui-waiting.png", height=620)
            shot.close()

            resume("yes")  # answered: live updates take the box away
            page.wait_for_selector(".run-head #waiting .waiting", state="detached")
            view = view_for_run(log, "t")
            after = range(head + 1, log.run_info("t").head + 1)  # the resume written, then the node's end
            assert [waiting(view, log, "t", at) for at in after] == [[] for _ in after]


def test_the_timelines_header_sticks_right_under_the_panels_bar(page: Any, tmp_path: Path) -> None:
    """Scrolled, the timeline's column header stays flush with the bar above it: no strip of
    the rows scrolled past shows between the two."""
    with eventlog.open(tmp_path / "log", durability="none") as log:
        log.append_many("chat", [UserMessage(content=f"message {n}") for n in range(80)])
        with serving(log) as base:
            page.set_viewport_size({"width": 1400, "height": 900})
            page.goto(f"{base}/run?id=chat&view=timeline")
            state_at(page, 80)
            page.eval_on_selector("#panel", "e => { e.scrollTop = 600; }")
            page.wait_for_function("document.querySelector('#panel').scrollTop > 0")
            bar, header = page.evaluate(
                """() => [document.querySelector('#panel .panel-bar'), document.querySelector('#panel .timeline th')]
                     .map(e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom]; })"""
            )
            assert header[0] == pytest.approx(bar[1], abs=0.5)
