"""The change between two JSON values (a RunState's `to_json()`), and its reverse.

A checkpoint taken after each step of a run stores what changed since the previous one, not
the whole state: the lists a run only grows (its items, its model responses) are stored as
their new tail, a map as the keys that changed. The format is plain data (msgpack-able):

- `None`: nothing changed;
- `{"=": v}`: the value is `v` (a new value, or one of another type);
- `{"{}": {key: change}, "-": [key, ...]}`: a map; keys changed, keys removed;
- `{"[]": {index: change}, "+": [v, ...]}`: a list as long as before or longer; elements
  changed (the index as a string, for msgpack's map keys), elements appended;
- `{"+=": key}`, in a map's changes: the same elements are appended to this list as to the
  list under `key` of the same map (a RunState's `session_items` grow as its
  `generated_items` do: the items are stored once).
"""

from __future__ import annotations

import copy
from typing import Any

from ._types import CheckpointError

__all__ = ["diff", "patch"]


def _same(a: Any, b: Any) -> bool:
    """`a == b` with types kept apart (1 is not True, 1 is not 1.0)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def diff(old: Any, new: Any) -> Any:
    """The change from `old` to `new` (None: they are the same)."""
    if type(old) is not type(new):
        return {"=": new}
    if isinstance(new, dict):
        changed = {}
        for key, value in new.items():
            if key not in old:
                changed[key] = {"=": value}
            elif (d := diff(old[key], value)) is not None:
                changed[key] = d
        removed = [key for key in old if key not in new]
        _refer_same_tails(changed)
        if not changed and not removed:
            return None
        out: dict[str, Any] = {"{}": changed}
        if removed:
            out["-"] = removed
        return out
    if isinstance(new, list):
        if len(new) < len(old):
            return {"=": new}
        elements = {str(i): d for i, (a, b) in enumerate(zip(old, new, strict=False)) if (d := diff(a, b)) is not None}
        tail = new[len(old) :]
        if not elements and not tail:
            return None
        if len(elements) > len(old) // 2 + 1:
            return {"=": new}
        out = {}
        if elements:
            out["[]"] = elements
        if tail:
            out["+"] = tail
        return out
    return None if _same(old, new) else {"=": new}


def _refer_same_tails(changed: dict[str, Any]) -> None:
    """Name, instead of storing it again, a tail appended to a list that an earlier key's list got too."""
    tails: list[tuple[str, list[Any]]] = []
    for key, change in changed.items():
        if not (isinstance(change, dict) and change.keys() == {"+"}):
            continue
        same = next((k for k, tail in tails if _same(tail, change["+"])), None)
        if same is None:
            tails.append((key, change["+"]))
        else:
            changed[key] = {"+=": same}


def patch(old: Any, change: Any) -> Any:
    """`old` with `change` applied (`old` may be updated in place); the reverse of `diff`."""
    if change is None:
        return old
    if not isinstance(change, dict):
        raise CheckpointError(f"a stored change is {type(change).__name__}, not a map")
    if "=" in change:
        return change["="]
    if "{}" in change:
        if not isinstance(old, dict):
            raise CheckpointError("a stored change patches a map where the state holds none")
        for key in change.get("-", ()):
            old.pop(key, None)
        changes = change["{}"]
        for key, sub in changes.items():
            if isinstance(sub, dict) and "+=" in sub:
                named = changes.get(sub["+="])
                if not (isinstance(named, dict) and isinstance(named.get("+"), list)):
                    raise CheckpointError(
                        f"a stored change of {key!r} names the elements appended to {sub['+=']!r}, which has none"
                    )
                sub = {"+": copy.deepcopy(named["+"])}  # not shared: a later change may patch one list only
            old[key] = patch(old.get(key), sub)
        return old
    if "[]" in change or "+" in change:
        if not isinstance(old, list):
            raise CheckpointError("a stored change patches a list where the state holds none")
        for index, sub in change.get("[]", {}).items():
            i = int(index)
            if not 0 <= i < len(old):
                raise CheckpointError(f"a stored change names element {i} of a list of {len(old)}")
            old[i] = patch(old[i], sub)
        old.extend(change.get("+", ()))
        return old
    raise CheckpointError(f"a stored change has none of the known keys: {sorted(change)[:5]}")
