"""The floors: the least code that does the same irreducible work as eventlog, run in the
same process so that every eventlog figure is also a ratio to its floor.

(a) write floor: msgspec-encode each event, zstd-compress it (level 3, one frame per
    record, like eventlog), and put it in LMDB under a fixed-width key of run number and
    big-endian offset, all puts of a batch in one write transaction (fsync at commit when
    `sync`).
(b) read floor: an LMDB cursor over one run's keys, zstd-decompress each value,
    msgspec-decode it as the union of the registered event kinds, and a trivial fold
    (count events and keep the last one).
(c) single-append floor: (a) with one event per transaction and no fsync (LMDB opened
    with sync=False): what one `append` with durability none cannot avoid. For reference,
    `append_one_indexed` does the same and also puts what eventlog's key space adds per
    event in three more tables (a feed position, an event id, the run's record).

No framing, no checksum, no feed, no run records, no validation: what eventlog adds on top
is what the ratio to the floor measures.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Sequence
from typing import Any, Union

import lmdb
import msgspec
import zstandard

_KEY = struct.Struct(">QQ")


def event_union() -> Any:
    from eventlog import events

    return Union[tuple(events.kinds().values())]  # noqa: UP007


class Floor:
    """A bare LMDB event store: the floor of both the write and the read path."""

    def __init__(self, path: str, *, sync: bool = True, map_size: int = 8 << 30, level: int = 3) -> None:
        self.env = lmdb.open(path, map_size=map_size, sync=sync, metasync=sync, max_dbs=4, lock=True)
        self.db = self.env.open_db(b"events")
        self._index: tuple[Any, Any, Any] | None = None  # feed, ids, runs: made by the first indexed append
        self._level = level
        self._local = threading.local()  # zstd contexts must not be shared between threads

    @property
    def _enc(self) -> msgspec.msgpack.Encoder:
        local = self._local
        enc: msgspec.msgpack.Encoder | None = getattr(local, "enc", None)
        if enc is None:
            enc = local.enc = msgspec.msgpack.Encoder()
        return enc

    @property
    def _cctx(self) -> zstandard.ZstdCompressor:
        local = self._local
        cctx: zstandard.ZstdCompressor | None = getattr(local, "cctx", None)
        if cctx is None:
            cctx = local.cctx = zstandard.ZstdCompressor(level=self._level, write_checksum=False)
        return cctx

    def close(self) -> None:
        self.env.close()

    # (a) write floor ---------------------------------------------------------------------

    def append_batch(self, run: int, first_offset: int, events: Sequence[Any]) -> None:
        """Encode, compress and put `events` at offsets first_offset.. in one transaction."""
        encode = self._enc.encode
        compress = self._cctx.compress
        pack = _KEY.pack
        with self.env.begin(write=True, db=self.db) as txn:
            put = txn.put
            for i, e in enumerate(events, first_offset):
                put(pack(run, i), compress(encode(e)))

    def append_one(self, run: int, offset: int, event: Any) -> None:
        """One event, one transaction, one fsync (when sync)."""
        value = self._cctx.compress(self._enc.encode(event))
        with self.env.begin(write=True, db=self.db) as txn:
            txn.put(_KEY.pack(run, offset), value)

    def append_one_indexed(self, run: int, offset: int, position: int, event: Any) -> None:
        """`append_one`, plus a feed row (position -> key), an id row (run, 20-byte id -> offset)
        and the run's record (32 bytes) in three more tables, all in the one transaction."""
        if self._index is None:
            self._index = (self.env.open_db(b"feed"), self.env.open_db(b"ids"), self.env.open_db(b"runs"))
        feed, ids, runs = self._index
        value = self._cctx.compress(self._enc.encode(event))
        key = _KEY.pack(run, offset)
        with self.env.begin(write=True, db=self.db) as txn:
            txn.put(key, value)
            txn.put(position.to_bytes(8, "big"), key, db=feed)
            txn.put(key[:8] + position.to_bytes(20, "big"), key[8:], db=ids)
            txn.put(key[:8], key + key, db=runs)

    # (b) read floor ----------------------------------------------------------------------

    def replay(self, run: int) -> tuple[int, Any]:
        """Cursor + decompress + decode + trivial fold over one run; returns (count, last)."""
        decode = msgspec.msgpack.Decoder(event_union()).decode
        decompress = zstandard.ZstdDecompressor().decompress
        prefix = struct.pack(">Q", run)
        count = 0
        last = None
        with self.env.begin(db=self.db) as txn:
            cur = txn.cursor()
            if not cur.set_range(prefix):
                return 0, None
            for key, value in cur:
                if key[:8] != prefix:
                    break
                last = decode(decompress(value))
                count += 1
        return count, last
