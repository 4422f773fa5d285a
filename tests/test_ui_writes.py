"""`eventlog ui --allow-writes`: a fork with its values edited first, and a paused run resumed
with a value from the page (issue 25, item 6), over HTTP and in a real browser; and what another
site cannot do (the security points: no write route without --allow-writes, none without the
page's write key, a cross-site post refused by the browser or the server, nothing written).

The runs are real `eventlog.agent.graph` runs: after the page's answer, `Graph.resume(run)` goes on
with it, as it goes on from `Graph.resume(run, value=)`. Set EVENTLOG_UI_SCREENSHOTS=1 to write
the screenshots of docs/guides/ui.md into docs/img/.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

from ui_support import get, keep, serving, wait_for_run_page, write_langgraph_thread

import eventlog
from eventlog import events as ev
from eventlog.agent.graph import END, Graph


def review_graph() -> Graph:
    """draft -> review (asks a human: the answer goes in `verdict`) -> publish."""

    def review(values: dict[str, Any], ctx: Any) -> dict[str, Any]:
        return {"verdict": ctx.interrupt("approve the draft?", {"draft": values.get("draft")})}

    graph = Graph("review")
    graph.add_node("draft", lambda values: {"draft": f"an answer about {values.get('topic')}"})
    graph.add_node("review", review)
    graph.add_node("publish", lambda values: {"published": f"{values['draft']} ({values['verdict']})"})
    graph.set_entry("draft")
    graph.add_edge("draft", "review")
    graph.add_edge("review", "publish")
    graph.add_edge("publish", END)
    return graph


def paused_run(log: eventlog.EventLog, run_id: str = "review-1") -> int:
    state = review_graph().compile(log).run(run_id, {"topic": "tides"})
    assert state.status == "paused"
    return log.head(run_id)


def write_key(url: str, run_id: str) -> str:
    _, page, _ = get(f"{url}/run?id={run_id}")
    found = re.search(r'<meta name="eventlog-write" content="([^"]*)">', page)
    assert found is not None
    return found.group(1)


def post(url: str, path: str, body: dict[str, Any], key: str | None) -> tuple[int, str]:
    headers = {"content-type": "application/json"} | ({"x-eventlog-write": key} if key is not None else {})
    status, text, _ = get(url + path, headers, json.dumps(body).encode())
    return status, text


def test_a_fork_with_its_values_edited_then_resumed_goes_on_from_both(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        head = paused_run(log)
        with serving(log, allow_writes=True) as url:
            key = write_key(url, "review-1")
            _, state, _ = get(f"{url}/run/state?id=review-1&at={head}")
            assert 'name="values"' in state and "&#34;topic&#34;: &#34;tides&#34;" in state  # the values, to edit
            assert 'id="resume-form"' in state and "approve the draft?" in state
            edited = {"topic": "tides", "draft": "an edited answer"}
            status, body = post(
                url, "/run/fork", {"run": "review-1", "at": head, "new": "edited", "values": edited}, key
            )
            assert status == 200 and json.loads(body)["run_id"] == "edited"
            fork = log.run_info("edited")
            assert (fork.parent, fork.fork_offset, fork.head) == ("review-1", head, head + 1)
            event = log.entry("edited", head + 1).event
            assert isinstance(event, ev.StateUpdated) and event.values == edited
            assert log.state_at("edited").values["draft"] == "an edited answer"
            assert log.state_at("edited").status == "paused"  # still waiting for the human: answer it here
            fork_head = log.head("edited")
            status, body = post(url, "/run/resume", {"run": "edited", "head": fork_head, "value": "ok by me"}, key)
            assert status == 200 and json.loads(body)["offset"] == fork_head + 1
            answered = log.entry("edited", fork_head + 1).event
            assert isinstance(answered, ev.Resumed) and answered.value == "ok by me" and answered.nodes == ["review"]
            # the run's executor goes on from the log: the node gets the answer, the edit holds
            done = review_graph().compile(log).resume("edited")
            assert done.status == "completed" and done.values["published"] == "an edited answer (ok by me)"
            assert log.state_at("review-1").status == "paused"  # the original is as it was
            # the fork form's edit is refused for a value that is not an object, and a plain fork has none
            status, _ = post(url, "/run/fork", {"run": "review-1", "at": head, "new": "bad", "values": [1]}, key)
            assert status == 400 and "bad" not in log.runs()
            status, _ = post(url, "/run/fork", {"run": "review-1", "at": head, "new": "plain"}, key)
            assert status == 200 and log.head("plain") == head


def test_a_resume_is_refused_unless_the_run_waits_at_the_head_the_page_shows(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        head = paused_run(log)
        log.append("chat", ev.UserMessage(content="hi"))
        with serving(log, allow_writes=True) as url:
            key = write_key(url, "review-1")
            answer = {"run": "review-1", "head": head, "value": True}
            assert post(url, "/run/resume", answer, None)[0] == 403  # no write key: another site's post
            assert post(url, "/run/resume", answer, "wrong")[0] == 403
            assert post(url, "/run/resume", {**answer, "head": head - 1}, key)[0] == 409  # the page is behind
            assert post(url, "/run/resume", {**answer, "number": 99}, key)[0] == 409  # another life
            status, text = post(url, "/run/resume", {"run": "chat", "head": 1, "value": True}, key)
            assert status == 409 and "not paused" in text
            assert post(url, "/run/resume", {"run": "nope", "head": 1, "value": True}, key)[0] == 404
            assert post(url, "/run/resume", {"run": "review-1"}, key)[0] == 400
            status, body, _ = get(url + "/run/resume", {"x-eventlog-write": key}, b"x" * (300 * 1024))
            assert status == 413
            assert log.head("review-1") == head and log.head("chat") == 1  # nothing written
            status, _ = post(url, "/run/resume", answer, key)
            assert status == 200 and log.state_at("review-1").status == "running"
            assert post(url, "/run/resume", {**answer, "head": head + 1}, key)[0] == 409  # answered already
            _, state, _ = get(f"{url}/run/state?id=review-1&at={head}")
            assert 'id="resume-form"' not in state  # an older offset: the answer is given at the head only
        with serving(log) as url:  # read-only: no route writes, no form is shown
            assert post(url, "/run/resume", answer, "")[0] in (404, 405)
            assert post(url, "/run/fork", {"run": "review-1", "at": 1, "new": "x"}, "")[0] in (404, 405)
            _, state, _ = get(f"{url}/run/state?id=review-1&at={head}")
            assert "resume-form" not in state and "fork-form" not in state
        assert log.head("review-1") == head + 1 and "x" not in log.runs()


def test_an_answer_read_on_one_life_never_lands_in_the_next(tmp_path: Path) -> None:
    """The run is deleted and made again, paused at the same head, between the route's read of
    it and its append (a log calls its clock as a write is prepared): the answer is refused."""
    remake: list[Any] = []

    def clock() -> int:
        if remake:
            remake.pop()()
        return time.time_ns()

    with eventlog.open(tmp_path / "log", durability="none", clock=clock) as log:
        head = paused_run(log)
        number = log.run_info("review-1").number

        def again() -> None:
            log.delete_run("review-1")
            assert review_graph().compile(log).run("review-1", {"topic": "something else"}).status == "paused"

        with serving(log, allow_writes=True) as url:
            key = write_key(url, "review-1")
            remake.append(again)
            answer = {"run": "review-1", "head": head, "value": True, "number": number}
            status, text = post(url, "/run/resume", answer, key)
            assert status == 409 and "made again" in text
        assert not remake and log.run_info("review-1").number != number
        assert log.head("review-1") == head and log.state_at("review-1").status == "paused"  # nothing written


def test_an_integrations_run_is_forked_as_it_is_and_a_thread_answered_only_while_it_waits(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        run_id = write_langgraph_thread(log)
        if run_id is None:
            pytest.skip("the langgraph extra is not installed")
        head = log.head(run_id)
        with serving(log, allow_writes=True) as url:
            key = write_key(url, run_id)
            _, state, _ = get(f"{url}/run/state?id={urllib.parse.quote(run_id)}&at={head}")
            assert 'name="values"' not in state and "resume-form" not in state
            edit = {"run": run_id, "at": 2, "new": "lg-edit", "values": {"approved": False}}
            status, text = post(url, "/run/fork", edit, key)
            assert status == 400 and "framework" in text and "lg-edit" not in log.runs()
            status, text = post(url, "/run/resume", {"run": run_id, "head": head, "value": "ok"}, key)
            assert status == 409 and "nothing to answer" in text and log.head(run_id) == head  # resumed already


# -- in the browser ----------------------------------------------------------------------------


def test_in_the_browser_fork_with_edited_values_and_resume(page: Any, tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        head = paused_run(log)
        with serving(log, allow_writes=True) as url:
            page.set_viewport_size({"width": 1400, "height": 860})
            page.goto(f"{url}/run?id=review-1&at={head}")
            page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{head}"] #resume-form')
            # the resume form and the fork form sit above the state, where it is read
            form, tree = (page.locator(s).bounding_box() for s in ("#resume-form", "#inspector .state-tree"))
            assert form is not None and tree is not None and form["y"] < tree["y"]
            page.fill("#resume-value", "{not json")
            page.click("#resume-button")
            page.wait_for_function("() => document.querySelector('.resume-result').textContent.includes('not JSON')")
            assert log.head("review-1") == head
            page.click("#fork-form .fork-edit summary")
            values = json.loads(page.input_value('#fork-form textarea[name="values"]'))
            assert values == log.state_at("review-1", head).values
            page.fill('#fork-form textarea[name="values"]', json.dumps({**values, "draft": "edited in the page"}))
            page.fill('#fork-form input[name="new"]', "review-edited")
            page.mouse.move(0, 0)
            page.screenshot(path=str(tmp_path / "ui-fork-edit.png"))
            keep(tmp_path / "ui-fork-edit.png")
            page.click("#fork-button")
            wait_for_run_page(page, "review-edited")
            assert log.state_at("review-edited").values["draft"] == "edited in the page"
            fork_head = log.head("review-edited")
            page.wait_for_selector(f'#inspector .insp[data-at="{fork_head}"] #resume-form')
            page.fill("#resume-value", '"ship it"')
            page.screenshot(path=str(tmp_path / "ui-resume.png"))
            keep(tmp_path / "ui-resume.png")
            page.click("#resume-button")
            page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{fork_head + 1}"]')
            answered = log.entry("review-edited", fork_head + 1).event
            assert isinstance(answered, ev.Resumed) and answered.value == "ship it"
            assert page.locator("#resume-form").count() == 0  # answered: nothing waits any more
            done = review_graph().compile(log).resume("review-edited")
            assert done.values["published"] == "edited in the page (ship it)"


class _OtherSite(http.server.BaseHTTPRequestHandler):
    """A page of another site that tries to write through the UI: a fetch, and a form posted."""

    target = ""

    def do_GET(self) -> None:
        ui = self.target
        fork = json.dumps({"run": "review-1", "at": 1, "new": "evil"})
        answer = json.dumps({"run": "review-1", "head": 0, "value": "evil"})
        body = f"""<!doctype html><html><body>
