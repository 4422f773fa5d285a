"""A conversation loop that checkpoints through the log: user turns, LLM calls, tool calls.

    from eventlog.agent.conversation import Agent
    from eventlog.events import Message

    def llm(messages: list[Message]) -> Message:        # any callable: messages in, message out
        return Message(role="assistant", content="Hello!")

    agent = Agent(llm, tools={}, model="scripted")
    chat = agent.start_conversation(log, "chat-1")       # new, or the run's state at its head
    reply = chat.send("Hi")                              # one turn
    reply.message.content                                # 'Hello!'

A turn: `TurnStarted` and the user's `UserMessage`, then the LLM is called with the
conversation's messages (`LLMCallStarted`, `LLMCallCompleted` with its output, token usage and
latency); while its answer asks for tools, each tool runs (`ToolCallStarted`,
`ToolCallCompleted`) and the LLM is called again; the turn ends (`TurnCompleted`) with an
answer that asks for no tool. An LLM or tool that raises ends the turn with `TurnFailed`.

`LLMCallStarted` records how many of the run's messages the prompt held
(`context_messages`), not the messages again: storage stays linear in the conversation.

Checkpoints follow WayFlow's intervals, given as a `CheckpointPolicy`:
`conversation_turns()` (the default) checkpoints at the end of every turn;
`llm_turns_only()` after every LLM answer (the last one of a turn shares its checkpoint with
the turn's end); `all_internal_turns()` after every LLM answer and every tool call. A turn
that pauses for a human's approval is checkpointed where it pauses. A failed turn writes no
final checkpoint.

Restore keeps the conversation id: `agent.start_conversation(log, "c", checkpoint_id=ID)`
continues "c" from that checkpoint. The future it replaces is not deleted: "c" is forked at
its head into a branch run ("c~1", "c~2", ...), and a `Restored` event brings the folded
state back to the checkpoint's. `ConversationReducer` (AgentReducer plus `Restored`) is the
conversation's reducer: read a restored conversation's state with it (`chat.state` does).
Restoring the checkpoint the conversation already stands at writes nothing.

A tool named in `confirm` pauses the turn before it runs (`Interrupted`, with the call in the
payload); `resume(value)` records the answer (`Resumed`): a true value runs the tool, a false
one does not, and the LLM is told it was declined.
"""

from __future__ import annotations

import copy
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import msgspec

from ..errors import EventLogError, InvalidEventError, RecordTooLargeError
from ..log import EventLog, made_by_fork
from ..record.kinds import Event
from ..services.checkpoints import Checkpoint
from ..services.runwriter import RunWriter
from ._conversation_state import (
    Completion,
    ConversationReducer,
    ConversationState,
    Restored,
    TurnResult,
    pending_tool_calls,
    restore_event,
)
from .events import (
    Interrupted,
    LLMCallCompleted,
    LLMCallFailed,
    LLMCallStarted,
    Message,
    Resumed,
    ToolCall,
    ToolCallCompleted,
    ToolCallFailed,
    ToolCallStarted,
    TurnCompleted,
    TurnFailed,
    TurnStarted,
    UserMessage,
)
from .policy import CheckpointPolicy
from .state import AgentState

__all__ = [
    "DECLINED",
    "Agent",
    "Completion",
    "Conversation",
    "ConversationError",
    "ConversationPausedError",
    "ConversationReducer",
    "ConversationState",
    "RestoreWithMessagesError",
    "Restored",
    "TurnFailedError",
    "TurnResult",
]

DECLINED = "declined by the user"
"""The result a tool call gets when a human declines it; the LLM reads it as the tool's output."""


class ConversationError(EventLogError):
    """A conversation cannot do what was asked."""


class RestoreWithMessagesError(ConversationError, ValueError):
    """A conversation was restored from a checkpoint and given new messages in the same call."""


class ConversationPausedError(ConversationError):
    """The turn waits for a human's answer: call `resume(value)`."""


