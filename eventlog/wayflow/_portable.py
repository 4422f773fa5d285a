"""A checkpoint's `state` as portable text: what moves a checkpoint from one log to another.

The text is JSON (so also YAML, as WayFlow's own checkpoint states are):

    {"checkpoint_format": "eventlog.wayflow.conversation", "version": 1,
     "component_id": ..., "component_type": ..., "name": ..., "shape": {...},
     "status": "UserMessageRequestStatus", "conversation": "<base64>"}

`conversation` is the serialized wayflowcore conversation as a snapshot stores it (components
left out, flow steps named by name), as msgpack in base64: msgpack carries its values exactly
(a message's `time_created` stays a datetime, which JSON would turn into a string); `shape` is
what a restore checks the live component against. Reading it back builds nothing: typed JSON
decoding and untyped msgpack decoding (built-in types only) with a size bound, and the
conversation's types are checked before it is written anywhere (docs/durability.md, guarantee 7).
"""

from __future__ import annotations

from typing import Any

import msgspec

from ._events import WayflowState
from ._types import WayflowCheckpointError

__all__ = ["FORMAT", "VERSION", "read_state_text", "state_size_bytes_max", "state_text"]

FORMAT = "eventlog.wayflow.conversation"
"""The `checkpoint_format` of a state this module writes."""
VERSION = 1
"""Its version; a state of another version is refused."""


class _Envelope(msgspec.Struct, forbid_unknown_fields=False):
    checkpoint_format: str
    version: int
    component_id: str
    component_type: str
    shape: dict[str, Any]
    conversation: bytes
    name: str = ""
    status: str = ""


state_size_bytes_max = 16 * 1024 * 1024
"""The largest state read back: the largest record a log takes by default."""

_decode = msgspec.json.Decoder(_Envelope).decode
_encode = msgspec.json.Encoder(order="deterministic").encode


def state_text(state: WayflowState) -> str:
    """The portable text of a conversation's folded state at a checkpoint."""
    envelope = {
        "checkpoint_format": FORMAT,
        "version": VERSION,
        "component_id": state.component_id,
        "component_type": state.component_type,
        "name": str(state.shape.get("name", "")) if isinstance(state.shape, dict) else "",
        "shape": state.shape,
        "status": state.status,
        "conversation": msgspec.msgpack.encode(state.conversation),
    }
    return _encode(envelope).decode()


def read_state_text(text: object, conversation_id: str, checkpoint_id: str) -> dict[str, Any]:
    """The fields of a portable state; WayflowCheckpointError for anything else, naming the checkpoint."""
    where = f"conversation {conversation_id!r}, checkpoint {checkpoint_id!r}"
    if not isinstance(text, str):
        raise WayflowCheckpointError(f"{where}: the state is {type(text).__name__}, not text")
    raw = text.encode()
    if len(raw) > state_size_bytes_max:
        raise WayflowCheckpointError(f"{where}: the state is {len(raw)} bytes, over {state_size_bytes_max}")
    try:
        envelope = _decode(raw)
    except msgspec.DecodeError as exc:
        hint = ""
        if "wayflow-conversation-checkpoint" in text[:4096]:
            hint = " (it is a state of wayflowcore's own checkpointers, which only wayflowcore reads back)"
        raise WayflowCheckpointError(f"{where}: the state is not one eventlog.wayflow wrote{hint}: {exc}") from None
    if envelope.checkpoint_format != FORMAT or envelope.version != VERSION:
        raise WayflowCheckpointError(
            f"{where}: the state is {envelope.checkpoint_format!r} version {envelope.version}, not {FORMAT!r} "
            f"version {VERSION}"
        )
    out = {f: getattr(envelope, f) for f in envelope.__struct_fields__}
    try:
        out["conversation"] = msgspec.msgpack.decode(envelope.conversation)
    except msgspec.DecodeError as exc:
        raise WayflowCheckpointError(f"{where}: the conversation does not decode: {exc}") from None
    if not isinstance(out["conversation"], dict):
        raise WayflowCheckpointError(f"{where}: the state holds no conversation")
    return out
