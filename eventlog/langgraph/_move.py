"""`copy_threads`: every checkpoint of some threads, from any LangGraph saver to any other
(`SqliteSaver` or `PostgresSaver` to `EventLogSaver`, and back), through LangGraph's public
saver API only: the source's `list`, the target's `put`, `put_writes` and `delete_thread`.

What is copied, per thread: every checkpoint of every namespace (subgraphs), oldest first,
each with its parent, metadata, channel versions as they are (LangGraph's string versions
too: `EventLogSaver` continues them) and the writes pending on it, task by task in the order
the source reads them. Nothing read runs code: the source, and the target where the copy asks
whether it holds a thread already, are read through a `SafeSerializer` (docs/durability.md,
guarantee 7) that constructs only LangChain's messages and the types LangGraph allows in its
strict mode, and carries any other msgpack value as its stored bytes, which the target's
serializer writes back unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver, CheckpointTuple

from ._events import LangGraphThreadError, id_list
from ._serde import RefusedValueError, copying_reader

__all__ = ["CopyReport", "ThreadExistsError", "ThreadNotFoundError", "copy_threads"]

Progress = Callable[[int, int], None]
"""`progress(done, total)`: checkpoints copied so far, of how many."""


class ThreadExistsError(LangGraphThreadError):
    """A thread to copy holds checkpoints in the target already."""


class ThreadNotFoundError(LangGraphThreadError, LookupError):
    """A thread to copy holds no checkpoint in the source."""


@dataclasses.dataclass(frozen=True)
class CopyReport:
    """What `copy_threads` copied."""

    threads: tuple[str, ...]
    """The threads, in the order they were copied."""
    checkpoints: int
    """Checkpoints written to the target, every namespace counted."""
    writes: int
    """Pending writes written to the target."""


def copy_threads(
    source: BaseCheckpointSaver[Any],
    target: BaseCheckpointSaver[Any],
    thread_ids: Iterable[str] | None = None,
    *,
    replace: bool = False,
    allowed_modules: Iterable[tuple[str, ...] | type] = (),
    progress: Progress | None = None,
) -> CopyReport:
    """Copy every checkpoint of `thread_ids` (default: every thread of `source`) to `target`,
    under the same thread ids; return what was copied.

    Afterwards a graph's `get_state_history` on the target equals it on the source, and the
    graph runs on from there. A thread the source does not hold, or one the target holds
    already (unless `replace`: then the target's is deleted first), is refused by name before
    anything is written (ThreadNotFoundError, ThreadExistsError). `allowed_modules`: classes,
    or `(module, name)` pairs, a "json" value (LangGraph's older format) may construct; a
    msgpack value of any type is copied as its bytes. `progress(done, total)` is called after
    each checkpoint.
    """
    reader = _reading(source, allowed_modules)
    counts = _counts(reader, None if thread_ids is None else id_list("thread_ids", thread_ids))
    looking = _reading(target, allowed_modules, "target")  # what the target holds is read as the source is
    held = [t for t in counts if _holds(looking, t)]
    for thread_id in held:
        if not replace:
            raise ThreadExistsError(
                f"thread {thread_id!r} holds checkpoints in the target already; "
                "delete it there first, or replace it (replace=True, --replace)"
            )
        if type(target).delete_thread is BaseCheckpointSaver.delete_thread:
            raise LangGraphThreadError(
                f"thread {thread_id!r} holds checkpoints in the target, which has no delete_thread to replace it"
            )
    total, done, writes = sum(counts.values()), 0, 0
    form = _version_form(target)
    for thread_id in counts:
        tuples = sorted(_read(reader, thread_id), key=lambda t: str(t.config["configurable"]["checkpoint_id"]))
        if thread_id in held:
            target.delete_thread(thread_id)
        by_id = {(_ns(t.config), _id(t.config)): t for t in tuples}
        for tup in tuples:
            writes += _put(target, tup, by_id, form)
            done += 1
            if progress is not None:
                progress(done, max(total, done))
    return CopyReport(tuple(counts), done, writes)


def _reading(
    saver: BaseCheckpointSaver[Any], allowed_modules: Iterable[tuple[str, ...] | type], side: str = "source"
) -> Any:
    """A shallow clone of `saver` (as LangGraph's `with_allowlist` makes one) that reads through
    `copying_reader`: every read of a copy, of its source and of its target, goes through one."""
    try:
        reading = copying_reader(saver.serde, allowed_modules)
    except TypeError as exc:
        raise LangGraphThreadError(f"the {side} saver's {exc}") from None
    clone = copy.copy(saver)
    clone.serde = reading
    return clone


def _counts(reader: BaseCheckpointSaver[Any], thread_ids: Sequence[str] | None) -> dict[str, int]:
    """How many checkpoints each thread to copy holds in the source (every thread when None);
    a thread named that holds none is refused."""
    counts: dict[str, int] = {}
    if thread_ids is None:
        for tup in _read(reader, None):
            thread_id = str(tup.config["configurable"]["thread_id"])
            counts[thread_id] = counts.get(thread_id, 0) + 1
        return dict(sorted(counts.items()))
    for thread_id in dict.fromkeys(thread_ids):
        counts[thread_id] = sum(1 for _ in _read(reader, thread_id))
        if not counts[thread_id]:
            raise ThreadNotFoundError(f"thread {thread_id!r} holds no checkpoint in the source")
    return counts


def _read(reader: BaseCheckpointSaver[Any], thread_id: str | None) -> Iterator[CheckpointTuple]:
    """Every checkpoint of a thread of the source (of every thread when None); a value refused
    is named with its thread."""
    try:
        yield from reader.list(None if thread_id is None else _config(thread_id))
    except RefusedValueError as exc:
        where = "the source" if thread_id is None else f"thread {thread_id!r}"
        raise RefusedValueError(f"{where}: {exc}") from None


def _holds(saver: BaseCheckpointSaver[Any], thread_id: str) -> bool:
    """Whether `saver` (a `_reading` clone) holds a checkpoint of the thread; one holding a value
    the reader refuses holds one too."""
    try:
        return next(iter(saver.list(_config(thread_id), limit=1)), None) is not None
    except RefusedValueError:
        return True


def _config(thread_id: str, ns: str | None = None, checkpoint_id: str | None = None) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread_id}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _ns(config: RunnableConfig | None) -> str:
    return str((config or {}).get("configurable", {}).get("checkpoint_ns", "") or "")


def _id(config: RunnableConfig | None) -> str | None:
    found = (config or {}).get("configurable", {}).get("checkpoint_id")
    return None if found is None else str(found)


def _version_form(target: BaseCheckpointSaver[Any]) -> Callable[[Any], Any]:
    """A channel version as `target` writes them: an int version (eventlog's) as the string form
    of the same counter for a saver whose versions are strings (`InMemorySaver`, `SqliteSaver`,
    `PostgresSaver`), so that LangGraph never compares the two kinds there; else as it is."""
    if not isinstance(target.get_next_version(None, None), str):
        return lambda version: version
    return lambda version: f"{version:032}.{0.0:016}" if type(version) is int else version


def _put(
    target: BaseCheckpointSaver[Any],
    tup: CheckpointTuple,
    by_id: dict[tuple[str, str | None], Any],
    form: Callable[[Any], Any],
) -> int:
    """Write one checkpoint and its pending writes to `target`, its versions in the target's
    `form`; return how many writes."""
    thread_id = str(tup.config["configurable"]["thread_id"])
    ns, parent_id = _ns(tup.config), _id(tup.parent_config)
    versions = tup.checkpoint["channel_versions"]
    parent = by_id.get((ns, parent_id)) if parent_id is not None else None
    before = {} if parent is None else parent.checkpoint["channel_versions"]
    new_versions = {ch: form(v) for ch, v in versions.items() if before.get(ch) != v}  # what LangGraph passes
    checkpoint: Any = {
        **tup.checkpoint,
        "channel_versions": {ch: form(v) for ch, v in versions.items()},
        "versions_seen": {
            node: {ch: form(v) for ch, v in seen.items()} for node, seen in tup.checkpoint["versions_seen"].items()
        },
    }
    saved = target.put(_config(thread_id, ns, parent_id), checkpoint, tup.metadata, new_versions)
    at = _config(thread_id, ns, str(saved["configurable"]["checkpoint_id"]))
    pending = list(tup.pending_writes or ())
    for task_id, path, items in _tasks(pending):
        regular = [(ch, v) for ch, v in items if ch not in WRITES_IDX_MAP]
        special = [(ch, v) for ch, v in items if ch in WRITES_IDX_MAP]
        for part in (regular, special):  # a regular write's index is its place among the regular ones
            if part:
                target.put_writes(at, part, task_id, path)
    return len(pending)


def _tasks(pending: list[tuple[str, str, Any]]) -> list[tuple[str, str, list[tuple[str, Any]]]]:
    """The pending writes by task, in the order the source reads them, each task with the path to
    write it under. LangGraph's read API does not give a write's task path, only its order (by
    path, task id, index): the path is "" when the task ids alone give that order, and otherwise
    a number that sorts the tasks as the source does."""
    tasks: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in pending:
        tasks.setdefault(str(task_id), []).append((channel, value))
    in_order = list(tasks) == sorted(tasks)
    return [(t, "" if in_order else f"{i:010d}", items) for i, (t, items) in enumerate(tasks.items())]
