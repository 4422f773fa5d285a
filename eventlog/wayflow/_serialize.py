"""wayflowcore's objects as plain data: a conversation without its component tree (the live one
is bound back on restore), and the shape of a component that a restore checks.

A restore builds from stored data only wayflowcore's own conversation types (conversations,
their execution states and events, message lists, messages and their contents, statuses, tool
requests and results, wayflowcore's own execution interrupts). Every other `_component_type` a
checkpoint names is refused before wayflowcore reads it, and the deserialization context refuses
any other type wayflowcore would build, also where a field's type names it rather than the data;
components (agents, flows, steps, tools, models) come only from the live component given, found
by reference (docs/durability.md, guarantee 7)."""

from __future__ import annotations

import copy
import functools
import json
import re
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

import msgspec

from ..errors import EventLogError, UnencodableValueError
from ._events import WayflowState
from ._types import IncompatibleComponentError, WayflowCheckpointError

if TYPE_CHECKING:
    from wayflowcore.conversation import Conversation as WayflowConversation

__all__ = [
    "RANDOM_ID",
    "check_compatible",
    "check_stored_types",
    "components_of",
    "definition_of",
    "dump_conversation",
    "load_conversation",
    "shape_of",
]

_EXTERNAL: dict[str, Any] = {"$external": True}
RANDOM_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_STEP_KEY = "$step:"
_IDENTITIES = "$components"
"""Key of the stored conversation's map from each component reference to the component's type and
name: how a nested component whose id is new in each process is found back."""


def components_of(root: Any) -> dict[str, Any]:
    """Every wayflowcore component reachable from `root` through public attributes, by reference."""
    from wayflowcore.component import Component
    from wayflowcore.serialization.context import SerializationContext

    found: dict[str, Any] = {}
    stack = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, Component):
            ref = SerializationContext.get_reference(item)
            if ref in found:
                continue
            found[ref] = item
            stack.extend(v for k, v in vars(item).items() if not k.startswith("_"))
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def dump_conversation(conversation: WayflowConversation, component: Any, conversation_id: str) -> Any:
    """The conversation as plain data: the component tree left out (it is the live one on restore),
    flow steps named by their names instead of their (random) ids."""
    from wayflowcore.serialization.context import SerializationContext
    from wayflowcore.serialization.serializer import serialize_to_dict

    components = components_of(component)
    external = {**components, **_runtime_copies(conversation, components)}
    context = SerializationContext(root=conversation)
    for item in external.values():
        context.record_obj_dict(item, _EXTERNAL)  # referenced, not serialized
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = serialize_to_dict(conversation, context)
    refs = data.get("_referenced_objects", {})
    data["_referenced_objects"] = {k: v for k, v in refs.items() if v is not _EXTERNAL}
    named = {ref: _identity(external[ref]) for ref in sorted(set(_refs(data))) if ref in external}
    data[_IDENTITIES] = {ref: who for ref, who in named.items() if who is not None}
    try:
        plain = msgspec.msgpack.decode(msgspec.msgpack.encode(data))  # a copy that shares nothing with the live objects
    except (TypeError, ValueError, OverflowError) as exc:
        raise UnencodableValueError(
            f"conversation {conversation_id!r} holds a value that cannot be stored ({exc}); keep inputs, variables "
            f"and tool outputs to plain data (str, numbers, lists, dicts)"
        ) from exc
    _rename_step_keys(plain, components, to_names=True, conversation_id=conversation_id)
    return plain


def load_conversation(data: Any, component: Any, conversation_id: str) -> WayflowConversation:
    """A wayflowcore conversation rebuilt from `dump_conversation`'s data, bound to the live component
    tree. Stored data that names a type a restore does not build, or does not read back, is refused
    with WayflowCheckpointError before anything is built from it."""
    if not isinstance(data, dict):
        raise WayflowCheckpointError(f"conversation {conversation_id!r}: the checkpoint holds no conversation")
    check_stored_types(data, conversation_id)  # named early; `_guarded_context` holds it for every type built
    try:
        return _load(copy.deepcopy(data), component, conversation_id)
    except EventLogError:
        raise
    except Exception as exc:  # noqa: BLE001 - wayflowcore's refusal of stored data, named
        raise WayflowCheckpointError(
            f"conversation {conversation_id!r}: the checkpoint does not read back ({type(exc).__name__}: {exc})"
        ) from None