class TurnFailedError(ConversationError):
    """An LLM or a tool raised; the turn ended with TurnFailed (no final checkpoint)."""

    def __init__(self, conversation_id: str, turn: int, offset: int, what: str, error: BaseException) -> None:
        self.conversation_id, self.turn, self.offset, self.error = conversation_id, turn, offset, error
        super().__init__(
            f"conversation {conversation_id!r}: turn {turn} failed at offset {offset}: {what} raised "
            f"{type(error).__name__}: {error}"
        )


LLM = Callable[[list[Message]], "Message | Completion"]


def _new_id() -> str:
    return os.urandom(8).hex()


class Agent:
    """An LLM and its tools; `start_conversation` binds them to a run of a log."""

    def __init__(
        self,
        llm: LLM,
        tools: Mapping[str, Callable[..., Any]] | None = None,
        *,
        model: str = "llm",
        policy: CheckpointPolicy | None = None,
        confirm: Collection[str] = (),
        clock: Callable[[], float] = time.perf_counter,
        ids: Callable[[], str] = _new_id,
        max_llm_calls_per_turn: int = 16,
    ) -> None:
        """`clock` returns seconds (latencies are its differences); `ids` makes LLM call ids."""
        self.llm = llm
        self.tools = dict(tools or {})
        self.model = model
        self.policy = policy or CheckpointPolicy.conversation_turns()
        self.confirm = frozenset(confirm)
        unknown = self.confirm - set(self.tools)
        if unknown:
            raise ConversationError(f"confirm names tools that do not exist: {sorted(unknown)}")
        self.clock = clock
        self.ids = ids
        self.max_llm_calls_per_turn = max_llm_calls_per_turn

    def start_conversation(
        self,
        log: EventLog[Any],
        conversation_id: str,
        *,
        messages: Sequence[str] | str | None = None,
        checkpoint_id: str | None = None,
        new_conversation_id: str | None = None,
    ) -> Conversation:
        """The conversation `conversation_id`: a new one, or an existing one at its head.

        With `checkpoint_id`, restore: the conversation keeps its id and continues from that
        checkpoint; the future after it stays readable as a branch run (`<id>~1`, ...), listed
        in `chat.branches`. With `new_conversation_id` as well, the conversation is left as it
        is and the checkpoint is forked into that new conversation instead, which writes to the
        life the fork made only (RunReplacedError once another writer deleted it, or made it
        again). Passing `messages` with a checkpoint is refused (RestoreWithMessagesError):
        restore first, then send. `messages` are user messages that open the next turn.
        """
        if checkpoint_id is not None:
            if messages:
                raise RestoreWithMessagesError(
                    f"conversation {conversation_id!r}: cannot restore checkpoint {checkpoint_id!r} and pass new "
                    f"messages in the same call; restore the conversation first, then send the message"
                )
            cp = log.checkpoints.load(conversation_id, checkpoint_id)
            if new_conversation_id is not None:
                made = made_by_fork(log, conversation_id, cp.offset, new_conversation_id, run_number=cp.run_number)
                chat = Conversation(self, log, new_conversation_id, run_number=made)  # the fork's life only
            else:
                chat = Conversation(self, log, conversation_id)
                chat._restore(cp)
            chat.restored_from = cp
            return chat
        if new_conversation_id is not None:
            raise ConversationError(
                f"conversation {conversation_id!r}: new_conversation_id needs checkpoint_id (the checkpoint to fork at)"
            )
        chat = Conversation(self, log, conversation_id)
        if isinstance(messages, str):
            messages = [messages]
        for text in messages or []:
            chat.append_user_message(text)
        return chat


