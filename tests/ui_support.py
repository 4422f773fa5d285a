"""What the UI's tests share: a real server on a free port, and Debian's chromium driven by Playwright."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import eventlog

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@contextlib.contextmanager
def serving(log: eventlog.EventLog, **options: Any) -> Iterator[str]:
    """The UI over `log`, served by uvicorn on a loopback port (`port=`, else a free one) in a
    thread; yields its base URL."""
    import uvicorn

    from eventlog.ui import create_app

    port = options.pop("port", 0)
    app = create_app(log, name=options.pop("name", "test log"), **options)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a port served before, again
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the UI server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        app.stop_streams()
        server.should_exit = True
        thread.join(10)
        sock.close()


def get(url: str, headers: dict[str, str] | None = None, data: bytes | None = None) -> tuple[int, str, dict[str, str]]:
    """(status, body, headers) of a request; an HTTP error status is returned, not raised."""
    request = urllib.request.Request(
        url, data=data, headers=headers or {}, method="POST" if data is not None else "GET"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), dict(exc.headers)


def chromium_path() -> str | None:
    for candidate in ("/usr/bin/chromium", shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and os.path.exists(candidate):
            return candidate
    return None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


@contextlib.contextmanager
def browser_context(**options: Any) -> Iterator[Any]:
    """A fresh Chromium profile driven by Playwright; skips (fails in CI) when there is no chromium."""
    path = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        if in_ci():
            pytest.fail(f"playwright is not installed in CI: {exc}")
        pytest.skip(f"playwright is not installed ({exc}): pip install '.[test]'")
    if path is None:
        if in_ci():
            pytest.fail("no chromium in CI: .ci/run installs it (apt-get install chromium)")
        pytest.skip("no chromium found (Debian: apt-get install chromium); the browser tests need it")
    profile = tempfile.mkdtemp(prefix="eventlog-ui-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(
                profile,
                executable_path=path,
                headless=True,
                args=CHROMIUM_FLAGS,
                viewport={"width": 1400, "height": 860},
                **options,
            )
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def wait_for_run_page(page: Any, run_id: str, timeout: float = 30_000) -> None:
    """Wait until the page shows the run `run_id`: its URL's `id` is that run, whatever other
    parameters the page's script has put there since it loaded (the state shown, `at=`)."""

    def shows(url: str) -> bool:
        parts = urllib.parse.urlsplit(url)
        return parts.path == "/run" and urllib.parse.parse_qs(parts.query).get("id") == [run_id]

    page.wait_for_url(shows, timeout=timeout)


def shoot(page: Any, url: str, ready: str | None, path: Path, height: int | None = None) -> None:
    """A screenshot of the page at `url` once `ready` (an inspector selector) shows, into `path`;
    copied into docs/img/ when EVENTLOG_UI_SCREENSHOTS is set."""
    page.set_viewport_size({"width": 1400, "height": height or (420 if ready is None else 860)})
    page.goto(url)
    page.wait_for_selector("#live[data-state='on']")
    if ready:
        page.wait_for_selector("#inspector " + ready)
    page.mouse.move(0, 0)
    page.wait_for_timeout(150)
    page.screenshot(path=str(path))
    keep(path)


def keep(path: Path) -> None:
    """Check a screenshot, and copy it into docs/img/ when EVENTLOG_UI_SCREENSHOTS is set."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 12_000, path.name  # a blank page is 5 KB
    if os.environ.get("EVENTLOG_UI_SCREENSHOTS"):
        shutil.copyfile(path, ROOT / "docs" / "img" / path.name)


# -- runs written by the integrations ----------------------------------------------------------


def write_langgraph_thread(log: eventlog.EventLog, thread_id: str = "lg-thread") -> str | None:
    """A LangGraph chat thread that paused for a human and was resumed (None without langgraph)."""
    try:
        from langchain_core.messages import AIMessage, HumanMessage
        from langgraph.types import Command, interrupt

        from eventlog.langgraph import EventLogSaver
    except ImportError:
        return None

    def draft(state: Any) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"Draft answer to: {state['messages'][-1].content}")]}

    def review(state: Any) -> dict[str, Any]:
        verdict = interrupt({"draft": state["messages"][-1].content})
        return {"approved": True, "messages": [] if verdict == "ok" else [AIMessage(content=verdict)]}

    graph = draft_then_review(draft, review, EventLogSaver(log))
    config = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"messages": [HumanMessage(content="Why is the sea salty?")]}, config)
    graph.invoke(Command(resume="Rivers carry salts from rocks to the sea."), config)
    return thread_id


def write_wayflow_conversation(log: eventlog.EventLog, conversation_id: str = "wf-conversation") -> str | None:
    """A WayFlow agent conversation of two turns, one with a tool call (None without wayflowcore)."""
    try:
        from wayflow_app import build_agent, call, reply

        from eventlog.wayflow import EventLogCheckpointer, start_conversation
    except ImportError:
        return None
    agent = build_agent([call("weather", "w1", city="Bern"), reply("It is sunny in Bern."), reply("Two nights, then.")])
    checkpointer = EventLogCheckpointer(log)
    conversation = start_conversation(
        agent, messages="Plan a trip to Bern", checkpointer=checkpointer, conversation_id=conversation_id
    )
    conversation.execute()
    conversation.append_user_message("And for two people?")
    conversation.execute()
    return conversation_id


@contextlib.contextmanager
def checked_page(browser: Any, *, dialogs_fail: bool = False) -> Iterator[Any]:
    """A new page (10 s default timeout) whose script errors, and dialogs when `dialogs_fail`,
    fail the test when it ends."""
    page = browser.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    if dialogs_fail:
        page.on("dialog", lambda dialog: errors.append(f"dialog: {dialog.message}") or dialog.dismiss())
    yield page
    page.close()
    assert not errors, errors


def draft_then_review(draft: Any, review: Any, checkpointer: Any) -> Any:
    """The LangGraph chat the UI's thread tests draw: a `draft` node, then a `review` node that
    may pause for a human, compiled on `checkpointer`."""
    from typing import Annotated

    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from typing_extensions import TypedDict

    # The functional form: its annotations are read now, where the names are in scope.
    Chat = TypedDict("Chat", {"messages": Annotated[list[Any], add_messages], "approved": bool})  # noqa: UP013
    builder = StateGraph(Chat)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", END)
    return builder.compile(checkpointer=checkpointer)


def pick(page: Any, target: Any, shown: str, tries: int = 3) -> None:
    """Click the locator `target` until the selector `shown` is visible: a click that lands while
    the page's live update puts a new panel in place is lost, as a user's would be (who clicks
    again)."""
    from playwright.sync_api import TimeoutError as WaitedTooLong

    for _ in range(tries - 1):
        target.click()
        try:
            page.wait_for_selector(shown, timeout=3_000)
            return
        except WaitedTooLong:
            continue
    target.click()
    page.wait_for_selector(shown)
