"""OpenAI Agents SDK: gate decides every call of a function tool, and the model hears why.

    from agents import Agent, function_tool
    from gate.client import GateClient

    @function_tool
    def pay_vendor(vendor: str, amount: int) -> str: ...

    client = GateClient()                              # GATE_URL / GATE_TOKEN from the env
    agent = Agent(name="billing", tools=[gated_tool(pay_vendor, client)])
    result = await run_gated(agent, "Pay ACME's invoice")

`gated_tool()` gives the tool a `needs_approval` policy that asks gate about the call under the
tool's real name (a policy built without a tool name is refused: gate would be asked about a
tool nobody has a rule for, and every call would run). When gate allows the call, or a person
approves it, the tool runs (with the approver's edited arguments, if any). Anything else
(rejected, expired, denied, gate down) interrupts the run, and `run_gated()` rejects each such
interruption with gate's reason as the `rejection_message`, which is exactly what the model
reads before it continues. Interruptions from other tools are left to the app.

Needs the `integrations` extra (openai-agents): `pip install 'gate-approvals[integrations]'`,
or `pip install '.[integrations]'` from a clone.
"""

from __future__ import annotations

import json
from typing import Any

from agents import Agent, FunctionTool, RunContextWrapper, Runner, RunResult, function_tool
from agents.tool_context import ToolContext

from gate.client import GateClient, Verdict

NOT_ON_RECORD = (
    "gate: This call has no approval on record, so it was not run. Nobody approved it: ask "
    "again, or tell the user."
)


class GateApproval:
    """`needs_approval` for one function tool: gate decides, the verdict is kept per call."""

    def __init__(self, client: GateClient, tool_name: str, *, run_without_rule: bool = True):
        if not isinstance(tool_name, str) or not tool_name.strip():
            raise ValueError(
                "GateApproval needs the tool's name: gate's rules match tool names, and a call "
                "asked about under no name matches none of them (use gated_tool())"
            )
        self.client = client
        self.tool_name = tool_name
        self.run_without_rule = run_without_rule
        self.verdicts: dict[str, Verdict] = {}

    async def __call__(
        self, run_context: RunContextWrapper[Any], params: dict[str, Any], call_id: str
    ) -> bool:
        """True (interrupt the run) unless gate lets this call run."""
        return not self.runs(await self.ask(params, call_id))

    async def ask(self, params: dict[str, Any], call_id: str) -> Verdict:
        """Ask gate about one call (a fresh idempotency key: call ids are only unique per run)."""
        verdict = await self.client.check_async(
            self.tool_name, params, context={"source": "openai-agents", "call_id": call_id}
        )
        self.verdicts[call_id] = verdict
        return verdict

    def runs(self, verdict: Verdict) -> bool:
        """Whether a verdict lets the call run."""
        return verdict.allowed or (verdict.kind == "no_rule" and self.run_without_rule)

    def rejection_message(self, call_id: str) -> str:
        """What the model is told about a call gate did not let run."""
        verdict = self.verdicts.pop(call_id, None)
        return verdict.reason if verdict is not None else NOT_ON_RECORD


def gated_tool(
    tool: FunctionTool | Any, client: GateClient, *, run_without_rule: bool = True
) -> FunctionTool:
    """A function tool (or a plain function, made one) whose calls gate decides."""
    gated = tool if isinstance(tool, FunctionTool) else function_tool(tool)
    policy = GateApproval(client, gated.name, run_without_rule=run_without_rule)
    invoke = gated.on_invoke_tool

    async def on_invoke_tool(ctx: ToolContext[Any], arguments: str) -> Any:
        # Run only what gate let through, and with the approver's arguments when edited.
        verdict = policy.verdicts.pop(ctx.tool_call_id, None)
        if verdict is None or not policy.runs(verdict):
            return NOT_ON_RECORD
        edited = verdict.updated_args
        return await invoke(ctx, json.dumps(edited) if edited is not None else arguments)

    gated.needs_approval = policy
    gated.on_invoke_tool = on_invoke_tool
    return gated


async def run_gated(
    agent: Agent[Any], input: Any, *, max_turns_of_refusals: int = 10, **kwargs: Any
) -> RunResult:
    """`Runner.run`, rejecting every interruption gate caused with gate's reason."""
    policies = {
        t.name: t.needs_approval
        for t in agent.tools
        if isinstance(t, FunctionTool) and isinstance(t.needs_approval, GateApproval)
    }
    result = await Runner.run(agent, input, **kwargs)
    for _ in range(max_turns_of_refusals):
        ours = [i for i in result.interruptions if i.tool_name in policies]
        if not ours or len(ours) != len(result.interruptions):
            return result  # nothing to do, or the app has approvals of its own to make
        state = result.to_state()
        for item in ours:
            call_id = str(getattr(item.raw_item, "call_id", ""))
            policy = policies[str(item.tool_name)]
            verdict = policy.verdicts.get(call_id)
            if verdict is None:
                # The SDK wanted approval without consulting the policy (arguments it could
                # not inspect): ask gate now, about the arguments as the model wrote them.
                verdict = await policy.ask(_arguments(item.raw_item), call_id)
            if policy.runs(verdict):
                state.approve(item)
            else:
                state.reject(item, rejection_message=policy.rejection_message(call_id))
        result = await Runner.run(agent, state, **kwargs)
    return result


def _arguments(raw_item: Any) -> dict[str, Any]:
    text = getattr(raw_item, "arguments", None) or "{}"
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"arguments": text}
    return parsed if isinstance(parsed, dict) else {"arguments": parsed}


if __name__ == "__main__":
    import asyncio

    def pay_vendor(vendor: str, amount: int) -> str:
        """Pay a vendor."""
        return f"paid {vendor} {amount}"

    billing = Agent(name="billing", tools=[gated_tool(pay_vendor, GateClient())])
    print(asyncio.run(run_gated(billing, "Pay ACME 60000")).final_output)
