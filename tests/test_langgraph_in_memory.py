"""EventLogSaver reads what InMemorySaver reads, after any sequence of the calls LangGraph makes.

A property drives both savers with one sequence of `put` (a child of any saved checkpoint, a
new root, or a checkpoint saved already put again as it was: a retry after a lost answer),
`put_writes` onto any saved checkpoint and `delete_thread` (or their async twins), on two namespaces, with int or
string channel versions and channels that grow, are replaced, emptied and filled again; then
every read LangGraph makes is compared, by the saver that wrote and by one on the log opened
again; and shared out between two savers (two workers on one thread), read by each. A
checkpoint put again with other values is refused and changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.checkpoint.memory", reason="pip install 'eventlog[test]' (langgraph extras)")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

import eventlog
from eventlog.langgraph import EventLogSaver, LangGraphThreadError
from eventlog.langgraph import _saver as saver_module

NAMESPACES = ["", "child:1"]
CHANGES = ["set a", "grow m", "replace m", "empty e", "fill e"]

_OPS = st.lists(
    st.one_of(
        # put: namespace, which saved checkpoint is the parent (counted back from the latest),
        # a new root instead, the channels it changes, or the parent put again as it was
        st.tuples(
            st.just("put"),
            st.sampled_from(NAMESPACES),
            st.integers(0, 5),
            st.booleans(),
            st.lists(st.sampled_from(CHANGES), max_size=3, unique=True),
            st.booleans(),
        ),
        st.tuples(
            st.just("writes"),
            st.sampled_from(NAMESPACES),
            st.integers(0, 6),
            st.sampled_from(["t1", "t2"]),
            st.lists(st.sampled_from(["a", "m", "__error__", "__interrupt__"]), min_size=1, max_size=3),
        ),
        st.tuples(st.just("delete")),
    ),
    min_size=1,
    max_size=20,
)
_threads = itertools.count()


def checkpoint_id(n: int) -> str:
    return f"00000000-0000-6000-8000-{n:012d}"


class Play:
    """One sequence of calls, made on a saver. Channel versions are drawn from one counter, so that
    no two values of a channel share a version (InMemorySaver keys stored values by version, and
    LangGraph draws versions no two branches share: a random fraction after the counter)."""

    def __init__(self, thread_id: str, strings: bool, asynchronous: bool = False) -> None:
        self.thread_id, self.strings, self.asynchronous = thread_id, strings, asynchronous
        self.saved: dict[str, list[tuple[Any, dict[str, Any], dict[str, Any]]]] = {ns: [] for ns in NAMESPACES}
        self.puts = self.versions = 0

    def version(self) -> int | str:
        self.versions += 1
        return f"{self.versions:032}.{0.5:016}" if self.strings else self.versions

    def put(self, saver: Any, ns: str, back: int, root: bool, changes: list[str], again: bool) -> None:
        saved = self.saved[ns]
        conf: dict[str, Any] = {"thread_id": self.thread_id, "checkpoint_ns": ns}
        if again and saved:
            cp, parent_conf, md = saved[-1 - back % len(saved)]
            self.call(saver, "put", {"configurable": parent_conf}, cp, md, dict(cp["channel_versions"]))
            return
        values: dict[str, Any] = {}
        versions: dict[str, Any] = {}
        if saved and not root:
            parent = saved[-1 - back % len(saved)][0]
            conf["checkpoint_id"] = parent["id"]
            values = {ch: list(v) if isinstance(v, list) else v for ch, v in parent["channel_values"].items()}
            versions = dict(parent["channel_versions"])
        self.puts += 1
        new: dict[str, Any] = {}
        for change in changes:
            if change == "empty e" and "e" not in values:
                continue
            ch = change[-1]
            if change == "set a":
                values["a"] = self.puts
            elif change == "grow m":
                values["m"] = [*values.get("m", []), f"item {self.puts}"]
            elif change == "replace m":
                values["m"] = [f"new {self.puts}"]
            elif change == "empty e":
                del values["e"]
            else:
                values["e"] = {"k": self.puts}
            versions[ch] = new[ch] = self.version()
        cp = empty_checkpoint()
        cp["id"], cp["ts"] = checkpoint_id(self.puts), "2025-01-01T00:00:00+00:00"
        cp["channel_values"], cp["channel_versions"] = values, versions
        cp["versions_seen"] = {"node": dict(versions)}
        cp["updated_channels"] = sorted(new)
        md: Any = {"source": "loop", "step": self.puts, "parents": {}}
        self.call(saver, "put", {"configurable": conf}, cp, md, new)
        saved.append((cp, conf, md))

    def writes(self, saver: Any, ns: str, target: int, task: str, channels: list[str], i: int) -> None:
        saved = self.saved[ns]
        if saved:
            cid = saved[-1 - target % len(saved)][0]["id"]
            config: Any = {"configurable": {"thread_id": self.thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}
            self.call(saver, "put_writes", config, [(ch, f"op {i}") for ch in channels], task)

    def call(self, saver: Any, name: str, *args: Any) -> None:
        """The saver's method, or its async twin run to its end."""
        if self.asynchronous:
            asyncio.run(getattr(saver, f"a{name}")(*args))
        else:
            getattr(saver, name)(*args)

    def run(self, saver: Any, ops: list[tuple[Any, ...]]) -> None:
        for i, op in enumerate(ops):
            if op[0] == "put":
                self.put(saver, *op[1:])
            elif op[0] == "writes":
                self.writes(saver, *op[1:], i)
            else:
                self.call(saver, "delete_thread", self.thread_id)
                self.saved = {ns: [] for ns in NAMESPACES}


