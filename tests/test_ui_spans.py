"""`eventlog ui` in a real browser: the waterfall, the progress of a slow read, and the state
tree read a subtree at a time (issue 25, items 2 and 4).

The waterfall of a run shows its turns, steps, LLM and tool calls as bars on a time axis, with
durations and tokens, the totals of the page and of the run; a state that takes over half a
second to come says so while it comes; a subtree of a state is fetched when it is opened, and a
long list shows its next items on asking. One chromium for the module, one page per test. Set
EVENTLOG_UI_SCREENSHOTS=1 to write the screenshots of docs/guides/ui.md into docs/img/.
"""

from __future__ import annotations

import io
import re
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")

from rich.console import Console
from ui_support import get, keep, serving, shoot, write_langgraph_thread

import eventlog
from eventlog import events as ev
from eventlog.demo import run_demo
from eventlog.diff import builtins
from eventlog.ui import spans

DIALOGS_FAIL = True  # any dialog fails a test of this module (conftest `page`)


@pytest.fixture(scope="module")
def demo_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[eventlog.EventLog]:
    path = tmp_path_factory.mktemp("ui-spans") / "demo"
    run_demo(str(path), console=Console(file=io.StringIO()))
    with eventlog.open(path, readonly=True) as log:
        yield log


@pytest.fixture(scope="module")
def url(demo_log: eventlog.EventLog) -> Iterator[str]:
    with serving(demo_log, name="demo.lmdb") as url:
        yield url


def run_url(base: str, run_id: str, **params: Any) -> str:
    return f"{base}/run?" + urllib.parse.urlencode({"id": run_id, **params})


def calls_of(log: eventlog.EventLog, run_id: str) -> tuple[int, int, int, int]:
    """(LLM calls, tool calls, input tokens, output tokens) of the run, added up here."""
    llm = tool = tokens_in = tokens_out = 0
    for e in log.read(run_id):
        if isinstance(e.event, ev.LLMCallCompleted):
            llm, tokens_in, tokens_out = llm + 1, tokens_in + e.event.input_tokens, tokens_out + e.event.output_tokens
        elif isinstance(e.event, ev.ToolCallCompleted):
            tool += 1
    return llm, tool, tokens_in, tokens_out


def test_the_waterfall_of_a_conversation(page: Any, url: str, demo_log: eventlog.EventLog, tmp_path: Path) -> None:
    run_id = "chat-demo"
    page.goto(run_url(url, run_id, view="waterfall"))
    page.wait_for_selector('#inspector .insp[data-kind="state"]')
    rows = page.eval_on_selector_all(
        ".waterfall .wf-row[data-offset]",
        """rows => rows.map(r => {
          const box = r.querySelector('.wf-track').getBoundingClientRect();
          const parts = [...r.querySelectorAll('.wf-track rect')].map(p => p.getBoundingClientRect());
          const bar = {left: Math.min(...parts.map(p => p.left)), width: 0};
          bar.width = Math.max(...parts.map(p => p.right)) - bar.left;
          return {offset: +r.dataset.offset, kind: r.className.match(/k-(\\w+)/)[1],
                  depth: +r.querySelector('.wf-label').className.match(/d(\\d)/)[1],
                  left: bar.left - box.left, width: bar.width, track: box.width,
                  tokens: r.querySelector('.tokens').textContent.trim()};
        })""",
    )
    # every turn, LLM call and tool call of the run is a bar; the calls sit under their turn
    expected = spans.waterfall(list(demo_log.read(run_id)), first_page=True)
    assert [(r["offset"], r["kind"], r["depth"]) for r in rows] == [(s.offset, s.kind, s.depth) for s in expected.spans]
    kinds = [r["kind"] for r in rows]
    assert kinds.count("turn") == 3 and kinds.count("llm") == 5 and kinds.count("tool") == 2
    assert all(r["depth"] == 1 for r in rows if r["kind"] != "turn")
    # on one time axis: a bar starts at or after the one before it, none is too thin to see (2 px
    # at least, whatever the track's width), and none leaves its track
    lefts = [r["left"] for r in rows]
    assert lefts == sorted(lefts) and lefts[-1] > 0.5 * rows[0]["track"]
    assert all(r["width"] >= 2 - 0.01 and r["left"] + r["width"] <= r["track"] + 0.01 for r in rows)
    # tokens: each call's, each turn's its calls' sum, and the page's and the run's totals
    llm, tool, tokens_in, tokens_out = calls_of(demo_log, run_id)
    assert sum(int(r["tokens"].split(" → ")[0].replace(",", "")) for r in rows if r["kind"] == "turn") == tokens_in
    totals = f"{llm} LLM calls · {tokens_in:,} → {tokens_out:,} tokens · {tool} tool calls"
    assert page.inner_text("#wf-page-totals").startswith(totals)
    assert page.inner_text("#wf-run-totals") == totals
    # a bar is an event to select: the state after it, as anywhere in the page
    tool_row = next(r for r in rows if r["kind"] == "tool")
    page.click(f'.wf-row[data-offset="{tool_row["offset"]}"]')
    page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{tool_row["offset"]}"]')
    page.keyboard.press("j")  # and the keyboard steps through the bars
    after = rows[rows.index(tool_row) + 1]["offset"]
    page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{after}"]')
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shoot(page, run_url(url, run_id, view="waterfall", at=tool_row["offset"]), ".insp", tmp_path / "ui-waterfall.png")


