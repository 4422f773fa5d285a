"""Event kinds: the standard execution events, and the registry for a user's own kinds.

Every event is a frozen msgspec Struct subclassing `Event`, tagged by a string that never
changes (`kind`). Schema evolution is a contract: new fields come last with defaults; a
kind's tag never changes; a renamed or reshaped kind is registered under a new tag. The
standard kinds live in the agent layer (agent/events.py), the registry in the record format
(record/kinds.py); this module names both.

A user's own kind::

    class Approved(eventlog.Event, tag="myapp.approved"):
        by: str

    eventlog.register(Approved)
"""

from __future__ import annotations

from .agent import events as _standard
from .agent.events import *  # noqa: F403 - the standard kinds, as agent/events.py names them
from .record.kinds import Event, kinds, register, upcaster

__all__ = [*_standard.__all__, "Event", "kinds", "register", "upcaster"]
