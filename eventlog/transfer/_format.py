"""The export file format: its lines, their encoders and decoders, and the errors of a transfer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Union

import msgspec

from ..errors import EventLogError, PrunedError
from ..record import kinds

FORMAT = "eventlog-export"
"""The `format` field of an export file's header."""
VERSION = 1
"""The export format version this module writes and reads."""

_IMPORT_BATCH_EVENTS_MAX = 1000
"""Most entries one import transaction carries (entries of one time and metadata are batched)."""

Progress = Callable[[int, int], None]
"""`progress(n, total)`: n entries done since the last call, of `total` in all."""


class ExportFileError(EventLogError):
    """The file is not an eventlog export, is cut short, or holds a line that does not decode."""


class NotExportableError(PrunedError):
    """A run that was pruned cannot be exported losslessly: its first events are gone."""

    def __init__(self, run_id: str, base: int) -> None:
        self.run_id, self.offset, self.base = run_id, 1, base
        EventLogError.__init__(
            self,
            f"run {run_id!r} was pruned below offset {base}; its events up to offset {base} are gone, "
            "so it (and any fork of it) cannot be exported losslessly",
        )


class TransferSummary(msgspec.Struct):
    """What an export wrote or an import read and wrote."""

    runs: int = 0
    entries: int = 0
    checkpoints: int = 0
    skipped_checkpoints: int = 0
    """Checkpoints made by a reducer the import was not given (they are not saved)."""
    skipped_runs: list[str] = []
    """Runs an export left out when asked to skip pruned runs: each pruned run, and each run
    that forks from one (their first events are gone)."""


# -- lines ---------------------------------------------------------------------------------


class _Header(msgspec.Struct, tag="header", tag_field="type"):
    format: str
    version: int


class _Run(msgspec.Struct, tag="run", tag_field="type"):
    run_id: str
    parent: str | None
    fork_offset: int
    head: int
    created_ns: int


class _Entry(msgspec.Struct, tag="entry", tag_field="type", omit_defaults=True):
    run_id: str
    offset: int
    event_id: str
    time_ns: int
    meta: msgspec.Raw = msgspec.Raw(b"null")
    event: msgspec.Raw = msgspec.Raw(b"null")
    msgpack: str | None = None
    """base64 msgpack of [meta, event] when JSON cannot carry them exactly."""


class _Checkpoint(msgspec.Struct, tag="checkpoint", tag_field="type", omit_defaults=True):
    run_id: str
    checkpoint_id: str
    offset: int
    created_ns: int
    reducer: str
    reducer_version: int
    metadata: msgspec.Raw = msgspec.Raw(b"{}")
    msgpack: str | None = None
    """base64 msgpack of the metadata when JSON cannot carry it exactly."""


class _End(msgspec.Struct, tag="end", tag_field="type"):
    runs: int
    entries: int
    checkpoints: int


_Line = Union[_Header, _Run, _Entry, _Checkpoint, _End]  # noqa: UP007

_json = msgspec.json.Encoder()
_mp = msgspec.msgpack.Encoder()
_line_decoder = msgspec.json.Decoder(_Line)
_meta_json = msgspec.json.Decoder(Union[dict[str, Any], None])  # noqa: UP007
_meta_mp = msgspec.msgpack.Decoder(Union[dict[str, Any], None])  # noqa: UP007
_metadata_json = msgspec.json.Decoder(dict[str, Any])
_metadata_mp = msgspec.msgpack.Decoder(dict[str, Any])


class _Kinds:
    """JSON and msgpack decoders for the registered event kinds, rebuilt when a kind is registered."""

    def __init__(self) -> None:
        self._generation = -1
        self._json: msgspec.json.Decoder[Any] | None = None
        self._mp: msgspec.msgpack.Decoder[Any] | None = None

    def decoders(self) -> tuple[msgspec.json.Decoder[Any], msgspec.msgpack.Decoder[Any]]:
        generation = kinds.generation()
        if self._json is None or self._mp is None or generation != self._generation:
            union = Union[tuple(kinds.kinds().values())]  # type: ignore[valid-type]  # noqa: UP007
            self._json = msgspec.json.Decoder(union)
            self._mp = msgspec.msgpack.Decoder(tuple[Union[dict[str, Any], None], union])  # type: ignore[valid-type]  # noqa: UP007
            self._generation = generation
        return self._json, self._mp


_kinds = _Kinds()