class Conversation:
    """One conversation: a run of the log driven by an Agent."""

    def __init__(
        self, agent: Agent, log: EventLog[Any], conversation_id: str, *, run_number: int | None = None
    ) -> None:
        """With `run_number`, the conversation is that life of the run only (RunReplacedError
        when the run is another life now, or gone: `RunWriter.expect_life`)."""
        self.agent = agent
        self.log = log
        self.conversation_id = conversation_id
        self.reducer = ConversationReducer()
        self.restored_from: Checkpoint[Any] | None = None
        """The checkpoint a restore started from."""
        self._rec: RunWriter[Any] = log.writer(conversation_id, reducer=self.reducer, policy=agent.policy)
        if run_number is not None:
            self._rec.expect_life(run_number, "the conversation was started")
        self._pending: list[str] = []
        self._metadata: dict[str, Any] = {}
        self._last: Event | None = None
        if self._rec.offset:
            self._last = self._event_at(self._rec.offset)

    def _event_at(self, offset: int) -> Event:
        """The event at `offset`; for a `Restored` one, the event at the checkpoint it restored."""
        event = self.log.entry(self.conversation_id, offset, run_number=self._rec.run_number).event
        return self._event_at(event.offset) if isinstance(event, Restored) else event

    def _restore(self, cp: Checkpoint[Any]) -> None:
        """Bring the conversation back to `cp`, keeping the future after it as a branch run."""
        head = self._rec.offset
        self._rec.expect_life(cp.run_number, "it was restored")  # not a checkpoint of a life that is gone
        last = self.log.entry(self.conversation_id, head, run_number=cp.run_number).event
        if cp.offset == head or (isinstance(last, Restored) and last.checkpoint_id == cp.checkpoint_id):
            return  # it stands at the checkpoint already
        current: ConversationState = self._rec.state
        for r in current.restores:
            if r["offset"] < cp.offset <= r["head"]:
                raise ConversationError(
                    f"conversation {self.conversation_id!r}: checkpoint {cp.checkpoint_id!r} belongs to a future that "
                    f"a restore replaced; it is kept on branch {r['branch']!r}: restore it there"
                )
        self._rec.append(restore_event(self.log, self.reducer, current, cp, self.conversation_id, head))
        self._last = self._event_at(self._rec.offset)

    # -- reading -----------------------------------------------------------------------

    @property
    def state(self) -> ConversationState:
        """A copy of the folded state at the head."""
        return copy.deepcopy(self._rec.state)  # type: ignore[no-any-return]

    @property
    def messages(self) -> list[Message]:
        """A copy of the conversation's messages: user, assistant and tool, in order."""
        return _copies(self._rec.state.messages)

    @property
    def turn(self) -> int:
        """Turns started so far."""
        return int(self._rec.state.turn)

    @property
    def offset(self) -> int:
        """Head of the conversation's run."""
        return self._rec.offset

    @property
    def turn_open(self) -> bool:
        """True while a turn has started and neither completed nor failed (after a crash, say)."""
        return self.turn > 0 and not isinstance(self._last, TurnCompleted | TurnFailed)

    @property
    def paused(self) -> bool:
        """True while the turn waits for `resume(value)`."""
        status: str = self._rec.state.status
        return status == "paused"

    def checkpoints(self) -> list[Checkpoint[Any]]:
        """The conversation's checkpoints, oldest first; after a restore, those of the replaced future
        are left out (they are listed on its branch run)."""
        if not self._rec.offset:
            return []
        hidden = [(r["offset"], r["head"]) for r in self._rec.state.restores]
        return [
            cp
            for cp in self.log.checkpoints.list(
                self.conversation_id, reducer=self.reducer, run_number=self._rec.run_number
            )
            if not any(lo < cp.offset <= hi for lo, hi in hidden)
        ]

    @property
    def branches(self) -> list[dict[str, Any]]:
        """Every restore of this conversation, oldest first: `checkpoint_id`, `offset`, `head` and the
        `branch` run that keeps the future it replaced."""
        restores: list[dict[str, Any]] = self._rec.state.restores
        return copy.deepcopy(restores)

    # -- driving -----------------------------------------------------------------------

    def append_user_message(self, content: str) -> None:
        """Queue a user message; the next `execute` opens a turn with it."""
        if not isinstance(content, str):
            raise TypeError(f"a user message is a str, not {type(content).__name__}")
        if self.paused:
            raise ConversationPausedError(self._paused_text())
        if self.turn_open:
            raise ConversationError(
                f"conversation {self.conversation_id!r}: turn {self.turn} is still open at offset "
                f"{self.offset}; call execute() without a new message to finish it first"
            )
        self._pending.append(content)

    def send(self, content: str, *, metadata: Mapping[str, Any] | None = None) -> TurnResult:
        """One turn: the user's message, then the LLM and tools until the assistant answers.

        `metadata` goes on every checkpoint the turn takes by itself (beside `save_reason` and `turn`).
        """
        self.append_user_message(content)
        return self.execute(metadata=metadata)

    def execute(self, *, metadata: Mapping[str, Any] | None = None) -> TurnResult:
        """Run a turn with the queued user messages, or finish the turn left open. With nothing
        pending, do nothing and return how the last turn ended (after a restore, say)."""
        self._metadata = dict(metadata or {})
        if self.paused:
            raise ConversationPausedError(self._paused_text())
        if self._pending:
            turn = self.turn + 1
            events: list[Event] = [TurnStarted(turn=turn)] + [UserMessage(content=m) for m in self._pending]
            self._pending = []
            self._append(events)
        elif not self.turn_open:
            if self.turn == 0:
                raise ConversationError(
                    f"conversation {self.conversation_id!r} has no turn yet at offset {self.offset}; send a user message"
                )
            return self._status()  # nothing is pending: the turn's end (after a restore, say)
        return self._loop()

    def _status(self) -> TurnResult:
        """The last turn's end, as `send` returned it."""
        last = next((m for m in reversed(self._rec.state.messages) if m.role == "assistant"), None)
        return TurnResult("answered", self.turn, self.offset, message=None if last is None else _copies([last])[0])

    def resume(self, value: Any, *, metadata: Mapping[str, Any] | None = None) -> TurnResult:
        """Answer the pending approval (a true value runs the tool, a false one declines it) and go on."""
        self._metadata = dict(metadata or {})
        if not self.paused:
            raise ConversationError(
                f"conversation {self.conversation_id!r} is not paused at offset {self.offset}; nothing to resume"
            )
        self._append([Resumed(value=value, nodes=list(self._rec.state.paused_nodes))])
        return self._loop()

    def _checkpoint_metadata(self, reason: str) -> dict[str, Any]:
        return {**self._metadata, "save_reason": reason, "turn": int(self._rec.state.turn)}

    def _paused_text(self) -> str:
        reason = (self._rec.state.interrupt or {}).get("reason", "")
        return (
            f"conversation {self.conversation_id!r} is paused at offset {self.offset} ({reason}); "
            f"answer with resume(value)"
        )

    def _append(self, events: list[Event], reason: str = "internal_turn_boundary") -> int:
        offsets = self._rec.append_many(events, checkpoint_metadata=self._checkpoint_metadata(reason))
        self._last = events[-1]
        return offsets[-1]

    def _loop(self) -> TurnResult:
        state: AgentState = self._rec.state
        turn = int(state.turn)
        calls = 0
        while True:
            for call in pending_tool_calls(self._rec.state.messages):
                paused = self._tool(call, turn)
                if paused is not None:
                    return paused
            if calls >= self.agent.max_llm_calls_per_turn:
                error = RuntimeError(f"more than {self.agent.max_llm_calls_per_turn} LLM calls in one turn")
                offset = self._append([TurnFailed(turn=turn, error=str(error))])
                raise TurnFailedError(self.conversation_id, turn, offset, "the agent", error)
            calls += 1
            message = self._llm(turn)
            if not message.tool_calls:
                return TurnResult("answered", turn, self.offset, message=message)

    def _llm(self, turn: int) -> Message:
        agent = self.agent
        call_id = agent.ids()
        prompt = _copies(self._rec.state.messages)  # the LLM's own: what it does to them stays there
        self._append([LLMCallStarted(call_id=call_id, model=agent.model, context_messages=len(prompt))])
        t0 = agent.clock()
        try:
            out = agent.llm(prompt)
            completion = out if isinstance(out, Completion) else Completion(out)
            if not isinstance(completion.message, Message):
                raise TypeError(f"the LLM returned {type(out).__name__}; return a Message or a Completion")
        except Exception as exc:
            latency = (agent.clock() - t0) * 1000.0
            error = f"{type(exc).__name__}: {exc}"
            offset = self._append(
                [
                    LLMCallFailed(call_id=call_id, model=agent.model, error=error, latency_ms=latency),
                    TurnFailed(turn=turn, error=error),
                ]
            )
            raise TurnFailedError(self.conversation_id, turn, offset, f"LLM call {call_id}", exc) from exc
        latency = (agent.clock() - t0) * 1000.0
        message = completion.message
        done = LLMCallCompleted(
            call_id=call_id,
            model=agent.model,
            output=message,
            input_tokens=completion.input_tokens,
            output_tokens=completion.output_tokens,
            latency_ms=latency,
        )
        if message.tool_calls:
            self._append([done])
        else:  # the turn's end: one append, so one checkpoint covers the answer and the turn
            self._append([done, TurnCompleted(turn=turn)], reason="conversation_turn")
        return message

    def _approved(self, call: ToolCall) -> bool | None:
        """The human's answer for a call that needs one: True, False, or None when not asked yet."""
        last = self._last
        if isinstance(last, Resumed) and call.id in last.nodes:
            return bool(last.value)
        if isinstance(last, ToolCallStarted) and last.call_id == call.id:
            return True
        return None

    def _tool(self, call: ToolCall, turn: int) -> TurnResult | None:
        agent = self.agent
        if call.name in agent.confirm:
            answer = self._approved(call)
            if answer is None:
                payload = {"call_id": call.id, "tool": call.name, "arguments": dict(call.arguments)}
                self._append([Interrupted(nodes=[call.id], reason=f"approve {call.name}", payload=payload)])
                self._rec.checkpoint(metadata=self._checkpoint_metadata("interrupt"))
                return TurnResult("paused", turn, self.offset, interrupt=copy.deepcopy(self._rec.state.interrupt))
            if answer is False:
                self._append([ToolCallCompleted(call_id=call.id, tool=call.name, output=DECLINED)])
                return None
        if not isinstance(self._last, ToolCallStarted) or self._last.call_id != call.id:
            self._append([ToolCallStarted(call_id=call.id, tool=call.name, arguments=dict(call.arguments))])
        t0 = agent.clock()
        try:
            fn = agent.tools.get(call.name)
            if fn is None:
                raise LookupError(f"no tool named {call.name!r}; tools: {sorted(agent.tools)}")
            output = fn(**call.arguments)
        except Exception as exc:
            latency = (agent.clock() - t0) * 1000.0
            error = f"{type(exc).__name__}: {exc}"
            offset = self._append(
                [
                    ToolCallFailed(call_id=call.id, tool=call.name, error=error, latency_ms=latency),
                    TurnFailed(turn=turn, error=error),
                ]
            )
            raise TurnFailedError(self.conversation_id, turn, offset, f"tool {call.name!r}", exc) from exc
        latency = (agent.clock() - t0) * 1000.0
        try:
            self._append([ToolCallCompleted(call_id=call.id, tool=call.name, output=output, latency_ms=latency)])
        except (InvalidEventError, RecordTooLargeError, TypeError, ValueError) as exc:  # the output cannot be stored
            offset = self._append(
                [
                    ToolCallFailed(call_id=call.id, tool=call.name, error=str(exc), latency_ms=latency),
                    TurnFailed(turn=turn, error=str(exc)),
                ]
            )
            raise TurnFailedError(self.conversation_id, turn, offset, f"tool {call.name!r}", exc) from exc
        return None


_MESSAGES = msgspec.msgpack.Decoder(list[Message])


def _copies(messages: list[Message]) -> list[Message]:
    """Copies of messages of the writer's state, sharing no object with it (a msgspec round trip)."""
    return _MESSAGES.decode(msgspec.msgpack.encode(messages))
