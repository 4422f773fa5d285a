"""What a resumed run takes from the log instead of making again: the model responses and the
tool outputs recorded after its last checkpoint.

A checkpoint is saved before each model call. A process killed after a model call returned,
or after some of the tool calls it asked for returned, but before the next checkpoint, left
`openai_agents.model_response` and `openai_agents.tool_output` events behind. On resume the
starting agent is cloned with a model that answers the recorded responses first (then calls
the agent's own model) and with function tools that return a recorded output for a call id
that has one (else call the tool): the run goes through the same steps, and no completed model
call or tool call is made twice. Only the clone is changed; the caller's agent and tools are not.

What is not taken: a response recorded by another agent than the starting one (after a
handoff), or when the run config names a model for every agent — that model call is made again,
and tool calls keep their recorded outputs only where the new response asks for the same call ids;
tools of agents other than the starting one.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Replay", "replaying"]


@dataclass
class Replay:
    """The records a resumed run takes, and what it took of them."""

    responses: list[dict[str, Any]] = field(default_factory=list)
    """Model responses not yet given back, oldest first."""
    outputs: dict[str, Any] = field(default_factory=dict)
    """Tool outputs by call id."""
    served_calls: set[str] = field(default_factory=set)
    """Call ids whose output was given back (the run hooks do not record them again)."""
    served_response: bool = False
    """The last model call was answered from a record (the run hooks do not record it again)."""


def replaying(agent: Any, replay: Replay, run_config: Any) -> Any:
    """`agent` cloned to take `replay`'s records first (the agent itself if there is nothing to take)."""
    from agents import FunctionTool
    from agents.models.interface import Model

    if getattr(run_config, "model", None) is not None or (
        replay.responses and replay.responses[0].get("agent") != agent.name
    ):
        replay.responses.clear()  # another model answers, or another agent called it: the call is made again
    if not replay.responses and not replay.outputs:
        return agent
    changes: dict[str, Any] = {}
    tools = [_taking_outputs(t, replay) if isinstance(t, FunctionTool) else t for t in agent.tools]
    if any(t is not u for t, u in zip(tools, agent.tools, strict=True)):
        changes["tools"] = tools
    if replay.responses:
        if isinstance(agent.model, Model):
            inner = agent.model
        else:
            provider = getattr(run_config, "model_provider", None)
            if provider is None:
                from agents.models.multi_provider import MultiProvider

                provider = MultiProvider()
            inner = provider.get_model(agent.model)
        changes["model"] = _model_class()(inner, replay, agent.name)
    return agent.clone(**changes)


def _taking_outputs(tool: Any, replay: Replay) -> Any:
    from agents.tool_context import ToolContext

    invoke = tool.on_invoke_tool

    async def on_invoke_tool(context: ToolContext[Any], arguments: str) -> Any:
        call_id = getattr(context, "tool_call_id", None)
        if call_id is not None and call_id in replay.outputs:
            replay.served_calls.add(call_id)
            return replay.outputs.pop(call_id)
        return await invoke(context, arguments)

    clone = copy.copy(tool)
    clone.on_invoke_tool = on_invoke_tool
    return clone


_model_type: Any = None


def _model_class() -> Any:
    """The replaying model class (made at first use: the SDK is imported then)."""
    global _model_type
    if _model_type is not None:
        return _model_type
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import Response, ResponseCompletedEvent, ResponseOutputItem
    from pydantic import TypeAdapter

    items = TypeAdapter(list[ResponseOutputItem])

    class ReplayingModel(Model):
        """Answers with the recorded responses first, then calls the agent's own model."""

        def __init__(self, inner: Any, replay: Replay, agent_name: str) -> None:
            self.inner, self.replay, self.agent_name = inner, replay, agent_name

        def _recorded(self) -> ModelResponse | None:
            if not self.replay.responses:
                return None
            if self.replay.responses[0].get("agent") != self.agent_name:
                self.replay.responses.clear()
                return None
            recorded = self.replay.responses.pop(0)
            self.replay.served_response = True
            return ModelResponse(
                output=items.validate_python(recorded["output"]),
                usage=Usage(),
                response_id=recorded.get("response_id"),
            )

        async def get_response(self, *args: Any, **kwargs: Any) -> Any:
            answer = self._recorded()
            if answer is not None:
                return answer
            return await self.inner.get_response(*args, **kwargs)

        async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            answer = self._recorded()
            if answer is None:
                async for event in self.inner.stream_response(*args, **kwargs):
                    yield event
                return
            response = Response(
                id=answer.response_id or "replayed",
                created_at=0,
                model="replayed",
                object="response",
                output=answer.output,
                tool_choice="auto",
                tools=[],
                parallel_tool_calls=True,
            )
            yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)

        async def close(self) -> None:
            close = getattr(self.inner, "close", None)
            if close is not None:
                await close()

    _model_type = ReplayingModel
    return _model_type
