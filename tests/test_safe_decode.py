"""Nothing stored runs code when it is read (docs/durability.md, guarantee 7).

A hostile log holds LangGraph blobs that name a callable (`os.system`, `subprocess.run`,
`pathlib.Path.touch`) through every msgpack extension LangGraph writes, its older "json" form and
a "pickle" blob, each of which would create a marker file if a decoder imported and called what it
names; and a WayFlow conversation whose snapshot names types a restore must not build. The log
is read through the LangGraph saver (its default serde), a compiled graph, the run views, the UI
(pages and JSON routes), export and import (library and a real `eventlog` subprocess), and the
command line (`state`, `history`, `events`, `diff`, `export`, `import`), on every store: the
marker never appears. Allowed types (LangChain's messages) still read back as objects in the
saver; other types show as data in the views. A control test shows that LangGraph's default
`JsonPlusSerializer()` does run these payloads.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import os
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph", reason="the langgraph extra is not installed")

import ormsgpack
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

import eventlog
from eventlog.langgraph import VIEW, EventLogSaver, RefusedValueError, SafeSerializer
from eventlog.transfer import export_runs, import_runs

ROOT = Path(__file__).resolve().parent.parent


def _ext(code: int, *fields: Any) -> ormsgpack.Ext:
    return ormsgpack.Ext(code, ormsgpack.packb(list(fields)))


def hostile_values(marker: Path) -> dict[str, Any]:
    """Channel values that create `marker` when a decoder imports and calls what they name."""
    touch, argv = f"touch {marker}", ["touch", str(marker)]
    return {
        "constructor": _ext(0, "os", "system", touch),
        "enum": _ext(0, "subprocess", "call", argv),  # an Enum is stored as (module, name, value)
        "positional": _ext(1, "os", "system", [touch]),
        "keywords": _ext(2, "subprocess", "run", {"args": argv}),  # dataclass, namedtuple, time
        "method": _ext(3, "os", "system", touch, "__call__"),
        "method_of_allowed_type": _ext(3, "pathlib", "Path", str(marker), "touch"),
        "pydantic_v1": _ext(4, "subprocess", "run", {"args": argv}),
        "pydantic_v2": _ext(5, "subprocess", "run", {"args": argv}, "model_validate_json"),
        "delta_snapshot": ormsgpack.Ext(7, ormsgpack.packb(_ext(0, "os", "system", touch))),
        "numpy_of_objects": ormsgpack.Ext(6, ormsgpack.packb(["O", [1], "C", b"\0" * 8])),
        "unknown_code": _ext(42, "os", "system", touch),
    }


def hostile_blobs(marker: Path) -> dict[str, tuple[str, bytes]]:
    """Whole blobs as another program may store them: LangGraph's "json" form and a pickle."""
    touch, argv = f"touch {marker}", ["touch", str(marker)]
    return {
        "json_lc2": (
            "json",
            json.dumps({"lc": 2, "type": "constructor", "id": ["os", "system"], "args": [touch]}).encode(),
        ),
        "json_lc1": (
            "json",
            json.dumps(
                {"lc": 1, "type": "constructor", "id": ["subprocess", "run"], "kwargs": {"args": argv}}
            ).encode(),
        ),
    }


def refused_blobs(marker: Path) -> dict[str, tuple[str, bytes]]:
    """Blobs no reader decodes: each makes the saver refuse its checkpoint by name."""
    deep = ormsgpack.packb(_ext(0, "os", "system", f"touch {marker}"))
    for _ in range(200):
        deep = ormsgpack.packb(ormsgpack.Ext(7, deep))
    return {
        "pickle": ("pickle", f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()),  # pickle protocol 0, by hand
        "deep": ("msgpack", deep),
        "foreign": ("cloudpickle", b"\x80\x05."),
    }


class Raw:
    """A value the planting serializer stores as the given (type, bytes)."""

    def __init__(self, typed: tuple[str, bytes]) -> None:
        self.typed = typed


