"""`eventlog demo`: the two walkthroughs this project grew from, on a real LMDB log.

1. A graph workflow checkpointed after every superstep: the run, its checkpoint history, time
   travel to superstep 2, and a run that fails at superstep 2 and resumes to finish at 3.
2. A conversation checkpointed per turn with a scripted LLM (no network): two turns, a restart
   on a new log object that resumes the latest, a rewind to the previous checkpoint that goes
   on along another path (a fork) while the original stays, and a pause for a human's approval.

    python -m eventlog.demo [--path DIR]

The code of each part is in docs/guides/graph.md and docs/guides/conversation.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import eventlog
from eventlog.agent.conversation import DECLINED, Agent, Completion, Conversation, RestoreWithMessagesError, TurnResult
from eventlog.agent.graph import END, Graph, NodeFailedError
from eventlog.events import Event, Message, StepStarted, ToolCall

__all__ = ["main", "run_demo", "scripted_llm", "three_step_graph"]


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _json(value: Any) -> str:
    return msgspec.json.encode(value, order="deterministic").decode()


# -- the workflow ----------------------------------------------------------------------


def three_step_graph(ran: list[str] | None = None, failures: dict[str, int] | None = None) -> Graph:
    """step1 -> step2 -> step3, each adding 10 to `value`.

    `failures` maps a node to how many times it raises before it succeeds (a flaky service);
    `ran` collects the name of every node each time it runs.
    """
    ran = ran if ran is not None else []
    failures = failures if failures is not None else {}

    def make(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def node(values: dict[str, Any]) -> dict[str, Any]:
            ran.append(name)
            if failures.get(name, 0) > 0:
                failures[name] -= 1
                raise ConnectionError(f"{name}: the service did not answer")
            return {"value": values.get("value", 0) + 10}

        return node

    graph = Graph("three-step")
    for name in ("step1", "step2", "step3"):
        graph.add_node(name, make(name))
    graph.set_entry("step1")
    graph.add_edge("step1", "step2")
    graph.add_edge("step2", "step3")
    graph.add_edge("step3", END)
    return graph


def _printer(console: Console) -> Callable[[Event, int, eventlog.Checkpoint[Any] | None], None]:
    def listener(event: Event, offset: int, checkpoint: eventlog.Checkpoint[Any] | None) -> None:
        if isinstance(event, StepStarted):
            console.print(escape(f"[Superstep {event.superstep}] Executing node: {event.node}"))
        if checkpoint is not None:
            console.print(
                f"[green]→ Checkpoint saved at superstep {checkpoint.summary['superstep']}[/] (offset {checkpoint.offset})"
            )

    return listener


def _heading(console: Console, text: str) -> None:
    console.print()
    console.rule(f"[bold]{escape(text)}")


def _workflow(log: eventlog.EventLog[Any], console: Console, names: dict[str, str]) -> None:
    run_id, replay_id, retry_id = names["workflow"], names["replay"], names["retry"]

    _heading(console, "Part 1: Workflow with Automatic Checkpointing")
    console.print(f"Run ID: [cyan]{run_id}[/]")
    console.print("Checkpoints will be saved automatically after every superstep\n")
    runner = three_step_graph().compile(
        log, policy=eventlog.CheckpointPolicy.every_supersteps(1), listener=_printer(console)
    )
    state = runner.run(run_id, {"value": 0})
    console.print(f"Final state: {_json(state.values)} ({state.status}, {log.head(run_id)} events)")

    _heading(console, "Part 2: Checkpoint History")
    console.print(f"Listing all checkpoints for run ID: [cyan]{run_id}[/]")
    table = Table("#", "Superstep", "Offset", "Timestamp (UTC)", "State")
    for i, cp in enumerate(log.checkpoints.list(run_id), 1):
        stamp = cp.created_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        table.add_row(
            f"Checkpoint {i}", str(cp.summary["superstep"]), str(cp.offset), stamp, escape(_json(cp.state.values))
        )
    console.print(table)

    _heading(console, "Part 3: Time-Travel (Load State from Superstep 2)")
    cp2 = next(cp for cp in log.checkpoints.list(run_id) if cp.summary["superstep"] == 2)
    console.print(
        f"Loaded checkpoint at superstep {cp2.summary['superstep']} (offset {cp2.offset}, id {cp2.checkpoint_id[:12]}…)"
    )
    console.print(f"State: {escape(_json(cp2.state.values))}")
    console.print(
        f"Any offset works, not only checkpoints: state at offset 5 = {escape(_json(log.state_at(run_id, 5).values))}"
    )
    console.print(f"Branching from superstep 2 into [cyan]{replay_id}[/]; the original run is not touched:")
    state = runner.resume(run_id, from_checkpoint=cp2.checkpoint_id, new_run_id=replay_id)
    info = log.run_info(replay_id)
    console.print(
        f"{replay_id}: parent {info.parent} at offset {info.fork_offset}, state {_json(state.values)}; "
        f"{run_id} still has {log.head(run_id)} events and {log.run_info(run_id).checkpoints} checkpoints"
    )

    _heading(console, "Part 4: Resume from Checkpoint (Failure Recovery)")
    console.print("Simulating workflow that fails at superstep 2 (step2's service is down once)")
    ran: list[str] = []
    flaky = three_step_graph(ran, failures={"step2": 1}).compile(log, listener=_printer(console))
    try:
        flaky.run(retry_id, {"value": 0})
    except NodeFailedError as exc:
        console.print(
            f"[red]✗ {escape(str(exc.error))}[/] — run {retry_id} failed at superstep {exc.superstep}, offset {exc.offset}"
        )
    latest = log.checkpoints.load_latest(retry_id)
    assert latest is not None
    console.print(f"Last checkpoint: superstep {latest.summary['superstep']}; resuming from the exact head of the log…")
    state = flaky.resume(retry_id)
    counts = Counter(ran)
    console.print(f"Superstep {state.superstep} reached; state {_json(state.values)}")
    console.print(
        "Node runs: "
        + ", ".join(f"{n} ×{counts[n]}" for n in ("step1", "step2", "step3"))
        + " (step1 did not run again)"
    )
    if state.status == "completed" and state.superstep == 3:
        console.print("[bold green]✓ Workflow completed successfully[/]")


# -- the conversation ------------------------------------------------------------------

_WEATHER = {"paris": (18, "sunny"), "oslo": (4, "raining"), "rome": (24, "clear")}


def scripted_llm(messages: list[Message]) -> Completion:
    """A deterministic stand-in for an LLM: it reads the last message and answers by rule."""
    last = messages[-1]
    words = sum(len(m.content.split()) + 3 for m in messages)
    if last.role == "tool":
        if last.name == "weather":
            data = msgspec.json.decode(last.content)
            text = f"It is {data['celsius']}°C and {data['sky']} in {data['city']}."
        elif last.content == DECLINED:
            text = "All right, I did not book anything."
        else:
            text = f"Done: {last.content}."
        return Completion(Message(role="assistant", content=text), words, len(text.split()))
    text = last.content.lower()
    call_id = f"call-{len(messages)}"
    for city in _WEATHER:
        if city in text:
            call = ToolCall(id=call_id, name="weather", arguments={"city": city.title()})
            return Completion(Message(role="assistant", tool_calls=[call]), words, 12)
    if "book" in text:
        call = ToolCall(id=call_id, name="book_table", arguments={"people": 2, "time": "20:00"})
        return Completion(Message(role="assistant", tool_calls=[call]), words, 14)
    return Completion(Message(role="assistant", content="You're welcome!"), words, 2)


def weather(city: str) -> dict[str, Any]:
    """A tool: the weather in a city."""
    celsius, sky = _WEATHER[city.lower()]
    return {"city": city, "celsius": celsius, "sky": sky}


def book_table(people: int, time: str) -> str:
    """A tool that needs a human's approval: book a table."""
    return f"a table for {people} at {time}"


