"""WayFlow conversations checkpointed through the log, with the shape of WayFlow's Checkpointing API.

    from eventlog.wayflow import EventLogCheckpointer, start_conversation

    checkpointer = EventLogCheckpointer(log)                 # any eventlog log
    conversation = start_conversation(agent, messages="Plan a trip to Bern", checkpointer=checkpointer)
    conversation.execute()                                   # a checkpoint at the end of the turn
    checkpoint = checkpointer.load_latest(conversation.conversation_id)
    restored = start_conversation(agent, conversation_id=conversation.conversation_id,
                                  checkpoint_id=checkpoint.checkpoint_id, checkpointer=checkpointer)

It works with a wayflowcore 26.3.x `Agent`, `Flow`, `Swarm`, `ManagerWorkers` or `A2AAgent` (the
`wayflow` extra; an `OciAgent` is refused). A conversation is
one run of the log, named by its conversation id:

- `wayflow.started` (first event, once per conversation): the component's id, its shape (the
  tools, steps and sub-components a checkpoint depends on) and its definition as wayflowcore
  serializes it.
- While `execute()` runs, wayflowcore's event listeners turn each LLM request and response,
  tool execution, tool confirmation and added message into the standard kinds (`llm.started`,
  `llm.completed`, `tool.started`, `tool.completed`, `interrupted`, `resumed`,
  `message.assistant`, ...) between `turn.started` and `turn.completed` (or `turn.failed`).
- `wayflow.snapshot` at each checkpoint: what changed in the serialized conversation since
  the previous snapshot (new messages, the executor's small state), not the whole
  conversation. The checkpoint is saved at that event's offset.
- `wayflow.rewound` when a conversation restored to an earlier checkpoint first writes (a
  restore itself writes nothing): the conversation id stays, the future it replaced stays
  readable as a branch run forked from it.

Reading (the checkpointer's listings, the reducer, the command line's view) needs no
wayflowcore; starting or restoring a conversation does. The conversation object rebuilt
from a checkpoint uses the live component (with its LLM and
tools) given to `start_conversation`: nothing but data is read back. See docs/guides/wayflow.md.

The package: `_types` (what the API hands out and raises), `_events` and `_diff` (the event
kinds, the fold and the change between two snapshots), `_checkpointer` (the checkpointer),
`_conversation` (the conversation it records, and the rewind a restore makes at its first
write), `_support` (which components are checkpointed), `_portable` (a checkpoint's state as
text that moves to another log), `_listener` and `_messages` (wayflowcore's events and
messages as log events), `_serialize` (wayflowcore's objects as plain data), `_start`
(`start_conversation`), `_view` (the command line's view) and `server` (the Responses
service's storage, imported on its own: it imports wayflowcore).
"""

from __future__ import annotations

from ._checkpointer import EventLogCheckpointer
from ._conversation import CheckpointedConversation
from ._events import ConversationStarted, Rewound, Snapshot, WayflowReducer, WayflowState
from ._start import start_conversation
from ._types import (
    CheckpointingInterval,
    ConversationBranch,
    ConversationCheckpoint,
    IncompatibleComponentError,
    NotAWayflowConversationError,
    RestoreWithMessagesError,
    UnsupportedComponentError,
    WayflowCheckpointError,
)
from ._view import VIEW

__all__ = [
    "VIEW",
    "CheckpointedConversation",
    "CheckpointingInterval",
    "ConversationBranch",
    "ConversationCheckpoint",
    "ConversationStarted",
    "EventLogCheckpointer",
    "IncompatibleComponentError",
    "NotAWayflowConversationError",
    "RestoreWithMessagesError",
    "Rewound",
    "Snapshot",
    "UnsupportedComponentError",
    "WayflowCheckpointError",
    "WayflowReducer",
    "WayflowState",
    "start_conversation",
]
