"""`eventlog ui` over a long LangGraph thread: each tab of its page, beside the view's calls.

A 200-turn LangGraph chat (`EVENTLOG_BENCH_UI_TURNS`) through `EventLogSaver` on LMDB: each turn
the user's message, the agent's tool call, the tool's answer and the agent's reply, with a
checkpoint at every step (LangGraph's default durability), about five a turn; then an
`interrupt()` left waiting and a branch made by `update_state` on an older checkpoint (time
travel). Served by uvicorn in this process, read-only. Medians of
7 requests: the run's page read as supersteps, as a timeline, as checkpoints (the newest 50 and
the tree of branches) and as a conversation; the state after the head; the diff of the head and
an offset 100 before. Beside them, the LangGraph view's `history` of every checkpoint (what the
Checkpoints tab listed before it was bounded), its `history` of the newest 50, and its `state`.
"""

from __future__ import annotations

import time
import urllib.parse
from typing import Annotated, Any

from ._common import Context, SuiteResult, median
from .ui_open import _ms, _serve

REPEATS = 7


def _thread(log: Any, turns: int) -> str:
    from langchain_core.messages import AIMessage, ToolMessage
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.types import interrupt
    from typing_extensions import TypedDict

    from eventlog.langgraph import EventLogSaver

    Chat = TypedDict("Chat", {"messages": Annotated[list[Any], add_messages]})  # noqa: UP013 - read now, in scope

    def agent(state: Any) -> dict[str, Any]:
        last = state["messages"][-1]
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage(content=f"It is {last.content} there.")]}
        if last.content == "ask a human":
            return {"messages": [AIMessage(content=str(interrupt({"question": "may I?"})))]}
        call = {
            "name": "weather",
            "args": {"city": f"city {len(state['messages'])}"},
            "id": f"c{len(state['messages'])}",
        }
        return {"messages": [AIMessage(content="", tool_calls=[call])]}

    def tools(state: Any) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        return {"messages": [ToolMessage(content="sunny", tool_call_id=call["id"])]}

    def route(state: Any) -> str:
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END

    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    graph = builder.compile(checkpointer=EventLogSaver(log))
    config = {"configurable": {"thread_id": "chat-200"}}
    for i in range(turns):
        graph.invoke({"messages": [("user", f"what is the weather, {i}?")]}, config)  # a checkpoint a step
    graph.invoke({"messages": [("user", "ask a human")]}, config)  # an interrupt() left waiting
    older = list(graph.get_state_history(config))[10]
    graph.update_state(older.config, {"messages": [AIMessage(content="a branch written by hand")]})
    return "chat-200"


def run(ctx: Context) -> SuiteResult:
    import eventlog

    res = SuiteResult("ui_thread", " ".join(__doc__.strip().splitlines()[0].split()))
    try:
        import langgraph  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        res.skipped = f"the ui and langgraph extras are needed: {exc}"
        return res
    turns = ctx.size("EVENTLOG_BENCH_UI_TURNS", 200, 20)
    path = ctx.path("log")
    with eventlog.open(path, durability="none") as log:
        run_id = _thread(log, turns)
    from eventlog.views import load_views, view_for_run

    load_views()
    with eventlog.open(path, readonly=True) as log:
        view = view_for_run(log, run_id)
        assert view is not None
        head = log.head(run_id)
        checkpoints = len(log.checkpoints.list(run_id))

        def lib(fn: Any, repeats: int = REPEATS) -> float:
            fn()
            out = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1000.0)
            return median(out)

        whole = lib(lambda: view.history(log, run_id, None), 3)
        newest = lib(lambda: view.history(log, run_id, 50))
        state = lib(lambda: view.state(log, run_id, head))
        with _serve(log) as base:
            run = f"id={urllib.parse.quote(run_id)}"
            page: dict[str, float] = {}
            for reading in ("steps", "timeline", "checkpoints", "conversation"):
                _ms(f"{base}/run?{run}&view={reading}")
                page[reading] = median([_ms(f"{base}/run?{run}&view={reading}") for _ in range(REPEATS)])
            _ms(f"{base}/run/state?{run}&at={head}")
            state_ms = median([_ms(f"{base}/run/state?{run}&at={head}") for _ in range(REPEATS)])
            diff_ms = median([_ms(f"{base}/run/diff?{run}&a={max(0, head - 100)}&b={head}") for _ in range(REPEATS)])
    note = f"{turns} turns, {head:,} events, {checkpoints} checkpoints"
    res.row("eventlog ui", "the thread's page: supersteps (last 200 events)", page["steps"], "ms", note=note)
    res.row("eventlog ui", "the thread's page: timeline", page["timeline"], "ms")
    res.row("eventlog ui", "the thread's page: checkpoints (newest 50, branches)", page["checkpoints"], "ms")
    res.row("library", "view.history of the newest 50", newest, "ms")
    res.row("library", f"view.history of all {checkpoints} (the tab before it was bounded)", whole, "ms")
    res.row("eventlog ui", "the thread's page: conversation", page["conversation"], "ms")
    res.row("eventlog ui", "the state after the head", state_ms, "ms")
    res.row("library", "view.state(head)", state, "ms")
    res.row("eventlog ui", "the diff of the head and 100 events before", diff_ms, "ms")
    res.target(f"a {checkpoints}-checkpoint thread's Checkpoints tab", page["checkpoints"], 1000.0, "<=", "ms")
    res.target("the state after the head of the thread", state_ms, 500.0, "<=", "ms")
    res.metrics.update(
        turns=turns,
        events=head,
        checkpoints=checkpoints,
        history_all_ms=whole,
        history_newest_ms=newest,
        view_state_ms=state,
        state_ms=state_ms,
        diff_ms=diff_ms,
        **{f"page_{k}_ms": v for k, v in page.items()},
    )
    return res
