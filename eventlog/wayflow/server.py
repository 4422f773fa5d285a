"""`EventLogDatastore`: the conversations table of wayflowcore's OpenAI Responses service, kept in a log.

    from wayflowcore.agentserver import OpenAIResponsesServer
    from eventlog.wayflow.server import EventLogDatastore

    server = OpenAIResponsesServer(agents={"trip": agent}, storage=EventLogDatastore(log))

wayflowcore 26.3.1's Responses service (`WayFlowOpenAIResponsesService`, behind
`OpenAIResponsesServer`) keeps one row per response in a `Datastore` it is given (`storage=`):
the response's id, its conversation's id, the model, the serialized conversation after the
response, a latest-turn flag and the response itself. That `Datastore` is the seam this
module fills. Each conversation is a run of the log (`<prefix>c/<conversation id>`); each row
is a `wayflow.server.turn` event holding what changed in the serialized conversation since the
previous row of the conversation (so storage grows by what a turn adds, not by the whole
conversation again); a deleted row is a `wayflow.server.deleted` event (the events stay, as
everywhere in a log); the run `<prefix>index` maps each response id to its conversation.
The latest-turn flag is not stored: the latest row of a conversation is the one that is latest.

Only the calls the Responses service makes are served (docs/guides/wayflow.md, "The agent
server: OpenAI Responses conversations in a log"); anything else raises NotImplementedError
naming what is served. Importing this module imports wayflowcore (the `wayflow` extra).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Iterator
from typing import Any, cast

import msgspec
import yaml  # type: ignore[import-untyped]
from wayflowcore.agentserver.serverstorageconfig import ServerStorageConfig
from wayflowcore.datastore import Datastore

from .._limits import conflict_attempts_max, replaced_retries_max
from ..agent.policy import CheckpointPolicy
from ..errors import ConflictError, RunReplacedError
from ..events import Event, register
from ..log import EventLog
from ..services.runwriter import RunWriter
from ._diff import diff, patch, same
from ._serialize import without_components
from ._types import WayflowCheckpointError

__all__ = ["EventLogDatastore", "ServerTurn", "ServerTurnDeleted", "ServerTurnIndexed"]

_SafeLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_SafeDumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class ServerTurn(Event, frozen=True, tag="wayflow.server.turn"):
    """One row of the Responses service: a response and the conversation after it."""

    turn_id: str
    """The response's id."""
    agent_id: str = ""
    """The model (agent) name the response was made with."""
    created_at: int = 0
    extra: str = ""
    """The service's own attributes (the response, as JSON text)."""
    delta: Any = None
    """The change of the parsed conversation since the conversation's previous row."""
    text: str | None = None
    """The conversation as text, when it does not parse to plain data (then `delta` is unused)."""


class ServerTurnDeleted(Event, frozen=True, tag="wayflow.server.deleted"):
    """A row was deleted (the service's `delete_response`)."""

    turn_id: str


class ServerTurnIndexed(Event, frozen=True, tag="wayflow.server.indexed"):
    """In the index run: the conversation a response belongs to."""

    turn_id: str
    conversation_id: str


for _kind in (ServerTurn, ServerTurnDeleted, ServerTurnIndexed):
    register(_kind)


class ServerState(msgspec.Struct, omit_defaults=True):
    """A conversation of the Responses service: its rows, and its serialized conversation at the last one."""

    rows: list[dict[str, Any]] = []
    """`turn_id`, `agent_id`, `created_at`, `extra`, `offset`, `deleted` of each row, oldest first."""
    data: Any = None
    """The parsed conversation after the last row."""
    text: str | None = None
    """The conversation as text after the last row, when it did not parse."""
    events: int = 0
    """Events folded: the offset of the last one (a row's `offset` is its event's)."""