<form id="f1" method="post" action="{ui}/run/fork" enctype="text/plain"><input name='{fork[:-1]}, "x": "' value='"}}'></form>
<form id="f2" method="post" action="{ui}/run/resume" enctype="text/plain"><input name='{answer[:-1]}, "x": "' value='"}}'></form>
<script>
window.results = [];
for (const [path, body] of [["/run/fork", {fork!r}], ["/run/resume", {answer!r}]]) {{
  for (const headers of [{{"content-type": "text/plain"}}, {{"content-type": "application/json", "x-eventlog-write": "guess"}}]) {{
    window.results.push(fetch("{ui}" + path, {{method: "POST", body, headers, credentials: "include", mode: "no-cors"}})
      .then(r => "sent " + r.type, e => "refused " + e.message));
  }}
}}
</script></body></html>""".encode()
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


def test_another_site_cannot_fork_or_resume(browser: Any, tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        head = paused_run(log)
        with serving(log, allow_writes=True) as url:
            handler = type("Handler", (_OtherSite,), {"target": url})
            other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=other.serve_forever, daemon=True).start()
            page = browser.new_page()
            try:
                page.goto(f"http://localhost:{other.server_address[1]}/")  # another origin than 127.0.0.1:PORT
                results = page.evaluate("Promise.all(window.results)")
                assert len(results) == 4
                for form in ("#f1", "#f2"):
                    page.goto(f"http://localhost:{other.server_address[1]}/")
                    with page.expect_navigation():
                        page.evaluate(f"document.querySelector('{form}').submit()")
                    assert "write key" in page.content()  # the UI refused it: 403
            finally:
                page.close()
                other.shutdown()
                other.server_close()
            assert sorted(log.runs()) == ["review-1"] and log.head("review-1") == head  # nothing written
