"""What a conversation's `execute()` records: wayflowcore's events turned into log events."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Protocol

from ..events import (
    Event,
    Interrupted,
    LLMCallCompleted,
    LLMCallFailed,
    LLMCallStarted,
    Resumed,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallStarted,
)
from ._messages import log_message, message_event, plain, tool_names
from ._types import CheckpointingInterval

__all__ = ["Listener", "Recorded"]

_ITERATION_FACTS = (
    ("agent_iteration", "curr_iter"),
    ("flow_step_name", "current_step_name"),
    ("nesting_level", "nesting_level"),
)
"""An internal checkpoint's metadata key, and the attribute of the iteration's execution state it is read from."""


class Recorded(Protocol):
    """What the listener asks of the conversation it records (`CheckpointedConversation`)."""

    interval: CheckpointingInterval

    def _append(self, events: list[Event]) -> None: ...

    def _messages(self) -> list[Any]: ...

    def _save(
        self,
        reason: str,
        metadata: Mapping[str, Any] | None,
        checkpoint_id: str | None,
        *,
        before: Sequence[Event] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> Any: ...


class Listener:
    """Turns wayflowcore's events during one `execute()` into log events, and saves internal checkpoints.

    wayflowcore's events carry no conversation id; the listener is registered only around one
    conversation's `execute()`, so every event it sees belongs to that conversation or to its
    sub-conversations.
    """

    def __init__(self, owner: Recorded) -> None:
        self.owner = owner
        self.llm_since = False
        self.llm_calls: list[tuple[str, str, int]] = []  # open calls: id, model, start time (ns)
        self.tools: dict[str, tuple[str, int]] = {}  # open executions by tool request id: name, start time
        self.confirming: dict[str, str] = {}  # confirmations answered, by tool request id: tool name
        self.last_start: Any = None  # the last iteration-started event seen

    def __call__(self, event: Any) -> None:
        handler = self._handlers.get(type(event).__name__)
        if handler is not None:
            handler(self, event)

    def _append(self, *events: Event) -> None:
        self.owner._append(list(events))

    def _llm_request(self, event: Any) -> None:
        model = str(getattr(event.llm, "model_id", "") or event.llm.name)
        self.llm_calls.append((event.event_id, model, event.timestamp))
        messages = len(self.owner._messages())
        self._append(LLMCallStarted(call_id=event.event_id, model=model, context_messages=messages))

    def _llm_response(self, event: Any) -> None:
        if not self.llm_calls:
            return
        call_id, model, start = self.llm_calls.pop()
        usage = event.completion.token_usage
        self.llm_since = True
        self._append(
            LLMCallCompleted(
                call_id=call_id,
                model=model,
                output=log_message(event.completion.message),
                input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
                latency_ms=(event.timestamp - start) / 1e6,
            )
        )

    def _tool_start(self, event: Any) -> None:
        request = event.tool_request
        if request.tool_request_id in self.confirming:
            del self.confirming[request.tool_request_id]
            self._append(Resumed(value=True, nodes=[request.tool_request_id]))
        self.tools[request.tool_request_id] = (event.tool.name, event.timestamp)
        self._append(
            ToolCallStarted(call_id=request.tool_request_id, tool=event.tool.name, arguments=plain(request.args))
        )

    def _tool_result(self, event: Any) -> None:
        result = event.tool_result
        name, start = self.tools.pop(result.tool_request_id, (event.tool.name, event.timestamp))
        self._append(
            ToolCallCompleted(
                call_id=result.tool_request_id,
                tool=name,
                output=plain(result.content),
                latency_ms=(event.timestamp - start) / 1e6,
            )
        )

    def _confirmation_start(self, event: Any) -> None:
        request = event.tool_request
        payload = {
            "tool": event.tool.name,
            "tool_request_id": request.tool_request_id,
            "arguments": plain(request.args),
        }
        self._append(Interrupted(nodes=[request.tool_request_id], reason=f"confirm {event.tool.name}", payload=payload))

    def _confirmation_end(self, event: Any) -> None:
        self.confirming[event.tool_request.tool_request_id] = event.tool.name

    def _message_added(self, event: Any) -> None:
        message = event.message
        if self.llm_calls or not any(m is message for m in self.owner._messages()[-4:]):
            return  # an LLM's output (recorded with its call) or a sub-conversation's message
        result = message.tool_result
        if result is not None and result.tool_request_id in self.tools:
            return  # recorded with the tool's result
        if result is not None and result.tool_request_id in self.confirming:  # a confirmation was declined
            self.confirming.pop(result.tool_request_id)
            self._append(Resumed(value=False, nodes=[result.tool_request_id]))
        names = tool_names(self.owner._messages())
        made = message_event(message, names)
        if made is not None:
            self._append(made)

    def _exception(self, event: Any) -> None:
        error = f"{type(event.exception).__name__}: {event.exception}"
        if self.llm_calls:
            call_id, model, start = self.llm_calls.pop()
            self._append(
                LLMCallFailed(call_id=call_id, model=model, error=error, latency_ms=(event.timestamp - start) / 1e6)
            )
        elif self.tools:
            call_id, (name, start) = self.tools.popitem()
            self._append(
                ToolCallFailed(call_id=call_id, tool=name, error=error, latency_ms=(event.timestamp - start) / 1e6)
            )

    def _iteration_started(self, event: Any) -> None:
        """WayFlow's rule (docs/guides/wayflow.md, "Checkpointing intervals"): an internal checkpoint
        when an agent or flow iteration starts, at any nesting level; with LLM_TURNS only when an
        LLM answered since the previous one."""
        self.last_start = event
        interval = self.owner.interval
        if interval is CheckpointingInterval.ALL_INTERNAL_TURNS or (
            interval is CheckpointingInterval.LLM_TURNS and self.llm_since
        ):
            self._save_internal(event)

    def flush(self) -> None:
        """At the end of a turn that returns: with LLM_TURNS, the checkpoint an LLM answer since
        the last iteration start still calls for (before the turn's own)."""
        if self.owner.interval is CheckpointingInterval.LLM_TURNS and self.llm_since:
            self._save_internal(self.last_start)

    def _save_internal(self, event: Any) -> None:
        extra: dict[str, Any] = {"llm_used_in_previous_turn": self.llm_since}
        if event is not None:
            extra["event_type"] = type(event).__name__
            state = getattr(event, "execution_state", None)
            for key, attr in _ITERATION_FACTS:
                value = getattr(state, attr, None)
                if isinstance(value, str | int) and not isinstance(value, bool):
                    extra[key] = value
        self.owner._save("internal_turn_boundary", None, None, extra=extra)
        self.llm_since = False

    _handlers: ClassVar[dict[str, Callable[[Listener, Any], None]]] = {
        "LlmGenerationRequestEvent": _llm_request,
        "LlmGenerationResponseEvent": _llm_response,
        "ToolExecutionStartEvent": _tool_start,
        "ToolExecutionResultEvent": _tool_result,
        "ToolConfirmationRequestStartEvent": _confirmation_start,
        "ToolConfirmationRequestEndEvent": _confirmation_end,
        "ConversationMessageAddedEvent": _message_added,
        "ExceptionRaisedEvent": _exception,
        "AgentExecutionIterationStartedEvent": _iteration_started,
        "FlowExecutionIterationStartedEvent": _iteration_started,
    }
