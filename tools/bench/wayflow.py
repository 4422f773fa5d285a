"""WayFlow: a 40-turn wayflowcore conversation checkpointed every turn, eventlog beside wayflowcore's own serialize-per-turn.

The same conversation runs twice with a real wayflowcore `Agent` (a scripted `LlmModel`, so
offline and deterministic): each turn is a 200-character user message and an 800-character
answer (the chat suite's seeded text), and every third turn the LLM first calls a tool.
wayflowcore: after every turn, `wayflowcore.serialization.serialize(conversation)` (the
YAML its agent server stores per turn), summed; also summed after zstd (level 3) per turn.
eventlog: `eventlog.wayflow` with `CheckpointingInterval.CONVERSATION_TURNS` on an LMDB log
(durability="sync"): the log directory's growth on disk (its bytes after close, less those of
an empty log opened and closed the same way), the LMDB pages in use, and the stored key and
value bytes. Also: the time to restore the latest checkpoint in a new log object.

The targets are the on-disk ones: serialize-per-turn ÷ the directory's growth ≥ 10, and the
growth no more than serialize-per-turn after zstd.
"""

from __future__ import annotations

import time
from typing import Any

from ._common import Context, SuiteResult, Text, disk_bytes, lmdb_breakdown, lmdb_live_bytes


def _build(script: list[Any]) -> Any:
    from wayflowcore.agent import Agent
    from wayflowcore.messagelist import Message
    from wayflowcore.models import LlmCompletion, LlmModel, Prompt, StreamChunkType
    from wayflowcore.tools import tool

    class ScriptedLlm(LlmModel):
        def __init__(self) -> None:
            super().__init__(
                model_id="scripted",
                generation_config=None,
                id="bench-llm",
                supports_structured_generation=False,
                supports_tool_calling=True,
            )

        async def _generate_impl(self, prompt: Prompt) -> LlmCompletion:
            return LlmCompletion(message=script.pop(0), token_usage=None)

        async def _stream_generate_impl(self, prompt: Prompt) -> Any:
            completion = await self._generate_impl(prompt)
            yield StreamChunkType.START_CHUNK, Message(role="assistant", content=""), None
            yield StreamChunkType.END_CHUNK, completion.message, completion.token_usage

        @property
        def config(self) -> dict[str, Any]:
            return {"model_id": self.model_id}

    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny, 24 degrees in {city}"

    weather.__annotations__ = {"city": str, "return": str}  # real types: this module's are strings

    return Agent(
        llm=ScriptedLlm(),
        tools=[tool(weather, description_mode="only_docstring")],
        custom_instruction="You plan trips.",
        id="bench-agent",
        name="trip_planner",
    )


def _script(turns: int) -> tuple[list[str], list[Any]]:
    from wayflowcore.messagelist import Message
    from wayflowcore.tools import ToolRequest

    t = Text(2024)
    users, script = [], []
    for n in range(turns):
        users.append(t.words(200))
        if n % 3 == 0:
            request = ToolRequest(name="weather", args={"city": f"city {n}"}, tool_request_id=f"w{n}")
            script.append(Message(role="assistant", content="", tool_requests=[request]))
        script.append(Message(role="assistant", content=t.words(800)))
    return users, script


def wayflowcore_per_turn(turns: int) -> dict[str, Any]:
    import warnings

    import zstandard
    from wayflowcore.serialization import serialize

    users, script = _script(turns)
    agent = _build(script)
    conversation = agent.start_conversation()
    zstd = zstandard.ZstdCompressor(level=3)
    raw = packed = 0
    for user in users:
        conversation.append_user_message(user)
        conversation.execute()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the scripted LLM has no serialization plugin: its config is used
            text = serialize(conversation).encode()
        raw += len(text)
        packed += len(zstd.compress(text))
    return {"bytes": raw, "zstd_bytes": packed, "messages": len(conversation.get_messages())}


