"""Run ids and other caller-chosen ids: their checks and the keys they are stored under."""

from __future__ import annotations

import hashlib

from . import _limits
from .errors import EventLogError, InvalidRunIdError


def run_key(run_id: str) -> bytes:
    """The `runs` table key of a run id: its UTF-8 bytes, or, for an id over 448 bytes (LMDB keys
    hold at most 511), its first 448 bytes, 0xff (a byte UTF-8 never holds) and the SHA-256 of the id."""
    raw = run_id.encode("utf-8")
    inline = _limits.run_key_inline_size_bytes_max
    if len(raw) <= inline:
        return raw
    return raw[:inline] + b"\xff" + hashlib.sha256(raw).digest()


def check_run_id(run_id: object) -> bytes:
    """The UTF-8 bytes of a valid run id; raises InvalidRunIdError."""
    return _utf8("run id", run_id, _limits.run_id_size_bytes_max, InvalidRunIdError)


def check_id(what: str, value: object) -> bytes:
    """The UTF-8 bytes of a valid caller-chosen event or checkpoint id; raises EventLogError."""
    return _utf8(what, value, _limits.event_id_size_bytes_max, EventLogError)


def _utf8(what: str, value: object, size_bytes_max: int, error: type[EventLogError]) -> bytes:
    if not isinstance(value, str) or not value:
        raise error(f"{what} must be a non-empty string, not {value!r}")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{what} {value!r} is not valid unicode text") from None
    if len(raw) > size_bytes_max:
        raise error(f"{what} of {len(raw)} UTF-8 bytes is over the limit of {size_bytes_max}")
    return raw
