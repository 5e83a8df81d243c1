"""The LangGraph and OpenAI Agents examples inside the real frameworks (the `integrations`
extra), with the frameworks' own kind of fake model, against a live gate and a person
deciding from another thread. Skipped, saying why, when the extra is not installed."""

# No `from __future__ import annotations`: LangChain reads the tools' annotations at runtime,
# and they name types imported inside the tests (the extra may be missing at import time).
import json
import uuid
from typing import Any

import pytest

from gate.client import GateClient
from tests.conftest import Gate
from tests.hooks.test_client import Decider
from tests.hooks.test_examples import load
from tests.support import config as cfg

EXTRA = "needs the integrations extra: pip install -e '.[dev,integrations]' (CI installs it)"


def decide_with_edits(gate: Gate, tool: str, edited: dict[str, Any]) -> Decider:
    """A person who approves the next `tool` request with `edited` arguments."""

    class Editor(Decider):
        def _run(self) -> None:
            from tests.support.servers import wait_until

            self.request = wait_until(self._pending, 20)
            with self.gate.client(cfg.ALICE) as c:
                r = c.post(
                    f"/v1/requests/{self.request['id']}/decision",
                    json={"verdict": "approve", "edited_args": edited},
                )
            assert r.status_code == 200, r.text

    return Editor(gate, tool, cfg.ALICE, "approve")


def requests_for(gate: Gate, tool: str) -> list[dict[str, Any]]:
    with gate.client(cfg.ADMIN) as c:
        items: list[dict[str, Any]] = c.get("/v1/requests", params={"tool_name": tool}).json()[
            "items"
        ]
    return items


# -- LangGraph / LangChain ---------------------------------------------------------------------


@pytest.fixture
def lc() -> Any:
    pytest.importorskip("langgraph", reason=EXTRA)
    pytest.importorskip("langchain", reason=EXTRA)
    return load("langgraph_tool")


