"""Checkpoint policies: when a run writer checkpoints by itself.

The generic log knows nothing of graphs or conversations; a policy looks at the kinds of
the standard events (supersteps, turns, LLM calls) to decide, on behalf of the executors.
"""

from __future__ import annotations

import msgspec

from ..errors import InvalidArgumentError
from ..record.kinds import Event
from . import events as ev

__all__ = ["CheckpointPolicy"]

_INTERNAL = (ev.StepCompleted, ev.LLMCallCompleted, ev.ToolCallCompleted, ev.SuperstepCompleted, ev.TurnCompleted)


class CheckpointPolicy(msgspec.Struct, frozen=True):
    """When a recorder checkpoints by itself. Combine fields freely; the constructors name the usual ones.

    - `events=N`: after every N events.
    - `supersteps=N`: after every N-th completed superstep.
    - `turns`: at the end of every conversation turn (WayFlow `CONVERSATION_TURNS`).
    - `llm_turns`: after every LLM answer, and at a turn's end when an LLM answered since
      the last checkpoint (WayFlow `LLM_TURNS`).
    - `internal_steps`: after every step, LLM call, tool call, superstep and turn
      (WayFlow `ALL_INTERNAL_TURNS`).
    - `final`: when the run completes well (never when it fails).
    """

    events: int = 0
    supersteps: int = 0
    turns: bool = False
    llm_turns: bool = False
    internal_steps: bool = False
    final: bool = True

    @classmethod
    def every(cls, n: int) -> CheckpointPolicy:
        """After every `n` events."""
        if n < 1:
            raise InvalidArgumentError("every(n) needs n >= 1")
        return cls(events=n)

    @classmethod
    def every_supersteps(cls, n: int = 1) -> CheckpointPolicy:
        """After every `n`-th superstep (agentmesh's default is 1)."""
        if n < 1:
            raise InvalidArgumentError("every_supersteps(n) needs n >= 1")
        return cls(supersteps=n)

    @classmethod
    def conversation_turns(cls) -> CheckpointPolicy:
        """At the end of every conversation turn (WayFlow `CONVERSATION_TURNS`)."""
        return cls(turns=True)

    @classmethod
    def llm_turns_only(cls) -> CheckpointPolicy:
        """After every LLM answer (WayFlow `LLM_TURNS`)."""
        return cls(llm_turns=True)

    @classmethod
    def all_internal_turns(cls) -> CheckpointPolicy:
        """After every internal step (WayFlow `ALL_INTERNAL_TURNS`)."""
        return cls(internal_steps=True)

    @classmethod
    def final_only(cls) -> CheckpointPolicy:
        """Only when the run completes well."""
        return cls()

    @classmethod
    def never(cls) -> CheckpointPolicy:
        """Never by itself; checkpoints only by hand."""
        return cls(final=False)

    def step(self, since: tuple[int, bool] | None, event: Event) -> tuple[tuple[int, bool], bool]:
        """`Policy.step`: the policy keeps the events since the last checkpoint and whether an
        LLM answered since then."""
        events_since, llm_since = since or (0, False)
        events_since, llm_since = events_since + 1, llm_since or isinstance(event, ev.LLMCallCompleted)
        return (events_since, llm_since), self.wants(event, events_since, llm_since)

    def wants(self, event: Event, events_since: int, llm_since: bool) -> bool:
        """True when a checkpoint is due right after `event`.

        `events_since` counts events since the last checkpoint, this one included;
        `llm_since` tells whether an LLM answered since the last checkpoint.
        """
        kind = type(event)
        if kind is ev.RunCompleted:
            return self.final
        if kind is ev.RunFailed:
            return False
        if self.events and events_since >= self.events:
            return True
        if self.supersteps and isinstance(event, ev.SuperstepCompleted):
            return event.superstep % self.supersteps == 0
        if self.turns and kind is ev.TurnCompleted:
            return True
        if self.llm_turns and (kind is ev.LLMCallCompleted or (kind is ev.TurnCompleted and llm_since)):
            return True
        return self.internal_steps and kind in _INTERNAL
