"""What EventLogSaver gives a graph is the graph's own, and what it keeps reads and runs on as on
InMemorySaver: no object shared between two snapshots of a history; an edit made in place saved
whatever it changes, at any depth; a prune that keeps what a `DeltaChannel` is rebuilt from; a
thread moved back to LangGraph's own savers that runs on there.
"""

from __future__ import annotations

import datetime
import operator
import os
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.checkpoint.conformance", reason="pip install 'eventlog[test]' (langgraph extras)")

import pydantic.v1
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.types import Command, Overwrite, interrupt
from pydantic import BaseModel, Field, SecretStr
from test_langgraph_graphs import same_on_both
from typing_extensions import TypedDict

import eventlog
from eventlog.langgraph import EventLogSaver, SafeSerializer, copy_threads


class Notes(TypedDict, total=False):
    messages: Annotated[list, add_messages]
    notes: Annotated[list, operator.add]
    ledger: Annotated[list, operator.add]


def two_steps(saver: Any) -> Any:
    g = StateGraph(Notes)
    g.add_node("a", lambda s: {"messages": [AIMessage(content="answer", id="a1")], "notes": [{"by": "a"}]})
    g.add_node("b", lambda s: {"notes": [{"by": "b"}]})
    g.add_edge(START, "a")
    g.add_edge("a", "b")
    g.add_edge("b", END)
    return g.compile(checkpointer=saver)


CONFIG: Any = {"configurable": {"thread_id": "t"}}


def test_no_two_snapshots_of_a_history_share_an_object(saver: EventLogSaver) -> None:
    def story(saver: Any) -> Any:
        graph = two_steps(saver)
        graph.invoke({"messages": [HumanMessage(content="question", id="h1")], "notes": []}, CONFIG)
        snaps = list(graph.get_state_history(CONFIG))  # newest first: after b, after a, the input
        snaps[1].values["messages"][0].content = "edited in one snapshot"
        snaps[1].values["notes"][0]["by"] = "edited too"
        untouched = (snaps[2].values["messages"][0].content, snaps[0].values["notes"][0]["by"])
        fork = graph.update_state(snaps[2].config, {"messages": snaps[2].values["messages"]})
        return untouched, graph.get_state(fork).values["messages"][0].content

    assert same_on_both(story, saver) == (("question", "a"), "question")


def refund_graph(saver: Any) -> Any:
    def agent(state: Notes) -> dict[str, Any]:
        call = {"name": "refund", "args": {"amount": 1, "notify": 1, "rate": 0.0}, "id": "c1"}
        return {
            "messages": [AIMessage(content="", id="ai1", tool_calls=[call])],
            "ledger": [{"amount": Decimal("1.0")}],
        }

    g = StateGraph(Notes)
    g.add_node("agent", agent)
    g.add_edge(START, "agent")
    g.add_edge("agent", END)
    return g.compile(checkpointer=saver)


def test_an_edit_in_place_to_an_equal_value_of_another_kind_is_saved(saver: EventLogSaver) -> None:
    """`1` to `True`, `0.0` to `-0.0`, `Decimal("1.0")` to `Decimal("1.00")`: equal under `==`,
    another value as stored."""

    def story(saver: Any) -> Any:
        graph = refund_graph(saver)
        graph.invoke({"messages": [HumanMessage(content="refund me", id="h1")], "ledger": []}, CONFIG)
        values = graph.get_state(CONFIG).values
        messages, ledger = values["messages"], values["ledger"]
        messages[1].tool_calls[0]["args"].update(notify=True, rate=-0.0)
        ledger[0]["amount"] = Decimal("1.00")
        graph.update_state(CONFIG, {"messages": messages[1:], "ledger": Overwrite([*ledger, {"amount": Decimal("2")}])})
        after = graph.get_state(CONFIG).values
        args = after["messages"][1].tool_calls[0]["args"]
        return repr(args), str(args["rate"]), repr(after["ledger"])

    assert same_on_both(story, saver) == (
        "{'amount': 1, 'notify': True, 'rate': -0.0}", "-0.0", "[{'amount': Decimal('1.00')}, {'amount': Decimal('2')}]"
    )  # fmt: skip


