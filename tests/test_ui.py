"""`eventlog ui` over HTTP, on every store: the pages, the state and diff documents, escaping,
the guard (host, token, write key), the live feed, the CLI command and the run-view hook.

The same pages in a real browser are tested in test_ui_browser.py.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

import anyio
from hypothesis import given, settings
from hypothesis import strategies as st
from ui_support import get, serving, write_langgraph_thread, write_wayflow_conversation

import eventlog
from eventlog.agent.readers import reducer_of
from eventlog.cli import diff_states
from eventlog.demo import demo_agent, three_step_graph
from eventlog.diff import messages_apart
from eventlog.events import StepCompleted, UserMessage
from eventlog.ui import live, model, readings
from eventlog.views import view_for_run

ROOT = Path(__file__).resolve().parent.parent
HOSTILE_ID = "<script>window.__pwned=1</script>\"'&amp;\x1b[31m"
HOSTILE_TEXT = '\x1b[31mred\x1b[0m <img src=x onerror="window.__pwned=2"> \u202egnp.exe'


def write_runs(log: eventlog.EventLog) -> None:
    """A graph run, a conversation, and a fork of it, through the public API."""
    three_step_graph().compile(log, policy=eventlog.CheckpointPolicy.every_supersteps(1)).run("graph-1", {"value": 0})
    chat = demo_agent().start_conversation(log, "chat-1")
    chat.send("What's the weather in Paris?")
    chat.send("And in Oslo?")
    log.fork("chat-1", at=9, new_run_id="chat-1-b")


def plain_state(log: eventlog.EventLog, run_id: str, at: int) -> Any:
    """The state as `eventlog state --json` prints it: every field, defaults included."""
    state = log.state_at(run_id, at, reducer=reducer_of(log, run_id))
    return {f: msgspec.to_builtins(getattr(state, f)) for f in type(state).__struct_fields__}


def pre(body: str, element_id: str) -> Any:
    """The JSON inside <pre id=element_id> of an HTML fragment."""
    found = re.search(rf'<pre class="json" id="{element_id}">(.*?)</pre>', body, re.DOTALL)
    assert found, body[:2000]
    return json.loads(html.unescape(found.group(1)))


def test_the_viewer_reads_each_run_as_the_command_line_does(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The state and the diff of every demo run (the conversation loop's runs fold by their own
    reducer, the one their checkpoints name) are the documents `eventlog state --json` and
    `eventlog diff --json` print."""
    import io

    from rich.console import Console

    from eventlog import cli
    from eventlog.demo import run_demo

    path = str(tmp_path / "demo")
    run_demo(path, Console(file=io.StringIO()))
    printed: dict[tuple[str, str], Any] = {}
    with eventlog.open(path, readonly=True) as log:
        heads = {run_id: log.head(run_id) for run_id in log.runs()}
    for run_id, head in heads.items():
        for command in ("state", "diff"):
            argv = ["--log", path, command, run_id, *(["1", str(head)] if command == "diff" else []), "--json"]
            assert cli.main(argv) == 0
            printed[command, run_id] = json.loads(capsys.readouterr().out)
    with eventlog.open(path, readonly=True) as log, serving(log) as url:
        for run_id, head in heads.items():
            _, body, _ = get(f"{url}/run/state.json?id={run_id}&at={head}")
            assert json.loads(body) == printed["state", run_id], run_id
            _, body, _ = get(f"{url}/run/diff?id={run_id}&a=1&b={head}")
            assert pre(body, "diff-json") == printed["diff", run_id], run_id
    assert any("restores" in printed["state", r]["state"] for r in heads)  # a conversation loop's run is among them


