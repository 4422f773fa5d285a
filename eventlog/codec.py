"""The record pipeline: msgspec encode → zstd compress → frame with checksum, and back.

Every value the log stores is a *frame*::

    bytes 0-3   CRC-32 of bytes 4 to the end, big-endian u32
    byte 4      format version (1)
    byte 5      compression: 0 raw, 1 zstd, 2 zstd with a trained dictionary
    bytes 6-9   dictionary id, big-endian u32 (0 when none)
    bytes 10-   payload

`frame` and `unframe` are the two halves, side by side; `unframe` checks the version, the
length and the checksum before it decompresses, and refuses a zstd frame whose declared
content size is unknown or over the limit before decompressing it.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable
from typing import Any, Union

import msgspec
import zstandard

from . import _limits, events
from .errors import CorruptRecordError, InvalidEventError, RecordTooLargeError, UnencodableValueError

__all__ = ["Codec", "EntryRecord", "frame", "unframe"]

RAW, ZSTD, ZSTD_DICT = 0, 1, 2
_HEADER = struct.Struct(">IBBI")
_PREFIX = struct.Struct(">BBI")
assert _HEADER.size == _limits.record_header_size_bytes


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


def frame(payload: bytes, compression: int, dict_id: int) -> bytes:
    """Put the header (checksum, version, compression, dictionary id) in front of a payload."""
    prefix_crc = _prefix_crcs.get((compression, dict_id))
    if prefix_crc is None:
        prefix = _PREFIX.pack(_limits.format_version, compression, dict_id)
        prefix_crc = _prefix_crcs[(compression, dict_id)] = zlib.crc32(prefix)
    crc = zlib.crc32(payload, prefix_crc)
    return _HEADER.pack(crc, _limits.format_version, compression, dict_id) + payload


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
    if version != _limits.format_version:
        raise CorruptRecordError(f"record format version {version}, expected {_limits.format_version}")
    if compression > ZSTD_DICT or (compression == ZSTD_DICT) != (dict_id != 0):
        raise CorruptRecordError(f"unknown compression {compression} with dictionary {dict_id}")
    return compression, dict_id, payload


class Codec:
    """Encodes and decodes entries and states; one per open log, safe to share between threads.

    `dictionary(dict_id) -> bytes | None` loads a trained dictionary from the log's meta.
    """

    def __init__(self, dictionary: Callable[[int], bytes | None], record_size_bytes_max: int, level: int = 3) -> None:
        self._dictionary = dictionary
        self.record_size_bytes_max = record_size_bytes_max
        self._level = level
        self._dicts: dict[int, zstandard.ZstdCompressionDict] = {}
        self._local = threading.local()
        self._encoder = msgspec.msgpack.Encoder()
        self._state_encoder = msgspec.msgpack.Encoder(order="deterministic")
        self._generation = -1
        self._entry_decoder: msgspec.msgpack.Decoder[Any] | None = None
        self._event_decoder: msgspec.msgpack.Decoder[Any] | None = None
        self._fold_decoder: msgspec.msgpack.Decoder[Any] | None = None
        self._lock = threading.Lock()

    # -- encode ------------------------------------------------------------------------

    def encode_event(self, event: object) -> bytes:
        """Encode one event alone (used for size checks, ids and export). Refuses non-events."""
        self.check_event(event)
        return self._encoder.encode(event)

    def check_event(self, event: object) -> None:
        """Raise InvalidEventError unless `event` is an instance of a registered kind."""
        kind = type(event)
        if not isinstance(event, events.Event) or events._registry.get(kind.__struct_config__.tag) is not kind:
            raise InvalidEventError(
                f"{kind.__module__}.{kind.__qualname__} is not a registered event kind; "
                "subclass eventlog.Event with a tag and call eventlog.register(kind)"
            )

    def encode_entry(self, record: EntryRecord, dict_id: int, *, checked: bool = False) -> bytes:
        """Encode, compress and frame an entry. Raises RecordTooLargeError over the limit.

        `checked`: the caller has run `check_event` on the event already."""
        if not checked:
            self.check_event(record.event)
        try:
            payload = self._encoder.encode(record)
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidEventError(
                f"{type(record.event).__name__} (or its meta) cannot be encoded: {exc}; events hold "
                "msgpack values only (str, int within 64 bits, float, bool, None, bytes, lists, dicts)"
            ) from None
        if len(payload) > self.record_size_bytes_max:
            raise RecordTooLargeError(
                f"{type(record.event).__name__} encodes to {len(payload)} bytes, over the record "
                f"limit of {self.record_size_bytes_max} bytes; store large payloads elsewhere and reference them"
            )
        return self.compress(payload, dict_id)

    def encode_value(
        self, value: object, size_bytes_max: int = _limits.snapshot_size_bytes_max, level: int | None = None
    ) -> bytes:
        """Encode, compress and frame any msgspec-encodable value deterministically (states, run records)."""
        payload = self.encode_state(value)
        if len(payload) > size_bytes_max:
            raise RecordTooLargeError(f"value encodes to {len(payload)} bytes, over the limit of {size_bytes_max}")
        return self.compress(payload, 0, level)

    def encode_state(self, state: object) -> bytes:
        """The canonical bytes of a state: what determinism is checked on."""
        try:
            return self._state_encoder.encode(state)
        except (TypeError, ValueError, OverflowError) as exc:
            raise UnencodableValueError(f"cannot encode {type(state).__name__} canonically: {exc}") from None

    def compress(self, payload: bytes, dict_id: int, level: int | None = None) -> bytes:
        """Compress when that makes the record smaller, then frame."""
        if len(payload) < (_limits.compress_size_bytes_min if dict_id else _limits.compress_nodict_size_bytes_min):
            return frame(payload, RAW, 0)
        compressed = self._compressor(dict_id, self._level if level is None else level).compress(payload)
        if len(compressed) >= len(payload):
            return frame(payload, RAW, 0)
        return frame(compressed, ZSTD_DICT if dict_id else ZSTD, dict_id)

    # -- decode ------------------------------------------------------------------------

    def payload(self, value: bytes, size_bytes_max: int | None = None) -> bytes:
        """Unframe and decompress, bounded. Raises CorruptRecordError."""
        compression, dict_id, payload = unframe(value)
        if compression == RAW:
            return payload
        limit = self.record_size_bytes_max if size_bytes_max is None else size_bytes_max
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
        """Decode a stored entry. Raises CorruptRecordError (the caller adds run and offset)."""
        self._refresh()
        return self._decode(self._entry_decoder, self.payload(value), "entry")

    def decode_entry_event(self, value: bytes) -> Any:
        """Decode only the event of a stored entry (folds need nothing else). Raises CorruptRecordError."""
        self._refresh()
        return self._decode(self._fold_decoder, self.payload(value), "entry").event

    def decode_event(self, data: bytes) -> Any:
        """Decode an event encoded by `encode_event`."""
        self._refresh()
        return self._decode(self._event_decoder, data, "event")

    @staticmethod
    def _decode(decoder: Any, payload: bytes, what: str) -> Any:
        try:
            return decoder.decode(payload)
        except (msgspec.DecodeError, ValueError, TypeError) as exc:
            raise CorruptRecordError(f"undecodable {what}: {exc}") from None

    def decode_value(self, value: bytes, type: Any, size_bytes_max: int = _limits.snapshot_size_bytes_max) -> Any:
        """Decode a value framed by `encode_value`."""
        payload = self.payload(value, size_bytes_max)
        try:
            return msgspec.msgpack.decode(payload, type=type)
        except (msgspec.DecodeError, ValueError, TypeError) as exc:
            raise CorruptRecordError(f"undecodable value: {exc}") from None

    # -- internals ---------------------------------------------------------------------

    def _refresh(self) -> None:
        """Build the decoders again when an event kind was registered since they were built."""
        generation = events._generation
        if generation != self._generation:
            with self._lock:
                union = Union[tuple(events.kinds().values())]  # type: ignore[valid-type]  # noqa: UP007
                entry_type = msgspec.defstruct(
                    "EntryRecord",
                    [(f, EntryRecord.__annotations__[f]) for f in EntryRecord.__struct_fields__[:-1]]
                    + [("event", union)],
                    array_like=True,
                    gc=False,
                )
                fold_type = msgspec.defstruct(
                    "FoldRecord",
                    [(f, msgspec.Raw) for f in EntryRecord.__struct_fields__[:-1]] + [("event", union)],
                    array_like=True,
                    gc=False,
                )
                self._entry_decoder = msgspec.msgpack.Decoder(entry_type)
                self._event_decoder = msgspec.msgpack.Decoder(union)
                self._fold_decoder = msgspec.msgpack.Decoder(fold_type)
                self._generation = generation

    def _dict(self, dict_id: int) -> zstandard.ZstdCompressionDict:
        found = self._dicts.get(dict_id)
        if found is None:
            data = self._dictionary(dict_id)
            if data is None:
                raise CorruptRecordError(f"zstd dictionary {dict_id} is missing from the log's meta")
            found = self._dicts[dict_id] = zstandard.ZstdCompressionDict(data)
        return found

    def _compressor(self, dict_id: int, level: int) -> zstandard.ZstdCompressor:
        try:
            cache = self._local.compressors
        except AttributeError:
            cache = self._local.compressors = {}
        found = cache.get((dict_id, level))
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
        found = cache.get(dict_id)
        if found is None:
            found = (
                zstandard.ZstdDecompressor(dict_data=self._dict(dict_id)) if dict_id else zstandard.ZstdDecompressor()
            )
            cache[dict_id] = found
        return found


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