def _edited_in_place(saver: Any, before: Any, edit: Callable[[Any], None], look: Callable[[Any], Any]) -> Any:
    """A node stores `[{"k": before}]`; the state read back is edited in place (`edit` of that
    item) and written with one more item; `look` of the value read after."""
    g = StateGraph(Notes)
    g.add_node("a", lambda s: {"notes": [{"k": before}]})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    graph = g.compile(checkpointer=saver)
    graph.invoke({"notes": []}, CONFIG)
    notes = graph.get_state(CONFIG).values["notes"]
    edit(notes[0])
    graph.update_state(CONFIG, {"notes": Overwrite([*notes, {"k": 0}])})
    return look(graph.get_state(CONFIG).values["notes"][0]["k"])


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ([1, 2], {1, 2}),
        ([1, 2], frozenset({1, 2})),
        ("12345678-1234-5678-1234-567812345678", uuid.UUID("12345678-1234-5678-1234-567812345678")),
        ("1.50", Decimal("1.50")),
        ("2024-01-01T12:00:00", datetime.datetime(2024, 1, 1, 12)),
        (
            datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.UTC),
            datetime.datetime(2024, 1, 1, 14, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        ),
    ],
    ids=["set", "frozenset", "uuid", "decimal", "datetime", "offset"],
)
def test_an_edit_in_place_to_a_value_of_another_kind_written_alike_is_saved(
    saver: EventLogSaver, before: Any, after: Any
) -> None:
    """A nested value changed to one that msgpack would write alike (a set for a list, a UUID
    for its text, another offset of one instant): the saver's comparison still tells them apart."""

    def story(saver: Any) -> Any:
        return _edited_in_place(
            saver, before, lambda item: item.update(k=after), lambda got: (type(got).__name__, repr(got))
        )

    assert same_on_both(story, saver) == (type(after).__name__, repr(after))


@pytest.mark.parametrize("case", ["reshaped", "one-element-of-many"])
def test_an_edit_in_place_to_an_array_is_saved(saver: EventLogSaver, case: str) -> None:
    """A numpy array in an earlier item, reshaped in place (the same bytes, another shape) or
    changed in one element of 2,000 (its `repr` elides the middle): the edit is saved."""
    np = pytest.importorskip("numpy")

    def edit(item: Any) -> None:
        array = item["k"].copy()  # read back from bytes: read-only
        if case == "reshaped":
            array.shape = (2, 2)
        else:
            array[1000] = 42.0
        item["k"] = array

    def look(array: Any) -> Any:
        return array.shape, array.tolist()

    before = np.zeros(4) if case == "reshaped" else np.zeros(2000)
    got = same_on_both(lambda s: _edited_in_place(s, before.copy(), edit, look), saver)
    assert got[0] == (2, 2) if case == "reshaped" else got[1][1000] == 42.0


@dataclass
class _Hidden:
    shown: int
    hidden: int = field(default=0, repr=False)


class _HiddenModel(BaseModel):
    shown: int
    hidden: int = Field(default=0, repr=False)


@pytest.mark.parametrize("kind", [_Hidden, _HiddenModel], ids=["dataclass", "pydantic"])
def test_an_edit_in_place_to_a_field_its_repr_hides_is_saved(tmp_path: Path, kind: Any) -> None:
    """A field a type leaves out of its `repr` (`repr=False`), in an earlier item of a type let in
    by `allowed_modules`, changed in place: the edit is saved, as on InMemorySaver."""

    def edit(item: Any) -> None:
        item["k"].hidden = 7

    def story(saver: Any) -> Any:
        return _edited_in_place(saver, kind(shown=1), edit, lambda value: (type(value), value.hidden))

    serde = SafeSerializer(allowed_modules=[kind])
    with EventLogSaver.from_path(tmp_path / "log", serde=serde) as saver:
        assert same_on_both(story, saver) == (kind, 7)  # type: ignore[arg-type]


class _HiddenV1(pydantic.v1.BaseModel):
    shown: int
    hidden: int = pydantic.v1.Field(default=0, repr=False)


def _secret_edit(item: Any) -> None:
    item["k"] = SecretStr("new secret")


def _v1_edit(item: Any) -> None:
    item["k"].hidden = 7


