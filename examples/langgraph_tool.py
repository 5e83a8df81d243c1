"""Gate LangChain / LangGraph tools: a tool runs only once gate allows it or a person approves.

`gate_tools()` wraps each tool in a real LangChain tool (`BaseTool`) with the same name,
description and argument schema, so `ToolNode`, `create_agent` and `bind_tools` treat it
exactly like the original; the model sees no difference until gate says no.

    from langchain.agents import create_agent
    from gate.client import GateClient

    client = GateClient()                      # GATE_URL / GATE_TOKEN from the environment
    agent = create_agent(model, gate_tools([transfer_money, search], client))
    agent.invoke({"messages": [...]}, {"configurable": {"thread_id": "t-42"}})

What gate is asked about is the call's arguments as the model wrote them (not the tool-call
envelope, not injected state). When gate says no, the tool does not run and the model gets a
`ToolMessage` with `status="error"` whose content is gate's reason ("Rejected by alice in
Slack: wrong account. ..."), so the agent can change course. When an approver edited the
arguments, the tool runs with the edited ones.

The idempotency key is the tool call id within the graph's thread, so a graph resumed from
its checkpoint gets the answer it already had instead of asking again; without a thread id,
every call is asked afresh.

Needs the `integrations` extra (langchain-core, langgraph, langchain):
`pip install 'gate-approvals[integrations]'`, or `pip install '.[integrations]'` from a clone.
"""

# No `from __future__ import annotations`: GatedTool is a pydantic model, which reads its
# field types at runtime.
from typing import Any

from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from pydantic import BaseModel, ConfigDict

from gate.client import GateClient, Verdict


class GatedTool(BaseTool):
    """A LangChain tool that asks gate before every call of the tool it wraps."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    tool: BaseTool
    client: GateClient
    #: what to do when no rule covers the call: "run" (gate has no opinion) or "refuse"
    on_no_rule: str = "run"
    #: the verdict of each call, in order: the audit trail of this tool in this process
    verdicts: list[Verdict] = []

    def __init__(self, tool: BaseTool, client: GateClient, **kwargs: Any) -> None:
        super().__init__(
            tool=tool,
            client=client,
            name=tool.name,
            description=tool.description,
            args_schema=tool.args_schema,
            return_direct=tool.return_direct,
            verdicts=[],
            **kwargs,
        )

    # -- LangChain's entry points -----------------------------------------------------------

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Ask gate (blocking), then run the wrapped tool, or answer with gate's refusal."""
        args, call_id = self._call_of(input)
        verdict = self.client.check(self.name, args, **self._ask(call_id, config))
        refusal = self._refusal(verdict, call_id)
        if refusal is not None:
            return refusal
        return self.tool.invoke(self._edited(input, args, verdict), config, **kwargs)

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """`invoke()` for async graphs: waits for the person without blocking the loop."""
        args, call_id = self._call_of(input)
        verdict = await self.client.check_async(self.name, args, **self._ask(call_id, config))
        refusal = self._refusal(verdict, call_id)
        if refusal is not None:
            return refusal
        return await self.tool.ainvoke(self._edited(input, args, verdict), config, **kwargs)

    def _run(self, *args: Any, **kwargs: Any) -> Any:
        # Only reached through BaseTool.run() (invoke/ainvoke are overridden): ask here too.
        kwargs.pop("run_manager", None)
        return self.invoke(kwargs)

    # -- the parts ------------------------------------------------------------------------------

    def _call_of(self, input: Any) -> tuple[dict[str, Any], str | None]:
        """(the model's arguments, the tool call id) from a ToolCall, a dict or a string."""
        if isinstance(input, dict) and input.get("type") == "tool_call":
            args, call_id = input.get("args") or {}, input.get("id")
        elif isinstance(input, dict):
            args, call_id = input, None
        else:
            args, call_id = {"input": input}, None
        # Injected values (graph state, the store, the call id) are not the model's arguments.
        visible = _visible_fields(self.tool)
        if visible is not None:
            args = {k: v for k, v in args.items() if k in visible}
        return dict(args), call_id

    def _ask(self, call_id: str | None, config: RunnableConfig | None) -> dict[str, Any]:
        thread = ((config or {}).get("configurable") or {}).get("thread_id")
        ask: dict[str, Any] = {"context": {"source": "langchain", "tool_call_id": call_id}}
        if thread is not None:
            ask["session_id"] = str(thread)
            if call_id:
                ask["idempotency_key"] = f"langgraph:{thread}:{call_id}"
        return ask

    def _refusal(self, verdict: Verdict, call_id: str | None) -> Any:
        self.verdicts.append(verdict)
        runs = verdict.allowed or (verdict.kind == "no_rule" and self.on_no_rule == "run")
        if runs:
            return None
        if call_id is None:
            return verdict.reason
        return ToolMessage(
            content=verdict.reason, tool_call_id=call_id, name=self.name, status="error"
        )

    def _edited(self, input: Any, args: dict[str, Any], verdict: Verdict) -> Any:
        """The input to run: the approver's edited arguments in place of the model's."""
        edited = verdict.updated_args
        if edited is None:
            return input
        if isinstance(input, dict) and input.get("type") == "tool_call":
            injected = {k: v for k, v in (input.get("args") or {}).items() if k not in args}
            return {**input, "args": {**injected, **edited}}
        if isinstance(input, dict):
            return {**{k: v for k, v in input.items() if k not in args}, **edited}
        return edited.get("input", input)


def _visible_fields(tool: BaseTool) -> set[str] | None:
    """The argument names the model sees (the tool-call schema), or None when unknown."""
    schema = tool.tool_call_schema
    if isinstance(schema, dict):
        properties = schema.get("properties")
        return set(properties) if isinstance(properties, dict) else None
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return set(schema.model_fields)
    return None


def gate_tools(
    tools: list[BaseTool], client: GateClient, *, on_no_rule: str = "run"
) -> list[GatedTool]:
    """Wrap every tool of an agent; pass the result to `ToolNode` or `create_agent`."""
    if on_no_rule not in ("run", "refuse"):
        raise ValueError(f"on_no_rule must be 'run' or 'refuse', not {on_no_rule!r}")
    return [GatedTool(t, client, on_no_rule=on_no_rule) for t in tools]


if __name__ == "__main__":
    from langchain_core.tools import tool

    @tool
    def pay_vendor(vendor: str, amount: int) -> str:
        """Pay a vendor."""
        return f"paid {vendor} {amount}"

    gated = gate_tools([pay_vendor], GateClient())[0]
    call = {"type": "tool_call", "id": "call_1", "name": "pay_vendor"}
    print(gated.invoke({**call, "args": {"vendor": "acme", "amount": 60000}}))