def _load(data: dict[str, Any], component: Any, conversation_id: str) -> WayflowConversation:
    from wayflowcore.conversation import Conversation
    from wayflowcore.executors.executionstatus import ToolExecutionConfirmationStatus
    from wayflowcore.serialization.context import DeserializationContext
    from wayflowcore.serialization.serializer import autodeserialize_from_dict

    identities = data.pop(_IDENTITIES, None)
    bound = _bind(data, components_of(component), identities if isinstance(identities, dict) else {}, conversation_id)
    _rename_step_keys(data, bound, to_names=False, conversation_id=conversation_id)
    context = _guarded_context(DeserializationContext, conversation_id)
    for ref, item in bound.items():
        context.recorddeserialized_object(ref, item)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conversation = autodeserialize_from_dict(data, context)
    if not isinstance(conversation, Conversation):
        raise WayflowCheckpointError(f"conversation {conversation_id!r}: the checkpoint holds no conversation")
    if isinstance(conversation.status, ToolExecutionConfirmationStatus):
        _relink_tool_requests(conversation, conversation.status)
    return conversation


def _relink_tool_requests(conversation: WayflowConversation, status: Any) -> None:
    """A tool-confirmation pause: every pending request, at every nesting level (sub-agents, swarm
    members, workers, agents in flow steps, nested flows), must be the status's own object, the
    one `confirm_tool_execution` marks, or the agent that asked asks again after a restore.
    Deserialized, each place holds a copy: each is replaced by the status's request of its id."""
    from wayflowcore.conversation import Conversation
    from wayflowcore.executors._executionstate import ConversationExecutionState
    from wayflowcore.executors.executionstatus import ExecutionStatus
    from wayflowcore.tools import ToolRequest

    by_id = {r.tool_request_id: r for r in status.tool_requests}

    def same(item: Any) -> Any:
        if isinstance(item, ToolRequest):
            return by_id.get(item.tool_request_id, item)
        if isinstance(item, list) and any(isinstance(x, ToolRequest) for x in item):
            return [same(x) for x in item]
        return item

    for item in _reachable(conversation, (Conversation, ConversationExecutionState, ExecutionStatus)):
        if item is not status:
            for name, value in list(vars(item).items()):
                if (new := same(value)) is not value:
                    setattr(item, name, new)


def _bind(data: Any, components: dict[str, Any], identities: dict[str, Any], conversation_id: str) -> dict[str, Any]:
    """The live component for each reference the stored conversation makes: by reference (type and
    id), else the one component of the type and name the checkpoint recorded for it. A reference
    neither finds is refused, named (nothing is built from stored data either way)."""
    bound = dict(components)
    by_identity: dict[tuple[str, str], list[Any]] = {}
    for item in components.values():
        if (mine := _identity(item)) is not None:
            by_identity.setdefault((mine[0], mine[1]), []).append(item)
    missing = []
    for ref in sorted(set(_refs(data))):
        if ref in data.get("_referenced_objects", {}) or ref in bound or "/" not in ref:
            continue
        who = identities.get(ref)
        if not (isinstance(who, list) and len(who) == 2):
            missing.append(ref)
            continue
        found = by_identity.get((str(who[0]), str(who[1])), [])
        if len(found) == 1:  # a nested component whose id is new in this process
            bound[ref] = found[0]
        else:
            missing.append(f"{ref} ({who[0]} {who[1]!r}{', more than one' if found else ''})")
    if missing:
        raise IncompatibleComponentError(
            f"conversation {conversation_id!r}: the checkpoint refers to {', '.join(missing)}, which the component "
            f"given does not have by id, nor once by type and name; build the component with the same ids or names"
        )
    return bound