def demo_agent() -> Agent:
    """The scripted agent of the conversation walkthrough, checkpointed at every turn."""
    return Agent(
        scripted_llm,
        {"weather": weather, "book_table": book_table},
        model="scripted",
        policy=eventlog.CheckpointPolicy.conversation_turns(),
        confirm={"book_table"},
    )


def _say(console: Console, chat: Conversation, text: str, before: int) -> TurnResult:
    console.print(f"[bold]user[/]      {escape(text)}")
    result = chat.send(text)
    _show(console, chat, before, result)
    return result


def _show(console: Console, chat: Conversation, before: int, result: TurnResult) -> None:
    for entry in chat.log.read(chat.conversation_id, after=before):
        e = entry.event
        if isinstance(e, eventlog.events.ToolCallCompleted):
            console.print(f"  [dim]tool {e.tool} → {escape(_json(e.output))}[/]")
    if result.status == "answered" and result.message is not None:
        console.print(f"[bold]assistant[/] {escape(result.message.content)}")
    if result.status == "paused":
        arguments = _json(result.interrupt["payload"]["arguments"])
        console.print(
            f"[yellow]⏸ Paused:[/] {escape(result.interrupt['reason'])} {escape(arguments)}, waiting for a human"
        )
    latest = chat.log.checkpoints.load_latest(chat.conversation_id)
    if latest is not None and latest.offset == chat.offset and latest.offset > before:
        where = "the pause" if result.status == "paused" else f"turn {chat.turn}"
        console.print(f"[green]→ Checkpoint saved at {where}[/] (offset {latest.offset})")


