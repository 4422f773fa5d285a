"""A WayFlow agent and flow for the tests, built the same way in every process (fixed ids).

The LLM is scripted: a subclass of wayflowcore's `LlmModel` that answers from a list, offline.
A test in another process imports this module to rebuild the same component.
"""

from collections.abc import AsyncIterator, Sequence
from typing import Any

from wayflowcore.agent import Agent
from wayflowcore.controlconnection import ControlFlowEdge
from wayflowcore.dataconnection import DataFlowEdge
from wayflowcore.flow import Flow
from wayflowcore.messagelist import Message
from wayflowcore.models import LlmCompletion, LlmModel, Prompt, StreamChunkType
from wayflowcore.steps import InputMessageStep, OutputMessageStep, PromptExecutionStep
from wayflowcore.tokenusage import TokenUsage
from wayflowcore.tools import ToolRequest, tool

booked: list[str] = []


def reply(text: str) -> Message:
    return Message(role="assistant", content=text)


def call(name: str, request_id: str, **args: Any) -> Message:
    return Message(
        role="assistant", content="", tool_requests=[ToolRequest(name=name, args=args, tool_request_id=request_id)]
    )


class ScriptedLlm(LlmModel):
    """Answers with the next message of its script; an exception in the script is raised."""

    def __init__(self, script: Sequence[Message | Exception], **kwargs: Any) -> None:
        super().__init__(
            model_id="scripted",
            generation_config=None,
            supports_structured_generation=False,
            supports_tool_calling=True,
            **kwargs,
        )
        self.script = list(script)
        self.prompts: list[int] = []

    async def _generate_impl(self, prompt: Prompt) -> LlmCompletion:
        self.prompts.append(len(prompt.messages))
        if not self.script:
            raise RuntimeError("the scripted LLM has no answer left")
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return LlmCompletion(
            message=item.copy(), token_usage=TokenUsage(input_tokens=10, output_tokens=5, total_tokens=15)
        )

    async def _stream_generate_impl(self, prompt: Prompt) -> AsyncIterator[Any]:
        completion = await self._generate_impl(prompt)
        yield StreamChunkType.START_CHUNK, Message(role="assistant", content=""), None
        yield StreamChunkType.END_CHUNK, completion.message, completion.token_usage

    @property
    def config(self) -> dict[str, Any]:
        return {"model_id": self.model_id}


@tool(description_mode="only_docstring")
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


@tool(description_mode="only_docstring", requires_confirmation=True)
def book_hotel(city: str, people: int) -> str:
    """Book a hotel (asks for a confirmation first)."""
    booked.append(f"{city}/{people}")
    return f"booked a room for {people} in {city}"


def build_agent(
    script: Sequence[Message | Exception], *, agent_id: str = "trip-agent", tools: Sequence[Any] | None = None
) -> Agent:
    return Agent(
        llm=ScriptedLlm(script, id="scripted-llm"),
        tools=list(tools if tools is not None else [weather, book_hotel]),
        custom_instruction="You plan trips.",
        id=agent_id,
        name="trip_planner",
    )


def build_flow(script: Sequence[Message | Exception] = (), *, flow_id: str = "trip-flow") -> Flow:
    """Ask for a city, then for how many people, then let an LLM write a plan, then say it."""
    ask_city = InputMessageStep(message_template="Which city?", name="ask_city")
    ask_people = InputMessageStep(message_template="How many people?", name="ask_people")
    plan = PromptExecutionStep(
        prompt_template="Plan a trip to {{city}} for {{people}}.", llm=ScriptedLlm(script, id="flow-llm"), name="plan"
    )
    say = OutputMessageStep(message_template="{{plan}}", name="say")
    steps = {"ask_city": ask_city, "ask_people": ask_people, "plan": plan, "say": say}
    out = InputMessageStep.USER_PROVIDED_INPUT
    return Flow(
        begin_step=ask_city,
        steps=steps,
        control_flow_edges=[
            ControlFlowEdge(ask_city, ask_people),
            ControlFlowEdge(ask_people, plan),
            ControlFlowEdge(plan, say),
            ControlFlowEdge(say, None),
        ],
        data_flow_edges=[
            DataFlowEdge(ask_city, out, plan, "city"),
            DataFlowEdge(ask_people, out, plan, "people"),
            DataFlowEdge(plan, PromptExecutionStep.OUTPUT, say, "plan"),
        ],
        id=flow_id,
        name="trip_flow",
    )


