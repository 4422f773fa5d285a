"""The waterfall of an ADK session, an OpenAI Agents SDK session and a checkpointed Agents SDK run
(eventlog/ui/session_spans.py): sessions written through the frameworks' real packages, offline
(scripted models), on a real LMDB log whose clock the models and tools move, so that every
duration is known; then the Waterfall tab of each in Chromium.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="the adk extra is not installed")
pytest.importorskip("agents", reason="the openai-agents extra is not installed")

import adk_app
import openai_agents_app
from agents import Runner, function_tool
from google.adk.agents import LlmAgent
from google.adk.events import Event
from google.adk.models import LlmRequest, LlmResponse
from google.adk.platform import time as platform_time
from google.adk.runners import Runner as AdkRunner
from google.adk.tools import LongRunningFunctionTool
from google.genai import types
from openai.types.responses import ResponseCompletedEvent, ResponseUsage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from ui_support import serving, shoot

import eventlog
from eventlog.adk import EventLogSessionService, session_run
from eventlog.openai_agents import EventLogSession, RunCheckpointer
from eventlog.ui.session_spans import session_totals, session_waterfall
from eventlog.ui.spans import Waterfall

DIALOGS_FAIL = True  # any dialog fails a test of this module (conftest `page`)

MODEL_MS, TOOL_MS = 300, 100
"""How long each scripted model call and each tool call moves the clock."""
PRICES = {"gemini-test": (1.0, 4.0)}
"""USD per million input and output tokens."""


class Clock:
    """The log's clock and ADK's, in nanoseconds: it moves only when a model or a tool runs."""

    def __init__(self) -> None:
        self.ns = 1_750_000_000 * 10**9

    def __call__(self) -> int:
        return self.ns

    def seconds(self) -> float:
        return self.ns / 1e9

    def wait(self, ms: int) -> None:
        self.ns += ms * 10**6


@pytest.fixture
def clock() -> Iterator[Clock]:
    clock = Clock()
    platform_time.set_time_provider(clock.seconds)
    yield clock
    platform_time.reset_time_provider()


def _log(tmp_path: Path, clock: Clock) -> eventlog.EventLog:
    return eventlog.open(tmp_path / "log", durability="none", clock=clock)


def _shape(fall: Waterfall) -> list[tuple[int, str, str, str, float]]:
    """(depth, kind, label, status, duration in ms) of each span, in the page's order."""
    return [(s.depth, s.kind, s.label, s.status, round(s.duration_ms, 3)) for s in fall.spans]


def _whole(log: eventlog.EventLog, run_id: str) -> list[eventlog.Entry]:
    return list(log.read(run_id))


# -- an ADK session ------------------------------------------------------------------------------


class TimedModel(adk_app.ScriptedModel):
    """The scripted ADK model, each call taking MODEL_MS of the clock."""

    clock: Any = None

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> AsyncIterator[LlmResponse]:
        self.clock.wait(MODEL_MS)
        async for response in super().generate_content_async(llm_request, stream):
            yield response


def _used(response: LlmResponse, model: str | None = "gemini-test") -> LlmResponse:
    """`response` with the usage Gemini reports: 120 prompt tokens, 30 candidates' and 5 thoughts'."""
    response.usage_metadata = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=120, candidates_token_count=30, thoughts_token_count=5, total_token_count=155
    )
    response.model_version = model
    return response


def _adk_agent(clock: Clock, script: list[LlmResponse], tools: list[Any] | None = None) -> LlmAgent:
    def weather(city: str) -> dict[str, Any]:
        """The weather in a city."""
        clock.wait(TOOL_MS)
        return {"city": city, "sky": "clear"}

    return LlmAgent(name="helper", model=TimedModel(script=script, clock=clock), tools=tools or [weather])


