"""The byte pipeline under the codec: compress → seal → frame, and the exact reverse on read.

Every value the log stores is a *frame* (docs/format.md, "Frames")::

    bytes 0-3   CRC-32 of bytes 4 to the end, big-endian u32
    byte 4      record format version (1)
    byte 5      compression: 0 raw, 1 zstd, 2 zstd with a trained dictionary; +16 when sealed
    bytes 6-9   dictionary id, big-endian u32 (0 when none)
    bytes 10-   payload (sealed: a 12-byte nonce, then AES-GCM ciphertext and tag)

`frame` and `unframe` are the two halves, side by side; `unframe` checks the version, the
length and the checksum before anything else, and `Zstd.payload` refuses a zstd frame whose
declared content size is unknown or over the limit before decompressing it.

A sealed payload is bound to its place: the AES-GCM associated data is bytes 4-9 of the
header, the log's id and the value's table and key (`associated_data`), so a value moved,
swapped or replayed under another key, table or log does not open (docs/format.md, "Encryption").
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from typing import Any, Protocol

import zstandard

from .. import _limits
from ..errors import CorruptRecordError

__all__ = [
    "RAW",
    "SEALED",
    "ZSTD",
    "ZSTD_DICT",
    "Cipher",
    "Place",
    "Zstd",
    "associated_data",
    "frame",
    "train_dictionary",
    "unframe",
]

RAW, ZSTD, ZSTD_DICT = 0, 1, 2
SEALED = 16
_HEADER = struct.Struct(">IBBI")
_PREFIX = struct.Struct(">BBI")
assert _HEADER.size == _limits.record_header_size_bytes

Place = tuple[str, bytes]
"""Where a value is stored: (table, key)."""


class Cipher(Protocol):
    """Seals and opens payloads (encryption at rest); `eventlog.record.crypto.AESGCMCipher` is one."""

    def seal(self, payload: bytes, associated: bytes) -> bytes:
        """The payload encrypted and authenticated, with `associated` as associated data."""

    def open(self, sealed: bytes, associated: bytes) -> bytes:
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


def associated_data(prefix: bytes, log_id: bytes, place: Place) -> bytes:
    """What a sealed value is bound to: the header's bytes 4-9, the log's 16-byte id, the table
    name's length (a byte) and name, then the key (docs/format.md, "Encryption")."""
    table, key = place
    name = table.encode("ascii")
    return prefix + log_id + bytes([len(name)]) + name + bytes(key)


def where(place: Place) -> str:
    """A place as it is named in errors: `table` key hex."""
    return f"{place[0]} key {bytes(place[1]).hex()}"


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


