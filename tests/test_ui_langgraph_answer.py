"""A LangGraph thread's `interrupt()` answered from outside the graph: `EventLogSaver.answer`
stores the answer as `graph.invoke(Command(resume=value), config)` would, and the graph's next
`graph.invoke(None, config)` in its own process resumes the node with it; `eventlog ui
--allow-writes` answers a waiting thread from the page through it.

Real graphs on a real log (LMDB, and PostgreSQL when EVENTLOG_TEST_PG_DSN is set): each thread
answered by the saver has a twin resumed with `Command(resume=...)`, and the two end alike. The
refusals (nothing waits, answered already, several wait, the thread moved on, even while the
answer is written) are checked by the thread's history: nothing written. Set
EVENTLOG_UI_SCREENSHOTS=1 to write the guide's picture into docs/img/.
"""

from __future__ import annotations

import asyncio
import json
import operator
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest

pytest.importorskip("langgraph", reason="the LangGraph integration needs its extra: pip install '.[langgraph]'")

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

import eventlog
from eventlog.langgraph import AnswerRefusedError, EventLogSaver

ANSWER = {"approved": True, "note": "ship it", "marks": [1, 2.5, None, "ü"]}


class Review(TypedDict, total=False):
    topic: str
    verdict: Any
    log: Annotated[list[str], operator.add]


def draft(state: Review) -> dict[str, Any]:
    return {"log": [f"draft on {state['topic']}"]}


def review(state: Review) -> dict[str, Any]:
    verdict = interrupt({"question": "Publish this draft?", "draft": state["log"][-1]})
    return {"verdict": verdict, "log": [f"reviewed: {json.dumps(verdict)}"]}


def publish(state: Review) -> dict[str, Any]:
    return {"log": ["published" if state["verdict"] else "held back"]}


def review_graph(saver: EventLogSaver) -> Any:
    """draft -> review (interrupt(): the answer goes in `verdict`) -> publish."""
    builder = StateGraph(Review)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_node("publish", publish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "review")
    builder.add_edge("review", "publish")
    builder.add_edge("publish", END)
    return builder.compile(checkpointer=saver)


def two_reviews(saver: EventLogSaver) -> Any:
    """Two reviewers in parallel, each asking a human: the thread waits on two interrupts."""

    def legal(state: Review) -> dict[str, Any]:
        return {"log": [f"legal: {interrupt('legal ok?')}"]}

    def style(state: Review) -> dict[str, Any]:
        return {"log": [f"style: {interrupt('style ok?')}"]}

    builder = StateGraph(Review)
    builder.add_node("legal", legal)
    builder.add_node("style", style)
    builder.add_edge(START, "legal")
    builder.add_edge(START, "style")
    builder.add_edge("legal", END)
    builder.add_edge("style", END)
    return builder.compile(checkpointer=saver)


def opened(where: str, **options: Any) -> eventlog.EventLog:
    """The log at `where` (an LMDB directory, unsynced: a test's; or a PostgreSQL schema)."""
    return eventlog.open(where, **({} if where.startswith("postgresql") else {"durability": "none"}), **options)


def cfg(thread_id: str) -> Any:
    return {"configurable": {"thread_id": thread_id}}


def history(saver: EventLogSaver, thread_id: str) -> list[tuple[str, list[tuple[str, str, Any]]]]:
    """Every checkpoint of the thread, newest first, with its pending writes."""
    return [(t.checkpoint["id"], list(t.pending_writes or [])) for t in saver.list(cfg(thread_id))]


_ASKED = {"question": "Publish this draft?", "draft": "draft on tides"}


def waiting_writes(saver: EventLogSaver, thread_id: str) -> list[tuple[bool, str, Any]]:
    """The writes pending on the checkpoint the thread waited on (step 1), each as (of the null
    task, channel, value; an interrupt as its value), in the order LangGraph reads them."""
    (tup,) = [t for t in saver.list(cfg(thread_id)) if t.metadata["step"] == 1]
    return [
        (task == "00000000-0000-0000-0000-000000000000", ch, [i.value for i in v] if ch == "__interrupt__" else v)
        for task, ch, v in tup.pending_writes or []
    ]