def payments() -> tuple[Any, list[dict[str, Any]]]:
    """A real LangChain tool that records its calls (and takes an injected call id)."""
    from typing import Annotated

    from langchain_core.tools import InjectedToolCallId, tool

    ran: list[dict[str, Any]] = []

    @tool
    def pay_vendor(
        vendor: str, amount: int, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> str:
        """Pay a vendor an amount in euros."""
        ran.append({"vendor": vendor, "amount": amount, "tool_call_id": tool_call_id})
        return f"paid {vendor} {amount}"

    return pay_vendor, ran


def tool_calls_model(*turns: Any) -> Any:
    """langchain-core's GenericFakeChatModel, able to bind tools, remembering what it read."""
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel

    class ToolCallingFake(GenericFakeChatModel):
        seen: list[list[Any]] = []
        bound: list[Any] = []

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            self.bound = tools
            return self

        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            self.seen.append(list(messages))
            return super()._generate(messages, *args, **kwargs)

    return ToolCallingFake(messages=iter(turns), seen=[], bound=[])


def tools_graph(node: Any) -> Any:
    """The smallest graph around a ToolNode: messages in, the tool messages appended."""
    from langgraph.graph import END, START, MessagesState, StateGraph

    graph = StateGraph(MessagesState)
    graph.add_node("tools", node)
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile()


def test_create_agent_gets_the_refusal_as_a_tool_message(gate_sqlite: Gate, lc: Any) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.utils.function_calling import convert_to_openai_tool

    pay, ran = payments()
    call = {"name": "pay_vendor", "args": {"vendor": "ACME", "amount": 70000}, "id": "call_1"}
    model = tool_calls_model(AIMessage("", tool_calls=[call]), AIMessage("I will not pay."))
    client = GateClient(gate_sqlite.url, cfg.AGENT, timeout=30)
    tools = lc.gate_tools([pay], client)
    agent = create_agent(model, tools)
    thread = f"thread-{uuid.uuid4().hex[:8]}"

    person = Decider(gate_sqlite, "pay_vendor", cfg.ALICE, "reject", "wrong vendor")
    state = agent.invoke(
        {"messages": [HumanMessage("Pay ACME")]}, {"configurable": {"thread_id": thread}}
    )
    request = person.join()

    assert ran == []
    refusal = state["messages"][2]
    assert isinstance(refusal, ToolMessage)
    assert (refusal.tool_call_id, refusal.status, refusal.name) == ("call_1", "error", "pay_vendor")
    assert refusal.content.startswith("gate: Rejected by alice in the API: wrong vendor.")
    assert model.seen[1][-1] == refusal  # what the model read next
    # Gate was asked about the model's arguments, under the thread's call id.
    assert request["tool_args"] == {"vendor": "ACME", "amount": 70000}
    assert request["session_id"] == thread
    # The model is offered the same tool: same name, description and schema.
    assert [convert_to_openai_tool(t) for t in model.bound] == [convert_to_openai_tool(pay)]
    client.close()


def test_tool_node_runs_the_arguments_not_the_envelope(gate_sqlite: Gate, lc: Any) -> None:
    from langchain_core.messages import AIMessage
    from langgraph.prebuilt import ToolNode

    pay, ran = payments()
    client = GateClient(gate_sqlite.url, cfg.AGENT, timeout=30)
    graph = tools_graph(ToolNode(lc.gate_tools([pay], client)))
    call = {"name": "pay_vendor", "args": {"vendor": "ACME", "amount": 60000}, "id": "call_7"}

    person = Decider(gate_sqlite, "pay_vendor", cfg.BOB, "approve")
    out = graph.invoke({"messages": [AIMessage("", tool_calls=[call])]})
    person.join()

    message = out["messages"][-1]
    assert (message.content, message.tool_call_id) == ("paid ACME 60000", "call_7")
    assert ran == [{"vendor": "ACME", "amount": 60000, "tool_call_id": "call_7"}]
    client.close()


async def test_async_tool_node_runs_with_the_approvers_edits(gate_sqlite: Gate, lc: Any) -> None:
    from langchain_core.messages import AIMessage
    from langgraph.prebuilt import ToolNode

    pay, ran = payments()
    client = GateClient(gate_sqlite.url, cfg.AGENT, timeout=30)
    graph = tools_graph(ToolNode(lc.gate_tools([pay], client)))
    call = {"name": "pay_vendor", "args": {"vendor": "ACME", "amount": 90000}, "id": "call_9"}

    person = decide_with_edits(gate_sqlite, "pay_vendor", {"vendor": "ACME", "amount": 60000})
    out = await graph.ainvoke({"messages": [AIMessage("", tool_calls=[call])]})
    person.join()

    assert out["messages"][-1].content == "paid ACME 60000"
    assert ran == [{"vendor": "ACME", "amount": 60000, "tool_call_id": "call_9"}]
    await client.aclose()


def test_policy_answers_and_plain_invocation(gate_sqlite: Gate, lc: Any) -> None:
    from langchain_core.tools import tool

    @tool
    def db_write(env: str) -> str:
        """Write to a database."""
        return "written"

    @tool
    def read_notes(topic: str) -> str:
        """Read notes."""
        return f"notes on {topic}"

    client = GateClient(gate_sqlite.url, cfg.AGENT, timeout=30)
    write, read = lc.gate_tools([db_write, read_notes], client)

    assert write.invoke({"env": "prod"}).startswith("gate: Blocked by rule 'deny-prod-writes'")
    assert read.invoke({"topic": "q3"}) == "notes on q3"
    assert [v.kind for v in write.verdicts + read.verdicts] == ["denied", "allowed"]
    with pytest.raises(ValueError, match="on_no_rule must be"):
        lc.gate_tools([read_notes], client, on_no_rule="maybe")
    client.close()


# -- OpenAI Agents SDK ----------------------------------------------------------------------------


@pytest.fixture
def oa() -> Any:
    pytest.importorskip("agents", reason=EXTRA)
    return load("openai_agents_approval")


def scripted_model(*arguments: dict[str, Any]) -> Any:
    """An Agents SDK `Model` that calls pay_vendor once per `arguments`, then answers; it keeps
    every input it was given."""
    from agents import Model, ModelResponse, Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class Scripted(Model):
        def __init__(self) -> None:
            self.inputs: list[Any] = []
            self.turns: list[Any] = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{n}",
                    call_id=f"call_{uuid.uuid4().hex[:12]}",
                    name="pay_vendor",
                    arguments=json.dumps(args),
                    status="completed",
                )
                for n, args in enumerate(arguments)
            ]

        async def get_response(
            self, system_instructions: Any, input: Any, *a: Any, **k: Any
        ) -> Any:
            self.inputs.append(input)
            if self.turns:
                item: Any = self.turns.pop(0)
            else:
                text = ResponseOutputText(type="output_text", text="done", annotations=[])
                item = ResponseOutputMessage(
                    id="msg_1",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[text],
                )
            return ModelResponse(output=[item], usage=Usage(), response_id=None)

        def stream_response(self, *a: Any, **k: Any) -> Any:
            raise NotImplementedError

    return Scripted()


