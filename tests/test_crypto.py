"""Encryption at rest: records sealed with AES-GCM, the key never stored, a wrong key named."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

import eventlog
from eventlog._keys import u64
from eventlog.events import StepCompleted, UserMessage
from eventlog.transfer import export_runs, import_runs

pytest.importorskip("cryptography")

SECRET = "the launch code is tangerine-42"
KEY = bytes(range(32))


def fill(log: eventlog.EventLog[Any], n: int = 400) -> None:
    """Enough events for a trained dictionary (trained from the records: it must be sealed too)."""
    w = log.writer("r", policy=eventlog.CheckpointPolicy.every(50))
    for i in range(n):
        w.append(
            UserMessage(content=f"{SECRET} {i} " + "words of a conversation " * (5 + i % 9)), meta={"note": SECRET}
        )
    log.checkpoints.save("r", metadata={"why": SECRET})


def test_round_trip_and_no_plaintext_on_disk(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with eventlog.open(path, key=KEY) as log:
        fill(log)
        log._dictionaries.wait()
        fill_more = log.append("r", UserMessage(content=SECRET))
    with eventlog.open(path, key=KEY) as log:
        assert log.entry("r", fill_more).event == UserMessage(content=SECRET)
        assert log.state_at("r").messages[0].content.startswith(SECRET)
        assert log.checkpoints.load_latest("r").metadata == {"why": SECRET}  # type: ignore[union-attr]
        assert log.verify().ok
        assert log.store.read(lambda txn: txn.scan("meta", b"dict:", b"dict;"))  # a dictionary was trained
    data = (path / "data.mdb").read_bytes()
    for needle in (SECRET, "tangerine", "words of a conversation"):
        assert needle.encode() not in data, needle


def test_a_wrong_or_missing_key_is_named(tmp_path: Path) -> None:
    path = tmp_path / "log"
    with eventlog.open(path, key=KEY) as log:
        log.append("r", UserMessage(content=SECRET))
    with pytest.raises(eventlog.KeyMismatchError, match="another key"):
        eventlog.open(path, key=os.urandom(32))
    with pytest.raises(eventlog.KeyMismatchError, match="encrypted"):
        eventlog.open(path)
    with pytest.raises(eventlog.KeyMismatchError, match="encrypted"):
        eventlog.open(path, readonly=True)
    plain = tmp_path / "plain"
    with eventlog.open(plain) as log:
        log.append("r", UserMessage(content="x"))
    with pytest.raises(eventlog.KeyMismatchError, match="not encrypted"):
        eventlog.open(plain, key=KEY)
    for bad in (b"short", "a string key" * 3, 42):
        with pytest.raises(eventlog.InvalidArgumentError, match="key"):
            eventlog.open(tmp_path / "other", key=bad)  # type: ignore[arg-type]


def test_a_flipped_ciphertext_byte_is_a_named_corrupt_record(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "log", key=KEY) as log:
        log.append_many("r", [StepCompleted(node="a", superstep=i) for i in range(1, 4)])
        number = log.store.read(lambda txn: log._runs.require(txn, "r")).number
        key = u64(number) + u64(2)
        value = bytearray(log.store.read(lambda txn: txn.get("events", key)))
        value[-3] ^= 0x01  # inside the GCM tag's reach
        import zlib

        value[0:4] = zlib.crc32(bytes(value[4:])).to_bytes(4, "big")  # a good checksum: only the seal can tell
        log.store.write(lambda txn: txn.put("events", key, bytes(value)))
        with pytest.raises(eventlog.CorruptRecordError, match="authenticate") as caught:
            list(log.read("r"))
        assert (caught.value.run_id, caught.value.offset) == ("r", 2)
        assert [p.offset for p in log.verify().problems] == [2]


def test_export_and_import_of_an_encrypted_log(tmp_path: Path) -> None:
    with eventlog.open(tmp_path / "a", key=KEY) as log:
        fill(log, 60)
        out = tmp_path / "runs.jsonl"
        export_runs(log, out)
        entries = [(e.event, e.meta) for e in log.read("r")]
    other = os.urandom(32)
    with eventlog.open(tmp_path / "b", key=other) as copy:
        import_runs(copy, out)
        assert [(e.event, e.meta) for e in copy.read("r")] == entries
        assert copy.verify().ok
    assert SECRET.encode() not in (tmp_path / "b" / "data.mdb").read_bytes()