def refused(reason: str, answer: Callable[[], Any]) -> str:
    with pytest.raises(AnswerRefusedError) as caught:
        answer()
    assert caught.value.reason == reason, caught.value
    return str(caught.value)


# -- the library -------------------------------------------------------------------------------


def test_an_answer_resumes_the_graph_as_command_resume_does(shared_log: str) -> None:
    with opened(shared_log) as log:
        graph = review_graph(EventLogSaver(log))
        viewer = EventLogSaver(log)  # another saver over the log: the viewer's, say
        for thread in ("answered", "twin", "streamed", "async"):
            graph.invoke({"topic": "tides"}, cfg(thread))
            assert graph.get_state(cfg(thread)).next == ("review",)
        waiting = graph.get_state(cfg("answered")).config["configurable"]["checkpoint_id"]
        stored = viewer.answer("answered", ANSWER)
        assert stored == {"configurable": {"thread_id": "answered", "checkpoint_ns": "", "checkpoint_id": waiting}}
        graph.invoke(Command(resume=ANSWER), cfg("twin"))
        viewer.answer("streamed", ANSWER)
        asyncio.run(viewer.aanswer("async", ANSWER))
        assert waiting_writes(viewer, "answered") == [(True, "__resume__", ANSWER), (False, "__interrupt__", [_ASKED])]

        result = graph.invoke(None, cfg("answered"))  # the user's own process: no Command
        assert result["verdict"] == ANSWER and result["log"][-1] == "published"
        chunks = list(graph.stream(None, cfg("streamed")))
        assert [next(iter(c)) for c in chunks] == ["review", "publish"]
        graph.invoke(None, cfg("async"))
        twin = graph.get_state(cfg("twin"))
        for thread in ("answered", "streamed", "async"):
            state = graph.get_state(cfg(thread))
            assert state.values == twin.values and state.next == () and not state.interrupts
            steps = [(t.metadata["step"], t.metadata["source"]) for t in viewer.list(cfg(thread))]
            assert steps == [(t.metadata["step"], t.metadata["source"]) for t in viewer.list(cfg("twin"))]
            assert waiting_writes(viewer, thread) == waiting_writes(viewer, "twin")  # the same writes stored
        viewer.close()


def test_an_interrupt_in_a_subgraph_is_answered_on_its_thread(shared_log: str) -> None:
    with opened(shared_log) as log:
        inner = StateGraph(Review)
        inner.add_node("review", review)
        inner.add_edge(START, "review")
        inner.add_edge("review", END)
        outer = StateGraph(Review)
        outer.add_node("draft", draft)
        outer.add_node("checks", inner.compile())
        outer.add_edge(START, "draft")
        outer.add_edge("draft", "checks")
        outer.add_edge("checks", END)
        graph = outer.compile(checkpointer=EventLogSaver(log))
        for thread in ("sub", "sub-twin"):
            graph.invoke({"topic": "reefs"}, cfg(thread))
        assert any("|" in r for r in log.runs())  # the subgraph's namespace has a run of its own
        EventLogSaver(log).answer("sub", "fine")
        graph.invoke(Command(resume="fine"), cfg("sub-twin"))
        assert graph.invoke(None, cfg("sub"))["verdict"] == "fine"
        assert graph.get_state(cfg("sub")).values == graph.get_state(cfg("sub-twin")).values