def test_pages_states_and_diffs_on_every_store(log: eventlog.EventLog) -> None:
    write_runs(log)
    with serving(log) as url:
        status, body, headers = get(url + "/")
        assert status == 200 and "text/html" in headers["content-type"]
        for run_id in log.runs():
            assert f'data-run="{run_id}"' in body
        assert 'class="d1"' not in body and "run-id d1" in body  # the fork sits under its parent
        for run_id in log.runs():
            head = log.head(run_id)
            for reading in ("", "timeline", "conversation", "steps", "checkpoints"):
                status, body, _ = get(f"{url}/run?id={run_id}&view={reading}")
                assert status == 200, body
            for at in sorted({0, 1, head // 2, head}):
                status, body, _ = get(f"{url}/run/state.json?id={run_id}&at={at}")
                assert status == 200
                doc = json.loads(body)
                assert doc == {
                    "run_id": run_id,
                    "offset": at,
                    "checkpoint_id": None,
                    "state": plain_state(log, run_id, at),
                }
                state = log.state_at(run_id, at, reducer=reducer_of(log, run_id))
                assert msgspec.convert(doc["state"], type(state)) == state
                status, body, _ = get(f"{url}/run/state?id={run_id}&at={at}")
                assert pre(body, "state-json") == doc["state"]
            status, body, _ = get(f"{url}/run/diff?id={run_id}&a=1&b={head}")
            reducer = reducer_of(log, run_id)
            expected = diff_states(
                log.state_at(run_id, 1, reducer=reducer), log.state_at(run_id, head, reducer=reducer)
            )
            assert pre(body, "diff-json") == {
                "run_id": run_id,
                "a": {"offset": 1, "checkpoint_id": None},
                "b": {"offset": head, "checkpoint_id": None},
                **json.loads(msgspec.json.encode(expected)),
            }
        status, body, _ = get(f"{url}/run/prompt?id=chat-1&at=3")
        assert status == 200 and "What&#39;s the weather in Paris?" in body


def test_errors_name_what_went_wrong(log: eventlog.EventLog) -> None:
    write_runs(log)
    with serving(log) as url:
        status, body, _ = get(f"{url}/run?id=nope")
        assert status == 404 and "nope" in body
        status, body, _ = get(f"{url}/run/state?id=graph-1&at=99")
        assert status == 404 and "99" in body and "out of range" in body
        status, body, _ = get(f"{url}/run/state?id=graph-1&at=x")
        assert status == 400 and "whole number" in body
        status, body, _ = get(f"{url}/run/prompt?id=graph-1&at=2")
        assert status == 400 and "not an LLM call" in body


def test_a_long_run_opens_one_page_at_a_time(tmp_path: Path) -> None:
    """A page of a long run is drawn a screen first (around the selected event), and the page
    asks for the rest of it (the bar's `data-rest`)."""
    screen = model.first_screen_events
    with eventlog.open(tmp_path / "log", durability="none") as log:
        n = model.page_events * 3 + 17
        log.append_many("long", [StepCompleted(node="n", superstep=i, update={"i": i}) for i in range(1, n + 1)])
        with serving(log) as url:

            def rows(body: str) -> list[int]:
                return [int(x) for x in re.findall(r'<tr class="ev f-\w+" data-offset="(\d+)"', body)]

            def rest(body: str) -> str:
                found = re.search(r'data-rest="([^"]+)"', body)
                assert found is not None, "no data-rest: the page was drawn whole"
                return get(url + html.unescape(found.group(1)))[1]

            _, body, _ = get(f"{url}/run?id=long&view=timeline")
            assert rows(body) == list(range(n - screen + 1, n + 1))  # the last screen, the head selected
            assert rows(rest(body)) == list(range(n - model.page_events + 1, n + 1))
            _, body, _ = get(f"{url}/run?id=long&view=timeline&after=0")
            assert rows(body) == list(range(model.page_events - screen + 1, model.page_events + 1))
            assert rows(rest(body)) == list(range(model.page_events + 1))  # offset 0: the initial state
            _, body, _ = get(f"{url}/run?id=long&view=timeline&at=300")
            offsets = [int(x) for x in re.findall(r'data-offset="(\d+)"', body)]
            assert 300 in offsets and len(set(offsets)) == screen
            offsets = [int(x) for x in re.findall(r'data-offset="(\d+)"', rest(body))]
            assert 300 in offsets and len(set(offsets)) == model.page_events
            _, body, _ = get(f"{url}/run?id=long&view=timeline&at=300&fragment=1")
            assert "data-rest" not in body and len(rows(body)) == model.page_events  # a page asked for: whole


def test_every_value_from_the_log_is_escaped(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        log.append(HOSTILE_ID, UserMessage(content=HOSTILE_TEXT))
        log.append(HOSTILE_ID, StepCompleted(node=HOSTILE_TEXT, superstep=1, update={HOSTILE_TEXT: HOSTILE_TEXT}))
        log.checkpoints.save(HOSTILE_ID, metadata={"note": HOSTILE_TEXT})
        with serving(log) as url:
            run = "/run?id=" + urllib.parse.quote(HOSTILE_ID)
            pages = [
                "/",
                "/?fragment=1",
                run,
                run + "&view=timeline",
                run + "&view=steps",
                run + "&view=checkpoints",
                run.replace("/run?", "/run/state?") + "&at=2",
                run.replace("/run?", "/run/diff?") + "&a=0&b=2",
            ]
            hostile = urllib.parse.quote(HOSTILE_TEXT)
            pages += [  # what the user typed, shown back: a search, a filtered run, an error page
                f"/?q={hostile}",
                f"/?q={hostile}&fragment=1",
                run + f"&q={hostile}",
                run + f"&q={hostile}&fragment=1",
                run.replace("/run?", "/run/state?") + "&at=9",
                "/run/state?id=" + hostile + "&at=9",
                "/run/find?id=" + urllib.parse.quote(HOSTILE_ID) + "&q=" + hostile,
            ]
            for page in pages:
                status, body, _ = get(url + page)
                assert status == (404 if "at=9" in page else 200), (page, body[:500])
                assert "<script>window" not in body and "<img src=x" not in body, page
                assert "\x1b" not in body and "\u202e" not in body, page
                assert body.count("<script") == (1 if "<html" in body else 0), page  # ui.js only
            _, body, _ = get(url + "/")
            assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in body and "␛[31m" in body


def test_security_headers_host_check_and_token(log: eventlog.EventLog) -> None:
    write_runs(log)
    with serving(log) as url:
        _, _, headers = get(url + "/")
        assert "script-src 'self'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
        assert get(url + "/", {"Host": "attacker.example"})[0] == 403
        assert get(url + "/", {"Host": "localhost:1234"})[0] == 200
    with serving(log, token="s3cret", loopback=False) as url:
        assert get(url + "/")[0] == 401
        assert get(url + "/run?id=graph-1")[0] == 401
        assert get(url + "/", {"Cookie": "eventlog_ui_token=wrong"})[0] == 401
        assert get(url + "/", {"Authorization": "Bearer s3cret"})[0] == 200
        assert get(url + "/", {"Cookie": "eventlog_ui_token=s3cret", "Host": "attacker.example"})[0] == 200
        import http.client

        port = int(url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/run?id=graph-1&token=s3cret")
        response = conn.getresponse()
        assert response.status == 303 and response.getheader("location") == "/run?id=graph-1"
        assert "eventlog_ui_token=s3cret" in response.getheader("set-cookie") and "HttpOnly" in response.getheader(
            "set-cookie"
        )
        conn.close()


def test_fork_only_with_allow_writes(log: eventlog.EventLog) -> None:
    write_runs(log)
    request = json.dumps({"run": "graph-1", "at": 4, "new": "graph-1-b"}).encode()
    with serving(log) as url:
        _, body, _ = get(f"{url}/run/state?id=graph-1&at=4")
        assert "fork-form" not in body
        _, body, _ = get(f"{url}/run?id=graph-1")
        assert "eventlog-write" not in body
        assert get(url + "/run/fork", {"content-type": "application/json"}, request)[0] in (404, 405)
    assert "graph-1-b" not in log.runs()
    with serving(log, allow_writes=True) as url:
        _, body, _ = get(f"{url}/run/state?id=graph-1&at=4")
        assert 'id="fork-form"' in body
        _, page, _ = get(f"{url}/run?id=graph-1")
        key = re.search(r'<meta name="eventlog-write" content="([^"]+)">', page).group(1)
        assert get(url + "/run/fork", {"content-type": "application/json"}, request)[0] == 403
        status, body, _ = get(url + "/run/fork", {"x-eventlog-write": key}, request)
        assert status == 200 and json.loads(body)["run_id"] == "graph-1-b"
        info = log.run_info("graph-1-b")
        assert (info.parent, info.fork_offset) == ("graph-1", 4)
        status, body, _ = get(url + "/run/fork", {"x-eventlog-write": key}, request)
        assert status == 409 and "graph-1-b" in body


def test_feed_end_is_the_last_position(log: eventlog.EventLog) -> None:
    assert live.feed_end(log) == 0
    for i in range(1, 40):
        log.append(f"r{i % 3}", StepCompleted(node="n", superstep=i))
        assert live.feed_end(log) == max(e.position for e in log.feed())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abc"), st.booleans()), max_size=60))
def test_feed_end_after_appends_and_deletes(steps: list[tuple[str, bool]]) -> None:
    with eventlog.open(":memory:") as log:
        for run_id, delete in steps:
            if delete and run_id in log.runs():
                log.delete_run(run_id)
            else:
                log.append(run_id, StepCompleted(node="n", superstep=1))
            end = live.feed_end(log)
            assert end >= max((e.position for e in log.feed()), default=0)
            assert list(log.feed(after=end)) == []  # nothing committed lies past it


def test_follow_yields_entries_as_they_are_committed(log: eventlog.EventLog) -> None:
    log.append("a", StepCompleted(node="n", superstep=1))
    start = live.feed_end(log)
    seen: list[eventlog.Entry] = []

    async def watch() -> None:
        with anyio.fail_after(10):
            async for batch in live.follow(log, start):
                seen.extend(batch)
                if len(seen) >= 5:
                    return

    def write() -> None:
        for i in range(5):
            time.sleep(0.05)
            log.append("b", StepCompleted(node="n", superstep=i + 1))

    writer = threading.Thread(target=write)
    writer.start()
    anyio.run(watch)
    writer.join()
    assert [(e.run_id, e.offset) for e in seen] == [("b", i) for i in range(1, 6)]


# -- the command ---------------------------------------------------------------------------------


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *extra.pop("PYTHONPATH", "").split(os.pathsep)]).rstrip(os.pathsep)
    return {**env, **extra}


class _Served:
    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "eventlog", "ui", "--port", "0", *args],
            stderr=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self.proc.stderr is not None
        first = self.proc.stderr.readline()
        found = re.search(r"(http://\S+)", first)
        assert found, first + self.proc.stderr.read()
        self.url = found.group(1)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=15)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()