def billing_agent(oa: Any, client: GateClient, model: Any, ran: list[Any]) -> Any:
    from agents import Agent

    def pay_vendor(vendor: str, amount: int) -> str:
        """Pay a vendor an amount in euros."""
        ran.append({"vendor": vendor, "amount": amount})
        return f"paid {vendor} {amount}"

    return Agent(name="billing", model=model, tools=[oa.gated_tool(pay_vendor, client)])


def outputs_seen(model: Any) -> list[str]:
    """The function-call outputs the model was given, in order."""
    return [
        str(item.get("output"))
        for item in model.inputs[-1]
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]


async def test_a_refusal_reaches_the_model_as_the_rejection_message(
    gate_sqlite: Gate, oa: Any
) -> None:
    from agents import RunConfig

    client = GateClient(gate_sqlite.url, cfg.AGENT, timeout=30)
    ran: list[Any] = []
    model = scripted_model({"vendor": "ACME", "amount": 70000})
    agent = billing_agent(oa, client, model, ran)

    person = Decider(gate_sqlite, "pay_vendor", cfg.BOB, "reject", "not this month")
    result = await oa.run_gated(agent, "Pay ACME", run_config=RunConfig(tracing_disabled=True))
    request = person.join()

    assert ran == []
    assert result.final_output == "done"
    (seen,) = outputs_seen(model)
    assert seen.startswith("gate: Rejected by bob in the API: not this month.")
    assert request["tool_name"] == "pay_vendor"  # the real name, not "function_tool"
    assert request["tool_args"] == {"vendor": "ACME", "amount": 70000}
    await client.aclose()


async def test_approved_and_edited_calls_run_as_approved(gate_sqlite: Gate, oa: Any) -> None:
    from agents import RunConfig

    client = GateClient(gate_sqlite.url, cfg.AGENT, timeout=30)
    ran: list[Any] = []
    model = scripted_model({"vendor": "ACME", "amount": 90000}, {"vendor": "ACME", "amount": 10})
    agent = billing_agent(oa, client, model, ran)

    person = decide_with_edits(gate_sqlite, "pay_vendor", {"vendor": "ACME", "amount": 60000})
    result = await oa.run_gated(agent, "Pay ACME", run_config=RunConfig(tracing_disabled=True))
    person.join()

    # The first call ran with the approver's amount; the second is under the rule's threshold.
    assert ran == [{"vendor": "ACME", "amount": 60000}, {"vendor": "ACME", "amount": 10}]
    assert outputs_seen(model) == ["paid ACME 60000", "paid ACME 10"]
    assert result.final_output == "done"
    await client.aclose()


def test_a_policy_without_a_tool_name_is_refused(oa: Any) -> None:
    client = GateClient("http://127.0.0.1:9", cfg.AGENT)

    for name in ("", "  ", None):
        with pytest.raises(ValueError, match="needs the tool's name"):
            oa.GateApproval(client, name)
