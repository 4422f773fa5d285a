"""Every limit of the log in one place, named with the unit last.

The checks at the bottom run at import time so that limits that disagree fail loudly.
"""

from __future__ import annotations

format_version = 4
"""Version of the log's layout written by this code (the `format` meta record). A log written by a
newer version is refused; a log of an older version is migrated when opened for writing."""

record_format_version = 1
"""Version byte of every frame (see docs/format.md); a frame of another version is refused."""

run_id_size_bytes_max = 1024
"""Longest run id, in UTF-8 bytes."""

run_key_inline_size_bytes_max = 448
"""Run ids up to this many bytes are their own key; longer ones are keyed by this many bytes,
0xff and their SHA-256 (LMDB keys hold at most 511 bytes)."""

event_id_size_bytes_max = 256
"""Longest event id or checkpoint id, in UTF-8 bytes."""

time_ns_max = (1 << 63) - 1
"""Latest time an entry or checkpoint may carry, in nanoseconds since the Unix epoch (year 2262)."""

id_draws_max = 16
"""Times the log's own id source is asked again when an id it made is taken in the run."""

record_size_bytes_max = 16 * 1024 * 1024
"""Default limit on one encoded event (before compression); configurable per log."""

snapshot_size_bytes_max = 1024 * 1024 * 1024
"""Limit on one encoded snapshot of a state (before compression)."""

nesting_depth_max = 256
"""Deepest nesting of lists, maps and structs (the event itself is level 1) in an event, its
meta or a checkpoint's metadata the log writes. msgspec's decoders stop about 1,000 levels
below the caller's stack, so what is written reads back in any caller; deeper input to a
decoder (an import file, a fork request) is refused by name. A state is folded from such
events and must read back where it is written (walking every state would cost more than
encoding it)."""

batch_events_max = 100_000
"""Most events one `append_many` call may commit at once."""

record_header_size_bytes = 10
"""Size of the frame header in front of every stored value (see docs/format.md)."""

compress_size_bytes_min = 64
"""With a trained dictionary, payloads shorter than this are stored raw: zstd cannot make them smaller."""

compress_nodict_size_bytes_min = 256
"""Without a dictionary, payloads shorter than this are stored raw: zstd gains little on them and
decompressing a small frame without a dictionary costs more than reading it raw."""

dictionary_train_records_min = 64
"""Number of stored events after which the first zstd dictionary is trained from the log's own data.
A sample too small to train from (under 64 KiB) is tried again at twice the count, so a log of
large records (a LangGraph checkpoint is ~2 KB) gets its dictionary early and one of small ones later."""

dictionary_retrain_factor = 8
"""A new dictionary is trained each time the log's event count grows by this factor after one was trained."""

dictionary_sample_records_max = 4096
"""Most records read to train a dictionary (a bounded sample: training stays short)."""

dictionary_sample_size_bytes_max = 4 * 1024 * 1024
"""Most bytes read to train a dictionary."""

dictionary_size_bytes = 32 * 1024
"""Largest trained zstd dictionary."""

dictionary_sample_ratio = 16
"""A dictionary is at most 1/16 of the sample it is trained from (a small log gets a small one)."""

dictionary_cover_k = 1024
"""zstd's COVER segment size for training: fixed, so training does not search for it (4x faster,
the same compression on agent records)."""

dictionary_cover_d = 8
"""zstd's COVER dmer size for training (see `dictionary_cover_k`)."""

dictionary_size_bytes_min = 4 * 1024
"""Smallest dictionary worth training; a smaller sample waits for more records."""

snapshot_compression_level = 9
"""zstd level of snapshots: they are written rarely and read often, so they are compressed harder than events (3)."""

snapshot_event_bytes_ratio = 2
"""A checkpoint's state is materialized when the bytes of events stored since the nearest
snapshot reach this many times that snapshot's stored bytes. Each snapshot is then at most
half the event bytes since the one before plus what the state grew by in between, so
snapshot bytes stay linear in event bytes, and a restore folds events of at most twice the
size of the snapshot it starts from."""

map_size_bytes_initial = 64 * 1024 * 1024
"""Initial LMDB map size; the map grows by doubling when full."""

map_size_bytes_max = 1 << 40
"""Largest map the log grows to by itself (1 TiB); past it writes fail with LogFullError."""

writer_records_held = 4096
"""Run records the writer keeps between commits, so that it does not decode them again."""

group_commit_wait_seconds = 0.0001
"""When several threads were appending a moment ago, the next group commit waits this long
for them to queue again, so that one transaction (and one fsync) takes them all along."""

read_chunk_entries = 1024
"""Entries read per read transaction by iterators (a long read never pins the map)."""

fold_chunk_entries = 4096
"""Entries `state_at` folds per read transaction."""

fold_decode_entries = 64
"""Entries `state_at` checks and decodes in one pass before folding them: few enough that their
events are still in the CPU's cache when the reducer reads them (4096 at once folds slower
than one at a time on the agent mix; 32-64 folds fastest, docs/benchmarks.md)."""

replaced_retries_max = 4
"""Times `state_at` (and `verify`, per run) starts again when the run it reads is deleted and made
again meanwhile; past that, RunReplacedError. `verify` also starts a run again when it was pruned
meanwhile, and past that says so in a note."""

conflict_attempts_max = 64
"""Times an integration's write that another writer came before (a ConflictError: the run's head
moved, or the run was made again) is built again on the run as it is then: an ADK session's
append, create and delete, an OpenAI Agents session's pop and clear, a recorded approval. The
last conflict is then raised, naming the heads its attempt expected and found and the attempts
(`ConflictError.after`)."""

base_reducers_named_max = 16
"""Reducers an error or a `verify` note names as keeping the state at a pruned base (a base holds
one snapshot per reducer that pruned the run or checkpointed it there)."""

lmdb_max_dbs = 16
"""Named sub-databases an LMDB log may hold."""

reader_check_writes = 256
"""An LMDB log clears the reader slots of dead processes at open and every this many write
transactions, so a killed reader never pins pages for long."""

migrate_chunk_entries = 4096
"""Entries indexed per write transaction when a log of an older format is migrated."""

remove_chunk_keys = 4096
"""Keys `delete_run` and `prune` remove per write transaction (with their feed positions), so
the memory a removal takes does not grow with the run."""

remove_chunk_bytes = 4 * 1024 * 1024
"""Bytes of entries `delete_run` and `prune` remove per write transaction, at most about."""

pg_identifier_size_bytes_max = 63
"""Longest PostgreSQL identifier (a schema name): PostgreSQL cuts longer ones, so they are refused."""

pg_pool_connections_max = 8
"""Connections a PostgreSQL log keeps open at most (one pool per open log)."""

assert 0 < run_id_size_bytes_max <= 4096
assert 0 < id_draws_max and 0 < pg_pool_connections_max and 0 <= replaced_retries_max
assert 0 < base_reducers_named_max and 0 < conflict_attempts_max
assert 0 < read_chunk_entries and 0 < fold_chunk_entries and 0 < fold_decode_entries
assert run_key_inline_size_bytes_max + 1 + 32 <= 511  # LMDB's largest key
assert 16 + event_id_size_bytes_max <= 511
assert 0 < record_size_bytes_max <= snapshot_size_bytes_max
assert dictionary_train_records_min <= dictionary_sample_records_max
assert map_size_bytes_initial <= map_size_bytes_max
assert record_header_size_bytes < compress_size_bytes_min <= compress_nodict_size_bytes_min
assert dictionary_retrain_factor >= 2
assert 16 <= nesting_depth_max <= 512  # well inside msgspec's recursion limit
