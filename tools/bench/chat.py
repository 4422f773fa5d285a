"""Chat: a long conversation checkpointed every turn, eventlog beside LangGraph's savers.

Each turn is a 200-character user message and an 800-character assistant reply (fixed,
seeded text, the same for every system). eventlog: a `log.recorder` with
`CheckpointPolicy.conversation_turns()` and durability="sync"; a turn is two durable
commits, `[TurnStarted, UserMessage]` when the user speaks and
`[LLMCallCompleted, TurnCompleted]` when the reply arrives (the checkpoint goes in the
second). LangGraph: a one-node StateGraph chatbot whose `messages` channel uses
`add_messages`, compiled with eventlog's EventLogSaver (LMDB, durability="sync"),
InMemorySaver, SqliteSaver, SqliteSaver with `DeltaChannel(_messages_delta_reducer)` (when
the installed LangGraph has it) and langgraph-checkpoint-lmdb's LMDBSaver, and with
EVENTLOG_BENCH_PG_DSN set, EventLogSaver on PostgreSQL beside PostgresSaver on the same
server; each turn is one `invoke` with
`durability="exit"` (one checkpoint per turn). Reported: bytes on disk (InMemorySaver:
bytes of its serialized blobs) and per-turn wall time at turns 1, 100, 200 and 1,000
(the median of that turn and the four before it), for a 1,000-turn chat
(`EVENTLOG_BENCH_CHAT_TURNS`; with 200 the last two marks are turn 200); plus a separate
200-turn eventlog chat measured after close.
"""

from __future__ import annotations

import time
from typing import Any

from ._common import Context, SuiteResult, Text, disk_bytes, lmdb_breakdown, lmdb_live_bytes, median


def _texts(turns: int) -> tuple[list[str], list[str]]:
    t = Text(2024)
    users = [t.words(200) for _ in range(turns)]
    replies = [t.words(800) for _ in range(turns)]
    return users, replies


def eventlog_chat(path: str, users: list[str], replies: list[str], sample_turns: set[int]) -> dict[str, Any]:
    import eventlog
    from eventlog import events as ev

    log = eventlog.open(path, durability="sync")
    rec = log.writer("chat-1", reducer=eventlog.AgentReducer(), policy=eventlog.CheckpointPolicy.conversation_turns())
    latency: list[float] = []
    sizes: dict[int, int] = {}
    try:
        for i, (user, reply) in enumerate(zip(users, replies, strict=True)):
            turn = i + 1
            t0 = time.perf_counter()
            rec.append_many([ev.TurnStarted(turn=turn), ev.UserMessage(content=user)])
            rec.append_many(
                [
                    ev.LLMCallCompleted(
                        call_id=f"c{turn}",
                        model="gpt-4o-mini",
                        output=ev.Message(role="assistant", content=reply),
                        input_tokens=60 * turn,
                        output_tokens=200,
                        latency_ms=850.0,
                    ),
                    ev.TurnCompleted(turn=turn),
                ]
            )
            latency.append((time.perf_counter() - t0) * 1000.0)
            if turn in sample_turns:
                sizes[turn] = disk_bytes(path)
        n_messages = len(rec.state.messages)
        checkpoints = len(log.checkpoints.list("chat-1"))
    finally:
        log.close()
    return {
        "latency_ms": latency,
        "bytes": sizes,
        "bytes_after_close": disk_bytes(path),
        "live_bytes_after_close": lmdb_live_bytes(path),
        "breakdown": lmdb_breakdown(path),
        "durability": "LMDB, durability=sync (fsync per commit, 2 commits per turn)",
        "messages": n_messages,
        "checkpoints": checkpoints,
    }


def _lat_at(latency: list[float], turn: int) -> float:
    lo = max(0, turn - 5)
    return median(latency[lo:turn])


