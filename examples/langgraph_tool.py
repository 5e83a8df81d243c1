"""Gate LangChain / LangGraph tools: a tool runs only once gate allows or a person approves.

Works with anything shaped like a LangChain tool (`.name`, `.description`, `.invoke(input)`,
optionally `.ainvoke(input)`), so this file needs no LangChain import:

    from langgraph.prebuilt import ToolNode
    client = GateClient()                         # GATE_URL / GATE_TOKEN from the environment
    node = ToolNode(gate_tools([transfer_money, search], client, session_id=thread_id))

When gate says no, the tool is not run and its result is gate's reason, written for the model
("Rejected by alice in Slack: wrong account. ..."), so the agent can change course.
"""

from __future__ import annotations

from typing import Any, Protocol

from gate.client import GateClient, Verdict


class ToolLike(Protocol):
    name: str
    description: str

    def invoke(self, tool_input: Any, config: Any = None) -> Any: ...


class GatedTool:
    """A LangChain-style tool that asks gate before every call."""

    def __init__(self, tool: ToolLike, client: GateClient, *, session_id: str | None = None):
        self.tool = tool
        self.client = client
        self.session_id = session_id
        self.name = tool.name
        self.description = tool.description
        self.verdicts: list[Verdict] = []  # the audit trail of this tool's calls

    def _args(self, tool_input: Any) -> dict[str, Any]:
        return tool_input if isinstance(tool_input, dict) else {"input": tool_input}

    def _runs(self, verdict: Verdict) -> bool:
        self.verdicts.append(verdict)
        # No rule covers the call: gate has no opinion, so the tool runs as it would without it.
        return verdict.allowed or verdict.kind == "no_rule"

    def invoke(self, tool_input: Any, config: Any = None) -> Any:
        """Ask gate, then run the tool, or return gate's reason as the tool's result."""
        verdict = self.client.check(self.name, self._args(tool_input), session_id=self.session_id)
        if not self._runs(verdict):
            return verdict.reason
        return self.tool.invoke(tool_input, config)

    async def ainvoke(self, tool_input: Any, config: Any = None) -> Any:
        """`invoke()` for async graphs."""
        verdict = await self.client.check_async(
            self.name, self._args(tool_input), session_id=self.session_id
        )
        if not self._runs(verdict):
            return verdict.reason
        run = getattr(self.tool, "ainvoke", None)
        return await run(tool_input, config) if run else self.tool.invoke(tool_input, config)


def gate_tools(
    tools: list[ToolLike], client: GateClient, *, session_id: str | None = None
) -> list[GatedTool]:
    """Wrap every tool of an agent."""
    return [GatedTool(t, client, session_id=session_id) for t in tools]


if __name__ == "__main__":

    class Transfer:
        name = "pay_vendor"
        description = "Pay a vendor"

        def invoke(self, tool_input: Any, config: Any = None) -> str:
            return f"paid {tool_input['amount']}"

    tool = gate_tools([Transfer()], GateClient())[0]
    print(tool.invoke({"amount": 60000, "vendor": "acme"}))
