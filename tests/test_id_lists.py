"""A str where a list of ids is asked for is refused, never read as the ids of its characters.

`saver.prune("abc", strategy="delete")` once deleted threads "a", "b" and "c"; every call that
takes several thread or run ids (the saver's `prune` and `delete_for_runs` and their async
twins, `copy_threads`, `export_runs`) refuses a str or bytes before it acts, as LangGraph's
`PostgresSaver.prune` does (TypeError), and the runs named by its characters stay whole.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.memory", reason="pip install 'eventlog[test]' (langgraph extras)")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

import eventlog
from eventlog.langgraph import EventLogSaver, copy_threads
from eventlog.transfer import export_runs

THREADS = ["a", "b", "c"]


def two_checkpoints(saver: Any, thread_id: str) -> None:
    """Two checkpoints on the thread, the second with metadata `run_id` "-", which
    `delete_for_runs("a-b")` would name."""
    parent = None
    for n, run_id in ((1, "-"), (2, "-")):
        cp = empty_checkpoint()
        cp["id"] = f"00000000-0000-6000-8000-{n:012d}"
        cp["channel_values"], cp["channel_versions"] = {"x": n}, {"x": n}
        conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
        if parent is not None:
            conf["checkpoint_id"] = parent
        saver.put({"configurable": conf}, cp, {"source": "loop", "step": n, "run_id": run_id}, {"x": n})
        parent = cp["id"]


CALLS: dict[str, Callable[[EventLogSaver, eventlog.EventLog], Any]] = {
    "prune, delete": lambda s, log: s.prune("abc", strategy="delete"),
    "prune, keep_latest": lambda s, log: s.prune("abc"),
    "aprune, delete": lambda s, log: asyncio.run(s.aprune("abc", strategy="delete")),
    "prune, bytes": lambda s, log: s.prune(b"abc", strategy="delete"),  # type: ignore[arg-type]
    "delete_for_runs": lambda s, log: s.delete_for_runs("a-b"),
    "adelete_for_runs": lambda s, log: asyncio.run(s.adelete_for_runs("a-b")),
    "copy_threads": lambda s, log: copy_threads(s, InMemorySaver(), thread_ids="abc"),
    "export_runs": lambda s, log: export_runs(log, io.BytesIO(), run_ids="abc"),
}


@pytest.mark.parametrize("call", list(CALLS))
def test_a_str_of_ids_is_refused_and_changes_nothing(saver: EventLogSaver, call: str) -> None:
    for thread_id in THREADS:
        two_checkpoints(saver, thread_id)
    before = {t: [c.checkpoint["id"] for c in saver.list({"configurable": {"thread_id": t}})] for t in THREADS}
    with pytest.raises(TypeError, match="must be a (sequence|list) of ids, not (str|bytes)"):
        CALLS[call](saver, saver.log)
    after = {t: [c.checkpoint["id"] for c in saver.list({"configurable": {"thread_id": t}})] for t in THREADS}
    assert after == before
    assert all(len(ids) == 2 for ids in after.values())


def test_a_list_of_ids_still_acts(saver: EventLogSaver) -> None:
    """The same calls with a list do what they say: the threads named go, the others stay."""
    for thread_id in THREADS:
        two_checkpoints(saver, thread_id)
    saver.prune(["a"], strategy="delete")
    saver.prune(("b",))
    assert [len(list(saver.list({"configurable": {"thread_id": t}}))) for t in THREADS] == [0, 1, 2]
