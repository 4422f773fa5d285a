"""The codec: events, states and records as msgspec bytes over the byte pipeline of `_pipeline`
(encode → compress → seal → frame, and the exact reverse on read).

Paired checks: what is written is read back before it is written. An event, its meta, a
checkpoint's metadata and a state are each decoded again from their encoded bytes and
compared with what the caller gave; a value that would not read back equal (a field of the
wrong type, a dict with int keys where strings are declared, a tuple or set that would come
back as a list) is refused with a named error before anything is written.
"""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Callable
from typing import Any, Union

import msgspec

from .. import _limits
from ..errors import (
    CorruptRecordError,
    InvalidEventError,
    RecordTooLargeError,
    UnencodableValueError,
    UnknownKindError,
)
from . import kinds
from ._pipeline import RAW, SEALED, ZSTD, ZSTD_DICT, Cipher, Place, Zstd, frame, train_dictionary, unframe
from .tables import EVENTS

__all__ = [
    "RAW",
    "SEALED",
    "ZSTD",
    "ZSTD_DICT",
    "Cipher",
    "Codec",
    "EntryRecord",
    "Place",
    "frame",
    "same",
    "too_deep",
    "train_dictionary",
    "unframe",
]

_DECODE_ERRORS = (msgspec.DecodeError, ValueError, TypeError, RecursionError)


def refuse_ext(code: int, data: memoryview) -> Any:
    """The `ext_hook` of every decoder of what the log stores: the log writes no msgpack extension
    type, so one read back is damage (or an event that would not read back as given), and never
    a value handed on to a caller, whose encoders could not write it again."""
    raise msgspec.ValidationError(f"a msgpack extension value (type {code}) is not a value of a log")


_ENCODE_ERRORS = (TypeError, ValueError, OverflowError, RecursionError)
_CONTAINER_BYTES = bytes(range(0x80, 0xA0)) + b"\xdc\xdd\xde\xdf"  # msgpack's map and array headers
_ARRAY16, _ARRAY32 = struct.Struct(">BH"), struct.Struct(">BI")  # msgpack's array 16 and array 32 headers
_NIL = msgspec.msgpack.encode(None)  # the meta of an entry without meta


def too_deep(value: object, data: bytes | None = None) -> bool:
    """Whether `value` nests lists, maps and structs deeper than `nesting_depth_max`.

    With `data`, its msgpack bytes, a value whose bytes hold fewer map and array headers than
    the limit is known at C speed to be shallow enough (each level takes one header)."""
    limit = _limits.nesting_depth_max
    if data is not None and len(data) - len(data.translate(None, _CONTAINER_BYTES)) < limit:
        return False
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = item
        elif isinstance(item, msgspec.Struct):
            children = [getattr(item, f) for f in item.__struct_fields__]
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _depth_message(what: str) -> str:
    return f"{what} nests lists, maps and structs deeper than {_limits.nesting_depth_max} levels"


class EntryRecord(msgspec.Struct, array_like=True, gc=False):
    """An event as stored under its run and offset (the key holds run and offset)."""

    position: int
    """Place in the whole log's commit order."""
    time_ns: int
    """Commit time, nanoseconds since the Unix epoch, from the log's clock."""
    event_id: str
    """The event's id: the caller's, or one from the log's id source."""
    meta: dict[str, Any] | None
    """Caller's metadata, or None."""
    event: Any
    """The event (a registered Event kind once decoded)."""