def test_cli_serves_the_log_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        write_runs(log)
    served = _Served(["--log", str(tmp_path / "log")], _env())
    try:
        assert served.url.startswith("http://127.0.0.1:") and "token" not in served.url
        status, body, _ = get(served.url)
        assert status == 200 and 'data-run="chat-1-b"' in body
        status, body, _ = get(served.url + "run/state.json?id=graph-1&at=3")
        assert json.loads(body)["state"]["values"] == {"value": 10}
    finally:
        assert served.stop() == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the allocator is chosen on Linux only")
def test_the_server_runs_on_the_c_allocator_unless_pythonmalloc_is_set(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        write_runs(log)

    def allocator(served: _Served) -> tuple[str | None, str | None]:
        environ = Path(f"/proc/{served.proc.pid}/environ").read_bytes().split(b"\0")  # the same process, started again
        found = dict(v.decode().partition("=")[::2] for v in environ if v)
        return found.get("PYTHONMALLOC"), found.get("MALLOC_ARENA_MAX")

    env = {k: v for k, v in _env().items() if k not in ("PYTHONMALLOC", "MALLOC_ARENA_MAX")}
    for chosen, expected in ((None, ("malloc", "2")), ("pymalloc", ("pymalloc", None))):
        served = _Served(["--log", str(tmp_path / "log")], env if chosen is None else {**env, "PYTHONMALLOC": chosen})
        try:
            assert allocator(served) == expected
            assert get(served.url + "run/state.json?id=graph-1&at=3")[0] == 200
        finally:
            assert served.stop() == 0


def test_cli_refuses_an_open_host_without_allow_remote_and_then_wants_a_token(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        write_runs(log)
    p = subprocess.run(
        [sys.executable, "-m", "eventlog", "ui", "--log", str(tmp_path / "log"), "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        check=False,
        env=_env(),
        timeout=60,
    )
    assert p.returncode == 2 and "--allow-remote" in p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "eventlog", "ui", "--log", str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
        check=False,
        env=_env(),
        timeout=60,
    )
    assert p.returncode == 3 and "no log at" in p.stderr
    served = _Served(["--log", str(tmp_path / "log"), "--host", "0.0.0.0", "--allow-remote"], _env())
    try:
        token = re.search(r"\?token=(\S+)", served.url).group(1)
        port = re.search(r":(\d+)/", served.url).group(1)
        assert len(token) >= 24
        assert get(f"http://127.0.0.1:{port}/")[0] == 401
        assert get(f"http://127.0.0.1:{port}/", {"Authorization": f"Bearer {token}"})[0] == 200
    finally:
        assert served.stop() == 0


def test_demo_ends_by_saying_how_to_open_the_ui(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "eventlog", "demo", "--path", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        check=False,
        env=_env(COLUMNS="200"),
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.rstrip().endswith(f"eventlog ui --log {tmp_path / 'demo'} --open")


# -- the run-view hook ---------------------------------------------------------------------------

_FAKEFLOW = '''
"""An integration of its own kinds, with a view, as LangGraph's and WayFlow's will have."""
import eventlog


class Tick(eventlog.Event, tag="fakeflow.tick"):
    channel: str
    value: int


eventlog.register(Tick)


class View:
    name = "fakeflow"
    kind_prefix = "fakeflow."

    def state(self, log, run_id, offset):
        channels, messages = {}, []
        for entry in log.read(run_id, upto=offset):
            channels[entry.event.channel] = entry.event.value
            messages.append({"type": "human" if entry.offset % 2 else "ai", "content": f"<b>tick {entry.event.value}</b>"})
        return {"channel_values": channels, "step": offset, "messages": messages}

    def history(self, log, run_id, limit):
        rows = [{"offset": e.offset, "channel": e.event.channel, "value": e.event.value} for e in log.read(run_id)]
        return ["offset", "channel", "value"], rows[-limit:] if limit else rows


VIEW = View()
'''


def test_a_run_of_an_integration_shows_through_its_view(tmp_path: Path) -> None:
    """A module that registers a view under the `eventlog.views` entry point group (installed
    here as a dist-info directory on the path) decides how its runs show."""
    site = tmp_path / "site"
    (site / "fakeflow-1.0.dist-info").mkdir(parents=True)
    (site / "fakeflow.py").write_text(_FAKEFLOW)
    (site / "fakeflow-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: fakeflow\nVersion: 1.0\n")
    (site / "fakeflow-1.0.dist-info" / "entry_points.txt").write_text("[eventlog.views]\nfakeflow = fakeflow:VIEW\n")
    writer = (
        "import sys, eventlog, fakeflow\n"
        "with eventlog.open(sys.argv[1]) as log:\n"
        "    for i, ch in enumerate(['a', 'b', 'a']):\n"
        "        log.append('ff-1', fakeflow.Tick(channel=ch, value=i + 1))\n"
    )
    env = _env(PYTHONPATH=str(site))
    subprocess.run([sys.executable, "-c", writer, str(tmp_path / "log")], check=True, env=env, timeout=60)
    served = _Served(["--log", str(tmp_path / "log"), "--kinds", "fakeflow"], env)
    try:
        _, body, _ = get(served.url)
        assert 'class="chip k-view">fakeflow<' in body
        status, body, _ = get(served.url + "run?id=ff-1")
        assert status == 200 and 'class="tab on" href="/run?id=ff-1&amp;view=conversation' in body
        assert body.count('<div class="msg r-user"') == 2 and body.count('<div class="msg r-assistant"') == 1
        assert "&lt;b&gt;tick 3&lt;/b&gt;" in body
        _, body, _ = get(served.url + "run?id=ff-1&view=checkpoints&at=2")
        assert body.count('<tr data-offset="') == 3 and "<th>channel</th>" in body
        _, body, _ = get(served.url + "run/state.json?id=ff-1&at=2")
        assert json.loads(body)["state"]["channel_values"] == {"a": 1, "b": 2}
        _, body, _ = get(served.url + "run/diff.json?id=ff-1&a=2&b=3")
        diff = json.loads(body)
        assert diff["fields"] == {
            "channel_values": {"from": {"a": 1, "b": 2}, "to": {"a": 3, "b": 2}},
            "step": {"from": 2, "to": 3},
        }
        assert diff["messages_appended"] == [{"type": "human", "content": "<b>tick 3</b>"}]
    finally:
        assert served.stop() == 0


def _plain(value: Any) -> Any:
    return json.loads(msgspec.json.encode(value))


def test_langgraph_threads_and_wayflow_conversations_show_through_their_views(tmp_path: Path) -> None:
    """The installed integrations' runs: their view names them, gives the state at every
    offset and the checkpoints' history, and its messages read as a chat."""
    with eventlog.open(tmp_path / "log") as log:
        written = [r for r in (write_langgraph_thread(log), write_wayflow_conversation(log)) if r is not None]
        if not written:
            pytest.skip("neither the langgraph nor the wayflow extra is installed")
        with serving(log) as url:
            _, listing, _ = get(url + "/")
            for run_id in written:
                view = view_for_run(log, run_id)
                assert view is not None
                assert f'data-run="{run_id}"' in listing and f'class="chip k-view">{view.name}<' in listing
                head = log.head(run_id)
                for k in range(head + 1):
                    _, body, _ = get(f"{url}/run/state.json?id={run_id}&at={k}")
                    assert json.loads(body)["state"] == _plain(view.state(log, run_id, k)), (run_id, k)
                _, body, _ = get(f"{url}/run/diff.json?id={run_id}&a=1&b={head}")
                a, b = (messages_apart(view.state(log, run_id, k)) for k in (1, head))
                got = json.loads(body)
                assert {k: v for k, v in got.items() if k not in ("run_id", "a", "b")} == _plain(diff_states(a, b))
                # the messages diffed one by one: those appended listed, the list itself not "changed"
                b_messages = _plain(b).get("messages", [])
                assert "messages" not in got["changed"] and "messages" not in got["added"]
                assert got["messages_appended"] == b_messages[len(b_messages) - len(got["messages_appended"]) :]
                assert b_messages and got["messages_appended"], run_id
                status, page, _ = get(f"{url}/run?id={run_id}")
                assert status == 200 and f'class="tab on" href="/run?id={run_id}&amp;view=conversation' in page
                chat = readings.view_transcript(_plain(view.state(log, run_id, head)))
                assert chat and page.count('<div class="msg r-') == len(chat)
                for bubble in chat:
                    assert html.escape(bubble.text or bubble.payload) in page
                _, page, _ = get(f"{url}/run?id={run_id}&view=checkpoints")
                columns, rows = view.history(log, run_id, None)
                assert page.count('<tr data-offset="') == len(rows) > 0
                assert all(f"<th>{html.escape(c)}</th>" in page for c in columns)


def test_a_fork_of_a_thread_its_saver_pruned_shows_by_the_reducer_that_keeps_its_base(tmp_path: Path) -> None:
    """The fork has no checkpoint of its own and its events up to the base went with the
    thread's: the runs list, its page and its state read it from that base, by its view."""
    with eventlog.open(tmp_path / "log") as log:
        if write_langgraph_thread(log, "lg") is None:
            pytest.skip("the langgraph extra is not installed")
        from eventlog.langgraph import VIEW, EventLogSaver

        EventLogSaver(log).prune(["lg"])
        base = log.run_info("lg").base
        log.fork("lg", at=base, new_run_id="lg-fork")
        assert view_for_run(log, "lg-fork") is VIEW
        with serving(log) as url:
            status, listing, _ = get(url + "/")
            assert status == 200 and 'data-run="lg-fork"' in listing
            status, page, _ = get(f"{url}/run?id=lg-fork")
            assert status == 200 and "lg-fork" in page
            status, body, _ = get(f"{url}/run/state.json?id=lg-fork&at={base}")
            assert status == 200 and json.loads(body)["state"] == _plain(VIEW.state(log, "lg-fork", base))
            assert json.loads(body)["state"]["values"] == _plain(VIEW.state(log, "lg", base))["values"]
            status, _, _ = get(f"{url}/run/state?id=lg-fork&at={base}")
            assert status == 200
            status, body, _ = get(f"{url}/run/diff.json?id=lg-fork&a={base}&b={base}")
            assert status == 200 and not json.loads(body)["changed"]


# -- finding things (issue 25, item 3): the server searches, on every store ------------------------


def test_the_server_finds_runs_and_events_on_every_store(
    log: eventlog.EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventlog.events import RunFailed, StepFailed
    from eventlog.ui import find

    events: list[Any] = [StepCompleted(node="n", superstep=i, update={"i": i}) for i in range(1, 41)]
    events[9] = StepFailed(node="n", superstep=10, error="boom")  # offset 10
    events[29] = StepFailed(node="needle", superstep=30, error="bang")  # offset 30
    log.append_many("steps", events)
    log.append("chat", UserMessage(content="hi"))
    log.append_many("bad", [StepCompleted(node="a", superstep=1), RunFailed(error="x")])
    with serving(log) as url:
        _, body, _ = get(f"{url}/?status=failed&fragment=1")
        assert re.findall(r'data-run="([^"]+)"', body) == ["bad"]
        _, body, _ = get(f"{url}/?kind=conversation&fragment=1")
        assert re.findall(r'data-run="([^"]+)"', body) == ["chat"]
        _, body, _ = get(f"{url}/?fragment=1")  # the newest activity first
        assert re.findall(r'data-run="([^"]+)"', body) == ["bad", "chat", "steps"]
        _, body, _ = get(f"{url}/?sort=events&fragment=1")
        assert re.findall(r'data-run="([^"]+)"', body) == ["steps", "bad", "chat"]
        _, body, _ = get(f"{url}/?q=nothing-like-it&fragment=1")
        assert "No run matches an id holding “nothing-like-it”" in body and "searched all 3 runs" in body

        def found(query: str) -> Any:
            status, body, _ = get(f"{url}/run/find?id=steps&{query}")
            assert status == 200, body
            return json.loads(body)

        assert found("kind=failed") == {"offset": 10, "scanned": 10, "done": False}
        assert found("kind=failed&from=10") == {"offset": 30, "scanned": 30, "done": False}
        assert found("kind=failed&from=30") == {"offset": None, "scanned": 40, "done": True}
        assert found("kind=failed&from=30&direction=previous")["offset"] == 10
        assert found("q=NEEDLE") == {"offset": 30, "scanned": 30, "done": False}
        monkeypatch.setattr(find, "scan_events_max", 8)  # a long search goes on where it stopped
        assert found("kind=failed&from=12") == {"offset": None, "scanned": 20, "done": False}
        assert found("kind=failed&from=25&direction=previous") == {"offset": None, "scanned": 16, "done": False}
        _, body, _ = get(f"{url}/run?id=steps&kind=step.failed")
        assert re.findall(r'<tr class="ev f-\w+" data-offset="(\d+)"', body) == []
        assert "No event matches in offsets 1–8: the search stopped there" in body and "search on from 8" in body
        monkeypatch.undo()
        _, body, _ = get(f"{url}/run?id=steps&kind=failed")
        assert re.findall(r'<tr class="ev f-\w+" data-offset="(\d+)"', body) == ["10", "30"]
        _, body, _ = get(f"{url}/run?id=steps&kind=failed&before=29")
        assert re.findall(r'<tr class="ev f-\w+" data-offset="(\d+)"', body) == ["10"]


@given(
    kinds=st.lists(st.sampled_from(["step", "failed", "user"]), min_size=1, max_size=60),
    wanted=st.sampled_from(["step", "failed", "message", "step.failed", ""]),
    text=st.sampled_from(["", "n7", "HI"]),
    start=st.integers(0, 60),
    most=st.integers(1, 5),
    scan=st.integers(1, 70),
)
@settings(max_examples=60)
def test_bounded_scans_find_what_a_full_read_finds(
    kinds: list[str], wanted: str, text: str, start: int, most: int, scan: int
) -> None:
    from eventlog.events import StepFailed
    from eventlog.ui import find

    make = {
        "step": lambda i: StepCompleted(node=f"n{i}", superstep=i),
        "failed": lambda i: StepFailed(node=f"n{i}", superstep=i, error="x"),
        "user": lambda i: UserMessage(content=f"hi {i}"),
    }
    with eventlog.open(":memory:") as log:
        log.append_many("r", [make[k](i + 1) for i, k in enumerate(kinds)])
        head, number = log.head("r"), log.run_info("r").number
        start = min(start, head)
        f = find.EventFilter(kind=wanted, text=text)
        every = [e.offset for e in log.read("r") if f.matches(e)]
        old, find.scan_events_max = find.scan_events_max, scan
        try:
            ahead, reached = find.scan_forward(log, "r", start, head, f, most, number)
            window = [o for o in every if start < o <= reached]
            assert [e.offset for e in ahead] == window[:most]
            assert reached == head or len(ahead) == most or reached == start + scan
            back, low = find.scan_backward(log, "r", start, 0, f, most, number)
            window = [o for o in every if low < o <= start]
            assert [e.offset for e in back] == window[-most:]
            assert low == 0 or len(back) == most or low == start - scan
        finally:
            find.scan_events_max = old


def test_the_runs_list_keeps_up_with_appends_forks_and_deletes(log: eventlog.EventLog) -> None:
    from eventlog.events import RunFailed, RunStarted

    def listed(url: str, query: str = "") -> list[str]:
        _, body, _ = get(f"{url}/?sort=id&fragment=1{query}")
        return re.findall(r'data-run="([^"]+)"', body)

    log.append_many("a", [RunStarted(), StepCompleted(node="n", superstep=1)])
    log.append("b", UserMessage(content="hi"))
    with serving(log) as url:
        assert listed(url) == ["a", "b"] and listed(url, "&status=failed") == []
        log.append("a", RunFailed(error="x"))  # a feed entry: the run is summarized again
        assert listed(url, "&status=failed") == ["a"]
        log.fork("a", at=1, new_run_id="a-fork")  # no feed entry: a new id
        assert listed(url) == ["a", "a-fork", "b"] and listed(url, "&status=running&kind=graph") == ["a-fork"]
        log.delete_run("b")
        assert listed(url) == ["a", "a-fork"]
        log.append_many("b", [RunStarted(), RunFailed(error="y")])  # made again
        assert listed(url, "&status=failed") == ["a", "b"]
        _, body, _ = get(f"{url}/?q=a-fork&fragment=1")
        assert re.search(r'data-run="a-fork".*?<td class="num">1</td>', body, re.DOTALL)


def test_a_langgraph_thread_reads_by_what_it_changed_newest_checkpoint_first(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        run_id = write_langgraph_thread(log)
        if run_id is None:
            pytest.skip("the langgraph extra is not installed")
        with serving(log) as url:
            _, page, _ = get(f"{url}/run?id={run_id}&view=timeline")
            whats = [html.unescape(w) for w in re.findall(r'<td class="what">([^<]*)', page)]
            kinds = re.findall(r'<span class="kind">(langgraph\.[a-z]+)</span>', page)
            assert kinds and len(whats) >= len(kinds)
            # a checkpoint by the channels it sets, writes by their node and channels: no serialized values
            assert any(w.startswith("checkpoint ") and "sets " in w for w in whats), whats
            assert any(w.startswith("draft writes ") and "messages" in w for w in whats), whats
            assert any(w.startswith("review writes ") and "__interrupt__" in w for w in whats), whats
            assert not any('"data"' in w or '"chunks"' in w or "msgpack" in w for w in whats), whats
            # the checkpoints tab: newest first, model.history_rows_max of them a page
            _, tab, _ = get(f"{url}/run?id={run_id}&view=checkpoints")
            table = tab[tab.index('<table class="history">') :]
            offsets = [int(o) for o in re.findall(r'<tr data-offset="(\d+)"', table)]
            assert len(offsets) >= 3 and offsets == sorted(offsets, reverse=True)
            assert f"checkpoints 1–{len(offsets)}, newest first" in tab and 'id="history-older"' not in tab
            old = model.history_rows_max
            model.history_rows_max = 2
            pages = []
            try:
                for n in range(0, len(offsets) // 2 + 1):
                    _, tab, _ = get(f"{url}/run?id={run_id}&view=checkpoints&page={n}")
                    table = tab[tab.index('<table class="history">') :]
                    pages.append([int(o) for o in re.findall(r'<tr data-offset="(\d+)"', table)])
                    assert ('id="history-newer"' in tab) == (n > 0)
                    assert ('id="history-older"' in tab) == (2 * (n + 1) <= len(offsets)), n
                    if pages[-1]:
                        assert f"checkpoints {2 * n + 1}–{2 * n + len(pages[-1])}, newest first" in tab
                status, _, _ = get(f"{url}/run?id={run_id}&view=checkpoints&page=-1")
                assert status == 400
            finally:
                model.history_rows_max = old
            assert [o for p in pages for o in p] == offsets  # every checkpoint once, in order, a page at a time


def test_a_state_too_long_to_show_is_not_encoded_whole() -> None:
    cap = model.json_inline_bytes_max
    small = {"messages": [{"role": "user", "content": "x" * 100}] * 10}
    json_text, size = model.pretty_or_none(small)
    assert json_text is not None and size == len(msgspec.json.encode(small))
    big = {"messages": [{"role": "user", "content": "x" * 1000}] * 100_000}  # about 100 MB as JSON
    t0 = time.perf_counter()
    json_text, size = model.pretty_or_none(big)
    assert json_text is None and size == cap + 1
    assert time.perf_counter() - t0 < 0.5  # counted up to the cap, not encoded whole (that takes seconds)
    edge = {"s": "y" * (cap - 8)}  # just under and just over the cap, exactly
    assert model.pretty_or_none(edge)[0] is not None
    assert model.pretty_or_none({"s": "y" * (cap - 7)})[0] is None


def test_values_edited_by_hand_leave_a_paused_run_paused_in_the_runs_list() -> None:
    from eventlog import events as ev

    summary_of = model.summary_of
    with eventlog.open(":memory:") as log:
        log.append_many("r", [ev.RunStarted(input={"x": 1}), ev.Interrupted(nodes=["a"], reason="ok?")])
        log.append("r", ev.StateUpdated(values={"x": 2}))
        log.fork("r", at=log.head("r"), new_run_id="r-edit")
        log.append("r-edit", ev.StateUpdated(values={"x": 3}))
        assert [summary_of(log, log.run_info(run)).status for run in ("r", "r-edit")] == ["paused", "paused"]
        log.append("r", ev.Resumed(value="yes"))
        assert summary_of(log, log.run_info("r")).status == "running"
