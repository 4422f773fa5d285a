"""LangGraph chat drivers for the chat suite: one StateGraph chatbot, checkpointed by each saver.

The graph is the smallest LangGraph chatbot: a `messages` channel reduced by `add_messages`
(or by `DeltaChannel(_messages_delta_reducer)`, LangGraph's delta channel) and one node that
returns the assistant's reply. Every turn is one `graph.invoke` with the user's message and
`durability="exit"`, so each saver writes one checkpoint per turn — the same cadence as
eventlog's checkpoint every turn. eventlog's own `EventLogSaver` runs the same graph and the
same `invoke` over an LMDB log and, with `EVENTLOG_BENCH_PG_DSN` set, over PostgreSQL beside
LangGraph's `PostgresSaver` on the same server.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import Annotated, Any

from ._common import disk_bytes

SYSTEMS = (
    "eventlog-saver",
    "eventlog-saver-pg",
    "langgraph-memory",
    "langgraph-sqlite",
    "langgraph-sqlite-delta",
    "langgraph-postgres",
    "langgraph-lmdb",
)
PG_SYSTEMS = ("eventlog-saver-pg", "langgraph-postgres")
PG_DSN_ENV = "EVENTLOG_BENCH_PG_DSN"
"""The PostgreSQL systems run when this variable holds a DSN (each in a schema of its own, dropped after)."""


def missing() -> str | None:
    """Why the LangGraph drivers cannot run, or None when they can."""
    try:
        import langgraph  # noqa: F401
        from langgraph.checkpoint.memory import InMemorySaver  # noqa: F401
    except ImportError as exc:
        return f"langgraph is not installed ({exc}); pip install 'eventlog[bench]'"
    return None


def delta_available() -> bool:
    try:
        from langgraph.channels.delta import DeltaChannel  # noqa: F401
        from langgraph.graph.message import _messages_delta_reducer  # noqa: F401
    except ImportError:
        return False
    return True


def lmdb_saver_available() -> bool:
    try:
        import langgraph_checkpoint_lmdb  # noqa: F401
    except ImportError:
        return False
    return True


def pg_dsn() -> str | None:
    return os.environ.get(PG_DSN_ENV) or None


def postgres_saver_available() -> bool:
    try:
        import langgraph.checkpoint.postgres  # noqa: F401
    except ImportError:
        return False
    return True


def pg_missing() -> str | None:
    """Why the PostgreSQL side by side cannot run (no DSN, no `PostgresSaver`), or None when it can."""
    if pg_dsn() is None:
        return f"PostgreSQL: set {PG_DSN_ENV} to a PostgreSQL DSN to run it"
    if not postgres_saver_available():
        return "PostgreSQL: langgraph-checkpoint-postgres is not installed"
    return None


def _pg_schema_bytes(dsn: str, schema: str) -> int:
    """Bytes of every table of a schema, with its indexes and TOAST (`pg_total_relation_size`)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def _pg_drop(dsn: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def sqlite_available() -> bool:
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401
    except ImportError:
        return False
    return True


def sqlite_missing() -> str | None:
    """Why a suite of LangGraph beside its `SqliteSaver` cannot run, or None when it can."""
    why = missing()
    if why is None and not sqlite_available():
        why = "langgraph-checkpoint-sqlite is not installed; pip install 'eventlog[bench]'"
    return why


def _bytes_in(obj: Any) -> int:
    """Bytes held in the bytes objects of a nested structure (InMemorySaver's storage)."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return len(obj)
    if isinstance(obj, str):
        return len(obj.encode())
    if isinstance(obj, dict):
        return sum(_bytes_in(k) + _bytes_in(v) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return sum(_bytes_in(v) for v in obj)
    return 0


def _build(checkpointer: Any, delta: bool, replies: list[str]) -> Any:
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, StateGraph
    from langgraph.graph.message import add_messages
    from typing_extensions import TypedDict

    if delta:
        from langgraph.channels.delta import DeltaChannel
        from langgraph.graph.message import _messages_delta_reducer

        reducer: Any = DeltaChannel(_messages_delta_reducer)
    else:
        reducer = add_messages
    # functional form: the annotation is evaluated here, not from a string
    State = TypedDict("State", {"messages": Annotated[list, reducer]})  # noqa: UP013

    def chatbot(state: Any) -> dict[str, Any]:
        turn = (len(state["messages"]) + 1) // 2  # the user's message of this turn is in
        return {"messages": [AIMessage(content=replies[turn - 1], id=f"a{turn}")]}

    g = StateGraph(State)
    g.add_node("chatbot", chatbot)
    g.add_edge(START, "chatbot")
    return g.compile(checkpointer=checkpointer)


def run_chat(
    system: str,
    workdir: str,
    users: list[str],
    replies: list[str],
    sample_turns: set[int],
) -> dict[str, Any]:
    """Play the chat through LangGraph with the given saver.

    Returns {"latency_ms": [per turn], "saver_ms": [per turn, time inside the saver's `put` and
    `get_tuple`], "bytes": {turn: bytes on disk (or serialized, in memory)}, "durability": text}.
    """
    from langchain_core.messages import HumanMessage

    os.makedirs(workdir, exist_ok=True)
    closers: list[Callable[[], None]] = []
    delta = system == "langgraph-sqlite-delta"
    if system == "langgraph-memory":
        from langgraph.checkpoint.memory import InMemorySaver

        saver = InMemorySaver()
        durability = "in memory (no disk); bytes are the saver's serialized blobs"

        def size() -> int:
            return _bytes_in(saver.storage) + _bytes_in(saver.blobs) + _bytes_in(saver.writes)

    elif system in ("langgraph-sqlite", "langgraph-sqlite-delta"):
        from langgraph.checkpoint.sqlite import SqliteSaver

        path = os.path.join(workdir, "checkpoints.sqlite")
        conn = sqlite3.connect(path, check_same_thread=False)
        saver = SqliteSaver(conn)
        closers.append(conn.close)
        durability = "SQLite WAL, synchronous=FULL (sqlite3 default)"

        def size() -> int:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            return disk_bytes(workdir)

    elif system == "eventlog-saver":
        import eventlog
        from eventlog.langgraph import EventLogSaver

        path = os.path.join(workdir, "log")
        log = eventlog.open(path, durability="sync")
        saver = EventLogSaver(log)
        closers.append(log.close)
        durability = "eventlog LMDB, durability=sync (fsync per commit)"

        def size() -> int:
            return disk_bytes(path)

    elif system == "eventlog-saver-pg":
        import eventlog
        from eventlog.langgraph import EventLogSaver

        dsn = pg_dsn()
        assert dsn is not None
        schema = f"bench_eventlog_{os.getpid()}"
        _pg_drop(dsn, schema)
        log = eventlog.open(f"{dsn}{'&' if '?' in dsn else '?'}schema={schema}")
        saver = EventLogSaver(log)
        closers.extend([log.close, lambda: _pg_drop(dsn, schema)])
        durability = "eventlog PostgreSQL store (one transaction per commit)"

        def size() -> int:
            return _pg_schema_bytes(dsn, schema)

    elif system == "langgraph-postgres":
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        dsn = pg_dsn()
        assert dsn is not None
        schema = f"bench_langgraph_{os.getpid()}"
        _pg_drop(dsn, schema)
        pg = psycopg.connect(dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        pg.execute(f'CREATE SCHEMA "{schema}"')
        pg.execute(f'SET search_path TO "{schema}"')
        saver = PostgresSaver(pg)  # type: ignore[arg-type]
        saver.setup()
        closers.extend([pg.close, lambda: _pg_drop(dsn, schema)])
        durability = "PostgreSQL, autocommit (its default synchronous_commit)"

        def size() -> int:
            return _pg_schema_bytes(dsn, schema)

    elif system == "langgraph-lmdb":
        import lmdb
        from langgraph_checkpoint_lmdb import LMDBSaver

        path = os.path.join(workdir, "lmdb")
        env = lmdb.open(path, map_size=16 << 30, max_dbs=10)
        saver = LMDBSaver(env)
        closers.append(env.close)
        durability = "LMDB sync=True (fsync per commit)"

        def size() -> int:
            return disk_bytes(path)

    else:
        raise ValueError(system)

    inside = [0.0]  # seconds spent in the saver's put and get_tuple during the turn
    for name in ("put", "get_tuple"):
        method = getattr(saver, name)

        def timed(*args: Any, _method: Callable[..., Any] = method, **kwargs: Any) -> Any:
            t = time.perf_counter()
            try:
                return _method(*args, **kwargs)
            finally:
                inside[0] += time.perf_counter() - t

        setattr(saver, name, timed)
    graph = _build(saver, delta, replies)
    config = {"configurable": {"thread_id": "chat-1"}}
    latency: list[float] = []
    saver_ms: list[float] = []
    sizes: dict[int, int] = {}
    for i, text in enumerate(users):
        turn = i + 1
        msg = HumanMessage(content=text, id=f"u{turn}")
        inside[0] = 0.0
        t0 = time.perf_counter()
        graph.invoke({"messages": [msg]}, config, durability="exit")
        latency.append((time.perf_counter() - t0) * 1000.0)
        saver_ms.append(inside[0] * 1000.0)
        if turn in sample_turns:
            sizes[turn] = size()
    # sanity: the saver holds the whole conversation
    state = graph.get_state(config)
    n_messages = len(state.values["messages"])
    for close in closers:
        close()
    return {
        "latency_ms": latency,
        "saver_ms": saver_ms,
        "bytes": sizes,
        "durability": durability,
        "messages": n_messages,
    }