class Planter(SafeSerializer):
    """How a hostile program writes: a `Raw` value, or metadata holding one under `raw`, is
    stored as it is (reading stays safe)."""

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, dict) and isinstance(obj.get("raw"), Raw):
            obj = obj["raw"]
        return obj.typed if isinstance(obj, Raw) else super().dumps_typed(obj)


def plant_thread(
    log: eventlog.EventLog,
    thread_id: str,
    values: dict[str, Any],
    writes: dict[str, Any],
    metadata: Any = None,
    tail: Any = 2,
    extra: Any = None,
) -> None:
    """A LangGraph thread of two checkpoints whose second holds `values`, `metadata`, `tail`
    appended to the list `[1]` (stored alone) and `extra` as a key of its own, with `writes` pending."""
    saver = EventLogSaver(log, serde=Planter())
    try:
        config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        first = empty_checkpoint()
        first["channel_values"] = {"messages": [HumanMessage(content="hi", id="m1")], "items": [1]}
        first["channel_versions"] = {"messages": 1, "items": 1}
        config = saver.put(config, first, {"source": "input", "step": -1}, dict(first["channel_versions"]))
        second: Any = empty_checkpoint()
        second["channel_values"] = {
            "messages": [*first["channel_values"]["messages"], AIMessage(content="yo", id="m2")],
            "items": [*first["channel_values"]["items"], tail],
        }
        second["channel_values"].update(values)
        second["channel_versions"] = dict.fromkeys(second["channel_values"], 2)
        if extra is not None:
            second["planted_extra"] = extra
        metadata = metadata or {"source": "loop", "step": 0}
        if "constructor" in values:
            metadata["evil"] = values["constructor"]
        config = saver.put(config, second, metadata, dict(second["channel_versions"]))
        if writes:
            saver.put_writes(config, list(writes.items()), "task-1")
    finally:
        saver.close()


def write_hostile_log(log: eventlog.EventLog, marker: Path) -> None:
    """Thread `evil` (every value decodes to data), one thread per refused blob."""
    values = hostile_values(marker)
    values["message_with_evil_field"] = HumanMessage(
        content="look", id="m3", additional_kwargs={"x": _ext(0, "os", "system", f"touch {marker}")}
    )
    values.update({name: Raw(blob) for name, blob in hostile_blobs(marker).items()})
    writes = {"w_constructor": values["constructor"], "w_json": Raw(hostile_blobs(marker)["json_lc2"])}
    touch = _ext(0, "os", "system", f"touch {marker}")
    plant_thread(log, "evil", values, writes, tail=touch, extra=touch)
    for name, blob in refused_blobs(marker).items():
        plant_thread(log, f"refused-{name}", {"bad": Raw(blob)}, {})
    not_a_mapping = Raw(("msgpack", ormsgpack.packb(_ext(0, "os", "system", f"touch {marker}"))))
    plant_thread(log, "refused-metadata", {}, {}, metadata={"raw": not_a_mapping})


def check_saver_reads(log: eventlog.EventLog, marker: Path) -> None:
    """The saver's default serde: allowed types are objects, the rest data; refused blobs named."""
    saver = EventLogSaver(log)
    try:
        config: Any = {"configurable": {"thread_id": "evil", "checkpoint_ns": ""}}
        got = saver.get_tuple(config)
        assert got is not None
        values = got.checkpoint["channel_values"]
        assert [type(m) for m in values["messages"]] == [HumanMessage, AIMessage]
        assert [m.content for m in values["messages"]] == ["hi", "yo"]
        message = values["message_with_evil_field"]
        assert isinstance(message, HumanMessage) and message.additional_kwargs == {"x": f"touch {marker}"}
        assert values["constructor"] == f"touch {marker}"
        assert values["keywords"] == {"args": ["touch", str(marker)]}
        assert values["method_of_allowed_type"] == str(marker)
        assert values["json_lc2"] == [f"touch {marker}"]
        assert got.metadata["evil"] == f"touch {marker}", got.metadata
        assert values["items"] == [1, f"touch {marker}"]  # a list's appended items are stored alone
        assert got.checkpoint["planted_extra"] == f"touch {marker}"  # type: ignore[typeddict-item]
        assert asyncio.run(saver.aget_tuple(config)) == got
        assert {(t, c) for t, c, _ in got.pending_writes} == {("task-1", "w_constructor"), ("task-1", "w_json")}
        listed = list(saver.list(config))
        assert len(listed) == 2 and listed[0].checkpoint["id"] == got.checkpoint["id"]
        with pytest.raises(RefusedValueError, match="thread 'refused-"):
            list(saver.list(None))  # across threads, a listing reaches a refused blob and names it
        for name in [*refused_blobs(marker), "metadata"]:
            with pytest.raises(RefusedValueError, match=f"thread 'refused-{name}'"):
                saver.get_tuple({"configurable": {"thread_id": f"refused-{name}", "checkpoint_ns": ""}})
    finally:
        saver.close()
    assert not marker.exists(), "the saver ran stored code"