def _identity(item: Any) -> list[str] | None:
    """A component's type and name, when its name is the user's (not one wayflowcore generated)."""
    from wayflowcore.idgeneration import IdGenerator

    name = getattr(item, "name", None)
    if not isinstance(name, str) or not name or IdGenerator.is_auto_generated(name) or RANDOM_ID.match(name):
        return None
    return [type(item).__name__, name]


def _runtime_copies(conversation: WayflowConversation, components: dict[str, Any]) -> dict[str, Any]:
    """Components that sub-conversations run but the live tree does not hold: the copies of its
    agents a swarm or a manager makes for each round (with their own tools, prompt and, in a
    swarm, the agent's name as id), by reference. They are stored as references to the agent
    they copy, found back by type and name: the executor makes a new copy before each round."""
    from wayflowcore.conversation import Conversation
    from wayflowcore.executors._executionstate import ConversationExecutionState
    from wayflowcore.serialization.context import SerializationContext

    names = {tuple(who) for item in components.values() if (who := _identity(item)) is not None}
    found: dict[str, Any] = {}
    for item in _reachable(conversation, (Conversation, ConversationExecutionState), skip="component"):
        if isinstance(item, Conversation):
            run = getattr(item, "component", None)
            ref = None if run is None else SerializationContext.get_reference(run)
            if ref is not None and ref not in components and tuple(_identity(run) or ()) in names:
                found[ref] = run
    return found


def _reachable(root: Any, kinds: tuple[type, ...], skip: str = "") -> Iterator[Any]:
    """Each object of `kinds` reachable from `root` through dicts, lists, tuples and the attributes
    of such objects (but `skip`), once. The caller may change an object's attributes when it is
    yielded: what they hold afterwards is walked."""
    seen: set[int] = set()
    stack: list[Any] = [root]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif isinstance(item, kinds) and id(item) not in seen:
            seen.add(id(item))
            yield item
            stack.extend(v for k, v in vars(item).items() if k != skip)


@functools.cache
def _stored_type_ok(cls: type) -> bool:
    """A type a restore may build from stored data: one of wayflowcore's own conversation types."""
    from wayflowcore.conversation import Conversation
    from wayflowcore.executors._events.event import Event
    from wayflowcore.executors._executionstate import ConversationExecutionState
    from wayflowcore.executors._swarmconversation import SwarmThread, SwarmUser
    from wayflowcore.executors.executionstatus import ExecutionStatus
    from wayflowcore.executors.interrupts.executioninterrupt import ExecutionInterrupt
    from wayflowcore.messagelist import Message, MessageContent, MessageList
    from wayflowcore.tools import ToolRequest, ToolResult

    bases: tuple[type, ...] = (Conversation, ConversationExecutionState, Event, ExecutionStatus, ExecutionInterrupt)
    bases += (Message, MessageContent, MessageList, ToolRequest, ToolResult, SwarmThread, SwarmUser)
    return issubclass(cls, bases) and cls.__module__.split(".")[0] == "wayflowcore"


def _refusal(conversation_id: str, name: object) -> WayflowCheckpointError:
    return WayflowCheckpointError(
        f"conversation {conversation_id!r}: the checkpoint holds a {name!r}, which a restore does not build from "
        f"stored data (components come from the component given)"
    )


def _guarded_context(base: type, conversation_id: str) -> Any:
    """wayflowcore's deserialization context, refusing every type `_stored_type_ok` does not allow.
    Everything wayflowcore builds from data, named by `_component_type` or by a field's type
    (a flow state's `flow`, an interrupt's models), asks the context for its plugin first;
    live components are found by reference before that."""

    class Guarded(base):  # type: ignore[misc]
        def get_deserialization_plugin_for_object(self, obj_type: Any) -> Any:
            if not (isinstance(obj_type, type) and _stored_type_ok(obj_type)):
                raise _refusal(conversation_id, getattr(obj_type, "__name__", obj_type))
            return super().get_deserialization_plugin_for_object(obj_type)

    return Guarded()


