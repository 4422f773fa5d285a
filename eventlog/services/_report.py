"""What `verify` reports: each problem it found, and each note of what it could not check
(docs/concepts.md, "Verify")."""

from __future__ import annotations

import msgspec

__all__ = ["Problem", "VerifyReport"]


class Problem(msgspec.Struct, frozen=True):
    """One thing `verify` found wrong, or, in `VerifyReport.notes`, could not check."""

    run_id: str | None
    offset: int | None
    kind: str
    """A problem: `corrupt`, `gap`, `unknown_kind`, `nondeterministic`, `checkpoint`, `feed`,
    `index` or `meta`. A note: `reducer` (a pruned run whose base state only a reducer verify was
    not given keeps) or `pruned` (a run pruned again each time verify read it)."""
    message: str
    position: int | None = None
    """The feed position concerned, when there is one."""


class VerifyReport(msgspec.Struct):
    """What `verify` checked and found."""

    runs: int = 0
    events: int = 0
    checkpoints: int = 0
    problems: list[Problem] = []
    notes: list[Problem] = []
    """What was not checked, and why; not problems: `ok` does not count them."""

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems
