"""Event kinds: the `Event` base, the registry of kinds and their upcasters.

Every event is a frozen msgspec Struct subclassing `Event`, tagged by a string that never
changes (`kind`). Schema evolution is a contract: new fields come last with defaults; a
kind's tag never changes; a renamed or reshaped kind is registered under a new tag. The
standard kinds are the agent layer's (agent/events.py); the log knows only this registry.

A user's own kind::

    class Approved(eventlog.Event, tag="myapp.approved"):
        by: str

    eventlog.register(Approved)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Union

import msgspec

from ..errors import InvalidEventError

__all__ = ["Event", "generation", "kinds", "register", "upcaster"]


class Event(msgspec.Struct, frozen=True, tag_field="kind", omit_defaults=True, gc=False):
    """Base class of every event kind. Subclass it with `tag="..."` and `register` it.

    Events are immutable and hold no reference cycles, so the garbage collector does not
    track them (`gc=False`): folding a long run then does not make collections slow."""


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