def eventlog_per_turn(path: str, turns: int) -> dict[str, Any]:
    import eventlog
    from eventlog.wayflow import EventLogCheckpointer, start_conversation

    users, script = _script(turns)
    agent = _build(script)
    with eventlog.open(path + "-empty", durability="sync"):
        pass
    empty = disk_bytes(path + "-empty")
    t0 = time.perf_counter()
    with eventlog.open(path, durability="sync") as log:
        checkpointer = EventLogCheckpointer(log)
        conversation = start_conversation(agent, checkpointer=checkpointer, conversation_id="trip")
        for user in users:
            conversation.append_user_message(user)
            conversation.execute()
        checkpoints = len(checkpointer.list_checkpoints("trip", limit=None))
        messages = len(conversation.get_messages())
    seconds = time.perf_counter() - t0
    with eventlog.open(path) as log:
        t1 = time.perf_counter()
        restored = start_conversation(_build([]), conversation_id="trip", checkpointer=EventLogCheckpointer(log))
        restore_ms = (time.perf_counter() - t1) * 1000.0
        assert len(restored.get_messages()) == messages
    return {
        "bytes_after_close": disk_bytes(path),
        "empty_bytes": empty,
        "growth_bytes": disk_bytes(path) - empty,
        "live_bytes": lmdb_live_bytes(path),
        "breakdown": lmdb_breakdown(path),
        "checkpoints": checkpoints,
        "messages": messages,
        "seconds": seconds,
        "restore_ms": restore_ms,
    }


def run(ctx: Context) -> SuiteResult:
    res = SuiteResult("wayflow", __doc__.strip().splitlines()[0])
    try:
        import wayflowcore  # noqa: F401
    except ImportError as exc:
        res.skipped = f"wayflowcore is not installed (the wayflow extra): {exc}"
        return res
    turns = ctx.n(40, 10)
    wf = wayflowcore_per_turn(turns)
    el = eventlog_per_turn(ctx.path("eventlog"), turns)
    assert wf["messages"] == el["messages"], (wf["messages"], el["messages"])
    stored = sum(v["kv_bytes"] for v in el["breakdown"].values())
    top = sorted(el["breakdown"].items(), key=lambda kv: -kv[1]["kv_bytes"])[:4]
    res.row("wayflowcore", f"serialize() per turn, {turns} turns", wf["bytes"], "bytes", note="YAML, summed")
    res.row("wayflowcore", f"serialize() per turn + zstd, {turns} turns", wf["zstd_bytes"], "bytes")
    res.row("eventlog", f"{turns}-turn conversation, bytes after close", el["bytes_after_close"], "bytes")
    res.row(
        "eventlog",
        f"{turns}-turn conversation, directory growth on disk",
        el["growth_bytes"],
        "bytes",
        note=f"less an empty log's {el['empty_bytes']:,}",
    )
    res.row("eventlog", f"{turns}-turn conversation, live LMDB pages", el["live_bytes"], "bytes")
    res.row(
        "eventlog",
        f"{turns}-turn conversation, stored key+value bytes",
        stored,
        "bytes",
        note=", ".join(f"{k} {v['kv_bytes']:,} ({v['entries']})" for k, v in top),
    )
    res.row("eventlog", f"{turns} turns, wall time (sync durability)", el["seconds"], "s")
    res.row("eventlog", "restore the latest checkpoint, new log object", el["restore_ms"], "ms")
    res.metrics.update(
        turns=turns,
        messages=el["messages"],
        checkpoints=el["checkpoints"],
        wayflowcore_bytes=wf["bytes"],
        wayflowcore_zstd_bytes=wf["zstd_bytes"],
        eventlog_bytes_after_close=el["bytes_after_close"],
        eventlog_growth_bytes=el["growth_bytes"],
        eventlog_live_bytes=el["live_bytes"],
        eventlog_stored_bytes=stored,
        eventlog_breakdown=el["breakdown"],
        restore_ms=el["restore_ms"],
    )
    growth = el["growth_bytes"]
    res.target(
        f"wayflowcore serialize-per-turn ÷ eventlog growth on disk, {turns} turns",
        wf["bytes"] / growth,
        10.0,
        ">=",
        "x",
    )
    res.target(
        f"wayflowcore serialize-per-turn + zstd ÷ eventlog growth on disk, {turns} turns",
        wf["zstd_bytes"] / growth,
        1.0,
        ">=",
        "x",
    )
    res.row("eventlog", "serialize-per-turn ÷ stored key+value bytes", wf["bytes"] / stored, "x")
    res.row("eventlog", "serialize-per-turn ÷ live LMDB pages", wf["bytes"] / el["live_bytes"], "x")
    return res