def _adk_turns(log: eventlog.EventLog, agent: LlmAgent, said: list[str], session: str = "chat") -> str:
    service = EventLogSessionService(log, offload=False)
    runner = AdkRunner(agent=agent, app_name="trip", session_service=service)

    async def run() -> None:
        await service.create_session(app_name="trip", user_id="ann", session_id=session)
        for words in said:
            async for _ in runner.run_async(user_id="ann", session_id=session, new_message=adk_app.user(words)):
                pass

    with ThreadPoolExecutor(1) as pool:  # a browser test's event loop may run in this thread
        pool.submit(asyncio.run, run()).result()
    return session_run("trip", "ann", session)


def _two_adk_turns(log: eventlog.EventLog, clock: Clock) -> str:
    script = [
        _used(adk_app.call("weather", city="Bern")),
        _used(adk_app.text("Clear in Bern.")),
        _used(adk_app.call("weather", city="Basel"), model=None),
        _used(adk_app.text("Clear in Basel."), model=None),
    ]
    return _adk_turns(log, _adk_agent(clock, script), ["Weather in Bern?", "And in Basel?"])


def test_an_adk_session_is_its_invocations_model_responses_and_tool_calls(tmp_path: Path, clock: Clock) -> None:
    with _log(tmp_path, clock) as log:
        run_id = _two_adk_turns(log, clock)
        fall = session_waterfall(_whole(log, run_id), first_page=True, prices=PRICES)
        labels = [label for _, _, label, _, _ in _shape(fall)]
        assert labels[0].startswith("Weather in Bern? · e-") and labels[4].startswith("And in Basel? · e-")
        turn = MODEL_MS + TOOL_MS + MODEL_MS
        assert [(d, k, st, ms) for d, k, _, st, ms in _shape(fall)] == [
            (0, "turn", "completed", turn),
            (1, "llm", "completed", MODEL_MS),  # from the user's message to the response that calls
            (1, "tool", "completed", TOOL_MS),  # from the call to its response, paired by call id
            (1, "llm", "completed", MODEL_MS),  # from the tool's response to the answer
            (0, "turn", "completed", turn),
            (1, "llm", "completed", MODEL_MS),
            (1, "tool", "completed", TOOL_MS),
            (1, "llm", "completed", MODEL_MS),
        ]
        assert labels[1:4] == ["helper · gemini-test", 'weather("city": "Bern")', "helper · gemini-test"]
        assert labels[5] == "helper"  # a response that names no model
        assert [(s.totals.input_tokens, s.totals.output_tokens) for s in fall.spans if s.kind == "llm"] == [
            (120, 35)
        ] * 4  # out: the candidates' tokens and the thoughts'
        assert (fall.spans[0].totals.llm_calls, fall.spans[0].totals.tool_calls) == (2, 1)
        assert (fall.spans[0].totals.input_tokens, fall.spans[0].totals.output_tokens) == (240, 70)
        whole = fall.totals
        assert (whole.llm_calls, whole.tool_calls, whole.input_tokens, whole.output_tokens) == (4, 2, 480, 140)
        assert whole.cost_usd == pytest.approx(2 * (120 * 1.0 + 35 * 4.0) / 1e6)  # the two of gemini-test
        assert whole.unpriced == 2  # the two that name no model
        assert fall.duration_ms == 2 * turn and "session service stored" in fall.timed_by
        assert session_totals(log, run_id, log.run_info(run_id), PRICES) == whole


def test_an_adk_call_without_its_response_is_open_and_a_page_holds_what_began_before(
    tmp_path: Path, clock: Clock
) -> None:
    with _log(tmp_path, clock) as log:
        run_id = _two_adk_turns(log, clock)
        service = EventLogSessionService(log, offload=False)

        async def cut_short() -> None:  # the process ends inside a tool call: no response is stored
            session = await service.get_session(app_name="trip", user_id="ann", session_id="chat")
            assert session is not None
            content = adk_app.call("weather", city="Chur").content
            await service.append_event(
                session, Event(invocation_id="e-3", author="user", content=adk_app.user("Chur?"))
            )
            clock.wait(MODEL_MS)
            await service.append_event(session, Event(invocation_id="e-3", author="helper", content=content))
            clock.wait(50)

        asyncio.run(cut_short())
        entries = _whole(log, run_id)
        shape = _shape(session_waterfall(entries, first_page=True))
        assert [(d, k, st) for d, k, _, st, _ in shape[-3:]] == [
            (0, "turn", "running"),  # the page's last turn, not answered: it runs to the page's end
            (1, "llm", "completed"),
            (1, "tool", "running"),
        ]
        assert session_waterfall(entries).spans[-1].open
        # a page that begins inside the first turn, after the call: its response ends a call begun before it
        page = [e for e in entries if e.offset > 3]
        later = session_waterfall(page)
        first, response = later.spans[0], later.spans[1]
        assert (first.kind, first.begun_before, response.kind, response.begun_before) == ("turn", True, "tool", True)
        assert response.status == "completed" and response.end_offset == 4


