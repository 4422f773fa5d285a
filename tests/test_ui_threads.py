"""`eventlog ui` over a LangGraph thread, in a real browser (issue 25, item 1): its supersteps (a
checkpoint and the tasks that ran on it, with the channels they wrote, an interrupt as waiting
for a human), its checkpoints as a tree of branches once time travel made one, the diff of two
offsets message by message, and its timeline told by what each event changes.

Set EVENTLOG_UI_SCREENSHOTS=1 to write the screenshots of docs/guides/ui.md into docs/img/.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("uvicorn", reason="the UI needs its extra: pip install '.[ui]'")
pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

from ui_support import draft_then_review, get, pick, serving, shoot, write_langgraph_thread

import eventlog
from eventlog.ui import model, threads
from eventlog.views import view_for_run

THREAD = "lg-thread"

DIALOGS_FAIL = True  # any dialog fails a test of this module (conftest `page`)


def time_travel(log: eventlog.EventLog) -> None:
    """The thread of ui_support, then a branch: the checkpoint after `draft` edited by hand
    (`update_state` on an older checkpoint), which LangGraph makes a child of that one."""
    from langchain_core.messages import AIMessage

    from eventlog.langgraph import EventLogSaver

    assert write_langgraph_thread(log, THREAD) == THREAD
    saver = EventLogSaver(log)
    config = {"configurable": {"thread_id": THREAD}}
    history = list(saver.list(config))
    older = next(c for c in history if c.metadata.get("step") == 1)  # after draft, before review
    graph = _graph(saver)  # the same nodes and channels: update_state needs only the graph's shape
    graph.update_state(older.config, {"messages": [AIMessage(content="A branch: an answer written by hand")]})


def _graph(saver: Any) -> Any:
    from langgraph.types import interrupt

    def draft(state: Any) -> dict[str, Any]:
        return {}

    def review(state: Any) -> dict[str, Any]:
        interrupt({})
        return {}

    return draft_then_review(draft, review, saver)


@pytest.fixture(scope="module")
def thread_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[eventlog.EventLog]:
    with eventlog.open(tmp_path_factory.mktemp("ui-threads") / "log", durability="none") as log:
        time_travel(log)
        yield log


@pytest.fixture(scope="module")
def url(thread_log: eventlog.EventLog) -> Iterator[str]:
    with serving(thread_log, name="threads.lmdb") as url:
        yield url


def run_url(base: str, run_id: str, **params: Any) -> str:
    return f"{base}/run?" + urllib.parse.urlencode({"id": run_id, **params})


def test_supersteps_of_a_thread(page: Any, url: str, thread_log: eventlog.EventLog, tmp_path: Path) -> None:
    page.goto(run_url(url, THREAD, view="steps"))
    page.wait_for_selector('#inspector .insp[data-kind="state"]')
    assert page.inner_text(".tabs .tab.on") == "Supersteps"
    kinds = [type(e.event).__struct_config__.tag for e in thread_log.read(THREAD)]
    steps = page.locator(".superstep")
    assert steps.count() == kinds.count("langgraph.checkpoint")
    nodes = page.eval_on_selector_all(
        ".superstep .node",
        "ns => ns.map(n => [n.querySelector('.node-name').textContent, n.querySelector('.node-status').textContent,"
        " n.querySelector('pre') ? n.querySelector('pre').textContent : ''])",
    )
    assert len(nodes) == kinds.count("langgraph.writes")
    names = [n[0] for n in nodes]
    assert "draft" in names and "review" in names
    assert ["review", "waiting"] in [n[:2] for n in nodes]  # the interrupt(): waiting for a human
    assert any(n[0] == "draft" and "messages" in n[2] for n in nodes)  # the channels it wrote
    # a node is an event: selecting it shows the state with its pending writes, decoded by the view
    waiting = page.locator(".node.n-waiting").first
    offset = int(waiting.get_attribute("data-offset"))
    pick(page, waiting, f'#inspector .insp[data-kind="state"][data-at="{offset}"] .waiting')
    assert "Waiting for a human" in page.inner_text("#inspector .waiting")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shoot(page, run_url(url, THREAD, view="steps", at=offset), ".insp", tmp_path / "ui-langgraph-steps.png")


def _tag(entry: Any) -> str:
    return str(type(entry.event).__struct_config__.tag)


def _checkpoints_first(entries: list[Any]) -> list[Any]:
    """The thread's entries with every checkpoint before the writes pending on it (the order
    of `sync` durability), whatever order this run of the fixture wrote them in."""
    saved = {e.event.checkpoint_id for e in entries if _tag(e) == "langgraph.checkpoint"}
    out: list[Any] = []
    seen: set[str] = set()
    early: dict[str, list[Any]] = {}
    for entry in entries:
        cid = getattr(entry.event, "checkpoint_id", None)
        if _tag(entry) == "langgraph.writes" and cid in saved and cid not in seen:
            early.setdefault(cid, []).append(entry)  # written before its checkpoint: moved after it
            continue
        out.append(entry)
        if _tag(entry) == "langgraph.checkpoint":
            seen.add(cid)
            out += early.pop(cid, [])
    return out


def test_writes_saved_before_their_checkpoint_are_one_superstep(thread_log: eventlog.EventLog) -> None:
    """Under LangGraph's `async` durability a checkpoint is saved while the next superstep runs,
    so its tasks' writes can come first in the thread: still one superstep per checkpoint,
    with the same nodes as when the checkpoint came first."""
    in_order = _checkpoints_first(list(thread_log.read(THREAD)))
    first = next(i for i, e in enumerate(in_order) if _tag(e) == "langgraph.writes")
    owner = next(i for i, e in enumerate(in_order) if _tag(e) == "langgraph.checkpoint"
                 and e.event.checkpoint_id == in_order[first].event.checkpoint_id)  # fmt: skip
    assert owner < first
    moved = in_order[:owner] + in_order[owner + 1 : first + 1] + [in_order[owner]] + in_order[first + 1 :]
    expected, reordered = threads.thread_supersteps(in_order), threads.thread_supersteps(moved)
    assert len(reordered) == len(expected) == sum(_tag(e) == "langgraph.checkpoint" for e in in_order)
    assert [[n.node for n in s.nodes] for s in reordered] == [[n.node for n in s.nodes] for s in expected]
    assert all(s.events and s.events[0].kind == "langgraph.checkpoint" for s in reordered)


def test_a_time_travel_branch_is_a_branch_of_the_tree(
    page: Any, url: str, thread_log: eventlog.EventLog, tmp_path: Path
) -> None:
    info = thread_log.run_info(THREAD)
    tree, _ = threads.branches(thread_log, THREAD, info)
    assert len(tree) == 1 and len(tree[0].children) == 2  # the thread as it went, and the branch
    page.goto(run_url(url, THREAD, view="checkpoints"))
    page.wait_for_selector("#branch-tree")
    lines = page.eval_on_selector_all("#branch-tree .br-line", "ls => ls.map(l => l.textContent.trim())")
    assert len(lines) == 3 and sum("a branch from" in line for line in lines) == 2
    # the checkpoints table: newest first
    offsets = page.eval_on_selector_all("table.history tr[data-offset]", "rs => rs.map(r => +r.dataset.offset)")
    assert offsets == sorted(offsets, reverse=True) and offsets[0] == max(
        c.offset for c in thread_log.checkpoints.list(THREAD)
    )
    branch = tree[0].children[-1]
    page.click(f'#branch-tree .br-line[data-offset="{branch.last}"]')
    page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{branch.last}"]')
    state = model.state_doc(thread_log, THREAD, branch.last, view_for_run(thread_log, THREAD))["state"]
    assert "A branch: an answer written by hand" in json.dumps(state)
    page.click('#inspector [data-show="json"]')
    assert "A branch: an answer written by hand" in page.inner_text("#state-json")
    shoot(
        page, run_url(url, THREAD, view="checkpoints", at=branch.last), ".insp", tmp_path / "ui-langgraph-branches.png"
    )


def test_the_checkpoints_tab_pages_back_to_the_first(
    page: Any, url: str, thread_log: eventlog.EventLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(model, "history_rows_max", 2)  # two a page: the thread's few checkpoints make pages
    everyone = sorted((c.offset for c in thread_log.checkpoints.list(THREAD)), reverse=True)
    page.goto(run_url(url, THREAD, view="checkpoints"))
    seen: list[int] = []
    for n in range((len(everyone) + 1) // 2):
        page.wait_for_selector("#history-range")
        rows = page.eval_on_selector_all("table.history tr[data-offset]", "rs => rs.map(r => +r.dataset.offset)")
        assert page.inner_text("#history-range").startswith(f"checkpoints {2 * n + 1}–{2 * n + len(rows)}")
        assert (page.query_selector("#history-newer") is not None) == (n > 0)
        seen += rows
        if page.query_selector("#history-older") is None:
            break
        page.click("#history-older")
        page.wait_for_url(re.compile(rf"page={n + 1}"))
    assert seen == everyone  # each checkpoint once, newest first, back to the first
    page.click("#history-newer")
    page.wait_for_selector("#history-range")
    assert page.query_selector("#history-older") is not None


def test_the_diff_of_a_thread_is_message_by_message(
    page: Any, url: str, thread_log: eventlog.EventLog, tmp_path: Path
) -> None:
    head = thread_log.head(THREAD)
    first = next(
        e.offset for e in thread_log.read(THREAD) if type(e.event).__struct_config__.tag == "langgraph.checkpoint"
    )
    page.goto(run_url(url, THREAD, view="timeline", at=first, b=head))
    page.wait_for_selector('#inspector .insp[data-kind="diff"]')
    text = page.inner_text("#inspector .insp").lower()
    assert "messages appended" in text and "why is the sea salty?" in text
    assert page.locator('#inspector .c-mod .t-key:text-is("messages")').count() == 0  # not the whole list changed
    _, body, _ = get(f"{url}/run/diff.json?id={THREAD}&a={first}&b={head}")
    diff = json.loads(body)
    assert "messages" not in diff["changed"] and diff["messages_appended"]
    # the timeline tells each event by what it changes
    page.click(".tabs .tab >> text=Timeline")
    page.wait_for_selector("table.timeline")
    whats = page.eval_on_selector_all("table.timeline td.what", "ts => ts.map(t => t.textContent.trim())")
    assert any(re.match(r"checkpoint \S+ ← \S+ · ", w) for w in whats)
    assert all("msgpack" not in w and '"data"' not in w for w in whats)
    shoot(
        page,
        run_url(url, THREAD, view="timeline", at=first, b=head),
        '.insp[data-kind="diff"]',
        tmp_path / "ui-langgraph-diff.png",
    )
