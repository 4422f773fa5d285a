"""Event kinds: the standard execution events, and the registry for a user's own kinds.

Every event is a frozen msgspec Struct subclassing `Event`, tagged by a string that never
changes (`kind`). Schema evolution is a contract: new fields come last with defaults; a
kind's tag never changes; a renamed or reshaped kind is registered under a new tag.

A user's own kind::

    class Approved(eventlog.Event, tag="myapp.approved"):
        by: str

    eventlog.register(Approved)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Union

import msgspec

from .errors import InvalidEventError

__all__ = [
    "AssistantMessage",
    "Event",
    "Interrupted",
    "LLMCallCompleted",
    "LLMCallFailed",
    "LLMCallStarted",
    "Message",
    "Resumed",
    "RunCompleted",
    "RunFailed",
    "RunStarted",
    "StateUpdated",
    "StepCompleted",
    "StepFailed",
    "StepStarted",
    "SuperstepCompleted",
    "ToolCall",
    "ToolCallCompleted",
    "ToolCallFailed",
    "ToolCallStarted",
    "TurnCompleted",
    "TurnFailed",
    "TurnStarted",
    "UserMessage",
    "kinds",
    "register",
    "upcaster",
]


class Event(msgspec.Struct, frozen=True, tag_field="kind", omit_defaults=True, gc=False):
    """Base class of every event kind. Subclass it with `tag="..."` and `register` it.

    Events are immutable and hold no reference cycles, so the garbage collector does not
    track them (`gc=False`): folding a long run then does not make collections slow."""


class ToolCall(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """A tool call requested by an LLM."""

    id: str
    """Id that ties the call to its result."""
    name: str
    """Name of the tool."""
    arguments: dict[str, Any] = {}
    """Arguments, as the LLM gave them."""


class Message(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    """One chat message."""

    role: str
    """`system`, `user`, `assistant` or `tool`."""
    content: str = ""
    """The text."""
    tool_calls: list[ToolCall] = []
    """Tool calls an assistant message asks for."""
    tool_call_id: str | None = None
    """For a `tool` message: the call it answers."""
    name: str | None = None
    """For a `tool` message: the tool's name."""


# -- run -------------------------------------------------------------------------------


class RunStarted(Event, frozen=True, tag="run.started"):
    """A run began with its input values."""

    input: dict[str, Any] = {}
    """Initial values of the state."""
    next_nodes: list[str] = []
    """Nodes to run in the first superstep (graph runs)."""
    graph: str | None = None
    """Name of the graph or agent that runs."""


class RunCompleted(Event, frozen=True, tag="run.completed"):
    """The run ended well."""

    output: Any = None
    """What the run returned."""


class RunFailed(Event, frozen=True, tag="run.failed"):
    """The run ended with an error."""

    error: str
    """The error, as text."""
    node: str | None = None
    """The node that failed, if any."""


# -- conversation ----------------------------------------------------------------------


class TurnStarted(Event, frozen=True, tag="turn.started"):
    """A conversation turn began."""

    turn: int
    """Number of the turn, from 1."""


class TurnCompleted(Event, frozen=True, tag="turn.completed"):
    """A conversation turn ended with the assistant's answer."""

    turn: int
    """Number of the turn, from 1."""


class TurnFailed(Event, frozen=True, tag="turn.failed"):
    """A conversation turn ended with an error."""

    turn: int
    """Number of the turn, from 1."""
    error: str
    """The error, as text."""


class UserMessage(Event, frozen=True, tag="message.user"):
    """A message from the user."""

    content: str
    """The text."""


class AssistantMessage(Event, frozen=True, tag="message.assistant"):
    """A message from the assistant that no LLM call produced (a canned or edited answer)."""

    content: str
    """The text."""
    tool_calls: list[ToolCall] = []
    """Tool calls the message asks for."""


# -- LLM and tools ---------------------------------------------------------------------


