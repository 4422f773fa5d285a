"""A scripted model and small agents for the tests of eventlog.openai_agents (offline, no network).

`ScriptedModel` implements the SDK's `Model` interface: each call returns the next scripted
output (a list of Responses output items). `kill_at` makes the n-th call end the process with
SIGKILL, as a crash would, after the checkpoint taken before that call; `ledger` is a file
each tool call appends a line to, so that a test counts tool calls across processes.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, RunHooks, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)


def reply(text: str, item_id: str = "msg") -> ResponseOutputMessage:
    """An assistant message."""
    part = ResponseOutputText(text=text, type="output_text", annotations=[], logprobs=[])
    return ResponseOutputMessage(id=item_id, type="message", role="assistant", status="completed", content=[part])


def call(name: str, args: dict[str, Any], call_id: str) -> ResponseFunctionToolCall:
    """A function tool call."""
    return ResponseFunctionToolCall(
        id=call_id, call_id=call_id, type="function_call", name=name, arguments=json.dumps(args)
    )


class ScriptedModel(Model):
    """Answers each call with the next scripted output; `calls` counts the calls made."""

    def __init__(self, script: Sequence[Sequence[Any]], *, skip: int = 0, kill_at: int | None = None) -> None:
        self.script = [list(turn) for turn in script]
        self.calls = skip
        """Calls made (start at `skip` to go on with a script another process began)."""
        self.inputs: list[Any] = []
        self.kill_at = kill_at

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        model_input = kwargs["input"] if "input" in kwargs else args[1]
        self.calls += 1
        if self.kill_at == self.calls:
            os.kill(os.getpid(), signal.SIGKILL)
        self.inputs.append(model_input)
        output = self.script[self.calls - 1]
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        return ModelResponse(output=output, usage=usage, response_id=f"resp-{self.calls}")

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        answer = await self.get_response(*args, **kwargs)
        response = Response(
            id=str(answer.response_id),
            created_at=0,
            model="scripted",
            object="response",
            output=answer.output,
            tool_choice="auto",
            tools=[],
            parallel_tool_calls=False,
        )
        yield ResponseCreatedEvent(type="response.created", response=response, sequence_number=0)
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=1)


def tools(ledger: Path | None = None) -> list[FunctionTool]:
    """`add` and `refund` (which needs an approval); each call appends a line to `ledger`."""
    calls: list[str] = []

    def note(line: str) -> None:
        calls.append(line)
        if ledger is not None:
            with open(ledger, "a") as f:
                f.write(line + "\n")

    @function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        note(f"add {a} {b}")
        return a + b

    @function_tool(needs_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        note(f"refund {order}")
        return f"refunded {order}"

    return [add, refund]


ADD_SCRIPT = [
    [call("add", {"a": 1, "b": 2}, "c1")],
    [call("add", {"a": 3, "b": 4}, "c2")],
    [reply("1+2=3 and 3+4=7")],
]
"""Two tool calls, each in its own model turn, then the answer."""

REFUND_SCRIPT = [
    [call("refund", {"order": "A-17"}, "r1")],
    [reply("Order A-17 is refunded.")],
]


def agent(model: Model, ledger: Path | None = None) -> Agent[Any]:
    return Agent(name="clerk", instructions="Be exact.", model=model, tools=list(tools(ledger)))


set_tracing_disabled(True)  # offline: no trace export


class KillAfterTool(RunHooks[Any]):
    """Run hooks that end the process with SIGKILL right after the n-th tool call returned (and was recorded)."""

    def __init__(self, n: int) -> None:
        self.n = n

    async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
        self.n -= 1
        if self.n == 0:
            os.kill(os.getpid(), signal.SIGKILL)