def test_a_long_running_adk_call_waits_and_a_failed_response_fails(tmp_path: Path, clock: Clock) -> None:
    def approve(amount: int) -> None:
        """Ask a human to approve a payment (the answer comes later, from outside the run)."""

    script = [_used(adk_app.call("approve", amount=40))]
    with _log(tmp_path, clock) as log:
        agent = _adk_agent(clock, script, tools=[LongRunningFunctionTool(func=approve)])
        run_id = _adk_turns(log, agent, ["Pay 40?"])
        shape = _shape(session_waterfall(_whole(log, run_id), first_page=True))
        waits = [(d, k, st) for d, k, _, st, _ in shape if k in ("turn", "tool")]
        assert waits == [(0, "turn", "waiting"), (0, "tool", "waiting")]  # the call outlives its turn: beside it
        service = EventLogSessionService(log, offload=False)

        async def refused() -> None:
            session = await service.get_session(app_name="trip", user_id="ann", session_id="chat")
            assert session is not None
            await service.append_event(
                session, Event(invocation_id="e-2", author="user", content=adk_app.user("Again"))
            )
            clock.wait(MODEL_MS)
            await service.append_event(
                session, Event(invocation_id="e-2", author="helper", error_code="SAFETY", error_message="blocked")
            )

        asyncio.run(refused())
        fall = session_waterfall(_whole(log, run_id), first_page=True)
        assert [(d, k, st, ms) for d, k, _, st, ms in _shape(fall)[-2:]] == [
            (0, "turn", "failed", MODEL_MS),
            (1, "llm", "failed", MODEL_MS),
        ]
        assert fall.totals.failed == 1


# -- an Agents SDK session -------------------------------------------------------------------------


class TimedAgentsModel(openai_agents_app.ScriptedModel):
    """The scripted Agents SDK model, each call taking MODEL_MS of the clock; a streamed response
    reports 10 input and 5 output tokens (the Responses API's usage)."""

    def __init__(self, script: list[list[Any]], clock: Clock) -> None:
        super().__init__(script)
        self.clock = clock

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        self.clock.wait(MODEL_MS)
        return await super().get_response(*args, **kwargs)

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for event in super().stream_response(*args, **kwargs):
            if isinstance(event, ResponseCompletedEvent):
                usage = ResponseUsage(
                    input_tokens=10,
                    output_tokens=5,
                    total_tokens=15,
                    input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
                    output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
                )
                event.response.usage = usage
            yield event


def _agents_agent(clock: Clock, script: list[list[Any]]) -> Any:
    @function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        clock.wait(TOOL_MS)
        return a + b

    @function_tool(needs_approval=True)
    def refund(order: str) -> str:
        """Refund an order."""
        clock.wait(TOOL_MS)
        return f"refunded {order}"

    return openai_agents_app.Agent(name="clerk", model=TimedAgentsModel(script, clock), tools=[add, refund])


def _agents_session(log: eventlog.EventLog, clock: Clock) -> str:
    session = EventLogSession("support-1", log)

    def run() -> None:
        asyncio.run(Runner.run(_agents_agent(clock, openai_agents_app.ADD_SCRIPT), "Add 1+2 and 3+4", session=session))

    with ThreadPoolExecutor(1) as pool:
        pool.submit(run).result()
    return "support-1"


