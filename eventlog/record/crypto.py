"""Encryption at rest: every record sealed with AES-GCM after compression, before framing.

    log = eventlog.open("runs.lmdb", key=key)   # key: 32 random bytes, kept by the caller

The key is never stored. Each record gets a fresh 96-bit nonce; the frame header, the log's
id and the record's table and key are authenticated with it, so a record cannot be moved to
another place, log, compression or dictionary. Keys of the tables (run ids, event ids,
offsets) are not encrypted; record contents are (docs/format.md, "Encryption"). Needs the `cryptography` package: `pip install 'eventlog[crypto]'`.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import CorruptRecordError, InvalidArgumentError

__all__ = ["AESGCMCipher"]

_NONCE_BYTES = 12
_TAG_BYTES = 16


class AESGCMCipher:
    """Seals payloads with AES-256-GCM (a 32-byte key; 16 or 24 bytes select AES-128 or AES-192)."""

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, (bytes, bytearray)) or len(key) not in (16, 24, 32):
            raise InvalidArgumentError("key must be 16, 24 or 32 bytes (32 for AES-256: os.urandom(32))")
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:
            raise InvalidArgumentError(
                "encryption needs the cryptography package: pip install 'eventlog[crypto]'"
            ) from exc
        self._aead: Any = AESGCM(bytes(key))

    def seal(self, payload: bytes, associated: bytes) -> bytes:
        nonce = os.urandom(_NONCE_BYTES)
        sealed: bytes = self._aead.encrypt(nonce, payload, associated)
        return nonce + sealed

    def open(self, sealed: bytes, associated: bytes) -> bytes:
        if len(sealed) < _NONCE_BYTES + _TAG_BYTES:
            raise CorruptRecordError("sealed record shorter than its nonce and tag")
        from cryptography.exceptions import InvalidTag

        try:
            out: bytes = self._aead.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], associated)
        except InvalidTag:
            raise CorruptRecordError("the record does not authenticate: damaged, or sealed with another key") from None
        return out
