"""The record pipeline: encode → compress → seal → frame, and the exact reverse on read.

Every value the log stores is a *frame* (docs/format.md, "Frames")::

    bytes 0-3   CRC-32 of bytes 4 to the end, big-endian u32
    byte 4      record format version (1)
    byte 5      compression: 0 raw, 1 zstd, 2 zstd with a trained dictionary; +16 when sealed
    bytes 6-9   dictionary id, big-endian u32 (0 when none)
    bytes 10-   payload (sealed: a 12-byte nonce, then AES-GCM ciphertext and tag)

`frame` and `unframe` are the two halves, side by side; `unframe` checks the version, the
length and the checksum before anything else, and `payload` refuses a zstd frame whose
declared content size is unknown or over the limit before decompressing it.

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
import zlib
from collections.abc import Callable
from typing import Any, Protocol, Union

import msgspec
import zstandard

from . import _limits, events
from .errors import (
    CorruptRecordError,
    InvalidEventError,
    RecordTooLargeError,
    UnencodableValueError,
    UnknownKindError,
)

__all__ = ["Cipher", "Codec", "EntryRecord", "frame", "unframe"]

RAW, ZSTD, ZSTD_DICT = 0, 1, 2
SEALED = 16
_HEADER = struct.Struct(">IBBI")
_PREFIX = struct.Struct(">BBI")
assert _HEADER.size == _limits.record_header_size_bytes
_DECODE_ERRORS = (msgspec.DecodeError, ValueError, TypeError, RecursionError)
_ENCODE_ERRORS = (TypeError, ValueError, OverflowError, RecursionError)


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


class Cipher(Protocol):
    """Seals and opens payloads (encryption at rest); `eventlog.crypto.AESGCMCipher` is one."""

    def seal(self, payload: bytes, header: bytes) -> bytes:
        """The payload encrypted and authenticated, with `header` as associated data."""

    def open(self, sealed: bytes, header: bytes) -> bytes:
        """The payload back; raises CorruptRecordError when it does not authenticate."""


def frame(payload: bytes, compression: int, dict_id: int) -> bytes:
    """Put the header (checksum, version, compression, dictionary id) in front of a payload."""
    prefix_crc = _prefix_crcs.get((compression, dict_id))
    if prefix_crc is None:
        prefix = _PREFIX.pack(_limits.record_format_version, compression, dict_id)
        prefix_crc = _prefix_crcs[(compression, dict_id)] = zlib.crc32(prefix)
    crc = zlib.crc32(payload, prefix_crc)
    return _HEADER.pack(crc, _limits.record_format_version, compression, dict_id) + payload


_prefix_crcs: dict[tuple[int, int], int] = {}
"""CRC-32 of each header prefix seen (bytes 4-9), from which a frame's checksum continues."""