def check_graph_reads(log: eventlog.EventLog, marker: Path) -> None:
    """`graph.get_state` and `get_state_history` through a compiled graph with the default saver."""
    from typing import Annotated, TypedDict

    from langgraph.graph import START, StateGraph
    from langgraph.graph.message import add_messages

    fields: dict[str, Any] = dict.fromkeys(hostile_values(marker), Any)
    fields["messages"] = Annotated[list[Any], add_messages]
    State = TypedDict("State", fields)  # type: ignore[misc]
    builder = StateGraph(State)
    builder.add_node("noop", lambda state: {})
    builder.add_edge(START, "noop")
    saver = EventLogSaver(log)
    try:
        graph = builder.compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "evil"}}
        snapshot = graph.get_state(config)
        assert [m.content for m in snapshot.values["messages"]] == ["hi", "yo"]
        assert snapshot.values["constructor"] == f"touch {marker}"
        assert len(list(graph.get_state_history(config))) == 2
    finally:
        saver.close()
    assert not marker.exists(), "a compiled graph ran stored code"


def check_view_reads(log: eventlog.EventLog, marker: Path) -> None:
    """The run view (command line, UI): other types as `{"unknown_type", "data"}`, refusals shown."""
    state = VIEW.state(log, "evil", log.head("evil"))
    values = state["values"]
    assert values["constructor"] == {"unknown_type": "os.system", "data": f"touch {marker}"}
    assert values["keywords"] == {"unknown_type": "subprocess.run", "data": {"args": ["touch", str(marker)]}}
    assert values["method_of_allowed_type"] == {"unknown_type": "pathlib.Path", "data": str(marker)}
    assert values["json_lc1"] == {"unknown_type": "subprocess.run", "data": {"args": ["touch", str(marker)]}}
    assert values["messages"][0]["content"] == "hi" and values["messages"][0]["type"] == "human"
    _, rows = VIEW.history(log, "evil", None)
    assert len(rows) == 2
    for name, (kind, data) in refused_blobs(marker).items():
        shown = VIEW.state(log, f"refused-{name}", log.head(f"refused-{name}"))["values"]["bad"]
        assert shown == f"<{kind}, {len(data)} bytes>"
    assert not marker.exists(), "a view ran stored code"


def check_ui_reads(log: eventlog.EventLog, marker: Path) -> None:
    """Every page and JSON route of the UI over every run of the hostile log."""
    pytest.importorskip("starlette", reason="the UI needs its extra")
    from ui_support import get, serving

    with serving(log) as url:
        status, _, _ = get(url + "/")
        assert status == 200
        for run_id in log.runs():
            head = log.head(run_id)
            for reading in ("", "timeline", "conversation", "checkpoints", "events"):
                status, body, _ = get(f"{url}/run?id={run_id}&view={reading}")
                assert status == 200, body[:500]
            for at in range(head + 1):
                status, body, _ = get(f"{url}/run/state.json?id={run_id}&at={at}")
                assert status == 200, body[:500]
            status, _, _ = get(f"{url}/run/diff.json?id={run_id}&a=0&b={head}")
            assert status == 200
        if "evil" in log.runs():
            _, body, _ = get(f"{url}/run/state.json?id=evil&at={log.head('evil')}")
            assert json.loads(body)["state"]["values"]["constructor"]["unknown_type"] == "os.system"
    assert not marker.exists(), "the UI ran stored code"


