"""The change between two serialized conversations, and its application (pure functions)."""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from ._types import WayflowCheckpointError

__all__ = ["copied", "diff", "patch", "same"]

_encoder, _decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder()

# The change between two serialized conversations: None (no change), ["=", value] (replace),
# ["L", keep, items] (a list keeps its first `keep` items, then `items` follow: appended
# messages cost only themselves), ["D", {key: change}, [removed keys]] (a dict).


def same(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (`True == 1`, but a change from one to the other is kept)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def copied(value: Any) -> Any:
    """A copy of plain data that shares no container with `value`. Serialized conversations and
    their changes are msgpack's own types (they are read from it, or made by a round trip through
    it), so a round trip copies them exactly, an order of magnitude faster than `copy.deepcopy`."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    try:
        return _decoder.decode(_encoder.encode(value))
    except (TypeError, ValueError, OverflowError):  # not msgpack's own types: copied the slow way
        return copy.deepcopy(value)


def diff(old: Any, new: Any) -> Any:
    """The change that turns `old` into `new` (pure)."""
    if same(old, new):
        return None
    if isinstance(old, dict) and isinstance(new, dict):
        changed: dict[str, Any] = {}
        for key, value in new.items():
            if key in old:
                sub = diff(old[key], value)
                if sub is not None:
                    changed[key] = sub
            else:
                changed[key] = ["=", value]
        return ["D", changed, [key for key in old if key not in new]]
    if isinstance(old, list) and isinstance(new, list):
        keep = 0
        for a, b in zip(old, new, strict=False):
            if not same(a, b):
                break
            keep += 1
        return ["L", keep, new[keep:]]
    return ["=", new]


def patch(old: Any, delta: Any, *, fresh: bool = False) -> Any:
    """Apply a change made by `diff`; updates `old` in place where it can (pure in its result).
    The values the change brings are copied, unless `fresh`: the caller made `delta` for this call
    and shares none of it (`resolve_texts` makes such a copy)."""
    if delta is None:
        return old
    if not isinstance(delta, list) or not delta or delta[0] not in ("=", "L", "D"):
        raise WayflowCheckpointError(f"a stored conversation change is malformed: {str(delta)[:80]}")
    op = delta[0]
    if op == "=":
        return delta[1] if fresh else copied(delta[1])
    if op == "L":
        if not isinstance(old, list) or delta[1] > len(old):
            raise WayflowCheckpointError("a stored list change does not fit the list it applies to")
        del old[delta[1] :]
        old.extend(delta[2] if fresh else copied(delta[2]))
        return old
    if not isinstance(old, dict):
        raise WayflowCheckpointError("a stored dict change does not fit the value it applies to")
    for key in delta[2]:
        old.pop(key, None)
    for key, sub in delta[1].items():
        old[key] = patch(old.get(key), sub, fresh=fresh)
    return old
