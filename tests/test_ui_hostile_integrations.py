"""`eventlog ui` over HTTP on the runs the integrations write, every string in them hostile: an
ADK session (app, user and session ids, authors, text, a function call and its response), an
Agents SDK session (items, a function call's arguments and output) and LangGraph threads (message
contents, tool calls, an interrupt waiting and one answered). Every page, state, diff and prompt
of every run shows the markup as text and the control characters as symbols
(docs/durability.md, guarantee 7; the same for plain runs is in test_ui.py).
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("google.adk", reason="the adk extra is not installed")
pytest.importorskip("agents", reason="the openai-agents extra is not installed")
pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

from google.adk.events import Event
from google.genai import types
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.types import Command, interrupt
from ui_support import draft_then_review, get, serving

import eventlog
from eventlog.adk import EventLogSessionService
from eventlog.langgraph import EventLogSaver
from eventlog.openai_agents import EventLogSession

H = '<img src=x onerror="window.__pwned=1"></pre><script>x()</script>\x1b[31m\u202e\x9b'
"""Markup, an ANSI escape, a bidi override and a C1 CSI: what no page may hold as it is."""
NEEDLES = ("<img", "<script>x", "\x1b", "\u202e", "\x9b")


def _adk(log: eventlog.EventLog) -> None:
    service = EventLogSessionService(log, offload=False)

    def part(**kw: Any) -> types.Part:
        return types.Part(**kw)

    async def write() -> None:
        session = await service.create_session(app_name="a" + H, user_id="u" + H, session_id="s" + H, state={H: H})
        call = types.FunctionCall(name="f" + H, args={H: H}, id="c" + H)
        response = types.FunctionResponse(name="f" + H, response={H: H}, id="c" + H)
        for author, role, p in (
            ("user", "user", part(text=H)),
            ("agent", "model", part(function_call=call)),
            ("agent", "user", part(function_response=response)),
            ("agent", "model", part(text=H)),
        ):
            await service.append_event(session, Event(author=author + H, content=types.Content(role=role, parts=[p])))

    with ThreadPoolExecutor(1) as pool:  # an event loop of its own
        pool.submit(asyncio.run, write()).result()


def _agents_sdk(log: eventlog.EventLog) -> None:
    EventLogSession("session" + H, log).add_items_sync(
        [
            {"role": "user", "content": H},
            {"type": "function_call", "call_id": "c" + H, "name": "n" + H, "arguments": json.dumps({"a": H})},
            {"type": "function_call_output", "call_id": "c" + H, "output": H},
            {"role": "assistant", "content": H},
        ]
    )


def _langgraph(log: eventlog.EventLog) -> None:
    def draft(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(content=H, tool_calls=[{"name": "t" + H, "args": {H: H}, "id": "i" + H}])]}

    def review(state: Any) -> dict[str, Any]:
        interrupt({H: H})
        return {"approved": True, "messages": [ToolMessage(content=H, tool_call_id="i" + H, name="t" + H)]}

    graph = draft_then_review(draft, review, EventLogSaver(log))
    graph.invoke({"messages": [HumanMessage(content=H)]}, {"configurable": {"thread_id": "waits" + H}})
    answered = {"configurable": {"thread_id": "answered" + H}}
    graph.invoke({"messages": [HumanMessage(content=H)]}, answered)
    graph.invoke(Command(resume=H), answered)


def test_every_page_of_every_integration_run_holds_hostile_text_as_text(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        _adk(log)
        _agents_sdk(log)
        _langgraph(log)
        runs = list(log.runs())
        assert len(runs) == 4, runs
        pages = ["/", "/?fragment=1"]
        for run_id in runs:
            q = "id=" + urllib.parse.quote(run_id)
            pages += [f"/run?{q}&view={v}" for v in ("conversation", "timeline", "steps", "waterfall", "checkpoints")]
            for at in range(log.run_info(run_id).head + 1):
                pages += [f"/run/state?{q}&at={at}", f"/run/diff?{q}&a=0&b={at}"]
                pages += [f"/run/prompt?{q}&at={at}"] if at else []  # offset 0: no event
        with serving(log, allow_writes=True) as url:
            shown = 0
            for page in pages:
                status, body, _ = get(url + page)
                assert status in (200, 400), (
                    page,
                    status,
                    body[body.find("error-box") :][:300],
                )  # 400: an offset that is no LLM call
                found = [n for n in NEEDLES if n in body]
                assert not found, (page, found, body[body.find(found[0]) - 200 :][:300])
                assert body.count("<script") == (1 if "<html" in body else 0), page  # ui.js only
                shown += "&lt;img src=x" in body
            assert shown > len(runs) * 3  # the text itself is on the pages, as text
