"""OpenAI Agents SDK style: a `needs_approval` callable that lets gate decide.

The Agents SDK asks `needs_approval(run_context, params, call_id)` before running a tool;
`True` pauses the run with an approval interruption for the app to resolve. Here gate asks the
right person (Slack, Feishu, web) first, so:

* approved, allowed by a rule, or no rule -> `False`: the tool just runs;
* anything else (rejected, expired, denied, gate down) -> `True`, and the verdict is kept
  under the call id, so the app rejects the interruption with the reason gate wrote:

    needs = gate_needs_approval(GateClient())
    @function_tool(needs_approval=needs)
    def pay_vendor(amount: int, vendor: str) -> str: ...

    for item in result.interruptions:
        verdict = needs.verdicts.pop(item.raw_item.call_id)
        state.reject(item)            # and show verdict.reason to the model / user
"""

from __future__ import annotations

from typing import Any

from gate.client import GateClient, Verdict


class GateNeedsApproval:
    """`needs_approval` for one or many tools: asks gate, keeps the verdict of each call."""

    def __init__(self, client: GateClient, tool_name: str | None = None) -> None:
        self.client = client
        self.tool_name = tool_name
        self.verdicts: dict[str, Verdict] = {}

    async def __call__(self, run_context: Any, params: dict[str, Any], call_id: str) -> bool:
        tool = self.tool_name or _tool_name(run_context) or "function_tool"
        verdict = await self.client.check_async(tool, params, idempotency_key=call_id)
        if verdict.allowed or verdict.kind == "no_rule":
            return False
        self.verdicts[call_id] = verdict
        return True


def _tool_name(run_context: Any) -> str | None:
    # Recent SDK versions expose the tool being run on the context.
    name = getattr(run_context, "tool_name", None)
    return name if isinstance(name, str) else None


def gate_needs_approval(client: GateClient, tool_name: str | None = None) -> GateNeedsApproval:
    """A `needs_approval` callable backed by gate."""
    return GateNeedsApproval(client, tool_name)
