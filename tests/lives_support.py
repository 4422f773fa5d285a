"""A hook for tests where another writer acts between two steps of a call (docs/architecture.md,
"Reads that span transactions")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def right_after(owner: Any, name: str, action: Callable[[], None]) -> None:
    """Wrap `owner.name` (a write of the log) so that its next call runs `action` once it returned."""
    real = getattr(owner, name)

    def then(*args: Any, **kwargs: Any) -> Any:
        setattr(owner, name, real)
        answer = real(*args, **kwargs)
        action()
        return answer

    setattr(owner, name, then)