def test_an_agents_sdk_session_is_its_turns_model_responses_and_tool_calls(tmp_path: Path, clock: Clock) -> None:
    with _log(tmp_path, clock) as log:
        run_id = _agents_session(log, clock)
        fall = session_waterfall(_whole(log, run_id), first_page=True, prices=PRICES)
        step = MODEL_MS + TOOL_MS  # the SDK stores a response with its tools' outputs, once they ran
        assert _shape(fall) == [
            (0, "turn", "Add 1+2 and 3+4", "completed", 2 * step + MODEL_MS),
            (1, "llm", "calls add", "completed", step),
            (1, "tool", 'add("a": 1, "b": 2)', "completed", 0),
            (1, "llm", "calls add", "completed", step),
            (1, "tool", 'add("a": 3, "b": 4)', "completed", 0),
            (1, "llm", "“1+2=3 and 3+4=7”", "completed", MODEL_MS),
        ]
        whole = fall.totals
        assert (whole.llm_calls, whole.tool_calls, whole.input_tokens, whole.output_tokens) == (3, 2, 0, 0)
        assert (whole.cost_usd, whole.unpriced) == (0.0, 0)  # items carry no tokens: nothing to price
        assert "items carry no tokens" in fall.timed_by


def test_one_agents_sdk_response_of_two_calls_is_one_model_span(tmp_path: Path, clock: Clock) -> None:
    script = [
        [
            openai_agents_app.call("add", {"a": 1, "b": 2}, "c1"),
            openai_agents_app.call("add", {"a": 3, "b": 4}, "c2"),
        ],
        [openai_agents_app.reply("3 and 7")],
    ]
    with _log(tmp_path, clock) as log:
        session = EventLogSession("both", log)
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, Runner.run(_agents_agent(clock, script), "Add both", session=session)).result()
        fall = session_waterfall(_whole(log, "both"), first_page=True)
        assert [(d, k, label, ms) for d, k, label, _, ms in _shape(fall)] == [
            (0, "turn", "Add both", MODEL_MS + 2 * TOOL_MS + MODEL_MS),
            (1, "llm", "calls add, add", MODEL_MS + 2 * TOOL_MS),  # both calls, and both tools' time
            (1, "tool", 'add("a": 1, "b": 2)', 0),
            (1, "tool", 'add("a": 3, "b": 4)', 0),
            (1, "llm", "“3 and 7”", MODEL_MS),
        ]
        assert (fall.totals.llm_calls, fall.totals.tool_calls) == (2, 2)


def test_an_agents_sdk_call_without_its_output_is_open_and_a_page_holds_what_began_before(
    tmp_path: Path, clock: Clock
) -> None:
    with _log(tmp_path, clock) as log:
        run_id = _agents_session(log, clock)
        session = EventLogSession(run_id, log)
        session.add_items_sync([{"role": "user", "content": "And 5+6?"}])
        clock.wait(MODEL_MS)
        call = openai_agents_app.call("add", {"a": 5, "b": 6}, "c3").model_dump(mode="json", exclude_none=True)
        session.add_items_sync([call])  # and then nothing: the process ended inside the call
        clock.wait(50)
        session.add_items_sync([{"role": "user", "content": "Still there?"}])
        entries = _whole(log, run_id)
        shape = _shape(session_waterfall(entries, first_page=True))
        assert [(d, k, label, st) for d, k, label, st, _ in shape[-4:]] == [
            (0, "turn", "And 5+6?", "completed"),
            (1, "llm", "calls add", "completed"),
            (0, "tool", 'add("a": 5, "b": 6)', "running"),  # open, past its turn: to the page's end
            (0, "turn", "Still there?", "running"),  # not answered yet
        ]
        # a page that begins between a call and its output
        later = session_waterfall([e for e in entries if e.offset > 2])
        assert [(s.kind, s.begun_before) for s in later.spans[:2]] == [("turn", True), ("tool", True)]
        assert later.spans[1].end_offset == 3 and later.spans[1].status == "completed"


