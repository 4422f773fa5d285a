"""Bytes wayflowcore's OpenAI Responses service stores for one conversation: the whole serialized
conversation per response (what its default datastores hold) beside EventLogDatastore's events.

    PYTHONPATH=.:tests python tools/wayflow_server_bytes.py [TURNS]     # default 40

Runs a conversation of TURNS responses through `WayFlowOpenAIResponsesService` with a scripted
agent (tests/wayflow_app.py, offline) on an LMDB log, then prints the summed state texts of the
rows, the log's events as msgpack (before zstd) and the LMDB directory's size.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import warnings
from typing import Any


def main(turns: int) -> str:
    warnings.simplefilter("ignore")
    import msgspec
    from wayflow_app import build_agent, reply
    from wayflowcore.agentserver.openairesponses.models.openairesponsespydanticmodels import CreateResponse
    from wayflowcore.agentserver.openairesponses.services.wayflowservice import WayFlowOpenAIResponsesService

    import eventlog
    from eventlog.wayflow.server import EventLogDatastore

    path = os.path.join(tempfile.mkdtemp(), "log")
    text = "the weather is fine and the hotel is booked. " * 3
    with eventlog.open(path) as log:
        storage = EventLogDatastore(log)
        agent = build_agent([reply(f"Answer {i}: {text}") for i in range(turns)])
        service = WayFlowOpenAIResponsesService(agents={"trip": agent}, storage=storage)

        async def ask(**request: Any) -> Any:
            return [e async for e in service.create_response(CreateResponse(model="trip", **request))][-1].response

        previous: dict[str, Any] = {}
        for i in range(turns):
            response = asyncio.run(ask(input=f"Question {i}?", **previous))
            previous = {"previous_response_id": response.id}
        rows = storage.list("conversations", {"conversation_id": response.conversation.id})
        whole = sum(len(row["conversation_turn_state"].encode()) for row in rows)
        events = sum(len(msgspec.msgpack.encode(e.event)) for run in log.runs() for e in log.read(run))
    on_disk = sum(os.path.getsize(os.path.join(r, f)) for r, _, files in os.walk(path) for f in files)
    return (
        f"turns={turns} whole states={whole:,} B; log events (msgpack, before zstd)={events:,} B "
        f"({whole / events:.1f}x fewer); LMDB directory after close={on_disk:,} B ({whole / on_disk:.1f}x fewer)"
    )


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else 40))