@pytest.fixture
def marker(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "ran"
    yield path
    assert not path.exists(), "stored code ran"


def test_json_plus_serializer_runs_these_payloads(marker: Path) -> None:
    """The control: LangGraph's default serializer imports and calls what these blobs name."""
    ran = []
    for name, value in hostile_values(marker).items():
        JsonPlusSerializer().loads_typed(("msgpack", ormsgpack.packb(value)))
        if marker.exists():
            ran.append(name)
            marker.unlink()
    assert set(ran) >= {"constructor", "enum", "positional", "keywords", "pydantic_v1", "pydantic_v2", "delta_snapshot"}
    JsonPlusSerializer(pickle_fallback=True).loads_typed(refused_blobs(marker)["pickle"])
    assert marker.exists()
    marker.unlink()


def test_reading_a_hostile_log_runs_nothing(log: eventlog.EventLog, marker: Path, tmp_path: Path) -> None:
    """Saver, compiled graph, views and UI over the hostile log, on every store."""
    write_hostile_log(log, marker)
    check_saver_reads(log, marker)
    check_graph_reads(log, marker)
    check_view_reads(log, marker)
    check_ui_reads(log, marker)


def test_an_imported_hostile_file_runs_nothing(log: eventlog.EventLog, marker: Path, tmp_path: Path) -> None:
    """Export the hostile runs, import them into a fresh log of the same store: reads run nothing."""
    with eventlog.open(":memory:") as source:
        write_hostile_log(source, marker)
        file = tmp_path / "hostile.jsonl"
        export_runs(source, file)
        saved = sum(len(source.checkpoints.list(run_id)) for run_id in source.runs())
    summary = import_runs(log, file, reducers=[log.reducer, VIEW.fold])
    assert summary.checkpoints == saved and summary.skipped_checkpoints == 0
    assert not marker.exists(), "import ran stored code"
    check_saver_reads(log, marker)
    check_view_reads(log, marker)


# -- the command line, in real subprocesses --------------------------------------------------------


@pytest.fixture
def where(backend: str, tmp_path: Path) -> Iterator[str]:
    """A log location the `eventlog` command opens: an LMDB directory or a PostgreSQL schema."""
    if backend == "memory":
        pytest.skip("the command line opens logs on disk or in PostgreSQL")
    if backend == "lmdb":
        yield str(tmp_path / "log")
        return
    from eventlog.store.postgres import PostgresStore

    schema = f"hostile_{uuid.uuid4().hex[:12]}"
    yield f"{os.environ['EVENTLOG_TEST_PG_DSN']}?schema={schema}"
    PostgresStore.drop_schema(os.environ["EVENTLOG_TEST_PG_DSN"], schema)


def eventlog_cli(*commands: list[str]) -> list[tuple[int, str, str]]:
    """Run `eventlog` commands in one fresh interpreter (`eventlog.cli.main`, as the console script
    does): (exit code, stdout, stderr) of each."""
    script = """
import contextlib, io, json, sys
from eventlog.cli import main
out = []
for argv in json.loads(sys.argv[1]):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(argv)
    out.append([code, stdout.getvalue(), stderr.getvalue()])
print(json.dumps(out))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVENTLOG_")}
    env["PYTHONPATH"] = str(ROOT)
    p = subprocess.run(
        [sys.executable, "-c", script, json.dumps(commands)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return [(code, out, err) for code, out, err in json.loads(p.stdout)]


def test_the_command_line_runs_nothing(where: str, marker: Path, tmp_path: Path) -> None:
    """`state`, `history`, `events`, `diff`, `export` on the hostile log, `import` of its export,
    and `state` of what was imported, in a fresh process: none runs stored code."""
    with eventlog.open(where, create=True) as log:
        write_hostile_log(log, marker)
        head = log.head("evil")
    exported, imported = tmp_path / "out.jsonl", str(tmp_path / "imported")
    commands = [
        ["--log", where, "state", "evil", "--json"],
        ["--log", where, "history", "evil", "--json"],
        ["--log", where, "events", "evil", "--json", "--kinds", "eventlog.langgraph"],
        ["--log", where, "diff", "evil", "1", str(head), "--json"],
        ["--log", where, "state", "refused-pickle", "--json"],
        ["--log", where, "export", "-o", str(exported), "--kinds", "eventlog.langgraph"],
        ["--log", imported, "import", str(exported)],
        ["--log", imported, "state", "evil", "--json"],
    ]
    results = eventlog_cli(*commands)
    assert not marker.exists(), "a command ran stored code"
    for argv, (code, _, err) in zip(commands, results, strict=True):
        assert code == 0, (argv, err[-2000:])
    shown = json.loads(results[0][1])["state"]
    assert shown["values"]["constructor"] == {"unknown_type": "os.system", "data": f"touch {marker}"}
    assert json.loads(results[4][1])["state"]["values"]["bad"].startswith("<pickle, ")
    shown = json.loads(results[-1][1])["state"]
    assert shown["values"]["json_lc2"] == {"unknown_type": "os.system", "data": [f"touch {marker}"]}


# -- one place builds the decoder ------------------------------------------------------------------


def test_the_saver_and_the_view_read_with_the_safe_serializer(log: eventlog.EventLog) -> None:
    saver = EventLogSaver(log)
    try:
        assert isinstance(saver.serde, SafeSerializer) and not saver.serde.tag_unknown
        assert isinstance(VIEW.serde, SafeSerializer) and VIEW.serde.tag_unknown
        wider = saver.with_allowlist([("collections", "OrderedDict")])
        assert isinstance(wider.serde, SafeSerializer) and ("collections", "OrderedDict") in wider.serde.allowed
        assert ("collections", "OrderedDict") not in saver.serde.allowed
    finally:
        saver.close()


@dataclasses.dataclass
class Point:
    x: int
    y: int


def test_allowed_modules_is_the_opt_in() -> None:
    """A type outside LangGraph's list is built only when the user allows it, by class or by name."""
    blob = SafeSerializer().dumps_typed(Point(1, 2))
    assert SafeSerializer().loads_typed(blob) == {"x": 1, "y": 2}  # data: Point is on no list
    assert SafeSerializer(tag_unknown=True).loads_typed(blob) == {
        "unknown_type": f"{__name__}.Point",
        "data": {"x": 1, "y": 2},
    }
    assert SafeSerializer(allowed_modules=[Point]).loads_typed(blob) == Point(1, 2)
    assert SafeSerializer(allowed_modules=[(__name__, "Point")]).loads_typed(blob) == Point(1, 2)
    with pytest.raises(TypeError):
        SafeSerializer(allowed_modules=["os.system"])  # type: ignore[list-item]


# -- WayFlow: a restore builds only wayflowcore's conversation types from stored data ---------------


def _boom_type() -> type:
    """A registered wayflowcore type whose deserializer touches the path it is given: what any
    type with a side effect on construction (a model or a tool that connects) stands for."""
    from wayflowcore.serialization.serializer import SerializableObject

    class Boom(SerializableObject):
        def _serialize_to_dict(self, serialization_context: Any) -> dict[str, Any]:
            return {}

        @classmethod
        def _deserialize_from_dict(cls, input_dict: dict[str, Any], deserialization_context: Any) -> Any:
            Path(input_dict["path"]).touch()
            return cls()

    return Boom


def hostile_conversation_parts(marker: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """Parts of a stored conversation, each with the type a restore must refuse to build."""
    attacker_model = {"model_type": "openaicompatible", "model_id": "m", "base_url": "http://attacker.invalid"}
    return {
        "registered type with a side effect": ({"_component_type": "Boom", "path": str(marker)}, "Boom"),
        "name of a callable": ({"_component_type": "os.system", "command": f"touch {marker}"}, "os.system"),
        "component from stored data": (
            {"_component_type": "OpenAICompatibleModel", **attacker_model},
            "OpenAICompatible",
        ),
        "component by a field's type": (  # the models of a token-limit interrupt carry no _component_type
            {
                "_component_type": "InterruptedExecutionStatus",
                "interrupter": {
                    "_component_type": "SoftTokenLimitExecutionInterrupt",
                    "total_tokens": 1,
                    "all_models": [attacker_model],
                    "tokens_per_model": [],
                },
                "reason": "tokens",
                "_conversation_id": "c",
            },
            "LlmModel",
        ),
    }


def plant_conversation(log: eventlog.EventLog, conversation_id: str, part: dict[str, Any]) -> None:
    """A real conversation, then a checkpoint whose conversation holds `part` where wayflowcore reads it."""
    from wayflow_app import build_agent, reply

    from eventlog.wayflow import EventLogCheckpointer, Snapshot, WayflowReducer, start_conversation

    checkpointer = EventLogCheckpointer(log)
    agent = build_agent([reply("Hello.")])
    start_conversation(agent, messages="hi", checkpointer=checkpointer, conversation_id=conversation_id).execute()
    rec = log.writer(conversation_id, reducer=WayflowReducer(), policy=eventlog.CheckpointPolicy.never())
    data = copy.deepcopy(rec.state.conversation)
    data["inputs"] = {"x": part}
    data["_referenced_objects"]["evil/1"] = part
    rec.append(Snapshot(checkpoint_id="evil", delta=["=", data], status=rec.state.status, reason="manual"))
    rec.checkpoint(metadata={"save_reason": "manual", "status_type": rec.state.status}, checkpoint_id="evil")


def test_wayflowcore_runs_a_registered_type_it_reads(marker: Path) -> None:
    """The control: wayflowcore's own reader builds any registered type the data names, and a
    model from an untagged dict where a field's type says LlmModel."""
    pytest.importorskip("wayflowcore", reason="the wayflow extra is not installed")
    from wayflowcore.serialization.context import DeserializationContext
    from wayflowcore.serialization.serializer import autodeserialize_from_dict

    _boom_type()
    parts = hostile_conversation_parts(marker)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        autodeserialize_from_dict(parts["registered type with a side effect"][0], DeserializationContext())
        assert marker.exists()
        marker.unlink()
        status = autodeserialize_from_dict(parts["component by a field's type"][0], DeserializationContext())
    assert type(status.interrupter.all_models[0]).__name__ == "OpenAICompatibleModel"  # a model made from data


def test_a_wayflow_restore_builds_nothing_it_does_not_know(
    log: eventlog.EventLog, marker: Path, tmp_path: Path
) -> None:
    """start_conversation on a checkpoint naming other types is refused by name, on every store and
    after an export and import; the views and the UI show the conversation without building it."""
    pytest.importorskip("wayflowcore", reason="the wayflow extra is not installed")
    from wayflow_app import build_agent, reply

    from eventlog.wayflow import VIEW as WAYFLOW_VIEW
    from eventlog.wayflow import EventLogCheckpointer, WayflowCheckpointError, WayflowReducer, start_conversation

    _boom_type()
    parts = hostile_conversation_parts(marker)
    for i, (part, _) in enumerate(parts.values()):
        plant_conversation(log, f"wf-{i}", part)
    file = tmp_path / "wf.jsonl"
    export_runs(log, file)
    with eventlog.open(tmp_path / "imported") as imported:
        import_runs(imported, file, reducers=[imported.reducer, WayflowReducer()])
        for target in (log, imported):
            for i, (name, (_, refused)) in enumerate(parts.items()):
                with pytest.raises(WayflowCheckpointError, match=f"conversation 'wf-{i}'.*{refused}"):
                    start_conversation(
                        build_agent([reply("again")]),
                        conversation_id=f"wf-{i}",
                        checkpointer=EventLogCheckpointer(target),
                    )
                assert not marker.exists(), f"a restore built {name}"
                state = WAYFLOW_VIEW.state(target, f"wf-{i}", target.head(f"wf-{i}"))
                assert [m["content"] for m in state["messages"]] == ["hi", "Hello."]
        check_ui_reads(imported, marker)