def same(a: Any, b: Any) -> bool:
    """`a == b`, but NaN equals NaN, and containers must be of the same type (a tuple is not a list)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    if isinstance(a, msgspec.Struct):
        return all(same(getattr(a, f), getattr(b, f)) for f in a.__struct_fields__)
    return bool(a == b)


def joined(decoder: msgspec.msgpack.Decoder[Any], payloads: list[bytes]) -> list[Any] | None:
    """The payloads decoded in one msgspec call, joined into one msgpack array; None when they do
    not decode (the caller goes value by value then, to name the one at fault).

    Every payload was checked on its own first (checksum or AEAD, declared size) and is one
    msgpack value as the writer encoded it, so the array holds exactly one record per payload;
    a count that differs is taken as damage too."""
    count = len(payloads)
    head = (
        bytes((0x90 | count,))
        if count < 16
        else _ARRAY16.pack(0xDC, count)
        if count < 65536
        else _ARRAY32.pack(0xDD, count)
    )
    try:
        records: list[Any] = decoder.decode(head + b"".join(payloads))
    except _DECODE_ERRORS:
        return None
    return records if len(records) == count else None


class Codec:
    """Encodes and decodes entries and states; one per open log, safe to share between threads.

    `dictionary(dict_id) -> bytes | None` loads a trained dictionary from the log's meta.
    `record_size_bytes_max` bounds what this log writes; `read_size_bytes_max` (at least as
    large) bounds what it reads, so that records another writer wrote under a larger limit
    stay readable. `cipher` seals every record (encryption at rest).
    """

    def __init__(
        self,
        dictionary: Callable[[int], bytes | None],
        record_size_bytes_max: int,
        *,
        cipher: Cipher | None = None,
        level: int = 3,
    ) -> None:
        self.record_size_bytes_max = record_size_bytes_max
        self.read_size_bytes_max = record_size_bytes_max
        self._zstd = Zstd(dictionary, lambda: self.read_size_bytes_max, cipher, level)
        self._encoder = msgspec.msgpack.Encoder()
        self._state_encoder = msgspec.msgpack.Encoder(order="deterministic")
        self._meta_decoder = msgspec.msgpack.Decoder(Union[dict[str, Any], None], ext_hook=refuse_ext)  # noqa: UP007
        self._generation = -1
        self._entry_type: Any = None
        self._kinds: frozenset[type] = frozenset()  # the registered kinds, as of `_generation`
        self._entry_decoder: msgspec.msgpack.Decoder[Any] | None = None
        self._event_decoder: msgspec.msgpack.Decoder[Any] | None = None
        self._fold_decoder: msgspec.msgpack.Decoder[Any] | None = None
        self._list_decoders: tuple[msgspec.msgpack.Decoder[Any], ...] = ()  # whole entries, events only
        self._lock = threading.Lock()

    @property
    def sealed(self) -> bool:
        """True when records are encrypted."""
        return self._zstd.cipher is not None

    def bind(self, log_id: bytes, *, unbound: bool) -> None:
        """Seal and open values bound to the log `log_id` (16 bytes); `unbound`: also accept values
        sealed bound to nothing (a log sealed before format 3, read as it is or being migrated)."""
        self._zstd.log_id, self._zstd.unbound = log_id, unbound

    @property
    def log_id(self) -> bytes:
        return self._zstd.log_id  # the log's id (16 bytes; empty before format 3)

    def place_frame(self, value: bytes, place: Place) -> bytes:
        """An open frame (`encode_value(..., place=None)`) sealed for `place` when the log has a key."""
        return self._zstd.place_frame(value, place)

    def reseal(self, value: bytes, place: Place) -> bytes | None:
        """A value sealed bound to nothing, sealed again bound to `place`; None when nothing is to do."""
        return self._zstd.reseal(value, place)

    # -- encode ------------------------------------------------------------------------

    def check_event(self, event: object) -> None:
        """Raise InvalidEventError unless `event` is an instance of a registered kind."""
        kind: Any = type(event)
        if not isinstance(event, kinds.Event) or kinds._registry.get(kind.__struct_config__.tag) is not kind:
            raise InvalidEventError(
                f"{kind.__module__}.{kind.__qualname__} is not a registered event kind; "
                "subclass eventlog.Event with a tag and call eventlog.register(kind)"
            )

    def encode_event(self, event: object) -> bytes:
        """The msgpack bytes of a registered event that reads back equal; else InvalidEventError."""
        return self.encode_event_read(event)[0]

    def encode_event_read(self, event: object) -> tuple[bytes, Any]:
        """`encode_event`'s bytes and the event they read back as: the log's own copy, equal to
        `event` and sharing none of its objects.

        What it costs is msgspec's: one encode, one typed decode and one compare in C (the
        nesting walk and `same` run only when the bytes or the compare say they must)."""
        if kinds._generation != self._generation:
            self._refresh()
        if type(event) not in self._kinds:
            self.check_event(event)
        try:
            data = self._encoder.encode(event)
        except RecursionError:
            raise InvalidEventError(_depth_message(type(event).__name__)) from None
        except _ENCODE_ERRORS as exc:
            raise InvalidEventError(f"{type(event).__name__} cannot be encoded: {exc}{_VALUES}") from None
        if len(data) - len(data.translate(None, _CONTAINER_BYTES)) >= _limits.nesting_depth_max and too_deep(event):
            raise InvalidEventError(_depth_message(type(event).__name__))
        try:
            back = self._event_decoder.decode(data)  # type: ignore[union-attr]
        except _DECODE_ERRORS as exc:
            raise InvalidEventError(f"{type(event).__name__} does not match its field types: {exc}") from None
        if back != event and not same(back, event):
            raise InvalidEventError(f"{type(event).__name__} would read back as {back!r}, not as given{_VALUES}")
        return data, back

    def encode_meta(self, meta: object) -> bytes:
        """The msgpack bytes of an entry's meta (None or a dict with string keys) that reads back equal."""
        if meta is None:
            return _NIL
        try:
            data = self._encoder.encode(meta)
        except RecursionError:
            raise InvalidEventError(_depth_message("meta")) from None
        except _ENCODE_ERRORS as exc:
            raise InvalidEventError(f"meta cannot be encoded: {exc}{_VALUES}") from None
        if too_deep(meta, data):
            raise InvalidEventError(_depth_message("meta"))
        try:
            back = self._meta_decoder.decode(data)
        except _DECODE_ERRORS as exc:
            raise InvalidEventError(f"meta must be None or a dict with string keys: {exc}") from None
        if back != meta and not same(back, meta):
            raise InvalidEventError(f"meta would read back as {back!r}, not as given{_VALUES}")
        return data

    def encode_entry(
        self, position: int, time_ns: int, event_id: str, meta: bytes, event: bytes, dict_id: int, place: Place
    ) -> bytes:
        """Frame an entry from the encoded meta and event (`encode_meta`, `encode_event`).
        Raises RecordTooLargeError over the record limit."""
        record = EntryRecord(position, time_ns, event_id, msgspec.Raw(meta), msgspec.Raw(event))  # type: ignore[arg-type]
        payload = self._encoder.encode(record)
        if len(payload) > self.record_size_bytes_max:
            raise RecordTooLargeError(
                f"the entry {event_id!r} encodes to {len(payload)} bytes, over the record limit of "
                f"{self.record_size_bytes_max} bytes; store large payloads elsewhere and reference them"
            )
        return self._zstd.compress(payload, dict_id, place)

    def check_entry_size(self, kind: str, meta: bytes, event: bytes) -> None:
        """Raise RecordTooLargeError when an entry would encode over the record limit whatever its
        position, time and id (the exact size is checked again when those are known)."""
        size = 1 + 1 + 1 + 2 + len(meta) + len(event)
        if size > self.record_size_bytes_max:
            raise RecordTooLargeError(
                f"{kind} encodes to {size} bytes, over the record limit of {self.record_size_bytes_max} "
                "bytes; store large payloads elsewhere and reference them"
            )

    def encode_state(self, state: object) -> bytes:
        """The canonical bytes of a state: what determinism is checked on."""
        try:
            data = self._state_encoder.encode(state)
        except RecursionError:
            raise UnencodableValueError(f"the {type(state).__name__} nests deeper than msgpack can encode") from None
        except _ENCODE_ERRORS as exc:
            raise UnencodableValueError(f"cannot encode {type(state).__name__} canonically: {exc}") from None
        return data

    def encode_checked(self, what: str, value: object, type_: Any, *, bounded: bool = False) -> bytes:
        """The canonical bytes of a state or metadata that decodes as `type_` back to an equal value;
        else UnencodableValueError. `bounded`: also refuse nesting deeper than `nesting_depth_max`
        (a caller's value; a state a reducer folds from bounded events is bounded by what
        msgpack reads back, and is not walked: that would cost more than encoding it)."""
        data = self.encode_state(value)
        if bounded and too_deep(value, data):
            raise UnencodableValueError(_depth_message(what))
        try:
            back = msgspec.msgpack.decode(data, type=type_, ext_hook=refuse_ext)
        except _DECODE_ERRORS as exc:
            raise UnencodableValueError(f"{what} does not decode as {type_!r} again: {exc}") from None
        if back != value and not same(back, value):
            raise UnencodableValueError(
                f"{what} would read back as {back!r}, not as given (msgpack has no form for "
                "tuples, sets or objects of other types: use lists, dicts and msgspec Structs)"
            )
        return data

    def encode_value(
        self,
        value: object,
        place: Place | None,
        size_bytes_max: int = _limits.snapshot_size_bytes_max,
        level: int | None = None,
    ) -> bytes:
        """Encode, compress and frame any msgspec-encodable value deterministically (states, run
        records), sealed for `place` (None: left open for `place_frame`)."""
        payload = self.encode_state(value)
        if len(payload) > size_bytes_max:
            raise RecordTooLargeError(f"value encodes to {len(payload)} bytes, over the limit of {size_bytes_max}")
        return self._zstd.compress(payload, 0, place, level)

    def encode_small(self, value: object, place: Place) -> bytes:
        """`encode_value` for a record small enough to stay raw (a run record, at every append),
        framed without the general path's calls; a larger or sealed one takes the general path."""
        payload = self._state_encoder.encode(value)
        if self._zstd.cipher is None and len(payload) < _limits.compress_nodict_size_bytes_min:
            return frame(payload, RAW, 0)
        return self.encode_value(value, place)

    def compress(self, payload: bytes, dict_id: int, place: Place | None, level: int | None = None) -> bytes:
        """Compress when that makes the record smaller, seal for `place` when the log has a key, then frame."""
        return self._zstd.compress(payload, dict_id, place, level)

    def payload(self, value: bytes, place: Place, size_bytes_max: int | None = None) -> bytes:
        """Unframe, open (bound to `place`) and decompress, bounded. Raises CorruptRecordError."""
        return self._zstd.payload(value, place, size_bytes_max)

    def add_dictionary(self, dict_id: int, data: bytes) -> None:
        """Make a dictionary known without reading it from the log."""
        self._zstd.add_dictionary(dict_id, data)

    def decode_entry(self, value: bytes, key: bytes) -> EntryRecord:
        """Decode a stored entry under `events` key `key`. Raises CorruptRecordError or
        UnknownKindError (the caller adds run and offset)."""
        self._refresh()
        payload = self.payload(value, (EVENTS, key))
        try:
            record: EntryRecord = self._entry_decoder.decode(payload)  # type: ignore[union-attr]
        except _DECODE_ERRORS as exc:
            record = self._recover(payload, exc)
        return record

    def decode_entry_event(self, value: bytes, key: bytes) -> Any:
        """Decode only the event of a stored entry (folds need nothing else)."""
        self._refresh()
        payload = self.payload(value, (EVENTS, key))
        try:
            return self._fold_decoder.decode(payload).event  # type: ignore[union-attr]
        except _DECODE_ERRORS as exc:
            return self._recover(payload, exc).event

    def decode_records(
        self, values: list[bytes], place: Callable[[int], Place], *, events_only: bool
    ) -> list[Any] | None:
        """The entries of `values` (the i-th stored at `place(i)`), checked and decoded in one pass
        (`joined`), of which only the `event` is decoded when `events_only`; None when one needs
        the careful path (`decode_entry` or `decode_entry_event`, value by value)."""
        self._refresh()
        payloads = self._zstd.payloads(values, place)
        return None if payloads is None else joined(self._list_decoders[events_only], payloads)

    def decode_entry_id(self, value: bytes, key: bytes) -> tuple[int, str]:
        """(position, event id) of a stored entry, whatever its event's kind."""
        try:
            record = _id_decoder.decode(self.payload(value, (EVENTS, key)))
        except _DECODE_ERRORS as exc:
            raise CorruptRecordError(f"undecodable entry: {exc}") from None
        return record.position, record.event_id

    def decode_event(self, data: bytes) -> Any:
        """Decode an event encoded by `encode_event`."""
        self._refresh()
        try:
            return self._event_decoder.decode(data)  # type: ignore[union-attr]
        except _DECODE_ERRORS as exc:
            return _recover_event(_untyped(data, exc), exc)

    def decode_value(
        self, value: bytes, type: Any, place: Place, size_bytes_max: int = _limits.snapshot_size_bytes_max
    ) -> Any:
        """Decode a value framed by `encode_value`, stored at `place`."""
        payload = self.payload(value, place, size_bytes_max)
        try:
            return msgspec.msgpack.decode(payload, type=type, ext_hook=refuse_ext)
        except _DECODE_ERRORS as exc:
            raise CorruptRecordError(f"undecodable value: {exc}") from None

    def _recover(self, payload: bytes, exc: Exception) -> Any:
        """An entry the typed decoder refused: an event of an old tag read through its upcaster,
        an event of a kind this process does not know (UnknownKindError), or damage."""
        raw = _untyped(payload, exc)
        if not isinstance(raw, list) or len(raw) != len(EntryRecord.__struct_fields__):
            raise CorruptRecordError(f"undecodable entry: {exc}")
        raw[-1] = msgspec.to_builtins(_recover_event(raw[-1], exc))
        try:
            return msgspec.convert(raw, self._entry_type)
        except _DECODE_ERRORS as again:
            raise CorruptRecordError(f"undecodable entry: {again}") from None

    # -- internals ---------------------------------------------------------------------

    def _refresh(self) -> None:
        """Build the decoders again when an event kind was registered since they were built."""
        generation = kinds._generation
        if generation != self._generation:
            with self._lock:
                union = Union[tuple(kinds.kinds().values())]  # type: ignore[valid-type]  # noqa: UP007
                fields = EntryRecord.__struct_fields__[:-1]
                self._entry_type = msgspec.defstruct(
                    "EntryRecord",
                    [(f, EntryRecord.__annotations__[f]) for f in fields] + [("event", union)],
                    array_like=True,
                    gc=False,
                )
                fold_type = msgspec.defstruct(
                    "FoldRecord", [(f, msgspec.Raw) for f in fields] + [("event", union)], array_like=True, gc=False
                )
                self._entry_decoder = msgspec.msgpack.Decoder(self._entry_type, ext_hook=refuse_ext)
                self._event_decoder = msgspec.msgpack.Decoder(union, ext_hook=refuse_ext)
                self._fold_decoder = msgspec.msgpack.Decoder(fold_type, ext_hook=refuse_ext)
                lists: Any = (list[self._entry_type], list[fold_type])  # type: ignore[name-defined,valid-type]
                self._list_decoders = tuple(msgspec.msgpack.Decoder(t, ext_hook=refuse_ext) for t in lists)
                self._kinds = frozenset(kinds.kinds().values())
                self._generation = generation