def unframe(value: bytes) -> tuple[int, int, bytes]:
    """Check a frame and return (compression, dictionary id, payload). Raises CorruptRecordError."""
    if len(value) < _HEADER.size:
        raise CorruptRecordError(f"record of {len(value)} bytes is shorter than its header")
    crc, version, compression, dict_id = _HEADER.unpack_from(value)
    payload = value[_HEADER.size :]  # a copy: cheaper than a memoryview for records this small
    if zlib.crc32(payload, zlib.crc32(value[4 : _HEADER.size])) != crc:
        raise CorruptRecordError("checksum mismatch")
    if version != _limits.record_format_version:
        raise CorruptRecordError(f"record format version {version}, expected {_limits.record_format_version}")
    method = compression & ~SEALED
    if compression & ~(SEALED | 3) or method > ZSTD_DICT or (method == ZSTD_DICT) != (dict_id != 0):
        raise CorruptRecordError(f"unknown compression {compression} with dictionary {dict_id}")
    return compression, dict_id, payload


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
        self._dictionary = dictionary
        self.record_size_bytes_max = record_size_bytes_max
        self.read_size_bytes_max = record_size_bytes_max
        self._cipher = cipher
        self._level = level
        self._dicts: dict[int, zstandard.ZstdCompressionDict] = {}
        self._local = threading.local()
        self._encoder = msgspec.msgpack.Encoder()
        self._state_encoder = msgspec.msgpack.Encoder(order="deterministic")
        self._meta_decoder = msgspec.msgpack.Decoder(Union[dict[str, Any], None])  # noqa: UP007
        self._generation = -1
        self._entry_type: Any = None
        self._entry_decoder: msgspec.msgpack.Decoder[Any] | None = None
        self._event_decoder: msgspec.msgpack.Decoder[Any] | None = None
        self._fold_decoder: msgspec.msgpack.Decoder[Any] | None = None
        self._lock = threading.Lock()

    @property
    def sealed(self) -> bool:
        """True when records are encrypted."""
        return self._cipher is not None

    # -- encode ------------------------------------------------------------------------

    def check_event(self, event: object) -> None:
        """Raise InvalidEventError unless `event` is an instance of a registered kind."""
        kind = type(event)
        if not isinstance(event, events.Event) or events._registry.get(kind.__struct_config__.tag) is not kind:
            raise InvalidEventError(
                f"{kind.__module__}.{kind.__qualname__} is not a registered event kind; "
                "subclass eventlog.Event with a tag and call eventlog.register(kind)"
            )

    def encode_event(self, event: object) -> bytes:
        """The msgpack bytes of a registered event that reads back equal; else InvalidEventError."""
        self.check_event(event)
        try:
            data = self._encoder.encode(event)
        except _ENCODE_ERRORS as exc:
            raise InvalidEventError(f"{type(event).__name__} cannot be encoded: {exc}{_VALUES}") from None
        self._refresh()
        assert self._event_decoder is not None
        try:
            back = self._event_decoder.decode(data)
        except _DECODE_ERRORS as exc:
            raise InvalidEventError(f"{type(event).__name__} does not match its field types: {exc}") from None
        if back != event and not same(back, event):
            raise InvalidEventError(f"{type(event).__name__} would read back as {back!r}, not as given{_VALUES}")
        return data

    def encode_meta(self, meta: object) -> bytes:
        """The msgpack bytes of an entry's meta (None or a dict with string keys) that reads back equal."""
        try:
            data = self._encoder.encode(meta)
        except _ENCODE_ERRORS as exc:
            raise InvalidEventError(f"meta cannot be encoded: {exc}{_VALUES}") from None
        try:
            back = self._meta_decoder.decode(data)
        except _DECODE_ERRORS as exc:
            raise InvalidEventError(f"meta must be None or a dict with string keys: {exc}") from None
        if back != meta and not same(back, meta):
            raise InvalidEventError(f"meta would read back as {back!r}, not as given{_VALUES}")
        return data

    def encode_entry(
        self, position: int, time_ns: int, event_id: str, meta: bytes, event: bytes, dict_id: int
    ) -> bytes:
        """Frame an entry from the encoded meta and event (`encode_meta`, `encode_event`).
        Raises RecordTooLargeError over the record limit."""
        payload = self._encoder.encode(EntryRecord(position, time_ns, event_id, msgspec.Raw(meta), msgspec.Raw(event)))
        if len(payload) > self.record_size_bytes_max:
            raise RecordTooLargeError(
                f"the entry {event_id!r} encodes to {len(payload)} bytes, over the record limit of "
                f"{self.record_size_bytes_max} bytes; store large payloads elsewhere and reference them"
            )
        return self.compress(payload, dict_id)

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
            return self._state_encoder.encode(state)
        except _ENCODE_ERRORS as exc:
            raise UnencodableValueError(f"cannot encode {type(state).__name__} canonically: {exc}") from None

    def encode_checked(self, what: str, value: object, type_: Any) -> bytes:
        """The canonical bytes of a state or metadata that decodes as `type_` back to an equal value;
        else UnencodableValueError."""
        data = self.encode_state(value)
        try:
            back = msgspec.msgpack.decode(data, type=type_)
        except _DECODE_ERRORS as exc:
            raise UnencodableValueError(f"{what} does not decode as {type_!r} again: {exc}") from None
        if back != value and not same(back, value):
            raise UnencodableValueError(
                f"{what} would read back as {back!r}, not as given (msgpack has no form for "
                "tuples, sets or objects of other types: use lists, dicts and msgspec Structs)"
            )
        return data

    def encode_value(
        self, value: object, size_bytes_max: int = _limits.snapshot_size_bytes_max, level: int | None = None
    ) -> bytes:
        """Encode, compress and frame any msgspec-encodable value deterministically (states, run records)."""
        payload = self.encode_state(value)
        if len(payload) > size_bytes_max:
            raise RecordTooLargeError(f"value encodes to {len(payload)} bytes, over the limit of {size_bytes_max}")
        return self.compress(payload, 0, level)

    def compress(self, payload: bytes, dict_id: int, level: int | None = None) -> bytes:
        """Compress when that makes the record smaller, seal when the log has a key, then frame."""
        method = RAW
        if len(payload) >= (_limits.compress_size_bytes_min if dict_id else _limits.compress_nodict_size_bytes_min):
            compressed = self._compressor(dict_id, self._level if level is None else level).compress(payload)
            if len(compressed) < len(payload):
                payload, method = compressed, ZSTD_DICT if dict_id else ZSTD
        if method != ZSTD_DICT:
            dict_id = 0
        if self._cipher is None:
            return frame(payload, method, dict_id)
        header = _PREFIX.pack(_limits.record_format_version, method | SEALED, dict_id)
        return frame(self._cipher.seal(payload, header), method | SEALED, dict_id)

    # -- decode ------------------------------------------------------------------------

    def payload(self, value: bytes, size_bytes_max: int | None = None) -> bytes:
        """Unframe, open and decompress, bounded. Raises CorruptRecordError."""
        compression, dict_id, payload = unframe(value)
        if compression & SEALED:
            if self._cipher is None:
                raise CorruptRecordError("the record is encrypted; open the log with its key")
            payload = self._cipher.open(payload, _PREFIX.pack(_limits.record_format_version, compression, dict_id))
            compression &= ~SEALED
        elif self._cipher is not None:
            raise CorruptRecordError("the record is not encrypted, but the log was opened with a key")
        if compression == RAW:
            return payload
        limit = self.read_size_bytes_max if size_bytes_max is None else size_bytes_max
        try:
            size = zstandard.frame_content_size(payload) if len(payload) >= 4 else -2
        except zstandard.ZstdError as exc:
            raise CorruptRecordError(f"zstd frame header: {exc}") from None
        if size < 0:
            raise CorruptRecordError("zstd frame without a declared content size")
        if size > limit:
            raise CorruptRecordError(f"zstd frame declares {size} bytes, over the limit of {limit}")
        try:
            out = self._decompressor(dict_id).decompress(payload)  # size checked above
        except zstandard.ZstdError as exc:
            raise CorruptRecordError(f"zstd: {exc}") from None
        if len(out) != size:
            raise CorruptRecordError("decompressed size differs from the declared size")
        return out

    def decode_entry(self, value: bytes) -> EntryRecord:
        """Decode a stored entry. Raises CorruptRecordError or UnknownKindError (the caller adds run and offset)."""
        self._refresh()
        payload = self.payload(value)
        try:
            return self._entry_decoder.decode(payload)  # type: ignore[union-attr]
        except _DECODE_ERRORS as exc:
            return self._recover(payload, exc)  # type: ignore[no-any-return]

    def decode_entry_event(self, value: bytes) -> Any:
        """Decode only the event of a stored entry (folds need nothing else)."""
        self._refresh()
        payload = self.payload(value)
        try:
            return self._fold_decoder.decode(payload).event  # type: ignore[union-attr]
        except _DECODE_ERRORS as exc:
            return self._recover(payload, exc).event

    def decode_entry_id(self, value: bytes) -> tuple[int, str]:
        """(position, event id) of a stored entry, whatever its event's kind."""
        try:
            record = _id_decoder.decode(self.payload(value))
        except _DECODE_ERRORS as exc:
            raise CorruptRecordError(f"undecodable entry: {exc}") from None
        return record.position, record.event_id

    def decode_event(self, data: bytes) -> Any:
        """Decode an event encoded by `encode_event`."""
        self._refresh()
        try:
            return self._event_decoder.decode(data)  # type: ignore[union-attr]
        except _DECODE_ERRORS as exc:
            return self._recover_event(_untyped(data, exc), exc)

    def decode_value(self, value: bytes, type: Any, size_bytes_max: int = _limits.snapshot_size_bytes_max) -> Any:
        """Decode a value framed by `encode_value`."""
        payload = self.payload(value, size_bytes_max)
        try:
            return msgspec.msgpack.decode(payload, type=type)
        except _DECODE_ERRORS as exc:
            raise CorruptRecordError(f"undecodable value: {exc}") from None

    def _recover(self, payload: bytes, exc: Exception) -> Any:
        """An entry the typed decoder refused: an event of an old tag read through its upcaster,
        an event of a kind this process does not know (UnknownKindError), or damage."""
        raw = _untyped(payload, exc)
        if not isinstance(raw, list) or len(raw) != len(EntryRecord.__struct_fields__):
            raise CorruptRecordError(f"undecodable entry: {exc}")
        raw[-1] = msgspec.to_builtins(self._recover_event(raw[-1], exc))
        try:
            return msgspec.convert(raw, self._entry_type)
        except _DECODE_ERRORS as again:
            raise CorruptRecordError(f"undecodable entry: {again}") from None

    def _recover_event(self, raw: Any, exc: Exception) -> Any:
        tag = raw.get("kind") if isinstance(raw, dict) else None
        if not isinstance(tag, str):
            raise CorruptRecordError(f"undecodable event: {exc}")
        if tag in events._registry:
            raise CorruptRecordError(f"undecodable {tag!r} event: {exc}")
        found = events.upcaster(tag)
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
            raise CorruptRecordError(
                f"an event of old tag {tag!r} does not upcast to {kind.__qualname__}: {err}"
            ) from None

    # -- internals ---------------------------------------------------------------------

    def _refresh(self) -> None:
        """Build the decoders again when an event kind was registered since they were built."""
        generation = events._generation
        if generation != self._generation:
            with self._lock:
                union = Union[tuple(events.kinds().values())]  # type: ignore[valid-type]  # noqa: UP007
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
                self._entry_decoder = msgspec.msgpack.Decoder(self._entry_type)
                self._event_decoder = msgspec.msgpack.Decoder(union)
                self._fold_decoder = msgspec.msgpack.Decoder(fold_type)
                self._generation = generation

    def _dict(self, dict_id: int) -> zstandard.ZstdCompressionDict:
        found = self._dicts.get(dict_id)
        if found is None:
            data = self._dictionary(dict_id)
            if data is None:
                raise CorruptRecordError(f"zstd dictionary {dict_id} is missing from the log's meta")
            found = self.add_dictionary(dict_id, data)
        return found

    def add_dictionary(self, dict_id: int, data: bytes) -> zstandard.ZstdCompressionDict:
        """Make a dictionary known without reading it from the log."""
        found = self._dicts[dict_id] = zstandard.ZstdCompressionDict(data)
        return found

    def _compressor(self, dict_id: int, level: int) -> zstandard.ZstdCompressor:
        try:
            cache = self._local.compressors
        except AttributeError:
            cache = self._local.compressors = {}
        found: zstandard.ZstdCompressor | None = cache.get((dict_id, level))
        if found is None:
            if dict_id:
                found = zstandard.ZstdCompressor(level=level, dict_data=self._dict(dict_id), write_checksum=False)
            else:
                found = zstandard.ZstdCompressor(level=level, write_checksum=False)
            cache[(dict_id, level)] = found
        return found

    def _decompressor(self, dict_id: int) -> zstandard.ZstdDecompressor:
        try:
            cache = self._local.decompressors
        except AttributeError:
            cache = self._local.decompressors = {}
        found: zstandard.ZstdDecompressor | None = cache.get(dict_id)
        if found is None:
            found = (
                zstandard.ZstdDecompressor(dict_data=self._dict(dict_id)) if dict_id else zstandard.ZstdDecompressor()
            )
            cache[dict_id] = found
        return found


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


def _untyped(payload: bytes, exc: Exception) -> Any:
    try:
        return msgspec.msgpack.decode(payload)
    except _DECODE_ERRORS:
        raise CorruptRecordError(f"undecodable record: {exc}") from None


def train_dictionary(samples: list[bytes]) -> bytes | None:
    """Train a zstd dictionary from raw record payloads; None when the sample is too small.

    The dictionary is at most 1/16 of the sample, so a small log does not store a
    dictionary larger than what it saves."""
    size = min(_limits.dictionary_size_bytes, sum(map(len, samples)) // _limits.dictionary_sample_ratio)
    if len(samples) < 64 or size < _limits.dictionary_size_bytes_min:
        return None
    try:
        trained = zstandard.train_dictionary(size, samples)
    except zstandard.ZstdError:
        return None
    return trained.as_bytes()