def run(ctx: Context) -> SuiteResult:
    from . import _langgraph as lg

    res = SuiteResult("chat", __doc__.strip().splitlines()[0])
    long_t = ctx.size("EVENTLOG_BENCH_CHAT_TURNS", 1000, 50)
    short_t = min(ctx.n(200, 20), long_t)
    mid_t = min(ctx.n(100, 10), short_t)
    marks = [1, mid_t, short_t, long_t]
    sample_turns = set(marks) | set(range(0, long_t + 1, max(1, long_t // 40))) - {0}
    users, replies = _texts(long_t)

    systems: dict[str, dict[str, Any]] = {}
    systems["eventlog"] = eventlog_chat(ctx.path("eventlog"), users, replies, sample_turns)
    short = eventlog_chat(ctx.path("eventlog-short"), users[:short_t], replies[:short_t], {short_t})

    why = lg.missing()
    skipped: dict[str, str] = {}
    if why is None:
        for name in lg.SYSTEMS:
            if name.startswith("langgraph-sqlite") and not lg.sqlite_available():
                skipped[name] = "langgraph-checkpoint-sqlite is not installed"
                continue
            if name == "langgraph-sqlite-delta" and not lg.delta_available():
                skipped[name] = "this LangGraph has no DeltaChannel"
                continue
            if name == "langgraph-lmdb" and not lg.lmdb_saver_available():
                skipped[name] = "langgraph-checkpoint-lmdb is not installed"
                continue
            if name in lg.PG_SYSTEMS and lg.pg_dsn() is None:
                skipped[name] = f"set {lg.PG_DSN_ENV} to a PostgreSQL DSN to run it"
                continue
            if name == "langgraph-postgres" and not lg.postgres_saver_available():
                skipped[name] = "langgraph-checkpoint-postgres is not installed"
                continue
            print(f"  chat: {name} ({long_t} turns) ...", flush=True)
            systems[name] = lg.run_chat(name, ctx.path(name), users, replies, sample_turns)
    else:
        for name in lg.SYSTEMS:
            skipped[name] = why
        print(f"  chat: LangGraph systems skipped: {why}", flush=True)
    for name, reason in skipped.items():
        res.row(name, "skipped", float("nan"), "", note=reason)

    el = systems["eventlog"]
    for name, r in systems.items():
        assert r["messages"] == 2 * long_t, (name, r["messages"])
        b = r["bytes"]
        note = r["durability"]
        res.row(name, f"bytes at turn {short_t}", b[short_t], "bytes", note=note)
        res.row(name, f"bytes at turn {long_t}", b[long_t], "bytes")
        res.row(name, f"bytes/turn at turn {mid_t}", b[mid_t] / mid_t, "bytes")
        res.row(name, f"bytes/turn at turn {long_t}", b[long_t] / long_t, "bytes")
        lat = " / ".join(f"{_lat_at(r['latency_ms'], t):.2f}" for t in marks)
        res.row(
            name, f"turn latency ms at {'/'.join(map(str, marks))}", _lat_at(r["latency_ms"], long_t), "ms", note=lat
        )
        res.row(name, f"total time, {long_t} turns", sum(r["latency_ms"]) / 1000.0, "s")
        if "saver_ms" in r:
            inside = " / ".join(f"{_lat_at(r['saver_ms'], t):.2f}" for t in marks)
            res.row(
                name,
                f"put + get_tuple ms at {'/'.join(map(str, marks))}",
                _lat_at(r["saver_ms"], long_t),
                "ms",
                note=inside,
            )

    res.metrics["turns"] = long_t
    res.metrics["marks"] = marks
    res.metrics["skipped"] = skipped
    res.metrics["eventlog_short_bytes_after_close"] = short["bytes_after_close"]
    res.metrics["eventlog_short_live_bytes_after_close"] = short["live_bytes_after_close"]
    res.metrics["eventlog_long_live_bytes_after_close"] = el["live_bytes_after_close"]
    res.metrics["eventlog_short_breakdown"] = short["breakdown"]
    res.metrics["eventlog_long_breakdown"] = el["breakdown"]
    res.metrics["eventlog_checkpoints"] = el["checkpoints"]
    res.metrics["systems"] = {
        name: {
            "durability": r["durability"],
            "bytes": {str(k): v for k, v in sorted(r["bytes"].items())},
            "latency_ms": [round(x, 4) for x in r["latency_ms"]],
            "latency_ms_at": {str(t): _lat_at(r["latency_ms"], t) for t in marks},
            "saver_ms_at": {str(t): _lat_at(r["saver_ms"], t) for t in marks} if "saver_ms" in r else None,
        }
        for name, r in systems.items()
    }

    short_bytes = short["bytes_after_close"]
    res.row("eventlog", f"{short_t}-turn chat, bytes after close", short_bytes, "bytes", note="separate run")
    res.row(
        "eventlog",
        f"{short_t}-turn chat, live LMDB pages",
        short["live_bytes_after_close"],
        "bytes",
        note="pages in use; the file also keeps LMDB's free pages",
    )
    top = sorted(short["breakdown"].items(), key=lambda kv: -kv[1]["kv_bytes"])[:4]
    res.row(
        "eventlog",
        f"{short_t}-turn chat, stored key+value bytes",
        sum(v["kv_bytes"] for v in short["breakdown"].values()),
        "bytes",
        note=", ".join(f"{k} {v['kv_bytes']:,} ({v['entries']})" for k, v in top),
    )
    res.target(f"{short_t}-turn chat on disk (eventlog)", short_bytes / 1e6, 1.0, "<=", "MB")
    if "langgraph-sqlite-delta" in systems:
        d = systems["langgraph-sqlite-delta"]["bytes"][short_t]
        res.target(f"{short_t}-turn chat ÷ SqliteSaver+DeltaChannel", short_bytes / d, 1.0, "<=", "x")
    if "langgraph-sqlite" in systems:
        s = systems["langgraph-sqlite"]["bytes"][short_t]
        res.target(f"SqliteSaver ÷ eventlog, {short_t}-turn chat", s / short_bytes, 50.0, ">=", "x")
    per_long = el["bytes"][long_t] / long_t
    per_mid = el["bytes"][mid_t] / mid_t
    res.target(f"bytes/turn at turn {long_t} ÷ at turn {mid_t} (eventlog)", per_long / per_mid, 1.25, "<=", "x")
    _saver_targets(res, systems, marks, users, replies)
    return res


def _content_bytes(users: list[str], replies: list[str]) -> float:
    """The median zstd size (level 3, no dictionary) of a turn's new text: its question and reply."""
    import zstandard

    zstd = zstandard.ZstdCompressor(level=3)
    return median([len(zstd.compress((u + r).encode())) for u, r in zip(users, replies, strict=True)])


def _saver_targets(
    res: SuiteResult, systems: dict[str, dict[str, Any]], marks: list[int], users: list[str], replies: list[str]
) -> None:
    """The targets of EventLogSaver: the same LangGraph graph and invoke as LangGraph's savers,
    and its bytes against the text a turn adds (the bytes a turn adds to the store, over the
    turns between the middle and the short mark: what the store's fixed cost leaves out)."""
    saver = systems.get("eventlog-saver")
    if saver is None:
        return
    mid_t, short_t, long_t = marks[1], marks[2], marks[3]
    b = saver["bytes"]
    if "langgraph-sqlite-delta" in systems:
        d = systems["langgraph-sqlite-delta"]["bytes"][short_t]
        res.target(f"EventLogSaver, {short_t} turns ÷ SqliteSaver+DeltaChannel", b[short_t] / d, 1.0, "<=", "x")
    if "langgraph-sqlite" in systems:
        s = systems["langgraph-sqlite"]
        res.target(f"SqliteSaver ÷ EventLogSaver, {short_t} turns", s["bytes"][short_t] / b[short_t], 50.0, ">=", "x")
        worst = max(_lat_at(saver["latency_ms"], t) / _lat_at(s["latency_ms"], t) for t in marks)
        res.target(f"EventLogSaver ÷ SqliteSaver turn latency, worst of turns {marks}", worst, 1.0, "<=", "x")
    if "eventlog-saver-pg" in systems and "langgraph-postgres" in systems:
        pg, el = systems["langgraph-postgres"]["bytes"][short_t], systems["eventlog-saver-pg"]["bytes"][short_t]
        res.target(f"PostgresSaver ÷ EventLogSaver on PostgreSQL, {short_t} turns", pg / el, 20.0, ">=", "x")
    if mid_t < short_t:
        content = _content_bytes(users[mid_t:short_t], replies[mid_t:short_t])
        for name in ("eventlog-saver", "eventlog-saver-pg"):
            if name in systems:
                grown = systems[name]["bytes"]
                added = (grown[short_t] - grown[mid_t]) / (short_t - mid_t)
                res.target(
                    f"{name}: bytes added per turn, turns {mid_t + 1}-{short_t}, ÷ zstd of the turn's new text",
                    added / content,
                    3.0,
                    "<=",
                    "x",
                )
    res.target(
        f"EventLogSaver bytes/turn at turn {long_t} ÷ at turn {mid_t}",
        (b[long_t] / long_t) / (b[mid_t] / mid_t),
        1.25,
        "<=",
        "x",
    )
    inside = saver["saver_ms"]
    res.target(
        f"EventLogSaver put + get_tuple at turn {long_t} ÷ at turn {mid_t}",
        _lat_at(inside, long_t) / _lat_at(inside, mid_t),
        1.25,
        "<=",
        "x",
    )
    lat = saver["latency_ms"]
    res.target(
        f"EventLogSaver turn latency at turn {long_t} ÷ at turn {mid_t}",
        _lat_at(lat, long_t) / _lat_at(lat, mid_t),
        1.25,
        "<=",
        "x",
    )