class _IdRecord(msgspec.Struct, array_like=True, gc=False):
    position: int
    time_ns: msgspec.Raw
    event_id: str
    meta: msgspec.Raw
    event: msgspec.Raw


_id_decoder = msgspec.msgpack.Decoder(_IdRecord)

_VALUES = (
    "; events hold msgpack values only (str, int within 64 bits, float, bool, None, bytes, "
    "lists, dicts with string keys, msgspec Structs in fields typed so), of their fields' types"
)


def _recover_event(raw: Any, exc: Exception) -> Any:
    """An event the typed decoder refused: of an old tag, read through its upcaster; else a named error."""
    tag = raw.get("kind") if isinstance(raw, dict) else None
    if not isinstance(tag, str):
        raise CorruptRecordError(f"undecodable event: {exc}")
    if tag in kinds._registry:
        raise CorruptRecordError(f"undecodable {tag!r} event: {exc}")
    found = kinds.upcaster(tag)
    if found is None:
        raise UnknownKindError(tag)
    kind, upcast = found
    fields = {k: v for k, v in raw.items() if k != "kind"}
    try:
        shaped = dict(upcast(fields))
    except Exception as err:
        raise InvalidEventError(f"the upcaster from {tag!r} to {kind.__qualname__} raised {err!r}") from err
    shaped["kind"] = kind.__struct_config__.tag
    try:
        return msgspec.convert(shaped, kind)
    except _DECODE_ERRORS as err:
        raise CorruptRecordError(f"an event of old tag {tag!r} does not upcast to {kind.__qualname__}: {err}") from None


def _untyped(payload: bytes, exc: Exception) -> Any:
    try:
        return msgspec.msgpack.decode(payload, ext_hook=refuse_ext)
    except _DECODE_ERRORS:
        raise CorruptRecordError(f"undecodable record: {exc}") from None
