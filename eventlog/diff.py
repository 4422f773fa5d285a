"""What changed between two states of a run: the `eventlog diff` document, shared by the command
line and the UI."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from .core.fold import Reducer
    from .log import EventLog
    from .views import RunView

__all__ = ["builtins", "diff_offsets", "diff_states", "messages_apart"]


def builtins(state: Any) -> Any:
    """A state as plain data with every field, defaults included."""
    if isinstance(state, msgspec.Struct):
        return {f: msgspec.to_builtins(getattr(state, f)) for f in type(state).__struct_fields__}
    return msgspec.to_builtins(state)


def diff_states(a: Any, b: Any) -> dict[str, Any]:
    """What changed from state `a` to state `b`.

    `values` (the graph state): keys `added`, `removed` and `changed` (from, to);
    `messages`: those `messages_appended` after the common start, and `messages_removed`;
    every other field that differs in `fields` (from, to).
    """
    da, db = builtins(a), builtins(b)
    if not isinstance(da, dict) or not isinstance(db, dict):
        da, db = {"state": da}, {"state": db}
    va, vb = da.get("values", {}), db.get("values", {})
    out: dict[str, Any] = {
        "added": {k: vb[k] for k in vb if k not in va},
        "removed": {k: va[k] for k in va if k not in vb},
        "changed": {k: {"from": va[k], "to": vb[k]} for k in vb if k in va and va[k] != vb[k]},
    }
    ma, mb = da.get("messages", []), db.get("messages", [])
    common = 0
    while common < min(len(ma), len(mb)) and ma[common] == mb[common]:
        common += 1
    out["messages_appended"] = mb[common:]
    out["messages_removed"] = ma[common:]
    out["fields"] = {
        k: {"from": da.get(k), "to": db.get(k)}
        for k in sorted(set(da) | set(db))
        if k not in ("values", "messages") and da.get(k) != db.get(k)
    }
    return out


def messages_apart(state: Any) -> Any:
    """A view's state (plain data) with the messages of its values (a LangGraph chat's `messages`
    channel) as its own `messages`, so that a diff lists the messages appended and removed
    instead of the whole list changed; any other state as it is."""
    if not isinstance(state, dict) or "messages" in state or not isinstance(state.get("values"), dict):
        return state
    values = state["values"]
    if not isinstance(values.get("messages"), list):
        return state
    rest = {k: v for k, v in values.items() if k != "messages"}
    return {**state, "values": rest, "messages": values["messages"]}


def diff_offsets(
    log: EventLog[Any], run_id: str, a: int, b: int, view: RunView | None, reducer: Reducer[Any] | None = None
) -> dict[str, Any]:
    """What changed in the run from offset `a` to offset `b` (`diff_states`): an integration's
    run (`view`) in the terms its view shows it, its messages diffed message by message
    (`messages_apart`); any other run folded by `reducer` (the log's by default)."""
    if view is not None:
        return diff_states(messages_apart(view.state(log, run_id, a)), messages_apart(view.state(log, run_id, b)))
    return diff_states(log.state_at(run_id, a, reducer=reducer), log.state_at(run_id, b, reducer=reducer))