class Zstd:
    """Compresses and seals payloads into frames, and opens them again; one per open log, safe to
    share between threads. `dictionary(dict_id)` loads a trained dictionary from the log."""

    def __init__(
        self,
        dictionary: Callable[[int], bytes | None],
        read_size_bytes_max: Callable[[], int],
        cipher: Cipher | None,
        level: int,
    ) -> None:
        self._dictionary = dictionary
        self._read_size_bytes_max = read_size_bytes_max
        self.cipher = cipher
        self.log_id = b""
        """The log's id (16 bytes; set at open): sealed values are bound to it."""
        self.unbound = False
        """True while a log sealed before format 3 is read or migrated: a value whose associated
        data is the header alone (bound to nothing) is accepted too."""
        self._level = level
        self._dicts: dict[int, zstandard.ZstdCompressionDict] = {}
        self._free: dict[tuple[int, int], list[Any]] = {}
        """Compressors (by dictionary and level) and decompressors (by dictionary, level -1) not in
        use: a thread takes one and gives it back, so a short-lived thread (LangGraph runs each
        graph's checkpoint writes in threads of its own) makes none, where making one costs more
        than compressing an event with it (a dictionary's tables are built again)."""

    def compress(self, payload: bytes, dict_id: int, place: Place | None, level: int | None = None) -> bytes:
        """Compress when that makes the record smaller, seal when the log has a key, then frame.
        `place` None leaves the frame open, to be sealed by `place_frame` once its key is known."""
        method = RAW
        if len(payload) >= (_limits.compress_size_bytes_min if dict_id else _limits.compress_nodict_size_bytes_min):
            key = (dict_id, self._level if level is None else level)
            compressor = self._take(key)
            compressed = compressor.compress(payload)
            self._give(key, compressor)
            if len(compressed) < len(payload):
                payload, method = compressed, ZSTD_DICT if dict_id else ZSTD
        if method != ZSTD_DICT:
            dict_id = 0
        if self.cipher is None or place is None:
            return frame(payload, method, dict_id)
        return self._seal(payload, method, dict_id, place)

    def place_frame(self, value: bytes, place: Place) -> bytes:
        """An open frame from `compress(..., place=None)`, sealed for `place` when the log has a key."""
        if self.cipher is None:
            return value
        method, dict_id, payload = unframe(value)
        assert not method & SEALED, "the frame is sealed already"
        return self._seal(payload, method, dict_id, place)

    def _seal(self, payload: bytes, method: int, dict_id: int, place: Place) -> bytes:
        assert self.cipher is not None and len(self.log_id) == 16, "a sealed log's id is known before it writes"
        prefix = _PREFIX.pack(_limits.record_format_version, method | SEALED, dict_id)
        return frame(self.cipher.seal(payload, associated_data(prefix, self.log_id, place)), method | SEALED, dict_id)

    def reseal(self, value: bytes, place: Place) -> bytes | None:
        """A value sealed bound to nothing (before format 3), sealed again bound to `place`; None
        when it is bound already or is not sealed. Raises CorruptRecordError when it does not open."""
        compression, dict_id, payload = unframe(value)
        if not compression & SEALED or self._open(payload, compression, dict_id, place, unbound=False) is not None:
            return None
        opened = self._open(payload, compression, dict_id, place, unbound=True)
        if opened is None:
            raise CorruptRecordError(f"the sealed value at {where(place)} does not authenticate")
        return self._seal(opened, compression & ~SEALED, dict_id, place)

    def _open(self, payload: bytes, compression: int, dict_id: int, place: Place, unbound: bool) -> bytes | None:
        """The payload opened with the associated data of `place` (or of nothing, `unbound`); None when it does not."""
        assert self.cipher is not None
        prefix = _PREFIX.pack(_limits.record_format_version, compression, dict_id)
        try:
            return self.cipher.open(payload, prefix if unbound else associated_data(prefix, self.log_id, place))
        except CorruptRecordError:
            return None

    # -- decode ------------------------------------------------------------------------

    def payload(self, value: bytes, place: Place, size_bytes_max: int | None = None) -> bytes:
        """Unframe, open and decompress, bounded. Raises CorruptRecordError."""
        compression, dict_id, payload = unframe(value)
        if compression & SEALED:
            if self.cipher is None:
                raise CorruptRecordError(f"a sealed value at {where(place)} in a log that is not sealed")
            opened = self._open(payload, compression, dict_id, place, unbound=False) if self.log_id else None
            if opened is None and self.unbound:
                opened = self._open(payload, compression, dict_id, place, unbound=True)
            if opened is None:
                raise CorruptRecordError(
                    f"the sealed value at {where(place)} does not authenticate: damaged, moved or copied "
                    "from another place or log, or sealed with another key"
                )
            payload = opened
            compression &= ~SEALED
        elif self.cipher is not None:
            raise CorruptRecordError(f"a value that is not sealed at {where(place)} in a sealed log")
        if compression == RAW:
            return payload
        limit = self._read_size_bytes_max() if size_bytes_max is None else size_bytes_max
        try:
            size = zstandard.frame_content_size(payload) if len(payload) >= 4 else -2
        except zstandard.ZstdError as exc:
            raise CorruptRecordError(f"zstd frame header: {exc}") from None
        if size < 0:
            raise CorruptRecordError("zstd frame without a declared content size")
        if size > limit:
            raise CorruptRecordError(f"zstd frame declares {size} bytes, over the limit of {limit}")
        decompressor = self._take((dict_id, -1))
        try:
            out: bytes = decompressor.decompress(payload)  # size checked above
        except zstandard.ZstdError as exc:
            raise CorruptRecordError(f"zstd: {exc}") from None
        finally:
            self._give((dict_id, -1), decompressor)  # each call starts anew: fit for the next after an error too
        if len(out) != size:
            raise CorruptRecordError("decompressed size differs from the declared size")
        return out

    def payloads(self, values: list[bytes], place: Callable[[int], Place]) -> list[bytes] | None:
        """The payloads of `values` (the i-th stored at `place(i)`), each checked as `payload`
        checks it, in one loop without a call per check; None when one of them fails a check (the
        caller goes value by value through `payload` then, to name the damaged one)."""
        if self.cipher is not None:
            try:
                return [self.payload(value, place(i)) for i, value in enumerate(values)]
            except CorruptRecordError:
                return None
        limit = self._read_size_bytes_max()
        version = _limits.record_format_version
        unpack, crc32, content_size = _HEADER.unpack_from, zlib.crc32, zstandard.frame_content_size
        decompressors: dict[int, zstandard.ZstdDecompressor] = {}
        out: list[bytes] = []
        append = out.append
        try:
            for value in values:
                crc, found, compression, dict_id = unpack(value)
                if crc32(value[4:]) != crc or found != version:
                    return None
                payload = value[_HEADER.size :]
                if compression == RAW:
                    append(payload)
                    continue
                if compression != (ZSTD_DICT if dict_id else ZSTD):
                    return None
                size = content_size(payload) if len(payload) >= 4 else -2
                if size < 0 or size > limit:
                    return None
                decompressor = decompressors.get(dict_id)
                if decompressor is None:
                    decompressor = decompressors[dict_id] = self._take((dict_id, -1))
                data = decompressor.decompress(payload)  # size checked above
                if len(data) != size:
                    return None
                append(data)
        except (struct.error, zstandard.ZstdError, CorruptRecordError):
            return None
        finally:
            for dict_id, decompressor in decompressors.items():
                self._give((dict_id, -1), decompressor)
        return out

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

    def _take(self, key: tuple[int, int]) -> Any:
        """A compressor (`key`: dictionary id and level) or decompressor (level -1) no other thread
        uses, made when none is free; give it back with `_give`."""
        free = self._free.get(key)
        if free:
            try:
                return free.pop()
            except IndexError:  # another thread took the last one meanwhile
                pass
        dict_id, level = key
        if level < 0:
            return (
                zstandard.ZstdDecompressor(dict_data=self._dict(dict_id)) if dict_id else zstandard.ZstdDecompressor()
            )
        if dict_id:
            return zstandard.ZstdCompressor(level=level, dict_data=self._dict(dict_id), write_checksum=False)
        return zstandard.ZstdCompressor(level=level, write_checksum=False)

    def _give(self, key: tuple[int, int], done: Any) -> None:
        self._free.setdefault(key, []).append(done)


def train_dictionary(samples: list[bytes]) -> bytes | None:
    """Train a zstd dictionary from raw record payloads; None when the sample is too small.

    The dictionary is at most 1/16 of the sample, so a small log does not store a
    dictionary larger than what it saves."""
    size = min(_limits.dictionary_size_bytes, sum(map(len, samples)) // _limits.dictionary_sample_ratio)
    if len(samples) < 64 or size < _limits.dictionary_size_bytes_min:
        return None
    try:
        trained = zstandard.train_dictionary(
            size,
            list[bytes | bytearray | memoryview](samples),
            k=_limits.dictionary_cover_k,
            d=_limits.dictionary_cover_d,
        )
    except zstandard.ZstdError:
        return None
    return trained.as_bytes()