def build_a2a(agent_id: str = "remote-agent") -> Any:
    """A client of a remote A2A agent at a local address nothing listens on (it is never called)."""
    import warnings

    from wayflowcore.a2a.a2aagent import A2AAgent, A2AConnectionConfig

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # verify=False warns
        config = A2AConnectionConfig(verify=False, id="remote-connection")
    return A2AAgent(agent_url="http://127.0.0.1:9/", connection_config=config, id=agent_id, name="remote")


def build_oci(agent_id: str = "oci-agent") -> Any:
    """A client of an OCI Generative AI agent (never called: OCI agents are refused before any use)."""
    from wayflowcore.models.ociclientconfig import OCIClientConfigWithApiKey
    from wayflowcore.ociagent import OciAgent

    config = OCIClientConfigWithApiKey(service_endpoint="https://127.0.0.1:9")
    return OciAgent(
        agent_endpoint_id="ocid1.endpoint",
        client_config=config,
        id=agent_id,
        name="oci_helper",
        description="An OCI agent.",
    )


NESTED_KINDS = ["workers", "swarm", "sub_agent", "agent_step", "nested_flow"]
"""Where `build_nested` puts the agent that books (and asks for a confirmation first)."""


def booker(script: Sequence[Message | Exception]) -> Agent:
    return Agent(
        llm=ScriptedLlm(script, id="booker-llm"),
        tools=[book_hotel],
        custom_instruction="You book hotels.",
        id="booker",
        name="booker",
        description="Books hotels.",
    )


def build_nested(kind: str, outer: Sequence[Message | Exception], inner: Sequence[Message | Exception]) -> Any:
    """A component of `kind` with the booking agent (LLM script `inner`) nested in it; `outer` is
    the script of the agent that hands it the work, where there is one."""
    from wayflowcore.agent import CallerInputMode
    from wayflowcore.managerworkers import ManagerWorkers
    from wayflowcore.steps import AgentExecutionStep, FlowExecutionStep
    from wayflowcore.swarm import Swarm

    def front(agent_id: str, **kwargs: Any) -> Agent:
        llm = ScriptedLlm(outer, id=f"{agent_id}-llm")
        return Agent(
            llm=llm, custom_instruction="You delegate.", id=agent_id, name=agent_id, description="Leads.", **kwargs
        )

    def one_step(step: Any, flow_id: str) -> Flow:
        edges = [ControlFlowEdge(step, None)]
        return Flow(begin_step=step, steps={step.name: step}, control_flow_edges=edges, id=flow_id, name=flow_id)

    worker = booker(inner)
    if kind == "workers":
        return ManagerWorkers(group_manager=front("manager"), workers=[worker], id="team", name="team")
    if kind == "swarm":
        lead = front("lead")
        return Swarm(first_agent=lead, relationships=[(lead, worker)], id="swarm", name="swarm")
    if kind == "sub_agent":
        return front("parent", agents=[worker])
    step = AgentExecutionStep(agent=worker, caller_input_mode=CallerInputMode.ALWAYS, name="book")
    if kind == "agent_step":
        return one_step(step, "booking-flow")
    return one_step(FlowExecutionStep(one_step(step, "inner-flow"), name="inner"), "outer-flow")


def delegate(kind: str) -> list[Message]:
    """The outer agent's script: hand the booking over, then answer once it is done."""
    if kind == "sub_agent":
        return [call("booker", "d1", context="Book Bern for 2"), reply("All booked.")]
    return [call("send_message", "d1", recipient="booker", message="Book Bern for 2"), reply("All booked.")]


LOOSE_KINDS = ["swarm", "workers", "sub_agent"]
"""Components whose nested parts `build_loose` may leave with generated ids."""


def build_loose(kind: str, script: Sequence[Message | Exception], *, fixed: bool, helper: str = "helper") -> Any:
    """A component of `kind` with a fixed root id; every nested agent and LLM has a fixed id other
    than its name (`fixed`) or one wayflowcore generates anew in each process."""
    from wayflowcore.managerworkers import ManagerWorkers
    from wayflowcore.swarm import Swarm

    def ids(value: str) -> dict[str, str]:
        return {"id": value} if fixed else {}

    llm = ScriptedLlm(script, **ids("lead-llm"))
    worker = Agent(
        llm=ScriptedLlm([], **ids("helper-llm")), tools=[weather], name=helper, description="Helps.", **ids("helper-id")
    )
    if kind == "workers":
        return ManagerWorkers(group_manager=llm, workers=[worker], id="team", name="team")
    lead = Agent(llm=llm, name="lead", description="Leads.", custom_instruction="You lead.", **ids("lead-id"))
    if kind == "swarm":
        return Swarm(first_agent=lead, relationships=[(lead, worker)], id="swarm", name="swarm")
    return Agent(llm=llm, agents=[worker], name="parent", description="Parent.", id="parent")
