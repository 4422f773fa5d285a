"""The floors: the least code that does the same irreducible work as eventlog, run in the
same process so that every eventlog figure is also a ratio to its floor.

(a) write floor: msgspec-encode each event, zstd-compress it (level 3, one frame per
    record, like eventlog), and put it in LMDB under a fixed-width key of run number and
    big-endian offset, all puts of a batch in one write transaction (fsync at commit when
    `sync`).
(b) read floor: an LMDB cursor over one run's keys, zstd-decompress each value,
    msgspec-decode it as the union of the registered event kinds, and a trivial fold
    (count events and keep the last one).

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
        self.env = lmdb.open(path, map_size=map_size, sync=sync, metasync=sync, max_dbs=2, lock=True)
        self.db = self.env.open_db(b"events")
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
