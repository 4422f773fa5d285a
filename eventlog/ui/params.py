"""The parameters of the UI's routes, each checked before a route answers: a bad one is a 400
(an offset outside the run a 404) with a message naming it, never a page that fails once begun."""

from __future__ import annotations

import re
from typing import Any

import msgspec
from starlette.exceptions import HTTPException
from starlette.requests import Request

from eventlog.errors import OffsetOutOfRangeError, PrunedError

from . import find

__all__ = ["choice", "event_filter", "in_run", "json_path", "kind", "number", "run_id", "text"]

_NUMBER = re.compile(r"[0-9]{1,19}")


def number(request: Request, name: str, default: int | None = None, *, high: int | None = None) -> int | None:
    """The parameter `name` as a whole number from 0 to `high` (an empty one, or `head`: the
    default); anything else is a 400 before the route answers."""
    raw = request.query_params.get(name)
    if raw is None or raw in ("", "head"):
        return default
    value = int(raw) if _NUMBER.fullmatch(raw) else -1
    if value < 0 or (high is not None and value > high):
        upto = f" to {high}" if high is not None else ""
        raise HTTPException(400, f"{name} must be a whole number from 0{upto}, not {raw[:40]!r}")
    return value


def run_id(request: Request, name: str = "id") -> str:
    """The run named by the parameter `name` (the route then finds it, or answers 404)."""
    given = request.query_params.get(name)
    if not given:
        raise HTTPException(400, f"no run given: ?{name}=RUN")
    return given


def in_run(request: Request, name: str, run: str, base: int, head: int) -> int | None:
    """The parameter `name` as an offset of the run: from `base` to `head` (else 404), or None."""
    value = number(request, name)
    if value is not None and not base <= value <= head:
        if value < base:
            raise PrunedError(run, value, base)
        raise OffsetOutOfRangeError(run, value, head)
    return value


_KIND = re.compile(r"[A-Za-z0-9_.:-]{0,100}")


def choice(request: Request, name: str, choices: Any, default: str = "") -> str:
    """The parameter `name`, one of `choices` (absent or empty: `default`), else a 400."""
    raw = request.query_params.get(name, "") or default
    if raw not in choices:
        raise HTTPException(400, f"{name} must be one of {', '.join(c for c in choices if c)}, not {raw[:40]!r}")
    return raw


def kind(request: Request) -> str:
    raw = request.query_params.get("kind", "")
    if not _KIND.fullmatch(raw):
        raise HTTPException(400, f"kind must be an event kind or a family (tool, llm.completed), not {raw[:40]!r}")
    return raw


def text(request: Request, name: str, chars_max: int) -> str:
    raw = request.query_params.get(name, "").strip()
    if len(raw) > chars_max:
        raise HTTPException(400, f"{name} is at most {chars_max} characters")
    return raw


def event_filter(request: Request) -> find.EventFilter:
    return find.EventFilter(kind=kind(request), text=text(request, "q", find.text_chars_max))


def json_path(request: Request, steps_max: int) -> list[str | int]:
    """`?path=`: a JSON list of at most `steps_max` map keys (strings) and list indices (whole numbers)."""
    raw = request.query_params.get("path", "[]")
    try:
        path = msgspec.json.decode(raw.encode(), type=list[str | int]) if len(raw) <= 64 * steps_max else None
    except msgspec.DecodeError:
        path = None
    if path is None or len(path) > steps_max or any(isinstance(p, int) and p < 0 for p in path):
        raise HTTPException(400, f"path must be a JSON list of at most {steps_max} keys and indices, not {raw[:40]!r}")
    return path