def _conversation(path: str, console: Console, names: dict[str, str]) -> None:
    chat_id, rewind_id = names["chat"], names["rewind"]
    agent = demo_agent()

    _heading(console, "Part 5: A Conversation Checkpointed per Turn")
    console.print(f"Conversation ID: [cyan]{chat_id}[/] (scripted LLM, no network)")
    with eventlog.open(path) as log:
        chat = agent.start_conversation(log, chat_id)
        for text in ("What's the weather in Paris?", "And in Oslo?"):
            _say(console, chat, text, chat.offset)
        console.print(f"{len(log.checkpoints.list(chat_id))} checkpoints, {log.head(chat_id)} events")

    _heading(console, "Part 6: Restart and Resume the Latest")
    with eventlog.open(path) as log:  # a new log object on the same directory, as after a restart
        chat = agent.start_conversation(log, chat_id)
        latest = log.checkpoints.load_latest(chat_id)
        assert latest is not None
        console.print(
            f"Reopened the log: {chat_id} resumes at turn {chat.turn}, offset {chat.offset}, "
            f"{len(chat.messages)} messages (latest checkpoint at offset {latest.offset})"
        )
        _say(console, chat, "Thanks!", chat.offset)

        _heading(console, "Part 7: Rewind to the Previous Checkpoint")
        previous = log.checkpoints.list(chat_id)[-2]
        console.print(f"log.checkpoints.list({chat_id!r})[-2]: turn {previous.state.turn}, offset {previous.offset}")
        try:
            agent.start_conversation(log, chat_id, checkpoint_id=previous.checkpoint_id, messages=["Hi"])
        except RestoreWithMessagesError as exc:
            console.print(f"[yellow]Refused:[/] {escape(str(exc))}")
        rewound = agent.start_conversation(
            log, chat_id, checkpoint_id=previous.checkpoint_id, new_conversation_id=rewind_id
        )
        console.print(f"Rewound into [cyan]{rewind_id}[/] at turn {rewound.turn}; a different path from here:")
        _say(console, rewound, "What about Rome?", rewound.offset)
        for run in (chat_id, rewind_id):
            info = log.run_info(run)
            last = log.state_at(run, run_number=info.number).messages[-1].content
            origin = f", forked from {info.parent} at offset {info.fork_offset}" if info.parent else ""
            console.print(
                f"  {run}: {_count(info.head, 'event')}, {_count(info.checkpoints, 'checkpoint')}{origin}; last: {escape(last)}"
            )

        _heading(console, "Part 8: Pause for a Human's Approval")
        _say(console, rewound, "Please book a table for tonight.", rewound.offset)
        console.print("The human approves: resume(True)")
        mid = rewound.offset
        result = rewound.resume(True)
        _show(console, rewound, mid, result)
        state = rewound.state
        console.print(
            f"{rewind_id}: {state.turn} turns, {state.llm_calls} LLM calls, {state.tool_calls} tool calls, "
            f"{state.input_tokens}+{state.output_tokens} tokens"
        )


# -- the whole demo --------------------------------------------------------------------

_BASE_NAMES = {
    "workflow": "workflow-demo",
    "replay": "workflow-demo-replay",
    "retry": "workflow-retry",
    "chat": "chat-demo",
    "rewind": "chat-demo-rewind",
}


def _names(log: eventlog.EventLog[Any]) -> dict[str, str]:
    """Run ids not used yet in this log (a second demo on the same directory gets a suffix)."""
    existing = set(log.runs())
    for n in range(1, 10_000):
        suffix = "" if n == 1 else f"-{n}"
        names = {k: v + suffix for k, v in _BASE_NAMES.items()}
        if not existing & set(names.values()):
            return names
    raise eventlog.EventLogError(f"too many demo runs in this log already ({len(existing)} runs)")


def run_demo(path: str | None = None, console: Console | None = None) -> int:
    """Run both walkthroughs on the LMDB log at `path` (a new temporary directory if None); return 0."""
    console = console or Console()
    if path is None:
        path = tempfile.mkdtemp(prefix="eventlog-demo-")
    console.print(f"[bold]eventlog demo[/] — LMDB log at [cyan]{escape(path)}[/]")
    with eventlog.open(path) as log:
        names = _names(log)
        _workflow(log, console, names)
    _conversation(path, console, names)

    with eventlog.open(path) as log:
        report = log.verify()
        _heading(console, "What the demo wrote")
        console.print(
            f"verify: {report.runs} runs, {report.events} events, {report.checkpoints} checkpoints, "
            f"{'no problems' if report.ok else f'{len(report.problems)} problems'}"
        )
        cp2 = next(cp for cp in log.checkpoints.list(names["workflow"]) if cp.summary["superstep"] == 2)
        turns = [cp.offset for cp in log.checkpoints.list(names["chat"])]
        commands = (
            "runs",
            f"history {names['workflow']}",
            f"state {names['workflow']} --at {cp2.offset}",
            f"events {names['chat']} --kind llm",
            f"diff {names['chat']} {turns[0]} {turns[1]}",
            f"history {names['rewind']}",
            "verify",
        )
    console.print("Inspect it with the CLI:")
    for command in commands:
        console.print(f"  eventlog --log {escape(path)} {command}", highlight=False)
    console.print(escape("Or look at it in the browser (needs pip install 'eventlog[ui]'):"))
    console.print(f"  eventlog ui --log {escape(path)} --open", highlight=False)
    return 0 if report.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m eventlog.demo [--path DIR]`."""
    parser = argparse.ArgumentParser(
        prog="python -m eventlog.demo",
        description="Run the graph and conversation walkthroughs on an LMDB log.",
    )
    parser.add_argument("--path", help="LMDB directory to write (default: a new temporary directory)")
    args = parser.parse_args(argv)
    return run_demo(args.path)


if __name__ == "__main__":
    sys.exit(main())