def _named_type(name: object, conversation_id: str) -> type:
    """The wayflowcore type a serialized object's `_component_type` names; WayflowCheckpointError for none."""
    from wayflowcore.serialization.serializer import SerializableObject

    try:
        cls = SerializableObject.get_component(name) if isinstance(name, str) else None
    except KeyError:
        cls = None
    if cls is None:
        raise WayflowCheckpointError(
            f"conversation {conversation_id!r}: the checkpoint names {name!r}, which is not a wayflowcore type"
        )
    return cast(type, cls)


def check_stored_types(data: Any, conversation_id: str) -> None:
    """Refuse a checkpoint that names a type a restore does not build from stored data (see above)."""
    from wayflowcore.serialization.serializer import _import_all_submodules

    _import_all_submodules("wayflowcore")  # as wayflowcore's reader does first: every type is registered
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "_component_type" in item and not _stored_type_ok(_named_type(item["_component_type"], conversation_id)):
                raise _refusal(conversation_id, item["_component_type"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def without_components(data: Any, conversation_id: str) -> Any:
    """A copy of a serialized conversation without the components it holds, for a reader that
    binds its references to live components (wayflowcore's Responses service, to the agent it
    serves): each one in a `_referenced_objects` table is left out, and only its `$ref` stays. Any
    other type a restore does not build from stored data is refused (WayflowCheckpointError)."""
    from wayflowcore.serialization.serializer import _import_all_submodules

    _import_all_submodules("wayflowcore")

    def component(item: Any) -> bool:
        if not isinstance(item, dict) or "_component_type" not in item:
            return False
        return not _stored_type_ok(_named_type(item["_component_type"], conversation_id))

    def kept(item: Any) -> Any:
        if isinstance(item, list):
            return [kept(v) for v in item]
        if not isinstance(item, dict):
            return item
        if component(item):
            raise _refusal(conversation_id, item["_component_type"])
        return {
            k: {ref: kept(obj) for ref, obj in v.items() if not component(obj)}
            if k == "_referenced_objects" and isinstance(v, dict)
            else kept(v)
            for k, v in item.items()
        }

    return kept(data)


def _refs(data: Any) -> Iterator[str]:
    """Every `$ref` in serialized data."""
    stack = [data]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                yield ref
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _rename_step_keys(data: Any, components: dict[str, Any], *, to_names: bool, conversation_id: str) -> None:
    """Flow state keys made of a step's id (random per process) become `$step:[name, key]`, and back."""
    for value in data.get("_referenced_objects", {}).values():
        if not isinstance(value, dict) or value.get("_component_type") != "FlowConversationExecutionState":
            continue
        flow = components.get(str((value.get("flow") or {}).get("$ref")))
        steps: dict[str, Any] = dict(getattr(flow, "steps", {}) or {})
        current = value.get("current_step_name")
        if not to_names and current is not None and current not in steps:
            raise IncompatibleComponentError(
                f"conversation {conversation_id!r}: the checkpoint is at step {current!r}, which flow "
                f"{getattr(flow, 'id', '?')!r} does not have (steps: {sorted(steps)}); keep step names stable"
            )
        keys = value.get("internal_context_key_values")
        if not isinstance(keys, dict):
            continue
        renamed: dict[str, Any] = {}
        for key, item in keys.items():
            renamed[_step_key(key, steps, to_names, conversation_id)] = item
        value["internal_context_key_values"] = renamed


def _step_key(key: str, steps: dict[str, Any], to_names: bool, conversation_id: str) -> str:
    if to_names:
        for name, step in steps.items():
            prefix = f"{step.id}_"
            if key.startswith(prefix):
                return _STEP_KEY + json.dumps([name, key[len(prefix) :]])
        return key
    if not key.startswith(_STEP_KEY):
        return key
    try:
        name, rest = json.loads(key[len(_STEP_KEY) :])
        if not isinstance(name, str) or not isinstance(rest, str):
            raise TypeError(key)
    except (ValueError, TypeError, RecursionError):  # a malformed or deeply nested key: named, not raised raw
        raise WayflowCheckpointError(
            f"conversation {conversation_id!r}: the checkpoint holds a step key that does not decode: {key[:80]!r}"
        ) from None
    if name not in steps:
        raise IncompatibleComponentError(
            f"conversation {conversation_id!r}: the checkpoint has state for step {name!r}, which the flow given "
            f"does not have (steps: {sorted(steps)}); keep step names stable"
        )
    return f"{steps[name].id}_{rest}"


def shape_of(component: Any, *, inner: bool = False) -> dict[str, Any]:
    """What a checkpoint depends on: ids and names of the conversational components, their tools,
    their steps (by name and type) and the edges between steps. Prompts and models may change.
    A nested component's generated id is left out: it is new in each process (type and name stay)."""
    from wayflowcore.agent import Agent
    from wayflowcore.conversationalcomponent import ConversationalComponent
    from wayflowcore.flow import Flow
    from wayflowcore.managerworkers import ManagerWorkers
    from wayflowcore.swarm import Swarm

    cid = getattr(component, "id", None)
    if inner and isinstance(cid, str) and RANDOM_ID.match(cid):
        cid = None
    out: dict[str, Any] = {"type": type(component).__name__, "id": cid}
    out["name"] = str(getattr(component, "name", "") or "")

    def nested(item: Any) -> list[dict[str, Any]]:
        return [
            shape_of(v, inner=True)
            for k, v in vars(item).items()
            if not k.startswith("_") and isinstance(v, ConversationalComponent)
        ]

    if isinstance(component, Agent):
        out["tools"] = sorted(
            str(getattr(t, "name", type(t).__name__)) + ("!" if getattr(t, "requires_confirmation", False) else "")
            for t in component.tools
        )
        out["agents"] = [shape_of(a, inner=True) for a in component.agents]
        out["flows"] = [shape_of(f, inner=True) for f in component.flows]
    elif isinstance(component, Swarm):
        members = {a.name: a for pair in component.relationships for a in pair}
        members[component.first_agent.name] = component.first_agent
        out["first_agent"] = component.first_agent.name
        out["agents"] = [shape_of(members[name], inner=True) for name in sorted(members)]
        out["relationships"] = sorted([a.name, b.name] for a, b in component.relationships)
    elif isinstance(component, ManagerWorkers):
        out["manager"] = shape_of(component.manager_agent, inner=True)
        out["workers"] = [shape_of(w, inner=True) for w in component.workers]
    elif isinstance(component, Flow):
        names = {id(step): name for name, step in component.steps.items()}
        out["steps"] = {
            name: {"type": type(step).__name__, "uses": nested(step)} for name, step in component.steps.items()
        }
        out["edges"] = sorted(
            [
                names.get(id(e.source_step), "?"),
                str(e.source_branch),
                None if e.destination_step is None else names.get(id(e.destination_step), "?"),
            ]
            for e in component.control_flow_edges
        )
    return out


def check_compatible(conversation_id: str, state: WayflowState, component: Any, shape: dict[str, Any]) -> None:
    if state.shape == shape:
        return
    where, saved, now = _first_difference(state.shape, shape, "component")
    hint = ""
    if isinstance(saved, str) and isinstance(now, str) and (RANDOM_ID.match(saved) or RANDOM_ID.match(now)):
        hint = " (an id generated at random changes in every process: give every Agent and Flow a fixed id=...)"
    raise IncompatibleComponentError(
        f"conversation {conversation_id!r} was started with {state.component_type} {state.component_id!r}; the "
        f"{type(component).__name__} given differs at {where}: {saved!r} in the conversation, {now!r} now{hint}"
    )


def _first_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{path}.{key}")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if x != y:
                return _first_difference(x, y, f"{path}[{i}]")
    return path, a, b


def definition_of(component: Any) -> str | None:
    """The component as wayflowcore serializes it, or None when it cannot (a custom type without a plugin)."""
    from wayflowcore.serialization import serialize

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return serialize(component)
    except Exception:  # noqa: BLE001 - a definition that cannot be written is left out, not fatal
        return None