class LLMCallStarted(Event, frozen=True, tag="llm.started"):
    """An LLM was called.

    The prompt is the run's first `context_messages` messages followed by `messages`:
    the history already in the log is referenced, not stored again.
    """

    call_id: str
    """Id of the call, shared with its completion or failure."""
    model: str
    """Model name."""
    context_messages: int = 0
    """How many of the run's messages (from the first) the prompt holds."""
    messages: list[Message] = []
    """Extra messages sent that are not in the run's messages (a system prompt, say)."""
    parameters: dict[str, Any] = {}
    """Sampling parameters."""


class LLMCallCompleted(Event, frozen=True, tag="llm.completed"):
    """An LLM answered; its output message is appended to the run's messages."""

    call_id: str
    """Id of the call."""
    model: str
    """Model name."""
    output: Message
    """The message the LLM returned."""
    input_tokens: int = 0
    """Prompt tokens."""
    output_tokens: int = 0
    """Completion tokens."""
    latency_ms: float = 0.0
    """Wall time of the call."""


class LLMCallFailed(Event, frozen=True, tag="llm.failed"):
    """An LLM call failed."""

    call_id: str
    """Id of the call."""
    model: str
    """Model name."""
    error: str
    """The error, as text."""
    latency_ms: float = 0.0
    """Wall time of the call."""


class ToolCallStarted(Event, frozen=True, tag="tool.started"):
    """A tool was called."""

    call_id: str
    """Id of the call (the LLM's tool call id)."""
    tool: str
    """Tool name."""
    arguments: dict[str, Any] = {}
    """Arguments passed."""


class ToolCallCompleted(Event, frozen=True, tag="tool.completed"):
    """A tool returned; its output is appended to the run's messages as a `tool` message."""

    call_id: str
    """Id of the call."""
    tool: str
    """Tool name."""
    output: Any = None
    """What the tool returned."""
    latency_ms: float = 0.0
    """Wall time of the call."""


class ToolCallFailed(Event, frozen=True, tag="tool.failed"):
    """A tool raised."""

    call_id: str
    """Id of the call."""
    tool: str
    """Tool name."""
    error: str
    """The error, as text."""
    latency_ms: float = 0.0
    """Wall time of the call."""


# -- graph steps -----------------------------------------------------------------------


class StepStarted(Event, frozen=True, tag="step.started"):
    """A node began running in a superstep."""

    node: str
    """Node name."""
    superstep: int
    """Superstep number, from 1."""


class StepCompleted(Event, frozen=True, tag="step.completed"):
    """A node finished; its update is merged into the state's values."""

    node: str
    """Node name."""
    superstep: int
    """Superstep number, from 1."""
    update: dict[str, Any] = {}
    """Keys the node set."""


class StepFailed(Event, frozen=True, tag="step.failed"):
    """A node raised."""

    node: str
    """Node name."""
    superstep: int
    """Superstep number, from 1."""
    error: str
    """The error, as text."""


class SuperstepCompleted(Event, frozen=True, tag="superstep.completed"):
    """Every node of a superstep finished."""

    superstep: int
    """Superstep number, from 1."""
    next_nodes: list[str] = []
    """Nodes to run in the next superstep; empty when the graph reached its end."""


class StateUpdated(Event, frozen=True, tag="state.updated"):
    """Values changed by hand (an operator's edit, for example before a resume)."""

    values: dict[str, Any]
    """Keys set."""
    as_node: str | None = None
    """Node the edit is attributed to."""


class Interrupted(Event, frozen=True, tag="interrupted"):
    """The run paused for a human."""

    nodes: list[str]
    """Nodes paused."""
    reason: str = ""
    """Why, for the human."""
    payload: Any = None
    """What the human needs to decide."""


class Resumed(Event, frozen=True, tag="resumed"):
    """A paused run continued with a value from a human."""

    value: Any = None
    """The human's answer, delivered to the paused nodes."""
    nodes: list[str] = []
    """Nodes resumed (default: every paused node)."""


