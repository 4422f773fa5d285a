"""eventlog.wayflow.server: wayflowcore's OpenAI Responses service keeping its conversations in a
log (the `storage=` Datastore seam of wayflowcore 26.3.1), driven through the service itself with
a scripted agent, on every store; a restart in a fresh process continues a conversation."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import pytest

pytest.importorskip("wayflowcore", reason="the wayflow extra is not installed")
pytest.importorskip("fasta2a", reason="wayflowcore's agent server needs its a2a extra")

from fastapi import HTTPException
from test_wayflow_kinds import DURABLE, in_new_process
from wayflow_app import build_agent, reply
from wayflowcore.agentserver.openairesponses.models.openairesponsespydanticmodels import CreateResponse
from wayflowcore.agentserver.openairesponses.services.wayflowservice import WayFlowOpenAIResponsesService

import eventlog
from eventlog.wayflow.server import EventLogDatastore, ServerReducer, ServerTurn


def ask(service: Any, **request: Any) -> Any:
    """One request to the service, as its HTTP route makes it; the finished response."""

    async def run() -> Any:
        return [event async for event in service.create_response(CreateResponse(model="trip", **request))][-1]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return asyncio.run(run()).response


def said(response: Any) -> str:
    return str(response.output[0].content[0].text)


def test_the_responses_service_keeps_its_conversations_in_the_log(log: eventlog.EventLog) -> None:
    script = [reply("Bern is lovely."), reply("Two rooms."), reply("Rome is warm."), reply("Paris, then.")]
    service = WayFlowOpenAIResponsesService(agents={"trip": build_agent(script)}, storage=EventLogDatastore(log))
    first = ask(service, input="Bern?")
    second = ask(service, input="For two?", previous_response_id=first.id)
    assert (said(first), said(second)) == ("Bern is lovely.", "Two rooms.")
    conversation_id = second.conversation.id
    assert first.conversation.id == conversation_id
    run = f"wayflow-server/c/{conversation_id}"
    assert [type(e.event) for e in log.read(run)] == [ServerTurn, ServerTurn]
    # the second row stores what the turn added, not the whole conversation again
    rows = service.storage.list("conversations", {"conversation_id": conversation_id})
    assert [r["is_last_turn"] for r in rows] == [0, 1] and [r["turn_id"] for r in rows] == [first.id, second.id]
    assert all(isinstance(e.event, ServerTurn) and e.event.text is None for e in log.read(run))

    # by conversation id: the latest row
    third = ask(service, input="Or Rome?", conversation=conversation_id)
    assert said(third) == "Rome is warm."
    # a response is found by its id, and deleted
    assert asyncio.run(service.get_response(first.id)).id == first.id
    asyncio.run(service.delete_response(third.id))
    with pytest.raises(HTTPException):
        asyncio.run(service.get_response(third.id))
    assert [r["turn_id"] for r in service.storage.list("conversations", {"conversation_id": conversation_id})] == [
        first.id,
        second.id,
    ]
    # so the conversation continues from the latest row left
    fourth = ask(service, input="Or Paris?", conversation=conversation_id)
    assert said(fourth) == "Paris, then."
    assert [m.content for m in asyncio.run(_messages(service, fourth.id))] == [
        "Bern?", "Bern is lovely.", "For two?", "Two rooms.", "Or Paris?", "Paris, then."
    ]  # fmt: skip
    assert log.verify(reducer=ServerReducer()).ok
    with pytest.raises(NotImplementedError, match="Responses service"):
        service.storage.update("conversations", {"turn_id": first.id}, {"agent_id": "other"})


async def _messages(service: Any, response_id: str) -> Any:
    conversation = service._load_state(previous_response_id=response_id, conversation_id=None, agent_id="trip")
    return conversation.get_messages()


@DURABLE
def test_a_conversation_of_the_service_continues_after_a_restart(open_log: Any, backend: str) -> None:
    log = open_log()
    service = WayFlowOpenAIResponsesService(
        agents={"trip": build_agent([reply("Bern is lovely.")])}, storage=EventLogDatastore(log)
    )
    first = ask(service, input="Bern?")
    out = in_new_process(
        log,
        f"""
        import asyncio, warnings
        from wayflow_app import build_agent, reply
        from wayflowcore.agentserver.openairesponses.models.openairesponsespydanticmodels import CreateResponse
        from wayflowcore.agentserver.openairesponses.services.wayflowservice import WayFlowOpenAIResponsesService
        from eventlog.wayflow.server import EventLogDatastore
        warnings.simplefilter("ignore")
        with OPEN() as log:
            service = WayFlowOpenAIResponsesService(agents={{"trip": build_agent([reply("Two rooms.")])}},
                                                    storage=EventLogDatastore(log))
            async def run():
                request = CreateResponse(model="trip", input="For two?", previous_response_id={first.id!r})
                return [e async for e in service.create_response(request)][-1].response
            response = asyncio.run(run())
            print(response.output[0].content[0].text, response.conversation.id)
        """,
    )
    assert out.split() == ["Two", "rooms.", first.conversation.id]
    log = open_log()
    rows = EventLogDatastore(log).list("conversations", {"conversation_id": first.conversation.id})
    assert [r["is_last_turn"] for r in rows] == [0, 1]
