"""A scripted ADK model and an agent with a tool, offline: what the ADK tests run."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from google.adk.tools import ToolContext
from google.genai import types
from pydantic import Field


class ScriptedModel(BaseLlm):
    """Answers each call with the next of its scripted responses (no network)."""

    model: str = "scripted"
    script: list[LlmResponse] = Field(default_factory=list)
    calls: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        response = self.script[self.calls % len(self.script)]
        self.calls += 1
        yield response


def text(s: str) -> LlmResponse:
    return LlmResponse(content=types.Content(role="model", parts=[types.Part(text=s)]))


def call(name: str, **args: Any) -> LlmResponse:
    return LlmResponse(
        content=types.Content(role="model", parts=[types.Part(function_call=types.FunctionCall(name=name, args=args))])
    )


def weather(city: str, tool_context: ToolContext) -> dict[str, Any]:
    """The weather in a city."""
    tool_context.state["user:last_city"] = city
    tool_context.state["temp:scratch"] = "not kept"
    tool_context.state["lookups"] = tool_context.state.get("lookups", 0) + 1
    return {"city": city, "sky": "clear"}


def build_agent() -> LlmAgent:
    """An agent that looks the weather up once per turn and then answers."""
    script = [
        call("weather", city="Bern"),
        text("Clear in Bern."),
        call("weather", city="Basel"),
        text("Clear in Basel."),
    ]
    return LlmAgent(name="helper", model=ScriptedModel(script=script), tools=[weather], output_key="last_reply")


def user(s: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=s)])