_STANDARD: tuple[type[Event], ...] = (
    RunStarted, RunCompleted, RunFailed,
    TurnStarted, TurnCompleted, TurnFailed, UserMessage, AssistantMessage,
    LLMCallStarted, LLMCallCompleted, LLMCallFailed,
    ToolCallStarted, ToolCallCompleted, ToolCallFailed,
    StepStarted, StepCompleted, StepFailed, SuperstepCompleted,
    StateUpdated, Interrupted, Resumed,
)  # fmt: skip

_registry: dict[str, type[Event]] = {}
_upcasters: dict[str, tuple[type[Event], Callable[[dict[str, Any]], dict[str, Any]]]] = {}
_generation = 0


def register(
    kind: type[Event], *, upcasters: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None
) -> type[Event]:
    """Register a user's event kind (usable as a class decorator). Its tag must be new.

    `upcasters` reads older shapes of the kind: for each tag the kind was stored under
    before, a function from the old event's fields (a dict, without `kind`) to the fields of
    this kind. An event stored under an old tag is read as this kind through it.

    Raises InvalidEventError for a class that cannot be an event kind (not an `Event`
    subclass, no string tag, another `tag_field`, `array_like`, a tag that is taken).
    """
    global _generation
    if not (isinstance(kind, type) and issubclass(kind, Event)) or kind is Event:
        raise InvalidEventError(f"{kind!r} is not a subclass of eventlog.Event")
    config = kind.__struct_config__
    tag = config.tag
    if not isinstance(tag, str) or not tag:
        raise InvalidEventError(f"{kind.__name__} needs a string tag: class {kind.__name__}(Event, tag='app.name')")
    if config.tag_field != "kind" or config.array_like:
        raise InvalidEventError(
            f"{kind.__name__}: an event kind is a map tagged by its `kind` field; "
            "do not set tag_field or array_like on it"
        )
    if upcasters is not None and not isinstance(upcasters, Mapping):
        raise InvalidEventError(f"{kind.__name__}: upcasters maps old tags (strings) to functions, not {upcasters!r}")
    old_tags = dict(upcasters or {})
    for old, fn in old_tags.items():
        if not isinstance(old, str) or not old or not callable(fn):
            raise InvalidEventError(f"{kind.__name__}: upcasters maps old tags (strings) to functions")
        if old == tag or old in _registry or (old in _upcasters and _upcasters[old][0] is not kind):
            raise InvalidEventError(f"{kind.__name__}: the old tag {old!r} names another kind")
    known = _registry.get(tag)
    if known is kind:
        _upcasters.update({old: (kind, fn) for old, fn in old_tags.items()})
        return kind
    if known is not None:
        raise InvalidEventError(f"event tag {tag!r} is taken by {known.__module__}.{known.__qualname__}")
    if tag in _upcasters:
        raise InvalidEventError(f"event tag {tag!r} is an old tag of {_upcasters[tag][0].__qualname__}")
    try:  # the kind must fit in one tagged union with every other kind, as the decoders need
        union = Union[(*_registry.values(), kind)]  # type: ignore[valid-type]
        msgspec.msgpack.Decoder(union)
        msgspec.json.Decoder(union)
        msgspec.msgpack.Encoder().encode([tag, *old_tags, *kind.__struct_fields__, *kind.__struct_encode_fields__])
    except Exception as exc:  # noqa: BLE001 - any bad kind class (an annotation naming no type: NameError) is refused
        raise InvalidEventError(
            f"{kind.__name__} cannot be decoded beside the other event kinds: {type(exc).__name__}: {exc}"
        ) from None
    _registry[tag] = kind
    _upcasters.update({old: (kind, fn) for old, fn in old_tags.items()})
    _generation += 1
    return kind


def kinds() -> dict[str, type[Event]]:
    """Every registered kind by tag."""
    return dict(_registry)


def generation() -> int:
    """Changes whenever a kind is registered (codecs rebuild their decoders then)."""
    return _generation


def upcaster(tag: str) -> tuple[type[Event], Callable[[dict[str, Any]], dict[str, Any]]] | None:
    """The kind an event stored under an old `tag` is read as, and the function that reshapes it."""
    return _upcasters.get(tag)


for _kind in _STANDARD:
    register(_kind)
