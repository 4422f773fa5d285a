"""LangGraph checkpointer over an eventlog log: `EventLogSaver`.

    from langgraph.graph import StateGraph
    from eventlog.langgraph import EventLogSaver

    with EventLogSaver.from_path("threads.lmdb") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke({"messages": [...]}, {"configurable": {"thread_id": "chat-1"}})

Event-sourced, not a snapshot per checkpoint. A LangGraph thread, and each of its
checkpoint namespaces (one per subgraph call), is a run of the log:

- thread `T`, namespace `""` is run `T`; namespace `NS` is run `T|NS` (`NS` is LangGraph's
  own, such as `child:1b6f...|grandchild:9c0e...`). A `\\` or `|` inside `T` is written
  `\\\\` or `\\|`, so every (thread, namespace) pair has its own run and a thread id without
  those characters is its own run id: `eventlog history T` shows thread `T`. A run id is
  at most 1,024 UTF-8 bytes; a longer thread and namespace is refused by name.
- `put` appends a `langgraph.checkpoint` event (`CheckpointSaved`) holding the channels
  whose version is not their parent's (those in `new_versions`, and every channel of a copy
  or a fork the parent does not hold at that version), and for a list channel whose new
  value starts with the items of its value before (a message list under `add_messages`),
  only the items appended. `put_writes` appends a `langgraph.writes` event (`WritesSaved`).
  `delete_for_runs` marks a run it rewrites with a `langgraph.rewrite` event
  (`RewriteStarted`), which the fold ignores.
- `ThreadReducer` folds a run into the thread's state at any offset: the current
  checkpoint's channel values (as LangGraph's serializer wrote them, never decoded by the
  fold), versions and pending writes. Each checkpoint is an eventlog checkpoint of the run
  at its event's offset, whose metadata holds LangGraph's checkpoint id and metadata; the
  log materializes snapshots among them so that any checkpoint is restored by loading one
  snapshot and folding a bounded number of events after it.

Values go through `self.serde` (`dumps_typed`/`loads_typed`), by default `SafeSerializer()`:
reading constructs only LangChain's messages and the types LangGraph allows in its strict
mode, and never imports or calls what stored bytes name (another type reads as its data); a
wider list is an explicit opt-in (`SafeSerializer(allowed_modules=[...])`, or a serializer of
your own). `EncryptedSerializer(cipher, SafeSerializer())` keeps working, and nothing is
pickled. Every read decodes anew, so nothing a caller gets is the saver's; a list value is
compared item by item, by type and value, with the saver's own decoded copy of the value
before, so an item changed in place is stored.

The package: `_events` (the event kinds and the fold), `_threads` (run ids and the saver's
run cache), `_values` (the serializer), `_read` and `_write` (the sync core), `_rewrite` and
`_admin` (delete, copy and prune), `_answer` (`answer`: a human's answer to an interrupt, stored from outside the graph), `_move` (`copy_threads`: threads from any saver to any other), `_serde` (the decoder that cannot import or call), `_workers` (the worker threads and the async twins),
`_saver` (`EventLogSaver`) and `_view` (the command line's view).
"""

from __future__ import annotations

from ._answer import AnswerRefusedError
from ._events import (
    Blob,
    CheckpointSaved,
    LangGraphThreadError,
    RewriteStarted,
    ThreadReducer,
    ThreadState,
    Write,
    WritesSaved,
    WriteValue,
)
from ._move import CopyReport, ThreadExistsError, ThreadNotFoundError, copy_threads
from ._saver import EventLogSaver
from ._serde import RefusedValueError, SafeSerializer
from ._threads import run_id_of, thread_of
from ._view import VIEW as VIEW

__all__ = [
    "AnswerRefusedError",
    "Blob",
    "CheckpointSaved",
    "CopyReport",
    "EventLogSaver",
    "LangGraphThreadError",
    "RefusedValueError",
    "RewriteStarted",
    "SafeSerializer",
    "ThreadExistsError",
    "ThreadNotFoundError",
    "ThreadReducer",
    "ThreadState",
    "Write",
    "WriteValue",
    "WritesSaved",
    "copy_threads",
    "run_id_of",
    "thread_of",
]