def plain(t: Any) -> Any:
    """A tuple as compared: its checkpoint, metadata, parent id and pending writes."""
    if t is None:
        return None
    parent = None if t.parent_config is None else t.parent_config["configurable"]["checkpoint_id"]
    return t.checkpoint, t.metadata, parent, t.pending_writes


def reads(saver: Any, thread_id: str, puts: int) -> list[Any]:
    """Every read LangGraph makes of the thread: each namespace's latest and each id by get_tuple,
    its listing whole and with a filter and limit, and the thread's listing across namespaces
    (ordered by id: InMemorySaver lists namespace by namespace, SqliteSaver and PostgresSaver
    newest first across them, as EventLogSaver does)."""
    out: list[Any] = []
    for ns in NAMESPACES:
        conf = {"thread_id": thread_id, "checkpoint_ns": ns}
        out.append(plain(saver.get_tuple({"configurable": conf})))
        out += [
            plain(saver.get_tuple({"configurable": {**conf, "checkpoint_id": checkpoint_id(n)}}))
            for n in range(1, puts + 1)
        ]
        out.append([plain(t) for t in saver.list({"configurable": conf})])
        out.append([plain(t) for t in saver.list({"configurable": conf}, filter={"source": "loop"}, limit=2)])
        before = {"configurable": {**conf, "checkpoint_id": checkpoint_id(puts // 2 + 1)}}
        out.append([plain(t) for t in saver.list({"configurable": conf}, before=before)])
    listed = [plain(t) for t in saver.list({"configurable": {"thread_id": thread_id}})]
    out.append(sorted(listed, key=lambda t: t[0]["id"], reverse=True))
    return out


@settings(
    max_examples=int(os.environ.get("EVENTLOG_TEST_EXAMPLES", "50")),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    deadline=None,
)
@given(ops=_OPS, strings=st.booleans(), asynchronous=st.booleans())
def test_every_read_is_in_memory_savers(
    open_log: Callable[..., eventlog.EventLog],
    monkeypatch: pytest.MonkeyPatch,
    ops: list[tuple[Any, ...]],
    strings: bool,
    asynchronous: bool,
) -> None:
    """After any sequence of puts, writes and deletes (sync, or their async twins), every read
    gives what InMemorySaver gives, by the saver that wrote and by one on the log opened again."""
    monkeypatch.setattr(saver_module, "SHARE_SECONDS", 0.0)  # no put follows here to share with
    thread_id = f"same-{next(_threads)}"
    memory = InMemorySaver()
    played = Play(thread_id, strings)
    played.run(memory, ops)
    puts = played.puts
    expected = reads(memory, thread_id, puts)
    log = open_log()
    with contextlib.closing(EventLogSaver(log)) as saver:
        Play(thread_id, strings, asynchronous).run(saver, ops)
        assert reads(saver, thread_id, puts) == expected
    log.close()
    log = open_log()
    with contextlib.closing(EventLogSaver(log)) as fresh:
        assert reads(fresh, thread_id, puts) == expected
    log.close()


class Alternating:
    """Two savers seen as one: each call goes to the saver the schedule names next (two workers
    on one thread, each with its own cache of it)."""

    def __init__(self, savers: list[EventLogSaver], schedule: list[int]) -> None:
        self.savers, self.schedule, self.calls = savers, schedule, 0

    def __getattr__(self, name: str) -> Any:
        saver = self.savers[self.schedule[self.calls % len(self.schedule)]]
        self.calls += 1
        return getattr(saver, name)


@settings(
    max_examples=int(os.environ.get("EVENTLOG_TEST_EXAMPLES", "50")),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    deadline=None,
)
@given(ops=_OPS, strings=st.booleans(), schedule=st.lists(st.integers(0, 1), min_size=1, max_size=8))
@example(  # a put made again by the worker that has not seen the thread since its first put
    ops=[("put", "", 0, False, [], False), ("put", "", 0, False, [], False), ("writes", "", 0, "t1", ["a"]),
         ("put", "", 0, False, [], True)],
    strings=False,
    schedule=[1, 0, 0, 1],
)  # fmt: skip
def test_two_workers_on_one_thread_read_what_in_memory_saver_reads(
    backend: str,
    open_log: Callable[..., eventlog.EventLog],
    monkeypatch: pytest.MonkeyPatch,
    ops: list[tuple[Any, ...]],
    strings: bool,
    schedule: list[int],
) -> None:
    """The calls of one sequence shared out between two savers (on PostgreSQL each on a log of
    its own, as two processes; elsewhere two savers on one log), in any schedule: each saver
    then reads what InMemorySaver reads after the whole sequence."""
    monkeypatch.setattr(saver_module, "SHARE_SECONDS", 0.0)
    thread_id = f"two-{next(_threads)}"
    memory = InMemorySaver()
    played = Play(thread_id, strings)
    played.run(memory, ops)
    expected = reads(memory, thread_id, played.puts)
    first = open_log()
    second = open_log() if backend == "postgres" else first
    savers = [EventLogSaver(first), EventLogSaver(second)]
    try:
        Play(thread_id, strings).run(Alternating(savers, schedule), ops)
        for saver in savers:
            assert reads(saver, thread_id, played.puts) == expected
    finally:
        for saver in savers:
            saver.close()
        first.close()
        if second is not first:
            second.close()


@pytest.mark.parametrize("which", ["head", "older"])
@pytest.mark.parametrize("change", ["values", "metadata", "parent"])
def test_a_checkpoint_put_again_otherwise_is_refused(saver: EventLogSaver, which: str, change: str) -> None:
    """A saved checkpoint put again with other values, metadata or parent raises
    LangGraphThreadError naming it, and every read stays as it was (its pending writes too)."""
    play = Play(f"again-{which}-{change}", strings=False)
    for changes in (["set a"], ["grow m"], ["grow m", "fill e"]):
        play.put(saver, "", 0, False, changes, False)
    play.writes(saver, "", 0 if which == "head" else 1, "t1", ["a", "__interrupt__"], 0)
    before = reads(saver, play.thread_id, 3)
    cp, conf, md = play.saved[""][-1 if which == "head" else -2]
    if change == "values":
        cp = {**cp, "channel_values": {**cp["channel_values"], "m": ["edited"]}}
    elif change == "metadata":
        md = {**md, "step": 99}
    else:
        conf = {"thread_id": play.thread_id, "checkpoint_ns": ""}
    with pytest.raises(LangGraphThreadError, match=f"checkpoint {cp['id']!r} is saved already"):
        saver.put({"configurable": conf}, cp, md, {})
    assert reads(saver, play.thread_id, 3) == before


@pytest.mark.parametrize("config", [None, {}])
def test_no_config_lists_every_thread(saver: EventLogSaver, config: Any) -> None:
    """`list(None)` and `list({})` list every thread's checkpoints, as InMemorySaver does (before,
    `{}` raised KeyError)."""
    memory = InMemorySaver()
    ops: list[tuple[Any, ...]] = [("put", ns, 0, False, ["set a"], False) for ns in NAMESPACES] * 2
    for s in (memory, saver):
        for thread_id in ("one", "two"):
            Play(thread_id, strings=False).run(s, ops)

    def listed(s: Any) -> list[Any]:
        rows = [
            (t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_ns"], plain(t))
            for t in s.list(config)
        ]
        return sorted(rows, key=lambda row: (row[0], row[1], row[2][0]["id"]))

    assert listed(saver) == listed(memory)
    assert len(listed(saver)) == 8