def test_refused_answers_write_nothing(shared_log: str) -> None:
    with opened(shared_log) as log:
        saver = EventLogSaver(log)
        graph = review_graph(saver)
        viewer = EventLogSaver(log)
        graph.invoke({"topic": "tides"}, cfg("t"))
        before, head = history(viewer, "t"), log.head("t")
        assert "no checkpoint" in refused("no thread", lambda: viewer.answer("never-run", "x"))
        assert "never-run" not in log.runs()
        assert "None is no answer" in refused("no value", lambda: viewer.answer("t", None))
        assert (history(viewer, "t"), log.head("t")) == (before, head)

        viewer.answer("t", "first")
        answered = history(viewer, "t")
        text = refused("answered", lambda: viewer.answer("t", "second"))  # answered twice
        assert "invoke(None, config)" in text
        assert history(viewer, "t") == answered and log.head("t") == head + 1
        graph.invoke(None, cfg("t"))
        assert graph.get_state(cfg("t")).values["verdict"] == "first"
        assert "waits on no interrupt" in refused("not waiting", lambda: viewer.answer("t", "late"))

        # decided on a checkpoint the thread has since moved on from
        graph.invoke({"topic": "waves"}, cfg("t"))
        old = graph.get_state(cfg("t")).config["configurable"]["checkpoint_id"]
        graph.invoke(Command(resume="by the program"), cfg("t"))
        graph.invoke({"topic": "swell"}, cfg("t"))  # waiting again, on a newer checkpoint
        moved, head = history(viewer, "t"), log.head("t")
        assert "moved on" in refused("moved on", lambda: viewer.answer("t", "stale", checkpoint_id=old))
        assert (history(viewer, "t"), log.head("t")) == (moved, head)

        # two reviewers wait: the viewer answers one question, not two
        parallel = two_reviews(saver)
        parallel.invoke({"topic": "tides"}, cfg("two"))
        assert len(parallel.get_state(cfg("two")).interrupts) == 2
        two, head = history(viewer, "two"), log.head("two")
        assert "interrupt_id" in refused("several", lambda: viewer.answer("two", "yes"))
        assert (history(viewer, "two"), log.head("two")) == (two, head)
        viewer.close()


def test_a_thread_that_moves_on_while_the_answer_is_written_is_not_answered(shared_log: str) -> None:
    """The graph resumes in another process (its own saver) between the answer's checks and its
    append (a log calls its clock as it prepares a write): the answer is refused, not stored on
    the checkpoint the graph has left, and the graph's own answer stands."""
    meanwhile: list[Callable[[], Any]] = []

    def clock() -> int:
        if meanwhile:
            meanwhile.pop()()
        return time.time_ns()

    with opened(shared_log, clock=clock) as log:
        graph = review_graph(EventLogSaver(log))
        graph.invoke({"topic": "tides"}, cfg("race"))
        waiting = graph.get_state(cfg("race")).config["configurable"]["checkpoint_id"]
        viewer = EventLogSaver(log)
        meanwhile.append(lambda: graph.invoke(Command(resume="the program's"), cfg("race")))
        text = refused("moved on", lambda: viewer.answer("race", "the viewer's"))
        assert not meanwhile and waiting in text
        writes = [w for _, ws in history(viewer, "race") for w in ws]
        assert all(w[2] != "the viewer's" for w in writes)
        state = graph.get_state(cfg("race"))
        assert state.values["verdict"] == "the program's" and state.next == ()


# -- the viewer --------------------------------------------------------------------------------

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

from ui_support import get, serving, shoot  # noqa: E402


def write_key(url: str, run_id: str) -> str:
    _, page, _ = get(f"{url}/run?id={urllib.parse.quote(run_id)}")
    key = page.split('<meta name="eventlog-write" content="', 1)[1].split('"', 1)[0]
    assert key
    return key


def post(url: str, body: dict[str, Any], key: str | None) -> tuple[int, str]:
    headers = {"content-type": "application/json"} | ({"x-eventlog-write": key} if key is not None else {})
    status, text, _ = get(url + "/run/resume", headers, json.dumps(body).encode())
    return status, text


