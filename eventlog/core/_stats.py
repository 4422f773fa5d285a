"""`log.stats()`: counts, sizes on disk and, with a scan, the compression of the stored events."""

from __future__ import annotations

from typing import Any

import zstandard

from ..record.codec import RAW, SEALED, Codec, unframe
from ..store._base import Store, Txn

_SCAN_CHUNK = 4096


def log_stats(store: Store, codec: Codec, *, scan: bool) -> dict[str, Any]:
    """Runs, events, checkpoints, snapshots, bytes on disk and map size (see `EventLog.stats`)."""
    raw = store.stats()
    out: dict[str, Any] = {
        "runs": raw["entries_runs"],
        "events": raw["entries_events"],
        "checkpoints": raw["entries_checkpoints"],
        "snapshots": raw["entries_snapshots"],
        "bytes_on_disk": raw["bytes_on_disk"],
        "map_size_bytes": raw["map_size_bytes"],
    }
    if scan:
        stored, encoded = _event_sizes(store, codec)
        out["event_bytes_stored"] = stored
        out["event_bytes_raw"] = encoded
        out["compression_ratio"] = encoded / stored if stored else 1.0
    return out


def _event_sizes(store: Store, codec: Codec) -> tuple[int, int]:
    """(stored bytes, bytes before compression) of every event record, read in chunks."""
    stored = encoded = 0
    start = b""
    while True:

        def chunk(txn: Txn, start: bytes = start) -> list[tuple[bytes, bytes]]:
            return txn.scan("events", start, None, limit=_SCAN_CHUNK)

        pairs = store.read(chunk)
        for key, value in pairs:
            stored += len(value)
            try:
                compression, _, payload = unframe(value)
                if compression & SEALED:
                    payload, compression = codec.payload(value, ("events", key)), RAW
                encoded += len(payload) if compression == RAW else max(zstandard.frame_content_size(payload), 0)
            except Exception:  # noqa: BLE001,S112 - verify names damage; a size is not worth failing over
                continue
        if len(pairs) < _SCAN_CHUNK:
            return stored, encoded
        start = pairs[-1][0] + b"\x00"