class ServerReducer:
    """Folds a Responses-service conversation's events into `ServerState` (deterministic, no I/O)."""

    name = "wayflow.server"
    version = 1
    state_type = ServerState

    def initial(self) -> ServerState:
        return ServerState()

    def apply(self, state: ServerState, event: Event) -> ServerState:
        state.events += 1
        if isinstance(event, ServerTurn):
            if event.text is None:
                state.data, state.text = patch(state.data, event.delta), None
            else:
                state.text = event.text
            row = {"turn_id": event.turn_id, "agent_id": event.agent_id, "created_at": event.created_at}
            state.rows.append({**row, "extra": event.extra, "offset": state.events, "deleted": False})
        elif isinstance(event, ServerTurnDeleted):
            for row in state.rows:
                if row["turn_id"] == event.turn_id:
                    row["deleted"] = True
        return state


class EventLogDatastore(Datastore):
    """A wayflowcore `Datastore` for the Responses service's conversations table, kept in a log."""

    def __init__(
        self,
        log: EventLog[Any],
        storage_config: ServerStorageConfig | None = None,
        *,
        prefix: str = "wayflow-server/",
        checkpoint_every: int = 16,
    ) -> None:
        """`storage_config` names the table and columns (the service's default when None): give
        the service the same one. A checkpoint of a conversation's run is saved every
        `checkpoint_every` rows, so reading a row folds at most that many events."""
        self.storage_config = storage_config or ServerStorageConfig()
        super().__init__(schema=self.storage_config.to_schema(), name="eventlog")
        self.log = log
        self.prefix = prefix
        self.reducer = ServerReducer()
        self.policy = CheckpointPolicy.every(checkpoint_every)
        self._index: dict[str, str] = {}
        self._index_read = 0
        self._writers: dict[str, RunWriter[ServerState]] = {}  # a conversation's run -> its writer
        self._lock = threading.Lock()

    # -- the Datastore calls the Responses service makes ----------------------------------

    def list(
        self, collection_name: str, where: dict[str, Any] | None = None, limit: int | None = None
    ) -> builtins.list[dict[str, Any]]:
        """Rows matching `where` (exact matches), oldest first within a conversation; each
        conversation's rows and their states of one life of its run (a conversation deleted and
        made again while it is read is read again, on the life it has then)."""
        self._table(collection_name)
        for attempt in range(replaced_retries_max + 1):
            try:
                return [self._with_state(row) for row in self._matching(dict(where or {}), limit)]
            except RunReplacedError:
                if attempt == replaced_retries_max:
                    raise
        raise AssertionError("the last attempt returns or raises")  # pragma: no cover

    def _matching(self, where: dict[str, Any], limit: int | None) -> builtins.list[dict[str, Any]]:
        """The rows `list` gives, without their states: each names its offset and run number."""
        c = self.storage_config
        if c.turn_id_column_name in where:
            found = self._conversation_of(str(where[c.turn_id_column_name]))
            conversations = [] if found is None else [found]
        elif c.conversation_id_column_name in where:
            conversations = [str(where[c.conversation_id_column_name])]
        else:
            conversations = builtins.list(self._conversations())
        out = []
        for conversation_id in conversations:
            for row in self._rows(conversation_id):
                if all(row.get(k) == v for k, v in where.items()):
                    out.append(row)
                    if limit is not None and len(out) >= limit:
                        return out
        return out

    def create(self, collection_name: str, entities: Any) -> Any:
        """Append each row to its conversation's run (and its response id to the index)."""
        self._table(collection_name)
        rows = [entities] if isinstance(entities, dict) else builtins.list(entities)
        c = self.storage_config
        for row in rows:
            conversation_id, turn_id = str(row[c.conversation_id_column_name]), str(row[c.turn_id_column_name])
            self.log.append(self._index_run(), ServerTurnIndexed(turn_id, conversation_id), event_id=turn_id)
            data, text = _parse(str(row[c.conversation_turn_state_column_name]))

            def turn(
                before: ServerState, row: dict[str, Any] = row, data: Any = data, text: str | None = text
            ) -> ServerTurn:
                return ServerTurn(
                    turn_id=str(row[c.turn_id_column_name]),
                    agent_id=str(row.get(c.agent_id_column_name, "")),
                    created_at=int(row.get(c.created_at_column_name, 0) or 0),
                    extra=str(row.get(c.extra_metadata_column_name, "")),
                    delta=None if text is not None else diff(before.data, data),
                    text=text,
                )

            self._append_turn(conversation_id, turn)
            self._index[turn_id] = conversation_id
        return entities

    def _append_turn(self, conversation_id: str, turn: Callable[[ServerState], ServerTurn]) -> None:
        """Append a row to its conversation's run with the writer this datastore keeps for it, so
        that its policy counts rows across calls; a row another writer came before is made again
        on what the run holds then (`turn` of the state it folds to)."""
        run_id = self._run(conversation_id)
        met: ConflictError | None = None
        with self._lock:
            for _ in range(conflict_attempts_max):
                writer = self._writers.get(run_id)
                if writer is None or writer.ended:
                    writer = self._writers[run_id] = self.log.writer(run_id, reducer=self.reducer, policy=self.policy)
                try:
                    writer.append(turn(writer.state))
                    return
                except ConflictError as exc:  # the writer knows the run as it is now: diff again
                    met = exc
        raise ConflictError.last_of(met, conflict_attempts_max) from None

    def update(
        self, collection_name: str, where: dict[str, Any], update: dict[str, Any]
    ) -> builtins.list[dict[str, Any]]:
        """Only the latest-turn flag, which needs no write here (the latest row of a conversation
        is its last one left): "this conversation's latest row is no longer latest", before a
        row is added, and "this row is latest", of the conversation's last row left after a
        delete (what WayFlow's `DatastoreCheckpointer` asks when the service runs on it). A row
        made latest that is not the last one left is refused, with nothing written."""
        self._table(collection_name)
        flag = self.storage_config.is_last_turn_column_name
        if set(update) == {flag} and update[flag] in (0, False):
            return []
        if set(update) == {flag} and update[flag] in (1, True):
            rows = self.list(collection_name, where)
            if all(row[flag] == 1 for row in rows):
                return rows
            raise NotImplementedError(
                f"EventLogDatastore: the latest row of a conversation is its last one left; it cannot make "
                f"{[row[self.storage_config.turn_id_column_name] for row in rows if row[flag] != 1]} latest"
            )
        raise NotImplementedError(
            f"EventLogDatastore serves the OpenAI Responses service's calls only; it does not update {sorted(update)}"
        )

    def delete(self, collection_name: str, where: dict[str, Any]) -> None:
        """Delete rows by response id or by conversation id: a `wayflow.server.deleted` event each."""
        self._table(collection_name)
        c = self.storage_config
        if set(where) - {c.turn_id_column_name, c.conversation_id_column_name}:
            raise NotImplementedError(
                f"EventLogDatastore deletes by {c.turn_id_column_name!r} or {c.conversation_id_column_name!r} only"
            )
        met: ConflictError | None = None
        for _ in range(conflict_attempts_max):
            try:
                for row in self._matching(dict(where), None):  # each in the life it was listed from
                    self.log.append(
                        self._run(row[c.conversation_id_column_name]),
                        ServerTurnDeleted(row[c.turn_id_column_name]),
                        run_number=row["$number"],
                    )
                return
            except RunReplacedError as exc:  # made again since it was listed: delete what it holds now
                met = exc
        raise ConflictError.last_of(met, conflict_attempts_max) from None

    def describe(self) -> dict[str, Any]:
        return cast("dict[str, Any]", self.schema)

    def _serialize_to_dict(self, serialization_context: Any) -> dict[str, Any]:
        raise NotImplementedError("an EventLogDatastore holds an open log: it is given to the server, not serialized")

    @classmethod
    def _deserialize_from_dict(cls, input_dict: dict[str, Any], deserialization_context: Any) -> Any:
        raise NotImplementedError("an EventLogDatastore is never built from stored data")

    # -- internals ------------------------------------------------------------------------

    def _table(self, collection_name: str) -> None:
        if collection_name != self.storage_config.table_name:
            raise NotImplementedError(
                f"EventLogDatastore keeps the table {self.storage_config.table_name!r} only, not {collection_name!r}"
            )

    def _run(self, conversation_id: str) -> str:
        return f"{self.prefix}c/{conversation_id}"

    def _index_run(self) -> str:
        return f"{self.prefix}index"

    def _conversations(self) -> Iterator[str]:
        start = f"{self.prefix}c/"
        for run_id in self.log.iter_runs():  # a listing without an id reads every run's name
            if run_id.startswith(start):
                yield run_id[len(start) :]

    def _conversation_of(self, turn_id: str) -> str | None:
        if turn_id not in self._index and self.log.head(self._index_run()) > self._index_read:
            for entry in self.log.read(self._index_run(), after=self._index_read):
                event = cast("ServerTurnIndexed", entry.event)
                self._index[event.turn_id] = event.conversation_id
                self._index_read = entry.offset
        return self._index.get(turn_id)

    def _rows(self, conversation_id: str) -> builtins.list[dict[str, Any]]:
        run_id = self._run(conversation_id)
        number, head = self.log.life(run_id)
        if head == 0:
            return []
        state: ServerState = self.log.state_at(run_id, head, reducer=self.reducer, run_number=number)
        live = [r for r in state.rows if not r["deleted"]]
        # a row below a pruned base has no state left: pruned with it
        base = self.log.run_info(run_id, run_number=number).base
        c = self.storage_config
        out = []
        for row in live:
            if row["offset"] < base:
                continue
            out.append(
                {
                    c.agent_id_column_name: row["agent_id"],
                    c.conversation_id_column_name: conversation_id,
                    c.turn_id_column_name: row["turn_id"],
                    c.created_at_column_name: row["created_at"],
                    c.is_last_turn_column_name: 1 if row is live[-1] else 0,
                    c.extra_metadata_column_name: row["extra"],
                    "$offset": row["offset"],
                    "$number": number,
                }
            )
        return out

    def _with_state(self, row: dict[str, Any]) -> dict[str, Any]:
        c = self.storage_config
        offset, number = row.pop("$offset"), row.pop("$number")
        state: ServerState = self.log.state_at(
            self._run(row[c.conversation_id_column_name]), offset, reducer=self.reducer, run_number=number
        )
        conversation_id = row[c.conversation_id_column_name]
        data = state.data if state.text is None else _plain(state.text)
        if data is _UNREAD:  # never handed on as it is: another YAML reader might build it otherwise
            raise WayflowCheckpointError(
                f"conversation {conversation_id!r}: its stored state does not read as YAML; it is not served"
            )
        # What wayflowcore rebuilds of a row, the service runs: never a component named by the data.
        # Without its components the conversation's references are bound to the agent served, and
        # the text is this module's own writing of what it read, never the stored one.
        row[c.conversation_turn_state_column_name] = yaml.dump(
            without_components(data, conversation_id), Dumper=_SafeDumper, sort_keys=False
        )
        return row


_UNREAD = object()
"""What `_plain` gives for a text that does not read."""


def _plain(text: str) -> Any:
    """The serialized conversation as plain data, read by the safe loader (it builds no object);
    `_UNREAD` when it does not read."""
    try:
        return yaml.load(text, Loader=_SafeLoader)
    except (yaml.YAMLError, TypeError, ValueError, OverflowError):
        return _UNREAD


def _parse(text: str) -> tuple[Any, str | None]:
    """The serialized conversation as plain data, or (None, text) when it is not plain data that
    stores and reads back exactly."""
    data = _plain(text)
    if data is _UNREAD:
        return None, text
    try:
        back = msgspec.msgpack.decode(msgspec.msgpack.encode(data))
    except (TypeError, ValueError, OverflowError):
        return None, text
    return (data, None) if isinstance(data, dict) and same(back, data) else (None, text)