@pytest.mark.parametrize(
    ("before", "edit", "look", "after"),
    [
        (SecretStr("old secret"), _secret_edit, lambda v: v.get_secret_value(), "new secret"),
        (_HiddenV1(shown=1), _v1_edit, lambda v: v.hidden, 7),
    ],
    ids=["secret", "pydantic-v1"],
)
def test_an_edit_in_place_to_a_value_only_the_serializer_sees_is_saved(
    tmp_path: Path, before: Any, edit: Any, look: Any, after: Any
) -> None:
    """A value whose `repr` hides its state and that is none of the kinds the saver writes by
    their fields (a secret, a pydantic v1 model with a field left out of its `repr`), in an
    earlier item, changed in place: the edit is saved, as on InMemorySaver."""
    serde = SafeSerializer(allowed_modules=[type(before)])
    with EventLogSaver.from_path(tmp_path / "log", serde=serde) as saver:
        assert same_on_both(lambda s: _edited_in_place(s, before, edit, look), saver) == after  # type: ignore[arg-type]


@pytest.mark.parametrize("n", [15, 16, 65_535, 65_536])
def test_a_list_of_any_length_that_grew_is_stored_as_its_tail(tmp_path: Path, n: int) -> None:
    """A list of `n` items (msgpack writes the length of a list of fewer than 16, 2**16 and more
    in headers of three sizes) with one more appended: the put stores the item appended, and
    then an item edited in place is stored with the whole list again."""
    from eventlog.langgraph._events import CheckpointSaved

    g = StateGraph(Notes)
    g.add_node("a", lambda s: {"notes": list(range(n))})
    g.add_edge(START, "a")
    g.add_edge("a", END)
    with EventLogSaver.from_path(tmp_path / "log") as saver:
        graph = g.compile(checkpointer=saver)
        graph.invoke({"notes": []}, CONFIG)
        graph.update_state(CONFIG, {"notes": [-1]})
        graph.update_state(CONFIG, {"notes": Overwrite([-2, *graph.get_state(CONFIG).values["notes"][1:]])})
        puts = [e.event for e in saver.log.read("t") if isinstance(e.event, CheckpointSaved)]
        assert graph.get_state(CONFIG).values["notes"] == [-2, *range(1, n), -1]
    grew, edited = puts[-2], puts[-1]
    assert "notes" in grew.tails and "notes" not in grew.chunks
    assert "notes" in edited.chunks and "notes" not in edited.tails


def test_a_list_holding_values_stored_in_another_form_is_stored_as_its_tail(tmp_path: Path) -> None:
    """An agent loop of one invoke whose messages hold a tuple and an `OrderedDict` (stored as a
    list and a map, and read back so): each put stores the messages it appended, not the whole
    list again."""
    from langchain_core.messages import ToolMessage

    from eventlog.langgraph._events import CheckpointSaved

    class Chat(TypedDict):
        messages: Annotated[list, add_messages]

    def agent(s: Chat) -> dict[str, Any]:
        n = len(s["messages"])
        meta = {"pair": (1, 2), "ordered": OrderedDict(a=1)}
        return {
            "messages": [
                AIMessage(f"step {n}", response_metadata=meta, tool_calls=[{"name": "f", "args": {}, "id": f"c{n}"}])
            ]
        }

    def tool(s: Chat) -> dict[str, Any]:
        return {"messages": [ToolMessage("result", tool_call_id=s["messages"][-1].tool_calls[0]["id"])]}

    g = StateGraph(Chat)
    g.add_node("agent", agent)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: END if len(s["messages"]) > 20 else "tool")
    g.add_edge("tool", "agent")
    with EventLogSaver.from_path(tmp_path / "log") as saver:
        g.compile(checkpointer=saver).invoke({"messages": [HumanMessage("hi")]}, {**CONFIG, "recursion_limit": 100})
        puts = [e.event for e in saver.log.read("t") if isinstance(e.event, CheckpointSaved)]
    assert sum("messages" in p.chunks for p in puts) == 1  # the first put stores the list whole
    assert sum("messages" in p.tails for p in puts) >= 19


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=4)
    | st.binary(max_size=4)
    | st.uuids()
    | st.decimals(allow_nan=False, places=2, max_value=100, min_value=-100)
    | st.datetimes(timezones=st.sampled_from([None, datetime.UTC]))
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.frozensets(_SCALARS, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=8,
)