# -- a checkpointed Agents SDK run -----------------------------------------------------------------


def test_a_checkpointed_run_is_its_model_calls_with_tokens_and_its_tool_calls(tmp_path: Path, clock: Clock) -> None:
    with _log(tmp_path, clock) as log:
        checkpointer = RunCheckpointer(log)

        def run(run_id: str, script: list[list[Any]], said: str | None) -> None:
            asyncio.run(checkpointer.run(run_id, _agents_agent(clock, script), said))

        with ThreadPoolExecutor(1) as pool:
            pool.submit(run, "order-1", openai_agents_app.ADD_SCRIPT, "Add").result()
            fall = session_waterfall(_whole(log, "order-1"), first_page=True)
            assert _shape(fall) == [
                (0, "run", "run · clerk", "completed", 3 * MODEL_MS + 2 * TOOL_MS),
                (1, "llm", "clerk", "completed", MODEL_MS),  # from the checkpoint before the call
                (1, "tool", 'add("a": 1, "b": 2)', "completed", TOOL_MS),  # from the response to its output
                (1, "llm", "clerk", "completed", MODEL_MS),
                (1, "tool", 'add("a": 3, "b": 4)', "completed", TOOL_MS),
                (1, "llm", "clerk", "completed", MODEL_MS),
            ]
            assert (fall.totals.input_tokens, fall.totals.output_tokens, fall.totals.tool_calls) == (30, 15, 2)
            assert (
                fall.totals.unpriced == 0
                and session_waterfall(_whole(log, "order-1"), prices=PRICES).totals.unpriced == 3
            )
            # a call that waits for a human's approval, approved, then the run resumed
            pool.submit(run, "order-2", openai_agents_app.REFUND_SCRIPT, "Refund A-17").result()
            waiting = _shape(session_waterfall(_whole(log, "order-2"), first_page=True))
            assert [(k, st) for _, k, _, st, _ in waiting] == [
                ("run", "waiting"),
                ("llm", "completed"),
                ("tool", "waiting"),
            ]
            clock.wait(5_000)  # the human takes 5 s
            checkpointer.approve("order-2", "r1")
            pool.submit(run, "order-2", openai_agents_app.REFUND_SCRIPT[1:], None).result()
        done = _shape(session_waterfall(_whole(log, "order-2"), first_page=True))
        assert [(k, label, st) for _, k, label, st, _ in done] == [
            ("run", "run · clerk", "waiting"),
            ("llm", "clerk", "completed"),
            ("tool", 'refund("order": "A-17")', "completed"),
            ("run", "run resumed", "completed"),
            ("llm", "clerk", "completed"),
        ]
        assert done[2][4] == 5_000 + TOOL_MS  # from the call, through the wait, to its output


# -- in Chromium -------------------------------------------------------------------------------------


def _rows(page: Any) -> list[dict[str, Any]]:
    """The page's bars: offset, kind, status, depth, the duration and the tokens shown."""
    page.wait_for_selector(".waterfall .wf-row[data-offset]")
    return page.eval_on_selector_all(
        ".waterfall .wf-row[data-offset]",
        """rows => rows.map(r => ({offset: +r.dataset.offset, kind: r.className.match(/k-(\\w+)/)[1],
              status: r.className.match(/st-(\\w+)/)[1],
              depth: +r.querySelector('.wf-label').className.match(/d(\\d)/)[1],
              took: r.querySelector('.took').textContent.trim(),
              tokens: r.querySelector('.tokens').textContent.trim()}))""",
    )


def _waterfall_url(url: str, run_id: str, **more: Any) -> str:
    return f"{url}/run?" + urllib.parse.urlencode({"id": run_id, "view": "waterfall", **more})