def test_the_waterfall_of_a_graph_run_that_failed_and_was_resumed(
    page: Any, url: str, demo_log: eventlog.EventLog
) -> None:
    page.goto(run_url(url, "workflow-retry", view="waterfall"))
    page.wait_for_selector(".waterfall .wf-row[data-offset]")
    failed = page.eval_on_selector_all(".wf-row.st-failed", "rows => rows.map(r => +r.dataset.offset)")
    steps = spans.waterfall(list(demo_log.read("workflow-retry")), first_page=True).spans
    assert failed == [s.offset for s in steps if s.status == "failed"] and len(failed) == 2  # the run and its step
    assert page.inner_text("#wf-run-totals").startswith("0 LLM calls")


def test_a_page_after_the_first_holds_the_spans_begun_before_it(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        events: list[Any] = [ev.TurnStarted(turn=1)]
        for i in range(150):
            call = f"c{i}"
            events += [
                ev.LLMCallStarted(call_id=call, model="m", context_messages=0),
                ev.LLMCallCompleted(
                    call_id=call,
                    model="m",
                    output=ev.Message(role="assistant", content="x"),
                    input_tokens=2,
                    latency_ms=5,
                ),
            ]
        events.append(ev.TurnCompleted(turn=1))
        log.append_many("long", events)
        with serving(log) as url:
            status, body, _ = get(run_url(url, "long", view="waterfall"))  # the last page: 200 of 302 events
            assert status == 200
            fall = spans.waterfall(list(log.read("long", after=log.head("long") - 200)))
            turn = fall.spans[0]
            assert turn.kind == "turn" and turn.depth == 0 and turn.begun_before and turn.end_offset == log.head("long")
            calls = fall.totals.llm_calls
            assert calls == 100 and fall.spans[1].begun_before  # 99 calls, and one begun on the page before
            assert all(s.depth == 1 for s in fall.spans[1:])
            assert turn.totals.input_tokens == fall.totals.input_tokens == 2 * calls
            assert (
                f'data-offset="{fall.spans[1].offset}"' in body
                and f"{calls} LLM calls · {2 * calls} → 0 tokens" in body
            )
            assert "150 LLM calls · 300 → 0 tokens" in body  # the whole run's
            first = spans.waterfall(list(log.read("long", upto=200)), first_page=True).spans[0]
            assert first.kind == "turn" and first.open and first.offset == 1  # ends on a later page


def test_the_waterfall_of_a_langgraph_thread(page: Any, tmp_path: Path) -> None:
    pytest.importorskip("langgraph", reason="the langgraph extra is not installed")
    from eventlog.ui import threads

    with eventlog.open(tmp_path / "log", durability="none") as log:
        thread = write_langgraph_thread(log)
        assert thread is not None
        with serving(log) as url:
            page.goto(run_url(url, thread))
            assert "Waterfall" in page.inner_text(".tabs")
            page.goto(run_url(url, thread, view="waterfall"))
            page.wait_for_selector(".waterfall .wf-row[data-offset]")
            rows = page.eval_on_selector_all(
                ".waterfall .wf-row[data-offset]",
                """rows => rows.map(r => ({offset: +r.dataset.offset, kind: r.className.match(/k-(\\w+)/)[1],
                    status: r.className.match(/st-(\\w+)/)[1], label: r.querySelector('.clip').textContent,
                    depth: +r.querySelector('.wf-label').className.match(/d(\\d)/)[1]}))""",
            )
            expected = threads.thread_waterfall(list(log.read(thread)), first_page=True).spans
            assert [(r["offset"], r["kind"], r["depth"], r["status"]) for r in rows] == [
                (s.offset, s.kind, s.depth, s.status) for s in expected
            ]
            # each checkpoint starts a superstep; each task's writes are a task under the one it ran on
            checkpoints = [e.offset for e in log.read(thread) if type(e.event).__name__ == "CheckpointSaved"]
            supersteps = [r for r in rows if r["kind"] == "superstep"]
            assert [r["offset"] for r in supersteps] == checkpoints
            tasks = [r for r in rows if r["kind"] == "task"]
            assert tasks and all(r["depth"] == 1 for r in tasks)
            assert {r["label"] for r in tasks} >= {"draft", "review"}
            # the interrupt: the review task waits for a human, and so does its superstep
            assert any(r["label"] == "review" and r["status"] == "waiting" for r in tasks)
            assert "waiting for a human" in page.inner_text("#wf-page-totals")
            assert f"{len(supersteps)} supersteps · {len(tasks)} tasks" in page.inner_text("#wf-page-totals")
            shoot(page, run_url(url, thread, view="waterfall", at=tasks[0]["offset"]), ".insp",
                  tmp_path / "ui-langgraph-waterfall.png", 640)  # fmt: skip


def _priced_run(log: eventlog.EventLog) -> None:
    """A turn with a call of a model the prices name (1,000 → 500 tokens) and one of a model they
    do not (200 → 100), and a tool call."""
    said = ev.Message(role="assistant", content="x")
    log.append_many(
        "priced",
        [
            ev.TurnStarted(turn=1),
            ev.LLMCallStarted(call_id="a", model="m-priced"),
            ev.LLMCallCompleted(call_id="a", model="m-priced", output=said, input_tokens=1000, output_tokens=500),
            ev.ToolCallStarted(call_id="t", tool="search", arguments={"q": "x"}),
            ev.ToolCallCompleted(call_id="t", tool="search", output="found"),
            ev.LLMCallStarted(call_id="b", model="m-other"),
            ev.LLMCallCompleted(call_id="b", model="m-other", output=said, input_tokens=200, output_tokens=100),
            ev.TurnCompleted(turn=1),
        ],
    )


def test_the_waterfall_counts_costs_at_the_prices_it_is_given(page: Any, tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        _priced_run(log)
        with serving(log, prices={"m-priced": (2.0, 8.0)}) as url:  # USD per million tokens
            page.goto(run_url(url, "priced", view="waterfall"))
            page.wait_for_selector(".waterfall .wf-row[data-offset]")
            cost = "$0.0060 · 1 call of a model without a price"  # (1,000 x 2 + 500 x 8) / 1e6
            assert page.inner_text("#wf-run-cost") == page.inner_text("#wf-page-cost") == cost
            rows = page.eval_on_selector_all(
                ".waterfall .wf-row[data-offset]",
                """rows => rows.map(r => ({kind: r.className.match(/k-(\\w+)/)[1],
                    cost: (r.querySelector('.tokens .cost') || {textContent: ''}).textContent,
                    title: r.querySelector('.tokens').title}))""",
            )
            assert [(r["kind"], r["cost"]) for r in rows] == [
                ("turn", "$0.0060"), ("llm", "$0.0060"), ("tool", ""), ("llm", "")
            ]  # fmt: skip
            assert rows[0]["title"] == cost and rows[3]["title"] == "$0.0000 · 1 call of a model without a price"
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            shoot(
                page, run_url(url, "priced", view="waterfall", at=1), ".insp", tmp_path / "ui-waterfall-cost.png", 660
            )
        with serving(log) as url:  # no prices: the page says how to give them
            page.goto(run_url(url, "priced", view="waterfall"))
            assert "--prices FILE" in page.inner_text("#wf-run-cost")
            assert page.query_selector(".waterfall .cost") is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("[1, 2]", "an object of models"),
        ('{"m": {"input": 1}}', 'exactly "input" and "output"'),
        ('{"m": {"input": -1, "output": 2}}', "numbers of at least 0"),
        ('{"m": {"input": "1", "output": 2}}', "numbers of at least 0"),
        ('{"m": {"input": true, "output": 2}}', "numbers of at least 0"),
        ("{", "is not JSON"),
    ],
)
def test_a_prices_file_is_refused_with_what_is_wrong(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=re.escape(says)):
        spans.read_prices(path)
    with pytest.raises(ValueError, match="No such file"):
        spans.read_prices(tmp_path / "missing.json")
    assert spans.read_prices(_write(tmp_path / "ok.json", '{"m": {"input": 3, "output": 1.5}}')) == {"m": (3.0, 1.5)}