def _alike(x: Any, flip: Callable[[], bool]) -> Any:
    """`x` with some of its values (as `flip` says) replaced by values `==` to them, or written
    alike by msgpack, but of another kind or form: the edits a compare by value must not miss."""
    if isinstance(x, dict):
        return {k: _alike(v, flip) for k, v in x.items()}
    if isinstance(x, list | tuple):
        items = [_alike(v, flip) for v in x]
        return (tuple(items) if isinstance(x, list) else items) if flip() else type(x)(items)
    if isinstance(x, frozenset):
        return set(x) if flip() else x
    if not flip():
        return x
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return float(x) if abs(x) < 2**53 else x
    if isinstance(x, float):
        return -x if x == 0 else x
    if isinstance(x, bytes):
        return bytearray(x)
    if isinstance(x, uuid.UUID):
        return str(x)
    if isinstance(x, Decimal):
        return x.quantize(Decimal("0.001"))
    if isinstance(x, datetime.datetime) and x.tzinfo is not None:
        return x.astimezone(datetime.timezone(datetime.timedelta(hours=2)))
    return x


@settings(max_examples=int(os.environ.get("EVENTLOG_TEST_EXAMPLES", "300")), deadline=None)
@given(a=_VALUES, flips=st.lists(st.booleans(), min_size=1, max_size=40), message=st.booleans())
def test_items_the_saver_takes_for_the_same_are_stored_alike(a: Any, flips: list[bool], message: bool) -> None:
    """The compare a `put` makes of a list's items with the saved ones (`same_items`) says "the
    same" only of items LangGraph's serializer writes byte for byte alike: an edit to a value
    `==` to the old one, or of another kind, is never lost by being taken for it (a message
    holding the values, or the values alone)."""
    from eventlog.langgraph._serde import SafeSerializer
    from eventlog.langgraph._write import same_items, written

    left = iter(flips * 8)
    b = _alike(a, lambda: next(left, False))
    if message:
        a, b = AIMessage(content="x", additional_kwargs={"v": a}), AIMessage(content="x", additional_kwargs={"v": b})
    serde = SafeSerializer()
    try:
        stored = serde.dumps_typed([a])
    except TypeError:  # a value LangGraph cannot store (an int past 64 bits): no put to compare
        return
    saved = written([a])
    if saved is not None and same_items(saved, [b]):
        assert stored == serde.dumps_typed([b])


def extend(state: list[Any], writes: list[Any]) -> list[Any]:
    out = list(state)
    for w in writes:
        out.extend(w)
    return out


@pytest.mark.parametrize("every", [1000, 2])
def test_a_prune_keeps_what_a_delta_channel_is_rebuilt_from(saver: EventLogSaver, every: int) -> None:
    """`every`: how often the channel snapshots its value (never in this thread, or every two
    updates). A prune keeps the latest checkpoint's value whole, and still prunes what it can."""

    # a class would not see `every`: its annotations are read later, at module level
    items = TypedDict("items", {"items": Annotated[list, DeltaChannel(extend, snapshot_frequency=every)]})  # noqa: UP013
    g = StateGraph(items)
    g.add_node("step", lambda s: {"items": ["from the node"]})
    g.add_edge(START, "step")
    g.add_edge("step", END)
    graph = g.compile(checkpointer=saver)
    for i in range(6):
        graph.invoke({"items": [f"turn {i}"]}, CONFIG)
    before = graph.get_state(CONFIG).values
    assert len(before["items"]) == 12
    saver.prune(["t"], strategy="keep_latest")
    assert graph.get_state(CONFIG).values == before
    graph.invoke({"items": ["turn 6"]}, CONFIG)
    assert graph.get_state(CONFIG).values["items"] == [*before["items"], "turn 6", "from the node"]
    if every == 2:
        assert saver.log.run_info("t").base > 0  # it pruned back to a snapshot of the channel


class Chat(TypedDict):
    messages: Annotated[list, add_messages]


