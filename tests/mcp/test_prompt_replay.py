"""`gate mcp prompt` answers a tool_use_id once: the same id asked again is refused, never
allowed on the approval the first ask got (the call would run twice on one person's yes)."""

from __future__ import annotations

from typing import Any

import anyio

from tests.mcp.conftest import Live, gate_env, mcp_client, unique
from tests.mcp.test_prompt import PROMPT, approve_call


async def test_a_reused_tool_use_id_is_refused_after_its_approval(live: Live) -> None:
    command = unique("rm -rf build")
    arguments = {
        "tool_name": "Bash",
        "input": {"command": command},
        "tool_use_id": unique("toolu_replay"),
    }
    async with mcp_client(PROMPT, gate_env(live.url)) as s:
        async with anyio.create_task_group() as tg:
            box: list[dict[str, Any]] = []

            async def ask() -> None:
                box.append(await approve_call(s, arguments))

            tg.start_soon(ask)
            request = await live.pending("Bash", command=command)
            await live.decide(request["id"], "approve")
        assert box[0] == {"behavior": "allow", "updatedInput": arguments["input"]}

        again = await approve_call(s, arguments)

    assert again["behavior"] == "deny"
    assert "was already asked about" in again["message"]
    async with live.api() as c:  # nobody was asked again, and nothing new was stored
        found = await c.get("/v1/requests", params={"idempotency_key": arguments["tool_use_id"]})
    assert [r["id"] for r in found.json()["items"]] == [request["id"]]