def test_the_viewer_answers_over_http_only_with_writes_allowed(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        saver = EventLogSaver(log)
        graph = review_graph(saver)
        graph.invoke({"topic": "tides"}, cfg("t"))
        two_reviews(saver).invoke({"topic": "tides"}, cfg("two"))
        head = log.head("t")
        with serving(log) as url:  # read-only: no form, no route
            _, state, _ = get(f"{url}/run/state?id=t&at={head}")
            assert "Waiting for a human" in state and "resume-form" not in state
            assert post(url, {"run": "t", "head": head, "value": "x"}, "")[0] in (404, 405)
        assert log.head("t") == head
        with serving(log, allow_writes=True) as url:
            key = write_key(url, "t")
            _, state, _ = get(f"{url}/run/state?id=t&at={head}")
            assert 'id="resume-form"' in state and "graph.invoke(None, config)" in state
            _, state, _ = get(f"{url}/run/state?id=two&at={log.head('two')}")  # two questions: no form
            assert "resume-form" not in state and "2 questions wait" in state
            answer = {"run": "t", "head": head, "value": ANSWER}
            assert post(url, answer, None)[0] == 403  # no write key: another site's post
            assert post(url, answer, "wrong")[0] == 403
            assert post(url, {**answer, "head": head - 1}, key)[0] == 409  # the page is behind
            assert post(url, {**answer, "number": 99}, key)[0] == 409  # another life of the run
            assert post(url, {**answer, "value": None}, key)[0] == 400
            status, text = post(url, {"run": "two", "head": log.head("two"), "value": "yes"}, key)
            assert status == 409 and "interrupt_id" in text
            assert log.head("t") == head
            status, body = post(url, answer, key)
            assert status == 200 and json.loads(body)["offset"] == head + 1
            status, text = post(url, {**answer, "head": head + 1}, key)
            assert status == 409 and "resume value already" in text
            _, page, _ = get(f"{url}/run?id=t")
            assert "Answer stored" in page and "graph.invoke(None, config)" in page
        assert graph.invoke(None, cfg("t"))["verdict"] == ANSWER


def test_in_the_browser_a_waiting_thread_is_answered_then_resumed(page: Any, tmp_path: Path) -> None:
    answer = {"approved": True, "note": "ship it"}
    with eventlog.open(tmp_path / "log", durability="none") as log:
        graph = review_graph(EventLogSaver(log))
        graph.invoke({"topic": "the tides"}, cfg("review-thread"))
        head = log.head("review-thread")
        with serving(log) as url:  # without --allow-writes: the question, and no form
            page.goto(f"{url}/run?id=review-thread&at={head}")
            page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{head}"] .waiting')
            assert page.locator("#resume-form").count() == 0
        with serving(log, allow_writes=True) as url:
            page.set_viewport_size({"width": 1400, "height": 860})
            page.goto(f"{url}/run?id=review-thread&at={head}")
            page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{head}"] #resume-form')
            assert page.inner_text("#resume-button") == "Answer"
            page.fill("#resume-value", "{not json")
            page.click("#resume-button")
            page.wait_for_function("() => document.querySelector('.resume-result').textContent.includes('not JSON')")
            assert log.head("review-thread") == head
            page.fill("#resume-value", json.dumps(answer))
            page.click("#resume-button")
            page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{head + 1}"] .waiting.answered')
            box = page.locator(".run-head #waiting .waiting.answered")
            assert "Answer stored" in box.inner_text() and "ship it" in box.inner_text()
            assert "graph.invoke(None, config)" in box.inner_text()
            assert page.locator("#resume-form").count() == 0  # answered: no second answer offered
            # The picture of docs/guides/ui.md's "Forks, edits and answers"
            shot = page.context.new_page()
            shoot(shot, f"{url}/run?id=review-thread", ".waiting.answered", tmp_path / "ui-langgraph-answer.png", 1100)
            shot.close()
            result = graph.invoke(None, cfg("review-thread"))  # the graph, in its own program, goes on
            assert result["verdict"] == answer and result["log"][-1] == "published"
            page.wait_for_selector(".run-head #waiting .waiting", state="detached")  # live: nothing waits