def review_graph(saver: Any) -> Any:
    def review(state: Chat) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"reviewed: {interrupt('ok?')}")]}

    g = StateGraph(Chat)
    g.add_node("draft", lambda s: {"messages": [AIMessage(content="draft")]})
    g.add_node("review", review)
    g.add_edge(START, "draft")
    g.add_edge("draft", "review")
    g.add_edge("review", END)
    return g.compile(checkpointer=saver)


def targets(tmp_path: Path) -> list[Any]:
    out: list[Any] = [InMemorySaver()]
    try:
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver
    except ImportError:
        return out
    sq = SqliteSaver(sqlite3.connect(tmp_path / "back.sqlite", check_same_thread=False))
    sq.setup()
    return [*out, sq]


def test_a_thread_moved_to_langgraphs_own_savers_runs_on_there(saver: EventLogSaver, tmp_path: Path) -> None:
    graph = review_graph(saver)
    graph.invoke({"messages": [HumanMessage(content="q1")]}, CONFIG)  # waits in review
    for target in targets(tmp_path):
        copy_threads(saver, target, ["t"])
        there = review_graph(target)
        assert there.get_state(CONFIG).next == ("review",)
        out = there.invoke(Command(resume="yes"), CONFIG)
        assert [m.content for m in out["messages"]] == ["q1", "draft", "reviewed: yes"]
        out = there.invoke({"messages": [HumanMessage(content="q2")]}, CONFIG)
        assert [m.content for m in out["messages"]][-2:] == ["q2", "draft"]


@pytest.mark.parametrize("evicted", [False, True], ids=["cached", "evicted"])
def test_a_step_a_worker_began_on_a_thread_it_made_never_lands_in_its_next_life(
    open_log: Callable[..., eventlog.EventLog], evicted: bool
) -> None:
    """Worker A's first put makes the thread; during A's node, worker B deletes the thread and
    starts it again. A's step is refused, whether A still caches the thread or let go of it."""
    log = open_log()
    a, b = EventLogSaver(log, cache_size=2), EventLogSaver(log)

    def build(saver: Any, node: Callable[[Any], Any]) -> Any:
        g = StateGraph(Chat)
        g.add_node("n", node)
        g.add_edge(START, "n")
        g.add_edge("n", END)
        return g.compile(checkpointer=saver)

    other = build(b, lambda s: {"messages": [AIMessage(content="life 2 answer", id="a2")]})

    def slow(state: Any) -> Any:
        if evicted:  # A serves other threads meanwhile: its cache lets this one go
            for i in range(3):
                a.get_tuple({"configurable": {"thread_id": f"other-{i}"}})
        b.delete_thread("t")
        other.invoke({"messages": [HumanMessage(content="life 2", id="h2")]}, CONFIG, durability="sync")
        return {"messages": [AIMessage(content="life 1 answer", id="a1")]}

    with pytest.raises(eventlog.errors.RunReplacedError):
        build(a, slow).invoke({"messages": [HumanMessage(content="life 1", id="h1")]}, CONFIG, durability="sync")
    contents = [[m.content for m in s.values.get("messages", [])] for s in other.get_state_history(CONFIG)]
    assert not any("life 1" in c for snap in contents for c in snap), contents


def test_a_thread_another_worker_pruned_reads_as_pruned(open_log: Callable[..., eventlog.EventLog]) -> None:
    log = open_log()
    a, b = EventLogSaver(log), EventLogSaver(log)
    graph_a, graph_b = review_graph(a), review_graph(b)
    for i in range(3):
        graph_a.invoke({"messages": [HumanMessage(content=f"q{i}")]}, CONFIG)
        graph_a.invoke(Command(resume="yes"), CONFIG)
    history = list(graph_a.get_state_history(CONFIG))
    b.prune(["t"], strategy="keep_latest")
    after = list(graph_a.get_state_history(CONFIG))  # A's cache of the thread is older than the prune
    assert len(after) == len(list(graph_b.get_state_history(CONFIG))) < len(history)
    assert a.get_tuple(history[-1].config) is None  # a pruned checkpoint: gone, as on B
    graph_a.invoke({"messages": [HumanMessage(content="on")]}, CONFIG)