def test_the_waterfall_tab_of_an_adk_session(page: Any, tmp_path: Path, clock: Clock) -> None:
    with _log(tmp_path, clock) as log:
        run_id = _two_adk_turns(log, clock)
        with serving(log, prices=PRICES) as url:
            page.goto(f"{url}/run?" + urllib.parse.urlencode({"id": run_id}))
            assert page.inner_text(".tabs").split()[:2] == ["Conversation", "Waterfall"]
            page.click(".tabs .tab >> text=Waterfall")
            rows = _rows(page)
            expected = session_waterfall(_whole(log, run_id), first_page=True, prices=PRICES).spans
            assert [(r["offset"], r["kind"], r["depth"]) for r in rows] == [
                (s.offset, s.kind, s.depth) for s in expected
            ]
            assert [r["took"] for r in rows] == ["700 ms", "300 ms", "100 ms", "300 ms"] * 2
            assert [r["tokens"].split("$")[0] for r in rows if r["kind"] == "llm"] == ["120 → 35"] * 4
            assert rows[0]["tokens"].startswith("240 → 70")  # a turn: its calls' sum
            totals = "4 LLM calls · 480 → 140 tokens · 2 tool calls"
            assert page.inner_text("#wf-page-totals").startswith(totals)
            assert page.inner_text("#wf-run-totals") == totals
            cost = "$0.0005 · 2 calls of a model without a price"  # 2 × (120 × $1 + 35 × $4) per million
            assert page.inner_text("#wf-page-cost") == page.inner_text("#wf-run-cost") == cost
            assert "session service stored each ADK event" in page.inner_text("#wf-timed-by")
            tool = next(r for r in rows if r["kind"] == "tool")
            page.click(f'.wf-row[data-offset="{tool["offset"]}"]')  # a bar is an event: the state after it
            page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{tool["offset"]}"]')
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
            at = rows[2]["offset"]
            shoot(page, _waterfall_url(url, run_id, at=at), ".insp", tmp_path / "ui-adk-waterfall.png", 760)


def test_the_waterfall_tab_of_an_agents_sdk_session(page: Any, tmp_path: Path, clock: Clock) -> None:
    with _log(tmp_path, clock) as log:
        run_id = _agents_session(log, clock)
        EventLogSession(run_id, log).add_items_sync(
            [
                {"role": "user", "content": "And 5+6?"},
                openai_agents_app.call("add", {"a": 5, "b": 6}, "c3").model_dump(mode="json", exclude_none=True),
            ]
        )  # a call whose output never came: open
        with serving(log) as url:
            page.goto(f"{url}/run?" + urllib.parse.urlencode({"id": run_id}))
            assert page.inner_text(".tabs").split()[:2] == ["Conversation", "Waterfall"]
            page.click(".tabs .tab >> text=Waterfall")
            rows = _rows(page)
            assert [(r["kind"], r["status"], r["depth"]) for r in rows] == [
                ("turn", "completed", 0),
                ("llm", "completed", 1),
                ("tool", "completed", 1),
                ("llm", "completed", 1),
                ("tool", "completed", 1),
                ("llm", "completed", 1),
                ("turn", "running", 0),
                ("llm", "completed", 1),
                ("tool", "running", 1),
            ]
            assert [r["took"] for r in rows[:6]] == ["1.10 s", "400 ms", "0.0 ms", "400 ms", "0.0 ms", "300 ms"]
            assert rows[-1]["took"].endswith("…") and rows[-2]["took"] == "0.0 ms"  # stored with its question
            totals = "4 LLM calls · tokens not recorded · 3 tool calls"
            assert page.inner_text("#wf-page-totals").startswith(totals)
            assert page.inner_text("#wf-run-totals") == totals
            assert "items carry no tokens" in page.inner_text("#wf-timed-by")
            assert page.inner_text("#wf-run-cost") == "not known: the session's items carry no tokens"
            page.click(f'.wf-row[data-offset="{rows[5]["offset"]}"]')
            page.wait_for_selector(f'#inspector .insp[data-kind="state"][data-at="{rows[5]["offset"]}"]')
            assert "1+2=3 and 3+4=7" in page.inner_text("#inspector")
            at = rows[5]["offset"]
            shoot(page, _waterfall_url(url, run_id, at=at), ".insp", tmp_path / "ui-agents-waterfall.png", 760)
