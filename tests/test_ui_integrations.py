"""`eventlog ui` in a real browser over the runs the integrations write (issue 25, items 1 and
3): an ADK session and an OpenAI Agents SDK session read as conversations through their views,
and the runs list filtered by framework with the page's own control.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("google.adk", reason="the adk extra is not installed")
pytest.importorskip("agents", reason="the openai-agents extra is not installed")

from google.adk.events import Event
from google.genai import types
from ui_support import serving, shoot

import eventlog
from eventlog.adk import EventLogSessionService, session_run
from eventlog.events import UserMessage
from eventlog.openai_agents import EventLogSession

DIALOGS_FAIL = True  # any dialog fails a test of this module (conftest `page`)


def _said(role: str, text: str) -> Event:
    return Event(
        author="user" if role == "user" else "agent", content=types.Content(role=role, parts=[types.Part(text=text)])
    )


def _write(log: eventlog.EventLog) -> tuple[str, str]:
    """An ADK session and an Agents SDK session of two messages each: their run ids."""
    service = EventLogSessionService(log, offload=False)

    async def adk() -> None:
        session = await service.create_session(app_name="trip", user_id="ann", session_id="chat")
        await service.append_event(session, _said("user", "Weather in Bern?"))
        await service.append_event(session, _said("model", "Clear in Bern."))

    with ThreadPoolExecutor(1) as pool:  # the browser's event loop runs in this thread
        pool.submit(asyncio.run, adk()).result()
    before = set(log.runs())
    EventLogSession("support-1", log).add_items_sync(
        [{"role": "user", "content": "Where is my order?"}, {"role": "assistant", "content": "It left today."}]
    )
    (agents_run,) = set(log.runs()) - before
    log.append("plain", UserMessage(content="not an integration's"))
    return session_run("trip", "ann", "chat"), agents_run


def _bubbles(page: Any) -> list[tuple[str, str]]:
    page.wait_for_selector("#panel .msg")
    return page.eval_on_selector_all(
        "#panel .msg",
        "ms => ms.map(m => [m.className.match(/r-(\\w+)/)[1], m.querySelector('.text, .body, p')?.textContent.trim() ?? m.textContent.trim()])",
    )


def test_adk_and_agents_sdk_sessions_read_as_conversations(page: Any, tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        adk_run, agents_run = _write(log)
        with serving(log) as url:
            for run_id, said in (
                (adk_run, ["Weather in Bern?", "Clear in Bern."]),
                (agents_run, ["Where is my order?", "It left today."]),
            ):
                page.goto(f"{url}/run?" + urllib.parse.urlencode({"id": run_id}))
                assert page.inner_text(".tabs").split()[0] == "Conversation"  # read first as what it is
                shown = _bubbles(page)
                assert [role for role, _ in shown] == ["user", "assistant"], shown
                assert all(text in page.inner_text("#panel") for text in said)
            # the runs list, filtered by framework with the page's own control
            page.goto(url + "/")
            page.wait_for_selector("tr.run-row")
            for kind, run_id in (("adk", adk_run), ("openai-agents", agents_run)):
                options = page.eval_on_selector_all("#run-kind-filter option", "os => os.map(o => o.textContent)")
                assert kind in options, options
                page.select_option("#run-kind-filter", kind)
                page.wait_for_function(
                    "([id]) => [...document.querySelectorAll('tr.run-row')].every(r => r.dataset.run === id)",
                    arg=[run_id],
                )
                assert page.eval_on_selector_all("tr.run-row", "rs => rs.map(r => r.dataset.run)") == [run_id]
            page.select_option("#run-kind-filter", "")
            page.wait_for_function("() => document.querySelectorAll('tr.run-row').length >= 3")


def test_a_langgraph_thread_with_tool_calls_reads_as_a_conversation(page: Any, tmp_path: Path) -> None:
    pytest.importorskip("langgraph", reason="the langgraph extra is not installed")
    from typing import Annotated

    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langgraph.graph import START, StateGraph
    from langgraph.graph.message import add_messages
    from typing_extensions import TypedDict

    from eventlog.langgraph import EventLogSaver

    Chat = TypedDict("Chat", {"messages": Annotated[list[Any], add_messages]})  # noqa: UP013

    def agent(state: Any) -> dict[str, Any]:  # asks the weather tool, reads its answer, replies
        call = {"name": "weather", "args": {"city": "Bern"}, "id": "call-1"}
        return {
            "messages": [
                AIMessage(content="", tool_calls=[call]),
                ToolMessage(content="clear, 21 °C", tool_call_id="call-1", name="weather"),
                AIMessage(content="It is clear in Bern, 21 °C."),
            ]
        }

    with eventlog.open(tmp_path / "log", durability="none") as log:
        builder = StateGraph(Chat)
        builder.add_node("agent", agent)
        builder.add_edge(START, "agent")
        graph = builder.compile(checkpointer=EventLogSaver(log))
        graph.invoke({"messages": [HumanMessage(content="Weather in Bern?")]}, {"configurable": {"thread_id": "trip"}})
        with serving(log) as url:
            page.goto(f"{url}/run?id=trip&view=conversation")
            page.wait_for_selector("#panel .msg")
            roles = page.eval_on_selector_all("#panel .msg", "ms => ms.map(m => m.className.match(/r-(\\w+)/)[1])")
            assert roles == ["user", "assistant", "tool", "assistant"], roles
            call = page.inner_text("#panel .msg.r-assistant .tool-call")
            assert "weather" in call and '"city"' in call and "Bern" in call
            assert "clear, 21 °C" in page.inner_text("#panel .msg.r-tool")
            assert "It is clear in Bern, 21 °C." in page.inner_text("#panel")
            shoot(
                page, f"{url}/run?id=trip&view=conversation", ".insp", tmp_path / "ui-langgraph-conversation.png", 640
            )