def test_eventlog_ui_refuses_a_bad_prices_file_before_it_listens(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log") as log:
        log.append("r", ev.TurnStarted(turn=1))
    bad = _write(tmp_path / "prices.json", '{"m": {"input": -1, "output": 0}}')
    done = subprocess.run(
        [sys.executable, "-m", "eventlog", "ui", "--log", str(tmp_path / "log"), "--port", "0", "--prices", str(bad)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--prices:" in done.stderr and "numbers of at least 0" in done.stderr
    assert "listening" not in done.stderr and "at http" not in done.stderr


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_read_over_half_a_second_says_so(page: Any, url: str, browser: Any, tmp_path: Path) -> None:
    page.set_viewport_size({"width": 1400, "height": 560})
    page.goto(run_url(url, "chat-demo", at=3))
    page.wait_for_selector('#inspector .insp[data-kind="state"][data-at="3"]')
    cdp = browser.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send(  # every answer now comes 1.5 s late, as from a slow server
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 1500, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    try:
        page.click('#panel [data-offset="7"]')
        line = page.wait_for_selector("#inspector .progress", timeout=1400)
        assert line is not None
        text = line.inner_text()
        assert text.startswith("Reading the state after offset 7…") and text.endswith(" s")
        page.wait_for_function(  # the time it has taken goes up while it waits
            "() => parseFloat(document.querySelector('#inspector .progress').textContent.split('… ')[1]) >= 1.0"
        )
        page.mouse.move(0, 0)
        page.screenshot(path=str(tmp_path / "ui-progress.png"))
        keep(tmp_path / "ui-progress.png")
        page.wait_for_selector('#inspector .insp[data-kind="state"][data-at="7"]', timeout=10_000)
        assert page.query_selector("#inspector .progress") is None
    finally:
        cdp.send(
            "Network.emulateNetworkConditions",
            {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
        )
    page.click('#panel [data-offset="8"]')  # a fast one: no progress line
    page.wait_for_selector('#inspector .insp[data-kind="state"][data-at="8"]')
    assert page.query_selector("#inspector .progress") is None
    assert msgspec.json.decode(get(f"{url}/run/state.json?id=chat-demo&at=8")[1])["offset"] == 8


def leaves(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """(path, text) of every value the state tree draws as a leaf, as it draws it."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for k, v in items:
        here = (*path, str(k))
        if isinstance(v, (dict, list)) and v:
            yield from leaves(v, here)
        elif isinstance(v, str):
            yield here, f'"{v}"'
        else:
            yield here, msgspec.json.encode(v).decode()


def test_the_state_tree_is_read_a_subtree_at_a_time(page: Any, tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", durability="none") as log:
        events: list[Any] = [ev.UserMessage(content=f"message {i}") for i in range(260)]
        events.append(ev.StateUpdated(values={"plan": {"steps": [{"name": "a", "args": {"deep": [1, None, True]}}]}}))
        log.append_many("big", events)
        at = log.head("big")
        state = builtins(log.state_at("big", at))  # every field, as the tree shows it
        with serving(log) as url:
            asked: list[str] = []
            page.on("request", lambda r: asked.append(r.url) if "/run/state/node" in r.url else None)
            page.goto(run_url(url, "big", at=at))
            page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{at}"]')
            tree = page.locator("#inspector .state-tree")
            assert asked == [] and "deep" not in tree.inner_html() and "message 77" not in tree.inner_html()
            assert page.locator("#inspector .state-tree details[data-node]").count() == 101  # 100 messages, plan
            # open a message: its fields come from the server, once
            page.click("#inspector details[data-node='[\"messages\",0]'] > summary")
            page.wait_for_selector('#inspector details[open] > ul.tree .v-str:text("\\"message 0\\"")')
            assert len(asked) == 1 and "path=%5B%22messages%22%2C0%5D" in asked[0]
            # open everything, and the long list's hidden items too: then it is the whole state
            for _ in range(40):
                left = page.evaluate(
                    """() => {
                      const closed = [...document.querySelectorAll('#inspector details[data-node]:not([open])')];
                      const more = [...document.querySelectorAll('#inspector button[data-more]:not([disabled])')];
                      closed.forEach(d => { d.open = true; });
                      more.forEach(b => b.click());
                      return closed.length + more.length;
                    }"""
                )
                page.wait_for_function(  # every subtree asked for has come
                    "() => !document.querySelector('#inspector details[open] > ul.lazy, #inspector button[data-more][disabled]')"
                )
                if not left:
                    break
            drawn = page.evaluate(
                """() => {
                  const out = [];
                  (function walk(ul, path) {
                    for (const li of ul.children) {
                      const details = li.querySelector(':scope > details');
                      if (details) {
                        const key = details.querySelector(':scope > summary > .t-key').textContent;
                        walk(details.querySelector(':scope > ul.tree'), [...path, key]);
                      } else if (li.querySelector(':scope > .t-key')) {
                        const key = li.querySelector(':scope > .t-key').textContent;
                        out.push([[...path, key], li.textContent.slice(key.length + 1).trim()]);
                      }
                    }
                  })(document.querySelector('#inspector .state-tree > ul.tree'), []);
                  return out;
                }"""
            )
            assert sorted((tuple(p), t) for p, t in drawn) == sorted(leaves(state))
            assert len(state["messages"]) == 260 and len(asked) > 200
            # a path that is not there, or not a path, is said
            status, body, _ = get(f'{url}/run/state/node?id=big&at={at}&path=["messages",999]')
            assert status == 404 and "no map or list" in body
            assert get(f"{url}/run/state/node?id=big&at={at}&path=nope")[0] == 400
