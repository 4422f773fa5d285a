"""Folding: the reducer protocol the log folds with (the standard one, `AgentReducer`, is the
agent layer's: agent/state.py).

A reducer is a pure, deterministic fold: `apply(state, event) -> state`. `apply` may change
the state it is given in place and return it (the log only hands it states it owns), but
its result must depend on nothing but the state and the event: no clock, no randomness, no
I/O. `verify` re-folds every run and names a checkpoint whose bytes differ.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from ..errors import InvalidArgumentError
from ..record.kinds import Event

__all__ = ["Reducer", "check_reducer", "reducer_named", "reducer_or", "reducer_tag"]

S = TypeVar("S")


@runtime_checkable
class Reducer(Protocol[S]):
    """What `state_at`, checkpoints and run writers fold with; generic in its state `S`.

    Two methods are optional, looked up by name:

    - `upgrade(state, from_version) -> S`: a state saved by an older `version` of this
      reducer (decoded as plain msgpack data) made into a state of this version. Without
      it, a run pruned under an older version cannot be read by this one.
    - `summarize(state) -> dict`: a few facts of the state kept in each checkpoint record,
      so that a listing of checkpoints need not fold (`Checkpoint.summary`).
    """

    name: str
    """Stable name; recorded in every checkpoint."""
    version: int
    """Bump it whenever `apply` changes: checkpoints of another version are not used."""
    state_type: Any
    """The type states decode to (a msgspec Struct, `dict`, or `typing.Any`)."""

    def initial(self) -> S:
        """The state at offset 0, before any event."""
        ...

    def apply(self, state: S, event: Event) -> S:
        """The state after `event`. May update `state` in place and return it."""
        ...


def check_reducer(reducer: object) -> None:
    """Raise InvalidArgumentError unless `reducer` has a usable name, version, initial and apply."""
    name, version = getattr(reducer, "name", None), getattr(reducer, "version", None)
    if not isinstance(name, str) or not name or "@" in name or len(name.encode("utf-8", "replace")) > 128:
        raise InvalidArgumentError(f"a reducer needs a `name`: a short string without '@', not {name!r}")
    if not name.isprintable():  # a lone surrogate, a control character
        raise InvalidArgumentError(f"a reducer's `name` must be printable unicode text, not {name!r}")
    if type(version) is not int or not 0 <= version < 1 << 32:
        raise InvalidArgumentError(f"reducer {name!r} needs an integer `version` in 0..2**32-1, not {version!r}")
    if not callable(getattr(reducer, "initial", None)) or not callable(getattr(reducer, "apply", None)):
        raise InvalidArgumentError(f"reducer {name!r} needs `initial()` and `apply(state, event)` methods")
    if not hasattr(reducer, "state_type"):
        raise InvalidArgumentError(f"reducer {name!r} needs a `state_type` (the type its states decode to)")


def reducer_or(reducer: object, default: Reducer[Any]) -> Reducer[Any]:
    """`reducer` once checked, or `default` when it is None."""
    if reducer is None:
        return default
    check_reducer(reducer)
    return reducer  # type: ignore[return-value]


def reducer_tag(reducer: Reducer[Any]) -> bytes:
    """The bytes that name a reducer and its version in snapshot keys."""
    return f"{reducer.name}@{reducer.version}".encode()


def reducer_named(reducers: Sequence[Reducer[Any]], name: str, version: int) -> Reducer[Any] | None:
    """The reducer of `reducers` whose name and version are these (a checkpoint's), or None."""
    return next((r for r in reducers if (r.name, r.version) == (name, version)), None)
