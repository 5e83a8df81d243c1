"""`gate mcp proxy` forwards only tools its upstream listed, by exactly the listed name.

The upstream fixture looks names up loosely (as many servers do): called directly as
`Delete_File` it runs `delete_file`. No rule covers `mcp__fixture__delete_file`, and the
proxy's default `--on-no-rule allow` forwards ungated calls, so a variant of the name would
run the tool with nobody asked if it were forwarded, and one day a rule for the exact name
would not cover it either. Each variant is refused with a JSON-RPC error, and neither gate
nor the upstream hears of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import mcp.types as types
import pytest
from mcp.shared.exceptions import MCPError

from tests.mcp.conftest import (
    SHARED_LOOP,
    Live,
    Turn,
    gate_env,
    mcp_client,
    proxy_args,
    ran,
    unique,
    upstream_client,
)

VARIANTS = {
    "case": "Delete_File",
    "upper": "DELETE_FILE",
    "fullwidth": "ｄｅｌｅｔｅ＿ｆｉｌｅ",
    "zero-width space": "delete\u200b_file",
    "soft hyphen": "delete_\u00adfile",
    "variation selector": "delete_file\ufe0f",
    "cyrillic e": "d\u0435lete_file",
    "unlisted": "format_disk",
}


def heard(path: Path) -> list[str]:
    """Every tool name the upstream was called with."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def text_of(result: types.CallToolResult) -> str:
    return " ".join(c.text for c in result.content if isinstance(c, types.TextContent))


async def test_the_upstream_alone_runs_a_variant_name(live: Live, tmp_path: Path) -> None:
    """The hole the proxy closes: the fixture, called directly, runs delete_file for these."""
    marker = tmp_path / "ran.jsonl"
    async with upstream_client(gate_env(live.url, UPSTREAM_MARKER=str(marker))) as direct:
        for name in ("Delete_File", "ｄｅｌｅｔｅ＿ｆｉｌｅ", "delete\u200b_file"):
            assert not (await direct.call_tool(name, {"path": "/x"})).is_error
    assert [r["tool"] for r in ran(marker)] == ["delete_file"] * 3


# The variants take turns on one proxy session (the `proxy` fixture): each is refused by a
# proxy that has already refused others, and still forwards the listed name after it.
@SHARED_LOOP
@pytest.mark.parametrize("name", list(VARIANTS.values()), ids=list(VARIANTS))
async def test_a_name_the_upstream_did_not_list_is_refused_and_never_forwarded(
    live: Live, proxy: Turn, name: str
) -> None:
    path = unique("/tmp/victim")
    s = proxy.session
    await s.list_tools()  # as a client does; the proxy reads the list itself otherwise
    with pytest.raises(MCPError) as refused:
        await s.call_tool(name, {"path": path})
    # the same session still forwards the listed name (no rule: --on-no-rule allow)
    exact = await s.call_tool("delete_file", {"path": path})
    error = refused.value
    assert error.code == types.INVALID_PARAMS
    assert error.message.startswith("gate: Unknown tool:")
    assert "It was not run." in error.message
    assert ascii(name) in error.message  # the name as it is, invisible characters escaped
    if name != VARIANTS["unlisted"] and name != VARIANTS["cyrillic e"]:
        assert "it lists 'delete_file', which that name only resembles" in error.message
    assert proxy.heard() == ["delete_file"]  # the variant never reached the upstream...
    assert not exact.is_error
    assert proxy.ran() == [{"tool": "delete_file", "args": {"path": path}}]
    assert await live.find(f"mcp__fixture__{name}") == []  # ...nor gate


async def test_a_call_without_a_listing_first_is_checked_against_the_upstreams_list(
    live: Live, tmp_path: Path
) -> None:
    marker, calls = tmp_path / "ran.jsonl", tmp_path / "heard.jsonl"
    env = gate_env(live.url, UPSTREAM_MARKER=str(marker), UPSTREAM_HEARD=str(calls))
    async with mcp_client(proxy_args(), env) as s:
        with pytest.raises(MCPError, match="Unknown tool"):
            await s.call_tool("DELETE_FILE", {"path": "/etc"})
        assert text_of(await s.call_tool("delete_file", {"path": "/tmp/a"})) == "deleted /tmp/a"
    assert heard(calls) == ["delete_file"]


@SHARED_LOOP
async def test_two_listed_names_that_read_alike_are_both_refused(proxy: Turn) -> None:
    # The fixture lists read_file and Read_File: a rule for one would not cover the other,
    # and gate cannot tell which tool a loose upstream would run.
    for name in ("read_file", "Read_File"):
        with pytest.raises(MCPError) as refused:
            await proxy.session.call_tool(name, {"path": "/etc/passwd"})
        assert "differ only in case, width or invisible characters" in refused.value.message
    assert proxy.heard() == [] and proxy.ran() == []
